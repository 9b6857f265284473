/*
 * openai_tools.c — tool calling on the OpenAI chat API: `tools`,
 * `tool_choice` and `parallel_tool_calls` read and checked (each refusal a
 * 400 naming the field); the constraint that makes `required` and a named
 * function hold (text/tool_constraint.h); the tool fields of messages as
 * the chat template gets them; for templates that know no tools, the calls
 * written as Hermes text and a system prompt that describes the tools; the
 * tool_calls of an answer.
 *
 * Callers: openai_request.c (requests), openai_response.c (answers),
 * openai.c (ids). The model's output is parsed by text/tool_calls.c.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/openai_int.h"
#include "common/rng.h"
#include "common/sl.h"
#include "text/json.h"

#define OAI_MAX_TOOLS 128 /* OpenAI's limit */

static int is_null(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* OpenAI's rule for function names: [a-zA-Z0-9_-]{1,64}. */
static int name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n < 1 || n > 64)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
			return 0;
	return 1;
}

static int check_tool(const cJSON *t, int i, const cJSON *tools, oai_err *e)
{
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
	const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
	if (!cJSON_IsObject(t))
		return coord_oai_fail(e, 400, "tools", "tools[%d] must be an object", i);
	if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
		return coord_oai_fail(e, 400, "tools", "tools[%d].type must be \"function\"", i);
	if (!cJSON_IsObject(fn))
		return coord_oai_fail(e, 400, "tools", "tools[%d].function must be an object", i);
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
	const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
	const cJSON *strict = cJSON_GetObjectItemCaseSensitive(fn, "strict");
	if (!cJSON_IsString(name))
		return coord_oai_fail(e, 400, "tools", "tools[%d].function.name must be a string", i);
	if (!name_ok(name->valuestring))
		return coord_oai_fail(e, 400, "tools", "tools[%d].function.name '%.80s' must be 1 to 64 of "
				      "a-z, A-Z, 0-9, _ and -", i, name->valuestring);
	if (!is_null(desc) && !cJSON_IsString(desc))
		return coord_oai_fail(e, 400, "tools", "tools[%d].function.description must be a string", i);
	if (!is_null(params) && !cJSON_IsObject(params))
		return coord_oai_fail(e, 400, "tools", "tools[%d].function.parameters must be a JSON schema "
				      "object", i);
	if (!is_null(strict) && !cJSON_IsBool(strict))
		return coord_oai_fail(e, 400, "tools", "tools[%d].function.strict must be true or false", i);
	const cJSON *u;
	int k = 0;
	cJSON_ArrayForEach(u, tools) {
		if (k++ == i)
			break;
		const cJSON *un = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, "function"),
								   "name");
		if (!strcmp(un->valuestring, name->valuestring))
			return coord_oai_fail(e, 400, "tools", "tools[%d].function.name '%s' is given twice "
					      "(names must be unique)", i, name->valuestring);
	}
	return 0;
}

static int has_tool(const cJSON *tools, const char *name)
{
	const cJSON *t;
	cJSON_ArrayForEach(t, tools) {
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"),
								  "name");
		if (!strcmp(n->valuestring, name))
			return 1;
	}
	return 0;
}

static int read_choice(const cJSON *root, const cJSON *tools, oai_tools *t, oai_err *e)
{
	const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
	int n = cJSON_GetArraySize(tools);
	t->choice = TEXT_TOOL_CHOICE_AUTO;
	if (is_null(tc))
		return 0;
	if (cJSON_IsString(tc)) {
		const char *s = tc->valuestring;
		if (!strcmp(s, "none"))
			t->choice = TEXT_TOOL_CHOICE_NONE;
		else if (!strcmp(s, "required"))
			t->choice = TEXT_TOOL_CHOICE_REQUIRED;
		else if (strcmp(s, "auto"))
			return coord_oai_fail(e, 400, "tool_choice", "tool_choice '%.32s' is not one of none, auto, "
					      "required (or {\"type\": \"function\", \"function\": {\"name\": ...}})", s);
	} else if (cJSON_IsObject(tc)) {
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tc, "function"),
								    "name");
		if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
			return coord_oai_fail(e, 400, "tool_choice", "tool_choice must be none, auto, required or "
					      "{\"type\": \"function\", \"function\": {\"name\": ...}}");
		if (!n || !has_tool(tools, name->valuestring))
			return coord_oai_fail(e, 400, "tool_choice", "tool_choice names the function '%.64s', "
					      "which is not among the tools", name->valuestring);
		t->choice = TEXT_TOOL_CHOICE_NAMED;
		t->name = name->valuestring;
	} else {
		return coord_oai_fail(e, 400, "tool_choice", "tool_choice must be a string or an object");
	}
	if (t->choice == TEXT_TOOL_CHOICE_REQUIRED && !n)
		return coord_oai_fail(e, 400, "tool_choice", "tool_choice 'required' needs tools");
	return 0;
}

