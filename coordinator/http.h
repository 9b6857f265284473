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
 * The server serves /health and /metrics itself and hands /v1/... to
 * openai.c, which answers through http_call.h. Caller: coord.c (life
 * cycle, the loop); the server is the top of the HTTP layer, called by
 * nothing below it.
 */
#ifndef COORD_HTTP_H
#define COORD_HTTP_H

#include <stddef.h>

#include "coordinator/coord.h"

typedef struct coord_http coord_http;
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

#endif
