/*
 * test_chat_template.c -- text/jinja/chat_template*.c: byte-exact
 * conformance with Hugging Face transformers on the real chat templates of
 * the Llama 2, Llama 3 / 3.1 / 3.2, Mistral, Zephyr/TinyLlama and ChatML
 * (SmolLM2, Qwen2.5) families and on one-feature templates, as recorded by
 * tools/make_chat_conformance.py (the JSON files in tests/data/chat_templates); then
 * compile errors with their line:col, render errors, and the resource
 * bounds an untrusted template runs under.  Data folder:
 * $SL_CHAT_TEMPLATE_DATA or tests/data/chat_templates.  Needs no Python.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sl.h"
#include "text/jinja/chat_template.h"

static char g_err[SL_ERRLEN];

static const char *data_dir(void)
{
	const char *d = getenv("SL_CHAT_TEMPLATE_DATA");
	return d ? d : "tests/data/chat_templates";
}

static char *read_data(const char *name, size_t *len)
{
	char path[512], *buf;
	snprintf(path, sizeof path, "%s/%s", data_dir(), name);
	int rc = sl_read_file(path, &buf, len, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "read %s: %s", path, g_err);
	return buf;
}

static cJSON *read_json(const char *name)
{
	size_t len;
	char *s = read_data(name, &len);
	cJSON *j = cJSON_ParseWithLength(s, len);
	ck_assert_msg(j != NULL, "%s: not JSON", name);
	free(s);
	return j;
}

static text_tmpl *compile_str(const char *src, const char *name)
{
	text_tmpl *t = NULL;
	int rc = text_tmpl_compile(src, strlen(src), name, &t, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "compile %s: %s", name, g_err);
	return t;
}

/* Messages of a fixture case; content is a string, null or a parts list. */
typedef struct {
	text_chat_msg *m;
	text_chat_part **parts;
	char **extra;  /* the whole message as JSON, when it has more than role and content */
	int n;
} msgs;

static msgs to_msgs(const cJSON *arr)
{
	msgs r = {0};
	r.n = cJSON_GetArraySize(arr);
	r.m = calloc((size_t)r.n + 1, sizeof *r.m);
	r.parts = calloc((size_t)r.n + 1, sizeof *r.parts);
	r.extra = calloc((size_t)r.n + 1, sizeof *r.extra);
	for (int i = 0; i < r.n; i++) {
		const cJSON *x = cJSON_GetArrayItem(arr, i);
		if (cJSON_GetArraySize(x) > 2) {
			r.extra[i] = cJSON_PrintUnformatted(x);
			r.m[i].extra_json = r.extra[i];
			r.m[i].extra_len = strlen(r.extra[i]);
		}
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(x, "content");
		r.m[i].role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "role"));
		if (cJSON_IsString(c)) {
			r.m[i].content = c->valuestring;
			r.m[i].content_len = strlen(c->valuestring);
		} else if (cJSON_IsArray(c)) {
			int np = cJSON_GetArraySize(c);
			text_chat_part *p = calloc((size_t)np + 1, sizeof *p);
			for (int k = 0; k < np; k++) {
				const cJSON *q = cJSON_GetArrayItem(c, k);
				p[k].type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(q, "type"));
				p[k].text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(q, "text"));
				p[k].text_len = strlen(p[k].text);
			}
			r.m[i].parts = p;
			r.m[i].n_parts = np;
			r.parts[i] = p;
		}
	}
	return r;
}

static void free_msgs(msgs *r)
{
	for (int i = 0; i < r->n; i++) {
		free(r->parts[i]);
		free(r->extra[i]);
	}
	free(r->extra);
	free(r->parts);
	free(r->m);
}

/* Prints where two renderings part: offset, and both sides around it. */
static void show_diff(const char *what, const char *want, size_t wn, const char *got, size_t gn)
{
	size_t i = 0;
	while (i < wn && i < gn && want[i] == got[i])
		i++;
	size_t from = i > 30 ? i - 30 : 0;
	int wl = (int)((wn - from) < 70 ? wn - from : 70), gl = (int)((gn - from) < 70 ? gn - from : 70);
	printf("%s: first difference at byte %zu (want %zu bytes, got %zu)\n"
	       "  want ...%.*s...\n  got  ...%.*s...\n",
	       what, i, wn, gn, wl, want + from, gl, got + from);
}

