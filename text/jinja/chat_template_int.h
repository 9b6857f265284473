/*
 * chat_template_int.h — what the chat-template files share: the arena, the
 * lexer's tokens, the syntax tree, the compiled program, runtime values and
 * the ids of supported filters, tests, methods and functions.  Not for use
 * outside text/jinja/chat_template*.c; the public interface is
 * chat_template.h, which only chat_template.c includes.
 *
 * The files stand in layers, top to bottom; each calls only files below it:
 *
 *   chat_template.c          public API: compile, render, destroy
 *   chat_template_eval.c     statements and expressions (tmpl_exec)
 *   chat_template_parse.c    tokens -> tree (tmpl_parse)
 *   chat_template_builtin.c  filters, tests, methods, global functions
 *   chat_template_lex.c      source -> tokens (tmpl_lex)
 *   chat_template_value.c    arena; errors at line:col; Python semantics of
 *                            values: str(), repr(), ==, <, in, [], ., truth,
 *                            strip, json
 *   chat_template_names.c    the names of the supported builtins: ids and
 *                            argument counts
 */
#ifndef COORD_CHAT_TEMPLATE_INT_H
#define COORD_CHAT_TEMPLATE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/buf.h"

/* ---- arena: every tree node and runtime value lives in one; freed whole ---- */

typedef struct tmpl_chunk tmpl_chunk;
typedef struct {
	tmpl_chunk *head;
	size_t used;   /* bytes handed out, for the limit */
	size_t limit;  /* 0: unlimited */
} tmpl_arena;

/* chat_template_value.c */
void *tmpl_alloc(tmpl_arena *a, size_t n);  /* zeroed; NULL past the limit */
void tmpl_arena_free(tmpl_arena *a);

/* ---- tokens ---- */

enum {
	TK_EOF,
	TK_DATA,        /* template text between tags */
	TK_VAR_BEGIN,   /* {{ */
	TK_VAR_END,     /* }} */
	TK_BLOCK_BEGIN, /* {% */
	TK_BLOCK_END,   /* %} */
	TK_NAME,
	TK_STRING,      /* value already unescaped */
	TK_INT,
	TK_OP,          /* op holds one of OP_* */
};

enum {
	OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_TILDE,
	OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE,
	OP_EQ, OP_NE, OP_GT, OP_GE, OP_LT, OP_LE, OP_ASSIGN, OP_DOT, OP_COLON,
	OP_PIPE, OP_COMMA, OP_SEMICOLON,
	/* not tokens: comparison operators of the tree */
	OP_IN, OP_NOTIN,
};

typedef struct {
	int kind;
	int op;
	int pos;          /* byte offset in the normalized source */
	const char *s;    /* DATA, NAME, STRING: text (in the arena) */
	size_t n;
	int64_t ival;
} tmpl_tok;

typedef struct {
	tmpl_tok *v;
	int n;
} tmpl_toks;

/* Positions turn into "line:col" (1-based, columns in characters);
 * chat_template_value.c. */
