/*
 * chat_template_lex.c — template source to tokens, with the whitespace rules
 * of Jinja2 as transformers configures it (trim_blocks=True,
 * lstrip_blocks=True, keep_trailing_newline=False).  Called by
 * text_tmpl_compile on the normalized source (newlines already "\n", one
 * trailing newline dropped).
 *
 * The rules, as in jinja2/lexer.py:
 *  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag;
 *  - otherwise `{%` and `{#` (not `{{`) strip spaces/tabs back to the start
 *    of the line when only whitespace precedes them there (lstrip_blocks),
 *    unless written `{%+`;
 *  - `-%}`, `-}}`, `-#}` strip all whitespace after the tag; `%}` and `#}`
 *    eat one newline right after them (trim_blocks), unless written `+%}`.
 * "Whitespace" is Python's str.isspace(), Unicode included.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text/jinja/chat_template_int.h"
#include "common/sl.h"
#include "text/utf8.h"

typedef struct {
	const char *src;
	size_t n;
	size_t pos;
	tmpl_arena *a;
	tmpl_toks *out;
	int cap;
	const char *name;
	char *err;
	size_t errlen;
	int line_starting;  /* the previous match ended with a newline */
	char balance[256];  /* open brackets inside a tag */
	int depth;
} lexer;

static int lex_fail(lexer *L, size_t pos, const char *fmt, const char *arg)
{
	return tmpl_errat(L->err, L->errlen, L->name, L->src, (int)pos, fmt, arg);
}

static tmpl_tok *push(lexer *L, int kind, size_t pos)
{
	if (L->out->n == L->cap) {
		int cap = L->cap ? L->cap * 2 : 256;
		tmpl_tok *v = tmpl_alloc(L->a, (size_t)cap * sizeof *v);
		if (!v)
			return NULL;
		if (L->out->n)
			memcpy(v, L->out->v, (size_t)L->out->n * sizeof *v);
		L->out->v = v;
		L->cap = cap;
	}
	tmpl_tok *t = &L->out->v[L->out->n++];
	memset(t, 0, sizeof *t);
	t->kind = kind;
	t->pos = (int)pos;
	return t;
}

/* Length of the run of Python whitespace starting at i. */
static size_t ws_run(const char *s, size_t n, size_t i)
{
	size_t j = i, cl;
	while (j < n && py_isspace_at(s, n, j, &cl))
		j += cl;
	return j - i;
}

static int starts(const lexer *L, size_t p, const char *lit)
{
	size_t k = strlen(lit);
	return p + k <= L->n && memcmp(L->src + p, lit, k) == 0;
}

/* Emits the text between the previous tag and a tag at `tag` with sign
 * `sign` ('-', '+' or 0) of kind `kind` ('%', '{', '#'). */
static int emit_data(lexer *L, size_t start, size_t tag, char sign, char kind)
{
	size_t end = tag;
	if (sign == '-') {
		size_t s, e;
		py_strip(L->src + start, tag - start, 0, 1, NULL, 0, &s, &e);
		end = start + e;
	} else if (sign != '+' && kind != '{') {
		size_t l_pos = start;  /* just after the last newline in the text */
		for (size_t i = tag; i > start; i--)
			if (L->src[i - 1] == '\n') {
				l_pos = i;
				break;
			}
		if ((l_pos > start || L->line_starting) && l_pos < tag &&
		    ws_run(L->src, tag, l_pos) == tag - l_pos)
			end = l_pos;
	}
	if (end > start) {
		tmpl_tok *t = push(L, TK_DATA, start);
		if (!t)
			return SL_ENOMEM;
		t->s = L->src + start;
		t->n = end - start;
	}
	return 0;
}

