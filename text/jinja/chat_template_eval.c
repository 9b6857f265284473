/*
 * chat_template_eval.c — runs a compiled chat template: statements and
 * expressions.  text_tmpl_render (chat_template.c) sets up the render
 * context and the globals, then calls tmpl_exec; attribute and item lookup
 * and comparisons are value operations (chat_template_value.c); filters,
 * tests and calls are chat_template_builtin.c's.
 *
 * Semantics are Jinja2's (3.1) as transformers runs it: names resolve
 * through scopes (each for-loop iteration gets a fresh one, so a `set` in a
 * loop body never outlives its iteration, `if` opens none); a missing
 * name, key or attribute is Undefined, which prints as "" and is false,
 * but any arithmetic on it, or any attribute of it, is an error; `and` and
 * `or` return an operand, not a bool.  Every render is bounded: output
 * bytes, arena memory and steps (statements run plus loop iterations), so
 * an untrusted template cannot take the coordinator down.
 */
#include <stdlib.h>
#include <string.h>

#include "text/jinja/chat_template_int.h"

enum { EXEC_OK = 0, EXEC_BREAK = 1, EXEC_CONTINUE = 2, EXEC_FAIL = -1 };

/* ---- limits ---- */

int tmpl_count_step(tmpl_ctx *c, const tmpl_node *at)
{
	if (++c->steps > c->step_limit) {
		tmpl_fail(c, at, "template ran more than %llu steps",
			  (unsigned long long)c->step_limit);
		return -1;
	}
	return 0;
}

/* ---- scopes ---- */

int tmpl_scope_push(tmpl_ctx *c)
{
	tmpl_scope *s = tmpl_alloc(&c->arena, sizeof *s);
	if (!s)
		return -1;
	s->up = c->scope;
	c->scope = s;
	return 0;
}

static void scope_pop(tmpl_ctx *c)
{
	c->scope = c->scope->up;
}

int tmpl_scope_set(tmpl_ctx *c, const char *name, size_t n, tmpl_val v)
{
	tmpl_scope *s = c->scope;
	for (int i = 0; i < s->n; i++)
		if (s->lens[i] == n && !memcmp(s->names[i], name, n)) {
			s->vals[i] = v;
			return 0;
		}
	if (s->n == s->cap) {
		int cap = s->cap ? s->cap * 2 : 8;
		const char **names = tmpl_alloc(&c->arena, (size_t)cap * sizeof *names);
		size_t *lens = tmpl_alloc(&c->arena, (size_t)cap * sizeof *lens);
		tmpl_val *vals = tmpl_alloc(&c->arena, (size_t)cap * sizeof *vals);
		if (!names || !lens || !vals)
			return -1;
		if (s->n) {
			memcpy(names, s->names, (size_t)s->n * sizeof *names);
			memcpy(lens, s->lens, (size_t)s->n * sizeof *lens);
			memcpy(vals, s->vals, (size_t)s->n * sizeof *vals);
		}
		s->names = names;
		s->lens = lens;
		s->vals = vals;
		s->cap = cap;
	}
	s->names[s->n] = name;
	s->lens[s->n] = n;
	s->vals[s->n] = v;
	s->n++;
	return 0;
}

static tmpl_val lookup(tmpl_ctx *c, const char *name, size_t n)
{
	for (tmpl_scope *s = c->scope; s; s = s->up)
		for (int i = s->n - 1; i >= 0; i--)
			if (s->lens[i] == n && !memcmp(s->names[i], name, n))
				return s->vals[i];
	return tv_undef_named(name, n);
}

/* ---- output ---- */

static int emit(tmpl_ctx *c, const tmpl_node *at, const char *s, size_t n)
{
	if (n > c->out_limit - c->out.n) {
		tmpl_fail(c, at, "rendered prompt exceeds %zu bytes", c->out_limit);
		return -1;
	}
	if (sl_buf_put(&c->out, s, n)) {
		tmpl_fail(c, at, "out of memory");
		return -1;
	}
	return 0;
}

