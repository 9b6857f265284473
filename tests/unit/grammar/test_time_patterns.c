/*
 * test_time_patterns.c — a JSON schema's "time" and "date-time" strings,
 * which grammar_compile writes as the pattern of the regex xgrammar
 * expands them from (grammar/xgrammar_shim.cc, FORMAT_PATTERNS), take
 * exactly what xgrammar's converter form takes: each schema is compiled
 * with the time patterns on (the default) and off, and both are walked in
 * step, the two masks equal token for token at every step. The strings sit
 * in an object's last and middle property, an array item and the root;
 * each is walked over times the format takes and times it does not (hour
 * 24, minute 60, second 61, second 60 (taken), no zone, lower-case z and
 * t, an empty or missing fraction, one-digit fields, zones out of range, a
 * day 00 or month 13), cut into pieces at random, among them pieces that
 * cross the fields' boundaries as a real vocabulary's do ("47:1", ":03Z\"",
 * "03.5", "035", "Z\"}"), and every two- and three-digit piece (what the
 * converter form leaves undecided after the minutes). A text must be taken
 * exactly when a plain validator of the format's regex takes it. Then
 * random walks of each (format, place) schema and of the 50 test schemas
 * (tests/data/schemas), and a check that the pattern is there at all:
 * fewer undecided pieces than with it off.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"
#include "grammar/grammar.h"
#include "unit/grammar/lockstep.h"

/* Pieces a vocabulary has around times: across the field boundaries, the
 * zone and the closing quote. */
static const char *LONGER[] = {
	"47:1", ":03Z\"", "03.5", ":03", ":00", ":5", "5:", "12:", "23:", "24:", ":59:", ":60",
	"Z\"", "Z\"}", "Z\",", "Z\"]", "z\"", "\"}", "\",", "\"]", "+05", "-07:", "07:00\"",
	":30\"}", ".5", ".123", ".0Z", "5Z", "0Z\"", "T0", "T12:", "-01T", "-12-", "2024-",
	"0242", "\"0", "\"12:", "{\"a\": ", "\", \"m\": ", ", \"m\": ", "5}", ", ", "]}",
};
enum { N_ASCII = 95, N_LONGER = sizeof LONGER / sizeof LONGER[0], N_DIGITS = 100 + 1000 };
enum { N_PIECES = N_ASCII + N_LONGER + N_DIGITS, N_TOK = N_PIECES + 1, MAX_STEPS = 128 };
static char ascii[N_ASCII][2];
static char digits[N_DIGITS][4]; /* "00".."99", "000".."999" */
static const char *PIECES[N_PIECES];
static const char *NAMES[N_TOK]; /* PIECES, then the stop id's "</s>" */
static const lockstep_walk IDS = {N_TOK, NAMES, NULL, NULL, "with the time patterns",
				  "in the converter's form", NULL, 0};

static grammar_vocab *vocab;
static grammar_compiler *with, *without;
static int STOP_ID;

static void setup(void)
{
	int n = 0;
	for (int i = 0; i < N_ASCII; i++) {
		ascii[i][0] = (char)(32 + i);
		PIECES[n++] = ascii[i];
	}
	for (int i = 0; i < N_LONGER; i++)
		PIECES[n++] = LONGER[i];
	for (int i = 0; i < N_DIGITS; i++) {
		snprintf(digits[i], sizeof digits[i], i < 100 ? "%02d" : "%03d", i < 100 ? i : i - 100);
		PIECES[n++] = digits[i];
	}
	vocab = lockstep_vocab(PIECES, N_PIECES, NAMES);
	STOP_ID = N_PIECES;
	with = lockstep_compiler(vocab);
	without = lockstep_compiler(vocab);
	grammar_compiler_set_time_patterns(without, 0);
}

static void teardown(void)
{
	grammar_compiler_destroy(with);
	grammar_compiler_destroy(without);
	grammar_vocab_destroy(vocab);
}


/* ---- the format's regex, read by hand (xgrammar's
 * json_schema_converter.cc): ([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?
 * (Z|[+-]([01]\d|2[0-3]):[0-5]\d), the date \d{4}-(0[1-9]|1[0-2])-
 * (0[1-9]|[1-2]\d|3[01]) ---- */

static int digit(char c) { return c >= '0' && c <= '9'; }

/* Two digits at s making a number in lo..hi; advances *s past them. */
static int two(const char **s, int lo, int hi)
{
	if (!digit((*s)[0]) || !digit((*s)[1]))
		return 0;
	int v = ((*s)[0] - '0') * 10 + ((*s)[1] - '0');
	*s += 2;
	return v >= lo && v <= hi;
}

