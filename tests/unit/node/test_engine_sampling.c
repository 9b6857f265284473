/*
 * test_engine_sampling.c — penalties, min-p and log-probs through the node
 * engine (node/engine.c builds the penalty history, node/step.c returns
 * log-probs) on the CPU backend with the mha_f32 golden checkpoint.
 *
 * The evidence is a naive replay: for every generated token j, the same
 * engine computes the logits at that position from the prompt and tokens
 * 0..j-1 given as a prompt (prompt logits); the token must be what the
 * plain sampler picks on those logits penalised by the definitions
 * (counts from plain token lists), and its log-probs log_softmax of the
 * raw logits. Penalties and min-p must change the output (else the test
 * would pass with them ignored). A penalty-history budget at its minimum
 * makes a prefill chunk stop one token short; its tokens do not change.
 * min_tokens and stop ids: a +100 bias makes EOS (or a stop id) the only
 * token the model can draw, so the output must end at exactly min_tokens
 * + 1 tokens, counting resumed ones, with the end token last and nowhere
 * before; the logit bias rows themselves are checked in test_sampling.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/backend.h"
#include "node/engine.h"
#include "unit/golden.h"
#include "common/sl.h"

#define MAX_NEW 16
#define LP_TOL 1e-5

typedef struct rig {
	node_backend *be;
	model *m;
	node_engine *e;
	int V;
} rig;

static void rig_open(rig *r, int max_hist, int step_tokens)
{
	char dir[512], err[SL_ERRLEN] = "";
	const char *root = getenv("SL_GOLDEN_DIR");
	snprintf(dir, sizeof dir, "%s/mha_f32", root ? root : "tests/golden");
	memset(r, 0, sizeof *r);
	ck_assert_int_eq(node_backend_cpu_create(&r->be), 0);
	model_opts o = {.step_tokens = step_tokens, .n_kv_blocks = 512, .block_tokens = 4,
			.max_hist = max_hist};
	ck_assert_msg(model_create(dir, r->be, &o, &r->m, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(node_engine_create(r->m, &r->e, err, sizeof err), 0);
	r->V = r->m->cfg.vocab_size;
}

static void rig_close(rig *r)
{
	node_engine_destroy(r->e);
	model_destroy(r->m);
	node_backend_destroy(r->be);
}

static void generate(rig *r, const node_request *q, node_result *res)
{
	char err[SL_ERRLEN] = "";
	ck_assert_msg(node_generate(r->e, 1, q, res, err, sizeof err) == 0, "%s", err);
}

/* The logits that decide the token after ctx[0..n): the last row of a
 * prompt-logits run. */
static void logits_after(rig *r, const int32_t *ctx, int n, float *out)
{
	float *all = malloc(sizeof(float) * n * r->V);
	node_request q = {.prompt = ctx, .n_prompt = n, .max_new_tokens = 1, .ignore_eos = 1,
			  .sampling = {.top_p = 1}, .prompt_logits = all};
	node_result res = {0};
	generate(r, &q, &res);
	memcpy(out, all + (size_t)(n - 1) * r->V, sizeof(float) * r->V);
	node_result_free(&res);
	free(all);
}

/* The definitions (HF repetition, OpenAI frequency and presence). */
static void naive_penalise(float *l, int V, const int32_t *prompt, int np, const int32_t *gen,
			   int ng, const kern_sample_params *p)
{
	for (int v = 0; v < V; v++) {
		int count = 0, in_prompt = 0;
		for (int i = 0; i < ng; i++)
			count += gen[i] == v;
		for (int i = 0; i < np; i++)
			in_prompt |= prompt[i] == v;
		float x = l[v];
		if (p->repetition_penalty > 0 && (in_prompt || count > 0))
			x = x > 0 ? x / p->repetition_penalty : x * p->repetition_penalty;
		float f = p->frequency_penalty * (float)count;
		x = x - f;
		if (count > 0)
			x = x - p->presence_penalty;
		l[v] = x;
	}
}

static double naive_logprob(const float *l, int V, int i)
{
	double mx = l[0], sum = 0;
	for (int k = 1; k < V; k++)
		mx = l[k] > mx ? l[k] : mx;
	for (int k = 0; k < V; k++)
		sum += exp((double)l[k] - mx);
	return (double)l[i] - mx - log(sum);
}

