/*
 * tokenizer.c -- Hugging Face tokenizer.json (BPE) for the coordinator:
 * loading, the encode pipeline, lookups.  A GGUF file is read through
 * tok_gguf.c, which turns its tokenizer into the equivalent
 * tokenizer.json first, so both kinds of file take one path.
 *
 * Owner: the tokenizer (text/tokenizer/).  Callers: see tokenizer.h.
 *
 * Encoding follows the `tokenizers` pipeline step by step, because
 * conformance is judged id for id against it:
 *   invalid UTF-8 -> one private-use stand-in per maximal ill-formed
 *      subsequence (HF cannot take such text; see escape_invalid)
 *   -> added tokens split out of the raw text (leftmost-longest)
 *   -> normalizer on each remaining piece (tok_norm.c)
 *   -> added tokens flagged normalized, split out of the normalized text
 *   -> pre-tokenizers into words (tok_pretok.c, Oniguruma)
 *   -> BPE per word (tok_bpe.c), stand-ins back to their raw bytes
 *   -> post-processor template (BOS) around the whole sequence.
 * Decoding is tok_decode.c.
 */
#include "text/tokenizer/tok_int.h"
#include "common/checks.h"
#include "common/sl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Loading: ids, added tokens, post-processor                          */

/* Highest id in model.vocab and added_tokens, validating each. */
static int scan_ids(text_tok *t, const cJSON *vocab, const cJSON *added,
		    char *err, size_t errlen)
{
	const cJSON *it;
	int32_t max = -1;

	cJSON_ArrayForEach(it, vocab) {
		int32_t id = tk_jid(it);
		if (id < 0)
			return LERR(SL_EINVAL, "model.vocab[\"%.60s\"]: id must be an "
				    "integer in [0, %d)", it->string, MAX_TOKEN_ID);
		if (id > max)
			max = id;
	}
	cJSON_ArrayForEach(it, added) {
		int32_t id = tk_jid(tk_jget(it, "id"));
		if (id < 0 || !tk_jstr(it, "content"))
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
static int index_added(text_tok *t)
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
static void claim_added_id(text_tok *t, const added_tok *a)
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

static int load_one_added(text_tok *t, const cJSON *it, added_tok *a, sl_buf nb[2],
			  char *err, size_t errlen)
{
	const char *content = tk_jstr(it, "content");
	size_t clen = strlen(content);

	a->id = tk_jid(tk_jget(it, "id"));
	a->special = (uint8_t)tk_jbool(it, "special", 0);
	/* HF's AddedToken default: special tokens are not normalized */
	a->normalized = (uint8_t)tk_jbool(it, "normalized", !a->special);
	if (tk_jbool(it, "lstrip", 0) || tk_jbool(it, "rstrip", 0) || tk_jbool(it, "single_word", 0))
		return LERR(SL_ENOTSUP, "added token \"%.60s\": lstrip/rstrip/single_word "
			    "not supported", content);
	if (!text_utf8_valid(content, clen))
		return LERR(SL_EINVAL, "added token %d is not valid UTF-8", a->id);
	TRY(tk_arena_put(t, content, clen, &a->coff));
	a->clen = (uint32_t)clen;
	a->off = a->coff;
	a->len = a->clen;
	if (a->normalized && t->n_norm) {
		/* HF matches these in normalized text, so normalize the pattern */
		const char *r;
		size_t rn;
		void *region = NULL;
		int rc = tk_normalize(t, content, clen, nb, &region, &r, &rn, NULL);
		tk_region_free(region);
		TRY(rc);
		TRY(tk_arena_put(t, r, rn, &a->off));
		a->len = (uint32_t)rn;
	}
	return 0;
}

static int load_added(text_tok *t, const cJSON *arr, char *err, size_t errlen)
{
	const cJSON *it;
	sl_buf nb[2] = {{0}, {0}};
	int rc = 0;

	if (tk_jabsent(arr))
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

static int load_template(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const cJSON *single = tk_jget(j, "single"), *specials = tk_jget(j, "special_tokens"), *p;
	int after = 0;

	if (!cJSON_IsArray(single))
		return LERR(SL_EINVAL, "post_processor TemplateProcessing: missing \"single\"");
	cJSON_ArrayForEach(p, single) {
		const cJSON *sq = tk_jget(p, "Sequence"), *st = tk_jget(p, "SpecialToken"), *id;
		if (sq) {
			const char *which = tk_jstr(sq, "id");
			if (!which || strcmp(which, "A") != 0 || after)
				return LERR(SL_EINVAL, "post_processor: \"single\" must hold sequence A once");
			after = 1;
			continue;
		}
		const char *name = tk_jstr(st, "id");
		const cJSON *ids = tk_jget(tk_jget(specials, name ? name : ""), "ids");
		if (!name || !cJSON_IsArray(ids))
			return LERR(SL_EINVAL, "post_processor: special token \"%.60s\" has "
				    "no entry in special_tokens", name ? name : "?");
		cJSON_ArrayForEach(id, ids) {
			int32_t v = tk_jid(id);
			if (v < 0 || v >= t->n_vocab)
				return LERR(SL_EINVAL, "post_processor: id of \"%.60s\" is out "
					    "of range", name);
			TRY(tk_ids_push(after ? &t->suffix : &t->prefix, v));
		}
	}
	return 0;
}

static int load_post_step(text_tok *t, const cJSON *j, char *err, size_t errlen)
{
	const char *type = tk_jstr(j, "type");

	if (!type)
		return LERR(SL_EINVAL, "post_processor: missing \"type\"");
	if (strcmp(type, "ByteLevel") == 0) /* offsets only; ids unchanged */
		return 0;
	if (strcmp(type, "TemplateProcessing") == 0)
		return load_template(t, j, err, errlen);
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *it, *arr = tk_jget(j, "processors");
		if (!cJSON_IsArray(arr))
			return LERR(SL_EINVAL, "post_processor Sequence: missing \"processors\"");
		cJSON_ArrayForEach(it, arr)
			TRY(load_post_step(t, it, err, errlen));
		return 0;
	}
	return LERR(SL_ENOTSUP, "post_processor \"%s\" not supported "
		    "(TemplateProcessing, ByteLevel, Sequence are)", type);
}

/* ------------------------------------------------------------------ */
/* Loading: entry points                                               */

static int32_t first_token(const text_tok *t, const char *const *names)
{
	for (; *names; names++) {
		int32_t id = text_tok_token_to_id(t, *names);
		if (id >= 0)
			return id;
	}
	return -1;
}

static int load_root(text_tok *t, const cJSON *root, char *err, size_t errlen)
{
	static const char *const bos[] = {"<s>", "<|begin_of_text|>", "<bos>", NULL};
	static const char *const eos[] = {"</s>", "<|end_of_text|>", "<|endoftext|>",
					  "<eos>", NULL};
	const cJSON *model = tk_jget(root, "model"), *added = tk_jget(root, "added_tokens");

	if (!cJSON_IsObject(root))
		return LERR(SL_EINVAL, "top level is not a JSON object");
	TRY(tk_check_model(t, model, err, errlen));
	if (!tk_jabsent(added) && !cJSON_IsArray(added))
		return LERR(SL_EINVAL, "\"added_tokens\" is not an array");
	TRY(tk_load_pretokenizer(t, tk_jget(root, "pre_tokenizer"), err, errlen));
	TRY(tk_load_normalizer(t, tk_jget(root, "normalizer"), err, errlen));
	TRY(scan_ids(t, tk_jget(model, "vocab"), tk_jabsent(added) ? NULL : added, err, errlen));
	TRY(tk_load_model(t, model, err, errlen));
	TRY(load_added(t, added, err, errlen));
	if (!tk_jabsent(tk_jget(root, "post_processor")))
		TRY(load_post_step(t, tk_jget(root, "post_processor"), err, errlen));
	TRY(tk_load_decoder(t, tk_jget(root, "decoder"), err, errlen));
	t->bos_id = t->prefix.len ? t->prefix.p[0] : first_token(t, bos);
	t->eos_id = first_token(t, eos);
	return 0;
}

int text_tok_load_buffer(const char *json, size_t len, const char *name,
			  text_tok **out, char *err, size_t errlen)
{
	const char *end = NULL;
	text_tok *t;
	int rc;

	if (!out || !json)
		return sl_errf(err, errlen, SL_EINVAL, "text_tok_load: NULL argument");
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
		text_tok_destroy(t);
		return rc;
	}
	*out = t;
	return 0;
}

int text_tok_load(const char *path, text_tok **out, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	int rc;

	if (!path || !out)
		return sl_errf(err, errlen, SL_EINVAL, "text_tok_load: NULL argument");
	*out = NULL;
	if (text_tok_is_gguf(path)) {
		if ((rc = text_tok_gguf_json(path, &buf, &len, err, errlen)))
			return rc;
	} else if ((rc = sl_read_file(path, &buf, &len, err, errlen))) {
		return rc;
	}
	rc = text_tok_load_buffer(buf, len, path, out, err, errlen);
	free(buf);
	return rc;
}

void text_tok_destroy(text_tok *t)
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
	tk_free_normalizer(t);
	tk_free_pretokenizer(t);
	free(t->prefix.p);
	free(t->suffix.p);
	free(t);
}