static const char *jstr(const cJSON *o, const char *k)
{
	return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* Runs one recorded case; 1 when it matches. */
static int run_case(const text_tmpl *t, const cJSON *doc, const cJSON *cs, const char *label)
{
	msgs m = to_msgs(cJSON_GetObjectItemCaseSensitive(cs, "messages"));
	text_tmpl_vars v = {0};
	const cJSON *now = cJSON_GetObjectItemCaseSensitive(doc, "now_unix");
	v.add_generation_prompt =
		cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cs, "add_generation_prompt"));
	v.bos_token = jstr(doc, "bos_token");
	v.eos_token = jstr(doc, "eos_token");
	v.date_string = jstr(cs, "date_string");
	v.now_unix = cJSON_IsNumber(now) ? (int64_t)now->valuedouble : 0;
	const cJSON *tools = cJSON_GetObjectItemCaseSensitive(cs, "tools");
	char *tools_json = cJSON_IsArray(tools) ? cJSON_PrintUnformatted(tools) : NULL;
	v.tools_json = tools_json;
	v.tools_len = tools_json ? strlen(tools_json) : 0;
	char *out = NULL, what[256];
	size_t len = 0;
	int rc = text_tmpl_render(t, m.m, m.n, &v, &out, &len, g_err, sizeof g_err);
	const char *want = jstr(cs, "expected"), *raises = jstr(cs, "raises");
	int ok = 1;
	snprintf(what, sizeof what, "%s/%s", label, jstr(cs, "name"));
	if (want) {
		if (rc) {
			printf("%s: render failed: %s\n", what, g_err);
			ok = 0;
		} else if (len != strlen(want) || memcmp(out, want, len)) {
			show_diff(what, want, strlen(want), out, len);
			ok = 0;
		}
	} else if (rc != SL_EINVAL) {
		printf("%s: rendered, but transformers refuses it (%s)\n", what,
		       raises ? raises : jstr(cs, "error"));
		ok = 0;
	} else if (raises && strcmp(g_err, raises)) {
		printf("%s: raise_exception message\n  want %s\n  got  %s\n", what, raises, g_err);
		ok = 0;
	} else if (!raises && !strchr(g_err, ':')) {
		printf("%s: error without a position: %s\n", what, g_err);
		ok = 0;
	}
	free(out);
	free(tools_json);
	free_msgs(&m);
	return ok;
}

static const char *families[] = {
	"llama2", "llama3", "llama3_1", "llama3_2", "mistral",
	"mistral_v0_1", "zephyr", "smollm2", "qwen2_5",
};

START_TEST(family_conformance)
{
	const char *fam = families[_i];
	char name[64];
	size_t len;
	snprintf(name, sizeof name, "%s.jinja", fam);
	char *src = read_data(name, &len);
	text_tmpl *t = NULL;
	int rc = text_tmpl_compile(src, len, name, &t, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "compile %s: %s", name, g_err);
	snprintf(name, sizeof name, "%s.json", fam);
	cJSON *doc = read_json(name);
	const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "cases"), *cs;
	int n = 0, pass = 0, rendered = 0;
	cJSON_ArrayForEach(cs, cases)
	{
		n++;
		pass += run_case(t, doc, cs, fam);
		rendered += jstr(cs, "expected") != NULL;
	}
	printf("conformance %s: %d/%d conversations match transformers (%d rendered, %d "
	       "refused)\n", fam, pass, n, rendered, n - rendered);
	ck_assert_msg(n >= 50, "%s: only %d conversations recorded", fam, n);
	ck_assert_msg(pass == n, "%s: %d of %d conversations differ from transformers", fam,
		      n - pass, n);
	cJSON_Delete(doc);
	text_tmpl_destroy(t);
	free(src);
}
END_TEST

/* Tools and tool-calling conversations (tools_<family>.json, recorded by
 * tools/make_chat_tools_conformance.py with jinja2 in transformers'
 * environment): `tools` and the messages' tool_calls / tool_call_id reach
 * the template as transformers passes them. */