void tmpl_linecol(const char *src, int pos, int *line, int *col);
int tmpl_errat(char *err, size_t errlen, const char *name, const char *src, int pos,
	       const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* chat_template_lex.c */
int tmpl_lex(const char *src, size_t len, const char *name, tmpl_arena *a, tmpl_toks *out,
	     char *err, size_t errlen);

/* ---- syntax tree ---- */

enum {
	/* statements */
	N_DATA = 1,   /* s, n: text */
	N_OUTPUT,     /* a: expression */
	N_IF,         /* a: test, body, orelse (elif is a nested N_IF) */
	N_FOR,        /* targets v[0..nv) (N_NAME), a: iterable, b: filter or NULL,
			 body, orelse */
	N_SET,        /* v[0..nv): targets (N_NAME or N_GETATTR on a name), a: value */
	N_BREAK,
	N_CONTINUE,
	N_SCOPE,      /* {% generation %}: body rendered as is */
	/* expressions */
	N_CONST,      /* val */
	N_NAME,       /* s: name */
	N_GETATTR,    /* a.s */
	N_GETITEM,    /* a[b] */
	N_SLICE,      /* a[v0:v1:v2]; missing parts NULL */
	N_CALL,       /* a(v..., kw...) ; fn: builtin id when known at compile time */
	N_FILTER,     /* a | s(v..., kw...) ; fn: FILTER_* */
	N_TEST,       /* a is [not] s(v...) ; fn: TEST_*, op: 1 when negated */
	N_BINOP,      /* a op b: + - * // % ~ */
	N_NEG,        /* -a */
	N_POS,        /* +a */
	N_NOT,        /* not a */
	N_AND,
	N_OR,
	N_COMPARE,    /* a op0 v[0] op1 v[1] ...; ops in cmpops */
	N_CONDEXPR,   /* a if b else c (c may be NULL: undefined) */
	N_LIST,       /* v */
	N_TUPLE,      /* v */
	N_DICT,       /* v: key, value, key, value ... */
	N_CONCAT,     /* v joined with ~ */
	N_KWARG,      /* s = a (only inside call argument lists) */
};

typedef struct tmpl_val tmpl_val;
typedef struct tmpl_node tmpl_node;

/* Runtime values follow Python's types as Jinja sees them. */
enum {
	V_UNDEF = 0,  /* s: the name that was missing (for messages), may be NULL */
	V_NONE,
	V_BOOL,       /* i */
	V_INT,        /* i */
	V_STR,        /* s, n */
	V_LIST,       /* l; l->tuple for tuples */
	V_DICT,       /* d */
	V_NS,         /* d: a namespace() object, the only mutable value */
	V_LOOP,       /* lp: the `loop` variable */
	V_FUNC,       /* i: FN_* global function */
	V_METHOD,     /* m: a bound method */
	V_FLOAT,      /* f: only from JSON input (tools, tool calls); printed,
			 compared and tested, no arithmetic */
};

typedef struct tmpl_list tmpl_list;
typedef struct tmpl_dict tmpl_dict;
typedef struct tmpl_loop tmpl_loop;
typedef struct tmpl_method tmpl_method;

struct tmpl_val {
	int k;
	union {
		int64_t i;
		double f;
		struct {
			const char *p;
			size_t n;
		} s;
		tmpl_list *l;
		tmpl_dict *d;
		tmpl_loop *lp;
		tmpl_method *m;
	} u;
};

struct tmpl_list {
	int n;
	int tuple;
	tmpl_val *it;
};

struct tmpl_dict {
	int n, cap;
	tmpl_val *keys;
	tmpl_val *vals;
};

struct tmpl_loop {
	int64_t index0, length;
	const tmpl_list *items;  /* for previtem / nextitem */
};

struct tmpl_method {
	int id;  /* M_* */
	tmpl_val self;
};

struct tmpl_node {
	int kind;
	int pos;
	int op;
	int fn;
	const char *s;
	size_t n;
	tmpl_val val;
	tmpl_node *a, *b, *c;
	tmpl_node **v;
	int nv;
	int *cmpops;           /* N_COMPARE: nv operators */
	tmpl_node *body, *orelse, *next;
};

/* ---- a compiled template: what parse builds and eval runs ---- */

typedef struct {
	tmpl_arena arena;       /* owns src, tokens and tree */
	char *name;             /* labels errors */
	const char *src;        /* normalized source (for line:col) */
	tmpl_node *root;        /* statement list */
	int iterates_content;
} tmpl_program;

/* chat_template_parse.c: fills prog->root and prog->iterates_content. */
int tmpl_parse(tmpl_program *prog, const tmpl_toks *toks, char *err, size_t errlen);

/* ---- builtins: names resolved at compile time (chat_template_names.c) ---- */

enum {
	FILTER_TRIM = 1, FILTER_LENGTH, FILTER_UPPER, FILTER_LOWER, FILTER_CAPITALIZE,
	FILTER_TITLE, FILTER_DEFAULT, FILTER_JOIN, FILTER_TOJSON, FILTER_FIRST, FILTER_LAST,
	FILTER_LIST, FILTER_STRING, FILTER_INT, FILTER_REVERSE, FILTER_ITEMS, FILTER_SELECT,
	FILTER_REJECT, FILTER_SELECTATTR, FILTER_REJECTATTR, FILTER_MAP, FILTER_REPLACE,
	FILTER_SAFE, FILTER_ABS,
};
enum {
	TEST_DEFINED = 1, TEST_UNDEFINED, TEST_NONE, TEST_STRING, TEST_MAPPING, TEST_ITERABLE,
	TEST_SEQUENCE, TEST_NUMBER, TEST_INTEGER, TEST_BOOLEAN, TEST_TRUE, TEST_FALSE,
	TEST_EQ, TEST_NE, TEST_GT, TEST_GE, TEST_LT, TEST_LE, TEST_ODD, TEST_EVEN,
	TEST_DIVISIBLEBY, TEST_IN, TEST_SAMEAS, TEST_LOWER, TEST_UPPER, TEST_CALLABLE,
};
enum {
	M_STRIP = 1, M_LSTRIP, M_RSTRIP, M_SPLIT, M_STARTSWITH, M_ENDSWITH, M_UPPER, M_LOWER,
	M_TITLE, M_CAPITALIZE, M_REPLACE, M_JOIN, M_ITEMS, M_KEYS, M_VALUES, M_GET,
};
enum {
	FN_RAISE_EXCEPTION = 1, FN_STRFTIME_NOW, FN_NAMESPACE, FN_RANGE, FN_DICT,
};

/* Ids of names; 0 when not supported. */
int tmpl_filter_id(const char *s, size_t n);
int tmpl_test_id(const char *s, size_t n);
int tmpl_method_id(const char *s, size_t n);
int tmpl_function_id(const char *s, size_t n);
/* Names of ids; "?" when unknown. */
const char *tmpl_method_name(int id);
const char *tmpl_function_name(int fn);
/* Positional argument count bounds, *min and *max; max -1: any.  0, or -1
 * (and 0, 0) for an unknown id. */
int tmpl_filter_arity(int id, int *min, int *max);
int tmpl_test_arity(int id, int *min, int *max);
int tmpl_method_arity(int id, int *min, int *max);
int tmpl_function_arity(int fn, int *min, int *max);

/* ---- render context ---- */

typedef struct tmpl_scope tmpl_scope;
struct tmpl_scope {
	tmpl_scope *up;
	int n, cap;
	const char **names;
	size_t *lens;
	tmpl_val *vals;
};

typedef struct {
	const tmpl_program *prog;
	tmpl_arena arena;      /* values of this render */
	sl_buf out;            /* the result (realloc'd) */
	size_t out_limit;
	uint64_t steps, step_limit;
	tmpl_scope *scope;
	int64_t now_unix;
	int failed;
	char *err;
	size_t errlen;
} tmpl_ctx;

/* Records the first failure at a node's position; later ones are ignored
 * (chat_template_value.c). */
void tmpl_fail(tmpl_ctx *c, const tmpl_node *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void tmpl_fail_oom(tmpl_ctx *c, const tmpl_node *at);

/* ---- values (chat_template_value.c) ---- */

static inline tmpl_val tv_undef(const char *name)
{
	tmpl_val v = {0};
	v.k = V_UNDEF;
	v.u.s.p = name;
	v.u.s.n = name ? strlen(name) : 0;
	return v;
}
/* Undefined, remembering the missing name (p, n bytes). */
static inline tmpl_val tv_undef_named(const char *p, size_t n)
{
	tmpl_val v = tv_undef(NULL);
	v.u.s.p = p;
	v.u.s.n = n;
	return v;
}
static inline tmpl_val tv_none(void)
{
	tmpl_val v = {0};
	v.k = V_NONE;
	return v;
}
static inline tmpl_val tv_bool(int b)
{
	tmpl_val v = {0};
	v.k = V_BOOL;
	v.u.i = b != 0;
	return v;
}
static inline tmpl_val tv_int(int64_t i)
{
	tmpl_val v = {0};
	v.k = V_INT;
	v.u.i = i;
	return v;
}
static inline tmpl_val tv_str(const char *p, size_t n)
{
	tmpl_val v = {0};
	v.k = V_STR;
	v.u.s.p = p;
	v.u.s.n = n;
	return v;
}

/* Strings are built in a common/buf.h buffer that grows in the render
 * arena: bounded by its limit, freed with it (never sl_buf_free'd); a put
 * that fails sets b->failed, which every builder checks at the end. */
void sb_init(sl_buf *b, tmpl_ctx *c);
tmpl_val sb_val(sl_buf *b);  /* V_STR of the bytes */

const char *tv_type_name(const tmpl_val *v);
int tv_truthy(const tmpl_val *v);
int tv_equal(const tmpl_val *a, const tmpl_val *b);
int tv_is_int(const tmpl_val *v);        /* int or bool */
int tv_is_iterable(const tmpl_val *v);
void tv_str_into(sl_buf *b, const tmpl_val *v);   /* Python str() */
void tv_repr_into(sl_buf *b, const tmpl_val *v);  /* Python repr() */
tmpl_val tv_to_str(tmpl_ctx *c, const tmpl_val *v);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: none)); 0 or -1 with
 * *bad set to the value that has no JSON form. */
