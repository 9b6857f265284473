/*
 * tool_calls.c — the model's tool-call text split into content and calls
 * (tool_calls.h): one stream machine for the three families, fed piece by
 * piece (streaming) or with the whole output (text_tool_parse).
 *
 * The machine keeps the text it has not settled in `pend` and moves
 * through: TEXT (content; a marker switches to the calls), OPEN (Mistral:
 * the '[' of the list), OBJ (the '{' of the next call, or the list's end),
 * IN_OBJ (one call object, scanned again from its start each time bytes
 * arrive; objects are small), AFTER (what separates or ends calls). The
 * scan only tracks JSON's lexical structure (strings, nesting); the
 * arguments are checked whole with cJSON when the object ends.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "text/tool_calls.h"
#include "common/buf.h"
#include "common/sl.h"

enum { S_TEXT, S_OPEN, S_OBJ, S_IN_OBJ, S_AFTER };

struct text_tool_stream {
	text_tool_family f;
	int state;
	sl_buf pend;        /* unsettled text; IN_OBJ: the object from its '{' */
	sl_buf ws;          /* whitespace held: leading, or after a call */
	sl_buf name;        /* IN_OBJ: the call's name, once complete */
	const char *via;    /* the marker that opened the calls; NULL: a bare '{' did (Llama 3) */
	sl_buf opened;      /* what was consumed since the calls opened (marker, spaces,
			     * '['), re-emitted when they were none */
	int emitted;        /* content went out */
	int n_calls;        /* calls begun */
	int bad;
	int in_list;        /* Mistral: inside [ ... ] */
	char **names;       /* the functions whose calls count; NULL: any */
	int n_names;
	/* IN_OBJ */
	int named;          /* call_begin went out */
	size_t args_sent;   /* bytes of the arguments value reported */
};

static const char *marker_of(text_tool_family f)
{
	switch (f) {
	case TEXT_TOOL_LLAMA3: return "<|python_tag|>";
	case TEXT_TOOL_MISTRAL: return "[TOOL_CALLS]";
	default: return "<tool_call>";
	}
}

const char *text_tool_family_name(text_tool_family f)
{
	switch (f) {
	case TEXT_TOOL_LLAMA3: return "llama3";
	case TEXT_TOOL_MISTRAL: return "mistral";
	default: return "hermes";
	}
}

static int contains(const char *s, size_t n, const char *w)
{
	size_t k = strlen(w);
	for (size_t i = 0; i + k <= n; i++)
		if (!memcmp(s + i, w, k))
			return 1;
	return 0;
}

text_tool_family text_tool_family_of(const char *src, size_t len, int *knows_tools)
{
	if (knows_tools)
		*knows_tools = src && contains(src, len, "tools");
	if (!src)
		return TEXT_TOOL_HERMES;
	if (contains(src, len, "[TOOL_CALLS]"))
		return TEXT_TOOL_MISTRAL;
	if (contains(src, len, "<tool_call>"))
		return TEXT_TOOL_HERMES;
	if (contains(src, len, "<|python_tag|>") ||
	    (contains(src, len, "<|start_header_id|>") && contains(src, len, "tools")))
		return TEXT_TOOL_LLAMA3;
	return TEXT_TOOL_HERMES;
}

int text_tool_stream_create(text_tool_family f, text_tool_stream **out)
{
	*out = calloc(1, sizeof **out);
	if (!*out)
		return SL_ENOMEM;
	(*out)->f = f;
	return 0;
}

int text_tool_stream_names(text_tool_stream *st, const char *const *names, int n)
{
	if (!names)
		return 0;
	if (!(st->names = calloc((size_t)n + 1, sizeof *st->names)))
		return SL_ENOMEM;
	for (int i = 0; i < n; i++, st->n_names++)
		if (!(st->names[i] = strdup(names[i])))
			return SL_ENOMEM;
	return 0;
}

