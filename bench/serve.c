/*
 * serve.c — shardline-bench-serve: the serving benchmark's load generator.
 * Drives a running coordinator (client/client.h) with N concurrent
 * streams and reports what a client sees: output tokens/s, requests/s,
 * time to first token and inter-token latency percentiles. bench/serve.sh
 * starts the coordinator and a node group around it; docs/benchmarks.md
 * says how to run it and what every number means.
 *
 * Load (closed loop): --streams N DEALER connections, each with one
 * request in flight; when a request ends, its connection submits the next
 * one of the workload, until --requests have been sent and answered. The
 * workload is made up front from --seed, so two runs (and two engines)
 * see the same requests in the same order (lengths, and every prompt id
 * but each unique prompt's own header, below):
 *   --mix fixed    every prompt is --prompt-len ids, every output
 *                  --output-len tokens;
 *   --mix uniform  prompt length uniform over the integers in
 *                  [L(1-s), L(1+s)], output length likewise around
 *                  --output-len, independently (s = --spread, 0.5);
 *   --mix chat     multi-turn chat (prefix caching, docs/scheduling.md):
 *                  each stream is a user holding a conversation of
 *                  --turns turns, then starting another. Turn 1 is a
 *                  system prompt shared by every user (--system-len ids,
 *                  made from the seed) and a question; turn k is turn
 *                  k-1's prompt, the answer it got (the ids that came
 *                  back) and a new question. Questions are
 *                  --question-len ids and answers --output-len tokens
 *                  (both uniform +-spread); a conversation that would
 *                  outgrow the groups' context starts over. With
 *                  --think-ms T a user waits uniform [T/2, 3T/2] after
 *                  an answer before the next turn (reading, typing):
 *                  without it every user is a closed loop, and a
 *                  least-loaded router tends to send a user back to the
 *                  group it just left (that group's load just dropped),
 *                  which hides what prefix-aware routing adds. Native
 *                  protocol only (the answers' ids are needed).
 * prompt ids: BOS (1), then ids uniform in [3, --vocab) (no special ids).
 * Unique prompts (the default, --prompts unique): the workload's ids
 * come from --seed, so two runs with the same seed and lengths (the
 * cases of bench/serve.sh, the native and HTTP runs of one case) would
 * send the same prompts, and a group's prefix cache would serve the
 * second run's prompts from the first's blocks: throughput mixed with
 * cache hits. So the LG_HEADER_IDS ids after the shared part (below)
 * are each request's own: its index as base-(vocab - 3) digits, then ids
 * from (the run's nonce, the index). The nonce is drawn per process
 * (--prompt-nonce sets it); the node caches full blocks only and
 * verifies a hit's ids, so no block a request holds matches another's.
 * --shared-prefix N: the first N ids of every prompt (BOS among them)
 * are the same, from the nonce (a system prompt every request shares):
 * prefix reuse measured on purpose; prompts of at most N ids are all
 * shared. --prompts seeded: ids from --seed alone, as before unique
 * prompts existed (for comparison: what reuse did to the old numbers).
 * Requests are greedy (--temperature 0) with ignore_eos, so every one
 * generates exactly its output length whatever a random model emits.
 *
 * Warm-up (--warmup W, not measured): W requests at once (W connections
 * for it, whatever --streams is), 16-id prompts,
 * request i asking for 2 + i tokens, so the engine meets every batch size
 * from W down to 1 (CUDA graphs are captured per batch size) before the
 * measured run.
 *
 * Metrics, from client-side receive times (CLOCK_MONOTONIC; one thread,
 * one zmq_poll loop, so a timestamp is when the loop took the message):
 *   TTFT        first Chunk - submit, per request;
 *   ITL         gap between consecutive Chunks of a request; a Chunk of k
 *               tokens counts as k gaps of gap/k (the tokens are taken as
 *               evenly spaced); the first Chunk's tokens start the clock
 *               and are no ITL sample;
 *   TPOT        per request: (last Chunk - first Chunk) / (tokens after
 *               the first Chunk);
 *   e2e         Done - submit, per request;
 *   tokens/s    every output token received / wall time (first submit to
 *               last Done);
 *   requests/s  requests finished by length, stop or EOS / wall time.
 * With --mix chat also TTFT p50 / p99 per turn. Every run reports what
 * the groups' prefix caches did during it (from Status before and
 * after): prompt tokens reused of those started (a sequence preempted
 * and started again counts again), and the tokens the coordinator
 * expected to be cached where it routed (routing accuracy).
 * Percentiles are exact over all samples: nearest rank on the sorted
 * values (p-th: the ceil(p/100 n)-th smallest). A second connection
 * samples the coordinator's Status every --status-ms during the run:
 * the sequences running in the engine, waiting in the leader, queued in
 * the coordinator (mean and max), which shows how full the batches were.
 *
 * --http URL sends the same workload through the coordinator's OpenAI
 * API instead (POST /v1/completions, stream=true, return_token_ids so
 * each event says how many tokens it carries; bench/serve_http.c): one
 * keep-alive connection per stream, the same metrics from the events'
 * arrival times, the same JSON plus "transport": "http". Status samples
 * and the wait for a group still use --coordinator.
 *
 * --cancel-every N: request i with i % N == N - 1 is cancelled after its
 * first Chunk (Cancel by tag); its Done must say cancelled, or finished
 * when it ended first. --vanish-every N: request i with i % N == N - 2
 * (mod N) loses its client after its first Chunk: the connection is
 * closed without a Cancel and the stream goes on on a new one (the
 * coordinator must find the client gone and free the request). Both
 * native only; neither counts as failed; tests/soak.sh uses them.
 *
 * --coord-pid PID: the coordinator's CPU time (user + system, from
 * /proc/PID/stat) over the measured run, as seconds and as a share of one
 * core, so the cost of a transport shows.
 *
 * Writes a table on stdout and, with --out, the same as JSON. Exits 0
 * when every request finished, 1 otherwise (the JSON is still written).
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/args.h"
#include "common/version.h"
#include "client/client.h"
#include "common/rng.h"
#include "bench/serve_http.h"
#include "common/sl.h"

#define LG_MAX_STREAMS 1000 /* ZeroMQ's default socket limit per context is 1023 */
#define LG_MAX_META 16
#define LG_POLL_MS 10       /* loop tick: timers (status, progress, deadline) */
#define LG_PROGRESS_S 10
#define LG_MAX_TURNS 64     /* --turns */
/* A unique prompt's own ids after its shared part: one KV block at the
 * node's default block size (16), so the first block a request does not
 * share on purpose is its own at that size or any smaller one. */
#define LG_HEADER_IDS 16

typedef struct lg_args {
	const char *endpoint, *model, *out, *mix;
	const char *http;         /* NULL: the native protocol */
	long coord_pid;           /* 0: none */
	long streams, requests, prompt_len, output_len, vocab, warmup, wait_s, timeout_s, status_ms;
	long turns, system_len, question_len, think_ms; /* --mix chat */
	long cancel_every, vanish_every; /* 0: none */
	double spread, temperature;
	uint64_t seed;
	uint64_t nonce;           /* unique prompts: this run's key (--prompt-nonce, else drawn) */
	int seeded_prompts;       /* --prompts seeded: ids from --seed alone */
	long shared_prefix;       /* --shared-prefix: ids every prompt starts with */
	int honor_eos;
	char *json_schema;        /* --json-schema FILE's text: every request constrained */
	const char *meta[LG_MAX_META]; /* "key=value", copied into the JSON */
	int n_meta;
} lg_args;

/* One generation of the workload and what the client saw of it. */
typedef struct lg_request {
	int32_t *prompt;          /* [n_prompt] token ids, BOS first */
	int n_prompt, max_tokens;
	uint64_t seed;
	int turn;                 /* --mix chat: 1-based turn of its conversation */
	int32_t *answer;          /* --mix chat: the ids that came back */
	int n_answer, cap_answer;
	int sent, ended;
	int cancel_sent, vanished; /* --cancel-every, --vanish-every */
	double t_submit, t_first, t_last, t_end; /* sl_now() seconds */
	int n_tokens, n_chunks, first_tokens;    /* first_tokens: ids in the first Chunk */
	int finish;               /* DONE: SL_FINISH_*; 0 for an Error reply */
	int error_code;           /* ERROR: SL_ERR_* */
	int completion_tokens;    /* as Done reports */
	double coord_queue_ms, coord_ttft_ms;
	char message[160];
} lg_request;

