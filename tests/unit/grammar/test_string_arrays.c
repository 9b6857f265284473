/*
 * test_string_arrays.c — a JSON schema's arrays of strings, which
 * grammar_compile writes with one copy of the string's rules per item
 * position (grammar/string_arrays.cc), take exactly what xgrammar's
 * converter form takes: each schema is compiled with every rewrite (the
 * default) and with none (string arrays, chains, number and value
 * lookaheads and time patterns off), and both are walked in step, the two
 * masks equal token for token at every step. The arrays: free strings
 * (escapes) unbounded, maxItems 1 and 2, minItems = maxItems = 2, bounded
 * strings with minItems/maxItems (11_str_array's among them), minLength
 * with minItems and no maxItems, an array of arrays of strings, and
 * arrays whose items are an anyOf with a string case among integers,
 * booleans, null or arrays of strings (48_mixed_any_of's; minItems,
 * maxItems, exactly 2, unbounded; rewritten with a copy of the item's
 * choices per position); each as an object's last and middle property
 * and as the root. Each is
 * walked over arrays it takes and does not (too few and too many items,
 * empty strings, strings past the bound, escapes, a missing or extra
 * separator, another item type, nested arrays, numbers out of range or
 * with a leading zero, a cut-off null), cut into pieces at random,
 * among them the pieces that close an item and go on (`",`, `", "`,
 * `"]`, `"]}`, `"],`, `"]]`, `"], ["`...: what the rewrite decides at
 * compile time); a text must be taken exactly when a hand-written
 * validator of the array takes it. Then random walks of every (array,
 * place) schema and of the 50 test schemas, and a check that the rewrite
 * decides what it is for (fewer undecided tokens than with it off, for
 * 11_str_array's and 48_mixed_any_of's arrays).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"
#include "grammar/grammar.h"
#include "unit/grammar/lockstep.h"

/* Every printable character is a piece of its own, so any text can be
 * cut; the longer ones are what a real vocabulary has around array items:
 * the pieces that close an item and go on, open the next, or hold an
 * escape. */
static const char *LONGER[] = {
	"\",", "\", ", "\", \"", "\"]", "\"]}", "\"],", "\"]]", "\"]]}", "\"], [", "\"], [\"",
	"\"\"", "\"\",", "\"\"]", "\", \"\"", "[\"", "[\"\"", "[\"\"]", "[[", "[[\"", "]]", "]}",
	"], [", "], [\"", ", \"", ", ", "a\",", "a\"]", "ab", "ab\", \"", "abc", "cd\"]", "\\\"",
	"\\\\", "\\\"\"", "\\\\\"", "a\\", "\",\"", "\" ,", "\"]}\n", "\"}", "\":", "\"],\"",
	"{\"n\": ", "\"n\"", ", \"m\": ", "5}", "\"a\", \"b\", \"c\"]",
	/* around the other items of an anyOf: numbers, booleans, null */
	"1, \"", "7]", "7]}", "99, ", "true]", "true, \"", "null,", "null]}", "e, \"", "e]",
	"l]", "\", 1", "\", 1]", "\", true]", "\", null", "\", [\"", "\"], \"", "0, ",
};
enum { N_ASCII = 95, N_LONGER = sizeof LONGER / sizeof LONGER[0] };
enum { N_PIECES = N_ASCII + N_LONGER, N_TOK = N_PIECES + 1, MAX_STEPS = 160 };
static char ascii[N_ASCII][2];
static const char *PIECES[N_PIECES];
static const char *NAMES[N_TOK]; /* PIECES, then the stop id's "</s>" */
static const lockstep_walk IDS = {N_TOK, NAMES, NULL, NULL, "with the rewrites",
				  "in the converter's form", NULL, 0};

static grammar_vocab *vocab;
static grammar_compiler *with, *without, *no_arrays;
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
	no_arrays = lockstep_compiler(vocab);
	grammar_compiler_set_string_arrays(no_arrays, 0);
}

static void teardown(void)
{
	grammar_compiler_destroy(with);
	grammar_compiler_destroy(without);
	grammar_compiler_destroy(no_arrays);
	grammar_vocab_destroy(vocab);
}

/* ---- what each array takes: a validator written from JSON's grammar ---- */

/* An array's items: strings of min_len..max_len characters (max -1: any),
 * escapes (\" and \\: the only ones the texts hold) allowed or not (a
 * bounded string takes none); or, inner set, arrays as *inner says (and
 * strings too with STRINGS_TOO); and, an anyOf's other cases, the
 * scalars: integers 0..99, booleans, null. */
