/*
 * test_golden.c — the CPU backend against Hugging Face transformers on the
 * golden checkpoints in tests/golden (made by tools/make_golden.py): logits
 * at every prompt position within 1e-4 (max abs error relative to the
 * largest logit magnitude) and 32 identical greedy tokens, one sequence at
 * a time, all prompts batched in one step, and batched under a tiny step
 * budget (chunked prefill mixed with decode). The gguf_* checkpoints are
 * GGUF files: every quantized storage type as transformers dequantizes it,
 * and lossless conversions of two safetensors ones (Llama 3 rope scaling as
 * rope_freqs, a split file) checked against the safetensors records.
 */
#include <check.h>
#include <math.h>

#include "node/engine.h"
#include "unit/golden.h"

#define LOGIT_TOL 1e-4

static const char *g_models[] = {"mha_f32", "gqa_bf16_tied", "llama3_f16", "odd_f32",
				 "gguf_quant", "gguf_llama3_f16", "gguf_gqa_bf16_split"};

static const char *golden_root(void)
{
	const char *r = getenv("SL_GOLDEN_DIR");
	return r ? r : "tests/golden";
}

typedef struct fixture {
	golden g;
	node_backend *be;
	model *m;
	node_engine *e;
} fixture;

static void setup(fixture *f, const char *name, int step_tokens)
{
	char dir[512], err[SL_ERRLEN] = "";
	snprintf(dir, sizeof dir, "%s/%s", golden_root(), name);
	ck_assert_msg(golden_load(dir, &f->g) == 0, "cannot read golden record in %s", dir);
	ck_assert_int_eq(node_backend_cpu_create(&f->be), 0);
	model_opts o = {.step_tokens = step_tokens, .n_kv_blocks = 64,
			.block_tokens = 4};
	int rc = model_create(f->g.model, f->be, &o, &f->m, err, sizeof err);
	ck_assert_msg(rc == 0, "model_create(%s): %s", f->g.model, err);
	ck_assert_int_eq(node_engine_create(f->m, &f->e, err, sizeof err), 0);
}

static void teardown(fixture *f)
{
	ck_assert_int_eq(node_engine_free_blocks(f->e), 64); /* nothing leaked */
	node_engine_destroy(f->e);
	model_destroy(f->m);
	node_backend_destroy(f->be);
	golden_free(&f->g);
}

static node_request request_for(const golden *g, int i, float *logits)
{
	return (node_request){.prompt = g->prompts[i], .n_prompt = g->n_prompt[i],
			      .max_new_tokens = g->steps, .ignore_eos = 1, .prompt_logits = logits,
			      .sampling = {.temperature = 0, .top_p = 1}};
}

static void check_prompt(const golden *g, int i, const float *logits, const node_result *r,
			 const char *name)
{
	long n, at;
	const float *got, *want;
	golden_rows(g, i, logits, &got, &want, &n);
	double e = golden_rel_err(got, want, n, &at);
	ck_assert_msg(e <= LOGIT_TOL,
		      "%s prompt %d: logits rel err %.3g > %.0e at row %ld token %ld: got %.7g, HF %.7g",
		      name, i, e, LOGIT_TOL, at / g->vocab, at % g->vocab, got[at], want[at]);
	ck_assert_int_eq(r->n_tokens, g->steps);
	for (int t = 0; t < g->steps; t++)
		ck_assert_msg(r->tokens[t] == g->greedy[i][t],
			      "%s prompt %d: greedy token %d is %d, HF says %d", name, i, t,
			      r->tokens[t], g->greedy[i][t]);
}

/* Run `batch` prompts at a time (1 = alone, n = all together). */
static void run_model(const char *name, int batch, int step_tokens)
{
	fixture f;
	char err[SL_ERRLEN] = "";
	setup(&f, name, step_tokens);
	golden *g = &f.g;
	for (int i0 = 0; i0 < g->n_prompts; i0 += batch) {
		int n = g->n_prompts - i0 < batch ? g->n_prompts - i0 : batch;
		node_request req[GOLDEN_MAX_PROMPTS];
		node_result res[GOLDEN_MAX_PROMPTS];
		float *lg[GOLDEN_MAX_PROMPTS];
		for (int k = 0; k < n; k++) {
			lg[k] = malloc(sizeof(float) * g->n_prompt[i0 + k] * g->vocab);
			for (long j = 0; j < (long)g->n_prompt[i0 + k] * g->vocab; j++)
				lg[k][j] = NAN; /* poisoned: every row must be written */
			req[k] = request_for(g, i0 + k, lg[k]);
		}
		int rc = node_generate(f.e, n, req, res, err, sizeof err);
		ck_assert_msg(rc == 0, "%s: %s", name, err);
		for (int k = 0; k < n; k++) {
			check_prompt(g, i0 + k, lg[k], &res[k], name);
			free(lg[k]);
			free(res[k].tokens);
		}
	}
	teardown(&f);
}

START_TEST(alone) { run_model(g_models[_i], 1, 256); }
END_TEST

START_TEST(batched) { run_model(g_models[_i], GOLDEN_MAX_PROMPTS, 256); }
END_TEST

/* A 5-token step budget splits prompts into chunks and mixes them with
 * other sequences' decode tokens. */
START_TEST(batched_chunked) { run_model(g_models[_i], GOLDEN_MAX_PROMPTS, 5); }
END_TEST

int main(void)
{
	Suite *s = suite_create("golden");
	TCase *tc = tcase_create("hf");
	int n = (int)(sizeof g_models / sizeof g_models[0]);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, alone, 0, n);
	tcase_add_loop_test(tc, batched, 0, n);
	tcase_add_loop_test(tc, batched_chunked, 0, n);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
