/*
 * plan.h — one step as the leader decides it, in a form every rank of the
 * group can run: the flat token batch (tokens, positions, KV slots,
 * per-sequence q_start/q_len/kv_len and block tables), which rows need
 * logits, which of those to sample with what parameters (and, for rows
 * with penalties, the tokens each has seen), and how the sequences split
 * into pipeline micro-batches. Packed into one buffer so
 * the leader sends it to each rank as one message.
 */
#ifndef NODE_PLAN_H
#define NODE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "formats/config.h"
#include "kernels/paged.h"
#include "kernels/sampling.h"

/* Logit bias entries one sample row may carry: its logit_bias, and while
 * min_tokens holds, a ban of each of its stop ids and the model's EOS ids. */
#define NODE_PLAN_BIAS_PER_ROW \
	(SL_SAMPLING_MAX_LOGIT_BIAS + SL_SAMPLING_MAX_STOP_IDS_NODE + MODEL_MAX_EOS)

/* STOP: leave the worker loop. PING: nothing to run, the leader is alive
 * (sent while it idles, so the workers' watchdogs can tell an idle group
 * from a lost leader: node/watchdog.h); packed with an empty batch as STOP. */
enum { NODE_PLAN_STEP = 1, NODE_PLAN_STOP = 2, NODE_PLAN_PING = 3 };

typedef struct node_plan {
	int32_t cmd;
	int32_t want_logits;          /* return every logits row to the leader */
	kern_paged_batch b;           /* host arrays */
	int32_t n_rows;
	const int32_t *rows;          /* [n_rows] token indices, ascending, whose logits are computed */
	int32_t n_sample;
	const int32_t *sample_rows;   /* [n_sample] indices into rows to sample from */
	const kern_sample_params *sampling; /* [n_sample] */
	const int64_t *sample_pos;    /* [n_sample] position each sampled token will take */
	int32_t n_hist;               /* penalty history entries, at most the step's max_hist */
	kern_token_hist hist;         /* per sample row (off: [n_sample + 1], the rest [n_hist]);
				       * off NULL when no row has a penalty */
	int32_t n_bias;               /* logit bias entries, at most n_sample * NODE_PLAN_BIAS_PER_ROW */
	kern_logit_bias bias;         /* per sample row (off: [n_sample + 1], the rest [n_bias]);
				       * off NULL when no row has any */
	int32_t n_micro;
	const int32_t *micro_seq0;    /* [n_micro + 1] sequence boundaries of micro-batches */
	/* Constrained decoding (kernels/logits_mask.h): the sampled rows whose
	 * request has a grammar, and the tokens each may take this step. */
	int32_t n_mask;
	int32_t mask_words;           /* words per mask: kern_mask_words(vocab); 0 when n_mask 0 */
	const int32_t *mask_rows;     /* [n_mask] indices into rows, as sample_rows */
	const uint32_t *masks;        /* [n_mask, mask_words] */
	/* Leader only, never packed: fills masks. Called as late as the
	 * plan allows (node/step.c): after the forward is launched when
	 * the leader samples, so the host work overlaps the device's;
	 * before the plan leaves when another rank samples. */
	int (*fill_masks)(void *ctx);
	void *fill_ctx;
} node_plan;

/* Bytes of the largest plan with these limits (tokens, sequences, block
 * table entries per sequence, logits rows, penalty history entries; logit
 * bias entries: NODE_PLAN_BIAS_PER_ROW a sequence): a buffer this large
 * never grows in node_plan_pack or the worker's receive. */
size_t node_plan_max_bytes(int tokens, int seqs, int blocks_per_seq, int rows, int hist);
/* Bytes the masks of up to seqs constrained rows add to that. */
size_t node_plan_mask_bytes(int seqs, int mask_words);
/* Serialise p into *buf (grown as needed). */
int node_plan_pack(const node_plan *p, void **buf, size_t *cap, size_t *bytes);
/* Parse a packed plan; p's pointers point into buf. Every count and
 * index is checked against the message size and each other. */
int node_plan_unpack(const void *buf, size_t bytes, node_plan *p, char *err, size_t errlen);

#endif
