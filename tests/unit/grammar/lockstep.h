/*
 * lockstep.h — what the grammar rewrites' tests share: a schema compiled
 * with a rewrite on and off, walked in step, the two masks equal token
 * for token at every step (grammar/bounded_strings.cc,
 * grammar/number_lookahead.cc, grammar/value_lookahead.cc and
 * grammar/string_arrays.cc promise exactly that, as does
 * grammar/xgrammar_shim.cc's time patterns), and the schema files they
 * walk, and texts cut into random pieces. Included by
 * tests/unit/grammar/test_bounded_strings.c, test_number_lookahead.c,
 * test_value_lookahead.c, test_time_patterns.c and test_string_arrays.c
 * only (static functions).
 */
#ifndef TESTS_GRAMMAR_LOCKSTEP_H
#define TESTS_GRAMMAR_LOCKSTEP_H

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"
#include "grammar/grammar.h"

/* One walk: the vocabulary's n_tok ids and their texts (NULL, or an
 * entry NULL: none),
 * the compilers with the rewrite on and off and what to call each in a
 * failure, and the pieces that close a value, tried in order once the
 * walk heads for its end. */
typedef struct lockstep_walk {
	int n_tok;
	const char *const *toks;
	grammar_compiler *on, *off;
	const char *on_name, *off_name;
	const char *const *close;
	int n_close;
} lockstep_walk;

static grammar_compiled *lockstep_compile(grammar_compiler *c, const char *schema,
					  const char *what)
{
	char err[SL_ERRLEN] = "";
	grammar_compiled *g = NULL;
	ck_assert_msg(grammar_compile(c, SL_CONSTRAINT_JSON_SCHEMA, schema, strlen(schema), &g, err,
				      sizeof err) == SL_OK, "%s: %s", what, err);
	return g;
}

static int lockstep_allowed(const uint32_t *m, int t) { return (m[t / 32] >> (t % 32)) & 1; }

static const char *lockstep_name(const lockstep_walk *w, int t)
{
	return w->toks && w->toks[t] ? w->toks[t] : "";
}

/* Two compiles walked in step over the given ids: at every step the two
 * masks are equal, and a token one takes the other takes. Returns
 * whether both took every id and may stop after them (stop_id allowed). */
static int lockstep_walk_ids(const lockstep_walk *w, grammar_compiled *ga, grammar_compiled *gb,
			     int stop_id, const int *ids, int n, const char *what)
{
	char err[SL_ERRLEN] = "";
	grammar_matcher *a = NULL, *b = NULL;
	ck_assert_msg(grammar_matcher_create(ga, &a, err, sizeof err) == SL_OK, "%s", err);
	ck_assert_msg(grammar_matcher_create(gb, &b, err, sizeof err) == SL_OK, "%s", err);
	const int words = grammar_mask_words(w->n_tok);
	uint32_t *ma = calloc((size_t)words, 4), *mb = calloc((size_t)words, 4);
	int ok = 1;
	for (int i = 0; i <= n; i++) {
		ck_assert_int_eq(grammar_matcher_fill_mask(a, ma, words), SL_OK);
		ck_assert_int_eq(grammar_matcher_fill_mask(b, mb, words), SL_OK);
		for (int t = 0; t < w->n_tok; t++)
			ck_assert_msg(lockstep_allowed(ma, t) == lockstep_allowed(mb, t),
				      "%s, step %d: token %d (%s) allowed %s only", what, i, t,
				      lockstep_name(w, t),
				      lockstep_allowed(ma, t) ? w->on_name : w->off_name);
		if (i == n) {
			ok = lockstep_allowed(ma, stop_id);
			break;
		}
		int ra = grammar_matcher_accept(a, ids[i]), rb = grammar_matcher_accept(b, ids[i]);
		ck_assert_msg(ra == rb, "%s, step %d: accept %d vs %d", what, i, ra, rb);
		if (ra != SL_OK) {
			ok = 0;
			break;
		}
	}
	free(ma);
	free(mb);
	grammar_matcher_destroy(a);
	grammar_matcher_destroy(b);
	return ok;
}

/* The token after `step` steps: a random allowed one for 24 steps, then
 * towards the end (a closing piece in w->close's order, else the lowest
 * allowed id). */
static int lockstep_pick(const lockstep_walk *w, const uint32_t *m, int n_allowed, int step,
			 unsigned *seed)
{
	if (step < 24) {
		int k = rand_r(seed) % n_allowed;
		for (int t = 0; t < w->n_tok; t++)
			if (lockstep_allowed(m, t) && k-- == 0)
				return t;
	}
	for (int c = 0; c < w->n_close; c++)
		for (int t = 0; t < w->n_tok; t++)
			if (w->toks[t] && !strcmp(w->toks[t], w->close[c]) && lockstep_allowed(m, t))
				return t;
	for (int t = 0; t < w->n_tok; t++)
		if (lockstep_allowed(m, t))
			return t;
	return -1;
}

/* schema compiled both ways and walked in step (lockstep_pick), the masks
 * equal at every step, until the walk ends (at most 400 steps). */
