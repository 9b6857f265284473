/*
 * http_fake.h — a stand-in for coordinator/http_call.c in the OpenAI
 * harness: every function http_call.h declares, defined here, so the
 * linker never takes http_call.o (libmicrohttpd) from the library and
 * openai.c answers into the exchange's own buffer instead of a socket.
 * The harness makes the struct coord_http_call itself, as http.c would;
 * here it records the status, the whole response or the event stream
 * (in out), and whether the exchange waits. The coordinator under test
 * has no HTTP server (http.c is linked but never started).
 *
 * Include it in exactly one translation unit. If http_call.h gains a
 * function, the link fails with a duplicate symbol: add it here.
 */
#ifndef TESTS_FUZZ_HTTP_FAKE_H
#define TESTS_FUZZ_HTTP_FAKE_H

#include <string.h>

#include "coordinator/http_call.h"
#include "fuzz_util.h"

static void fake_out(coord_http_call *x, const char *p, size_t n)
{
	FUZZ_CHECK(sl_buf_put(&x->out, p, n) == 0, "out of memory");
}

void coord_http_respond(coord_http_call *x, int status, const char *content_type, const char *body,
			size_t len, const char *extra_header)
{
	FUZZ_CHECK(!x->handled || x->waiting, "a second answer to one exchange (status %d)", status);
	FUZZ_CHECK(status >= 100 && status <= 599, "HTTP status %d", status);
	FUZZ_CHECK(content_type && *content_type, "a response without a content type");
	x->handled = 1;
	x->waiting = 0;
	x->status = status;
	fake_out(x, body, len);
}

void coord_http_wait(coord_http_call *x)
{
	if (!x->handled && !x->sse)
		x->waiting = 1;
}

int coord_http_sse_begin(coord_http_call *x)
{
	FUZZ_CHECK(!x->handled && !x->sse, "an event stream after an answer");
	x->handled = x->sse = 1;
	x->status = 200;
	return SL_OK;
}

int coord_http_sse_write(coord_http_call *x, const char *p, size_t n)
{
	FUZZ_CHECK(x->sse, "an event written without a stream");
	if (x->sse_end || x->abort)
		return SL_OK;
	fake_out(x, p, n);
	return SL_OK;
}

void coord_http_sse_end(coord_http_call *x) { x->sse_end = 1; }
void coord_http_set_app(coord_http_call *x, void *app) { x->app = app; }
void coord_http_abort(coord_http_call *x) { x->abort = 1; }

#endif
