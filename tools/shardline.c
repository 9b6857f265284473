/*
 * cli.c — shardline, the command-line client of the coordinator:
 *   shardline generate --prompt TEXT [...]   stream a generation to stdout
 *   shardline status                         groups, models, load, queue
 *   shardline drain [--group ID] [--exit]    stop routing to groups
 *   shardline keygen --out DIR [--name N]    a CURVE key pair (docs/security.md)
 *   shardline serve MODEL [...]              coordinator + node group (tools/serve.c)
 * Built on the client library (client/client.h), which watches the
 * coordinator's liveness and re-submits requests that had not started.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "common/checks.h"
#include "common/sampling.h"
#include "common/version.h"
#include "client/client.h"
#include "proto/curve.h"
#include "common/sl.h"
#include "tools/serve.h"

#define MAX_STOPS 16

typedef struct cli_args {
	const char *endpoint, *cmd;
	sl_client_opts co;
	const char *key_dir, *key_name;
	sl_gen_params p;
	const char *stops[MAX_STOPS];
	int32_t bias_ids[SL_SAMPLING_MAX_LOGIT_BIAS];   /* --logit-bias ID=BIAS */
	float bias[SL_SAMPLING_MAX_LOGIT_BIAS];
	int32_t stop_ids[SL_SAMPLING_MAX_STOP_TOKEN_IDS]; /* --stop-token-id ID */
	int32_t *ids;
	int print_ids, quiet, drain_exit;
	long group, wait_ms;
	char *constraint;      /* --json-schema / --grammar: the file's text */
} cli_args;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shardline [--coordinator tcp://127.0.0.1:5555] COMMAND [options]\n"
		"  generate --prompt TEXT | --prompt-ids 1,2,3   [--model NAME] [--max-tokens N]\n"
		"           [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed S]\n"
		"           [--presence-penalty X] [--frequency-penalty X] [--repetition-penalty R]\n"
		"           [--logprobs N] [--stop STR]... [--no-stream] [--ignore-eos]\n"
		"           [--logit-bias ID=BIAS]... [--min-tokens N] [--stop-token-id ID]...\n"
		"           [--timeout-ms N] [--print-ids] [--quiet]\n"
		"           [--json | --json-schema FILE | --regex EXPR | --grammar FILE]\n"
		"      prints the text as it streams; a summary (finish reason, tokens,\n"
		"      timings) on stderr. Ctrl-C cancels. Exit 0 when it finished by length,\n"
		"      stop or EOS, 1 otherwise. --logprobs N (0..20) asks for each token's\n"
		"      log-prob and N alternatives; --print-ids prints them on stderr, one\n"
		"      line per token: 'lp: ID LOGPROB ID:LOGPROB...'. --logit-bias adds BIAS\n"
		"      (-100..100) to token ID's logit before sampling (up to 300); --min-tokens\n"
		"      masks EOS and the stop token ids until N tokens were generated;\n"
		"      --stop-token-id ends the generation on that token, as EOS (up to 32).\n"
		"      Constrained output (docs/protocol.md): --json any JSON object,\n"
		"      --json-schema FILE a JSON schema, --regex EXPR a regular expression,\n"
		"      --grammar FILE an EBNF grammar (GBNF style, rule root); at most one.\n"
		"  status   [--wait-ms 3000]     groups, their model, tp x pp, load, queue depth\n"
		"  drain    [--group ID] [--exit]  stop routing to a group (default all);\n"
		"           --exit: its processes leave once idle\n"
		"  keygen   --out DIR [--name shardline]  write a CURVE key pair: DIR/NAME.key\n"
		"           (secret, mode 0600) and DIR/NAME.pub (public), Z85 text\n"
		"  serve    MODEL [--tp N] [--pp N] [--hosts FILE] [--http-bind ADDR] ...\n"
		"           start a coordinator and a node group serving MODEL; prints the URL\n"
		"           when ready, stops both on Ctrl-C (shardline serve --help)\n"
		"The coordinator endpoint defaults to $SHARDLINE_COORDINATOR, then\n"
		"tcp://127.0.0.1:5555; EP1,EP2 names a standby pair (tried in turn).\n"
		"Connection options (every command):\n"
		"  --heartbeat-ms 1000   ping the coordinator this often while waiting; silent\n"
		"                        for 3 intervals: it is gone, and a request that had\n"
		"                        streamed tokens ends with an error\n"
		"  --reconnect-ms 10000  a request that had not started waits this long (or its\n"
		"                        --timeout-ms, when shorter) for the coordinator to come\n"
		"                        back, then is re-submitted\n"
		"  --retries 3           re-submissions per request (0: none)\n"
		"  --curve-key FILE --server-key FILE   CURVE: this client's secret key and\n"
		"                        the coordinator's public key (docs/security.md)\n");
}