static const char *tool_families[] = {"llama3_1", "llama3_2", "qwen2_5", "mistral_v0_3", "smollm2"};

START_TEST(tools_conformance)
{
	const char *fam = tool_families[_i];
	char name[64];
	size_t len;
	snprintf(name, sizeof name, "%s.jinja", fam);
	char *src = read_data(name, &len);
	text_tmpl *t = NULL;
	int rc = text_tmpl_compile(src, len, name, &t, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "compile %s: %s", name, g_err);
	snprintf(name, sizeof name, "tools_%s.json", fam);
	cJSON *doc = read_json(name);
	const cJSON *cs;
	int n = 0, pass = 0, rendered = 0;
	cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(doc, "cases"))
	{
		n++;
		pass += run_case(t, doc, cs, name);
		rendered += jstr(cs, "expected") != NULL;
	}
	printf("conformance %s: %d/%d tool conversations match jinja2 (%d rendered)\n", name,
	       pass, n, rendered);
	ck_assert_msg(n >= 10, "%s: only %d conversations recorded", name, n);
	ck_assert_msg(pass == n, "%s: %d of %d conversations differ from jinja2", name, n - pass, n);
	cJSON_Delete(doc);
	text_tmpl_destroy(t);
	free(src);
}
END_TEST

/* JSON numbers that are not whole print as Python prints floats. */
START_TEST(json_floats_print_as_python)
{
	const char *src = "{{ tools[0] }}|{{ tools | tojson }}|{{ tools[0][0] is number }}";
	text_tmpl *t = compile_str(src, "floats");
	const char *in = "[[0.5, 100.5, 1e-7, 1e22, -2.5e-5, 0.0001, 123456789012345.6, 3, -0.25, "
			 "1.7976931348623157e308]]";
	const char *want = "[0.5, 100.5, 1e-07, 1e+22, -2.5e-05, 0.0001, 123456789012345.6, 3, -0.25, "
			   "1.7976931348623157e+308]|[[0.5, 100.5, 1e-07, 1e+22, -2.5e-05, 0.0001, "
			   "123456789012345.6, 3, -0.25, 1.7976931348623157e+308]]|True";
	text_tmpl_vars v = {.tools_json = in, .tools_len = strlen(in)};
	char *out = NULL;
	size_t len;
	ck_assert_int_eq(text_tmpl_render(t, NULL, 0, &v, &out, &len, g_err, sizeof g_err), 0);
	ck_assert_str_eq(out, want);
	free(out);
	/* tools that are not a JSON array, extras that are not an object: refused */
	v.tools_json = "{\"a\": 1}";
	v.tools_len = strlen(v.tools_json);
	ck_assert_int_eq(text_tmpl_render(t, NULL, 0, &v, &out, &len, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "tools is not a JSON array"), "%s", g_err);
	text_chat_msg m = {.role = "user", .content = "x", .content_len = 1, .extra_json = "[1",
			   .extra_len = 2};
	v.tools_json = NULL;
	ck_assert_int_eq(text_tmpl_render(t, &m, 1, &v, &out, &len, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "message 0"), "%s", g_err);
	text_tmpl_destroy(t);
}
END_TEST

START_TEST(feature_conformance)
{
	cJSON *doc = read_json("features.json");
	const cJSON *cs;
	int n = 0, pass = 0;
	cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(doc, "cases"))
	{
		const char *src = jstr(cs, "template"), *name = jstr(cs, "name");
		text_tmpl *t = NULL;
		n++;
		if (text_tmpl_compile(src, strlen(src), name, &t, g_err, sizeof g_err)) {
			const char *e = jstr(cs, "error");
			if (e && !strcmp(e, "TemplateSyntaxError"))
				pass++;  /* refused by both */
			else
				printf("features/%s: compile failed: %s\n", name, g_err);
			continue;
		}
		pass += run_case(t, doc, cs, "features");
		text_tmpl_destroy(t);
	}
	printf("conformance features: %d/%d templates match transformers\n", pass, n);
	ck_assert_msg(pass == n, "features: %d of %d templates differ from transformers",
		      n - pass, n);
	cJSON_Delete(doc);
}
END_TEST

/* ---- compile errors: each names the construct and its line:col ---- */

