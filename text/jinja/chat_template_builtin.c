/*
 * chat_template_builtin.c — the filters, tests, methods and global functions
 * a chat template may call, each as Jinja2 3.1 / Python 3 / transformers
 * define them (tojson is transformers' json.dumps(ensure_ascii=False)
 * override; raise_exception ends the render with the template's message;
 * namespace() refuses underscore names like transformers' TemplateNamespace;
 * range() stops at Jinja's sandbox limit of 100000 items).  Their names,
 * ids and argument counts are chat_template_names.c's tables, which the
 * parser resolves at compile time; this file implements them, on the value
 * operations of chat_template_value.c, for the evaluator to call.  Case
 * mapping (upper, lower, title, capitalize) is ASCII-only: other characters
 * pass through unchanged.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "text/jinja/chat_template_int.h"
#include "common/sl.h"

#define SANDBOX_MAX_RANGE 100000

/* ---- argument helpers ---- */

static int kw_is(const tmpl_args *a, int i, const char *name)
{
	return a->kwl[i] == strlen(name) && !memcmp(a->kwn[i], name, a->kwl[i]);
}

/* Positional argument i, else keyword `name`, else NULL. */
static const tmpl_val *arg(const tmpl_args *a, int i, const char *name)
{
	if (i >= 0 && i < a->n)
		return &a->v[i];
	for (int k = 0; name && k < a->nkw; k++)
		if (kw_is(a, k, name))
			return &a->kw[k];
	return NULL;
}

/* Fails on keywords outside `allowed` (NULL-terminated). */
static int check_kw(tmpl_ctx *c, const tmpl_node *at, const tmpl_args *a, const char *what,
		    const char *const *allowed)
{
	for (int k = 0; k < a->nkw; k++) {
		int ok = 0;
		for (int j = 0; allowed && allowed[j]; j++)
			ok |= kw_is(a, k, allowed[j]);
		if (!ok) {
			tmpl_fail(c, at, "%s got an unexpected keyword argument '%.*s'", what,
				  (int)a->kwl[k], a->kwn[k]);
			return -1;
		}
	}
	return 0;
}

static tmpl_val oomv(tmpl_ctx *c, const tmpl_node *at)
{
	tmpl_fail_oom(c, at);
	return tv_undef(NULL);
}

static tmpl_val list_val(tmpl_list *l)
{
	tmpl_val v = {.k = V_LIST};
	v.u.l = l;
	return v;
}

static tmpl_val want_str(tmpl_ctx *c, const tmpl_node *at, const tmpl_val *v, const char *what)
{
	if (v->k == V_STR)
		return *v;
	tmpl_fail(c, at, "%s must be a string, not '%s'", what, tv_type_name(v));
	return tv_undef(NULL);
}

static tmpl_val sb_done(tmpl_ctx *c, const tmpl_node *at, sl_buf *b)
{
	return b->failed ? oomv(c, at) : sb_val(b);
}

/* ---- strings ---- */

static char up(char ch)
{
	return ch >= 'a' && ch <= 'z' ? (char)(ch - 32) : ch;
}

static char low(char ch)
{
	return ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
}

static int cased(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_PY_TITLE, CASE_JINJA_TITLE };

static tmpl_val map_case(tmpl_ctx *c, const tmpl_node *at, tmpl_val s, int mode)
{
	char *o = tmpl_alloc(&c->arena, s.u.s.n + 1);
	if (!o)
		return oomv(c, at);
	int prev_cased = 0, word_start = 1;
	for (size_t i = 0; i < s.u.s.n;) {
		char ch = s.u.s.p[i];
		size_t w = 1;
		if ((unsigned char)ch >= 0x80) {  /* copied as is, but it is a character */
			int space = py_isspace_at(s.u.s.p, s.u.s.n, i, &w);
			memcpy(o + i, s.u.s.p + i, w);
			word_start = mode == CASE_JINJA_TITLE && space;
			prev_cased = !space;  /* most such characters are letters */
			i += w;
			continue;
		}
		switch (mode) {
		case CASE_UPPER: o[i] = up(ch); break;
		case CASE_LOWER: o[i] = low(ch); break;
		case CASE_CAPITALIZE: o[i] = i ? low(ch) : up(ch); break;
		case CASE_PY_TITLE:
			o[i] = cased(ch) ? (prev_cased ? low(ch) : up(ch)) : ch;
			prev_cased = cased(ch);
			break;
		default: {  /* Jinja's title: words start after [-\s({\[<] runs */
			size_t cl;
			if (ch == '-' || ch == '(' || ch == '{' || ch == '[' || ch == '<' ||
			    py_isspace_at(s.u.s.p, s.u.s.n, i, &cl)) {
				o[i] = ch;
				word_start = 1;
			} else {
				o[i] = word_start ? up(ch) : low(ch);
				word_start = 0;
			}
		}
		}
		i += w;
	}
	return tv_str(o, s.u.s.n);
}