static volatile sig_atomic_t g_interrupted;
static void on_sigint(int sig) { g_interrupted = 1; }

/* --logit-bias ID=BIAS: one more entry (the coordinator checks ids and
 * ranges as for every client). */
static int parse_bias(cli_args *a, const char *arg, char *err, size_t errlen)
{
	const char *eq = strchr(arg, '=');
	char id[32];
	long v;
	double d;
	if (a->p.n_logit_bias == SL_SAMPLING_MAX_LOGIT_BIAS)
		return sl_errf(err, errlen, SL_EINVAL, "at most %d --logit-bias",
			       SL_SAMPLING_MAX_LOGIT_BIAS);
	if (!eq || (size_t)(eq - arg) >= sizeof id)
		return sl_errf(err, errlen, SL_EINVAL, "--logit-bias: want ID=BIAS, got '%s'", arg);
	memcpy(id, arg, (size_t)(eq - arg));
	id[eq - arg] = 0;
	TRY(sl_parse_int("--logit-bias ID", id, 0, (1L << 24) - 1, &v, err, errlen));
	TRY(sl_parse_float("--logit-bias BIAS", eq + 1, -SL_SAMPLING_MAX_BIAS, SL_SAMPLING_MAX_BIAS,
			   &d, err, errlen));
	a->bias_ids[a->p.n_logit_bias] = (int32_t)v;
	a->bias[a->p.n_logit_bias++] = (float)d;
	a->p.logit_bias_ids = a->bias_ids;
	a->p.logit_bias = a->bias;
	return SL_OK;
}

/* --json, --json-schema FILE, --regex EXPR, --grammar FILE: one of them. */
static int constraint_opt(cli_args *a, int c, const char *arg, char *err, size_t errlen)
{
	if (a->p.constraint_kind != SL_CONSTRAINT_NONE)
		return sl_errf(err, errlen, SL_EINVAL,
			       "give one of --json, --json-schema, --regex, --grammar");
	a->p.constraint_kind = c == 0x111   ? SL_CONSTRAINT_JSON
			       : c == 0x112 ? SL_CONSTRAINT_JSON_SCHEMA
			       : c == 0x113 ? SL_CONSTRAINT_REGEX
					    : SL_CONSTRAINT_EBNF;
	if (c == 0x113) {
		a->p.constraint = arg;
	} else if (c != 0x111) {
		size_t len = 0;
		TRY(sl_read_file(arg, &a->constraint, &len, err, errlen));
		a->p.constraint = a->constraint;
		a->p.constraint_len = len;
	}
	return SL_OK;
}