static const struct {
	const char *src;
	const char *want;  /* "LINE:COL: message prefix" */
} compile_errors[] = {
	{"{% macro f() %}x{% endmacro %}", "1:1: unsupported construct '{% macro %}'"},
	{"ok\n  {{ x | wordcount }}", "2:10: unsupported filter 'wordcount'"},
	{"{{ x is prime }}", "1:9: unsupported test 'prime'"},
	{"{{ lipsum() }}", "1:4: unsupported function 'lipsum'"},
	{"{{ 'a'.format(1) }}", "1:8: unsupported method '.format()'"},
	{"{{ x[0]() }}", "1:8: unsupported call"},
	{"{{ 1.5 }}", "1:4: unsupported construct: float literal"},
	{"{{ 4 / 2 }}", "1:6: unsupported construct: operator '/'"},
	{"{{ 2 ** 3 }}", "1:6: unsupported construct: operator '**'"},
	{"{{ 0x1F }}", "1:4: unsupported construct: non-decimal"},
	{"{% set x %}body{% endset %}", "1:1: unsupported construct '{% set %}...{% endset %}'"},
	{"{% for x in y recursive %}{% endfor %}", "1:15: unsupported construct: recursive"},
	{"{% include 'other.jinja' %}", "1:1: unsupported construct '{% include %}'"},
	{"a\n{% raw %}{{ }}{% endraw %}", "2:1: unsupported construct '{% raw %}'"},
	{"{{ namespace(*args) }}", "1:14: unsupported construct: *args"},
	{"{{ '\\N{DASH}' }}", "1:4: unsupported construct: \\N{...}"},
	{"abc {{ x ", "1:5: unexpected end of template: '{{' is never closed"},
	{"{% if x %}\n{% for y in z %}\nabc", "3:4: unexpected end of template: {% for %} at 2:1"},
	{"{% if x %}abc", "1:14: unexpected end of template: {% if %} at 1:1"},
	{"{# never closed", "1:1: missing end of comment tag"},
	{"{{ 'abc }}", "1:4: unterminated string literal"},
	{"{{ x + }}", "1:8: expected an expression, got '}}'"},
	{"{{ }}", "1:4: expected an expression, got '}}'"},
	{"{{ (1, 2 }}", "1:10: unexpected '}', expected ')'"},
	{"{{ x ) }}", "1:6: unexpected ')'"},
	{"x {% endif %}", "1:3: unexpected '{% endif %}'"},
	{"{% if a %}{% endfor %}", "1:11: unexpected '{% endfor %}'"},
	{"{% frobnicate %}", "1:1: unknown tag 'frobnicate'"},
	{"{% break %}", "1:1: 'break' outside a for loop"},
	{"{% for x y %}{% endfor %}", "1:10: expected 'in', got 'y'"},
	{"{% if x %}{% else %}{% else %}{% endif %}", "1:21: unexpected '{% else %}'"},
	{"{{ x $ y }}", "1:6: unexpected character '$'"},
	{"{{ x | default(1, 2, 3) }}", "1:8: filter 'default' takes 0 to 2"},
	{"{{ range(a=1, 2) }}", "1:15: positional argument after a keyword argument"},
	{"{% set x = 1 %}{{ x is divisibleby }}", "1:24: test 'divisibleby' takes 1 to 1"},
	{"{% set none = 1 %}", "1:8: cannot assign to 'none'"},
	{"\xc3\x28", "not valid UTF-8 (byte 0)"},
};

START_TEST(compile_error_positions)
{
	const char *src = compile_errors[_i].src, *want = compile_errors[_i].want;
	text_tmpl *t = (text_tmpl *)1;
	g_err[0] = 0;
	int rc = text_tmpl_compile(src, strlen(src), "tmpl.jinja", &t, g_err, sizeof g_err);
	ck_assert_msg(rc == SL_EINVAL, "\"%s\" compiled (rc %d); want error \"%s\"", src, rc, want);
	ck_assert_ptr_null(t);
	ck_assert_msg(!strncmp(g_err, "tmpl.jinja", 10) && strstr(g_err, want),
		      "\"%s\": error \"%s\", want \"tmpl.jinja:%s...\"", src, g_err, want);
}
END_TEST