enum { INT_0_99 = 1, BOOLEANS = 2, NULLS = 4, STRINGS_TOO = 8 };
struct spec {
	int min_items, max_items; /* max -1: any */
	int min_len, max_len, escapes;
	const struct spec *inner;
	int scalars; /* INT_0_99 | BOOLEANS | NULLS | STRINGS_TOO */
};

static int string_at(const char **p, const struct spec *sp)
{
	const char *s = *p;
	if (*s++ != '"')
		return 0;
	int chars = 0;
	for (; *s != '"'; s++, chars++) {
		if (!*s || (unsigned char)*s < 0x20)
			return 0;
		if (*s == '\\') {
			if (!sp->escapes || (s[1] != '"' && s[1] != '\\'))
				return 0;
			s++;
		}
	}
	*p = s + 1;
	return chars >= sp->min_len && (sp->max_len < 0 || chars <= sp->max_len);
}

static int scalar_at(const char **p, int scalars)
{
	static const struct {
		int bit;
		const char *word;
	} WORDS[] = {{BOOLEANS, "true"}, {BOOLEANS, "false"}, {NULLS, "null"}};
	const char *s = *p;
	if ((scalars & INT_0_99) && *s >= '0' && *s <= '9') {
		/* "0", or one or two digits not starting with 0 (a third digit
		 * is left for the caller, which then finds no ", " or "]") */
		if (*s++ != '0' && *s >= '0' && *s <= '9')
			s++;
		*p = s;
		return 1;
	}
	for (size_t i = 0; i < sizeof WORDS / sizeof WORDS[0]; i++)
		if ((scalars & WORDS[i].bit) && !strncmp(s, WORDS[i].word, strlen(WORDS[i].word))) {
			*p = s + strlen(WORDS[i].word);
			return 1;
		}
	return 0;
}

static int array_at(const char **p, const struct spec *sp);

static int item_at(const char **p, const struct spec *sp)
{
	if (**p == '[' && sp->inner)
		return array_at(p, sp->inner);
	if (**p == '"' && (!sp->inner || (sp->scalars & STRINGS_TOO)))
		return string_at(p, sp);
	return scalar_at(p, sp->scalars);
}

static int array_at(const char **p, const struct spec *sp)
{
	const char *s = *p;
	if (*s++ != '[')
		return 0;
	int n = 0;
	if (*s != ']')
		for (;;) {
			if (!item_at(&s, sp))
				return 0;
			n++;
			if (strncmp(s, ", ", 2))
				break;
			s += 2;
		}
	if (*s++ != ']')
		return 0;
	*p = s;
	return n >= sp->min_items && (sp->max_items < 0 || n <= sp->max_items);
}

static int takes(const struct spec *sp, const char *text)
{
	return array_at(&text, sp) && !*text;
}

