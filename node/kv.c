/*
 * kv.c — the free list, reference counts and prefix cache of the paged KV
 * pool (see kv.h). Every operation is O(1) per block: a stack of free
 * block ids, an intrusive doubly linked LRU list of idle published
 * blocks, and a chained hash index (bucket heads plus a next link per
 * block). Everything is allocated at create, so a step allocates nothing
 * here but the growth of a table's block list.
 */
#include "node/kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"

struct kv_pool {
	int n_blocks, block_tokens;
	int32_t *free_ids;   /* [n_blocks] stack of free, unpublished block ids */
	int n_free;
	int32_t *refs;       /* [n_blocks] */
	/* prefix cache: a block is published iff gen[b] != 0 */
	uint64_t *hash;      /* [n_blocks] chain hash of a published block */
	uint64_t *gen;       /* [n_blocks] its publication number, unique for all time */
	uint64_t *parent_gen;/* [n_blocks] its parent's publication number (0: the root) */
	int32_t *tokens;     /* [n_blocks, block_tokens] its token ids, checked on a hit */
	int32_t *bucket;     /* [n_buckets] first published block of each hash bucket, -1 */
	int32_t *chain;      /* [n_blocks] next block in its bucket, -1 */
	uint32_t bucket_mask;
	int32_t *lru_prev, *lru_next; /* [n_blocks] idle published blocks, oldest at lru_head */
	int32_t lru_head, lru_tail;
	int n_idle, n_cached;
	uint64_t next_gen;
	long published, evictions, bad_releases;
	/* event log (kv_cache_events_enable): each list holds at most n_blocks */
	uint64_t *ev_stored, *ev_evicted;
	int n_ev_stored, n_ev_evicted, ev_reset;
};

int kv_pool_create(int n_blocks, int block_tokens, kv_pool **out)
{
	if (n_blocks <= 0 || block_tokens <= 0 || n_blocks > (1 << 30))
		return SL_EINVAL;
	kv_pool *p = calloc(1, sizeof *p);
	if (!p)
		return SL_ENOMEM;
	uint32_t nb = 1;
	while (nb < (uint32_t)n_blocks)
		nb *= 2;
	size_t n = (size_t)n_blocks;
	p->free_ids = malloc(sizeof(int32_t) * n);
	p->refs = calloc(n, sizeof(int32_t));
	p->hash = calloc(n, sizeof(uint64_t));
	p->gen = calloc(n, sizeof(uint64_t));
	p->parent_gen = calloc(n, sizeof(uint64_t));
	p->tokens = malloc(sizeof(int32_t) * n * block_tokens);
	p->bucket = malloc(sizeof(int32_t) * nb);
	p->chain = malloc(sizeof(int32_t) * n);
	p->lru_prev = malloc(sizeof(int32_t) * n);
	p->lru_next = malloc(sizeof(int32_t) * n);
	if (!p->free_ids || !p->refs || !p->hash || !p->gen || !p->parent_gen || !p->tokens ||
	    !p->bucket || !p->chain || !p->lru_prev || !p->lru_next) {
		kv_pool_destroy(p);
		return SL_ENOMEM;
	}
	p->n_blocks = n_blocks;
	p->block_tokens = block_tokens;
	/* lowest ids on top so a fresh pool hands out 0, 1, 2 ... */
	for (int i = 0; i < n_blocks; i++)
		p->free_ids[i] = n_blocks - 1 - i;
	p->n_free = n_blocks;
	memset(p->bucket, 0xff, sizeof(int32_t) * nb);
	p->bucket_mask = nb - 1;
	p->lru_head = p->lru_tail = -1;
	p->next_gen = 1;
	*out = p;
	return SL_OK;
}

void kv_pool_destroy(kv_pool *p)
{
	if (!p)
		return;
	void *all[] = {p->free_ids, p->refs, p->hash, p->gen, p->parent_gen, p->tokens, p->bucket,
		       p->chain, p->lru_prev, p->lru_next, p->ev_stored, p->ev_evicted};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		free(all[i]);
	free(p);
}

