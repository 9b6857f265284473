/* sampling.c — CPU reference sampling: argmax, temperature, top-k, top-p. */
#include "sampling.h"

#include "philox.h"

#include <math.h>
#include <stdlib.h>

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

unsigned long kern_sample_work_bytes(int n) { return (unsigned long)n * sizeof(prob_idx); }

/* Descending probability, ascending index on ties: a total order, so the
 * kept set never depends on the sort's stability. */
static int by_prob_desc(const void *a, const void *b)
{
	const prob_idx *x = a, *y = b;
	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return (x->i > y->i) - (x->i < y->i);
}

/* Number of leading candidates that survive top-k then top-p. */
static int nucleus_size(const prob_idx *c, int n, int top_k, float top_p)
{
	int keep = (top_k > 0 && top_k < n) ? top_k : n;
	if (top_p >= 1.0f)
		return keep;
	double cum = 0;
	int k = 0;
	while (k < keep) {
		cum += c[k++].p;
		if (cum >= top_p)
			break;
	}
	return k;
}

int kern_sample_cpu(const float *logits, int n, const kern_sample_params *p, uint64_t position,
		    void *work)
{
	if (p->temperature <= 0)
		return kern_argmax_cpu(logits, n);
	prob_idx *c = work;
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
	int keep = nucleus_size(c, n, p->top_k, p->top_p);
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
