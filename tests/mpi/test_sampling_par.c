/*
 * test_sampling_par.c — penalties, min-p and log-probs under tensor and
 * pipeline parallelism. Run under mpirun with --tp T --pp P (T x P =
 * ranks): rank 0 first runs a batch of requests using every sampling
 * parameter on a model of its own (one rank: the tp = 1 reference), then
 * the same batch on the group; tokens must be identical and log-probs
 * within LP_TOL (tensor parallelism sums the logits in another order).
 * With pp > 1 the penalty history travels in the step plan to the last
 * stage and the log-probs come back from it; so does the logit bias:
 * request 0 has a logit_bias (one token banned with -100), request 3 a
 * stop id that a +9 bias makes likely but min_tokens holds back for 5
 * tokens, so it must end with it right after, on every grid.
 *
 * Then a crowd: N_CROWD requests of different prompt and output lengths,
 * greedy and sampled, through a small step budget (prompts go in chunks
 * beside other sequences' decode tokens) and a small KV pool (sequences
 * are preempted and recomputed), on tp = 1 and on the group: tokens
 * identical. With pp > 1 the group keeps pp groups of sequences in flight
 * (node/engine.c), and the test checks that steps did overlap. Rank 0
 * prints "N passed, N failed".
 */
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/backend.h"
#include "node/engine.h"
#include "node/group.h"
#include "common/sl.h"
#include "node/step.h"

#define N_REQ 4
#define MAX_NEW 20
#define LP_TOL 1e-4 /* fp32 logits summed in another order: ~1e-6 observed scale */
#define N_CROWD 12
#define CROWD_STEP_TOKENS 32
#define CROWD_KV_BLOCKS 40 /* of 4 tokens: too few for the whole crowd at once */

static int g_pass, g_fail;

