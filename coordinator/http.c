/*
 * http.c — the HTTP server inside the coordinator's loop (see http.h):
 * the daemon, its limits, routing and auth, /health and /metrics, the
 * life of each exchange, and clients that hang up. It stands on top of
 * the HTTP layer: it hands /v1/... to openai.c, which answers through
 * http_call.c, and feeds metrics.c; none of these calls back up here.
 *
 * Why libmicrohttpd: a small, long-maintained C library (GNU, in Debian as
 * libmicrohttpd-dev 0.9.75) that parses HTTP/1.1 defensively (request line,
 * headers, chunked bodies, keep-alive, pipelining) and lets the
 * application own the event loop: with MHD_USE_EPOLL and no internal
 * thread it exposes one epoll descriptor for every socket it has, and
 * MHD_run() does whatever is ready without blocking. Suspending a
 * connection (MHD_suspend_connection, from the access handler or a
 * response's content reader) takes it out of that loop until
 * MHD_resume_connection, which is how a stream waits for tokens without
 * a thread or a busy loop.
 *
 * An exchange (coord_http_call, answered through http_call.c) lives from
 * an HTTP request's headers to MHD's "request completed" callback. The
 * access handler sees it three ways: the first call (headers only: route,
 * auth, Content-Length checked), calls with body bytes (bounded in size
 * and time), and the final call (the handler runs, or, for a suspended
 * exchange that was resumed, the response it waited for is queued).
 *
 * Slow clients: MHD's idle timeout restarts with every byte, so a client
 * that trickles its headers (a slowloris) would hold its connection for
 * ever, and enough of them would fill --http-max-connections. Each
 * connection therefore carries its own state (http_conn, MHD's socket
 * context): while its request is still coming in it sits on a list in the
 * order its request began (accepted, or the previous answer sent), and
 * (a) the tick closes those older than --http-body-timeout-s, headers
 * included, and (b) a new connection that reaches the limit closes the
 * oldest of them: a client that sends its request at once is served
 * while the slow ones wait their turn to be dropped. Connections are
 * closed with shutdown(), which MHD sees as the peer leaving.
 *
 * A suspended exchange is not watched by MHD, so a client that hangs up
 * while its request waits in the queue or between tokens would go
 * unnoticed: coord_http_tick peeks at each suspended socket (recv with
 * MSG_PEEK: 0 bytes means the peer closed) and aborts the exchange, whose
 * requests are then cancelled by the coordinator's tick.
 */
#include "coordinator/http.h"
#include "coordinator/http_call.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "coordinator/coord_int.h"
#include "coordinator/metrics.h"
#include "coordinator/openai.h"
#include "common/sl.h"
#include "coordinator/standby.h"

#define HTTP_MEMORY_PER_CONNECTION (32 * 1024) /* MHD's buffers: bounds the request headers */
#define HTTP_FLUSH_S 0.5                        /* at shutdown, for answers still being sent */

enum { R_HEALTH, R_METRICS, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT, R_NONE };

static const struct {
	const char *path, *method;
} ROUTES[] = {
	[R_HEALTH] = {"/health", "GET"},        [R_METRICS] = {"/metrics", "GET"},
	[R_MODELS] = {"/v1/models", "GET"},     [R_MODEL] = {"/v1/models/", "GET"},
	[R_COMPLETIONS] = {"/v1/completions", "POST"},
	[R_CHAT] = {"/v1/chat/completions", "POST"},
	[R_NONE] = {"other", ""},
};

/* One connection (MHD's socket context): see "Slow clients" above. */
typedef struct http_conn {
	int fd;
	double t;                  /* its current request began */
	int receiving;             /* on the list: that request is not all in yet */
	int cut;                   /* shut down by us: never back on the list */
	struct http_conn *prev, *next;
} http_conn;