int kv_pool_blocks(const kv_pool *p) { return p->n_blocks; }
int kv_pool_free_blocks(const kv_pool *p) { return p->n_free + p->n_idle; }
int kv_pool_block_tokens(const kv_pool *p) { return p->block_tokens; }

int kv_blocks_for(const kv_pool *p, int n_tokens)
{
	return (n_tokens + p->block_tokens - 1) / p->block_tokens;
}

/* --- the LRU list of idle published blocks ------------------------------ */

static void lru_push(kv_pool *p, int32_t b) /* newest end */
{
	p->lru_prev[b] = p->lru_tail;
	p->lru_next[b] = -1;
	if (p->lru_tail >= 0)
		p->lru_next[p->lru_tail] = b;
	else
		p->lru_head = b;
	p->lru_tail = b;
	p->n_idle++;
}

static void lru_remove(kv_pool *p, int32_t b)
{
	int32_t pr = p->lru_prev[b], nx = p->lru_next[b];
	if (pr >= 0)
		p->lru_next[pr] = nx;
	else
		p->lru_head = nx;
	if (nx >= 0)
		p->lru_prev[nx] = pr;
	else
		p->lru_tail = pr;
	p->n_idle--;
}

/* --- the hash index ----------------------------------------------------- */

static void log_event(kv_pool *p, uint64_t *list, int *n, uint64_t h)
{
	if (!list || p->ev_reset)
		return;
	if (*n == p->n_blocks) /* the reader fell behind: it gets a snapshot */
		p->ev_reset = 1;
	else
		list[(*n)++] = h;
}

/* The published block with this hash, parent and tokens, or -1. */
static int32_t find(const kv_pool *p, uint64_t h, uint64_t parent_gen, const int32_t *tokens)
{
	for (int32_t b = p->bucket[h & p->bucket_mask]; b >= 0; b = p->chain[b])
		if (p->hash[b] == h && p->parent_gen[b] == parent_gen &&
		    !memcmp(p->tokens + (size_t)b * p->block_tokens, tokens,
			    sizeof(int32_t) * p->block_tokens))
			return b;
	return -1;
}

static void index_block(kv_pool *p, int32_t b, uint64_t h, uint64_t parent_gen,
			const int32_t *tokens)
{
	p->hash[b] = h;
	p->gen[b] = p->next_gen++;
	p->parent_gen[b] = parent_gen;
	memcpy(p->tokens + (size_t)b * p->block_tokens, tokens, sizeof(int32_t) * p->block_tokens);
	int32_t *head = &p->bucket[h & p->bucket_mask];
	p->chain[b] = *head;
	*head = b;
	p->n_cached++;
	p->published++;
	log_event(p, p->ev_stored, &p->n_ev_stored, h);
}

/* Take idle published block b out of the cache: it becomes free. */
static void evict(kv_pool *p, int32_t b)
{
	lru_remove(p, b);
	int32_t *link = &p->bucket[p->hash[b] & p->bucket_mask];
	while (*link != b)
		link = &p->chain[*link];
	*link = p->chain[b];
	p->gen[b] = 0;
	p->n_cached--;
	p->evictions++;
	log_event(p, p->ev_evicted, &p->n_ev_evicted, p->hash[b]);
	p->free_ids[p->n_free++] = b;
}

/* One more reference to block b (idle blocks leave the LRU list). */
static void ref(kv_pool *p, int32_t b)
{
	if (p->refs[b]++ == 0 && p->gen[b])
		lru_remove(p, b);
}

static void unref(kv_pool *p, int32_t b)
{
	if (p->refs[b] <= 0) { /* a bug upstream: counted, reported by kv_pool_check */
		p->bad_releases++;
		return;
	}
	if (--p->refs[b] > 0)
		return;
	if (p->gen[b])
		lru_push(p, b);
	else
		p->free_ids[p->n_free++] = b;
}

