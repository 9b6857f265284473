/*
 * test_prefix_cache.c — automatic prefix caching: the block pool's cache
 * (node/kv.c) on its own, and through the engine and scheduler
 * (node/engine.c, node/scheduler.c) on the CPU backend with the mha_f32
 * golden checkpoint (4-token blocks, 32-token steps so prompts are
 * prefilled in chunks).
 *
 * The evidence for outputs is the same request run alone on a fresh
 * engine with the cache off: staggered requests that share prefixes of
 * many lengths (ending inside a block and exactly at a block boundary,
 * whole prompts shared, prompts that are a prefix of another, and second
 * turns that continue a first turn's prompt and answer) must each give
 * exactly those tokens and log-probs (greedy, sampled with seeds, with
 * penalties) with the cache on, in a large pool (hits, no eviction) and in
 * one so small that cached blocks are evicted and sequences sharing
 * blocks are preempted. Afterwards no block is lost or freed twice and,
 * once the cache is flushed, the pool is whole again.
 *
 * The coordinator's mirror of a group's cache (coordinator/prefix.c) is
 * checked against a plain list, and fed with a pool's events through
 * random work it must hold exactly the pool's cached hashes.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/backend.h"
#include "common/block_hash.h"
#include "coordinator/prefix.h"
#include "node/engine.h"
#include "unit/golden.h"
#include "node/kv.h"
#include "node/scheduler.h"
#include "common/sl.h"

#define STEP_TOKENS 32
#define BT 4            /* tokens per block */
#define BIG_POOL 1024
#define SMALL_POOL 48   /* 192 tokens: each request fits alone (at most 41 blocks) */
#define N_ROOT 5
#define N_FIRST 30      /* first turns */
#define N_REQ 40        /* and ten second turns */
#define MAX_PROMPT 200
#define MAX_NEW 24
#define TOP 5

/* --- the pool alone ------------------------------------------------------ */

static void check_pool(kv_pool *p)
{
	char err[SL_ERRLEN] = "";
	ck_assert_msg(kv_pool_check(p, err, sizeof err) == 0, "%s", err);
}

/* A table of n blocks holding tokens, published whole. */
static void fill(kv_pool *p, kv_table *t, const int32_t *tok, int n, uint64_t *h)
{
	ck_assert_int_eq(kv_table_reserve(p, t, n * BT), 0);
	sl_block_hashes(tok, BT, 0, n, h);
	kv_cache_publish(p, t, h, tok, 0, n);
}

START_TEST(test_pool_publish_match_evict)
{
	kv_pool *p;
	int32_t tok[6 * BT];
	uint64_t h[6];
	for (int i = 0; i < 6 * BT; i++)
		tok[i] = 10 + i;
	ck_assert_int_eq(kv_pool_create(8, BT, &p), 0);
	kv_table t = {0};
	fill(p, &t, tok, 3, h);
	ck_assert_int_eq(kv_cache_match(p, h, tok, 3), 3);
	ck_assert_int_eq(kv_pool_free_blocks(p), 5);
	kv_table_release(p, &t);
	kv_cache_counts c;
	kv_cache_counts_get(p, &c);
	ck_assert_int_eq(c.cached_blocks, 3);
	ck_assert_int_eq(c.idle_blocks, 3);
	ck_assert_int_eq(kv_pool_free_blocks(p), 8); /* idle cached blocks count as free */
	/* a longer query matches the cached leading blocks only */
	sl_block_hashes(tok, BT, 0, 6, h);
	ck_assert_int_eq(kv_cache_match(p, h, tok, 6), 3);
	/* a different first block: nothing, though later blocks are cached */
	int32_t other[6 * BT];
	memcpy(other, tok, sizeof tok);
	other[0] = 7;
	uint64_t ho[6];
	sl_block_hashes(other, BT, 0, 6, ho);
	ck_assert_int_eq(kv_cache_match(p, ho, other, 6), 0);
	/* take two of them, then fill the pool: the untaken idle block (the
	 * third) is evicted, not the taken ones */
	kv_table a = {0}, b = {0};
	ck_assert_int_eq(kv_cache_acquire(p, &a, h, tok, 2), 2);
	ck_assert_int_eq(kv_pool_free_blocks(p), 6);
	ck_assert_int_eq(kv_table_reserve(p, &b, 6 * BT), 0);
	kv_cache_counts_get(p, &c);
	ck_assert_int_eq(c.evictions, 1);
	ck_assert_int_eq(kv_cache_match(p, h, tok, 3), 2);
	ck_assert_int_eq(kv_table_reserve(p, &b, 7 * BT), SL_ENOMEM); /* all or nothing */
	ck_assert_int_eq(b.n, 6);
	check_pool(p);
	kv_table_release(p, &a);
	kv_table_release(p, &b);
	kv_cache_flush(p);
	kv_cache_counts_get(p, &c);
	ck_assert_int_eq(c.cached_blocks, 0);
	ck_assert_int_eq(kv_pool_free_blocks(p), 8);
	check_pool(p);
	kv_pool_destroy(p);
}
END_TEST

/* The oldest idle block goes first, and a table's tail before its head:
 * releasing a sequence leaves its prefix cached longest. */
