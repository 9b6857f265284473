/*
 * tok_bpe.c -- the BPE model: vocabulary and merges from tokenizer.json,
 * and byte-pair encoding of one pre-tokenized word.
 *
 * Owner: the tokenizer (text/tokenizer/).  Callers: tokenizer.c (loading, and each
 * word the pre-tokenizers made).  It sees words only, never the
 * pre-tokenizers; the encode scratch it grows (enc_ctx.sym, .heap) is
 * freed by tokenizer.c, which owns the enc_ctx.
 *
 * Symbols are characters, or raw bytes for byte-level models: the GPT-2
 * byte<->char mapping is undone once at load for every vocabulary entry,
 * so encoding never builds mapped strings.  Merges are applied lowest rank
 * first, leftmost on ties, through a binary heap with lazy invalidation:
 * O(n log n) per word.
 */
#include "text/tokenizer/tok_int.h"
#include "common/checks.h"
#include "common/sl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bpe_sym {
	int32_t id;         /* -1 once merged into its left neighbour */
	int32_t prev, next; /* -1 at the ends */
};

struct bpe_merge {
	int32_t rank, pos, new_id;
};

/* ---- loading ---- */

static int load_vocab(text_tok *t, const cJSON *vocab, char *err, size_t errlen)
{
	const cJSON *it;
	int16_t char_byte[BYTE_CHARS];
	size_t n = (size_t)cJSON_GetArraySize(vocab);

	tk_build_char_bytes(char_byte);
	TRY(sm_init(&t->text_map, n));
	TRY(sm_init(&t->enc_map, n));
	cJSON_ArrayForEach(it, vocab) {
		int32_t id = tk_jid(it);
		tok_entry *e = &t->tok[id];
		uint32_t len = (uint32_t)strlen(it->string), off, roff, rlen;
		if (!text_utf8_valid(it->string, len))
			return LERR(SL_EINVAL, "model.vocab: token %d is not valid UTF-8", id);
		if (e->present)
			return LERR(SL_EINVAL, "model.vocab: id %d is used by \"%.60s\" and \"%.60s\"",
				    id, tk_str(t, e->text_off), it->string);
		TRY(tk_arena_put(t, it->string, len, &off));
		e->present = 1;
		e->text_off = off;
		e->text_len = len;
		sm_put(&t->text_map, t->arena, off, len, id);
		if (!t->byte_level) {
			sm_put(&t->enc_map, t->arena, off, len, id);
			continue;
		}
		/* an entry with a character outside the 256 is unreachable by
		 * encoding and only kept for decoding */
		int rc = tk_unmap_bytes(t, char_byte, it->string, &roff, &rlen);
		if (rc < 0)
			return rc;
		if (rc == 0)
			sm_put(&t->enc_map, t->arena, roff, rlen, id);
	}
	return 0;
}

/* One merge: "a b" (single space) or ["a", "b"]. */
static int merge_parts(const cJSON *m, const char **a, size_t *alen, const char **b,
		       size_t *blen)
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

static int load_merges(text_tok *t, const cJSON *merges, char *err, size_t errlen)
{
	const cJSON *m;
	sl_buf cat = {0};
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
		cat.n = 0;
		if ((rc = sl_buf_put(&cat, a, alen)) || (rc = sl_buf_put(&cat, b, blen)))
			break;
		int32_t ir = sm_get(&t->text_map, t->arena, cat.p, cat.n);
		if (ia < 0 || ib < 0 || ir < 0) {
			rc = LERR(SL_EINVAL, "model.merges[%d]: \"%.60s\" is not in the vocabulary",
				  rank, ia < 0 ? a : ib < 0 ? b : cat.p);
			break;
		}
		/* a repeated pair keeps its last rank, as HF's map does */
		pm_slot *s = pm_find(&t->merges, pm_key(ia, ib));
		*s = (pm_slot){pm_key(ia, ib), rank++, ir};
	}
	free(cat.p);
	return rc;
}