typedef struct lg_stream {
	sl_client *c;             /* native */
	lg_http *h;               /* --http */
	int req;                  /* index of the request in flight, -1: idle */
	uint64_t tag;
	/* --mix chat: this user's conversation so far (the last prompt and its answer) */
	int32_t *conv;
	int n_conv, cap_conv, turn; /* turn: turns done in it */
	uint64_t rng;
	double wake;              /* --think-ms: idle until then (sl_now() seconds), 0: not */
} lg_stream;

/* Status samples: engine occupancy during the run. */
typedef struct lg_load {
	long samples;
	double running, waiting, queued; /* sums */
	int running_max, waiting_max, queued_max;
} lg_load;

/* Growable array of doubles (ITL samples). */
typedef struct lg_vec {
	double *v;
	size_t n, cap;
} lg_vec;

static int vec_push(lg_vec *a, double x)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 4096;
		double *v = realloc(a->v, cap * sizeof *v);
		if (!v)
			return SL_ENOMEM;
		a->v = v, a->cap = cap;
	}
	a->v[a->n++] = x;
	return SL_OK;
}

/* Uniform integer in [lo, hi]. */
static long uniform(uint64_t *rng, long lo, long hi)
{
	return lo + (long)(sl_splitmix64(rng) % (uint64_t)(hi - lo + 1));
}

/* Length around `mean` for the mix: fixed, or uniform over +-spread. */
static long draw_len(const lg_args *a, long mean, uint64_t *rng)
{
	if (strcmp(a->mix, "uniform"))
		return mean;
	long lo = lround(mean * (1 - a->spread)), hi = lround(mean * (1 + a->spread));
	return uniform(rng, lo < 1 ? 1 : lo, hi < 1 ? 1 : hi);
}

/* Base-(vocab - 3) digits that tell every --requests index apart. */
static int index_digits(long vocab)
{
	int d = 1;
	for (uint64_t span = (uint64_t)vocab - 3; span < (1u << 20) && d < LG_HEADER_IDS; d++)
		span *= (uint64_t)vocab - 3;
	return d;
}

/* Overwrite the seeded ids of prompt p (n ids, BOS first) with the
 * shared prefix (its first `shared` ids) and, unless --prompts seeded,
 * request `index`'s own header (the header comment: "Unique prompts").
 * `salt` keeps the warm-up's headers apart from the measured requests'. */
static void stamp_prompt(const lg_args *a, int32_t *p, int n, int shared, uint64_t index,
			 uint64_t salt)
{
	uint64_t key = a->seeded_prompts ? a->seed : a->nonce, b = (uint64_t)a->vocab - 3;
	shared = shared < n ? shared : n;
	uint64_t rng = key ^ 0x534841524544ull; /* "SHARED" */
	for (int i = 1; i < shared; i++)
		p[i] = (int32_t)uniform(&rng, 3, a->vocab - 1);
	if (a->seeded_prompts)
		return;
	int from = shared > 1 ? shared : 1, end = from + LG_HEADER_IDS < n ? from + LG_HEADER_IDS : n;
	int digits = index_digits(a->vocab);
	uint64_t x = index;
	rng = key ^ (salt + index * 0xD1B54A32D192ED03ull);
	for (int i = from; i < end; i++, digits--) {
		if (digits > 0) {
			p[i] = (int32_t)(3 + x % b);
			x /= b;
		} else {
			p[i] = (int32_t)uniform(&rng, 3, a->vocab - 1);
		}
	}
}

/* Request `index` of a phase: seeded ids, then stamp_prompt. */
static int make_request(const lg_args *a, lg_request *r, int n_prompt, int max_tokens,
			uint64_t seed, uint64_t *rng, int shared, uint64_t index, uint64_t salt)
{
	memset(r, 0, sizeof *r);
	r->prompt = malloc(sizeof(int32_t) * n_prompt);
	if (!r->prompt)
		return SL_ENOMEM;
	r->prompt[0] = 1;
	for (int i = 1; i < n_prompt; i++)
		r->prompt[i] = (int32_t)uniform(rng, 3, a->vocab - 1);
	stamp_prompt(a, r->prompt, n_prompt, shared, index, salt);
	r->n_prompt = n_prompt, r->max_tokens = max_tokens, r->seed = seed;
	return SL_OK;
}

/* The measured workload, from the seed alone (--mix chat: made turn by
 * turn as answers come back, chat_turn). */
static int make_workload(const lg_args *a, lg_request **out)
{
	lg_request *w = calloc(a->requests, sizeof *w);
	uint64_t rng = a->seed;
	int rc = w ? SL_OK : SL_ENOMEM;
	for (long i = 0; !rc && !strcmp(a->mix, "chat") && i < a->requests; i++)
		w[i].seed = a->seed + (uint64_t)i;
	for (long i = 0; !rc && strcmp(a->mix, "chat") && i < a->requests; i++) {
		long p = draw_len(a, a->prompt_len, &rng), o = draw_len(a, a->output_len, &rng);
		rc = make_request(a, &w[i], (int)p, (int)o, a->seed + (uint64_t)i, &rng,
				  (int)a->shared_prefix, (uint64_t)i, 0);
	}
	*out = w;
	return rc;
}

/* Warm-up: request i asks for 2 + i tokens, so batch sizes W..1 all occur. */
static int make_warmup(const lg_args *a, lg_request **out)
{
	lg_request *w = calloc(a->warmup, sizeof *w);
	uint64_t rng = a->seed ^ 0x5741524D5550ull;
	int rc = w ? SL_OK : SL_ENOMEM;
	for (long i = 0; !rc && i < a->warmup; i++)
		/* nothing shared: a shared block cached here would count in the run */
		rc = make_request(a, &w[i], 16, (int)(2 + i), i, &rng, 0, (uint64_t)i,
				  0x5741524D5550ull);
	*out = w;
	return rc;
}

static void free_requests(lg_request *w, long n)
{
	for (long i = 0; w && i < n; i++)
		free(w[i].prompt), free(w[i].answer);
	free(w);
}

static int is_chat(const lg_args *a) { return !strcmp(a->mix, "chat"); }

/* Append n ids to a growable list. */
static int ids_add(int32_t **v, int *len, int *cap, const int32_t *ids, int n)
{
	if (*len + n > *cap) {
		int c = *cap ? *cap : 256;
		while (c < *len + n)
			c *= 2;
		int32_t *nv = realloc(*v, sizeof(int32_t) * c);
		if (!nv)
			return SL_ENOMEM;
		*v = nv, *cap = c;
	}
	memcpy(*v + *len, ids, sizeof(int32_t) * n);
	*len += n;
	return SL_OK;
}

/* --mix chat: the system prompt every conversation starts with (BOS, then
 * ids from the seed alone, so every run shares it). */
static int32_t *g_system;

/* The next turn of stream s's user into request r: the conversation so
 * far (prompt and answer of its last turn) and a new question; a new
 * conversation after --turns turns, or when this one would no longer fit
 * a context of max_pos. */
static int chat_turn(const lg_args *a, lg_stream *s, lg_request *r, int max_pos)
{
	int q = (int)draw_len(a, a->question_len, &s->rng), o = (int)draw_len(a, a->output_len, &s->rng);
	if (s->turn == 0 || s->turn >= a->turns || (max_pos > 0 && s->n_conv + q + o > max_pos)) {
		s->n_conv = s->turn = 0;
		if (ids_add(&s->conv, &s->n_conv, &s->cap_conv, g_system, (int)a->system_len))
			return SL_ENOMEM;
	}
	for (int i = 0; i < q; i++) {
		int32_t id = (int32_t)uniform(&s->rng, 3, a->vocab - 1);
		if (ids_add(&s->conv, &s->n_conv, &s->cap_conv, &id, 1))
			return SL_ENOMEM;
	}
	free(r->prompt);
	if (!(r->prompt = malloc(sizeof(int32_t) * s->n_conv)))
		return SL_ENOMEM;
	memcpy(r->prompt, s->conv, sizeof(int32_t) * s->n_conv);
	r->n_prompt = s->n_conv, r->max_tokens = o, r->turn = ++s->turn;
	return SL_OK;
}

/* A turn ended: its answer joins the conversation; a failed turn ends it. */
static int chat_answered(lg_stream *s, const lg_request *r, int ok)
{
	if (!ok) {
		s->turn = 0;
		return SL_OK;
	}
	return ids_add(&s->conv, &s->n_conv, &s->cap_conv, r->answer, r->n_answer);
}