int coord_oai_read_tools(coord *c, const cJSON *root, oai_req *q, oai_err *e)
{
	oai_tools *t = &q->tools;
	const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools"), *it;
	const coord_model *m = &c->models[q->model];
	memset(t, 0, sizeof *t);
	t->parallel = 1;
	t->family = (text_tool_family)m->tool_family;
	t->knows = m->tmpl_knows_tools;
	const cJSON *par = cJSON_GetObjectItemCaseSensitive(root, "parallel_tool_calls");
	if (!is_null(par) && !cJSON_IsBool(par))
		return coord_oai_fail(e, 400, "parallel_tool_calls", "parallel_tool_calls must be true or false");
	if (cJSON_IsFalse(par))
		t->parallel = 0;
	if (!is_null(tools) && !cJSON_IsArray(tools))
		return coord_oai_fail(e, 400, "tools", "tools must be an array of {\"type\": \"function\", "
				      "\"function\": {...}}");
	int n = cJSON_GetArraySize(tools), i = 0;
	if (n > OAI_MAX_TOOLS)
		return coord_oai_fail(e, 400, "tools", "%d tools exceed the limit of %d", n, OAI_MAX_TOOLS);
	cJSON_ArrayForEach(it, tools)
		if (check_tool(it, i++, tools, e))
			return -1;
	if (read_choice(root, tools, t, e))
		return -1;
	if (!n || t->choice == TEXT_TOOL_CHOICE_NONE)
		return 0; /* no tools for the model: nothing to describe or parse */
	if (!(t->json = cJSON_PrintUnformatted(tools)))
		return coord_oai_fail(e, 500, NULL, "out of memory");
	sl_constraint_kind kind;
	char err[SL_ERRLEN];
	int rc = text_tool_constraint(t->family, t->json, strlen(t->json), t->choice, t->name, t->parallel, &kind,
				      &t->constraint, err, sizeof err);
	if (rc == SL_ENOMEM)
		return coord_oai_fail(e, 500, NULL, "out of memory");
	if (rc)
		return coord_oai_fail(e, 400, "tools", "%s", err);
	if (kind != SL_CONSTRAINT_NONE) {
		if (q->s.constraint_kind != SL_CONSTRAINT_NONE)
			return coord_oai_fail(e, 400, "tool_choice", "tool_choice '%s' cannot be combined with "
					      "response_format or another output constraint",
					      t->choice == TEXT_TOOL_CHOICE_REQUIRED ? "required" : "function");
		q->s.constraint_kind = kind;
		q->s.constraint = (coord_str){t->constraint, strlen(t->constraint)};
		q->constraint_param = "tools";
	}
	/* <|python_tag|> and [TOOL_CALLS] are special tokens: keep their text */
	q->s.keep_special = t->family != TEXT_TOOL_HERMES;
	return 0;
}

void coord_oai_free_tools(oai_tools *t)
{
	free(t->json);
	free(t->constraint);
	t->json = t->constraint = NULL;
}

/* --- messages ----------------------------------------------------------- */

static int check_tool_calls(const cJSON *tc, const char *param, oai_err *e)
{
	const cJSON *c;
	int i = 0;
	if (!cJSON_IsArray(tc))
		return coord_oai_fail(e, 400, "messages", "%s.tool_calls must be an array", param);
	cJSON_ArrayForEach(c, tc) {
		const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
		if (!cJSON_IsObject(c) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "id")))
			return coord_oai_fail(e, 400, "messages", "%s.tool_calls[%d].id must be a string", param, i);
		if (!is_null(type) && (!cJSON_IsString(type) || strcmp(type->valuestring, "function")))
			return coord_oai_fail(e, 400, "messages", "%s.tool_calls[%d].type must be \"function\"",
					      param, i);
		if (!cJSON_IsObject(fn) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")))
			return coord_oai_fail(e, 400, "messages", "%s.tool_calls[%d].function.name must be a string",
					      param, i);
		if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "arguments")))
			return coord_oai_fail(e, 400, "messages", "%s.tool_calls[%d].function.arguments must be a "
					      "string (JSON text)", param, i);
		i++;
	}
	return 0;
}

/* Templates index arguments as a dict (Llama 3.1: `arguments | tojson`,
 * Mistral: the function's tojson): a JSON object string becomes that
 * object, as vLLM passes it; anything else stays a string. */
static void arguments_to_objects(cJSON *tc)
{
	cJSON *c;
	cJSON_ArrayForEach(c, tc) {
		cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
		cJSON *a = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
		cJSON *obj = cJSON_IsString(a) ? cJSON_Parse(a->valuestring) : NULL;
		if (cJSON_IsObject(obj))
			cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
		else
			cJSON_Delete(obj);
	}
}