/* Replay q's output token by token against the definitions. */
static void replay(rig *r, const node_request *q, const node_result *res, const char *what)
{
	int np = q->n_prompt, V = r->V;
	int32_t *ctx = malloc(sizeof(int32_t) * (np + MAX_NEW));
	float *l = malloc(sizeof(float) * V), *pen = malloc(sizeof(float) * V);
	void *work = malloc(kern_sample_work_bytes(V));
	memcpy(ctx, q->prompt, sizeof(int32_t) * np);
	memcpy(ctx + np, res->tokens, sizeof(int32_t) * res->n_tokens);
	ck_assert_int_eq(res->n_tokens, q->max_new_tokens);
	ck_assert_msg(!res->logprobs == !kern_wants_logprobs(&q->sampling), "%s: log-probs %s",
		      what, res->logprobs ? "unasked" : "missing");
	for (int j = 0; j < res->n_tokens; j++) {
		logits_after(r, ctx, np + j, l);
		memcpy(pen, l, sizeof(float) * V);
		naive_penalise(pen, V, ctx, np, ctx + np, j, &q->sampling);
		int want = kern_sample_cpu(pen, V, &q->sampling, (uint64_t)(np + j), work);
		ck_assert_msg(res->tokens[j] == want, "%s: token %d is %d, the definitions give %d",
			      what, j, res->tokens[j], want);
		if (!res->logprobs)
			continue;
		double lp = naive_logprob(l, V, want);
		ck_assert_msg(fabs(res->logprobs[j] - lp) < LP_TOL, "%s: token %d log-prob %.8g, "
			      "log_softmax of the raw logits %.8g (tol %g)", what, j, res->logprobs[j],
			      lp, LP_TOL);
		for (int k = 0; k < res->top_n; k++) {
			int id = res->top_ids[j * res->top_n + k], better = 0;
			for (int i = 0; i < V; i++)
				better += l[i] > l[id] || (l[i] == l[id] && i < id);
			double tl = naive_logprob(l, V, id);
			ck_assert_msg(better == k && fabs(res->top_logprobs[j * res->top_n + k] - tl) < LP_TOL,
				      "%s: token %d alternative %d is %d (rank %d) at %.8g, want rank %d "
				      "at %.8g", what, j, k, id, better, res->top_logprobs[j * res->top_n + k],
				      k, tl);
		}
	}
	free(ctx), free(l), free(pen), free(work);
}

static const int32_t k_seed_prompt[] = {1, 17, 17, 40, 99, 17, 3, 40, 200, 5, 17, 99};
#define NS (int)(sizeof k_seed_prompt / sizeof *k_seed_prompt)
#define NP (NS + 8)
static int32_t g_prompt[NP];

/* The seed prompt and the 8 tokens greedy decoding continues it with, so
 * the tokens the model favours next are in the prompt: penalties then
 * decide, and a prompt token miscounted as generated (or the reverse)
 * shows. */
static void make_prompt(rig *r)
{
	node_request q = {.prompt = k_seed_prompt, .n_prompt = NS, .max_new_tokens = 8,
			  .ignore_eos = 1, .sampling = {.top_p = 1}};
	node_result res = {0};
	generate(r, &q, &res);
	memcpy(g_prompt, k_seed_prompt, sizeof k_seed_prompt);
	memcpy(g_prompt + NS, res.tokens, sizeof(int32_t) * 8);
	node_result_free(&res);
}

static node_request request(kern_sample_params p)
{
	return (node_request){.prompt = g_prompt, .n_prompt = NP, .max_new_tokens = MAX_NEW,
			      .ignore_eos = 1, .sampling = p};
}

static int same_tokens(const node_result *a, const node_result *b)
{
	return a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, 4 * (size_t)a->n_tokens);
}