/* ------------------------------------------------------------------ */
/* Encoding                                                            */

/* Index of a maximal ill-formed subsequence among all possible ones:
 * one byte 80..FF (128), a lead E0..F4 with one continuation (21 * 64),
 * a lead F0..F4 with two (5 * 64 * 64). */
#define N_UNITS (128 + 21 * 64 + 5 * 4096)
static size_t unit_index(const unsigned char *u, size_t len)
{
	if (len == 1)
		return u[0] - 0x80u;
	if (len == 2)
		return 128 + (u[0] - 0xE0u) * 64 + (u[1] & 0x3Fu);
	return 128 + 21 * 64 + (u[0] - 0xF0u) * 4096 + (u[1] & 0x3Fu) * 64 + (u[2] & 0x3Fu);
}

#define PUA_FIRST 0xF0000u /* planes 15 and 16: private use */
#define PUA_COUNT 0x20000u
static int is_pua(uint32_t cp)
{
	return cp >= PUA_FIRST && (cp & 0xFFFF) <= 0xFFFD;
}

/*
 * HF takes only valid UTF-8 text, so we define invalid input as HF's
 * pipeline would see it if each maximal ill-formed subsequence were one
 * private-use character (general category Co: "other" to every pattern,
 * unchanged by every normalizer); its raw bytes are what BPE finally gets
 * (byte-level tokens or <0xNN> byte fallback), so no input byte is lost.
 * The stand-ins are private-use characters absent from the text, one per
 * distinct subsequence.  *res is s itself when s is valid.
 */
