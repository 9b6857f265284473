/*
 * swiglu.h — the MLP's gate: out = silu(gate) * up, reading the fused
 * gate/up projection output laid out per token as [gate | up].
 */
#ifndef KERN_SWIGLU_H
#define KERN_SWIGLU_H
#ifdef __cplusplus
extern "C" {
#endif

/* gate_up: [n, 2 * hidden]; out: [n, hidden]. */
void kern_silu_mul_cpu(float *out, const float *gate_up, int n, int hidden);

#ifdef SL_HAVE_CUDA
#include "dtype.h"
int kern_silu_mul_cuda(void *out, const void *gate_up, int n, int hidden, sl_dtype dt,
		       void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
