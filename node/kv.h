/*
 * kv.h — paged KV block bookkeeping: which blocks of the pool are free,
 * their reference counts, and per-sequence block tables. Storage lives in
 * the backend (one K and one V pool per layer); this module only hands out
 * block numbers, so the CPU and CUDA backends and the scheduler share it.
 */
#ifndef NODE_KV_H
#define NODE_KV_H

#include <stdint.h>

typedef struct kv_pool kv_pool;

/* A sequence's blocks in order: token at position p is in blocks[p / block_tokens]. */
typedef struct kv_table {
	int32_t *blocks;
	int n, cap;
} kv_table;

int kv_pool_create(int n_blocks, int block_tokens, kv_pool **out);
void kv_pool_destroy(kv_pool *p);
int kv_pool_blocks(const kv_pool *p);
int kv_pool_free_blocks(const kv_pool *p);
int kv_pool_block_tokens(const kv_pool *p);

/* Blocks needed to hold n_tokens. */
int kv_blocks_for(const kv_pool *p, int n_tokens);

/* Grow t so it covers n_tokens. All or nothing: returns SL_ENOMEM with t
 * unchanged when the pool has too few free blocks. */
int kv_table_reserve(kv_pool *p, kv_table *t, int n_tokens);
/* Drop t's references (blocks return to the pool at refcount 0) and free it. */
void kv_table_release(kv_pool *p, kv_table *t);

#endif