static tmpl_val do_strip(tmpl_ctx *c, const tmpl_node *at, tmpl_val s, const tmpl_val *chars,
			 int left, int right)
{
	size_t a, b;
	if (chars && chars->k != V_NONE) {
		if (want_str(c, at, chars, "strip characters").k != V_STR)
			return tv_undef(NULL);
		py_strip(s.u.s.p, s.u.s.n, left, right, chars->u.s.p, chars->u.s.n, &a, &b);
	} else {
		py_strip(s.u.s.p, s.u.s.n, left, right, NULL, 0, &a, &b);
	}
	return tv_str(s.u.s.p + a, b - a);
}

static tmpl_val do_replace(tmpl_ctx *c, const tmpl_node *at, tmpl_val s, const tmpl_args *a)
{
	tmpl_val old = want_str(c, at, &a->v[0], "replace() argument 1");
	tmpl_val new = c->failed ? old : want_str(c, at, &a->v[1], "replace() argument 2");
	const tmpl_val *cnt = arg(a, 2, "count");
	if (c->failed)
		return tv_undef(NULL);
	int64_t left = cnt && cnt->k != V_NONE && tv_is_int(cnt) ? cnt->u.i : -1;
	sl_buf b;
	sb_init(&b, c);
	size_t i = 0;
	if (!old.u.s.n) {  /* Python inserts `new` around every character */
		while (i <= s.u.s.n) {
			if (left != 0) {
				sl_buf_put(&b, new.u.s.p, new.u.s.n);
				left--;
			}
			if (i == s.u.s.n)
				break;
			uint32_t cp;
			size_t w = tmpl_utf8_decode(s.u.s.p + i, s.u.s.n - i, &cp);
			sl_buf_put(&b, s.u.s.p + i, w);
			i += w;
		}
		return sb_done(c, at, &b);
	}
	while (i < s.u.s.n) {
		const char *hit = left ? memmem(s.u.s.p + i, s.u.s.n - i, old.u.s.p, old.u.s.n) : NULL;
		if (!hit)
			break;
		sl_buf_put(&b, s.u.s.p + i, (size_t)(hit - (s.u.s.p + i)));
		sl_buf_put(&b, new.u.s.p, new.u.s.n);
		i = (size_t)(hit - s.u.s.p) + old.u.s.n;
		left--;
	}
	sl_buf_put(&b, s.u.s.p + i, s.u.s.n - i);
	return sb_done(c, at, &b);
}

static int list_push(tmpl_ctx *c, tmpl_list *l, int *cap, tmpl_val v)
{
	if (l->n == *cap) {
		int nc = *cap ? *cap * 2 : 8;
		tmpl_val *it = tmpl_alloc(&c->arena, (size_t)nc * sizeof *it);
		if (!it)
			return -1;
		if (l->n)
			memcpy(it, l->it, (size_t)l->n * sizeof *it);
		l->it = it;
		*cap = nc;
	}
	l->it[l->n++] = v;
	return 0;
}

static tmpl_val do_split(tmpl_ctx *c, const tmpl_node *at, tmpl_val s, const tmpl_args *a)
{
	const tmpl_val *sep = arg(a, 0, "sep"), *maxv = arg(a, 1, "maxsplit");
	int64_t max = maxv && tv_is_int(maxv) ? maxv->u.i : -1;
	tmpl_list *l = tl_new(c, 0);
	int cap = 0;
	const char *p = s.u.s.p;
	size_t n = s.u.s.n, i = 0, cl;
	if (!l)
		return oomv(c, at);
	if (!sep || sep->k == V_NONE) {
		for (;;) {
			while (i < n && py_isspace_at(p, n, i, &cl))
				i += cl;
			if (i >= n)
				break;
			size_t j = i;
			if (max-- == 0) {  /* the rest, trailing whitespace kept */
				if (list_push(c, l, &cap, tv_str(p + i, n - i)))
					return oomv(c, at);
				break;
			}
			while (j < n && !py_isspace_at(p, n, j, &cl))
				j += cl;
			if (list_push(c, l, &cap, tv_str(p + i, j - i)))
				return oomv(c, at);
			i = j;
		}
		return list_val(l);
	}
	if (want_str(c, at, sep, "split() separator").k != V_STR)
		return tv_undef(NULL);
	if (!sep->u.s.n) {
		tmpl_fail(c, at, "empty separator");
		return tv_undef(NULL);
	}
	for (;;) {
		const char *hit = max != 0 ? memmem(p + i, n - i, sep->u.s.p, sep->u.s.n) : NULL;
		size_t end = hit ? (size_t)(hit - p) : n;
		if (list_push(c, l, &cap, tv_str(p + i, end - i)))
			return oomv(c, at);
		if (!hit)
			break;
		i = end + sep->u.s.n;
		max--;
	}
	return list_val(l);
}

