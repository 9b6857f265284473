/*
 * fuzz_tok_gguf.c — a GGUF file's tokenizer (tokenizer.ggml.*) through
 * text_tok_gguf_json, the mapping to tokenizer.json text that
 * text_tok_load uses for a .gguf, then through the loader; a tokenizer
 * that loads is exercised as in fuzz_tok_load.c. The JSON it produces
 * must itself be valid JSON text (the loader reads it back).
 */
#include "fuzz_util.h"
#include "tok_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	const char *path = fuzz_write("tokenizer.gguf", data, size);
	char err[SL_ERRLEN], *json = NULL;
	size_t len = 0;
	if (text_tok_gguf_json(path, &json, &len, err, sizeof err))
		return 0;
	FUZZ_CHECK(json && json[len] == 0 && strlen(json) == len,
		   "the exported tokenizer.json is not one NUL-terminated string of %zu bytes", len);
	text_tok *t = NULL;
	int rc = text_tok_load_buffer(json, len, "fuzz/tokenizer.gguf", &t, err, sizeof err);
	FUZZ_CHECK(rc != SL_EINVAL || !strstr(err, "not valid JSON"),
		   "the exported tokenizer.json does not parse: %s", err);
	if (rc == 0) {
		fuzz_tok_exercise(t);
		text_tok_destroy(t);
	}
	free(json);
	return 0;
}
