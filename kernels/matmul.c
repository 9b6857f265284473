/* matmul.c — CPU reference linear layer (fp32, OpenMP over output rows). */
#include "matmul.h"

#include <stddef.h>

void kern_matmul_cpu(float *out, const float *x, const float *w, int n, int in_dim, int out_dim)
{
#pragma omp parallel for schedule(static) if ((long)n * out_dim * in_dim > 1 << 18)
	for (int o = 0; o < out_dim; o++) {
		const float *wr = w + (size_t)o * in_dim;
		for (int i = 0; i < n; i++) {
			const float *xr = x + (size_t)i * in_dim;
			float acc = 0;
#pragma omp simd reduction(+ : acc)
			for (int k = 0; k < in_dim; k++)
				acc += xr[k] * wr[k];
			out[(size_t)i * out_dim + o] = acc;
		}
	}
}
