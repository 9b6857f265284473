/*
 * metrics.c — counters, histograms and the Prometheus text exposition
 * (see metrics.h). Histogram buckets are fixed at start, so an
 * observation is one search over at most 24 bounds and no allocation.
 *
 * Fed, never reaching out: stream.c and http.c update the counters, the
 * gauges are read from the coordinator's state (struct coord) or handed
 * in by the renderer's caller (http.c: its open connections). It calls
 * only buffers.c.
 */
#include "coordinator/metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/coord_int.h"
#include "common/sl.h"

/* Bounds in seconds: time to first token spans queueing and prefill, inter-
 * token latency one engine step, end to end a whole generation. */
static const double TTFT_LE[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
				 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80};
static const double ITL_LE[] = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03,
				0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5};
static const double E2E_LE[] = {0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50,
				60, 120, 240, 480, 960, 1920};
static const double QUEUE_LE[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
				  10, 20, 40, 80, 160};
#define NB(a) ((int)(sizeof(a) / sizeof(a)[0]))

static const char *FIN_NAME[COORD_FIN_KINDS] = {"length", "stop", "eos", "cancelled", "error",
						"timeout"};

static void hist_init(coord_hist *h, const double *le, int n)
{
	memset(h, 0, sizeof *h);
	h->le = le;
	h->n = n;
}

static void hist_observe(coord_hist *h, double v)
{
	if (!(v >= 0))
		v = 0;
	int b = 0;
	while (b < h->n && v > h->le[b])
		b++;
	h->counts[b]++;
	h->count++;
	h->sum += v;
}