struct coord_http {
	coord *c;
	struct MHD_Daemon *d;
	char address[160];
	char *api_key;             /* NULL: no auth */
	size_t api_key_len;
	size_t max_body;
	double body_timeout_s;
	coord_http_call *calls;    /* every exchange in progress */
	int n_connections;
	int max_connections;
	http_conn *rx_head, *rx_tail; /* receiving, oldest first */
	unsigned long long n_cut;  /* connections cut by the deadline or the limit */
};

const char *coord_http_address(const coord_http *h) { return h->address; }

/* --- connections: the whole-request deadline ------------------------------- */

static void rx_leave(coord_http *h, http_conn *hc)
{
	if (!hc || !hc->receiving)
		return;
	if (hc->prev)
		hc->prev->next = hc->next;
	else
		h->rx_head = hc->next;
	if (hc->next)
		hc->next->prev = hc->prev;
	else
		h->rx_tail = hc->prev;
	hc->prev = hc->next = NULL;
	hc->receiving = 0;
}

/* A request begins now on hc: it goes last on the list. */
static void rx_enter(coord_http *h, http_conn *hc)
{
	if (!hc || hc->cut)
		return;
	rx_leave(h, hc);
	hc->t = sl_now();
	hc->receiving = 1;
	hc->prev = h->rx_tail;
	if (h->rx_tail)
		h->rx_tail->next = hc;
	else
		h->rx_head = hc;
	h->rx_tail = hc;
}

static void cut(coord_http *h, http_conn *hc, const char *why)
{
	rx_leave(h, hc);
	hc->cut = 1;
	h->n_cut++;
	SL_DEBUG("http", "closing a connection: %s", why);
	if (hc->fd >= 0)
		shutdown(hc->fd, SHUT_RDWR);
}

static http_conn *conn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

/* --- routing ---------------------------------------------------------------- */

static int route_of(const char *url, coord_http_call *x)
{
	for (int r = 0; r < R_NONE; r++) {
		if (r == R_MODEL) {
			size_t k = strlen(ROUTES[r].path);
			if (!strncmp(url, ROUTES[r].path, k) && url[k] && strlen(url + k) <= COORD_MAX_NAME) {
				snprintf(x->arg, sizeof x->arg, "%s", url + k);
				return r;
			}
		} else if (!strcmp(url, ROUTES[r].path)) {
			return r;
		}
	}
	return R_NONE;
}

/* Bearer key: compared in time independent of where it differs. */
static int authorized(coord_http_call *x)
{
	coord_http *h = x->h;
	if (!h->api_key || x->route == R_HEALTH)
		return 1;
	const char *a = MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!a || strncasecmp(a, "Bearer ", 7))
		return 0;
	a += 7;
	a += strspn(a, " ");
	size_t n = strlen(a);
	unsigned diff = n != h->api_key_len;
	for (size_t i = 0; i < h->api_key_len; i++)
		diff |= (unsigned char)h->api_key[i] ^ (unsigned char)(i < n ? a[i] : 0);
	return diff == 0;
}

/* Content-Type: application/json, parameters allowed. Anything else is
 * refused: a web page can POST text/plain or a form to a loopback server
 * without the browser asking first (a "simple" cross-site request), but
 * not application/json. */
static int json_body(coord_http_call *x)
{
	const char *t = MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	static const char want[] = "application/json";
	if (!t || strncasecmp(t + strspn(t, " \t"), want, sizeof want - 1))
		return 0;
	t += strspn(t, " \t") + sizeof want - 1;
	t += strspn(t, " \t");
	return !*t || *t == ';';
}

/* Headers are in: route, method, auth, content type, declared body size.
 * 0 to go on. */
