/*
 * utf8.c — the strict UTF-8 decoder (see utf8.h). Decoding is our own
 * because utf8proc_iterate reports only "invalid", not how long the
 * maximal ill-formed subpart is nor whether the input merely ended early
 * (the streaming detokenizer waits for the rest of a truncated character);
 * encoding is utf8proc's.
 */
#include "text/utf8.h"

#include <utf8proc.h>

size_t text_utf8_next(const char *str, size_t n, uint32_t *cp)
{
	const unsigned char *s = (const unsigned char *)str;
	unsigned b = s[0], need, lo = 0x80, hi = 0xBF;
	uint32_t c;

	if (b < 0x80) {
		*cp = b;
		return 1;
	}
	if (b >= 0xC2 && b <= 0xDF) { /* C0, C1: overlong 2-byte forms */
		need = 1;
		c = b & 0x1F;
	} else if (b >= 0xE0 && b <= 0xEF) {
		need = 2;
		c = b & 0x0F;
		lo = b == 0xE0 ? 0xA0 : 0x80; /* no overlongs */
		hi = b == 0xED ? 0x9F : 0xBF; /* no surrogates */
	} else if (b >= 0xF0 && b <= 0xF4) {
		need = 3;
		c = b & 0x07;
		lo = b == 0xF0 ? 0x90 : 0x80; /* no overlongs */
		hi = b == 0xF4 ? 0x8F : 0xBF; /* <= U+10FFFF */
	} else {
		*cp = TEXT_UTF8_BAD;
		return 1;
	}
	size_t i = 1;
	for (unsigned k = 0; k < need; k++, i++) {
		if (i >= n) {
			*cp = TEXT_UTF8_TRUNC;
			return i;
		}
		if (s[i] < lo || s[i] > hi) {
			*cp = TEXT_UTF8_BAD;
			return i;
		}
		c = (c << 6) | (s[i] & 0x3F);
		lo = 0x80;
		hi = 0xBF;
	}
	*cp = c;
	return i;
}

size_t text_utf8_first_bad(const char *s, size_t n)
{
	uint32_t cp;
	for (size_t i = 0; i < n;) {
		size_t k = text_utf8_next(s + i, n - i, &cp);
		if (cp == TEXT_UTF8_BAD || cp == TEXT_UTF8_TRUNC)
			return i;
		i += k;
	}
	return n;
}

int text_utf8_valid(const char *s, size_t n)
{
	return text_utf8_first_bad(s, n) == n;
}

size_t text_utf8_put(char *out, uint32_t cp)
{
	if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
}