int tv_json_into(sl_buf *b, const tmpl_val *v, int indent, int sort_keys, int depth,
		 const tmpl_val **bad);

tmpl_list *tl_new(tmpl_ctx *c, int n);
tmpl_dict *td_new(tmpl_ctx *c, int cap);
int td_set(tmpl_ctx *c, tmpl_dict *d, tmpl_val key, tmpl_val val);
const tmpl_val *td_get(const tmpl_dict *d, const char *key, size_t n);
const tmpl_val *td_get_val(const tmpl_dict *d, const tmpl_val *key);

/* Items of an iterable as a list (dict: keys, str: characters); NULL and a
 * failure when not iterable. */
const tmpl_list *tv_iter_list(tmpl_ctx *c, const tmpl_node *at, const tmpl_val *v);

/* Python str methods on UTF-8.  Strings here are well-formed (the
 * template is checked when compiled, and callers pass valid UTF-8);
 * should a stray byte get in, it counts as one character, U+FFFD. */
int py_isspace_at(const char *s, size_t n, size_t i, size_t *clen);
void py_strip(const char *s, size_t n, int left, int right, const char *chars, size_t nchars,
	      size_t *start, size_t *end);
size_t tmpl_utf8_count(const char *s, size_t n);
size_t tmpl_utf8_decode(const char *s, size_t n, uint32_t *cp);  /* bytes used (>=1) */