int coord_metrics_create(coord_metrics **out)
{
	coord_metrics *m = calloc(1, sizeof *m);
	if (!m)
		return SL_ENOMEM;
	for (int i = 0; i < COORD_MAX_MODELS; i++) {
		coord_model_metrics *mm = &m->models[i];
		hist_init(&mm->ttft_s, TTFT_LE, NB(TTFT_LE));
		hist_init(&mm->itl_s, ITL_LE, NB(ITL_LE));
		hist_init(&mm->e2e_s, E2E_LE, NB(E2E_LE));
		hist_init(&mm->queue_s, QUEUE_LE, NB(QUEUE_LE));
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	m->start_unix = ts.tv_sec + ts.tv_nsec * 1e-9;
	*out = m;
	return SL_OK;
}

void coord_metrics_destroy(coord_metrics *m) { free(m); }

void coord_metrics_tokens(coord_metrics *m, const coord_req *r, int n, double now)
{
	coord_model_metrics *mm = &m->models[r->model];
	if (n <= 0)
		return;
	if (r->t_last_token <= 0) { /* the first token(s) of this run */
		hist_observe(&mm->ttft_s, now - r->t_submit);
		if (r->t_assigned > 0)
			hist_observe(&mm->queue_s, r->t_assigned - r->t_submit);
		return;
	}
	/* tokens that arrive together are taken as evenly spaced since the last */
	double gap = (now - r->t_last_token) / n;
	for (int i = 0; i < n; i++)
		hist_observe(&mm->itl_s, gap);
}

void coord_metrics_finish(coord_metrics *m, const coord_req *r, int fin, double now)
{
	coord_model_metrics *mm = &m->models[r->model];
	mm->finished[fin]++;
	mm->prompt_tokens += (uint64_t)r->n_prompt;
	mm->generation_tokens += (uint64_t)r->n_generated;
	if (fin <= COORD_FIN_EOS)
		hist_observe(&mm->e2e_s, now - r->t_submit);
}

void coord_metrics_http(coord_metrics *m, const char *endpoint, int code)
{
	for (int i = 0; i < m->n_http; i++)
		if (m->http[i].endpoint == endpoint && m->http[i].code == code) {
			m->http[i].n++;
			return;
		}
	if (m->n_http == COORD_METRICS_MAX_CODES)
		return;
	m->http[m->n_http].endpoint = endpoint;
	m->http[m->n_http].code = code;
	m->http[m->n_http++].n = 1;
}

/* --- rendering ---------------------------------------------------------- */

/* The exposition being written; failed: a line did not fit or no memory. */
typedef struct expo { sl_buf *b; int failed; } expo;

static void put(expo *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(expo *o, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof buf || sl_buf_put(o->b, buf, (size_t)n))
		o->failed = 1;
}

/* A label value with \, " and newline escaped, as the format asks. */
static const char *label(const char *s, char *buf, size_t n)
{
	size_t k = 0;
	for (; *s && k + 3 < n; s++) {
		if (*s == '\\' || *s == '"')
			buf[k++] = '\\', buf[k++] = *s;
		else if (*s == '\n')
			buf[k++] = '\\', buf[k++] = 'n';
		else
			buf[k++] = *s;
	}
	buf[k] = 0;
	return buf;
}

static void family(expo *o, const char *name, const char *type, const char *help)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist_render(expo *o, const char *name, const char *model, const coord_hist *h)
{
	uint64_t cum = 0;
	for (int b = 0; b < h->n; b++) {
		cum += h->counts[b];
		put(o, "%s_bucket{model=\"%s\",le=\"%g\"} %llu\n", name, model, h->le[b],
		    (unsigned long long)cum);
	}
	put(o, "%s_bucket{model=\"%s\",le=\"+Inf\"} %llu\n", name, model, (unsigned long long)h->count);
	put(o, "%s_sum{model=\"%s\"} %.9g\n", name, model, h->sum);
	put(o, "%s_count{model=\"%s\"} %llu\n", name, model, (unsigned long long)h->count);
}

static void render_requests(expo *o, const coord *c, char (*names)[2 * COORD_MAX_NAME + 8])
{
	const coord_metrics *m = c->metrics;
	family(o, "shardline_requests_total", "counter",
	     "Requests ended, by model and finish reason (timeout: the request's deadline passed).");
	for (int i = 0; i < c->n_models; i++)
		for (int f = 0; f < COORD_FIN_KINDS; f++)
			put(o, "shardline_requests_total{model=\"%s\",finish_reason=\"%s\"} %llu\n", names[i],
			    FIN_NAME[f], (unsigned long long)m->models[i].finished[f]);
	family(o, "shardline_prompt_tokens_total", "counter", "Prompt tokens of ended requests.");
	for (int i = 0; i < c->n_models; i++)
		put(o, "shardline_prompt_tokens_total{model=\"%s\"} %llu\n", names[i],
		    (unsigned long long)m->models[i].prompt_tokens);
	family(o, "shardline_generation_tokens_total", "counter", "Tokens generated for ended requests.");
	for (int i = 0; i < c->n_models; i++)
		put(o, "shardline_generation_tokens_total{model=\"%s\"} %llu\n", names[i],
		    (unsigned long long)m->models[i].generation_tokens);
	static const struct {
		const char *name, *help;
		size_t off;
	} H[] = {
		{"shardline_time_to_first_token_seconds", "Submit to the first generated token.",
		 offsetof(coord_model_metrics, ttft_s)},
		{"shardline_inter_token_latency_seconds",
		 "Gap between consecutive tokens of a request (tokens arriving together share it).",
		 offsetof(coord_model_metrics, itl_s)},
		{"shardline_e2e_request_latency_seconds",
		 "Submit to the end of requests that finished normally (length, stop, eos).",
		 offsetof(coord_model_metrics, e2e_s)},
		{"shardline_queue_time_seconds", "Submit to being sent to a node group.",
		 offsetof(coord_model_metrics, queue_s)},
	};
	for (size_t k = 0; k < sizeof H / sizeof H[0]; k++) {
		family(o, H[k].name, "histogram", H[k].help);
		for (int i = 0; i < c->n_models; i++)
			hist_render(o, H[k].name, names[i],
				    (const coord_hist *)((const char *)&m->models[i] + H[k].off));
	}
}

static void render_state(expo *o, const coord *c, char (*names)[2 * COORD_MAX_NAME + 8])
{
	int running = 0;
	for (const coord_req *r = c->all; r; r = r->anext)
		running += r->state == REQ_ASSIGNED;
	family(o, "shardline_queue_depth", "gauge", "Requests waiting in the coordinator for a node group.");
	put(o, "shardline_queue_depth %d\n", c->n_queued);
	family(o, "shardline_requests_running", "gauge", "Requests sent to a node group and not yet ended.");
	put(o, "shardline_requests_running %d\n", running);
	family(o, "shardline_requeued_total", "counter",
	     "Requests moved off a lost node group to another, since start.");
	put(o, "shardline_requeued_total %ld\n", c->n_requeued);
	family(o, "shardline_migrated_total", "counter",
	     "Of those, requests moved mid-stream: they went on from the tokens already sent.");
	put(o, "shardline_migrated_total %ld\n", c->n_migrated);
	static const struct { const char *name, *help; } G[] = {
		{"shardline_kv_blocks_used", "KV cache blocks in use, per node group (its last report)."},
		{"shardline_kv_blocks_free", "KV cache blocks free, per node group (its last report)."},
		{"shardline_group_running", "Sequences running in a node group's engine."},
		{"shardline_group_waiting", "Requests a node group's leader holds, not yet running."},
		{"shardline_group_live", "1 while a node group is live and takes work, 0 while it drains."},
	};
	for (size_t k = 0; k < sizeof G / sizeof G[0]; k++) {
		family(o, G[k].name, "gauge", G[k].help);
		for (int i = 0; i < c->n_groups; i++) {
			const coord_group *g = c->groups[i];
			int v = k == 0 ? g->kv_blocks - g->kv_free : k == 1 ? g->kv_free : k == 2 ? g->running
				: k == 3 ? g->waiting : !g->lost && !g->draining;
			put(o, "%s{group=\"%u\",model=\"%s\"} %d\n", G[k].name, g->id, names[g->model], v);
		}
	}
	static const struct { const char *name, *help; } L[] = {
		{"shardline_group_max_silence_seconds",
		 "The longest gap between two messages of a node group's leader (heartbeats flow "
		 "during steps too: above 2 heartbeats means trouble)."},
		{"shardline_group_step_seconds",
		 "How long the step a node group runs now has run (its last report; 0: idle)."},
	};
	for (size_t k = 0; k < sizeof L / sizeof L[0]; k++) {
		family(o, L[k].name, "gauge", L[k].help);
		for (int i = 0; i < c->n_groups; i++) {
			const coord_group *g = c->groups[i];
			double v = k == 0 ? g->max_gap : g->in_step_ms * 1e-3;
			put(o, "%s{group=\"%u\",model=\"%s\"} %.3f\n", L[k].name, g->id, names[g->model], v);
		}
	}
	static const struct { const char *name, *type, *help; } P[] = {
		{"shardline_prefix_cache_blocks", "gauge",
		 "KV blocks a node group holds in its prefix cache, in use or not (its last report)."},
		{"shardline_prefix_cache_queried_tokens_total", "counter",
		 "Tokens of sequences a node group started with its prefix cache on."},
		{"shardline_prefix_cache_hit_tokens_total", "counter",
		 "Of those, tokens reused from the group's prefix cache instead of computed."},
		{"shardline_prefix_cache_evictions_total", "counter",
		 "Cached KV blocks a node group evicted to make room."},
		{"shardline_route_prefix_tokens_total", "counter",
		 "Prompt tokens the coordinator found cached on the group it routed each request to."},
	};
	for (size_t k = 0; k < sizeof P / sizeof P[0]; k++) {
		family(o, P[k].name, P[k].type, P[k].help);
		for (int i = 0; i < c->n_groups; i++) {
			const coord_group *g = c->groups[i];
			long v = k == 0 ? g->cache_blocks : k == 1 ? g->cache_queried : k == 2 ? g->cache_hit
				 : k == 3 ? g->cache_evictions : g->routed_prefix_tokens;
			put(o, "%s{group=\"%u\",model=\"%s\"} %ld\n", P[k].name, g->id, names[g->model], v);
		}
	}
	family(o, "shardline_model_live_groups", "gauge",
	     "Live node groups that take work, per configured model (/health needs 1 or more for each).");
	for (int i = 0; i < c->n_models; i++) {
		int n = 0;
		for (int k = 0; k < c->n_groups; k++)
			n += c->groups[k]->model == i && !c->groups[k]->lost && !c->groups[k]->draining;
		put(o, "shardline_model_live_groups{model=\"%s\"} %d\n", names[i], n);
	}
}

static void render_http(expo *o, const coord_metrics *m, int http_connections)
{
	family(o, "shardline_http_connections", "gauge", "Open HTTP connections.");
	put(o, "shardline_http_connections %d\n", http_connections);
	family(o, "shardline_http_responses_total", "counter", "HTTP responses, by endpoint and status code.");
	for (int i = 0; i < m->n_http; i++)
		put(o, "shardline_http_responses_total{endpoint=\"%s\",code=\"%d\"} %llu\n",
		    m->http[i].endpoint, m->http[i].code, (unsigned long long)m->http[i].n);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3; /* ".", ".." and the DIR's own descriptor */
}

static void render_process(expo *o, const coord_metrics *m)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
		     ru.ru_stime.tv_usec * 1e-6;
	long rss_pages = 0, size = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%ld %ld", &size, &rss_pages) != 2)
			rss_pages = 0;
		fclose(f);
	}
	family(o, "process_cpu_seconds_total", "counter", "User and system CPU time of the coordinator.");
	put(o, "process_cpu_seconds_total %.6f\n", cpu);
	family(o, "process_resident_memory_bytes", "gauge", "Resident memory of the coordinator.");
	put(o, "process_resident_memory_bytes %ld\n", rss_pages * sysconf(_SC_PAGESIZE));
	family(o, "process_open_fds", "gauge", "Open file descriptors (sockets included).");
	put(o, "process_open_fds %d\n", open_fds());
	family(o, "process_start_time_seconds", "gauge", "Start time of the coordinator, Unix seconds.");
	put(o, "process_start_time_seconds %.3f\n", m->start_unix);
}

int coord_metrics_render(const coord *c, int http_connections, sl_buf *b)
{
	expo o = {b, 0};
	char names[COORD_MAX_MODELS][2 * COORD_MAX_NAME + 8];
	for (int i = 0; i < c->n_models; i++)
		label(c->models[i].name, names[i], sizeof names[i]);
	render_requests(&o, c, names);
	render_state(&o, c, names);
	render_http(&o, c->metrics, http_connections);
	render_process(&o, c->metrics);
	return o.failed ? SL_ENOMEM : SL_OK;
}
