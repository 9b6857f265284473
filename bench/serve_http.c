/*
 * serve_http.c — the loadgen's HTTP/1.1 + server-sent-events client (see
 * serve_http.h).
 *
 * One response is read as: status line and headers; then either a
 * Content-Length body (an error: its JSON message is kept) or a chunked
 * body whose chunks are concatenated into an event buffer that is cut at
 * every blank line. `data: {...}` events carry choices[0].token_ids (the
 * server's return_token_ids), finish_reason and usage; `data: [DONE]`
 * ends the request; `data: {"error": ...}` fails it.
 */
#include "bench/serve_http.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/client.h"
#include "common/sl.h"

enum { ST_IDLE, ST_HEAD, ST_BODY, ST_CHUNK_SIZE, ST_CHUNK_DATA, ST_CHUNK_END, ST_TRAILER };

struct lg_http {
	char host[128], port[16];
	int fd;
	int state;
	int status, chunked, close_after;
	long remaining;            /* ST_BODY / ST_CHUNK_DATA: bytes still to come */
	char *in;                  /* bytes read, not yet parsed */
	size_t in_n, in_cap;
	char *ev;                  /* event-stream bytes (de-chunked), not yet cut into events */
	size_t ev_n, ev_cap;
	int finish, completion_tokens, ended;
	int outstanding;           /* requests posted whose responses are not read to the end */
};

static int grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t cap2 = need * 2 + 4096;
	char *q = realloc(*p, cap2);
	if (!q)
		return -1;
	*p = q;
	*cap = cap2;
	return 0;
}

static int connect_to(lg_http *h, char *err, size_t errlen)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
	int rc = getaddrinfo(h->host, h->port, &hints, &ai);
	if (rc)
		return sl_errf(err, errlen, SL_ECOMM, "%s:%s: %s", h->host, h->port, gai_strerror(rc));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return sl_errf(err, errlen, SL_ECOMM, "connect %s:%s: %s", h->host, h->port, strerror(e));
	}
	freeaddrinfo(ai);
	/* requests are one write each; do not let Nagle hold one back */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	h->fd = fd;
	h->state = ST_IDLE;
	h->in_n = h->ev_n = 0;
	h->outstanding = 0;
	return SL_OK;
}

int lg_http_open(const char *url, lg_http **out, char *err, size_t errlen)
{
	lg_http *h = calloc(1, sizeof *h);
	if (!h)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	h->fd = -1;
	const char *u = strncmp(url, "http://", 7) ? url : url + 7;
	const char *colon = strrchr(u, ':');
	size_t hl = colon ? (size_t)(colon - u) : 0;
	if (!colon || !hl || hl >= sizeof h->host || strlen(colon + 1) >= sizeof h->port ||
	    strchr(colon + 1, '/')) {
		free(h);
		return sl_errf(err, errlen, SL_EINVAL, "--http '%s': give http://HOST:PORT", url);
	}
	memcpy(h->host, u, hl);
	if (h->host[0] == '[') { /* [v6]:port */
		memmove(h->host, h->host + 1, hl);
		h->host[strcspn(h->host, "]")] = 0;
	}
	snprintf(h->port, sizeof h->port, "%s", colon + 1);
	int rc = connect_to(h, err, errlen);
	if (rc) {
		lg_http_close(h);
		return rc;
	}
	*out = h;
	return SL_OK;
}

void lg_http_close(lg_http *h)
{
	if (!h)
		return;
	if (h->fd >= 0)
		close(h->fd);
	free(h->in);
	free(h->ev);
	free(h);
}

int lg_http_fd(const lg_http *h) { return h->fd; }