static int name_allowed(const text_tool_stream *st, const char *name, size_t n)
{
	if (!st->names)
		return 1;
	for (int i = 0; i < st->n_names; i++)
		if (strlen(st->names[i]) == n && !memcmp(st->names[i], name, n))
			return 1;
	return 0;
}

void text_tool_stream_destroy(text_tool_stream *st)
{
	if (!st)
		return;
	for (int i = 0; i < st->n_names; i++)
		free(st->names[i]);
	free(st->names);
	sl_buf_free(&st->pend);
	sl_buf_free(&st->ws);
	sl_buf_free(&st->name);
	sl_buf_free(&st->opened);
	free(st);
}

int text_tool_stream_bad(const text_tool_stream *st)
{
	return st->bad;
}

static int is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void consume(sl_buf *b, size_t k)
{
	memmove(b->p, b->p + k, b->n - k);
	b->n -= k;
	b->p[b->n] = 0;
}

/* Content goes out, except whitespace before the first content or after a
 * call: held, and dropped once a call is (or was) made. */
static void emit_content(text_tool_stream *st, const char *s, size_t n, const text_tool_sink *k,
			 void *u)
{
	if (!n)
		return;
	if (!st->emitted || st->n_calls) {
		size_t i = 0;
		while (i < n && is_ws(s[i]))
			i++;
		if (i == n) {
			sl_buf_put(&st->ws, s, n);
			return;
		}
		if (!st->n_calls && st->ws.n)
			k->content(u, st->ws.p, st->ws.n);
		st->ws.n = 0;
		if (st->n_calls)
			s += i, n -= i;
	}
	st->emitted = 1;
	k->content(u, s, n);
}

/* The calls were not calls after all: what opened them (the marker, or
 * the '{' a Llama 3 answer began with) is content, and the text after it
 * is read again as text, where a later marker may still open a call. So
 * the result does not depend on how the output was cut into pieces. */
static void revert(text_tool_stream *st, const text_tool_sink *k, void *u)
{
	emit_content(st, st->opened.p, st->opened.n, k, u);
	st->opened.n = 0;
	if (!st->via && st->pend.n) { /* the '{' itself, so the text moves on */
		emit_content(st, st->pend.p, 1, k, u);
		consume(&st->pend, 1);
	}
	st->via = NULL;
	st->state = S_TEXT;
}

/* ---- JSON lexical scan: 1 complete (*end past it), 0 needs more, -1 not JSON ---- */

static int scan_string(const char *s, size_t n, size_t i, size_t *end)
{
	for (i++; i < n; i++) {
		if (s[i] == '\\') {
			i++;
			continue;
		}
		if (s[i] == '"') {
			*end = i + 1;
			return 1;
		}
		if ((unsigned char)s[i] < 0x20)
			return -1;
	}
	return 0;
}

static int scan_value(const char *s, size_t n, size_t i, size_t *end)
{
	if (i >= n)
		return 0;
	if (s[i] == '"')
		return scan_string(s, n, i, end);
	if (s[i] == '{' || s[i] == '[') {
		char stack[64];
		int depth = 0;
		for (; i < n; i++) {
			char c = s[i];
			if (c == '"') {
				size_t e;
				int r = scan_string(s, n, i, &e);
				if (r <= 0)
					return r;
				i = e - 1;
			} else if ((unsigned char)c < 0x20 && !is_ws(c)) {
				return -1; /* cJSON would take it for whitespace; JSON does not */
			} else if (c == '{' || c == '[') {
				if (depth == (int)sizeof stack)
					return -1;
				stack[depth++] = c == '{' ? '}' : ']';
			} else if (c == '}' || c == ']') {
				if (!depth || stack[depth - 1] != c)
					return -1;
				if (!--depth) {
					*end = i + 1;
					return 1;
				}
			}
		}
		return 0;
	}
	/* number or literal: ends at a delimiter */
	size_t j = i;
	while (j < n && !is_ws(s[j]) && s[j] != ',' && s[j] != '}' && s[j] != ']')
		j++;
	if (j == n)
		return 0;
	if (j == i)
		return -1;
	*end = j;
	return 1;
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
	while (i < n && is_ws(s[i]))
		i++;
	return i;
}

