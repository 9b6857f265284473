/*
 * client.h — a small C client of the coordinator (proto/client.proto),
 * used by the `shardline` CLI and the integration tests.
 *
 * One coord_client is one DEALER connection; it can carry many requests
 * at once, told apart by the tag it assigns in coord_client_submit.
 * Replies arrive as events from coord_client_next: Chunk (text delta and
 * token ids), Done (the last message of a request, with the finish
 * reason, usage and timings), Error (a refused request or frame), Status.
 * Not thread-safe: one thread per client (ZeroMQ sockets are not shared).
 */
#ifndef COORD_CLIENT_H
#define COORD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct coord_client coord_client;

/* What to generate. Zero means "the coordinator's default" for every
 * number but temperature (0 is greedy) and seed. */
typedef struct coord_gen_params {
	const char *model;                 /* NULL: the coordinator's first */
	const char *prompt;                /* text, or */
	size_t prompt_len;                 /* 0 with prompt: strlen(prompt) */
	const int32_t *prompt_ids;         /* token ids */
	int n_prompt_ids;
	int max_tokens;
	float temperature, top_p;
	int top_k;
	uint64_t seed;
	const char *const *stop;
	int n_stop;
	int no_stream;                     /* one Done with the whole text */
	int ignore_eos;
	unsigned timeout_ms;
} coord_gen_params;

typedef enum {
	COORD_EV_CHUNK = 1, COORD_EV_DONE, COORD_EV_ERROR, COORD_EV_STATUS
} coord_event_kind;

/* Done finish reasons and Error codes: the values of client.proto. */
enum { COORD_FINISH_LENGTH = 1, COORD_FINISH_STOP, COORD_FINISH_EOS, COORD_FINISH_CANCELLED,
       COORD_FINISH_ERROR };
enum { COORD_ERR_MALFORMED = 1, COORD_ERR_BAD_REQUEST, COORD_ERR_UNKNOWN_MODEL,
       COORD_ERR_OVERLOADED, COORD_ERR_NOT_FOUND, COORD_ERR_INTERNAL };

typedef struct coord_group_info {
	unsigned id;
	const char *name, *model;
	int tp, pp, kv_blocks, kv_free, block_tokens, running, waiting, assigned, max_pos, draining;
	double last_seen_ms;
} coord_group_info;

/* One reply. Pointers stay valid until coord_event_release. */
typedef struct coord_event {
	coord_event_kind kind;
	uint64_t tag;
	const char *text;                  /* CHUNK; DONE when not streaming */
	size_t text_len;
	const int32_t *token_ids;
	size_t n_token_ids;
	int finish;                        /* DONE: COORD_FINISH_* */
	int error_code;                    /* ERROR: COORD_ERR_* */
	const char *message;               /* ERROR, DONE with an error: why ("" otherwise) */
	int prompt_tokens, completion_tokens;
	double queue_ms, ttft_ms, total_ms;
	/* STATUS */
	coord_group_info *groups;
	int n_groups, queued, max_queue, active;
	long requeued;
	void *priv;
} coord_event;

/* ctx: a ZeroMQ context to share (many clients in one process), or NULL
 * for one of its own. Connecting never waits for the coordinator. */
int coord_client_create(void *ctx, const char *endpoint, coord_client **out, char *err,
			size_t errlen);
void coord_client_destroy(coord_client *c);
/* The DEALER socket, to zmq_poll many clients at once. */
void *coord_client_socket(coord_client *c);

int coord_client_submit(coord_client *c, const coord_gen_params *p, uint64_t *tag, char *err,
			size_t errlen);
int coord_client_cancel(coord_client *c, uint64_t tag, char *err, size_t errlen);
int coord_client_status(coord_client *c, uint64_t *tag, char *err, size_t errlen);
/* Drain one group (0: all); with exit its processes leave when idle. */
int coord_client_drain(coord_client *c, unsigned group_id, int exit, char *err, size_t errlen);

/* Wait up to timeout_ms (-1: forever) for the next reply: 1 with *ev
 * filled (release it), 0 on timeout, < 0 on error. A frame that is not a
 * Reply is an error naming its size. */
int coord_client_next(coord_client *c, int timeout_ms, coord_event *ev, char *err, size_t errlen);
void coord_event_release(coord_event *ev);

const char *coord_finish_name(int finish);
const char *coord_error_name(int code);

#endif
