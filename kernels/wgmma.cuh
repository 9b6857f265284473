/*
 * wgmma.cuh — Hopper's warpgroup MMA (wgmma.mma_async, sm_90a only) for
 * the kernels that use it (attention_wgmma.cu, quant_gemm_wgmma.cu):
 * shared-memory matrix descriptors, the fences and group waits, and
 * m64nNk16 with fp16 or bf16 inputs and fp32 accumulators, B from shared
 * memory and A from shared memory (SS) or from registers (RS). Header-only, .cu files only;
 * everything here compiles to nothing where KERN_HAVE_WGMMA is unset
 * (other targets of the same file), and callers must not launch there.
 *
 * A warpgroup is 4 consecutive warps (128 threads). Warp w of it holds
 * rows 16w .. 16w+15 of the 64-row tile, in the m16n8 layouts of mma.cuh
 * (lane g = lane / 4, t = lane % 4):
 *   D (64 x N fp32): d[4j + 0..1] = row g, cols 8j + 2t, +1;
 *                    d[4j + 2..3] = row g + 8, same cols
 *   A (64 x 16, RS): a0 = row g, k 2t..2t+1; a1 = row g+8; a2 = row g,
 *                    k 2t+8..; a3 = row g+8, k 2t+8..
 * So an accumulator converted pairwise to 16 bits is the next product's A
 * (attention's P).
 *
 * Shared-memory operands use the 128-byte swizzle: a tile is stored as
 * slabs of 64 16-bit columns, each row of a slab 128 bytes, its 16-byte
 * chunk c at chunk position c ^ (row % 8) (kern_sw128_off); slabs and
 * tiles start 1024-byte aligned. Descriptors (PTX ISA, "Matrix Descriptor
 * Format"): K-major operands (the reduction dimension contiguous) step 8
 * rows by SBO = 1024 and k by 32 bytes of start address within a slab;
 * MN-major ones (B transposed: V in P V) step 64 columns of N by LBO (the
 * slab stride) and 8 rows of k by SBO = 1024.
 */
#ifndef KERN_WGMMA_CUH
#define KERN_WGMMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KERN_HAVE_WGMMA 1
#endif

/* Whether wgmma kernel `kernel` can run on the current device: compute
 * capability 9.0 (the only one sm_90a code runs on) and an sm_90a image
 * of it in this build (the Makefile builds one where CUDA_ARCHS lists
 * 90). A failed query counts as no. Host code. */
template <typename K> static inline bool kern_wgmma_usable(K kernel)
{
	int dev, major, minor;
	cudaFuncAttributes fa;
	return cudaGetDevice(&dev) == cudaSuccess &&
	       cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
	       cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
	       major == 9 && minor == 0 && cudaFuncGetAttributes(&fa, kernel) == cudaSuccess &&
	       fa.binaryVersion == 90;
}

/* Byte offset of 16-byte chunk c (0 .. 2 * 8 - 1) of row r in a tile of
 * `rows` rows of 128 columns (two slabs). */