/* The run: connections, the workload, where it has got to. */
typedef struct lg_run {
	const lg_args *a;
	lg_stream *streams;       /* max(--streams, --warmup) connections */
	int n_streams;
	sl_client *ctl;        /* Status samples */
	lg_request *reqs;
	long n_reqs, next, ended, failed;
	long cancelled, vanished; /* --cancel-every, --vanish-every */
	void *ctx;                /* new connections of vanished clients */
	lg_vec itl_ms;
	lg_load load;
	int sample_load;
	int max_pos;              /* the largest context of the groups (Status) */
	int chat;                 /* this phase runs --mix chat conversations */
	uint64_t status_tag;
	int status_pending;
	double t_start, t_end;
	long tokens;
	double coord_cpu0, coord_cpu1; /* the coordinator's CPU seconds at start and end; <0: unknown */
} lg_run;

/* User + system CPU seconds of process pid, or -1. */
static double proc_cpu_s(long pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')'); /* the name may hold spaces */
	unsigned long ut, st;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int submit_next(lg_run *R, lg_stream *s, char *err, size_t errlen)
{
	s->req = -1;
	if (R->next >= R->n_reqs)
		return SL_OK;
	lg_request *r = &R->reqs[R->next];
	if (R->chat && chat_turn(R->a, s, r, R->max_pos))
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	sl_gen_params p = {.model = R->a->model, .prompt_ids = r->prompt,
			      .n_prompt_ids = r->n_prompt, .max_tokens = r->max_tokens,
			      .temperature = (float)R->a->temperature, .seed = r->seed,
			      .ignore_eos = !R->a->honor_eos};
	if (R->a->json_schema) {
		p.constraint_kind = SL_CONSTRAINT_JSON_SCHEMA;
		p.constraint = R->a->json_schema;
	}
	int rc;
	r->t_submit = sl_now();
	if (s->h) {
		size_t len;
		char *body = lg_http_body(R->a->model, r->prompt, r->n_prompt, r->max_tokens,
					  R->a->temperature, r->seed, !R->a->honor_eos, &len);
		if (!body)
			return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
		r->t_submit = sl_now();
		rc = lg_http_post(s->h, body, len, err, errlen);
		free(body);
	} else {
		rc = sl_client_submit(s->c, &p, &s->tag, err, errlen);
	}
	if (rc)
		return rc;
	r->sent = 1;
	s->req = (int)R->next++;
	return SL_OK;
}

static int on_chunk(lg_run *R, lg_request *r, const sl_event *ev, double now)
{
	int k = (int)ev->n_token_ids;
	if (k == 0)
		return SL_OK; /* text held back and released without new ids: no token arrived */
	if (r->n_chunks == 0) {
		r->t_first = now;
		r->first_tokens = k;
	} else {
		double gap_ms = 1e3 * (now - r->t_last) / k;
		for (int i = 0; i < k; i++)
			if (vec_push(&R->itl_ms, gap_ms))
				return SL_ENOMEM;
	}
	r->t_last = now;
	r->n_tokens += k;
	r->n_chunks++;
	R->tokens += k;
	if (R->chat && ev->token_ids &&
	    ids_add(&r->answer, &r->n_answer, &r->cap_answer, ev->token_ids, k))
		return SL_ENOMEM;
	return SL_OK;
}

static void on_end(lg_run *R, lg_request *r, const sl_event *ev, double now)
{
	r->ended = 1;
	r->t_end = now;
	if (ev->kind == SL_EV_DONE) {
		r->finish = ev->finish;
		r->completion_tokens = ev->completion_tokens;
		r->coord_queue_ms = ev->queue_ms, r->coord_ttft_ms = ev->ttft_ms;
	} else {
		r->error_code = ev->error_code;
	}
	snprintf(r->message, sizeof r->message, "%s", ev->message ? ev->message : "");
	int ok = ev->kind == SL_EV_DONE && (ev->finish == SL_FINISH_LENGTH ||
					       ev->finish == SL_FINISH_STOP ||
					       ev->finish == SL_FINISH_EOS);
	if (!ok && r->cancel_sent && ev->kind == SL_EV_DONE && ev->finish == SL_FINISH_CANCELLED) {
		R->cancelled++;
		ok = 1;
	}
	if (ok && r->n_tokens != r->completion_tokens)
		SL_WARN("loadgen", "request %ld: %d tokens streamed, Done says %d", (long)(r - R->reqs),
			r->n_tokens, r->completion_tokens);
	if (!ok) {
		R->failed++;
		if (R->failed <= 5)
			SL_WARN("loadgen", "request %ld failed (%s): %s", (long)(r - R->reqs),
				ev->kind == SL_EV_DONE ? sl_finish_name(ev->finish)
							  : sl_error_name(ev->error_code),
				r->message);
	}
	R->ended++;
	R->t_end = now;
}

/* --cancel-every, --vanish-every: what to do with request i in flight on
 * s after a Chunk. 1: s was given a new connection (the old one's
 * replies are gone with it). */
static int cancel_or_vanish(lg_run *R, lg_stream *s, int *rc, char *err, size_t errlen)
{
	const lg_args *a = R->a;
	long i = s->req;
	lg_request *r = &R->reqs[i];
	if (a->cancel_every && i % a->cancel_every == a->cancel_every - 1 && !r->cancel_sent) {
		r->cancel_sent = 1;
		*rc = sl_client_cancel(s->c, s->tag, err, errlen);
		return 0;
	}
	if (!a->vanish_every || (i + 2) % a->vanish_every != 0)
		return 0;
	r->vanished = r->ended = 1;
	r->t_end = sl_now();
	R->vanished++;
	R->ended++;
	sl_client_destroy(s->c);
	s->c = NULL;
	*rc = sl_client_create(R->ctx, a->endpoint, &s->c, err, errlen);
	if (!*rc)
		*rc = submit_next(R, s, err, errlen);
	return 1;
}

/* Every reply waiting on one stream's socket. */
static int drain_stream(lg_run *R, lg_stream *s, char *err, size_t errlen)
{
	sl_event ev;
	int got, rc = SL_OK;
	while (!rc && (got = sl_client_next(s->c, 0, &ev, err, errlen)) == 1) {
		double now = sl_now();
		if (ev.kind == SL_EV_ERROR && ev.tag == 0)
			rc = sl_errf(err, errlen, SL_EINVAL, "the coordinator refused a frame: %s",
				     ev.message);
		else if (s->req < 0 || ev.tag != s->tag)
			SL_WARN("loadgen", "reply for tag %llu, which is not in flight",
				(unsigned long long)ev.tag);
		else if (ev.kind == SL_EV_CHUNK && !(rc = on_chunk(R, &R->reqs[s->req], &ev, now)) &&
			 cancel_or_vanish(R, s, &rc, err, errlen)) {
			sl_event_release(&ev);
			return rc;
		}
		else if (ev.kind == SL_EV_DONE || ev.kind == SL_EV_ERROR) {
			lg_request *r = &R->reqs[s->req];
			long failed = R->failed;
			on_end(R, r, &ev, now);
			if (R->chat && chat_answered(s, r, R->failed == failed))
				rc = sl_errf(err, errlen, SL_ENOMEM, "out of memory");
			if (!rc && R->chat && R->a->think_ms > 0) { /* the user reads, then asks */
				s->req = -1;
				s->wake = now + R->a->think_ms * 1e-3 * (0.5 + sl_rng_unit(&s->rng));
			} else if (!rc) {
				rc = submit_next(R, s, err, errlen);
			}
		}
		sl_event_release(&ev);
	}
	return rc ? rc : got < 0 ? got : SL_OK;
}

/* --http: one response's events, as the native mode's Chunk / Done / Error. */
typedef struct lg_http_ctx {
	lg_run *R;
	lg_stream *s;
	int rc;
	char *err;
	size_t errlen;
} lg_http_ctx;

static void on_http_event(void *arg, const lg_http_event *he)
{
	lg_http_ctx *x = arg;
	lg_run *R = x->R;
	lg_stream *s = x->s;
	double now = sl_now();
	if (x->rc || s->req < 0)
		return;
	lg_request *r = &R->reqs[s->req];
	sl_event ev = {0};
	if (he->kind == LG_HTTP_TOKENS) {
		ev.kind = SL_EV_CHUNK;
		ev.n_token_ids = (size_t)he->n_tokens;
		x->rc = on_chunk(R, r, &ev, now);
		return;
	}
	if (he->kind == LG_HTTP_DONE) {
		ev.kind = SL_EV_DONE;
		ev.finish = he->finish;
		/* no usage event: count what streamed */
		ev.completion_tokens = he->completion_tokens >= 0 ? he->completion_tokens : r->n_tokens;
		ev.message = "";
	} else {
		ev.kind = SL_EV_ERROR;
		ev.error_code = he->status == 429 ? SL_ERR_OVERLOADED : he->status == 400 ? SL_ERR_BAD_REQUEST
				: SL_ERR_INTERNAL;
		ev.message = he->message;
	}
	on_end(R, r, &ev, now);
	x->rc = submit_next(R, s, x->err, x->errlen);
}