/* The keys of the call object in pend (from its '{'): the name, where the
 * arguments value starts and ends. 1 the object is complete (*obj_end),
 * 0 needs more, -1 not a JSON object. */
typedef struct {
	int has_name, has_args, args_done;
	size_t name_at, name_end, args_at, args_end, obj_end;
} obj_scan;

static int scan_object(const char *s, size_t n, obj_scan *o)
{
	size_t i = 1;
	memset(o, 0, sizeof *o);
	for (int first = 1;; first = 0) {
		i = skip_ws(s, n, i);
		if (i >= n)
			return 0;
		if (s[i] == '}' && first) {
			o->obj_end = i + 1;
			return 1;
		}
		if (s[i] != '"')
			return -1;
		size_t ks = i, ke, ve;
		int r = scan_string(s, n, i, &ke);
		if (r <= 0)
			return r;
		i = skip_ws(s, n, ke);
		if (i >= n)
			return 0;
		if (s[i] != ':')
			return -1;
		i = skip_ws(s, n, i + 1);
		if (i >= n)
			return 0;
		size_t klen = ke - ks - 2;
		int is_name = klen == 4 && !memcmp(s + ks + 1, "name", 4);
		int is_args = (klen == 9 && !memcmp(s + ks + 1, "arguments", 9)) ||
			      (klen == 10 && !memcmp(s + ks + 1, "parameters", 10));
		if (is_args && !o->has_args) {
			o->has_args = 1;
			o->args_at = i;
		}
		r = scan_value(s, n, i, &ve);
		if (r < 0)
			return -1;
		if (r == 0)
			return 0;
		if (is_name && s[i] == '"' && !o->has_name) {
			o->has_name = 1;
			o->name_at = i;
			o->name_end = ve;
		}
		if (is_args && o->args_at == i) {
			o->args_done = 1;
			o->args_end = ve;
		}
		i = skip_ws(s, n, ve);
		if (i >= n)
			return 0;
		if (s[i] == '}') {
			o->obj_end = i + 1;
			return 1;
		}
		if (s[i] != ',')
			return -1;
		i++;
	}
}

/* A JSON string's text (quotes included) decoded into b; -1 when bad. */
static int decode_string(const char *s, size_t n, sl_buf *b)
{
	char *tmp = malloc(n + 1);
	if (!tmp)
		return -1;
	memcpy(tmp, s, n);
	tmp[n] = 0;
	cJSON *j = cJSON_Parse(tmp);
	free(tmp);
	int rc = cJSON_IsString(j) ? 0 : -1;
	b->n = 0;
	if (!rc)
		rc = sl_buf_puts(b, j->valuestring) ? -1 : 0;
	cJSON_Delete(j);
	return rc;
}

static int is_json_object(const char *s, size_t n)
{
	cJSON *j = cJSON_ParseWithLength(s, n);
	int ok = cJSON_IsObject(j);
	cJSON_Delete(j);
	return ok;
}

/* IN_OBJ: reports the name and the arguments that arrived; at the
 * object's end, the rest. 1 when the object was settled (consumed). */