/* Python slice semantics: obj[start:stop:step] on lists, tuples, strings. */
static tmpl_val eval_slice(tmpl_ctx *c, const tmpl_node *e)
{
	tmpl_val obj = tmpl_eval(c, e->a), part[3];
	int64_t len, idx[3];
	for (int i = 0; i < 3; i++) {
		part[i] = e->v[i] ? tmpl_eval(c, e->v[i]) : tv_none();
		if (c->failed)
			return tv_undef(NULL);
		if (part[i].k != V_NONE && !tv_is_int(&part[i])) {
			tmpl_fail(c, e, "slice indices must be integers or None");
			return tv_undef(NULL);
		}
		idx[i] = part[i].u.i;
	}
	if (obj.k == V_UNDEF)
		return tmpl_fail_undefined(c, e, &obj);
	if (obj.k == V_LIST)
		len = obj.u.l->n;
	else if (obj.k == V_STR)
		len = (int64_t)tmpl_utf8_count(obj.u.s.p, obj.u.s.n);
	else
		return tv_undef(NULL);  /* unhashable slice: Jinja gives undefined */
	int64_t step = part[2].k == V_NONE ? 1 : idx[2];
	if (step == 0) {
		tmpl_fail(c, e, "slice step cannot be zero");
		return tv_undef(NULL);
	}
	int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? len - 1 : len;
	int64_t start = step < 0 ? hi : lo, stop = step < 0 ? lo : hi;
	for (int i = 0; i < 2; i++) {
		if (part[i].k == V_NONE)
			continue;
		int64_t x = idx[i];
		if (x < 0) {
			x += len;
			if (x < lo)
				x = lo;
		} else if (x > hi) {
			x = hi;
		}
		if (i == 0)
			start = x;
		else
			stop = x;
	}
	int64_t count = 0;
	if (step > 0 && start < stop)
		count = (stop - start + step - 1) / step;
	else if (step < 0 && start > stop)
		count = (start - stop - step - 1) / -step;
	if (obj.k == V_LIST) {
		tmpl_list *l = tl_new(c, (int)count);
		if (!l) {
			tmpl_fail_oom(c, e);
			return tv_undef(NULL);
		}
		l->tuple = obj.u.l->tuple;
		for (int64_t k = 0; k < count; k++)
			l->it[k] = obj.u.l->it[start + k * step];
		tmpl_val r = {.k = V_LIST};
		r.u.l = l;
		return r;
	}
	const tmpl_list *chars = tv_iter_list(c, e, &obj);
	sl_buf b;
	if (!chars)
		return tv_undef(NULL);
	sb_init(&b, c);
	for (int64_t k = 0; k < count; k++) {
		const tmpl_val *ch = &chars->it[start + k * step];
		sl_buf_put(&b, ch->u.s.p, ch->u.s.n);
	}
	if (b.failed) {
		tmpl_fail_oom(c, e);
		return tv_undef(NULL);
	}
	return sb_val(&b);
}

/* ---- operators ---- */

static tmpl_val type_error(tmpl_ctx *c, const tmpl_node *e, const char *op, const tmpl_val *a,
			   const tmpl_val *b)
{
	if (a->k == V_UNDEF)
		return tmpl_fail_undefined(c, e, a);
	if (b->k == V_UNDEF)
		return tmpl_fail_undefined(c, e, b);
	if (a->k == V_STR && !strcmp(op, "+"))
		tmpl_fail(c, e, "can only concatenate str (not \"%s\") to str", tv_type_name(b));
	else
		tmpl_fail(c, e, "unsupported operand type(s) for %s: '%s' and '%s'", op,
			  tv_type_name(a), tv_type_name(b));
	return tv_undef(NULL);
}

static tmpl_val repeat(tmpl_ctx *c, const tmpl_node *e, const tmpl_val *s, int64_t k)
{
	if (k < 0)
		k = 0;
	if (s->k == V_STR) {
		if (s->u.s.n && (uint64_t)k > c->out_limit / s->u.s.n) {
			tmpl_fail(c, e, "string repetition too large");
			return tv_undef(NULL);
		}
		sl_buf b;
		sb_init(&b, c);
		for (int64_t i = 0; s->u.s.n && i < k; i++) /* '' * k is '' at once */
			sl_buf_put(&b, s->u.s.p, s->u.s.n);
		if (b.failed) {
			tmpl_fail_oom(c, e);
			return tv_undef(NULL);
		}
		return sb_val(&b);
	}
	const tmpl_list *src = s->u.l;
	if (src->n && k > (INT32_MAX / 2) / src->n) {
		tmpl_fail(c, e, "list repetition too large");
		return tv_undef(NULL);
	}
	tmpl_list *l = tl_new(c, (int)(src->n * k));
	if (!l) {
		tmpl_fail_oom(c, e);
		return tv_undef(NULL);
	}
	l->tuple = src->tuple;
	for (int64_t i = 0; src->n && i < k; i++) /* an empty list has no items array */
		memcpy(l->it + i * src->n, src->it, (size_t)src->n * sizeof *l->it);
	tmpl_val r = {.k = V_LIST};
	r.u.l = l;
	return r;
}

