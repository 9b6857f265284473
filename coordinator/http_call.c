/*
 * http_call.c — answering one HTTP exchange (see http_call.h): a whole
 * response queued at once or kept until the suspended exchange is
 * resumed, or an event stream whose bytes wait here until MHD's content
 * reader takes them.
 *
 * Suspending is how an exchange waits for tokens without a thread or a
 * busy loop: MHD stops watching a suspended connection until
 * MHD_resume_connection, which every call that gives it something to
 * send makes (wake). Callers: openai.c (its answers) and http.c (its own
 * answers, and cutting exchanges off).
 */
#include "coordinator/http_call.h"

#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

#include "common/sl.h"

#define HTTP_SSE_BLOCK (16 * 1024)
#define HTTP_MAX_UNSENT (8 << 20) /* event bytes a client has not read: past it, cut */

static void wake(coord_http_call *x)
{
	if (x->suspended) {
		x->suspended = 0;
		MHD_resume_connection(x->conn);
	}
}

static void add_header(struct MHD_Response *r, const char *line)
{
	const char *colon = line ? strchr(line, ':') : NULL;
	char name[64];
	if (!colon || (size_t)(colon - line) >= sizeof name)
		return;
	snprintf(name, sizeof name, "%.*s", (int)(colon - line), line);
	MHD_add_response_header(r, name, colon + 1 + strspn(colon + 1, " "));
}

void coord_http_respond(coord_http_call *x, int status, const char *content_type, const char *body,
			size_t len, const char *extra_header)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	x->handled = 1;
	x->waiting = 0;
	if (!r) { /* out of memory: all we can do is hang up */
		coord_http_abort(x);
		return;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	add_header(r, extra_header);
	if (status == 405 && x->allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, x->allow);
	x->status = status;
	if (x->in_handler && !x->suspended) {
		if (MHD_queue_response(x->conn, (unsigned)status, r) != MHD_YES)
			x->abort = 1;
		MHD_destroy_response(r);
		return;
	}
	if (x->pending)
		MHD_destroy_response(x->pending);
	x->pending = r;
	x->pending_status = status;
	wake(x);
}

void coord_http_wait(coord_http_call *x)
{
	if (x->suspended || x->pending)
		return;
	x->waiting = 1;
	x->suspended = 1;
	MHD_suspend_connection(x->conn);
}

/* The content reader of an event stream: what was written, or suspend
 * until more is (returning 0 without suspending would make MHD poll). */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	coord_http_call *x = cls;
	if (x->abort)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	size_t avail = x->out.n - x->out_off;
	if (avail) {
		size_t n = avail < max ? avail : max;
		memcpy(buf, x->out.p + x->out_off, n);
		x->out_off += n;
		if (x->out_off == x->out.n)
			x->out.n = x->out_off = 0;
		return (ssize_t)n;
	}
	if (x->sse_end)
		return MHD_CONTENT_READER_END_OF_STREAM;
	x->suspended = 1;
	MHD_suspend_connection(x->conn);
	return 0;
}

int coord_http_sse_begin(coord_http_call *x)
{
	struct MHD_Response *r =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, HTTP_SSE_BLOCK, sse_read, x, NULL);
	if (!r)
		return SL_ENOMEM;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* proxies: do not hold events back */
	x->handled = x->sse = 1;
	x->waiting = 0;
	x->status = MHD_HTTP_OK;
	if (x->in_handler && !x->suspended) {
		int ok = MHD_queue_response(x->conn, MHD_HTTP_OK, r) == MHD_YES;
		MHD_destroy_response(r);
		return ok ? SL_OK : SL_EIO;
	}
	/* from a waiting exchange: queued when it is resumed (http.c) */
	if (x->pending)
		MHD_destroy_response(x->pending);
	x->pending = r;
	x->pending_status = MHD_HTTP_OK;
	wake(x);
	return SL_OK;
}

int coord_http_sse_write(coord_http_call *x, const char *p, size_t n)
{
	if (x->sse_end || x->abort)
		return SL_OK;
	if (x->out.n - x->out_off + n > HTTP_MAX_UNSENT) {
		/* a client that does not read its stream must not make the
		 * coordinator hold the whole generation: hang up (the caller
	 * detaches the requests, which the tick then cancels) */
		SL_WARN("coord", "HTTP client of a stream left %zu bytes unread; closing it",
			x->out.n - x->out_off);
		coord_http_abort(x);
		return SL_EIO;
	}
	if (sl_buf_put(&x->out, p, n))
		return SL_ENOMEM;
	wake(x);
	return SL_OK;
}

void coord_http_sse_end(coord_http_call *x)
{
	x->sse_end = 1;
	wake(x);
}

void coord_http_set_app(coord_http_call *x, void *app) { x->app = app; }

void coord_http_abort(coord_http_call *x)
{
	x->abort = 1;
	wake(x);
}