static int escape_invalid(enc_ctx *c, const char *s, size_t n, const char **res, size_t *rn)
{
	const unsigned char *u = (const unsigned char *)s;
	uint8_t *used = NULL;
	int32_t *slot = NULL;
	uint32_t next = PUA_FIRST, cp;
	int rc = 0;

	*res = s;
	*rn = n;
	if (text_utf8_valid(s, n))
		return 0;
	used = calloc(PUA_COUNT / 8, 1);
	slot = malloc(N_UNITS * sizeof *slot);
	c->stand_cp = malloc(N_UNITS * sizeof *c->stand_cp);
	c->stand_bytes = malloc(N_UNITS * sizeof *c->stand_bytes);
	if (!used || !slot || !c->stand_cp || !c->stand_bytes) {
		rc = SL_ENOMEM;
		goto out;
	}
	memset(slot, 0xFF, N_UNITS * sizeof *slot);
	for (size_t i = 0; i < n;) {
		i += text_utf8_next((const char *)u + i, n - i, &cp);
		if (cp < TEXT_UTF8_TRUNC && is_pua(cp))
			used[(cp - PUA_FIRST) / 8] |= (uint8_t)(1u << (cp % 8));
	}
	c->esc.n = 0;
	for (size_t i = 0; i < n && !rc;) {
		size_t len = text_utf8_next((const char *)u + i, n - i, &cp);
		if (cp < TEXT_UTF8_TRUNC) {
			rc = sl_buf_put(&c->esc, s + i, len);
			i += len;
			continue;
		}
		int32_t *k = &slot[unit_index(u + i, len)];
		if (*k < 0) {
			while (next < PUA_FIRST + PUA_COUNT &&
			       (!is_pua(next) || used[(next - PUA_FIRST) / 8] & (1u << (next % 8))))
				next++;
			if (next == PUA_FIRST + PUA_COUNT) {
				rc = SL_EINVAL; /* > 100k private-use characters and invalid bytes */
				break;
			}
			*k = (int32_t)c->n_stand++;
			c->stand_cp[*k] = next++;
			c->stand_bytes[*k][0] = (uint8_t)len;
			memcpy(c->stand_bytes[*k] + 1, u + i, len);
		}
		char enc[4];
		rc = sl_buf_put(&c->esc, enc, text_utf8_put(enc, c->stand_cp[*k]));
		i += len;
	}
	*res = c->esc.p;
	*rn = c->esc.n;
out:
	free(used);
	free(slot);
	return rc;
}

