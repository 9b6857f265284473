/*
 * test_batching.c — continuous batching (node/scheduler.c over the engine's
 * mixed prefill/decode steps and preemption in node/engine.c) on the CPU
 * backend with the mha_f32 golden checkpoint. The evidence is the same
 * request run alone on a fresh engine: 50 requests of mixed prompt lengths
 * and max_tokens arriving over many steps must each produce exactly the
 * tokens they produce alone (greedy, and sampled: sampling is keyed by
 * seed and position; some with penalties, min-p and log-probs, whose
 * log-probs must be identical too), with a KV pool large enough, with one
 * so small that sequences are preempted and recomputed, and with a
 * penalty-history budget so small that sampling steps are deferred; the
 * pool is full again at the end. Cancelling in the middle of a chunked prefill or of decode
 * frees the blocks at once and leaves the others' tokens unchanged.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "node/backend.h"
#include "node/engine.h"
#include "unit/golden.h"
#include "node/scheduler.h"
#include "common/sl.h"

#define N_REQ 50
#define MAX_PROMPT 60
#define MAX_NEW 40
#define STEP_TOKENS 32  /* small, so prompts are prefilled in chunks */
#define BLOCK_TOKENS 4
#define BIG_POOL 1024   /* never short: no preemption */
#define SMALL_POOL 30   /* 120 tokens: one request at most 25 blocks, so it fits alone */
#define TOP 20          /* alternatives kept per token (KERN_MAX_TOP_LOGPROBS) */

/* Log-probs of up to MAX_NEW tokens of one request. */
typedef struct lp_rec {
	float lp[MAX_NEW], top[MAX_NEW * TOP];
	int32_t ids[MAX_NEW * TOP];
	int n, top_n;
} lp_rec;

typedef struct workload {
	int32_t prompt[N_REQ][MAX_PROMPT];
	node_request req[N_REQ];
	int arrival[N_REQ];              /* step at which request i is submitted */
	int32_t want[N_REQ][MAX_NEW];    /* tokens of request i run alone */
	int n_want[N_REQ];
	lp_rec want_lp[N_REQ];           /* and their log-probs, where asked */
} workload;

typedef struct rig {
	node_backend *be;
	model *m;
	node_engine *e;
	node_sched *s;
	int32_t got[N_REQ][MAX_NEW];
	int n_got[N_REQ], finish[N_REQ], done;
	lp_rec got_lp[N_REQ];
} rig;

static int g_max_hist; /* the rigs' penalty-history budget (0: the default) */

static const char *model_dir(char *buf, size_t n)
{
	const char *root = getenv("SL_GOLDEN_DIR");
	snprintf(buf, n, "%s/mha_f32", root ? root : "tests/golden");
	return buf;
}

static void rig_open(rig *r, int kv_blocks, int max_running, node_sched_policy policy)
{
	char dir[512], err[SL_ERRLEN] = "";
	memset(r, 0, sizeof *r);
	ck_assert_int_eq(node_backend_cpu_create(&r->be), 0);
	model_opts o = {.step_tokens = STEP_TOKENS, .n_kv_blocks = kv_blocks,
			.block_tokens = BLOCK_TOKENS, .max_hist = g_max_hist};
	ck_assert_msg(model_create(model_dir(dir, sizeof dir), r->be, &o, &r->m, err, sizeof err) == 0,
		      "%s", err);
	ck_assert_int_eq(node_engine_create(r->m, &r->e, err, sizeof err), 0);
	if (max_running > 0) {
		node_sched_opts so = {.max_running = max_running, .max_waiting = N_REQ, .policy = policy};
		ck_assert_msg(node_sched_create(r->e, &so, &r->s, err, sizeof err) == 0, "%s", err);
	}
}

static void rig_close(rig *r)
{
	node_sched_destroy(r->s);
	ck_assert_int_eq(node_engine_free_blocks(r->e), node_engine_total_blocks(r->e)); /* no leak */
	node_engine_destroy(r->e);
	model_destroy(r->m);
	node_backend_destroy(r->be);
}

/* Mixed lengths from a fixed LCG: prompts of 1..60 tokens, 1..40 new
 * tokens, a third stopping at EOS, a quarter sampled (half of those with
 * min-p, a presence penalty and 20 log-probs), a quarter greedy with
 * repetition and frequency penalties and 3 log-probs; arrivals in bursts. */
