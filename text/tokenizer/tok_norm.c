/*
 * tok_norm.c -- normalizers: what Hugging Face `tokenizers` does to text
 * before pre-tokenizing it (and to normalized added tokens at load).
 *
 * Owner: the tokenizer (text/tokenizer/).  Callers: tokenizer.c.
 *
 * Unicode normalization forms come from utf8proc, a small, widely
 * packaged C library (Julia's) that does nothing but Unicode data and
 * transforms -- enough for NFC/NFD/NFKC/NFKD and simple lowercase
 * mapping without carrying our own tables.  Its Unicode version differs
 * from the tables inside `tokenizers` (docs/tokenizer.md lists the
 * differences the conformance test finds).
 *
 * Supported: Prepend, Replace (String or Regex pattern), NFC, NFD, NFKC,
 * NFKD, Lowercase, Strip, StripAccents, Sequence of those.
 */
#include "text/tokenizer/tok_int.h"
#include "common/checks.h"
#include "common/sl.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Lowercase as Rust's char::to_lowercase: simple mappings, plus the one
 * unconditional multi-character one, U+0130 -> "i" U+0307. */
static int lowercase(const char *s, size_t n, sl_buf *out)
{
	out->n = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t len = text_utf8_next(s + i, n - i, &cp);
		char enc[8];
		if (cp == 0x130) {
			TRY(sl_buf_put(out, "i\xCC\x87", 3));
		} else {
			int32_t lo = utf8proc_tolower((int32_t)cp);
			TRY(sl_buf_put(out, enc, text_utf8_put(enc, (uint32_t)lo)));
		}
		i += len;
	}
	return 0;
}

static int unicode_form(int kind, const char *s, size_t n, sl_buf *out)
{
	utf8proc_option_t opt = UTF8PROC_STABLE;
	utf8proc_uint8_t *res = NULL;

	if (kind == NORM_NFC || kind == NORM_NFKC)
		opt |= UTF8PROC_COMPOSE;
	else
		opt |= UTF8PROC_DECOMPOSE;
	if (kind == NORM_NFKC || kind == NORM_NFKD)
		opt |= UTF8PROC_COMPAT;
	utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n,
					    &res, opt);
	if (len < 0) /* the text is valid UTF-8 by now: only memory can fail */
		return SL_ENOMEM;
	out->n = 0;
	int rc = sl_buf_put(out, res, (size_t)len);
	free(res);
	return rc;
}

/* What StripAccents removes: unicode-normalization's is_combining_mark,
 * general category M. */
static int is_mark(uint32_t cp)
{
	utf8proc_category_t cat = utf8proc_category((int32_t)cp);
	return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC ||
	       cat == UTF8PROC_CATEGORY_ME;
}

/* Characters kept by a predicate: Strip's ends, StripAccents' marks. */
static int strip(const norm_step *st, const char *s, size_t n, sl_buf *out)
{
	size_t a = 0, b = n;
	uint32_t cp;

	if (st->kind == NORM_STRIP_ACCENTS) {
		out->n = 0;
		for (size_t i = 0; i < n;) {
			size_t len = text_utf8_next(s + i, n - i, &cp);
			if (!is_mark(cp))
				TRY(sl_buf_put(out, s + i, len));
			i += len;
		}
		return 0;
	}
	while (st->left && a < b) {
		size_t len = text_utf8_next(s + a, b - a, &cp);
		if (!tk_is_white_space(cp))
			break;
		a += len;
	}
	while (st->right && b > a) {
		size_t k = b - 1;
		while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80)
			k--;
		text_utf8_next(s + k, b - k, &cp);
		if (!tk_is_white_space(cp))
			break;
		b = k;
	}
	out->n = 0;
	return sl_buf_put(out, s + a, b - a);
}

typedef struct {
	const char *s, *to;
	size_t prev, tn;
	sl_buf *out;
} repl_state;

static int on_repl(void *arg, size_t st, size_t en)
{
	repl_state *r = arg;
	TRY(sl_buf_put(r->out, r->s + r->prev, st - r->prev));
	TRY(sl_buf_put(r->out, r->to, r->tn));
	r->prev = en;
	return 0;
}

static int replace_regex(const text_tok *t, const norm_step *st, const char *s, size_t n,
			 void **region, sl_buf *out)
{
	repl_state r = {s, tk_str(t, st->b_off), 0, st->b_len, out};
	if (!*region && !(*region = tk_region_new()))
		return SL_ENOMEM;
	out->n = 0;
	TRY(tk_regex_each(st->re, *region, s, n, on_repl, &r));
	return sl_buf_put(out, s + r.prev, n - r.prev);
}

/* 1 when the step removed the text's first character: the result then no
 * longer starts at original offset 0, which Metaspace's prepend_scheme
 * "first" checks. */
static int dropped_first(const text_tok *t, const norm_step *st, const char *s, size_t n,
			 const sl_buf *dst)
{
	uint32_t cp;
	if (n == 0 || dst->n == 0)
		return 0;
	text_utf8_next(s, n, &cp);
	switch (st->kind) {
	case NORM_STRIP:
		return st->left && tk_is_white_space(cp);
	case NORM_STRIP_ACCENTS:
		return is_mark(cp);
	case NORM_REPLACE:
		return st->b_len == 0 && tk_starts_with(s, n, tk_str(t, st->a_off), st->a_len);
	default:
		return 0;
	}
}

