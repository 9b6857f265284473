/*
 * buffers.c — the coordinator's growable arrays: token ids, and token
 * log-probs with their alternatives (bytes grow in common/buf.h's sl_buf).
 * Each grows by doubling and keeps its contents on failure (SL_ENOMEM), so
 * a caller can report the error and free what it has.
 *
 * Also the process's heap policy (coord_mem_setup, coord_mem_release):
 * what the coordinator frees goes back to the system once the load that
 * needed it has gone (docs/operations.md).
 *
 * The floor of coordinator/: it calls nothing of the coordinator; stream.c
 * and openai.c keep ids and log-probs in it; coord.c calls the heap policy. Declared
 * in coord_int.h.
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord_int.h"
#include "common/sl.h"

int coord_ids_add(coord_ids *b, const int32_t *p, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = (b->n + n) * 2 + 16;
		int32_t *np = realloc(b->p, sizeof(int32_t) * cap);
		if (!np)
			return SL_ENOMEM;
		b->p = np;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, p, sizeof(int32_t) * n);
	b->n += n;
	return SL_OK;
}

int coord_logprobs_add(coord_logprobs *b, const coord_lp_view *v, size_t i)
{
	size_t nt = (size_t)v->top_n;
	if (b->n == 0)
		b->top_n = v->top_n;
	if (b->n == b->cap) {
		size_t cap = b->cap * 2 + 16, all = cap * (nt ? nt : 1);
		float *lp = realloc(b->lp, sizeof(float) * cap);
		if (lp)
			b->lp = lp;
		int32_t *ids = realloc(b->top_ids, sizeof(int32_t) * all);
		if (ids)
			b->top_ids = ids;
		float *top = realloc(b->top, sizeof(float) * all);
		if (top)
			b->top = top;
		if (!lp || !ids || !top)
			return SL_ENOMEM;
		b->cap = cap;
	}
	b->lp[b->n] = v->lp[i];
	if (nt) {
		memcpy(b->top_ids + b->n * nt, v->top_ids + i * nt, sizeof(int32_t) * nt);
		memcpy(b->top + b->n * nt, v->top + i * nt, sizeof(float) * nt);
	}
	b->n++;
	return SL_OK;
}

void coord_logprobs_free(coord_logprobs *b)
{
	free(b->lp);
	free(b->top_ids);
	free(b->top);
	*b = (coord_logprobs){0};
}

/* A burst of connections leaves nothing held (every object is freed;
 * valgrind agrees) but glibc kept the pages: ZeroMQ's per-connection
 * buffers (8 KiB batches, 16 KiB message queue chunks) sit among small
 * objects that outlive them, so the heap cannot shrink from its top.
 * Blocks of 8 KiB and more get their own mappings instead, returned to
 * the system on free (a few mmap calls per connection: cheap beside a TCP
 * accept). Measured (bench/coord_memory.sh): 3,000 connections took RSS
 * from 10.7 to 92.6 MB with glibc's default, to 33 MB with this. */
#define MEM_MMAP_THRESHOLD (8 << 10)

void coord_mem_setup(void)
{
	mallopt(M_MMAP_THRESHOLD, MEM_MMAP_THRESHOLD);
}

/* What is left after the mappings — small blocks freed in the middle of
 * the heap — is handed back by malloc_trim once more than this lies free
 * in glibc's arenas. Called by the tick; checks at most once a second. */
#define MEM_TRIM_FREE_BYTES ((size_t)8 << 20)

void coord_mem_release(double now, double *last_check)
{
	if (now - *last_check < 1.0)
		return;
	*last_check = now;
	struct mallinfo2 mi = mallinfo2();
	if (mi.fordblks > MEM_TRIM_FREE_BYTES)
		malloc_trim(0);
}
