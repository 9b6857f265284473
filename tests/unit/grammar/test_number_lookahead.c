/*
 * test_number_lookahead.c — a JSON schema's bounded integers and numbers,
 * whose rules grammar_compile gives a lookahead of what may follow them
 * (grammar/number_lookahead.cc), take exactly what xgrammar's converter
 * form takes: the schema is compiled with the lookahead and without
 * (grammar_compiler_set_number_lookahead) and both are walked in step over
 * texts cut into pieces at random, and at every step the two masks must be
 * equal, token for token. The texts are integers at and around each bound
 * (0, 9, 10, 99, 100 for 0..99; negative bounds; exclusive bounds; one
 * side open), and forms no bound takes (leading zeros, -0, a fraction, an
 * exponent), as an object's last and middle property, an array item and
 * the root; an integer text must be taken exactly when it is an integer
 * as JSON writes it within the bounds. The pieces include those that run
 * past a number (`037`, `00`, `5,`, `9]`, `0}`, `10, `...), the ones the
 * lookahead decides at compile time. Then the 50 test schemas
 * (tests/data/schemas) walked the same way with the lookahead on and off,
 * and a check that the lookahead is there at all (fewer undecided tokens).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"
#include "grammar/grammar.h"
#include "unit/grammar/lockstep.h"

/* Every printable character is a piece of its own, so any text can be
 * cut; the longer pieces are what a real vocabulary has around numbers. */
static const char *LONGER[] = {
	"00", "01", "037", "10", "12", "99", "100", "5000", "-5", "-0", "-1", "0.", ".5",
	"0,", "5,", "9,", "0}", "9}", "5}", "0]", "9]", "3]", "10]", "99}", "100]", "-5]",
	"1, ", "7, ", "0, ", "9 ", "5e", "1.5", "0.0", "0:", "5\"", "9\",",
	"{\"n\": ", "{\"n\": 1", "\"n\"", "\": ", ", ", ", \"m\": ", "\", ", "]}", "}]", "[1",
	"true", "null", "\"a\"", "abc",
};
enum { N_ASCII = 95, N_LONGER = sizeof LONGER / sizeof LONGER[0] };
enum { N_PIECES = N_ASCII + N_LONGER, N_TOK = N_PIECES + 1, MAX_STEPS = 96 };
static char ascii[N_ASCII][2];
static const char *PIECES[N_PIECES];
static const char *NAMES[N_TOK]; /* PIECES, then the stop id's "</s>" */
/* The id walks (lockstep_walk_ids): with the lookahead against without */
static const lockstep_walk IDS = {N_TOK, NAMES, NULL, NULL, "with the lookahead",
				  "without the lookahead", NULL, 0};

static grammar_vocab *vocab;
static grammar_compiler *with, *without;
static int STOP_ID;

static void setup(void)
{
	for (int i = 0; i < N_ASCII; i++) {
		ascii[i][0] = (char)(32 + i);
		PIECES[i] = ascii[i];
	}
	for (int i = 0; i < N_LONGER; i++)
		PIECES[N_ASCII + i] = LONGER[i];
	vocab = lockstep_vocab(PIECES, N_PIECES, NAMES);
	STOP_ID = N_PIECES;
	char err[SL_ERRLEN] = "";
	ck_assert_msg(grammar_compiler_create(vocab, 1, 0, &with, err, sizeof err) == SL_OK, "%s",
		      err);
	ck_assert_msg(grammar_compiler_create(vocab, 1, 0, &without, err, sizeof err) == SL_OK,
		      "%s", err);
	grammar_compiler_set_number_lookahead(without, 0);
}

static void teardown(void)
{
	grammar_compiler_destroy(with);
	grammar_compiler_destroy(without);
	grammar_vocab_destroy(vocab);
}


/* One place for the number: a schema around it (%s: the number's schema),
 * and the text around it (%s: the number's text). */
