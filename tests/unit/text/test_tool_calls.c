/*
 * test_tool_calls.c -- text/tool_calls.c: the model's tool-call text of
 * each family (Hermes <tool_call>, Llama 3 JSON / <|python_tag|>, Mistral
 * [TOOL_CALLS]) split into content and calls; malformed calls come back as
 * plain content; the stream parser, fed in pieces of every size, reports
 * the same calls and content as the whole-text one and never lets a marker
 * into content.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "text/tool_calls.h"

typedef struct {
	text_tool_family f;
	const char *in;
	const char *content;  /* NULL: none */
	int n_calls;
	const char *names[3];
	const char *args[3];  /* exactly, as the model wrote the value */
} pcase;

static const pcase cases[] = {
	/* Hermes (Qwen 2.5) */
	{TEXT_TOOL_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
	 NULL, 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}},
	{TEXT_TOOL_HERMES, "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
	 "Let me check.", 1, {"f"}, {"{}"}},
	{TEXT_TOOL_HERMES,
	 "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n"
	 "<tool_call>\n{\"arguments\": {\"q\": \"\\\"quoted\\\" </tool_call>\"}, \"name\": \"b-2\"}\n</tool_call>",
	 NULL, 2, {"a", "b-2"}, {"{\"x\": [1, {\"y\": \"}\"}]}", "{\"q\": \"\\\"quoted\\\" </tool_call>\"}"}},
	{TEXT_TOOL_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}", NULL, 1, {"f"}, {"{\"a\": 1}"}},
	{TEXT_TOOL_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 2}\"}</tool_call>", NULL, 1,
	 {"f"}, {"{\"a\": 2}"}},
	{TEXT_TOOL_HERMES, "<tool_call>{\"name\": \"f\"}</tool_call>", NULL, 1, {"f"}, {"{}"}},
	{TEXT_TOOL_HERMES, "Just an answer, no tools. a < b and <tool is fine", "Just an answer, no tools. a < b and <tool is fine",
	 0, {0}, {0}},
	{TEXT_TOOL_HERMES, "  leading and trailing  \n", "  leading and trailing  \n", 0, {0}, {0}},
	/* malformed: the text as it came */
	{TEXT_TOOL_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }}\n</tool_call>",
	 "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }}\n</tool_call>", 0, {0}, {0}},
	{TEXT_TOOL_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1",
	 "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1", 0, {0}, {0}},
	{TEXT_TOOL_HERMES, "<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", 0, {0}, {0}},
	{TEXT_TOOL_HERMES, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", 0,
	 {0}, {0}},
	{TEXT_TOOL_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": [1, 2]}</tool_call>",
	 "<tool_call>{\"name\": \"f\", \"arguments\": [1, 2]}</tool_call>", 0, {0}, {0}},
	{TEXT_TOOL_HERMES, "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
	 "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>", 0, {0}, {0}},
	{TEXT_TOOL_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\x1a}}</tool_call>",
	 "<tool_call>{\"name\": \"f\", \"arguments\": {\x1a}}</tool_call>", 0, {0}, {0}},
	{TEXT_TOOL_HERMES, "<tool_call>", "<tool_call>", 0, {0}, {0}},
	/* what was not a call comes back byte for byte */
	{TEXT_TOOL_HERMES, "<tool_call>\n {#x", "<tool_call>\n {#x", 0, {0}, {0}},
	{TEXT_TOOL_MISTRAL, "[TOOL_CALLS] [ nope", "[TOOL_CALLS] [ nope", 0, {0}, {0}},
	{TEXT_TOOL_MISTRAL, "\t[TOOL_CALLS] [ ]", "\t[TOOL_CALLS] [ ]", 0, {0}, {0}},
	{TEXT_TOOL_LLAMA3, "\n  {\"no\": 1}", "\n  {\"no\": 1}", 0, {0}, {0}},
	/* a failed call's text is content, a later call still counts */
	{TEXT_TOOL_HERMES, "<tool_call>{#bad <tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>",
	 "<tool_call>{#bad", 1, {"g"}, {"{}"}},
	{TEXT_TOOL_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {}}\n</tool_c", NULL, 1, {"f"}, {"{}"}},
	{TEXT_TOOL_LLAMA3, "{oops} then {\"name\": \"f\"}", "{oops} then {\"name\": \"f\"}", 0, {0}, {0}},
	{TEXT_TOOL_HERMES, "<tool_ca", "<tool_ca", 0, {0}, {0}},
	{TEXT_TOOL_HERMES, "", NULL, 0, {0}, {0}},
	/* Llama 3.1 / 3.2 */
	{TEXT_TOOL_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", NULL, 1,
	 {"get_weather"}, {"{\"city\": \"Paris\"}"}},
	{TEXT_TOOL_LLAMA3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"n\": -1.5e3}}", NULL, 1, {"f"},
	 {"{\"n\": -1.5e3}"}},
	{TEXT_TOOL_LLAMA3, "\n {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": true}}",
	 NULL, 2, {"a", "b"}, {"{}", "{\"k\": true}"}},
	{TEXT_TOOL_LLAMA3, "The answer is {\"name\": 1}.", "The answer is {\"name\": 1}.", 0, {0}, {0}},
	{TEXT_TOOL_LLAMA3, "{\"city\": \"Paris\", \"temp\": 21}", "{\"city\": \"Paris\", \"temp\": 21}", 0, {0}, {0}},
	{TEXT_TOOL_LLAMA3, "<|python_tag|>brave_search.call(query=\"x\")", "<|python_tag|>brave_search.call(query=\"x\")", 0,
	 {0}, {0}},
	{TEXT_TOOL_LLAMA3, "{\"name\": \"f\", \"parameters\": {\"a\": tru}}", "{\"name\": \"f\", \"parameters\": {\"a\": tru}}",
	 0, {0}, {0}},
	/* Mistral v0.3 */
	{TEXT_TOOL_MISTRAL, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", NULL, 1,
	 {"get_weather"}, {"{\"city\": \"Paris\"}"}},
	{TEXT_TOOL_MISTRAL,
	 "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": \"[TOOL_CALLS]\"}}, {\"name\": \"b\", \"arguments\": {}}]",
	 NULL, 2, {"a", "b"}, {"{\"x\": \"[TOOL_CALLS]\"}", "{}"}},
	{TEXT_TOOL_MISTRAL, "Sure. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"y\": null}}]", "Sure.", 1, {"f"},
	 {"{\"y\": null}"}},
	{TEXT_TOOL_MISTRAL, "[TOOL_CALLS] {\"name\": \"f\", \"arguments\": {}}", NULL, 1, {"f"}, {"{}"}},
	{TEXT_TOOL_MISTRAL, "[TOOL_CALLS] nope", "[TOOL_CALLS] nope", 0, {0}, {0}},
	{TEXT_TOOL_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\" 1}}]",
	 "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\" 1}}]", 0, {0}, {0}},
	{TEXT_TOOL_MISTRAL, "[INST] is not [TOOL_CALLS", "[INST] is not [TOOL_CALLS", 0, {0}, {0}},
};