static int parse(int argc, char **argv, cli_args *a, char *err, size_t errlen)
{
	static const struct option o[] = {
		{"coordinator", 1, 0, 'C'}, {"prompt", 1, 0, 'p'}, {"prompt-ids", 1, 0, 'i'},
		{"model", 1, 0, 'm'}, {"max-tokens", 1, 0, 'n'}, {"temperature", 1, 0, 't'},
		{"top-k", 1, 0, 'k'}, {"top-p", 1, 0, 'P'}, {"seed", 1, 0, 's'}, {"stop", 1, 0, 'S'},
		{"no-stream", 0, 0, 'N'}, {"ignore-eos", 0, 0, 'E'}, {"timeout-ms", 1, 0, 'T'},
		{"print-ids", 0, 0, 'I'}, {"quiet", 0, 0, 'q'}, {"group", 1, 0, 'g'},
		{"exit", 0, 0, 'x'}, {"wait-ms", 1, 0, 'w'}, {"help", 0, 0, 'h'},
		{"min-p", 1, 0, 0x101}, {"presence-penalty", 1, 0, 0x102},
		{"frequency-penalty", 1, 0, 0x103}, {"repetition-penalty", 1, 0, 0x104},
		{"logprobs", 1, 0, 0x105}, {"heartbeat-ms", 1, 0, 0x106}, {"reconnect-ms", 1, 0, 0x107},
		{"retries", 1, 0, 0x108}, {"curve-key", 1, 0, 0x109}, {"server-key", 1, 0, 0x10a},
		{"out", 1, 0, 0x10b}, {"name", 1, 0, 0x10c}, {"logit-bias", 1, 0, 0x10d},
		{"min-tokens", 1, 0, 0x10e}, {"stop-token-id", 1, 0, 0x10f}, {"json", 0, 0, 0x111},
		{"json-schema", 1, 0, 0x112}, {"regex", 1, 0, 0x113}, {"grammar", 1, 0, 0x114},
		{0, 0, 0, 0}};
	const char *env = getenv("SHARDLINE_COORDINATOR");
	a->endpoint = env && env[0] ? env : "tcp://127.0.0.1:5555";
	a->wait_ms = 3000;
	int c, rc = 0;
	long v;
	double d;
	while (!rc && (c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'C': a->endpoint = optarg; break;
		case 'p': a->p.prompt = optarg; break;
		case 'i': rc = sl_parse_ids("--prompt-ids", optarg, (1L << 24) - 1, &a->ids, &a->p.n_prompt_ids, err, errlen);
			  a->p.prompt_ids = a->ids; break;
		case 'm': a->p.model = optarg; break;
		case 'n': rc = sl_parse_int("--max-tokens", optarg, 1, 1 << 20, &v, err, errlen); a->p.max_tokens = (int)v; break;
		case 't': rc = sl_parse_float("--temperature", optarg, 0, 100, &d, err, errlen); a->p.temperature = (float)d; break;
		case 'k': rc = sl_parse_int("--top-k", optarg, 0, 1 << 24, &v, err, errlen); a->p.top_k = (int)v; break;
		case 'P': rc = sl_parse_float("--top-p", optarg, 1e-6, 1, &d, err, errlen); a->p.top_p = (float)d; break;
		case 's': rc = sl_parse_u64("--seed", optarg, &a->p.seed, err, errlen); break;
		case 'S':
			if (a->p.n_stop == MAX_STOPS)
				return sl_errf(err, errlen, SL_EINVAL, "at most %d --stop", MAX_STOPS);
			a->stops[a->p.n_stop++] = optarg;
			a->p.stop = a->stops;
			break;
		case 'N': a->p.no_stream = 1; break;
		case 'E': a->p.ignore_eos = 1; break;
		case 'T': rc = sl_parse_int("--timeout-ms", optarg, 1, 86400000, &v, err, errlen); a->p.timeout_ms = (unsigned)v; break;
		case 'I': a->print_ids = 1; break;
		case 'q': a->quiet = 1; break;
		case 'g': rc = sl_parse_int("--group", optarg, 1, 1L << 31, &a->group, err, errlen); break;
		case 'x': a->drain_exit = 1; break;
		case 'w': rc = sl_parse_int("--wait-ms", optarg, 1, 86400000, &a->wait_ms, err, errlen); break;
		case 0x101: rc = sl_parse_float("--min-p", optarg, 0, 1, &d, err, errlen); a->p.min_p = (float)d; break;
		case 0x102:
			rc = sl_parse_float("--presence-penalty", optarg, -2, 2, &d, err, errlen);
			a->p.presence_penalty = (float)d;
			break;
		case 0x103:
			rc = sl_parse_float("--frequency-penalty", optarg, -2, 2, &d, err, errlen);
			a->p.frequency_penalty = (float)d;
			break;
		case 0x104:
			rc = sl_parse_float("--repetition-penalty", optarg, 1e-6, 10, &d, err, errlen);
			a->p.repetition_penalty = (float)d;
			break;
		case 0x105:
			rc = sl_parse_int("--logprobs", optarg, 0, 20, &v, err, errlen);
			a->p.logprobs = 1, a->p.top_logprobs = (int)v;
			break;
		case 0x106:
			rc = sl_parse_int("--heartbeat-ms", optarg, 10, 600000, &v, err, errlen);
			a->co.heartbeat_ms = (int)v;
			break;
		case 0x107:
			rc = sl_parse_int("--reconnect-ms", optarg, 1, 86400000, &v, err, errlen);
			a->co.reconnect_ms = (int)v;
			break;
		case 0x108:
			rc = sl_parse_int("--retries", optarg, 0, 100, &v, err, errlen);
			a->co.max_resubmits = v ? (int)v : -1;
			break;
		case 0x109: a->co.curve_key = optarg; break;
		case 0x10a: a->co.curve_server_key = optarg; break;
		case 0x10b: a->key_dir = optarg; break;
		case 0x10c: a->key_name = optarg; break;
		case 0x10d: rc = parse_bias(a, optarg, err, errlen); break;
		case 0x10e:
			rc = sl_parse_int("--min-tokens", optarg, 0, SL_SAMPLING_MAX_MIN_TOKENS, &v, err, errlen);
			a->p.min_tokens = (int)v;
			break;
		case 0x10f:
			if (a->p.n_stop_token_ids == SL_SAMPLING_MAX_STOP_TOKEN_IDS)
				return sl_errf(err, errlen, SL_EINVAL, "at most %d --stop-token-id",
					       SL_SAMPLING_MAX_STOP_TOKEN_IDS);
			rc = sl_parse_int("--stop-token-id", optarg, 0, (1L << 24) - 1, &v, err, errlen);
			a->stop_ids[a->p.n_stop_token_ids++] = (int32_t)v;
			a->p.stop_token_ids = a->stop_ids;
			break;
		case 0x111: case 0x112: case 0x113: case 0x114:
			rc = constraint_opt(a, c, optarg, err, errlen);
			break;
		case 'h': usage(stdout); exit(0);
		default: return sl_errf(err, errlen, SL_EINVAL, "unknown option (see --help)");
		}
	}
	if (rc)
		return rc;
	if (optind != argc - 1)
		return sl_errf(err, errlen, SL_EINVAL, "give one command: generate, status, drain or keygen");
	a->cmd = argv[optind];
	a->co.endpoint = a->endpoint;
	if (!strcmp(a->cmd, "keygen") && !a->key_dir)
		return sl_errf(err, errlen, SL_EINVAL, "keygen needs --out DIR");
	if (!strcmp(a->cmd, "generate") && !a->p.prompt && !a->p.n_prompt_ids)
		return sl_errf(err, errlen, SL_EINVAL, "generate needs --prompt or --prompt-ids");
	return SL_OK;
}