START_TEST(test_pool_lru_order)
{
	kv_pool *p;
	int32_t tok[4 * BT];
	uint64_t h[4];
	for (int i = 0; i < 4 * BT; i++)
		tok[i] = 3 + i;
	ck_assert_int_eq(kv_pool_create(4, BT, &p), 0);
	kv_table t = {0}, u = {0};
	fill(p, &t, tok, 4, h);
	kv_table_release(p, &t);
	for (int k = 1; k <= 4; k++) {
		ck_assert_int_eq(kv_table_reserve(p, &u, k * BT), 0);
		ck_assert_int_eq(kv_cache_match(p, h, tok, 4), 4 - k);
	}
	kv_table_release(p, &u);
	check_pool(p);
	kv_pool_destroy(p);
}
END_TEST

/* Equal hashes are not enough: the tokens must match too (a collision,
 * forged here, is a miss), and a prefix published twice at once is kept
 * once: the second table is pointed at the first one's blocks. */
START_TEST(test_pool_collision_and_twins)
{
	kv_pool *p;
	int32_t x[BT] = {5, 6, 7, 8}, y[BT] = {5, 6, 7, 9};
	uint64_t forged[1] = {42};
	ck_assert_int_eq(kv_pool_create(8, BT, &p), 0);
	kv_table t = {0};
	ck_assert_int_eq(kv_table_reserve(p, &t, BT), 0);
	kv_cache_publish(p, &t, forged, x, 0, 1);
	ck_assert_int_eq(kv_cache_match(p, forged, x, 1), 1);
	ck_assert_int_eq(kv_cache_match(p, forged, y, 1), 0);
	kv_table_release(p, &t);
	kv_cache_flush(p);
	/* a forged chain: block 1 of [x, y] and of [y, y] collide; the second
	 * is not found under the first one's parent */
	int32_t xy[2 * BT] = {5, 6, 7, 8, 5, 6, 7, 9}, yy[2 * BT] = {5, 6, 7, 9, 5, 6, 7, 9};
	uint64_t hxy[2] = {100, 42}, hyy[2] = {200, 42};
	kv_table u = {0};
	ck_assert_int_eq(kv_table_reserve(p, &t, 2 * BT), 0);
	kv_cache_publish(p, &t, hxy, xy, 0, 2);
	ck_assert_int_eq(kv_table_reserve(p, &u, BT), 0);
	kv_cache_publish(p, &u, hyy, yy, 0, 1);
	ck_assert_int_eq(kv_cache_match(p, hxy, xy, 2), 2);
	ck_assert_int_eq(kv_cache_match(p, hyy, yy, 2), 1);
	kv_table_release(p, &t);
	kv_table_release(p, &u);
	kv_cache_flush(p);

	int32_t tok[3 * BT];
	uint64_t h[3];
	for (int i = 0; i < 3 * BT; i++)
		tok[i] = 20 + i;
	kv_table a = {0}, b = {0};
	fill(p, &a, tok, 3, h);
	ck_assert_int_eq(kv_table_reserve(p, &b, 3 * BT), 0);
	ck_assert_int_eq(kv_pool_free_blocks(p), 2);
	kv_cache_publish(p, &b, h, tok, 0, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(b.blocks[i], a.blocks[i]);
	ck_assert_int_eq(kv_pool_free_blocks(p), 5); /* b's own three came back */
	kv_cache_counts c;
	kv_cache_counts_get(p, &c);
	ck_assert_int_eq(c.cached_blocks, 3);
	kv_table_release(p, &a);
	ck_assert_int_eq(kv_cache_match(p, h, tok, 3), 3); /* b still holds them */
	kv_table_release(p, &b);
	check_pool(p);
	kv_pool_destroy(p);
}
END_TEST

/* What a router learns: a snapshot first, then published and evicted
 * hashes per take; a log that overflows turns into a snapshot. */
START_TEST(test_pool_events)
{
	kv_pool *p;
	const uint64_t *st, *ev;
	int ns, ne, reset;
	int32_t tok[2 * BT];
	uint64_t h[2];
	for (int i = 0; i < 2 * BT; i++)
		tok[i] = 50 + i;
	ck_assert_int_eq(kv_pool_create(4, BT, &p), 0);
	kv_table t = {0}, u = {0};
	fill(p, &t, tok, 1, h);
	ck_assert_int_eq(kv_cache_events_enable(p), 0);
	kv_cache_events_take(p, &st, &ns, &ev, &ne, &reset);
	ck_assert(reset && ns == 1 && ne == 0 && st[0] == h[0]);
	kv_table_release(p, &t);
	fill(p, &t, tok, 2, h); /* block 0 is a twin of the cached one: one new */
	kv_cache_events_take(p, &st, &ns, &ev, &ne, &reset);
	ck_assert(!reset && ns == 1 && ne == 0 && st[0] == h[1]);
	kv_table_release(p, &t);
	ck_assert_int_eq(kv_table_reserve(p, &u, 4 * BT), 0); /* evicts both */
	kv_cache_events_take(p, &st, &ns, &ev, &ne, &reset);
	ck_assert(!reset && ns == 0 && ne == 2 && ev[0] == h[1] && ev[1] == h[0]);
	kv_table_release(p, &u);
	for (int k = 0; k < 6; k++) { /* 6 publications and 6 evictions: more than 4 each */
		fill(p, &t, tok + (k % 2) * BT, 1, h);
		kv_table_release(p, &t);
		kv_cache_flush(p);
	}
	fill(p, &t, tok, 1, h);
	kv_cache_events_take(p, &st, &ns, &ev, &ne, &reset);
	ck_assert(reset && ns == 1 && ne == 0 && st[0] == h[0]);
	kv_cache_events_resync(p);
	kv_cache_events_take(p, &st, &ns, &ev, &ne, &reset);
	ck_assert(reset && ns == 1);
	kv_table_release(p, &t);
	check_pool(p);
	kv_pool_destroy(p);
}
END_TEST

/* The invariant check must catch a reference dropped twice. */
START_TEST(test_pool_check_catches_double_release)
{
	kv_pool *p;
	char err[SL_ERRLEN] = "";
	ck_assert_int_eq(kv_pool_create(4, BT, &p), 0);
	kv_table t = {0};
	ck_assert_int_eq(kv_table_reserve(p, &t, 2 * BT), 0);
	kv_table dup = {malloc(sizeof(int32_t) * t.n), t.n, t.n};
	memcpy(dup.blocks, t.blocks, sizeof(int32_t) * t.n);
	kv_table_release(p, &t);
	check_pool(p);
	kv_table_release(p, &dup);
	ck_assert_int_ne(kv_pool_check(p, err, sizeof err), 0);
	ck_assert_msg(strstr(err, "twice") != NULL, "%s", err);
	kv_pool_destroy(p);
}
END_TEST

/* --- the coordinator's mirror ------------------------------------------------ */

/* Random adds and removes, many keys sharing a home slot (low bits equal)
 * and growth past the first table: counts as a plain list of pairs says,
 * and match stops at the first absent hash. */
START_TEST(test_mirror_against_list)
{
	enum { KEYS = 3000, OPS = 40000 };
	static uint64_t key[KEYS];
	static int count[KEYS];
	coord_prefix *m;
	uint32_t x = 99;
#define NEXT() (x = x * 1664525u + 1013904223u, x >> 4)
	for (int i = 0; i < KEYS; i++) /* a third collide on the low 20 bits */
		key[i] = i % 3 == 0 ? ((uint64_t)(i + 1) << 40) | 7 : ((uint64_t)NEXT() << 32) | NEXT();
	key[5] = 0; /* the empty-slot marker's value is a hash like any other */
	ck_assert_int_eq(coord_prefix_create(KEYS, &m), 0);
	int distinct = 0;
	for (int op = 0; op < OPS; op++) {
		int i = (int)(NEXT() % (op < OPS / 2 ? KEYS : KEYS / 4));
		if (NEXT() % 3) {
			ck_assert_int_eq(coord_prefix_add(m, key[i]), 0);
			distinct += count[i]++ == 0;
		} else {
			coord_prefix_remove(m, key[i]);
			if (count[i] > 0)
				distinct -= --count[i] == 0;
		}
		if (op % 997 == 0 || op == OPS - 1) {
			ck_assert_int_eq(coord_prefix_size(m), distinct);
			for (int k = 0; k < KEYS; k++)
				ck_assert_msg(coord_prefix_match(m, &key[k], 1) == (count[k] > 0),
					      "op %d: key %d (count %d) %s", op, k, count[k],
					      count[k] ? "missing" : "present");
		}
	}
	uint64_t chain[3] = {key[0], key[1], key[2]};
	count[0] = count[1] = 1, count[2] = 0;
	coord_prefix_reset(m);
	coord_prefix_add(m, key[0]), coord_prefix_add(m, key[1]);
	ck_assert_int_eq(coord_prefix_match(m, chain, 3), 2);
	coord_prefix_remove(m, key[0]);
	ck_assert_int_eq(coord_prefix_match(m, chain, 3), 0);
	coord_prefix_destroy(m);
	/* bounded: a 2-hash mirror records 2 */
	ck_assert_int_eq(coord_prefix_create(2, &m), 0);
	ck_assert_int_eq(coord_prefix_add(m, 1), 0);
	ck_assert_int_eq(coord_prefix_add(m, 2), 0);
	ck_assert_int_eq(coord_prefix_add(m, 3), SL_ENOMEM);
	ck_assert_int_eq(coord_prefix_add(m, 2), 0);
	coord_prefix_destroy(m);
#undef NEXT
}
END_TEST

/* Stored hashes first, then evicted ones: what on_node.c does with a Load. */
static void apply_events(kv_pool *p, coord_prefix *m)
{
	const uint64_t *st, *ev;
	int ns, ne, reset;
	kv_cache_events_take(p, &st, &ns, &ev, &ne, &reset);
	if (reset)
		coord_prefix_reset(m);
	for (int i = 0; i < ns; i++)
		ck_assert_int_eq(coord_prefix_add(m, st[i]), 0);
	for (int i = 0; i < ne; i++)
		coord_prefix_remove(m, ev[i]);
}

/* A pool under random work (tables of shared and private prefixes
 * reserved, published, released, the cache flushed) feeds a mirror its
 * events after every operation, or only now and then (so the log
 * overflows into snapshots): the mirror then holds exactly the hashes of
 * the pool's cached blocks, and matches a sequence as far as the pool. */
START_TEST(test_mirror_follows_pool_events)
{
	enum { N_TAB = 6, LEN = 10 };
	kv_pool *p;
	coord_prefix *m;
	kv_table t[N_TAB] = {{0}};
	int32_t tok[N_TAB][LEN * BT];
	uint64_t h[N_TAB][LEN];
	uint32_t x = 4242;
#define NEXT() (x = x * 1664525u + 1013904223u, x >> 8)
	ck_assert_int_eq(kv_pool_create(24, BT, &p), 0);
	ck_assert_int_eq(coord_prefix_create(2 * 24, &m), 0); /* room for a Load: adds before removes */
	ck_assert_int_eq(kv_cache_events_enable(p), 0);
	for (int round = 0; round < 400; round++) {
		int k = (int)(NEXT() % N_TAB);
		if (t[k].n) {
			kv_table_release(p, &t[k]);
		} else { /* a new sequence: shares the first blocks of another, or not */
			int share = (int)(NEXT() % 4), n = 1 + (int)(NEXT() % LEN);
			for (int i = 0; i < LEN * BT; i++)
				tok[k][i] = i < share * BT ? 3 + i : 3 + (int32_t)(NEXT() % 50);
			sl_block_hashes(tok[k], BT, 0, n, h[k]);
			int hit = kv_cache_acquire(p, &t[k], h[k], tok[k], n);
			if (kv_table_reserve(p, &t[k], n * BT) == 0)
				kv_cache_publish(p, &t[k], h[k], tok[k], hit, n);
			else
				kv_table_release(p, &t[k]);
		}
		if (NEXT() % 50 == 0)
			kv_cache_flush(p);
		if (round < 200 || NEXT() % 20 == 0)
			apply_events(p, m);
		else
			continue;
		const uint64_t *st, *ev;
		int ns, ne, reset;
		kv_cache_counts c;
		kv_cache_counts_get(p, &c);
		ck_assert_int_eq(coord_prefix_size(m), c.cached_blocks); /* no two alike here */
		kv_cache_events_resync(p); /* a snapshot: every cached hash, to compare */
		kv_cache_events_take(p, &st, &ns, &ev, &ne, &reset);
		ck_assert(reset && ns == c.cached_blocks);
		for (int i = 0; i < ns; i++)
			ck_assert_msg(coord_prefix_match(m, &st[i], 1) == 1, "round %d: cached hash "
				      "%d of %d missing from the mirror", round, i, ns);
		for (int j = 0; j < N_TAB; j++)
			if (t[j].n)
				ck_assert_int_eq(coord_prefix_match(m, h[j], t[j].n),
						 kv_cache_match(p, h[j], tok[j], t[j].n));
		check_pool(p);
	}
	for (int k = 0; k < N_TAB; k++)
		kv_table_release(p, &t[k]);
	check_pool(p);
	coord_prefix_destroy(m);
	kv_pool_destroy(p);
#undef NEXT
}
END_TEST

/* --- through the engine -------------------------------------------------- */

typedef struct lp_rec {
	float lp[MAX_NEW], top[MAX_NEW * TOP];
	int32_t ids[MAX_NEW * TOP];
	int n, top_n;
} lp_rec;

typedef struct workload {
	int32_t prompt[N_REQ][MAX_PROMPT];
	node_request req[N_REQ];
	int arrival[N_REQ];
	int32_t want[N_REQ][MAX_NEW];
	int n_want[N_REQ];
	lp_rec want_lp[N_REQ];
} workload;

typedef struct rig {
	node_backend *be;
	model *m;
	node_engine *e;
	node_sched *s;
	int32_t got[N_REQ][MAX_NEW];
	int n_got[N_REQ], done;
	lp_rec got_lp[N_REQ];
} rig;

static void rig_open(rig *r, int kv_blocks, int cache, int max_running)
{
	char dir[512], err[SL_ERRLEN] = "";
	const char *root = getenv("SL_GOLDEN_DIR");
	snprintf(dir, sizeof dir, "%s/mha_f32", root ? root : "tests/golden");
	memset(r, 0, sizeof *r);
	ck_assert_int_eq(node_backend_cpu_create(&r->be), 0);
	model_opts o = {.step_tokens = STEP_TOKENS, .n_kv_blocks = kv_blocks, .block_tokens = BT};
	ck_assert_msg(model_create(dir, r->be, &o, &r->m, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(node_engine_create(r->m, &r->e, err, sizeof err), 0);
	node_engine_set_prefix_cache(r->e, cache);
	if (max_running > 0) {
		node_sched_opts so = {.max_running = max_running, .max_waiting = N_REQ};
		ck_assert_msg(node_sched_create(r->e, &so, &r->s, err, sizeof err) == 0, "%s", err);
	}
}

/* No block lost or freed twice; once the cache is flushed the pool is whole. */
static void rig_close(rig *r)
{
	char err[SL_ERRLEN] = "";
	node_sched_destroy(r->s);
	ck_assert_msg(node_engine_check_pool(r->e, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(node_engine_free_blocks(r->e), node_engine_total_blocks(r->e));
	node_engine_flush_cache(r->e);
	node_cache_stats cs;
	node_engine_cache_stats(r->e, &cs);
	ck_assert_int_eq(cs.cached_blocks, 0);
	ck_assert_msg(node_engine_check_pool(r->e, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(node_engine_free_blocks(r->e), node_engine_total_blocks(r->e));
	node_engine_destroy(r->e);
	model_destroy(r->m);
	node_backend_destroy(r->be);
}

static void keep_lp(lp_rec *rec, const float *lp, const int32_t *ids, const float *top, int top_n,
		    int n)
{
	ck_assert_int_le(rec->n + n, MAX_NEW);
	ck_assert_int_le(top_n, TOP);
	memcpy(rec->lp + rec->n, lp, sizeof(float) * n);
	memcpy(rec->ids + rec->n * top_n, ids, sizeof(int32_t) * n * top_n);
	memcpy(rec->top + rec->n * top_n, top, sizeof(float) * n * top_n);
	rec->n += n;
	rec->top_n = top_n;
}

/* Request i alone on a fresh engine, cache off: the reference. */
static void run_alone(workload *w, int i)
{
	rig r;
	char err[SL_ERRLEN] = "";
	rig_open(&r, BIG_POOL, 0, 0);
	node_result res = {0};
	ck_assert_msg(node_generate(r.e, 1, &w->req[i], &res, err, sizeof err) == 0, "%s", err);
	ck_assert(res.n_tokens >= 1 && res.n_tokens <= MAX_NEW);
	memcpy(w->want[i], res.tokens, sizeof(int32_t) * res.n_tokens);
	w->n_want[i] = res.n_tokens;
	if (res.logprobs)
		keep_lp(&w->want_lp[i], res.logprobs, res.top_ids, res.top_logprobs, res.top_n,
			res.n_tokens);
	node_result_free(&res);
	rig_close(&r);
}

/* Prefixes shared in every way: N_ROOT roots of 16 (4 whole blocks), 23,
 * 37, 64 (16 blocks) and 5 tokens; first turns are a root plus 0 (the
 * root alone, so whole prompts repeat), 1, 3, 4 or 9 more tokens, or
 * another first turn's prompt plus a few; second turns continue a first
 * turn with its answer (from the reference run) and a new question.
 * Greedy, sampled with seeds, and with penalties and log-probs, in turn. */
static void make_workload(workload *w)
{
	static const int root_len[N_ROOT] = {16, 23, 37, 64, 5};
	static const int extra[] = {0, 1, 3, 4, 9, 0, 2};
	int32_t root[N_ROOT][64];
	uint32_t x = 777;
#define NEXT() (x = x * 1664525u + 1013904223u, x >> 8)
	memset(w, 0, sizeof *w);
	for (int r = 0; r < N_ROOT; r++)
		for (int k = 0; k < root_len[r]; k++)
			root[r][k] = 3 + (int32_t)(NEXT() % 253);
	for (int i = 0; i < N_REQ; i++) {
		int32_t *p = w->prompt[i];
		int n;
		if (i < N_FIRST && i % 6 == 5) { /* another first turn's prompt, and more */
			const node_request *o = &w->req[i - 3];
			memcpy(p, o->prompt, sizeof(int32_t) * o->n_prompt);
			n = o->n_prompt;
		} else if (i < N_FIRST) {
			int r = (int)(NEXT() % N_ROOT);
			memcpy(p, root[r], sizeof(int32_t) * root_len[r]);
			n = root_len[r];
		} else { /* a second turn of first turn j: prompt, answer, question */
			int j = (i - N_FIRST) * 3 + 1;
			memcpy(p, w->req[j].prompt, sizeof(int32_t) * w->req[j].n_prompt);
			n = w->req[j].n_prompt;
			memcpy(p + n, w->want[j], sizeof(int32_t) * w->n_want[j]);
			n += w->n_want[j];
		}
		int more = i < N_FIRST ? extra[i % 7] : 2 + (int)(NEXT() % 6);
		for (int k = 0; k < more; k++)
			p[n++] = 3 + (int32_t)(NEXT() % 253);
		ck_assert_int_le(n + MAX_NEW, MAX_PROMPT + 40);
		w->req[i] = (node_request){.prompt = p, .n_prompt = n,
					   .max_new_tokens = 4 + (int)(NEXT() % (MAX_NEW - 4)),
					   .ignore_eos = 1, .sampling = {.top_p = 1}};
		if (i % 3 == 1)
			w->req[i].sampling = (kern_sample_params){.temperature = 0.9f, .top_k = 40,
								  .top_p = 0.95f, .seed = 500 + i};
		if (i % 5 == 2)
			w->req[i].sampling = (kern_sample_params){.temperature = 1.0f, .top_p = 1,
								  .repetition_penalty = 1.2f,
								  .presence_penalty = 0.5f, .seed = 900 + i,
								  .logprobs = 1, .top_logprobs = TOP};
		w->arrival[i] = i < N_FIRST ? (i / 4) * 2 : 40 + (i - N_FIRST) * 2;
		if (i == N_FIRST - 1) /* second turns need their first turns' answers */
			for (int j = 0; j < N_FIRST; j++)
				run_alone(w, j);
	}
	for (int i = N_FIRST; i < N_REQ; i++)
		run_alone(w, i);
#undef NEXT
}

static void record(rig *r, const node_sched_event *ev, int n)
{
	for (int i = 0; i < n; i++) {
		int id = (int)ev[i].req_id;
		ck_assert_msg(ev[i].finish != NODE_SCHED_ERROR, "request %d: %s", id, ev[i].error);
		ck_assert_int_le(r->n_got[id] + ev[i].n_tokens, MAX_NEW);
		memcpy(r->got[id] + r->n_got[id], ev[i].tokens, sizeof(int32_t) * ev[i].n_tokens);
		r->n_got[id] += ev[i].n_tokens;
		if (ev[i].logprobs)
			keep_lp(&r->got_lp[id], ev[i].logprobs, ev[i].top_ids, ev[i].top_logprobs,
				ev[i].top_n, ev[i].n_tokens);
		r->done += ev[i].finish != NODE_SCHED_RUNNING;
	}
}

static void run_staggered(rig *r, const workload *w)
{
	char err[SL_ERRLEN] = "";
	int next = 0;
	for (int step = 0; step < 100000 && (next < N_REQ || node_sched_busy(r->s)); step++) {
		for (; next < N_REQ && w->arrival[next] <= step; next++)
			ck_assert_msg(node_sched_submit(r->s, (uint64_t)next, &w->req[next], err,
							sizeof err) == 0, "submit %d: %s", next, err);
		const node_sched_event *ev;
		int n;
		ck_assert_msg(node_sched_step(r->s, &ev, &n, err, sizeof err) == 0, "%s", err);
		record(r, ev, n);
	}
	ck_assert_int_eq(r->done, N_REQ);
}

static void assert_same(const int32_t *got, int n_got, const int32_t *want, int n_want, int i)
{
	int k = 0;
	while (k < n_got && k < n_want && got[k] == want[k])
		k++;
	ck_assert_msg(k == n_got && k == n_want,
		      "request %d: token %d differs from running alone without the cache: got %d "
		      "tokens (token %d), alone %d tokens (token %d)", i, k, n_got,
		      k < n_got ? got[k] : -1, n_want, k < n_want ? want[k] : -1);
}

static void assert_same_lp(const lp_rec *got, const lp_rec *want, int i)
{
	ck_assert_msg(got->n == want->n && got->top_n == want->top_n,
		      "request %d: %d log-probs of %d alternatives, alone %d of %d", i, got->n,
		      got->top_n, want->n, want->top_n);
	for (int k = 0; k < got->n; k++) {
		int same = got->lp[k] == want->lp[k];
		for (int j = 0; j < got->top_n; j++)
			same &= got->ids[k * got->top_n + j] == want->ids[k * got->top_n + j] &&
				got->top[k * got->top_n + j] == want->top[k * got->top_n + j];
		ck_assert_msg(same, "request %d: token %d's log-probs differ from running alone: "
			      "%.9g, alone %.9g (tolerance 0)", i, k, got->lp[k], want->lp[k]);
	}
}

static workload g_w; /* made once: the reference runs take a while */

static const workload *shared_workload(void)
{
	if (g_w.req[0].n_prompt == 0)
		make_workload(&g_w);
	return &g_w;
}

static void staggered(int kv_blocks, int max_running, int small)
{
	const workload *w = shared_workload();
	rig r;
	rig_open(&r, kv_blocks, 1, max_running);
	run_staggered(&r, w);
	for (int i = 0; i < N_REQ; i++) {
		assert_same(r.got[i], r.n_got[i], w->want[i], w->n_want[i], i);
		assert_same_lp(&r.got_lp[i], &w->want_lp[i], i);
	}
	node_cache_stats cs;
	node_engine_cache_stats(r.e, &cs);
	long pre = node_engine_stats(r.e)->preemptions;
	fprintf(stderr, "prefix_cache: %d blocks, %d running: %ld of %ld tokens from the cache, "
		"%ld evictions, %ld preemptions\n", kv_blocks, max_running, cs.hit_tokens,
		cs.queried_tokens, cs.evictions, pre);
	ck_assert_msg(cs.hit_tokens > 0 && cs.hit_tokens < cs.queried_tokens,
		      "%ld of %ld tokens taken from the cache", cs.hit_tokens, cs.queried_tokens);
	if (small)
		ck_assert_msg(cs.evictions > 0 && pre > 0,
			      "a %d-block pool evicted %ld cached blocks and preempted %ld sequences",
			      kv_blocks, cs.evictions, pre);
	else
		ck_assert_msg(cs.evictions == 0 && pre == 0,
			      "a %d-block pool evicted %ld cached blocks and preempted %ld sequences",
			      kv_blocks, cs.evictions, pre);
	rig_close(&r);
}

START_TEST(test_staggered_shared_prefixes) { staggered(BIG_POOL, 16, 0); }
END_TEST

/* A small pool: cached blocks are evicted for new ones, sequences whose
 * blocks others share are preempted and recompute from what is left. */
START_TEST(test_small_pool_evicts_and_preempts) { staggered(SMALL_POOL, 16, 1); }
END_TEST

/* One request at a time: every later one finds what the earlier ones left. */
START_TEST(test_one_at_a_time) { staggered(BIG_POOL, 1, 0); }
END_TEST

static void generate(rig *r, const node_request *q, node_result *res)
{
	char err[SL_ERRLEN] = "";
	ck_assert_msg(node_generate(r->e, 1, q, res, err, sizeof err) == 0, "%s", err);
}

static long hits(const rig *r)
{
	node_cache_stats cs;
	node_engine_cache_stats(r->e, &cs);
	return cs.hit_tokens;
}

/* A prompt cached whole still computes its last token (for its logits):
 * a 32-token prompt (8 full blocks) repeated reuses 7 blocks and
 * recomputes the last; with one token more it reuses all 8 and computes
 * that one token. Tokens equal the uncached run's each time. */
START_TEST(test_whole_prompt_hits)
{
	rig r, ref;
	int32_t p[33];
	for (int i = 0; i < 33; i++)
		p[i] = 3 + (i * 11) % 250;
	node_request q = {.prompt = p, .n_prompt = 32, .max_new_tokens = 6, .ignore_eos = 1,
			  .sampling = {.top_p = 1}};
	node_request q1 = q;
	q1.n_prompt = 33;
	node_result want, want1, got = {0};
	rig_open(&ref, BIG_POOL, 0, 0);
	generate(&ref, &q, &want);
	generate(&ref, &q1, &want1);
	rig_close(&ref);
	rig_open(&r, BIG_POOL, 1, 0);
	generate(&r, &q, &got);
	ck_assert_int_eq(hits(&r), 0);
	node_result_free(&got);
	generate(&r, &q, &got);
	ck_assert_int_eq(hits(&r), 28);
	assert_same(got.tokens, got.n_tokens, want.tokens, want.n_tokens, 1);
	node_result_free(&got);
	generate(&r, &q1, &got);
	ck_assert_int_eq(hits(&r), 28 + 32);
	assert_same(got.tokens, got.n_tokens, want1.tokens, want1.n_tokens, 2);
	node_result_free(&got);
	node_result_free(&want);
	node_result_free(&want1);
	rig_close(&r);
}
END_TEST

/* Requests that want prompt logits compute every prompt row: they take
 * nothing from the cache and get the uncached run's logits bit for bit. */
START_TEST(test_prompt_logits_bypass)
{
	rig r, ref;
	int32_t p[20];
	for (int i = 0; i < 20; i++)
		p[i] = 5 + i * 7;
	int V = 256;
	float *want = malloc(sizeof(float) * 20 * V), *got = malloc(sizeof(float) * 20 * V);
	node_request q = {.prompt = p, .n_prompt = 20, .max_new_tokens = 2, .ignore_eos = 1,
			  .sampling = {.top_p = 1}};
	node_result res = {0};
	rig_open(&ref, BIG_POOL, 0, 0);
	ck_assert_int_eq(ref.m->cfg.vocab_size, V);
	q.prompt_logits = want;
	generate(&ref, &q, &res);
	node_result_free(&res);
	rig_close(&ref);
	rig_open(&r, BIG_POOL, 1, 0);
	q.prompt_logits = NULL;
	generate(&r, &q, &res); /* caches the prompt */
	node_result_free(&res);
	q.prompt_logits = got;
	generate(&r, &q, &res);
	node_result_free(&res);
	ck_assert_int_eq(hits(&r), 0);
	for (int i = 0; i < 20 * V; i++)
		ck_assert_msg(got[i] == want[i], "prompt logit %d (row %d): %.9g, uncached %.9g "
			      "(tolerance 0)", i, i / V, got[i], want[i]);
	free(want);
	free(got);
	rig_close(&r);
}
END_TEST

/* The newer of two sequences sharing a 40-token prefix is preempted while
 * its blocks are shared (the pool holds either alone, not both), keeps
 * the shared ones alive for the older, and restarts from the cache. */
START_TEST(test_preempt_shared_blocks)
{
	rig r, ref;
	char err[SL_ERRLEN] = "";
	int32_t p[44];
	for (int i = 0; i < 44; i++)
		p[i] = 3 + (i * 13) % 250;
	node_request a = {.prompt = p, .n_prompt = 40, .max_new_tokens = 60, .ignore_eos = 1,
			  .sampling = {.top_p = 1}};
	node_request b = {.prompt = p, .n_prompt = 44, .max_new_tokens = 60, .ignore_eos = 1,
			  .sampling = {.temperature = 0.8f, .top_p = 1, .seed = 3}};
	node_result wa, wb, ga, gb;
	rig_open(&ref, BIG_POOL, 0, 0);
	generate(&ref, &a, &wa);
	generate(&ref, &b, &wb);
	rig_close(&ref);
	rig_open(&r, 32, 1, 0); /* a needs 25 blocks, b 26, together 41 minus 10 shared */
	int ia, ib, active = 1;
	ck_assert_int_eq(node_engine_add(r.e, &a, &ia, err, sizeof err), 0);
	for (int k = 0; k < 3; k++) /* a's prompt in two chunks, then a decode */
		ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(node_engine_add(r.e, &b, &ib, err, sizeof err), 0);
	ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(hits(&r), 40);
	while (active > 0)
		ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(node_engine_stats(r.e)->preemptions > 0, "nothing was preempted");
	ck_assert_msg(hits(&r) > 40, "the preempted sequence took nothing from the cache");
	ck_assert_int_eq(node_engine_take(r.e, ia, &ga), 0);
	ck_assert_int_eq(node_engine_take(r.e, ib, &gb), 0);
	assert_same(ga.tokens, ga.n_tokens, wa.tokens, wa.n_tokens, 0);
	assert_same(gb.tokens, gb.n_tokens, wb.tokens, wb.n_tokens, 1);
	node_result_free(&wa), node_result_free(&wb), node_result_free(&ga), node_result_free(&gb);
	rig_close(&r);
}
END_TEST

/* Only blocks a completed step wrote are reused. A's 100-token prompt is
 * prefilled 32 tokens a step; B, its first 69 tokens, arrives after A's
 * first chunk. B could start at once from a 68-token hit (one token
 * left: the decode pass, which goes first) only if A's unwritten blocks
 * were offered; it must wait until they are written, take 68 then, and
 * give the uncached run's tokens. */
START_TEST(test_unwritten_blocks_not_reused)
{
	rig r, ref;
	char err[SL_ERRLEN] = "";
	int32_t p[100];
	for (int i = 0; i < 100; i++)
		p[i] = 3 + (i * 17) % 250;
	node_request a = {.prompt = p, .n_prompt = 100, .max_new_tokens = 4, .ignore_eos = 1,
			  .sampling = {.top_p = 1}};
	node_request b = {.prompt = p, .n_prompt = 69, .max_new_tokens = 8, .ignore_eos = 1,
			  .sampling = {.top_p = 1}};
	node_result wb, gb;
	rig_open(&ref, BIG_POOL, 0, 0);
	generate(&ref, &b, &wb);
	rig_close(&ref);
	rig_open(&r, BIG_POOL, 1, 0);
	int ia, ib, active = 1;
	ck_assert_int_eq(node_engine_add(r.e, &a, &ia, err, sizeof err), 0);
	ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(node_engine_add(r.e, &b, &ib, err, sizeof err), 0);
	for (int k = 0; k < 2; k++) { /* A's second and third chunks: B waits */
		ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
		ck_assert_int_eq(hits(&r), 0);
	}
	while (active > 0)
		ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(hits(&r), 68);
	ck_assert_int_eq(node_engine_take(r.e, ib, &gb), 0);
	assert_same(gb.tokens, gb.n_tokens, wb.tokens, wb.n_tokens, 1);
	ck_assert_int_eq(node_engine_drop(r.e, ia), 0);
	node_result_free(&wb), node_result_free(&gb);
	rig_close(&r);
}
END_TEST

/* --no-prefix-cache: nothing is published or taken. */
START_TEST(test_cache_off)
{
	rig r;
	int32_t p[24];
	for (int i = 0; i < 24; i++)
		p[i] = 9 + i;
	node_request q = {.prompt = p, .n_prompt = 24, .max_new_tokens = 3, .ignore_eos = 1,
			  .sampling = {.top_p = 1}};
	node_result res;
	rig_open(&r, BIG_POOL, 0, 0);
	for (int k = 0; k < 2; k++) {
		generate(&r, &q, &res);
		node_result_free(&res);
	}
	node_cache_stats cs;
	node_engine_cache_stats(r.e, &cs);
	ck_assert(!cs.enabled && cs.hit_tokens == 0 && cs.queried_tokens == 0 && cs.cached_blocks == 0);
	rig_close(&r);
}
END_TEST

int main(void)
{
	(void)golden_load, (void)golden_free, (void)golden_rel_err; /* golden.h helpers unused here */
	Suite *s = suite_create("prefix_cache");
	TCase *pool = tcase_create("pool");
	tcase_add_test(pool, test_pool_publish_match_evict);
	tcase_add_test(pool, test_pool_lru_order);
	tcase_add_test(pool, test_pool_collision_and_twins);
	tcase_add_test(pool, test_pool_events);
	tcase_add_test(pool, test_pool_check_catches_double_release);
	suite_add_tcase(s, pool);
	TCase *mirror = tcase_create("mirror");
	tcase_add_test(mirror, test_mirror_against_list);
	tcase_add_test(mirror, test_mirror_follows_pool_events);
	suite_add_tcase(s, mirror);
	TCase *eng = tcase_create("engine");
	tcase_set_timeout(eng, 300);
	tcase_add_test(eng, test_whole_prompt_hits);
	tcase_add_test(eng, test_prompt_logits_bypass);
	tcase_add_test(eng, test_preempt_shared_blocks);
	tcase_add_test(eng, test_unwritten_blocks_not_reused);
	tcase_add_test(eng, test_cache_off);
	tcase_add_test(eng, test_staggered_shared_prefixes);
	tcase_add_test(eng, test_small_pool_evicts_and_preempts);
	tcase_add_test(eng, test_one_at_a_time);
	suite_add_tcase(s, eng);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK); /* the workload is made once for the three runs */
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