static int first_call(coord_http_call *x, const char *url, const char *method)
{
	coord_http *h = x->h;
	x->route = route_of(url, x);
	if (x->route == R_NONE) {
		coord_oai_error(x, 404, "not_found_error", NULL, NULL, "no such endpoint: %s %.200s", method, url);
		return -1;
	}
	const char *want = ROUTES[x->route].method;
	int head = !strcmp(want, "GET") && !strcmp(method, "HEAD");
	if (strcmp(method, want) && !head) {
		x->allow = !strcmp(want, "GET") ? "GET, HEAD" : want;
		coord_oai_error(x, 405, "invalid_request_error", NULL, NULL, "%s takes %s, not %.16s",
				ROUTES[x->route].path, want, method);
		return -1;
	}
	if (!authorized(x)) {
		coord_oai_error(x, 401, "authentication_error", NULL, "invalid_api_key",
				"a valid API key is required: Authorization: Bearer KEY");
		return -1;
	}
	if (!strcmp(want, "POST") && !json_body(x)) {
		coord_oai_error(x, 415, "invalid_request_error", NULL, "unsupported_media_type",
				"%s takes a JSON body: send Content-Type: application/json", ROUTES[x->route].path);
		return -1;
	}
	const char *cl = MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(cl, &end, 10);
		if (!errno && end != cl && !*end && n > h->max_body) {
			coord_oai_error(x, 413, "invalid_request_error", NULL, "request_too_large",
					"the body of %llu bytes exceeds the limit of %zu", n, h->max_body);
			return -1;
		}
	}
	return 0;
}

static void serve_health(coord_http_call *x)
{
	const coord *c = x->h->c;
	char body[512];
	int live_total = 0;
	for (int m = 0; m < c->n_models; m++) {
		int live = 0;
		for (int i = 0; i < c->n_groups; i++) {
			const coord_group *g = c->groups[i];
			live += g->model == m && !g->lost && !g->draining;
		}
		if (!live) {
			char name[80];
			/* model names are the operator's; keep the JSON simple and valid */
			size_t k = 0;
			for (const char *p = c->models[m].name; *p && k + 1 < sizeof name; p++)
				name[k++] = (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) ? '_' : *p;
			name[k] = 0;
			int n = snprintf(body, sizeof body,
					 "{\"status\":\"unavailable\",\"reason\":\"model %s has no live node group\"}\n",
					 name);
			coord_http_respond(x, 503, "application/json", body, (size_t)n, NULL);
			return;
		}
		live_total += live;
	}
	int n = snprintf(body, sizeof body, "{\"status\":\"ok\",\"live_groups\":%d}\n", live_total);
	coord_http_respond(x, 200, "application/json", body, (size_t)n, NULL);
}

static void serve_metrics(coord_http_call *x)
{
	sl_buf b = {0};
	if (coord_metrics_render(x->h->c, x->h->n_connections, &b))
		coord_oai_error(x, 500, "server_error", NULL, NULL, "out of memory");
	else
		coord_http_respond(x, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.n, NULL);
	free(b.p);
}

/* A standby that does not serve answers completions and /health with 503
 * (a load balancer's health check then sends traffic to the active one).
 * Each such request counts as a client's ask, as ZeroMQ ones do: a
 * backup whose primary is silent takes over on it (standby.h). */
static int standing_by(coord_http_call *x)
{
	coord *c = x->h->c;
	if (x->route != R_HEALTH && x->route != R_COMPLETIONS && x->route != R_CHAT)
		return 0;
	if (coord_standby_admit(c->standby))
		return 0;
	if (x->route == R_HEALTH) {
		static const char body[] = "{\"status\":\"standby\",\"reason\":\"this coordinator "
					   "stands by for its active peer\"}\n";
		coord_http_respond(x, 503, "application/json", body, sizeof body - 1, NULL);
	} else {
		coord_oai_error(x, 503, "server_error", NULL, "standby", "this coordinator stands by "
				"for its active peer: send requests there");
	}
	return 1;
}

