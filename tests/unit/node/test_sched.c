/*
 * test_sched.c — node/scheduler.c, the serving leader's scheduler, on the CPU
 * engine with a golden checkpoint: requests run through it give Hugging
 * Face's greedy tokens, cancel frees KV blocks at once, admission respects
 * max_running, max_waiting and the KV pool (full lengths under the simple
 * policy, prompts under continuous batching, which then preempts), refused
 * requests say why. tests/unit/node/test_batching.c covers continuous batching
 * at scale.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "node/backend.h"
#include "node/engine.h"
#include "unit/golden.h"
#include "node/scheduler.h"
#include "common/sl.h"

#define BLOCKS 64

typedef struct fixture {
	golden g;
	node_backend *be;
	model *m;
	node_engine *e;
	node_sched *s;
	int32_t out[GOLDEN_MAX_PROMPTS][256];  /* tokens per request id */
	int n_out[GOLDEN_MAX_PROMPTS];
	int finish[GOLDEN_MAX_PROMPTS];
} fixture;

static void setup_policy(fixture *f, int max_running, int max_waiting, node_sched_policy policy)
{
	char dir[512], err[SL_ERRLEN] = "";
	const char *root = getenv("SL_GOLDEN_DIR");
	memset(f, 0, sizeof *f);
	snprintf(dir, sizeof dir, "%s/mha_f32", root ? root : "tests/golden");
	ck_assert_msg(golden_load(dir, &f->g) == 0, "cannot read golden record in %s", dir);
	ck_assert_int_eq(node_backend_cpu_create(&f->be), 0);
	model_opts o = {.step_tokens = 64, .n_kv_blocks = BLOCKS, .block_tokens = 4};
	ck_assert_msg(model_create(dir, f->be, &o, &f->m, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(node_engine_create(f->m, &f->e, err, sizeof err), 0);
	node_sched_opts so = {.max_running = max_running, .max_waiting = max_waiting, .policy = policy};
	ck_assert_msg(node_sched_create(f->e, &so, &f->s, err, sizeof err) == 0, "%s", err);
}

static void setup(fixture *f, int max_running, int max_waiting)
{
	setup_policy(f, max_running, max_waiting, NODE_SCHED_CONTINUOUS);
}

static void teardown(fixture *f)
{
	node_sched_destroy(f->s);
	ck_assert_int_eq(node_engine_free_blocks(f->e), BLOCKS); /* nothing leaked */
	node_engine_destroy(f->e);
	model_destroy(f->m);
	node_backend_destroy(f->be);
	golden_free(&f->g);
}

static node_request req(const golden *g, int i, int max_new)
{
	return (node_request){.prompt = g->prompts[i], .n_prompt = g->n_prompt[i],
			      .max_new_tokens = max_new, .ignore_eos = 1,
			      .sampling = {.temperature = 0, .top_p = 1}};
}

/* One step; events land in f->out by request id. */
static void step(fixture *f)
{
	const node_sched_event *ev;
	int n;
	char err[SL_ERRLEN];
	ck_assert_msg(node_sched_step(f->s, &ev, &n, err, sizeof err) == 0, "%s", err);
	for (int i = 0; i < n; i++) {
		int id = (int)ev[i].req_id;
		ck_assert(id >= 0 && id < GOLDEN_MAX_PROMPTS);
		for (int k = 0; k < ev[i].n_tokens; k++)
			f->out[id][f->n_out[id]++] = ev[i].tokens[k];
		if (ev[i].finish != NODE_SCHED_RUNNING)
			f->finish[id] = ev[i].finish;
	}
}

static void run_all(fixture *f)
{
	for (int k = 0; k < 1000 && node_sched_busy(f->s); k++)
		step(f);
	ck_assert(!node_sched_busy(f->s));
}

static void assert_greedy(const fixture *f, int i, int n)
{
	ck_assert_int_eq(f->n_out[i], n);
	for (int k = 0; k < n; k++)
		ck_assert_msg(f->out[i][k] == f->g.greedy[i][k], "request %d token %d: got %d, HF %d", i, k,
			      f->out[i][k], f->g.greedy[i][k]);
}

START_TEST(test_greedy_through_scheduler)
{
	fixture f;
	setup(&f, 8, 8);
	char err[SL_ERRLEN];
	for (int i = 0; i < f.g.n_prompts; i++) {
		node_request r = req(&f.g, i, f.g.steps);
		ck_assert_int_eq(node_sched_submit(f.s, (uint64_t)i, &r, err, sizeof err), 0);
	}
	run_all(&f);
	for (int i = 0; i < f.g.n_prompts; i++) {
		assert_greedy(&f, i, f.g.steps);
		ck_assert_int_eq(f.finish[i], NODE_SCHED_LENGTH);
	}
	teardown(&f);
}
END_TEST

START_TEST(test_cancel_frees_blocks)
{
	fixture f;
	setup(&f, 8, 8);
	char err[SL_ERRLEN];
	node_request a = req(&f.g, 0, 32), b = req(&f.g, 1, 32);
	ck_assert_int_eq(node_sched_submit(f.s, 0, &a, err, sizeof err), 0);
	ck_assert_int_eq(node_sched_submit(f.s, 1, &b, err, sizeof err), 0);
	for (int k = 0; k < 5; k++)
		step(&f);
	int running, waiting, before, after;
	node_sched_load(f.s, &running, &waiting, &before);
	ck_assert_int_eq(running, 2);
	ck_assert_int_eq(node_sched_cancel(f.s, 1), 0);
	node_sched_load(f.s, &running, &waiting, &after);
	ck_assert_int_eq(running, 1);
	ck_assert_msg(after > before, "cancel freed no KV blocks (%d -> %d free)", before, after);
	ck_assert_int_eq(node_sched_cancel(f.s, 1), SL_ENOTFOUND);
	run_all(&f);
	assert_greedy(&f, 0, 32); /* the other sequence did not notice */
	teardown(&f);
}
END_TEST

START_TEST(test_limits)
{
	fixture f;
	setup(&f, 1, 1);
	char err[SL_ERRLEN];
	node_request a = req(&f.g, 0, 8), b = req(&f.g, 1, 8);
	ck_assert_int_eq(node_sched_submit(f.s, 0, &a, err, sizeof err), 0);
	ck_assert_int_eq(node_sched_submit(f.s, 0, &b, err, sizeof err), SL_EINVAL); /* same id */
	ck_assert_int_eq(node_sched_submit(f.s, 1, &b, err, sizeof err), 0);
	ck_assert_int_eq(node_sched_submit(f.s, 2, &b, err, sizeof err), SL_ENOMEM); /* full */
	ck_assert_msg(strstr(err, "full"), "%s", err);
	node_request bad = req(&f.g, 0, 100000);
	ck_assert_int_eq(node_sched_submit(f.s, 3, &bad, err, sizeof err), SL_EINVAL);
	ck_assert_msg(strstr(err, "context"), "%s", err);
	int32_t oov[] = {1, 256};
	bad = (node_request){.prompt = oov, .n_prompt = 2, .max_new_tokens = 4, .sampling = {.top_p = 1}};
	ck_assert_int_eq(node_sched_submit(f.s, 3, &bad, err, sizeof err), SL_EINVAL);
	ck_assert_msg(strstr(err, "vocabulary"), "%s", err);
	int running, waiting, kv;
	step(&f);
	node_sched_load(f.s, &running, &waiting, &kv);
	ck_assert_int_eq(running, 1);
	ck_assert_int_eq(waiting, 1);
	run_all(&f);
	assert_greedy(&f, 0, 8);
	assert_greedy(&f, 1, 8);
	teardown(&f);
}
END_TEST

/* Simple policy, 64 blocks of 4 tokens: two requests of 160 tokens each
 * cannot hold the pool together, so the second waits although max_running
 * allows it. */
START_TEST(test_kv_admission)
{
	fixture f;
	setup_policy(&f, 4, 4, NODE_SCHED_SIMPLE);
	char err[SL_ERRLEN];
	node_request a = req(&f.g, 0, 160 - f.g.n_prompt[0]), b = req(&f.g, 1, 160 - f.g.n_prompt[1]);
	ck_assert_int_eq(node_sched_submit(f.s, 0, &a, err, sizeof err), 0);
	ck_assert_int_eq(node_sched_submit(f.s, 1, &b, err, sizeof err), 0);
	int running, waiting, kv;
	step(&f);
	node_sched_load(f.s, &running, &waiting, &kv);
	ck_assert_int_eq(running, 1);
	ck_assert_int_eq(waiting, 1);
	ck_assert_int_eq(node_sched_cancel(f.s, 0), 0);
	step(&f);
	node_sched_load(f.s, &running, &waiting, &kv);
	ck_assert_int_eq(running, 1);
	ck_assert_int_eq(waiting, 0);
	node_sched_cancel_all(f.s);
	teardown(&f);
}
END_TEST

/* Continuous batching, the same two requests: both prompts fit, so both
 * run at once; as they grow past the pool the newer is preempted and
 * recomputed, and both still give the tokens they give alone. */
START_TEST(test_kv_admission_continuous)
{
	fixture f;
	char err[SL_ERRLEN];
	int32_t alone[2][160];
	int n_alone[2];
	setup(&f, 4, 4);
	node_request r[2];
	for (int i = 0; i < 2; i++) {
		r[i] = req(&f.g, i, 160 - f.g.n_prompt[i]);
		node_result res = {0};
		ck_assert_msg(node_generate(f.e, 1, &r[i], &res, err, sizeof err) == 0, "%s", err);
		n_alone[i] = res.n_tokens;
		memcpy(alone[i], res.tokens, sizeof(int32_t) * res.n_tokens);
		free(res.tokens);
		ck_assert_int_eq(node_sched_submit(f.s, (uint64_t)i, &r[i], err, sizeof err), 0);
	}
	int running, waiting, kv;
	step(&f);
	node_sched_load(f.s, &running, &waiting, &kv);
	ck_assert_int_eq(running, 2);
	ck_assert_int_eq(waiting, 0);
	run_all(&f);
	ck_assert(node_engine_stats(f.e)->preemptions > 0);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(f.n_out[i], n_alone[i]);
		for (int k = 0; k < n_alone[i]; k++)
			ck_assert_msg(f.out[i][k] == alone[i][k], "request %d token %d: got %d, alone %d",
				      i, k, f.out[i][k], alone[i][k]);
	}
	teardown(&f);
}
END_TEST

START_TEST(test_fail_all)
{
	fixture f;
	setup(&f, 1, 4);
	char err[SL_ERRLEN];
	for (int i = 0; i < 3; i++) {
		node_request r = req(&f.g, i % f.g.n_prompts, 8);
		ck_assert_int_eq(node_sched_submit(f.s, (uint64_t)i, &r, err, sizeof err), 0);
	}
	step(&f);
	const node_sched_event *ev;
	int n;
	node_sched_fail_all(f.s, "engine failed", &ev, &n);
	ck_assert_int_eq(n, 3);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(ev[i].finish, NODE_SCHED_ERROR);
		ck_assert_str_eq(ev[i].error, "engine failed");
	}
	ck_assert(!node_sched_busy(f.s));
	teardown(&f);
}
END_TEST

int main(void)
{
	(void)golden_rel_err; /* golden.h helper this suite does not need */
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("sched");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_greedy_through_scheduler);
	tcase_add_test(tc, test_cancel_frees_blocks);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_kv_admission);
	tcase_add_test(tc, test_kv_admission_continuous);
	tcase_add_test(tc, test_fail_all);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
