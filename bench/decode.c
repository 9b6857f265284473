/*
 * decode.c — shardline-bench-decode: single-GPU decode and prefill throughput of a
 * Llama-shaped model with random fp16/bf16 weights generated on the device
 * (cuRAND), against the device's measured copy bandwidth.
 *
 * Reports: device name; copy bandwidth (bytes read + written per second by
 * cudaMemcpy device-to-device); batch-1 decode tokens/s after a prompt,
 * weight bytes read per token and the ratio of the implied traffic to the
 * measured bandwidth; decode tokens/s at larger batches; prefill tokens/s
 * of one long prompt. Writes the same as JSON.
 *
 * --quant int8|fp8|int4 quantizes the projections (random weights made and
 * quantized on the host once per projection, every layer a copy; the LM
 * head in int8 too, --quant-lm-head to choose), --kv-dtype
 * fp8 stores the KV cache in fp8; weight bytes per token then count codes,
 * scales and zero points. --block-tokens sets the KV cache's page size
 * (default 16, the node's). Prefill runs once cold (plans, heuristics),
 * then --prefill-runs times (default 5); the median is reported, with
 * the slowest and fastest (one run's figure moved by 5-10% between
 * processes on an H100; docs/benchmarks.md). --prefill-batch N prefills
 * N prompts of that length together (the step budget, 2048 tokens, takes
 * one prompt per step: with pp stages, pp of them in flight).
 *
 * Under mpirun it benchmarks a tp x pp group (--tp, --pp; NCCL): rank 0
 * drives the steps, the others follow, and the report adds each GPU's
 * achieved weight bandwidth. With pp > 1 the engine keeps pp groups of
 * the batch in flight (node/engine.c); SL_PP_INFLIGHT=0 runs the older
 * schedule (each step cut into pp micro-batches, drained) for an A/B in
 * the same job, and the report names the schedule. Tokens/s are over the
 * whole batch; ms/step is wall time per collected step (with groups in
 * flight, a group's step takes about pp of them). --comm-off skips the tensor-parallel
 * all-reduces (the outputs are then wrong) so that the difference between
 * the two runs' step times is the time spent in them.
 */
#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/args.h"
#include "common/version.h"
#include "node/engine.h"
#include "node/group.h"
#include "node/shapes.h"
#include "common/sl.h"
#include "node/step.h"

typedef struct bench_args {
	const char *shape, *out;
	long prompt, new_tokens, prefill, prefill_runs, prefill_batch, batches[8];
	int n_batches;
	int dtype;
	long tp, pp;
	int comm_off;
	int quant, quant_group, kv_fp8; /* --quant, --quant-group, --kv-dtype */
	int quant_lm_head;              /* --quant-lm-head */
	long block_tokens;              /* --block-tokens: KV cache positions a page */
} bench_args;

/* Bytes read + written per second by a device-to-device copy of 1 GiB. */
static double copy_bandwidth(void)
{
	size_t n = (size_t)1 << 30;
	void *a = NULL, *b = NULL;
	cudaEvent_t e0, e1;
	float ms = 0;
	if (cudaMalloc(&a, n) || cudaMalloc(&b, n))
		return 0;
	cudaMemset(a, 1, n);
	cudaEventCreate(&e0), cudaEventCreate(&e1);
	cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice); /* warm-up */
	cudaEventRecord(e0, 0);
	for (int i = 0; i < 20; i++)
		cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
	cudaEventRecord(e1, 0);
	cudaEventSynchronize(e1);
	cudaEventElapsedTime(&ms, e0, e1);
	cudaFree(a), cudaFree(b);
	cudaEventDestroy(e0), cudaEventDestroy(e1);
	return 2.0 * 20 * n / (ms * 1e-3);
}

static int32_t *random_prompt(int n, int vocab, unsigned seed)
{
	int32_t *p = malloc(sizeof(int32_t) * n);
	for (int i = 0; i < n; i++)
		p[i] = 3 + (int32_t)(rand_r(&seed) % (unsigned)(vocab - 3));
	return p;
}