static tmpl_val do_affix(tmpl_ctx *c, const tmpl_node *at, tmpl_val s, const tmpl_val *x,
			 int suffix)
{
	const tmpl_val *cands = x;
	int n = 1;
	if (x->k == V_LIST && x->u.l->tuple) {
		cands = x->u.l->it;
		n = x->u.l->n;
	}
	for (int i = 0; i < n; i++) {
		if (cands[i].k != V_STR) {
			tmpl_fail(c, at, "%s first arg must be str or a tuple of str, not %s",
				  suffix ? "endswith" : "startswith", tv_type_name(&cands[i]));
			return tv_undef(NULL);
		}
		size_t k = cands[i].u.s.n;
		if (k <= s.u.s.n &&
		    !memcmp(s.u.s.p + (suffix ? s.u.s.n - k : 0), cands[i].u.s.p, k))
			return tv_bool(1);
	}
	return tv_bool(0);
}

/* str.join: every item must be a string. */
static tmpl_val do_str_join(tmpl_ctx *c, const tmpl_node *at, tmpl_val sep, const tmpl_val *x)
{
	const tmpl_list *l = tv_iter_list(c, at, x);
	sl_buf b;
	if (!l)
		return tv_undef(NULL);
	sb_init(&b, c);
	for (int i = 0; i < l->n; i++) {
		if (l->it[i].k != V_STR) {
			tmpl_fail(c, at, "sequence item %d: expected str instance, %s found", i,
				  tv_type_name(&l->it[i]));
			return tv_undef(NULL);
		}
		if (i)
			sl_buf_put(&b, sep.u.s.p, sep.u.s.n);
		sl_buf_put(&b, l->it[i].u.s.p, l->it[i].u.s.n);
	}
	return sb_done(c, at, &b);
}

/* ---- containers ---- */

static tmpl_val dict_items(tmpl_ctx *c, const tmpl_node *at, const tmpl_dict *d, int what)
{
	tmpl_list *l = tl_new(c, d->n);
	if (!l)
		return oomv(c, at);
	for (int i = 0; i < d->n; i++) {
		if (what == M_KEYS) {
			l->it[i] = d->keys[i];
		} else if (what == M_VALUES) {
			l->it[i] = d->vals[i];
		} else {
			tmpl_list *pair = tl_new(c, 2);
			if (!pair)
				return oomv(c, at);
			pair->tuple = 1;
			pair->it[0] = d->keys[i];
			pair->it[1] = d->vals[i];
			l->it[i] = list_val(pair);
		}
	}
	return list_val(l);
}

static int64_t length_of(tmpl_ctx *c, const tmpl_node *at, const tmpl_val *x)
{
	switch (x->k) {
	case V_STR: return (int64_t)tmpl_utf8_count(x->u.s.p, x->u.s.n);
	case V_LIST: return x->u.l->n;
	case V_DICT: return x->u.d->n;
	case V_UNDEF: return 0;
	default:
		tmpl_fail(c, at, "object of type '%s' has no len()", tv_type_name(x));
		return -1;
	}
}

/* Jinja's attribute getter: "a.b.0" walks items and attributes. */
static tmpl_val attr_path(tmpl_ctx *c, const tmpl_node *at, tmpl_val item, const tmpl_val *path)
{
	size_t i = 0, n = path->u.s.n;
	const char *p = path->u.s.p;
	while (i <= n && !c->failed) {
		size_t j = i;
		while (j < n && p[j] != '.')
			j++;
		tmpl_val key = tv_str(p + i, j - i);
		int digits = j > i;
		int64_t num = 0;
		for (size_t k = i; k < j && digits; k++) {
			digits = p[k] >= '0' && p[k] <= '9';
			num = num * 10 + (p[k] - '0');
		}
		item = tmpl_getitem(c, at, item, digits && j - i < 18 ? tv_int(num) : key);
		i = j + 1;
	}
	return item;
}

/* select / reject / selectattr / rejectattr. */
static tmpl_val do_select(tmpl_ctx *c, const tmpl_node *at, tmpl_val x, const tmpl_args *a,
			  int attr, int keep_if)
{
	const tmpl_list *items = tv_iter_list(c, at, &x);
	int first = attr ? 1 : 0;
	if (!items)
		return tv_undef(NULL);
	if (attr && a->v[0].k != V_STR) {
		tmpl_fail(c, at, "attribute name must be a string");
		return tv_undef(NULL);
	}
	int test = 0;
	if (a->n > first) {
		if (a->v[first].k != V_STR ||
		    !(test = tmpl_test_id(a->v[first].u.s.p, a->v[first].u.s.n))) {
			sl_buf b;
			sb_init(&b, c);
			tv_str_into(&b, &a->v[first]);
			tmpl_fail(c, at, "no test named '%.*s'", (int)b.n, b.p ? b.p : "");
			return tv_undef(NULL);
		}
	}
	tmpl_args targs = {.n = a->n > first + 1 ? a->n - first - 1 : 0};
	targs.v = targs.n ? a->v + first + 1 : NULL; /* a filter without arguments has no a->v */
	int min, max;
	if (test) {
		tmpl_test_arity(test, &min, &max);
		if (targs.n < min || (max >= 0 && targs.n > max)) {
			tmpl_fail(c, at, "test '%.*s' takes %d argument(s), got %d",
				  (int)a->v[first].u.s.n, a->v[first].u.s.p, min, targs.n);
			return tv_undef(NULL);
		}
	}
	tmpl_list *out = tl_new(c, items->n);
	if (!out)
		return oomv(c, at);
	out->n = 0;
	for (int i = 0; i < items->n && !c->failed; i++) {
		tmpl_val v = attr ? attr_path(c, at, items->it[i], &a->v[0]) : items->it[i];
		if (c->failed)
			break;
		int r = test ? tmpl_apply_test(c, at, test, v, &targs) : tv_truthy(&v);
		if (!c->failed && r == keep_if)
			out->it[out->n++] = items->it[i];
	}
	return c->failed ? tv_undef(NULL) : list_val(out);
}