static int drain_http(lg_run *R, lg_stream *s, char *err, size_t errlen)
{
	lg_http_ctx x = {R, s, SL_OK, err, errlen};
	int rc = lg_http_read(s->h, on_http_event, &x, err, errlen);
	return rc ? rc : x.rc;
}

static void on_status(lg_run *R, const sl_event *ev)
{
	int running = 0, waiting = 0;
	for (int i = 0; i < ev->n_groups; i++)
		running += ev->groups[i].running, waiting += ev->groups[i].waiting;
	lg_load *L = &R->load;
	L->samples++;
	L->running += running, L->waiting += waiting, L->queued += ev->queued;
	L->running_max = running > L->running_max ? running : L->running_max;
	L->waiting_max = waiting > L->waiting_max ? waiting : L->waiting_max;
	L->queued_max = ev->queued > L->queued_max ? ev->queued : L->queued_max;
}

static int drain_ctl(lg_run *R, char *err, size_t errlen)
{
	sl_event ev;
	int got;
	while ((got = sl_client_next(R->ctl, 0, &ev, err, errlen)) == 1) {
		if (ev.kind == SL_EV_STATUS && ev.tag == R->status_tag) {
			R->status_pending = 0;
			if (R->sample_load)
				on_status(R, &ev);
		}
		sl_event_release(&ev);
	}
	return got < 0 ? got : SL_OK;
}

/* Run reqs to the end over the first ns streams (at most one request in
 * flight on each). A deadline passed ends it early with SL_EIO. */
static int run_phase(lg_run *R, int ns, lg_request *reqs, long n, int sample_load,
		     const char *what, char *err, size_t errlen)
{
	const lg_args *a = R->a;
	int rc = SL_OK;
	zmq_pollitem_t items[LG_MAX_STREAMS + 1];
	R->reqs = reqs, R->n_reqs = n, R->next = R->ended = R->failed = R->tokens = 0;
	R->cancelled = R->vanished = 0;
	R->sample_load = sample_load;
	R->chat = sample_load && is_chat(a); /* the measured phase; warm-up is never chat */
	R->itl_ms.n = 0;
	R->load = (lg_load){0};
	items[ns] = (zmq_pollitem_t){sl_client_socket(R->ctl), 0, ZMQ_POLLIN, 0};
	R->t_start = R->t_end = sl_now();
	if (a->coord_pid)
		R->coord_cpu0 = proc_cpu_s(a->coord_pid);
	double deadline = R->t_start + a->timeout_s, next_status = R->t_start,
	       next_progress = R->t_start + LG_PROGRESS_S;
	for (int i = 0; !rc && i < ns; i++)
		rc = submit_next(R, &R->streams[i], err, errlen);
	while (!rc && R->ended < n) {
		double now = sl_now();
		if (now > deadline) {
			rc = sl_errf(err, errlen, SL_EIO, "%s: %ld of %ld requests ended in %ld s",
				     what, R->ended, n, a->timeout_s);
			break;
		}
		if (sample_load && a->status_ms > 0 && now >= next_status && !R->status_pending) {
			rc = sl_client_status(R->ctl, &R->status_tag, err, errlen);
			R->status_pending = 1;
			next_status = now + a->status_ms * 1e-3;
		}
		if (now >= next_progress) {
			SL_INFO("loadgen", "%s: %.0f s, %ld/%ld requests ended, %.0f output tokens/s",
				what, now - R->t_start, R->ended, n, R->tokens / (now - R->t_start));
			next_progress += LG_PROGRESS_S;
		}
		for (int i = 0; !rc && i < ns; i++) /* --think-ms: users done thinking ask */
			if (R->streams[i].wake > 0 && now >= R->streams[i].wake) {
				R->streams[i].wake = 0;
				rc = submit_next(R, &R->streams[i], err, errlen);
			}
		/* an HTTP stream's socket changes when a closed connection is reopened */
		for (int i = 0; i < ns; i++)
			items[i] = R->streams[i].h
					   ? (zmq_pollitem_t){NULL, lg_http_fd(R->streams[i].h), ZMQ_POLLIN, 0}
					   : (zmq_pollitem_t){sl_client_socket(R->streams[i].c), 0, ZMQ_POLLIN, 0};
		if (!rc && zmq_poll(items, ns + 1, LG_POLL_MS) < 0)
			rc = sl_errf(err, errlen, SL_ECOMM, "poll: %s", zmq_strerror(zmq_errno()));
		for (int i = 0; !rc && i < ns; i++)
			if (items[i].revents & ZMQ_POLLIN)
				rc = R->streams[i].h ? drain_http(R, &R->streams[i], err, errlen)
						     : drain_stream(R, &R->streams[i], err, errlen);
		if (!rc && (items[ns].revents & ZMQ_POLLIN))
			rc = drain_ctl(R, err, errlen);
	}
	/* whatever is still in flight (deadline, error): cancel it; the run
	 * then lasted until now */
	if (R->ended < n)
		R->t_end = sl_now();
	if (a->coord_pid)
		R->coord_cpu1 = proc_cpu_s(a->coord_pid);
	for (int i = 0; i < ns; i++)
		if (R->streams[i].req >= 0) {
			char e2[SL_ERRLEN];
			if (R->streams[i].h) { /* hanging up cancels it */
				lg_http_close(R->streams[i].h);
				R->streams[i].h = NULL;
				lg_http_open(a->http, &R->streams[i].h, e2, sizeof e2);
			} else {
				sl_client_cancel(R->streams[i].c, R->streams[i].tag, e2, sizeof e2);
			}
			R->streams[i].req = -1;
		}
	return rc;
}