static int lex_comment(lexer *L, size_t open)
{
	size_t p = L->pos, k;
	for (k = p; k + 1 < L->n; k++)
		if (L->src[k] == '#' && L->src[k + 1] == '}')
			break;
	if (k + 1 >= L->n)
		return lex_fail(L, open, "missing end of comment tag%s", "");
	char sign = (k > p && (L->src[k - 1] == '-' || L->src[k - 1] == '+')) ? L->src[k - 1] : 0;
	size_t after = k + 2;
	if (sign == '-')
		after += ws_run(L->src, L->n, after);
	else if (!sign && after < L->n && L->src[after] == '\n')
		after++;
	L->line_starting = L->src[after - 1] == '\n';
	L->pos = after;
	return 0;
}

/* Appends cp, a scalar value (callers refuse surrogates and values past
 * U+10FFFF first), to o at *k. */
static void put_utf8(char *o, size_t *k, uint32_t cp)
{
	*k += text_utf8_put(o + *k, cp);
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Python's "unicode-escape" decoding of a string literal body, as Jinja
 * applies it (after backslash-replacing non-ASCII characters). */
static int unescape(lexer *L, size_t at, const char *s, size_t n, tmpl_tok *t)
{
	char *o = tmpl_alloc(L->a, n * 4 + 1);  /* \ooo gives <= 2 bytes, \x.. <= 2 */
	size_t k = 0;
	if (!o)
		return SL_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch != '\\' || i + 1 == n) {
			o[k++] = (char)ch;
			continue;
		}
		unsigned char e = (unsigned char)s[++i];
		uint32_t cp;
		int digits = 0;
		switch (e) {
		case '\n': continue;
		case '\\': o[k++] = '\\'; continue;
		case '\'': o[k++] = '\''; continue;
		case '"': o[k++] = '"'; continue;
		case 'a': o[k++] = 7; continue;
		case 'b': o[k++] = 8; continue;
		case 'f': o[k++] = 12; continue;
		case 'n': o[k++] = '\n'; continue;
		case 'r': o[k++] = '\r'; continue;
		case 't': o[k++] = '\t'; continue;
		case 'v': o[k++] = 11; continue;
		case 'x': digits = 2; break;
		case 'u': digits = 4; break;
		case 'U': digits = 8; break;
		case 'N':
			return lex_fail(L, at, "unsupported construct: \\N{...} escape in a string%s",
					"");
		default:
			if (e >= '0' && e <= '7') {
				cp = e - '0';
				for (int d = 0; d < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7';
				     d++)
					cp = cp * 8 + (uint32_t)(s[++i] - '0');
				put_utf8(o, &k, cp);
			} else if (e >= 0x80) {
				/* Python saw "\\" then the backslash-replaced character. */
				uint32_t c2;
				size_t used = tmpl_utf8_decode(s + i, n - i, &c2);
				char tmp[16];
				int w = c2 < 0x100	  ? snprintf(tmp, sizeof tmp, "x%02x", c2)
					: c2 < 0x10000 ? snprintf(tmp, sizeof tmp, "u%04x", c2)
						       : snprintf(tmp, sizeof tmp, "U%08x", c2);
				o[k++] = '\\';
				memcpy(o + k, tmp, (size_t)w);
				k += (size_t)w;
				i += used - 1;
			} else {
				o[k++] = '\\';
				o[k++] = (char)e;
			}
			continue;
		}
		cp = 0;
		for (int d = 0; d < digits; d++) {
			int h = i + 1 < n ? hexval(s[i + 1]) : -1;
			if (h < 0)
				return lex_fail(L, at, "truncated \\%c escape in a string", (char[]){(char)e, 0});
			cp = cp * 16 + (uint32_t)h;
			i++;
		}
		if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return lex_fail(L, at, "string escape gives an invalid character%s", "");
		put_utf8(o, &k, cp);
	}
	o[k] = 0;
	t->s = o;
	t->n = k;
	return 0;
}

