/*
 * fuzz_grammar.c — constraint text from a client into the grammar engine
 * (grammar/grammar.h, xgrammar behind its shim): the first byte picks the
 * kind (JSON schema, regex, EBNF grammar, any JSON, structural tag), the
 * rest is the text.
 * grammar_check (what the coordinator runs) and grammar_compile (what the
 * leader runs) must agree, fail with a message and never let an exception
 * or a crash out; a compiled constraint is then walked a few tokens over
 * a small vocabulary (the mask's first allowed token each step), and the
 * mask must allow what accept takes and nothing outside the vocabulary.
 */
#include <stdint.h>

#include "common/sl.h"
#include "fuzz_util.h"
#include "grammar/grammar.h"

enum { N_TOK = 100, VOCAB = 104 };
static grammar_compiler *g_compiler;

/* Printable ASCII one per token, a few longer ones, the stop token last. */
static void setup(void)
{
	static char one[95][2];
	static const char *more[] = {"true", "false", "null", "\":"};
	const char *toks[N_TOK];
	size_t lens[N_TOK];
	for (int i = 0; i < 95; i++) {
		one[i][0] = (char)(32 + i);
		toks[i] = one[i], lens[i] = 1;
	}
	for (int i = 0; i < 4; i++)
		toks[95 + i] = more[i], lens[95 + i] = strlen(more[i]);
	toks[99] = "</s>", lens[99] = 4;
	int32_t stop = 99;
	grammar_vocab *v = NULL;
	char err[SL_ERRLEN];
	FUZZ_CHECK(grammar_vocab_create(toks, lens, N_TOK, VOCAB, GRAMMAR_VOCAB_RAW, &stop, 1, &v, err,
					sizeof err) == SL_OK, "vocabulary: %s", err);
	FUZZ_CHECK(grammar_compiler_create(v, 1, 0, &g_compiler, err, sizeof err) == SL_OK,
		   "compiler: %s", err);
	/* the compiler keeps its own copy of the vocabulary's tables */
	grammar_vocab_destroy(v);
}

static void walk(grammar_compiled *g)
{
	char err[SL_ERRLEN];
	grammar_matcher *m = NULL;
	FUZZ_CHECK(grammar_matcher_create(g, &m, err, sizeof err) == SL_OK, "matcher: %s", err);
	uint32_t mask[grammar_mask_words(VOCAB)];
	for (int step = 0; step < 24 && !grammar_matcher_is_terminated(m); step++) {
		FUZZ_CHECK(grammar_matcher_fill_mask(m, mask, grammar_mask_words(VOCAB)) == SL_OK,
			   "fill_mask");
		int pick = -1;
		for (int id = 0; id < VOCAB; id++) {
			int on = (mask[id / 32] >> (id % 32)) & 1;
			FUZZ_CHECK(!on || id < N_TOK, "token %d outside the tokenizer allowed", id);
			if (on && pick < 0)
				pick = id;
		}
		if (pick < 0) /* nothing can follow: a dead end the grammar allows */
			break;
		FUZZ_CHECK(grammar_matcher_accept(m, pick) == SL_OK, "allowed token %d refused", pick);
	}
	grammar_matcher_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	if (!g_compiler)
		setup();
	if (size < 1 || size > 4096)
		return 0;
	static const sl_constraint_kind kinds[] = {SL_CONSTRAINT_JSON_SCHEMA, SL_CONSTRAINT_REGEX,
						   SL_CONSTRAINT_EBNF, SL_CONSTRAINT_JSON,
						   SL_CONSTRAINT_STRUCTURAL_TAG};
	sl_constraint_kind kind = kinds[data[0] % 5];
	const char *text = (const char *)data + 1;
	size_t len = size - 1;
	char err[SL_ERRLEN] = "", err2[SL_ERRLEN] = "";
	int checked = grammar_check(kind, text, len, err, sizeof err);
	FUZZ_CHECK(checked == SL_OK || err[0], "check refused without a message");
	grammar_compiled *g = NULL;
	int compiled = grammar_compile(g_compiler, kind, text, len, &g, err2, sizeof err2);
	FUZZ_CHECK((compiled == SL_OK) == (g != NULL), "compile %d with compiled %p", compiled,
		   (void *)g);
	FUZZ_CHECK(compiled == SL_OK || err2[0], "compile refused without a message");
	/* what the coordinator lets through, the leader must compile */
	FUZZ_CHECK(checked != SL_OK || compiled == SL_OK, "checked fine, compile failed: %s", err2);
	if (g)
		walk(g);
	grammar_compiled_destroy(g);
	return 0;
}