static void make_workload(workload *w)
{
	uint32_t x = 12345;
#define NEXT() (x = x * 1664525u + 1013904223u, x >> 8)
	memset(w, 0, sizeof *w);
	for (int i = 0; i < N_REQ; i++) {
		int n = 1 + (int)(NEXT() % MAX_PROMPT);
		for (int k = 0; k < n; k++)
			w->prompt[i][k] = 3 + (int32_t)(NEXT() % 253);
		w->req[i] = (node_request){.prompt = w->prompt[i], .n_prompt = n,
					   .max_new_tokens = 1 + (int)(NEXT() % MAX_NEW),
					   .ignore_eos = i % 3 != 0, .sampling = {.top_p = 1}};
		if (i % 4 == 1)
			w->req[i].sampling = (kern_sample_params){.temperature = 0.9f, .top_k = 50,
								  .top_p = 0.95f, .seed = 1000 + i};
		if (i % 8 == 5)
			w->req[i].sampling = (kern_sample_params){.temperature = 1.1f, .top_p = 1,
								  .min_p = 0.05f, .presence_penalty = 0.6f,
								  .seed = 2000 + i, .logprobs = 1,
								  .top_logprobs = TOP};
		if (i % 4 == 3)
			w->req[i].sampling = (kern_sample_params){.top_p = 1, .repetition_penalty = 1.3f,
								  .frequency_penalty = 0.4f, .logprobs = 1,
								  .top_logprobs = 3};
		w->arrival[i] = (i / 5) * 3 + (int)(NEXT() % 3);
	}
#undef NEXT
}

/* n tokens' log-probs (rows of top_n) onto rec. */
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

/* The reference: each request alone on a fresh engine. */
static void run_alone(workload *w)
{
	rig r;
	char err[SL_ERRLEN] = "";
	rig_open(&r, BIG_POOL, 0, NODE_SCHED_CONTINUOUS);
	for (int i = 0; i < N_REQ; i++) {
		node_result res = {0};
		ck_assert_msg(node_generate(r.e, 1, &w->req[i], &res, err, sizeof err) == 0, "%s", err);
		ck_assert(res.n_tokens >= 1 && res.n_tokens <= MAX_NEW);
		memcpy(w->want[i], res.tokens, sizeof(int32_t) * res.n_tokens);
		w->n_want[i] = res.n_tokens;
		ck_assert(!res.logprobs == !kern_wants_logprobs(&w->req[i].sampling));
		if (res.logprobs)
			keep_lp(&w->want_lp[i], res.logprobs, res.top_ids, res.top_logprobs, res.top_n,
				res.n_tokens);
		node_result_free(&res);
	}
	rig_close(&r);
}

static void record(rig *r, const node_sched_event *ev, int n)
{
	for (int i = 0; i < n; i++) {
		int id = (int)ev[i].req_id;
		ck_assert(id >= 0 && id < N_REQ);
		ck_assert_msg(ev[i].finish != NODE_SCHED_ERROR, "request %d: %s", id, ev[i].error);
		ck_assert_int_le(r->n_got[id] + ev[i].n_tokens, MAX_NEW);
		memcpy(r->got[id] + r->n_got[id], ev[i].tokens, sizeof(int32_t) * ev[i].n_tokens);
		r->n_got[id] += ev[i].n_tokens;
		if (ev[i].logprobs)
			keep_lp(&r->got_lp[id], ev[i].logprobs, ev[i].top_ids, ev[i].top_logprobs,
				ev[i].top_n, ev[i].n_tokens);
		if (ev[i].finish != NODE_SCHED_RUNNING)
			r->finish[id] = ev[i].finish, r->done++;
	}
}

static void sched_step(rig *r)
{
	const node_sched_event *ev;
	int n;
	char err[SL_ERRLEN] = "";
	ck_assert_msg(node_sched_step(r->s, &ev, &n, err, sizeof err) == 0, "%s", err);
	record(r, ev, n);
}

/* Submit each request at its arrival step, step until all are done. */
static void run_staggered(rig *r, const workload *w)
{
	char err[SL_ERRLEN] = "";
	int next = 0;
	for (int step = 0; step < 100000 && (next < N_REQ || node_sched_busy(r->s)); step++) {
		for (; next < N_REQ && w->arrival[next] <= step; next++)
			ck_assert_msg(node_sched_submit(r->s, (uint64_t)next, &w->req[next], err, sizeof err) == 0,
				      "submit %d: %s", next, err);
		sched_step(r);
	}
	ck_assert_int_eq(next, N_REQ);
	ck_assert(!node_sched_busy(r->s));
	ck_assert_int_eq(r->done, N_REQ);
}

static void assert_same(const int32_t *got, int n_got, const int32_t *want, int n_want, int i)
{
	int k = 0;
	while (k < n_got && k < n_want && got[k] == want[k])
		k++;
	ck_assert_msg(k == n_got && k == n_want,
		      "request %d: token %d differs from running alone: got %d of %d tokens "
		      "(token %d), alone %d tokens (token %d)", i, k, n_got, n_got,
		      k < n_got ? got[k] : -1, n_want, k < n_want ? want[k] : -1);
}

