/*
 * chat_template_parse.c — tokens to a syntax tree, following jinja2/parser.py
 * for the subset we render: output tags, if/elif/else, for (with `if`
 * filter, `else`, loop.*), set (names, tuples, namespace attributes),
 * break/continue, transformers' {% generation %}, and Jinja's full
 * expression grammar minus floats, `/` and `**`.  Filters, tests, methods
 * and functions are resolved here by name (chat_template_names.c), so a
 * template that uses one we do not implement is refused at compile time
 * with its line:col.  Called by text_tmpl_compile on the lexer's tokens.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text/jinja/chat_template_int.h"
#include "common/sl.h"

#define MAX_DEPTH 128  /* nested statements + expressions */

typedef struct {
	tmpl_program *prog;  /* being built: its arena, name and source */
	const tmpl_toks *tk;
	int i;
	int depth;
	int loops;  /* enclosing for loops, for break/continue */
	int rc;
	char *err;
	size_t errlen;
} parser;

static const tmpl_tok *cur(parser *P)
{
	return &P->tk->v[P->i];
}

static const tmpl_tok *peek(parser *P, int k)
{
	int j = P->i + k;
	return &P->tk->v[j < P->tk->n ? j : P->tk->n - 1];
}

static void adv(parser *P)
{
	if (P->i < P->tk->n - 1)
		P->i++;
}

static int is_name(const tmpl_tok *t, const char *s)
{
	return t->kind == TK_NAME && t->n == strlen(s) && memcmp(t->s, s, t->n) == 0;
}

static int is_op(const tmpl_tok *t, int op)
{
	return t->kind == TK_OP && t->op == op;
}

