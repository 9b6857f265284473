/*
 * openai.h — the OpenAI API over the coordinator's HTTP server:
 * POST /v1/completions, POST /v1/chat/completions, GET /v1/models.
 *
 * A request's JSON becomes one native Submit per choice (every prompt
 * times n), each submitted through coord_submit with this exchange as its
 * sink, so the HTTP API and the ZeroMQ protocol share one validation and
 * one request life cycle. The requests' Chunk and Done replies come back
 * through coord_oai_reply and leave as OpenAI JSON: one response, or
 * server-sent events (chat.completion.chunk / text_completion) ending with
 * `data: [DONE]`. Errors use OpenAI's shape,
 * {"error": {"message", "type", "param", "code"}}, with the HTTP status.
 * docs/http.md documents every field.
 *
 * Callers: http.c (requests, the end of an exchange), send.c (replies),
 * on_client.c and requests.c (a request joins or leaves its exchange).
 */
#ifndef COORD_OPENAI_H
#define COORD_OPENAI_H

#include <stdarg.h>
#include <stddef.h>

#include "http.h"

struct coord;
struct coord_req;
struct Shardline__Client__Reply;

#define COORD_OAI_MAX_CHOICES 128   /* prompts x n of one request */

enum { COORD_OAI_COMPLETIONS, COORD_OAI_CHAT, COORD_OAI_MODELS, COORD_OAI_MODEL };

/* One request to a /v1 endpoint with its whole body (arg: the model id of
 * /v1/models/{id}). Answers now (an error, /v1/models) or later. */
void coord_oai_handle(struct coord *c, coord_http_call *x, int endpoint, const char *arg,
		      const char *body, size_t len);
/* The exchange is over (answered, or its client left): requests still
 * running are detached and marked for the coordinator's tick to cancel. */
void coord_oai_call_free(struct coord *c, void *app);

/* A request made for an HTTP sink joins its exchange (r->http, r->choice). */
void coord_oai_attach(struct coord_req *r);
/* A request leaves before its Done (freed on an error path). */
void coord_oai_detach(struct coord_req *r);
/* A Chunk or Done of r, to its exchange. */
void coord_oai_reply(struct coord *c, struct coord_req *r, const struct Shardline__Client__Reply *rep);

/* An error response in OpenAI's shape. type: "invalid_request_error" etc.;
 * param: the request field at fault or NULL; code: a string or NULL. */
void coord_oai_error(coord_http_call *x, int status, const char *type, const char *param,
		     const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif
