/*
 * serve_http.h — shardline-bench-serve's HTTP mode: a minimal HTTP/1.1 client
 * over a plain socket, one keep-alive connection per stream, that POSTs
 * /v1/completions with stream=true and parses the server-sent events as
 * they arrive. Enough for the coordinator's own server (chunked transfer
 * encoding, Content-Length errors, Connection: close); not a general
 * client. A hand-written client rather than libcurl so that the loadgen
 * keeps one thread and one poll loop over every stream, and so that the
 * time a token is taken is when its event's bytes were read — as the
 * native mode takes it when its Chunk frame was read.
 *
 * Caller: bench/serve.c.
 */
#ifndef LG_SERVE_HTTP_H
#define LG_SERVE_HTTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct lg_http lg_http;

enum { LG_HTTP_TOKENS = 1, LG_HTTP_DONE, LG_HTTP_ERROR };

/* What one response said; a DONE or ERROR ends the request. */
typedef struct lg_http_event {
	int kind;
	int n_tokens;              /* TOKENS: ids in this event */
	int finish;                /* DONE: SL_FINISH_* (OpenAI's "stop" is SL_FINISH_STOP) */
	int completion_tokens;     /* DONE: the usage the server reported; -1: none */
	int status;                /* ERROR: the HTTP status (0: connection failed) */
	char message[160];         /* ERROR: why */
} lg_http_event;

typedef void (*lg_http_cb)(void *arg, const lg_http_event *ev);

/* url: http://HOST:PORT or HOST:PORT. Connects at once. */
int lg_http_open(const char *url, lg_http **out, char *err, size_t errlen);
void lg_http_close(lg_http *h);
/* The socket to poll for input (it changes when a closed connection is reopened). */
int lg_http_fd(const lg_http *h);
/* POST /v1/completions with this JSON body (reconnecting first when the
 * server closed the connection). */
int lg_http_post(lg_http *h, const char *body, size_t len, char *err, size_t errlen);
/* Whatever bytes are waiting: each event goes to cb. Never blocks. */
int lg_http_read(lg_http *h, lg_http_cb cb, void *arg, char *err, size_t errlen);

/* The request body for a token-id prompt (malloc'd, *len bytes). */
char *lg_http_body(const char *model, const int32_t *prompt, int n_prompt, int max_tokens,
		   double temperature, uint64_t seed, int ignore_eos, size_t *len);

#endif
