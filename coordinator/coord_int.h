/*
 * coord_int.h — the coordinator's state, shared by its files. They stand
 * in layers, each calling only the ones below it (top first):
 *   coord.c      the loop, timers, sockets, create/destroy
 *   http.c       the HTTP server (libmicrohttpd) inside the loop: limits,
 *                auth, routing, /health, /metrics, client disconnects
 *   on_client.c  the ZeroMQ front door: Submit decoded into a coord_request,
 *                cancel, status, drain; events encoded as Chunk/Done
 *   openai.c     the HTTP front door, the OpenAI API: the exchange, with
 *                openai_request.c (JSON in, coord_requests out) and
 *                openai_response.c (events back to JSON, SSE; /v1/models)
 *   on_node.c    leader messages: register, heartbeat, tokens; group loss
 *   submit.c     the request core of both front doors: validation,
 *                tokenizing, a request made, queued and routed
 *   route.c      which group gets a queued request: cached prefix and load
 *   stream.c     tokens -> text deltas, EOS, stop strings, the end (events)
 *   requests.c   the request table (by id), the queue, request life cycle
 *   send.c       every ZeroMQ message out: client replies, node messages
 *                (a request as Enqueue and Cancel)
 *   http_call.c  one HTTP exchange's answer: response, SSE, suspend/resume
 *   metrics.c    Prometheus counters and histograms, the exposition
 *   buffers.c    growable ids and log-probs (bytes: common/buf.h)
 *   prefix.c     a group's cached block hashes (prefix.h; calls nothing
 *                here): on_node.c feeds it, route.c reads it
 *   standby.c    Binary Star's state (standby.h; calls nothing here):
 *                coord.c and http.c ask it whether to serve a client
 * A request's events go to its sink (coord_sink), set by the front door
 * that made it: the layers below call the front door only through it.
 * Protobuf and JSON live at the edges (on_client.c, on_node.c, send.c;
 * openai*.c, http*.c); the core passes coord_request, coord_req and
 * coord_event, with sampling as common/sampling.h's sl_sampling.
 * Nothing here is visible outside coordinator/.
 */
#ifndef COORD_INT_H
#define COORD_INT_H

#include <stdint.h>

#include "common/buf.h"
#include "common/constraint.h"
#include "common/sampling.h"
#include "coordinator/coord.h"
#include "proto/client.pb-c.h"
#include "proto/node.pb-c.h"
#include "coordinator/model_meta.h"
#include "text/tokenizer/tokenizer.h"
#include "proto/wire.h"

#define COORD_MAX_GROUPS 256
#define COORD_MAX_NAME 128
#define COORD_MAX_EOS 8
#define COORD_MAX_FRAME (1 << 20)        /* client message limit: an error reply past it */
#define COORD_SOCKET_MAX_MSG (64 << 20)  /* ZeroMQ drops the peer past this */
#define COORD_MAX_PROMPT_BYTES (256 << 10)
#define COORD_MAX_PROMPT_IDS 65536
#define COORD_MAX_NEW_TOKENS (1 << 20)
#define COORD_MAX_STOPS 16
#define COORD_MAX_STOP_BYTES 256
#define COORD_MAX_TIMEOUT_MS (24 * 3600 * 1000)
#define COORD_DEAD_INTERVALS 3
#define COORD_REQ_BUCKETS 4096

struct coord_http;
struct coord_metrics;
struct text_tmpl;

typedef struct coord_model {
	char name[COORD_MAX_NAME + 1];
	coord_model_meta *meta;    /* owns tok; chat template, BOS/EOS strings */
	text_tok *tok;
	struct text_tmpl *tmpl;   /* the chat template; NULL: no chat for this model */
	int tool_family;           /* text_tool_family its template's tool calls follow */
	int tmpl_knows_tools;      /* the template renders `tools` itself */
	int32_t eos[COORD_MAX_EOS];
	int n_eos;
	int vocab;                 /* the tokenizer's */
	double dead_since;         /* no live group serves it since then; 0: one does */
} coord_model;