static int step_object(text_tool_stream *st, const text_tool_sink *k, void *u)
{
	obj_scan o;
	const char *s = st->pend.p;
	int r = scan_object(s, st->pend.n, &o);
	if (r < 0) {
		if (st->named) {
			st->bad = 1;
			st->pend.n = 0;
			st->state = S_TEXT;
		} else {
			revert(st, k, u);
		}
		return 1;
	}
	if (o.has_name && !st->named) {
		if (decode_string(s + o.name_at, o.name_end - o.name_at, &st->name) || !st->name.n ||
		    !name_allowed(st, st->name.p, st->name.n)) {
			revert(st, k, u);
			return 1;
		}
		st->named = 1;
		k->call_begin(u, st->n_calls++, st->name.p, st->name.n);
	}
	int idx = st->n_calls - 1;
	/* raw arguments as they arrive; a string-valued one whole, decoded */
	if (st->named && o.has_args && s[o.args_at] != '"') {
		size_t upto = o.args_done ? o.args_end : st->pend.n;
		if (upto > o.args_at + st->args_sent) {
			k->call_args(u, idx, s + o.args_at + st->args_sent, upto - o.args_at - st->args_sent);
			st->args_sent = upto - o.args_at;
		}
	}
	if (r == 0)
		return 0;
	if (!st->named) {
		revert(st, k, u);
		return 1;
	}
	if (!o.has_args) {
		k->call_args(u, idx, "{}", 2);
	} else if (s[o.args_at] == '"') {
		sl_buf a = {0};
		if (decode_string(s + o.args_at, o.args_end - o.args_at, &a) || !is_json_object(a.p, a.n))
			st->bad = 1;
		else
			k->call_args(u, idx, a.p, a.n);
		sl_buf_free(&a);
	} else if (!is_json_object(s + o.args_at, o.args_end - o.args_at)) {
		st->bad = 1;
	}
	consume(&st->pend, o.obj_end);
	st->opened.n = 0;
	st->named = 0;
	st->args_sent = 0;
	st->state = S_AFTER;
	return 1;
}

/* Length of the longest suffix of s that is a proper prefix of m. */
static size_t partial_marker(const char *s, size_t n, const char *m)
{
	size_t ml = strlen(m);
	for (size_t h = ml - 1; h > 0; h--)
		if (h <= n && !memcmp(s + n - h, m, h))
			return h;
	return 0;
}

/* TEXT: content up to a marker (or up to what may begin one). 1 when it
 * moved on, 0 when it needs more. */
static int step_text(text_tool_stream *st, const text_tool_sink *k, void *u)
{
	const char *m = marker_of(st->f);
	size_t ml = strlen(m), n = st->pend.n;
	const char *s = st->pend.p;
	/* Llama 3: an answer that starts with '{' is a call */
	if (st->f == TEXT_TOOL_LLAMA3 && !st->emitted && !st->n_calls) {
		size_t i = skip_ws(s, n, 0);
		if (i == n)
			return 0;
		if (s[i] == '{') {
			st->opened.n = 0;
			sl_buf_put(&st->opened, s, i);
			consume(&st->pend, i);
			st->via = NULL;
			st->state = S_OBJ;
			return 1;
		}
	}
	for (size_t i = 0; i + ml <= n; i++)
		if (!memcmp(s + i, m, ml)) {
			emit_content(st, s, i, k, u);
			consume(&st->pend, i + ml);
			st->opened.n = 0;
			sl_buf_put(&st->opened, m, ml);
			st->via = m;
			st->state = st->f == TEXT_TOOL_MISTRAL ? S_OPEN : S_OBJ;
			return 1;
		}
	size_t h = partial_marker(s, n, m);
	emit_content(st, s, n - h, k, u);
	consume(&st->pend, n - h);
	return 0;
}

/* AFTER: between calls. Hermes: </tool_call>; Mistral: ',' or ']';
 * Llama 3: ';'. Anything else is content again. */
static int step_after(text_tool_stream *st)
{
	size_t i = skip_ws(st->pend.p, st->pend.n, 0);
	if (i == st->pend.n)
		return 0;
	const char *s = st->pend.p + i;
	size_t n = st->pend.n - i;
	st->via = NULL;
	if (st->f == TEXT_TOOL_HERMES) {
		static const char end[] = "</tool_call>";
		size_t el = sizeof end - 1;
		if (n < el && !memcmp(s, end, n))
			return 0;
		if (n >= el && !memcmp(s, end, el))
			i += el;
		st->state = S_TEXT;
	} else if (st->f == TEXT_TOOL_MISTRAL && st->in_list && (*s == ',' || *s == ']')) {
		i++;
		st->state = *s == ',' ? S_OBJ : S_TEXT;
		st->in_list = *s == ',';
	} else if (st->f == TEXT_TOOL_LLAMA3 && *s == ';') {
		i++;
		st->state = S_OBJ;
	} else {
		st->state = S_TEXT;
		return 1; /* whitespace stays for emit_content to drop */
	}
	consume(&st->pend, i);
	return 1;
}

