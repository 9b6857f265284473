/*
 * chat_template_names.c — the vocabulary of the supported Jinja2 subset:
 * every filter, test, str/dict method and global function a chat template
 * may name, with its id (FILTER_*, TEST_*, M_*, FN_*) and how many
 * positional arguments it takes.  The parser resolves names here (and
 * checks filter and test argument counts) at compile time, so a template
 * that uses anything outside these tables is refused before it can fail at
 * render time; the builtins check method and function calls against these
 * bounds at run time, and a function value prints under its name.
 * Aliases (count for length, d for default, equalto for eq, ...) are rows
 * of their own with a shared id.  Depends on nothing;
 * chat_template_builtin.c implements what these tables name, and
 * docs/chat_templates.md lists them for users.
 */
#include <string.h>

#include "text/jinja/chat_template_int.h"

typedef struct {
	const char *name;
	int id;
	int min, max;  /* positional arguments */
} builtin;

static const builtin filters[] = {
	{"trim", FILTER_TRIM, 0, 1}, {"length", FILTER_LENGTH, 0, 0},
	{"count", FILTER_LENGTH, 0, 0}, {"upper", FILTER_UPPER, 0, 0},
	{"lower", FILTER_LOWER, 0, 0}, {"capitalize", FILTER_CAPITALIZE, 0, 0},
	{"title", FILTER_TITLE, 0, 0}, {"default", FILTER_DEFAULT, 0, 2},
	{"d", FILTER_DEFAULT, 0, 2}, {"join", FILTER_JOIN, 0, 2},
	{"tojson", FILTER_TOJSON, 0, 1}, {"first", FILTER_FIRST, 0, 0},
	{"last", FILTER_LAST, 0, 0}, {"list", FILTER_LIST, 0, 0},
	{"string", FILTER_STRING, 0, 0}, {"int", FILTER_INT, 0, 2},
	{"reverse", FILTER_REVERSE, 0, 0}, {"items", FILTER_ITEMS, 0, 0},
	{"select", FILTER_SELECT, 0, -1}, {"reject", FILTER_REJECT, 0, -1},
	{"selectattr", FILTER_SELECTATTR, 1, -1}, {"rejectattr", FILTER_REJECTATTR, 1, -1},
	{"map", FILTER_MAP, 0, -1}, {"replace", FILTER_REPLACE, 2, 3},
	{"safe", FILTER_SAFE, 0, 0}, {"abs", FILTER_ABS, 0, 0},
};

static const builtin tests[] = {
	{"defined", TEST_DEFINED, 0, 0}, {"undefined", TEST_UNDEFINED, 0, 0},
	{"none", TEST_NONE, 0, 0}, {"string", TEST_STRING, 0, 0},
	{"mapping", TEST_MAPPING, 0, 0}, {"iterable", TEST_ITERABLE, 0, 0},
	{"sequence", TEST_SEQUENCE, 0, 0}, {"number", TEST_NUMBER, 0, 0},
	{"integer", TEST_INTEGER, 0, 0}, {"boolean", TEST_BOOLEAN, 0, 0},
	{"true", TEST_TRUE, 0, 0}, {"false", TEST_FALSE, 0, 0},
	{"eq", TEST_EQ, 1, 1}, {"equalto", TEST_EQ, 1, 1}, {"==", TEST_EQ, 1, 1},
	{"ne", TEST_NE, 1, 1}, {"!=", TEST_NE, 1, 1},
	{"gt", TEST_GT, 1, 1}, {"greaterthan", TEST_GT, 1, 1}, {">", TEST_GT, 1, 1},
	{"ge", TEST_GE, 1, 1}, {">=", TEST_GE, 1, 1},
	{"lt", TEST_LT, 1, 1}, {"lessthan", TEST_LT, 1, 1}, {"<", TEST_LT, 1, 1},
	{"le", TEST_LE, 1, 1}, {"<=", TEST_LE, 1, 1},
	{"odd", TEST_ODD, 0, 0}, {"even", TEST_EVEN, 0, 0},
	{"divisibleby", TEST_DIVISIBLEBY, 1, 1}, {"in", TEST_IN, 1, 1},
	{"sameas", TEST_SAMEAS, 1, 1}, {"lower", TEST_LOWER, 0, 0},
	{"upper", TEST_UPPER, 0, 0}, {"callable", TEST_CALLABLE, 0, 0},
};