typedef struct coord_group {
	uint32_t id;
	uint8_t ident[SL_WIRE_MAX_IDENT];
	size_t ident_len;
	uint64_t session;
	char name[COORD_MAX_NAME + 1];
	int model;
	int tp, pp, kv_blocks, block_tokens, max_pos, vocab, max_running, max_waiting;
	int running, waiting, kv_free, draining;   /* from its last Load */
	int assigned;              /* requests sent to it and not finished */
	double last_seen, last_ping;
	double max_gap;            /* the longest silence between two of its messages, s */
	long long steps, in_step_ms, progress; /* its last Load's step counters */
	long long busy_logged;     /* the step whose length was logged (steps + 1) */
	int has_progress;          /* a Load with step counters came */
	long long still_since_ms;  /* the step's age (in_step_ms) when its progress last moved */
	int stalled;               /* a step made no progress for --stall-ms: no new work */
	int lost;                  /* send failed (peer gone): reap at the next tick */
	int leaving;               /* its Load said it leaves now: forget it at once */
	/* prefix cache (docs/scheduling.md) */
	int prefix_cache;          /* it caches prefixes and reports its block hashes */
	struct coord_prefix *cached; /* the hashes it reported holding (prefix.h); NULL: none */
	long cache_queried, cache_hit, cache_evictions; /* its last Load's counters */
	int cache_blocks;
	long routed_prefix_tokens; /* prompt tokens found cached there when routed there */
} coord_group;

typedef enum { REQ_QUEUED = 0, REQ_ASSIGNED } coord_req_state;

/* Growable id buffers (bytes: common/buf.h). */
typedef struct coord_ids { int32_t *p; size_t n, cap; } coord_ids;

struct coord_req;
struct coord_event;

/* What a front door does for the requests it made. stream.c and
 * requests.c reach the front door through these, never by name, so the
 * core knows neither transport. */
typedef struct coord_sink_ops {
	/* r was just made (inside coord_submit, before it can end): the front
	 * door may hold it until its Done or detach. NULL: nothing to do. */
	void (*attach)(struct coord_req *r);
	/* A Chunk or Done of r. One that cannot be delivered marks r
	 * client_gone (the tick cancels r). */
	void (*reply)(coord *c, struct coord_req *r, const struct coord_event *ev);
	/* r is freed before its Done reached the front door. NULL: nothing. */
	void (*detach)(struct coord_req *r);
} coord_sink_ops;

/* Where a request's replies go: set by the front door that made it
 * (on_client.c: a ZeroMQ client; openai.c: one choice of an HTTP
 * exchange). ops NULL: detached, its replies are dropped. */
typedef struct coord_sink {
	const coord_sink_ops *ops;
	void *ctx;                 /* the front door's own (HTTP: the exchange) */
	int choice;                /* HTTP: its index among the exchange's choices */
	uint8_t client[SL_WIRE_MAX_IDENT]; /* ZeroMQ: the client's routing id */
	size_t client_len;
} coord_sink;

/* Log-probs of the ids in a coord_ids, entry for entry: each id's own and
 * top_n alternatives (row i of top_ids / top at [i * top_n, ...)). */
typedef struct coord_logprobs {
	float *lp;                 /* [n] */
	int32_t *top_ids;          /* [n, top_n] */
	float *top;                /* [n, top_n] */
	size_t n, cap;
	int top_n;                 /* min(top_logprobs, the group's vocabulary) */
} coord_logprobs;

/* The log-probs of n tokens as a group sent them (layout as above). */
typedef struct coord_lp_view {
	const float *lp;
	const int32_t *top_ids;
	const float *top;
	int top_n;
} coord_lp_view;

/* A byte string borrowed from a decoded message. */
typedef struct coord_str { const char *p; size_t n; } coord_str;

/* One generation request as a front door hands it to coord_submit:
 * decoded from a protobuf Submit (on_client.c) or from OpenAI JSON
 * (openai_request.c). Borrowed for the call: coord_submit copies what it
 * keeps. Every field is checked there, the sampling ones by
 * sl_sampling_check (common/sampling.h). */
typedef struct coord_request {
	uint64_t tag;
	const char *model;         /* NULL or "": the coordinator's first model */
	coord_str prompt;          /* text (n 0: none) ... */
	const int32_t *prompt_ids; /* ... or ids [n_prompt_ids]: exactly one of them */
	size_t n_prompt_ids;
	sl_sampling sampling;
	int has_max_tokens;        /* 0: the coordinator's default */
	int max_tokens;            /* new tokens, [1, COORD_MAX_NEW_TOKENS] */
	const coord_str *stop;     /* [n_stop] */
	size_t n_stop;
	int stream;                /* 0: one Done with the whole text */
	int ignore_eos;
	int add_special;           /* BOS before a text prompt */
	uint32_t timeout_ms;       /* 0: the coordinator's default */
	sl_constraint_kind constraint_kind; /* common/constraint.h; NONE: free */
	coord_str constraint;      /* its text (JSON: empty) */
	int keep_special;          /* special tokens' text stays in the output (tool
				    * calls: Llama's <|python_tag|>, Mistral's [TOOL_CALLS]) */
	sl_token_lists lists;      /* logit_bias, stop_token_ids (common/sampling.h) */
} coord_request;

