/*
 * tok_fuzz.h — what the tokenizer harnesses check of a loaded tokenizer,
 * from text/tokenizer/tokenizer.h's promises: encode never fails on any bytes
 * and yields ids inside the vocabulary; decode and the streaming
 * detokenizer always yield well-formed UTF-8 (checked by fuzz_util.h's own
 * validator), whatever the ids, known or not, special or not.
 */
#ifndef TESTS_FUZZ_TOK_H
#define TESTS_FUZZ_TOK_H

#include "text/tokenizer/tokenizer.h"
#include "fuzz_util.h"
#include "common/sl.h"

static inline void fuzz_check_utf8(const char *what, const char *s, size_t n)
{
	size_t at = fuzz_utf8_bad_at(s, n);
	FUZZ_CHECK(at == n, "%s: %zu bytes, not UTF-8 at byte %zu (0x%02x)", what, n, at,
		   (unsigned char)s[at]);
}

/* decode(ids) with both skip_special settings, and the same ids streamed
 * one at a time: every piece well-formed. */
static inline void fuzz_tok_decode(const text_tok *t, const int32_t *ids, size_t n)
{
	char err[SL_ERRLEN];
	for (int skip = 0; skip < 2; skip++) {
		char *text = NULL;
		size_t len = 0;
		int rc = text_tok_decode(t, ids, n, skip, &text, &len, err, sizeof err);
		FUZZ_CHECK(rc == 0 || rc == SL_ENOMEM, "decode of %zu ids: %s", n, err);
		if (rc)
			continue;
		FUZZ_CHECK(text[len] == 0, "decode: not NUL-terminated");
		fuzz_check_utf8("decode", text, len);
		free(text);
		text_detok *d = NULL;
		if (text_detok_create(t, skip, &d, err, sizeof err))
			continue;
		const char *chunk;
		size_t clen;
		for (size_t i = 0; i < n; i++)
			if (text_detok_step(d, ids[i], &chunk, &clen) == 0)
				fuzz_check_utf8("detok chunk", chunk, clen);
		if (text_detok_finish(d, &chunk, &clen) == 0)
			fuzz_check_utf8("detok finish", chunk, clen);
		text_detok_destroy(d);
	}
}

/* Encode `text` with `flags`, check the ids, decode them back. */
static inline void fuzz_tok_roundtrip(const text_tok *t, const char *text, size_t len, int flags)
{
	char err[SL_ERRLEN];
	int32_t *ids = NULL;
	size_t n = 0;
	int rc = text_tok_encode(t, text, len, flags, &ids, &n, err, sizeof err);
	FUZZ_CHECK(rc == 0 || rc == SL_ENOMEM, "encode of %zu bytes (flags %d) failed: %s", len,
		   flags, err);
	if (rc)
		return;
	int32_t vocab = text_tok_vocab_size(t);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab, "encode: id %d at %zu outside [0, %d)",
			   ids[i], i, vocab);
	fuzz_tok_decode(t, ids, n);
	free(ids);
}

/* A freshly loaded tokenizer: fixed texts (special tokens, invalid UTF-8,
 * every script class), then the first ids one at a time and ids that do
 * not exist. */
static inline void fuzz_tok_exercise(const text_tok *t)
{
	static const char *const texts[] = {
		"Hello world", " hello  world\n\n\tx", "<s></s><|eot_id|><unk>[INST]",
		"\xff\xfe(\xc3\x28\xe2\x82\xf0\x9f\x98", "\xe6\x97\xa5\xe6\x9c\xac caf\xc3\xa9 123 4567",
		"\xe2\x96\x81\xe2\x96\x81x", "'s 've don't \r\n", "",
	};
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
		for (int flags = 0; flags < 4; flags++)
			fuzz_tok_roundtrip(t, texts[i], strlen(texts[i]), flags);
	int32_t vocab = text_tok_vocab_size(t), ids[3];
	for (int32_t id = 0; id < vocab && id < 400; id++) {
		ids[0] = id;
		fuzz_tok_decode(t, ids, 1);
	}
	ids[0] = -1, ids[1] = vocab, ids[2] = 0;
	fuzz_tok_decode(t, ids, 3);
	(void)text_tok_bos_id(t);
	(void)text_tok_eos_id(t);
	/* no round trip asked of id_to_token: as in HF, an added token with
	 * normalized=true reads back normalized, which token_to_id does not know */
	for (int32_t id = -1; id < vocab && id < 64; id++) {
		const char *s = text_tok_id_to_token(t, id);
		if (s)
			(void)text_tok_token_to_id(t, s);
		(void)text_tok_is_special(t, id);
	}
}

#endif