static tmpl_val do_map(tmpl_ctx *c, const tmpl_node *at, tmpl_val x, const tmpl_args *a)
{
	const tmpl_list *items = tv_iter_list(c, at, &x);
	const tmpl_val *attr = arg(a, -1, "attribute"), *dflt = arg(a, -1, "default");
	int filter = 0;
	if (!items)
		return tv_undef(NULL);
	if (!attr) {
		if (a->n < 1 || a->v[0].k != V_STR ||
		    !(filter = tmpl_filter_id(a->v[0].u.s.p, a->v[0].u.s.n)) || a->nkw) {
			tmpl_fail(c, at, "map() needs attribute= or the name of a supported filter");
			return tv_undef(NULL);
		}
	} else if (attr->k != V_STR || a->n) {
		tmpl_fail(c, at, "map(attribute=...) needs a string attribute and no positional "
				 "arguments");
		return tv_undef(NULL);
	}
	tmpl_args fargs = {.n = a->n > 0 ? a->n - 1 : 0};
	fargs.v = a->v + 1;
	tmpl_list *out = tl_new(c, items->n);
	if (!out)
		return oomv(c, at);
	for (int i = 0; i < items->n && !c->failed; i++) {
		if (filter) {
			out->it[i] = tmpl_apply_filter(c, at, filter, items->it[i], &fargs);
		} else {
			tmpl_val v = attr_path(c, at, items->it[i], attr);
			out->it[i] = v.k == V_UNDEF && dflt ? *dflt : v;
		}
	}
	return c->failed ? tv_undef(NULL) : list_val(out);
}

static tmpl_val do_int(tmpl_ctx *c, const tmpl_val *x, const tmpl_args *a)
{
	const tmpl_val *d = arg(a, 0, "default");
	tmpl_val dflt = d ? *d : tv_int(0);
	if (tv_is_int(x))
		return tv_int(x->u.i);
	if (x->k != V_STR)
		return dflt;
	size_t s, e;
	py_strip(x->u.s.p, x->u.s.n, 1, 1, NULL, 0, &s, &e);
	const char *p = x->u.s.p;
	int neg = 0, any = 0;
	if (s < e && (p[s] == '+' || p[s] == '-'))
		neg = p[s++] == '-';
	int64_t v = 0;
	for (; s < e; s++) {
		if (p[s] == '_' && any && s + 1 < e && p[s + 1] != '_')
			continue;
		if (p[s] == '.' && any) {  /* int(float("3.7")) truncates */
			for (s++; s < e && p[s] >= '0' && p[s] <= '9'; s++)
				;
			break;
		}
		if (p[s] < '0' || p[s] > '9' || v > (INT64_MAX - 9) / 10)
			return dflt;
		v = v * 10 + (p[s] - '0');
		any = 1;
	}
	(void)c;
	return any && s == e ? tv_int(neg ? -v : v) : dflt;
}

static tmpl_val do_tojson(tmpl_ctx *c, const tmpl_node *at, tmpl_val x, const tmpl_args *a)
{
	static const char *const kws[] = {"ensure_ascii", "indent", "separators", "sort_keys",
					   NULL};
	if (check_kw(c, at, a, "tojson()", kws))
		return tv_undef(NULL);
	const tmpl_val *ea = arg(a, 0, "ensure_ascii"), *ind = arg(a, -1, "indent"),
		       *sepv = arg(a, -1, "separators"), *sk = arg(a, -1, "sort_keys");
	if ((ea && tv_truthy(ea)) || (sepv && sepv->k != V_NONE)) {
		tmpl_fail(c, at, "unsupported construct: tojson with ensure_ascii or separators");
		return tv_undef(NULL);
	}
	int indent = -1;
	if (ind && ind->k != V_NONE) {
		if (!tv_is_int(ind) || ind->u.i < 0 || ind->u.i > 64) {
			tmpl_fail(c, at, "tojson indent must be an integer from 0 to 64");
			return tv_undef(NULL);
		}
		indent = (int)ind->u.i;
	}
	sl_buf b;
	const tmpl_val *bad = NULL;
	sb_init(&b, c);
	if (tv_json_into(&b, &x, indent, sk && tv_truthy(sk), 0, &bad)) {
		tmpl_fail(c, at, "Object of type %s is not JSON serializable", tv_type_name(bad));
		return tv_undef(NULL);
	}
	return sb_done(c, at, &b);
}