START_TEST(penalties_follow_definitions)
{
	static const kern_sample_params mixes[] = {
		{.top_p = 1, .repetition_penalty = 1.6f, .logprobs = 1, .top_logprobs = 5},
		{.top_p = 1, .frequency_penalty = 0.9f, .presence_penalty = 0.7f, .top_logprobs = 2},
		{.top_p = 1, .repetition_penalty = 0.5f, .presence_penalty = -1},
		{.temperature = 0.9f, .top_p = 0.95f, .top_k = 60, .repetition_penalty = 1.3f,
		 .frequency_penalty = 0.5f, .presence_penalty = 0.5f, .seed = 7, .logprobs = 1,
		 .top_logprobs = 20},
	};
	rig r;
	rig_open(&r, 0, 64);
	make_prompt(&r);
	for (int m = 0; m < (int)(sizeof mixes / sizeof *mixes); m++) {
		char what[32];
		snprintf(what, sizeof what, "mix %d", m);
		node_request q = request(mixes[m]), plain = q;
		plain.sampling.repetition_penalty = 0;
		plain.sampling.frequency_penalty = plain.sampling.presence_penalty = 0;
		node_result res = {0}, base = {0};
		generate(&r, &q, &res);
		generate(&r, &plain, &base);
		replay(&r, &q, &res, what);
		ck_assert_msg(!same_tokens(&res, &base), "%s: the penalties changed no token", what);
		node_result_free(&res), node_result_free(&base);
	}
	rig_close(&r);
}
END_TEST

START_TEST(min_p_follows_definition)
{
	rig r;
	rig_open(&r, 0, 64);
	make_prompt(&r);
	kern_sample_params p = {.temperature = 1.5f, .top_p = 1, .min_p = 0.3f, .seed = 11,
				.logprobs = 1, .top_logprobs = 4};
	node_request q = request(p), plain = q;
	plain.sampling.min_p = 0;
	node_result res = {0}, base = {0};
	generate(&r, &q, &res);
	generate(&r, &plain, &base);
	replay(&r, &q, &res, "min_p 0.3");
	ck_assert_msg(!same_tokens(&res, &base), "min_p 0.3 changed no token at temperature 1.5");
	node_result_free(&res), node_result_free(&base);
	rig_close(&r);
}
END_TEST

/* Request A (penalised, a 150-token prompt) decodes while B (penalised,
 * a 120-token prompt) prefills in one chunk; with the history budget at
 * its minimum (256 entries: min(context, vocab)), A's and B's histories do
 * not fit one step, so B's chunk stops one token short and samples in the
 * next step. Both produce what they produce alone. */