/* Log-probs equal to the last bit: the same logits, the same code. */
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
			      "%.9g (first alternative %d:%.9g), alone %.9g (%d:%.9g)", i, k, got->lp[k],
			      got->ids[k * got->top_n], got->top[k * got->top_n], want->lp[k],
			      want->ids[k * got->top_n], want->top[k * got->top_n]);
	}
}

static void check_outputs(const rig *r, const workload *w)
{
	for (int i = 0; i < N_REQ; i++) {
		assert_same(r->got[i], r->n_got[i], w->want[i], w->n_want[i], i);
		assert_same_lp(&r->got_lp[i], &w->want_lp[i], i);
	}
}

static void staggered(int kv_blocks, node_sched_policy policy, int expect_preempt)
{
	static workload w;
	rig r;
	make_workload(&w);
	run_alone(&w);
	rig_open(&r, kv_blocks, 16, policy);
	run_staggered(&r, &w);
	check_outputs(&r, &w);
	long pre = node_engine_stats(r.e)->preemptions;
	if (expect_preempt)
		ck_assert_msg(pre > 0, "a %d-block pool caused no preemption", kv_blocks);
	else
		ck_assert_msg(pre == 0, "%ld preemptions with a %d-block pool", pre, kv_blocks);
	rig_close(&r);
}

START_TEST(test_staggered_identical) { staggered(BIG_POOL, NODE_SCHED_CONTINUOUS, 0); }
END_TEST

START_TEST(test_preemption_identical) { staggered(SMALL_POOL, NODE_SCHED_CONTINUOUS, 1); }
END_TEST

/* The simple policy reserves full lengths: never preempts, same tokens. */
START_TEST(test_simple_policy_identical) { staggered(SMALL_POOL, NODE_SCHED_SIMPLE, 0); }
END_TEST

/* A penalty-history budget of one sequence's worth (the least allowed:
 * min(context, vocab) = 256 entries): steps that would exceed it defer a
 * penalised sequence's sampling; the tokens do not change. */
START_TEST(test_small_history_budget_identical)
{
	g_max_hist = 1; /* raised to the minimum */
	staggered(BIG_POOL, NODE_SCHED_CONTINUOUS, 0);
	g_max_hist = 0;
}
END_TEST

/* The engine alone (the local run mode's path): every request added at
 * its arrival step, no admission control at all, a tiny pool. Preemption
 * alone must keep every sequence going and the results identical. */
START_TEST(test_engine_preemption)
{
	static workload w;
	rig r;
	char err[SL_ERRLEN] = "";
	int ids[N_REQ], next = 0, active = 1, taken = 0;
	make_workload(&w);
	run_alone(&w);
	rig_open(&r, SMALL_POOL, 0, NODE_SCHED_CONTINUOUS);
	for (int step = 0; step < 100000 && taken < N_REQ; step++) {
		for (; next < N_REQ && w.arrival[next] <= step; next++)
			ck_assert_int_eq(node_engine_add(r.e, &w.req[next], &ids[next], err, sizeof err), 0);
		ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
		for (int i = taken; i < next; i++) { /* take finished ones in order */
			const int32_t *gen;
			int n;
			node_seq_state st;
			if (node_engine_peek(r.e, ids[i], &gen, &n, &st) || st == SEQ_RUNNING)
				break;
			node_result res = {0};
			ck_assert_int_eq(node_engine_take(r.e, ids[i], &res), 0);
			assert_same(res.tokens, res.n_tokens, w.want[i], w.n_want[i], i);
			lp_rec got = {0};
			if (res.logprobs)
				keep_lp(&got, res.logprobs, res.top_ids, res.top_logprobs, res.top_n,
					res.n_tokens);
			assert_same_lp(&got, &w.want_lp[i], i);
			node_result_free(&res);
			taken++;
		}
	}
	ck_assert_int_eq(taken, N_REQ);
	ck_assert(node_engine_stats(r.e)->preemptions > 0);
	rig_close(&r);
}
END_TEST

static int free_blocks(const rig *r) { return node_engine_free_blocks(r->e); }
static int blocks(const rig *r, int n_tokens) { return node_engine_blocks_for(r->e, n_tokens); }

/* B (3-token prompt) and A (100-token prompt, prefilled in chunks of the
 * 32-token step budget) run together; A is cancelled after its first
 * chunk: its blocks come back at once and B's tokens do not change. */
