/*
 * main.c — shardline-node. Local run mode: load a Hugging Face Llama
 * folder, run one or more prompts (given as token ids) together, print the
 * generated ids on stdout (one line per prompt, space-separated) and the
 * timings on stderr. Serving mode (--coordinator): rank 0 registers with
 * the coordinator and serves requests (node/leader.c) until drained or
 * signalled; the other ranks follow its step plans as in local mode.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/allreduce.h"
#include "common/args.h"
#include "common/version.h"
#include "parallel/comm.h"
#include "grammar/grammar.h"
#include "node/engine.h"
#include "proto/curve.h"
#include "node/group.h"
#include "node/leader.h"
#include "node/watchdog.h"
#include "node/shapes.h"
#include "common/sl.h"
#include "node/step.h"

#define MAX_PROMPTS 256

typedef struct node_args {
	const char *model_dir;
	const char *random_shape; /* instead of a checkpoint: random weights of this shape */
	const char *device;     /* NULL: cuda when a GPU is present */
	int dtype;
	double mem_fraction;
	const char *prompts[MAX_PROMPTS];
	int n_prompts;
	long max_tokens, max_step_tokens, kv_blocks, block_tokens;
	double temperature, top_p, min_p, presence, frequency, repetition;
	long top_k, logprobs;   /* logprobs: -1 none, else alternatives per token */
	uint64_t seed;
	int ignore_eos;
	long tp, pp;            /* 0: not given */
	const char *coordinator; /* serving mode: the coordinator's node endpoint */
	const char *model_name;
	const char *tokenizer;   /* --tokenizer: constrained decoding's vocabulary */
	long grammar_max_uncertain; /* --grammar-max-uncertain: percent; 0: no limit */
	const char *curve_key, *server_key; /* CURVE to the coordinator (docs/security.md) */
	long heartbeat_ms, max_running, max_waiting, min_step_ms;
	long grace_s;           /* --grace-s: SIGTERM drains at most this long */
	long step_watchdog_ms;  /* --step-watchdog-ms: a longer step ends the group */
	long stall_ms;          /* --stall-ms: no progress this long ends it */
	long max_seqs;          /* sequences per step; 0: the model's default */
	node_sched_policy batching;
	par_car_mode custom_ar; /* --custom-allreduce */
	int no_prefix_cache;    /* --no-prefix-cache */
	int quant, quant_group, kv_fp8; /* --quant, --quant-group, --kv-dtype */
	int quant_lm_head;              /* --quant-lm-head */
} node_args;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shardline-node --model DIR|--random-shape 7b|8b|13b|70b|tiny --prompt-ids 1,2,3\n"
		"                      [--prompt-ids ...]\n"
		"                      [--max-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
		"                      [--seed S] [--min-p P] [--presence-penalty X]\n"
		"                      [--frequency-penalty X] [--repetition-penalty R]\n"
		"                      [--logprobs N] [--ignore-eos] [--device cpu|cuda]\n"
		"                      [--dtype f16|bf16] [--gpu-mem-fraction F]\n"
		"                      [--max-step-tokens N] [--kv-blocks N] [--block-tokens N]\n"
		"                      [--quant none|int8|fp8|int4] [--quant-group auto|row|32|64|128]\n"
		"                      [--quant-lm-head auto|none|int8] [--kv-dtype auto|fp8]\n"
		"       mpirun -np N shardline-node --tp T --pp P --model DIR ... (T x P = N)\n"
		"       [mpirun -np N] shardline-node --model DIR --coordinator tcp://HOST:PORT\n"
		"                      --model-name NAME [--heartbeat-ms 1000] [--max-running N]\n"
		"                      [--max-waiting 64] [--min-step-ms 0] [--kv-blocks N]\n"
		"                      [--batching continuous|simple] [--no-continuous-batching]\n"
		"                      [--max-seqs N] [--no-prefix-cache] [--grace-s 30] ...\n"
		"                      [--step-watchdog-ms 600000] [--stall-ms 10000]\n"
		"                      [--custom-allreduce auto|on|off] [--tokenizer FILE]\n"
		"                      [--grammar-max-uncertain PCT]\n"
		"                      [--curve-key NODE.key --server-key COORD.pub]\n"
		"       (--coordinator EP1,EP2: a standby coordinator pair, tried in turn)\n"
		"Prints the generated ids of each prompt on its own stdout line; logs and\n"
		"timings go to stderr. Several --prompt-ids run together in one batch.\n"
		"Defaults: --max-tokens 32, greedy (--temperature 0), --top-k 0 (off),\n"
		"--top-p 1 (off), --seed 0, --min-p 0 (off), penalties off (presence and\n"
		"frequency 0, in [-2, 2]; repetition 1, in (0, 10]), --max-step-tokens 2048,\n"
		"--block-tokens 16. --logprobs N (0..20): after a prompt's ids line, one\n"
		"line per token: 'lp INDEX ID LOGPROB' and N 'ID:LOGPROB' alternatives\n"
		"(docs/sampling.md).\n"
		"--kv-blocks: on cpu enough for every prompt plus its new tokens, on cuda\n"
		"as many as --gpu-mem-fraction (0.9) of the device holds. --device: cuda\n"
		"when a GPU is present; --dtype: the checkpoint's, fp32 cast to f16.\n"
		"--quant: the q/k/v, o, gate/up and down projections quantized per rank as\n"
		"they load (embedding and norms stay in the run dtype): int8 weight-only,\n"
		"symmetric, one scale per output row (--quant-group 32, 64 or 128: groups\n"
		"of columns; GGUF Q8_0 tensors keep their groups of 32); fp8 E4M3 with one\n"
		"scale per row (on a GPU: weight-only up to 32 tokens, W8A8 with per-token\n"
		"activation scales above); int4 groups of 128 (64 or 32 where in_dim needs\n"
		"it), asymmetric, round to nearest; GGUF Q4_1 / Q4_0 tensors keep their\n"
		"blocks of 32 (--quant-group 64 or 128 quantizes them again). Default\n"
		"none. --quant-lm-head auto|none|int8: the LM head in int8, groups of 128\n"
		"(GGUF Q8_0: its blocks of 32); auto (default) does so with any --quant\n"
		"but none. --kv-dtype fp8: the KV cache\n"
		"in fp8 E4M3, scale 1 (twice the blocks in the same GPU memory); auto\n"
		"(default) keeps the run dtype. docs/cuda.md has the details.\n"
		"--random-shape NAME: no checkpoint; Llama-2-shaped random weights (vocab\n"
		"32000, context 4096) made on the device, for benchmarks and load tests.\n"
		"--tokenizer FILE: the vocabulary constrained requests (JSON schema, regex,\n"
		"grammar) are compiled against; default the model's own (its GGUF, or\n"
		"tokenizer.json in its folder); a random-weights model has none.\n"
		"--grammar-max-uncertain PCT: refuse a constraint (HTTP 400) that leaves more\n"
		"than PCT%% of the vocabulary to be checked token by token at some position\n"
		"(too slow to enforce: milliseconds a token for the whole batch); default\n"
		"90, 0: no limit (docs/http.md, \"Structured output\").\n"
		"Serving mode: rank 0 registers with the coordinator and runs the requests\n"
		"it sends until drained or signalled. SIGTERM, SIGINT or SIGUSR1 (to the\n"
		"leader, or to mpirun, which passes it on) drains the group: no new work, running requests\n"
		"finish, at most --grace-s seconds (what still runs then moves to another\n"
		"group), then it deregisters and every rank exits 0 (docs/operations.md).\n"
		"Watchdog (every rank, serving mode): a step longer than --step-watchdog-ms\n"
		"(default 600000, 10 min), or one that makes no progress for --stall-ms\n"
		"(default 10000: a peer's host lost or cut off), or a worker that hears\n"
		"nothing from its leader that long, logs why and ends the whole MPI job\n"
		"(MPI_Abort); 0 turns a bound off.\n"
		"--kv-blocks on cpu\n"
		"defaults to 1024; --max-running to the step's sequence limit (--max-seqs,\n"
		"256). --batching continuous (default) admits a request when the KV blocks\n"
		"for its prompt are free and preempts the newest sequence when the pool\n"
		"runs out; simple (or --no-continuous-batching) admits only what fits at\n"
		"full length (docs/scheduling.md).\n"
		"--custom-allreduce: tensor-parallel all-reduces within one host on custom\n"
		"kernels over peer memory (auto, default: where the GPUs allow; on: fail if\n"
		"they cannot; off: NCCL only); SL_CUSTOM_AR=0/1 overrides (docs/parallel.md).\n"
		"Prefix caching is on: full KV blocks stay cached after their sequence ends\n"
		"(until the pool needs them) and a prompt that begins with cached blocks\n"
		"prefills only the rest; --no-prefix-cache recomputes every prompt whole\n"
		"(docs/scheduling.md).\n");
}