struct place {
	const char *schema, *text;
};
static const struct place PLACES[] = {
	{"{\"type\": \"object\", \"properties\": {\"n\": %s}, \"required\": [\"n\"]}",
	 "{\"n\": %s}"},
	{"{\"type\": \"object\", \"properties\": {\"n\": %s, \"m\": {\"type\": \"integer\"}}, "
	 "\"required\": [\"n\", \"m\"]}",
	 "{\"n\": %s, \"m\": 5}"},
	{"{\"type\": \"array\", \"items\": %s, \"minItems\": 1, \"maxItems\": 3}", "[%s, %s]"},
	{"{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"array\", \"items\": {\"anyOf\": "
	 "[%s, {\"type\": \"null\"}]}}}, \"required\": [\"n\"]}",
	 "{\"n\": [null, %s, %s]}"},
	{"%s", "%s"},
};
#define N_PLACES ((int)(sizeof PLACES / sizeof PLACES[0]))

/* Integer texts a bound may take or not, beside lo-2..hi+2. */
static const char *ODD[] = {"00", "05", "-0", "007", "1e2", "5.0", "-", "0.5", "--1", "1000"};
#define N_ODD ((int)(sizeof ODD / sizeof ODD[0]))

/* Whether JSON writes an integer this way and it lies in [lo, hi]. */
static int integer_in(const char *s, long lo, long hi)
{
	const char *d = s[0] == '-' ? s + 1 : s;
	if (!*d || (d[0] == '0' && d[1]) || (s[0] == '-' && !strcmp(d, "0")))
		return 0;
	for (const char *c = d; *c; c++)
		if (*c < '0' || *c > '9')
			return 0;
	long v = strtol(s, NULL, 10);
	return v >= lo && v <= hi;
}

/* Walks value at each place (twice in the array places, the second a
 * bound taken) over four cuts; the schema's integer takes [lo, hi]
 * (want < 0: not checked, a number). */
static void check_value(const char *number_schema, const char *value, const char *taken,
			int want, grammar_compiled *const *ga, grammar_compiled *const *gb)
{
	for (int p = 0; p < N_PLACES; p++) {
		char text[256];
		snprintf(text, sizeof text, PLACES[p].text, value, taken);
		for (unsigned seed = 1; seed <= 4; seed++) {
			int ids[MAX_STEPS];
			unsigned s = seed * 7919u + (unsigned)p;
			int n = lockstep_cut(text, PIECES, N_PIECES, MAX_STEPS, &s, ids);
			char what[768];
			snprintf(what, sizeof what, "%s at place %d, text %s, cut %u", number_schema, p,
				 text, seed);
			int got = lockstep_walk_ids(&IDS, ga[p], gb[p], STOP_ID, ids, n, what);
			if (want >= 0)
				ck_assert_msg(got == want, "%s: %s", what, want ? "refused" : "taken");
		}
	}
}

static void check_integer(const char *bounds, long lo, long hi)
{
	char number[160], schema[512];
	snprintf(number, sizeof number, "{\"type\": \"integer\"%s}", bounds);
	grammar_compiled *ga[N_PLACES], *gb[N_PLACES];
	for (int p = 0; p < N_PLACES; p++) {
		snprintf(schema, sizeof schema, PLACES[p].schema, number, number);
		ga[p] = lockstep_compile(with, schema, schema);
		gb[p] = lockstep_compile(without, schema, schema);
	}
	/* a value every bound below takes, for the array's other item; the
	 * values: each finite bound and two either side, and a few fixed */
	char taken[32], value[32];
	snprintf(taken, sizeof taken, "%ld", lo > -1000 ? lo : hi < 1000 ? hi : 0);
	long values[32], n = 0;
	static const long FIXED[] = {-11, -1, 0, 1, 9, 10, 11, 99, 100, 101};
	for (long d = -2; d <= 2; d++) {
		if (lo > -1000)
			values[n++] = lo + d;
		if (hi < 1000)
			values[n++] = hi + d;
	}
	for (size_t i = 0; i < sizeof FIXED / sizeof FIXED[0]; i++)
		values[n++] = FIXED[i];
	for (long i = 0; i < n; i++) {
		snprintf(value, sizeof value, "%ld", values[i]);
		check_value(number, value, taken, integer_in(value, lo, hi), ga, gb);
	}
	for (int i = 0; i < N_ODD; i++)
		check_value(number, ODD[i], taken, integer_in(ODD[i], lo, hi), ga, gb);
	for (int p = 0; p < N_PLACES; p++) {
		grammar_compiled_destroy(ga[p]);
		grammar_compiled_destroy(gb[p]);
	}
}

