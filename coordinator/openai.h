/*
 * openai.h — the OpenAI API over the coordinator's HTTP server:
 * POST /v1/completions, POST /v1/chat/completions, GET /v1/models.
 *
 * A request's JSON becomes one core request (coord_request) per choice
 * (every prompt times n), each submitted through coord_submit with this
 * exchange as its sink, so the HTTP API and the ZeroMQ protocol share one
 * validation and one request life cycle. The requests' events (chunks,
 * their end) come back through the sink (openai.c's coord_sink_ops) and
 * leave as OpenAI JSON:
 * one response, or server-sent events (chat.completion.chunk /
 * text_completion) ending with `data: [DONE]`. Errors use OpenAI's shape,
 * {"error": {"message", "type", "param", "code"}}, with the HTTP status.
 * docs/http.md documents every field.
 *
 * Caller: http.c (requests, its own errors, the end of an exchange). The
 * layers below reach it only through the sink of its requests.
 */
#ifndef COORD_OPENAI_H
#define COORD_OPENAI_H

#include <stdarg.h>
#include <stddef.h>

#include "coordinator/http_call.h"

struct coord;

#define COORD_OAI_MAX_CHOICES 128   /* prompts x n of one request */

enum { COORD_OAI_COMPLETIONS, COORD_OAI_CHAT, COORD_OAI_MODELS, COORD_OAI_MODEL };

/* One request to a /v1 endpoint with its whole body (arg: the model id of
 * /v1/models/{id}). Answers now (an error, /v1/models) or later. */
void coord_oai_handle(struct coord *c, coord_http_call *x, int endpoint, const char *arg,
		      const char *body, size_t len);
/* The exchange is over (answered, or its client left): requests still
 * running are detached and marked for the coordinator's tick to cancel. */
void coord_oai_call_free(struct coord *c, void *app);

/* An error response in OpenAI's shape. type: "invalid_request_error" etc.;
 * param: the request field at fault or NULL; code: a string or NULL. */
void coord_oai_error(coord_http_call *x, int status, const char *type, const char *param,
		     const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif
