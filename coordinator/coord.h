/*
 * coord.h — the coordinator: the front door of a shardline cluster.
 *
 * One object, one thread, one zmq_poll loop over two ROUTER sockets: one
 * for clients (proto/client.proto), one for node group leaders
 * (proto/node.proto), and the OpenAI-compatible HTTP API (docs/http.md)
 * served from the same loop. It validates and tokenizes requests, queues
 * them under a bound, routes each to the least-loaded live group serving
 * its model, relays tokens as text, and keeps both sides honest with
 * heartbeats and timeouts. Callers: coordinator/main.c and tests.
 */
#ifndef COORD_COORD_H
#define COORD_COORD_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define COORD_MAX_MODELS 16

typedef struct coord coord;

typedef struct coord_opts {
	const char *client_endpoint;   /* bind: tcp://127.0.0.1:5555 */
	const char *node_endpoint;     /* bind: tcp://127.0.0.1:5556 */
	const char *model_names[COORD_MAX_MODELS];
	const char *tokenizers[COORD_MAX_MODELS]; /* tokenizer.json of each model */
	const char *chat_templates[COORD_MAX_MODELS]; /* a template file overriding the model's; NULL: none */
	int n_models;
	const int32_t *eos_ids;        /* NULL: each tokenizer's EOS */
	int n_eos;
	int heartbeat_ms;              /* both ways; a group silent 3 intervals is dead */
	int max_queue;                 /* requests waiting for a group; past it: OVERLOADED */
	int request_timeout_ms;        /* default per-request deadline */
	int admission_timeout_ms;      /* longest wait in the queue with no live group for the
					* model (0: refused at once; docs/protocol.md) */
	int stall_ms;                  /* a group whose Loads say one step has made no progress
					* this long (its own step clock) gets no new work and its
					* requests move elsewhere; 0: off (docs/operations.md) */
	int default_max_tokens;
	const char *ports_file;        /* write the bound endpoints here (for "port 0") */
	const char *http_bind;         /* HOST:PORT of the HTTP API (127.0.0.1:8000); NULL or "": none */
	int http_max_connections;      /* open HTTP connections; past it new ones are closed */
	int http_idle_timeout_s;       /* an HTTP connection silent this long is closed */
	long http_max_body_bytes;      /* larger request bodies get 413 */
	int http_body_timeout_s;       /* a request's headers to its last body byte, at most */
	const char *api_key_file;      /* when set, every endpoint but /health wants its Bearer key */
	int route_by_load;             /* --route load: least loaded, cached prefixes ignored */
	/* CURVE on both ZeroMQ sockets (auth.h, docs/security.md) */
	const char *curve_key;         /* the coordinator's secret key file; NULL: off */
	const char *client_keys;       /* public keys allowed on the client socket: DIR|FILE[,...] */
	const char *node_keys;         /* and on the node socket */
	int insecure;                  /* off on a non-loopback bind is allowed */
	/* a standby pair (standby.h): all three or none */
	const char *standby_role;      /* "primary" or "backup" */
	const char *peer_bind;         /* PUB: our state out */
	const char *peer_endpoint;     /* SUB: the other's peer_bind */
	volatile sig_atomic_t *stop;   /* set by a signal handler: leave the loop */
} coord_opts;

/* Defaults for every field above but the models. */
void coord_opts_default(coord_opts *o);

/* Load the tokenizers and bind both sockets. */
int coord_create(const coord_opts *o, coord **out, char *err, size_t errlen);
void coord_destroy(coord *c);
/* Serve until *o->stop. */
int coord_run(coord *c, char *err, size_t errlen);

#endif
