/*
 * test_bounded_strings.c — a JSON schema's maxLength/minLength strings,
 * which grammar_compile writes as chains of rules (grammar/
 * bounded_strings.cc), take exactly what xgrammar's own counted form
 * takes: a reference grammar written as that form (`"\"" c{m,n} "\""`,
 * c ::= [^"\\\r\n], as its JSON-schema converter emits it) is walked in
 * step with the schema over generated strings at and around each bound,
 * and at every step both masks must be equal, token for token; each
 * string must also be taken exactly when its length in characters lies in
 * the bounds and it holds no quote, backslash, CR or LF. The vocabulary
 * mixes one-character pieces (tab and a control byte, which the bounded
 * form allows; 2-, 3- and 4-byte UTF-8), two-character pieces, and pieces
 * that cross the closing quote (`"}`, `",`, `a"]`, `" `...), the ones the
 * chain's lookahead decides at compile time. Then the 50 test schemas
 * (tests/data/schemas), and bounds past the chain limit beside one under
 * it, walked the same way with the chains on and off.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"
#include "grammar/grammar.h"
#include "unit/grammar/lockstep.h"

/* Pieces a string body is made of: characters they count, and whether a
 * bounded string may hold them. */
static const struct {
	const char *text;
	int chars, ok;
} BODY[] = {
	{"a", 1, 1},  {"Z", 1, 1},  {" ", 1, 1},	 {"\t", 1, 1}, {"\x01", 1, 1},
	{"é", 1, 1},  {"€", 1, 1},  {"😀", 1, 1}, {"ab", 2, 1}, {"é€", 2, 1},
	{"\\", 1, 0}, {"\n", 1, 0}, {"\r", 1, 0},	 {"\\n", 2, 0},
};
#define N_BODY ((int)(sizeof BODY / sizeof BODY[0]))
/* Around the bodies: openings, closings and the pieces crossing them. */
static const char *FRAME[] = {
	"{\"s\": \"", "\"", "}", "]", ",", " ", "[\"", "\", \"", "\"}", "\"]", "\",", "\" ", "\"\n",
	"\"a", "a\"", "a\"}", "a\"]", "é\"", "a\",", "\"}]", ", ", "\":", "\"\"",
};
#define N_FRAME ((int)(sizeof FRAME / sizeof FRAME[0]))
enum { N_TOK = N_BODY + N_FRAME + 1, MAX_STEPS = 64 };

static grammar_vocab *vocab;
static grammar_compiler *compiler;
static int STOP_ID;

static void setup(void)
{
	const char *toks[N_TOK];
	size_t lens[N_TOK];
	int n = 0;
	for (int i = 0; i < N_BODY; i++)
		toks[n] = BODY[i].text, lens[n++] = strlen(BODY[i].text);
	for (int i = 0; i < N_FRAME; i++)
		toks[n] = FRAME[i], lens[n++] = strlen(FRAME[i]);
	STOP_ID = n;
	toks[n] = "</s>", lens[n++] = 4;
	int32_t stop = STOP_ID;
	char err[SL_ERRLEN] = "";
	ck_assert_msg(grammar_vocab_create(toks, lens, N_TOK, N_TOK, GRAMMAR_VOCAB_RAW, &stop, 1,
					   &vocab, err, sizeof err) == SL_OK, "%s", err);
	ck_assert_msg(grammar_compiler_create(vocab, 1, 0, &compiler, err, sizeof err) == SL_OK, "%s",
		      err);
}

static void teardown(void)
{
	grammar_compiler_destroy(compiler);
	grammar_vocab_destroy(vocab);
}

static int frame_id(const char *text)
{
	for (int i = 0; i < N_FRAME; i++)
		if (!strcmp(FRAME[i], text))
			return N_BODY + i;
	ck_abort_msg("no frame token %s", text);
	return -1;
}

/* The id walks (lockstep_walk_ids): the schema's compile against its
 * reference */
static const lockstep_walk IDS = {N_TOK, NULL, NULL, NULL, "by the chain", "by the reference",
				  NULL, 0};