static int lex_number(lexer *L, size_t p, size_t *end)
{
	size_t q = p;
	while (q < L->n && ((L->src[q] >= '0' && L->src[q] <= '9') || L->src[q] == '_'))
		q++;
	int is_float = 0;
	if (q + 1 < L->n && L->src[q] == '.' && L->src[q + 1] >= '0' && L->src[q + 1] <= '9')
		is_float = 1;
	if (q < L->n && (L->src[q] == 'e' || L->src[q] == 'E')) {
		size_t r = q + 1;
		if (r < L->n && (L->src[r] == '+' || L->src[r] == '-'))
			r++;
		if (r < L->n && L->src[r] >= '0' && L->src[r] <= '9')
			is_float = 1;
	}
	if (is_float)
		return lex_fail(L, p, "unsupported construct: float literal%s", "");
	if (q < L->n && (L->src[q] == 'x' || L->src[q] == 'o' || L->src[q] == 'b' ||
			 L->src[q] == 'X' || L->src[q] == 'O' || L->src[q] == 'B'))
		return lex_fail(L, p, "unsupported construct: non-decimal integer literal%s", "");
	int64_t v = 0;
	for (size_t i = p; i < q; i++) {
		if (L->src[i] == '_')
			continue;
		if (v > (INT64_MAX - 9) / 10)
			return lex_fail(L, p, "integer literal too large%s", "");
		v = v * 10 + (L->src[i] - '0');
	}
	tmpl_tok *t = push(L, TK_INT, p);
	if (!t)
		return SL_ENOMEM;
	t->ival = v;
	*end = q;
	return 0;
}