/* Every token id of a generation, and its log-probs when asked. */
typedef struct cli_tokens {
	int32_t *ids;
	float *lp;             /* [n] */
	int32_t *top_ids;      /* [n, top_n] */
	float *top;            /* [n, top_n] */
	size_t n;
	int top_n, with_lp;
} cli_tokens;

static int grow(void **p, size_t bytes)
{
	void *np = realloc(*p, bytes ? bytes : 1);
	if (!np)
		return SL_ENOMEM;
	*p = np;
	return SL_OK;
}

static int add_tokens(cli_tokens *t, const sl_event *ev)
{
	size_t n = t->n + ev->n_token_ids, nt = (size_t)ev->top_n;
	if (grow((void **)&t->ids, sizeof(int32_t) * n))
		return SL_ENOMEM;
	memcpy(t->ids + t->n, ev->token_ids, sizeof(int32_t) * ev->n_token_ids);
	if (ev->logprobs) {
		if (grow((void **)&t->lp, sizeof(float) * n) ||
		    grow((void **)&t->top_ids, sizeof(int32_t) * n * nt) ||
		    grow((void **)&t->top, sizeof(float) * n * nt))
			return SL_ENOMEM;
		memcpy(t->lp + t->n, ev->logprobs, sizeof(float) * ev->n_logprobs);
		memcpy(t->top_ids + t->n * nt, ev->top_ids, sizeof(int32_t) * ev->n_logprobs * nt);
		memcpy(t->top + t->n * nt, ev->top_logprobs, sizeof(float) * ev->n_logprobs * nt);
		t->top_n = ev->top_n;
		t->with_lp = 1;
	}
	t->n = n;
	return SL_OK;
}

static void free_tokens(cli_tokens *t)
{
	free(t->ids), free(t->lp), free(t->top_ids), free(t->top);
}

