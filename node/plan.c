/*
 * plan.c — packing and checked unpacking of step plans. Layout: a fixed
 * int32 header, then int32 arrays (the penalty history, then the logit
 * bias with its values as fp32 bits, then the constrained rows' masks,
 * each only when a row has one), then (8-byte aligned) int64 positions
 * and sampling parameters. All ranks of a group run the same build, so
 * structs travel as bytes.
 */
#include "node/plan.h"

#include <stdlib.h>
#include <string.h>

#include "common/sl.h"

#define PLAN_MAGIC 0x534c504e /* "SLPN" */

enum { H_MAGIC, H_CMD, H_WANT, H_NTOK, H_NSEQ, H_MAXB, H_BT, H_MAXQ, H_MAXKV, H_NROWS,
       H_NSAMPLE, H_NMICRO, H_HIST, H_NHIST, H_BIAS, H_NBIAS, H_NMASK, H_MASKW, H_LEN };

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Sizes of the int32 part and the whole message for given counts. */
static size_t i32_count(const int32_t *h)
{
	size_t hist = h[H_HIST] ? (size_t)h[H_NSAMPLE] + 1 + 3 * (size_t)h[H_NHIST] : 0;
	size_t bias = h[H_BIAS] ? (size_t)h[H_NSAMPLE] + 1 + 2 * (size_t)h[H_NBIAS] : 0;
	return (size_t)H_LEN + 3 * (size_t)h[H_NTOK] + 3 * (size_t)h[H_NSEQ] +
	       (size_t)h[H_NSEQ] * h[H_MAXB] + h[H_NROWS] + h[H_NSAMPLE] + h[H_NMICRO] + 1 + hist +
	       bias + (size_t)h[H_NMASK] * (1 + (size_t)h[H_MASKW]);
}

static size_t total_bytes(const int32_t *h)
{
	return align8(4 * i32_count(h)) + (size_t)h[H_NSAMPLE] * (8 + sizeof(kern_sample_params));
}

size_t node_plan_max_bytes(int tokens, int seqs, int blocks_per_seq, int rows, int hist)
{
	int32_t h[H_LEN] = {0};
	h[H_NTOK] = tokens, h[H_NSEQ] = seqs, h[H_MAXB] = blocks_per_seq, h[H_NROWS] = rows;
	h[H_NSAMPLE] = seqs, h[H_NMICRO] = seqs, h[H_HIST] = 1, h[H_NHIST] = hist;
	h[H_BIAS] = 1, h[H_NBIAS] = seqs * NODE_PLAN_BIAS_PER_ROW;
	return total_bytes(h);
}

size_t node_plan_mask_bytes(int seqs, int mask_words)
{
	return 4 * (size_t)seqs * (1 + (size_t)mask_words);
}

static int32_t *put(int32_t *dst, const int32_t *src, size_t n)
{
	if (n)
		memcpy(dst, src, 4 * n);
	return dst + n;
}

int node_plan_pack(const node_plan *p, void **buf, size_t *cap, size_t *bytes)
{
	const kern_paged_batch *b = &p->b;
	int has_hist = p->hist.off != NULL, has_bias = p->bias.off != NULL;
	int32_t h[H_LEN] = {PLAN_MAGIC, p->cmd, p->want_logits, b->n_tokens, b->n_seqs, b->max_blocks,
			    b->block_tokens, b->max_q_len, b->max_kv_len, p->n_rows, p->n_sample,
			    p->n_micro, has_hist, has_hist ? p->n_hist : 0,
			    has_bias, has_bias ? p->n_bias : 0, p->n_mask,
			    p->n_mask ? p->mask_words : 0};
	if (p->cmd != NODE_PLAN_STEP)
		for (int i = H_NTOK; i < H_LEN; i++)
			h[i] = i == H_BT ? 1 : 0;
	size_t n = total_bytes(h);
	if (n > *cap) {
		void *nb = realloc(*buf, n);
		if (!nb)
			return SL_ENOMEM;
		*buf = nb;
		*cap = n;
	}
	int32_t *o = put(*buf, h, H_LEN);
	if (p->cmd == NODE_PLAN_STEP) {
		o = put(o, b->tokens, b->n_tokens);
		o = put(o, b->positions, b->n_tokens);
		o = put(o, b->slots, b->n_tokens);
		o = put(o, b->q_start, b->n_seqs);
		o = put(o, b->q_len, b->n_seqs);
		o = put(o, b->kv_len, b->n_seqs);
		o = put(o, b->block_tables, (size_t)b->n_seqs * b->max_blocks);
		o = put(o, p->rows, p->n_rows);
		o = put(o, p->sample_rows, p->n_sample);
		o = put(o, p->micro_seq0, p->n_micro + 1);
		if (has_hist) {
			o = put(o, p->hist.off, p->n_sample + 1);
			o = put(o, p->hist.ids, p->n_hist);
			o = put(o, p->hist.n_gen, p->n_hist);
			o = put(o, p->hist.in_prompt, p->n_hist);
		}
		if (has_bias) {
			o = put(o, p->bias.off, p->n_sample + 1);
			o = put(o, p->bias.ids, p->n_bias);
			memcpy(o, p->bias.bias, 4 * (size_t)p->n_bias); /* fp32 bits */
			o += p->n_bias;
		}
		o = put(o, p->mask_rows, p->n_mask);
		o = put(o, (const int32_t *)p->masks, (size_t)p->n_mask * h[H_MASKW]);
		char *tail = (char *)*buf + align8(4 * i32_count(h));
		memcpy(tail, p->sample_pos, 8 * (size_t)p->n_sample);
		memcpy(tail + 8 * (size_t)p->n_sample, p->sampling,
		       sizeof(kern_sample_params) * p->n_sample);
	} else {
		*o = 0; /* micro_seq0[0] */
	}
	*bytes = n;
	return SL_OK;
}

