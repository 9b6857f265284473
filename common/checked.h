/*
 * checked.h — overflow-checked size arithmetic for parsers of untrusted
 * files (safetensors, GGUF) and their writers: every count, offset and
 * size read from a file goes through these before it is used.
 */
#ifndef SL_CHECKED_H
#define SL_CHECKED_H

#include <stdint.h>

/* a * b into *out; -1 on overflow. */
static inline int sl_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	if (a && b > UINT64_MAX / a)
		return -1;
	*out = a * b;
	return 0;
}

/* a + b into *out; -1 on overflow. */
static inline int sl_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	if (b > UINT64_MAX - a)
		return -1;
	*out = a + b;
	return 0;
}

/* Number of elements of a shape. Zero dims make it 0, but the product of
 * the other dims must still fit (and stay within INT64_MAX); -1 if not. */
static inline int sl_shape_numel(int ndim, const int64_t *shape, uint64_t *out)
{
	uint64_t p = 1;
	int zero = 0;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] == 0)
			zero = 1;
		else if (shape[i] < 0 || sl_mul_u64(p, (uint64_t)shape[i], &p) || p > INT64_MAX)
			return -1;
	}
	*out = zero ? 0 : p;
	return 0;
}

#endif
