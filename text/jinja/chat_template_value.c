/*
 * chat_template_value.c — the base layer of the chat-template module:
 * the arena every tree node and runtime value lives in, errors that name
 * the template's line:col, and runtime values with the Python semantics
 * Jinja gives them, because chat templates are byte-exact specifications:
 * str() and repr() (a list printed by a template is its Python repr), ==,
 * <, `in`, truth, iteration, attribute and item lookup, str.strip()'s
 * Unicode whitespace, and json.dumps as transformers' tojson calls it
 * (ensure_ascii=False).  All values live in the render's arena; strings are
 * (pointer, length) and may contain NULs.  Every other chat_template*.c
 * file builds on this one; it calls only chat_template_names.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja/chat_template_int.h"
#include "common/sl.h"
#include "text/json.h"
#include "text/utf8.h"

/* ---- arena ---- */

struct tmpl_chunk {
	tmpl_chunk *next;
	size_t cap, used;
	_Alignas(16) unsigned char data[];
};

void *tmpl_alloc(tmpl_arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (a->limit && (n > a->limit || a->used > a->limit - n))
		return NULL;
	tmpl_chunk *c = a->head;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > (64u << 10) ? n : (64u << 10);
		c = malloc(sizeof *c + cap);
		if (!c)
			return NULL;
		c->cap = cap;
		c->used = 0;
		c->next = a->head;
		a->head = c;
	}
	void *p = c->data + c->used;
	c->used += n;
	a->used += n;
	memset(p, 0, n);
	return p;
}

void tmpl_arena_free(tmpl_arena *a)
{
	tmpl_chunk *c = a->head;
	while (c) {
		tmpl_chunk *next = c->next;
		free(c);
		c = next;
	}
	a->head = NULL;
	a->used = 0;
}

/* ---- errors ---- */

void tmpl_linecol(const char *src, int pos, int *line, int *col)
{
	int l = 1, c = 1;
	for (int i = 0; i < pos; i++) {
		if (src[i] == '\n') {
			l++;
			c = 1;
		} else if (((unsigned char)src[i] & 0xC0) != 0x80) {
			c++;
		}
	}
	*line = l;
	*col = c;
}