START_TEST(history_budget_defers_identically)
{
	int32_t pa[150], pb[120];
	for (int i = 0; i < 150; i++)
		pa[i] = 3 + (i * 37) % 250;
	for (int i = 0; i < 120; i++)
		pb[i] = 3 + (i * 53) % 251;
	kern_sample_params p = {.temperature = 0.8f, .top_p = 1, .repetition_penalty = 1.2f,
				.frequency_penalty = 0.3f, .seed = 3, .logprobs = 1, .top_logprobs = 3};
	node_request qa = {.prompt = pa, .n_prompt = 150, .max_new_tokens = 12, .ignore_eos = 1,
			   .sampling = p};
	node_request qb = {.prompt = pb, .n_prompt = 120, .max_new_tokens = 12, .ignore_eos = 1,
			   .sampling = p};
	rig r;
	char err[SL_ERRLEN] = "";
	rig_open(&r, 1, 256);
	ck_assert_int_eq(r.m->opts.max_hist, 256); /* raised to one sequence's worth */
	node_result alone_a = {0}, alone_b = {0}, got_a = {0}, got_b = {0};
	generate(&r, &qa, &alone_a);
	generate(&r, &qb, &alone_b);
	int ia, ib, active;
	ck_assert_int_eq(node_engine_add(r.e, &qa, &ia, err, sizeof err), 0);
	ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err); /* A's prompt */
	ck_assert_int_eq(node_engine_add(r.e, &qb, &ib, err, sizeof err), 0);
	const int32_t *gen;
	int n_b;
	node_seq_state st;
	ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(node_engine_peek(r.e, ib, &gen, &n_b, &st), 0);
	ck_assert_msg(n_b == 0, "B sampled in the step that prefilled it (history %d + %d > 256)",
		      151, 120);
	while (active > 0)
		ck_assert_msg(node_engine_step(r.e, &active, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(node_engine_take(r.e, ia, &got_a), 0);
	ck_assert_int_eq(node_engine_take(r.e, ib, &got_b), 0);
	ck_assert(same_tokens(&got_a, &alone_a) && same_tokens(&got_b, &alone_b));
	ck_assert(!memcmp(got_b.logprobs, alone_b.logprobs, sizeof(float) * 12));
	ck_assert(!memcmp(got_b.top_ids, alone_b.top_ids, sizeof(int32_t) * 12 * 3));
	node_result_free(&alone_a), node_result_free(&alone_b);
	node_result_free(&got_a), node_result_free(&got_b);
	rig_close(&r);
}
END_TEST

/* Migration (docs/protocol.md): a request resumed from prompt + its first k
 * generated tokens, with n_resumed = k and the budget left, generates
 * exactly the rest of the undisturbed run, log-probs included, for
 * greedy and sampled mixes with every penalty. The same prompt taken as
 * all prompt (n_resumed 0) must differ under frequency and presence
 * penalties: else the test could not see resumed tokens miscounted. */
START_TEST(resume_continues_identically)
{
	static const kern_sample_params mixes[] = {
		{.top_p = 1, .frequency_penalty = 0.9f, .presence_penalty = 0.7f, .top_logprobs = 2},
		{.temperature = 0.9f, .top_p = 0.95f, .top_k = 60, .repetition_penalty = 1.3f,
		 .frequency_penalty = 0.5f, .presence_penalty = 0.5f, .seed = 7, .logprobs = 1,
		 .top_logprobs = 20},
		{.temperature = 1.2f, .top_p = 0.9f, .seed = 99},
	};
	static const int cuts[] = {1, 5, MAX_NEW - 1};
	rig r;
	rig_open(&r, 0, 64);
	make_prompt(&r);
	int32_t ctx[NP + MAX_NEW];
	int miscounted_differs = 0;
	for (int m = 0; m < (int)(sizeof mixes / sizeof *mixes); m++) {
		node_request q = request(mixes[m]);
		node_result full = {0};
		generate(&r, &q, &full);
		memcpy(ctx, g_prompt, sizeof g_prompt);
		memcpy(ctx + NP, full.tokens, sizeof(int32_t) * MAX_NEW);
		for (int c = 0; c < (int)(sizeof cuts / sizeof *cuts); c++) {
			int k = cuts[c];
			node_request rq = q;
			rq.prompt = ctx, rq.n_prompt = NP + k, rq.n_resumed = k;
			rq.max_new_tokens = MAX_NEW - k;
			node_result got = {0};
			generate(&r, &rq, &got);
			ck_assert_int_eq(got.n_tokens, MAX_NEW - k);
			for (int j = 0; j < got.n_tokens; j++)
				ck_assert_msg(got.tokens[j] == full.tokens[k + j], "mix %d resumed after %d: "
					      "token %d is %d, the undisturbed run's %d", m, k, k + j,
					      got.tokens[j], full.tokens[k + j]);
			if (full.logprobs)
				ck_assert_msg(!memcmp(got.logprobs, full.logprobs + k,
						      sizeof(float) * got.n_tokens) &&
					      !memcmp(got.top_ids, full.top_ids + (size_t)k * full.top_n,
						      sizeof(int32_t) * got.n_tokens * full.top_n),
					      "mix %d resumed after %d: log-probs differ", m, k);
			node_result_free(&got);
			if (m == 0 && k == 5) {
				rq.n_resumed = 0;
				generate(&r, &rq, &got);
				miscounted_differs = memcmp(got.tokens, full.tokens + k,
							    sizeof(int32_t) * got.n_tokens) != 0;
				node_result_free(&got);
			}
		}
		node_result_free(&full);
	}
	ck_assert_msg(miscounted_differs, "resumed tokens counted as prompt changed nothing: "
		      "the test cannot tell");
	char err[SL_ERRLEN] = "";
	node_request bad = request(mixes[0]);
	bad.n_resumed = NP;
	ck_assert_int_eq(node_engine_check_request(r.e, &bad, err, sizeof err), SL_EINVAL);
	ck_assert_msg(strstr(err, "resumed"), "'%s' does not name the resumed count", err);
	rig_close(&r);
}
END_TEST

/* Runs q alone; returns its token count, *last its last token, *finish. */
static int run_one(rig *r, const node_request *q, int32_t *last, node_seq_state *finish,
		   int32_t avoid)
{
	node_result res = {0};
	generate(r, q, &res);
	for (int t = 0; t + 1 < res.n_tokens; t++)
		ck_assert_msg(res.tokens[t] != avoid, "token %d is %d before min_tokens", t, avoid);
	int n = res.n_tokens;
	*last = n ? res.tokens[n - 1] : -1;
	*finish = res.finish;
	node_result_free(&res);
	return n;
}

START_TEST(min_tokens_and_stop_ids)
{
	rig r;
	rig_open(&r, 0, 64);
	ck_assert_msg(r.m->cfg.n_eos > 0, "mha_f32 has an EOS id");
	int32_t eos = r.m->cfg.eos_ids[0], last, stop = 17 % r.V;
	float plus = 100;
	node_seq_state fin;
	node_request q = request((kern_sample_params){.top_p = 1});
	q.ignore_eos = 0;
	q.lists = (sl_token_lists){&eos, &plus, 1, NULL, 0};
	ck_assert_int_eq(run_one(&r, &q, &last, &fin, -1), 1); /* EOS forced at once */
	ck_assert(last == eos && fin == SEQ_DONE_EOS);
	q.sampling.min_tokens = 4;
	ck_assert_int_eq(run_one(&r, &q, &last, &fin, eos), 5);
	ck_assert(last == eos && fin == SEQ_DONE_EOS);
	q.sampling.temperature = 1, q.sampling.seed = 7; /* sampled: the same mask */
	ck_assert_int_eq(run_one(&r, &q, &last, &fin, eos), 5);
	ck_assert(last == eos && fin == SEQ_DONE_EOS);
	/* resumed tokens count as generated: 2 of the 4 are already there */
	q.n_resumed = 2;
	ck_assert_int_eq(run_one(&r, &q, &last, &fin, eos), 3);
	ck_assert(last == eos);
	/* a stop id ends it as EOS does, ignore_eos or not, after min_tokens */
	q = request((kern_sample_params){.top_p = 1, .min_tokens = 3});
	q.lists = (sl_token_lists){&stop, &plus, 1, &stop, 1};
	ck_assert_int_eq(run_one(&r, &q, &last, &fin, stop), 4);
	ck_assert(last == stop && fin == SEQ_DONE_EOS);
	/* a repeated bias id is refused, naming the field */
	int32_t twice[2] = {5, 5};
	float b2[2] = {1, 2};
	char err[SL_ERRLEN] = "";
	q.lists = (sl_token_lists){twice, b2, 2, NULL, 0};
	ck_assert_int_eq(node_engine_check_request(r.e, &q, err, sizeof err), SL_EINVAL);
	ck_assert_msg(strstr(err, "logit_bias"), "'%s'", err);
	rig_close(&r);
}
END_TEST

/* Requests the engine must refuse, each naming the field. */
START_TEST(out_of_range_refused)
{
	static const struct { kern_sample_params p; const char *field; } cases[] = {
		{{.top_p = 1, .min_p = 1.5f}, "min_p"},
		{{.top_p = 1, .min_p = NAN}, "min_p"},
		{{.top_p = 1, .repetition_penalty = -1}, "repetition_penalty"},
		{{.top_p = 1, .repetition_penalty = 11}, "repetition_penalty"},
		{{.top_p = 1, .presence_penalty = 2.5f}, "presence_penalty"},
		{{.top_p = 1, .frequency_penalty = NAN}, "frequency_penalty"},
		{{.top_p = 1, .top_logprobs = 21}, "top_logprobs"},
	};
	rig r;
	rig_open(&r, 0, 64);
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char err[SL_ERRLEN] = "";
		node_request q = request(cases[i].p);
		ck_assert_int_eq(node_engine_check_request(r.e, &q, err, sizeof err), SL_EINVAL);
		ck_assert_msg(strstr(err, cases[i].field), "case %zu: '%s' does not name %s", i, err,
			      cases[i].field);
	}
	rig_close(&r);
}
END_TEST

int main(void)
{
	(void)golden_load, (void)golden_free, (void)golden_rel_err; /* golden.h helpers unused here */
	Suite *s = suite_create("engine_sampling");
	TCase *tc = tcase_create("engine_sampling");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, penalties_follow_definitions);
	tcase_add_test(tc, min_p_follows_definition);
	tcase_add_test(tc, history_budget_defers_identically);
	tcase_add_test(tc, out_of_range_refused);
	tcase_add_test(tc, resume_continues_identically);
	tcase_add_test(tc, min_tokens_and_stop_ids);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
