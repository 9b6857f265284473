/*
 * chat_template.c — the chat-template module's front: compiling a template
 * (normalize, lex, parse), its lifetime, and the arena and error helpers the
 * other chat_template_*.c files share.  The model registry calls
 * coord_tmpl_compile once per model; rendering is in chat_template_eval.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template_int.h"
#include "sl.h"

int tmpl_parse(coord_tmpl *t, const tmpl_toks *toks, char *err, size_t errlen);

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

/* ---- compile ---- */

/* Jinja reads "\r\n" and "\r" as "\n" and drops one trailing newline. */
static char *normalize(tmpl_arena *a, const char *src, size_t len, size_t *out_len)
{
	char *s = tmpl_alloc(a, len + 1);
	size_t k = 0;
	if (!s)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			s[k++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			s[k++] = src[i];
		}
	}
	if (k && s[k - 1] == '\n')
		k--;
	s[k] = 0;
	*out_len = k;
	return s;
}

static size_t first_bad_utf8(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		if (!k || i + k > n)
			return i;
		uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1F : k == 3 ? c & 0x0F : c & 0x07;
		for (size_t j = 1; j < k; j++) {
			if (((unsigned char)s[i + j] & 0xC0) != 0x80)
				return i;
			cp = (cp << 6) | ((unsigned char)s[i + j] & 0x3F);
		}
		static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
		if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return i;
		i += k;
	}
	return n;
}

int coord_tmpl_compile(const char *src, size_t len, const char *name, coord_tmpl **out,
		       char *err, size_t errlen)
{
	*out = NULL;
	if (!name)
		name = "chat_template";
	if (len > COORD_TMPL_MAX_SOURCE)
		return sl_errf(err, errlen, SL_EINVAL, "%s: chat template of %zu bytes exceeds %u",
			       name, len, COORD_TMPL_MAX_SOURCE);
	size_t bad = first_bad_utf8(src, len);
	if (bad < len)
		return sl_errf(err, errlen, SL_EINVAL,
			       "%s: chat template is not valid UTF-8 (byte %zu)", name, bad);
	coord_tmpl *t = calloc(1, sizeof *t);
	if (!t || !(t->name = strdup(name))) {
		free(t);
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", name);
	}
	size_t n;
	char *s = normalize(&t->arena, src, len, &n);
	tmpl_toks toks;
	int rc = SL_ENOMEM;
	if (!s) {
		sl_errf(err, errlen, rc, "%s: out of memory", name);
		goto fail;
	}
	t->src = s;
	if ((rc = tmpl_lex(s, n, t->name, &t->arena, &toks, err, errlen)))
		goto fail;
	if ((rc = tmpl_parse(t, &toks, err, errlen)))
		goto fail;
	*out = t;
	return 0;
fail:
	if (rc == SL_ENOMEM)
		sl_errf(err, errlen, rc, "%s: out of memory", name);
	coord_tmpl_destroy(t);
	return rc;
}

void coord_tmpl_destroy(coord_tmpl *t)
{
	if (!t)
		return;
	tmpl_arena_free(&t->arena);
	free(t->name);
	free(t);
}

int coord_tmpl_iterates_content(const coord_tmpl *t)
{
	return t ? t->iterates_content : 0;
}