static grammar_compiled *compile(sl_constraint_kind kind, const char *text)
{
	char err[SL_ERRLEN] = "";
	grammar_compiled *g = NULL;
	ck_assert_msg(grammar_compile(compiler, kind, text, strlen(text), &g, err, sizeof err) ==
		      SL_OK, "%s: %s", text, err);
	return g;
}

/* A body of pieces holding `chars` characters; *valid whether every piece
 * may stand in a bounded string (one in four bodies holds one that may
 * not). */
static int make_body(int chars, unsigned *seed, int *ids, int *valid)
{
	int n = 0, bad = chars > 0 && rand_r(seed) % 4 == 0;
	*valid = 1;
	while (chars > 0) {
		int p = rand_r(seed) % N_BODY;
		if (BODY[p].chars > chars || (!BODY[p].ok && !bad))
			continue;
		if (!BODY[p].ok)
			*valid = 0, bad = 0;
		ids[n++] = p;
		chars -= BODY[p].chars;
	}
	return n;
}

/* One shape: a schema around the bounded string, its reference with C
 * standing for the counted form, how a text opens and how it closes. */
struct shape {
	const char *schema, *reference, *open, *const *close;
};

static void check_bounds(const struct shape *sh, int lo, int hi)
{
	char bounds[96], counted[32], schema[512], reference[512];
	if (hi >= 0) {
		snprintf(bounds, sizeof bounds, "\"minLength\": %d, \"maxLength\": %d", lo, hi);
		snprintf(counted, sizeof counted, "c{%d,%d}", lo, hi);
	} else {
		snprintf(bounds, sizeof bounds, "\"minLength\": %d", lo);
		snprintf(counted, sizeof counted, "c{%d,}", lo);
	}
	snprintf(schema, sizeof schema, sh->schema, bounds);
	snprintf(reference, sizeof reference, sh->reference, counted, counted);
	strncat(reference, "\nc ::= [^\"\\\\\\r\\n]\n", sizeof reference - strlen(reference) - 1);
	grammar_compiled *gs = compile(SL_CONSTRAINT_JSON_SCHEMA, schema);
	grammar_compiled *gr = compile(SL_CONSTRAINT_EBNF, reference);
	unsigned seed = (unsigned)(lo * 131 + hi);
	int top = (hi >= 0 ? hi : lo + 3) + 2;
	for (int len = lo > 2 ? lo - 2 : 0; len <= top; len++)
		for (int rep = 0; rep < 12; rep++) {
			int ids[MAX_STEPS], n = 0, valid;
			ids[n++] = frame_id(sh->open);
			n += make_body(len, &seed, ids + n, &valid);
			for (const char *const *c = sh->close; *c; c++)
				ids[n++] = frame_id(*c);
			char what[640];
			snprintf(what, sizeof what, "%s, %d characters, try %d", schema, len, rep);
			int want = valid && len >= lo && (hi < 0 || len <= hi);
			const int got = lockstep_walk_ids(&IDS, gs, gr, STOP_ID, ids, n, what);
			ck_assert_msg(got == want, "%s: %s", what, want ? "refused" : "taken");
		}
	grammar_compiled_destroy(gs);
	grammar_compiled_destroy(gr);
}

static const int BOUNDS[][2] = {{0, 3}, {2, 5}, {3, 3}, {0, 1}, {1, 2}, {4, -1}, {0, 7}};
#define N_BOUNDS ((int)(sizeof BOUNDS / sizeof BOUNDS[0]))

START_TEST(object_property_matches_counted_form)
{
	static const char *close[] = {"\"}", NULL};
	/* one counted form: %.0s takes the second and prints nothing */
	struct shape sh = {
		"{\"type\": \"object\", \"properties\": {\"s\": {\"type\": \"string\", %s}}, "
		"\"required\": [\"s\"]}",
		"root ::= \"{\\\"s\\\": \\\"\" %s \"\\\"}\"%.0s", "{\"s\": \"", close};
	for (int i = 0; i < N_BOUNDS; i++)
		check_bounds(&sh, BOUNDS[i][0], BOUNDS[i][1]);
}
END_TEST

