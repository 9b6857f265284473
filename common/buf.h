/*
 * buf.h — the one growable byte buffer of shardline: text, JSON, event
 * streams, the /metrics exposition, the tokenizer's pieces and the chat
 * template engine's strings all build through it.
 *
 * The bytes are kept NUL-terminated (p[n] == 0 once the buffer holds
 * memory: after the first put or reserve), so a buffer of text can be
 * handed to C string functions, an empty one too. A failed put
 * (out of memory) leaves the contents as they were,
 * returns SL_ENOMEM and sets `failed`, so a caller that builds a long
 * output may check once at the end.
 *
 * Memory comes from realloc, or from `grow` when set: the template engine
 * grows its strings in its render arena, which bounds what a template may
 * allocate and frees everything at once (sl_buf_free is then not called).
 */
#ifndef SL_BUF_H
#define SL_BUF_H

#include <stddef.h>

/* realloc's contract: old may be NULL, old_size is what it held; NULL on
 * failure with old left intact. */
typedef void *(*sl_buf_grow_fn)(void *ctx, void *old, size_t old_size, size_t new_size);

typedef struct sl_buf {
	char *p;             /* [cap] bytes, n used and a NUL after them; owned */
	size_t n, cap;
	int failed;          /* a put failed since init (sticky until cleared) */
	sl_buf_grow_fn grow; /* NULL: realloc (free with sl_buf_free) */
	void *grow_ctx;
} sl_buf;

/* Makes room for `more` bytes past n (plus the NUL); 0 or SL_ENOMEM. */
int sl_buf_reserve(sl_buf *b, size_t more);
/* Appends; 0 or SL_ENOMEM (contents unchanged, failed set). */
int sl_buf_put(sl_buf *b, const void *s, size_t n);
int sl_buf_putc(sl_buf *b, char c);
int sl_buf_puts(sl_buf *b, const char *s);
int sl_buf_printf(sl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees a realloc-backed buffer and zeroes it. NULL-safe. */
void sl_buf_free(sl_buf *b);

#endif