int tmpl_errat(char *err, size_t errlen, const char *name, const char *src, int pos,
	       const char *fmt, ...)
{
	char msg[SL_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	int line, col;
	tmpl_linecol(src, pos, &line, &col);
	return sl_errf(err, errlen, SL_EINVAL, "%s:%d:%d: %s", name, line, col, msg);
}

void tmpl_fail(tmpl_ctx *c, const tmpl_node *at, const char *fmt, ...)
{
	if (c->failed)
		return;
	char msg[SL_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	c->failed = 1;
	tmpl_errat(c->err, c->errlen, c->prog->name, c->prog->src, at ? at->pos : 0, "%s", msg);
}

void tmpl_fail_oom(tmpl_ctx *c, const tmpl_node *at)
{
	tmpl_fail(c, at, "template needs more than %zu bytes of working memory",
		  c->arena.limit);
}

tmpl_val tmpl_fail_undefined(tmpl_ctx *c, const tmpl_node *at, const tmpl_val *u)
{
	if (u->u.s.p)
		tmpl_fail(c, at, "'%.*s' is undefined", (int)u->u.s.n, u->u.s.p);
	else
		tmpl_fail(c, at, "a value is undefined");
	return tv_undef(NULL);
}

/* ---- UTF-8 ---- */

size_t tmpl_utf8_decode(const char *s, size_t n, uint32_t *cp)
{
	if (!n) {
		*cp = 0;
		return 1;
	}
	size_t k = text_utf8_next(s, n, cp);
	if (*cp == TEXT_UTF8_BAD || *cp == TEXT_UTF8_TRUNC) { /* one byte, shown as U+FFFD */
		*cp = 0xFFFD;
		return 1;
	}
	return k;
}

size_t tmpl_utf8_count(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += tmpl_utf8_decode(s + i, n - i, &cp);
		k++;
	}
	return k;
}

/* Python's str.isspace(). */
static int py_isspace_cp(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202F || c == 0x205F || c == 0x3000;
}

int py_isspace_at(const char *s, size_t n, size_t i, size_t *clen)
{
	uint32_t cp;
	*clen = tmpl_utf8_decode(s + i, n - i, &cp);
	return py_isspace_cp(cp);
}

static int in_chars(uint32_t cp, const char *chars, size_t nchars)
{
	for (size_t i = 0; i < nchars;) {
		uint32_t c;
		i += tmpl_utf8_decode(chars + i, nchars - i, &c);
		if (c == cp)
			return 1;
	}
	return 0;
}

static int strippable(uint32_t cp, const char *chars, size_t nchars)
{
	return chars ? in_chars(cp, chars, nchars) : py_isspace_cp(cp);
}

/* str.strip / lstrip / rstrip: [*start, *end) of what remains. */
void py_strip(const char *s, size_t n, int left, int right, const char *chars, size_t nchars,
	      size_t *start, size_t *end)
{
	size_t a = 0, b = n;
	while (left && a < b) {
		uint32_t cp;
		size_t k = tmpl_utf8_decode(s + a, b - a, &cp);
		if (!strippable(cp, chars, nchars))
			break;
		a += k;
	}
	while (right && b > a) {
		size_t p = b - 1;
		while (p > a && ((unsigned char)s[p] & 0xC0) == 0x80 && b - p < 4)
			p--;
		uint32_t cp;
		if (tmpl_utf8_decode(s + p, b - p, &cp) != b - p)  /* stray byte: one char */
			p = b - 1, cp = 0xFFFD;
		if (!strippable(cp, chars, nchars))
			break;
		b = p;
	}
	*start = a;
	*end = b;
}

/* ---- string builder ---- */

/* sl_buf_grow_fn over the render arena: a new block and a copy (the old
 * one stays until the arena goes, counted against its limit). */
static void *arena_grow(void *arena, void *old, size_t old_size, size_t new_size)
{
	char *p = tmpl_alloc(arena, new_size);
	if (p && old_size)
		memcpy(p, old, old_size);
	return p;
}

void sb_init(sl_buf *b, tmpl_ctx *c)
{
	*b = (sl_buf){.grow = arena_grow, .grow_ctx = &c->arena};
}

tmpl_val sb_val(sl_buf *b)
{
	return tv_str(b->p ? b->p : "", b->n);
}

/* ---- containers ---- */

tmpl_list *tl_new(tmpl_ctx *c, int n)
{
	tmpl_list *l = tmpl_alloc(&c->arena, sizeof *l);
	if (!l)
		return NULL;
	l->n = n;
	if (n > 0 && !(l->it = tmpl_alloc(&c->arena, (size_t)n * sizeof *l->it)))
		return NULL;
	return l;
}

tmpl_dict *td_new(tmpl_ctx *c, int cap)
{
	tmpl_dict *d = tmpl_alloc(&c->arena, sizeof *d);
	if (!d)
		return NULL;
	if (cap < 4)
		cap = 4;
	d->cap = cap;
	d->keys = tmpl_alloc(&c->arena, (size_t)cap * sizeof *d->keys);
	d->vals = tmpl_alloc(&c->arena, (size_t)cap * sizeof *d->vals);
	return d->keys && d->vals ? d : NULL;
}

const tmpl_val *td_get_val(const tmpl_dict *d, const tmpl_val *key)
{
	for (int i = 0; i < d->n; i++)
		if (tv_equal(&d->keys[i], key))
			return &d->vals[i];
	return NULL;
}

const tmpl_val *td_get(const tmpl_dict *d, const char *key, size_t n)
{
	tmpl_val k = tv_str(key, n);
	return td_get_val(d, &k);
}

int td_set(tmpl_ctx *c, tmpl_dict *d, tmpl_val key, tmpl_val val)
{
	for (int i = 0; i < d->n; i++)
		if (tv_equal(&d->keys[i], &key)) {
			d->vals[i] = val;
			return 0;
		}
	if (d->n == d->cap) {
		int cap = d->cap * 2;
		tmpl_val *k = tmpl_alloc(&c->arena, (size_t)cap * sizeof *k);
		tmpl_val *v = tmpl_alloc(&c->arena, (size_t)cap * sizeof *v);
		if (!k || !v)
			return -1;
		memcpy(k, d->keys, (size_t)d->n * sizeof *k);
		memcpy(v, d->vals, (size_t)d->n * sizeof *v);
		d->keys = k;
		d->vals = v;
		d->cap = cap;
	}
	d->keys[d->n] = key;
	d->vals[d->n] = val;
	d->n++;
	return 0;
}

/* ---- Python semantics ---- */

const char *tv_type_name(const tmpl_val *v)
{
	switch (v->k) {
	case V_UNDEF: return "Undefined";
	case V_NONE: return "NoneType";
	case V_BOOL: return "bool";
	case V_INT: return "int";
	case V_STR: return "str";
	case V_LIST: return v->u.l->tuple ? "tuple" : "list";
	case V_DICT: return "dict";
	case V_NS: return "Namespace";
	case V_LOOP: return "LoopContext";
	case V_FUNC: return "function";
	case V_METHOD: return "builtin_function_or_method";
	case V_FLOAT: return "float";
	}
	return "?";
}

int tv_is_int(const tmpl_val *v)
{
	return v->k == V_INT || v->k == V_BOOL;
}

int tv_truthy(const tmpl_val *v)
{
	switch (v->k) {
	case V_UNDEF:
	case V_NONE: return 0;
	case V_BOOL:
	case V_INT: return v->u.i != 0;
	case V_FLOAT: return v->u.f != 0;
	case V_STR: return v->u.s.n != 0;
	case V_LIST: return v->u.l->n != 0;
	case V_DICT: return v->u.d->n != 0;
	default: return 1;
	}
}

int tv_equal(const tmpl_val *a, const tmpl_val *b)
{
	if (tv_is_int(a) && tv_is_int(b))
		return a->u.i == b->u.i;
	if ((a->k == V_FLOAT || tv_is_int(a)) && (b->k == V_FLOAT || tv_is_int(b)))
		return (a->k == V_FLOAT ? a->u.f : (double)a->u.i) ==
		       (b->k == V_FLOAT ? b->u.f : (double)b->u.i);
	if (a->k != b->k)
		return 0;
	switch (a->k) {
	case V_UNDEF:
	case V_NONE: return 1;
	case V_STR: return a->u.s.n == b->u.s.n && !memcmp(a->u.s.p, b->u.s.p, a->u.s.n);
	case V_LIST:
		if (a->u.l->tuple != b->u.l->tuple || a->u.l->n != b->u.l->n)
			return 0;
		for (int i = 0; i < a->u.l->n; i++)
			if (!tv_equal(&a->u.l->it[i], &b->u.l->it[i]))
				return 0;
		return 1;
	case V_DICT:
		if (a->u.d->n != b->u.d->n)
			return 0;
		for (int i = 0; i < a->u.d->n; i++) {
			const tmpl_val *o = td_get_val(b->u.d, &a->u.d->keys[i]);
			if (!o || !tv_equal(&a->u.d->vals[i], o))
				return 0;
		}
		return 1;
	case V_NS: return a->u.d == b->u.d;
	case V_LOOP: return a->u.lp == b->u.lp;
	case V_FUNC: return a->u.i == b->u.i;
	default: return 0;
	}
}

int tv_is_iterable(const tmpl_val *v)
{
	return v->k == V_STR || v->k == V_LIST || v->k == V_DICT || v->k == V_UNDEF ||
	       v->k == V_LOOP;
}

const tmpl_list *tv_iter_list(tmpl_ctx *c, const tmpl_node *at, const tmpl_val *v)
{
	static tmpl_list empty;
	tmpl_list *l;
	switch (v->k) {
	case V_LIST: return v->u.l;
	case V_UNDEF: return &empty;
	case V_DICT:
		if (!(l = tl_new(c, v->u.d->n)))
			break;
		memcpy(l->it, v->u.d->keys, (size_t)l->n * sizeof *l->it);
		return l;
	case V_STR: {
		size_t n = tmpl_utf8_count(v->u.s.p, v->u.s.n);
		if (n > INT32_MAX || !(l = tl_new(c, (int)n)))
			break;
		for (size_t i = 0, k = 0; i < v->u.s.n; k++) {
			uint32_t cp;
			size_t w = tmpl_utf8_decode(v->u.s.p + i, v->u.s.n - i, &cp);
			l->it[k] = tv_str(v->u.s.p + i, w);
			i += w;
		}
		return l;
	}
	default:
		tmpl_fail(c, at, "'%s' object is not iterable", tv_type_name(v));
		return NULL;
	}
	tmpl_fail_oom(c, at);
	return NULL;
}

/* Python's str.isprintable() for one character.  Unassigned code points
 * (which Python also escapes) are not tabled: they print raw here. */
static int py_printable(uint32_t c)
{
	static const uint32_t ranges[][2] = {
		{0x00, 0x1F}, {0x7F, 0xA0}, {0xAD, 0xAD}, {0x600, 0x605}, {0x61C, 0x61C},
		{0x6DD, 0x6DD}, {0x70F, 0x70F}, {0x890, 0x891}, {0x8E2, 0x8E2}, {0x1680, 0x1680},
		{0x180E, 0x180E}, {0x2000, 0x200F}, {0x2028, 0x202F}, {0x205F, 0x2064},
		{0x2066, 0x206F}, {0x3000, 0x3000}, {0xD800, 0xF8FF}, {0xFEFF, 0xFEFF},
		{0xFFF9, 0xFFFB}, {0xFFFE, 0xFFFF}, {0x110BD, 0x110BD}, {0x110CD, 0x110CD},
		{0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001},
		{0xE0020, 0xE007F}, {0xF0000, 0x10FFFF},
	};
	for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
		if (c >= ranges[i][0] && c <= ranges[i][1])
			return 0;
	return 1;
}

static void repr_str(sl_buf *b, const char *s, size_t n)
{
	int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char q = sq && !dq ? '"' : '\'';
	sl_buf_putc(b, q);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = tmpl_utf8_decode(s + i, n - i, &cp);
		char esc[16];
		if (cp == '\\' || cp == (uint32_t)q) {
			esc[0] = '\\';
			esc[1] = (char)cp;
			sl_buf_put(b, esc, 2);
		} else if (cp == '\t') {
			sl_buf_put(b, "\\t", 2);
		} else if (cp == '\n') {
			sl_buf_put(b, "\\n", 2);
		} else if (cp == '\r') {
			sl_buf_put(b, "\\r", 2);
		} else if (!py_printable(cp)) {
			int w = cp < 0x100	 ? snprintf(esc, sizeof esc, "\\x%02x", cp)
				: cp < 0x10000 ? snprintf(esc, sizeof esc, "\\u%04x", cp)
					       : snprintf(esc, sizeof esc, "\\U%08x", cp);
			sl_buf_put(b, esc, (size_t)w);
		} else {
			sl_buf_put(b, s + i, k);
		}
		i += k;
	}
	sl_buf_putc(b, q);
}