static tmpl_val first_last(tmpl_ctx *c, const tmpl_node *at, tmpl_val x, int last)
{
	const tmpl_list *l = tv_iter_list(c, at, &x);
	if (!l)
		return tv_undef(NULL);
	return l->n ? l->it[last ? l->n - 1 : 0] : tv_undef(NULL);
}

static tmpl_val do_reverse(tmpl_ctx *c, const tmpl_node *at, tmpl_val x)
{
	const tmpl_list *l = tv_iter_list(c, at, &x);
	if (!l)
		return tv_undef(NULL);
	if (x.k == V_STR) {
		sl_buf b;
		sb_init(&b, c);
		for (int i = l->n - 1; i >= 0; i--)
			sl_buf_put(&b, l->it[i].u.s.p, l->it[i].u.s.n);
		return sb_done(c, at, &b);
	}
	tmpl_list *r = tl_new(c, l->n);
	if (!r)
		return oomv(c, at);
	for (int i = 0; i < l->n; i++)
		r->it[i] = l->it[l->n - 1 - i];
	return list_val(r);
}

/* ---- filters ---- */

tmpl_val tmpl_apply_filter(tmpl_ctx *c, const tmpl_node *at, int id, tmpl_val x,
			   const tmpl_args *a)
{
	static const char *const no_kw[] = {NULL};
	static const char *const trim_kw[] = {"chars", NULL};
	static const char *const default_kw[] = {"default_value", "boolean", NULL};
	static const char *const join_kw[] = {"d", "attribute", NULL};
	static const char *const int_kw[] = {"default", "base", NULL};
	static const char *const replace_kw[] = {"count", NULL};
	const char *const *allowed = no_kw;
	switch (id) {
	case FILTER_TRIM: allowed = trim_kw; break;
	case FILTER_DEFAULT: allowed = default_kw; break;
	case FILTER_JOIN: allowed = join_kw; break;
	case FILTER_INT: allowed = int_kw; break;
	case FILTER_REPLACE: allowed = replace_kw; break;
	case FILTER_TOJSON:
	case FILTER_MAP:
	case FILTER_SELECT:
	case FILTER_REJECT:
	case FILTER_SELECTATTR:
	case FILTER_REJECTATTR: allowed = NULL; break;  /* checked where used */
	}
	if (allowed && check_kw(c, at, a, "filter", allowed))
		return tv_undef(NULL);
	tmpl_val s;
	int64_t n;
	switch (id) {
	case FILTER_TRIM:
		s = tv_to_str(c, &x);
		return s.k == V_STR ? do_strip(c, at, s, arg(a, 0, "chars"), 1, 1) : oomv(c, at);
	case FILTER_LENGTH:
		n = length_of(c, at, &x);
		return n < 0 ? tv_undef(NULL) : tv_int(n);
	case FILTER_UPPER:
	case FILTER_LOWER:
	case FILTER_CAPITALIZE:
	case FILTER_TITLE:
		s = tv_to_str(c, &x);
		if (s.k != V_STR)
			return oomv(c, at);
		return map_case(c, at, s,
				id == FILTER_UPPER	  ? CASE_UPPER
				: id == FILTER_LOWER	  ? CASE_LOWER
				: id == FILTER_CAPITALIZE ? CASE_CAPITALIZE
							  : CASE_JINJA_TITLE);
	case FILTER_DEFAULT: {
		const tmpl_val *d = arg(a, 0, "default_value"), *b = arg(a, 1, "boolean");
		int use = x.k == V_UNDEF || (b && tv_truthy(b) && !tv_truthy(&x));
		return use ? (d ? *d : tv_str("", 0)) : x;
	}
	case FILTER_JOIN: {
		const tmpl_val *d = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
		const tmpl_list *l = tv_iter_list(c, at, &x);
		sl_buf b;
		if (!l)
			return tv_undef(NULL);
		if (attr && attr->k != V_STR && attr->k != V_NONE) {
			tmpl_fail(c, at, "join attribute must be a string");
			return tv_undef(NULL);
		}
		sb_init(&b, c);
		for (int i = 0; i < l->n && !c->failed; i++) {
			if (i && d)
				tv_str_into(&b, d);
			tmpl_val v = attr && attr->k == V_STR ? attr_path(c, at, l->it[i], attr)
							      : l->it[i];
			tv_str_into(&b, &v);
		}
		return c->failed ? tv_undef(NULL) : sb_done(c, at, &b);
	}
	case FILTER_TOJSON: return do_tojson(c, at, x, a);
	case FILTER_FIRST: return first_last(c, at, x, 0);
	case FILTER_LAST: return first_last(c, at, x, 1);
	case FILTER_LIST: {
		const tmpl_list *l = tv_iter_list(c, at, &x);
		tmpl_list *r = l ? tl_new(c, l->n) : NULL;
		if (!l)
			return tv_undef(NULL);
		if (!r)
			return oomv(c, at);
		if (l->n)
			memcpy(r->it, l->it, (size_t)l->n * sizeof *r->it);
		return list_val(r);
	}
	case FILTER_STRING:
		s = tv_to_str(c, &x);
		return s.k == V_STR ? s : oomv(c, at);
	case FILTER_INT: return do_int(c, &x, a);
	case FILTER_REVERSE: return do_reverse(c, at, x);
	case FILTER_ITEMS:
		if (x.k == V_UNDEF) {
			tmpl_list *l = tl_new(c, 0);
			return l ? list_val(l) : oomv(c, at);
		}
		if (x.k != V_DICT) {
			tmpl_fail(c, at, "Can only get item pairs from a mapping.");
			return tv_undef(NULL);
		}
		return dict_items(c, at, x.u.d, M_ITEMS);
	case FILTER_SELECT:
	case FILTER_REJECT:
	case FILTER_SELECTATTR:
	case FILTER_REJECTATTR:
		if (check_kw(c, at, a, "filter", no_kw))
			return tv_undef(NULL);
		return do_select(c, at, x, a, id == FILTER_SELECTATTR || id == FILTER_REJECTATTR,
				 id == FILTER_SELECT || id == FILTER_SELECTATTR);
	case FILTER_MAP: return do_map(c, at, x, a);
	case FILTER_REPLACE:
		s = tv_to_str(c, &x);
		return s.k == V_STR ? do_replace(c, at, s, a) : oomv(c, at);
	case FILTER_SAFE: return x;
	case FILTER_ABS:
		if (!tv_is_int(&x) || x.u.i == INT64_MIN) {
			tmpl_fail(c, at, "bad operand type for abs(): '%s'", tv_type_name(&x));
			return tv_undef(NULL);
		}
		return tv_int(x.u.i < 0 ? -x.u.i : x.u.i);
	}
	tmpl_fail(c, at, "internal error: filter %d", id);
	return tv_undef(NULL);
}