static const struct {
	const char *s;
	int op;
} ops[] = {
	{"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {">=", OP_GE},
	{"<=", OP_LE}, {"+", OP_ADD}, {"-", OP_SUB}, {"/", OP_DIV}, {"*", OP_MUL},
	{"%", OP_MOD}, {"~", OP_TILDE}, {"[", OP_LBRACKET}, {"]", OP_RBRACKET},
	{"(", OP_LPAREN}, {")", OP_RPAREN}, {"{", OP_LBRACE}, {"}", OP_RBRACE},
	{">", OP_GT}, {"<", OP_LT}, {"=", OP_ASSIGN}, {".", OP_DOT}, {":", OP_COLON},
	{"|", OP_PIPE}, {",", OP_COMMA}, {";", OP_SEMICOLON},
};

static int lex_operator(lexer *L, size_t p, size_t *end)
{
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		if (!starts(L, p, ops[i].s))
			continue;
		char ch = ops[i].s[0];
		if (ch == '(' || ch == '[' || ch == '{') {
			if (L->depth == (int)sizeof L->balance)
				return lex_fail(L, p, "brackets nested too deeply%s", "");
			L->balance[L->depth++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
		} else if (ch == ')' || ch == ']' || ch == '}') {
			if (!L->depth)
				return lex_fail(L, p, "unexpected '%s'", ops[i].s);
			if (L->balance[L->depth - 1] != ch)
				return tmpl_errat(L->err, L->errlen, L->name, L->src, (int)p,
						  "unexpected '%c', expected '%c'", ch,
						  L->balance[L->depth - 1]);
			L->depth--;
		}
		tmpl_tok *t = push(L, TK_OP, p);
		if (!t)
			return SL_ENOMEM;
		t->op = ops[i].op;
		*end = p + strlen(ops[i].s);
		return 0;
	}
	char c[8] = {0};
	uint32_t cp;
	size_t k = 0;
	put_utf8(c, &k, (tmpl_utf8_decode(L->src + p, L->n - p, &cp), cp));
	return lex_fail(L, p, "unexpected character '%s'", c);
}

static int name_char(unsigned char ch, int digits_ok)
{
	return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (digits_ok && ch >= '0' && ch <= '9');
}

/* Tokens of one `{% ... %}` or `{{ ... }}` tag; L->pos is after its opener. */
static int lex_tag(lexer *L, char kind, size_t open)
{
	size_t p = L->pos;
	L->depth = 0;
	for (;;) {
		if (p >= L->n)
			return lex_fail(L, open, "unexpected end of template: '%s' is never closed",
					kind == '%' ? "{%" : "{{");
		if (!L->depth) {
			size_t after = 0;
			int end = 0;
			if (kind == '%' && starts(L, p, "+%}")) {
				after = p + 3;
				end = 1;
			} else if (starts(L, p, kind == '%' ? "-%}" : "-}}")) {
				after = p + 3;
				after += ws_run(L->src, L->n, after);
				end = 1;
			} else if (starts(L, p, kind == '%' ? "%}" : "}}")) {
				after = p + 2;
				if (kind == '%' && after < L->n && L->src[after] == '\n')
					after++;
				end = 1;
			}
			if (end) {
				if (!push(L, kind == '%' ? TK_BLOCK_END : TK_VAR_END, p))
					return SL_ENOMEM;
				L->line_starting = L->src[after - 1] == '\n';
				L->pos = after;
				return 0;
			}
		}
		size_t cl, q = p;
		unsigned char ch = (unsigned char)L->src[p];
		int rc = 0;
		if (py_isspace_at(L->src, L->n, p, &cl)) {
			q = p + ws_run(L->src, L->n, p);
		} else if (ch >= '0' && ch <= '9') {
			rc = lex_number(L, p, &q);
		} else if (name_char(ch, 0)) {
			while (q < L->n && name_char((unsigned char)L->src[q], 1))
				q++;
			tmpl_tok *t = push(L, TK_NAME, p);
			if (!t)
				return SL_ENOMEM;
			t->s = L->src + p;
			t->n = q - p;
		} else if (ch == '\'' || ch == '"') {
			q = p + 1;
			while (q < L->n && L->src[q] != (char)ch)
				q += L->src[q] == '\\' ? 2 : 1;
			if (q >= L->n)
				return lex_fail(L, p, "unterminated string literal%s", "");
			tmpl_tok *t = push(L, TK_STRING, p);
			if (!t)
				return SL_ENOMEM;
			rc = unescape(L, p, L->src + p + 1, q - p - 1, t);
			q++;
		} else {
			rc = lex_operator(L, p, &q);
		}
		if (rc)
			return rc;
		p = q;
	}
}

int tmpl_lex(const char *src, size_t n, const char *name, tmpl_arena *a, tmpl_toks *out,
	     char *err, size_t errlen)
{
	lexer L = {.src = src, .n = n, .a = a, .out = out, .name = name, .err = err,
		   .errlen = errlen, .line_starting = 1};
	out->v = NULL;
	out->n = 0;
	int rc;
	while (L.pos < n) {
		size_t j = L.pos;
		while (j + 1 < n && !(src[j] == '{' && (src[j + 1] == '%' || src[j + 1] == '{' ||
							 src[j + 1] == '#')))
			j++;
		if (j + 1 >= n) {  /* plain text to the end */
			tmpl_tok *t = push(&L, TK_DATA, L.pos);
			if (!t)
				return SL_ENOMEM;
			t->s = src + L.pos;
			t->n = n - L.pos;
			break;
		}
		char kind = src[j + 1];
		char sign = (j + 2 < n && (src[j + 2] == '-' || src[j + 2] == '+')) ? src[j + 2] : 0;
		if (kind == '%') {  /* {% raw %} is the one tag the lexer itself knows */
			size_t q = j + 2 + (sign ? 1 : 0);
			q += ws_run(src, n, q);
			if (q + 3 <= n && memcmp(src + q, "raw", 3) == 0 &&
			    (q + 3 == n || ws_run(src, n, q + 3) || src[q + 3] == '-' || src[q + 3] == '%'))
				return lex_fail(&L, j, "unsupported construct '{%% raw %%}'%s", "");
		}
		if ((rc = emit_data(&L, L.pos, j, sign, kind)))
			return rc;
		L.pos = j + 2 + (sign ? 1 : 0);
		L.line_starting = 0;
		if (kind == '#') {
			rc = lex_comment(&L, j);
		} else {
			if (!push(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, j))
				return SL_ENOMEM;
			rc = lex_tag(&L, kind, j);
		}
		if (rc)
			return rc;
	}
	if (!push(&L, TK_EOF, n))
		return SL_ENOMEM;
	return 0;
}
