/*
 * swiglu.h — the MLP's gate: out = silu(gate) * up, reading the fused
 * gate/up projection output laid out per token as [gate | up].
 */
#ifndef KERN_SWIGLU_H
#define KERN_SWIGLU_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* gate_up: [n, 2 * hidden]; out: [n, hidden]. */
void kern_silu_mul_cpu(float *out, const float *gate_up, int n, int hidden);

#ifdef SL_HAVE_CUDA
#include "common/dtype.h"
int kern_silu_mul_cuda(void *out, const void *gate_up, int n, int hidden, sl_dtype dt,
		       void *stream);
/* kern_silu_mul_cuda that also writes out's fp8 activations for the W8A8
 * path (quant.h, kern_act_fp8): q8 [n, hidden] codes (8-byte aligned) and
 * s8 [n] scales, exactly as kern_quantize_act_fp8_cuda would make them
 * from out. out NULL: the codes and scales alone (the values are not
 * stored; quant.h, kern_qblas_act_mark_codes). SL_ENOTSUP, nothing
 * launched, when hidden is over 16384, not a multiple of 8, or a buffer
 * unaligned. */
int kern_silu_mul_fp8_cuda(void *out, const void *gate_up, uint8_t *q8, float *s8, int n,
			   int hidden, sl_dtype dt, void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