static int check_header(const int32_t *h, size_t bytes, char *err, size_t errlen)
{
	if (bytes < 4 * H_LEN || h[H_MAGIC] != PLAN_MAGIC)
		return sl_errf(err, errlen, SL_EINVAL, "step plan: bad magic or short message");
	for (int i = H_NTOK; i < H_LEN; i++)
		if (h[i] < 0 || h[i] > (1 << 24))
			return sl_errf(err, errlen, SL_EINVAL, "step plan: header field %d is %d", i, h[i]);
	if (h[H_HIST] > 1 || (!h[H_HIST] && h[H_NHIST]))
		return sl_errf(err, errlen, SL_EINVAL, "step plan: bad history header");
	if (h[H_BIAS] > 1 || (!h[H_BIAS] && h[H_NBIAS]) ||
	    (long)h[H_NBIAS] > (long)h[H_NSAMPLE] * NODE_PLAN_BIAS_PER_ROW)
		return sl_errf(err, errlen, SL_EINVAL, "step plan: bad logit bias header");
	if (h[H_NMASK] > h[H_NSAMPLE] || (h[H_NMASK] > 0) != (h[H_MASKW] > 0) ||
	    (long)h[H_NMASK] * h[H_MASKW] > (1 << 26))
		return sl_errf(err, errlen, SL_EINVAL, "step plan: bad mask header");
	if (h[H_BT] < 1 || (long)h[H_NSEQ] * h[H_MAXB] > (1 << 26) || total_bytes(h) != bytes)
		return sl_errf(err, errlen, SL_EINVAL, "step plan: %zu bytes do not match its counts",
			       bytes);
	return SL_OK;
}

/* History rows tile [0, n_hist); counts and flags are sane. Token ids are
 * checked against the vocabulary by the step (node/step.c), which knows it. */
static int check_hist(const node_plan *p, char *err, size_t errlen)
{
	const kern_token_hist *h = &p->hist;
	if (!h->off)
		return SL_OK;
	if (h->off[0] != 0 || h->off[p->n_sample] != p->n_hist)
		return sl_errf(err, errlen, SL_EINVAL, "step plan: history offsets do not cover it");
	for (int k = 0; k < p->n_sample; k++)
		if (h->off[k + 1] < h->off[k])
			return sl_errf(err, errlen, SL_EINVAL, "step plan: history row %d out of order", k);
	for (int e = 0; e < p->n_hist; e++)
		if (h->n_gen[e] < 0 || (h->in_prompt[e] != 0 && h->in_prompt[e] != 1))
			return sl_errf(err, errlen, SL_EINVAL, "step plan: bad history entry %d", e);
	return SL_OK;
}

/* Bias rows tile [0, n_bias), none longer than NODE_PLAN_BIAS_PER_ROW.
 * Token ids are checked by the step (node/step.c), which knows the
 * vocabulary; distinct ids within a row are the engine's promise. */
static int check_bias(const node_plan *p, char *err, size_t errlen)
{
	const kern_logit_bias *b = &p->bias;
	if (!b->off)
		return SL_OK;
	if (b->off[0] != 0 || b->off[p->n_sample] != p->n_bias)
		return sl_errf(err, errlen, SL_EINVAL, "step plan: bias offsets do not cover it");
	for (int k = 0; k < p->n_sample; k++)
		if (b->off[k + 1] < b->off[k] || b->off[k + 1] - b->off[k] > NODE_PLAN_BIAS_PER_ROW)
			return sl_errf(err, errlen, SL_EINVAL, "step plan: bias row %d out of order", k);
	return SL_OK;
}