START_TEST(compile_nesting_bounded)
{
	char src[2048];
	size_t k = 0;
	k += (size_t)snprintf(src, sizeof src, "{{ ");
	for (int i = 0; i < 150; i++)
		src[k++] = '(';
	src[k++] = '1';
	for (int i = 0; i < 150; i++)
		src[k++] = ')';
	k += (size_t)snprintf(src + k, sizeof src - k, " }}");
	text_tmpl *t;
	int rc = text_tmpl_compile(src, k, "deep", &t, g_err, sizeof g_err);
	ck_assert_int_eq(rc, SL_EINVAL);
	ck_assert_msg(strstr(g_err, "nested more than"), "got: %s", g_err);

	/* if-blocks nested past the bound */
	char *big = malloc(200 * 40);
	k = 0;
	for (int i = 0; i < 200; i++)
		k += (size_t)sprintf(big + k, "{%% if true %%}");
	for (int i = 0; i < 200; i++)
		k += (size_t)sprintf(big + k, "{%% endif %%}");
	rc = text_tmpl_compile(big, k, "deep-if", &t, g_err, sizeof g_err);
	ck_assert_int_eq(rc, SL_EINVAL);
	ck_assert_msg(strstr(g_err, "nested more than"), "got: %s", g_err);
	free(big);
}
END_TEST

/* ---- rendering behaviour that needs no recorded data ---- */

static int render_str(const char *src, const text_chat_msg *m, int n,
		      const text_tmpl_vars *v, char **out)
{
	text_tmpl *t = compile_str(src, "t.jinja");
	size_t len;
	g_err[0] = 0;
	int rc = text_tmpl_render(t, m, n, v, out, &len, g_err, sizeof g_err);
	text_tmpl_destroy(t);
	return rc;
}

START_TEST(raise_message_is_exact)
{
	char *out;
	int rc = render_str("{% if messages | length < 2 %}{{ raise_exception('need two, got ' ~ "
			    "messages | length) }}{% endif %}ok",
			    NULL, 0, NULL, &out);
	ck_assert_int_eq(rc, SL_EINVAL);
	ck_assert_str_eq(g_err, "need two, got 0");
	ck_assert_ptr_null(out);
}
END_TEST

START_TEST(runtime_error_has_position)
{
	char *out;
	int rc = render_str("line one\n{{ 'a' ~ nothing.attr }}", NULL, 0, NULL, &out);
	ck_assert_int_eq(rc, SL_EINVAL);
	ck_assert_msg(!strcmp(g_err, "t.jinja:2:18: 'nothing' is undefined"), "got: %s", g_err);
}
END_TEST

START_TEST(no_doubled_bos)
{
	/* The template emits BOS itself; the renderer adds nothing around it. */
	size_t len;
	char *src = read_data("llama3_1.jinja", &len), *out;
	text_tmpl *t;
	ck_assert_int_eq(text_tmpl_compile(src, len, "llama3_1", &t, g_err, sizeof g_err), 0);
	text_chat_msg m = {.role = "user", .content = "Hi", .content_len = 2};
	text_tmpl_vars v = {.add_generation_prompt = 1, .bos_token = "<|begin_of_text|>"};
	ck_assert_int_eq(text_tmpl_render(t, &m, 1, &v, &out, &len, g_err, sizeof g_err), 0);
	const char *head = "<|begin_of_text|><|start_header_id|>system";
	ck_assert_msg(!strncmp(out, head, strlen(head)), "%s", out);
	ck_assert_ptr_null(strstr(out + 1, "<|begin_of_text|>"));
	free(out);
	text_tmpl_destroy(t);
	free(src);
}
END_TEST

