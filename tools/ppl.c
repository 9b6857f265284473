/*
 * perplexity.c — shardline-ppl: what quantized weights and an fp8 KV cache
 * cost in accuracy. For each configuration (a weight format and KV dtype,
 * loaded afresh: --quant quantizes at load), the engine's perplexity on a
 * text, and its greedy tokens on the golden prompts against Hugging Face's
 * and against the first configuration's.
 *
 *   shardline-ppl --model FILE|DIR --text FILE [--configs none,int8,fp8,int4]
 *       [--window 512] [--max-tokens N] [--golden DIR] [--check] [--json OUT]
 *       [--device cpu|cuda] [--dtype f16|bf16] [--step-tokens 512]
 *   mpirun -np N shardline-ppl --tp T --pp P ...   (the same on a node group)
 *
 * A configuration is FORMAT[/GROUP][+kv8][+lm8|+lmnone]: none, int8,
 * int8/row, int8/64, fp8, int4, int4/64, ..., "+kv8" for an fp8 KV cache
 * (fp8+kv8), "+lm8" / "+lmnone" for an int8 / run-dtype LM head (else
 * --quant-lm-head auto: int8 with any format but none). The
 * first is the baseline (normally none). The text is tokenized with the
 * model's own tokenizer (the GGUF's, or the folder's tokenizer.json), cut
 * into windows of --window tokens, each starting with BOS (or, where the
 * tokenizer has none, its end-of-text token: SmolLM2) and scored on
 * every text token it holds (so every token of the text is scored once,
 * with at most a window of context): perplexity = exp(mean negative log
 * likelihood). --golden DIR (a tests/golden record, e.g. smollm2) adds the
 * greedy comparison on its prompts.
 *
 * --check asserts the bounds against the baseline: int8 within
 * +1%, fp8 +2%, int4 +8% (an fp8 KV cache adds PPL_KV8_BOUND; --bound
 * FORMAT=REL replaces a format's, e.g. int4=0.40, and --bound CONFIG=REL
 * one configuration's, e.g. int4/128=0.40), and prints
 * "N passed, N failed" (tests/quant_ppl.sh runs it in `make test`).
 * --json writes every figure for bench/results.
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "common/version.h"
#include "common/checks.h"
#include "text/tokenizer/tokenizer.h"
#include "node/engine.h"
#include "node/group.h"
#include "common/sl.h"
#include "node/step.h"

#define MAX_CONFIGS 16
#define MAX_PROMPTS 8
/* what an fp8 KV cache may add to a configuration's bound. The issue
 * states none; with scale 1 it costs SmolLM2 +2.5% on the CPU and +3.4% on
 * an H100 in fp16 (docs/cuda.md), so the bound is a regression guard above
 * those, not a target met. */
#define PPL_KV8_BOUND 0.04

typedef struct ppl_config {
	char name[32];
	int quant, group, kv_fp8;
	int lm_head; /* model_opts.quant_lm_head: +lm8, +lmnone, else auto */
	/* results */
	double ppl, nll, seconds;
	long scored;
	int32_t *greedy[MAX_PROMPTS];
	int n_greedy[MAX_PROMPTS];
} ppl_config;

typedef struct ppl_args {
	const char *model, *text, *golden, *json, *device;
	int dtype;
	long window, max_tokens, step_tokens, tp, pp;
	int check;
	double bound[4]; /* by kern_qformat: the --check bound; <0: the issue's */
	struct {
		char name[32];
		double rel;
	} named[MAX_CONFIGS]; /* --bound CONFIG=REL, before the format's */
	int n_named;
	ppl_config cfg[MAX_CONFIGS];
	int n_cfg;
} ppl_args;

/* The golden prompts and Hugging Face's greedy tokens. */
typedef struct gold {
	int n;
	int32_t *prompt[MAX_PROMPTS], *greedy[MAX_PROMPTS];
	int n_prompt[MAX_PROMPTS], n_greedy[MAX_PROMPTS];
} gold;

static int parse_config(const char *s, ppl_config *c, char *err, size_t errlen)
{
	char fmt[32], *p;
	snprintf(fmt, sizeof fmt, "%s", s);
	memset(c, 0, sizeof *c);
	snprintf(c->name, sizeof c->name, "%s", s);
	if ((p = strstr(fmt, "+lm8")) || (p = strstr(fmt, "+lmnone"))) {
		c->lm_head = p[3] == '8' ? MODEL_LMQ_INT8 : MODEL_LMQ_NONE;
		memmove(p, p + (p[3] == '8' ? 4 : 7), strlen(p + (p[3] == '8' ? 4 : 7)) + 1);
	}
	if ((p = strstr(fmt, "+kv8"))) {
		c->kv_fp8 = 1;
		*p = 0;
	}
	if ((p = strchr(fmt, '/'))) {
		*p++ = 0;
		TRY(model_parse_quant_group(p, &c->group, err, errlen));
	}
	TRY(model_parse_quant(fmt, &c->quant, err, errlen));
	return model_check_quant(c->quant, c->group, err, errlen);
}