static const struct spec INNER = {1, -1, 0, 2, 0, NULL, 0};
static const struct {
	const char *name, *schema;
	struct spec spec;
} ARRAYS[] = {
	{"free strings", "{\"type\": \"array\", \"items\": {\"type\": \"string\"}}",
	 {0, -1, 0, -1, 1, NULL, 0}},
	{"one free string",
	 "{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 1}",
	 {0, 1, 0, -1, 1, NULL, 0}},
	{"two free strings at most",
	 "{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 2}",
	 {0, 2, 0, -1, 1, NULL, 0}},
	{"exactly two free strings",
	 "{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"minItems\": 2, \"maxItems\": 2}",
	 {2, 2, 0, -1, 1, NULL, 0}},
	{"11_str_array's tags",
	 "{\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 12}, \"minItems\": 1, "
	 "\"maxItems\": 3}",
	 {1, 3, 0, 12, 0, NULL, 0}},
	{"bounded strings, 2 to 4",
	 "{\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 3}, \"minItems\": 2, "
	 "\"maxItems\": 4}",
	 {2, 4, 0, 3, 0, NULL, 0}},
	{"minLength, 3 or more",
	 "{\"type\": \"array\", \"items\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 2}, "
	 "\"minItems\": 3}",
	 {3, -1, 1, 2, 0, NULL, 0}},
	{"arrays of strings",
	 "{\"type\": \"array\", \"items\": {\"type\": \"array\", \"items\": {\"type\": \"string\", "
	 "\"maxLength\": 2}, \"minItems\": 1}, \"maxItems\": 2}",
	 {0, 2, 0, 0, 0, &INNER, 0}},
	{"48_mixed_any_of's items",
	 "{\"type\": \"array\", \"maxItems\": 4, \"items\": {\"anyOf\": [{\"type\": \"integer\", "
	 "\"minimum\": 0, \"maximum\": 99}, {\"type\": \"boolean\"}, {\"type\": \"null\"}, "
	 "{\"type\": \"string\", \"maxLength\": 8}]}}",
	 {0, 4, 0, 8, 0, NULL, INT_0_99 | BOOLEANS | NULLS}},
	{"free string or null, 1 to 3",
	 "{\"type\": \"array\", \"minItems\": 1, \"maxItems\": 3, \"items\": {\"anyOf\": "
	 "[{\"type\": \"string\"}, {\"type\": \"null\"}]}}",
	 {1, 3, 0, -1, 1, NULL, NULLS}},
	{"integer or short string, 2 or more",
	 "{\"type\": \"array\", \"minItems\": 2, \"items\": {\"anyOf\": [{\"type\": \"integer\", "
	 "\"minimum\": 0, \"maximum\": 99}, {\"type\": \"string\", \"minLength\": 1, "
	 "\"maxLength\": 2}]}}",
	 {2, -1, 1, 2, 0, NULL, INT_0_99}},
	{"string, boolean, exactly 2",
	 "{\"type\": \"array\", \"minItems\": 2, \"maxItems\": 2, \"items\": {\"anyOf\": "
	 "[{\"type\": \"boolean\"}, {\"type\": \"string\", \"maxLength\": 3}]}}",
	 {2, 2, 0, 3, 0, NULL, BOOLEANS}},
	{"string or array of strings, at most 2",
	 "{\"type\": \"array\", \"maxItems\": 2, \"items\": {\"anyOf\": [{\"type\": \"string\", "
	 "\"maxLength\": 2}, {\"type\": \"array\", \"items\": {\"type\": \"string\", "
	 "\"maxLength\": 2}, \"minItems\": 1}]}}",
	 {0, 2, 0, 2, 0, &INNER, STRINGS_TOO}},
};
#define N_ARRAYS ((int)(sizeof ARRAYS / sizeof ARRAYS[0]))

/* Arrays each may take or not. */
static const char *const TEXTS[] = {
	"[]", "[\"\"]", "[\"a\"]", "[\"ab\"]", "[\"abc\"]", "[\"abcd\"]", "[\"a\", \"b\"]",
	"[\"a\", \"\"]", "[\"\", \"\"]", "[\"\", \"\", \"\"]", "[\"a\", \"b\", \"c\"]",
	"[\"ab\", \"cd\", \"ef\"]", "[\"a\", \"b\", \"c\", \"d\"]", "[\"a\", \"b\", \"c\", \"d\", \"e\"]",
	"[\"abcdefghijkl\"]", "[\"abcdefghijklm\"]", "[\"a\", \"abcdefghijkl\", \"b\"]",
	"[\"a\\\"b\"]", "[\"\\\\\", \"x\"]", "[\"a\\\\\"]", "[\"a\",\"b\"]", "[\"a\", ]", "[\"a\",]",
	"[\"a\" ]", "[ \"a\"]", "[\"a\", 1]", "[\"a\"]]", "[[\"a\"]]", "[[\"a\"], [\"b\", \"c\"]]",
	"[[]]", "[[\"a\"], []]", "[[\"abc\"]]", "[[\"a\", \"b\"], [\"c\"], [\"d\"]]",
	"[[\"ab\"], [\"\", \"x\"]]", "[\"a\", [\"b\"]]", "[\"a\"], [\"b\"]",
	/* mixed items */
	"[0]", "[7]", "[99]", "[100]", "[01]", "[-1]", "[true]", "[false, \"a\"]", "[null]",
	"[nul]", "[\"a\", 1, true, null]", "[\"a\", 1, true, null, 2]", "[1, \"ab\"]",
	"[\"abcdefgh\", null]", "[\"abcdefghi\", 1]", "[7, \"\"]", "[\"a\", null, \"b\"]",
	"[true, false]", "[true, false, true]", "[1, 2, 3]", "[\"a\", [\"b\"], \"c\"]",
	"[[\"ab\"], \"x\"]", "[\"a\\\"\", null]", "[1,2]", "[true ]", "[\"a\" , 1]",
};
#define N_TEXTS ((int)(sizeof TEXTS / sizeof TEXTS[0]))