static tmpl_val eval_binop(tmpl_ctx *c, const tmpl_node *e)
{
	tmpl_val a = tmpl_eval(c, e->a);
	if (c->failed)
		return a;
	tmpl_val b = tmpl_eval(c, e->b);
	if (c->failed)
		return b;
	int ints = tv_is_int(&a) && tv_is_int(&b);
	int64_t r;
	switch (e->op) {
	case OP_ADD:
		if (ints) {
			if (__builtin_add_overflow(a.u.i, b.u.i, &r))
				break;
			return tv_int(r);
		}
		if (a.k == V_STR && b.k == V_STR) {
			char *p = tmpl_alloc(&c->arena, a.u.s.n + b.u.s.n + 1);
			if (!p) {
				tmpl_fail_oom(c, e);
				return tv_undef(NULL);
			}
			/* an empty operand may have no buffer: memcpy wants one */
			if (a.u.s.n)
				memcpy(p, a.u.s.p, a.u.s.n);
			if (b.u.s.n)
				memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
			return tv_str(p, a.u.s.n + b.u.s.n);
		}
		if (a.k == V_LIST && b.k == V_LIST && a.u.l->tuple == b.u.l->tuple) {
			tmpl_list *l = tl_new(c, a.u.l->n + b.u.l->n);
			if (!l) {
				tmpl_fail_oom(c, e);
				return tv_undef(NULL);
			}
			l->tuple = a.u.l->tuple;
			if (a.u.l->n) /* an empty list has no items array (nor, then, l) */
				memcpy(l->it, a.u.l->it, (size_t)a.u.l->n * sizeof *l->it);
			if (b.u.l->n)
				memcpy(l->it + a.u.l->n, b.u.l->it, (size_t)b.u.l->n * sizeof *l->it);
			tmpl_val v = {.k = V_LIST};
			v.u.l = l;
			return v;
		}
		return type_error(c, e, "+", &a, &b);
	case OP_SUB:
		if (!ints)
			return type_error(c, e, "-", &a, &b);
		if (__builtin_sub_overflow(a.u.i, b.u.i, &r))
			break;
		return tv_int(r);
	case OP_MUL:
		if (ints) {
			if (__builtin_mul_overflow(a.u.i, b.u.i, &r))
				break;
			return tv_int(r);
		}
		if ((a.k == V_STR || a.k == V_LIST) && tv_is_int(&b))
			return repeat(c, e, &a, b.u.i);
		if ((b.k == V_STR || b.k == V_LIST) && tv_is_int(&a))
			return repeat(c, e, &b, a.u.i);
		return type_error(c, e, "*", &a, &b);
	case OP_FLOORDIV:
	case OP_MOD:
		if (!ints) {
			if (e->op == OP_MOD && a.k == V_STR) {
				tmpl_fail(c, e, "unsupported construct: '%%' string formatting");
				return tv_undef(NULL);
			}
			return type_error(c, e, e->op == OP_MOD ? "%" : "//", &a, &b);
		}
		if (b.u.i == 0) {
			tmpl_fail(c, e, "integer division or modulo by zero");
			return tv_undef(NULL);
		}
		if (a.u.i == INT64_MIN && b.u.i == -1)
			break;
		{
			int64_t q = a.u.i / b.u.i, m = a.u.i % b.u.i;
			if (m && ((m < 0) != (b.u.i < 0))) {  /* Python floors */
				q -= 1;
				m += b.u.i;
			}
			return tv_int(e->op == OP_MOD ? m : q);
		}
	}
	tmpl_fail(c, e, "integer overflow");
	return tv_undef(NULL);
}

static tmpl_val eval_compare(tmpl_ctx *c, const tmpl_node *e)
{
	tmpl_val left = tmpl_eval(c, e->a);
	for (int i = 0; i < e->nv && !c->failed; i++) {
		tmpl_val right = tmpl_eval(c, e->v[i]);
		if (c->failed)
			break;
		int r = tmpl_compare(c, e, e->cmpops[i], &left, &right);
		if (r <= 0)
			return tv_bool(0);
		left = right;
	}
	return c->failed ? tv_undef(NULL) : tv_bool(1);
}

/* ---- calls ---- */

