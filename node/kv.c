/*
 * kv.c — the free list and reference counts of the paged KV pool. A stack
 * of free block ids makes alloc and free O(1); refcounts exist so prefix
 * sharing can later point two tables at one block.
 */
#include "kv.h"

#include <stdlib.h>

#include "sl.h"

struct kv_pool {
	int n_blocks, block_tokens;
	int32_t *free_ids;   /* [n_blocks] stack of free block ids */
	int n_free;
	int32_t *refs;       /* [n_blocks] */
};

int kv_pool_create(int n_blocks, int block_tokens, kv_pool **out)
{
	if (n_blocks <= 0 || block_tokens <= 0)
		return SL_EINVAL;
	kv_pool *p = calloc(1, sizeof *p);
	if (!p)
		return SL_ENOMEM;
	p->free_ids = malloc(sizeof(int32_t) * n_blocks);
	p->refs = calloc(n_blocks, sizeof(int32_t));
	if (!p->free_ids || !p->refs) {
		kv_pool_destroy(p);
		return SL_ENOMEM;
	}
	p->n_blocks = n_blocks;
	p->block_tokens = block_tokens;
	/* lowest ids on top so a fresh pool hands out 0, 1, 2 ... */
	for (int i = 0; i < n_blocks; i++)
		p->free_ids[i] = n_blocks - 1 - i;
	p->n_free = n_blocks;
	*out = p;
	return SL_OK;
}

void kv_pool_destroy(kv_pool *p)
{
	if (!p)
		return;
	free(p->free_ids);
	free(p->refs);
	free(p);
}

int kv_pool_blocks(const kv_pool *p) { return p->n_blocks; }
int kv_pool_free_blocks(const kv_pool *p) { return p->n_free; }
int kv_pool_block_tokens(const kv_pool *p) { return p->block_tokens; }

int kv_blocks_for(const kv_pool *p, int n_tokens)
{
	return (n_tokens + p->block_tokens - 1) / p->block_tokens;
}

int kv_table_reserve(kv_pool *p, kv_table *t, int n_tokens)
{
	int need = kv_blocks_for(p, n_tokens) - t->n;
	if (need <= 0)
		return SL_OK;
	if (need > p->n_free)
		return SL_ENOMEM;
	if (t->n + need > t->cap) {
		int cap = t->cap ? t->cap : 8;
		while (cap < t->n + need)
			cap *= 2;
		int32_t *nb = realloc(t->blocks, sizeof(int32_t) * cap);
		if (!nb)
			return SL_ENOMEM;
		t->blocks = nb;
		t->cap = cap;
	}
	for (int i = 0; i < need; i++) {
		int32_t b = p->free_ids[--p->n_free];
		p->refs[b] = 1;
		t->blocks[t->n++] = b;
	}
	return SL_OK;
}

void kv_table_release(kv_pool *p, kv_table *t)
{
	for (int i = 0; i < t->n; i++) {
		int32_t b = t->blocks[i];
		if (--p->refs[b] == 0)
			p->free_ids[p->n_free++] = b;
	}
	free(t->blocks);
	t->blocks = NULL;
	t->n = t->cap = 0;
}