START_TEST(content_parts_and_nuls)
{
	/* Parts reach the template as a list of {type, text}; strings keep NULs. */
	text_chat_part p[2] = {{"text", "a\0b", 3}, {"text", "c", 1}};
	text_chat_msg m[2] = {{.role = "user", .parts = p, .n_parts = 2},
			       {.role = "assistant", .content = NULL}};
	char *out;
	int rc = render_str("{% for m in messages %}{% if m.content is string %}S{% elif m.content "
			    "is none %}N{% else %}{% for q in m.content %}[{{ q.type }}:{{ q.text "
			    "| length }}]{% endfor %}{% endif %}{% endfor %}",
			    m, 2, NULL, &out);
	ck_assert_msg(rc == 0, "%s", g_err);
	ck_assert_str_eq(out, "[text:3][text:1]N");
	free(out);
	text_tmpl *t = compile_str("{% for x in message['content'] %}{% endfor %}", "x");
	ck_assert_int_eq(text_tmpl_iterates_content(t), 1);
	text_tmpl_destroy(t);
	t = compile_str("{{ messages[0].content }}", "x");
	ck_assert_int_eq(text_tmpl_iterates_content(t), 0);
	text_tmpl_destroy(t);
}
END_TEST

START_TEST(renders_repeatedly)
{
	/* A compiled template is immutable: render it many times. */
	text_tmpl *t = compile_str("{% set ns = namespace(n=0) %}{% for m in messages %}"
				    "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
				    "x");
	text_chat_msg m[3] = {{.role = "user", .content = "a", .content_len = 1},
			       {.role = "assistant", .content = "b", .content_len = 1},
			       {.role = "user", .content = "c", .content_len = 1}};
	for (int i = 0; i < 100; i++) {
		char *out;
		size_t len;
		ck_assert_int_eq(text_tmpl_render(t, m, 1 + i % 3, NULL, &out, &len, g_err,
						   sizeof g_err), 0);
		ck_assert_int_eq(out[0] - '0', 1 + i % 3);
		free(out);
	}
	text_tmpl_destroy(t);
}
END_TEST

/* ---- resource bounds ---- */

START_TEST(output_is_bounded)
{
	text_tmpl_vars v = {.max_output_bytes = 1000};
	char *out;
	int rc = render_str("{% for i in range(1000) %}0123456789{% endfor %}", NULL, 0, &v, &out);
	ck_assert_int_eq(rc, SL_EINVAL);
	ck_assert_msg(strstr(g_err, "exceeds 1000 bytes"), "got: %s", g_err);
	ck_assert_ptr_null(out);
}
END_TEST

START_TEST(steps_are_bounded)
{
	text_tmpl_vars v = {.max_steps = 50000};
	char *out;
	int rc = render_str("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}"
			    "{% endfor %}",
			    NULL, 0, &v, &out);
	ck_assert_int_eq(rc, SL_EINVAL);
	ck_assert_msg(strstr(g_err, "more than 50000 steps"), "got: %s", g_err);
}
END_TEST

START_TEST(memory_is_bounded)
{
	/* A string doubling 40 times would need a terabyte. */
	text_tmpl_vars v = {.max_memory_bytes = 4u << 20};
	char *out;
	int rc = render_str("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
			    "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
			    NULL, 0, &v, &out);
	ck_assert_int_eq(rc, SL_EINVAL);
	ck_assert_msg(strstr(g_err, "working memory"), "got: %s", g_err);
	rc = render_str("{{ 'abc' * 1000000000 }}", NULL, 0, NULL, &out);
	ck_assert_int_eq(rc, SL_EINVAL);
	ck_assert_msg(strstr(g_err, "too large"), "got: %s", g_err);
	rc = render_str("{{ range(100001) | length }}", NULL, 0, NULL, &out);
	ck_assert_int_eq(rc, SL_EINVAL);
	ck_assert_msg(strstr(g_err, "Range too big"), "got: %s", g_err);
}
END_TEST

START_TEST(source_is_bounded)
{
	size_t n = COORD_TMPL_MAX_SOURCE + 1;
	char *src = malloc(n);
	memset(src, 'x', n);
	text_tmpl *t;
	ck_assert_int_eq(text_tmpl_compile(src, n, "big", &t, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "exceeds"), "got: %s", g_err);
	free(src);
}
END_TEST

/* Templates come from model files: mutated real templates (fixed seed)
 * must compile or be refused, and render or fail, always with a message and
 * never a crash (Check runs each test in its own process). */