/* Run `batch` identical-length requests; returns the engine's stats. */
static int run_batch(model *m, int batch, int prompt, int new_tokens, node_stats *st, char *err,
		     size_t errlen)
{
	node_engine *e = NULL;
	node_request req[batch];
	node_result res[batch];
	int rc = node_engine_create(m, &e, err, errlen);
	for (int i = 0; i < batch; i++)
		req[i] = (node_request){.prompt = random_prompt(prompt, m->cfg.vocab_size, 7 + i),
					.n_prompt = prompt, .max_new_tokens = new_tokens,
					.ignore_eos = 1, .sampling = {.top_p = 1}};
	memset(res, 0, sizeof res);
	if (!rc)
		rc = node_generate(e, batch, req, res, err, errlen);
	if (!rc)
		*st = *node_engine_stats(e);
	for (int i = 0; i < batch; i++)
		free((void *)req[i].prompt), free(res[i].tokens);
	node_engine_destroy(e);
	return rc;
}

typedef struct bench_result {
	char device[256];
	double copy_bw, b1_tps, b1_ms, weight_bytes_per_token, kv_bytes_per_token, ratio, ratio_kv;
	double batch_tps[8], batch_ms[8], prefill_tps, prefill_cold_tps, prefill_min, prefill_max;
} bench_result;

/* Weights one decode step streams: every layer, final norm, LM head, and
 * a single embedding row (the table itself is only indexed; a tied one is
 * also the LM head unless that is int8, a copy of its own). */
static double weight_bytes_per_step(const model *m)
{
	double es = sl_dtype_size(m->be->dtype), emb = (double)m->cfg.vocab_size * m->cfg.dim * es;
	int emb_is_head = m->cfg.tie_embeddings && !model_lm_head_int8(&m->opts);
	double w = (double)m->weight_bytes - (emb_is_head ? 0 : emb);
	return w + m->cfg.dim * es;
}

