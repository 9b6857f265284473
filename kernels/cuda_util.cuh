/*
 * cuda_util.cuh — device helpers shared by the kernels/<op>.cu files: fp32 <->
 * storage dtype conversions (__half, __nv_bfloat16), 16-byte vector loads
 * and stores of 8 storage elements, warp and block reductions, and the
 * host-side dtype dispatch. Header-only, included by .cu files only.
 *
 * Conventions every kernel here follows: storage is F16 or BF16, math is
 * fp32 (or double where the CPU reference uses double), a vector path is
 * taken only when the row width is a multiple of 8 and every base pointer
 * is 16-byte aligned, with a scalar path for everything else.
 */
#ifndef KERN_CUDA_UTIL_CUH
#define KERN_CUDA_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "checks.h"
#include "dtype.h"

/* ---- scalar conversions (round to nearest even, as dtype.c does) ---- */

__device__ __forceinline__ float kern_to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float kern_to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float kern_to_f32(float v) { return v; }

template <typename T> __device__ __forceinline__ T kern_from_f32(float v);
template <> __device__ __forceinline__ __half kern_from_f32<__half>(float v)
{
	return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 kern_from_f32<__nv_bfloat16>(float v)
{
	return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ float kern_from_f32<float>(float v) { return v; }

/* ---- 16-byte vectors: 8 storage elements of 2 bytes ---- */

#define KERN_VEC 8 /* storage elements per 16-byte vector */

__host__ __device__ __forceinline__ bool kern_aligned16(const void *p)
{
	return ((uintptr_t)p & 15u) == 0;
}

/* p must be 16-byte aligned. */
template <typename T> __device__ __forceinline__ void kern_load8(const T *p, float f[8])
{
	static_assert(sizeof(T) == 2, "8-wide vectors are for 2-byte dtypes");
	uint4 raw = *reinterpret_cast<const uint4 *>(p);
	const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
	for (int i = 0; i < 8; i++)
		f[i] = kern_to_f32(e[i]);
}

template <typename T> __device__ __forceinline__ void kern_store8(T *p, const float f[8])
{
	static_assert(sizeof(T) == 2, "8-wide vectors are for 2-byte dtypes");
	uint4 raw;
	T *e = reinterpret_cast<T *>(&raw);
#pragma unroll
	for (int i = 0; i < 8; i++)
		e[i] = kern_from_f32<T>(f[i]);
	*reinterpret_cast<uint4 *>(p) = raw;
}

/* 8 fp32 values as two float4 (p 16-byte aligned). */
__device__ __forceinline__ void kern_load8f(const float *p, float f[8])
{
	float4 a = reinterpret_cast<const float4 *>(p)[0];
	float4 b = reinterpret_cast<const float4 *>(p)[1];
	f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
	f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

__device__ __forceinline__ void kern_store8f(float *p, const float f[8])
{
	reinterpret_cast<float4 *>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
	reinterpret_cast<float4 *>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}

/* ---- reductions ---- */

template <typename T> __device__ __forceinline__ T kern_warp_sum(T v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* Sum over the block; every thread gets the result. blockDim.x must be a
 * multiple of 32 (at most 1024). Contains __syncthreads: call it from
 * every thread of the block. */
template <typename T> __device__ __forceinline__ T kern_block_sum(T v)
{
	__shared__ T part[32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	v = kern_warp_sum(v);
	__syncthreads(); /* part[] may still be read by a previous call */
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	v = lane < nwarps ? part[lane] : (T)0;
	return kern_warp_sum(v);
}

/* ---- host side ---- */

/* Calls FN<__half>(...) or FN<__nv_bfloat16>(...) for dt and returns its
 * result; SL_ENOTSUP (logged) for any other dtype. */
#define KERN_DISPATCH_DT(dt, FN, ...)                                                        \
	do {                                                                                 \
		switch (dt) {                                                                \
		case SL_DT_F16: return FN<__half>(__VA_ARGS__);                              \
		case SL_DT_BF16: return FN<__nv_bfloat16>(__VA_ARGS__);                      \
		default:                                                                     \
			sl_log(SL_LOG_ERROR, "cuda", "%s: unsupported dtype %s", __func__,   \
			       sl_dtype_name(dt));                                           \
			return SL_ENOTSUP;                                                   \
		}                                                                            \
	} while (0)

static inline cudaStream_t kern_stream(void *s) { return (cudaStream_t)s; }

#endif
