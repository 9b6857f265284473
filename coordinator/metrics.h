/*
 * metrics.h — the coordinator's Prometheus metrics: counters and
 * fixed-bucket histograms fed by the request life cycle (stream.c calls
 * coord_metrics_tokens for every token batch of a request and
 * coord_metrics_finish once at its end; http.c counts its responses), and
 * the gauges read from the coordinator's state when /metrics is rendered
 * (queue depth, running requests, KV blocks and liveness per group) or
 * handed in by the caller that renders (open HTTP connections).
 * Rendered in the Prometheus text format 0.0.4 with HELP and TYPE lines;
 * docs/http.md lists every name.
 *
 * Owned by struct coord (created and destroyed with it); one thread, so
 * no atomics. Transport-neutral: requests over ZeroMQ and over HTTP count
 * alike.
 */
#ifndef COORD_METRICS_H
#define COORD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "coordinator/coord.h"

#define COORD_HIST_MAX_BUCKETS 24
#define COORD_METRICS_MAX_CODES 64   /* distinct (endpoint, status) pairs counted */

/* Finish reasons as metric labels. */
enum { COORD_FIN_LENGTH, COORD_FIN_STOP, COORD_FIN_EOS, COORD_FIN_CANCELLED, COORD_FIN_ERROR,
       COORD_FIN_TIMEOUT, COORD_FIN_KINDS };

typedef struct coord_hist {
	const double *le;          /* [n] upper bounds, ascending; +Inf is implicit */
	int n;
	uint64_t counts[COORD_HIST_MAX_BUCKETS + 1]; /* per bucket, not cumulative; [n]: above the last */
	uint64_t count;
	double sum;
} coord_hist;

typedef struct coord_model_metrics {
	uint64_t finished[COORD_FIN_KINDS];
	uint64_t prompt_tokens, generation_tokens;
	coord_hist ttft_s, itl_s, e2e_s, queue_s;
} coord_model_metrics;

typedef struct coord_metrics {
	coord_model_metrics models[COORD_MAX_MODELS];
	struct {
		const char *endpoint;  /* a static string */
		int code;
		uint64_t n;
	} http[COORD_METRICS_MAX_CODES];
	int n_http;
	double start_unix;         /* process_start_time_seconds */
} coord_metrics;

struct coord;
struct coord_req;
struct sl_buf;

/* Zeroed counters, the process start time taken now; SL_ENOMEM. */
int coord_metrics_create(coord_metrics **out);
void coord_metrics_destroy(coord_metrics *m);
/* n new tokens of r arrived at now (seconds, sl_now()). */
void coord_metrics_tokens(coord_metrics *m, const struct coord_req *r, int n, double now);
/* r ends with fin (COORD_FIN_*). */
void coord_metrics_finish(coord_metrics *m, const struct coord_req *r, int fin, double now);
/* One HTTP response with this status on this endpoint (a static string). */
void coord_metrics_http(coord_metrics *m, const char *endpoint, int code);
/* The whole exposition (text format 0.0.4) appended to out; the gauges
 * the coordinator's state does not hold are handed in (http_connections:
 * open HTTP connections, known to http.c alone). */
int coord_metrics_render(const struct coord *c, int http_connections, struct sl_buf *out);

#endif
