/*
 * buf.c — the growable byte buffer (see buf.h). Grows by doubling from
 * 64 bytes, so n puts cost O(total) copies; sizes are checked against
 * overflow because a put's length may come from a client.
 */
#include "common/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"

static int fail(sl_buf *b)
{
	b->failed = 1;
	return SL_ENOMEM;
}

int sl_buf_reserve(sl_buf *b, size_t more)
{
	if (more > SIZE_MAX / 4 - b->n)
		return fail(b);
	size_t need = b->n + more + 1; /* the NUL */
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	char *p = b->grow ? b->grow(b->grow_ctx, b->p, b->cap, cap) : realloc(b->p, cap);
	if (!p)
		return fail(b);
	b->p = p;
	b->cap = cap;
	p[b->n] = 0; /* terminated from the first reserve on, even if nothing is put */
	return 0;
}

int sl_buf_put(sl_buf *b, const void *s, size_t n)
{
	if (sl_buf_reserve(b, n))
		return SL_ENOMEM;
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

int sl_buf_putc(sl_buf *b, char c)
{
	return sl_buf_put(b, &c, 1);
}

int sl_buf_puts(sl_buf *b, const char *s)
{
	return sl_buf_put(b, s, strlen(s));
}

int sl_buf_printf(sl_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || sl_buf_reserve(b, (size_t)n))
		return fail(b);
	va_start(ap, fmt);
	vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->n += (size_t)n;
	return 0;
}

void sl_buf_free(sl_buf *b)
{
	if (!b)
		return;
	free(b->p);
	*b = (sl_buf){0};
}