static void check_parsed(const pcase *c, const text_tool_parsed *p, const char *how)
{
	if (c->content)
		ck_assert_msg(p->content && !strcmp(p->content, c->content), "%s %s: content [%s], want [%s]", how,
			      c->in, p->content ? p->content : "(null)", c->content);
	else
		ck_assert_msg(!p->content, "%s %s: content [%s], want none", how, c->in, p->content);
	ck_assert_msg(p->n_calls == c->n_calls, "%s %s: %d calls, want %d", how, c->in, p->n_calls, c->n_calls);
	for (int i = 0; i < c->n_calls; i++) {
		ck_assert_str_eq(p->calls[i].name, c->names[i]);
		ck_assert_msg(!strcmp(p->calls[i].arguments, c->args[i]), "%s %s: call %d arguments [%s], want [%s]", how,
			      c->in, i, p->calls[i].arguments, c->args[i]);
	}
}

START_TEST(parse_whole)
{
	const pcase *c = &cases[_i];
	text_tool_parsed p;
	ck_assert_int_eq(text_tool_parse(c->f, c->in, strlen(c->in), &p), 0);
	check_parsed(c, &p, "whole");
	text_tool_parsed_free(&p);
}
END_TEST

/* What a stream reported, gathered, to compare with the whole parse. */
typedef struct {
	sl_buf content;
	sl_buf names[4], args[4];
	int n, order_bad;
} got;

static void g_content(void *u, const char *s, size_t n)
{
	sl_buf_put(&((got *)u)->content, s, n);
}
static void g_begin(void *u, int i, const char *s, size_t n)
{
	got *g = u;
	g->order_bad |= i != g->n || i >= 4;
	if (i < 4)
		sl_buf_put(&g->names[i], s, n);
	g->n = i + 1;
}
static void g_args(void *u, int i, const char *s, size_t n)
{
	got *g = u;
	g->order_bad |= i != g->n - 1;
	if (i < 4)
		sl_buf_put(&g->args[i], s, n);
}

/* Every piece size from 1 byte to the whole: same calls, and content
 * never holds a marker that was part of a call. */
