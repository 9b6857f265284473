/*
 * json.h — the one JSON string writer: the OpenAI responses and the chat
 * template engine's tojson both escape through it.
 *
 * Escapes as Python's json.dumps(ensure_ascii=False) does (what Hugging
 * Face's tojson produces, so rendered prompts match byte for byte): \" \\
 * \b \f \n \r \t, other control characters as \u00xx, everything else as
 * it is. Bytes that are not UTF-8 (a name cut mid-character in an error
 * message) become \ufffd, one per byte, so the output is always valid JSON.
 */
#ifndef TEXT_JSON_H
#define TEXT_JSON_H

#include <stddef.h>

#include "common/buf.h"

/* Appends s[0..n) as a quoted JSON string; 0 or SL_ENOMEM (b->failed). */
int text_json_str(sl_buf *b, const char *s, size_t n);

#endif