static void print_summary(const cli_args *a, const sl_event *ev, const cli_tokens *t)
{
	if (a->print_ids) {
		fprintf(stderr, "ids:");
		for (size_t i = 0; i < t->n; i++)
			fprintf(stderr, " %d", t->ids[i]);
		fprintf(stderr, "\n");
		for (size_t i = 0; t->with_lp && i < t->n; i++) {
			fprintf(stderr, "lp: %d %.6f", t->ids[i], t->lp[i]);
			for (int k = 0; k < t->top_n; k++)
				fprintf(stderr, " %d:%.6f", t->top_ids[i * t->top_n + k],
					t->top[i * t->top_n + k]);
			fprintf(stderr, "\n");
		}
	}
	int normal = ev->finish >= SL_FINISH_LENGTH && ev->finish <= SL_FINISH_EOS;
	if (a->quiet && !normal) /* why it failed is never quiet (a refused constraint: the fix) */
		fprintf(stderr, "shardline: %s: %s\n", sl_finish_name(ev->finish), ev->message);
	if (a->quiet)
		return;
	fprintf(stderr, "[%s%s%s | prompt %d + completion %d tokens | queue %.1f ms, first token %.1f ms, "
		"total %.1f ms]\n", sl_finish_name(ev->finish), ev->message[0] ? ": " : "", ev->message,
		ev->prompt_tokens, ev->completion_tokens, ev->queue_ms, ev->ttft_ms, ev->total_ms);
}

/* Events of request tag until its Done or Error. The client library
 * pings the coordinator meanwhile: a silent one ends a started request
 * with an error within 3 heartbeats, and an unstarted one waits for it
 * (said once on stderr) to be re-submitted. */
static int generate(cli_args *a, sl_client *c, char *err, size_t errlen)
{
	uint64_t tag;
	int rc = sl_client_submit(c, &a->p, &tag, err, errlen), cancelled = 0, result = -1, said = 0;
	cli_tokens toks = {0};
	while (!rc && result < 0) {
		if (g_interrupted && !cancelled) {
			cancelled = 1;
			rc = sl_client_cancel(c, tag, err, errlen);
		}
		sl_event ev;
		int got = sl_client_next(c, 200, &ev, err, errlen);
		if (got < 0) {
			rc = got;
			break;
		}
		if (got == 0) { /* a request still waiting while the coordinator is gone is held */
			double down = sl_client_down_ms(c);
			if (down > 0 && !said && !a->quiet)
				fprintf(stderr, "shardline: the coordinator at %s is unavailable; the request "
					"had not started and is re-submitted when it is back\n", a->endpoint);
			said = down > 0;
			continue;
		}
		if (ev.tag == tag && ev.kind == SL_EV_CHUNK) {
			fwrite(ev.text, 1, ev.text_len, stdout);
			fflush(stdout);
		}
		if (ev.tag == tag && (ev.kind == SL_EV_CHUNK || ev.kind == SL_EV_DONE) && ev.n_token_ids &&
		    add_tokens(&toks, &ev))
			rc = sl_errf(err, errlen, SL_ENOMEM, "out of memory");
		if (ev.tag == tag && ev.kind == SL_EV_DONE) {
			fwrite(ev.text, 1, ev.text_len, stdout);
			printf("\n");
			fflush(stdout);
			print_summary(a, &ev, &toks);
			result = ev.finish >= SL_FINISH_LENGTH && ev.finish <= SL_FINISH_EOS ? 0 : 1;
		} else if (ev.tag == tag && ev.kind == SL_EV_ERROR) {
			rc = sl_errf(err, errlen, ev.error_code == SL_ERR_UNAVAILABLE ? SL_ECOMM : SL_EINVAL,
				     "%s: %s", sl_error_name(ev.error_code), ev.message);
		}
		sl_event_release(&ev);
	}
	free_tokens(&toks);
	if (rc)
		return rc;
	return result == 0 ? SL_OK : sl_errf(err, errlen, SL_EINVAL, "generation did not finish");
}

