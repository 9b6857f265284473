/* rmsnorm.c — CPU reference for RMSNorm and residual-add + RMSNorm. */
#include "kernels/rmsnorm.h"

#include <math.h>
#include <stddef.h>

static void norm_row(float *out, const float *x, const float *w, int dim, float eps)
{
	double ss = 0;
	for (int j = 0; j < dim; j++)
		ss += (double)x[j] * x[j];
	float inv = 1.0f / sqrtf((float)(ss / dim) + eps);
	for (int j = 0; j < dim; j++)
		out[j] = x[j] * inv * w[j];
}

void kern_rmsnorm_cpu(float *out, const float *x, const float *w, int n, int dim, float eps)
{
	for (int i = 0; i < n; i++)
		norm_row(out + (size_t)i * dim, x + (size_t)i * dim, w, dim, eps);
}

void kern_add_rmsnorm_cpu(float *residual, const float *delta, const float *w, float *out,
			  int n, int dim, float eps)
{
	for (int i = 0; i < n; i++) {
		float *r = residual + (size_t)i * dim;
		const float *d = delta + (size_t)i * dim;
		for (int j = 0; j < dim; j++)
			r[j] += d[j];
		if (w)
			norm_row(out + (size_t)i * dim, r, w, dim, eps);
	}
}
