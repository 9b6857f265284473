/*
 * tok_decode.c -- decoders: ids -> text, as Hugging Face `tokenizers`
 * decodes, one-shot (text_tok_decode) and streaming (text_detok).
 *
 * Owner: the tokenizer (text/tokenizer/).  Callers: tokenizer.c (loading the
 * decoder), the coordinator's streaming relay and the tools (tokenizer.h).
 *
 * The decoder chain runs as a stream; the one-shot decode is the same
 * stream in "exact" mode, so both agree by construction.  Decoding always
 * yields valid UTF-8, exactly as HF's decode does.
 */
#include "text/tokenizer/tok_int.h"
#include "common/checks.h"
#include "common/sl.h"

#include <stdlib.h>
#include <string.h>

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

int16_t tk_parse_byte_token(const char *s, size_t n)
{
	if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
		return -1;
	int lo = hexval(s[4]), hi = s[3] == '+' ? 0 : hexval(s[3]);
	return (int16_t)(lo < 0 || hi < 0 ? -1 : hi * 16 + lo);
}

/* ---- loading ---- */


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

static int load_dec_step(text_tok *t, const cJSON *j, dec_replace *rep, size_t *nrep,
			 int *phase, char *err, size_t errlen)
{
	const char *type = tk_jstr(j, "type");

	if (!type)
		return LERR(SL_EINVAL, "decoder: missing \"type\"");
	if (strcmp(type, "Replace") == 0 && *phase == PHASE_TOKEN && !t->dec_meta_rep_len) {
		const char *pat = tk_jstr(tk_jget(j, "pattern"), "String"), *to = tk_jstr(j, "content");
		if (!pat || !*pat || !to || *nrep == MAX_DEC_REPLACE)
			return LERR(SL_ENOTSUP, "decoder Replace: only non-empty String patterns");
		/* its output is decoded text, promised UTF-8 */
		if (!text_utf8_valid(pat, strlen(pat)) || !text_utf8_valid(to, strlen(to)))
			return LERR(SL_EINVAL, "decoder Replace: \"%s\" is not valid UTF-8",
				    text_utf8_valid(pat, strlen(pat)) ? "content" : "pattern");
		rep[(*nrep)++] = (dec_replace){pat, to};
	} else if (strcmp(type, "Metaspace") == 0 && *phase == PHASE_TOKEN && *nrep == 0) {
		const char *r = tk_jstr(j, "replacement"), *scheme = tk_jstr(j, "prepend_scheme");
		if (!r || tk_one_char(r, t->dec_meta_rep, &t->dec_meta_rep_len))
			return LERR(SL_EINVAL, "decoder Metaspace: bad \"replacement\"");
		t->dec_meta_first = scheme ? strcmp(scheme, "never") != 0
					   : tk_jbool(j, "add_prefix_space", 1);
		rep[(*nrep)++] = (dec_replace){t->dec_meta_rep, " "};
	} else if (strcmp(type, "ByteFallback") == 0 && *phase < PHASE_BYTES) {
		*phase = PHASE_BYTES;
		t->dec_byte_fallback = 1;
	} else if (strcmp(type, "Fuse") == 0 && *phase < PHASE_FUSE) {
		*phase = PHASE_FUSE;
	} else if (strcmp(type, "Strip") == 0 && *phase == PHASE_FUSE) {
		const char *c = tk_jstr(j, "content");
		int32_t start = tk_jid(tk_jget(j, "start")), stop = tk_jid(tk_jget(j, "stop"));
		if (!c || tk_one_char(c, t->dec_strip_char, &t->dec_strip_char_len) ||
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
static int compute_dec(text_tok *t, const dec_replace *rep, size_t nrep)
{
	int16_t char_byte[BYTE_CHARS];
	sl_buf bufs[2] = {{0}, {0}};
	int rc = 0;

	tk_build_char_bytes(char_byte);
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
			rc = tk_unmap_bytes(t, char_byte, cur, &e->dec_off, &e->dec_len);
			rc = rc > 0 ? 0 : rc; /* unmappable: raw text, as HF does */
			continue;
		}
		for (size_t k = 0; k < nrep && rc == 0; k++) {
			rc = tk_replace_all(cur, cn, rep[k].pat, strlen(rep[k].pat), rep[k].to,
					 strlen(rep[k].to), &bufs[k & 1]);
			cur = bufs[k & 1].p;
			cn = bufs[k & 1].n;
		}
		if (rc == 0 && nrep)
			rc = tk_arena_put(t, cur, cn, &e->dec_off);
		e->dec_len = (uint32_t)cn;
		if (t->dec_byte_fallback)
			e->byte_val = tk_parse_byte_token(tk_str(t, e->dec_off), e->dec_len);
	}
	free(bufs[0].p);
	free(bufs[1].p);
	return rc;
}

int tk_load_decoder(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const char *type = tk_jstr(j, "type");
	dec_replace rep[MAX_DEC_REPLACE];
	size_t nrep = 0;
	int phase = PHASE_TOKEN;

	if (tk_jabsent(j)) {
		t->dec_kind = DEC_JOIN; /* HF joins the tokens with spaces */
	} else if (type && strcmp(type, "ByteLevel") == 0) {
		t->dec_kind = DEC_BYTELEVEL;
	} else if (type && strcmp(type, "Sequence") == 0) {
		const cJSON *it, *arr = tk_jget(j, "decoders");
		if (!cJSON_IsArray(arr))
			return LERR(SL_EINVAL, "decoder Sequence: missing \"decoders\"");
		t->dec_kind = DEC_PIPE;
		const char *only = tk_jstr(cJSON_GetArrayItem(arr, 0), "type");
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


/* ---- streaming ---- */

struct text_detok {
	const text_tok *t;
	int skip_special;
	int exact;         /* one-shot decode: judge byte-fallback runs whole */
	size_t n_fed;      /* tokens given to the decoder so far */
	size_t strip_left; /* leading strip characters still to remove */
	unsigned char pend[4]; /* bytes of an unfinished UTF-8 character */
	size_t n_pend;
	sl_buf run;        /* exact mode: the current byte-fallback run */
	sl_buf out;        /* text produced by this call */
	int oom;
};

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* Appends text, first removing the decoder's leading Strip characters. */
static void emit(text_detok *d, const char *s, size_t n)
{
	const text_tok *t = d->t;
	size_t cl = t->dec_strip_char_len;

	while (d->strip_left && n && tk_starts_with(s, n, t->dec_strip_char, cl)) {
		s += cl;
		n -= cl;
		d->strip_left--;
	}
	if (n == 0)
		return;
	d->strip_left = 0;
	if (sl_buf_put(&d->out, s, n))
		d->oom = 1;
}

static void emit_replacements(text_detok *d, size_t count)
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
static void utf8_feed(text_detok *d, unsigned char b, int per_byte)
{
	d->pend[d->n_pend++] = b;
	while (d->n_pend) {
		uint32_t cp;
		size_t len = text_utf8_next((const char *)d->pend, d->n_pend, &cp);
		if (cp == TEXT_UTF8_TRUNC)
			return;
		if (cp == TEXT_UTF8_BAD)
			emit_replacements(d, per_byte ? len : 1);
		else
			emit(d, (const char *)d->pend, len);
		memmove(d->pend, d->pend + len, d->n_pend - len);
		d->n_pend -= len;
	}
}

static void utf8_flush(text_detok *d, int per_byte)
{
	if (d->n_pend)
		emit_replacements(d, per_byte ? d->n_pend : 1);
	d->n_pend = 0;
}

/* End of a byte-fallback run.  HF keeps a run only if it is valid UTF-8 as
 * a whole and otherwise writes one U+FFFD per byte; the stream has already
 * sent the good characters, so it only settles the unfinished tail. */
static void run_end(text_detok *d)
{
	if (!d->exact) {
		utf8_flush(d, 1);
		return;
	}
	if (d->run.n == 0)
		return;
	if (text_utf8_valid(d->run.p, d->run.n))
		emit(d, d->run.p, d->run.n);
	else
		emit_replacements(d, d->run.n);
	d->run.n = 0;
}

/* Metaspace decoder: the first token loses its replacement characters
 * instead of turning them into spaces. */
static void emit_meta_first(text_detok *d, const tok_entry *e)
{
	const text_tok *t = d->t;
	sl_buf tmp = {0};
	if (tk_replace_all(tk_str(t, e->text_off), e->text_len, t->dec_meta_rep,
			t->dec_meta_rep_len, "", 0, &tmp))
		d->oom = 1;
	else
		emit(d, tmp.p, tmp.n);
	free(tmp.p);
}

static void feed_pipe(text_detok *d, const tok_entry *e)
{
	const text_tok *t = d->t;

	if (e->byte_val >= 0) {
		if (d->exact) {
			char b = (char)e->byte_val;
			if (sl_buf_put(&d->run, &b, 1))
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
static void feed(text_detok *d, int32_t id)
{
	const text_tok *t = d->t;

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

static void feed_end(text_detok *d)
{
	if (d->t->dec_kind == DEC_PIPE)
		run_end(d);
	utf8_flush(d, d->t->dec_kind == DEC_PIPE);
}

static void detok_init(text_detok *d, const text_tok *t, int skip_special, int exact)
{
	memset(d, 0, sizeof *d);
	d->t = t;
	d->skip_special = skip_special;
	d->exact = exact;
	d->strip_left = t->dec_kind == DEC_PIPE ? (size_t)t->dec_strip : 0;
}

int text_detok_create(const text_tok *t, int skip_special, text_detok **out,
		       char *err, size_t errlen)
{
	if (!t || !out)
		return sl_errf(err, errlen, SL_EINVAL, "text_detok_create: NULL argument");
	*out = malloc(sizeof **out);
	if (!*out)
		return sl_errf(err, errlen, SL_ENOMEM, "text_detok_create: out of memory");
	detok_init(*out, t, skip_special, 0);
	return 0;
}

void text_detok_destroy(text_detok *d)
{
	if (!d)
		return;
	free(d->run.p);
	free(d->out.p);
	free(d);
}

void text_detok_reset(text_detok *d)
{
	if (!d)
		return;
	sl_buf out = d->out, run = d->run;
	detok_init(d, d->t, d->skip_special, 0);
	out.n = run.n = 0;
	d->out = out;
	d->run = run;
}

/* Hands out d->out (NUL-terminated even when empty). */
static int detok_result(text_detok *d, const char **text, size_t *len)
{
	if (d->oom || sl_buf_put(&d->out, "", 0)) {
		d->oom = 0;
		*text = "";
		*len = 0;
		return SL_ENOMEM;
	}
	*text = d->out.p;
	*len = d->out.n;
	return 0;
}

int text_detok_step(text_detok *d, int32_t id, const char **text, size_t *len)
{
	if (!d || !text || !len)
		return SL_EINVAL;
	d->out.n = 0;
	feed(d, id);
	return detok_result(d, text, len);
}

int text_detok_finish(text_detok *d, const char **text, size_t *len)
{
	if (!d || !text || !len)
		return SL_EINVAL;
	d->out.n = 0;
	feed_end(d);
	return detok_result(d, text, len);
}

int text_tok_decode(const text_tok *t, const int32_t *ids, size_t n, int skip_special,
		     char **text, size_t *len, char *err, size_t errlen)
{
	text_detok d;

	if (!t || !text || !len || (!ids && n))
		return sl_errf(err, errlen, SL_EINVAL, "text_tok_decode: NULL argument");
	*text = NULL;
	*len = 0;
	detok_init(&d, t, skip_special, 1);
	for (size_t i = 0; i < n; i++)
		feed(&d, ids[i]);
	feed_end(&d);
	free(d.run.p);
	if (d.oom || sl_buf_put(&d.out, "", 0)) {
		free(d.out.p);
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory decoding %zu ids",
			       t->name, n);
	}
	*text = d.out.p;
	*len = d.out.n;
	return 0;
}