static int parse_args(int argc, char **argv, node_args *a, char *err, size_t errlen)
{
	static const struct option opts[] = {
		{"model", 1, 0, 'm'}, {"random-shape", 1, 0, 0x100}, {"prompt-ids", 1, 0, 'p'}, {"max-tokens", 1, 0, 'n'},
		{"temperature", 1, 0, 't'}, {"top-k", 1, 0, 'k'}, {"top-p", 1, 0, 'P'},
		{"seed", 1, 0, 's'}, {"device", 1, 0, 'd'}, {"max-step-tokens", 1, 0, 'T'},
		{"kv-blocks", 1, 0, 'B'}, {"block-tokens", 1, 0, 'b'}, {"ignore-eos", 0, 0, 'i'},
		{"tp", 1, 0, 'x'}, {"pp", 1, 0, 'y'}, {"dtype", 1, 0, 'D'},
		{"gpu-mem-fraction", 1, 0, 'G'}, {"help", 0, 0, 'h'}, {"coordinator", 1, 0, 'C'},
		{"model-name", 1, 0, 'M'}, {"heartbeat-ms", 1, 0, 'H'}, {"max-running", 1, 0, 'R'},
		{"max-waiting", 1, 0, 'W'}, {"min-step-ms", 1, 0, 'S'}, {"batching", 1, 0, 'c'},
		{"no-continuous-batching", 0, 0, 'N'}, {"max-seqs", 1, 0, 'Q'}, {"min-p", 1, 0, 0x101},
		{"presence-penalty", 1, 0, 0x102}, {"frequency-penalty", 1, 0, 0x103},
		{"repetition-penalty", 1, 0, 0x104}, {"logprobs", 1, 0, 0x105},
		{"custom-allreduce", 1, 0, 0x106}, {"no-prefix-cache", 0, 0, 0x10a}, {"quant", 1, 0, 0x107},
		{"quant-group", 1, 0, 0x108}, {"kv-dtype", 1, 0, 0x109}, {"grace-s", 1, 0, 0x10b},
		{"curve-key", 1, 0, 0x10c}, {"server-key", 1, 0, 0x10d},
		{"quant-lm-head", 1, 0, 0x10e}, {"step-watchdog-ms", 1, 0, 0x10f},
		{"stall-ms", 1, 0, 0x110}, {"tokenizer", 1, 0, 0x111},
		{"grammar-max-uncertain", 1, 0, 0x112}, {0, 0, 0, 0}};
	*a = (node_args){.max_tokens = 32, .max_step_tokens = 2048, .block_tokens = 16,
			 .top_p = 1.0, .dtype = -1, .mem_fraction = 0.9, .heartbeat_ms = 1000,
			 .max_waiting = 64, .repetition = 1, .logprobs = -1, .grace_s = 30,
			 .step_watchdog_ms = 600000, .stall_ms = 10000,
			 .grammar_max_uncertain = GRAMMAR_MAX_UNCERTAIN_PCT};
	int c, rc = 0;
	while (!rc && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm': a->model_dir = optarg; break;
		case 0x100: a->random_shape = optarg; break;
		case 'p':
			if (a->n_prompts == MAX_PROMPTS)
				return sl_errf(err, errlen, SL_EINVAL, "at most %d prompts", MAX_PROMPTS);
			a->prompts[a->n_prompts++] = optarg;
			break;
		case 'n': rc = sl_parse_int("--max-tokens", optarg, 1, 1 << 20, &a->max_tokens, err, errlen); break;
		case 't': rc = sl_parse_float("--temperature", optarg, 0, 100, &a->temperature, err, errlen); break;
		case 'k': rc = sl_parse_int("--top-k", optarg, 0, 1 << 30, &a->top_k, err, errlen); break;
		case 'P': rc = sl_parse_float("--top-p", optarg, 1e-6, 1, &a->top_p, err, errlen); break;
		case 's': rc = sl_parse_u64("--seed", optarg, &a->seed, err, errlen); break;
		case 'd': a->device = optarg; break;
		case 'T': rc = sl_parse_int("--max-step-tokens", optarg, 1, 1 << 20, &a->max_step_tokens, err, errlen); break;
		case 'B': rc = sl_parse_int("--kv-blocks", optarg, 1, 1 << 24, &a->kv_blocks, err, errlen); break;
		case 'b': rc = sl_parse_int("--block-tokens", optarg, 1, 1024, &a->block_tokens, err, errlen); break;
		case 'i': a->ignore_eos = 1; break;
		case 'x': rc = sl_parse_int("--tp", optarg, 1, 4096, &a->tp, err, errlen); break;
		case 'y': rc = sl_parse_int("--pp", optarg, 1, 4096, &a->pp, err, errlen); break;
		case 'G': rc = sl_parse_float("--gpu-mem-fraction", optarg, 0.05, 0.99, &a->mem_fraction, err, errlen); break;
		case 'D':
			if (strcmp(optarg, "f16") && strcmp(optarg, "bf16"))
				return sl_errf(err, errlen, SL_EINVAL, "--dtype: '%s' is not f16 or bf16", optarg);
			a->dtype = !strcmp(optarg, "f16") ? SL_DT_F16 : SL_DT_BF16;
			break;
		case 'C': a->coordinator = optarg; break;
		case 0x10c: a->curve_key = optarg; break;
		case 0x10d: a->server_key = optarg; break;
		case 'M': a->model_name = optarg; break;
		case 'H': rc = sl_parse_int("--heartbeat-ms", optarg, 10, 60000, &a->heartbeat_ms, err, errlen); break;
		case 'R': rc = sl_parse_int("--max-running", optarg, 1, 1 << 16, &a->max_running, err, errlen); break;
		case 'W': rc = sl_parse_int("--max-waiting", optarg, 0, 1 << 16, &a->max_waiting, err, errlen); break;
		case 'S': rc = sl_parse_int("--min-step-ms", optarg, 0, 60000, &a->min_step_ms, err, errlen); break;
		case 0x10b: rc = sl_parse_int("--grace-s", optarg, 0, 86400, &a->grace_s, err, errlen); break;
		case 0x10f:
			rc = sl_parse_int("--step-watchdog-ms", optarg, 0, 1L << 30, &a->step_watchdog_ms, err, errlen);
			break;
		case 0x110: rc = sl_parse_int("--stall-ms", optarg, 0, 1L << 30, &a->stall_ms, err, errlen); break;
		case 'c':
			if (strcmp(optarg, "continuous") && strcmp(optarg, "simple"))
				return sl_errf(err, errlen, SL_EINVAL, "--batching: '%s' is not continuous or simple", optarg);
			a->batching = !strcmp(optarg, "simple") ? NODE_SCHED_SIMPLE : NODE_SCHED_CONTINUOUS;
			break;
		case 'N': a->batching = NODE_SCHED_SIMPLE; break;
		case 'Q': rc = sl_parse_int("--max-seqs", optarg, 1, 1 << 16, &a->max_seqs, err, errlen); break;
		case 0x101: rc = sl_parse_float("--min-p", optarg, 0, 1, &a->min_p, err, errlen); break;
		case 0x102: rc = sl_parse_float("--presence-penalty", optarg, -2, 2, &a->presence, err, errlen); break;
		case 0x103: rc = sl_parse_float("--frequency-penalty", optarg, -2, 2, &a->frequency, err, errlen); break;
		case 0x104:
			rc = sl_parse_float("--repetition-penalty", optarg, 1e-6, 10, &a->repetition, err, errlen);
			break;
		case 0x105: rc = sl_parse_int("--logprobs", optarg, 0, KERN_MAX_TOP_LOGPROBS, &a->logprobs, err, errlen); break;
		case 0x106: rc = par_car_parse_mode("--custom-allreduce", optarg, &a->custom_ar, err, errlen); break;
		case 0x10a: a->no_prefix_cache = 1; break;
		case 0x111: a->tokenizer = optarg; break;
		case 0x112:
			rc = sl_parse_int("--grammar-max-uncertain", optarg, 0, 100, &a->grammar_max_uncertain,
					  err, errlen);
			break;
		case 0x107: rc = model_parse_quant(optarg, &a->quant, err, errlen); break;
		case 0x108: rc = model_parse_quant_group(optarg, &a->quant_group, err, errlen); break;
		case 0x109: rc = model_parse_kv_dtype(optarg, &a->kv_fp8, err, errlen); break;
		case 0x10e: rc = model_parse_quant_lm_head(optarg, &a->quant_lm_head, err, errlen); break;
		case 'h': usage(stdout); exit(0);
		default: return sl_errf(err, errlen, SL_EINVAL, "unknown option (see --help)");
		}
	}
	if (!rc)
		rc = model_check_quant(a->quant, a->quant_group, err, errlen);
	if (rc)
		return rc;
	if (optind < argc)
		return sl_errf(err, errlen, SL_EINVAL, "unexpected argument '%s'", argv[optind]);
	if (!a->model_dir == !a->random_shape)
		return sl_errf(err, errlen, SL_EINVAL, "give one of --model DIR and --random-shape NAME");
	if (a->coordinator) {
		if (!a->model_name || a->n_prompts)
			return sl_errf(err, errlen, SL_EINVAL,
				       "--coordinator needs --model-name, and no --prompt-ids");
		return SL_OK;
	}
	if (a->n_prompts == 0)
		return sl_errf(err, errlen, SL_EINVAL, "--prompt-ids is required");
	return SL_OK;
}