START_TEST(root_string_matches_counted_form)
{
	static const char *close[] = {"\"", NULL};
	struct shape sh = {"{\"type\": \"string\", %s}", "root ::= \"\\\"\" %s \"\\\"\"%.0s", "\"",
			   close};
	for (int i = 0; i < N_BOUNDS; i++)
		check_bounds(&sh, BOUNDS[i][0], BOUNDS[i][1]);
}
END_TEST

/* Two items: after the first string a separator follows, after the
 * second the bracket; the second is "a", in every bound below. */
START_TEST(array_items_match_counted_form)
{
	static const char *close[] = {"\", \"", "a\"]", NULL};
	struct shape sh = {
		"{\"type\": \"array\", \"items\": {\"type\": \"string\", %s}, \"minItems\": 2, "
		"\"maxItems\": 2}",
		"root ::= \"[\\\"\" %s \"\\\", \\\"\" %s \"\\\"]\"", "[\"", close};
	static const int b[][2] = {{0, 3}, {1, 1}, {1, 4}, {1, -1}};
	for (int i = 0; i < 4; i++)
		check_bounds(&sh, b[i][0], b[i][1]);
}
END_TEST

START_TEST(test_schemas_walk_the_same_with_chains)
{
	enum { N_WORDS = 6, N2 = 95 + N_BODY + N_FRAME + N_WORDS + 1 };
	static const char *words[N_WORDS] = {"true", "false", "null", "12", "\": ", "abc"};
	static char ascii[95][2];
	const char *toks[N2];
	size_t lens[N2];
	int n = 0;
	for (int i = 0; i < 95; i++) {
		ascii[i][0] = (char)(32 + i);
		toks[n] = ascii[i], lens[n++] = 1;
	}
	for (int i = 0; i < N_BODY; i++)
		if (strlen(BODY[i].text) > 1 || (unsigned char)BODY[i].text[0] < 32)
			toks[n] = BODY[i].text, lens[n++] = strlen(BODY[i].text);
	for (int i = 0; i < N_FRAME; i++)
		if (strlen(FRAME[i]) > 1)
			toks[n] = FRAME[i], lens[n++] = strlen(FRAME[i]);
	for (int i = 0; i < N_WORDS; i++)
		toks[n] = words[i], lens[n++] = strlen(words[i]);
	int32_t stop = n;
	toks[n] = "</s>", lens[n++] = 4;
	char err[SL_ERRLEN] = "";
	grammar_vocab *v = NULL;
	grammar_compiler *on = NULL, *off = NULL;
	ck_assert_msg(grammar_vocab_create(toks, lens, n, n, GRAMMAR_VOCAB_RAW, &stop, 1, &v, err,
					   sizeof err) == SL_OK, "%s", err);
	ck_assert_int_eq(grammar_compiler_create(v, 1, 0, &on, err, sizeof err), SL_OK);
	ck_assert_int_eq(grammar_compiler_create(v, 1, 0, &off, err, sizeof err), SL_OK);
	grammar_compiler_set_string_chains(off, 0);

	static const char *close[] = {"</s>", "\"", "}", "]", "\"}", "\"]"};
	const lockstep_walk w = {n, toks, on, off, "by the chains", "by xgrammar", close, 6};
	const int n_schemas = lockstep_walk_schema_files(&w, 4);
	ck_assert_int_ge(n_schemas, 50);
	/* past GRAMMAR_MAX_CHAIN_RULES: "a" and "c" keep xgrammar's form,
	 * "b" beside them is a chain */
	static const char mixed[] =
		"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", "
		"\"maxLength\": 100}, \"b\": {\"type\": \"string\", \"minLength\": 1, "
		"\"maxLength\": 3}, \"c\": {\"type\": \"string\", \"minLength\": 70}}, "
		"\"required\": [\"a\", \"b\", \"c\"]}";
	for (unsigned seed = 1; seed <= 4; seed++)
		lockstep_walk_schema(&w, mixed, "over the chain limit", seed);
	grammar_compiler_destroy(on);
	grammar_compiler_destroy(off);
	grammar_vocab_destroy(v);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bounded_strings");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, object_property_matches_counted_form);
	tcase_add_test(tc, root_string_matches_counted_form);
	tcase_add_test(tc, array_items_match_counted_form);
	tcase_add_test(tc, test_schemas_walk_the_same_with_chains);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