static int eval_args(tmpl_ctx *c, const tmpl_node *e, tmpl_args *a)
{
	memset(a, 0, sizeof *a);
	if (!e->nv)
		return 0;
	a->v = tmpl_alloc(&c->arena, (size_t)e->nv * sizeof *a->v);
	a->kw = tmpl_alloc(&c->arena, (size_t)e->nv * sizeof *a->kw);
	a->kwn = tmpl_alloc(&c->arena, (size_t)e->nv * sizeof *a->kwn);
	a->kwl = tmpl_alloc(&c->arena, (size_t)e->nv * sizeof *a->kwl);
	if (!a->v || !a->kw || !a->kwn || !a->kwl) {
		tmpl_fail_oom(c, e);
		return -1;
	}
	for (int i = 0; i < e->nv; i++) {
		const tmpl_node *x = e->v[i];
		if (x->kind == N_KWARG) {
			a->kwn[a->nkw] = x->s;
			a->kwl[a->nkw] = x->n;
			a->kw[a->nkw++] = tmpl_eval(c, x->a);
		} else {
			a->v[a->n++] = tmpl_eval(c, x);
		}
		if (c->failed)
			return -1;
	}
	return 0;
}

static tmpl_val make_seq(tmpl_ctx *c, const tmpl_node *e, int tuple)
{
	tmpl_list *l = tl_new(c, e->nv);
	tmpl_val r = {.k = V_LIST};
	if (!l) {
		tmpl_fail_oom(c, e);
		return tv_undef(NULL);
	}
	l->tuple = tuple;
	for (int i = 0; i < e->nv && !c->failed; i++)
		l->it[i] = tmpl_eval(c, e->v[i]);
	r.u.l = l;
	return r;
}

static tmpl_val make_dict(tmpl_ctx *c, const tmpl_node *e)
{
	tmpl_dict *d = td_new(c, e->nv / 2);
	tmpl_val r = {.k = V_DICT};
	if (!d) {
		tmpl_fail_oom(c, e);
		return tv_undef(NULL);
	}
	for (int i = 0; i + 1 < e->nv && !c->failed; i += 2) {
		tmpl_val k = tmpl_eval(c, e->v[i]), v = tmpl_eval(c, e->v[i + 1]);
		if (c->failed)
			break;
		if (k.k == V_LIST && !k.u.l->tuple) {
			tmpl_fail(c, e, "unhashable type: 'list'");
			break;
		}
		if (k.k == V_DICT || k.k == V_UNDEF) {
			tmpl_fail(c, e, "unhashable type: '%s'", tv_type_name(&k));
			break;
		}
		if (td_set(c, d, k, v)) {
			tmpl_fail_oom(c, e);
			break;
		}
	}
	r.u.d = d;
	return r;
}

static tmpl_val eval_concat(tmpl_ctx *c, const tmpl_node *e)
{
	sl_buf b;
	sb_init(&b, c);
	for (int i = 0; i < e->nv; i++) {
		tmpl_val v = tmpl_eval(c, e->v[i]);
		if (c->failed)
			return v;
		tv_str_into(&b, &v);
	}
	if (b.failed) {
		tmpl_fail_oom(c, e);
		return tv_undef(NULL);
	}
	return sb_val(&b);
}