START_TEST(bounded_integers_match_the_converter_form)
{
	check_integer(", \"minimum\": 0, \"maximum\": 99", 0, 99);
	check_integer(", \"minimum\": -50, \"maximum\": -3", -50, -3);
	check_integer(", \"minimum\": -5, \"maximum\": 12", -5, 12);
	check_integer(", \"exclusiveMinimum\": 0, \"exclusiveMaximum\": 100", 1, 99);
	check_integer(", \"exclusiveMinimum\": -10, \"exclusiveMaximum\": 10", -9, 9);
	check_integer(", \"minimum\": 3", 3, 1L << 40);
	check_integer(", \"maximum\": -2", -(1L << 40), -2);
	check_integer("", -(1L << 40), 1L << 40);
}
END_TEST

START_TEST(bounded_numbers_match_the_converter_form)
{
	static const char *bounds[] = {
		", \"minimum\": 0, \"maximum\": 10",
		", \"minimum\": -2.5, \"maximum\": 3",
		", \"exclusiveMinimum\": 0, \"exclusiveMaximum\": 1",
		"",
	};
	static const char *values[] = {"0", "1", "10", "11", "0.5", "3.25", "-2.5", "-3", "1.0",
				       "00", "0.", "1e2", "-0", "9.999", "10.0", "10.5", "037"};
	for (int b = 0; b < 4; b++) {
		char number[160], schema[512];
		snprintf(number, sizeof number, "{\"type\": \"number\"%s}", bounds[b]);
		grammar_compiled *ga[N_PLACES], *gb[N_PLACES];
		for (int p = 0; p < N_PLACES; p++) {
			snprintf(schema, sizeof schema, PLACES[p].schema, number, number);
			ga[p] = lockstep_compile(with, schema, schema);
			gb[p] = lockstep_compile(without, schema, schema);
		}
		for (size_t v = 0; v < sizeof values / sizeof values[0]; v++)
			check_value(number, values[v], "1", -1, ga, gb);
		for (int p = 0; p < N_PLACES; p++) {
			grammar_compiled_destroy(ga[p]);
			grammar_compiled_destroy(gb[p]);
		}
	}
}
END_TEST

/* The lookahead is there: at an array item's start of 0..99, the pieces
 * that run past the number (00, 037, 5000...) are decided at compile time
 * with it and left to the parser without. */
START_TEST(lookahead_decides_the_pieces_past_a_number)
{
	const char *s = "{\"type\": \"array\", \"items\": {\"type\": \"integer\", \"minimum\": 0, "
			"\"maximum\": 99}}";
	grammar_compiled *ga = lockstep_compile(with, s, s), *gb = lockstep_compile(without, s, s);
	long a = grammar_compiled_worst_uncertain(ga), b = grammar_compiled_worst_uncertain(gb);
	ck_assert_msg(a < b, "worst undecided: %ld with the lookahead, %ld without", a, b);
	grammar_compiled_destroy(ga);
	grammar_compiled_destroy(gb);
}
END_TEST

START_TEST(test_schemas_walk_the_same_with_lookahead)
{
	static const char *close[] = {"</s>", "\"", "}", "]", "0}", "0]", "9]", "]}", "}]"};
	const lockstep_walk w = {N_TOK, NAMES, with, without, "with the lookahead", "without",
				 close, 9};
	ck_assert_int_ge(lockstep_walk_schema_files(&w, 6), 50);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("number_lookahead");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, bounded_integers_match_the_converter_form);
	tcase_add_test(tc, bounded_numbers_match_the_converter_form);
	tcase_add_test(tc, lookahead_decides_the_pieces_past_a_number);
	tcase_add_test(tc, test_schemas_walk_the_same_with_lookahead);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
