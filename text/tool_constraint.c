/*
 * tool_constraint.c — tool_choice as an xgrammar structural tag
 * (tool_constraint.h). Each family's call is a begin string that ends
 * where the arguments start, the arguments' JSON schema, and an end
 * string; the triggers are the family's markers (tool_calls.h), so text
 * before the first call stays free where the format allows it.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tool_constraint.h"
#include "common/sl.h"

/* One call's syntax around its arguments. */
typedef struct {
	const char *trigger;            /* what begins a call (triggered_tags) */
	const char *begin_fmt;          /* printf: the name */
	const char *end;
} call_syntax;

static const call_syntax hermes = {"<tool_call>", "<tool_call>\n{\"name\": \"%s\", \"arguments\": ",
				   "}\n</tool_call>"};
static const call_syntax llama3 = {"{\"name\": ", "{\"name\": \"%s\", \"parameters\": ", "}"};
/* Mistral: one [TOOL_CALLS] [ ... ] list around calls separated by ", " */
static const call_syntax mistral = {"[TOOL_CALLS]", "{\"name\": \"%s\", \"arguments\": ", "}"};
#define MISTRAL_OPEN "[TOOL_CALLS] ["
#define MISTRAL_CLOSE "]"

static const call_syntax *syntax_of(text_tool_family f)
{
	return f == TEXT_TOOL_LLAMA3 ? &llama3 : f == TEXT_TOOL_MISTRAL ? &mistral : &hermes;
}

/* {"type": "tag", "begin": pre + begin(name), "content": schema, "end": end + post} */
static cJSON *call_tag(const call_syntax *cs, const cJSON *fn, const char *pre, const char *post)
{
	const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
	size_t n = strlen(pre) + strlen(cs->begin_fmt) + strlen(name) + 1;
	char *begin = malloc(n), *end = malloc(strlen(cs->end) + strlen(post) + 1);
	cJSON *tag = cJSON_CreateObject(), *content = cJSON_CreateObject();
	cJSON *schema = params ? cJSON_Duplicate(params, 1) : cJSON_Parse("{\"type\": \"object\", "
		"\"properties\": {}, \"additionalProperties\": false}");
	if (!begin || !end || !tag || !content || !schema) {
		free(begin), free(end), cJSON_Delete(tag), cJSON_Delete(content), cJSON_Delete(schema);
		return NULL;
	}
	memcpy(begin, pre, strlen(pre) + 1);
	snprintf(begin + strlen(pre), n - strlen(pre), cs->begin_fmt, name);
	snprintf(end, strlen(cs->end) + strlen(post) + 1, "%s%s", cs->end, post);
	cJSON_AddStringToObject(content, "type", "json_schema");
	cJSON_AddItemToObject(content, "json_schema", schema);
	cJSON_AddStringToObject(tag, "type", "tag");
	cJSON_AddStringToObject(tag, "begin", begin);
	cJSON_AddItemToObject(tag, "content", content);
	cJSON_AddStringToObject(tag, "end", end);
	free(begin);
	free(end);
	return tag;
}

/* The functions of tools, checked for the shape this file relies on. */
static int functions_of(const cJSON *tools, char *err, size_t errlen)
{
	if (!cJSON_IsArray(tools) || !tools->child)
		return sl_errf(err, errlen, SL_EINVAL, "tools: a non-empty array is needed");
	const cJSON *t;
	int i = 0;
	cJSON_ArrayForEach(t, tools) {
		const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
		const cJSON *p = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
		if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")))
			return sl_errf(err, errlen, SL_EINVAL, "tools[%d].function.name: missing", i);
		if (p && !cJSON_IsObject(p) && !cJSON_IsNull(p))
			return sl_errf(err, errlen, SL_EINVAL, "tools[%d].function.parameters: not an object", i);
		i++;
	}
	return 0;
}

