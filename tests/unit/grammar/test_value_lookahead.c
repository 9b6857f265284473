/*
 * test_value_lookahead.c — a JSON schema's literals (true, false, null,
 * enums, consts), strings (bounded and free) and anyOf alternatives, whose
 * rules grammar_compile gives a lookahead of what may follow them
 * (grammar/value_lookahead.cc), take exactly what xgrammar's converter
 * form takes: each schema is compiled with every rewrite (the default) and
 * with none (chains, number and value lookaheads and time patterns off:
 * xgrammar's grammar as its converter writes it), and both are walked in
 * step, the two masks equal token for token at every step. The value schemas sit in every
 * place: an object's last and middle property, an optional property (what
 * follows is , or }), an array item, an object inside an array, an anyOf
 * inside an array inside an object, a property before another whose rule
 * is also an anyOf's alternative (where xgrammar would take a two-character
 * lookahead as exact), and the root. Each is walked over texts the value
 * takes and texts it does not (a literal cut short or run on, a string one
 * past its bound, a value of another type), cut into pieces at random,
 * among them the pieces that run past a value (`e,`, `e}`, `l]`, `",`,
 * `":`, `"},`, `","`, `", `, `"]]`...: what the lookahead decides at
 * compile time, on its first character or its second); a text must be
 * taken exactly when its value is valid.
 * Then random walks of every (value, place) schema and of the 50 test
 * schemas (tests/data/schemas), and a check that the lookahead is there at
 * all (fewer undecided tokens than with the value lookahead off).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"
#include "grammar/grammar.h"
#include "unit/grammar/lockstep.h"

/* Every printable character is a piece of its own, so any text can be
 * cut; the longer ones are the pieces around values a real vocabulary
 * has, the ones that run past a value first, and some that hold a whole
 * array item (what runs past an item's rule). */
static const char *LONGER[] = {
	"e,", "e]", "e}", "e}]", "e]}", "e\"", "ey", "es", "ely", "l,", "l]", "l}", "ll,", "ll]",
	"ls", "ue", "ue,", "ue}", "true", "true,", "true]", "true}", "false", "false]", "null",
	"null,", "null}", "tr", "rue", "fa", "lse", "nu", "ull", "\",", "\"]", "\"}", "\":", "\"],",
	"\"},", "\"}]", "\",\"", "\": ", "\":\"", "\"\"", "\"\",", "d\"", "d\",", "d\"}", "d\":",
	"n\"", "n\"]", "\"red", "red", "red\"", "ed\"]", "green", "ab", "ab\"", "abc", "cd\",",
	"de\"", "x\"]", "\"x", "\\\"", "{\"n\": ", "\"n\"", ", \"m\": ", "\", ", ", ", "]}", "}]",
	"}}", "{}", "[]", "5}", "5,", "1]", "[{", "}, {", "\"a\": ", ", true,", ", true]", ", null,",
	", \"ab\",", ", \"red\"]", ", 1,", ", 1]", "[true,", "[\"x\",", "\", ", "\"]}", "\"]]",
	"\",x", "\"}}", "\"} ", "e, ", "e]]", "l, ", "l]}", "e,\"", "e}}",
};
enum { N_ASCII = 95, N_LONGER = sizeof LONGER / sizeof LONGER[0] };
enum { N_PIECES = N_ASCII + N_LONGER, N_TOK = N_PIECES + 1, MAX_STEPS = 128 };
static char ascii[N_ASCII][2];
static const char *PIECES[N_PIECES];
static const char *NAMES[N_TOK]; /* PIECES, then the stop id's "</s>" */
static const lockstep_walk IDS = {N_TOK, NAMES, NULL, NULL, "with the rewrites",
				  "in the converter's form", NULL, 0};

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
	with = lockstep_compiler(vocab);
	without = lockstep_reference(vocab);
}

static void teardown(void)
{
	grammar_compiler_destroy(with);
	grammar_compiler_destroy(without);
	grammar_vocab_destroy(vocab);
}


/* ---- what each value schema takes ---- */

/* A JSON string of at most max characters (max < 0: any), none of them a
 * control character; escapes \" and \\ (the only ones below) allowed
 * only where escapes is set (a bounded string's chain takes none). */