START_TEST(stream_pieces)
{
	static const text_tool_sink sink = {g_content, g_begin, g_args};
	const pcase *c = &cases[_i];
	size_t n = strlen(c->in);
	for (size_t piece = 1; piece <= (n ? n : 1); piece++) {
		text_tool_stream *st;
		got g = {0};
		ck_assert_int_eq(text_tool_stream_create(c->f, &st), 0);
		for (size_t i = 0; i < n; i += piece)
			ck_assert_int_eq(text_tool_stream_feed(st, c->in + i, i + piece <= n ? piece : n - i, &sink, &g), 0);
		int calls = text_tool_stream_finish(st, &sink, &g);
		ck_assert_int_ge(calls, 0);
		ck_assert_msg(!g.order_bad, "%s piece %zu: events out of order", c->in, piece);
		if (!text_tool_stream_bad(st)) {
			ck_assert_msg(calls == c->n_calls, "%s piece %zu: %d calls, want %d", c->in, piece, calls,
				      c->n_calls);
			for (int i = 0; i < c->n_calls; i++) {
				ck_assert_str_eq(g.names[i].p, c->names[i]);
				ck_assert_msg(!strcmp(g.args[i].p, c->args[i]), "%s piece %zu: args [%s]", c->in, piece,
					      g.args[i].p);
			}
			if (c->n_calls && !(c->content && strstr(c->content, "<tool_call>"))) {
				const char *m = c->f == TEXT_TOOL_HERMES ? "<tool_call>" : c->f == TEXT_TOOL_MISTRAL
						? "[TOOL_CALLS]" : "<|python_tag|>";
				ck_assert_msg(!g.content.p || !strstr(g.content.p, m), "%s piece %zu: marker in content [%s]",
					      c->in, piece, g.content.p);
			}
			/* content as the whole parse gives it, up to the whitespace it trims */
			if (c->content)
				ck_assert_msg(g.content.p && !strncmp(g.content.p, c->content, strlen(c->content)),
					      "%s piece %zu: content [%s]", c->in, piece, g.content.p);
		} else {
			ck_assert_msg(c->n_calls == 0, "%s piece %zu: marked bad", c->in, piece);
		}
		sl_buf_free(&g.content);
		for (int i = 0; i < 4; i++)
			sl_buf_free(&g.names[i]), sl_buf_free(&g.args[i]);
		text_tool_stream_destroy(st);
	}
}
END_TEST

/* The first report of a call comes as soon as its name is complete: before
 * its arguments end, so a client sees the call begin. */
START_TEST(stream_reports_early)
{
	static const text_tool_sink sink = {g_content, g_begin, g_args};
	const char *a = "<tool_call>\n{\"name\": \"slow\", \"arguments\": {\"text\": \"long";
	text_tool_stream *st;
	got g = {0};
	ck_assert_int_eq(text_tool_stream_create(TEXT_TOOL_HERMES, &st), 0);
	ck_assert_int_eq(text_tool_stream_feed(st, a, strlen(a), &sink, &g), 0);
	ck_assert_int_eq(g.n, 1);
	ck_assert_str_eq(g.names[0].p, "slow");
	ck_assert_str_eq(g.args[0].p, "{\"text\": \"long");
	ck_assert_ptr_null(g.content.p);
	ck_assert_int_eq(text_tool_stream_feed(st, " text\"}}\n</tool_call>", 21, &sink, &g), 0);
	ck_assert_int_eq(text_tool_stream_finish(st, &sink, &g), 1);
	ck_assert_str_eq(g.args[0].p, "{\"text\": \"long text\"}");
	ck_assert_int_eq(text_tool_stream_bad(st), 0);
	text_tool_stream_destroy(st);
	sl_buf_free(&g.content);
	sl_buf_free(&g.names[0]);
	sl_buf_free(&g.args[0]);
}
END_TEST

/* With the tools' names given, a call of another name is content: an
 * answer that is JSON with a "name" key is not a Llama 3 call. */