/* K and V read by attention at context ctx, all layers. */
static double kv_bytes(const model *m, double ctx)
{
	return 2.0 * m->cfg.n_layers * m->shard.n_kv_heads * m->cfg.head_dim * ctx *
	       (double)m->kv_bytes;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int measure(model *m, const bench_args *a, bench_result *r, char *err, size_t errlen)
{
	node_stats st;
	int rc = SL_OK;
	r->weight_bytes_per_token = weight_bytes_per_step(m);
	for (int i = 0; !rc && i < a->n_batches; i++) {
		int b = (int)a->batches[i];
		/* warm-up first: captures this batch size's graph, tunes cuBLAS */
		if ((rc = run_batch(m, b, 16, 4, &st, err, errlen)) ||
		    (rc = run_batch(m, b, (int)a->prompt, (int)a->new_tokens, &st, err, errlen)))
			return rc;
		r->batch_tps[i] = st.decode_tokens / st.decode_s;
		r->batch_ms[i] = 1e3 * st.decode_s / st.decode_steps;
		printf("batch %d: %.1f decode tokens/s (%.2f ms/step), this GPU %.0f GB/s of weights\n", b,
		       r->batch_tps[i], r->batch_ms[i], r->weight_bytes_per_token / r->batch_ms[i] / 1e6);
		if (b != 1)
			continue;
		r->b1_tps = r->batch_tps[i];
		r->b1_ms = r->batch_ms[i];
		r->kv_bytes_per_token = kv_bytes(m, a->prompt + a->new_tokens / 2.0);
		r->ratio = r->weight_bytes_per_token * r->b1_tps / r->copy_bw;
		r->ratio_kv = (r->weight_bytes_per_token + r->kv_bytes_per_token) * r->b1_tps / r->copy_bw;
		printf("batch 1: %.1f tokens/s (%.2f ms/token), %.2f GB weights/token on this GPU, "
		       "%.1f%% of copy bandwidth (%.1f%% with KV reads)\n", r->b1_tps, r->b1_ms,
		       r->weight_bytes_per_token / 1e9, 100 * r->ratio, 100 * r->ratio_kv);
	}
	if (rc || a->prefill <= 0)
		return rc;
	/* the first run meets cuBLAS / cuBLASLt shapes for the first time
	 * (heuristics, plan caches) and is reported apart; then the median */
	double tps[32];
	int runs = (int)a->prefill_runs;
	for (int i = 0; i <= runs; i++) {
		if ((rc = run_batch(m, (int)a->prefill_batch, (int)a->prefill, 1, &st, err, errlen)))
			return rc;
		*(i ? &tps[i - 1] : &r->prefill_cold_tps) = st.prefill_tokens / st.prefill_s;
	}
	qsort(tps, (size_t)runs, sizeof *tps, cmp_double);
	r->prefill_tps = runs % 2 ? tps[runs / 2] : (tps[runs / 2 - 1] + tps[runs / 2]) / 2;
	r->prefill_min = tps[0], r->prefill_max = tps[runs - 1];
	printf("prefill %ld x %ld tokens: %.0f tokens/s (median of %d runs, %.0f-%.0f; first run "
	       "%.0f)\n", a->prefill_batch, a->prefill, r->prefill_tps, runs, r->prefill_min, r->prefill_max, r->prefill_cold_tps);
	return SL_OK;
}

/* How the engine runs pipeline stages (node/engine.c). */
static const char *pp_schedule(const model *m)
{
	if (m->shard.grid.pp == 1)
		return "none";
	return node_engine_pp_inflight(m) ? "groups in flight" : "micro-batches";
}

static int write_json(const char *path, const bench_args *a, const model *m, const bench_result *r)
{
	cJSON *j = cJSON_CreateObject(), *bt = cJSON_CreateObject();
	char date[32];
	time_t now = time(NULL);
	strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
	cJSON_AddStringToObject(j, "date", date);
	cJSON_AddStringToObject(j, "device", r->device);
	cJSON_AddStringToObject(j, "shape", a->shape);
	cJSON_AddStringToObject(j, "dtype", sl_dtype_name(m->be->dtype));
	cJSON_AddStringToObject(j, "quant", kern_qformat_name(m->opts.quant));
	cJSON_AddNumberToObject(j, "quant_group", m->opts.quant_group);
	cJSON_AddStringToObject(j, "lm_head", model_lm_head_int8(&m->opts) ? "int8"
									   : sl_dtype_name(m->be->dtype));
	cJSON_AddStringToObject(j, "kv_dtype", m->opts.kv_fp8 ? "fp8" : sl_dtype_name(m->be->dtype));
	cJSON_AddNumberToObject(j, "projection_bytes", (double)m->proj_bytes);
	cJSON_AddNumberToObject(j, "tp", m->shard.grid.tp);
	cJSON_AddNumberToObject(j, "pp", m->shard.grid.pp);
	cJSON_AddNumberToObject(j, "gpus", m->shard.grid.tp * m->shard.grid.pp);
	cJSON_AddBoolToObject(j, "tp_comm_skipped", m->opts.skip_tp_comm);
	cJSON_AddNumberToObject(j, "copy_bandwidth_GBps", r->copy_bw / 1e9);
	cJSON_AddNumberToObject(j, "prompt_tokens", a->prompt);
	cJSON_AddNumberToObject(j, "new_tokens", a->new_tokens);
	cJSON_AddNumberToObject(j, "batch1_tokens_per_s", r->b1_tps);
	cJSON_AddNumberToObject(j, "batch1_ms_per_token", r->b1_ms);
	cJSON_AddNumberToObject(j, "weight_bytes_per_token", r->weight_bytes_per_token);
	cJSON_AddNumberToObject(j, "kv_bytes_per_token_mean", r->kv_bytes_per_token);
	cJSON_AddNumberToObject(j, "ratio_to_copy_bandwidth", r->ratio);
	cJSON_AddNumberToObject(j, "ratio_to_copy_bandwidth_with_kv", r->ratio_kv);
	cJSON *ms = cJSON_CreateObject(), *bw = cJSON_CreateObject();
	for (int i = 0; i < a->n_batches; i++) {
		char k[16];
		snprintf(k, sizeof k, "%ld", a->batches[i]);
		cJSON_AddNumberToObject(bt, k, r->batch_tps[i]);
		cJSON_AddNumberToObject(ms, k, r->batch_ms[i]);
		cJSON_AddNumberToObject(bw, k, r->weight_bytes_per_token / r->batch_ms[i] / 1e6);
	}
	cJSON_AddItemToObject(j, "decode_tokens_per_s_by_batch", bt);
	cJSON_AddItemToObject(j, "decode_ms_per_step_by_batch", ms);
	cJSON_AddItemToObject(j, "rank0_weight_GBps_by_batch", bw);
	cJSON_AddNumberToObject(j, "prefill_prompt_tokens", a->prefill);
	cJSON_AddNumberToObject(j, "prefill_prompts", a->prefill_batch);
	cJSON_AddStringToObject(j, "pp_schedule", pp_schedule(m));
	cJSON_AddNumberToObject(j, "block_tokens", a->block_tokens);
	cJSON_AddNumberToObject(j, "prefill_tokens_per_s", r->prefill_tps);
	cJSON_AddNumberToObject(j, "prefill_tokens_per_s_first_run", r->prefill_cold_tps);
	cJSON_AddNumberToObject(j, "prefill_runs", a->prefill_runs);
	cJSON_AddNumberToObject(j, "prefill_tokens_per_s_min", r->prefill_min);
	cJSON_AddNumberToObject(j, "prefill_tokens_per_s_max", r->prefill_max);
	char *txt = cJSON_Print(j);
	cJSON_Delete(j);
	FILE *f = fopen(path, "w");
	int ok = f && fputs(txt, f) >= 0;
	if (f)
		ok &= fclose(f) == 0;
	free(txt);
	return ok ? SL_OK : SL_EIO;
}

static int parse(int argc, char **argv, bench_args *a, char *err, size_t errlen)
{
	static const struct option o[] = {{"shape", 1, 0, 's'}, {"out", 1, 0, 'o'},
					  {"prompt", 1, 0, 'p'}, {"new", 1, 0, 'n'},
					  {"prefill", 1, 0, 'P'}, {"dtype", 1, 0, 'd'},
					  {"batches", 1, 0, 'b'}, {"tp", 1, 0, 't'}, {"pp", 1, 0, 'q'},
					  {"comm-off", 0, 0, 'c'}, {"quant", 1, 0, 'Q'},
					  {"quant-group", 1, 0, 'G'}, {"kv-dtype", 1, 0, 'K'},
					  {"quant-lm-head", 1, 0, 'L'}, {"prefill-runs", 1, 0, 'R'},
					  {"prefill-batch", 1, 0, 'B'}, {"block-tokens", 1, 0, 'T'},
					  {0, 0, 0, 0}};
	*a = (bench_args){.shape = "7b", .prompt = 128, .new_tokens = 256, .prefill = 2048,
			  .prefill_runs = 5, .prefill_batch = 1, .batches = {1, 8, 32, 64}, .n_batches = 4, .dtype = SL_DT_F16,
			  .block_tokens = 16};
	int c, rc = 0;
	while (!rc && (c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 's': a->shape = optarg; break;
		case 'o': a->out = optarg; break;
		case 'p': rc = sl_parse_int("--prompt", optarg, 1, 4000, &a->prompt, err, errlen); break;
		case 'n': rc = sl_parse_int("--new", optarg, 1, 4000, &a->new_tokens, err, errlen); break;
		case 'P': rc = sl_parse_int("--prefill", optarg, 0, 4095, &a->prefill, err, errlen); break;
		case 'T':
			rc = sl_parse_int("--block-tokens", optarg, 1, 1024, &a->block_tokens, err, errlen);
			break;
		case 'B':
			rc = sl_parse_int("--prefill-batch", optarg, 1, 64, &a->prefill_batch, err, errlen);
			break;
		case 'R':
			rc = sl_parse_int("--prefill-runs", optarg, 1, 32, &a->prefill_runs, err, errlen);
			break;
		case 'd': a->dtype = strcmp(optarg, "bf16") ? SL_DT_F16 : SL_DT_BF16; break;
		case 't': rc = sl_parse_int("--tp", optarg, 1, 64, &a->tp, err, errlen); break;
		case 'q': rc = sl_parse_int("--pp", optarg, 1, 64, &a->pp, err, errlen); break;
		case 'c': a->comm_off = 1; break;
		case 'Q': rc = model_parse_quant(optarg, &a->quant, err, errlen); break;
		case 'G': rc = model_parse_quant_group(optarg, &a->quant_group, err, errlen); break;
		case 'K': rc = model_parse_kv_dtype(optarg, &a->kv_fp8, err, errlen); break;
		case 'L': rc = model_parse_quant_lm_head(optarg, &a->quant_lm_head, err, errlen); break;
		case 'b': {
			int32_t *v;
			int n;
			if ((rc = sl_parse_ids("--batches", optarg, 4096, &v, &n, err, errlen)))
				break;
			a->n_batches = n < 8 ? n : 8;
			for (int i = 0; i < a->n_batches; i++)
				a->batches[i] = v[i] > 0 ? v[i] : 1;
			free(v);
			break;
		}
		default: return sl_errf(err, errlen, SL_EINVAL,
					"usage: shardline-bench-decode [--shape 7b|8b|13b|70b|tiny] [--out FILE.json] "
					"[--prompt 128] [--new 256] [--prefill 2048 (0: skip)] [--prefill-runs 5] [--prefill-batch 1] "
					"[--dtype f16|bf16] "
					"[--batches 1,8,32,64] [--tp T --pp P under mpirun] [--comm-off] "
					"[--quant none|int8|fp8|int4] [--quant-group auto|row|32|64|128] "
					"[--quant-lm-head auto|none|int8] [--kv-dtype auto|fp8] [--block-tokens 16]");
		}
	}
	if (!rc)
		rc = model_check_quant(a->quant, a->quant_group, err, errlen);
	return rc;
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline-bench-decode"))
		return 0;
	char err[SL_ERRLEN] = "";
	bench_args a;
	model_config cfg;
	bench_result r = {0};
	node_group g = {0};
	sl_log_set_role("bench", 0, 1);
	int rc = parse(argc, argv, &a, err, sizeof err);
	if (!rc && model_config_shape(a.shape, (sl_dtype)a.dtype, &cfg))
		rc = sl_errf(err, sizeof err, SL_EINVAL, "unknown --shape %s (7b, 8b, 13b, 70b, tiny)", a.shape);
	if (rc) {
		fprintf(stderr, "shardline-bench-decode: %s\n", err);
		return 1;
	}
	long most = 1;
	for (int i = 0; i < a.n_batches; i++)
		most = a.batches[i] > most ? a.batches[i] : most;
	most = a.prefill_batch > most ? a.prefill_batch : most;
	node_group_opts o = {.device = "cuda", .dtype = a.dtype, .random_cfg = &cfg, .seed = 1,
			     .tp = (int)a.tp, .pp = (int)a.pp, .step_tokens = 2048,
			     .max_seqs = (int)most, .block_tokens = (int)a.block_tokens, .mem_fraction = 0.9f,
			     .skip_tp_comm = a.comm_off, .quant = a.quant, .quant_group = a.quant_group,
			     .kv_fp8 = a.kv_fp8, .quant_lm_head = a.quant_lm_head};
	rc = node_group_open(&argc, &argv, &o, &g, err, sizeof err);
	if (!rc && g.rank != 0) {
		rc = node_worker_loop(g.m, err, sizeof err);
	} else if (!rc) {
		snprintf(r.device, sizeof r.device, "%s", node_backend_cuda_device_name(g.be));
		r.copy_bw = copy_bandwidth();
		printf("device: %s x %d (tp %d, pp %d)\ncopy bandwidth: %.0f GB/s (read + write)\n"
		       "shape %s, %s, weights %s (projections %.2f GB), LM head %s, KV %s (pages of %ld), "
		       "%.2f GB of weights on rank 0%s\npipeline: %s\n", r.device, g.world, g.m->shard.grid.tp,
		       g.m->shard.grid.pp, r.copy_bw / 1e9, a.shape, sl_dtype_name(g.be->dtype),
		       kern_qformat_name(a.quant), g.m->proj_bytes / 1e9,
		       model_lm_head_int8(&g.m->opts) ? "int8" : sl_dtype_name(g.be->dtype),
		       a.kv_fp8 ? "fp8" : sl_dtype_name(g.be->dtype), a.block_tokens,
		       g.m->weight_bytes / 1e9,
		       a.comm_off ? ", tensor-parallel all-reduces SKIPPED" : "", pp_schedule(g.m));
		rc = measure(g.m, &a, &r, err, sizeof err);
		if (!rc && a.out && write_json(a.out, &a, g.m, &r))
			rc = sl_errf(err, sizeof err, SL_EIO, "cannot write %s", a.out);
	}
	if (rc)
		fprintf(stderr, "shardline-bench-decode: rank %d: %s\n", g.rank, err);
	node_group_close(&g, rc);
	return rc ? 1 : 0;
}