static void dispatch(coord_http_call *x)
{
	coord *c = x->h->c;
	switch (standing_by(x) ? R_NONE : x->route) {
	case R_NONE: break;
	case R_HEALTH: serve_health(x); break;
	case R_METRICS: serve_metrics(x); break;
	case R_MODELS: coord_oai_handle(c, x, COORD_OAI_MODELS, NULL, NULL, 0); break;
	case R_MODEL: coord_oai_handle(c, x, COORD_OAI_MODEL, x->arg, NULL, 0); break;
	case R_COMPLETIONS: coord_oai_handle(c, x, COORD_OAI_COMPLETIONS, NULL, x->body.p, x->body.n); break;
	case R_CHAT: coord_oai_handle(c, x, COORD_OAI_CHAT, NULL, x->body.p, x->body.n); break;
	}
	/* the body is not needed any more: a long stream should not hold it */
	free(x->body.p);
	x->body = (sl_buf){0};
}

/* --- MHD callbacks ---------------------------------------------------------- */

static coord_http_call *call_new(coord_http *h, struct MHD_Connection *conn)
{
	coord_http_call *x = calloc(1, sizeof *x);
	if (!x)
		return NULL;
	x->h = h;
	x->conn = conn;
	x->t_start = sl_now();
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	x->fd = ci ? ci->connect_fd : -1;
	x->next = h->calls;
	if (h->calls)
		h->calls->prev = x;
	h->calls = x;
	return x;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version, const char *upload,
				 size_t *upload_size, void **con_cls)
{
	coord_http *h = cls;
	coord_http_call *x = *con_cls;
	if (!x) {
		if (!(x = call_new(h, conn)))
			return MHD_NO;
		*con_cls = x;
		x->in_handler = 1;
		if (first_call(x, url, method))
			x->handled = 1;
		x->in_handler = 0;
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (x->handled)
			return MHD_YES;
		/* a chunked body past the limit, or one that trickles in: there is
		 * no answering in the middle of an upload, so hang up */
		if (x->body.n + n > h->max_body) {
			SL_DEBUG("http", "closing a connection: body over %zu bytes", h->max_body);
			return MHD_NO;
		}
		if (sl_now() - x->t_start > h->body_timeout_s) {
			SL_DEBUG("http", "closing a connection: body not complete in %.0f s", h->body_timeout_s);
			return MHD_NO;
		}
		return sl_buf_put(&x->body, upload, n) ? MHD_NO : MHD_YES;
	}
	if (!x->received) { /* the whole request is in: the deadline is met */
		x->received = 1;
		rx_leave(h, conn_of(conn));
	}
	enum MHD_Result ret = MHD_YES;
	x->in_handler = 1;
	if (x->abort) {
		ret = MHD_NO;
	} else if (x->pending) {
		if (MHD_queue_response(conn, (unsigned)x->pending_status, x->pending) != MHD_YES)
			ret = MHD_NO;
		MHD_destroy_response(x->pending);
		x->pending = NULL;
	} else if (!x->handled) {
		x->handled = 1;
		dispatch(x);
		if (x->abort)
			ret = MHD_NO;
	} else if (x->waiting && !x->suspended) { /* resumed with nothing to send yet */
		x->suspended = 1;
		MHD_suspend_connection(conn);
	}
	x->in_handler = 0;
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	coord_http *h = cls;
	coord_http_call *x = *con_cls;
	if (!x)
		return;
	*con_cls = NULL;
	/* 499: the client left before an answer (nginx's convention) */
	coord_metrics_http(h->c->metrics, ROUTES[x->route].path, x->status ? x->status : 499);
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && x->app)
		SL_DEBUG("http", "%s: connection ended before its answer was complete (%d)",
			 ROUTES[x->route].path, (int)toe);
	coord_oai_call_free(h->c, x->app);
	if (x->pending)
		MHD_destroy_response(x->pending);
	if (x->prev)
		x->prev->next = x->next;
	else
		h->calls = x->next;
	if (x->next)
		x->next->prev = x->prev;
	free(x->body.p);
	free(x->out.p);
	free(x);
	/* a kept-alive connection's next request begins: its deadline runs */
	rx_enter(h, conn_of(conn));
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_ctx,
			  enum MHD_ConnectionNotificationCode code)
{
	coord_http *h = cls;
	http_conn *hc = *socket_ctx;
	if (code != MHD_CONNECTION_NOTIFY_STARTED) {
		h->n_connections--;
		rx_leave(h, hc);
		free(hc);
		*socket_ctx = NULL;
		return;
	}
	h->n_connections++;
	/* at the limit MHD stops accepting: make room by dropping the
	 * connection whose request has been coming in longest */
	if (h->n_connections >= h->max_connections && h->rx_head)
		cut(h, h->rx_head, "at --http-max-connections, its request the slowest to come in");
	if (!(hc = calloc(1, sizeof *hc)))
		return; /* no deadline for this one; MHD's idle timeout still holds */
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	hc->fd = ci ? ci->connect_fd : -1;
	*socket_ctx = hc;
	rx_enter(h, hc);
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
	char buf[512];
	vsnprintf(buf, sizeof buf, fmt, ap);
	buf[strcspn(buf, "\n")] = 0;
	SL_DEBUG("http", "mhd: %s", buf);
}