static int grow_table(kv_table *t, int n)
{
	if (n <= t->cap)
		return SL_OK;
	int cap = t->cap ? t->cap : 8;
	while (cap < n)
		cap *= 2;
	int32_t *nb = realloc(t->blocks, sizeof(int32_t) * cap);
	if (!nb)
		return SL_ENOMEM;
	t->blocks = nb;
	t->cap = cap;
	return SL_OK;
}

int kv_table_reserve(kv_pool *p, kv_table *t, int n_tokens)
{
	int need = kv_blocks_for(p, n_tokens) - t->n;
	if (need <= 0)
		return SL_OK;
	if (need > kv_pool_free_blocks(p) || grow_table(t, t->n + need))
		return SL_ENOMEM;
	for (int i = 0; i < need; i++) {
		if (p->n_free == 0) /* never-published blocks first, then the oldest idle one */
			evict(p, p->lru_head);
		int32_t b = p->free_ids[--p->n_free];
		p->refs[b] = 1;
		t->blocks[t->n++] = b;
	}
	return SL_OK;
}

void kv_table_release(kv_pool *p, kv_table *t)
{
	for (int i = t->n - 1; i >= 0; i--)
		unref(p, t->blocks[i]);
	free(t->blocks);
	t->blocks = NULL;
	t->n = t->cap = 0;
}

/* --- prefix cache --------------------------------------------------------- */

int kv_cache_match(const kv_pool *p, const uint64_t *hashes, const int32_t *tokens, int n_blocks)
{
	uint64_t parent = 0;
	int i = 0;
	for (; i < n_blocks; i++) {
		int32_t b = find(p, hashes[i], parent, tokens + (size_t)i * p->block_tokens);
		if (b < 0)
			break;
		parent = p->gen[b];
	}
	return i;
}

int kv_cache_acquire(kv_pool *p, kv_table *t, const uint64_t *hashes, const int32_t *tokens,
		     int n_blocks)
{
	int n = kv_cache_match(p, hashes, tokens, n_blocks);
	if (n == 0 || t->n != 0 || grow_table(t, n))
		return 0;
	uint64_t parent = 0;
	for (int i = 0; i < n; i++) {
		int32_t b = find(p, hashes[i], parent, tokens + (size_t)i * p->block_tokens);
		ref(p, b);
		t->blocks[t->n++] = b;
		parent = p->gen[b];
	}
	return n;
}

void kv_cache_publish(kv_pool *p, kv_table *t, const uint64_t *hashes, const int32_t *tokens,
		      int from, int to)
{
	for (int i = from; i < to && i < t->n; i++) {
		int32_t b = t->blocks[i];
		uint64_t parent = i ? p->gen[t->blocks[i - 1]] : 0;
		if (p->gen[b] || (i && !parent))
			continue; /* already published; or its parent is not (cannot happen in order) */
		const int32_t *tok = tokens + (size_t)i * p->block_tokens;
		int32_t twin = find(p, hashes[i], parent, tok);
		if (twin >= 0) {
			ref(p, twin);
			t->blocks[i] = twin;
			unref(p, b);
		} else {
			index_block(p, b, hashes[i], parent, tok);
		}
	}
}

void kv_cache_flush(kv_pool *p)
{
	while (p->lru_head >= 0)
		evict(p, p->lru_head);
}

void kv_cache_counts_get(const kv_pool *p, kv_cache_counts *out)
{
	*out = (kv_cache_counts){.cached_blocks = p->n_cached, .idle_blocks = p->n_idle,
				 .published = p->published, .evictions = p->evictions};
}

