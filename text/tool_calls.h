/*
 * tool_calls.h — a model's tool-call text, per template family: which
 * family a chat template speaks, and the model's output split into plain
 * content and calls (name, arguments as JSON text), whole or streamed.
 *
 *   HERMES   Qwen 2.5, Hermes, and the default for templates that know no
 *            tools: <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>,
 *            one tag per call, several allowed.
 *   LLAMA3   Llama 3.1 / 3.2: the answer is {"name": N, "parameters": {...}}
 *            (optionally after <|python_tag|>, several joined by ';').
 *   MISTRAL  Mistral v0.3 / Nemo: [TOOL_CALLS] [{"name": N, "arguments":
 *            {...}}, ...]; call ids are 9 alphanumerics (its template
 *            refuses others).
 *
 * The stream parser holds back text that may be the start of a marker, so
 * a marker never leaks into content, and reports each call as soon as its
 * name is known, then its arguments as they arrive (the raw JSON text of
 * the value, so the fragments concatenate to valid JSON). A call whose JSON
 * turns out malformed after its name went out cannot be taken back: the
 * stream marks itself bad (text_tool_stream_bad). The whole-text parser
 * (text_tool_parse) runs the same machine and, when anything is malformed,
 * returns the text unchanged as content with no calls.
 *
 * Owner: the coordinator's chat endpoint (coordinator/openai*.c).
 * Tests: tests/unit/text/test_tool_calls.c.
 */
#ifndef TEXT_TOOL_CALLS_H
#define TEXT_TOOL_CALLS_H

#include <stddef.h>

typedef enum text_tool_family {
	TEXT_TOOL_HERMES = 0,
	TEXT_TOOL_LLAMA3,
	TEXT_TOOL_MISTRAL,
} text_tool_family;

/* The family a chat template's source speaks ([TOOL_CALLS] -> MISTRAL,
 * <tool_call> -> HERMES, <|python_tag|> or Llama 3 headers with tools ->
 * LLAMA3); HERMES when it shows none. *knows_tools: 1 when the template
 * mentions `tools` at all (else it ignores them, and the server must tell
 * the model about them itself). */
text_tool_family text_tool_family_of(const char *tmpl_src, size_t len, int *knows_tools);
const char *text_tool_family_name(text_tool_family f);

/* What the stream reports, in order. name and args point into the
 * parser's memory, valid during the call. */
typedef struct text_tool_sink {
	void (*content)(void *u, const char *s, size_t n);
	void (*call_begin)(void *u, int index, const char *name, size_t n);
	void (*call_args)(void *u, int index, const char *s, size_t n);
} text_tool_sink;

typedef struct text_tool_stream text_tool_stream;

/* 0, or SL_ENOMEM. */
int text_tool_stream_create(text_tool_family f, text_tool_stream **out);
/* Only calls of these functions count (names copied): a call of another
 * name is content, so an answer that happens to be JSON with a "name"
 * key (Llama 3's calls are bare JSON) is not taken for a call. Before the
 * first feed. 0, or SL_ENOMEM. */
int text_tool_stream_names(text_tool_stream *st, const char *const *names, int n);
void text_tool_stream_destroy(text_tool_stream *st);
/* Feeds the next piece of output; reports what it settles. 0, or SL_ENOMEM. */
int text_tool_stream_feed(text_tool_stream *st, const char *s, size_t n, const text_tool_sink *k,
			  void *u);
/* The output ended: reports what was held back (an unfinished call's text
 * is content when its name never went out). Returns the number of calls
 * begun, or SL_ENOMEM. */
int text_tool_stream_finish(text_tool_stream *st, const text_tool_sink *k, void *u);
/* 1 when a begun call was malformed (its arguments are then not valid). */
int text_tool_stream_bad(const text_tool_stream *st);

/* One parsed call: malloc'd, NUL-terminated. */
typedef struct text_tool_call {
	char *name;
	char *arguments; /* JSON text of an object */
} text_tool_call;

typedef struct text_tool_parsed {
	char *content;   /* text outside the calls; NULL when empty (when there are
	                  * calls: when only whitespace, which is trimmed at its end) */
	text_tool_call *calls;
	int n_calls;
} text_tool_parsed;

/* The whole output s[0..n): calls, each with valid JSON object arguments,
 * and the text around them; or, when any call is malformed, n_calls 0 and
 * content the text unchanged. 0, or SL_ENOMEM. */
int text_tool_parse(text_tool_family f, const char *s, size_t n, text_tool_parsed *out);
/* The same, counting only calls of names[0..n_names) (NULL: any). */
int text_tool_parse_names(text_tool_family f, const char *const *names, int n_names, const char *s,
			  size_t n, text_tool_parsed *out);
void text_tool_parsed_free(text_tool_parsed *p);

#endif