static int parse(int argc, char **argv, ppl_args *a, char *err, size_t errlen)
{
	static const struct option o[] = {
		{"model", 1, 0, 'm'}, {"text", 1, 0, 't'}, {"configs", 1, 0, 'c'},
		{"window", 1, 0, 'w'}, {"max-tokens", 1, 0, 'n'}, {"golden", 1, 0, 'g'},
		{"check", 0, 0, 'k'}, {"json", 1, 0, 'j'}, {"device", 1, 0, 'd'},
		{"dtype", 1, 0, 'D'}, {"step-tokens", 1, 0, 's'}, {"tp", 1, 0, 'x'},
		{"pp", 1, 0, 'y'}, {"bound", 1, 0, 'b'}, {0, 0, 0, 0}};
	*a = (ppl_args){.window = 512, .step_tokens = 512, .dtype = -1, .bound = {-1, -1, -1, -1}};
	const char *configs = "none,int8,fp8,int4";
	int c, rc = 0;
	while (!rc && (c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'm': a->model = optarg; break;
		case 't': a->text = optarg; break;
		case 'c': configs = optarg; break;
		case 'w': rc = sl_parse_int("--window", optarg, 2, 1 << 16, &a->window, err, errlen); break;
		case 'n': rc = sl_parse_int("--max-tokens", optarg, 1, 1 << 24, &a->max_tokens, err, errlen); break;
		case 'g': a->golden = optarg; break;
		case 'k': a->check = 1; break;
		case 'j': a->json = optarg; break;
		case 'd': a->device = optarg; break;
		case 'D': a->dtype = !strcmp(optarg, "bf16") ? SL_DT_BF16 : SL_DT_F16; break;
		case 's': rc = sl_parse_int("--step-tokens", optarg, 16, 1 << 16, &a->step_tokens, err, errlen); break;
		case 'x': rc = sl_parse_int("--tp", optarg, 1, 64, &a->tp, err, errlen); break;
		case 'y': rc = sl_parse_int("--pp", optarg, 1, 64, &a->pp, err, errlen); break;
		case 'b': {
			char what[32];
			double v;
			ppl_config probe;
			if (sscanf(optarg, "%31[a-z0-9/+]=%lf", what, &v) != 2 || v < 0 ||
			    parse_config(what, &probe, err, errlen))
				return sl_errf(err, errlen, SL_EINVAL, "--bound %s: expected FORMAT=REL "
					       "(int4=0.40) or CONFIG=REL (int4/128=0.40)", optarg);
			int q = kern_qformat_parse(what);
			if (q >= 0) {
				a->bound[q] = v;
			} else if (a->n_named < MAX_CONFIGS) {
				snprintf(a->named[a->n_named].name, sizeof a->named[0].name, "%s", what);
				a->named[a->n_named++].rel = v;
			}
			break;
		}
		default:
			return sl_errf(err, errlen, SL_EINVAL,
				       "usage: shardline-ppl --model FILE|DIR --text FILE [--configs "
				       "none,int8,fp8,int4,fp8+kv8,int4+lmnone] [--window 512] [--max-tokens N] "
				       "[--golden DIR] [--check] [--json OUT] [--device cpu|cuda] "
				       "[--dtype f16|bf16] [--step-tokens 512] [--tp T --pp P] "
				       "[--bound FORMAT=REL|CONFIG=REL]");
		}
	}
	if (rc)
		return rc;
	if (!a->model || !a->text)
		return sl_errf(err, errlen, SL_EINVAL, "--model and --text are required");
	char list[512], *save = NULL;
	snprintf(list, sizeof list, "%s", configs);
	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (a->n_cfg == MAX_CONFIGS)
			return sl_errf(err, errlen, SL_EINVAL, "--configs: at most %d", MAX_CONFIGS);
		TRY(parse_config(t, &a->cfg[a->n_cfg++], err, errlen));
	}
	return a->n_cfg ? SL_OK : sl_errf(err, errlen, SL_EINVAL, "--configs is empty");
}