static int json_string(const char *s, int max, int escapes)
{
	size_t n = strlen(s);
	if (n < 2 || s[0] != '"' || s[n - 1] != '"')
		return 0;
	int chars = 0;
	for (size_t i = 1; i + 1 < n; i++, chars++) {
		if (s[i] == '"')
			return 0;
		if (s[i] == '\\') {
			if (!escapes || i + 2 >= n || (s[i + 1] != '"' && s[i + 1] != '\\'))
				return 0;
			i++;
		}
	}
	return max < 0 || chars <= max;
}

static int one_of(const char *s, const char *const *set)
{
	for (; *set; set++)
		if (!strcmp(s, *set))
			return 1;
	return 0;
}

static const char *const BOOLS[] = {"true", "false", NULL};
static const char *const NULLS[] = {"null", NULL};
static const char *const COLOURS[] = {"\"red\"", "\"green\"", "\"blue\"", NULL};
static const char *const MIXED[] = {"\"red\"", "1", "true", "null", NULL};
static const char *const OBJ_A[] = {"{\"a\": null}", "{\"a\": true}", NULL};

static int takes_boolean(const char *s) { return one_of(s, BOOLS); }
static int takes_null(const char *s) { return one_of(s, NULLS); }
static int takes_colour(const char *s) { return one_of(s, COLOURS); }
static int takes_const(const char *s) { return !strcmp(s, "\"on\""); }
static int takes_short(const char *s) { return json_string(s, 4, 0); }
static int takes_string(const char *s) { return json_string(s, -1, 1); }
static int takes_mixed(const char *s) { return one_of(s, MIXED); }
static int takes_any_of(const char *s)
{
	return takes_boolean(s) || takes_null(s) || json_string(s, 3, 0) || takes_colour(s);
}
static int takes_any_of_objects(const char *s)
{
	return takes_boolean(s) || takes_null(s) || one_of(s, OBJ_A);
}

struct value {
	const char *name, *schema;
	int (*takes)(const char *text);
};
static const struct value VALUES[] = {
	{"boolean", "{\"type\": \"boolean\"}", takes_boolean},
	{"null", "{\"type\": \"null\"}", takes_null},
	{"enum", "{\"enum\": [\"red\", \"green\", \"blue\"]}", takes_colour},
	{"const", "{\"const\": \"on\"}", takes_const},
	{"short string", "{\"type\": \"string\", \"maxLength\": 4}", takes_short},
	{"string", "{\"type\": \"string\"}", takes_string},
	{"mixed enum", "{\"enum\": [\"red\", 1, true, null]}", takes_mixed},
	{"anyOf", "{\"anyOf\": [{\"type\": \"boolean\"}, {\"type\": \"null\"}, {\"type\": \"string\", "
		  "\"maxLength\": 3}, {\"enum\": [\"red\", \"green\", \"blue\"]}]}",
	 takes_any_of},
	{"anyOf objects", "{\"anyOf\": [{\"type\": \"boolean\"}, {\"type\": \"null\"}, {\"type\": "
			  "\"object\", \"properties\": {\"a\": {\"anyOf\": [{\"type\": \"null\"}, "
			  "{\"type\": \"boolean\"}]}}, \"required\": [\"a\"]}]}",
	 takes_any_of_objects},
};
#define N_VALUES ((int)(sizeof VALUES / sizeof VALUES[0]))

/* Texts each value may take or not: the literals cut short and run on,
 * strings at and past the bounds, values of other types. */
static const char *const TEXTS[] = {
	"true", "false", "null", "tru", "truex", "truee", "fals", "falsey", "nul", "nulll",
	"\"red\"", "\"re\"", "\"redd\"", "\"green\"", "\"blue\"", "\"on\"", "\"o\"", "\"\"",
	"\"ab\"", "\"abc\"", "\"abcd\"", "\"abcde\"", "\"x\"", "\"a\\\"b\"", "\"true\"", "1", "10",
	"[]", "{}", "{\"a\": null}", "{\"a\": true}", "{\"a\": 1}", "\"red", "red\"",
};
#define N_TEXTS ((int)(sizeof TEXTS / sizeof TEXTS[0]))