static void print_tokens(const node_result *r)
{
	for (int i = 0; i < r->n_tokens; i++)
		printf(i ? " %d" : "%d", r->tokens[i]);
	printf("\n");
	for (int i = 0; r->logprobs && i < r->n_tokens; i++) {
		printf("lp %d %d %.9g", i, r->tokens[i], r->logprobs[i]);
		for (int k = 0; k < r->top_n; k++)
			printf(" %d:%.9g", r->top_ids[(size_t)i * r->top_n + k],
			       r->top_logprobs[(size_t)i * r->top_n + k]);
		printf("\n");
	}
}

static void print_timings(const node_engine *e)
{
	const node_stats *st = node_engine_stats(e);
	node_cache_stats cs;
	node_engine_cache_stats(e, &cs);
	double ms = st->decode_steps ? 1e3 * st->decode_s / st->decode_steps : 0;
	fprintf(stderr, "prefill: %ld tokens in %.1f ms (%.1f tokens/s)\n", st->prefill_tokens,
		1e3 * st->prefill_s, st->prefill_s > 0 ? st->prefill_tokens / st->prefill_s : 0);
	fprintf(stderr, "decode: %ld tokens in %.1f ms (%.2f ms/token step, %.1f tokens/s)\n",
		st->decode_tokens, 1e3 * st->decode_s, ms,
		st->decode_s > 0 ? st->decode_tokens / st->decode_s : 0);
	if (st->preemptions)
		fprintf(stderr, "kv: %ld sequences preempted and recomputed; more --kv-blocks avoids it\n",
			st->preemptions);
	if (cs.enabled)
		fprintf(stderr, "prefix cache: %ld of %ld prompt tokens reused, %d blocks cached\n",
			cs.hit_tokens, cs.queried_tokens, cs.cached_blocks);
}