static void put_int(sl_buf *b, int64_t i)
{
	char tmp[32];
	int w = snprintf(tmp, sizeof tmp, "%lld", (long long)i);
	sl_buf_put(b, tmp, (size_t)w);
}

/* Python's repr(float): the shortest digits that read back as x, fixed
 * notation for exponents in [-4, 16) ("0.5", "100.0"), else scientific with
 * a signed exponent of at least two digits ("1e-05", "1.5e+16"). */
static void put_float(sl_buf *b, double x)
{
	char e[40], dig[24];
	int prec = 1;
	for (; prec < 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec - 1, x);
		if (strtod(e, NULL) == x)
			break;
	}
	snprintf(e, sizeof e, "%.*e", prec - 1, x);
	const char *p = e;
	int nd = 0;
	if (*p == '-')
		sl_buf_putc(b, '-'), p++;
	for (; *p && *p != 'e'; p++)
		if (*p >= '0' && *p <= '9')
			dig[nd++] = *p;
	while (nd > 1 && dig[nd - 1] == '0')
		nd--;
	int ex = atoi(p + 1);
	if (ex >= -4 && ex < 16) {
		if (ex < 0) {
			sl_buf_puts(b, "0.");
			for (int i = 0; i < -ex - 1; i++)
				sl_buf_putc(b, '0');
			sl_buf_put(b, dig, (size_t)nd);
		} else if (ex + 1 >= nd) {
			sl_buf_put(b, dig, (size_t)nd);
			for (int i = nd; i < ex + 1; i++)
				sl_buf_putc(b, '0');
			sl_buf_puts(b, ".0");
		} else {
			sl_buf_put(b, dig, (size_t)ex + 1);
			sl_buf_putc(b, '.');
			sl_buf_put(b, dig + ex + 1, (size_t)(nd - ex - 1));
		}
		return;
	}
	sl_buf_putc(b, dig[0]);
	if (nd > 1) {
		sl_buf_putc(b, '.');
		sl_buf_put(b, dig + 1, (size_t)nd - 1);
	}
	char t[8];
	int w = snprintf(t, sizeof t, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
	sl_buf_put(b, t, (size_t)w);
}