/* The longest added token of the given kind matching at s, or NULL. */
static const added_tok *added_at(const text_tok *t, const char *s, size_t n,
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
		TRY(tk_ids_push(&c->out, a->id));
		i += a->len;
		start = i;
	}
	return start < n ? gap(c, s + start, n - start, at_origin && start == 0) : 0;
}

/* Normalized text between added tokens: pre-tokenize into words (none
 * configured: the text is one word), then BPE each word. */
static int encode_words(enc_ctx *c, const char *s, size_t n, int at_origin)
{
	const tk_pieces *w;

	if (n == 0)
		return 0;
	if (c->t->n_pre == 0)
		return tk_encode_word(c, s, n);
	TRY(tk_pretokenize(c, s, n, at_origin, &w));
	for (size_t i = 0; i < w->n; i++)
		TRY(tk_encode_word(c, w->text.p + w->p[i].off, w->p[i].len));
	return 0;
}

/* Text between raw-matched added tokens: normalize, then look for the
 * normalized added tokens, then pre-tokenize and encode. */
static int encode_gap(enc_ctx *c, const char *s, size_t n, int at_origin)
{
	const char *ns;
	size_t nn;

	TRY(tk_normalize(c->t, s, n, c->norm, &c->region, &ns, &nn, &at_origin));
	if (c->t->n_added_norm)
		return split_added(c, ns, nn, 1, at_origin, encode_words);
	return encode_words(c, ns, nn, at_origin);
}

/* Frees the scratch every stage grew in c (not c->out: the result). */
static void enc_free(enc_ctx *c)
{
	free(c->norm[0].p);
	free(c->norm[1].p);
	free(c->word.p);
	free(c->esc.p);
	free(c->tmp.p);
	for (int i = 0; i < 2; i++) {
		free(c->pc[i].text.p);
		free(c->pc[i].p);
	}
	free(c->spans);
	tk_region_free(c->region);
	free(c->sym);
	free(c->heap);
	free(c->stand_cp);
	free(c->stand_bytes);
}

int text_tok_encode(const text_tok *t, const char *text, size_t len, int flags,
		     int32_t **ids, size_t *n, char *err, size_t errlen)
{
	enc_ctx c = {.t = t, .flags = flags};
	const char *s;
	size_t sn;
	int rc = 0;

	if (!t || !ids || !n || (!text && len))
		return sl_errf(err, errlen, SL_EINVAL, "text_tok_encode: NULL argument");
	*ids = NULL;
	*n = 0;
	if (len > UINT32_MAX / 8)
		return sl_errf(err, errlen, SL_EINVAL, "text_tok_encode: text of %zu bytes "
			       "is too long", len);
	if (flags & COORD_TOK_ADD_SPECIAL)
		for (size_t i = 0; i < t->prefix.len && !rc; i++)
			rc = tk_ids_push(&c.out, t->prefix.p[i]);
	if (!rc && len)
		rc = escape_invalid(&c, text, len, &s, &sn);
	if (!rc && len)
		rc = split_added(&c, s, sn, 0, 1, encode_gap);
	if (flags & COORD_TOK_ADD_SPECIAL)
		for (size_t i = 0; i < t->suffix.len && !rc; i++)
			rc = tk_ids_push(&c.out, t->suffix.p[i]);
	enc_free(&c);
	if (rc) {
		free(c.out.p);
		if (rc == SL_ENOMEM)
			return sl_errf(err, errlen, rc, "%s: out of memory encoding %zu bytes",
				       t->name, len);
		return sl_errf(err, errlen, rc, "%s: cannot encode this text of %zu bytes "
			       "(a pattern's backtracking limit, or too many private-use "
			       "characters mixed with invalid UTF-8)", t->name, len);
	}
	*ids = c.out.p;
	*n = c.out.len;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Lookups                                                             */

int32_t text_tok_vocab_size(const text_tok *t) { return t ? t->n_vocab : 0; }
int32_t text_tok_bos_id(const text_tok *t) { return t ? t->bos_id : -1; }
int32_t text_tok_eos_id(const text_tok *t) { return t ? t->eos_id : -1; }

int32_t text_tok_token_to_id(const text_tok *t, const char *token)
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

const char *text_tok_id_to_token(const text_tok *t, int32_t id)
{
	if (!t || id < 0 || id >= t->n_vocab || !t->tok[id].present)
		return NULL;
	return tk_str(t, t->tok[id].text_off);
}

int text_tok_is_special(const text_tok *t, int32_t id)
{
	return t && id >= 0 && id < t->n_vocab && t->tok[id].special;
}