/* --- life cycle --------------------------------------------------------------- */

/* HOST:PORT or [V6HOST]:PORT; PORT * or 0: any free one. */
static int is_loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
	if (a->sa_family == AF_INET6) {
		const struct in6_addr *v6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(v6) ||
		       (IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr[12] == 127);
	}
	return 0;
}

/* *loopback: only this host can reach the address bound. */
static int listen_socket(const char *bind_to, int *fd_out, int *loopback, char *addr, size_t addrlen,
			 char *err, size_t errlen)
{
	char host[128], port[16];
	const char *colon = strrchr(bind_to, ':');
	if (!colon || colon == bind_to || !colon[1] || (size_t)(colon - bind_to) >= sizeof host ||
	    strlen(colon + 1) >= sizeof port)
		return sl_errf(err, errlen, SL_EINVAL, "--http-bind '%s': give HOST:PORT (127.0.0.1:8000)", bind_to);
	snprintf(host, sizeof host, "%.*s", (int)(colon - bind_to), bind_to);
	snprintf(port, sizeof port, "%s", strcmp(colon + 1, "*") ? colon + 1 : "0");
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = 0;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
	int rc = getaddrinfo(host, port, &hints, &ai);
	if (rc)
		return sl_errf(err, errlen, SL_EINVAL, "--http-bind '%s': %s", bind_to, gai_strerror(rc));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (ai->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	}
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1024)) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return sl_errf(err, errlen, SL_ECOMM, "cannot listen on %s: %s", bind_to, strerror(e));
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char h[INET6_ADDRSTRLEN] = "?", p[16] = "?";
	if (!getsockname(fd, (struct sockaddr *)&ss, &sl))
		getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(addr, addrlen, ai->ai_family == AF_INET6 ? "[%s]:%s" : "%s:%s", h, p);
	*loopback = is_loopback(ai->ai_addr);
	freeaddrinfo(ai);
	*fd_out = fd;
	return SL_OK;
}

static int load_key(coord_http *h, const char *path, char *err, size_t errlen)
{
	char *key;
	size_t n;
	int rc = sl_read_file(path, &key, &n, err, errlen);
	if (rc)
		return rc;
	while (n && strchr(" \t\r\n", key[n - 1]))
		key[--n] = 0;
	if (n == 0 || strpbrk(key, "\r\n")) {
		free(key);
		return sl_errf(err, errlen, SL_EINVAL, "--api-key-file %s: want one key on one line", path);
	}
	h->api_key = key;
	h->api_key_len = n;
	return SL_OK;
}