__device__ __forceinline__ uint32_t kern_sw128_off(int r, int c, int rows)
{
	return (uint32_t)((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* 128-byte-swizzle descriptor of the operand starting at shared address
 * `addr` (bytes, cvta'd), lbo / sbo in bytes. */
__device__ __forceinline__ uint64_t kern_wgmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
	return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
	       (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

__device__ __forceinline__ void kern_wgmma_fence()
{
#ifdef KERN_HAVE_WGMMA
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void kern_wgmma_commit()
{
#ifdef KERN_HAVE_WGMMA
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int N> __device__ __forceinline__ void kern_wgmma_wait()
{
#ifdef KERN_HAVE_WGMMA
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

/* Generic-proxy writes to shared memory (cp.async, st.shared) made visible
 * to the async proxy wgmma reads through; each writer, before the barrier. */
__device__ __forceinline__ void kern_fence_proxy_async()
{
#ifdef KERN_HAVE_WGMMA
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* Pins registers at this point of the instruction stream: accumulators
 * are read and written by the asynchronous MMAs behind the compiler's
 * back, so their other uses must not move across the fences and waits. */
template <int R> __device__ __forceinline__ void kern_wgmma_pin(float (&d)[R])
{
#pragma unroll
	for (int i = 0; i < R; i++)
		asm volatile("" : "+f"(d[i])::"memory");
}
template <int R> __device__ __forceinline__ void kern_wgmma_pin(uint32_t (&d)[R])
{
#pragma unroll
	for (int i = 0; i < R; i++)
		asm volatile("" : "+r"(d[i])::"memory");
}

/* The 64 accumulator operands %0 .. %63 */
#define KERN_WG_D8(b)                                                                        \
	"+f"(d[b + 0]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]),      \
		"+f"(d[b + 5]), "+f"(d[b + 6]), "+f"(d[b + 7])
#define KERN_WG_D64                                                                          \
	KERN_WG_D8(0), KERN_WG_D8(8), KERN_WG_D8(16), KERN_WG_D8(24), KERN_WG_D8(32),        \
		KERN_WG_D8(40), KERN_WG_D8(48), KERN_WG_D8(56)
#define KERN_WG_R64                                                                          \
	"{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "            \
	"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "   \
	"%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "   \
	"%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

/* d[64 x 128] (+)= A[64 x 16] B[16 x 128], A and B K-major in shared memory.
 * accumulate 0: d = A B. */
template <typename E>
__device__ __forceinline__ void kern_wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db,
						   int accumulate)
{
#ifdef KERN_HAVE_WGMMA
	if constexpr (std::is_same<E, __half>::value)
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
			     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " KERN_WG_R64
			     ", %64, %65, p, 1, 1, 0, 0;\n}\n"
			     : KERN_WG_D64
			     : "l"(da), "l"(db), "r"(accumulate));
	else
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
			     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KERN_WG_R64
			     ", %64, %65, p, 1, 1, 0, 0;\n}\n"
			     : KERN_WG_D64
			     : "l"(da), "l"(db), "r"(accumulate));
#endif
}

/* d[64 x 128] += A[64 x 16] B[16 x 128], A in registers (a[4], the layout
 * above), B N-major (transposed) in shared memory. */
template <typename E>
__device__ __forceinline__ void kern_wgmma_rs_n128_tb(float (&d)[64], const uint32_t (&a)[4],
						      uint64_t db)
{
#ifdef KERN_HAVE_WGMMA
	if constexpr (std::is_same<E, __half>::value)
		asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " KERN_WG_R64
			     ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
			     : KERN_WG_D64
			     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
	else
		asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KERN_WG_R64
			     ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
			     : KERN_WG_D64
			     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
#endif
}

/* The 32 accumulator operands %0 .. %31 */
#define KERN_WG_D32 KERN_WG_D8(0), KERN_WG_D8(8), KERN_WG_D8(16), KERN_WG_D8(24)
#define KERN_WG_R32                                                                          \
	"{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "            \
	"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

/* d[64 x N] (+)= A[64 x 16] B[16 x N], A in registers (a[4], the layout
 * above), B K-major in shared memory; N = 64 (d[32]) or 128 (d[64]).
 * accumulate 0: d = A B. */
template <typename E>
__device__ __forceinline__ void kern_wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4],
						  uint64_t db, int accumulate)
{
#ifdef KERN_HAVE_WGMMA
	if constexpr (std::is_same<E, __half>::value)
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
			     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " KERN_WG_R32
			     ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
			     : KERN_WG_D32
			     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
	else
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
			     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " KERN_WG_R32
			     ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
			     : KERN_WG_D32
			     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#endif
}
/* d[64 x 64] (+)= A[64 x 16] B[16 x 64], A and B K-major in shared memory.
 * accumulate 0: d = A B. */
template <typename E>
__device__ __forceinline__ void kern_wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db,
						  int accumulate)
{
#ifdef KERN_HAVE_WGMMA
	if constexpr (std::is_same<E, __half>::value)
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
			     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " KERN_WG_R32
			     ", %32, %33, p, 1, 1, 0, 0;\n}\n"
			     : KERN_WG_D32
			     : "l"(da), "l"(db), "r"(accumulate));
	else
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
			     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " KERN_WG_R32
			     ", %32, %33, p, 1, 1, 0, 0;\n}\n"
			     : KERN_WG_D32
			     : "l"(da), "l"(db), "r"(accumulate));
#endif
}
template <typename E>
__device__ __forceinline__ void kern_wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4],
						   uint64_t db, int accumulate)
{
#ifdef KERN_HAVE_WGMMA
	if constexpr (std::is_same<E, __half>::value)
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
			     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " KERN_WG_R64
			     ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
			     : KERN_WG_D64
			     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
	else
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
			     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KERN_WG_R64
			     ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
			     : KERN_WG_D64
			     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#endif
}

#undef KERN_WG_D8

#endif
