/*
 * tool_constraint.h — the output constraint that makes a chat request's
 * tool_choice hold: for `required` at least one valid call (several when
 * parallel_tool_calls), for a named function exactly one call of it, each
 * call's arguments valid for that tool's `parameters` schema; written in
 * the family's own call syntax (tool_calls.h) as the xgrammar 0.2 structural
 * tag the grammar engine compiles (common/constraint.h,
 * SL_CONSTRAINT_STRUCTURAL_TAG):
 *
 *   {"type": "structural_tag", "format": FORMAT}
 *
 * FORMAT for `required`: {"type": "triggered_tags", "triggers": [TRIGGER],
 * "tags": [TAG per tool], "at_least_one": true, "stop_after_first":
 * !parallel} (Mistral: a "tag" around "tags_with_separator"); for a named
 * function: its TAG alone. TAG: {"type": "tag", "begin": "<call prefix
 * with the name>", "content": {"type": "json_schema", "json_schema":
 * PARAMETERS}, "end": "<call suffix>"}.
 *
 * Owner: the coordinator's chat endpoint; the grammar engine (node side)
 * consumes the text. Tests: tests/unit/text/test_tool_constraint.c.
 */
#ifndef TEXT_TOOL_CONSTRAINT_H
#define TEXT_TOOL_CONSTRAINT_H

#include <stddef.h>

#include "common/constraint.h"
#include "text/tool_calls.h"

typedef enum text_tool_choice {
	TEXT_TOOL_CHOICE_AUTO = 0,  /* the model decides: no constraint */
	TEXT_TOOL_CHOICE_NONE,      /* no call: no constraint (the parser is off) */
	TEXT_TOOL_CHOICE_REQUIRED,  /* at least one call of any tool */
	TEXT_TOOL_CHOICE_NAMED,     /* exactly one call of the named tool */
} text_tool_choice;

/* tools_json: the request's tools, a JSON array of {"type": "function",
 * "function": {"name", "parameters"?...}} (validated by the caller; a
 * function without parameters takes none). name: the named tool (NAMED).
 * Sets *kind and *text (malloc'd; NULL with SL_CONSTRAINT_NONE for AUTO and
 * NONE). 0, SL_EINVAL (tools not of that shape, name not among them) or
 * SL_ENOMEM, err naming the problem. */
int text_tool_constraint(text_tool_family f, const char *tools_json, size_t tools_len,
			 text_tool_choice choice, const char *name, int parallel,
			 sl_constraint_kind *kind, char **text, char *err, size_t errlen);

#endif