/* The text as the model's tokenizer encodes it (no special tokens). */
static int tokenize(const ppl_args *a, int32_t **ids, size_t *n, int32_t *bos, char *err,
		    size_t errlen)
{
	char path[1100], *text = NULL;
	size_t len = 0;
	text_tok *t = NULL;
	if (model_path_is_file(a->model))
		snprintf(path, sizeof path, "%s", a->model);
	else
		snprintf(path, sizeof path, "%s/tokenizer.json", a->model);
	int rc = text_tok_load(path, &t, err, errlen);
	if (!rc)
		rc = sl_read_file(a->text, &text, &len, err, errlen);
	if (!rc)
		rc = text_tok_encode(t, text, len, 0, ids, n, err, errlen);
	if (!rc) /* no BOS (SmolLM2): its end-of-text token separates documents */
		*bos = text_tok_bos_id(t) >= 0 ? text_tok_bos_id(t) : text_tok_eos_id(t);
	free(text);
	text_tok_destroy(t);
	return rc;
}

/* -log softmax(row)[id], in double. */
static double nll_of(const float *row, int vocab, int id)
{
	double mx = -INFINITY, sum = 0;
	for (int v = 0; v < vocab; v++)
		mx = row[v] > mx ? row[v] : mx;
	for (int v = 0; v < vocab; v++)
		sum += exp((double)row[v] - mx);
	return log(sum) + mx - row[id];
}

/* Every window of the text through the engine: NLL of each text token. */
static int score_text(node_engine *e, const ppl_args *a, const int32_t *ids, size_t n,
		      int32_t bos, ppl_config *c, char *err, size_t errlen)
{
	const int vocab = node_engine_config(e)->vocab_size;
	const size_t per = (size_t)a->window - 1; /* text tokens per window, after BOS */
	int32_t *win = malloc(sizeof(int32_t) * a->window);
	float *logits = malloc(sizeof(float) * (size_t)a->window * vocab);
	int rc = win && logits ? SL_OK : sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	c->nll = 0;
	c->scored = 0;
	for (size_t at = 0; !rc && at < n; at += per) {
		size_t k = n - at < per ? n - at : per;
		win[0] = bos;
		memcpy(win + 1, ids + at, sizeof(int32_t) * k);
		node_request r = {.prompt = win, .n_prompt = (int)k + 1, .max_new_tokens = 1,
				  .ignore_eos = 1, .prompt_logits = logits, .sampling = {.top_p = 1}};
		node_result res = {0};
		rc = node_generate(e, 1, &r, &res, err, errlen);
		node_result_free(&res);
		for (size_t i = 0; !rc && i < k; i++) /* row i predicts window token i + 1 */
			c->nll += nll_of(logits + i * vocab, vocab, win[i + 1]);
		c->scored += (long)k;
	}
	c->ppl = c->scored ? exp(c->nll / c->scored) : NAN;
	free(win);
	free(logits);
	return rc;
}

static int greedy(node_engine *e, const gold *g, ppl_config *c, char *err, size_t errlen)
{
	node_request req[MAX_PROMPTS];
	node_result res[MAX_PROMPTS];
	memset(res, 0, sizeof res);
	for (int i = 0; i < g->n; i++)
		req[i] = (node_request){.prompt = g->prompt[i], .n_prompt = g->n_prompt[i],
					.max_new_tokens = g->n_greedy[i], .ignore_eos = 1,
					.sampling = {.top_p = 1}};
	int rc = node_generate(e, g->n, req, res, err, errlen);
	for (int i = 0; i < g->n; i++) {
		c->greedy[i] = res[i].tokens; /* kept: compared with the baseline's */
		c->n_greedy[i] = rc ? 0 : res[i].n_tokens;
		res[i].tokens = NULL;
		node_result_free(&res[i]);
	}
	return rc;
}

static int same_prefix(const int32_t *a, int na, const int32_t *b, int nb)
{
	int k = 0;
	while (k < na && k < nb && a[k] == b[k])
		k++;
	return k;
}