static void print_status(const char *endpoint, const sl_event *ev)
{
	printf("coordinator %s: %d active, %d queued (max %d), %ld re-queued; %d group%s\n", endpoint,
	       ev->active, ev->queued, ev->max_queue, ev->requeued, ev->n_groups,
	       ev->n_groups == 1 ? "" : "s");
	if (ev->n_groups)
		printf("%-5s %-22s %-16s %-7s %7s %7s %8s %15s %7s %7s %7s %8s\n", "group", "name",
		       "model", "tp x pp", "running", "waiting", "assigned", "kv free/blocks", "context",
		       "cached", "reused", "seen");
	for (int i = 0; i < ev->n_groups; i++) {
		const sl_group_info *g = &ev->groups[i];
		char grid[32], kv[40], cached[16] = "off", reused[16] = "-";
		snprintf(grid, sizeof grid, "%d x %d", g->tp, g->pp);
		snprintf(kv, sizeof kv, "%d/%d", g->kv_free, g->kv_blocks);
		/* the longest sequence the group can hold: its positions, or its
		 * whole KV cache when that is less (what the coordinator routes
		 * by and /v1/models reports as max_model_len) */
		long kv_tokens = (long)g->kv_blocks * g->block_tokens;
		int context = g->block_tokens > 0 && kv_tokens < g->max_pos ? (int)kv_tokens : g->max_pos;
		if (g->prefix_cache) /* blocks held; share of started tokens taken from the cache */
			snprintf(cached, sizeof cached, "%d", g->cache_blocks);
		if (g->prefix_cache && g->cache_queried_tokens > 0)
			snprintf(reused, sizeof reused, "%.1f%%",
				 100.0 * g->cache_hit_tokens / g->cache_queried_tokens);
		printf("%-5u %-22.22s %-16.16s %-7s %7d %7d %8d %15s %7d %7s %7s %5.0f ms%s\n", g->id,
		       g->name, g->model, grid, g->running, g->waiting, g->assigned, kv, context,
		       cached, reused, g->last_seen_ms, g->draining ? " draining" : "");
	}
}

/* One request, one Status (or Error) reply within --wait-ms. */
static int ask(cli_args *a, sl_client *c, int drain, char *err, size_t errlen)
{
	uint64_t tag = 0;
	int rc = drain ? sl_client_drain(c, (unsigned)a->group, a->drain_exit, err, errlen)
		       : sl_client_status(c, &tag, err, errlen);
	double deadline = sl_now() + a->wait_ms * 1e-3;
	while (!rc) {
		sl_event ev;
		int left = (int)((deadline - sl_now()) * 1e3);
		int got = left > 0 ? sl_client_next(c, left, &ev, err, errlen) : 0;
		if (got <= 0)
			return got < 0 ? got : sl_errf(err, errlen, SL_ECOMM, "no answer from the coordinator at "
							"%s within %ld ms", a->endpoint, a->wait_ms);
		if (ev.kind == SL_EV_STATUS)
			print_status(a->endpoint, &ev);
		else if (ev.kind == SL_EV_ERROR)
			rc = sl_errf(err, errlen, SL_EINVAL, "%s: %s", sl_error_name(ev.error_code), ev.message);
		int done = ev.kind == SL_EV_STATUS || ev.kind == SL_EV_ERROR;
		sl_event_release(&ev);
		if (done)
			break;
	}
	return rc;
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline"))
		return 0;
	char err[SL_ERRLEN] = "";
	cli_args a = {0};
	sl_client *c = NULL;
	if (argc >= 2 && !strcmp(argv[1], "serve")) /* its own options: tools/serve.c */
		return serve_main(argc - 1, argv + 1);
	int rc = parse(argc, argv, &a, err, sizeof err);
	if (rc) {
		fprintf(stderr, "shardline: %s\n", err);
		usage(stderr);
		free(a.ids);
		free(a.constraint);
		return 2;
	}
	struct sigaction sa = {.sa_handler = on_sigint};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	if (!strcmp(a.cmd, "keygen")) {
		const char *name = a.key_name ? a.key_name : "shardline";
		rc = sl_curve_keygen(a.key_dir, name, err, sizeof err);
		if (!rc)
			printf("%s/%s.key (secret, 0600) and %s/%s.pub written\n", a.key_dir, name,
			       a.key_dir, name);
	} else {
		rc = sl_client_open(NULL, &a.co, &c, err, sizeof err);
	}
	if (!rc && c) {
		if (!strcmp(a.cmd, "generate"))
			rc = generate(&a, c, err, sizeof err);
		else if (!strcmp(a.cmd, "status") || !strcmp(a.cmd, "drain"))
			rc = ask(&a, c, !strcmp(a.cmd, "drain"), err, sizeof err);
		else
			rc = sl_errf(err, sizeof err, SL_EINVAL, "unknown command '%s' (generate, status, drain, keygen)", a.cmd);
	}
	if (rc)
		fprintf(stderr, "shardline: %s\n", err);
	sl_client_destroy(c);
	free(a.ids);
	free(a.constraint);
	return rc ? 1 : 0;
}