static void lockstep_walk_schema(const lockstep_walk *w, const char *schema, const char *what,
				 unsigned seed)
{
	char err[SL_ERRLEN] = "";
	const unsigned first = seed;
	grammar_compiled *ga = lockstep_compile(w->on, schema, what);
	grammar_compiled *gb = lockstep_compile(w->off, schema, what);
	grammar_matcher *a = NULL, *b = NULL;
	ck_assert_int_eq(grammar_matcher_create(ga, &a, err, sizeof err), SL_OK);
	ck_assert_int_eq(grammar_matcher_create(gb, &b, err, sizeof err), SL_OK);
	const int words = grammar_mask_words(w->n_tok);
	uint32_t *ma = calloc((size_t)words, 4), *mb = calloc((size_t)words, 4);
	for (int step = 0; step < 400 && !grammar_matcher_is_terminated(a); step++) {
		ck_assert_int_eq(grammar_matcher_fill_mask(a, ma, words), SL_OK);
		ck_assert_int_eq(grammar_matcher_fill_mask(b, mb, words), SL_OK);
		int n_allowed = 0;
		for (int t = 0; t < w->n_tok; t++) {
			const int ya = lockstep_allowed(ma, t), yb = lockstep_allowed(mb, t);
			ck_assert_msg(ya == yb, "%s, seed %u, step %d: token %d (%s) allowed %s only",
				      what, first, step, t, lockstep_name(w, t),
				      ya ? w->on_name : w->off_name);
			n_allowed += ya;
		}
		ck_assert_msg(n_allowed > 0, "%s: no token allowed at step %d", what, step);
		const int pick = lockstep_pick(w, ma, n_allowed, step, &seed);
		ck_assert_int_eq(grammar_matcher_accept(a, pick), SL_OK);
		ck_assert_int_eq(grammar_matcher_accept(b, pick), SL_OK);
	}
	ck_assert_msg(grammar_matcher_is_terminated(a) && grammar_matcher_is_terminated(b),
		      "%s, seed %u: the walk did not end", what, first);
	free(ma);
	free(mb);
	grammar_matcher_destroy(a);
	grammar_matcher_destroy(b);
	grammar_compiled_destroy(ga);
	grammar_compiled_destroy(gb);
}

/* The tests' vocabulary: pieces[0..n_pieces) one token each, then
 * "</s>" (id n_pieces, the stop token); names[0..n_pieces] get the
 * tokens' texts (the vocabulary keeps its own copies). */
static inline grammar_vocab *lockstep_vocab(const char *const *pieces, int n_pieces,
					    const char **names)
{
	const char **toks = malloc(sizeof *toks * (size_t)(n_pieces + 1));
	size_t *lens = malloc(sizeof *lens * (size_t)(n_pieces + 1));
	ck_assert(toks && lens);
	for (int i = 0; i < n_pieces; i++)
		toks[i] = pieces[i], lens[i] = strlen(pieces[i]);
	toks[n_pieces] = "</s>", lens[n_pieces] = 4;
	for (int i = 0; i <= n_pieces; i++)
		names[i] = toks[i];
	int32_t stop = n_pieces;
	char err[SL_ERRLEN] = "";
	grammar_vocab *v = NULL;
	ck_assert_msg(grammar_vocab_create(toks, lens, n_pieces + 1, n_pieces + 1, GRAMMAR_VOCAB_RAW,
					   &stop, 1, &v, err, sizeof err) == SL_OK, "%s", err);
	free(toks);
	free(lens);
	return v;
}

/* A compiler over v, every rewrite at its default (on). */
static inline grammar_compiler *lockstep_compiler(grammar_vocab *v)
{
	char err[SL_ERRLEN] = "";
	grammar_compiler *c = NULL;
	ck_assert_msg(grammar_compiler_create(v, 1, 0, &c, err, sizeof err) == SL_OK, "%s", err);
	return c;
}

/* A compiler over v with every rewrite off: xgrammar's converter form,
 * the reference the rewrites are walked against. */
static inline grammar_compiler *lockstep_reference(grammar_vocab *v)
{
	grammar_compiler *c = lockstep_compiler(v);
	grammar_compiler_set_string_arrays(c, 0);
	grammar_compiler_set_string_chains(c, 0);
	grammar_compiler_set_number_lookahead(c, 0);
	grammar_compiler_set_value_lookahead(c, 0);
	grammar_compiler_set_time_patterns(c, 0);
	return c;
}

/* text cut into pieces at random: at each place one of the n_pieces
 * pieces it starts with (a one-character piece always does), their
 * indices into ids (at most max_steps). */
static inline int lockstep_cut(const char *text, const char *const *pieces, int n_pieces,
			       int max_steps, unsigned *seed, int *ids)
{
	int n = 0, *fits = malloc(sizeof(int) * (size_t)n_pieces);
	ck_assert_ptr_nonnull(fits);
	for (size_t at = 0; text[at];) {
		int n_fits = 0;
		for (int p = 0; p < n_pieces; p++)
			if (!strncmp(text + at, pieces[p], strlen(pieces[p])))
				fits[n_fits++] = p;
		ck_assert_msg(n_fits > 0 && n < max_steps, "cannot cut %s at %zu", text, at);
		int p = fits[rand_r(seed) % n_fits];
		ids[n++] = p;
		at += strlen(pieces[p]);
	}
	free(fits);
	return n;
}

/* A schema file's text (tests/data/schemas: all under 64 KiB). */
static char *lockstep_read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	return strdup(buf);
}

/* Every schema of tests/data/schemas walked `seeds` times (seeds 1, 2,
 * ...); returns how many schemas there were. */
static int lockstep_walk_schema_files(const lockstep_walk *w, unsigned seeds)
{
	DIR *d = opendir("tests/data/schemas");
	ck_assert_msg(d != NULL, "tests/data/schemas: run from the repository root");
	int n_schemas = 0;
	for (struct dirent *e; (e = readdir(d));) {
		size_t len = strlen(e->d_name);
		if (len < 6 || strcmp(e->d_name + len - 5, ".json"))
			continue;
		char path[512];
		snprintf(path, sizeof path, "tests/data/schemas/%s", e->d_name);
		char *schema = lockstep_read_file(path);
		for (unsigned seed = 1; seed <= seeds; seed++)
			lockstep_walk_schema(w, schema, e->d_name, seed);
		free(schema);
		n_schemas++;
	}
	closedir(d);
	return n_schemas;
}

#endif