static int32_t *json_ids(const cJSON *arr, int *n)
{
	*n = cJSON_GetArraySize(arr);
	int32_t *v = malloc(sizeof(int32_t) * (*n > 0 ? *n : 1));
	for (int i = 0; v && i < *n; i++)
		v[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
	return v;
}

static int load_gold(const char *dir, gold *g, char *err, size_t errlen)
{
	char path[700], *txt;
	memset(g, 0, sizeof *g);
	if (!dir)
		return SL_OK;
	snprintf(path, sizeof path, "%s/golden.json", dir);
	TRY(sl_read_file(path, &txt, NULL, err, errlen));
	cJSON *j = cJSON_Parse(txt);
	free(txt);
	const cJSON *pr = cJSON_GetObjectItem(j, "prompts"), *gr = cJSON_GetObjectItem(j, "greedy");
	if (!cJSON_IsArray(pr) || !cJSON_IsArray(gr)) {
		cJSON_Delete(j);
		return sl_errf(err, errlen, SL_EINVAL, "%s: no prompts / greedy arrays", path);
	}
	g->n = cJSON_GetArraySize(pr) < MAX_PROMPTS ? cJSON_GetArraySize(pr) : MAX_PROMPTS;
	for (int i = 0; i < g->n; i++) {
		g->prompt[i] = json_ids(cJSON_GetArrayItem(pr, i), &g->n_prompt[i]);
		g->greedy[i] = json_ids(cJSON_GetArrayItem(gr, i), &g->n_greedy[i]);
	}
	cJSON_Delete(j);
	return SL_OK;
}

/* The bound of a configuration against the baseline (relative increase):
 * its own --bound CONFIG=REL as given, else its format's (the issue's, or
 * --bound FORMAT=REL) plus PPL_KV8_BOUND with an fp8 KV cache. */
static double bound_of(const ppl_args *a, const ppl_config *c)
{
	for (int i = 0; i < a->n_named; i++)
		if (!strcmp(a->named[i].name, c->name))
			return a->named[i].rel;
	double b = c->quant == KERN_Q_INT8 ? 0.01 : c->quant == KERN_Q_FP8 ? 0.02
		 : c->quant == KERN_Q_INT4 ? 0.08 : 0.0;
	if (a->bound[c->quant] >= 0)
		b = a->bound[c->quant];
	return b + (c->kv_fp8 ? PPL_KV8_BOUND : 0.0);
}

static int g_pass, g_fail;

static void report(const ppl_args *a, const gold *g, ppl_config *c, const ppl_config *base)
{
	double rel = c->ppl / base->ppl - 1;
	printf("ppl %-12s %9.4f  %+7.3f%% vs %s  (%ld tokens, windows of %ld, %.1f s)", c->name,
	       c->ppl, 100 * rel, base->name, c->scored, a->window, c->seconds);
	if (a->check && c != base) {
		int ok = isfinite(c->ppl) && rel <= bound_of(a, c);
		ok ? g_pass++ : g_fail++;
		printf("  bound +%.0f%%: %s", 100 * bound_of(a, c), ok ? "ok" : "FAIL");
	}
	printf("\n");
	for (int i = 0; i < g->n; i++)
		printf("greedy %-12s prompt %d: %2d of %d tokens equal Hugging Face's, %2d equal %s's\n",
		       c->name, i, same_prefix(c->greedy[i], c->n_greedy[i], g->greedy[i], g->n_greedy[i]),
		       g->n_greedy[i],
		       same_prefix(c->greedy[i], c->n_greedy[i], base->greedy[i], base->n_greedy[i]),
		       base->name);
	fflush(stdout);
}

static int write_json(const ppl_args *a, const gold *g, const char *device, const char *dtype)
{
	cJSON *j = cJSON_CreateObject(), *arr = cJSON_CreateArray();
	cJSON_AddStringToObject(j, "model", a->model);
	cJSON_AddStringToObject(j, "text", a->text);
	cJSON_AddStringToObject(j, "device", device);
	cJSON_AddStringToObject(j, "dtype", dtype);
	cJSON_AddNumberToObject(j, "window", a->window);
	for (int k = 0; k < a->n_cfg; k++) {
		const ppl_config *c = &a->cfg[k];
		cJSON *o = cJSON_CreateObject(), *gr = cJSON_CreateArray(), *gb = cJSON_CreateArray();
		cJSON_AddStringToObject(o, "config", c->name);
		cJSON_AddNumberToObject(o, "ppl", c->ppl);
		cJSON_AddNumberToObject(o, "rel_to_baseline", c->ppl / a->cfg[0].ppl - 1);
		cJSON_AddNumberToObject(o, "tokens", c->scored);
		cJSON_AddNumberToObject(o, "seconds", c->seconds);
		for (int i = 0; i < g->n; i++) {
			cJSON_AddItemToArray(gr, cJSON_CreateNumber(same_prefix(
				c->greedy[i], c->n_greedy[i], g->greedy[i], g->n_greedy[i])));
			cJSON_AddItemToArray(gb, cJSON_CreateNumber(same_prefix(
				c->greedy[i], c->n_greedy[i], a->cfg[0].greedy[i], a->cfg[0].n_greedy[i])));
		}
		cJSON_AddItemToObject(o, "greedy_equal_hf", gr);
		cJSON_AddItemToObject(o, "greedy_equal_baseline", gb);
		cJSON_AddItemToArray(arr, o);
	}
	cJSON_AddItemToObject(j, "configs", arr);
	char *txt = cJSON_Print(j);
	cJSON_Delete(j);
	FILE *f = fopen(a->json, "w");
	int ok = f && fputs(txt, f) >= 0;
	if (f)
		ok &= fclose(f) == 0;
	free(txt);
	return ok ? SL_OK : SL_EIO;
}

/* One configuration: a fresh node group (the weights quantized as they
 * load), the text scored, the golden prompts run. */
static int run_config(ppl_args *a, ppl_config *c, const int32_t *ids, size_t n, int32_t bos,
		      const gold *g, char *device, size_t devlen, char *err, size_t errlen)
{
	node_group gr = {0};
	node_group_opts o = {.model_dir = a->model, .device = a->device, .dtype = a->dtype,
			     .tp = (int)a->tp, .pp = (int)a->pp, .step_tokens = (int)a->step_tokens,
			     .max_seqs = MAX_PROMPTS, .block_tokens = 16,
			     .n_kv_blocks = (int)((a->window + 64) / 16 * MAX_PROMPTS),
			     .quant = c->quant, .quant_group = c->group, .kv_fp8 = c->kv_fp8,
			     .quant_lm_head = c->lm_head, .seed = 1};
	int rc = node_group_open(NULL, NULL, &o, &gr, err, errlen);
	if (!rc && gr.rank != 0) {
		rc = node_worker_loop(gr.m, err, errlen);
	} else if (!rc) {
		node_engine *e = NULL;
		snprintf(device, devlen, "%s", gr.be->name);
#ifdef SL_HAVE_CUDA
		if (!strcmp(gr.be->name, "cuda"))
			snprintf(device, devlen, "%s", node_backend_cuda_device_name(gr.be));
#endif
		double t0 = sl_now();
		rc = node_engine_create(gr.m, &e, err, errlen);
		if (!rc)
			rc = score_text(e, a, ids, n, bos, c, err, errlen);
		c->seconds = sl_now() - t0;
		if (!rc && g->n)
			rc = greedy(e, g, c, err, errlen);
		node_engine_destroy(e);
	}
	node_group_close(&gr, rc);
	return rc;
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline-ppl"))
		return 0;
	char err[SL_ERRLEN] = "", device[256] = "cpu";
	ppl_args a;
	gold g;
	int32_t *ids = NULL, bos = -1;
	size_t n = 0;
	int rank = 0, mpi = node_group_under_mpi();
	if (mpi) {
		MPI_Init(&argc, &argv);
		MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	}
	sl_log_set_role("ppl", rank, 1);
	int rc = parse(argc, argv, &a, err, sizeof err);
	if (!rc)
		rc = tokenize(&a, &ids, &n, &bos, err, sizeof err);
	if (!rc && bos < 0)
		rc = sl_errf(err, sizeof err, SL_EINVAL, "the tokenizer has neither BOS nor EOS");
	if (!rc && a.max_tokens > 0 && n > (size_t)a.max_tokens)
		n = (size_t)a.max_tokens;
	if (!rc)
		rc = load_gold(a.golden, &g, err, sizeof err);
	if (!rc && rank == 0)
		printf("text %s: %zu tokens, BOS %d; model %s\n", a.text, n, bos, a.model);
	for (int k = 0; !rc && k < a.n_cfg; k++) {
		rc = run_config(&a, &a.cfg[k], ids, n, bos, &g, device, sizeof device, err, sizeof err);
		if (!rc && rank == 0)
			report(&a, &g, &a.cfg[k], &a.cfg[0]);
	}
	if (!rc && rank == 0 && a.json &&
	    write_json(&a, &g, device, a.dtype == SL_DT_BF16 ? "bf16" : a.device &&
		       !strcmp(a.device, "cpu") ? "f32" : "default"))
		rc = sl_errf(err, sizeof err, SL_EIO, "cannot write %s", a.json);
	if (rc)
		fprintf(stderr, "shardline-ppl: rank %d: %s\n", rank, err);
	if (rank == 0 && a.check)
		printf("%d passed, %d failed\n", g_pass, g_fail + (rc != 0));
	free(ids);
	if (mpi)
		MPI_Finalize();
	return rc || g_fail ? 1 : 0;
}