static void repr_dict(sl_buf *b, const tmpl_dict *d)
{
	sl_buf_putc(b, '{');
	for (int i = 0; i < d->n; i++) {
		if (i)
			sl_buf_put(b, ", ", 2);
		tv_repr_into(b, &d->keys[i]);
		sl_buf_put(b, ": ", 2);
		tv_repr_into(b, &d->vals[i]);
	}
	sl_buf_putc(b, '}');
}

void tv_repr_into(sl_buf *b, const tmpl_val *v)
{
	switch (v->k) {
	case V_UNDEF: sl_buf_puts(b, "Undefined"); return;
	case V_STR: repr_str(b, v->u.s.p, v->u.s.n); return;
	case V_LIST: {
		const tmpl_list *l = v->u.l;
		sl_buf_putc(b, l->tuple ? '(' : '[');
		for (int i = 0; i < l->n; i++) {
			if (i)
				sl_buf_put(b, ", ", 2);
			tv_repr_into(b, &l->it[i]);
		}
		if (l->tuple && l->n == 1)
			sl_buf_putc(b, ',');
		sl_buf_putc(b, l->tuple ? ')' : ']');
		return;
	}
	case V_DICT: repr_dict(b, v->u.d); return;
	default: tv_str_into(b, v); return;
	}
}

