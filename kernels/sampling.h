/*
 * sampling.h — choose the next token from logits, and report log-probs.
 *
 * Per row, in this order (docs/sampling.md):
 *   0. logit bias (kern_logit_bias): listed tokens get a value added to
 *      their raw logit (OpenAI's logit_bias; -INFINITY bans: min_tokens'
 *      EOS mask);
 *   1. penalties on the raw logits, from the tokens the row has seen
 *      (kern_token_hist): repetition (HF/CTRL: a token in the prompt or
 *      generated has its logit l turned into l > 0 ? l / r : l * r), then
 *      frequency and presence (OpenAI: l -= frequency * n_gen, then
 *      l -= presence once if n_gen > 0; counted over generated tokens);
 *   2. greedy (temperature <= 0): the argmax of the penalised logits;
 *      otherwise softmax at the temperature, then the candidates kept are
 *      the intersection of top-k, top-p (the smallest most-likely prefix
 *      whose mass reaches top_p, measured on the whole distribution) and
 *      min-p (p >= min_p * p_max); all three are prefixes of the sorted
 *      distribution, so their order does not change the set;
 *   3. a draw with a uniform from Philox4x32-10 keyed by the request's
 *      seed and the token's position, so the same seed always gives the
 *      same tokens, on any backend and whatever else shares the batch.
 * Log-probs come from the model's raw distribution: log_softmax of the
 * logits before bias, penalties and temperature (OpenAI's and vLLM's default),
 * for the chosen token and the top_logprobs most likely ones (ties: the
 * lower id first).
 */
#ifndef KERN_SAMPLING_H
#define KERN_SAMPLING_H

#include <stdint.h>