static int full_time(const char *s, const char **end)
{
	if (!two(&s, 0, 23) || *s++ != ':' || !two(&s, 0, 59) || *s++ != ':' || !two(&s, 0, 60))
		return 0;
	if (*s == '.') {
		if (!digit(*++s))
			return 0;
		while (digit(*s))
			s++;
	}
	if (*s == 'Z') {
		s++;
	} else if (*s == '+' || *s == '-') {
		s++;
		if (!two(&s, 0, 23) || *s++ != ':' || !two(&s, 0, 59))
			return 0;
	} else {
		return 0;
	}
	*end = s;
	return 1;
}

/* s: a JSON string's text with its quotes. */
static int takes_time(const char *s)
{
	const char *e;
	return s[0] == '"' && full_time(s + 1, &e) && !strcmp(e, "\"");
}

static int takes_date_time(const char *s)
{
	const char *e, *d = s + 1;
	if (s[0] != '"')
		return 0;
	for (int i = 0; i < 4; i++)
		if (!digit(*d++))
			return 0;
	return *d++ == '-' && two(&d, 1, 12) && *d++ == '-' && two(&d, 1, 31) && *d++ == 'T' &&
	       full_time(d, &e) && !strcmp(e, "\"");
}

struct format {
	const char *name, *schema;
	int (*takes)(const char *text);
	const char *const *texts;
};

static const char *const TIMES[] = {
	"\"04:47:03Z\"", "\"00:00:00Z\"", "\"23:59:60Z\"", "\"23:59:59.999999999+05:30\"",
	"\"12:34:56.5-07:00\"", "\"12:34:56-00:00\"", "\"19:59:59+23:59\"", "\"04:47:1Z\"",
	"\"04:47:10\"", "\"24:00:00Z\"", "\"23:60:00Z\"", "\"23:59:61Z\"", "\"12:34:56z\"",
	"\"12:34:56.Z\"", "\"12:34:56.\"", "\"12:34:56+5:00\"", "\"12:34:56+24:00\"",
	"\"12:34:56+05:60\"", "\"12:34:56+0530\"", "\"1:02:03Z\"", "\"12:34:567Z\"",
	"\"12:34:56ZZ\"", "\"12:34Z\"", "\"\"", "\"12:34:56.0123456789012Z\"", "12:34:56Z",
	"\"20:47:35.03Z\"", NULL,
};
static const char *const DATE_TIMES[] = {
	"\"0242-08-23T06:29:03-07:00\"", "\"2024-02-30T12:00:00Z\"", "\"1999-12-31T23:59:60.5Z\"",
	"\"2024-12-01T00:00:00.000+14:00\"", "\"2024-13-01T00:00:00Z\"",
	"\"2024-12-00T00:00:00Z\"", "\"2024-12-32T00:00:00Z\"", "\"2024-12-01t00:00:00Z\"",
	"\"2024-12-01T00:00:00z\"", "\"2024-12-01 00:00:00Z\"", "\"2024-1-01T00:00:00Z\"",
	"\"24-12-01T00:00:00Z\"", "\"2024-12-01T24:00:00Z\"", "\"2024-12-01T00:00:00\"",
	"\"2024-12-01\"", "\"2024-12-01T00:00:03.Z\"", "\"0000-01-01T00:00:00+23:59\"", NULL,
};

static const struct format FORMATS[] = {
	{"time", "{\"type\": \"string\", \"format\": \"time\"}", takes_time, TIMES},
	{"date-time", "{\"type\": \"string\", \"format\": \"date-time\"}", takes_date_time,
	 DATE_TIMES},
};
#define N_FORMATS ((int)(sizeof FORMATS / sizeof FORMATS[0]))

/* One place for the string: a schema around it (%s: the format's
 * schema), the text around it (the first %s: the text looked at; a
 * second: a text taken). */
struct place {
	const char *schema, *text;
};
static const struct place PLACES[] = {
	{"{\"type\": \"object\", \"properties\": {\"a\": %s}, \"required\": [\"a\"]}",
	 "{\"a\": %s}"},
	{"{\"type\": \"object\", \"properties\": {\"a\": %s, \"m\": {\"type\": \"integer\"}}, "
	 "\"required\": [\"a\", \"m\"]}",
	 "{\"a\": %s, \"m\": 5}"},
	{"{\"type\": \"array\", \"items\": %s, \"minItems\": 1, \"maxItems\": 3}", "[%s, %s]"},
	{"%s", "%s"},
};
#define N_PLACES ((int)(sizeof PLACES / sizeof PLACES[0]))

static void compile_places(const struct format *f, grammar_compiler *c, grammar_compiled **out)
{
	char schema[1024];
	for (int p = 0; p < N_PLACES; p++) {
		snprintf(schema, sizeof schema, PLACES[p].schema, f->schema);
		out[p] = lockstep_compile(c, schema, schema);
	}
}

static void destroy_places(grammar_compiled **g)
{
	for (int p = 0; p < N_PLACES; p++)
		grammar_compiled_destroy(g[p]);
}

/* Each text at each place over four cuts: the masks equal at every step,
 * and the text taken exactly when the format takes it. */
