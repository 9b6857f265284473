/*
 * client.h — a small C client of the coordinator (proto/client.proto),
 * used by the `shardline` CLI and the integration tests.
 *
 * One sl_client is one DEALER connection; it can carry many requests
 * at once, told apart by the tag it assigns in sl_client_submit.
 * Replies arrive as events from sl_client_next: Chunk (text delta and
 * token ids), Done (the last message of a request, with the finish
 * reason, usage and timings), Error (a refused request or frame), Status.
 * Not thread-safe: one thread per client (ZeroMQ sockets are not shared).
 *
 * Liveness (docs/protocol.md, "Heartbeats"): while it has requests
 * waiting, sl_client_next pings the coordinator every heartbeat interval.
 * A coordinator that leaves a ping unanswered for 2 intervals (so: within
 * 3 intervals of its last message), or one that answers as a new
 * instance (restarted), is taken as gone: requests that had received
 * tokens (and Drains) end at once with an SL_ERR_UNAVAILABLE Error;
 * requests that had not, and Status asks, are kept, and re-submitted
 * (same tag) on a fresh connection (the next endpoint of EP1,EP2) once
 * the coordinator answers again, at most max_resubmits times each and
 * within reconnect_ms (or their timeout_ms, when shorter); past that they
 * too end with SL_ERR_UNAVAILABLE.
 */
#ifndef SL_CLIENT_H
#define SL_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/constraint.h"

typedef struct sl_client sl_client;

/* What to generate. Zero means "the coordinator's default" (off) for
 * every number but temperature (0 is greedy) and seed; docs/sampling.md
 * says what each does. */
typedef struct sl_gen_params {
	const char *model;                 /* NULL: the coordinator's first */
	const char *prompt;                /* text, or */
	size_t prompt_len;                 /* 0 with prompt: strlen(prompt) */
	const int32_t *prompt_ids;         /* token ids */
	int n_prompt_ids;
	int max_tokens;
	float temperature, top_p;
	int top_k;
	uint64_t seed;
	float min_p;                       /* [0, 1] */
	float presence_penalty;            /* [-2, 2] */
	float frequency_penalty;           /* [-2, 2] */
	float repetition_penalty;          /* (0, 10]; 0: not sent (1, off) */
	int logprobs;                      /* each token's log-prob */
	int top_logprobs;                  /* and this many alternatives, 0..20 */
	const char *const *stop;
	int n_stop;
	/* logit_bias: logit_bias[i] (in [-100, 100]) added to the logit of token
	 * logit_bias_ids[i] before sampling; ids distinct, at most 300 */
	const int32_t *logit_bias_ids;
	const float *logit_bias;
	int n_logit_bias;
	int min_tokens;                    /* EOS and stop_token_ids masked until this many */
	const int32_t *stop_token_ids;     /* end the generation like EOS (finish stop), <= 32 */
	int n_stop_token_ids;
	int no_stream;                     /* one Done with the whole text */
	int ignore_eos;
	unsigned timeout_ms;
	/* Constrained decoding (common/constraint.h, docs/protocol.md): the
	 * output obeys constraint (constraint_len bytes; 0: strlen), read as
	 * constraint_kind says; NONE (0): free. A bad one ends the request
	 * with an INVALID error before it runs. */
	sl_constraint_kind constraint_kind;
	const char *constraint;
	size_t constraint_len;
} sl_gen_params;

typedef enum {
	SL_EV_CHUNK = 1, SL_EV_DONE, SL_EV_ERROR, SL_EV_STATUS
} sl_event_kind;

/* Done finish reasons and Error codes: the values of client.proto. */
enum { SL_FINISH_LENGTH = 1, SL_FINISH_STOP, SL_FINISH_EOS, SL_FINISH_CANCELLED,
       SL_FINISH_ERROR, SL_FINISH_REFUSED /* the request as asked cannot be served: message */ };
enum { SL_ERR_MALFORMED = 1, SL_ERR_BAD_REQUEST, SL_ERR_UNKNOWN_MODEL,
       SL_ERR_OVERLOADED, SL_ERR_NOT_FOUND, SL_ERR_INTERNAL,
       SL_ERR_UNAVAILABLE = 100 /* made by this library: the coordinator is gone */ };

