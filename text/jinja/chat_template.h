/*
 * chat_template.h — a Jinja2-subset renderer for Hugging Face chat templates.
 *
 * A model's chat template (`chat_template` in tokenizer_config.json,
 * `tokenizer.chat_template` in a GGUF, or a --chat-template file) turns an
 * OpenAI-style message list into the prompt text the model was trained on.
 * This module compiles such a template once, when the model is registered,
 * and renders it per request with the same semantics as transformers'
 * apply_chat_template (Jinja2 with trim_blocks and lstrip_blocks, the
 * loopcontrols extension, transformers' raise_exception, strftime_now,
 * namespace and tojson).  docs/chat_templates.md lists the supported subset;
 * anything outside it is refused by text_tmpl_compile with the template's
 * line and column, so a model never registers with a template that could
 * fail later on a construct we do not implement.
 *
 * Templates come from model files, i.e. they are untrusted: rendering is
 * bounded in output size, memory and evaluation steps, and nesting depth is
 * bounded at compile time.  A compiled template is immutable: render it from
 * as many requests as needed.
 *
 * No doubled BOS: the renderer emits exactly what the template emits, and
 * most templates start with `{{ bos_token }}`.  Callers must therefore
 * encode the rendered prompt WITHOUT adding the tokenizer's own BOS (the
 * HTTP chat endpoint must tokenize with special-token insertion off).
 *
 * Owned by the coordinator (chat completions); self-contained: it depends on
 * common/sl.h only.  Tests: tests/unit/text/test_chat_template.c against strings
 * recorded from transformers by tools/make_chat_conformance.py.
 */
#ifndef COORD_CHAT_TEMPLATE_H
#define COORD_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct text_tmpl text_tmpl;

/* One part of an array-valued message content; the template sees the dict
 * {"type": type, "text": text} (keys in that order). */
typedef struct {
	const char *type;  /* NUL-terminated, e.g. "text" */
	const char *text;  /* UTF-8, text_len bytes (may hold NULs) */
	size_t text_len;
} text_chat_part;

/* One message; the template sees the dict {"role": role, "content": ...}.
 * content is a string (content, content_len) unless parts is non-NULL, in
 * which case it is the list of n_parts part dicts (n_parts may be 0).  Both
 * NULL: content is None (an assistant turn that only called tools).
 * extra_json, when non-NULL, is the text of a JSON object (extra_len bytes)
 * whose members follow role and content in the dict, in their order: the
 * OpenAI message's tool_calls, tool_call_id, name, as transformers passes a
 * message dict through whole.  The renderer never copies or frees these
 * strings. */
typedef struct {
	const char *role;  /* NUL-terminated */
	const char *content;
	size_t content_len;
	const text_chat_part *parts;
	int n_parts;
	const char *extra_json;
	size_t extra_len;
} text_chat_msg;

/* Per-render variables and limits.  NULL strings are left undefined, as
 * transformers does for a tokenizer without that special token.  `tools` is
 * the JSON array tools_json (tools_len bytes; the OpenAI request's tools,
 * [{"type": "function", "function": {...}}], as apply_chat_template(tools=)
 * passes them), or none when NULL; `documents` is always none.  JSON numbers
 * become ints when whole, else floats (printed as Python does). */
typedef struct {
	int add_generation_prompt;
	const char *tools_json;
	size_t tools_len;
	const char *bos_token;
	const char *eos_token;
	const char *date_string;   /* Llama 3.x: "26 Jul 2024"; NULL: undefined */
	int64_t now_unix;          /* clock of strftime_now (local time); 0: now */
	size_t max_output_bytes;   /* 0: COORD_TMPL_DEFAULT_MAX_OUTPUT */
	size_t max_memory_bytes;   /* working memory; 0: COORD_TMPL_DEFAULT_MAX_MEMORY */
	uint64_t max_steps;        /* statements + loop iterations; 0: default */
} text_tmpl_vars;

#define COORD_TMPL_DEFAULT_MAX_OUTPUT (8u << 20)
#define COORD_TMPL_DEFAULT_MAX_MEMORY (64u << 20)
#define COORD_TMPL_DEFAULT_MAX_STEPS 1000000u
#define COORD_TMPL_MAX_SOURCE (1u << 20)  /* larger templates are refused */

/* Compiles template text (src, len bytes, UTF-8).  name labels errors, e.g.
 * "model/tokenizer_config.json", which then read
 * "NAME:LINE:COL: unsupported construct '{% macro %}'".  Returns 0 and *out,
 * or SL_EINVAL (syntax error, unsupported construct) / SL_ENOMEM. */
int text_tmpl_compile(const char *src, size_t len, const char *name, text_tmpl **out,
		       char *err, size_t errlen);

void text_tmpl_destroy(text_tmpl *t);

/* Renders msgs[0..n) into a malloc'd NUL-terminated string (*out, *len; free
 * with free()).  Returns 0, or SL_EINVAL when the template fails: for
 * raise_exception(msg) err holds exactly msg (e.g. "Conversation roles must
 * alternate user/assistant/user/assistant/..."), a message fit for the
 * client; any other failure (type error, undefined value, a limit) reads
 * "NAME:LINE:COL: reason"; tools_json or a message's extra_json that is
 * not JSON of the right shape: "NAME: tools is not a JSON array" and the
 * like. */
int text_tmpl_render(const text_tmpl *t, const text_chat_msg *msgs, int n,
		      const text_tmpl_vars *vars, char **out, size_t *len, char *err,
		      size_t errlen);

/* 1 when the template loops over a message's content (`for x in
 * message['content']`), i.e. it understands content given as parts.  Most
 * templates concatenate content as a string; for them the caller should join
 * the text parts into one string before rendering (the HTTP layer's choice),
 * since Jinja would print a list's Python repr or fail. */
int text_tmpl_iterates_content(const text_tmpl *t);

#ifdef __cplusplus
}
#endif
#endif
