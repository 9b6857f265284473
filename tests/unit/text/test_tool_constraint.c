/*
 * test_tool_constraint.c -- text/tool_constraint.c: tool_choice `required`
 * and a named function become an xgrammar structural tag (JSON) that holds
 * every tool's parameters schema unchanged, in each family's call syntax;
 * auto and none ask for no constraint; bad tools and unknown names are
 * refused with the field named.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"
#include "text/tool_constraint.h"

static const char *TOOLS =
	"[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\", "
	"\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
	"\"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}, "
	"{\"type\": \"function\", \"function\": {\"name\": \"search_v2\", \"parameters\": {\"type\": "
	"\"object\", \"properties\": {\"q\": {\"type\": \"string\", \"maxLength\": 0.5e2}, \"k\": "
	"{\"type\": \"integer\", \"minimum\": 1}}}}}, "
	"{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";

static char g_err[SL_ERRLEN];

/* The structural tag of (family, choice), parsed; checks the envelope. */
static cJSON *build(text_tool_family f, text_tool_choice c, const char *name, int parallel)
{
	sl_constraint_kind kind;
	char *text = NULL;
	int rc = text_tool_constraint(f, TOOLS, strlen(TOOLS), c, name, parallel, &kind, &text, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "%s", g_err);
	ck_assert_int_eq(kind, SL_CONSTRAINT_STRUCTURAL_TAG);
	cJSON *j = cJSON_Parse(text);
	ck_assert_msg(j != NULL, "not JSON: %s", text);
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "type")), "structural_tag");
	ck_assert(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "format")));
	free(text);
	return j;
}

static const char *s_of(const cJSON *o, const char *k)
{
	return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* A tag's schema is the tool's parameters, unchanged (no-parameter tools:
 * an empty object, nothing else). */
static void check_tag(const cJSON *tag, int tool, const char *begin, const char *end)
{
	cJSON *tools = cJSON_Parse(TOOLS);
	const cJSON *fn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tools, tool), "function");
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(tag, "content");
	ck_assert_str_eq(s_of(tag, "type"), "tag");
	ck_assert_str_eq(s_of(tag, "begin"), begin);
	ck_assert_str_eq(s_of(tag, "end"), end);
	ck_assert_str_eq(s_of(content, "type"), "json_schema");
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(content, "json_schema");
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
	if (params) {
		ck_assert_msg(cJSON_Compare(schema, params, 1), "tool %d: schema differs from its parameters", tool);
	} else {
		ck_assert_str_eq(s_of(schema, "type"), "object");
		ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(schema, "properties")), 0);
		ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(schema, "additionalProperties")));
	}
	cJSON_Delete(tools);
}

START_TEST(hermes_required)
{
	for (int parallel = 0; parallel < 2; parallel++) {
		cJSON *j = build(TEXT_TOOL_HERMES, TEXT_TOOL_CHOICE_REQUIRED, NULL, parallel);
		const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
		ck_assert_str_eq(s_of(fmt, "type"), "triggered_tags");
		ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(fmt, "triggers"), 0)),
				 "<tool_call>");
		ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fmt, "at_least_one")));
		ck_assert_int_eq(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fmt, "stop_after_first")), !parallel);
		const cJSON *tags = cJSON_GetObjectItemCaseSensitive(fmt, "tags");
		ck_assert_int_eq(cJSON_GetArraySize(tags), 3);
		check_tag(cJSON_GetArrayItem(tags, 0), 0, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
			  "}\n</tool_call>");
		check_tag(cJSON_GetArrayItem(tags, 1), 1, "<tool_call>\n{\"name\": \"search_v2\", \"arguments\": ",
			  "}\n</tool_call>");
		check_tag(cJSON_GetArrayItem(tags, 2), 2, "<tool_call>\n{\"name\": \"now\", \"arguments\": ",
			  "}\n</tool_call>");
		cJSON_Delete(j);
	}
}
END_TEST