void tv_str_into(sl_buf *b, const tmpl_val *v)
{
	switch (v->k) {
	case V_UNDEF: return;
	case V_NONE: sl_buf_puts(b, "None"); return;
	case V_BOOL: sl_buf_puts(b, v->u.i ? "True" : "False"); return;
	case V_INT: put_int(b, v->u.i); return;
	case V_FLOAT: put_float(b, v->u.f); return;
	case V_STR: sl_buf_put(b, v->u.s.p, v->u.s.n); return;
	case V_NS:
		sl_buf_puts(b, "<Namespace ");
		repr_dict(b, v->u.d);
		sl_buf_putc(b, '>');
		return;
	case V_LOOP:
		sl_buf_puts(b, "<LoopContext ");
		put_int(b, v->u.lp->index0 + 1);
		sl_buf_putc(b, '/');
		put_int(b, v->u.lp->length);
		sl_buf_putc(b, '>');
		return;
	case V_FUNC:
		sl_buf_puts(b, "<function ");
		sl_buf_puts(b, tmpl_function_name((int)v->u.i));
		sl_buf_putc(b, '>');
		return;
	case V_METHOD:
		sl_buf_puts(b, "<built-in method of ");
		sl_buf_puts(b, tv_type_name(&v->u.m->self));
		sl_buf_puts(b, " object>");
		return;
	default: tv_repr_into(b, v); return;
	}
}