/* ---- tests ---- */

static int ascii_case_test(const tmpl_val *x, int want_lower)
{
	int any = 0;
	if (x->k != V_STR)
		return 0;
	for (size_t i = 0; i < x->u.s.n; i++) {
		char ch = x->u.s.p[i];
		if (!cased(ch))
			continue;
		if ((ch >= 'a' && ch <= 'z') != want_lower)
			return 0;
		any = 1;
	}
	return any;
}

static int sameas(const tmpl_val *a, const tmpl_val *b)
{
	if (a->k != b->k)
		return 0;
	switch (a->k) {
	case V_NONE:
	case V_UNDEF: return a->k == V_NONE;
	case V_BOOL:
	case V_INT:
	case V_FUNC: return a->u.i == b->u.i;
	case V_STR: return a->u.s.p == b->u.s.p && a->u.s.n == b->u.s.n;
	default: return a->u.l == b->u.l;
	}
}

int tmpl_apply_test(tmpl_ctx *c, const tmpl_node *at, int id, tmpl_val x, const tmpl_args *a)
{
	if (check_kw(c, at, a, "test", NULL))
		return 0;
	const tmpl_val *y = a->n ? &a->v[0] : NULL;
	switch (id) {
	case TEST_DEFINED: return x.k != V_UNDEF;
	case TEST_UNDEFINED: return x.k == V_UNDEF;
	case TEST_NONE: return x.k == V_NONE;
	case TEST_STRING: return x.k == V_STR;
	case TEST_MAPPING: return x.k == V_DICT;
	case TEST_ITERABLE: return tv_is_iterable(&x);
	case TEST_SEQUENCE:
		return x.k == V_STR || x.k == V_LIST || x.k == V_DICT || x.k == V_UNDEF;
	case TEST_NUMBER: return tv_is_int(&x) || x.k == V_FLOAT;
	case TEST_INTEGER: return x.k == V_INT;
	case TEST_BOOLEAN: return x.k == V_BOOL;
	case TEST_TRUE: return x.k == V_BOOL && x.u.i;
	case TEST_FALSE: return x.k == V_BOOL && !x.u.i;
	case TEST_EQ: return tv_equal(&x, y);
	case TEST_NE: return !tv_equal(&x, y);
	case TEST_GT:
	case TEST_GE:
	case TEST_LT:
	case TEST_LE: {
		int op = id == TEST_GT ? OP_GT : id == TEST_GE ? OP_GE : id == TEST_LT ? OP_LT : OP_LE;
		int r = tmpl_compare(c, at, op, &x, y);
		return r > 0;
	}
	case TEST_ODD:
	case TEST_EVEN:
	case TEST_DIVISIBLEBY: {
		int64_t d = id == TEST_DIVISIBLEBY ? (y && tv_is_int(y) ? y->u.i : 0) : 2;
		if (!tv_is_int(&x) || !d) {
			tmpl_fail(c, at, "'%s' test needs integers (and a non-zero divisor)",
				  id == TEST_ODD ? "odd" : id == TEST_EVEN ? "even" : "divisibleby");
			return 0;
		}
		int64_t m = x.u.i % d;
		if (m && ((m < 0) != (d < 0)))
			m += d;
		return id == TEST_ODD ? m == 1 : m == 0;
	}
	case TEST_IN: return tmpl_compare(c, at, OP_IN, &x, y) > 0;
	case TEST_SAMEAS: return sameas(&x, y);
	case TEST_LOWER: return ascii_case_test(&x, 1);
	case TEST_UPPER: return ascii_case_test(&x, 0);
	case TEST_CALLABLE: return x.k == V_FUNC || x.k == V_METHOD;
	}
	tmpl_fail(c, at, "internal error: test %d", id);
	return 0;
}