static int step(text_tool_stream *st, const text_tool_sink *k, void *u)
{
	size_t i;
	switch (st->state) {
	case S_TEXT: return step_text(st, k, u);
	case S_OPEN:
		i = skip_ws(st->pend.p, st->pend.n, 0);
		if (i == st->pend.n)
			return 0;
		if (st->pend.p[i] == '[') {
			sl_buf_put(&st->opened, st->pend.p, i + 1);
			consume(&st->pend, i + 1);
			st->in_list = 1;
			st->state = S_OBJ;
		} else if (st->pend.p[i] == '{') {
			sl_buf_put(&st->opened, st->pend.p, i);
			consume(&st->pend, i);
			st->state = S_OBJ;
		} else {
			revert(st, k, u);
		}
		return 1;
	case S_OBJ:
		i = skip_ws(st->pend.p, st->pend.n, 0);
		if (i == st->pend.n)
			return 0;
		if (st->pend.p[i] == '{') {
			sl_buf_put(&st->opened, st->pend.p, i);
			consume(&st->pend, i);
			st->state = S_IN_OBJ;
		} else if (st->in_list && st->pend.p[i] == ']' && !st->opened.n) {
			consume(&st->pend, i + 1);
			st->in_list = 0;
			st->state = S_TEXT;
		} else if (st->in_list && st->pend.p[i] == ']') { /* an empty list: no call */
			st->in_list = 0;
			revert(st, k, u);
		} else {
			if (st->n_calls)
				st->via = NULL;
			revert(st, k, u);
		}
		return 1;
	case S_IN_OBJ: return step_object(st, k, u);
	default: return step_after(st);
	}
}

int text_tool_stream_feed(text_tool_stream *st, const char *s, size_t n, const text_tool_sink *k,
			  void *u)
{
	if (sl_buf_put(&st->pend, s, n))
		return SL_ENOMEM;
	while (st->pend.n && step(st, k, u))
		;
	return st->pend.failed || st->ws.failed || st->name.failed || st->opened.failed ? SL_ENOMEM : 0;
}

int text_tool_stream_finish(text_tool_stream *st, const text_tool_sink *k, void *u)
{
	/* what waits for more: a call's start that never came to be one is
	 * content, and the text after it is read again */
	while (st->state == S_OPEN || st->state == S_OBJ || st->state == S_IN_OBJ) {
		if (st->state == S_IN_OBJ && st->named) { /* cut off inside the call */
			st->bad = 1;
			st->pend.n = 0;
			break;
		}
		if (st->n_calls && st->state != S_IN_OBJ)
			st->via = NULL;
		revert(st, k, u);
		while (st->pend.n && step(st, k, u))
			;
	}
	if (st->state == S_AFTER && st->f == TEXT_TOOL_HERMES) { /* an end tag cut short */
		size_t i = skip_ws(st->pend.p, st->pend.n, 0);
		if (st->pend.n - i < 12 && !memcmp(st->pend.p + i, "</tool_call>", st->pend.n - i))
			st->pend.n = 0;
	}
	st->state = S_TEXT;
	emit_content(st, st->pend.p, st->pend.n, k, u);
	st->pend.n = 0;
	if (!st->n_calls && st->ws.n) /* an answer of whitespace only */
		k->content(u, st->ws.p, st->ws.n);
	st->ws.n = 0;
	return st->pend.failed || st->ws.failed ? SL_ENOMEM : st->n_calls;
}

