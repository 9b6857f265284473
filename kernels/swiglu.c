/* swiglu.c — CPU reference for silu(gate) * up. */
#include "kernels/swiglu.h"

#include <math.h>
#include <stddef.h>

void kern_silu_mul_cpu(float *out, const float *gate_up, int n, int hidden)
{
	for (int i = 0; i < n; i++) {
		const float *g = gate_up + (size_t)i * 2 * hidden, *u = g + hidden;
		float *o = out + (size_t)i * hidden;
		for (int j = 0; j < hidden; j++)
			o[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
	}
}