/* Parse every prompt, sum the blocks they need, run them together. */
static int run(node_args *a, node_engine *e, model *m, char *err, size_t errlen)
{
	node_request reqs[MAX_PROMPTS];
	node_result res[MAX_PROMPTS];
	int rc = SL_OK, n = 0;
	memset(res, 0, sizeof res);
	memset(reqs, 0, sizeof reqs);
	for (; n < a->n_prompts && !rc; n++) {
		node_request *r = &reqs[n];
		*r = (node_request){.max_new_tokens = (int)a->max_tokens, .ignore_eos = a->ignore_eos,
				    .sampling = {.temperature = (float)a->temperature,
						 .top_k = (int)a->top_k, .top_p = (float)a->top_p,
						 .seed = a->seed, .min_p = (float)a->min_p,
						 .presence_penalty = (float)a->presence,
						 .frequency_penalty = (float)a->frequency,
						 .repetition_penalty = (float)a->repetition,
						 .logprobs = a->logprobs >= 0,
						 .top_logprobs = a->logprobs > 0 ? (int)a->logprobs : 0}};
		rc = sl_parse_ids("--prompt-ids", a->prompts[n], m->cfg.vocab_size - 1,
				  (int32_t **)&r->prompt, &r->n_prompt, err, errlen);
		if (rc)
			break;
	}
	if (!rc)
		rc = node_generate(e, n, reqs, res, err, errlen);
	for (int i = 0; !rc && i < n; i++)
		print_tokens(&res[i]);
	if (!rc)
		print_timings(e);
	for (int i = 0; i < n; i++) {
		free((void *)reqs[i].prompt);
		node_result_free(&res[i]);
	}
	return rc;
}