static cJSON *required_format(const call_syntax *cs, text_tool_family f, const cJSON *tools,
			      int parallel)
{
	cJSON *tags = cJSON_CreateArray(), *fmt = cJSON_CreateObject(), *triggers = cJSON_CreateArray();
	const cJSON *t;
	if (!tags || !fmt || !triggers)
		goto fail;
	cJSON_ArrayForEach(t, tools) {
		cJSON *tag = call_tag(cs, cJSON_GetObjectItemCaseSensitive(t, "function"), "", "");
		if (!tag)
			goto fail;
		cJSON_AddItemToArray(tags, tag);
	}
	if (f == TEXT_TOOL_MISTRAL) {
		cJSON *inner = cJSON_CreateObject();
		if (!inner)
			goto fail;
		cJSON_AddStringToObject(inner, "type", "tags_with_separator");
		cJSON_AddItemToObject(inner, "tags", tags);
		cJSON_AddStringToObject(inner, "separator", ", ");
		cJSON_AddBoolToObject(inner, "at_least_one", 1);
		cJSON_AddBoolToObject(inner, "stop_after_first", !parallel);
		cJSON_AddStringToObject(fmt, "type", "tag");
		cJSON_AddStringToObject(fmt, "begin", MISTRAL_OPEN);
		cJSON_AddItemToObject(fmt, "content", inner);
		cJSON_AddStringToObject(fmt, "end", MISTRAL_CLOSE);
		cJSON_Delete(triggers);
		return fmt;
	}
	cJSON_AddItemToArray(triggers, cJSON_CreateString(cs->trigger));
	cJSON_AddStringToObject(fmt, "type", "triggered_tags");
	cJSON_AddItemToObject(fmt, "triggers", triggers);
	cJSON_AddItemToObject(fmt, "tags", tags);
	cJSON_AddBoolToObject(fmt, "at_least_one", 1);
	cJSON_AddBoolToObject(fmt, "stop_after_first", !parallel);
	return fmt;
fail:
	cJSON_Delete(tags), cJSON_Delete(fmt), cJSON_Delete(triggers);
	return NULL;
}

int text_tool_constraint(text_tool_family f, const char *tools_json, size_t tools_len,
			 text_tool_choice choice, const char *name, int parallel,
			 sl_constraint_kind *kind, char **text, char *err, size_t errlen)
{
	*kind = SL_CONSTRAINT_NONE;
	*text = NULL;
	if (choice == TEXT_TOOL_CHOICE_AUTO || choice == TEXT_TOOL_CHOICE_NONE)
		return 0;
	cJSON *tools = cJSON_ParseWithLength(tools_json, tools_len), *fmt = NULL, *root = NULL;
	const call_syntax *cs = syntax_of(f);
	int rc = functions_of(tools, err, errlen);
	if (rc)
		goto out;
	if (choice == TEXT_TOOL_CHOICE_NAMED) {
		const cJSON *t, *fn = NULL;
		cJSON_ArrayForEach(t, tools) {
			const cJSON *g = cJSON_GetObjectItemCaseSensitive(t, "function");
			if (name && !strcmp(cJSON_GetObjectItemCaseSensitive(g, "name")->valuestring, name))
				fn = g;
		}
		if (!fn) {
			rc = sl_errf(err, errlen, SL_EINVAL, "tool_choice: no tool named '%.64s'",
				     name ? name : "");
			goto out;
		}
		fmt = f == TEXT_TOOL_MISTRAL ? call_tag(cs, fn, MISTRAL_OPEN, MISTRAL_CLOSE)
					     : call_tag(cs, fn, "", "");
	} else {
		fmt = required_format(cs, f, tools, parallel);
	}
	if (!fmt || !(root = cJSON_CreateObject())) {
		rc = sl_errf(err, errlen, SL_ENOMEM, "tool constraint: out of memory");
		goto out;
	}
	cJSON_AddStringToObject(root, "type", "structural_tag");
	cJSON_AddItemToObject(root, "format", fmt);
	fmt = NULL;
	if (!(*text = cJSON_PrintUnformatted(root))) {
		rc = sl_errf(err, errlen, SL_ENOMEM, "tool constraint: out of memory");
		goto out;
	}
	if (strlen(*text) > SL_CONSTRAINT_MAX_TEXT) {
		free(*text);
		*text = NULL;
		rc = sl_errf(err, errlen, SL_EINVAL, "tools: the call grammar of %u+ bytes is too large",
			     SL_CONSTRAINT_MAX_TEXT);
		goto out;
	}
	*kind = SL_CONSTRAINT_STRUCTURAL_TAG;
out:
	cJSON_Delete(fmt);
	cJSON_Delete(root);
	cJSON_Delete(tools);
	return rc;
}
