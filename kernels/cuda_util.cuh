/*
 * cuda_util.cuh — device helpers shared by the kernels/<op>.cu files: fp32 <->
 * storage dtype conversions (__half, __nv_bfloat16), 16-byte vector loads
 * and stores of 8 storage elements, warp and block reductions, and the
 * host-side dtype dispatch. Header-only, included by .cu files only; every
 * kernel takes these from here (tensor-core instructions: mma.cuh).
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

#include "common/checks.h"
#include "common/dtype.h"

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

/* Two fp32 values as a packed pair of storage elements, x in the low half:
 * one 32-bit register of an MMA fragment, or two adjacent outputs. */
template <typename T> __device__ __forceinline__ uint32_t kern_pack2(float x, float y);
template <> __device__ __forceinline__ uint32_t kern_pack2<__half>(float x, float y)
{
	__half2 h = __floats2half2_rn(x, y);
	return *reinterpret_cast<const uint32_t *>(&h);
}
template <> __device__ __forceinline__ uint32_t kern_pack2<__nv_bfloat16>(float x, float y)
{
	__nv_bfloat162 h = __floats2bfloat162_rn(x, y);
	return *reinterpret_cast<const uint32_t *>(&h);
}

/* ---- 16-byte vectors: 8 storage elements of 2 bytes ---- */

#define KERN_VEC 8 /* storage elements per 16-byte vector */

__host__ __device__ __forceinline__ bool kern_aligned16(const void *p)
{
	return ((uintptr_t)p & 15u) == 0;
}

/* 8 values of a 2-byte T packed in 16 bytes, as fp32, and back: for a
 * kernel that holds its loads packed until it uses them. */
template <typename T> __device__ __forceinline__ void kern_unpack8(const uint4 &raw, float f[8])
{
	static_assert(sizeof(T) == 2, "8-wide vectors are for 2-byte dtypes");
	const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
	for (int i = 0; i < 8; i++)
		f[i] = kern_to_f32(e[i]);
}

template <typename T> __device__ __forceinline__ uint4 kern_pack8(const float f[8])
{
	static_assert(sizeof(T) == 2, "8-wide vectors are for 2-byte dtypes");
	uint4 raw;
	T *e = reinterpret_cast<T *>(&raw);
#pragma unroll
	for (int i = 0; i < 8; i++)
		e[i] = kern_from_f32<T>(f[i]);
	return raw;
}

/* p must be 16-byte aligned. */
template <typename T> __device__ __forceinline__ void kern_load8(const T *p, float f[8])
{
	const uint4 raw = *reinterpret_cast<const uint4 *>(p); /* one 16-byte load */
	kern_unpack8<T>(raw, f);
}

template <typename T> __device__ __forceinline__ void kern_store8(T *p, const float f[8])
{
	*reinterpret_cast<uint4 *>(p) = kern_pack8<T>(f);
}

/* f rounded to T and back: the values kern_store8 writes. */
template <typename T> __device__ __forceinline__ void kern_round8(float f[8])
{
#pragma unroll
	for (int i = 0; i < 8; i++)
		f[i] = kern_to_f32(kern_from_f32<T>(f[i]));
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

__device__ __forceinline__ float kern_warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Over the four lanes of a quad (lanes 4k .. 4k+3: one row of an m16n8 MMA
 * accumulator, see mma.cuh), offsets 1 then 2. The order is part of the
 * result: the attention kernels' sums are defined by it. */
__device__ __forceinline__ float kern_quad_sum(float v)
{
	v += __shfl_xor_sync(0xffffffffu, v, 1);
	v += __shfl_xor_sync(0xffffffffu, v, 2);
	return v;
}

__device__ __forceinline__ float kern_quad_max(float v)
{
	v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
	v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
	return v;
}

/* Argmax over the warp, lowest index among equal values; every lane gets
 * the winner in (*v, *i). */
__device__ __forceinline__ void kern_warp_argmax(float *v, int *i)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, *v, o);
		int oi = __shfl_xor_sync(0xffffffffu, *i, o);
		if (ov > *v || (ov == *v && oi < *i)) {
			*v = ov;
			*i = oi;
		}
	}
}

