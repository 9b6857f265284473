/*
 * fuzz_openai.c — an HTTP request body through the OpenAI API
 * (coord_oai_handle: JSON into Submits, chat messages through the model's
 * chat template, then the Chunk/Done replies back to JSON or server-sent
 * events), in-process: the coordinator of coord_fuzz.h with the Llama 2
 * chat template, http_fake.h in place of the HTTP server. Byte 0 picks the
 * endpoint (0 /v1/completions, 1 /v1/chat/completions, 2 /v1/models,
 * 3 /v1/models/{rest of the input}); the rest is the body. Every request
 * that reaches the node is answered with fixed tokens (a newline, an
 * emoji in byte tokens, words; log-probs as asked), then LENGTH.
 * Checked: one answer per exchange, and every answer is UTF-8 and JSON
 * (each event of a stream, but the final "[DONE]").
 */
#include <cjson/cJSON.h>

#include "coord_fuzz.h"
#include "coordinator/openai.h"
#include "http_fake.h"

static void check_json(const char *what, const char *p, size_t n)
{
	size_t bad = fuzz_utf8_bad_at(p, n);
	FUZZ_CHECK(bad == n, "%s: %zu bytes, not UTF-8 at byte %zu", what, n, bad);
	cJSON *j = cJSON_ParseWithLength(p, n);
	FUZZ_CHECK(j != NULL, "%s is not JSON: %.*s", what, (int)(n > 300 ? 300 : n), p);
	cJSON_Delete(j);
}

/* "data: JSON\n\n" events, the last "data: [DONE]\n\n" when it ended well. */
static void check_events(const coord_http_call *x)
{
	const char *p = x->out.p, *end = x->out.p + x->out.n;
	while (p < end) {
		const char *e = memmem(p, (size_t)(end - p), "\n\n", 2);
		FUZZ_CHECK(e != NULL, "an event without its blank line: %.*s", (int)(end - p), p);
		FUZZ_CHECK(!strncmp(p, "data: ", 6), "an event not starting with \"data: \": %.40s", p);
		if (!(e - p == 12 && !memcmp(p + 6, "[DONE]", 6)))
			check_json("an event", p + 6, (size_t)(e - p - 6));
		p = e + 2;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int endpoints[4] = {COORD_OAI_COMPLETIONS, COORD_OAI_CHAT, COORD_OAI_MODELS,
					 COORD_OAI_MODEL};
	static const int32_t answer[] = {3 + 0x0A, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80, 260, 261};
	char tmpl[1024];
	fuzz_selftest(data, size);
	if (size < 1)
		return 0;
	snprintf(tmpl, sizeof tmpl, "%s/tests/data/chat_templates/llama2.jinja", fuzz_repo_dir());
	cf_state s;
	cf_begin(&s, tmpl);
	coord_http_call x = {.route = 0};
	/* as http.c hands it over: NUL-terminated, freed once handled */
	char *body = fuzz_strdup(data + 1, size - 1), arg[COORD_MAX_NAME + 2];
	snprintf(arg, sizeof arg, "%.*s", (int)(size - 1 > COORD_MAX_NAME ? COORD_MAX_NAME : size - 1),
		 body);
	coord_oai_handle(s.e.c, &x, endpoints[data[0] & 3], arg, body, size - 1);
	free(body);
	for (int round = 0, answered = 0; round < 4 && (x.waiting || x.sse); round++) {
		cf_turn(&s);
		int n_enq = s.n_enq;
		for (int k = answered; k < n_enq; k++)
			cf_answer(&s, k, answer, 7, SHARDLINE__NODE__FINISH__RUNNING, 0);
		cf_turn(&s);
		for (int k = answered; k < n_enq; k++)
			cf_answer(&s, k, answer + 5, 2, SHARDLINE__NODE__FINISH__LENGTH, 0);
		cf_turn(&s);
		answered = n_enq;
	}
	if (x.sse)
		check_events(&x);
	else if (x.handled && !x.waiting)
		check_json("the response", x.out.p, x.out.n);
	else
		FUZZ_CHECK(x.waiting, "the exchange got no answer and does not wait");
	coord_oai_call_free(s.e.c, x.app); /* the exchange is over, as http.c ends it */
	cf_end(&s);
	free(x.out.p);
	return 0;
}
