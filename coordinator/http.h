/*
 * http.h — the coordinator's HTTP server: libmicrohttpd (MHD) driven from
 * the coordinator's own zmq_poll loop, so HTTP requests, ZeroMQ clients
 * and node groups share one thread and need no locks.
 *
 * MHD runs in its external-epoll mode: all of its sockets sit behind one
 * epoll descriptor (coord_http_fd) that the loop polls with the ZeroMQ
 * sockets — one descriptor however many connections are open, so the
 * select() limit of 1024 never applies. Exchanges that wait for tokens are
 * suspended (MHD stops watching them) and resumed when tokens arrive;
 * while suspended, coord_http_tick notices a client that hung up and
 * cancels its requests.
 *
 * Limits (coord_opts): open connections, idle time, body size (413), the
 * time from headers to the last body byte, header size (MHD's per-
 * connection memory). Bearer-key auth on every endpoint but /health.
 *
 * This file serves /health and /metrics itself and hands /v1/... to
 * openai.c, which answers through the coord_http_* calls below.
 * Callers: coord.c (life cycle, the loop) and openai.c.
 */
#ifndef COORD_HTTP_H
#define COORD_HTTP_H

#include <stddef.h>

#include "coord.h"

typedef struct coord_http coord_http;
typedef struct coord_http_call coord_http_call;
struct coord;

/* Binds o->http_bind (HOST:PORT; port 0 or * picks one). */
int coord_http_create(struct coord *c, const coord_opts *o, coord_http **out, char *err,
		      size_t errlen);
/* Ends every exchange (their requests must be finished already) and closes. */
void coord_http_destroy(coord_http *h);
/* "HOST:PORT" actually bound. */
const char *coord_http_address(const coord_http *h);
/* The descriptor to poll for input. */
int coord_http_fd(const coord_http *h);
/* How long the loop may sleep before MHD has timers to run; at most cap. */
int coord_http_timeout_ms(coord_http *h, int cap);
/* Accept, read, write, time out: whatever is ready; never blocks. */
void coord_http_run(coord_http *h);
/* Clients of suspended exchanges that hung up: their requests are cancelled. */
void coord_http_tick(coord_http *h);
/* Open connections (for /metrics); 0 for NULL. */
int coord_http_connections(const coord_http *h);

/* --- for openai.c: answering an exchange -------------------------------- */

/* A whole response. From the handler, or later for an exchange that waits
 * (coord_http_wait); extra_header is "Name: value" or NULL. */
void coord_http_respond(coord_http_call *x, int status, const char *content_type, const char *body,
			size_t len, const char *extra_header);
/* The exchange waits (suspended) for coord_http_respond. */
void coord_http_wait(coord_http_call *x);
/* Start a 200 text/event-stream response; coord_http_sse_write appends to
 * it (SL_EIO: the client left more than 8 MiB unread and is being cut
 * off; SL_ENOMEM), coord_http_sse_end closes it once what was written is
 * sent. */
int coord_http_sse_begin(coord_http_call *x);
int coord_http_sse_write(coord_http_call *x, const char *p, size_t n);
void coord_http_sse_end(coord_http_call *x);
/* The exchange's OpenAI state (openai.c's; freed by coord_oai_call_free). */
void *coord_http_app(coord_http_call *x);
void coord_http_set_app(coord_http_call *x, void *app);
/* The coordinator the exchange belongs to. */
struct coord *coord_http_coord(coord_http_call *x);

#endif
