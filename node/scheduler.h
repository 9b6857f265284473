/*
 * scheduler.h — the serving leader's scheduler: which requests enter the
 * engine and when, and what each engine step produced for each request.
 *
 * The leader (node/leader.c) submits requests by the coordinator's id,
 * cancels them, and calls node_sched_step once per loop turn; it never
 * touches the engine's sequences itself. Admission policy lives only here.
 *
 * Two admission policies, both first come first admitted with no
 * overtaking (a long prompt at the head of the queue waits for its blocks
 * rather than being starved by shorter ones behind it), both while fewer
 * than max_running sequences run (docs/scheduling.md):
 *
 *   continuous (default): admit when the KV blocks for the prompt are free,
 *     after what the running sequences still need. Sequences grow into the
 *     pool as they decode; when it runs out the engine preempts the newest
 *     and recomputes it later (engine.h). Uses the pool fully.
 *   simple: admit only when the pool can hold every admitted sequence at
 *     its full length (prompt + max_new_tokens), so nothing is ever
 *     preempted but most of the pool sits reserved and unused. Kept to
 *     measure continuous batching against.
 *
 * Either way each engine step carries every running sequence's decode
 * token plus prefill chunks under the step's token budget.
 */
#ifndef NODE_SCHED_H
#define NODE_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "node/engine.h"

typedef struct node_sched node_sched;

typedef enum { NODE_SCHED_CONTINUOUS = 0, NODE_SCHED_SIMPLE } node_sched_policy;

typedef struct node_sched_opts {
	int max_running;  /* sequences in the engine at once (>= 1) */
	int max_waiting;  /* submitted requests beyond those (>= 0) */
	node_sched_policy policy;
} node_sched_opts;

typedef enum {
	NODE_SCHED_RUNNING = 0, NODE_SCHED_LENGTH, NODE_SCHED_EOS, NODE_SCHED_ERROR,
	NODE_SCHED_REFUSED /* the request as asked cannot be served (its constraint) */
} node_sched_finish;

/* What one step did for one request. */
typedef struct node_sched_event {
	uint64_t req_id;
	const int32_t *tokens;    /* new tokens since its last event (owned by the scheduler) */
	int n_tokens;
	node_sched_finish finish; /* not RUNNING: the request is gone from the scheduler */
	const char *error;        /* with NODE_SCHED_ERROR and NODE_SCHED_REFUSED */
	/* when the request asked for log-probs, those of the n_tokens (the
	 * layout of node_logprobs; NULL otherwise; owned by the scheduler) */
	const float *logprobs;
	const int32_t *top_ids;
	const float *top_logprobs;
	int top_n;
} node_sched_event;

int node_sched_create(node_engine *e, const node_sched_opts *o, node_sched **out, char *err,
		      size_t errlen);
void node_sched_destroy(node_sched *s);

/* Take a request (the prompt is copied, r->matcher taken over whether
 * this succeeds or not). SL_EINVAL when it can never run here (err says
 * why), SL_ENOMEM when the waiting queue is full, or an id already
 * present. */
int node_sched_submit(node_sched *s, uint64_t req_id, const node_request *r, char *err,
		      size_t errlen);
/* Forget a request, waiting or running, freeing its KV blocks. */
int node_sched_cancel(node_sched *s, uint64_t req_id);
void node_sched_cancel_all(node_sched *s);
/* Forget every request whose id match() accepts (the leader: those of one
 * coordinator of a standby pair). */
void node_sched_cancel_if(node_sched *s, int (*match)(uint64_t req_id, void *arg), void *arg);
/* Remove every request, reporting each as a NODE_SCHED_ERROR event with
 * reason why (the engine failed). */
void node_sched_fail_all(node_sched *s, const char *why, const node_sched_event **events,
			 int *n_events);

/* Admit what fits, run one engine step when anything runs, and report.
 * *events (owned by s) stays valid until the next call. An error return
 * means the engine failed: the group cannot go on. */
int node_sched_step(node_sched *s, const node_sched_event **events, int *n_events, char *err,
		    size_t errlen);

int node_sched_busy(const node_sched *s);     /* any request waiting or running */
void node_sched_load(const node_sched *s, int *running, int *waiting, int *kv_free);
const char *node_sched_policy_name(node_sched_policy p);

#endif
