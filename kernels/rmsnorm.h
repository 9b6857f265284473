/*
 * rmsnorm.h — RMSNorm, and the residual add fused with it.
 *   rmsnorm:      out = x / sqrt(mean(x^2) + eps) * w
 *   add_rmsnorm:  residual += delta; out = rmsnorm(residual) * w
 * The fused form is how every layer boundary runs: one pass over the
 * residual stream instead of two.
 */
#ifndef KERN_RMSNORM_H
#define KERN_RMSNORM_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* x, out: [n, dim]; w: [dim]. out may alias x. */
void kern_rmsnorm_cpu(float *out, const float *x, const float *w, int n, int dim, float eps);
/* residual, delta, out: [n, dim]; w: [dim]. w == NULL: only the add. */
void kern_add_rmsnorm_cpu(float *residual, const float *delta, const float *w, float *out,
			  int n, int dim, float eps);

#ifdef SL_HAVE_CUDA
#include "common/dtype.h"
/* GPU: x, out, w in dtype dt; the residual stream is kept in fp32. */
int kern_rmsnorm_cuda(void *out, const float *x, const void *w, int n, int dim, float eps,
		      sl_dtype dt, void *stream);
/* residual fp32 [n, dim] += delta (dtype dt); out (dtype dt) = rmsnorm(residual) * w. */
int kern_add_rmsnorm_cuda(float *residual, const void *delta, const void *w, void *out,
			  int n, int dim, float eps, sl_dtype dt, void *stream);
/* kern_add_rmsnorm_cuda (delta NULL: kern_rmsnorm_cuda, x only read) that
 * also writes out's fp8 activations for the W8A8 path (quant.h,
 * kern_act_fp8): q8 [n, dim] codes (8-byte aligned) and s8 [n] scales,
 * exactly as kern_quantize_act_fp8_cuda would make them from out (out
 * NULL: the codes and scales alone; quant.h, kern_qblas_act_mark_codes). w is
 * required. SL_ENOTSUP, nothing launched, when the row is not one the
 * register kernel holds (dim over 8192 or not a multiple of 8, or a
 * buffer unaligned). */
int kern_rmsnorm_fp8_cuda(float *x, const void *delta, const void *w, void *out, uint8_t *q8,
			  float *s8, int n, int dim, float eps, sl_dtype dt, void *stream);
/* kern_add_rmsnorm_cuda with delta the sum of n_parts (1 to
 * KERN_NORM_MAX_PARTS) fp32 partials
 * (parts [n_parts][n, dim], added in order: kern_qmatmul_parts_cuda's),
 * unrounded; q8 / s8 as kern_rmsnorm_fp8_cuda's (NULL: none). w required.
 * SL_ENOTSUP, nothing launched, where kern_add_rmsnorm_parts_fits says no
 * or a buffer is unaligned. */
#define KERN_NORM_MAX_PARTS 4
int kern_add_rmsnorm_parts_fits(int dim, int n_parts);
int kern_add_rmsnorm_parts_cuda(float *residual, const float *parts, int n_parts, const void *w,
				void *out, uint8_t *q8, float *s8, int n, int dim, float eps,
				sl_dtype dt, void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