/* Cross-field checks, so a rank never indexes past an array. */
static int check_indices(const node_plan *p, char *err, size_t errlen)
{
	const kern_paged_batch *b = &p->b;
	for (int s = 0; s < b->n_seqs; s++)
		if (b->q_start[s] < 0 || b->q_len[s] < 1 || b->q_len[s] > b->n_tokens - b->q_start[s] ||
		    b->kv_len[s] < b->q_len[s])
			return sl_errf(err, errlen, SL_EINVAL, "step plan: sequence %d out of range", s);
	for (int r = 0; r < p->n_rows; r++)
		if (p->rows[r] < 0 || p->rows[r] >= b->n_tokens || (r && p->rows[r] <= p->rows[r - 1]))
			return sl_errf(err, errlen, SL_EINVAL, "step plan: bad logits row %d", r);
	for (int k = 0; k < p->n_sample; k++)
		if (p->sample_rows[k] < 0 || p->sample_rows[k] >= p->n_rows)
			return sl_errf(err, errlen, SL_EINVAL, "step plan: bad sample row %d", k);
	for (int k = 0; k < p->n_mask; k++)
		if (p->mask_rows[k] < 0 || p->mask_rows[k] >= p->n_rows)
			return sl_errf(err, errlen, SL_EINVAL, "step plan: bad mask row %d", k);
	for (int k = 0; k <= p->n_micro; k++)
		if (p->micro_seq0[k] < 0 || p->micro_seq0[k] > b->n_seqs ||
		    (k && p->micro_seq0[k] <= p->micro_seq0[k - 1]))
			return sl_errf(err, errlen, SL_EINVAL, "step plan: bad micro-batch %d", k);
	if (p->cmd == NODE_PLAN_STEP && (p->n_micro < 1 || p->micro_seq0[p->n_micro] != b->n_seqs))
		return sl_errf(err, errlen, SL_EINVAL, "step plan: micro-batches do not cover the batch");
	int rc = check_hist(p, err, errlen);
	return rc ? rc : check_bias(p, err, errlen);
}

int node_plan_unpack(const void *buf, size_t bytes, node_plan *p, char *err, size_t errlen)
{
	const int32_t *h = buf;
	int rc = check_header(h, bytes, err, errlen);
	if (rc)
		return rc;
	memset(p, 0, sizeof *p);
	p->cmd = h[H_CMD];
	p->want_logits = h[H_WANT];
	kern_paged_batch *b = &p->b;
	b->n_tokens = h[H_NTOK], b->n_seqs = h[H_NSEQ], b->max_blocks = h[H_MAXB];
	b->block_tokens = h[H_BT], b->max_q_len = h[H_MAXQ], b->max_kv_len = h[H_MAXKV];
	p->n_rows = h[H_NROWS], p->n_sample = h[H_NSAMPLE], p->n_micro = h[H_NMICRO];
	const int32_t *i = h + H_LEN;
	b->tokens = i, i += b->n_tokens;
	b->positions = i, i += b->n_tokens;
	b->slots = i, i += b->n_tokens;
	b->q_start = i, i += b->n_seqs;
	b->q_len = i, i += b->n_seqs;
	b->kv_len = i, i += b->n_seqs;
	b->block_tables = i, i += (size_t)b->n_seqs * b->max_blocks;
	p->rows = i, i += p->n_rows;
	p->sample_rows = i, i += p->n_sample;
	p->micro_seq0 = i, i += p->n_micro + 1;
	if (h[H_HIST]) {
		p->n_hist = h[H_NHIST];
		p->hist.off = i, i += p->n_sample + 1;
		p->hist.ids = i, i += p->n_hist;
		p->hist.n_gen = i, i += p->n_hist;
		p->hist.in_prompt = i, i += p->n_hist;
	}
	if (h[H_BIAS]) {
		p->n_bias = h[H_NBIAS];
		p->bias.off = i, i += p->n_sample + 1;
		p->bias.ids = i, i += p->n_bias;
		p->bias.bias = (const float *)i, i += p->n_bias;
	}
	p->n_mask = h[H_NMASK], p->mask_words = h[H_MASKW];
	p->mask_rows = i, i += p->n_mask;
	p->masks = (const uint32_t *)i;
	const char *tail = (const char *)buf + align8(4 * i32_count(h));
	p->sample_pos = (const int64_t *)tail;
	p->sampling = (const kern_sample_params *)(tail + 8 * (size_t)p->n_sample);
	if (p->cmd != NODE_PLAN_STEP && p->cmd != NODE_PLAN_STOP && p->cmd != NODE_PLAN_PING)
		return sl_errf(err, errlen, SL_EINVAL, "step plan: unknown command %d", p->cmd);
	return check_indices(p, err, errlen);
}