typedef struct sl_group_info {
	unsigned id;
	const char *name, *model;
	int tp, pp, kv_blocks, kv_free, block_tokens, running, waiting, assigned, max_pos, draining;
	double last_seen_ms;
	/* prefix cache (docs/scheduling.md): on or off, blocks held, tokens of
	 * sequences started and of those reused, blocks evicted; prompt tokens
	 * the coordinator saw cached there when it routed requests to it */
	int prefix_cache, cache_blocks;
	long cache_queried_tokens, cache_hit_tokens, cache_evictions, routed_prefix_tokens;
} sl_group_info;

/* One reply. Pointers stay valid until sl_event_release. */
typedef struct sl_event {
	sl_event_kind kind;
	uint64_t tag;
	const char *text;                  /* CHUNK; DONE when not streaming */
	size_t text_len;
	const int32_t *token_ids;
	size_t n_token_ids;
	/* with logprobs asked, CHUNK and DONE (when not streaming): one per
	 * token id, and top_n alternatives each (row i at [i * top_n, ...)),
	 * most likely first */
	const float *logprobs;             /* [n_logprobs] == n_token_ids */
	size_t n_logprobs;
	int top_n;
	const int32_t *top_ids;            /* [n_logprobs, top_n] */
	const float *top_logprobs;         /* [n_logprobs, top_n] */
	int finish;                        /* DONE: SL_FINISH_* */
	int error_code;                    /* ERROR: SL_ERR_* */
	const char *message;               /* ERROR, DONE with an error: why ("" otherwise) */
	int prompt_tokens, completion_tokens;
	double queue_ms, ttft_ms, total_ms;
	/* STATUS */
	sl_group_info *groups;
	int n_groups, queued, max_queue, active;
	long requeued;
	void *priv;
	char *owned;                       /* message of an event this library made */
} sl_event;

/* How to reach the coordinator. Zero fields take the defaults. */
typedef struct sl_client_opts {
	const char *endpoint;              /* tcp://127.0.0.1:5555 */
	int heartbeat_ms;                  /* ping interval while waiting: 1000; < 0: no pings */
	int reconnect_ms;                  /* a held request waits this long for the coordinator: 10000 */
	int max_resubmits;                 /* per request: 3; < 0: none (held requests end at once) */
	const char *curve_key;             /* CURVE (docs/security.md): this client's secret key file */
	const char *curve_server_key;      /* and the coordinator's public key file; both or neither */
} sl_client_opts;

/* ctx: a ZeroMQ context to share (many clients in one process), or NULL
 * for one of its own. Connecting never waits for the coordinator. */
int sl_client_open(void *ctx, const sl_client_opts *o, sl_client **out, char *err,
			size_t errlen);
/* sl_client_open with the defaults and this endpoint. */
int sl_client_create(void *ctx, const char *endpoint, sl_client **out, char *err,
			size_t errlen);
void sl_client_destroy(sl_client *c);
/* The DEALER socket, to zmq_poll many clients at once. A reconnect
 * replaces it: ask again after each sl_client_next. */
void *sl_client_socket(sl_client *c);
/* 0 while the coordinator answers; else the milliseconds since it was
 * taken as gone (requests held for re-submission wait meanwhile). */
double sl_client_down_ms(const sl_client *c);

int sl_client_submit(sl_client *c, const sl_gen_params *p, uint64_t *tag, char *err,
			size_t errlen);
int sl_client_cancel(sl_client *c, uint64_t tag, char *err, size_t errlen);
int sl_client_status(sl_client *c, uint64_t *tag, char *err, size_t errlen);
/* Drain one group (0: all); with exit its processes leave when idle. */
int sl_client_drain(sl_client *c, unsigned group_id, int exit, char *err, size_t errlen);

/* Wait up to timeout_ms (-1: forever) for the next reply: 1 with *ev
 * filled (release it), 0 on timeout, < 0 on error. A frame that is not a
 * Reply is an error naming its size. Pings go out and Pongs are taken in
 * here: call it at least once a heartbeat while requests wait. */
int sl_client_next(sl_client *c, int timeout_ms, sl_event *ev, char *err, size_t errlen);
void sl_event_release(sl_event *ev);

const char *sl_finish_name(int finish);
const char *sl_error_name(int code);

#endif