tmpl_val tmpl_eval(tmpl_ctx *c, const tmpl_node *e)
{
	tmpl_val a, r;
	tmpl_args args;
	if (c->failed)
		return tv_undef(NULL);
	switch (e->kind) {
	case N_CONST: return e->val;
	case N_NAME: return lookup(c, e->s, e->n);
	case N_GETATTR:
		a = tmpl_eval(c, e->a);
		return c->failed ? a : tmpl_getattr(c, e, a, e->s, e->n);
	case N_GETITEM: {
		a = tmpl_eval(c, e->a);
		tmpl_val k = tmpl_eval(c, e->b);
		return c->failed ? a : tmpl_getitem(c, e, a, k);
	}
	case N_SLICE: return eval_slice(c, e);
	case N_CALL:
		a = tmpl_eval(c, e->a);
		if (c->failed || eval_args(c, e, &args))
			return tv_undef(NULL);
		return tmpl_call(c, e, a, &args);
	case N_FILTER:
		a = tmpl_eval(c, e->a);
		if (c->failed || eval_args(c, e, &args))
			return tv_undef(NULL);
		return tmpl_apply_filter(c, e, e->fn, a, &args);
	case N_TEST: {
		a = tmpl_eval(c, e->a);
		if (c->failed || eval_args(c, e, &args))
			return tv_undef(NULL);
		int t = tmpl_apply_test(c, e, e->fn, a, &args);
		return c->failed ? tv_undef(NULL) : tv_bool(e->op ? !t : t);
	}
	case N_BINOP: return eval_binop(c, e);
	case N_NEG:
	case N_POS:
		a = tmpl_eval(c, e->a);
		if (c->failed)
			return a;
		if (!tv_is_int(&a)) {
			if (a.k == V_UNDEF)
				return tmpl_fail_undefined(c, e, &a);
			tmpl_fail(c, e, "bad operand type for unary %c: '%s'",
				  e->kind == N_NEG ? '-' : '+', tv_type_name(&a));
			return tv_undef(NULL);
		}
		if (e->kind == N_POS)
			return tv_int(a.u.i);
		if (a.u.i == INT64_MIN) {
			tmpl_fail(c, e, "integer overflow");
			return tv_undef(NULL);
		}
		return tv_int(-a.u.i);
	case N_NOT:
		a = tmpl_eval(c, e->a);
		return c->failed ? a : tv_bool(!tv_truthy(&a));
	case N_AND:
		a = tmpl_eval(c, e->a);
		return c->failed || !tv_truthy(&a) ? a : tmpl_eval(c, e->b);
	case N_OR:
		a = tmpl_eval(c, e->a);
		return c->failed || tv_truthy(&a) ? a : tmpl_eval(c, e->b);
	case N_COMPARE: return eval_compare(c, e);
	case N_CONDEXPR:
		a = tmpl_eval(c, e->b);
		if (c->failed)
			return a;
		if (tv_truthy(&a))
			return tmpl_eval(c, e->a);
		return e->c ? tmpl_eval(c, e->c) : tv_undef(NULL);
	case N_LIST: return make_seq(c, e, 0);
	case N_TUPLE: return make_seq(c, e, 1);
	case N_DICT: return make_dict(c, e);
	case N_CONCAT: return eval_concat(c, e);
	}
	tmpl_fail(c, e, "internal error: node kind %d is not an expression", e->kind);
	r = tv_undef(NULL);
	return r;
}

/* ---- statements ---- */

static int exec_list(tmpl_ctx *c, const tmpl_node *s);

/* Binds assignment targets (names) to v, unpacking when there are several. */
static int bind(tmpl_ctx *c, const tmpl_node *at, tmpl_node **targets, int n, tmpl_val v)
{
	if (n == 1)
		return tmpl_scope_set(c, targets[0]->s, targets[0]->n, v) ? (tmpl_fail_oom(c, at), -1)
									   : 0;
	const tmpl_list *items = tv_iter_list(c, at, &v);
	if (!items)
		return -1;
	if (items->n != n) {
		tmpl_fail(c, at, items->n > n ? "too many values to unpack (expected %d)"
					      : "not enough values to unpack (expected %d, got %d)",
			  n, items->n);
		return -1;
	}
	for (int i = 0; i < n; i++)
		if (tmpl_scope_set(c, targets[i]->s, targets[i]->n, items->it[i])) {
			tmpl_fail_oom(c, at);
			return -1;
		}
	return 0;
}

static int exec_set(tmpl_ctx *c, const tmpl_node *s)
{
	tmpl_val v = tmpl_eval(c, s->a);
	if (c->failed)
		return EXEC_FAIL;
	const tmpl_node *t = s->v[0];
	if (t->kind == N_GETATTR) {
		tmpl_val ns = lookup(c, t->a->s, t->a->n);
		if (ns.k != V_NS) {
			tmpl_fail(c, s, "cannot assign attribute on non-namespace object");
			return EXEC_FAIL;
		}
		if (t->n && t->s[0] == '_') {
			tmpl_fail(c, s, "cannot store underscore-prefixed attribute '%.*s' on a namespace",
				  (int)t->n, t->s);
			return EXEC_FAIL;
		}
		if (td_set(c, ns.u.d, tv_str(t->s, t->n), v)) {
			tmpl_fail_oom(c, s);
			return EXEC_FAIL;
		}
		return EXEC_OK;
	}
	return bind(c, s, s->v, s->nv, v) ? EXEC_FAIL : EXEC_OK;
}

