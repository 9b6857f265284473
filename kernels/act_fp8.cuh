/*
 * act_fp8.cuh — the W8A8 path's per-token fp8 activations (quant.h,
 * kern_quantize_act_fp8_cpu for the semantics), as device helpers for
 * every kernel that makes them: quant.cu's own pass over x, and the norm
 * and SiLU * up kernels that write x and can quantize it while the row
 * is still in their registers (rmsnorm.cu, swiglu.cu). One block a row.
 */
#ifndef KERN_ACT_FP8_CUH
#define KERN_ACT_FP8_CUH

#include <cuda_fp8.h>
#include <float.h>

#include "kernels/cuda_util.cuh"
#include "kernels/quant.h" /* KERN_FP8_E4M3_MAX */

/* v times the IEEE reciprocal of the row's scale (no FMA contraction),
 * round to nearest even, saturating */
__device__ __forceinline__ uint32_t act_fp8_code(float v, float inv)
{
	return (uint32_t)__nv_cvt_float_to_fp8(__fmul_rn(v, inv), __NV_SATFINITE, __NV_E4M3);
}

/* 8 values -> 8 codes at one 8-byte store */
__device__ __forceinline__ void act_fp8x8(uint8_t *q, const float f[8], float inv)
{
	uint32_t lo = 0, hi = 0;
#pragma unroll
	for (int j = 0; j < 4; j++) {
		lo |= act_fp8_code(f[j], inv) << (8 * j);
		hi |= act_fp8_code(f[4 + j], inv) << (8 * j);
	}
	*reinterpret_cast<uint2 *>(q) = make_uint2(lo, hi);
}

/* From each thread's max |x| over its part of the row: the row's scale
 * s = max / 448, written to *s by thread 0, and the 1 / s the codes take;
 * 0 when s is zero or subnormal (the codes are then 0). Contains
 * __syncthreads: every thread of the block calls it. */
__device__ __forceinline__ float act_fp8_scale(float *s, float m)
{
	m = kern_block_max(m);
	const float sc = __fdiv_rn(m, KERN_FP8_E4M3_MAX);
	if (threadIdx.x == 0)
		*s = sc;
	return sc >= FLT_MIN ? __frcp_rn(sc) : 0.0f;
}

/* A row of cols values held in registers, vector r of each thread at
 * element 8 * (threadIdx.x + r * blockDim.x) (those at or past cols
 * unused): its codes to q [cols] and its scale to *s. */
template <int R>
__device__ __forceinline__ void act_fp8_row(uint8_t *q, float *s, const float (&f)[R][8], int cols)
{
	float m = 0;
#pragma unroll
	for (int r = 0; r < R; r++) {
		const int j = (threadIdx.x + r * blockDim.x) * 8;
		if (j < cols)
#pragma unroll
			for (int k = 0; k < 8; k++)
				m = fmaxf(m, fabsf(f[r][k]));
	}
	const float inv = act_fp8_scale(s, m);
#pragma unroll
	for (int r = 0; r < R; r++) {
		const int j = (threadIdx.x + r * blockDim.x) * 8;
		if (j < cols)
			act_fp8x8(q + j, f[r], inv);
	}
}

#endif