/* Whether JSON writes an integer this way. */
static int integer(const char *s)
{
	const char *d = s[0] == '-' ? s + 1 : s;
	if (!*d || (d[0] == '0' && d[1]))
		return 0;
	for (; *d; d++)
		if (*d < '0' || *d > '9')
			return 0;
	return 1;
}

/* One place for the value: a schema around it (%s: the value's schema),
 * the text around it (the first %s: the text looked at; a second: a value
 * taken), and what the place takes there beside the value (NULL: nothing). */
struct place {
	const char *schema, *text;
	int (*also)(const char *text);
};
static const struct place PLACES[] = {
	{"{\"type\": \"object\", \"properties\": {\"n\": %s}, \"required\": [\"n\"]}",
	 "{\"n\": %s}", NULL},
	{"{\"type\": \"object\", \"properties\": {\"n\": %s, \"m\": {\"type\": \"integer\"}}, "
	 "\"required\": [\"n\", \"m\"]}",
	 "{\"n\": %s, \"m\": 5}", NULL},
	{"{\"type\": \"object\", \"properties\": {\"n\": %s, \"m\": {\"type\": \"integer\"}}}",
	 "{\"n\": %s}", NULL},
	{"{\"type\": \"array\", \"items\": %s, \"minItems\": 1, \"maxItems\": 3}", "[%s, %s]",
	 NULL},
	{"{\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {\"n\": %s}, "
	 "\"required\": [\"n\"]}}",
	 "[{\"n\": %s}, {\"n\": %s}]", NULL},
	{"{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"array\", \"items\": {\"anyOf\": "
	 "[%s, {\"type\": \"integer\"}]}}}, \"required\": [\"n\"]}",
	 "{\"n\": [%s, 1, %s]}", integer},
	/* the value's rule used once before another property (xgrammar takes
	 * a lookahead of such a rule as exact, a token ending inside it
	 * unchecked) and as an anyOf's alternative last (inlined there) */
	{"{\"type\": \"object\", \"properties\": {\"n\": %s, \"m\": {\"type\": \"integer\"}, "
	 "\"a\": {\"anyOf\": [%s, {\"type\": \"null\"}]}}, \"required\": [\"n\", \"m\", \"a\"]}",
	 "{\"n\": %s, \"m\": 5, \"a\": null}", NULL},
	{"%s", "%s", NULL},
};
#define N_PLACES ((int)(sizeof PLACES / sizeof PLACES[0]))

static void compile_places(const struct value *v, grammar_compiler *c, grammar_compiled **out)
{
	char schema[2048];
	for (int p = 0; p < N_PLACES; p++) {
		snprintf(schema, sizeof schema, PLACES[p].schema, v->schema, v->schema);
		out[p] = lockstep_compile(c, schema, schema);
	}
}

static void destroy_places(grammar_compiled **g)
{
	for (int p = 0; p < N_PLACES; p++)
		grammar_compiled_destroy(g[p]);
}

/* Each text at each place over four cuts: the masks equal at every step,
 * and the text taken exactly when the value takes it. */
static void check_value(const struct value *v)
{
	grammar_compiled *ga[N_PLACES], *gb[N_PLACES];
	compile_places(v, with, ga);
	compile_places(v, without, gb);
	const char *taken = NULL;
	for (int t = 0; t < N_TEXTS && !taken; t++)
		if (v->takes(TEXTS[t]))
			taken = TEXTS[t];
	ck_assert_msg(taken != NULL, "%s: no text it takes", v->name);
	for (int t = 0; t < N_TEXTS; t++)
		for (int p = 0; p < N_PLACES; p++) {
			char text[256];
			snprintf(text, sizeof text, PLACES[p].text, TEXTS[t], taken);
			for (unsigned seed = 1; seed <= 4; seed++) {
				int ids[MAX_STEPS];
				unsigned s = seed * 7919u + (unsigned)(p * 131 + t);
				int n = lockstep_cut(text, PIECES, N_PIECES, MAX_STEPS, &s, ids);
				char what[512];
				snprintf(what, sizeof what, "%s at place %d, text %s, cut %u", v->name,
					 p, text, seed);
				int got = lockstep_walk_ids(&IDS, ga[p], gb[p], STOP_ID, ids, n, what);
				int want = v->takes(TEXTS[t]) ||
					   (PLACES[p].also && PLACES[p].also(TEXTS[t]));
				ck_assert_msg(got == want, "%s: %s", what,
					      got ? "taken" : "refused");
			}
		}
	destroy_places(ga);
	destroy_places(gb);
}

