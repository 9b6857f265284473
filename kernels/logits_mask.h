/*
 * logits_mask.h — constrained decoding's token mask on logits rows (issue
 * 37): for each constrained row, every logit whose bit in the row's mask
 * is 0 becomes -inf, so no sampler (greedy or not) can pick the token.
 * Masks are int32 words, bit (v % 32) of word (v / 32) for token v
 * (grammar/grammar.h fills them); rows without a constraint are simply
 * not listed, and cost nothing. Kept apart from logit_bias, which adds to
 * logits; this one only forbids.
 */
#ifndef KERN_LOGITS_MASK_H
#define KERN_LOGITS_MASK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline int kern_mask_words(int vocab) { return (vocab + 31) / 32; }

/* For i in [0, n): logits row rows[i] of [*, vocab] keeps token v where
 * bit v of masks[i * kern_mask_words(vocab) ...] is set, -inf elsewhere. */
void kern_logits_mask_cpu(float *logits, const int32_t *rows, const uint32_t *masks, int n,
			  int vocab);

#ifdef SL_HAVE_CUDA
/* The same on the device: logits, rows and masks device arrays. */
int kern_logits_mask_cuda(float *logits, const int32_t *rows, const uint32_t *masks, int n,
			  int vocab, void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