int coord_oai_message_extra(const cJSON *m, const char *param, char **out, oai_err *e)
{
	static const char *keys[] = {"tool_calls", "tool_call_id", "name"};
	cJSON *x = NULL;
	*out = NULL;
	for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, keys[k]);
		if (is_null(v))
			continue;
		if (k == 0 && check_tool_calls(v, param, e))
			goto fail;
		if (k > 0 && !cJSON_IsString(v)) {
			coord_oai_fail(e, 400, "messages", "%s.%s must be a string", param, keys[k]);
			goto fail;
		}
		cJSON *d = cJSON_Duplicate(v, 1);
		if ((!x && !(x = cJSON_CreateObject())) || !d) {
			cJSON_Delete(d);
			goto oom;
		}
		if (k == 0)
			arguments_to_objects(d);
		cJSON_AddItemToObject(x, keys[k], d);
	}
	if (x && !(*out = cJSON_PrintUnformatted(x)))
		goto oom;
	cJSON_Delete(x);
	return 0;
oom:
	coord_oai_fail(e, 500, NULL, "out of memory");
fail:
	cJSON_Delete(x);
	return -1;
}

/* <tool_call>\n{"name": N, "arguments": A}\n</tool_call> per call, joined by
 * newlines: what text/tool_calls.c reads back in the Hermes family. */
int coord_oai_calls_as_text(const cJSON *tool_calls, sl_buf *out)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, tool_calls) {
		const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
		const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
		if (out->n)
			sl_buf_putc(out, '\n');
		sl_buf_puts(out, "<tool_call>\n{\"name\": ");
		text_json_str(out, name ? name : "", name ? strlen(name) : 0);
		sl_buf_puts(out, ", \"arguments\": ");
		sl_buf_puts(out, args && args[0] ? args : "{}");
		sl_buf_puts(out, "}\n</tool_call>");
	}
	return out->failed ? -1 : 0;
}

int coord_oai_tools_prompt(const oai_tools *t, sl_buf *out)
{
	cJSON *tools = cJSON_Parse(t->json);
	const cJSON *it;
	sl_buf_puts(out, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
			 "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
	cJSON_ArrayForEach(it, tools) {
		char *s = cJSON_PrintUnformatted(it);
		sl_buf_putc(out, '\n');
		if (!s || sl_buf_puts(out, s))
			out->failed = 1;
		free(s);
	}
	sl_buf_puts(out, "\n</tools>\n\nFor each function call, return a json object with function name and "
			 "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
			 "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
	cJSON_Delete(tools);
	return !tools || out->failed ? -1 : 0;
}

/* --- answers ---------------------------------------------------------------- */

int coord_oai_keep_tool_names(oai_call *o, const oai_tools *t)
{
	cJSON *tools = cJSON_Parse(t->json);
	const cJSON *it;
	int n = cJSON_GetArraySize(tools);
	if (!tools || !(o->tool_names = calloc((size_t)n + 1, sizeof *o->tool_names))) {
		cJSON_Delete(tools);
		return -1;
	}
	cJSON_ArrayForEach(it, tools) {
		const char *name = cJSON_GetStringValue(
			cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(it, "function"), "name"));
		if (!(o->tool_names[o->n_tool_names] = strdup(name ? name : ""))) {
			cJSON_Delete(tools);
			return -1;
		}
		o->n_tool_names++;
	}
	cJSON_Delete(tools);
	return 0;
}

void coord_oai_tool_call_id(oai_call *o, char *out, size_t n)
{
	static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	int mistral = o->family == TEXT_TOOL_MISTRAL; /* its template takes 9 alphanumerics only */
	size_t k = 0, want = mistral ? 9 : 24;
	if (!mistral)
		k = (size_t)snprintf(out, n, "call_");
	for (size_t i = 0; i < want && k + 1 < n; i++)
		out[k++] = alnum[sl_splitmix64(&o->rng) % (sizeof alnum - 1)];
	out[k < n ? k : n - 1] = 0;
}

void coord_oai_tool_calls_json(sl_buf *j, oai_call *o, const text_tool_parsed *p)
{
	sl_buf_puts(j, "\"tool_calls\":[");
	for (int i = 0; i < p->n_calls; i++) {
		char id[40];
		coord_oai_tool_call_id(o, id, sizeof id);
		sl_buf_printf(j, "%s{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":", i ? "," : "", id);
		text_json_str(j, p->calls[i].name, strlen(p->calls[i].name));
		sl_buf_puts(j, ",\"arguments\":");
		text_json_str(j, p->calls[i].arguments, strlen(p->calls[i].arguments));
		sl_buf_puts(j, "}}");
	}
	sl_buf_puts(j, "]");
}
