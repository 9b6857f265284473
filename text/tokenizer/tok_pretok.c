/*
 * tok_pretok.c -- pre-tokenizers: text -> words, as Hugging Face
 * `tokenizers` splits it, through Oniguruma.
 *
 * Owner: the tokenizer (text/tokenizer/).  Callers: tokenizer.c (loading; encode,
 * which hands the words this file makes to tok_bpe.c), tok_norm.c
 * (Replace with a regex).  It calls nothing of the BPE: words go back up
 * to the pipeline, which drives pre-tokenizing and BPE in turn.
 *
 * Why Oniguruma: `tokenizers` compiles every Split pattern and the GPT-2
 * pattern of ByteLevel with Oniguruma (the onig crate: ONIG_OPTION_NONE,
 * UTF-8, Oniguruma's default syntax) and walks the matches with the
 * crate's find_iter.  Calling the same engine with the same options
 * makes \p{L}, (?i:...), lookahead and every backtracking corner behave
 * as there, for any pattern a tokenizer.json carries -- instead of one
 * hand-written matcher per known pattern.  The character-class
 * pre-tokenizers (Digits, Punctuation, Whitespace, WhitespaceSplit) are
 * expressed as the equivalent patterns so one engine (and one Unicode
 * version, Oniguruma's) classifies everything.
 *
 * Every step maps a list of pieces to a new list (tk_pieces, double
 * buffered in enc_ctx); HF's split semantics: the pattern's matches and
 * the gaps between them become segments, `invert` swaps the two, the
 * behaviour (Removed, Isolated, MergedWithPrevious, MergedWithNext,
 * Contiguous) joins or drops them, empty pieces vanish.
 */
#include "text/tokenizer/tok_int.h"
#include "common/checks.h"
#include "common/sl.h"

#include <oniguruma.h>
#include <pthread.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pattern, as ByteLevel(use_regex=true) compiles it. */
#define GPT2_PATTERN \
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Rust's char::is_numeric (Digits): general category N. */
#define DIGIT_PATTERN "\\p{N}"
/* tokenizers' is_punc: Rust's is_ascii_punctuation or category P. */
#define PUNCT_PATTERN "[\\p{P}\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E]"
/* Whitespace: the Rust regex \w+|[^\w\s]+, with the regex crate's \w
 * (Alphabetic, marks, decimal digits, connector punctuation,
 * Join_Control) spelled out: Oniguruma's own \w differs (all numbers). */
#define WORDCH "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}"
#define WHITESPACE_PATTERN "[" WORDCH "]+|[^" WORDCH "\\p{White_Space}]+"
#define WS_SPLIT_PATTERN "\\p{White_Space}"

/* ---- Oniguruma ---- */

static pthread_once_t g_onig_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_onig_new = PTHREAD_MUTEX_INITIALIZER;
static int g_onig_rc;

static void onig_setup(void)
{
	OnigEncoding enc[1] = {ONIG_ENCODING_UTF8};
	g_onig_rc = onig_initialize(enc, 1);
}

int tk_regex_compile(text_tok *t, const char *pat, size_t len, void **out, const char *what,
		     char *err, size_t errlen)
{
	OnigErrorInfo einfo;
	OnigRegex re = NULL;
	unsigned char msg[ONIG_MAX_ERROR_MESSAGE_LEN];

	*out = NULL;
	pthread_once(&g_onig_once, onig_setup);
	if (g_onig_rc != ONIG_NORMAL)
		return LERR(SL_EINVAL, "%s: Oniguruma would not initialize", what);
	if (!text_utf8_valid(pat, len))
		return LERR(SL_EINVAL, "%s: pattern is not valid UTF-8", what);
	/* onig_new is not thread-safe in all versions (the onig crate locks too) */
	pthread_mutex_lock(&g_onig_new);
	int rc = onig_new(&re, (const OnigUChar *)pat, (const OnigUChar *)pat + len,
			  ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &einfo);
	pthread_mutex_unlock(&g_onig_new);
	if (rc != ONIG_NORMAL) {
		onig_error_code_to_str(msg, rc, &einfo);
		return LERR(SL_EINVAL, "%s: pattern \"%.80s\" does not compile: %s", what, pat,
			    (const char *)msg);
	}
	*out = re;
	return 0;
}

