/*
 * sampling.c — CPU reference sampling (see sampling.h for the order of
 * operations): logit bias, penalties, argmax or temperature softmax with top-k, top-p
 * and min-p, the Philox draw, and log-probs of the raw distribution.
 * Plain loops: this is the specification the CUDA sampler is tested against.
 */
#include "kernels/sampling.h"

#include "kernels/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float kern_philox_uniform(uint64_t seed, uint64_t position)
{
	return philox_uniform(seed, position);
}

int kern_argmax_cpu(const float *logits, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

typedef struct prob_idx {
	float p;
	int i;
} prob_idx;

/* The sort's candidates, then the penalised logits. */
unsigned long kern_sample_work_bytes(int n)
{
	return (unsigned long)n * (sizeof(prob_idx) + sizeof(float));
}

/* Descending probability, ascending index on ties: a total order, so the
 * kept set never depends on the sort's stability. */
static int by_prob_desc(const void *a, const void *b)
{
	const prob_idx *x = a, *y = b;
	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return (x->i > y->i) - (x->i < y->i);
}

/* Number of leading candidates that survive top-k, top-p and min-p. */
static int nucleus_size(const prob_idx *c, int n, const kern_sample_params *p)
{
	int keep = (p->top_k > 0 && p->top_k < n) ? p->top_k : n;
	if (p->top_p < 1.0f) {
		double cum = 0;
		int k = 0;
		while (k < keep) {
			cum += c[k++].p;
			if (cum >= p->top_p)
				break;
		}
		keep = k;
	}
	if (p->min_p > 0) {
		float thr = p->min_p * c[0].p;
		int k = 1; /* the most likely token always passes (min_p <= 1) */
		while (k < keep && c[k].p >= thr)
			k++;
		keep = k;
	}
	return keep;
}

/* Temperature softmax, truncation and the Philox draw over logits[n]. */
static int draw(const float *logits, int n, const kern_sample_params *p, uint64_t position,
		prob_idx *c)
{
	float mx = logits[kern_argmax_cpu(logits, n)];
	double sum = 0;
	for (int i = 0; i < n; i++) {
		c[i].p = expf((logits[i] - mx) / p->temperature);
		c[i].i = i;
		sum += c[i].p;
	}
	for (int i = 0; i < n; i++)
		c[i].p = (float)(c[i].p / sum);
	qsort(c, n, sizeof *c, by_prob_desc);
	int keep = nucleus_size(c, n, p);
	double total = 0;
	for (int k = 0; k < keep; k++)
		total += c[k].p;
	double u = kern_philox_uniform(p->seed, position) * total, acc = 0;
	for (int k = 0; k < keep; k++) {
		acc += c[k].p;
		if (u < acc)
			return c[k].i;
	}
	return c[keep - 1].i;
}

int kern_logit_bias_row_cpu(const float *logits, int n, const kern_logit_bias *bias, int r,
			    float *out)
{
	if (!bias || !bias->off || bias->off[r + 1] == bias->off[r])
		return 0;
	memcpy(out, logits, sizeof(float) * n);
	for (int e = bias->off[r]; e < bias->off[r + 1]; e++)
		out[bias->ids[e]] = logits[bias->ids[e]] + bias->bias[e];
	return 1;
}

/* Row r's penalised copy of logits in pen, or logits itself when nothing
 * changes. logits may be pen itself (a biased row): each history id is
 * read, then written, once. */
static const float *penalise_row(const float *logits, int n, const kern_sample_params *p,
				 const kern_token_hist *h, int r, float *pen)
{
	if (!h || !h->off || !kern_has_penalty(p) || h->off[r + 1] == h->off[r])
		return logits;
	if (logits != pen)
		memcpy(pen, logits, sizeof(float) * n);
	for (int e = h->off[r]; e < h->off[r + 1]; e++) {
		int id = h->ids[e];
		pen[id] = kern_penalise(logits[id], h->n_gen[e], h->in_prompt[e], p);
	}
	return pen;
}

/* Log-probs of row r from its raw logits: log_softmax = (l - max) -
 * log(sum exp(l - max)), the sum in double; the top_logprobs largest
 * logits by insertion (ascending ids, so an equal logit never displaces
 * the lower id before it). */
static void logprobs_row(const float *logits, int n, const kern_sample_params *p, int token,
			 const kern_logprobs *lp, int r)
{
	int32_t *ids = lp->top_ids + (size_t)r * KERN_MAX_TOP_LOGPROBS;
	float *top = lp->top + (size_t)r * KERN_MAX_TOP_LOGPROBS;
	for (int k = 0; k < KERN_MAX_TOP_LOGPROBS; k++)
		ids[k] = -1, top[k] = 0;
	lp->chosen[r] = 0;
	if (!kern_wants_logprobs(p))
		return;
	float mx = logits[kern_argmax_cpu(logits, n)];
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += expf(logits[i] - mx);
	double lse = log(sum);
	int want = kern_top_logprobs(p, n), have = 0;
	for (int i = 0; i < n && want > 0; i++) {
		if (have == want && !(logits[i] > logits[ids[want - 1]]))
			continue;
		int k = have < want ? have++ : want - 1;
		while (k > 0 && logits[i] > logits[ids[k - 1]]) {
			ids[k] = ids[k - 1];
			k--;
		}
		ids[k] = i;
	}
	for (int k = 0; k < want; k++)
		top[k] = (float)((double)(logits[ids[k]] - mx) - lse);
	lp->chosen[r] = (float)((double)(logits[token] - mx) - lse);
}

int kern_sample_cpu(const float *logits, int n, const kern_sample_params *p, uint64_t position,
		    void *work)
{
	if (p->temperature <= 0)
		return kern_argmax_cpu(logits, n);
	return draw(logits, n, p, position, work);
}

void kern_sample_rows_cpu(int32_t *tokens_out, const kern_logprobs *lp, const float *logits,
			  const int32_t *rows, int n, int vocab, const kern_sample_params *params,
			  const int64_t *positions, const kern_logit_bias *bias,
			  const kern_token_hist *hist, void *work)
{
	prob_idx *c = work;
	float *pen = (float *)(c + vocab);
	for (int r = 0; r < n; r++) {
		const float *raw = logits + (size_t)(rows ? rows[r] : r) * vocab;
		const kern_sample_params *p = &params[r];
		const float *b = kern_logit_bias_row_cpu(raw, vocab, bias, r, pen) ? pen : raw;
		const float *l = penalise_row(b, vocab, p, hist, r, pen);
		tokens_out[r] = kern_sample_cpu(l, vocab, p, (uint64_t)positions[r], c);
		if (lp)
			logprobs_row(raw, vocab, p, tokens_out[r], lp, r);
	}
}
