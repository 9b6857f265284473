/*
 * http_call.h — one HTTP exchange (a request and its answer, on
 * libmicrohttpd) as an application answers it: a whole response, now or
 * after waiting, or a stream of server-sent events.
 *
 * The answer API (the calls below) is what openai.c uses; the exchange's
 * state (struct coord_http_call) is shared with the server, http.c, which
 * makes each exchange, feeds it the request and ends it. http_call.c
 * calls nothing of the server: http.c sits above both it and openai.c.
 */
#ifndef COORD_HTTP_CALL_H
#define COORD_HTTP_CALL_H

#include <stddef.h>

#include "coordinator/coord_int.h"

typedef struct coord_http_call coord_http_call;
struct coord_http;
struct MHD_Connection;
struct MHD_Response;

/* A whole response. From the handler, or later for an exchange that waits
 * (coord_http_wait); extra_header is "Name: value" or NULL. */
void coord_http_respond(coord_http_call *x, int status, const char *content_type, const char *body,
			size_t len, const char *extra_header);
/* The exchange waits (suspended) for coord_http_respond. */
void coord_http_wait(coord_http_call *x);
/* Start a 200 text/event-stream response, from the handler or from an
 * exchange that waits (coord_http_wait); coord_http_sse_write appends to
 * it (SL_EIO: the client left more than 8 MiB unread and is being cut
 * off; SL_ENOMEM), coord_http_sse_end closes it once what was written is
 * sent. */
int coord_http_sse_begin(coord_http_call *x);
int coord_http_sse_write(coord_http_call *x, const char *p, size_t n);
void coord_http_sse_end(coord_http_call *x);
/* The application's state of the exchange (openai.c's), handed back to it
 * when the exchange ends (coord_oai_call_free). */
void coord_http_set_app(coord_http_call *x, void *app);
/* Close the connection without (the rest of) an answer. */
void coord_http_abort(coord_http_call *x);

/* The exchange: from an HTTP request's headers to MHD's "request
 * completed". http.c makes, walks and frees it and reads the request
 * into it; http_call.c answers through it. */
struct coord_http_call {
	struct coord_http *h;
	struct MHD_Connection *conn;
	int fd;
	int route;
	char arg[COORD_MAX_NAME + 2]; /* /v1/models/{arg} */
	double t_start;
	sl_buf body;
	int received;              /* the whole request is in */
	int handled;               /* routed to its handler, or answered already */
	int in_handler;            /* inside the access handler: responses are queued at once */
	int suspended, waiting;    /* waiting: suspended until coord_http_respond */
	int abort;                 /* close the connection without (the rest of) an answer */
	int status;                /* of the response queued, for the metrics */
	const char *allow;         /* a 405's Allow header */
	struct MHD_Response *pending; /* to queue when the exchange is resumed */
	int pending_status;
	int sse, sse_end;          /* an event stream; its end was written */
	sl_buf out;           /* event bytes not yet handed to MHD */
	size_t out_off;
	void *app;                 /* openai.c's state */
	coord_http_call *prev, *next;
};

#endif