int lg_http_post(lg_http *h, const char *body, size_t len, char *err, size_t errlen)
{
	char head[256];
	if (h->fd < 0 || h->close_after) {
		if (h->fd >= 0)
			close(h->fd);
		h->fd = -1;
		h->close_after = 0;
		int rc = connect_to(h, err, errlen);
		if (rc)
			return rc;
	}
	int n = snprintf(head, sizeof head,
			 "POST /v1/completions HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
			 "Accept: text/event-stream\r\nContent-Length: %zu\r\n\r\n", h->host, h->port, len);
	struct iovec iov[2] = {{head, (size_t)n}, {(void *)body, len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	size_t total = (size_t)n + len, sent = 0;
	while (sent < total) { /* a few KiB: the socket buffer takes it at once */
		ssize_t k = sendmsg(h->fd, &mh, MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return sl_errf(err, errlen, SL_ECOMM, "send: %s", strerror(errno));
		}
		sent += (size_t)k;
		while (k > 0 && mh.msg_iovlen) { /* drop what went out */
			size_t take = (size_t)k < mh.msg_iov[0].iov_len ? (size_t)k : mh.msg_iov[0].iov_len;
			mh.msg_iov[0].iov_base = (char *)mh.msg_iov[0].iov_base + take;
			mh.msg_iov[0].iov_len -= take;
			k -= (ssize_t)take;
			if (!mh.msg_iov[0].iov_len)
				mh.msg_iov++, mh.msg_iovlen--;
		}
	}
	/* the previous response may still be finishing (its last chunk comes
	 * after [DONE]): the parser starts this one when that one is read */
	h->outstanding++;
	return SL_OK;
}

static void emit_error(lg_http *h, lg_http_cb cb, void *arg, int status, const char *msg)
{
	lg_http_event ev = {.kind = LG_HTTP_ERROR, .status = status, .completion_tokens = -1};
	snprintf(ev.message, sizeof ev.message, "%s", msg);
	h->ended = 1;
	cb(arg, &ev);
}

/* One `data:` payload. */
static void on_data(lg_http *h, const char *p, size_t n, lg_http_cb cb, void *arg)
{
	if (h->ended)
		return;
	if (n == 6 && !memcmp(p, "[DONE]", 6)) {
		lg_http_event ev = {.kind = LG_HTTP_DONE, .finish = h->finish ? h->finish : SL_FINISH_ERROR,
				    .completion_tokens = h->completion_tokens};
		h->ended = 1;
		cb(arg, &ev);
		return;
	}
	cJSON *j = cJSON_ParseWithLength(p, n);
	if (!j) {
		emit_error(h, cb, arg, 200, "an event that is not JSON");
		return;
	}
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
	if (e) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
		emit_error(h, cb, arg, 200, cJSON_IsString(m) ? m->valuestring : "error event");
		cJSON_Delete(j);
		return;
	}
	const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
	const cJSON *ids = ch ? cJSON_GetObjectItemCaseSensitive(ch, "token_ids") : NULL;
	const cJSON *fin = ch ? cJSON_GetObjectItemCaseSensitive(ch, "finish_reason") : NULL;
	const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
	const cJSON *ct = usage ? cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens") : NULL;
	if (cJSON_IsString(fin))
		h->finish = !strcmp(fin->valuestring, "length") ? SL_FINISH_LENGTH : SL_FINISH_STOP;
	if (cJSON_IsNumber(ct))
		h->completion_tokens = ct->valueint;
	int k = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : 0;
	cJSON_Delete(j);
	if (k > 0) {
		lg_http_event ev = {.kind = LG_HTTP_TOKENS, .n_tokens = k};
		cb(arg, &ev);
	}
}

/* Cut the event buffer at blank lines. */
static void events(lg_http *h, lg_http_cb cb, void *arg)
{
	size_t start = 0;
	for (;;) {
		char *end = memmem(h->ev + start, h->ev_n - start, "\n\n", 2);
		if (!end)
			break;
		for (char *ln = h->ev + start; ln < end;) {
			char *eol = memchr(ln, '\n', (size_t)(end - ln));
			eol = eol ? eol : end;
			if (eol - ln >= 6 && !memcmp(ln, "data: ", 6))
				on_data(h, ln + 6, (size_t)(eol - ln - 6), cb, arg);
			ln = eol + 1;
		}
		start = (size_t)(end - h->ev) + 2;
	}
	memmove(h->ev, h->ev + start, h->ev_n - start);
	h->ev_n -= start;
}

/* Parse what is in h->in as far as it goes; 0 when more bytes are needed. */
static int parse(lg_http *h, lg_http_cb cb, void *arg, size_t *used)
{
	char *p = h->in + *used;
	size_t n = h->in_n - *used;
	switch (h->state) {
	case ST_IDLE:
		if (!h->outstanding)
			return 0;
		h->state = ST_HEAD;
		h->status = h->chunked = 0;
		h->remaining = -1;
		h->finish = 0;
		h->completion_tokens = -1;
		h->ended = 0;
		h->ev_n = 0;
		return 1;
	case ST_HEAD: {
		char *end = memmem(p, n, "\r\n\r\n", 4);
		if (!end)
			return 0;
		*end = 0;
		if (sscanf(p, "HTTP/1.%*d %d", &h->status) != 1)
			h->status = 0;
		for (char *ln = strstr(p, "\r\n"); ln; ln = strstr(ln + 2, "\r\n")) {
			char *v = ln + 2;
			if (!strncasecmp(v, "transfer-encoding:", 18) && strstr(v, "chunked"))
				h->chunked = 1;
			else if (!strncasecmp(v, "content-length:", 15))
				h->remaining = strtol(v + 15, NULL, 10);
			else if (!strncasecmp(v, "connection:", 11) && strstr(v, "close"))
				h->close_after = 1;
		}
		*used += (size_t)(end - p) + 4;
		h->state = h->status == 200 && h->chunked ? ST_CHUNK_SIZE : ST_BODY;
		if (h->state == ST_BODY && h->remaining < 0)
			h->remaining = 0, h->close_after = 1;
		return 1;
	}
	case ST_BODY: { /* an error response: keep its message */
		if ((long)n < h->remaining)
			return 0;
		char msg[160];
		cJSON *j = cJSON_ParseWithLength(p, (size_t)h->remaining);
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
		snprintf(msg, sizeof msg, "HTTP %d: %s", h->status, cJSON_IsString(m) ? m->valuestring : "?");
		cJSON_Delete(j);
		*used += (size_t)h->remaining;
		h->state = ST_IDLE;
		h->outstanding--;
		emit_error(h, cb, arg, h->status, msg);
		return 1;
	}
	case ST_CHUNK_SIZE: {
		char *eol = memmem(p, n, "\r\n", 2);
		if (!eol)
			return 0;
		h->remaining = strtol(p, NULL, 16);
		*used += (size_t)(eol - p) + 2;
		h->state = h->remaining > 0 ? ST_CHUNK_DATA : ST_TRAILER;
		return 1;
	}
	case ST_CHUNK_DATA: {
		size_t take = n < (size_t)h->remaining ? n : (size_t)h->remaining;
		if (!take)
			return 0;
		if (grow(&h->ev, &h->ev_cap, h->ev_n + take))
			return -1;
		memcpy(h->ev + h->ev_n, p, take);
		h->ev_n += take;
		h->remaining -= (long)take;
		*used += take;
		if (!h->remaining)
			h->state = ST_CHUNK_END;
		events(h, cb, arg);
		return 1;
	}
	case ST_CHUNK_END:
	case ST_TRAILER:
		if (n < 2)
			return 0;
		if (memcmp(p, "\r\n", 2)) { /* trailers: skip to the blank line */
			char *end = memmem(p, n, "\r\n\r\n", 4);
			if (!end)
				return 0;
			*used += (size_t)(end - p) + 4;
		} else {
			*used += 2;
		}
		if (h->state == ST_TRAILER) {
			h->state = ST_IDLE;
			h->outstanding--;
			if (!h->ended)
				emit_error(h, cb, arg, 200, "the stream ended without [DONE]");
		} else {
			h->state = ST_CHUNK_SIZE;
		}
		return 1;
	}
	return 0;
}

int lg_http_read(lg_http *h, lg_http_cb cb, void *arg, char *err, size_t errlen)
{
	for (;;) {
		if (grow(&h->in, &h->in_cap, h->in_n + 65536))
			return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
		ssize_t k = recv(h->fd, h->in + h->in_n, 65536, MSG_DONTWAIT);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (k <= 0) { /* closed: fails the request in flight, the next post reconnects */
			int in_flight = h->outstanding && !h->ended;
			close(h->fd);
			h->fd = -1;
			h->state = ST_IDLE;
			h->outstanding = 0;
			if (in_flight)
				emit_error(h, cb, arg, 0, k < 0 ? strerror(errno) : "the server closed the connection");
			return SL_OK;
		}
		h->in_n += (size_t)k;
		size_t used = 0;
		int rc;
		while ((rc = parse(h, cb, arg, &used)) > 0)
			;
		if (rc < 0)
			return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
		memmove(h->in, h->in + used, h->in_n - used);
		h->in_n -= used;
	}
	return SL_OK;
}

char *lg_http_body(const char *model, const int32_t *prompt, int n_prompt, int max_tokens,
		   double temperature, uint64_t seed, int ignore_eos, size_t *len)
{
	size_t cap = 256 + (model ? strlen(model) * 6 : 0) + (size_t)n_prompt * 12;
	char *b = malloc(cap);
	if (!b)
		return NULL;
	size_t n = 0;
	n += (size_t)snprintf(b + n, cap - n, "{");
	if (model) { /* loadgen model names are plain: no escaping needed */
		n += (size_t)snprintf(b + n, cap - n, "\"model\":\"%s\",", model);
	}
	n += (size_t)snprintf(b + n, cap - n, "\"prompt\":[");
	for (int i = 0; i < n_prompt; i++)
		n += (size_t)snprintf(b + n, cap - n, i ? ",%d" : "%d", prompt[i]);
	n += (size_t)snprintf(b + n, cap - n,
			      "],\"max_tokens\":%d,\"temperature\":%.9g,\"seed\":%llu,\"stream\":true,"
			      "\"stream_options\":{\"include_usage\":true},\"ignore_eos\":%s,"
			      "\"return_token_ids\":true}", max_tokens, temperature,
			      (unsigned long long)seed, ignore_eos ? "true" : "false");
	*len = n;
	return b;
}
