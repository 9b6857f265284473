/*
 * constrain.c — the leader's grammar compiler (constrain.h).
 */
#include "node/constrain.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/checks.h"
#include "common/sl.h"

/* Compiled constraints kept for repeats (the same schema from many
 * requests compiles once), and compile threads: the leader's loop waits
 * for a compile, so it may use more than one core for it. */
#define CACHE_BYTES (256L << 20)
#define COMPILE_THREADS 4

struct node_constrain {
	char *tokenizer;
	model_config cfg;
	grammar_vocab *vocab;
	grammar_compiler *compiler;
	int max_uncertain;   /* the slow-grammar guard's limit, percent of the vocabulary */
	int failed;          /* the vocabulary could not load: every request says why */
	char why[SL_ERRLEN];
};

int node_constrain_create(const char *tokenizer, const model_config *cfg, node_constrain **out)
{
	node_constrain *c = calloc(1, sizeof *c);
	if (!c || (tokenizer && !(c->tokenizer = strdup(tokenizer)))) {
		free(c);
		return SL_ENOMEM;
	}
	c->cfg = *cfg;
	c->max_uncertain = GRAMMAR_MAX_UNCERTAIN_PCT;
	*out = c;
	return SL_OK;
}

void node_constrain_set_max_uncertain(node_constrain *c, int pct)
{
	c->max_uncertain = pct > 0 ? pct : 0;
	if (c->compiler)
		grammar_compiler_set_max_uncertain(c->compiler, c->max_uncertain);
}

void node_constrain_destroy(node_constrain *c)
{
	if (!c)
		return;
	grammar_compiler_destroy(c->compiler);
	grammar_vocab_destroy(c->vocab);
	free(c->tokenizer);
	free(c);
}

static int load(node_constrain *c, char *err, size_t errlen)
{
	if (c->compiler)
		return SL_OK;
	if (c->failed)
		return sl_errf(err, errlen, SL_ENOTSUP, "%s", c->why);
	if (!c->tokenizer)
		return sl_errf(err, errlen, SL_ENOTSUP,
			       "constrained decoding needs the model's tokenizer; this node has none");
	int32_t stop[MODEL_MAX_EOS];
	for (int k = 0; k < c->cfg.n_eos; k++)
		stop[k] = c->cfg.eos_ids[k];
	double t0 = sl_now();
	int rc = grammar_vocab_load(c->tokenizer, c->cfg.vocab_size, stop, c->cfg.n_eos, &c->vocab,
				    c->why, sizeof c->why);
	if (!rc)
		rc = grammar_compiler_create(c->vocab, COMPILE_THREADS, CACHE_BYTES, &c->compiler,
					     c->why, sizeof c->why);
	if (!rc)
		grammar_compiler_set_max_uncertain(c->compiler, c->max_uncertain);
	if (rc) {
		c->failed = 1;
		return sl_errf(err, errlen, rc, "%s", c->why);
	}
	SL_INFO("constrain", "grammar vocabulary of %d tokens ready in %.0f ms", c->cfg.vocab_size,
		1e3 * (sl_now() - t0));
	return SL_OK;
}

/* Test hook (docs/operations.md): with SL_TEST_HOOKS=1, a compile waits
 * while the file SL_TEST_COMPILE_GATE names is absent (at most 10 min);
 * tests/http/structured.sh holds one so to show the running streams go
 * on meanwhile (node/compiles.h). */
static void test_gate(void)
{
	const char *on = getenv("SL_TEST_HOOKS"), *gate = getenv("SL_TEST_COMPILE_GATE");
	if (!on || strcmp(on, "1") || !gate || !*gate)
		return;
	for (int i = 0; i < 60000 && access(gate, F_OK) != 0; i++)
		usleep(10000);
}

int node_constrain_matcher(node_constrain *c, sl_constraint_kind kind, const char *text,
			   size_t len, grammar_matcher **out, char *err, size_t errlen)
{
	*out = NULL;
	if (kind == SL_CONSTRAINT_NONE)
		return SL_OK;
	test_gate();
	TRY(load(c, err, errlen));
	grammar_compiled *g = NULL;
	double t0 = sl_now();
	int rc = grammar_compile(c->compiler, kind, text, len, &g, err, errlen);
	if (!rc)
		rc = grammar_matcher_create(g, out, err, errlen);
	double ms = 1e3 * (sl_now() - t0);
	if (ms > 100)
		SL_INFO("constrain", "a constraint of %zu bytes took %.0f ms to compile", len, ms);
	grammar_compiled_destroy(g); /* the matcher keeps what it needs */
	return rc;
}
