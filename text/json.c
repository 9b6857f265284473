/*
 * json.c — the JSON string writer (see json.h). Runs of bytes that need no
 * escape are copied in one put.
 */
#include "text/json.h"

#include "common/sl.h"
#include "text/utf8.h"

/* The escape for byte ch, or NULL when it stands for itself (tmp: room for \u00xx). */
static const char *escape(unsigned char ch, char tmp[8])
{
	static const char hex[] = "0123456789abcdef";
	switch (ch) {
	case '"': return "\\\"";
	case '\\': return "\\\\";
	case '\b': return "\\b";
	case '\f': return "\\f";
	case '\n': return "\\n";
	case '\r': return "\\r";
	case '\t': return "\\t";
	default: break;
	}
	if (ch >= 0x20)
		return NULL;
	tmp[0] = '\\', tmp[1] = 'u', tmp[2] = '0', tmp[3] = '0';
	tmp[4] = hex[ch >> 4], tmp[5] = hex[ch & 15], tmp[6] = 0;
	return tmp;
}

int text_json_str(sl_buf *b, const char *s, size_t n)
{
	sl_buf_putc(b, '"');
	size_t run = 0; /* start of the bytes copied as they are, pending */
	for (size_t i = 0; i < n;) {
		unsigned char ch = (unsigned char)s[i];
		char tmp[8];
		const char *e;
		size_t len = 1;
		if (ch < 0x80) {
			e = escape(ch, tmp);
		} else {
			uint32_t cp;
			len = text_utf8_next(s + i, n - i, &cp);
			int bad = cp == TEXT_UTF8_BAD || cp == TEXT_UTF8_TRUNC;
			e = bad ? "\\ufffd" : NULL;
			if (bad)
				len = 1;
		}
		if (e) {
			sl_buf_put(b, s + run, i - run);
			sl_buf_puts(b, e);
			run = i + len;
		}
		i += len;
	}
	sl_buf_put(b, s + run, n - run);
	sl_buf_putc(b, '"');
	return b->failed ? SL_ENOMEM : 0;
}
