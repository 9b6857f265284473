/* random.c — CPU reference random fill (Philox keyed by seed and index). */
#include "kernels/random.h"

#include "kernels/sampling.h"

void kern_fill_uniform_cpu(float *dst, size_t n, float mean, float std, uint64_t seed)
{
	float a = std * 1.7320508f; /* uniform on [-a, a] has standard deviation std */
	for (size_t i = 0; i < n; i++)
		dst[i] = mean + a * (2 * kern_philox_uniform(seed, i) - 1);
}