static tmpl_node *failp(parser *P, int pos, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static tmpl_node *failp(parser *P, int pos, const char *fmt, ...)
{
	if (P->rc)
		return NULL;
	char msg[SL_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	P->rc = tmpl_errat(P->err, P->errlen, P->prog->name, P->prog->src, pos, "%s", msg);
	return NULL;
}

static tmpl_node *oom(parser *P)
{
	if (!P->rc)
		P->rc = SL_ENOMEM;
	return NULL;
}

/* What a token looks like in messages. */
static const char *describe(const tmpl_tok *t, char *buf, size_t n)
{
	static const char *opnames[] = {
		"", "+", "-", "*", "/", "//", "%", "**", "~", "[", "]", "(", ")", "{", "}",
		"==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";",
	};
	switch (t->kind) {
	case TK_EOF: return "end of template";
	case TK_DATA: return "template text";
	case TK_VAR_BEGIN: return "'{{'";
	case TK_VAR_END: return "'}}'";
	case TK_BLOCK_BEGIN: return "'{%'";
	case TK_BLOCK_END: return "'%}'";
	case TK_STRING: return "string";
	case TK_INT: return "integer";
	case TK_NAME:
		snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
		return buf;
	case TK_OP:
		snprintf(buf, n, "'%s'", t->op < (int)(sizeof opnames / sizeof *opnames) ? opnames[t->op] : "?");
		return buf;
	}
	return "?";
}

static tmpl_node *unexpected(parser *P, const char *wanted)
{
	char b[64];
	const tmpl_tok *t = cur(P);
	if (wanted)
		return failp(P, t->pos, "expected %s, got %s", wanted, describe(t, b, sizeof b));
	return failp(P, t->pos, "unexpected %s", describe(t, b, sizeof b));
}

static int expect_op(parser *P, int op, const char *what)
{
	if (!is_op(cur(P), op)) {
		unexpected(P, what);
		return -1;
	}
	adv(P);
	return 0;
}

static tmpl_node *node(parser *P, int kind, int pos)
{
	tmpl_node *n = tmpl_alloc(&P->prog->arena, sizeof *n);
	if (!n)
		return oom(P);
	n->kind = kind;
	n->pos = pos;
	return n;
}

/* A growable child list for one node. */
typedef struct {
	tmpl_node **v;
	int n, cap;
} nlist;

static int nl_push(parser *P, nlist *l, tmpl_node *x)
{
	if (l->n == l->cap) {
		int cap = l->cap ? l->cap * 2 : 4;
		tmpl_node **v = tmpl_alloc(&P->prog->arena, (size_t)cap * sizeof *v);
		if (!v) {
			oom(P);
			return -1;
		}
		if (l->n)
			memcpy(v, l->v, (size_t)l->n * sizeof *v);
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = x;
	return 0;
}

static tmpl_node *parse_expression(parser *P, int with_condexpr);
static tmpl_node *parse_unary(parser *P, int with_filter);
static tmpl_node *parse_or(parser *P);

static int enter(parser *P, int pos)
{
	if (++P->depth > MAX_DEPTH) {
		failp(P, pos, "template nested more than %d levels deep", MAX_DEPTH);
		return -1;
	}
	return 0;
}

/* ---- expressions ---- */

/* Call arguments after '(' up to ')': positional then name=value. */
static int parse_args(parser *P, tmpl_node *call)
{
	nlist l = {0};
	int seen_kw = 0;
	if (expect_op(P, OP_LPAREN, "'('"))
		return -1;
	while (!is_op(cur(P), OP_RPAREN)) {
		if (l.n && expect_op(P, OP_COMMA, "',' or ')'"))
			return -1;
		if (is_op(cur(P), OP_RPAREN))
			break;
		if (is_op(cur(P), OP_MUL) || is_op(cur(P), OP_POW)) {
			failp(P, cur(P)->pos, "unsupported construct: *args / **kwargs in a call");
			return -1;
		}
		tmpl_node *arg;
		if (cur(P)->kind == TK_NAME && is_op(peek(P, 1), OP_ASSIGN)) {
			const tmpl_tok *nt = cur(P);
			if (!(arg = node(P, N_KWARG, nt->pos)))
				return -1;
			arg->s = nt->s;
			arg->n = nt->n;
			adv(P);
			adv(P);
			if (!(arg->a = parse_expression(P, 1)))
				return -1;
			seen_kw = 1;
		} else {
			if (seen_kw) {
				failp(P, cur(P)->pos, "positional argument after a keyword argument");
				return -1;
			}
			if (!(arg = parse_expression(P, 1)))
				return -1;
		}
		if (nl_push(P, &l, arg))
			return -1;
	}
	adv(P);
	call->v = l.v;
	call->nv = l.n;
	return 0;
}

static int count_pos(const tmpl_node *n)
{
	int k = 0;
	for (int i = 0; i < n->nv; i++)
		k += n->v[i]->kind != N_KWARG;
	return k;
}

static tmpl_node *parse_call(parser *P, tmpl_node *callee)
{
	tmpl_node *c = node(P, N_CALL, cur(P)->pos);
	if (!c)
		return NULL;
	c->a = callee;
	if (callee->kind == N_NAME) {
		c->fn = tmpl_function_id(callee->s, callee->n);
		if (!c->fn)
			return failp(P, callee->pos, "unsupported function '%.*s'", (int)callee->n,
				     callee->s);
	} else if (callee->kind == N_GETATTR) {
		c->fn = tmpl_method_id(callee->s, callee->n);
		if (!c->fn)
			return failp(P, callee->pos, "unsupported method '.%.*s()'", (int)callee->n,
				     callee->s);
	} else {
		return failp(P, cur(P)->pos, "unsupported call: only functions and methods by name");
	}
	if (parse_args(P, c))
		return NULL;
	return c;
}

/* A filter or test name, possibly dotted. */
static int parse_dotted(parser *P, const char **s, size_t *n, int *pos)
{
	const tmpl_tok *t = cur(P);
	if (t->kind != TK_NAME) {
		unexpected(P, "a name");
		return -1;
	}
	*s = t->s;
	*n = t->n;
	*pos = t->pos;
	adv(P);
	if (is_op(cur(P), OP_DOT))
		return failp(P, cur(P)->pos, "unsupported construct: dotted filter or test name"),
		       -1;
	return 0;
}

static int check_arity(parser *P, tmpl_node *f, int min, int max, const char *what)
{
	int k = count_pos(f);
	if (k < min || (max >= 0 && k > max)) {
		failp(P, f->pos, "%s '%.*s' takes %d to %d positional arguments, got %d", what,
		      (int)f->n, f->s, min, max, k);
		return -1;
	}
	return 0;
}

static tmpl_node *parse_filter(parser *P, tmpl_node *x)
{
	adv(P);  /* '|' */
	tmpl_node *f = node(P, N_FILTER, 0);
	int min, max;
	if (!f || parse_dotted(P, &f->s, &f->n, &f->pos))
		return NULL;
	f->a = x;
	f->fn = tmpl_filter_id(f->s, f->n);
	if (!f->fn)
		return failp(P, f->pos, "unsupported filter '%.*s'", (int)f->n, f->s);
	if (is_op(cur(P), OP_LPAREN) && parse_args(P, f))
		return NULL;
	tmpl_filter_arity(f->fn, &min, &max);
	return check_arity(P, f, min, max, "filter") ? NULL : f;
}

static tmpl_node *parse_primary(parser *P);
static tmpl_node *parse_postfix(parser *P, tmpl_node *x);

static tmpl_node *parse_test(parser *P, tmpl_node *x)
{
	adv(P);  /* 'is' */
	tmpl_node *t = node(P, N_TEST, 0);
	int min, max;
	if (!t)
		return NULL;
	if (is_name(cur(P), "not")) {
		t->op = 1;
		adv(P);
	}
	if (parse_dotted(P, &t->s, &t->n, &t->pos))
		return NULL;
	t->a = x;
	t->fn = tmpl_test_id(t->s, t->n);
	if (!t->fn)
		return failp(P, t->pos, "unsupported test '%.*s'", (int)t->n, t->s);
	const tmpl_tok *c = cur(P);
	if (is_op(c, OP_LPAREN)) {
		if (parse_args(P, t))
			return NULL;
	} else if ((c->kind == TK_NAME || c->kind == TK_STRING || c->kind == TK_INT ||
		    is_op(c, OP_LPAREN) || is_op(c, OP_LBRACKET) || is_op(c, OP_LBRACE)) &&
		   !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
		if (is_name(c, "is"))
			return failp(P, c->pos, "tests cannot be chained with 'is'");
		tmpl_node *arg = parse_primary(P);
		if (!arg || !(arg = parse_postfix(P, arg)))
			return NULL;
		if (!(t->v = tmpl_alloc(&P->prog->arena, sizeof *t->v)))
			return oom(P);
		t->v[0] = arg;
		t->nv = 1;
	}
	tmpl_test_arity(t->fn, &min, &max);
	return check_arity(P, t, min, max, "test") ? NULL : t;
}

/* After '[': an expression or a slice a:b:c. */
static tmpl_node *parse_subscribed(parser *P)
{
	int pos = cur(P)->pos;
	tmpl_node *args[3] = {0};
	if (is_op(cur(P), OP_COLON)) {
		adv(P);
	} else {
		tmpl_node *e = parse_expression(P, 1);
		if (!e || !is_op(cur(P), OP_COLON))
			return e;
		adv(P);
		args[0] = e;
	}
	if (!is_op(cur(P), OP_COLON) && !is_op(cur(P), OP_RBRACKET) && !is_op(cur(P), OP_COMMA))
		if (!(args[1] = parse_expression(P, 1)))
			return NULL;
	if (is_op(cur(P), OP_COLON)) {
		adv(P);
		if (!is_op(cur(P), OP_RBRACKET) && !is_op(cur(P), OP_COMMA))
			if (!(args[2] = parse_expression(P, 1)))
				return NULL;
	}
	tmpl_node *s = node(P, N_SLICE, pos);
	if (!s || !(s->v = tmpl_alloc(&P->prog->arena, 3 * sizeof *s->v)))
		return oom(P);
	memcpy(s->v, args, sizeof args);
	s->nv = 3;
	return s;
}

static tmpl_node *parse_subscript(parser *P, tmpl_node *x)
{
	const tmpl_tok *t = cur(P);
	if (is_op(t, OP_DOT)) {
		adv(P);
		const tmpl_tok *a = cur(P);
		if (a->kind == TK_NAME) {
			tmpl_node *g = node(P, N_GETATTR, a->pos);
			if (!g)
				return NULL;
			g->a = x;
			g->s = a->s;
			g->n = a->n;
			adv(P);
			return g;
		}
		if (a->kind == TK_INT) {
			tmpl_node *g = node(P, N_GETITEM, a->pos), *k = node(P, N_CONST, a->pos);
			if (!g || !k)
				return NULL;
			k->val = tv_int(a->ival);
			g->a = x;
			g->b = k;
			adv(P);
			return g;
		}
		return unexpected(P, "a name or number after '.'");
	}
	adv(P);  /* '[' */
	nlist l = {0};
	while (!is_op(cur(P), OP_RBRACKET)) {
		if (l.n && expect_op(P, OP_COMMA, "',' or ']'"))
			return NULL;
		tmpl_node *e = parse_subscribed(P);
		if (!e || nl_push(P, &l, e))
			return NULL;
	}
	adv(P);
	if (!l.n)
		return failp(P, t->pos, "empty subscript '[]'");
	/* a slice only stands alone: in a tuple subscript it would have no
	 * object to slice (Jinja2 has no such form either) */
	for (int i = 0; l.n > 1 && i < l.n; i++)
		if (l.v[i]->kind == N_SLICE)
			return failp(P, l.v[i]->pos, "a slice inside a tuple subscript is not supported");
	tmpl_node *g = node(P, l.v[0]->kind == N_SLICE && l.n == 1 ? N_SLICE : N_GETITEM, t->pos);
	if (!g)
		return NULL;
	if (g->kind == N_SLICE) {
		*g = *l.v[0];
		g->a = x;
		return g;
	}
	g->a = x;
	if (l.n == 1) {
		g->b = l.v[0];
	} else {
		if (!(g->b = node(P, N_TUPLE, t->pos)))
			return NULL;
		g->b->v = l.v;
		g->b->nv = l.n;
	}
	return g;
}

static tmpl_node *parse_postfix(parser *P, tmpl_node *x)
{
	while (x) {
		const tmpl_tok *t = cur(P);
		if (is_op(t, OP_DOT) || is_op(t, OP_LBRACKET))
			x = parse_subscript(P, x);
		else if (is_op(t, OP_LPAREN))
			x = parse_call(P, x);
		else
			break;
	}
	return x;
}

static tmpl_node *parse_filter_expr(parser *P, tmpl_node *x)
{
	while (x) {
		const tmpl_tok *t = cur(P);
		if (is_op(t, OP_PIPE))
			x = parse_filter(P, x);
		else if (is_name(t, "is"))
			x = parse_test(P, x);
		else if (is_op(t, OP_LPAREN))
			x = parse_call(P, x);
		else
			break;
	}
	return x;
}

/* Comma-separated expressions; a tuple when there is a comma (or `()`). */
static tmpl_node *parse_tuple(parser *P, int with_condexpr, int parens)
{
	int pos = cur(P)->pos;
	nlist l = {0};
	int comma = 0;
	for (;;) {
		const tmpl_tok *t = cur(P);
		if (l.n) {
			if (!is_op(t, OP_COMMA))
				break;
			adv(P);
			comma = 1;
			t = cur(P);
		}
		if (t->kind == TK_VAR_END || t->kind == TK_BLOCK_END || is_op(t, OP_RPAREN) ||
		    (l.n && (is_name(t, "in") || is_name(t, "recursive") || is_name(t, "if"))))
			break;
		tmpl_node *e = parse_expression(P, with_condexpr);
		if (!e || nl_push(P, &l, e))
			return NULL;
	}
	if (!l.n && !parens)
		return unexpected(P, "an expression");
	if (l.n == 1 && !comma)
		return l.v[0];
	tmpl_node *tu = node(P, N_TUPLE, pos);
	if (!tu)
		return NULL;
	tu->v = l.v;
	tu->nv = l.n;
	return tu;
}

static tmpl_node *parse_list(parser *P)
{
	tmpl_node *n = node(P, N_LIST, cur(P)->pos);
	nlist l = {0};
	if (!n)
		return NULL;
	adv(P);
	while (!is_op(cur(P), OP_RBRACKET)) {
		if (l.n && expect_op(P, OP_COMMA, "',' or ']'"))
			return NULL;
		if (is_op(cur(P), OP_RBRACKET))
			break;
		tmpl_node *e = parse_expression(P, 1);
		if (!e || nl_push(P, &l, e))
			return NULL;
	}
	adv(P);
	n->v = l.v;
	n->nv = l.n;
	return n;
}

static tmpl_node *parse_dict(parser *P)
{
	tmpl_node *n = node(P, N_DICT, cur(P)->pos);
	nlist l = {0};
	if (!n)
		return NULL;
	adv(P);
	while (!is_op(cur(P), OP_RBRACE)) {
		if (l.n && expect_op(P, OP_COMMA, "',' or '}'"))
			return NULL;
		if (is_op(cur(P), OP_RBRACE))
			break;
		tmpl_node *k = parse_expression(P, 1), *v;
		if (!k || expect_op(P, OP_COLON, "':'") || !(v = parse_expression(P, 1)) ||
		    nl_push(P, &l, k) || nl_push(P, &l, v))
			return NULL;
	}
	adv(P);
	n->v = l.v;
	n->nv = l.n;
	return n;
}

static tmpl_node *parse_primary(parser *P)
{
	const tmpl_tok *t = cur(P);
	tmpl_node *n;
	if (enter(P, t->pos))
		return NULL;
	if (t->kind == TK_NAME) {
		if (!(n = node(P, N_CONST, t->pos)))
			return NULL;
		if (is_name(t, "true") || is_name(t, "True"))
			n->val = tv_bool(1);
		else if (is_name(t, "false") || is_name(t, "False"))
			n->val = tv_bool(0);
		else if (is_name(t, "none") || is_name(t, "None"))
			n->val = tv_none();
		else {
			n->kind = N_NAME;
			n->s = t->s;
			n->n = t->n;
		}
		adv(P);
	} else if (t->kind == TK_STRING) {
		/* adjacent literals concatenate: 'a' 'b' */
		size_t total = 0;
		int j = P->i;
		while (P->tk->v[j].kind == TK_STRING)
			total += P->tk->v[j++].n;
		char *s = tmpl_alloc(&P->prog->arena, total + 1);
		if (!s || !(n = node(P, N_CONST, t->pos)))
			return oom(P);
		total = 0;
		while (cur(P)->kind == TK_STRING) {
			memcpy(s + total, cur(P)->s, cur(P)->n);
			total += cur(P)->n;
			adv(P);
		}
		n->val = tv_str(s, total);
	} else if (t->kind == TK_INT) {
		if (!(n = node(P, N_CONST, t->pos)))
			return NULL;
		n->val = tv_int(t->ival);
		adv(P);
	} else if (is_op(t, OP_LPAREN)) {
		adv(P);
		n = parse_tuple(P, 1, 1);
		if (!n || expect_op(P, OP_RPAREN, "')'"))
			return NULL;
	} else if (is_op(t, OP_LBRACKET)) {
		n = parse_list(P);
	} else if (is_op(t, OP_LBRACE)) {
		n = parse_dict(P);
	} else {
		return unexpected(P, "an expression");
	}
	P->depth--;
	return n;
}

static tmpl_node *parse_unary(parser *P, int with_filter)
{
	const tmpl_tok *t = cur(P);
	tmpl_node *x;
	if (enter(P, t->pos))
		return NULL;
	if (is_op(t, OP_SUB) || is_op(t, OP_ADD)) {
		adv(P);
		if (!(x = node(P, is_op(t, OP_SUB) ? N_NEG : N_POS, t->pos)) ||
		    !(x->a = parse_unary(P, 0)))
			return NULL;
	} else {
		x = parse_primary(P);
	}
	x = parse_postfix(P, x);
	if (with_filter)
		x = parse_filter_expr(P, x);
	P->depth--;
	return x;
}

static tmpl_node *binop(parser *P, int op, int pos, tmpl_node *a, tmpl_node *b)
{
	tmpl_node *n = node(P, N_BINOP, pos);
	if (!n)
		return NULL;
	n->op = op;
	n->a = a;
	n->b = b;
	return n;
}

static tmpl_node *unsupported_op(parser *P, const tmpl_tok *t)
{
	return failp(P, t->pos, "unsupported construct: operator '%s' (no floats or powers)",
		     t->op == OP_DIV ? "/" : "**");
}

static tmpl_node *parse_pow(parser *P)
{
	tmpl_node *x = parse_unary(P, 1);
	if (x && is_op(cur(P), OP_POW))
		return unsupported_op(P, cur(P));
	return x;
}

static tmpl_node *parse_math2(parser *P)
{
	tmpl_node *x = parse_pow(P);
	while (x) {
		const tmpl_tok *t = cur(P);
		if (is_op(t, OP_DIV))
			return unsupported_op(P, t);
		if (!is_op(t, OP_MUL) && !is_op(t, OP_FLOORDIV) && !is_op(t, OP_MOD))
			break;
		adv(P);
		tmpl_node *y = parse_pow(P);
		x = y ? binop(P, t->op, t->pos, x, y) : NULL;
	}
	return x;
}

static tmpl_node *parse_concat(parser *P)
{
	int pos = cur(P)->pos;
	tmpl_node *x = parse_math2(P);
	if (!x || !is_op(cur(P), OP_TILDE))
		return x;
	nlist l = {0};
	if (nl_push(P, &l, x))
		return NULL;
	while (is_op(cur(P), OP_TILDE)) {
		adv(P);
		tmpl_node *y = parse_math2(P);
		if (!y || nl_push(P, &l, y))
			return NULL;
	}
	tmpl_node *c = node(P, N_CONCAT, pos);
	if (!c)
		return NULL;
	c->v = l.v;
	c->nv = l.n;
	return c;
}

static tmpl_node *parse_math1(parser *P)
{
	tmpl_node *x = parse_concat(P);
	while (x && (is_op(cur(P), OP_ADD) || is_op(cur(P), OP_SUB))) {
		const tmpl_tok *t = cur(P);
		adv(P);
		tmpl_node *y = parse_concat(P);
		x = y ? binop(P, t->op, t->pos, x, y) : NULL;
	}
	return x;
}

static tmpl_node *parse_compare(parser *P)
{
	int pos = cur(P)->pos;
	tmpl_node *x = parse_math1(P);
	nlist l = {0};
	int ops[64], nops = 0;
	while (x) {
		const tmpl_tok *t = cur(P);
		int op;
		if (t->kind == TK_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT ||
					 t->op == OP_LE || t->op == OP_GT || t->op == OP_GE)) {
			op = t->op;
			adv(P);
		} else if (is_name(t, "in")) {
			op = OP_IN;
			adv(P);
		} else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
			op = OP_NOTIN;
			adv(P);
			adv(P);
		} else {
			break;
		}
		if (nops == 64)
			return failp(P, t->pos, "comparison chain too long");
		tmpl_node *y = parse_math1(P);
		if (!y || nl_push(P, &l, y))
			return NULL;
		ops[nops++] = op;
	}
	if (!x || !nops)
		return x;
	tmpl_node *c = node(P, N_COMPARE, pos);
	if (!c || !(c->cmpops = tmpl_alloc(&P->prog->arena, (size_t)nops * sizeof(int))))
		return oom(P);
	memcpy(c->cmpops, ops, (size_t)nops * sizeof(int));
	c->a = x;
	c->v = l.v;
	c->nv = l.n;
	return c;
}

static tmpl_node *parse_not(parser *P)
{
	const tmpl_tok *t = cur(P);
	if (is_name(t, "not")) {
		adv(P);
		tmpl_node *n = node(P, N_NOT, t->pos);
		if (!n || enter(P, t->pos) || !(n->a = parse_not(P)))
			return NULL;
		P->depth--;
		return n;
	}
	return parse_compare(P);
}

static tmpl_node *parse_and(parser *P)
{
	tmpl_node *x = parse_not(P);
	while (x && is_name(cur(P), "and")) {
		int pos = cur(P)->pos;
		adv(P);
		tmpl_node *y = parse_not(P), *n;
		if (!y || !(n = node(P, N_AND, pos)))
			return NULL;
		n->a = x;
		n->b = y;
		x = n;
	}
	return x;
}

static tmpl_node *parse_or(parser *P)
{
	tmpl_node *x = parse_and(P);
	while (x && is_name(cur(P), "or")) {
		int pos = cur(P)->pos;
		adv(P);
		tmpl_node *y = parse_and(P), *n;
		if (!y || !(n = node(P, N_OR, pos)))
			return NULL;
		n->a = x;
		n->b = y;
		x = n;
	}
	return x;
}

static tmpl_node *parse_condexpr(parser *P)
{
	tmpl_node *x = parse_or(P);
	while (x && is_name(cur(P), "if")) {
		int pos = cur(P)->pos;
		adv(P);
		tmpl_node *n = node(P, N_CONDEXPR, pos);
		if (!n || enter(P, pos) || !(n->b = parse_or(P)))
			return NULL;
		n->a = x;
		if (is_name(cur(P), "else")) {
			adv(P);
			if (!(n->c = parse_condexpr(P)))
				return NULL;
		}
		P->depth--;
		x = n;
	}
	return x;
}

static tmpl_node *parse_expression(parser *P, int with_condexpr)
{
	return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

/* ---- statements ---- */

static tmpl_node *parse_body(parser *P, const char *const *ends, int nends, int open_pos,
			     const char *open_tag);

static int expect_block_end(parser *P)
{
	if (cur(P)->kind != TK_BLOCK_END) {
		unexpected(P, "'%}'");
		return -1;
	}
	adv(P);
	return 0;
}

/* The name after '{%' that ended a body; consumes it. */
static const tmpl_tok *take_end_name(parser *P)
{
	const tmpl_tok *t = cur(P);
	adv(P);
	return t;
}

static tmpl_node *parse_if(parser *P, int pos)
{
	static const char *const ends[] = {"elif", "else", "endif"};
	static const char *const endif[] = {"endif"};
	tmpl_node *n = node(P, N_IF, pos), *top = n;
	if (!n || !(n->a = parse_tuple(P, 0, 0)) || expect_block_end(P))
		return NULL;
	for (;;) {
		n->body = parse_body(P, ends, 3, pos, "{% if %}");
		if (P->rc)
			return NULL;
		const tmpl_tok *e = take_end_name(P);
		if (is_name(e, "elif")) {
			tmpl_node *m = node(P, N_IF, e->pos);
			if (!m || !(m->a = parse_tuple(P, 0, 0)) || expect_block_end(P))
				return NULL;
			n->orelse = m;
			n = m;
			continue;
		}
		if (is_name(e, "else")) {
			if (expect_block_end(P))
				return NULL;
			n->orelse = parse_body(P, endif, 1, pos, "{% if %}");
			if (P->rc)
				return NULL;
			take_end_name(P);
		}
		break;
	}
	return top;
}

static int parse_target(parser *P, nlist *l, int allow_attr)
{
	int parens = is_op(cur(P), OP_LPAREN);
	if (parens)
		adv(P);
	do {
		const tmpl_tok *t = cur(P);
		if (t->kind != TK_NAME) {
			unexpected(P, "a variable name");
			return -1;
		}
		static const char *const consts[] = {"true", "false", "none", "True", "False", "None"};
		for (size_t i = 0; i < sizeof consts / sizeof *consts; i++)
			if (is_name(t, consts[i])) {
				failp(P, t->pos, "cannot assign to '%s'", consts[i]);
				return -1;
			}
		tmpl_node *n = node(P, N_NAME, t->pos);
		if (!n)
			return -1;
		n->s = t->s;
		n->n = t->n;
		adv(P);
		if (allow_attr && is_op(cur(P), OP_DOT) && peek(P, 1)->kind == TK_NAME && !l->n) {
			adv(P);
			tmpl_node *g = node(P, N_GETATTR, cur(P)->pos);
			if (!g)
				return -1;
			g->a = n;
			g->s = cur(P)->s;
			g->n = cur(P)->n;
			adv(P);
			return nl_push(P, l, g);
		}
		if (nl_push(P, l, n))
			return -1;
	} while (is_op(cur(P), OP_COMMA) && (adv(P), 1));
	if (parens && expect_op(P, OP_RPAREN, "')'"))
		return -1;
	return 0;
}

static int is_content_access(const tmpl_node *e)
{
	if (e->kind == N_GETATTR)
		return e->n == 7 && memcmp(e->s, "content", 7) == 0;
	return e->kind == N_GETITEM && e->b->kind == N_CONST && e->b->val.k == V_STR &&
	       e->b->val.u.s.n == 7 && memcmp(e->b->val.u.s.p, "content", 7) == 0;
}

static tmpl_node *parse_for(parser *P, int pos)
{
	static const char *const ends[] = {"else", "endfor"};
	static const char *const endfor[] = {"endfor"};
	tmpl_node *n = node(P, N_FOR, pos);
	nlist l = {0};
	if (!n || parse_target(P, &l, 0))
		return NULL;
	n->v = l.v;
	n->nv = l.n;
	if (!is_name(cur(P), "in"))
		return unexpected(P, "'in'");
	adv(P);
	if (!(n->a = parse_tuple(P, 0, 0)))
		return NULL;
	if (is_content_access(n->a))
		P->prog->iterates_content = 1;
	if (is_name(cur(P), "if")) {
		adv(P);
		if (!(n->b = parse_expression(P, 1)))
			return NULL;
	}
	if (is_name(cur(P), "recursive"))
		return failp(P, cur(P)->pos, "unsupported construct: recursive for loop");
	if (expect_block_end(P))
		return NULL;
	P->loops++;
	n->body = parse_body(P, ends, 2, pos, "{% for %}");
	P->loops--;
	if (P->rc)
		return NULL;
	if (is_name(take_end_name(P), "else")) {
		if (expect_block_end(P))
			return NULL;
		n->orelse = parse_body(P, endfor, 1, pos, "{% for %}");
		if (P->rc)
			return NULL;
		take_end_name(P);
	}
	return n;
}

static tmpl_node *parse_set(parser *P, int pos)
{
	tmpl_node *n = node(P, N_SET, pos);
	nlist l = {0};
	if (!n || parse_target(P, &l, 1))
		return NULL;
	n->v = l.v;
	n->nv = l.n;
	if (!is_op(cur(P), OP_ASSIGN)) {
		if (cur(P)->kind == TK_BLOCK_END)
			return failp(P, pos, "unsupported construct '{%% set %%}...{%% endset %%}' block");
		return unexpected(P, "'='");
	}
	adv(P);
	if (!(n->a = parse_tuple(P, 1, 0)))
		return NULL;
	return n;
}

static int in_list(const tmpl_tok *t, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (is_name(t, names[i]))
			return 1;
	return 0;
}

static tmpl_node *parse_block_tag(parser *P)
{
	static const char *const unsupported[] = {
		"macro", "call", "filter", "include", "import", "from", "extends", "block",
		"with", "autoescape", "do", "raw", "trans", "pluralize", "print",
	};
	static const char *const stray[] = {
		"endif", "endfor", "endset", "endmacro", "endcall", "endfilter", "endblock",
		"endwith", "endautoescape", "endraw", "endgeneration", "elif", "else",
	};
	static const char *const endgen[] = {"endgeneration"};
	const tmpl_tok *t = cur(P);
	int pos = peek(P, -1)->pos;  /* the '{%' */
	tmpl_node *n;
	if (t->kind != TK_NAME)
		return unexpected(P, "a tag name");
	if (enter(P, t->pos))
		return NULL;
	adv(P);
	if (is_name(t, "if")) {
		n = parse_if(P, pos);
	} else if (is_name(t, "for")) {
		n = parse_for(P, pos);
	} else if (is_name(t, "set")) {
		n = parse_set(P, pos);
	} else if (is_name(t, "break") || is_name(t, "continue")) {
		if (!P->loops)
			return failp(P, pos, "'%.*s' outside a for loop", (int)t->n, t->s);
		n = node(P, is_name(t, "break") ? N_BREAK : N_CONTINUE, pos);
	} else if (is_name(t, "generation")) {
		if (expect_block_end(P) || !(n = node(P, N_SCOPE, pos)))
			return NULL;
		n->body = parse_body(P, endgen, 1, pos, "{% generation %}");
		if (P->rc)
			return NULL;
		take_end_name(P);  /* the closing '%}' is checked below */
	} else if (in_list(t, unsupported, sizeof unsupported / sizeof *unsupported)) {
		return failp(P, pos, "unsupported construct '{%% %.*s %%}'", (int)t->n, t->s);
	} else if (in_list(t, stray, sizeof stray / sizeof *stray)) {
		return failp(P, pos, "unexpected '{%% %.*s %%}'", (int)t->n, t->s);
	} else {
		return failp(P, pos, "unknown tag '%.*s'", (int)t->n, t->s);
	}
	P->depth--;
	if (!n || expect_block_end(P))
		return NULL;
	return n;
}

/* Statements up to a '{% name' with name in ends (left at the name), or to
 * the end of the template when nends is 0; ends[nends - 1] is the tag that
 * closes the block, for the error when it never comes. */
static tmpl_node *parse_body(parser *P, const char *const *ends, int nends, int open_pos,
			     const char *open_tag)
{
	tmpl_node *head = NULL, **tail = &head;
	for (;;) {
		const tmpl_tok *t = cur(P);
		tmpl_node *n = NULL;
		if (t->kind == TK_EOF) {
			if (nends) {
				int line, col;
				tmpl_linecol(P->prog->src, open_pos, &line, &col);
				return failp(P, t->pos,
					     "unexpected end of template: %s at %d:%d is never closed "
					     "(expected '{%% %s %%}')",
					     open_tag, line, col, ends[nends - 1]);
			}
			return head;
		}
		if (t->kind == TK_DATA) {
			if (!(n = node(P, N_DATA, t->pos)))
				return NULL;
			n->s = t->s;
			n->n = t->n;
			adv(P);
		} else if (t->kind == TK_VAR_BEGIN) {
			adv(P);
			if (!(n = node(P, N_OUTPUT, t->pos)))
				return NULL;
			if (cur(P)->kind == TK_VAR_END)
				return failp(P, cur(P)->pos, "expected an expression, got '}}'");
			if (!(n->a = parse_tuple(P, 1, 0)))
				return NULL;
			if (cur(P)->kind != TK_VAR_END)
				return unexpected(P, "'}}'");
			adv(P);
		} else if (t->kind == TK_BLOCK_BEGIN) {
			adv(P);
			if (nends && in_list(cur(P), ends, nends))
				return head;
			if (!(n = parse_block_tag(P)))
				return NULL;
		} else {
			return unexpected(P, NULL);
		}
		*tail = n;
		tail = &n->next;
	}
}

int tmpl_parse(tmpl_program *prog, const tmpl_toks *toks, char *err, size_t errlen)
{
	parser P = {.prog = prog, .tk = toks, .err = err, .errlen = errlen};
	prog->root = parse_body(&P, NULL, 0, 0, NULL);
	return P.rc;
}