/* What a request sends its front door: text as it is released, then the
 * end. Pointers are into the request, valid during the sink's call. */
typedef enum { COORD_EV_CHUNK, COORD_EV_DONE } coord_event_kind;
typedef struct coord_event {
	coord_event_kind kind;
	uint64_t tag;
	int has_text;              /* chunk: always; done: stream = false (the whole text) */
	coord_str text;
	const int32_t *ids;        /* chunk: since the last one; done (stream = false): all */
	size_t n_ids;
	const coord_logprobs *lps; /* of ids, entry for entry; NULL: not asked for */
	/* done */
	Shardline__Client__FinishReason finish;
	const char *error;         /* finish ERROR: why */
	int prompt_tokens, completion_tokens;
	double queue_ms, ttft_ms, total_ms;
} coord_event;

typedef struct coord_req {
	uint64_t id, tag;
	coord_sink sink;           /* where its replies go */
	int client_gone;           /* a reply could not be delivered */
	int timed_out;             /* ended by its deadline (HTTP: 408) */
	int model;
	int32_t *prompt;           /* [n_prompt] */
	int n_prompt;
	int32_t max_prompt_id;
	sl_sampling sampling;
	int max_tokens, ignore_eos, stream;
	char **stop;               /* [n_stop] NUL-terminated copies */
	size_t *stop_len;
	sl_constraint_kind constraint_kind; /* constrained decoding: checked at submit */
	char *constraint;          /* [constraint_len] its text, a copy (NULL: none) */
	size_t constraint_len;
	int n_stop;
	size_t max_stop_len;
	int32_t *bias_ids;         /* [n_bias] logit_bias (copies of coord_request.lists') */
	float *bias;               /* [n_bias] */
	int32_t *stop_ids;         /* [n_stop_ids] stop_token_ids: end it, finish STOP */
	int n_bias, n_stop_ids;
	coord_req_state state;
	coord_group *group;        /* REQ_ASSIGNED */
	int node_done;             /* the group reported it finished */
	/* output */
	text_detok *detok;
	int n_generated, sent_chunk;
	sl_buf held;          /* text not yet sent (stop strings may still match) */
	sl_buf text;          /* stream = false: everything released */
	coord_ids ids;             /* stream: ids since the last chunk; else all */
	coord_ids gen;             /* every id counted in n_generated: a migration's prefill */
	int migrations;            /* times it moved off a lost group mid-stream */
	char failed_on[COORD_MAX_NAME + 1]; /* the group (name) it was last lost on: never again */
	double t_queued;           /* when it last entered the queue */
	coord_logprobs lps;        /* with sampling.logprobs: those of ids, entry for entry */
	double t_submit, t_assigned, t_first, t_last_token, deadline;
	struct coord_req *hnext;               /* id hash chain */
	struct coord_req *qprev, *qnext;       /* the queue (REQ_QUEUED) */
	struct coord_req *aprev, *anext;       /* every active request */
} coord_req;

struct coord {
	coord_opts o;
	void *ctx, *clients, *nodes;
	coord_model models[COORD_MAX_MODELS];
	int n_models;
	coord_group *groups[COORD_MAX_GROUPS];
	int n_groups;
	uint32_t next_group_id;
	coord_req *buckets[COORD_REQ_BUCKETS];
	coord_req *qhead, *qtail;
	int n_queued;
	coord_req *all;
	int n_active;
	uint64_t next_req_id;      /* random high bits: ids of a restarted coordinator differ */
	long n_requeued;           /* moved off a lost group: re-queued or migrated */
	long n_migrated;           /* of those, moved mid-stream (tokens already sent) */
	double last_tick;
	double next_due;           /* the earliest timer the last tick saw (coord.c) */
	uint64_t due_scan_id;      /* requests from this id on are newer than that */
	double mem_checked;        /* coord_mem_release's last look */
	struct coord_http *http;   /* NULL: no HTTP API */
	struct coord_auth *auth;   /* CURVE's ZAP handler (auth.h); NULL: CURVE off */
	struct coord_standby *standby; /* Binary Star (standby.h); NULL: a lone coordinator */
	struct coord_metrics *metrics; /* fed by stream.c and http.c (metrics.h) */
};