/* ---- calls: methods and global functions ---- */

static tmpl_val call_method(tmpl_ctx *c, const tmpl_node *at, const tmpl_method *m,
			    const tmpl_args *a)
{
	static const char *const split_kw[] = {"sep", "maxsplit", NULL};
	static const char *const replace_kw[] = {"count", NULL};
	static const char *const no_kw[] = {NULL};
	int min, max;
	tmpl_method_arity(m->id, &min, &max);
	if (check_kw(c, at, a, "method",
		     m->id == M_SPLIT ? split_kw : m->id == M_REPLACE ? replace_kw : no_kw))
		return tv_undef(NULL);
	if (a->n < min || a->n > max) {
		tmpl_fail(c, at, "%s() takes %d to %d arguments, got %d", tmpl_method_name(m->id),
			  min, max, a->n);
		return tv_undef(NULL);
	}
	tmpl_val s = m->self;
	switch (m->id) {
	case M_STRIP: return do_strip(c, at, s, arg(a, 0, NULL), 1, 1);
	case M_LSTRIP: return do_strip(c, at, s, arg(a, 0, NULL), 1, 0);
	case M_RSTRIP: return do_strip(c, at, s, arg(a, 0, NULL), 0, 1);
	case M_SPLIT: return do_split(c, at, s, a);
	case M_STARTSWITH: return do_affix(c, at, s, &a->v[0], 0);
	case M_ENDSWITH: return do_affix(c, at, s, &a->v[0], 1);
	case M_UPPER: return map_case(c, at, s, CASE_UPPER);
	case M_LOWER: return map_case(c, at, s, CASE_LOWER);
	case M_TITLE: return map_case(c, at, s, CASE_PY_TITLE);
	case M_CAPITALIZE: return map_case(c, at, s, CASE_CAPITALIZE);
	case M_REPLACE: return do_replace(c, at, s, a);
	case M_JOIN: return do_str_join(c, at, s, &a->v[0]);
	case M_ITEMS:
	case M_KEYS:
	case M_VALUES: return dict_items(c, at, s.u.d, m->id);
	case M_GET: {
		const tmpl_val *v = td_get_val(s.u.d, &a->v[0]);
		return v ? *v : a->n > 1 ? a->v[1] : tv_none();
	}
	}
	tmpl_fail(c, at, "internal error: method %d", m->id);
	return tv_undef(NULL);
}

static tmpl_val fn_raise(tmpl_ctx *c, const tmpl_args *a)
{
	tmpl_val msg = tv_to_str(c, &a->v[0]);
	if (!c->failed) {
		c->failed = 1;  /* the message is the client's, without a position */
		sl_errf(c->err, c->errlen, SL_EINVAL, "%.*s", (int)msg.u.s.n,
			msg.u.s.p ? msg.u.s.p : "");
	}
	return tv_undef(NULL);
}

static tmpl_val fn_strftime(tmpl_ctx *c, const tmpl_node *at, const tmpl_args *a)
{
	if (a->v[0].k != V_STR || memchr(a->v[0].u.s.p, 0, a->v[0].u.s.n)) {
		tmpl_fail(c, at, "strftime_now() needs a format string");
		return tv_undef(NULL);
	}
	char fmt[256], *out = tmpl_alloc(&c->arena, 512);
	if (a->v[0].u.s.n >= sizeof fmt) {
		tmpl_fail(c, at, "strftime_now() format too long");
		return tv_undef(NULL);
	}
	if (!out)
		return oomv(c, at);
	memcpy(fmt, a->v[0].u.s.p, a->v[0].u.s.n);
	fmt[a->v[0].u.s.n] = 0;
	time_t now = (time_t)c->now_unix;
	struct tm tm;
	if (!localtime_r(&now, &tm)) {
		tmpl_fail(c, at, "strftime_now(): bad clock");
		return tv_undef(NULL);
	}
	size_t n = fmt[0] ? strftime(out, 512, fmt, &tm) : 0;
	return tv_str(out, n);
}