/* Enough KV blocks for every prompt plus its new tokens, as a default. */
static long default_kv_blocks(const node_args *a)
{
	long blocks = 0;
	for (int i = 0; i < a->n_prompts; i++) {
		long n = 1;
		for (const char *p = a->prompts[i]; *p; p++)
			n += *p == ',';
		blocks += (n + a->max_tokens + a->block_tokens - 1) / a->block_tokens;
	}
	return blocks > 0 ? blocks : 1;
}

/* Leader: run the prompts (node_group_close then releases the workers). */
static int lead(node_args *a, node_group *g, char *err, size_t errlen)
{
	node_engine *e = NULL;
	int rc = node_engine_create(g->m, &e, err, errlen);
	if (!rc) {
		node_engine_set_prefix_cache(e, !a->no_prefix_cache);
		rc = run(a, e, g->m, err, errlen);
	}
	node_engine_destroy(e);
	return rc;
}

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = 1; }

/* Serving mode, leader. Every rank takes SIGINT/SIGTERM as "leave": the
 * leader drains (at most --grace-s), deregisters and releases the
 * workers, which therefore must not die of the signal mpirun forwards to
 * them: they only note it and go on following step plans. */
static int serve(node_args *a, node_group *g, char *err, size_t errlen)
{
	node_leader_opts o = {.coordinator = a->coordinator, .model_name = a->model_name,
			      .tokenizer = a->tokenizer ? a->tokenizer : a->model_dir,
			      .grammar_max_uncertain = (int)a->grammar_max_uncertain,
			      .heartbeat_ms = (int)a->heartbeat_ms, .max_running = (int)a->max_running,
			      .max_waiting = (int)a->max_waiting, .min_step_ms = (int)a->min_step_ms,
			      .batching = a->batching, .no_prefix_cache = a->no_prefix_cache,
			      .grace_s = (int)a->grace_s, .stop = &g_stop,
			      .stall_ms = (int)a->stall_ms};
	/* the leader alone connects: only its host needs the key files */
	sl_curve_client curve;
	int rc = sl_curve_client_load(&curve, a->curve_key, a->server_key, "--curve-key",
				      "--server-key", err, errlen);
	o.curve = &curve;
	if (!rc)
		rc = node_leader_run(g, &o, err, errlen);
	memset(&curve, 0, sizeof curve);
	return rc;
}

