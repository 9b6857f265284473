/*
 * utf8.h — the one UTF-8 decoder of shardline, strict as the Unicode
 * standard (Table 3-7): overlong forms, surrogates (U+D800..U+DFFF) and
 * code points past U+10FFFF are ill-formed. The tokenizer, the template
 * engine and the OpenAI front door all decode through it, so a byte string
 * is valid or not the same way everywhere.
 *
 * Ill-formed input is cut into maximal ill-formed subparts, the unit that
 * Python's errors="replace" and Rust's from_utf8_lossy each turn into one
 * U+FFFD; callers choose what to show for one.
 */
#ifndef TEXT_UTF8_H
#define TEXT_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define TEXT_UTF8_BAD 0xFFFFFFFFu   /* ill-formed: can never become a character */
#define TEXT_UTF8_TRUNC 0xFFFFFFFEu /* well-formed so far, but the input ended */

/* Length of the unit at s[0..n), n >= 1: one well-formed character (*cp =
 * its code point) or the maximal ill-formed subpart (*cp = TEXT_UTF8_BAD
 * or TEXT_UTF8_TRUNC). Never 0. */
size_t text_utf8_next(const char *s, size_t n, uint32_t *cp);

/* 1 when s[0..n) is well-formed UTF-8 (no overlongs, surrogates, code
 * points past U+10FFFF or truncated sequences). */
int text_utf8_valid(const char *s, size_t n);

/* Offset of the first byte that starts an ill-formed unit; n if none. */
size_t text_utf8_first_bad(const char *s, size_t n);

/* Writes cp (a Unicode scalar value, <= U+10FFFF) as 1..4 bytes to out and
 * returns how many; 0 for a value that is not one. */
size_t text_utf8_put(char *out, uint32_t cp);

#endif