int coord_http_create(coord *c, const coord_opts *o, coord_http **out, char *err, size_t errlen)
{
	coord_http *h = calloc(1, sizeof *h);
	int fd = -1;
	if (!h)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	h->c = c;
	h->max_body = (size_t)o->http_max_body_bytes;
	h->body_timeout_s = o->http_body_timeout_s;
	h->max_connections = o->http_max_connections;
	int loopback = 0;
	int rc = o->api_key_file ? load_key(h, o->api_key_file, err, errlen) : SL_OK;
	if (!rc)
		rc = listen_socket(o->http_bind, &fd, &loopback, h->address, sizeof h->address, err, errlen);
	if (!rc && !loopback && !h->api_key) {
		if (!o->insecure) {
			close(fd);
			rc = sl_errf(err, errlen, SL_EINVAL, "--http-bind %s is reachable from other hosts and "
				     "no --api-key-file is given (docs/security.md), or --insecure to serve "
				     "it to anyone", o->http_bind);
		} else {
			SL_WARN("coord", "--insecure: anyone who reaches http://%s is served", h->address);
		}
	}
	if (!rc) {
		h->d = MHD_start_daemon(
			MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL,
			on_access, h, MHD_OPTION_LISTEN_SOCKET, fd,
			MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->http_max_connections,
			MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->http_idle_timeout_s,
			MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_MEMORY_PER_CONNECTION,
			MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
			MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
			MHD_OPTION_EXTERNAL_LOGGER, on_log, h, MHD_OPTION_END);
		if (!h->d) {
			close(fd);
			rc = sl_errf(err, errlen, SL_ECOMM, "libmicrohttpd did not start on %s (epoll?)", h->address);
		}
	}
	if (rc) {
		coord_http_destroy(h);
		return rc;
	}
	SL_INFO("coord", "HTTP API on http://%s (%d connections, %d s idle, %d s per request, "
		"%zu-byte bodies%s)", h->address, o->http_max_connections, o->http_idle_timeout_s,
		o->http_body_timeout_s, h->max_body,
		h->api_key ? ", API key required" : "");
	*out = h;
	return SL_OK;
}

int coord_http_fd(const coord_http *h)
{
	const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
	return i ? i->epoll_fd : -1;
}

int coord_http_timeout_ms(coord_http *h, int cap)
{
	MHD_UNSIGNED_LONG_LONG t;
	if (MHD_get_timeout(h->d, &t) == MHD_YES && t < (MHD_UNSIGNED_LONG_LONG)cap)
		return (int)t;
	return cap;
}

void coord_http_run(coord_http *h) { MHD_run(h->d); }

/* 1 when the client of a suspended exchange has closed its end. */
static int peer_closed(const coord_http_call *x)
{
	char b;
	if (x->fd < 0)
		return 0;
	ssize_t k = recv(x->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void coord_http_tick(coord_http *h)
{
	if (!h)
		return;
	double now = sl_now();
	while (h->rx_head && now - h->rx_head->t > h->body_timeout_s)
		cut(h, h->rx_head, "its request did not come in within --http-body-timeout-s");
	for (coord_http_call *x = h->calls; x; x = x->next) {
		if (!x->suspended || x->abort || !peer_closed(x))
			continue;
		SL_INFO("coord", "HTTP client of %s left; cancelling its request(s)", ROUTES[x->route].path);
		coord_oai_call_free(h->c, x->app);
		x->app = NULL;
		coord_http_abort(x);
	}
}

void coord_http_destroy(coord_http *h)
{
	if (!h)
		return;
	if (h->d) {
		/* answers already written (the requests ended before this) get a
		 * moment to leave; then every exchange still open is cut */
		double until = sl_now() + HTTP_FLUSH_S;
		for (;;) {
			int busy = 0;
			for (coord_http_call *x = h->calls; x; x = x->next)
				busy |= x->pending || (x->sse && (x->out.n > x->out_off || !x->sse_end));
			if (!busy || sl_now() > until)
				break;
			MHD_run_wait(h->d, 10);
		}
		for (coord_http_call *x = h->calls; x; x = x->next) {
			coord_oai_call_free(h->c, x->app);
			x->app = NULL;
			coord_http_abort(x);
		}
		MHD_run(h->d);
		MHD_stop_daemon(h->d);
	}
	free(h->api_key);
	free(h);
}