static const builtin methods[] = {
	{"strip", M_STRIP, 0, 1}, {"lstrip", M_LSTRIP, 0, 1}, {"rstrip", M_RSTRIP, 0, 1},
	{"split", M_SPLIT, 0, 2}, {"startswith", M_STARTSWITH, 1, 1},
	{"endswith", M_ENDSWITH, 1, 1}, {"upper", M_UPPER, 0, 0}, {"lower", M_LOWER, 0, 0},
	{"title", M_TITLE, 0, 0}, {"capitalize", M_CAPITALIZE, 0, 0},
	{"replace", M_REPLACE, 2, 3}, {"join", M_JOIN, 1, 1}, {"items", M_ITEMS, 0, 0},
	{"keys", M_KEYS, 0, 0}, {"values", M_VALUES, 0, 0}, {"get", M_GET, 1, 2},
};

static const builtin functions[] = {
	{"raise_exception", FN_RAISE_EXCEPTION, 1, 1}, {"strftime_now", FN_STRFTIME_NOW, 1, 1},
	{"namespace", FN_NAMESPACE, 0, 1}, {"range", FN_RANGE, 1, 3}, {"dict", FN_DICT, 0, 1},
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const builtin *find(const builtin *t, int n, const char *s, size_t len)
{
	for (int i = 0; i < n; i++)
		if (strlen(t[i].name) == len && !memcmp(t[i].name, s, len))
			return &t[i];
	return NULL;
}

static const builtin *find_id(const builtin *t, int n, int id)
{
	for (int i = 0; i < n; i++)
		if (t[i].id == id)
			return &t[i];
	return NULL;
}

static int arity(const builtin *t, int n, int id, int *min, int *max)
{
	const builtin *b = find_id(t, n, id);
	*min = b ? b->min : 0;
	*max = b ? b->max : 0;
	return b ? 0 : -1;
}

static const char *name_of(const builtin *t, int n, int id)
{
	const builtin *b = find_id(t, n, id);
	return b ? b->name : "?";
}

int tmpl_filter_id(const char *s, size_t n)
{
	const builtin *b = find(filters, COUNT(filters), s, n);
	return b ? b->id : 0;
}

int tmpl_test_id(const char *s, size_t n)
{
	const builtin *b = find(tests, COUNT(tests), s, n);
	return b ? b->id : 0;
}

int tmpl_method_id(const char *s, size_t n)
{
	const builtin *b = find(methods, COUNT(methods), s, n);
	return b ? b->id : 0;
}

int tmpl_function_id(const char *s, size_t n)
{
	const builtin *b = find(functions, COUNT(functions), s, n);
	return b ? b->id : 0;
}

const char *tmpl_method_name(int id)
{
	return name_of(methods, COUNT(methods), id);
}

const char *tmpl_function_name(int fn)
{
	return name_of(functions, COUNT(functions), fn);
}

int tmpl_filter_arity(int id, int *min, int *max)
{
	return arity(filters, COUNT(filters), id, min, max);
}

int tmpl_test_arity(int id, int *min, int *max)
{
	return arity(tests, COUNT(tests), id, min, max);
}

int tmpl_method_arity(int id, int *min, int *max)
{
	return arity(methods, COUNT(methods), id, min, max);
}

int tmpl_function_arity(int fn, int *min, int *max)
{
	return arity(functions, COUNT(functions), fn, min, max);
}