static int run_step(const text_tok *t, const norm_step *st, const char *s, size_t n,
		    void **region, sl_buf *dst)
{
	switch (st->kind) {
	case NORM_PREPEND:
		dst->n = 0;
		TRY(sl_buf_put(dst, tk_str(t, st->a_off), st->a_len));
		return sl_buf_put(dst, s, n);
	case NORM_REPLACE:
		return tk_replace_all(s, n, tk_str(t, st->a_off), st->a_len, tk_str(t, st->b_off),
				      st->b_len, dst);
	case NORM_REPLACE_RE:
		return replace_regex(t, st, s, n, region, dst);
	case NORM_LOWERCASE:
		return lowercase(s, n, dst);
	case NORM_STRIP:
	case NORM_STRIP_ACCENTS:
		return strip(st, s, n, dst);
	default:
		return unicode_form(st->kind, s, n, dst);
	}
}

int tk_normalize(const text_tok *t, const char *s, size_t n, sl_buf bufs[2], void **region,
		 const char **res, size_t *rn, int *origin)
{
	const char *cur = s;
	size_t cn = n;

	for (size_t k = 0; k < t->n_norm; k++) {
		const norm_step *st = &t->norm[k];
		sl_buf *dst = &bufs[k & 1];
		if (st->kind == NORM_PREPEND && cn == 0) /* HF prepends only to non-empty text */
			continue;
		TRY(run_step(t, st, cur, cn, region, dst));
		if (origin && *origin && dropped_first(t, st, cur, cn, dst))
			*origin = 0;
		cur = dst->p ? dst->p : "";
		cn = dst->n;
	}
	*res = cur;
	*rn = cn;
	return 0;
}

/* ---- loading ---- */

static int add_step(text_tok *t, const norm_step *st)
{
	if (tk_grow((void **)&t->norm, &t->norm_cap, t->n_norm + 1, sizeof *t->norm))
		return SL_ENOMEM;
	t->norm[t->n_norm++] = *st;
	return 0;
}

static int load_replace(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const cJSON *pat = tk_jget(j, "pattern");
	const char *lit = tk_jstr(pat, "String"), *re = tk_jstr(pat, "Regex");
	const char *to = tk_jstr(j, "content");
	norm_step st = {.kind = lit ? NORM_REPLACE : NORM_REPLACE_RE};

	if ((!lit || !*lit) && !re)
		return LERR(SL_ENOTSUP, "normalizer Replace: needs a non-empty {\"String\": ...} "
			    "or a {\"Regex\": ...} pattern");
	if (!to)
		return LERR(SL_EINVAL, "normalizer Replace: missing \"content\"");
	/* normalized text ends up in tokens and decoded text (added tokens
	 * are stored normalized): it must stay UTF-8, and so must what edits it */
	if ((lit && !text_utf8_valid(lit, strlen(lit))) || !text_utf8_valid(to, strlen(to)))
		return LERR(SL_EINVAL, "normalizer Replace: \"%s\" is not valid UTF-8",
			    lit && !text_utf8_valid(lit, strlen(lit)) ? "pattern" : "content");
	const char *a = lit ? lit : re;
	st.a_len = (uint32_t)strlen(a);
	st.b_len = (uint32_t)strlen(to);
	TRY(tk_arena_put(t, a, st.a_len, &st.a_off));
	TRY(tk_arena_put(t, to, st.b_len, &st.b_off));
	if (re)
		TRY(tk_regex_compile(t, re, st.a_len, &st.re, "normalizer Replace", err, errlen));
	int rc = add_step(t, &st);
	if (rc)
		tk_regex_free(st.re);
	return rc;
}

static int load_step(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	static const struct {
		const char *name;
		int kind;
	} simple[] = {{"NFC", NORM_NFC}, {"NFD", NORM_NFD}, {"NFKC", NORM_NFKC},
		      {"NFKD", NORM_NFKD}, {"Lowercase", NORM_LOWERCASE},
		      {"StripAccents", NORM_STRIP_ACCENTS}};
	const char *type = tk_jstr(j, "type");
	norm_step st = {0};

	if (!type)
		return LERR(SL_EINVAL, "normalizer: missing \"type\"");
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *arr = tk_jget(j, "normalizers"), *it;
		if (!cJSON_IsArray(arr))
			return LERR(SL_EINVAL, "normalizer Sequence: missing \"normalizers\"");
		cJSON_ArrayForEach(it, arr)
			TRY(load_step(t, it, err, errlen));
		return 0;
	}
	for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
		if (strcmp(type, simple[i].name) == 0) {
			st.kind = simple[i].kind;
			return add_step(t, &st);
		}
	if (strcmp(type, "Strip") == 0) {
		st.kind = NORM_STRIP;
		st.left = tk_jbool(j, "strip_left", 1);
		st.right = tk_jbool(j, "strip_right", 1);
		return add_step(t, &st);
	}
	if (strcmp(type, "Prepend") == 0) {
		const char *p = tk_jstr(j, "prepend");
		if (!p)
			return LERR(SL_EINVAL, "normalizer Prepend: missing \"prepend\"");
		if (!text_utf8_valid(p, strlen(p)))
			return LERR(SL_EINVAL, "normalizer Prepend: \"prepend\" is not valid UTF-8");
		st.kind = NORM_PREPEND;
		st.a_len = (uint32_t)strlen(p);
		TRY(tk_arena_put(t, p, st.a_len, &st.a_off));
		return add_step(t, &st);
	}
	if (strcmp(type, "Replace") == 0)
		return load_replace(t, j, err, errlen);
	return LERR(SL_ENOTSUP, "normalizer \"%s\" not supported (NFC, NFD, NFKC, NFKD, "
		    "Lowercase, Strip, StripAccents, Prepend, Replace, Sequence are)", type);
}

int tk_load_normalizer(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	if (tk_jabsent(j))
		return 0;
	return load_step(t, j, err, errlen);
}

void tk_free_normalizer(text_tok *t)
{
	for (size_t i = 0; i < t->n_norm; i++)
		tk_regex_free(t->norm[i].re);
	free(t->norm);
}
