/*
 * tokenizer.c -- Hugging Face tokenizer.json (BPE) for the coordinator:
 * loading, encoding, decoding and streaming detokenization.
 *
 * Owner: coordinator.  Callers: see tokenizer.h.
 *
 * Encoding follows the `tokenizers` pipeline step by step, because
 * conformance is judged id for id against it:
 *   added tokens split out of the raw text (leftmost-longest)
 *   -> normalizer (Prepend / Replace) on each remaining piece
 *   -> pre-tokenizer (Metaspace, or the Llama 3 regex as a hand-written
 *      matcher, see l3_split) into words
 *   -> BPE per word: symbols are characters (or raw bytes for byte-level
 *      models), merged lowest rank first, leftmost on ties, through a binary
 *      heap with lazy invalidation: O(n log n) per word
 *   -> post-processor template (BOS) around the whole sequence.
 * Byte-level models are handled in raw bytes: the GPT-2 byte<->char mapping
 * is undone once at load for every vocabulary entry, so encoding never
 * builds mapped strings.
 *
 * Decoding runs the decoder chain as a stream (coord_detok); the one-shot
 * coord_tok_decode is the same stream in "exact" mode, so both agree by
 * construction.
 */
#include "tokenizer.h"
#include "checks.h"
#include "sl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKEN_ID (1 << 24) /* refuse files that would make us allocate more */
#define LLAMA3_PATTERN \
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" \
	" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* ------------------------------------------------------------------ */
/* Growable buffers                                                    */

typedef struct {
	char *p;
	size_t len, cap;
} tk_buf;

typedef struct {
	int32_t *p;
	size_t len, cap;
} tk_ids;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t ncap = *cap ? *cap : 64;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2 / elem)
			return SL_ENOMEM;
		ncap *= 2;
	}
	void *np = realloc(*p, ncap * elem);
	if (!np)
		return SL_ENOMEM;
	*p = np;
	*cap = ncap;
	return 0;
}

static int buf_put(tk_buf *b, const void *s, size_t n)
{
	/* +1 keeps room for a terminating NUL */
	if (grow((void **)&b->p, &b->cap, b->len + n + 1, 1))
		return SL_ENOMEM;
	if (n)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
	return 0;
}

static int ids_push(tk_ids *v, int32_t id)
{
	if (grow((void **)&v->p, &v->cap, v->len + 1, sizeof *v->p))
		return SL_ENOMEM;
	v->p[v->len++] = id;
	return 0;
}

/* ------------------------------------------------------------------ */
/* UTF-8                                                               */

#define UNIT_BAD 0xFFFFFFFFu   /* ill-formed: can never become a character */
#define UNIT_TRUNC 0xFFFFFFFEu /* valid so far, but the input ended */

/*
 * Length of the UTF-8 unit at s[0..n), n >= 1: one well-formed character
 * (*cp = its code point) or the maximal ill-formed subpart (*cp = UNIT_BAD
 * or UNIT_TRUNC).  Maximal subparts are what Python's errors="replace" and
 * Rust's from_utf8_lossy each turn into one U+FFFD, so the same unit is
 * used for pre-tokenizing invalid input and for lossy decoding.
 */
static size_t utf8_unit(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned b = s[0], need, lo = 0x80, hi = 0xBF;
	uint32_t c;

	if (b < 0x80) {
		*cp = b;
		return 1;
	}
	if (b >= 0xC2 && b <= 0xDF) {
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
		lo = b == 0xF0 ? 0x90 : 0x80;
		hi = b == 0xF4 ? 0x8F : 0xBF; /* <= U+10FFFF */
	} else {
		*cp = UNIT_BAD;
		return 1;
	}
	size_t i = 1;
	for (unsigned k = 0; k < need; k++, i++) {
		if (i >= n) {
			*cp = UNIT_TRUNC;
			return i;
		}
		if (s[i] < lo || s[i] > hi) {
			*cp = UNIT_BAD;
			return i;
		}
		c = (c << 6) | (s[i] & 0x3F);
		lo = 0x80;
		hi = 0xBF;
	}
	*cp = c;
	return i;
}

int coord_utf8_valid(const char *s, size_t n)
{
	uint32_t cp;
	for (size_t i = 0; i < n;) {
		i += utf8_unit((const unsigned char *)s + i, n - i, &cp);
		if (cp == UNIT_BAD || cp == UNIT_TRUNC)
			return 0;
	}
	return 1;
}