START_TEST(test_cancel_mid_prefill)
{
	static workload w;
	rig r;
	char err[SL_ERRLEN] = "";
	int32_t long_prompt[100];
	make_workload(&w);
	run_alone(&w);
	for (int k = 0; k < 100; k++)
		long_prompt[k] = 3 + (k * 7) % 250;
	node_request a = {.prompt = long_prompt, .n_prompt = 100, .max_new_tokens = 8,
			  .sampling = {.top_p = 1}};
	rig_open(&r, BIG_POOL, 4, NODE_SCHED_CONTINUOUS);
	int b = 0; /* B: a workload request with a short prompt and a long run */
	while (w.req[b].n_prompt > 10 || w.req[b].max_new_tokens < 10)
		b++;
	ck_assert_int_eq(node_sched_submit(r.s, 0, &w.req[b], err, sizeof err), 0);
	ck_assert_int_eq(node_sched_submit(r.s, 1, &a, err, sizeof err), 0);
	sched_step(&r); /* B's prompt, then A's first chunk in what is left */
	int nb = w.req[b].n_prompt, chunk = STEP_TOKENS - nb;
	ck_assert_int_lt(chunk, 100); /* A is in the middle of its prefill */
	ck_assert_int_eq(r.n_got[1], 0);
	ck_assert_int_eq(free_blocks(&r), BIG_POOL - blocks(&r, nb) - blocks(&r, chunk));
	ck_assert_int_eq(node_sched_cancel(r.s, 1), 0);
	ck_assert_int_eq(free_blocks(&r), BIG_POOL - blocks(&r, nb));
	for (int k = 0; k < 1000 && node_sched_busy(r.s); k++)
		sched_step(&r);
	assert_same(r.got[0], r.n_got[0], w.want[b], w.n_want[b], b);
	rig_close(&r);
}
END_TEST

/* Three requests decode together; the middle one is cancelled after a few
 * tokens: its blocks come back at once, the others' tokens do not change. */
START_TEST(test_cancel_mid_decode)
{
	static workload w;
	rig r;
	char err[SL_ERRLEN] = "";
	make_workload(&w);
	int pick[3] = {-1, -1, -1}, n = 0;
	for (int i = 0; i < N_REQ && n < 3; i++) /* long runs, short prompts: all in one step */
		if (w.req[i].max_new_tokens >= 20 && w.req[i].n_prompt <= 10 && w.req[i].ignore_eos)
			pick[n++] = i;
	ck_assert_int_eq(n, 3);
	run_alone(&w);
	rig_open(&r, BIG_POOL, 4, NODE_SCHED_CONTINUOUS);
	for (int j = 0; j < 3; j++)
		ck_assert_int_eq(node_sched_submit(r.s, (uint64_t)pick[j], &w.req[pick[j]], err, sizeof err), 0);
	for (int k = 0; k < 5; k++)
		sched_step(&r);
	int mid = pick[1];
	ck_assert_int_eq(r.n_got[mid], 5);
	int before = free_blocks(&r);
	ck_assert_int_eq(node_sched_cancel(r.s, (uint64_t)mid), 0);
	/* all its tokens but the last sampled one are cached */
	ck_assert_int_eq(free_blocks(&r) - before, blocks(&r, w.req[mid].n_prompt + 4));
	for (int k = 0; k < 1000 && node_sched_busy(r.s); k++)
		sched_step(&r);
	for (int j = 0; j < 3; j += 2)
		assert_same(r.got[pick[j]], r.n_got[pick[j]], w.want[pick[j]], w.n_want[pick[j]], pick[j]);
	rig_close(&r);
}
END_TEST

/* node_engine_drop, the engine-level cancel the scheduler relies on, on
 * sequences in whatever state six steps in a pool too small for all of
 * them left them (prefilling, decoding, preempted or finished). */
START_TEST(test_engine_drop)
{
	static workload w;
	rig r;
	char err[SL_ERRLEN] = "";
	int ids[N_REQ], active;
	make_workload(&w);
	rig_open(&r, SMALL_POOL, 0, NODE_SCHED_CONTINUOUS);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(node_engine_add(r.e, &w.req[i], &ids[i], err, sizeof err), 0);
	for (int k = 0; k < 6; k++)
		ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
	for (int i = 0; i < 8; i += 2)
		ck_assert_int_eq(node_engine_drop(r.e, ids[i]), 0);
	ck_assert_int_eq(node_engine_drop(r.e, ids[0]), SL_ENOTFOUND);
	for (int k = 0; k < 1000 && active > 0; k++)
		ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(active, 0);
	for (int i = 1; i < 8; i += 2)
		ck_assert_int_eq(node_engine_drop(r.e, ids[i]), 0);
	rig_close(&r);
}
END_TEST

int main(void)
{
	(void)golden_load, (void)golden_free, (void)golden_rel_err; /* golden.h helpers unused here */
	Suite *s = suite_create("batching");
	TCase *tc = tcase_create("batching");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_staggered_identical);
	tcase_add_test(tc, test_preemption_identical);
	tcase_add_test(tc, test_simple_policy_identical);
	tcase_add_test(tc, test_small_history_budget_identical);
	tcase_add_test(tc, test_engine_preemption);
	tcase_add_test(tc, test_cancel_mid_prefill);
	tcase_add_test(tc, test_cancel_mid_decode);
	tcase_add_test(tc, test_engine_drop);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