/* One place for the array: a schema around it (%s: the array's schema),
 * the text around it (%s: the array). */
static const struct {
	const char *schema, *text;
} PLACES[] = {
	{"{\"type\": \"object\", \"properties\": {\"n\": %s}, \"required\": [\"n\"]}", "{\"n\": %s}"},
	{"{\"type\": \"object\", \"properties\": {\"n\": %s, \"m\": {\"type\": \"integer\"}}, "
	 "\"required\": [\"n\", \"m\"]}",
	 "{\"n\": %s, \"m\": 5}"},
	{"%s", "%s"},
};
#define N_PLACES ((int)(sizeof PLACES / sizeof PLACES[0]))

static void schema_at(char *out, size_t n, int a, int p)
{
	snprintf(out, n, PLACES[p].schema, ARRAYS[a].schema);
}

/* Each text at each place over four cuts: the masks equal at every step,
 * and the text taken exactly when the array takes it. */
static void check_array(int a)
{
	for (int p = 0; p < N_PLACES; p++) {
		char schema[1024];
		schema_at(schema, sizeof schema, a, p);
		grammar_compiled *ga = lockstep_compile(with, schema, schema);
		grammar_compiled *gb = lockstep_compile(without, schema, schema);
		for (int t = 0; t < N_TEXTS; t++) {
			char text[256];
			snprintf(text, sizeof text, PLACES[p].text, TEXTS[t]);
			for (unsigned seed = 1; seed <= 4; seed++) {
				int ids[MAX_STEPS];
				unsigned s = seed * 7919u + (unsigned)(p * 131 + t);
				int n = lockstep_cut(text, PIECES, N_PIECES, MAX_STEPS, &s, ids);
				char what[512];
				snprintf(what, sizeof what, "%s at place %d, text %s, cut %u",
					 ARRAYS[a].name, p, text, seed);
				int got = lockstep_walk_ids(&IDS, ga, gb, STOP_ID, ids, n, what);
				int want = takes(&ARRAYS[a].spec, TEXTS[t]);
				ck_assert_msg(got == want, "%s: %s", what, got ? "taken" : "refused");
			}
		}
		grammar_compiled_destroy(ga);
		grammar_compiled_destroy(gb);
	}
}

START_TEST(free_strings_match_the_converter_form)
{
	for (int a = 0; a < N_ARRAYS; a++)
		if (ARRAYS[a].spec.escapes && !ARRAYS[a].spec.scalars)
			check_array(a);
}
END_TEST

START_TEST(bounded_strings_match_the_converter_form)
{
	for (int a = 0; a < N_ARRAYS; a++)
		if (!ARRAYS[a].spec.escapes && !ARRAYS[a].spec.scalars)
			check_array(a);
}
END_TEST

/* anyOf items that may be strings among other things (grammar_compile
 * writes a copy of the item's choices per position too). */
START_TEST(mixed_items_match_the_converter_form)
{
	for (int a = 0; a < N_ARRAYS; a++)
		if (ARRAYS[a].spec.scalars)
			check_array(a);
}
END_TEST

/* The validator is what the texts are judged by: it must tell them apart
 * as JSON Schema does (else the walks above prove less). */