/* Value operations that can fail: they record it with tmpl_fail. */
/* Fails with "'NAME' is undefined" for an undefined value u; returns undefined. */
tmpl_val tmpl_fail_undefined(tmpl_ctx *c, const tmpl_node *at, const tmpl_val *u);
tmpl_val tmpl_getattr(tmpl_ctx *c, const tmpl_node *at, tmpl_val obj, const char *name,
		      size_t n);
tmpl_val tmpl_getitem(tmpl_ctx *c, const tmpl_node *at, tmpl_val obj, tmpl_val key);
/* One comparison (OP_EQ ... OP_NOTIN) with Python semantics: 1, 0, or -1
 * after a failure (e.g. '<' between str and int). */
int tmpl_compare(tmpl_ctx *c, const tmpl_node *e, int op, const tmpl_val *a, const tmpl_val *b);

/* ---- evaluator (chat_template_eval.c) ---- */

/* Runs a statement list; a failure is in c->failed and c->err. */
void tmpl_exec(tmpl_ctx *c, const tmpl_node *root);
tmpl_val tmpl_eval(tmpl_ctx *c, const tmpl_node *e);
int tmpl_count_step(tmpl_ctx *c, const tmpl_node *at);
/* Scopes: push opens an innermost one, set binds a name in it (name, n bytes
 * must outlive the render); -1 when out of memory. */
int tmpl_scope_push(tmpl_ctx *c);
int tmpl_scope_set(tmpl_ctx *c, const char *name, size_t n, tmpl_val v);

/* ---- builtins (chat_template_builtin.c) ---- */

/* Arguments of a filter, test or call, evaluated: positional then keyword. */
typedef struct {
	int n;
	tmpl_val *v;
	int nkw;
	const char **kwn;
	size_t *kwl;
	tmpl_val *kw;
} tmpl_args;

tmpl_val tmpl_apply_filter(tmpl_ctx *c, const tmpl_node *at, int id, tmpl_val x,
			   const tmpl_args *a);
int tmpl_apply_test(tmpl_ctx *c, const tmpl_node *at, int id, tmpl_val x, const tmpl_args *a);
tmpl_val tmpl_call(tmpl_ctx *c, const tmpl_node *at, tmpl_val fn, const tmpl_args *a);

#endif
