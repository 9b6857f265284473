/*
 * fuzz_plan.c — a step plan as a worker rank receives it, through
 * node_plan_unpack. An accepted plan is walked the way the step walks it
 * (every array to its stated length, block tables row by row, the history
 * rows through their offsets), so ASan flags any count the checks let
 * past the message; the index promises of plan.h are checked too. A plan
 * that unpacks is packed again and must unpack to the same counts.
 */
#include "fuzz_util.h"
#include "node/plan.h"
#include "common/sl.h"

static volatile uint64_t g_sink;

static void walk(const node_plan *p)
{
	const kern_paged_batch *b = &p->b;
	uint64_t sum = (uint32_t)p->cmd + (uint32_t)p->want_logits; /* wraps: only read */
	for (int i = 0; i < b->n_tokens; i++)
		sum += (uint32_t)b->tokens[i] + (uint32_t)b->positions[i] + (uint32_t)b->slots[i];
	for (int s = 0; s < b->n_seqs; s++) {
		FUZZ_CHECK(b->q_start[s] >= 0 && b->q_start[s] + b->q_len[s] <= b->n_tokens,
			   "sequence %d: tokens [%d, +%d) of %d", s, b->q_start[s], b->q_len[s],
			   b->n_tokens);
		sum += (uint32_t)b->kv_len[s];
		for (int k = 0; k < b->max_blocks; k++)
			sum += (uint32_t)b->block_tables[(size_t)s * b->max_blocks + k];
	}
	for (int r = 0; r < p->n_rows; r++) {
		FUZZ_CHECK(p->rows[r] >= 0 && p->rows[r] < b->n_tokens, "row %d is token %d of %d",
			   r, p->rows[r], b->n_tokens);
		sum += (uint32_t)p->rows[r];
	}
	for (int k = 0; k < p->n_sample; k++) {
		FUZZ_CHECK(p->sample_rows[k] >= 0 && p->sample_rows[k] < p->n_rows,
			   "sample %d is row %d of %d", k, p->sample_rows[k], p->n_rows);
		sum += (uint64_t)p->sample_pos[k] + (uint32_t)p->sampling[k].top_k +
		       (uint32_t)p->sampling[k].top_logprobs;
	}
	for (int k = 0; k < p->n_mask; k++) { /* constrained rows: a row, mask_words words */
		FUZZ_CHECK(p->mask_rows[k] >= 0 && p->mask_rows[k] < p->n_rows,
			   "mask %d is row %d of %d", k, p->mask_rows[k], p->n_rows);
		for (int w = 0; w < p->mask_words; w++)
			sum += p->masks[(size_t)k * p->mask_words + w];
	}
	for (int k = 0; k <= p->n_micro; k++)
		sum += (uint32_t)p->micro_seq0[k];
	if (p->hist.off)
		for (int k = 0; k < p->n_sample; k++)
			for (int e = p->hist.off[k]; e < p->hist.off[k + 1]; e++) {
				FUZZ_CHECK(e >= 0 && e < p->n_hist, "history entry %d of %d", e,
					   p->n_hist);
				sum += (uint32_t)p->hist.ids[e] + (uint32_t)p->hist.n_gen[e] +
				       (uint32_t)p->hist.in_prompt[e];
			}
	if (p->bias.off)
		for (int k = 0; k < p->n_sample; k++)
			for (int e = p->bias.off[k]; e < p->bias.off[k + 1]; e++) {
				FUZZ_CHECK(e >= 0 && e < p->n_bias, "bias entry %d of %d", e, p->n_bias);
				uint32_t bits; /* the value's bits: a bias may be -inf (min_tokens) */
				memcpy(&bits, &p->bias.bias[e], sizeof bits);
				sum += (uint32_t)p->bias.ids[e] + bits;
			}
	g_sink = sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	/* a worker receives into an 8-byte aligned buffer; so do we */
	void *buf = malloc(size ? size : 1);
	if (size)
		memcpy(buf, data, size);
	char err[SL_ERRLEN];
	node_plan p;
	if (node_plan_unpack(buf, size, &p, err, sizeof err) == 0) {
		walk(&p);
		void *out = NULL;
		size_t cap = 0, bytes = 0;
		int rc = node_plan_pack(&p, &out, &cap, &bytes);
		FUZZ_CHECK(rc == 0, "repacking an accepted plan: %d", rc);
		node_plan q;
		rc = node_plan_unpack(out, bytes, &q, err, sizeof err);
		FUZZ_CHECK(rc == 0, "a repacked plan is refused: %s", err);
		if (p.cmd == NODE_PLAN_STEP)
			FUZZ_CHECK(bytes == size && q.b.n_tokens == p.b.n_tokens &&
					   q.n_sample == p.n_sample && q.n_hist == p.n_hist &&
					   q.n_bias == p.n_bias &&
					   q.n_mask == p.n_mask && q.mask_words == p.mask_words &&
					   !memcmp(q.b.tokens, p.b.tokens, 4 * (size_t)p.b.n_tokens),
				   "repacked plan differs (%zu bytes, was %zu)", bytes, size);
		free(out);
	}
	free(buf);
	return 0;
}
