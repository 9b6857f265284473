/*
 * test_quant_par.c — quantized weights (--quant int8 / fp8 / int4) and an
 * fp8 KV cache under tensor and pipeline parallelism. Run under mpirun
 * with --tp T --pp P (T x P = ranks): for each model and configuration,
 * rank 0 first runs the golden prompts on a model of its own (one rank:
 * the tp = 1 reference, quantized the same way), then the group runs them.
 * Each rank quantizes only its shard, with the scales tp 1 would use
 * (whole-row maxima for row-parallel per-row scales), so the shards are
 * slices of the tp 1 weights: logits at every prompt position must agree
 * within LOGIT_TOL (fp32, sums in another order), greedy tokens must be
 * the same up to the first step where the reference's top two log-probs
 * are within MARGIN (beyond a near-tie a correct engine may pick either),
 * and every rank must hold quantized projections (a silently dense run
 * would prove nothing). A grid the shapes forbid must be refused naming
 * the reason. Rank 0 prints "N passed, N failed".
 *
 *   mpirun -np 2 test_quant_par --tp 2 --pp 1 [--smollm2 FILE]
 *       [--device cuda [--logit-tol X] [--margin Y]]
 *
 * --device cuda runs the reference and the group on the GPU in fp16 (the
 * reference on rank 0's GPU before the group opens), so the GPU's tensor-
 * parallel paths with quantized projections (the fused all-reduce + add +
 * RMSNorm among them) meet the GPU's tp = 1. fp16 rounds the shards'
 * partial sums where tp 1 sums in fp32, so the GPU run needs a looser
 * --logit-tol (relative, default 1e-4) and --margin (log-prob units,
 * default 1e-3); tests/gpu_golden.sh gives both.
 *
 * Models: gguf_quant (every GGUF storage type: int8 copies its Q8_0 blocks
 * as they are, int4 its Q4_0 / Q4_1 blocks, row-parallel o and down
 * projections split between blocks), llama3_f16, gqa_bf16_tied (an int8
 * LM head of a tied model: a copy of the table, split by vocabulary, on
 * the last stage alone); with --smollm2, the real SmolLM2-135M GGUF
 * instead (int4: its Q4_1 blocks as they are, its LM head the Q8_0
 * table's blocks). The quantized configurations' LM head is int8
 * (--quant-lm-head auto).
 */
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/golden.h"
#include "node/backend.h"
#include "node/engine.h"
#include "node/group.h"
#include "common/sl.h"
#include "node/step.h"

#define LOGIT_TOL 1e-4
#define MARGIN 1e-3 /* log-prob units; the sums differ by ~1e-6 */
#define MAX_NEW 16

static int g_pass, g_fail, g_rank;
static const char *g_device = "cpu";
static double g_tol = LOGIT_TOL, g_margin = MARGIN;