tmpl_val tv_to_str(tmpl_ctx *c, const tmpl_val *v)
{
	if (v->k == V_STR)
		return *v;
	sl_buf b;
	sb_init(&b, c);
	tv_str_into(&b, v);
	return b.failed ? tv_undef(NULL) : sb_val(&b);
}

/* ---- JSON ---- */

static void json_newline(sl_buf *b, int indent, int level)
{
	sl_buf_putc(b, '\n');
	for (int i = 0; i < indent * level; i++)
		sl_buf_putc(b, ' ');
}

static int json_key(sl_buf *b, const tmpl_val *k)
{
	switch (k->k) {
	case V_STR: text_json_str(b, k->u.s.p, k->u.s.n); return 0;
	case V_INT: sl_buf_putc(b, '"'); put_int(b, k->u.i); sl_buf_putc(b, '"'); return 0;
	case V_BOOL: sl_buf_puts(b, k->u.i ? "\"true\"" : "\"false\""); return 0;
	case V_NONE: sl_buf_puts(b, "\"null\""); return 0;
	default: return -1;
	}
}

static int key_cmp(const void *x, const void *y)
{
	const tmpl_val *a = *(const tmpl_val *const *)x, *b = *(const tmpl_val *const *)y;
	size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
	int r = memcmp(a->u.s.p, b->u.s.p, n);
	return r ? r : (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
}

int tv_json_into(sl_buf *b, const tmpl_val *v, int indent, int sort_keys, int depth,
		 const tmpl_val **bad)
{
	if (depth > 100) {
		*bad = v;
		return -1;
	}
	const char *sep = indent >= 0 ? "," : ", ";
	switch (v->k) {
	case V_NONE: sl_buf_puts(b, "null"); return 0;
	case V_BOOL: sl_buf_puts(b, v->u.i ? "true" : "false"); return 0;
	case V_INT: put_int(b, v->u.i); return 0;
	case V_FLOAT: put_float(b, v->u.f); return 0;
	case V_STR: text_json_str(b, v->u.s.p, v->u.s.n); return 0;
	case V_LIST: {
		const tmpl_list *l = v->u.l;
		if (!l->n) {
			sl_buf_puts(b, "[]");
			return 0;
		}
		sl_buf_putc(b, '[');
		for (int i = 0; i < l->n; i++) {
			if (i)
				sl_buf_puts(b, sep);
			if (indent >= 0)
				json_newline(b, indent, depth + 1);
			if (tv_json_into(b, &l->it[i], indent, sort_keys, depth + 1, bad))
				return -1;
		}
		if (indent >= 0)
			json_newline(b, indent, depth);
		sl_buf_putc(b, ']');
		return 0;
	}
	case V_DICT: {
		const tmpl_dict *d = v->u.d;
		if (!d->n) {
			sl_buf_puts(b, "{}");
			return 0;
		}
		const tmpl_val **order = tmpl_alloc(b->grow_ctx, (size_t)d->n * sizeof *order);
		if (!order) {
			b->failed = 1;
			return 0;
		}
		for (int i = 0; i < d->n; i++) {
			order[i] = &d->keys[i];
			if (sort_keys && d->keys[i].k != V_STR) {
				*bad = &d->keys[i];
				return -1;
			}
		}
		if (sort_keys)
			qsort(order, (size_t)d->n, sizeof *order, key_cmp);
		sl_buf_putc(b, '{');
		for (int i = 0; i < d->n; i++) {
			if (i)
				sl_buf_puts(b, sep);
			if (indent >= 0)
				json_newline(b, indent, depth + 1);
			if (json_key(b, order[i])) {
				*bad = order[i];
				return -1;
			}
			sl_buf_puts(b, ": ");
			if (tv_json_into(b, &d->vals[order[i] - d->keys], indent, sort_keys, depth + 1,
					 bad))
				return -1;
		}
		if (indent >= 0)
			json_newline(b, indent, depth);
		sl_buf_putc(b, '}');
		return 0;
	}
	default:
		*bad = v;
		return -1;
	}
}

/* ---- attribute and item lookup (environment.getattr / getitem) ---- */

static tmpl_val method(tmpl_ctx *c, const tmpl_node *at, tmpl_val self, int id)
{
	tmpl_method *m = tmpl_alloc(&c->arena, sizeof *m);
	tmpl_val v = {0};
	if (!m) {
		tmpl_fail_oom(c, at);
		return v;
	}
	m->id = id;
	m->self = self;
	v.k = V_METHOD;
	v.u.m = m;
	return v;
}

static int is_str_method(int id)
{
	return id && id < M_ITEMS;
}

static int is_dict_method(int id)
{
	return id >= M_ITEMS;
}

static tmpl_val loop_attr(tmpl_ctx *c, const tmpl_loop *lp, const char *name, size_t n)
{
#define IS(s) (n == sizeof(s) - 1 && !memcmp(name, s, n))
	int64_t i = lp->index0, len = lp->length;
	if (IS("index0"))
		return tv_int(i);
	if (IS("index"))
		return tv_int(i + 1);
	if (IS("revindex"))
		return tv_int(len - i);
	if (IS("revindex0"))
		return tv_int(len - i - 1);
	if (IS("first"))
		return tv_bool(i == 0);
	if (IS("last"))
		return tv_bool(i == len - 1);
	if (IS("length"))
		return tv_int(len);
	if (IS("depth"))
		return tv_int(1);
	if (IS("depth0"))
		return tv_int(0);
	if (IS("previtem"))
		return i > 0 ? lp->items->it[i - 1] : tv_undef_named(name, n);
	if (IS("nextitem"))
		return i + 1 < len ? lp->items->it[i + 1] : tv_undef_named(name, n);
#undef IS
	(void)c;
	return tv_undef_named(name, n);
}

tmpl_val tmpl_getattr(tmpl_ctx *c, const tmpl_node *at, tmpl_val obj, const char *name,
		      size_t n)
{
	int id = tmpl_method_id(name, n);
	const tmpl_val *v;
	switch (obj.k) {
	case V_UNDEF:
		return tmpl_fail_undefined(c, at, &obj);
	case V_DICT:
		if (is_dict_method(id))
			return method(c, at, obj, id);
		v = td_get(obj.u.d, name, n);
		return v ? *v : tv_undef_named(name, n);
	case V_NS:
		v = td_get(obj.u.d, name, n);
		return v ? *v : tv_undef_named(name, n);
	case V_LOOP:
		return loop_attr(c, obj.u.lp, name, n);
	case V_STR:
		if (is_str_method(id))
			return method(c, at, obj, id);
		return tv_undef_named(name, n);
	default:
		return tv_undef_named(name, n);
	}
}

/* Python index of a sequence of length len; -1 when out of range. */
static int64_t seq_index(int64_t i, int64_t len)
{
	if (i < 0)
		i += len;
	return i < 0 || i >= len ? -1 : i;
}

/* The i-th character of a UTF-8 string. */
static tmpl_val str_char(const char *s, size_t n, int64_t i)
{
	size_t p = 0;
	for (int64_t k = 0; p < n; k++) {
		uint32_t cp;
		size_t w = tmpl_utf8_decode(s + p, n - p, &cp);
		if (k == i)
			return tv_str(s + p, w);
		p += w;
	}
	return tv_undef(NULL);
}

tmpl_val tmpl_getitem(tmpl_ctx *c, const tmpl_node *at, tmpl_val obj, tmpl_val key)
{
	const tmpl_val *v;
	switch (obj.k) {
	case V_UNDEF:
		return tmpl_fail_undefined(c, at, &obj);
	case V_DICT:
		if ((v = td_get_val(obj.u.d, &key)))
			return *v;
		break;
	case V_LIST:
		if (tv_is_int(&key)) {
			int64_t i = seq_index(key.u.i, obj.u.l->n);
			return i < 0 ? tv_undef(NULL) : obj.u.l->it[i];
		}
		break;
	case V_STR:
		if (tv_is_int(&key)) {
			int64_t i = seq_index(key.u.i, (int64_t)tmpl_utf8_count(obj.u.s.p, obj.u.s.n));
			return i < 0 ? tv_undef(NULL) : str_char(obj.u.s.p, obj.u.s.n, i);
		}
		break;
	default:
		break;
	}
	if (key.k == V_STR)
		return tmpl_getattr(c, at, obj, key.u.s.p, key.u.s.n);
	return tv_undef(NULL);
}

/* ---- comparison ---- */

static int contains(tmpl_ctx *c, const tmpl_node *e, const tmpl_val *item, const tmpl_val *seq)
{
	switch (seq->k) {
	case V_STR:
		if (item->k != V_STR) {
			if (item->k == V_UNDEF)
				tmpl_fail_undefined(c, e, item);
			else
				tmpl_fail(c, e, "'in <string>' requires string as left operand, not %s",
					  tv_type_name(item));
			return 0;
		}
		if (!item->u.s.n)
			return 1;
		return memmem(seq->u.s.p, seq->u.s.n, item->u.s.p, item->u.s.n) != NULL;
	case V_LIST:
		for (int i = 0; i < seq->u.l->n; i++)
			if (tv_equal(&seq->u.l->it[i], item))
				return 1;
		return 0;
	case V_DICT:
		return td_get_val(seq->u.d, item) != NULL;
	case V_UNDEF:
		return 0;
	default:
		tmpl_fail(c, e, "argument of type '%s' is not iterable", tv_type_name(seq));
		return 0;
	}
}

static int str_cmp(const tmpl_val *a, const tmpl_val *b)
{
	size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
	int r = memcmp(a->u.s.p, b->u.s.p, n);
	return r ? r : (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
}

int tmpl_compare(tmpl_ctx *c, const tmpl_node *e, int op, const tmpl_val *a, const tmpl_val *b)
{
	int r;
	switch (op) {
	case OP_EQ: return tv_equal(a, b);
	case OP_NE: return !tv_equal(a, b);
	case OP_IN: r = contains(c, e, a, b); return c->failed ? -1 : r;
	case OP_NOTIN: r = contains(c, e, a, b); return c->failed ? -1 : !r;
	}
	if (tv_is_int(a) && tv_is_int(b))
		r = (a->u.i > b->u.i) - (a->u.i < b->u.i);
	else if (a->k == V_STR && b->k == V_STR)
		r = str_cmp(a, b);
	else {
		static const char *names[] = {[OP_GT] = ">", [OP_GE] = ">=", [OP_LT] = "<",
					      [OP_LE] = "<="};
		if (a->k == V_UNDEF || b->k == V_UNDEF)
			tmpl_fail_undefined(c, e, a->k == V_UNDEF ? a : b);
		else
			tmpl_fail(c, e, "'%s' not supported between instances of '%s' and '%s'",
				  names[op], tv_type_name(a), tv_type_name(b));
		return -1;
	}
	switch (op) {
	case OP_GT: return r > 0;
	case OP_GE: return r >= 0;
	case OP_LT: return r < 0;
	default: return r <= 0;
	}
}
