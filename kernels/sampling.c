/* sampling.c — CPU reference sampling: argmax, temperature, top-k, top-p. */
#include "sampling.h"

#include <math.h>
#include <stdlib.h>

/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3"), written out here so the CPU and GPU draw identical numbers. */
static void philox_round(uint32_t ctr[4], const uint32_t key[2])
{
	uint64_t p0 = (uint64_t)0xD2511F53u * ctr[0];
	uint64_t p1 = (uint64_t)0xCD9E8D57u * ctr[2];
	uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
	uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
	uint32_t n0 = hi1 ^ ctr[1] ^ key[0], n2 = hi0 ^ ctr[3] ^ key[1];
	ctr[0] = n0;
	ctr[1] = lo1;
	ctr[2] = n2;
	ctr[3] = lo0;
}

float kern_philox_uniform(uint64_t seed, uint64_t position)
{
	uint32_t ctr[4] = {(uint32_t)position, (uint32_t)(position >> 32), 0, 0};
	uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
	for (int r = 0; r < 10; r++) {
		philox_round(ctr, key);
		key[0] += 0x9E3779B9u;
		key[1] += 0xBB67AE85u;
	}
	return (float)(ctr[0] >> 8) * (1.0f / 16777216.0f);
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