START_TEST(named_each_family)
{
	cJSON *j = build(TEXT_TOOL_HERMES, TEXT_TOOL_CHOICE_NAMED, "search_v2", 1);
	check_tag(cJSON_GetObjectItemCaseSensitive(j, "format"), 1,
		  "<tool_call>\n{\"name\": \"search_v2\", \"arguments\": ", "}\n</tool_call>");
	cJSON_Delete(j);
	j = build(TEXT_TOOL_LLAMA3, TEXT_TOOL_CHOICE_NAMED, "get_weather", 1);
	check_tag(cJSON_GetObjectItemCaseSensitive(j, "format"), 0, "{\"name\": \"get_weather\", \"parameters\": ", "}");
	cJSON_Delete(j);
	j = build(TEXT_TOOL_MISTRAL, TEXT_TOOL_CHOICE_NAMED, "now", 0);
	check_tag(cJSON_GetObjectItemCaseSensitive(j, "format"), 2, "[TOOL_CALLS] [{\"name\": \"now\", \"arguments\": ",
		  "}]");
	cJSON_Delete(j);
}
END_TEST

START_TEST(llama_and_mistral_required)
{
	cJSON *j = build(TEXT_TOOL_LLAMA3, TEXT_TOOL_CHOICE_REQUIRED, NULL, 1);
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
	ck_assert_str_eq(s_of(fmt, "type"), "triggered_tags");
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(fmt, "triggers"), 0)),
			 "{\"name\": ");
	check_tag(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(fmt, "tags"), 1), 1,
		  "{\"name\": \"search_v2\", \"parameters\": ", "}");
	cJSON_Delete(j);
	j = build(TEXT_TOOL_MISTRAL, TEXT_TOOL_CHOICE_REQUIRED, NULL, 0);
	fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
	ck_assert_str_eq(s_of(fmt, "type"), "tag");
	ck_assert_str_eq(s_of(fmt, "begin"), "[TOOL_CALLS] [");
	ck_assert_str_eq(s_of(fmt, "end"), "]");
	const cJSON *in = cJSON_GetObjectItemCaseSensitive(fmt, "content");
	ck_assert_str_eq(s_of(in, "type"), "tags_with_separator");
	ck_assert_str_eq(s_of(in, "separator"), ", ");
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "stop_after_first")));
	const cJSON *tags = cJSON_GetObjectItemCaseSensitive(in, "tags");
	ck_assert_int_eq(cJSON_GetArraySize(tags), 3);
	for (int i = 0; i < 3; i++) {
		const char *names[] = {"get_weather", "search_v2", "now"};
		char begin[96];
		snprintf(begin, sizeof begin, "{\"name\": \"%s\", \"arguments\": ", names[i]);
		check_tag(cJSON_GetArrayItem(tags, i), i, begin, "}");
	}
	cJSON_Delete(j);
}
END_TEST

START_TEST(auto_none_and_refusals)
{
	sl_constraint_kind kind = SL_CONSTRAINT_JSON;
	char *text = (char *)"x";
	ck_assert_int_eq(text_tool_constraint(TEXT_TOOL_HERMES, TOOLS, strlen(TOOLS), TEXT_TOOL_CHOICE_AUTO, NULL, 1,
					      &kind, &text, g_err, sizeof g_err), 0);
	ck_assert_int_eq(kind, SL_CONSTRAINT_NONE);
	ck_assert_ptr_null(text);
	ck_assert_int_eq(text_tool_constraint(TEXT_TOOL_HERMES, TOOLS, strlen(TOOLS), TEXT_TOOL_CHOICE_NONE, NULL, 1,
					      &kind, &text, g_err, sizeof g_err), 0);
	ck_assert_int_eq(kind, SL_CONSTRAINT_NONE);
	ck_assert_int_eq(text_tool_constraint(TEXT_TOOL_HERMES, TOOLS, strlen(TOOLS), TEXT_TOOL_CHOICE_NAMED, "nope", 1,
					      &kind, &text, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "no tool named 'nope'"), "%s", g_err);
	const char *bad[] = {"[]", "{}", "not json", "[{\"type\": \"function\", \"function\": {}}]",
			     "[{\"function\": {\"name\": \"f\", \"parameters\": [1]}}]"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		ck_assert_int_eq(text_tool_constraint(TEXT_TOOL_LLAMA3, bad[i], strlen(bad[i]), TEXT_TOOL_CHOICE_REQUIRED,
						      NULL, 1, &kind, &text, g_err, sizeof g_err), SL_EINVAL);
		ck_assert_int_eq(kind, SL_CONSTRAINT_NONE);
		ck_assert_ptr_null(text);
		ck_assert_msg(strstr(g_err, "tools"), "%s", g_err);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tool_constraint");
	TCase *tc = tcase_create("build");
	tcase_add_test(tc, hermes_required);
	tcase_add_test(tc, named_each_family);
	tcase_add_test(tc, llama_and_mistral_required);
	tcase_add_test(tc, auto_none_and_refusals);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