#include "common/sampling.h"
#ifdef __cplusplus
extern "C" {
#endif

#define KERN_MAX_TOP_LOGPROBS SL_SAMPLING_MAX_TOP_LOGPROBS

/* The request's own sampling struct (common/sampling.h: fields, defaults
 * and ranges); the kernels also take repetition_penalty 0 as off, and
 * temperature <= 0 as greedy, top_k <= 0, top_p >= 1 and min_p <= 0 as off. */
typedef sl_sampling kern_sample_params;

/* The tokens each row has seen, for the penalties: row r's entries are
 * [off[r], off[r + 1]), one per distinct token id in the row's prompt and
 * generated tokens. Rows whose parameters have no penalty may have none.
 * off == NULL: no row has any. Host or device arrays, as the function. */
typedef struct kern_token_hist {
	const int32_t *off;       /* [n + 1], off[0] = 0, non-decreasing */
	const int32_t *ids;       /* [off[n]] token ids, distinct within a row */
	const int32_t *n_gen;     /* [off[n]] times the id was generated */
	const int32_t *in_prompt; /* [off[n]] 1 when the id is in the prompt */
} kern_token_hist;

/* Per-row logit bias: row r's entries are [off[r], off[r + 1]), token ids
 * distinct within a row, each with the value added to its logit before
 * the penalties (-INFINITY: the token cannot be drawn). off == NULL: no
 * row has any. Host or device arrays, as the function. */
typedef struct kern_logit_bias {
	const int32_t *off;       /* [n + 1], off[0] = 0, non-decreasing */
	const int32_t *ids;       /* [off[n]] */
	const float *bias;        /* [off[n]] */
} kern_logit_bias;

/* Log-prob outputs for n rows (host or device, as the function). A row
 * that wants none (kern_wants_logprobs) gets chosen 0; top slots past the row's kern_top_logprobs
 * (all of them without log-probs) get id -1 and log-prob 0. */
typedef struct kern_logprobs {
	float *chosen;            /* [n] the sampled token's */
	int32_t *top_ids;         /* [n, KERN_MAX_TOP_LOGPROBS] most likely first */
	float *top;               /* [n, KERN_MAX_TOP_LOGPROBS] their log-probs */
} kern_logprobs;

#ifdef __CUDACC__
#define KERN_SAMPLE_FN static __host__ __device__ __forceinline__
#else
#define KERN_SAMPLE_FN static inline
#endif

/* Whether p changes any logit before sampling. */
KERN_SAMPLE_FN int kern_has_penalty(const kern_sample_params *p)
{
	return (p->repetition_penalty > 0 && p->repetition_penalty != 1) ||
	       p->presence_penalty != 0 || p->frequency_penalty != 0;
}

/* Whether row p reports log-probs, and how many alternatives (at most
 * KERN_MAX_TOP_LOGPROBS and the vocabulary). */
KERN_SAMPLE_FN int kern_wants_logprobs(const kern_sample_params *p)
{
	return p->logprobs != 0 || p->top_logprobs > 0;
}

KERN_SAMPLE_FN int kern_top_logprobs(const kern_sample_params *p, int vocab)
{
	int n = p->top_logprobs < KERN_MAX_TOP_LOGPROBS ? p->top_logprobs : KERN_MAX_TOP_LOGPROBS;
	n = n < vocab ? n : vocab;
	return n > 0 ? n : 0;
}

/* One penalised logit, the same float operations on both backends (the
 * product is rounded before the subtraction: no fused multiply-add). */
KERN_SAMPLE_FN float kern_penalise(float l, int n_gen, int in_prompt, const kern_sample_params *p)
{
	float r = p->repetition_penalty;
	if (r > 0 && r != 1 && (in_prompt || n_gen > 0))
		l = l > 0 ? l / r : l * r;
#ifdef __CUDA_ARCH__
	float f = __fmul_rn(p->frequency_penalty, (float)n_gen);
#else
	float f = p->frequency_penalty * (float)n_gen;
#endif
	l = l - f;
	if (n_gen > 0)
		l = l - p->presence_penalty;
	return l;
}

/* Uniform in [0, 1) from Philox4x32-10(key = seed, counter = position). */
float kern_philox_uniform(uint64_t seed, uint64_t position);

/* Greedy: the lowest index among the maxima. */
int kern_argmax_cpu(const float *logits, int n);

/* Sample one token from logits[n] with no history and no log-probs;
 * `position` is the position the token will occupy. work: scratch of
 * kern_sample_work_bytes(n) (caller-owned). */
int kern_sample_cpu(const float *logits, int n, const kern_sample_params *p, uint64_t position,
		    void *work);
/* The reference for a batch: tokens_out[i] from logits row rows[i] (rows
 * NULL: row i) of [*, vocab], with params[i], positions[i], bias row i of
 * bias (NULL: none), history row i of hist (NULL: none) and log-probs
 * into row i of lp (NULL: none). */
void kern_sample_rows_cpu(int32_t *tokens_out, const kern_logprobs *lp, const float *logits,
			  const int32_t *rows, int n, int vocab, const kern_sample_params *params,
			  const int64_t *positions, const kern_logit_bias *bias,
			  const kern_token_hist *hist, void *work);
/* Row r of bias applied to logits[n] into out (a copy with the biased
 * entries changed); 0 when the row has none (out untouched). */
int kern_logit_bias_row_cpu(const float *logits, int n, const kern_logit_bias *bias, int r,
			    float *out);
/* Bytes of scratch the CPU sampler needs for a vocabulary of n. */
unsigned long kern_sample_work_bytes(int n);

#ifdef SL_HAVE_CUDA
typedef struct kern_sampler kern_sampler;  /* device scratch for n_seqs x vocab */
int kern_sampler_create(int max_seqs, int vocab, kern_sampler **out);
void kern_sampler_destroy(kern_sampler *s);
/* logits: device fp32 [n, vocab] (left unchanged); params, positions:
 * device arrays [n]; tokens_out: device int32 [n]; bias, hist: device
 * arrays (NULL or off NULL: none); lp: device outputs (NULL: none). */
int kern_sample_cuda(kern_sampler *s, int32_t *tokens_out, const float *logits, int n, int vocab,
		     const kern_sample_params *params, const int64_t *positions,
		     const kern_logit_bias *bias, const kern_token_hist *hist,
		     const kern_logprobs *lp, void *stream);
/* Greedy rows only: tokens_out[r] = the lowest index of row r's maximum
 * (kern_argmax_cpu), logits device fp32 [n, vocab], tokens_out device [n].
 * What kern_sample_cuda picks for rows at temperature <= 0 without
 * penalties, in one kernel and with no parameters on the device. */
int kern_argmax_rows_cuda(int32_t *tokens_out, const float *logits, int n, int vocab,
			  void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