static size_t utf8_put(char *out, uint32_t cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* ------------------------------------------------------------------ */
/* GPT-2 byte-level alphabet                                            */

/*
 * Byte-level BPE spells every byte as a printable character: bytes that
 * are printable Latin-1 stand for themselves, the other 68 are moved to
 * U+0100.. in byte order (so ' ' is 'Ġ').  Returns the code point for b.
 */
static uint32_t byte_to_char(unsigned b)
{
	if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
		return b;
	unsigned n = 0;
	for (unsigned x = 0; x < b; x++)
		if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
			n++;
	return 256 + n;
}

/* Inverse map, built once per tokenizer: char_byte[cp] for cp < 324. */
#define BYTE_CHARS 324
static void build_char_bytes(int16_t *char_byte)
{
	for (unsigned i = 0; i < BYTE_CHARS; i++)
		char_byte[i] = -1;
	for (unsigned b = 0; b < 256; b++)
		char_byte[byte_to_char(b)] = (int16_t)b;
}

/* ------------------------------------------------------------------ */
/* Hash maps                                                           */

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

static uint64_t hash_u64(uint64_t x)
{
	x ^= x >> 33; /* murmur3 finalizer */
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* String -> id.  Keys are (offset, length) into the tokenizer's arena, so
 * the arena may keep growing while maps are built. */
typedef struct {
	uint32_t off, len;
	int32_t val; /* -1: empty slot */
} sm_slot;

typedef struct {
	sm_slot *slots;
	size_t mask;
} strmap;

static int sm_init(strmap *m, size_t n)
{
	size_t cap = 16;
	while (cap < n * 2)
		cap *= 2;
	m->slots = malloc(cap * sizeof *m->slots);
	if (!m->slots)
		return SL_ENOMEM;
	for (size_t i = 0; i < cap; i++)
		m->slots[i].val = -1;
	m->mask = cap - 1;
	return 0;
}

static sm_slot *sm_find(const strmap *m, const char *arena, const char *key, size_t len)
{
	size_t i = hash_bytes(key, len) & m->mask;
	for (;; i = (i + 1) & m->mask) {
		sm_slot *s = &m->slots[i];
		if (s->val < 0)
			return s;
		if (s->len == len && memcmp(arena + s->off, key, len) == 0)
			return s;
	}
}

/* Inserts or overwrites.  The table was sized for all keys up front. */
static void sm_put(strmap *m, const char *arena, uint32_t off, uint32_t len, int32_t val)
{
	sm_slot *s = sm_find(m, arena, arena + off, len);
	s->off = off;
	s->len = len;
	s->val = val;
}

static int32_t sm_get(const strmap *m, const char *arena, const char *key, size_t len)
{
	if (!m->slots)
		return -1;
	return sm_find(m, arena, key, len)->val;
}

/* (left id, right id) -> (rank, merged id). */
typedef struct {
	uint64_t key; /* UINT64_MAX: empty */
	int32_t rank, result;
} pm_slot;

typedef struct {
	pm_slot *slots;
	size_t mask;
} pairmap;

static int pm_init(pairmap *m, size_t n)
{
	size_t cap = 16;
	while (cap < n * 2)
		cap *= 2;
	m->slots = malloc(cap * sizeof *m->slots);
	if (!m->slots)
		return SL_ENOMEM;
	memset(m->slots, 0xFF, cap * sizeof *m->slots);
	m->mask = cap - 1;
	return 0;
}

static pm_slot *pm_find(const pairmap *m, uint64_t key)
{
	size_t i = hash_u64(key) & m->mask;
	while (m->slots[i].key != key && m->slots[i].key != UINT64_MAX)
		i = (i + 1) & m->mask;
	return &m->slots[i];
}

static uint64_t pair_key(int32_t a, int32_t b)
{
	return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static const pm_slot *pm_get(const pairmap *m, int32_t a, int32_t b)
{
	if (!m->slots)
		return NULL;
	const pm_slot *s = pm_find(m, pair_key(a, b));
	return s->key == UINT64_MAX ? NULL : s;
}

/* ------------------------------------------------------------------ */
/* The tokenizer                                                       */

typedef struct {
	uint32_t text_off, text_len; /* the token's text as HF's id_to_token
	                              * gives it (added tokens: content) */
	uint32_t dec_off, dec_len;   /* what the decoder makes of it alone */
	int16_t byte_val;            /* ByteFallback "<0xNN>" value, else -1 */
	uint8_t present;             /* some token has this id */
	uint8_t special;             /* skipped by decode(skip_special) */
} tok_entry;

typedef struct {
	uint32_t off, len;   /* what is matched: content, normalized if flagged */
	uint32_t coff, clen; /* content as in the file */
	int32_t id;
	uint8_t special, normalized;
} added_tok;

enum { NORM_PREPEND, NORM_REPLACE };
typedef struct {
	int kind;
	uint32_t a_off, a_len; /* prepend text, or replace pattern */
	uint32_t b_off, b_len; /* replacement */
} norm_step;

enum { PREPEND_NEVER, PREPEND_FIRST, PREPEND_ALWAYS };
enum { DEC_JOIN, DEC_PIPE, DEC_BYTELEVEL };

struct coord_tok {
	char *name;        /* file name, for messages */
	char *arena;       /* every string below lives here */
	size_t arena_len, arena_cap;

	tok_entry *tok;    /* [n_vocab] */
	int32_t n_vocab;
	strmap text_map;   /* model vocab: file spelling -> id */
	strmap enc_map;    /* model vocab: what BPE words are made of -> id
	                    * (raw bytes for byte-level models) */
	pairmap merges;
	int32_t unk_id;    /* -1: unknown characters are dropped, as HF does */
	int byte_fallback, fuse_unk, ignore_merges;
	int32_t byte_id[256];  /* "<0xNN>" tokens, -1 when absent */
	int32_t byte_sym[256]; /* byte-level: id of the one-byte token */

	added_tok *added;  /* sorted by first byte, then longest first */
	size_t n_added, n_added_norm;
	uint32_t added_first[257]; /* bucket starts by first byte */

	norm_step *norm;
	size_t n_norm, norm_cap;

	int meta;          /* Metaspace pre-tokenizer */
	char meta_rep[8];
	size_t meta_rep_len;
	int meta_prepend, meta_split;
	int l3_split;      /* Split with the Llama 3 regex */
	int byte_level;    /* ByteLevel pre-tokenizer: BPE over raw bytes */

	tk_ids prefix, suffix; /* post-processor template around $A */

	int dec_kind;
	int dec_byte_fallback;
	int dec_meta_first;       /* Metaspace decoder drops its char in token 0 */
	char dec_meta_rep[8];
	size_t dec_meta_rep_len;
	int dec_strip;            /* leading strip count (after Fuse) */
	char dec_strip_char[8];
	size_t dec_strip_char_len;

	int32_t bos_id, eos_id;
};

static const char *tk_str(const coord_tok *t, uint32_t off) { return t->arena + off; }

/* Appends n bytes to the arena; *off gets their offset. */
static int arena_put(coord_tok *t, const char *s, size_t n, uint32_t *off)
{
	if (t->arena_len + n + 1 > UINT32_MAX)
		return SL_ENOMEM;
	if (grow((void **)&t->arena, &t->arena_cap, t->arena_len + n + 1, 1))
		return SL_ENOMEM;
	*off = (uint32_t)t->arena_len;
	if (n)
		memcpy(t->arena + t->arena_len, s, n);
	t->arena_len += n;
	t->arena[t->arena_len++] = 0;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Text transforms shared by the normalizer and the decoder             */

/* out = s with every non-overlapping pat (left to right) replaced by to. */
static int replace_all(const char *s, size_t n, const char *pat, size_t pn,
		       const char *to, size_t tn, tk_buf *out)
{
	size_t i = 0, start = 0;

	out->len = 0;
	while (i + pn <= n) {
		if (memcmp(s + i, pat, pn) != 0) {
			i++;
			continue;
		}
		if (buf_put(out, s + start, i - start) || buf_put(out, to, tn))
			return SL_ENOMEM;
		i += pn;
		start = i;
	}
	return buf_put(out, s + start, n - start);
}

/*
 * Runs the normalizer over s.  Results alternate between bufs[0] and
 * bufs[1] so a step never reads the buffer it writes; *res may also be s
 * itself when nothing changed it.
 */
static int normalize(const coord_tok *t, const char *s, size_t n, tk_buf bufs[2],
		     const char **res, size_t *rn)
{
	const char *cur = s;
	size_t cn = n;

	for (size_t k = 0; k < t->n_norm; k++) {
		const norm_step *st = &t->norm[k];
		tk_buf *dst = &bufs[k & 1];
		if (st->kind == NORM_PREPEND) {
			if (cn == 0) /* HF prepends only to non-empty text */
				continue;
			dst->len = 0;
			if (buf_put(dst, tk_str(t, st->a_off), st->a_len) || buf_put(dst, cur, cn))
				return SL_ENOMEM;
		} else if (replace_all(cur, cn, tk_str(t, st->a_off), st->a_len,
				       tk_str(t, st->b_off), st->b_len, dst)) {
			return SL_ENOMEM;
		}
		cur = dst->p;
		cn = dst->len;
	}
	*res = cur;
	*rn = cn;
	return 0;
}

/* ByteFallback's test, as HF writes it: exactly "<0x" + two characters
 * u8::from_str_radix accepts (hex digits, or '+' and one digit) + ">". */
static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int16_t parse_byte_token(const char *s, size_t n)
{
	if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
		return -1;
	int lo = hexval(s[4]), hi = s[3] == '+' ? 0 : hexval(s[3]);
	return (int16_t)(lo < 0 || hi < 0 ? -1 : hi * 16 + lo);
}

/* ------------------------------------------------------------------ */
/* Loading: small JSON helpers                                          */

/* Formats "<file>: <what>" into err and returns code. */
static int load_err(const coord_tok *t, char *err, size_t errlen, int code,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int load_err(const coord_tok *t, char *err, size_t errlen, int code,
		    const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return sl_errf(err, errlen, code, "%s: %s", t->name, msg);
}

#define LERR(code, ...) load_err(t, err, errlen, code, __VA_ARGS__)
static const cJSON *jget(const cJSON *o, const char *key)
{
	return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

static const char *jstr(const cJSON *o, const char *key)
{
	const cJSON *v = jget(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int jbool(const cJSON *o, const char *key, int dflt)
{
	const cJSON *v = jget(o, key);
	return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static int jabsent(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* A JSON number that is an integer in [0, MAX_TOKEN_ID), else -1. */
static int32_t jid(const cJSON *v)
{
	if (!cJSON_IsNumber(v))
		return -1;
	double d = v->valuedouble;
	if (!(d >= 0 && d < MAX_TOKEN_ID) || d != floor(d))
		return -1;
	return (int32_t)d;
}

/* Exactly one UTF-8 character: copies it to out (8 bytes) and sets *len. */
static int one_char(const char *s, char *out, size_t *len)
{
	uint32_t cp;
	size_t n = strlen(s);
	if (n == 0 || n > 4 || utf8_unit((const unsigned char *)s, n, &cp) != n ||
	    cp == UNIT_BAD || cp == UNIT_TRUNC)
		return -1;
	memcpy(out, s, n);
	out[n] = 0;
	*len = n;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Loading: normalizer and pre-tokenizer                                */

static int load_norm_step(coord_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const char *type = jstr(j, "type");
	norm_step st = {0};

	if (!type)
		return LERR(SL_EINVAL, "normalizer: missing \"type\"");
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *arr = jget(j, "normalizers"), *it;
		if (!cJSON_IsArray(arr))
			return LERR(SL_EINVAL, "normalizer Sequence: missing \"normalizers\"");
		cJSON_ArrayForEach(it, arr)
			TRY(load_norm_step(t, it, err, errlen));
		return 0;
	}
	if (strcmp(type, "Prepend") == 0) {
		const char *p = jstr(j, "prepend");
		if (!p)
			return LERR(SL_EINVAL, "normalizer Prepend: missing \"prepend\"");
		st.kind = NORM_PREPEND;
		st.a_len = (uint32_t)strlen(p);
		TRY(arena_put(t, p, st.a_len, &st.a_off));
	} else if (strcmp(type, "Replace") == 0) {
		const char *pat = jstr(jget(j, "pattern"), "String"), *to = jstr(j, "content");
		if (!pat || !*pat || !to)
			return LERR(SL_ENOTSUP, "normalizer Replace: only a non-empty "
				    "{\"String\": ...} pattern and a \"content\" are supported");
		st.kind = NORM_REPLACE;
		st.a_len = (uint32_t)strlen(pat);
		st.b_len = (uint32_t)strlen(to);
		TRY(arena_put(t, pat, st.a_len, &st.a_off));
		TRY(arena_put(t, to, st.b_len, &st.b_off));
	} else {
		return LERR(SL_ENOTSUP, "normalizer \"%s\" not supported "
			    "(Prepend, Replace, Sequence are)", type);
	}
	if (grow((void **)&t->norm, &t->norm_cap, t->n_norm + 1, sizeof *t->norm))
		return SL_ENOMEM;
	t->norm[t->n_norm++] = st;
	return 0;
}

static int load_metaspace(coord_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const char *rep = jstr(j, "replacement"), *scheme = jstr(j, "prepend_scheme");

	if (t->meta || t->l3_split || t->byte_level)
		return LERR(SL_ENOTSUP, "pre_tokenizer: Metaspace combined with "
			    "another pre-tokenizer is not supported");
	if (!rep || one_char(rep, t->meta_rep, &t->meta_rep_len))
		return LERR(SL_EINVAL, "pre_tokenizer Metaspace: \"replacement\" "
			    "must be one character");
	t->meta = 1;
	t->meta_split = jbool(j, "split", 1);
	if (!scheme) /* files before prepend_scheme existed */
		t->meta_prepend = jbool(j, "add_prefix_space", 1) ? PREPEND_ALWAYS : PREPEND_NEVER;
	else if (strcmp(scheme, "first") == 0)
		t->meta_prepend = PREPEND_FIRST;
	else if (strcmp(scheme, "always") == 0)
		t->meta_prepend = PREPEND_ALWAYS;
	else if (strcmp(scheme, "never") == 0)
		t->meta_prepend = PREPEND_NEVER;
	else
		return LERR(SL_EINVAL, "pre_tokenizer Metaspace: bad prepend_scheme \"%s\"", scheme);
	return 0;
}

static int load_pre_step(coord_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const char *type = jstr(j, "type");

	if (!type)
		return LERR(SL_EINVAL, "pre_tokenizer: missing \"type\"");
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *arr = jget(j, "pretokenizers"), *it;
		if (!cJSON_IsArray(arr))
			return LERR(SL_EINVAL, "pre_tokenizer Sequence: missing \"pretokenizers\"");
		cJSON_ArrayForEach(it, arr)
			TRY(load_pre_step(t, it, err, errlen));
		return 0;
	}
	if (strcmp(type, "Metaspace") == 0)
		return load_metaspace(t, j, err, errlen);
	if (strcmp(type, "Split") == 0) {
		const char *re = jstr(jget(j, "pattern"), "Regex"), *beh = jstr(j, "behavior");
		if (!re || strcmp(re, LLAMA3_PATTERN) != 0)
			return LERR(SL_ENOTSUP, "pre_tokenizer Split: only the Llama 3 "
				    "regex is supported, got \"%.80s\"", re ? re : "(no Regex)");
		if (!beh || strcmp(beh, "Isolated") != 0 || jbool(j, "invert", 0))
			return LERR(SL_ENOTSUP, "pre_tokenizer Split: only behavior "
				    "Isolated without invert is supported");
		if (t->meta || t->l3_split || t->byte_level)
			return LERR(SL_ENOTSUP, "pre_tokenizer: Split must come first");
		t->l3_split = 1;
		return 0;
	}
	if (strcmp(type, "ByteLevel") == 0) {
		if (jbool(j, "add_prefix_space", 1) || jbool(j, "use_regex", 1))
			return LERR(SL_ENOTSUP, "pre_tokenizer ByteLevel: only "
				    "add_prefix_space=false, use_regex=false is supported");
		if (t->meta || t->byte_level)
			return LERR(SL_ENOTSUP, "pre_tokenizer: unsupported ByteLevel combination");
		t->byte_level = 1;
		return 0;
	}
	return LERR(SL_ENOTSUP, "pre_tokenizer \"%s\" not supported "
		    "(Metaspace, Split, ByteLevel, Sequence are)", type);
}

/* ------------------------------------------------------------------ */
/* Loading: vocabulary, merges, added tokens                            */

/* Highest id in model.vocab and added_tokens, validating each. */
static int scan_ids(coord_tok *t, const cJSON *vocab, const cJSON *added,
		    char *err, size_t errlen)
{
	const cJSON *it;
	int32_t max = -1;

	cJSON_ArrayForEach(it, vocab) {
		int32_t id = jid(it);
		if (id < 0)
			return LERR(SL_EINVAL, "model.vocab[\"%.60s\"]: id must be an "
				    "integer in [0, %d)", it->string, MAX_TOKEN_ID);
		if (id > max)
			max = id;
	}
	cJSON_ArrayForEach(it, added) {
		int32_t id = jid(jget(it, "id"));
		if (id < 0 || !jstr(it, "content"))
			return LERR(SL_EINVAL, "added_tokens: entry without a valid "
				    "\"id\" and \"content\"");
		if (id > max)
			max = id;
	}
	if (max < 0)
		return LERR(SL_EINVAL, "model.vocab is empty");
	t->n_vocab = max + 1;
	t->tok = calloc((size_t)t->n_vocab, sizeof *t->tok);
	return t->tok ? 0 : SL_ENOMEM;
}

/*
 * Byte-level vocabularies spell bytes as characters (byte_to_char); the
 * encoder works on raw bytes, so each entry is also stored unmapped.  An
 * entry with a character outside the 256 is unreachable by encoding and
 * only kept for decoding.  Returns 1 for those.
 */
static int unmap_bytes(coord_tok *t, const int16_t *char_byte, const char *s,
		       uint32_t *off, uint32_t *len)
{
	size_t n = strlen(s), k = 0;
	char tmp[256], *out = n <= sizeof tmp ? tmp : malloc(n);
	int rc = 0;

	if (!out)
		return SL_ENOMEM;
	for (size_t i = 0; i < n && rc == 0;) {
		uint32_t cp;
		i += utf8_unit((const unsigned char *)s + i, n - i, &cp);
		if (cp >= BYTE_CHARS || char_byte[cp] < 0)
			rc = 1;
		else
			out[k++] = (char)char_byte[cp];
	}
	if (rc == 0) {
		*len = (uint32_t)k;
		rc = arena_put(t, out, k, off);
	}
	if (out != tmp)
		free(out);
	return rc;
}

static int load_vocab(coord_tok *t, const cJSON *vocab, char *err, size_t errlen)
{
	const cJSON *it;
	int16_t char_byte[BYTE_CHARS];
	size_t n = (size_t)cJSON_GetArraySize(vocab);

	build_char_bytes(char_byte);
	TRY(sm_init(&t->text_map, n));
	TRY(sm_init(&t->enc_map, n));
	cJSON_ArrayForEach(it, vocab) {
		int32_t id = jid(it);
		tok_entry *e = &t->tok[id];
		uint32_t len = (uint32_t)strlen(it->string), off, roff, rlen;
		if (!coord_utf8_valid(it->string, len))
			return LERR(SL_EINVAL, "model.vocab: token %d is not valid UTF-8", id);
		if (e->present)
			return LERR(SL_EINVAL, "model.vocab: id %d is used by \"%.60s\" and \"%.60s\"",
				    id, tk_str(t, e->text_off), it->string);
		TRY(arena_put(t, it->string, len, &off));
		e->present = 1;
		e->text_off = off;
		e->text_len = len;
		sm_put(&t->text_map, t->arena, off, len, id);
		if (!t->byte_level) {
			sm_put(&t->enc_map, t->arena, off, len, id);
			continue;
		}
		int rc = unmap_bytes(t, char_byte, it->string, &roff, &rlen);
		if (rc < 0)
			return rc;
		if (rc == 0)
			sm_put(&t->enc_map, t->arena, roff, rlen, id);
	}
	return 0;
}

/* One merge: "a b" (single space) or ["a", "b"]. */
static int merge_parts(const cJSON *m, const char **a, size_t *alen,
		       const char **b, size_t *blen)
{
	if (cJSON_IsString(m)) {
		const char *sp = strchr(m->valuestring, ' ');
		if (!sp || strchr(sp + 1, ' '))
			return -1;
		*a = m->valuestring;
		*alen = (size_t)(sp - m->valuestring);
		*b = sp + 1;
		*blen = strlen(sp + 1);
		return 0;
	}
	if (cJSON_GetArraySize(m) != 2 || !cJSON_IsString(cJSON_GetArrayItem(m, 0)) ||
	    !cJSON_IsString(cJSON_GetArrayItem(m, 1)))
		return -1;
	*a = cJSON_GetArrayItem(m, 0)->valuestring;
	*b = cJSON_GetArrayItem(m, 1)->valuestring;
	*alen = strlen(*a);
	*blen = strlen(*b);
	return 0;
}

static int load_merges(coord_tok *t, const cJSON *merges, char *err, size_t errlen)
{
	const cJSON *m;
	tk_buf cat = {0};
	int32_t rank = 0;
	int rc = 0;

	if (!cJSON_IsArray(merges))
		return LERR(SL_EINVAL, "model.merges missing or not an array");
	TRY(pm_init(&t->merges, (size_t)cJSON_GetArraySize(merges)));
	cJSON_ArrayForEach(m, merges) {
		const char *a, *b;
		size_t alen, blen;
		if (merge_parts(m, &a, &alen, &b, &blen)) {
			rc = LERR(SL_EINVAL, "model.merges[%d]: expected \"a b\" or [\"a\", \"b\"]", rank);
			break;
		}
		int32_t ia = sm_get(&t->text_map, t->arena, a, alen);
		int32_t ib = sm_get(&t->text_map, t->arena, b, blen);
		cat.len = 0;
		if ((rc = buf_put(&cat, a, alen)) || (rc = buf_put(&cat, b, blen)))
			break;
		int32_t ir = sm_get(&t->text_map, t->arena, cat.p, cat.len);
		if (ia < 0 || ib < 0 || ir < 0) {
			rc = LERR(SL_EINVAL, "model.merges[%d]: \"%.60s\" is not in the vocabulary",
				  rank, ia < 0 ? a : ib < 0 ? b : cat.p);
			break;
		}
		/* a repeated pair keeps its last rank, as HF's map does */
		pm_slot *s = pm_find(&t->merges, pair_key(ia, ib));
		*s = (pm_slot){pair_key(ia, ib), rank++, ir};
	}
	free(cat.p);
	return rc;
}

/* What we refuse before reading any vocabulary. */
static int check_model(coord_tok *t, const cJSON *model, char *err, size_t errlen)
{
	const char *type = jstr(model, "type");
	const cJSON *dropout = jget(model, "dropout");
	const char *pre = jstr(model, "continuing_subword_prefix");
	const char *suf = jstr(model, "end_of_word_suffix");

	if (!cJSON_IsObject(model))
		return LERR(SL_EINVAL, "missing \"model\"");
	if (type ? strcmp(type, "BPE") != 0 : !jget(model, "merges"))
		return LERR(SL_ENOTSUP, "model type \"%s\" not supported (only BPE)",
			    type ? type : "(none)");
	if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
		return LERR(SL_ENOTSUP, "model.dropout > 0 not supported");
	if ((pre && *pre) || (suf && *suf))
		return LERR(SL_ENOTSUP, "continuing_subword_prefix / end_of_word_suffix "
			    "not supported");
	if (!cJSON_IsObject(jget(model, "vocab")))
		return LERR(SL_EINVAL, "model.vocab missing or not an object");
	return 0;
}

static int load_model(coord_tok *t, const cJSON *model, char *err, size_t errlen)
{
	const cJSON *vocab = jget(model, "vocab");
	const char *unk = jstr(model, "unk_token");

	t->byte_fallback = jbool(model, "byte_fallback", 0);
	t->fuse_unk = jbool(model, "fuse_unk", 0);
	t->ignore_merges = jbool(model, "ignore_merges", 0);
	TRY(load_vocab(t, vocab, err, errlen));
	TRY(load_merges(t, jget(model, "merges"), err, errlen));
	t->unk_id = -1;
	if (unk && (t->unk_id = sm_get(&t->text_map, t->arena, unk, strlen(unk))) < 0)
		return LERR(SL_EINVAL, "model.unk_token \"%.60s\" is not in the vocabulary", unk);
	for (int b = 0; b < 256; b++) {
		char s[8];
		snprintf(s, sizeof s, "<0x%02X>", b);
		t->byte_id[b] = sm_get(&t->text_map, t->arena, s, 6);
		s[0] = (char)b;
		t->byte_sym[b] = t->byte_level ? sm_get(&t->enc_map, t->arena, s, 1) : -1;
	}
	return 0;
}

/* Longest first within a bucket: leftmost-longest matching takes the first
 * hit.  Ties cannot both match (same length, same start, different text). */
static int added_cmp(const void *pa, const void *pb)
{
	const added_tok *a = pa, *b = pb;
	if (a->len != b->len)
		return a->len > b->len ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

/* Buckets the matchable added tokens by first byte, longest first. */
static int index_added(coord_tok *t)
{
	added_tok *sorted = malloc((t->n_added + 1) * sizeof *sorted);
	uint32_t count[256] = {0};

	if (!sorted)
		return SL_ENOMEM;
	for (size_t i = 0; i < t->n_added; i++)
		count[(unsigned char)t->arena[t->added[i].off]]++;
	t->added_first[0] = 0;
	for (int b = 0; b < 256; b++)
		t->added_first[b + 1] = t->added_first[b] + count[b];
	memset(count, 0, sizeof count);
	for (size_t i = 0; i < t->n_added; i++) {
		unsigned b = (unsigned char)t->arena[t->added[i].off];
		sorted[t->added_first[b] + count[b]++] = t->added[i];
	}
	for (int b = 0; b < 256; b++)
		qsort(sorted + t->added_first[b], t->added_first[b + 1] - t->added_first[b],
		      sizeof *sorted, added_cmp);
	free(t->added);
	t->added = sorted;
	return 0;
}

/* An added token's id now decodes to its content -- normalized when the
 * token is, as id_to_token gives it in tokenizers 0.23 (0.22 gave the raw
 * content) -- since HF looks added tokens up first; special ones are what
 * decode(skip_special) leaves out. */
static void claim_added_id(coord_tok *t, const added_tok *a)
{
	tok_entry *e = &t->tok[a->id];
	e->present = 1;
	e->text_off = a->off;
	e->text_len = a->len;
	if (a->special) {
		e->special = 1;
		/* HF skips by content, so a model entry spelled the same goes too */
		int32_t mid = sm_get(&t->text_map, t->arena, tk_str(t, a->coff), a->clen);
		if (mid >= 0)
			t->tok[mid].special = 1;
	}
}

static int load_one_added(coord_tok *t, const cJSON *it, added_tok *a, tk_buf nb[2],
			  char *err, size_t errlen)
{
	const char *content = jstr(it, "content");
	size_t clen = strlen(content);

	a->id = jid(jget(it, "id"));
	a->special = (uint8_t)jbool(it, "special", 0);
	/* HF's AddedToken default: special tokens are not normalized */
	a->normalized = (uint8_t)jbool(it, "normalized", !a->special);
	if (jbool(it, "lstrip", 0) || jbool(it, "rstrip", 0) || jbool(it, "single_word", 0))
		return LERR(SL_ENOTSUP, "added token \"%.60s\": lstrip/rstrip/single_word "
			    "not supported", content);
	if (!coord_utf8_valid(content, clen))
		return LERR(SL_EINVAL, "added token %d is not valid UTF-8", a->id);
	TRY(arena_put(t, content, clen, &a->coff));
	a->clen = (uint32_t)clen;
	a->off = a->coff;
	a->len = a->clen;
	if (a->normalized && t->n_norm) {
		/* HF matches these in normalized text, so normalize the pattern */
		const char *r;
		size_t rn;
		TRY(normalize(t, content, clen, nb, &r, &rn));
		TRY(arena_put(t, r, rn, &a->off));
		a->len = (uint32_t)rn;
	}
	return 0;
}

static int load_added(coord_tok *t, const cJSON *arr, char *err, size_t errlen)
{
	const cJSON *it;
	tk_buf nb[2] = {{0}, {0}};
	int rc = 0;

	if (jabsent(arr))
		return 0;
	t->added = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *t->added);
	if (!t->added)
		return SL_ENOMEM;
	cJSON_ArrayForEach(it, arr) {
		added_tok *a = &t->added[t->n_added];
		if ((rc = load_one_added(t, it, a, nb, err, errlen)))
			break;
		claim_added_id(t, a);
		if (a->len == 0) /* nothing to match */
			continue;
		t->n_added_norm += a->normalized;
		t->n_added++;
	}
	free(nb[0].p);
	free(nb[1].p);
	return rc ? rc : index_added(t);
}

/* ------------------------------------------------------------------ */
/* Loading: post-processor and decoder                                  */

static int load_template(coord_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const cJSON *single = jget(j, "single"), *specials = jget(j, "special_tokens"), *p;
	int after = 0;

	if (!cJSON_IsArray(single))
		return LERR(SL_EINVAL, "post_processor TemplateProcessing: missing \"single\"");
	cJSON_ArrayForEach(p, single) {
		const cJSON *sq = jget(p, "Sequence"), *st = jget(p, "SpecialToken"), *id;
		if (sq) {
			const char *which = jstr(sq, "id");
			if (!which || strcmp(which, "A") != 0 || after)
				return LERR(SL_EINVAL, "post_processor: \"single\" must hold sequence A once");
			after = 1;
			continue;
		}
		const char *name = jstr(st, "id");
		const cJSON *ids = jget(jget(specials, name ? name : ""), "ids");
		if (!name || !cJSON_IsArray(ids))
			return LERR(SL_EINVAL, "post_processor: special token \"%.60s\" has "
				    "no entry in special_tokens", name ? name : "?");
		cJSON_ArrayForEach(id, ids) {
			int32_t v = jid(id);
			if (v < 0 || v >= t->n_vocab)
				return LERR(SL_EINVAL, "post_processor: id of \"%.60s\" is out "
					    "of range", name);
			TRY(ids_push(after ? &t->suffix : &t->prefix, v));
		}
	}
	return 0;
}

static int load_post_step(coord_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const char *type = jstr(j, "type");

	if (!type)
		return LERR(SL_EINVAL, "post_processor: missing \"type\"");
	if (strcmp(type, "ByteLevel") == 0) /* offsets only; ids unchanged */
		return 0;
	if (strcmp(type, "TemplateProcessing") == 0)
		return load_template(t, j, err, errlen);
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *it, *arr = jget(j, "processors");
		if (!cJSON_IsArray(arr))
			return LERR(SL_EINVAL, "post_processor Sequence: missing \"processors\"");
		cJSON_ArrayForEach(it, arr)
			TRY(load_post_step(t, it, err, errlen));
		return 0;
	}
	return LERR(SL_ENOTSUP, "post_processor \"%s\" not supported "
		    "(TemplateProcessing, ByteLevel, Sequence are)", type);
}

/*
 * The decoder chains we run as a stream, in this order: per-token rewrites
 * (Replace steps, or one Metaspace), ByteFallback, Fuse, Strip (leading
 * only, after Fuse so it acts once on the whole text).  Replace steps are
 * applied to every vocabulary entry at load (dec_off), so decoding is a
 * table lookup.
 */
enum { PHASE_TOKEN, PHASE_BYTES, PHASE_FUSE, PHASE_STRIP };
#define MAX_DEC_REPLACE 8
typedef struct {
	const char *pat, *to;
} dec_replace;

static int load_dec_step(coord_tok *t, const cJSON *j, dec_replace *rep, size_t *nrep,
			 int *phase, char *err, size_t errlen)
{
	const char *type = jstr(j, "type");

	if (!type)
		return LERR(SL_EINVAL, "decoder: missing \"type\"");
	if (strcmp(type, "Replace") == 0 && *phase == PHASE_TOKEN && !t->dec_meta_rep_len) {
		const char *pat = jstr(jget(j, "pattern"), "String"), *to = jstr(j, "content");
		if (!pat || !*pat || !to || *nrep == MAX_DEC_REPLACE)
			return LERR(SL_ENOTSUP, "decoder Replace: only non-empty String patterns");
		rep[(*nrep)++] = (dec_replace){pat, to};
	} else if (strcmp(type, "Metaspace") == 0 && *phase == PHASE_TOKEN && *nrep == 0) {
		const char *r = jstr(j, "replacement"), *scheme = jstr(j, "prepend_scheme");
		if (!r || one_char(r, t->dec_meta_rep, &t->dec_meta_rep_len))
			return LERR(SL_EINVAL, "decoder Metaspace: bad \"replacement\"");
		t->dec_meta_first = scheme ? strcmp(scheme, "never") != 0
					   : jbool(j, "add_prefix_space", 1);
		rep[(*nrep)++] = (dec_replace){t->dec_meta_rep, " "};
	} else if (strcmp(type, "ByteFallback") == 0 && *phase < PHASE_BYTES) {
		*phase = PHASE_BYTES;
		t->dec_byte_fallback = 1;
	} else if (strcmp(type, "Fuse") == 0 && *phase < PHASE_FUSE) {
		*phase = PHASE_FUSE;
	} else if (strcmp(type, "Strip") == 0 && *phase == PHASE_FUSE) {
		const char *c = jstr(j, "content");
		int32_t start = jid(jget(j, "start")), stop = jid(jget(j, "stop"));
		if (!c || one_char(c, t->dec_strip_char, &t->dec_strip_char_len) ||
		    start < 0 || stop != 0)
			return LERR(SL_ENOTSUP, "decoder Strip: only one character, "
				    "start >= 0, stop = 0 supported");
		t->dec_strip = start;
		*phase = PHASE_STRIP;
	} else {
		return LERR(SL_ENOTSUP, "decoder \"%s\" not supported here (supported: "
			    "ByteLevel alone, or [Replace... | Metaspace], ByteFallback, "
			    "Fuse, Strip in that order)", type);
	}
	return 0;
}

/* Fills dec_off/dec_len and byte_val of every present id. */
static int compute_dec(coord_tok *t, const dec_replace *rep, size_t nrep)
{
	int16_t char_byte[BYTE_CHARS];
	tk_buf bufs[2] = {{0}, {0}};
	int rc = 0;

	build_char_bytes(char_byte);
	for (int32_t id = 0; id < t->n_vocab && rc == 0; id++) {
		tok_entry *e = &t->tok[id];
		const char *cur = tk_str(t, e->text_off);
		size_t cn = e->text_len;
		e->byte_val = -1;
		e->dec_off = e->text_off;
		e->dec_len = e->text_len;
		if (!e->present)
			continue;
		if (t->dec_kind == DEC_BYTELEVEL) {
			rc = unmap_bytes(t, char_byte, cur, &e->dec_off, &e->dec_len);
			rc = rc > 0 ? 0 : rc; /* unmappable: raw text, as HF does */
			continue;
		}
		for (size_t k = 0; k < nrep && rc == 0; k++) {
			rc = replace_all(cur, cn, rep[k].pat, strlen(rep[k].pat), rep[k].to,
					 strlen(rep[k].to), &bufs[k & 1]);
			cur = bufs[k & 1].p;
			cn = bufs[k & 1].len;
		}
		if (rc == 0 && nrep)
			rc = arena_put(t, cur, cn, &e->dec_off);
		e->dec_len = (uint32_t)cn;
		if (t->dec_byte_fallback)
			e->byte_val = parse_byte_token(tk_str(t, e->dec_off), e->dec_len);
	}
	free(bufs[0].p);
	free(bufs[1].p);
	return rc;
}

static int load_decoder(coord_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const char *type = jstr(j, "type");
	dec_replace rep[MAX_DEC_REPLACE];
	size_t nrep = 0;
	int phase = PHASE_TOKEN;

	if (jabsent(j)) {
		t->dec_kind = DEC_JOIN; /* HF joins the tokens with spaces */
	} else if (type && strcmp(type, "ByteLevel") == 0) {
		t->dec_kind = DEC_BYTELEVEL;
	} else if (type && strcmp(type, "Sequence") == 0) {
		const cJSON *it, *arr = jget(j, "decoders");
		if (!cJSON_IsArray(arr))
			return LERR(SL_EINVAL, "decoder Sequence: missing \"decoders\"");
		t->dec_kind = DEC_PIPE;
		const char *only = jstr(cJSON_GetArrayItem(arr, 0), "type");
		if (cJSON_GetArraySize(arr) == 1 && only && strcmp(only, "ByteLevel") == 0)
			t->dec_kind = DEC_BYTELEVEL;
		else
			cJSON_ArrayForEach(it, arr)
				TRY(load_dec_step(t, it, rep, &nrep, &phase, err, errlen));
	} else {
		t->dec_kind = DEC_PIPE;
		TRY(load_dec_step(t, j, rep, &nrep, &phase, err, errlen));
	}
	return compute_dec(t, rep, nrep);
}

/* ------------------------------------------------------------------ */
/* Loading: entry points                                               */

static int32_t first_token(const coord_tok *t, const char *const *names)
{
	for (; *names; names++) {
		int32_t id = coord_tok_token_to_id(t, *names);
		if (id >= 0)
			return id;
	}
	return -1;
}

static int load_root(coord_tok *t, const cJSON *root, char *err, size_t errlen)
{
	static const char *const bos[] = {"<s>", "<|begin_of_text|>", "<bos>", NULL};
	static const char *const eos[] = {"</s>", "<|end_of_text|>", "<|endoftext|>",
					  "<eos>", NULL};
	const cJSON *model = jget(root, "model"), *added = jget(root, "added_tokens");
	const cJSON *pre = jget(root, "pre_tokenizer"), *norm = jget(root, "normalizer");

	if (!cJSON_IsObject(root))
		return LERR(SL_EINVAL, "top level is not a JSON object");
	TRY(check_model(t, model, err, errlen));
	if (!jabsent(added) && !cJSON_IsArray(added))
		return LERR(SL_EINVAL, "\"added_tokens\" is not an array");
	if (!jabsent(pre))
		TRY(load_pre_step(t, pre, err, errlen));
	if (!jabsent(norm))
		TRY(load_norm_step(t, norm, err, errlen));
	TRY(scan_ids(t, jget(model, "vocab"), jabsent(added) ? NULL : added, err, errlen));
	TRY(load_model(t, model, err, errlen));
	TRY(load_added(t, added, err, errlen));
	if (!jabsent(jget(root, "post_processor")))
		TRY(load_post_step(t, jget(root, "post_processor"), err, errlen));
	TRY(load_decoder(t, jget(root, "decoder"), err, errlen));
	t->bos_id = t->prefix.len ? t->prefix.p[0] : first_token(t, bos);
	t->eos_id = first_token(t, eos);
	return 0;
}

int coord_tok_load_buffer(const char *json, size_t len, const char *name,
			  coord_tok **out, char *err, size_t errlen)
{
	const char *end = NULL;
	coord_tok *t;
	int rc;

	if (!out || !json)
		return sl_errf(err, errlen, SL_EINVAL, "coord_tok_load: NULL argument");
	*out = NULL;
	t = calloc(1, sizeof *t);
	if (!t || !(t->name = strdup(name ? name : "tokenizer.json"))) {
		free(t);
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", name);
	}
	cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
	if (!root) {
		size_t at = end && end >= json ? (size_t)(end - json) : 0;
		const char *ep = cJSON_GetErrorPtr();
		if (ep && ep >= json && ep <= json + len)
			at = (size_t)(ep - json);
		rc = LERR(SL_EINVAL, "not valid JSON (error near byte %zu)", at);
	} else {
		rc = load_root(t, root, err, errlen);
		if (rc == SL_ENOMEM)
			LERR(rc, "out of memory while loading");
		cJSON_Delete(root);
	}
	if (rc) {
		coord_tok_destroy(t);
		return rc;
	}
	*out = t;
	return 0;
}

int coord_tok_load(const char *path, coord_tok **out, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	int rc;

	if (!path || !out)
		return sl_errf(err, errlen, SL_EINVAL, "coord_tok_load: NULL argument");
	*out = NULL;
	if ((rc = sl_read_file(path, &buf, &len, err, errlen)))
		return rc;
	rc = coord_tok_load_buffer(buf, len, path, out, err, errlen);
	free(buf);
	return rc;
}

void coord_tok_destroy(coord_tok *t)
{
	if (!t)
		return;
	free(t->name);
	free(t->arena);
	free(t->tok);
	free(t->text_map.slots);
	free(t->enc_map.slots);
	free(t->merges.slots);
	free(t->added);
	free(t->norm);
	free(t->prefix.p);
	free(t->suffix.p);
	free(t);
}

/* ------------------------------------------------------------------ */
/* Encoding: BPE over one word                                          */

typedef struct {
	int32_t id;         /* -1 once merged into its left neighbour */
	int32_t prev, next; /* -1 at the ends */
} bpe_sym;

typedef struct {
	int32_t rank, pos, new_id;
} bpe_merge;

/* Per-call scratch: encode allocates its own, so a const coord_tok can be
 * shared by threads. */
typedef struct {
	const coord_tok *t;
	int flags;
	tk_ids out;
	tk_buf norm[2], meta;
	bpe_sym *sym;
	size_t n_sym, sym_cap;
	bpe_merge *heap;
	size_t n_heap, heap_cap;
	uint32_t *ucp, *uoff; /* Llama 3 split: per character code point, offset */
	uint8_t *ucls;
	size_t u_cap;
	int unk_pending;
} enc_ctx;

static int merge_before(const bpe_merge *a, const bpe_merge *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(enc_ctx *c, bpe_merge m)
{
	if (grow((void **)&c->heap, &c->heap_cap, c->n_heap + 1, sizeof *c->heap))
		return SL_ENOMEM;
	size_t i = c->n_heap++;
	while (i > 0 && merge_before(&m, &c->heap[(i - 1) / 2])) {
		c->heap[i] = c->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	c->heap[i] = m;
	return 0;
}

static bpe_merge heap_pop(enc_ctx *c)
{
	bpe_merge top = c->heap[0], last = c->heap[--c->n_heap];
	size_t i = 0, n = c->n_heap;
	for (;;) {
		size_t k = 2 * i + 1;
		if (k >= n)
			break;
		if (k + 1 < n && merge_before(&c->heap[k + 1], &c->heap[k]))
			k++;
		if (!merge_before(&c->heap[k], &last))
			break;
		c->heap[i] = c->heap[k];
		i = k;
	}
	if (n)
		c->heap[i] = last;
	return top;
}

static int sym_push(enc_ctx *c, int32_t id)
{
	if (grow((void **)&c->sym, &c->sym_cap, c->n_sym + 1, sizeof *c->sym))
		return SL_ENOMEM;
	int32_t i = (int32_t)c->n_sym++;
	c->sym[i] = (bpe_sym){id, i - 1, -1};
	if (i > 0)
		c->sym[i - 1].next = i;
	return 0;
}

/* Queues the merge of symbol pos with its right neighbour, if one exists. */
static int queue_pair(enc_ctx *c, int32_t pos)
{
	if (pos < 0 || c->sym[pos].next < 0)
		return 0;
	int32_t nx = c->sym[pos].next;
	const pm_slot *m = pm_get(&c->t->merges, c->sym[pos].id, c->sym[nx].id);
	return m ? heap_push(c, (bpe_merge){m->rank, pos, m->result}) : 0;
}

static int flush_unk(enc_ctx *c)
{
	if (!c->unk_pending)
		return 0;
	c->unk_pending = 0;
	return sym_push(c, c->t->unk_id);
}

/*
 * A character that is not in the vocabulary, as HF's BPE handles it: its
 * UTF-8 bytes as <0xNN> tokens when byte_fallback has them all, else the
 * unk token (consecutive ones fused when fuse_unk), else nothing.  HF does
 * not flush a pending unk before byte-fallback tokens; neither do we.
 */
static int missing_char(enc_ctx *c, const unsigned char *ch, size_t n)
{
	const coord_tok *t = c->t;
	if (t->byte_fallback) {
		size_t k = 0;
		while (k < n && t->byte_id[ch[k]] >= 0)
			k++;
		if (k == n) {
			for (k = 0; k < n; k++)
				TRY(sym_push(c, t->byte_id[ch[k]]));
			return 0;
		}
	}
	if (t->unk_id < 0)
		return 0;
	if (c->unk_pending && !t->fuse_unk)
		TRY(sym_push(c, t->unk_id));
	c->unk_pending = 1;
	return 0;
}

/* Splits w into initial symbols: characters, or bytes for byte-level. */
static int bpe_symbols(enc_ctx *c, const unsigned char *w, size_t n)
{
	const coord_tok *t = c->t;
	c->n_sym = 0;
	c->unk_pending = 0;
	for (size_t i = 0; i < n;) {
		size_t len = 1;
		int32_t id;
		uint32_t cp;
		if (t->byte_level) {
			id = t->byte_sym[w[i]];
		} else {
			len = utf8_unit(w + i, n - i, &cp);
			id = sm_get(&t->enc_map, t->arena, (const char *)w + i, len);
		}
		if (id >= 0) {
			TRY(flush_unk(c));
			TRY(sym_push(c, id));
		} else if (t->byte_level) {
			char mapped[4]; /* HF would look at the mapped character */
			size_t ml = utf8_put(mapped, byte_to_char(w[i]));
			TRY(missing_char(c, (const unsigned char *)mapped, ml));
		} else {
			TRY(missing_char(c, w + i, len));
		}
		i += len;
	}
	return flush_unk(c);
}

/*
 * Byte-pair encoding of one word: repeatedly merge the adjacent pair with
 * the lowest merge rank (leftmost on ties).  Queue entries are not removed
 * when a neighbour changes; a popped entry is applied only if its pair
 * still produces the same token -- HF's exact rule.
 */
static int bpe_word(enc_ctx *c, const char *w, size_t n)
{
	const coord_tok *t = c->t;

	if (n == 0)
		return 0;
	if (t->ignore_merges) { /* Llama 3: whole words in the vocab win */
		int32_t id = sm_get(&t->enc_map, t->arena, w, n);
		if (id >= 0)
			return ids_push(&c->out, id);
	}
	TRY(bpe_symbols(c, (const unsigned char *)w, n));
	c->n_heap = 0;
	for (int32_t i = 0; i + 1 < (int32_t)c->n_sym; i++)
		TRY(queue_pair(c, i));
	while (c->n_heap) {
		bpe_merge m = heap_pop(c);
		bpe_sym *l = &c->sym[m.pos];
		if (l->id < 0 || l->next < 0)
			continue;
		bpe_sym *r = &c->sym[l->next];
		const pm_slot *now = pm_get(&t->merges, l->id, r->id);
		if (!now || now->result != m.new_id)
			continue;
		l->id = m.new_id;
		r->id = -1;
		l->next = r->next;
		if (l->next >= 0)
			c->sym[l->next].prev = m.pos;
		TRY(queue_pair(c, l->prev));
		TRY(queue_pair(c, m.pos));
	}
	for (int32_t i = c->n_sym ? 0 : -1; i >= 0; i = c->sym[i].next)
		TRY(ids_push(&c->out, c->sym[i].id));
	return 0;
}

/* ------------------------------------------------------------------ */
/* Encoding: pre-tokenizers                                             */

/* Lowercase for the (?i) contractions; U+017F LONG S folds to 's' under
 * Unicode case folding and the regex engine honours that. */
static uint32_t fold(uint32_t cp)
{
	if (cp >= 'A' && cp <= 'Z')
		return cp + 32;
	return cp == 0x17F ? 's' : cp;
}

/* Length in characters of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or 0. */
static size_t l3_contraction(const uint32_t *cp, size_t n, size_t i)
{
	if (cp[i] != '\'' || i + 1 >= n)
		return 0;
	uint32_t a = fold(cp[i + 1]), b = i + 2 < n ? fold(cp[i + 2]) : 0;
	if (a == 's' || a == 't' || a == 'm' || a == 'd')
		return 2;
	if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l'))
		return 3;
	return 0;
}

static size_t run_of(const uint8_t *cls, size_t n, size_t i, int want)
{
	while (i < n && cls[i] == want)
		i++;
	return i;
}

/*
 * End (exclusive, in characters) of the Llama 3 regex match starting at i:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3} |
 *    ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * Alternatives are tried in order (leftmost-first, as Oniguruma does) and
 * every character starts some match, so the split is a plain scan.  The
 * backtracking cases, worked out once:
 *   \s*[\r\n]+   the whitespace run up to and including its last CR/LF
 *   \s+(?!\S)    the whole run at the end of text, else the run minus its
 *                last character (which then prefixes the next word), or
 *                -- for a one-character run -- \s+ takes it alone.
 */
static size_t l3_match(const uint32_t *cp, const uint8_t *cls, size_t n, size_t i)
{
	size_t j = l3_contraction(cp, n, i);
	int c = cls[i];

	if (j)
		return i + j;
	if (c == COORD_UNI_LETTER)
		return run_of(cls, n, i, COORD_UNI_LETTER);
	if (c != COORD_UNI_CRLF && c != COORD_UNI_NUMBER && i + 1 < n &&
	    cls[i + 1] == COORD_UNI_LETTER)
		return run_of(cls, n, i + 1, COORD_UNI_LETTER);
	if (c == COORD_UNI_NUMBER) {
		for (j = i; j < n && j - i < 3 && cls[j] == COORD_UNI_NUMBER; j++)
			;
		return j;
	}
	j = cp[i] == ' ' && i + 1 < n && cls[i + 1] == COORD_UNI_OTHER ? i + 1 : i;
	if (cls[j] == COORD_UNI_OTHER)
		return run_of(cls, n, run_of(cls, n, j, COORD_UNI_OTHER), COORD_UNI_CRLF);
	size_t last_crlf = 0;
	for (j = i; j < n && (cls[j] == COORD_UNI_SPACE || cls[j] == COORD_UNI_CRLF); j++)
		if (cls[j] == COORD_UNI_CRLF)
			last_crlf = j + 1;
	if (last_crlf)
		return last_crlf;
	return j == n || j - i == 1 ? j : j - 1;
}

static int l3_class(uint32_t cp)
{
	if (cp == UNIT_BAD || cp == UNIT_TRUNC) /* invalid bytes: "other" */
		return COORD_UNI_OTHER;
	return coord_uni_class(cp);
}

/* Room for n characters in the per-character arrays of l3_split. */
static int ensure_units(enc_ctx *c, size_t n)
{
	if (n <= c->u_cap)
		return 0;
	uint32_t *cp = realloc(c->ucp, n * sizeof *cp);
	if (cp)
		c->ucp = cp;
	uint32_t *off = realloc(c->uoff, n * sizeof *off);
	if (off)
		c->uoff = off;
	uint8_t *cls = realloc(c->ucls, n);
	if (cls)
		c->ucls = cls;
	if (!cp || !off || !cls)
		return SL_ENOMEM;
	c->u_cap = n;
	return 0;
}

/* Llama 3 regex split of s into words, each BPE-encoded. */
static int l3_split(enc_ctx *c, const char *s, size_t n)
{
	size_t nu = 0;

	TRY(ensure_units(c, n + 1));
	for (size_t i = 0; i < n; nu++) {
		c->uoff[nu] = (uint32_t)i;
		i += utf8_unit((const unsigned char *)s + i, n - i, &c->ucp[nu]);
		c->ucls[nu] = (uint8_t)l3_class(c->ucp[nu]);
	}
	c->uoff[nu] = (uint32_t)n;
	for (size_t i = 0; i < nu;) {
		size_t j = l3_match(c->ucp, c->ucls, nu, i);
		TRY(bpe_word(c, s + c->uoff[i], c->uoff[j] - c->uoff[i]));
		i = j;
	}
	return 0;
}

static int starts_with(const char *s, size_t n, const char *p, size_t pn)
{
	return n >= pn && memcmp(s, p, pn) == 0;
}

/*
 * Metaspace: spaces become the replacement character (U+2581), which is
 * prepended when the scheme asks (first: only to text that starts the
 * input), then with split=true each replacement character starts a word.
 */
static int metaspace(enc_ctx *c, const char *s, size_t n, int at_origin)
{
	const coord_tok *t = c->t;
	const char *rep = t->meta_rep;
	size_t rl = t->meta_rep_len, start = 0;
	tk_buf *m = &c->meta;

	TRY(replace_all(s, n, " ", 1, rep, rl, m));
	if ((t->meta_prepend == PREPEND_ALWAYS || (t->meta_prepend == PREPEND_FIRST && at_origin)) &&
	    !starts_with(m->p, m->len, rep, rl)) {
		TRY(buf_put(m, rep, rl)); /* make room, then shift */
		memmove(m->p + rl, m->p, m->len - rl);
		memcpy(m->p, rep, rl);
	}
	if (!t->meta_split)
		return bpe_word(c, m->p, m->len);
	for (size_t i = 1; i < m->len; i++) {
		if (starts_with(m->p + i, m->len - i, rep, rl)) {
			TRY(bpe_word(c, m->p + start, i - start));
			start = i;
		}
	}
	return bpe_word(c, m->p + start, m->len - start);
}

/* Pre-tokenizes normalized text and encodes the words. */
static int pretok(enc_ctx *c, const char *s, size_t n, int at_origin)
{
	if (n == 0)
		return 0;
	if (c->t->meta)
		return metaspace(c, s, n, at_origin);
	if (c->t->l3_split)
		return l3_split(c, s, n);
	return bpe_word(c, s, n);
}

/* ------------------------------------------------------------------ */
/* Encoding: added tokens and the whole pipeline                        */

/* The longest added token of the given kind matching at s, or NULL. */
static const added_tok *added_at(const coord_tok *t, const char *s, size_t n,
				 int normalized)
{
	unsigned b = (unsigned char)s[0];
	for (uint32_t k = t->added_first[b]; k < t->added_first[b + 1]; k++) {
		const added_tok *a = &t->added[k];
		if (a->normalized == normalized && a->len <= n &&
		    memcmp(t->arena + a->off, s, a->len) == 0)
			return a;
	}
	return NULL;
}

typedef int (*gap_fn)(enc_ctx *c, const char *s, size_t n, int at_origin);

/*
 * Splits s around added tokens (leftmost-longest, non-overlapping, as HF's
 * Aho-Corasick does), pushing their ids and handing the text between them
 * to gap().  With COORD_TOK_SPLIT_SPECIAL a special token's span stays
 * text -- HF also does not look for other tokens inside it.
 */
static int split_added(enc_ctx *c, const char *s, size_t n, int normalized,
		       int at_origin, gap_fn gap)
{
	size_t i = 0, start = 0;

	while (i < n) {
		const added_tok *a = c->t->n_added ? added_at(c->t, s + i, n - i, normalized) : NULL;
		if (!a) {
			i++;
			continue;
		}
		if (a->special && (c->flags & COORD_TOK_SPLIT_SPECIAL)) {
			i += a->len;
			continue;
		}
		if (i > start)
			TRY(gap(c, s + start, i - start, at_origin && start == 0));
		TRY(ids_push(&c->out, a->id));
		i += a->len;
		start = i;
	}
	return start < n ? gap(c, s + start, n - start, at_origin && start == 0) : 0;
}

/* Text between raw-matched added tokens: normalize, then look for the
 * normalized added tokens, then pre-tokenize. */
static int encode_gap(enc_ctx *c, const char *s, size_t n, int at_origin)
{
	const char *ns;
	size_t nn;

	TRY(normalize(c->t, s, n, c->norm, &ns, &nn));
	if (c->t->n_added_norm)
		return split_added(c, ns, nn, 1, at_origin, pretok);
	return pretok(c, ns, nn, at_origin);
}

static void enc_free(enc_ctx *c)
{
	free(c->norm[0].p);
	free(c->norm[1].p);
	free(c->meta.p);
	free(c->sym);
	free(c->heap);
	free(c->ucp);
	free(c->uoff);
	free(c->ucls);
}

int coord_tok_encode(const coord_tok *t, const char *text, size_t len, int flags,
		     int32_t **ids, size_t *n, char *err, size_t errlen)
{
	enc_ctx c = {.t = t, .flags = flags};
	int rc = 0;

	if (!t || !ids || !n || (!text && len))
		return sl_errf(err, errlen, SL_EINVAL, "coord_tok_encode: NULL argument");
	*ids = NULL;
	*n = 0;
	if (len > UINT32_MAX / 2)
		return sl_errf(err, errlen, SL_EINVAL, "coord_tok_encode: text of %zu bytes "
			       "is too long", len);
	if (flags & COORD_TOK_ADD_SPECIAL)
		for (size_t i = 0; i < t->prefix.len && !rc; i++)
			rc = ids_push(&c.out, t->prefix.p[i]);
	if (!rc && len)
		rc = split_added(&c, text, len, 0, 1, encode_gap);
	if (flags & COORD_TOK_ADD_SPECIAL)
		for (size_t i = 0; i < t->suffix.len && !rc; i++)
			rc = ids_push(&c.out, t->suffix.p[i]);
	enc_free(&c);
	if (rc) {
		free(c.out.p);
		return sl_errf(err, errlen, rc, "%s: out of memory encoding %zu bytes",
			       t->name, len);
	}
	*ids = c.out.p;
	*n = c.out.len;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Decoding: the decoder chain as a stream                              */

struct coord_detok {
	const coord_tok *t;
	int skip_special;
	int exact;         /* one-shot decode: judge byte-fallback runs whole */
	size_t n_fed;      /* tokens given to the decoder so far */
	size_t strip_left; /* leading strip characters still to remove */
	unsigned char pend[4]; /* bytes of an unfinished UTF-8 character */
	size_t n_pend;
	tk_buf run;        /* exact mode: the current byte-fallback run */
	tk_buf out;        /* text produced by this call */
	int oom;
};

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* Appends text, first removing the decoder's leading Strip characters. */
static void emit(coord_detok *d, const char *s, size_t n)
{
	const coord_tok *t = d->t;
	size_t cl = t->dec_strip_char_len;

	while (d->strip_left && n && starts_with(s, n, t->dec_strip_char, cl)) {
		s += cl;
		n -= cl;
		d->strip_left--;
	}
	if (n == 0)
		return;
	d->strip_left = 0;
	if (buf_put(&d->out, s, n))
		d->oom = 1;
}

static void emit_replacements(coord_detok *d, size_t count)
{
	while (count--)
		emit(d, REPLACEMENT, 3);
}

/*
 * Incremental UTF-8: complete characters go out at once, an unfinished one
 * waits in pend.  Bytes that can no longer form a character become U+FFFD:
 * one per maximal subpart (Rust's from_utf8_lossy, which HF's ByteLevel
 * decoder uses), or one per byte (per_byte: ByteFallback's rule).
 */
static void utf8_feed(coord_detok *d, unsigned char b, int per_byte)
{
	d->pend[d->n_pend++] = b;
	while (d->n_pend) {
		uint32_t cp;
		size_t len = utf8_unit(d->pend, d->n_pend, &cp);
		if (cp == UNIT_TRUNC)
			return;
		if (cp == UNIT_BAD)
			emit_replacements(d, per_byte ? len : 1);
		else
			emit(d, (const char *)d->pend, len);
		memmove(d->pend, d->pend + len, d->n_pend - len);
		d->n_pend -= len;
	}
}

static void utf8_flush(coord_detok *d, int per_byte)
{
	if (d->n_pend)
		emit_replacements(d, per_byte ? d->n_pend : 1);
	d->n_pend = 0;
}

/* End of a byte-fallback run.  HF keeps a run only if it is valid UTF-8 as
 * a whole and otherwise writes one U+FFFD per byte; the stream has already
 * sent the good characters, so it only settles the unfinished tail. */
static void run_end(coord_detok *d)
{
	if (!d->exact) {
		utf8_flush(d, 1);
		return;
	}
	if (d->run.len == 0)
		return;
	if (coord_utf8_valid(d->run.p, d->run.len))
		emit(d, d->run.p, d->run.len);
	else
		emit_replacements(d, d->run.len);
	d->run.len = 0;
}

/* Metaspace decoder: the first token loses its replacement characters
 * instead of turning them into spaces. */
static void emit_meta_first(coord_detok *d, const tok_entry *e)
{
	const coord_tok *t = d->t;
	tk_buf tmp = {0};
	if (replace_all(tk_str(t, e->text_off), e->text_len, t->dec_meta_rep,
			t->dec_meta_rep_len, "", 0, &tmp))
		d->oom = 1;
	else
		emit(d, tmp.p, tmp.len);
	free(tmp.p);
}

static void feed_pipe(coord_detok *d, const tok_entry *e)
{
	const coord_tok *t = d->t;

	if (e->byte_val >= 0) {
		if (d->exact) {
			char b = (char)e->byte_val;
			if (buf_put(&d->run, &b, 1))
				d->oom = 1;
		} else {
			utf8_feed(d, (unsigned char)e->byte_val, 1);
		}
		return;
	}
	run_end(d);
	if (t->dec_meta_first && d->n_fed == 0)
		emit_meta_first(d, e);
	else
		emit(d, tk_str(t, e->dec_off), e->dec_len);
}

/* One id through the decoder, appending to d->out. */
static void feed(coord_detok *d, int32_t id)
{
	const coord_tok *t = d->t;

	if (id < 0 || id >= t->n_vocab || !t->tok[id].present)
		return; /* HF skips ids it has no token for */
	const tok_entry *e = &t->tok[id];
	if (d->skip_special && e->special)
		return;
	switch (t->dec_kind) {
	case DEC_BYTELEVEL:
		for (uint32_t i = 0; i < e->dec_len; i++)
			utf8_feed(d, (unsigned char)t->arena[e->dec_off + i], 0);
		break;
	case DEC_JOIN:
		if (d->n_fed)
			emit(d, " ", 1);
		emit(d, tk_str(t, e->dec_off), e->dec_len);
		break;
	default:
		feed_pipe(d, e);
	}
	d->n_fed++;
}

static void feed_end(coord_detok *d)
{
	if (d->t->dec_kind == DEC_PIPE)
		run_end(d);
	utf8_flush(d, d->t->dec_kind == DEC_PIPE);
}

static void detok_init(coord_detok *d, const coord_tok *t, int skip_special, int exact)
{
	memset(d, 0, sizeof *d);
	d->t = t;
	d->skip_special = skip_special;
	d->exact = exact;
	d->strip_left = t->dec_kind == DEC_PIPE ? (size_t)t->dec_strip : 0;
}

int coord_detok_create(const coord_tok *t, int skip_special, coord_detok **out,
		       char *err, size_t errlen)
{
	if (!t || !out)
		return sl_errf(err, errlen, SL_EINVAL, "coord_detok_create: NULL argument");
	*out = malloc(sizeof **out);
	if (!*out)
		return sl_errf(err, errlen, SL_ENOMEM, "coord_detok_create: out of memory");
	detok_init(*out, t, skip_special, 0);
	return 0;
}

void coord_detok_destroy(coord_detok *d)
{
	if (!d)
		return;
	free(d->run.p);
	free(d->out.p);
	free(d);
}

void coord_detok_reset(coord_detok *d)
{
	if (!d)
		return;
	tk_buf out = d->out, run = d->run;
	detok_init(d, d->t, d->skip_special, 0);
	out.len = run.len = 0;
	d->out = out;
	d->run = run;
}

/* Hands out d->out (NUL-terminated even when empty). */
static int detok_result(coord_detok *d, const char **text, size_t *len)
{
	if (d->oom || buf_put(&d->out, "", 0)) {
		d->oom = 0;
		*text = "";
		*len = 0;
		return SL_ENOMEM;
	}
	*text = d->out.p;
	*len = d->out.len;
	return 0;
}

int coord_detok_step(coord_detok *d, int32_t id, const char **text, size_t *len)
{
	if (!d || !text || !len)
		return SL_EINVAL;
	d->out.len = 0;
	feed(d, id);
	return detok_result(d, text, len);
}

int coord_detok_finish(coord_detok *d, const char **text, size_t *len)
{
	if (!d || !text || !len)
		return SL_EINVAL;
	d->out.len = 0;
	feed_end(d);
	return detok_result(d, text, len);
}

int coord_tok_decode(const coord_tok *t, const int32_t *ids, size_t n, int skip_special,
		     char **text, size_t *len, char *err, size_t errlen)
{
	coord_detok d;

	if (!t || !text || !len || (!ids && n))
		return sl_errf(err, errlen, SL_EINVAL, "coord_tok_decode: NULL argument");
	*text = NULL;
	*len = 0;
	detok_init(&d, t, skip_special, 1);
	for (size_t i = 0; i < n; i++)
		feed(&d, ids[i]);
	feed_end(&d);
	free(d.run.p);
	if (d.oom || buf_put(&d.out, "", 0)) {
		free(d.out.p);
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory decoding %zu ids",
			       t->name, n);
	}
	*text = d.out.p;
	*len = d.out.len;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Lookups                                                             */

int32_t coord_tok_vocab_size(const coord_tok *t) { return t ? t->n_vocab : 0; }
int32_t coord_tok_bos_id(const coord_tok *t) { return t ? t->bos_id : -1; }
int32_t coord_tok_eos_id(const coord_tok *t) { return t ? t->eos_id : -1; }

int32_t coord_tok_token_to_id(const coord_tok *t, const char *token)
{
	if (!t || !token)
		return -1;
	size_t n = strlen(token);
	for (size_t i = 0; i < t->n_added; i++) {
		const added_tok *a = &t->added[i];
		if (a->clen == n && memcmp(t->arena + a->coff, token, n) == 0)
			return a->id;
	}
	return sm_get(&t->text_map, t->arena, token, n);
}

const char *coord_tok_id_to_token(const coord_tok *t, int32_t id)
{
	if (!t || id < 0 || id >= t->n_vocab || !t->tok[id].present)
		return NULL;
	return tk_str(t, t->tok[id].text_off);
}

int coord_tok_is_special(const coord_tok *t, int32_t id)
{
	return t && id >= 0 && id < t->n_vocab && t->tok[id].special;
}