void tk_regex_free(void *re)
{
	if (re)
		onig_free((OnigRegex)re);
}

void *tk_region_new(void) { return onig_region_new(); }

void tk_region_free(void *region)
{
	if (region)
		onig_region_free((OnigRegion *)region, 1);
}

int tk_regex_each(void *re, void *region, const char *s, size_t n,
		  int (*fn)(void *arg, size_t start, size_t end), void *arg)
{
	const OnigUChar *str = (const OnigUChar *)s, *end = str + n;
	OnigRegion *r = region;
	size_t last_end = 0;
	long last_match_end = -1;

	while (last_end <= n) {
		onig_region_clear(r);
		int at = onig_search((OnigRegex)re, str, end, str + last_end, end, r,
				     ONIG_OPTION_NONE);
		if (at == ONIG_MISMATCH)
			return 0;
		if (at < 0)
			return SL_EINVAL; /* e.g. the retry limit: pathological input */
		size_t st = (size_t)r->beg[0], en = (size_t)r->end[0];
		if (st == en && last_match_end == (long)en) {
			/* no empty match right after the last one: step one character */
			uint32_t cp;
			last_end += last_end < n ? text_utf8_next((const char *)str + last_end, n - last_end, &cp) : 1;
			continue;
		}
		last_end = en;
		last_match_end = (long)en;
		TRY(fn(arg, st, en));
	}
	return 0;
}

/* ---- splitting one piece ---- */

static int span_push(enc_ctx *c, size_t a, size_t b, int m)
{
	if (tk_grow((void **)&c->spans, &c->spans_cap, c->n_spans + 1, sizeof *c->spans))
		return SL_ENOMEM;
	c->spans[c->n_spans++] = (tk_span){(uint32_t)a, (uint32_t)b, (uint8_t)m};
	return 0;
}

typedef struct {
	enc_ctx *c;
	size_t prev;
} seg_state;

/* HF's find_matches: the gap before each match, then the match. */
static int on_match(void *arg, size_t st, size_t en)
{
	seg_state *s = arg;
	if (s->prev != st)
		TRY(span_push(s->c, s->prev, st, 0));
	TRY(span_push(s->c, st, en, 1));
	s->prev = en;
	return 0;
}

/* Segments of s for a literal pattern (Metaspace's character). */
static int literal_segments(enc_ctx *c, const char *s, size_t n, const char *pat, size_t pn)
{
	seg_state st = {c, 0};
	for (size_t i = 0; i + pn <= n;) {
		if (memcmp(s + i, pat, pn) == 0) {
			TRY(on_match(&st, i, i + pn));
			i += pn;
		} else {
			i++;
		}
	}
	return st.prev != n ? span_push(c, st.prev, n, 0) : 0;
}

static int regex_segments(enc_ctx *c, void *re, const char *s, size_t n)
{
	seg_state st = {c, 0};
	if (!c->region && !(c->region = tk_region_new()))
		return SL_ENOMEM;
	TRY(tk_regex_each(re, c->region, s, n, on_match, &st));
	return st.prev != n ? span_push(c, st.prev, n, 0) : 0;
}

static int piece_add(tk_pieces *out, const char *s, size_t n, int origin)
{
	if (n == 0) /* HF drops empty splits */
		return 0;
	if (tk_grow((void **)&out->p, &out->cap, out->n + 1, sizeof *out->p))
		return SL_ENOMEM;
	tk_piece *p = &out->p[out->n];
	p->off = (uint32_t)out->text.n;
	p->len = (uint32_t)n;
	p->origin = (uint8_t)origin;
	TRY(sl_buf_put(&out->text, s, n));
	out->n++;
	return 0;
}

/*
 * c->spans (segments covering s) -> pieces, as NormalizedString::split
 * does for each behaviour.  The merges look at whether the previous
 * segment matched; MergedWithNext runs the same fold from the right.
 */
