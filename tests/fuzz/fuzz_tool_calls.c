/*
 * fuzz_tool_calls.c — model output (untrusted: any bytes a model may
 * write) through the tool-call parser of every family (text/tool_calls.h):
 * the whole-text parse must give calls whose arguments are JSON objects,
 * and the stream parser, fed the same bytes in two pieces cut where the
 * first byte says, must report the same calls unless it marked itself bad;
 * output with no call comes back unchanged as content.
 */
#include <cjson/cJSON.h>

#include "text/tool_calls.h"
#include "common/buf.h"
#include "fuzz_util.h"

typedef struct {
	sl_buf args[8];
	int n;
} seen;

static void s_content(void *u, const char *s, size_t n) { (void)u, (void)s, (void)n; }
static void s_begin(void *u, int i, const char *s, size_t n)
{
	seen *g = u;
	FUZZ_CHECK(i == g->n && n > 0, "call %d begins after %d calls, name of %zu bytes", i, g->n, n);
	g->n = i + 1;
	(void)s;
}
static void s_args(void *u, int i, const char *s, size_t n)
{
	seen *g = u;
	FUZZ_CHECK(i == g->n - 1, "arguments of call %d while call %d is open", i, g->n - 1);
	if (i < 8)
		sl_buf_put(&g->args[i], s, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const text_tool_sink sink = {s_content, s_begin, s_args};
	fuzz_selftest(data, size);
	const char *s = (const char *)data;
	size_t cut = size ? data[0] % (size + 1) : 0;
	for (int f = 0; f < 3; f++) {
		text_tool_parsed p;
		if (text_tool_parse((text_tool_family)f, s, size, &p))
			continue;
		/* no call: the text comes back byte for byte */
		if (!p.n_calls)
			FUZZ_CHECK(size ? p.content && strlen(p.content) <= size &&
					 !memcmp(p.content, s, size) && (memchr(s, 0, size) || strlen(p.content) == size)
				       : !p.content, "no calls, and the content is not the text");
		for (int i = 0; i < p.n_calls; i++) {
			cJSON *a = cJSON_Parse(p.calls[i].arguments);
			FUZZ_CHECK(cJSON_IsObject(a) && p.calls[i].name[0], "call %d: arguments not an object", i);
			cJSON_Delete(a);
		}
		text_tool_stream *st;
		seen g = {0};
		if (text_tool_stream_create((text_tool_family)f, &st) == 0) {
			text_tool_stream_feed(st, s, cut, &sink, &g);
			text_tool_stream_feed(st, s + cut, size - cut, &sink, &g);
			int calls = text_tool_stream_finish(st, &sink, &g);
			if (!text_tool_stream_bad(st)) {
				FUZZ_CHECK(calls == p.n_calls, "stream %d calls, whole %d", calls, p.n_calls);
				for (int i = 0; i < calls && i < 8; i++)
					FUZZ_CHECK(g.args[i].n == strlen(p.calls[i].arguments) &&
						   !memcmp(g.args[i].p, p.calls[i].arguments, g.args[i].n),
						   "call %d: stream and whole arguments differ", i);
			}
			text_tool_stream_destroy(st);
		}
		for (int i = 0; i < 8; i++)
			sl_buf_free(&g.args[i]);
		text_tool_parsed_free(&p);
	}
	return 0;
}
