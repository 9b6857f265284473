/*
 * rope.cuh — the device side of RoPE + KV write that two kernels share:
 * rope.cu's own kernel and the QKV projection's fused epilogue
 * (epilogue.cuh, KERN_EPI_ROPE). One rotation formula, one cache layout,
 * one fp8 rounding, so both write the same bits. Semantics: kernels/rope.c.
 */
#ifndef KERN_ROPE_CUH
#define KERN_ROPE_CUH

#include <cuda_fp8.h>

#include <type_traits>

#include "kernels/cuda_util.cuh"

/* kern_kv_offset (paged.h) on the device. */
__device__ __forceinline__ long kv_offset(int slot, int kv_head, int n_kv_heads, int block_tokens,
					  int head_dim)
{
	long blk = slot / block_tokens, off = slot % block_tokens;
	return ((blk * n_kv_heads + kv_head) * block_tokens + off) * (long)head_dim;
}

/* fp32 -> fp8 E4M3 code, as kern_f32_to_fp8_e4m3: round to nearest even,
 * saturating at +-448, NaN -> 0x7F. */
__device__ __forceinline__ uint8_t rope_fp8(float v)
{
	return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

/* Element i of a head and its partner i + head_dim/2 (rotate_half), turned
 * by the angle whose cosine and sine are c and s. The fused multiply-adds
 * are spelled out: left to the compiler, the contraction differed between
 * rope.cu's kernel and the GEMV epilogue in the last bit. */
__device__ __forceinline__ void rope_turn(float *a, float *b, float c, float s)
{
	const float ak = *a, bk = *b;
	*a = __fmaf_rn(ak, c, -__fmul_rn(bk, s));
	*b = __fmaf_rn(bk, c, __fmul_rn(ak, s));
}

/* V values into the cache at dst: C is the run dtype T, or uint8_t (E4M3). */
template <typename C, int V> __device__ __forceinline__ void cache_put(C *dst, const float *f)
{
	if constexpr (std::is_same<C, uint8_t>::value) {
		if constexpr (V == 8) {
			uint32_t lo = 0, hi = 0;
#pragma unroll
			for (int j = 0; j < 4; j++) {
				lo |= (uint32_t)rope_fp8(f[j]) << (8 * j);
				hi |= (uint32_t)rope_fp8(f[4 + j]) << (8 * j);
			}
			*reinterpret_cast<uint2 *>(dst) = make_uint2(lo, hi);
		} else {
			dst[0] = rope_fp8(f[0]);
		}
	} else if constexpr (V == 8) {
		kern_store8(dst, f);
	} else {
		dst[0] = kern_from_f32<C>(f[0]);
	}
}

#endif