static int emit_segments(enc_ctx *c, const char *s, int behavior, int invert, int origin,
			 tk_pieces *out)
{
	tk_span *sp = c->spans;
	size_t n = c->n_spans, k = 0;
	int prev_match = 0;

	for (size_t i = 0; i < n; i++)
		sp[i].m ^= (uint8_t)(invert != 0);
	if (behavior == SPLIT_MERGED_NEXT) {
		for (size_t i = n; i-- > 0;) {
			int m = sp[i].m;
			if (m && !prev_match && k)
				sp[n - k].a = sp[i].a; /* joins the segment after it */
			else
				sp[n - ++k] = (tk_span){sp[i].a, sp[i].b, 0};
			prev_match = m;
		}
		sp += n - k;
	} else if (behavior != SPLIT_REMOVED && behavior != SPLIT_ISOLATED) {
		for (size_t i = 0; i < n; i++) {
			int m = sp[i].m;
			int join = behavior == SPLIT_CONTIGUOUS ? m == prev_match : m && !prev_match;
			if (join && k)
				sp[k - 1].b = sp[i].b;
			else
				sp[k++] = (tk_span){sp[i].a, sp[i].b, 0};
			prev_match = m;
		}
	} else {
		k = n;
	}
	for (size_t i = 0; i < k; i++) {
		if (behavior == SPLIT_REMOVED && sp[i].m)
			continue;
		TRY(piece_add(out, s + sp[i].a, sp[i].b - sp[i].a, origin && sp[i].a == 0));
	}
	return 0;
}

static int split_regex(enc_ctx *c, void *re, int behavior, int invert, const char *s,
		       size_t n, int origin, tk_pieces *out)
{
	c->n_spans = 0;
	TRY(regex_segments(c, re, s, n));
	return emit_segments(c, s, behavior, invert, origin, out);
}

/* Metaspace: spaces become the replacement character, which is prepended
 * when the scheme asks (first: only to the piece that starts the input);
 * with split=true each replacement character starts a word. */
static int metaspace(enc_ctx *c, const pre_step *st, const char *s, size_t n, int origin,
		     tk_pieces *out)
{
	sl_buf *m = &c->tmp;

	TRY(tk_replace_all(s, n, " ", 1, st->rep, st->rep_len, m));
	if ((st->prepend == PREPEND_ALWAYS || (st->prepend == PREPEND_FIRST && origin)) &&
	    !tk_starts_with(m->p, m->n, st->rep, st->rep_len)) {
		TRY(sl_buf_put(m, st->rep, st->rep_len)); /* make room, then shift */
		memmove(m->p + st->rep_len, m->p, m->n - st->rep_len);
		memcpy(m->p, st->rep, st->rep_len);
	}
	if (!st->split)
		return piece_add(out, m->p, m->n, origin);
	c->n_spans = 0;
	TRY(literal_segments(c, m->p, m->n, st->rep, st->rep_len));
	return emit_segments(c, m->p, SPLIT_MERGED_NEXT, 0, origin, out);
}

/* ByteLevel: a space in front unless there is one, then GPT-2's split.
 * The byte-to-character mapping itself is left out: the BPE of a
 * byte-level model works on raw bytes (see tok_bpe.c). */
static int byte_level_step(enc_ctx *c, const pre_step *st, const char *s, size_t n, int origin,
		      tk_pieces *out)
{
	if (st->prefix_space && !(n && s[0] == ' ')) {
		c->tmp.n = 0;
		TRY(sl_buf_put(&c->tmp, " ", 1));
		TRY(sl_buf_put(&c->tmp, s, n));
		s = c->tmp.p;
		n = c->tmp.n;
	}
	if (!st->re)
		return piece_add(out, s, n, origin);
	return split_regex(c, st->re, SPLIT_ISOLATED, 0, s, n, origin, out);
}

static int run_step(enc_ctx *c, const pre_step *st, const char *s, size_t n, int origin,
		    tk_pieces *out)
{
	switch (st->kind) {
	case PRE_METASPACE:
		return metaspace(c, st, s, n, origin, out);
	case PRE_BYTELEVEL:
		return byte_level_step(c, st, s, n, origin, out);
	default:
		return split_regex(c, st->re, st->behavior, st->invert, s, n, origin, out);
	}
}