START_TEST(mutated_templates_never_crash)
{
	static const char *frags[] = {
		"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\\", " if ",
		" for ", " in ", " endfor ", " endif ", "|trim", "|tojson(indent=2)", ".strip()",
		"loop.", "messages[0]", "ns.x", "namespace(x=1)", "raise_exception('x')", "~", "*",
		"not ", " is defined", " else ", "\n", "\xc3\xa9", "range(99999)", "[::-1]",
		"{% for m in messages %}", "{% endfor %}",
	};
	uint64_t seed = 0x9E3779B97F4A7C15ull + (uint64_t)_i;
	size_t blen;
	char name[64], *base;
	snprintf(name, sizeof name, "%s.jinja", families[_i]);
	base = read_data(name, &blen);
	text_chat_msg m[3] = {{.role = "system", .content = "s", .content_len = 1},
			       {.role = "user", .content = "u ", .content_len = 2},
			       {.role = "assistant", .content = "a", .content_len = 1}};
	text_tmpl_vars v = {.add_generation_prompt = 1, .bos_token = "<s>", .eos_token = "</s>",
			     .max_steps = 20000, .max_output_bytes = 1 << 20,
			     .max_memory_bytes = 8 << 20};
	char *buf = malloc(blen + 4096);
	for (int it = 0; it < 400; it++) {
		size_t n = blen;
		memcpy(buf, base, blen);
		for (int k = 0; k < 1 + it % 4; k++) {
			seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
			size_t p = n ? (size_t)(seed >> 8) % n : 0, l;
			switch (seed % 3) {
			case 0: if (n) buf[p] = (char)(seed >> 40); break;
			case 1:
				l = 1 + (seed >> 20) % 8;
				l = p + l > n ? n - p : l;
				memmove(buf + p, buf + p + l, n - p - l);
				n -= l;
				break;
			default: {
				const char *f = frags[(seed >> 32) % (sizeof frags / sizeof *frags)];
				l = strlen(f);
				memmove(buf + p + l, buf + p, n - p);
				memcpy(buf + p, f, l);
				n += l;
			}
			}
		}
		text_tmpl *t;
		g_err[0] = 0;
		if (text_tmpl_compile(buf, n, "mutant", &t, g_err, sizeof g_err)) {
			ck_assert_msg(g_err[0], "refused without a message");
			continue;
		}
		char *out;
		size_t len;
		if (text_tmpl_render(t, m, 1 + it % 3, &v, &out, &len, g_err, sizeof g_err) == 0)
			free(out);
		else
			ck_assert_msg(g_err[0], "render failed without a message");
		text_tmpl_destroy(t);
	}
	free(buf);
	free(base);
}
END_TEST

static Suite *chat_template_suite(void)
{
	Suite *s = suite_create("chat_template");
	TCase *tc = tcase_create("conformance");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, family_conformance, 0, (int)(sizeof families / sizeof *families));
	tcase_add_test(tc, feature_conformance);
	tcase_add_loop_test(tc, tools_conformance, 0,
			    (int)(sizeof tool_families / sizeof *tool_families));
	tcase_add_test(tc, json_floats_print_as_python);
	suite_add_tcase(s, tc);
	tc = tcase_create("errors");
	tcase_add_loop_test(tc, compile_error_positions, 0,
			    (int)(sizeof compile_errors / sizeof *compile_errors));
	tcase_add_test(tc, compile_nesting_bounded);
	tcase_add_test(tc, raise_message_is_exact);
	tcase_add_test(tc, runtime_error_has_position);
	suite_add_tcase(s, tc);
	tc = tcase_create("render");
	tcase_add_test(tc, no_doubled_bos);
	tcase_add_test(tc, content_parts_and_nuls);
	tcase_add_test(tc, renders_repeatedly);
	suite_add_tcase(s, tc);
	tc = tcase_create("bounds");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, output_is_bounded);
	tcase_add_test(tc, steps_are_bounded);
	tcase_add_test(tc, memory_is_bounded);
	tcase_add_test(tc, source_is_bounded);
	tcase_add_loop_test(tc, mutated_templates_never_crash, 0,
			    (int)(sizeof families / sizeof *families));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* strftime_now renders local time; the fixtures pinned a UTC instant. */
	setenv("TZ", "UTC", 1);
	tzset();
	SRunner *sr = srunner_create(chat_template_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