int kv_cache_events_enable(kv_pool *p)
{
	if (p->ev_stored)
		return SL_OK;
	p->ev_stored = malloc(sizeof(uint64_t) * p->n_blocks);
	p->ev_evicted = malloc(sizeof(uint64_t) * p->n_blocks);
	if (!p->ev_stored || !p->ev_evicted) {
		free(p->ev_stored), free(p->ev_evicted);
		p->ev_stored = p->ev_evicted = NULL;
		return SL_ENOMEM;
	}
	p->n_ev_stored = p->n_ev_evicted = 0;
	p->ev_reset = 1; /* whoever reads first learns everything cached so far */
	return SL_OK;
}

void kv_cache_events_resync(kv_pool *p) { p->ev_reset = 1; }

int kv_cache_events_pending(const kv_pool *p)
{
	return p->ev_stored && (p->ev_reset || p->n_ev_stored || p->n_ev_evicted);
}

void kv_cache_events_take(kv_pool *p, const uint64_t **stored, int *n_stored,
			  const uint64_t **evicted, int *n_evicted, int *reset)
{
	*stored = p->ev_stored, *evicted = p->ev_evicted;
	*n_stored = *n_evicted = *reset = 0;
	if (!p->ev_stored)
		return;
	if (p->ev_reset) { /* a snapshot: at most n_blocks published blocks */
		int n = 0;
		for (int b = 0; b < p->n_blocks; b++)
			if (p->gen[b])
				p->ev_stored[n++] = p->hash[b];
		*n_stored = n;
		*reset = 1;
	} else {
		*n_stored = p->n_ev_stored;
		*n_evicted = p->n_ev_evicted;
	}
	p->n_ev_stored = p->n_ev_evicted = p->ev_reset = 0;
}

int kv_pool_check(const kv_pool *p, char *err, size_t errlen)
{
	if (p->bad_releases)
		return sl_errf(err, errlen, SL_EINVAL, "kv: %ld references dropped twice",
			       p->bad_releases);
	char *seen = calloc(p->n_blocks, 1);
	if (!seen)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	int rc = SL_OK, n_lru = 0, n_ref = 0, n_pub = 0, n_chained = 0;
	for (int i = 0; !rc && i < p->n_free; i++) {
		int32_t b = p->free_ids[i];
		if (b < 0 || b >= p->n_blocks || seen[b]++ || p->refs[b] || p->gen[b])
			rc = sl_errf(err, errlen, SL_EINVAL, "kv: free block %d is listed twice, "
				     "referenced or published", b);
	}
	for (int32_t b = p->lru_head; !rc && b >= 0; b = p->lru_next[b], n_lru++)
		if (n_lru >= p->n_blocks || seen[b]++ || p->refs[b] || !p->gen[b])
			rc = sl_errf(err, errlen, SL_EINVAL, "kv: idle block %d is also free, "
				     "referenced (%d) or unpublished", b, p->refs[b]);
	for (int b = 0; !rc && b < p->n_blocks; b++) {
		n_pub += p->gen[b] != 0;
		if (p->refs[b] > 0 && !seen[b]++)
			n_ref++;
		else if (!seen[b])
			rc = sl_errf(err, errlen, SL_EINVAL, "kv: block %d is lost: not free, idle "
				     "or referenced", b);
	}
	for (uint32_t k = 0; !rc && k <= p->bucket_mask; k++)
		for (int32_t b = p->bucket[k]; b >= 0 && n_chained <= p->n_blocks; b = p->chain[b])
			n_chained++;
	if (!rc && (n_lru != p->n_idle || n_pub != p->n_cached || n_chained != n_pub ||
		    p->n_free + n_lru + n_ref != p->n_blocks))
		rc = sl_errf(err, errlen, SL_EINVAL, "kv: counts disagree: %d free + %d idle + %d "
			     "referenced of %d; %d published, %d indexed, %d counted", p->n_free, n_lru,
			     n_ref, p->n_blocks, n_pub, n_chained, p->n_cached);
	free(seen);
	return rc;
}