static tmpl_val fn_namespace(tmpl_ctx *c, const tmpl_node *at, const tmpl_args *a, int is_ns)
{
	tmpl_dict *d = td_new(c, a->nkw + (a->n ? a->v[0].k == V_DICT ? a->v[0].u.d->n : 0 : 0));
	tmpl_val v = {.k = is_ns ? V_NS : V_DICT};
	if (!d)
		return oomv(c, at);
	if (a->n) {
		if (a->v[0].k != V_DICT) {
			tmpl_fail(c, at, "%s() positional argument must be a dict",
				  is_ns ? "namespace" : "dict");
			return tv_undef(NULL);
		}
		for (int i = 0; i < a->v[0].u.d->n; i++)
			if (td_set(c, d, a->v[0].u.d->keys[i], a->v[0].u.d->vals[i]))
				return oomv(c, at);
	}
	for (int i = 0; i < a->nkw; i++)
		if (td_set(c, d, tv_str(a->kwn[i], a->kwl[i]), a->kw[i]))
			return oomv(c, at);
	for (int i = 0; is_ns && i < d->n; i++)
		if (d->keys[i].k == V_STR && d->keys[i].u.s.n && d->keys[i].u.s.p[0] == '_') {
			tmpl_fail(c, at, "cannot store underscore-prefixed attribute '%.*s' on a namespace",
				  (int)d->keys[i].u.s.n, d->keys[i].u.s.p);
			return tv_undef(NULL);
		}
	v.u.d = d;
	return v;
}

static tmpl_val fn_range(tmpl_ctx *c, const tmpl_node *at, const tmpl_args *a)
{
	int64_t p[3] = {0, 0, 1};
	for (int i = 0; i < a->n; i++)
		if (!tv_is_int(&a->v[i])) {
			tmpl_fail(c, at, "range() arguments must be integers");
			return tv_undef(NULL);
		}
	if (a->n == 1) {
		p[1] = a->v[0].u.i;
	} else {
		p[0] = a->v[0].u.i;
		p[1] = a->v[1].u.i;
		if (a->n == 3)
			p[2] = a->v[2].u.i;
	}
	if (!p[2]) {
		tmpl_fail(c, at, "range() arg 3 must not be zero");
		return tv_undef(NULL);
	}
	int64_t n = 0;
	if (p[2] > 0 && p[0] < p[1])
		n = (p[1] - p[0] - 1) / p[2] + 1;
	else if (p[2] < 0 && p[0] > p[1])
		n = (p[0] - p[1] - 1) / -p[2] + 1;
	if (n > SANDBOX_MAX_RANGE || (p[1] - p[0] > 0) != (p[1] > p[0])) {
		tmpl_fail(c, at, "Range too big. The sandbox blocks ranges larger than MAX_RANGE "
				 "(%d).", SANDBOX_MAX_RANGE);
		return tv_undef(NULL);
	}
	tmpl_list *l = tl_new(c, (int)n);
	if (!l)
		return oomv(c, at);
	for (int64_t i = 0; i < n; i++)
		l->it[i] = tv_int(p[0] + i * p[2]);
	return list_val(l);
}

tmpl_val tmpl_call(tmpl_ctx *c, const tmpl_node *at, tmpl_val fn, const tmpl_args *a)
{
	if (fn.k == V_METHOD)
		return call_method(c, at, fn.u.m, a);
	if (fn.k == V_UNDEF) {
		if (fn.u.s.p)
			tmpl_fail(c, at, "'%.*s' is undefined", (int)fn.u.s.n, fn.u.s.p);
		else
			tmpl_fail(c, at, "called an undefined value");
		return tv_undef(NULL);
	}
	if (fn.k != V_FUNC) {
		tmpl_fail(c, at, "'%s' object is not callable", tv_type_name(&fn));
		return tv_undef(NULL);
	}
	int min, max, known = !tmpl_function_arity((int)fn.u.i, &min, &max);
	int takes_kw = fn.u.i == FN_NAMESPACE || fn.u.i == FN_DICT;
	if (!known || a->n < min || a->n > max || (a->nkw && !takes_kw)) {
		tmpl_fail(c, at, "bad arguments to %s()", tmpl_function_name((int)fn.u.i));
		return tv_undef(NULL);
	}
	switch (fn.u.i) {
	case FN_RAISE_EXCEPTION: return fn_raise(c, a);
	case FN_STRFTIME_NOW: return fn_strftime(c, at, a);
	case FN_NAMESPACE: return fn_namespace(c, at, a, 1);
	case FN_DICT: return fn_namespace(c, at, a, 0);
	case FN_RANGE: return fn_range(c, at, a);
	}
	tmpl_fail(c, at, "internal error: function %lld", (long long)fn.u.i);
	return tv_undef(NULL);
}