static void result(int ok, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void result(int ok, const char *what, const char *fmt, ...)
{
	ok ? g_pass++ : g_fail++;
	if (ok)
		return;
	va_list ap;
	va_start(ap, fmt);
	printf("FAIL: %s: ", what);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
}

typedef struct qcase {
	const char *name;
	int quant, group, kv_fp8;
	int lm_head; /* model_opts.quant_lm_head (0: auto) */
} qcase;

/* One model's outputs: every prompt's logits, greedy tokens with the
 * top-2 log-probs of each step. */
typedef struct outputs {
	float *logits[GOLDEN_MAX_PROMPTS];
	node_result res[GOLDEN_MAX_PROMPTS];
} outputs;

static void outputs_free(outputs *o, int n)
{
	for (int i = 0; i < n; i++) {
		free(o->logits[i]);
		node_result_free(&o->res[i]);
	}
	memset(o, 0, sizeof *o);
}

static int run(model *m, const golden *g, outputs *o, char *err, size_t errlen)
{
	node_engine *e = NULL;
	node_request q[GOLDEN_MAX_PROMPTS];
	for (int i = 0; i < g->n_prompts; i++) {
		o->logits[i] = malloc(sizeof(float) * g->n_prompt[i] * g->vocab);
		for (long j = 0; j < (long)g->n_prompt[i] * g->vocab; j++)
			o->logits[i][j] = NAN;
		q[i] = (node_request){.prompt = g->prompts[i], .n_prompt = g->n_prompt[i],
				      .max_new_tokens = MAX_NEW, .ignore_eos = 1,
				      .prompt_logits = o->logits[i],
				      .sampling = {.top_p = 1, .logprobs = 1, .top_logprobs = 2}};
	}
	int rc = node_engine_create(m, &e, err, errlen);
	if (!rc)
		rc = node_generate(e, g->n_prompts, q, o->res, err, errlen);
	node_engine_destroy(e);
	return rc;
}

/* Projections of this rank's shard that are quantized. */
static int quantized(const model *m)
{
	int n = 0;
	for (int l = 0; l < m->shard.n_layers; l++) {
		const layer_weights *w = &m->w.layers[l];
		n += (w->wqkv.format != KERN_Q_NONE) + (w->wo.format != KERN_Q_NONE) +
		     (w->w13.format != KERN_Q_NONE) + (w->w2.format != KERN_Q_NONE);
	}
	return n;
}

static model_opts opts_of(const qcase *c)
{
	return (model_opts){.step_tokens = 256, .n_kv_blocks = 128, .block_tokens = 4,
			    .quant = c->quant, .quant_group = c->group, .kv_fp8 = c->kv_fp8,
			    .quant_lm_head = c->lm_head};
}

/* The reference's backend: the CPU, or rank 0's GPU in fp16. */
static int reference_backend(node_backend **be, char *err, size_t errlen)
{
	if (!strcmp(g_device, "cpu"))
		return node_backend_cpu_create(be);
#ifdef SL_HAVE_CUDA
	return node_backend_cuda_create(0, SL_DT_F16, be, err, errlen);
#else
	return sl_errf(err, errlen, SL_ENOTSUP, "--device %s: this build has no CUDA", g_device);
#endif
}

/* Rank 0: the tp = 1 reference, on a model of its own. */
static int reference(const golden *g, const qcase *c, outputs *o, char *err, size_t errlen)
{
	node_backend *be = NULL;
	model *m = NULL;
	model_opts mo = opts_of(c);
	int rc = reference_backend(&be, err, errlen);
	if (!rc)
		rc = model_create(g->model, be, &mo, &m, err, errlen);
	if (!rc && quantized(m) == 0 && c->quant != KERN_Q_NONE)
		rc = sl_errf(err, errlen, SL_EINVAL, "no projection quantized at tp 1");
	if (!rc)
		rc = run(m, g, o, err, errlen);
	model_destroy(m);
	node_backend_destroy(be);
	return rc;
}

static void compare(const char *what, const golden *g, const outputs *got, const outputs *want)
{
	for (int i = 0; i < g->n_prompts; i++) {
		long n = (long)g->n_prompt[i] * g->vocab, at;
		double e = golden_rel_err(got->logits[i], want->logits[i], n, &at);
		printf("%s: prompt %d: logits within %.1e of tp 1\n", what, i, e);
		result(e <= g_tol, what, "prompt %d: logits rel err %.3g (tol %.0e) at row %ld "
		       "token %ld: %.7g, tp 1 %.7g", i, e, g_tol, at / g->vocab, at % g->vocab,
		       got->logits[i][at], want->logits[i][at]);
		const node_result *a = &got->res[i], *b = &want->res[i];
		int need = b->n_tokens, same = 0;
		for (int t = 0; b->top_logprobs && t < b->n_tokens; t++)
			if (b->top_logprobs[2 * t] - b->top_logprobs[2 * t + 1] < g_margin) {
				need = t;
				break;
			}
		while (same < a->n_tokens && same < b->n_tokens && a->tokens[same] == b->tokens[same])
			same++;
		printf("%s: prompt %d: %d of %d greedy tokens equal tp 1's (%d required)\n", what, i,
		       same, b->n_tokens, need);
		result(same >= need, what, "prompt %d: greedy token %d is %d, tp 1 gives %d", i, same,
		       same < a->n_tokens ? a->tokens[same] : -1,
		       same < b->n_tokens ? b->tokens[same] : -1);
	}
}

static void run_case(const golden *g, const char *name, const qcase *c, int tp, int pp)
{
	char what[160], err[SL_ERRLEN] = "";
	outputs want = {0}, got = {0};
	snprintf(what, sizeof what, "%s %s tp %d pp %d", name, c->name, tp, pp);
	int ref_ok = 1;
	if (g_rank == 0) {
		int rc = reference(g, c, &want, err, sizeof err);
		ref_ok = rc == 0;
		result(ref_ok, what, "tp 1 reference: %s", err);
	}
	MPI_Bcast(&ref_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
	node_group_opts o = {.model_dir = g->model, .tp = tp, .pp = pp, .step_tokens = 256,
			     .block_tokens = 4, .n_kv_blocks = 128, .device = g_device,
			     .dtype = strcmp(g_device, "cpu") ? SL_DT_F16 : -1,
			     .quant = c->quant, .quant_group = c->group, .kv_fp8 = c->kv_fp8,
			     .quant_lm_head = c->lm_head};
	node_group gr = {0};
	int rc = ref_ok ? node_group_open(NULL, NULL, &o, &gr, err, sizeof err) : SL_EINVAL;
	if (ref_ok && rc) {
		/* only a grid the model's shape forbids may fail, and it must say why */
		int expected = strstr(err, "does not divide") || strstr(err, "must divide");
		if (g_rank == 0) {
			printf("%s: refused: %s\n", what, err);
			result(expected, what, "unexpected error: %s", err);
		}
	} else if (!rc) {
		int mine = quantized(gr.m), fewest = 0;
		MPI_Allreduce(&mine, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
		/* the last stage's ranks hold the LM head: int8 there when asked */
		int head8 = gr.m->w.lm_head.format == KERN_Q_INT8, any8 = 0;
		MPI_Allreduce(&head8, &any8, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
		if (g_rank == 0) {
			printf("%s: %d quantized projections on rank 0, at least %d on every rank; "
			       "LM head %s\n", what, mine, fewest, any8 ? "int8" : "run dtype");
			result(fewest > 0 || c->quant == KERN_Q_NONE, what,
			       "a rank holds no quantized projection");
			model_opts mo = opts_of(c);
			int want8 = model_lm_head_int8(&mo) && gr.m->cfg.dim % 16 == 0;
			result(any8 == want8, what, "LM head %s, expected %s", any8 ? "int8" : "run dtype",
			       want8 ? "int8" : "run dtype");
			rc = run(gr.m, g, &got, err, sizeof err);
			result(rc == 0, what, "generate: %s", err);
			if (!rc)
				compare(what, g, &got, &want);
		} else if (node_worker_loop(gr.m, err, sizeof err)) {
			printf("rank %d: %s\n", g_rank, err);
		}
	}
	node_group_close(&gr, 0);
	outputs_free(&want, g->n_prompts);
	outputs_free(&got, g->n_prompts);
	MPI_Barrier(MPI_COMM_WORLD);
}

static void run_model(const char *dir, const char *name, const char *file, const qcase *cases,
		      int n, int tp, int pp)
{
	golden g;
	if (golden_load(dir, &g)) {
		if (g_rank == 0)
			result(0, name, "cannot read the golden record in %s", dir);
		return;
	}
	if (file)
		snprintf(g.model, sizeof g.model, "%s", file);
	for (int i = 0; i < n; i++)
		run_case(&g, name, &cases[i], tp, pp);
	golden_free(&g);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int tp = 0, pp = 1;
	const char *smollm2 = NULL;
	for (int i = 1; i + 1 < argc; i++) {
		if (!strcmp(argv[i], "--tp"))
			tp = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--pp"))
			pp = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--smollm2"))
			smollm2 = argv[++i];
		else if (!strcmp(argv[i], "--device"))
			g_device = argv[++i];
		else if (!strcmp(argv[i], "--logit-tol"))
			g_tol = atof(argv[++i]);
		else if (!strcmp(argv[i], "--margin"))
			g_margin = atof(argv[++i]);
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	if (strcmp(g_device, "cpu") && strcmp(g_device, "cuda")) {
		if (g_rank == 0)
			printf("--device %s: expected cpu or cuda\n0 passed, 1 failed\n", g_device);
		MPI_Finalize();
		return 1;
	}
	if (!(g_tol > 0) || !(g_margin >= 0)) {
		if (g_rank == 0)
			printf("--logit-tol %g / --margin %g: expected a positive tolerance and a "
			       "margin of 0 or more\n0 passed, 1 failed\n", g_tol, g_margin);
		MPI_Finalize();
		return 1;
	}
	const char *root = getenv("SL_GOLDEN_DIR") ? getenv("SL_GOLDEN_DIR") : "tests/golden";
	char dir[512];
	/* Groups follow each rank's in_dim (the largest that divides it): with
	 * groups of 64 asked for, every shard of these models keeps them
	 * (gguf_quant's down projection has 128 inputs, 64 per rank at tp 2,
	 * where 128 would fall back to 64 and no longer equal tp 1) */
	static const qcase tiny[] = {
		{"int8", KERN_Q_INT8, MODEL_QGROUP_AUTO, 0, MODEL_LMQ_AUTO},
		{"int8/64", KERN_Q_INT8, 64, 0, MODEL_LMQ_AUTO},
		{"fp8+kv8", KERN_Q_FP8, MODEL_QGROUP_AUTO, 1, MODEL_LMQ_AUTO},
		{"int4/64", KERN_Q_INT4, 64, 0, MODEL_LMQ_AUTO},
		/* gguf_quant only: Q4_0 / Q4_1 blocks as they are, the other
		 * projections by Q4_1's rule (32 divides every shard's in_dim) */
		{"int4/32", KERN_Q_INT4, 32, 0, MODEL_LMQ_AUTO},
	};
	static const qcase tied[] = {
		{"int8+lm8", KERN_Q_INT8, MODEL_QGROUP_AUTO, 0, MODEL_LMQ_INT8},
	};
	static const qcase real[] = {
		{"int8", KERN_Q_INT8, MODEL_QGROUP_AUTO, 0, MODEL_LMQ_AUTO},
		{"fp8+kv8", KERN_Q_FP8, MODEL_QGROUP_AUTO, 1, MODEL_LMQ_AUTO},
		{"int4", KERN_Q_INT4, MODEL_QGROUP_AUTO, 0, MODEL_LMQ_AUTO},
	};
	if (smollm2) {
		snprintf(dir, sizeof dir, "%s/smollm2", root);
		run_model(dir, "smollm2", smollm2, real, 3, tp, pp);
	} else {
		snprintf(dir, sizeof dir, "%s/gguf_quant", root);
		run_model(dir, "gguf_quant", NULL, tiny, 5, tp, pp);
		snprintf(dir, sizeof dir, "%s/llama3_f16", root);
		run_model(dir, "llama3_f16", NULL, tiny, 3, tp, pp);
		snprintf(dir, sizeof dir, "%s/gqa_bf16_tied", root);
		run_model(dir, "gqa_bf16_tied", NULL, tied, 1, tp, pp);
	}
	if (g_rank == 0)
		printf("%d passed, %d failed\n", g_pass, g_fail);
	MPI_Finalize();
	return g_fail ? 1 : 0;
}