static void result(int ok, const char *model, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void result(int ok, const char *model, const char *fmt, ...)
{
	ok ? g_pass++ : g_fail++;
	if (ok)
		return;
	va_list ap;
	va_start(ap, fmt);
	printf("FAIL: %s: ", model);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
}

static const int32_t k_prompts[N_REQ][8] = {
	{1, 17, 17, 40, 99, 17, 3, 40}, {1, 5, 6, 7, 5, 6, 7, 5},
	{1, 200, 100, 50, 25, 12, 6, 3}, {1, 9, 9, 9, 9, 9, 9, 9}};

static const kern_sample_params k_params[N_REQ] = {
	{.top_p = 1, .repetition_penalty = 1.5f, .frequency_penalty = 0.5f, .logprobs = 1,
	 .top_logprobs = 5},
	{.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .min_p = 0.05f, .seed = 21,
	 .presence_penalty = 0.8f, .repetition_penalty = 1.2f, .logprobs = 1, .top_logprobs = 20},
	{.temperature = 1.2f, .top_p = 1, .min_p = 0.2f, .seed = 22, .top_logprobs = 2},
	{.temperature = 0.7f, .top_p = 0.9f, .seed = 23, .frequency_penalty = -0.5f,
	 .presence_penalty = 1, .logprobs = 1},
};

static const int32_t k_bias_ids[] = {17, 40, 99, 5, 120}, k_stop_ids[] = {77};
static const float k_bias[] = {3.5f, -100, 2.0f, 6.0f, -7.5f}, k_stop_bias[] = {9};
#define STOP_MIN_TOKENS 5

static void requests(node_request *q)
{
	for (int i = 0; i < N_REQ; i++)
		q[i] = (node_request){.prompt = k_prompts[i], .n_prompt = 8, .max_new_tokens = MAX_NEW,
				      .ignore_eos = 1, .sampling = k_params[i]};
	q[0].lists = (sl_token_lists){k_bias_ids, k_bias, 5, NULL, 0};
	q[3].lists = (sl_token_lists){k_stop_ids, k_stop_bias, 1, k_stop_ids, 1};
	q[3].sampling.min_tokens = STOP_MIN_TOKENS;
}

static int32_t g_crowd_prompts[N_CROWD][40];

/* Prompts of 3 to 31 tokens, 6 to 22 new tokens; even ones greedy, odd
 * ones sampled (every third with penalties). */
static void crowd(node_request *q)
{
	for (int i = 0; i < N_CROWD; i++) {
		int n = 3 + (i * 7) % 29;
		for (int j = 0; j < n; j++)
			g_crowd_prompts[i][j] = 1 + (i * 31 + j * 17) % 200;
		kern_sample_params sp = {.top_p = 1};
		if (i % 2)
			sp = (kern_sample_params){.temperature = 0.8f, .top_p = 0.95f, .seed = 100 + i,
						  .repetition_penalty = i % 3 ? 0 : 1.3f};
		q[i] = (node_request){.prompt = g_crowd_prompts[i], .n_prompt = n,
				      .max_new_tokens = 6 + (i * 5) % 17, .ignore_eos = 1,
				      .sampling = sp};
	}
}

/* Every request of the set to completion; *stats: the engine's. */
static int run(model *m, int n, void (*make)(node_request *), node_result *res, node_stats *stats,
	       char *err, size_t errlen)
{
	node_engine *e = NULL;
	node_request q[N_CROWD > N_REQ ? N_CROWD : N_REQ];
	make(q);
	int rc = node_engine_create(m, &e, err, errlen);
	if (!rc)
		rc = node_generate(e, n, q, res, err, errlen);
	if (!rc && stats)
		*stats = *node_engine_stats(e);
	node_engine_destroy(e);
	return rc;
}

/* Rank 0: the tp = 1 reference, on a model of its own. */
static int reference(const char *dir, int n, void (*make)(node_request *), int step_tokens,
		     int kv_blocks, node_result *res, char *err, size_t errlen)
{
	node_backend *be = NULL;
	model *m = NULL;
	model_opts o = {.step_tokens = step_tokens, .n_kv_blocks = kv_blocks, .block_tokens = 4};
	int rc = node_backend_cpu_create(&be);
	if (!rc)
		rc = model_create(dir, be, &o, &m, err, errlen);
	if (!rc)
		rc = run(m, n, make, res, NULL, err, errlen);
	model_destroy(m);
	node_backend_destroy(be);
	return rc;
}

static void compare(const char *name, int n, const node_result *got, const node_result *want,
		    int with_lp)
{
	for (int i = 0; i < n; i++) {
		const node_result *g = &got[i], *w = &want[i];
		int same = g->n_tokens == w->n_tokens &&
			   !memcmp(g->tokens, w->tokens, sizeof(int32_t) * w->n_tokens);
		int k = 0;
		while (k < g->n_tokens && k < w->n_tokens && g->tokens[k] == w->tokens[k])
			k++;
		result(same, name, "request %d: token %d is %d, tp 1 gives %d", i, k,
		       k < g->n_tokens ? g->tokens[k] : -1, k < w->n_tokens ? w->tokens[k] : -1);
		if (!with_lp)
			continue;
		int wants = kern_wants_logprobs(&k_params[i]);
		result(!g->logprobs == !wants && !w->logprobs == !wants && g->top_n == w->top_n, name,
		       "request %d: log-probs %s, top %d (tp 1: top %d)", i,
		       g->logprobs ? "present" : "absent", g->top_n, w->top_n);
		if (!same || !g->logprobs || !w->logprobs)
			continue;
		double worst = 0;
		int ids_same = 1;
		for (int t = 0; t < g->n_tokens; t++) {
			worst = fmax(worst, fabs(g->logprobs[t] - w->logprobs[t]));
			for (int j = 0; j < g->top_n; j++) {
				size_t at = (size_t)t * g->top_n + j;
				ids_same &= g->top_ids[at] == w->top_ids[at];
				worst = fmax(worst, fabs(g->top_logprobs[at] - w->top_logprobs[at]));
			}
		}
		printf("%s: request %d: log-probs within %.1e of tp 1\n", name, i, worst);
		result(worst <= LP_TOL && ids_same, name, "request %d: log-probs differ from tp 1 by "
		       "%.3g (tol %.0e), alternatives %s", i, worst, LP_TOL, ids_same ? "same" : "differ");
	}
}

/* One request set on tp = 1 (rank 0) and on the group; tokens (and, with
 * with_lp, log-probs) compared. */
static void run_set(const char *root, const char *name, int tp, int pp, int rank, int n,
		    void (*make)(node_request *), int step_tokens, int kv_blocks, int with_lp)
{
	char dir[512], err[SL_ERRLEN] = "";
	snprintf(dir, sizeof dir, "%s/%s", root, name);
	node_result want[N_CROWD] = {{0}}, got[N_CROWD] = {{0}};
	node_stats st = {0};
	if (rank == 0)
		result(reference(dir, n, make, step_tokens, kv_blocks, want, err, sizeof err) == 0,
		       name, "tp 1 reference: %s", err);
	node_group_opts o = {.model_dir = dir, .tp = tp, .pp = pp, .step_tokens = step_tokens,
			     .block_tokens = 4, .n_kv_blocks = kv_blocks, .device = "cpu",
			     .dtype = -1};
	node_group gr = {0};
	int rc = node_group_open(NULL, NULL, &o, &gr, err, sizeof err);
	if (rc) {
		if (rank == 0)
			result(0, name, "tp %d pp %d: %s", tp, pp, err);
	} else if (rank == 0) {
		rc = run(gr.m, n, make, got, &st, err, sizeof err);
		result(rc == 0, name, "generate: %s", err);
		if (!rc)
			compare(name, n, got, want, with_lp);
		if (!rc && make == requests) { /* the bias and min_tokens did their work */
			const node_result *g0 = &got[0], *g3 = &got[3];
			int banned = 0;
			for (int t = 0; t < g0->n_tokens; t++)
				banned |= g0->tokens[t] == 40;
			result(!banned, name, "request 0 drew token 40, biased by -100");
			result(g3->n_tokens == STOP_MIN_TOKENS + 1 &&
				       g3->tokens[g3->n_tokens - 1] == k_stop_ids[0], name,
			       "request 3: %d tokens ending with %d; want %d ending with the stop id %d "
			       "(min_tokens %d)", g3->n_tokens,
			       g3->n_tokens ? g3->tokens[g3->n_tokens - 1] : -1, STOP_MIN_TOKENS + 1,
			       k_stop_ids[0], STOP_MIN_TOKENS);
		}
		if (!rc && n == N_CROWD) {
			printf("%s: crowd of %d: %d steps, %ld overlapped, %ld preemptions\n", name, n,
			       st.steps, st.overlapped_steps, st.preemptions);
			result(pp == 1 || !node_engine_pp_inflight(gr.m) || st.overlapped_steps > 0, name,
			       "pp %d: no step was issued while another was in flight", pp);
		}
	} else if (node_worker_loop(gr.m, err, sizeof err)) {
		printf("rank %d: %s\n", rank, err);
	}
	node_group_close(&gr, 0);
	for (int i = 0; i < n; i++)
		node_result_free(&want[i]), node_result_free(&got[i]);
	MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int tp = 0, pp = 1, rank;
	for (int i = 1; i + 1 < argc; i++) {
		if (!strcmp(argv[i], "--tp"))
			tp = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--pp"))
			pp = atoi(argv[++i]);
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	const char *root = getenv("SL_GOLDEN_DIR") ? getenv("SL_GOLDEN_DIR") : "tests/golden";
	const char *models[] = {"mha_f32", "odd_f32"};
	for (int i = 0; i < 2; i++) {
		run_set(root, models[i], tp, pp, rank, N_REQ, requests, 64, 128, 1);
		run_set(root, models[i], tp, pp, rank, N_CROWD, crowd, CROWD_STEP_TOKENS,
			CROWD_KV_BLOCKS, 0);
	}
	if (rank == 0)
		printf("%d passed, %d failed\n", g_pass, g_fail);
	MPI_Finalize();
	return g_fail ? 1 : 0;
}