/* buffers.c; each SL_ENOMEM (contents kept) or 0 */
int coord_ids_add(coord_ids *b, const int32_t *p, size_t n);
/* Token i of v onto b (b takes v's top_n on its first entry). */
int coord_logprobs_add(coord_logprobs *b, const coord_lp_view *v, size_t i);
void coord_logprobs_free(coord_logprobs *b);
/* The heap policy: once at start; then from the tick (last_check: its
 * state, 0 at first), which hands free memory back to the system. */
void coord_mem_setup(void);
void coord_mem_release(double now, double *last_check);

/* requests.c */
coord_req *coord_req_new(coord *c);
coord_req *coord_req_find(coord *c, uint64_t id);
void coord_req_enqueue(coord *c, coord_req *r, int front);
void coord_req_dequeue(coord *c, coord_req *r);
/* Reset output so the request can run again from its prompt (re-queue). */
void coord_req_reset_output(coord_req *r);
/* Unlink and free; tells its group to cancel it when it still runs there,
 * and its front door (sink detach) that it is gone. */
void coord_req_free(coord *c, coord_req *r);

/* send.c */
/* To a client by routing id (status replies); SL_ECOMM, *zerrno set, on failure. */
int coord_send_client(coord *c, const void *client, size_t client_len,
		      const Shardline__Client__Reply *rep, int *zerrno);
void coord_reply_error(coord *c, const void *client, size_t client_len, uint64_t tag,
		       Shardline__Client__ErrorCode code, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
/* To g's leader; a failed send marks g lost (the tick reaps it). */
int coord_send_node(coord *c, coord_group *g, Shardline__Node__CoordMsg *m);
/* To a leader by routing id, registered or not; failures are ignored. */
void coord_send_ident(coord *c, const void *ident, size_t len, Shardline__Node__CoordMsg *m);
void coord_send_ping(coord *c, coord_group *g);
/* r to group g's leader (Enqueue: from its prompt, or where a lost group
 * left it); SL_ENOMEM, or a failed send (g is then marked lost). */
int coord_node_enqueue(coord *c, coord_group *g, const coord_req *r);
/* r's group, which still runs it, frees its slot and KV blocks. */
void coord_node_cancel(coord *c, const coord_req *r);

/* on_client.c */
void coord_on_client(coord *c, sl_wire_msg *m);

/* submit.c */
/* The submit path of both transports: every field of q checked, the
 * prompt tokenized, a request made for sink `to` (copied into it; its
 * attach op is called), queued and dispatched. 0, or the ErrorCode with
 * err saying why. */
int coord_submit(coord *c, const coord_request *q, const coord_sink *to, char *err, size_t n);
/* Defaults of the fields a message may leave out: stream, add_special,
 * the sampling ones; everything else absent. */
void coord_request_init(coord_request *q);

/* on_node.c */
void coord_on_node(coord *c, sl_wire_msg *m);
void coord_group_lost(coord *c, coord_group *g, const char *why);
/* g is stalled (its step makes no progress): its requests go back to the
 * queue, never to g again, when another group can take them (route.c);
 * else they stay. The number moved. Called on the stall and every tick. */
int coord_group_unload_stalled(coord *c, coord_group *g);
/* Free a group struct and what it owns. */
void coord_group_free(coord_group *g);

/* route.c */
void coord_dispatch(coord *c);
/* Context (tokens) of the largest live group serving model m; 0: none live. */
int coord_model_context(const coord *c, int m);
/* Queued requests of models no live group has served for the admission
 * timeout (--admission-timeout-ms) end with an error; called every turn. */
void coord_expire_unserved(coord *c);
/* Whether a live (not draining) group serves model m. */
int coord_model_live(coord *c, int m);
/* Whether a group other than g that takes new work serves g's model. */
int coord_model_routable_elsewhere(const coord *c, const coord_group *g);

/* stream.c */
/* n new tokens of r from its group, and their log-probs (lp: NULL when r
 * did not ask for them; checked by the caller: one per token). */
void coord_stream_tokens(coord *c, coord_req *r, const int32_t *ids, size_t n,
			 const coord_lp_view *lp, Shardline__Node__Finish node_finish,
			 const char *node_error);
/* End r with reason (text flushed unless it is CANCELLED/ERROR), send Done, free r. */
void coord_finish(coord *c, coord_req *r, Shardline__Client__FinishReason reason,
		  const char *error);

#endif