static int exec_for(tmpl_ctx *c, const tmpl_node *s)
{
	tmpl_val it = tmpl_eval(c, s->a);
	if (c->failed)
		return EXEC_FAIL;
	const tmpl_list *items = tv_iter_list(c, s->a, &it);
	if (!items)
		return EXEC_FAIL;
	if (s->b) {  /* {% for x in xs if cond %}: loop.* counts what passes */
		tmpl_list *kept = tl_new(c, items->n);
		if (!kept) {
			tmpl_fail_oom(c, s);
			return EXEC_FAIL;
		}
		kept->n = 0;
		for (int i = 0; i < items->n; i++) {
			if (tmpl_count_step(c, s) || tmpl_scope_push(c))
				return c->failed ? EXEC_FAIL : (tmpl_fail_oom(c, s), EXEC_FAIL);
			int bad = bind(c, s, s->v, s->nv, items->it[i]);
			tmpl_val keep = bad ? tv_undef(NULL) : tmpl_eval(c, s->b);
			scope_pop(c);
			if (c->failed)
				return EXEC_FAIL;
			if (tv_truthy(&keep))
				kept->it[kept->n++] = items->it[i];
		}
		items = kept;
	}
	if (!items->n)
		return s->orelse ? exec_list(c, s->orelse) : EXEC_OK;
	tmpl_loop *lp = tmpl_alloc(&c->arena, sizeof *lp);
	if (!lp) {
		tmpl_fail_oom(c, s);
		return EXEC_FAIL;
	}
	lp->length = items->n;
	lp->items = items;
	tmpl_val loopv = {.k = V_LOOP};
	loopv.u.lp = lp;
	for (int i = 0; i < items->n; i++) {
		if (tmpl_count_step(c, s))
			return EXEC_FAIL;
		if (tmpl_scope_push(c)) {
			tmpl_fail_oom(c, s);
			return EXEC_FAIL;
		}
		/* A nested loop rebinds `loop` in its own scope; this iteration's
		 * object stays valid because each loop allocates its own. */
		lp->index0 = i;
		int rc = bind(c, s, s->v, s->nv, items->it[i]);
		if (!rc && tmpl_scope_set(c, "loop", 4, loopv)) {
			tmpl_fail_oom(c, s);
			rc = -1;
		}
		if (!rc)
			rc = exec_list(c, s->body);
		scope_pop(c);
		if (rc == EXEC_FAIL || c->failed)
			return EXEC_FAIL;
		if (rc == EXEC_BREAK)
			break;
	}
	return EXEC_OK;
}

static int exec_stmt(tmpl_ctx *c, const tmpl_node *s)
{
	tmpl_val v;
	int rc;
	if (tmpl_count_step(c, s))
		return EXEC_FAIL;
	switch (s->kind) {
	case N_DATA:
		return emit(c, s, s->s, s->n) ? EXEC_FAIL : EXEC_OK;
	case N_OUTPUT: {
		v = tmpl_eval(c, s->a);
		if (c->failed)
			return EXEC_FAIL;
		if (v.k == V_STR)
			return emit(c, s, v.u.s.p, v.u.s.n) ? EXEC_FAIL : EXEC_OK;
		sl_buf b;
		sb_init(&b, c);
		tv_str_into(&b, &v);
		if (b.failed) {
			tmpl_fail_oom(c, s);
			return EXEC_FAIL;
		}
		return emit(c, s, b.p, b.n) ? EXEC_FAIL : EXEC_OK;
	}
	case N_IF:
		v = tmpl_eval(c, s->a);
		if (c->failed)
			return EXEC_FAIL;
		return exec_list(c, tv_truthy(&v) ? s->body : s->orelse);
	case N_FOR: return exec_for(c, s);
	case N_SET: return exec_set(c, s);
	case N_BREAK: return EXEC_BREAK;
	case N_CONTINUE: return EXEC_CONTINUE;
	case N_SCOPE:
		if (tmpl_scope_push(c)) {
			tmpl_fail_oom(c, s);
			return EXEC_FAIL;
		}
		rc = exec_list(c, s->body);
		scope_pop(c);
		return rc;
	}
	tmpl_fail(c, s, "internal error: node kind %d is not a statement", s->kind);
	return EXEC_FAIL;
}

static int exec_list(tmpl_ctx *c, const tmpl_node *s)
{
	for (; s; s = s->next) {
		int rc = exec_stmt(c, s);
		if (rc != EXEC_OK)
			return rc;
	}
	return EXEC_OK;
}

void tmpl_exec(tmpl_ctx *c, const tmpl_node *root)
{
	exec_list(c, root);  /* break/continue outside a loop are refused at compile time */
}