START_TEST(literals_match_the_converter_form)
{
	for (int v = 0; v < N_VALUES; v++)
		if (strstr(VALUES[v].name, "string") == NULL && strstr(VALUES[v].name, "anyOf") == NULL)
			check_value(&VALUES[v]);
}
END_TEST

START_TEST(strings_match_the_converter_form)
{
	for (int v = 0; v < N_VALUES; v++)
		if (strstr(VALUES[v].name, "string"))
			check_value(&VALUES[v]);
}
END_TEST

START_TEST(any_of_matches_the_converter_form)
{
	for (int v = 0; v < N_VALUES; v++)
		if (strstr(VALUES[v].name, "anyOf"))
			check_value(&VALUES[v]);
}
END_TEST

/* Random walks (lockstep_pick) of every value at every place. */
START_TEST(values_walk_the_same_at_every_place)
{
	static const char *close[] = {"</s>", "\"", "}", "]", "e}", "e]", "l]", "\"]", "]}", "}]"};
	const lockstep_walk w = {N_TOK, NAMES, with, without, "with the rewrites",
				 "in the converter's form", close, 10};
	char schema[2048], what[2200];
	for (int v = 0; v < N_VALUES; v++)
		for (int p = 0; p < N_PLACES; p++) {
			snprintf(schema, sizeof schema, PLACES[p].schema, VALUES[v].schema,
				 VALUES[v].schema);
			snprintf(what, sizeof what, "%s at place %d", VALUES[v].name, p);
			for (unsigned seed = 1; seed <= 4; seed++)
				lockstep_walk_schema(&w, schema, what, seed);
		}
}
END_TEST

/* The lookahead is there: in an array of true/false/null/short strings,
 * the pieces that run past a literal or close a string and go on with
 * something no item is followed by (`e}`, `l}`, `":`...) are decided at
 * compile time with it and left to the parser without. Both sides have
 * the string arrays off: that rewrite (string_arrays.cc) unrolls this
 * array per item and decides those pieces by itself, which would hide
 * what the lookahead does. */
START_TEST(lookahead_decides_the_pieces_past_a_value)
{
	const char *s = "{\"type\": \"array\", \"items\": {\"anyOf\": [{\"type\": \"boolean\"}, "
			"{\"type\": \"null\"}, {\"type\": \"string\", \"maxLength\": 4}]}}";
	grammar_compiler *on = lockstep_compiler(vocab), *off = lockstep_compiler(vocab);
	grammar_compiler_set_string_arrays(on, 0);
	grammar_compiler_set_string_arrays(off, 0);
	grammar_compiler_set_value_lookahead(off, 0);
	grammar_compiled *ga = lockstep_compile(on, s, s), *gb = lockstep_compile(off, s, s);
	long a = grammar_compiled_worst_uncertain(ga), b = grammar_compiled_worst_uncertain(gb);
	ck_assert_msg(a < b, "worst undecided: %ld with the value lookahead, %ld without", a, b);
	grammar_compiled_destroy(ga);
	grammar_compiled_destroy(gb);
	grammar_compiler_destroy(on);
	grammar_compiler_destroy(off);
}
END_TEST

START_TEST(test_schemas_walk_the_same_with_every_rewrite)
{
	static const char *close[] = {"</s>", "\"", "}", "]", "e}", "e]", "l]", "\"]", "]}", "}]",
				      "5}", "1]"};
	const lockstep_walk w = {N_TOK, NAMES, with, without, "with the rewrites",
				 "in the converter's form", close, 12};
	ck_assert_int_ge(lockstep_walk_schema_files(&w, 6), 50);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("value_lookahead");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, literals_match_the_converter_form);
	tcase_add_test(tc, strings_match_the_converter_form);
	tcase_add_test(tc, any_of_matches_the_converter_form);
	tcase_add_test(tc, values_walk_the_same_at_every_place);
	tcase_add_test(tc, lookahead_decides_the_pieces_past_a_value);
	tcase_add_test(tc, test_schemas_walk_the_same_with_every_rewrite);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