START_TEST(validator_takes_what_json_schema_takes)
{
	const struct spec *tags = &ARRAYS[4].spec, *nested = &ARRAYS[7].spec;
	ck_assert(takes(tags, "[\"a\", \"abcdefghijkl\", \"b\"]"));
	ck_assert(!takes(tags, "[\"abcdefghijklm\"]"));
	ck_assert(!takes(tags, "[\"a\", \"b\", \"c\", \"d\"]"));
	ck_assert(!takes(tags, "[]"));
	ck_assert(!takes(tags, "[\"a\\\"b\"]"));
	ck_assert(takes(&ARRAYS[0].spec, "[\"a\\\"b\"]"));
	ck_assert(!takes(&ARRAYS[0].spec, "[\"a\",\"b\"]"));
	ck_assert(takes(nested, "[[\"ab\"], [\"\", \"x\"]]"));
	ck_assert(!takes(nested, "[[]]"));
	ck_assert(!takes(nested, "[[\"a\", \"b\"], [\"c\"], [\"d\"]]"));
	const struct spec *mixed = &ARRAYS[8].spec, *either = &ARRAYS[12].spec;
	ck_assert(takes(mixed, "[]"));
	ck_assert(takes(mixed, "[\"a\", 1, true, null]"));
	ck_assert(takes(mixed, "[0, 99, false, \"abcdefgh\"]"));
	ck_assert(!takes(mixed, "[\"a\", 1, true, null, 2]"));
	ck_assert(!takes(mixed, "[100]"));
	ck_assert(!takes(mixed, "[01]"));
	ck_assert(!takes(mixed, "[-1]"));
	ck_assert(!takes(mixed, "[nul]"));
	ck_assert(!takes(mixed, "[\"abcdefghi\"]"));
	ck_assert(!takes(&ARRAYS[9].spec, "[true]"));
	ck_assert(takes(&ARRAYS[9].spec, "[\"a\\\"\", null]"));
	ck_assert(!takes(&ARRAYS[10].spec, "[7, \"\"]"));
	ck_assert(takes(&ARRAYS[10].spec, "[1, 2, 3]"));
	ck_assert(takes(either, "[\"a\", [\"b\"]]"));
	ck_assert(takes(either, "[[\"ab\"], \"x\"]"));
	ck_assert(!takes(either, "[\"a\", [\"b\"], \"c\"]"));
	ck_assert(!takes(either, "[[]]"));
}
END_TEST

/* Random walks (lockstep_pick) of every array at every place. */
START_TEST(arrays_walk_the_same_at_every_place)
{
	static const char *close[] = {"</s>", "\"", "]", "}", "\"]", "\"]}", "]}", "]]"};
	const lockstep_walk w = {N_TOK, NAMES, with, without, "with the rewrites",
				 "in the converter's form", close, 8};
	char schema[1024], what[1200];
	for (int a = 0; a < N_ARRAYS; a++)
		for (int p = 0; p < N_PLACES; p++) {
			schema_at(schema, sizeof schema, a, p);
			snprintf(what, sizeof what, "%s at place %d", ARRAYS[a].name, p);
			for (unsigned seed = 1; seed <= 6; seed++)
				lockstep_walk_schema(&w, schema, what, seed);
		}
}
END_TEST

/* ARRAYS[a] at the schema's top: fewer pieces left to the parser with
 * the rewrite on than off. */
static void check_fewer_undecided(int a)
{
	char schema[1024];
	schema_at(schema, sizeof schema, a, 0);
	grammar_compiled *ga = lockstep_compile(with, schema, schema);
	grammar_compiled *gb = lockstep_compile(no_arrays, schema, schema);
	long na = grammar_compiled_worst_uncertain(ga), nb = grammar_compiled_worst_uncertain(gb);
	ck_assert_msg(na < nb, "%s: worst undecided %ld with the string arrays, %ld without",
		      ARRAYS[a].name, na, nb);
	grammar_compiled_destroy(ga);
	grammar_compiled_destroy(gb);
}

/* The rewrite decides what it is for: inside 11_str_array's items the
 * pieces that close an item and go on (`",`, `"]`, `", "`...) are left
 * to the parser with it off and decided at compile time with it on. */
START_TEST(rewrite_decides_the_pieces_past_an_item)
{
	check_fewer_undecided(4);
}
END_TEST

/* And for 48_mixed_any_of's items (an anyOf whose last case is a string):
 * the pieces that close its string and go on. */
START_TEST(rewrite_decides_the_pieces_past_a_mixed_item)
{
	check_fewer_undecided(8);
}
END_TEST

START_TEST(test_schemas_walk_the_same_with_every_rewrite)
{
	static const char *close[] = {"</s>", "\"", "}", "]", "\"]", "\"]}", "]}", "5}"};
	const lockstep_walk w = {N_TOK, NAMES, with, without, "with the rewrites",
				 "in the converter's form", close, 8};
	ck_assert_int_ge(lockstep_walk_schema_files(&w, 3), 50);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("string_arrays");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, validator_takes_what_json_schema_takes);
	tcase_add_test(tc, free_strings_match_the_converter_form);
	tcase_add_test(tc, bounded_strings_match_the_converter_form);
	tcase_add_test(tc, mixed_items_match_the_converter_form);
	tcase_add_test(tc, arrays_walk_the_same_at_every_place);
	tcase_add_test(tc, rewrite_decides_the_pieces_past_an_item);
	tcase_add_test(tc, rewrite_decides_the_pieces_past_a_mixed_item);
	tcase_add_test(tc, test_schemas_walk_the_same_with_every_rewrite);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