START_TEST(only_known_names)
{
	static const char *const names[] = {"get_weather", "now"};
	const char *json = "{\"name\": \"Bob\", \"parameters\": {\"age\": 3}}";
	text_tool_parsed p;
	ck_assert_int_eq(text_tool_parse_names(TEXT_TOOL_LLAMA3, names, 2, json, strlen(json), &p), 0);
	ck_assert_int_eq(p.n_calls, 0);
	ck_assert_str_eq(p.content, json);
	text_tool_parsed_free(&p);
	const char *nl = "<tool_call>\n{\"name\": \"Bob\", \"arguments\": {}}\n</tool_call>";
	ck_assert_int_eq(text_tool_parse_names(TEXT_TOOL_HERMES, names, 2, nl, strlen(nl), &p), 0);
	ck_assert_int_eq(p.n_calls, 0);
	ck_assert_str_eq(p.content, nl);
	text_tool_parsed_free(&p);
	ck_assert_int_eq(text_tool_parse(TEXT_TOOL_LLAMA3, json, strlen(json), &p), 0);
	ck_assert_int_eq(p.n_calls, 1); /* without names: any */
	text_tool_parsed_free(&p);
	const char *two = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>\n"
			  "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>";
	ck_assert_int_eq(text_tool_parse_names(TEXT_TOOL_HERMES, names, 2, two, strlen(two), &p), 0);
	ck_assert_int_eq(p.n_calls, 1);
	ck_assert_str_eq(p.calls[0].name, "now");
	ck_assert_str_eq(p.content, "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>");
	text_tool_parsed_free(&p);
}
END_TEST

/* Bytes of every value never crash the parser (a poor man's fuzz pass). */
START_TEST(random_bytes_never_crash)
{
	static const char alpha[] = "<tool_call>{}[]\",:;\\ namearguments[TOOL_CALLS]<|python_tag|>01\n";
	unsigned s = 12345u + (unsigned)_i;
	char buf[200];
	for (int round = 0; round < 300; round++) {
		size_t n = (s = s * 1103515245u + 12345u) % sizeof buf;
		for (size_t i = 0; i < n; i++)
			buf[i] = alpha[((s = s * 1103515245u + 12345u) >> 16) % (sizeof alpha - 1)];
		for (int f = 0; f < 3; f++) {
			text_tool_parsed p;
			ck_assert_int_eq(text_tool_parse((text_tool_family)f, buf, n, &p), 0);
			for (int i = 0; i < p.n_calls; i++)
				ck_assert_ptr_nonnull(p.calls[i].arguments);
			text_tool_parsed_free(&p);
		}
	}
}
END_TEST

START_TEST(family_of_templates)
{
	int knows;
	ck_assert_int_eq(text_tool_family_of("{{ '[TOOL_CALLS] [' }} tools", 28, &knows), TEXT_TOOL_MISTRAL);
	ck_assert_int_eq(knows, 1);
	ck_assert_int_eq(text_tool_family_of("<tool_call>{{ tools }}", 22, &knows), TEXT_TOOL_HERMES);
	ck_assert_int_eq(text_tool_family_of("<|start_header_id|>{% if tools %}", 33, &knows), TEXT_TOOL_LLAMA3);
	ck_assert_int_eq(text_tool_family_of("<|im_start|>{{ m.content }}", 27, &knows), TEXT_TOOL_HERMES);
	ck_assert_int_eq(knows, 0);
}
END_TEST

/* The real templates of tests/data/chat_templates each name their family;
 * those without tools are Hermes with knows_tools 0 (the server then
 * describes the tools itself). */
START_TEST(family_of_real_templates)
{
	static const struct {
		const char *file;
		text_tool_family f;
		int knows;
	} want[] = {
		{"llama3_1", TEXT_TOOL_LLAMA3, 1}, {"llama3_2", TEXT_TOOL_LLAMA3, 1},
		{"qwen2_5", TEXT_TOOL_HERMES, 1},  {"mistral_v0_3", TEXT_TOOL_MISTRAL, 1},
		{"smollm2", TEXT_TOOL_HERMES, 0},  {"llama3", TEXT_TOOL_HERMES, 0},
		{"mistral", TEXT_TOOL_HERMES, 0},  {"llama2", TEXT_TOOL_HERMES, 0},
	};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
		char path[256], *src = NULL;
		size_t len = 0;
		snprintf(path, sizeof path, "tests/data/chat_templates/%s.jinja", want[i].file);
		FILE *fp = fopen(path, "rb");
		ck_assert_msg(fp != NULL, "%s", path);
		src = malloc(1 << 16);
		len = fread(src, 1, 1 << 16, fp);
		fclose(fp);
		int knows = -1;
		ck_assert_msg(text_tool_family_of(src, len, &knows) == want[i].f, "%s: family", path);
		ck_assert_msg(knows == want[i].knows, "%s: knows tools %d", path, knows);
		free(src);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tool_calls");
	TCase *tc = tcase_create("parse");
	int n = (int)(sizeof cases / sizeof *cases);
	tcase_add_loop_test(tc, parse_whole, 0, n);
	tcase_add_loop_test(tc, stream_pieces, 0, n);
	tcase_add_test(tc, stream_reports_early);
	tcase_add_test(tc, only_known_names);
	tcase_add_loop_test(tc, random_bytes_never_crash, 0, 4);
	tcase_add_test(tc, family_of_templates);
	tcase_add_test(tc, family_of_real_templates);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
