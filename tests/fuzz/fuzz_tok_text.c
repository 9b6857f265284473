/*
 * fuzz_tok_text.c — client text and token ids against the real test
 * tokenizers (tests/data, loaded once). Byte 0 of an input picks the
 * tokenizer (low 3 bits) and encode flags (bits 3-4); the rest is the text
 * to encode and decode back (tok_fuzz.h), then the same bytes read as
 * little-endian 16-bit ids, spread over the vocabulary and a little past
 * it, are decoded and streamed: every output must be UTF-8.
 */
#include "fuzz_util.h"
#include "tok_fuzz.h"

/* Same order as tests/fuzz/make_seeds.py's TOK_TEXT_NAMES. */
static const char *const k_names[8] = {
	"llama2-small", "llama3-small", "gpt2-small", "qwen2-small",
	"smollm2-small", "misc-small", "misc2-small", "llama2-small-added",
};
static text_tok *g_tok[8];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char path[1024], err[SL_ERRLEN];
	for (int i = 0; i < 8; i++) {
		snprintf(path, sizeof path, "%s/tests/data/%s/tokenizer.json", fuzz_repo_dir(),
			 k_names[i]);
		if (text_tok_load(path, &g_tok[i], err, sizeof err)) {
			fprintf(stderr, "fuzz_tok_text: %s (set SL_FUZZ_REPO to the checkout)\n", err);
			exit(1);
		}
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	if (size < 1)
		return 0;
	const text_tok *t = g_tok[data[0] & 7];
	int flags = (data[0] >> 3) & 3;
	fuzz_tok_roundtrip(t, (const char *)data + 1, size - 1, flags);
	size_t n = (size - 1) / 2;
	int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
	int32_t span = text_tok_vocab_size(t) + 16;
	for (size_t i = 0; i < n; i++)
		ids[i] = (int32_t)((data[1 + 2 * i] | data[2 + 2 * i] << 8) % span) - 8;
	fuzz_tok_decode(t, ids, n);
	free(ids);
	return 0;
}
