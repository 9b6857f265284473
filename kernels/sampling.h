/*
 * sampling.h — choose the next token from logits: greedy (temperature 0),
 * or temperature, top-k and top-p (nucleus) sampling with a random number
 * drawn from Philox4x32-10 keyed by the request's seed and the token's
 * position, so the same seed always gives the same tokens, on any backend
 * and whatever else shares the batch.
 */
#ifndef KERN_SAMPLING_H
#define KERN_SAMPLING_H

#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct kern_sample_params {
	float temperature;  /* <= 0: greedy argmax */
	int top_k;          /* <= 0: off */
	float top_p;        /* >= 1: off */
	uint64_t seed;
} kern_sample_params;

/* Uniform in [0, 1) from Philox4x32-10(key = seed, counter = position). */
float kern_philox_uniform(uint64_t seed, uint64_t position);

/* Greedy: the lowest index among the maxima. */
int kern_argmax_cpu(const float *logits, int n);

/* Sample one token from logits[n]; `position` is the position the token
 * will occupy. work: scratch of n floats + n ints (caller-owned). */
int kern_sample_cpu(const float *logits, int n, const kern_sample_params *p, uint64_t position,
		    void *work);
/* Bytes of scratch kern_sample_cpu needs for a vocabulary of n. */
unsigned long kern_sample_work_bytes(int n);

#ifdef SL_HAVE_CUDA
typedef struct kern_sampler kern_sampler;  /* device scratch for n_seqs x vocab */
int kern_sampler_create(int max_seqs, int vocab, kern_sampler **out);
void kern_sampler_destroy(kern_sampler *s);
/* logits: device fp32 [n, vocab]; params, positions: device arrays [n];
 * tokens_out: device int32 [n]. */
int kern_sample_cuda(kern_sampler *s, int32_t *tokens_out, const float *logits, int n, int vocab,
		     const kern_sample_params *params, const int64_t *positions, void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
