/*
 * vocab.c — a grammar vocabulary from the model's tokenizer file (grammar.h):
 * the token strings as the tokenizer stores them, which xgrammar decodes to
 * bytes by the vocabulary's type. Special tokens go in empty, so a grammar
 * never allows them (a chat model's <|im_end|> must not appear inside a
 * JSON string); the stop ids are the exception, allowed at the end.
 */
#include "grammar/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/sl.h"
#include "text/tokenizer/tokenizer.h"

/* A byte token of each family: SentencePiece's newline byte, GPT-2's
 * newline character (U+010A). */
static grammar_vocab_type vocab_type(const text_tok *t)
{
	if (text_tok_token_to_id(t, "<0x0A>") >= 0)
		return GRAMMAR_VOCAB_BYTE_FALLBACK;
	if (text_tok_token_to_id(t, "\xc4\x8a") >= 0)
		return GRAMMAR_VOCAB_BYTE_LEVEL;
	return GRAMMAR_VOCAB_RAW;
}

int grammar_vocab_load(const char *path, int vocab_size, const int32_t *stop_ids, int n_stop,
		       grammar_vocab **out, char *err, size_t errlen)
{
	char file[4096];
	struct stat st;
	*out = NULL;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(file, sizeof file, "%s/tokenizer.json", path);
	else
		snprintf(file, sizeof file, "%s", path);
	text_tok *t = NULL;
	int rc = text_tok_load(file, &t, err, errlen);
	if (rc)
		return rc;
	/* a model whose config names no EOS (random weights beside a real
	 * tokenizer): the tokenizer's own, so a grammar can still end */
	int32_t tok_eos = text_tok_eos_id(t);
	if (n_stop == 0 && tok_eos >= 0)
		stop_ids = &tok_eos, n_stop = 1;
	int n = text_tok_vocab_size(t);
	if (n > vocab_size)
		n = vocab_size; /* ids past the model's logits can never be sampled */
	const char **toks = calloc((size_t)(n > 0 ? n : 1), sizeof *toks);
	size_t *lens = calloc((size_t)(n > 0 ? n : 1), sizeof *lens);
	if (!toks || !lens) {
		rc = sl_errf(err, errlen, SL_ENOMEM, "grammar vocabulary: out of memory");
	} else {
		for (int i = 0; i < n; i++) {
			int stop = 0;
			for (int k = 0; k < n_stop; k++)
				stop |= stop_ids[k] == i;
			const char *s = text_tok_id_to_token(t, i);
			if (!s || (text_tok_is_special(t, i) && !stop))
				continue;
			toks[i] = s;
			lens[i] = strlen(s);
		}
		rc = grammar_vocab_create(toks, lens, n, vocab_size, vocab_type(t), stop_ids, n_stop,
					  out, err, errlen);
	}
	free(toks);
	free(lens);
	text_tok_destroy(t);
	return rc;
}
