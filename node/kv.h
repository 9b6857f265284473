/*
 * kv.h — paged KV block bookkeeping: which blocks of the pool are free,
 * their reference counts, per-sequence block tables, and the prefix cache
 * over them. Storage lives in the backend (one K and one V pool per
 * layer); this module only hands out block numbers, so the CPU and CUDA
 * backends and the scheduler share it. The engine (node/engine.c) is its
 * one user; the leader reads the cache's events and counters through it.
 *
 * Prefix cache (docs/scheduling.md). A full block whose K/V a completed
 * step wrote can be *published* under its chain hash (common/block_hash.h).
 * A published block stays in the index while any table references it and,
 * unreferenced, until the pool needs it: unreferenced published blocks sit
 * in an LRU list and count as free, so they never keep a request out;
 * kv_table_reserve takes never-published blocks first, then evicts the
 * least recently released. A new table can *acquire* the longest run of
 * published blocks that holds its prefix, sharing them (refcount > 1).
 * A hit is verified, never trusted to the hash: the block's token ids and
 * its parent's identity (a number no other publication ever gets) must
 * match, so the whole prefix is the same. Shared blocks are full, so
 * nobody writes them again; each table's partial last block is its own.
 */
#ifndef NODE_KV_H
#define NODE_KV_H

#include <stddef.h>
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
/* Blocks a reservation can take: never used or released unpublished,
 * plus published ones nobody references (evicted on demand). */
int kv_pool_free_blocks(const kv_pool *p);
int kv_pool_block_tokens(const kv_pool *p);

/* Blocks needed to hold n_tokens. */
int kv_blocks_for(const kv_pool *p, int n_tokens);

/* Grow t so it covers n_tokens. All or nothing: returns SL_ENOMEM with t
 * unchanged when the pool has too few free blocks. May evict cached blocks. */
int kv_table_reserve(kv_pool *p, kv_table *t, int n_tokens);
/* Drop t's references, last block first (so a prefix outlives its tails
 * in the LRU), and free it. A block reaching refcount 0 goes back to the
 * pool: to the LRU list when published, else to the free list. */
void kv_table_release(kv_pool *p, kv_table *t);

/* --- prefix cache ---------------------------------------------------- */

/* How many leading blocks of a sequence are cached: hashes[i] and
 * tokens[i * block_tokens, (i + 1) * block_tokens) name block i; at most
 * n_blocks. No side effects. */
int kv_cache_match(const kv_pool *p, const uint64_t *hashes, const int32_t *tokens, int n_blocks);
/* The same match, taken: a reference to each matched block is appended to
 * the empty table t. Returns the number of blocks (0 on allocation failure). */
int kv_cache_acquire(kv_pool *p, kv_table *t, const uint64_t *hashes, const int32_t *tokens,
		     int n_blocks);
/* Publish t's blocks [from, to): full, their K/V written by a completed
 * step, blocks [0, from) already published. A block whose twin (same
 * prefix) is already published is replaced in t by the twin and freed,
 * so a prefix computed twice at once is still cached once. */
void kv_cache_publish(kv_pool *p, kv_table *t, const uint64_t *hashes, const int32_t *tokens,
		      int from, int to);
/* Evict every unreferenced published block (tests, operators). */
void kv_cache_flush(kv_pool *p);

typedef struct kv_cache_counts {
	int cached_blocks;   /* published blocks, referenced or not */
	int idle_blocks;     /* of those, unreferenced (the LRU list) */
	long published;      /* blocks published since start */
	long evictions;      /* published blocks evicted since start (flushes included) */
} kv_cache_counts;
void kv_cache_counts_get(const kv_pool *p, kv_cache_counts *out);

/* Events for a router (the leader publishes them, docs/protocol.md): the
 * hashes published and evicted since the last take. Off until enabled
 * (the log is allocated then). When the log overflowed, or after
 * kv_cache_events_resync, a take returns *reset = 1 and in *stored every
 * hash the index holds now (evicted empty): the reader starts over.
 * Pointers are valid until the next call on p. */
int kv_cache_events_enable(kv_pool *p);
void kv_cache_events_resync(kv_pool *p);
int kv_cache_events_pending(const kv_pool *p); /* a take would return something */
void kv_cache_events_take(kv_pool *p, const uint64_t **stored, int *n_stored,
			  const uint64_t **evicted, int *n_evicted, int *reset);

/* Invariants (tests): every block is exactly one of free, idle (LRU) and
 * referenced; the index holds exactly the published blocks; no reference
 * was ever dropped twice. 0, or SL_EINVAL with err naming the first
 * violation. */
int kv_pool_check(const kv_pool *p, char *err, size_t errlen);

#endif