static void catch_signals(void)
{
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL); /* mpirun forwards it at once (SIGTERM: after a delay) */
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline-node"))
		return 0;
	char err[SL_ERRLEN] = "";
	node_args a;
	node_group g = {0};
	int rc = parse_args(argc, argv, &a, err, sizeof err);
	if (rc) {
		fprintf(stderr, "shardline-node: %s\n", err);
		if (rc == SL_EINVAL)
			usage(stderr);
		return 1;
	}
	int cuda = a.device ? !strcmp(a.device, "cuda") : node_group_have_gpu();
	model_config shape_cfg;
	if (a.random_shape && model_config_shape(a.random_shape, a.dtype == SL_DT_BF16 ? SL_DT_BF16
				 : cuda ? SL_DT_F16 : SL_DT_F32, &shape_cfg)) {
		fprintf(stderr, "shardline-node: --random-shape %s: expected 7b, 8b, 13b, 70b or tiny\n",
			a.random_shape);
		return 1;
	}
	node_group_opts o = {.model_dir = a.model_dir, .device = a.device, .dtype = a.dtype,
			     .random_cfg = a.random_shape ? &shape_cfg : NULL, .seed = 1,
			     .tp = (int)a.tp, .pp = (int)a.pp, .step_tokens = (int)a.max_step_tokens,
			     .max_seqs = (int)a.max_seqs, .custom_ar = a.custom_ar,
			     .quant = a.quant, .quant_group = a.quant_group, .kv_fp8 = a.kv_fp8,
			     .quant_lm_head = a.quant_lm_head,
			     .block_tokens = (int)a.block_tokens, .mem_fraction = (float)a.mem_fraction,
			     .n_kv_blocks = (int)(a.kv_blocks ? a.kv_blocks
						: cuda ? 0 : a.coordinator ? 1024 : default_kv_blocks(&a))};
	rc = node_group_open(&argc, &argv, &o, &g, err, sizeof err);
	if (rc) { /* every rank failed setup together: one report, clean exit */
		if (g.rank == 0)
			fprintf(stderr, "shardline-node: %s\n", err);
		node_group_close(&g, 0);
		return 1;
	}
	if (a.coordinator) {
		catch_signals();
		/* serving: a hung step or a lost peer ends the job (watchdog.h) */
		node_watch_opts wo = {.step_ms = (int)a.step_watchdog_ms, .stall_ms = (int)a.stall_ms,
				      .worker = g.rank != 0};
		rc = node_watch_start(&wo, err, sizeof err);
	}
	if (!rc && g.rank != 0)
		rc = node_worker_loop(g.m, err, sizeof err);
	else if (!rc)
		rc = a.coordinator ? serve(&a, &g, err, sizeof err) : lead(&a, &g, err, sizeof err);
	if (rc)
		fprintf(stderr, "shardline-node: rank %d: %s\n", g.rank, err[0] ? err : "failed");
	node_watch_stop(); /* before the close: stopping is no hang */
	node_group_close(&g, rc);
	return rc ? 1 : 0;
}