static void check_format(const struct format *f)
{
	grammar_compiled *ga[N_PLACES], *gb[N_PLACES];
	compile_places(f, with, ga);
	compile_places(f, without, gb);
	const char *taken = f->texts[0];
	ck_assert_msg(f->takes(taken), "%s: the validator refuses %s", f->name, taken);
	int n_taken = 0, n_refused = 0;
	for (int t = 0; f->texts[t]; t++) {
		f->takes(f->texts[t]) ? n_taken++ : n_refused++;
		for (int p = 0; p < N_PLACES; p++) {
			char text[256];
			snprintf(text, sizeof text, PLACES[p].text, f->texts[t], taken);
			for (unsigned seed = 1; seed <= 4; seed++) {
				int ids[MAX_STEPS];
				unsigned s = seed * 7919u + (unsigned)(p * 131 + t);
				int n = lockstep_cut(text, PIECES, N_PIECES, MAX_STEPS, &s, ids);
				char what[512];
				snprintf(what, sizeof what, "%s at place %d, text %s, cut %u", f->name,
					 p, text, seed);
				int got = lockstep_walk_ids(&IDS, ga[p], gb[p], STOP_ID, ids, n, what);
				ck_assert_msg(got == f->takes(f->texts[t]), "%s: %s", what,
					      got ? "taken" : "refused");
			}
		}
	}
	ck_assert_msg(n_taken >= 4 && n_refused >= 8, "%s: %d texts taken, %d refused", f->name,
		      n_taken, n_refused);
	destroy_places(ga);
	destroy_places(gb);
}

START_TEST(times_match_the_converter_form) { check_format(&FORMATS[0]); }
END_TEST

START_TEST(date_times_match_the_converter_form) { check_format(&FORMATS[1]); }
END_TEST

/* Random walks (lockstep_pick) of every format at every place, and of a
 * schema with both formats and a date beside them. */
START_TEST(formats_walk_the_same_at_every_place)
{
	static const char *close[] = {"</s>", "Z\"}", "Z\"", "\"", "}", "]", "\"]", "]}"};
	const lockstep_walk w = {N_TOK, NAMES, with, without, "with the time patterns",
				 "in the converter's form", close, 8};
	char schema[1024], what[1200];
	for (int f = 0; f < N_FORMATS; f++)
		for (int p = 0; p < N_PLACES; p++) {
			snprintf(schema, sizeof schema, PLACES[p].schema, FORMATS[f].schema);
			snprintf(what, sizeof what, "%s at place %d", FORMATS[f].name, p);
			for (unsigned seed = 1; seed <= 6; seed++)
				lockstep_walk_schema(&w, schema, what, seed);
		}
	const char *all = "{\"type\": \"object\", \"properties\": {\"t\": {\"type\": \"string\", "
			  "\"format\": \"time\"}, \"d\": {\"type\": \"string\", \"format\": "
			  "\"date\"}, \"at\": {\"type\": \"string\", \"format\": \"date-time\"}}, "
			  "\"required\": [\"t\", \"d\", \"at\"]}";
	for (unsigned seed = 1; seed <= 6; seed++)
		lockstep_walk_schema(&w, all, "time, date and date-time", seed);
}
END_TEST

/* The pattern is there: after the minutes, the converter form leaves the
 * digit pieces that run past the seconds to the parser; the automaton
 * decides them at compile time. */
START_TEST(patterns_decide_the_digit_pieces)
{
	for (int f = 0; f < N_FORMATS; f++) {
		char s[1024];
		snprintf(s, sizeof s, PLACES[0].schema, FORMATS[f].schema);
		grammar_compiled *ga = lockstep_compile(with, s, s);
		grammar_compiled *gb = lockstep_compile(without, s, s);
		long a = grammar_compiled_worst_uncertain(ga), b = grammar_compiled_worst_uncertain(gb);
		ck_assert_msg(a < b && a < 100,
			      "%s: worst undecided %ld with the time patterns, %ld without",
			      FORMATS[f].name, a, b);
		grammar_compiled_destroy(ga);
		grammar_compiled_destroy(gb);
	}
}
END_TEST

START_TEST(test_schemas_walk_the_same_with_the_time_patterns)
{
	static const char *close[] = {"</s>", "Z\"}", "Z\"", "\"", "}", "]", "\"]", "]}", "5}"};
	const lockstep_walk w = {N_TOK, NAMES, with, without, "with the time patterns",
				 "in the converter's form", close, 9};
	ck_assert_int_ge(lockstep_walk_schema_files(&w, 2), 50);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("time_patterns");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, times_match_the_converter_form);
	tcase_add_test(tc, date_times_match_the_converter_form);
	tcase_add_test(tc, formats_walk_the_same_at_every_place);
	tcase_add_test(tc, patterns_decide_the_digit_pieces);
	tcase_add_test(tc, test_schemas_walk_the_same_with_the_time_patterns);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