int tk_check_model(text_tok *t, const cJSON *model, char *err, size_t errlen)
{
	const char *type = tk_jstr(model, "type");
	const cJSON *dropout = tk_jget(model, "dropout");
	const char *pre = tk_jstr(model, "continuing_subword_prefix");
	const char *suf = tk_jstr(model, "end_of_word_suffix");

	if (!cJSON_IsObject(model))
		return LERR(SL_EINVAL, "missing \"model\"");
	if (type ? strcmp(type, "BPE") != 0 : !tk_jget(model, "merges"))
		return LERR(SL_ENOTSUP, "model type \"%s\" not supported (only BPE)",
			    type ? type : "(none)");
	if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
		return LERR(SL_ENOTSUP, "model.dropout > 0 not supported");
	if ((pre && *pre) || (suf && *suf))
		return LERR(SL_ENOTSUP, "continuing_subword_prefix / end_of_word_suffix "
			    "not supported");
	if (!cJSON_IsObject(tk_jget(model, "vocab")))
		return LERR(SL_EINVAL, "model.vocab missing or not an object");
	return 0;
}

int tk_load_model(text_tok *t, const cJSON *model, char *err, size_t errlen)
{
	const char *unk = tk_jstr(model, "unk_token");

	t->byte_fallback = tk_jbool(model, "byte_fallback", 0);
	t->fuse_unk = tk_jbool(model, "fuse_unk", 0);
	t->ignore_merges = tk_jbool(model, "ignore_merges", 0);
	TRY(load_vocab(t, tk_jget(model, "vocab"), err, errlen));
	TRY(load_merges(t, tk_jget(model, "merges"), err, errlen));
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

/* ---- encoding one word ---- */

static int merge_before(const bpe_merge *a, const bpe_merge *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(enc_ctx *c, bpe_merge m)
{
	if (tk_grow((void **)&c->heap, &c->heap_cap, c->n_heap + 1, sizeof *c->heap))
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
	if (tk_grow((void **)&c->sym, &c->sym_cap, c->n_sym + 1, sizeof *c->sym))
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
	const text_tok *t = c->t;
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
	const text_tok *t = c->t;
	c->n_sym = 0;
	c->unk_pending = 0;
	for (size_t i = 0; i < n;) {
		size_t len = 1;
		int32_t id;
		uint32_t cp;
		if (t->byte_level) {
			id = t->byte_sym[w[i]];
		} else {
			len = text_utf8_next((const char *)w + i, n - i, &cp);
			id = sm_get(&t->enc_map, t->arena, (const char *)w + i, len);
		}
		if (id >= 0) {
			TRY(flush_unk(c));
			TRY(sym_push(c, id));
		} else if (t->byte_level) {
			char mapped[4]; /* HF would look at the mapped character */
			size_t ml = text_utf8_put(mapped, tk_byte_to_char(w[i]));
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
	const text_tok *t = c->t;

	if (n == 0)
		return 0;
	if (t->ignore_merges) { /* Llama 3: whole words in the vocab win */
		int32_t id = sm_get(&t->enc_map, t->arena, w, n);
		if (id >= 0)
			return tk_ids_push(&c->out, id);
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
		TRY(tk_ids_push(&c->out, c->sym[i].id));
	return 0;
}

/* The stand-in at w (a 4-byte private-use character), or -1. */
static long stand_in_at(const enc_ctx *c, const unsigned char *w, size_t n)
{
	uint32_t cp;
	if (n < 4 || (w[0] != 0xF3 && w[0] != 0xF4) || text_utf8_next((const char *)w, n, &cp) != 4)
		return -1;
	size_t lo = 0, hi = c->n_stand;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c->stand_cp[mid] < cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < c->n_stand && c->stand_cp[lo] == cp ? (long)lo : -1;
}

int tk_encode_word(enc_ctx *c, const char *w, size_t n)
{
	if (!c->n_stand)
		return bpe_word(c, w, n);
	const unsigned char *u = (const unsigned char *)w;
	c->word.n = 0;
	for (size_t i = 0; i < n;) {
		long k = stand_in_at(c, u + i, n - i);
		if (k >= 0) {
			TRY(sl_buf_put(&c->word, c->stand_bytes[k] + 1, c->stand_bytes[k][0]));
			i += 4;
		} else {
			TRY(sl_buf_put(&c->word, w + i, 1));
			i++;
		}
	}
	return bpe_word(c, c->word.p, c->word.n);
}