int tk_pretokenize(enc_ctx *c, const char *s, size_t n, int at_origin, const tk_pieces **words)
{
	const text_tok *t = c->t;
	int cur = 0;

	c->pc[0].n = c->pc[0].text.n = 0;
	*words = &c->pc[0];
	if (n == 0)
		return 0;
	TRY(piece_add(&c->pc[0], s, n, at_origin));
	for (size_t k = 0; k < t->n_pre; k++) {
		tk_pieces *in = &c->pc[cur], *out = &c->pc[cur ^ 1];
		out->n = out->text.n = 0;
		for (size_t i = 0; i < in->n; i++)
			TRY(run_step(c, &t->pre[k], in->text.p + in->p[i].off, in->p[i].len,
				     in->p[i].origin, out));
		cur ^= 1;
	}
	*words = &c->pc[cur];
	return 0;
}

/* ---- loading ---- */

static int add_step(text_tok *t, const pre_step *st)
{
	if (tk_grow((void **)&t->pre, &t->pre_cap, t->n_pre + 1, sizeof *t->pre))
		return SL_ENOMEM;
	t->pre[t->n_pre++] = *st;
	return 0;
}

static int parse_behavior(const char *b)
{
	static const char *const names[] = {"removed", "isolated", "mergedwithprevious",
					    "mergedwithnext", "contiguous"};
	for (int i = 0; b && i < 5; i++)
		if (strcasecmp(b, names[i]) == 0)
			return i;
	return -1;
}

/* A String pattern is a literal: escape what Oniguruma would read. */
static int escape_literal(const char *s, sl_buf *out)
{
	out->n = 0;
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch < 0x80 && ch > 0x20 && !((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') &&
		    !(ch >= '0' && ch <= '9') && ch != '_')
			TRY(sl_buf_put(out, "\\", 1));
		TRY(sl_buf_put(out, s, 1));
	}
	return sl_buf_put(out, "", 0);
}

/* A step with one compiled pattern; pattern NUL-terminated. */
static int pattern_step(text_tok *t, const char *what, const char *pat, int behavior, int invert,
			char *err, size_t errlen)
{
	pre_step st = {.kind = PRE_SPLIT, .behavior = behavior, .invert = invert};
	TRY(tk_regex_compile(t, pat, strlen(pat), &st.re, what, err, errlen));
	int rc = add_step(t, &st);
	if (rc)
		tk_regex_free(st.re);
	return rc;
}

static int load_split(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const cJSON *pat = tk_jget(j, "pattern");
	const char *re = tk_jstr(pat, "Regex"), *lit = tk_jstr(pat, "String");
	int behavior = parse_behavior(tk_jstr(j, "behavior"));
	sl_buf esc = {0};
	int rc;

	if (behavior < 0)
		return LERR(SL_ENOTSUP, "pre_tokenizer Split: unknown behavior \"%.40s\"",
			    tk_jstr(j, "behavior") ? tk_jstr(j, "behavior") : "(none)");
	if (!re && !lit)
		return LERR(SL_EINVAL, "pre_tokenizer Split: \"pattern\" needs \"Regex\" or \"String\"");
	if (lit && !*lit)
		return LERR(SL_ENOTSUP, "pre_tokenizer Split: empty String pattern");
	if (lit && (rc = escape_literal(lit, &esc)))
		return rc;
	rc = pattern_step(t, "pre_tokenizer Split", re ? re : esc.p, behavior,
			  tk_jbool(j, "invert", 0), err, errlen);
	free(esc.p);
	return rc;
}