/* ---- the whole text ---- */

typedef struct {
	sl_buf content;
	sl_buf *args;
	text_tool_parsed *p;
	int cap, oom;
} collect;

static void c_content(void *u, const char *s, size_t n)
{
	collect *c = u;
	c->oom |= sl_buf_put(&c->content, s, n) != 0;
}

static void c_begin(void *u, int index, const char *name, size_t n)
{
	collect *c = u;
	if (index >= c->cap) {
		int cap = c->cap ? 2 * c->cap : 4;
		text_tool_call *calls = realloc(c->p->calls, sizeof *calls * (size_t)cap);
		sl_buf *args = calls ? realloc(c->args, sizeof *args * (size_t)cap) : NULL;
		if (calls)
			c->p->calls = calls;
		if (!args) {
			c->oom = 1;
			return;
		}
		c->args = args;
		memset(args + c->cap, 0, sizeof *args * (size_t)(cap - c->cap));
		c->cap = cap;
	}
	text_tool_call *t = &c->p->calls[index];
	t->arguments = NULL;
	t->name = malloc(n + 1);
	if (!t->name) {
		c->oom = 1;
		return;
	}
	memcpy(t->name, name, n);
	t->name[n] = 0;
	c->p->n_calls = index + 1;
}

static void c_args(void *u, int index, const char *s, size_t n)
{
	collect *c = u;
	if (index < c->cap)
		c->oom |= sl_buf_put(&c->args[index], s, n) != 0;
}

static char *dup_n(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = 0;
	}
	return d;
}

int text_tool_parse(text_tool_family f, const char *s, size_t n, text_tool_parsed *out)
{
	return text_tool_parse_names(f, NULL, 0, s, n, out);
}

int text_tool_parse_names(text_tool_family f, const char *const *names, int n_names, const char *s,
			  size_t n, text_tool_parsed *out)
{
	static const text_tool_sink sink = {c_content, c_begin, c_args};
	text_tool_stream *st;
	collect c = {.p = out};
	memset(out, 0, sizeof *out);
	if (text_tool_stream_create(f, &st))
		return SL_ENOMEM;
	if (text_tool_stream_names(st, names, n_names)) {
		text_tool_stream_destroy(st);
		return SL_ENOMEM;
	}
	int rc = text_tool_stream_feed(st, s, n, &sink, &c);
	if (!rc)
		rc = text_tool_stream_finish(st, &sink, &c) < 0 ? SL_ENOMEM : 0;
	int bad = text_tool_stream_bad(st);
	text_tool_stream_destroy(st);
	for (int i = 0; i < out->n_calls && !c.oom; i++)
		if (!(out->calls[i].arguments = dup_n(c.args[i].n ? c.args[i].p : "", c.args[i].n)))
			c.oom = 1;
	for (int i = 0; i < c.cap; i++)
		sl_buf_free(&c.args[i]);
	free(c.args);
	if (rc || c.oom) {
		sl_buf_free(&c.content);
		text_tool_parsed_free(out);
		return SL_ENOMEM;
	}
	if (bad) { /* malformed: the text as it came */
		text_tool_parsed_free(out);
		c.content.n = 0;
		if (sl_buf_put(&c.content, s, n)) {
			sl_buf_free(&c.content);
			return SL_ENOMEM;
		}
	}
	size_t e = c.content.n;
	if (out->n_calls)
		while (e && is_ws(c.content.p[e - 1]))
			e--;
	if (e && !(out->content = dup_n(c.content.p, e))) {
		sl_buf_free(&c.content);
		text_tool_parsed_free(out);
		return SL_ENOMEM;
	}
	sl_buf_free(&c.content);
	return 0;
}

void text_tool_parsed_free(text_tool_parsed *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n_calls; i++) {
		free(p->calls[i].name);
		free(p->calls[i].arguments);
	}
	free(p->calls);
	free(p->content);
	memset(p, 0, sizeof *p);
}
