/*
 * paged.h — the flat token batch as kernels see it, and the paged KV layout.
 *
 * A step is a flat list of tokens from several sequences, no padding. Each
 * sequence's tokens are contiguous: [q_start, q_start + q_len), and they are
 * the last q_len tokens of its context of kv_len tokens, so query i of a
 * sequence sits at position kv_len - q_len + i and attends to cache slots of
 * positions 0 .. that position (causal).
 *
 * KV cache, per layer, K and V each: [n_blocks][n_kv_heads][block_tokens][head_dim].
 * A token at position p of a sequence lives in block block_tables[s][p / block_tokens]
 * at offset p % block_tokens; `slots` gives that as block * block_tokens + offset.
 * On the CUDA backend every pointer here is a device pointer.
 */
#ifndef KERN_PAGED_H
#define KERN_PAGED_H

#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct kern_paged_batch {
	int n_tokens, n_seqs;
	const int32_t *tokens;       /* [n_tokens] token ids */
	const int32_t *positions;    /* [n_tokens] */
	const int32_t *slots;        /* [n_tokens] cache slot of each token */
	const int32_t *q_start;      /* [n_seqs] */
	const int32_t *q_len;        /* [n_seqs] */
	const int32_t *kv_len;       /* [n_seqs] */
	const int32_t *block_tables; /* [n_seqs, max_blocks] */
	int max_blocks;
	int block_tokens;
	int max_q_len, max_kv_len;   /* bounds over the batch, for launch shapes */
	int min_q_len;               /* shortest q_len; 0 = not known (a backend's
				      * set_batch fills it in) */
} kern_paged_batch;

/* Offset in elements of (slot, kv head) in one layer's K or V pool. */
static inline long kern_kv_offset(int slot, int kv_head, int n_kv_heads, int block_tokens,
				  int head_dim)
{
	long blk = slot / block_tokens, off = slot % block_tokens;
	return ((blk * n_kv_heads + kv_head) * block_tokens + off) * (long)head_dim;
}

#ifdef __cplusplus
}
#endif
#endif
