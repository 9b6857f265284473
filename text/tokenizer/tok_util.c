/*
 * tok_util.c -- the tokenizer's small shared pieces: growable buffers,
 * UTF-8 units, the GPT-2 byte alphabet, open-addressing hash maps, the
 * string arena, and load-time JSON/error helpers.
 *
 * Owner: the tokenizer (text/tokenizer/).  Callers: the other text/tokenizer/tok*.c
 * files (see tok_int.h).
 */
#include "text/tokenizer/tok_int.h"
#include "common/sl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable buffers ---- */

int tk_grow(void **p, size_t *cap, size_t need, size_t elem)
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

int tk_ids_push(tk_ids *v, int32_t id)
{
	if (tk_grow((void **)&v->p, &v->cap, v->len + 1, sizeof *v->p))
		return SL_ENOMEM;
	v->p[v->len++] = id;
	return 0;
}

/* ---- UTF-8 (decoding and encoding: text/utf8.h) ---- */

int tk_one_char(const char *s, char *out, size_t *len)
{
	uint32_t cp;
	size_t n = strlen(s);
	if (n == 0 || n > 4 || text_utf8_next(s, n, &cp) != n ||
	    cp == TEXT_UTF8_BAD || cp == TEXT_UTF8_TRUNC)
		return -1;
	memcpy(out, s, n);
	out[n] = 0;
	*len = n;
	return 0;
}

int tk_starts_with(const char *s, size_t n, const char *p, size_t pn)
{
	return n >= pn && memcmp(s, p, pn) == 0;
}

int tk_replace_all(const char *s, size_t n, const char *pat, size_t pn, const char *to,
		   size_t tn, sl_buf *out)
{
	size_t i = 0, start = 0;

	out->n = 0;
	while (i + pn <= n) {
		if (memcmp(s + i, pat, pn) != 0) {
			i++;
			continue;
		}
		if (sl_buf_put(out, s + start, i - start) || sl_buf_put(out, to, tn))
			return SL_ENOMEM;
		i += pn;
		start = i;
	}
	return sl_buf_put(out, s + start, n - start);
}

int tk_is_white_space(uint32_t cp)
{
	/* PropList.txt White_Space: fixed since Unicode 6.3 */
	return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
	       cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
	       cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ---- GPT-2 byte-level alphabet ---- */

static int byte_prints(unsigned b)
{
	return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t tk_byte_to_char(unsigned b)
{
	if (byte_prints(b))
		return b;
	unsigned n = 0;
	for (unsigned x = 0; x < b; x++)
		n += !byte_prints(x);
	return 256 + n;
}

void tk_build_char_bytes(int16_t *char_byte)
{
	for (unsigned i = 0; i < BYTE_CHARS; i++)
		char_byte[i] = -1;
	for (unsigned b = 0; b < 256; b++)
		char_byte[tk_byte_to_char(b)] = (int16_t)b;
}

/* ---- hash maps ---- */

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

int sm_init(strmap *m, size_t n)
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

void sm_put(strmap *m, const char *arena, uint32_t off, uint32_t len, int32_t val)
{
	sm_slot *s = sm_find(m, arena, arena + off, len);
	s->off = off;
	s->len = len;
	s->val = val;
}

int32_t sm_get(const strmap *m, const char *arena, const char *key, size_t len)
{
	if (!m->slots)
		return -1;
	return sm_find(m, arena, key, len)->val;
}

int pm_init(pairmap *m, size_t n)
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

pm_slot *pm_find(const pairmap *m, uint64_t key)
{
	size_t i = hash_u64(key) & m->mask;
	while (m->slots[i].key != key && m->slots[i].key != UINT64_MAX)
		i = (i + 1) & m->mask;
	return &m->slots[i];
}

uint64_t pm_key(int32_t a, int32_t b)
{
	return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

const pm_slot *pm_get(const pairmap *m, int32_t a, int32_t b)
{
	if (!m->slots)
		return NULL;
	const pm_slot *s = pm_find(m, pm_key(a, b));
	return s->key == UINT64_MAX ? NULL : s;
}

/* ---- arena, errors, JSON ---- */

int tk_arena_put(text_tok *t, const char *s, size_t n, uint32_t *off)
{
	if (t->arena_len + n + 1 > UINT32_MAX)
		return SL_ENOMEM;
	if (tk_grow((void **)&t->arena, &t->arena_cap, t->arena_len + n + 1, 1))
		return SL_ENOMEM;
	*off = (uint32_t)t->arena_len;
	if (n)
		memcpy(t->arena + t->arena_len, s, n);
	t->arena_len += n;
	t->arena[t->arena_len++] = 0;
	return 0;
}

int tk_unmap_bytes(text_tok *t, const int16_t *char_byte, const char *s, uint32_t *off,
		   uint32_t *len)
{
	size_t n = strlen(s), k = 0;
	char tmp[256], *out = n <= sizeof tmp ? tmp : malloc(n);
	int rc = 0;

	if (!out)
		return SL_ENOMEM;
	for (size_t i = 0; i < n && rc == 0;) {
		uint32_t cp;
		i += text_utf8_next(s + i, n - i, &cp);
		if (cp >= BYTE_CHARS || char_byte[cp] < 0)
			rc = 1;
		else
			out[k++] = (char)char_byte[cp];
	}
	if (rc == 0) {
		*len = (uint32_t)k;
		rc = tk_arena_put(t, out, k, off);
	}
	if (out != tmp)
		free(out);
	return rc;
}

int tk_load_err(const text_tok *t, char *err, size_t errlen, int code, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return sl_errf(err, errlen, code, "%s: %s", t->name, msg);
}

const cJSON *tk_jget(const cJSON *o, const char *key)
{
	return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

const char *tk_jstr(const cJSON *o, const char *key)
{
	const cJSON *v = tk_jget(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int tk_jbool(const cJSON *o, const char *key, int dflt)
{
	const cJSON *v = tk_jget(o, key);
	return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

int tk_jabsent(const cJSON *v) { return !v || cJSON_IsNull(v); }

int32_t tk_jid(const cJSON *v)
{
	if (!cJSON_IsNumber(v))
		return -1;
	double d = v->valuedouble;
	if (!(d >= 0 && d < MAX_TOKEN_ID) || d != floor(d))
		return -1;
	return (int32_t)d;
}