/* Sum (MAX: max) over the block; every thread gets the result. blockDim.x
 * must be a multiple of 32 (at most 1024). Contains __syncthreads: call
 * it from every thread of the block. */
template <bool MAX, typename T> __device__ __forceinline__ T kern_block_reduce(T v)
{
	__shared__ T part[32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	if constexpr (MAX)
		v = kern_warp_max(v);
	else
		v = kern_warp_sum(v);
	__syncthreads(); /* part[] may still be read by a previous call */
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	if constexpr (MAX)
		return kern_warp_max(lane < nwarps ? part[lane] : __int_as_float(0xff800000) /* -inf */);
	else
		return kern_warp_sum(lane < nwarps ? part[lane] : (T)0);
}

template <typename T> __device__ __forceinline__ T kern_block_sum(T v)
{
	return kern_block_reduce<false>(v);
}

__device__ __forceinline__ float kern_block_max(float v) { return kern_block_reduce<true>(v); }

/* This thread's max |x| over a row of cols values read 8 at a time, from
 * element 8 * threadIdx.x in steps of 8 * blockDim.x; kern_block_max
 * makes it the row's. cols % 8 == 0. */
template <typename T> __device__ __forceinline__ float kern_row_absmax8(const T *row, int cols)
{
	float m = 0;
	for (int i = threadIdx.x * 8; i < cols; i += blockDim.x * 8) {
		float f[8];
		kern_load8(row + i, f);
#pragma unroll
		for (int j = 0; j < 8; j++)
			m = fmaxf(m, fabsf(f[j]));
	}
	return m;
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

/* As KERN_DISPATCH_DT, and FN<float>(...) for SL_DT_F32: for the few
 * kernels that also fill fp32 buffers. */
#define KERN_DISPATCH_DT_F32(dt, FN, ...)                                                    \
	do {                                                                                 \
		if ((dt) == SL_DT_F32)                                                       \
			return FN<float>(__VA_ARGS__);                                       \
		KERN_DISPATCH_DT(dt, FN, __VA_ARGS__);                                       \
	} while (0)

/* 16 bytes of a stream read once: through L2 only, with a 256-byte L2
 * prefetch (the lane's next chunks are in it). Not volatile, no memory
 * clobber: weights are constant, the compiler may move these freely. The
 * GEMVs of matmul.cu and quant.cu read W through it. */
__device__ __forceinline__ uint4 kern_ld_stream(const void *p)
{
	uint4 v;
	asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
	    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	    : "l"(p));
	return v;
}

/* ---- async copies (cp.async, sm_80+) ---- */

/* 16 bytes global -> shared; when !valid nothing is read and the 16 bytes are
 * zero-filled (rows past the context must be finite: p = 0 times garbage
 * left in shared memory could be 0 * NaN). */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	int n = valid ? 16 : 0;
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit()
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Until at most N of this thread's groups are in flight; a compiler barrier,
 * so shared-memory reads of the landed data stay after it. */
template <int N> __device__ __forceinline__ void cp_async_wait()
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Programmatic dependent launch: wait for the previous kernel's completion
 * and memory (a no-op when not launched as a dependent), and let the next
 * kernel launch early. A TIMELINE=1 build also records each block's wait
 * and launch of the next (kernels/timeline.h), naming the caller's line. */
#ifdef SL_TIMELINE
#include "kernels/timeline.cuh"
#define KERN_TL_LINE unsigned tl_line = __builtin_LINE()
#define KERN_TL_ARG tl_line
#else
#define KERN_TL_LINE
#define KERN_TL_ARG
#endif

__device__ __forceinline__ void kern_pdl_wait(KERN_TL_LINE)
{
#ifdef SL_TIMELINE
	const unsigned long long t0 = kern_tl_first_thread() ? kern_tl_now() : 0;
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#ifdef SL_TIMELINE
	if (kern_tl_first_thread())
		kern_tl_put(KERN_TL_WAIT, tl_line, t0, kern_tl_now());
#endif
}

__device__ __forceinline__ void kern_pdl_launch_next(KERN_TL_LINE)
{
#ifdef SL_TIMELINE
	if (kern_tl_first_thread()) {
		const unsigned long long t = kern_tl_now();
		kern_tl_put(KERN_TL_NEXT, tl_line, t, t);
	}
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The first thing a kernel launched through kern_launch_small does: wait
 * for the previous kernel (its output is our input, or our output its
 * input), then let the next one launch (pdl.h). */
__device__ __forceinline__ void kern_pdl_start(KERN_TL_LINE)
{
	kern_pdl_wait(KERN_TL_ARG);
	kern_pdl_launch_next(KERN_TL_ARG);
}

/* Launch `kernel` on `stream` with `smem` bytes of dynamic shared memory,
 * as a programmatic dependent while *pdl; a PDL launch the driver refuses
 * falls back to a plain one, once and for all (*pdl cleared, logged naming
 * `who`). The kernel must call kern_pdl_wait before it touches memory an
 * earlier kernel writes or reads. */
template <typename K, typename... Args>
static int kern_launch_pdl_smem(bool *pdl, const char *who, cudaStream_t stream, K kernel,
				dim3 grid, dim3 block, size_t smem, Args... args)
{
	if (*pdl) {
		cudaLaunchAttribute attr[1];
		attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		attr[0].val.programmaticStreamSerializationAllowed = 1;
		cudaLaunchConfig_t cfg = {};
		cfg.gridDim = grid;
		cfg.blockDim = block;
		cfg.dynamicSmemBytes = smem;
		cfg.stream = stream;
		cfg.attrs = attr;
		cfg.numAttrs = 1;
		cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
		if (e == cudaSuccess)
			return SL_OK;
		cudaGetLastError();
		sl_log(SL_LOG_WARN, "cuda", "%s: PDL launch refused (%s); plain launches from now", who,
		       cudaGetErrorString(e));
		*pdl = false;
	}
	kernel<<<grid, block, smem, stream>>>(args...);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

/* pdl.cu: a decode GEMV's preference for L1 (pdl.h), set once per kernel
 * from its block size. */
void kern_gemv_l1(const void *kernel, int threads);

/* The GEMVs of matmul.cu and quant.cu launch through this one. */
template <typename K, typename... Args>
static int kern_launch_pdl(bool *pdl, const char *who, cudaStream_t stream, K kernel, dim3 grid,
			   dim3 block, Args... args)
{
	return kern_launch_pdl_smem(pdl, who, stream, kernel, grid, block, 0, args...);
}

/* The small kernels of pdl.h: programmatic dependents while its switch is on. */
extern bool kern_pdl_small;

template <typename K, typename... Args>
static int kern_launch_small(const char *who, cudaStream_t stream, K kernel, dim3 grid, dim3 block,
			     size_t smem, Args... args)
{
	return kern_launch_pdl_smem(&kern_pdl_small, who, stream, kernel, grid, block, smem, args...);
}

/* out[i] = the sum over splits s, in order, of part[s][i], for i < count:
 * the split-K GEMVs' and GEMMs' fp32 partial sums (matmul.cu, quant.cu,
 * quant_gemm.cuh), reduced in one fixed order so every call gives the
 * same bits. A programmatic dependent like the kernels around it: it was
 * a plain launch, so the kernel before it drained and the one after it
 * launched only once it had ended. */
template <typename OutT>
__global__ void kern_splitk_reduce_kernel(OutT *__restrict__ out, const float *__restrict__ part,
					  int splits, size_t count)
{
	kern_pdl_start();
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= count)
		return;
	float s = 0;
	for (int k = 0; k < splits; k++)
		s += part[(size_t)k * count + i];
	out[i] = kern_from_f32<OutT>(s);
}

/* Enqueues that reduction on stream (kern_launch_small). */
template <typename OutT>
static inline int kern_splitk_reduce(OutT *out, const float *part, int splits, size_t count,
				     cudaStream_t stream)
{
	if (!count)
		return SL_OK;
	return kern_launch_small("splitk reduce", stream, kern_splitk_reduce_kernel<OutT>,
				 dim3((unsigned)((count + 255) / 256)), dim3(256), 0, out, part,
				 splits, count);
}

static inline cudaStream_t kern_stream(void *s) { return (cudaStream_t)s; }

#endif