/* Wait until a live, non-draining group serves; keep its Status. */
static int wait_ready(lg_run *R, sl_event *st, char *err, size_t errlen)
{
	double deadline = sl_now() + R->a->wait_s;
	while (sl_now() < deadline) {
		uint64_t tag;
		int rc = sl_client_status(R->ctl, &tag, err, errlen);
		if (rc)
			return rc;
		double until = sl_now() + 1.0;
		while (sl_now() < until) {
			int got = sl_client_next(R->ctl, 100, st, err, errlen);
			if (got < 0)
				return got;
			if (got == 0)
				continue;
			if (st->kind == SL_EV_STATUS && st->tag == tag) {
				for (int i = 0; i < st->n_groups; i++)
					if (!st->groups[i].draining)
						return SL_OK;
				break;
			}
			sl_event_release(st);
		}
		if (st->kind == SL_EV_STATUS)
			sl_event_release(st);
		struct timespec ts = {0, 250 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return sl_errf(err, errlen, SL_EIO, "no node group served at %s within %ld s",
		       R->a->endpoint, R->a->wait_s);
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

/* Nearest rank on sorted v: the ceil(p/100 n)-th smallest. */
static double pct(const double *v, size_t n, double p)
{
	if (n == 0)
		return NAN;
	size_t k = (size_t)ceil(p / 100.0 * (double)n);
	k = k < 1 ? 1 : k > n ? n : k;
	return v[k - 1];
}

typedef struct lg_dist {
	size_t n;
	double mean, p50, p90, p99, max;
} lg_dist;

/* Sorts v in place. */
static lg_dist dist(double *v, size_t n)
{
	lg_dist d = {.n = n, .mean = NAN, .p50 = NAN, .p90 = NAN, .p99 = NAN, .max = NAN};
	if (n == 0)
		return d;
	qsort(v, n, sizeof *v, cmp_double);
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += v[i];
	d.mean = s / n, d.p50 = pct(v, n, 50), d.p90 = pct(v, n, 90), d.p99 = pct(v, n, 99);
	d.max = v[n - 1];
	return d;
}

/* What the groups' prefix caches did over the run: Status after less before. */
typedef struct lg_cache {
	int known;                /* a Status after the run came back */
	int enabled;              /* some group has its prefix cache on */
	long queried, hit, routed, evictions;
} lg_cache;

typedef struct lg_report {
	double wall_s, tokens_per_s, requests_per_s;
	double coord_cpu_s;       /* -1: not measured */
	long ok, failed, unanswered, output_tokens, prompt_tokens;
	lg_dist ttft_ms, itl_ms, tpot_ms, e2e_ms;
	int n_turns;              /* --mix chat: TTFT of turn t in ttft_turn[t - 1] */
	lg_dist ttft_turn[LG_MAX_TURNS];
	lg_cache cache;
} lg_report;

/* Sum over the groups of after - before (a group new since counts whole). */
static void cache_delta(const sl_event *before, const sl_event *after, lg_cache *c)
{
	*c = (lg_cache){.known = 1};
	for (int i = 0; i < after->n_groups; i++) {
		const sl_group_info *g = &after->groups[i], *b = NULL;
		c->enabled |= g->prefix_cache != 0;
		for (int k = 0; k < before->n_groups; k++)
			if (before->groups[k].id == g->id)
				b = &before->groups[k];
		c->queried += g->cache_queried_tokens - (b ? b->cache_queried_tokens : 0);
		c->hit += g->cache_hit_tokens - (b ? b->cache_hit_tokens : 0);
		c->routed += g->routed_prefix_tokens - (b ? b->routed_prefix_tokens : 0);
		c->evictions += g->cache_evictions - (b ? b->cache_evictions : 0);
	}
}

static int summarize(lg_run *R, lg_report *o)
{
	long n = R->n_reqs;
	double *ttft = malloc(sizeof(double) * (n + 1)), *tpot = malloc(sizeof(double) * (n + 1)),
	       *e2e = malloc(sizeof(double) * (n + 1));
	size_t nt = 0, np = 0, ne = 0;
	if (!ttft || !tpot || !e2e) {
		free(ttft), free(tpot), free(e2e);
		return SL_ENOMEM;
	}
	memset(o, 0, sizeof *o);
	for (long i = 0; i < n; i++) {
		const lg_request *r = &R->reqs[i];
		o->output_tokens += r->n_tokens;
		if (!r->sent)
			continue;
		o->prompt_tokens += r->n_prompt;
		if (!r->ended)
			o->unanswered++;
		if (r->n_chunks > 0)
			ttft[nt++] = 1e3 * (r->t_first - r->t_submit);
		if (r->n_tokens > r->first_tokens)
			tpot[np++] = 1e3 * (r->t_last - r->t_first) / (r->n_tokens - r->first_tokens);
		if (r->ended && (r->finish == SL_FINISH_LENGTH || r->finish == SL_FINISH_STOP ||
				 r->finish == SL_FINISH_EOS)) {
			o->ok++;
			e2e[ne++] = 1e3 * (r->t_end - r->t_submit);
		}
	}
	o->failed = R->failed;
	o->wall_s = R->t_end - R->t_start;
	o->coord_cpu_s = R->a->coord_pid && R->coord_cpu0 >= 0 && R->coord_cpu1 >= 0
				 ? R->coord_cpu1 - R->coord_cpu0 : -1;
	o->tokens_per_s = o->wall_s > 0 ? o->output_tokens / o->wall_s : 0;
	o->requests_per_s = o->wall_s > 0 ? o->ok / o->wall_s : 0;
	o->ttft_ms = dist(ttft, nt);
	o->tpot_ms = dist(tpot, np);
	o->e2e_ms = dist(e2e, ne);
	o->itl_ms = dist(R->itl_ms.v, R->itl_ms.n);
	for (int t = 1; R->chat && t <= R->a->turns; t++) {
		nt = 0;
		for (long i = 0; i < n; i++)
			if (R->reqs[i].turn == t && R->reqs[i].n_chunks > 0)
				ttft[nt++] = 1e3 * (R->reqs[i].t_first - R->reqs[i].t_submit);
		o->ttft_turn[t - 1] = dist(ttft, nt);
		o->n_turns = t;
	}
	free(ttft), free(tpot), free(e2e);
	return SL_OK;
}

static void print_report(const lg_run *R, const lg_report *o, const sl_event *st)
{
	const lg_args *a = R->a;
	for (int i = 0; i < st->n_groups; i++) {
		const sl_group_info *g = &st->groups[i];
		printf("group %u %s: model %s, tp %d x pp %d, %d KV blocks of %d tokens, context %d\n",
		       g->id, g->name, g->model, g->tp, g->pp, g->kv_blocks, g->block_tokens, g->max_pos);
	}
	if (R->chat)
		printf("load: %ld users, %ld requests, chat: %ld turns, system prompt %ld, question "
		       "%ld, answer %ld (uniform +-spread), think %ld ms, seed %llu\n", a->streams,
		       a->requests, a->turns, a->system_len, a->question_len, a->output_len,
		       a->think_ms, (unsigned long long)a->seed);
	else
		printf("load: %ld streams, %ld requests, mix %s: prompt %ld, output %ld%s, seed %llu\n",
		       a->streams, a->requests, a->mix, a->prompt_len, a->output_len,
		       strcmp(a->mix, "uniform") ? "" : " (uniform +-spread)", (unsigned long long)a->seed);
	if (!R->chat && a->seeded_prompts)
		printf("%-18s from the seed alone: runs with this seed and these lengths send the same "
		       "prompts%s\n", "prompts", a->shared_prefix ? "; the first ids shared" : "");
	else if (!R->chat)
		printf("%-18s unique per request (nonce %016llx)%s\n", "prompts",
		       (unsigned long long)a->nonce, a->shared_prefix ? "; the first ids shared" : "");
	if (!R->chat && a->shared_prefix)
		printf("%-18s %ld ids at the start of every prompt\n", "shared prefix", a->shared_prefix);
	printf("%-18s %ld ok, %ld failed, %ld unanswered; %ld prompt + %ld output tokens in %.2f s\n",
	       "requests", o->ok, o->failed, o->unanswered, o->prompt_tokens, o->output_tokens,
	       o->wall_s);
	if (a->cancel_every || a->vanish_every)
		printf("%-18s %ld cancelled by their client, %ld clients vanished mid-stream\n", "",
		       R->cancelled, R->vanished);
	printf("%-18s %s\n", "transport", a->http ? "HTTP (OpenAI /v1/completions, SSE)" : "native (ZeroMQ)");
	printf("%-18s %.1f\n", "output tokens/s", o->tokens_per_s);
	printf("%-18s %.2f\n", "requests/s", o->requests_per_s);
	printf("%-18s %8s %8s %8s %8s %8s\n", "", "p50", "p90", "p99", "max", "mean");
	const struct { const char *name; const lg_dist *d; } rows[] = {
		{"TTFT ms", &o->ttft_ms}, {"ITL ms", &o->itl_ms}, {"TPOT ms", &o->tpot_ms},
		{"e2e latency ms", &o->e2e_ms}};
	for (int i = 0; i < 4; i++)
		printf("%-18s %8.1f %8.1f %8.1f %8.1f %8.1f  (%zu samples)\n", rows[i].name,
		       rows[i].d->p50, rows[i].d->p90, rows[i].d->p99, rows[i].d->max, rows[i].d->mean,
		       rows[i].d->n);
	for (int t = 0; t < o->n_turns; t++)
		printf("%-18s %8.1f %8.1f %8.1f %8.1f %8.1f  (%zu samples)\n",
		       t == 0 ? "TTFT ms, turn 1" : "        turn", o->ttft_turn[t].p50,
		       o->ttft_turn[t].p90, o->ttft_turn[t].p99, o->ttft_turn[t].max,
		       o->ttft_turn[t].mean, o->ttft_turn[t].n);
	if (o->cache.known && !o->cache.enabled)
		printf("%-18s off in every group: no prompt token reused\n", "prefix cache");
	else if (o->cache.known)
		printf("%-18s %ld of %ld prompt tokens reused (%.1f%%), %ld expected by the router, "
		       "%ld blocks evicted\n", "prefix cache", o->cache.hit, o->cache.queried,
		       o->cache.queried ? 100.0 * o->cache.hit / o->cache.queried : 0.0,
		       o->cache.routed, o->cache.evictions);
	else
		printf("%-18s unknown: no Status after the run\n", "prefix cache");
	if (o->coord_cpu_s >= 0)
		printf("%-18s %.2f s over %.2f s wall: %.1f%% of one core\n", "coordinator CPU",
		       o->coord_cpu_s, o->wall_s, o->wall_s > 0 ? 100 * o->coord_cpu_s / o->wall_s : 0);
	const lg_load *L = &R->load;
	if (L->samples)
		printf("%-18s running mean %.1f max %d, waiting in leader mean %.1f max %d, "
		       "queued mean %.1f max %d (%ld samples)\n", "engine load",
		       L->running / L->samples, L->running_max, L->waiting / L->samples,
		       L->waiting_max, L->queued / L->samples, L->queued_max, L->samples);
}

static cJSON *dist_json(const lg_dist *d)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddNumberToObject(j, "n", (double)d->n);
	/* cJSON writes NaN as null, which is what an empty distribution is */
	cJSON_AddNumberToObject(j, "p50", d->p50);
	cJSON_AddNumberToObject(j, "p90", d->p90);
	cJSON_AddNumberToObject(j, "p99", d->p99);
	cJSON_AddNumberToObject(j, "max", d->max);
	cJSON_AddNumberToObject(j, "mean", d->mean);
	return j;
}

static int write_json(const char *path, const lg_run *R, const lg_report *o, const sl_event *st)
{
	const lg_args *a = R->a;
	cJSON *j = cJSON_CreateObject(), *meta = cJSON_CreateObject(), *load = cJSON_CreateObject(),
	      *groups = cJSON_CreateArray(), *reqs = cJSON_CreateArray();
	char date[32];
	time_t now = time(NULL);
	strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	cJSON_AddStringToObject(j, "date", date);
	for (int i = 0; i < a->n_meta; i++) {
		const char *eq = strchr(a->meta[i], '=');
		char key[64];
		snprintf(key, sizeof key, "%.*s", (int)(eq - a->meta[i]), a->meta[i]);
		cJSON_AddStringToObject(meta, key, eq + 1);
	}
	cJSON_AddItemToObject(j, "meta", meta);
	cJSON_AddStringToObject(j, "mix", a->mix);
	cJSON_AddNumberToObject(j, "streams", a->streams);
	cJSON_AddNumberToObject(j, "requests", a->requests);
	cJSON_AddNumberToObject(j, "prompt_len", a->prompt_len);
	cJSON_AddNumberToObject(j, "output_len", a->output_len);
	cJSON_AddNumberToObject(j, "spread", strcmp(a->mix, "uniform") ? 0 : a->spread);
	cJSON_AddNumberToObject(j, "seed", (double)a->seed);
	cJSON_AddNumberToObject(j, "temperature", a->temperature);
	cJSON_AddBoolToObject(j, "ignore_eos", !a->honor_eos);
	cJSON_AddNumberToObject(j, "warmup", a->warmup);
	cJSON_AddStringToObject(j, "transport", a->http ? "http" : "native");
	if (!R->chat) {
		char nonce[24];
		snprintf(nonce, sizeof nonce, "%016llx", (unsigned long long)a->nonce);
		cJSON_AddStringToObject(j, "prompts", a->seeded_prompts ? "seeded" : "unique");
		if (!a->seeded_prompts) /* a string: JSON numbers hold 53 bits */
			cJSON_AddStringToObject(j, "prompt_nonce", nonce);
		cJSON_AddNumberToObject(j, "shared_prefix", a->shared_prefix);
	}
	if (o->coord_cpu_s >= 0) {
		cJSON_AddNumberToObject(j, "coord_cpu_s", o->coord_cpu_s);
		cJSON_AddNumberToObject(j, "coord_cpu_percent", o->wall_s > 0 ? 100 * o->coord_cpu_s / o->wall_s : 0);
	}
	for (int i = 0; i < st->n_groups; i++) {
		const sl_group_info *g = &st->groups[i];
		cJSON *x = cJSON_CreateObject();
		cJSON_AddNumberToObject(x, "id", g->id);
		cJSON_AddStringToObject(x, "name", g->name);
		cJSON_AddStringToObject(x, "model", g->model);
		cJSON_AddNumberToObject(x, "tp", g->tp);
		cJSON_AddNumberToObject(x, "pp", g->pp);
		cJSON_AddNumberToObject(x, "kv_blocks", g->kv_blocks);
		cJSON_AddNumberToObject(x, "block_tokens", g->block_tokens);
		cJSON_AddNumberToObject(x, "max_pos", g->max_pos);
		cJSON_AddItemToArray(groups, x);
	}
	cJSON_AddItemToObject(j, "groups", groups);
	cJSON_AddNumberToObject(j, "ok", o->ok);
	cJSON_AddNumberToObject(j, "failed", o->failed);
	cJSON_AddNumberToObject(j, "unanswered", o->unanswered);
	cJSON_AddNumberToObject(j, "cancelled", R->cancelled);
	cJSON_AddNumberToObject(j, "vanished", R->vanished);
	cJSON_AddNumberToObject(j, "prompt_tokens", o->prompt_tokens);
	cJSON_AddNumberToObject(j, "output_tokens", o->output_tokens);
	cJSON_AddNumberToObject(j, "wall_s", o->wall_s);
	cJSON_AddNumberToObject(j, "output_tokens_per_s", o->tokens_per_s);
	cJSON_AddNumberToObject(j, "requests_per_s", o->requests_per_s);
	cJSON_AddItemToObject(j, "ttft_ms", dist_json(&o->ttft_ms));
	cJSON_AddItemToObject(j, "itl_ms", dist_json(&o->itl_ms));
	cJSON_AddItemToObject(j, "tpot_ms", dist_json(&o->tpot_ms));
	cJSON_AddItemToObject(j, "e2e_ms", dist_json(&o->e2e_ms));
	const lg_load *L = &R->load;
	double ns = L->samples ? (double)L->samples : NAN;
	cJSON_AddNumberToObject(load, "samples", (double)L->samples);
	cJSON_AddNumberToObject(load, "running_mean", L->running / ns);
	cJSON_AddNumberToObject(load, "running_max", L->running_max);
	cJSON_AddNumberToObject(load, "waiting_mean", L->waiting / ns);
	cJSON_AddNumberToObject(load, "waiting_max", L->waiting_max);
	cJSON_AddNumberToObject(load, "queued_mean", L->queued / ns);
	cJSON_AddNumberToObject(load, "queued_max", L->queued_max);
	cJSON_AddItemToObject(j, "engine_load", load);
	if (R->chat) {
		cJSON *chat = cJSON_CreateObject(), *by = cJSON_CreateArray();
		cJSON_AddNumberToObject(chat, "users", a->streams);
		cJSON_AddNumberToObject(chat, "turns", a->turns);
		cJSON_AddNumberToObject(chat, "system_len", a->system_len);
		cJSON_AddNumberToObject(chat, "question_len", a->question_len);
		cJSON_AddNumberToObject(chat, "think_ms", a->think_ms);
		for (int t = 0; t < o->n_turns; t++)
			cJSON_AddItemToArray(by, dist_json(&o->ttft_turn[t]));
		cJSON_AddItemToObject(chat, "ttft_ms_by_turn", by);
		cJSON_AddItemToObject(j, "chat", chat);
	}
	if (o->cache.known) {
		cJSON *pc = cJSON_CreateObject();
		cJSON_AddBoolToObject(pc, "enabled", o->cache.enabled);
		cJSON_AddNumberToObject(pc, "queried_tokens", (double)o->cache.queried);
		cJSON_AddNumberToObject(pc, "hit_tokens", (double)o->cache.hit);
		cJSON_AddNumberToObject(pc, "hit_rate", o->cache.queried ? (double)o->cache.hit / o->cache.queried : 0);
		cJSON_AddNumberToObject(pc, "routed_prefix_tokens", (double)o->cache.routed);
		cJSON_AddNumberToObject(pc, "evictions", (double)o->cache.evictions);
		cJSON_AddItemToObject(j, "prefix_cache", pc);
	}
	/* per request, in workload order: one row of request_fields */
	cJSON_AddItemToObject(j, "request_fields",
			      cJSON_CreateStringArray((const char *[]){"prompt_tokens", "output_tokens",
								       "submit_s", "ttft_ms", "e2e_ms",
								       "finish", "coord_queue_ms",
								       "coord_ttft_ms", "turn"}, 9));
	for (long i = 0; i < R->n_reqs; i++) {
		const lg_request *r = &R->reqs[i];
		double row[] = {r->n_prompt, r->n_tokens,
				r->sent ? round(1e6 * (r->t_submit - R->t_start)) / 1e6 : NAN,
				r->n_chunks ? round(1e6 * (r->t_first - r->t_submit)) / 1e3 : NAN,
				r->ended ? round(1e6 * (r->t_end - r->t_submit)) / 1e3 : NAN, r->finish,
				round(1e3 * r->coord_queue_ms) / 1e3, round(1e3 * r->coord_ttft_ms) / 1e3,
				r->turn};
		cJSON_AddItemToArray(reqs, cJSON_CreateDoubleArray(row, 9));
	}
	cJSON_AddItemToObject(j, "per_request", reqs);
	char *txt = cJSON_Print(j);
	cJSON_Delete(j);
	FILE *f = txt ? fopen(path, "w") : NULL;
	int ok = f && fputs(txt, f) >= 0;
	if (f)
		ok &= fclose(f) == 0;
	free(txt);
	return ok ? SL_OK : SL_EIO;
}

/* --mix chat: the shared system prompt, each user's random source, and
 * the context a conversation must fit (the largest group's, st). */
static int chat_setup(const lg_args *a, lg_run *R, const sl_event *st)
{
	uint64_t rng = a->seed ^ 0x53595354454dull; /* "SYSTEM" */
	if (!(g_system = malloc(sizeof(int32_t) * a->system_len)))
		return SL_ENOMEM;
	g_system[0] = 1;
	for (long i = 1; i < a->system_len; i++)
		g_system[i] = (int32_t)uniform(&rng, 3, a->vocab - 1);
	for (int i = 0; i < R->n_streams; i++)
		R->streams[i].rng = a->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i;
	for (int i = 0; i < st->n_groups; i++) {
		const sl_group_info *g = &st->groups[i];
		long kv = (long)g->kv_blocks * g->block_tokens;
		int ctx = kv < g->max_pos ? (int)kv : g->max_pos;
		R->max_pos = ctx > R->max_pos ? ctx : R->max_pos;
	}
	return SL_OK;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shardline-bench-serve [--coordinator tcp://127.0.0.1:5555] [--model NAME]\n"
		"         [--streams 8] [--requests 4*streams] [--mix fixed|uniform|chat]\n"
		"         [--turns 6] [--system-len 1000] [--question-len 64] [--think-ms 0]\n"
		"         [--prompt-len 512] [--output-len 256] [--spread 0.5] [--vocab 32000]\n"
		"         [--seed 1] [--temperature 0] [--honor-eos] [--warmup 0]\n"
		"         [--status-ms 200] [--wait-s 300] [--timeout-s 600]\n"
		"         [--http http://127.0.0.1:8000] [--coord-pid PID]\n"
		"         [--cancel-every N] [--vanish-every N] [--json-schema FILE]\n"
		"         [--prompts unique|seeded] [--shared-prefix 0] [--prompt-nonce N]\n"
		"         [--out FILE.json] [--meta KEY=VALUE]...\n"
		"N concurrent streams (one DEALER each, one request in flight each) run a\n"
		"seeded synthetic workload through the coordinator; prints output tokens/s,\n"
		"requests/s, TTFT / inter-token latency / TPOT / end-to-end percentiles.\n"
		"--mix uniform: lengths uniform in [L(1-spread), L(1+spread)]. --mix chat:\n"
		"each stream is a user in multi-turn conversations over a shared system\n"
		"prompt; turn k sends turn k-1's prompt and answer plus a new question\n"
		"(--requests: users * turns by default; --think-ms T: users pause T/2..3T/2\n"
		"before each next turn; native protocol only). Prompt ids\n"
		"are BOS then uniform in [3, vocab). ignore_eos unless --honor-eos.\n"
		"Prompts are unique (--prompts unique): the 16 ids after the shared part\n"
		"are each request's own (index, and a nonce drawn per run or --prompt-nonce),\n"
		"so no run reuses another's cached blocks. --shared-prefix N: every prompt\n"
		"starts with the same N ids (prefix reuse on purpose). --prompts seeded:\n"
		"ids from --seed alone; runs with one seed repeat their prompts.\n"
		"The report says how many prompt tokens the groups' prefix caches served.\n"
		"--warmup W: W unmeasured requests first (outputs of 2..W+1 tokens).\n"
		"--meta: strings copied into the JSON's \"meta\" (device, scheduler, ...).\n"
		"--http URL: the same load through the OpenAI API (POST /v1/completions,\n"
		"stream); --coordinator still serves the status samples. --coord-pid PID:\n"
		"report the coordinator's CPU time over the measured run.\n"
		"--cancel-every N: every Nth request is cancelled after its first chunk;\n"
		"--vanish-every N: every Nth loses its client mid-stream (connection\n"
		"closed, no Cancel). Neither counts as failed.\n"
		"--json-schema FILE: every request constrained to the schema (constrained\n"
		"decoding's cost under load; native protocol only). For outputs of exactly\n"
		"--output-len tokens the schema must not end sooner, e.g. an array with a\n"
		"large minItems: once it is complete only EOS is allowed.\n");
}

static int parse(int argc, char **argv, lg_args *a, char *err, size_t errlen)
{
	static const struct option o[] = {
		{"coordinator", 1, 0, 'c'}, {"model", 1, 0, 'm'}, {"streams", 1, 0, 'n'},
		{"requests", 1, 0, 'r'}, {"mix", 1, 0, 'x'}, {"prompt-len", 1, 0, 'p'},
		{"output-len", 1, 0, 'o'}, {"spread", 1, 0, 'S'}, {"vocab", 1, 0, 'v'},
		{"seed", 1, 0, 's'}, {"temperature", 1, 0, 't'}, {"honor-eos", 0, 0, 'E'},
		{"warmup", 1, 0, 'w'}, {"status-ms", 1, 0, 'i'}, {"wait-s", 1, 0, 'W'},
		{"timeout-s", 1, 0, 'T'}, {"out", 1, 0, 'O'}, {"meta", 1, 0, 'M'},
		{"http", 1, 0, 'H'}, {"coord-pid", 1, 0, 'P'}, {"turns", 1, 0, 'u'},
		{"system-len", 1, 0, 'y'}, {"question-len", 1, 0, 'q'}, {"think-ms", 1, 0, 'k'},
		{"cancel-every", 1, 0, 'X'}, {"vanish-every", 1, 0, 'V'}, {"prompts", 1, 0, 'R'},
		{"shared-prefix", 1, 0, 'A'}, {"prompt-nonce", 1, 0, 'N'},
		{"json-schema", 1, 0, 'J'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const char *env = getenv("SHARDLINE_COORDINATOR");
	*a = (lg_args){.endpoint = env && *env ? env : "tcp://127.0.0.1:5555", .mix = "fixed",
		       .streams = 8, .prompt_len = 512, .output_len = 256, .spread = 0.5,
		       .vocab = 32000, .seed = 1, .status_ms = 200, .wait_s = 300, .timeout_s = 600,
		       .turns = 6, .system_len = 1000, .question_len = 64};
	int c, rc = 0, nonce_set = 0;
	while (!rc && (c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'c': a->endpoint = optarg; break;
		case 'm': a->model = optarg; break;
		case 'n': rc = sl_parse_int("--streams", optarg, 1, LG_MAX_STREAMS, &a->streams, err, errlen); break;
		case 'r': rc = sl_parse_int("--requests", optarg, 1, 1 << 20, &a->requests, err, errlen); break;
		case 'x':
			if (strcmp(optarg, "fixed") && strcmp(optarg, "uniform") && strcmp(optarg, "chat"))
				return sl_errf(err, errlen, SL_EINVAL, "--mix: '%s' is not fixed, uniform or chat",
					       optarg);
			a->mix = optarg;
			break;
		case 'p': rc = sl_parse_int("--prompt-len", optarg, 1, 65536, &a->prompt_len, err, errlen); break;
		case 'o': rc = sl_parse_int("--output-len", optarg, 1, 1 << 20, &a->output_len, err, errlen); break;
		case 'S': rc = sl_parse_float("--spread", optarg, 0, 0.99, &a->spread, err, errlen); break;
		case 'v': rc = sl_parse_int("--vocab", optarg, 4, 1 << 24, &a->vocab, err, errlen); break;
		case 's': rc = sl_parse_u64("--seed", optarg, &a->seed, err, errlen); break;
		case 't': rc = sl_parse_float("--temperature", optarg, 0, 100, &a->temperature, err, errlen); break;
		case 'E': a->honor_eos = 1; break;
		case 'J': {
			size_t len;
			free(a->json_schema);
			rc = sl_read_file(optarg, &a->json_schema, &len, err, errlen);
			break;
		}
		case 'w': rc = sl_parse_int("--warmup", optarg, 0, LG_MAX_STREAMS, &a->warmup, err, errlen); break;
		case 'i': rc = sl_parse_int("--status-ms", optarg, 0, 60000, &a->status_ms, err, errlen); break;
		case 'W': rc = sl_parse_int("--wait-s", optarg, 0, 86400, &a->wait_s, err, errlen); break;
		case 'T': rc = sl_parse_int("--timeout-s", optarg, 1, 86400, &a->timeout_s, err, errlen); break;
		case 'O': a->out = optarg; break;
		case 'u': rc = sl_parse_int("--turns", optarg, 1, LG_MAX_TURNS, &a->turns, err, errlen); break;
		case 'y': rc = sl_parse_int("--system-len", optarg, 1, 65536, &a->system_len, err, errlen); break;
		case 'q': rc = sl_parse_int("--question-len", optarg, 1, 65536, &a->question_len, err, errlen); break;
		case 'k': rc = sl_parse_int("--think-ms", optarg, 0, 600000, &a->think_ms, err, errlen); break;
		case 'H': a->http = optarg; break;
		case 'X': rc = sl_parse_int("--cancel-every", optarg, 0, 1L << 30, &a->cancel_every, err, errlen); break;
		case 'V': rc = sl_parse_int("--vanish-every", optarg, 0, 1L << 30, &a->vanish_every, err, errlen); break;
		case 'P': rc = sl_parse_int("--coord-pid", optarg, 1, 1L << 30, &a->coord_pid, err, errlen); break;
		case 'R':
			if (strcmp(optarg, "unique") && strcmp(optarg, "seeded"))
				return sl_errf(err, errlen, SL_EINVAL, "--prompts: '%s' is not unique or seeded",
					       optarg);
			a->seeded_prompts = !strcmp(optarg, "seeded");
			break;
		case 'A': rc = sl_parse_int("--shared-prefix", optarg, 0, 65536, &a->shared_prefix, err, errlen); break;
		case 'N':
			rc = sl_parse_u64("--prompt-nonce", optarg, &a->nonce, err, errlen);
			nonce_set = 1;
			break;
		case 'M':
			if (!strchr(optarg, '=') || strchr(optarg, '=') == optarg || a->n_meta == LG_MAX_META)
				return sl_errf(err, errlen, SL_EINVAL, "--meta: KEY=VALUE, at most %d", LG_MAX_META);
			a->meta[a->n_meta++] = optarg;
			break;
		case 'h': usage(stdout); exit(0);
		default: return sl_errf(err, errlen, SL_EINVAL, "unknown option (see --help)");
		}
	}
	if (!rc && optind < argc)
		rc = sl_errf(err, errlen, SL_EINVAL, "unexpected argument '%s'", argv[optind]);
	if (!rc && is_chat(a) && a->http)
		rc = sl_errf(err, errlen, SL_EINVAL, "--mix chat needs the native protocol (the answers' ids)");
	if (!rc && a->http && a->json_schema)
		rc = sl_errf(err, errlen, SL_EINVAL, "--json-schema needs the native protocol");
	if (!rc && a->http && (a->cancel_every || a->vanish_every))
		rc = sl_errf(err, errlen, SL_EINVAL, "--cancel-every and --vanish-every need the native protocol");
	if (!rc && is_chat(a) && (a->shared_prefix || a->seeded_prompts))
		rc = sl_errf(err, errlen, SL_EINVAL, "--shared-prefix and --prompts seeded are for the "
			     "fixed and uniform mixes (chat shares its system prompt)");
	if (!rc && !strcmp(a->mix, "fixed") && a->shared_prefix >= a->prompt_len)
		rc = sl_errf(err, errlen, SL_EINVAL, "--shared-prefix %ld: every %ld-id prompt would be "
			     "the same", a->shared_prefix, a->prompt_len);
	if (!rc && !nonce_set)
		a->nonce = sl_random_seed();
	if (!rc && !a->requests)
		a->requests = is_chat(a) ? a->streams * a->turns : 4 * a->streams;
	/* with uniform lengths the longest prompt is L(1+spread) */
	if (!rc && lround(a->prompt_len * (1 + (strcmp(a->mix, "uniform") ? 0 : a->spread))) > 65536)
		rc = sl_errf(err, errlen, SL_EINVAL, "prompts of over 65536 ids are refused by the coordinator");
	return rc;
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline-bench-serve"))
		return 0;
	char err[SL_ERRLEN] = "";
	lg_args a;
	lg_run R = {0};
	lg_report rep;
	lg_request *work = NULL, *warm = NULL;
	sl_event st = {0};
	void *ctx = NULL;
	sl_log_set_role("loadgen", 0, 1);
	int rc = parse(argc, argv, &a, err, sizeof err);
	if (rc) {
		fprintf(stderr, "shardline-bench-serve: %s\n", err);
		if (rc == SL_EINVAL)
			usage(stderr);
		return 2;
	}
	/* each connection holds a few descriptors (TCP, ZeroMQ's signaller) */
	struct rlimit nofile;
	if (!getrlimit(RLIMIT_NOFILE, &nofile) && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	R.a = &a;
	R.n_streams = (int)(a.warmup > a.streams ? a.warmup : a.streams);
	rc = make_workload(&a, &work);
	if (!rc)
		rc = make_warmup(&a, &warm);
	if (!rc && !(ctx = zmq_ctx_new()))
		rc = sl_errf(err, sizeof err, SL_ECOMM, "zmq_ctx_new failed");
	if (!rc && (rc = zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, LG_MAX_STREAMS + 8)))
		rc = sl_errf(err, sizeof err, SL_ECOMM, "zmq_ctx_set: %s", zmq_strerror(zmq_errno()));
	R.ctx = ctx;
	if (!rc && !(R.streams = calloc(R.n_streams, sizeof *R.streams)))
		rc = SL_ENOMEM;
	if (!rc)
		rc = sl_client_create(ctx, a.endpoint, &R.ctl, err, sizeof err);
	for (int i = 0; !rc && i < R.n_streams; i++)
		rc = a.http ? lg_http_open(a.http, &R.streams[i].h, err, sizeof err)
			    : sl_client_create(ctx, a.endpoint, &R.streams[i].c, err, sizeof err);
	if (!rc)
		rc = wait_ready(&R, &st, err, sizeof err);
	if (!rc && a.warmup) {
		SL_INFO("loadgen", "warm-up: %ld requests of 16 + 2..%ld tokens", a.warmup, a.warmup + 1);
		rc = run_phase(&R, (int)a.warmup, warm, a.warmup, 0, "warm-up", err, sizeof err);
		if (!rc && R.failed)
			rc = sl_errf(err, sizeof err, SL_EIO, "%ld warm-up requests failed", R.failed);
	}
	int measured = 0;
	sl_event st0 = {0}, st1 = {0}; /* Status just before and after the run: cache counters */
	if (!rc && is_chat(&a))
		rc = chat_setup(&a, &R, &st);
	if (!rc)
		rc = wait_ready(&R, &st0, err, sizeof err);
	if (!rc) {
		SL_INFO("loadgen", "run: %ld streams, %ld requests (%s, prompt %ld, output %ld)",
			a.streams, a.requests, a.mix, is_chat(&a) ? a.system_len : a.prompt_len,
			a.output_len);
		rc = run_phase(&R, (int)a.streams, work, a.requests, 1, "run", err, sizeof err);
		measured = 1;
	}
	/* a run cut short still reports what it measured */
	if (measured && summarize(&R, &rep) == SL_OK) {
		char e2[SL_ERRLEN];
		if (wait_ready(&R, &st1, e2, sizeof e2) == SL_OK)
			cache_delta(&st0, &st1, &rep.cache);
		print_report(&R, &rep, &st);
		if (a.out && write_json(a.out, &R, &rep, &st)) {
			fprintf(stderr, "shardline-bench-serve: cannot write %s\n", a.out);
			rc = rc ? rc : SL_EIO;
		}
		if (!rc && (rep.failed || rep.unanswered))
			rc = sl_errf(err, sizeof err, SL_EIO, "%ld requests failed", rep.failed + rep.unanswered);
	}
	if (rc)
		fprintf(stderr, "shardline-bench-serve: %s\n", err[0] ? err : "failed");
	if (st.kind == SL_EV_STATUS)
		sl_event_release(&st);
	if (st0.kind == SL_EV_STATUS)
		sl_event_release(&st0);
	if (st1.kind == SL_EV_STATUS)
		sl_event_release(&st1);
	for (int i = 0; R.streams && i < R.n_streams; i++)
		free(R.streams[i].conv);
	free(g_system);
	for (int i = 0; R.streams && i < R.n_streams; i++) {
		sl_client_destroy(R.streams[i].c);
		lg_http_close(R.streams[i].h);
	}
	free(R.streams);
	sl_client_destroy(R.ctl);
	free(R.itl_ms.v);
	free_requests(work, a.requests);
	free_requests(warm, a.warmup);
	if (ctx)
		zmq_ctx_term(ctx);
	return rc ? 1 : 0;
}