static int load_metaspace(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const char *rep = tk_jstr(j, "replacement"), *scheme = tk_jstr(j, "prepend_scheme");
	pre_step st = {.kind = PRE_METASPACE};

	if (!rep || tk_one_char(rep, st.rep, &st.rep_len))
		return LERR(SL_EINVAL, "pre_tokenizer Metaspace: \"replacement\" "
			    "must be one character");
	st.split = tk_jbool(j, "split", 1);
	if (!scheme) /* files before prepend_scheme existed */
		st.prepend = tk_jbool(j, "add_prefix_space", 1) ? PREPEND_ALWAYS : PREPEND_NEVER;
	else if (strcmp(scheme, "first") == 0)
		st.prepend = PREPEND_FIRST;
	else if (strcmp(scheme, "always") == 0)
		st.prepend = PREPEND_ALWAYS;
	else if (strcmp(scheme, "never") == 0)
		st.prepend = PREPEND_NEVER;
	else
		return LERR(SL_EINVAL, "pre_tokenizer Metaspace: bad prepend_scheme \"%s\"", scheme);
	return add_step(t, &st);
}

static int load_byte_level(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	pre_step st = {.kind = PRE_BYTELEVEL, .prefix_space = tk_jbool(j, "add_prefix_space", 1)};

	if (tk_jbool(j, "use_regex", 1))
		TRY(tk_regex_compile(t, GPT2_PATTERN, strlen(GPT2_PATTERN), &st.re,
				     "pre_tokenizer ByteLevel", err, errlen));
	t->byte_level = 1;
	int rc = add_step(t, &st);
	if (rc)
		tk_regex_free(st.re);
	return rc;
}

static int load_pre_step(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const char *type = tk_jstr(j, "type");

	if (!type)
		return LERR(SL_EINVAL, "pre_tokenizer: missing \"type\"");
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *arr = tk_jget(j, "pretokenizers"), *it;
		if (!cJSON_IsArray(arr))
			return LERR(SL_EINVAL, "pre_tokenizer Sequence: missing \"pretokenizers\"");
		cJSON_ArrayForEach(it, arr)
			TRY(load_pre_step(t, it, err, errlen));
		return 0;
	}
	/* After ByteLevel the text is in its byte alphabet, which no later
	 * step of ours sees (we keep raw bytes). */
	if (t->byte_level)
		return LERR(SL_ENOTSUP, "pre_tokenizer: \"%s\" after ByteLevel is not supported", type);
	if (strcmp(type, "Metaspace") == 0)
		return load_metaspace(t, j, err, errlen);
	if (strcmp(type, "ByteLevel") == 0)
		return load_byte_level(t, j, err, errlen);
	if (strcmp(type, "Split") == 0)
		return load_split(t, j, err, errlen);
	if (strcmp(type, "Digits") == 0)
		return pattern_step(t, "pre_tokenizer Digits", DIGIT_PATTERN,
				    tk_jbool(j, "individual_digits", 0) ? SPLIT_ISOLATED
									: SPLIT_CONTIGUOUS,
				    0, err, errlen);
	if (strcmp(type, "Punctuation") == 0) {
		const char *b = tk_jstr(j, "behavior");
		int behavior = b ? parse_behavior(b) : SPLIT_ISOLATED;
		if (behavior < 0)
			return LERR(SL_ENOTSUP, "pre_tokenizer Punctuation: unknown behavior "
				    "\"%.40s\"", b);
		return pattern_step(t, "pre_tokenizer Punctuation", PUNCT_PATTERN, behavior, 0,
				    err, errlen);
	}
	if (strcmp(type, "Whitespace") == 0)
		return pattern_step(t, "pre_tokenizer Whitespace", WHITESPACE_PATTERN,
				    SPLIT_REMOVED, 1, err, errlen);
	if (strcmp(type, "WhitespaceSplit") == 0)
		return pattern_step(t, "pre_tokenizer WhitespaceSplit", WS_SPLIT_PATTERN,
				    SPLIT_REMOVED, 0, err, errlen);
	return LERR(SL_ENOTSUP, "pre_tokenizer \"%s\" not supported (Split, ByteLevel, "
		    "Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, Sequence are)",
		    type);
}

int tk_load_pretokenizer(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	if (tk_jabsent(j))
		return 0;
	return load_pre_step(t, j, err, errlen);
}

void tk_free_pretokenizer(text_tok *t)
{
	for (size_t i = 0; i < t->n_pre; i++)
		tk_regex_free(t->pre[i].re);
	free(t->pre);
}
