/*
 * mma.cuh — the tensor-core instructions, written once for every kernel
 * that uses them (attention_decode.cu, attention_prefill.cu, matmul.cu):
 * mma.sync m16n8k16 with fp16 or bf16 inputs and fp32 accumulators, and
 * the ldmatrix fragment loads from shared memory. Inline PTX, sm_80 and
 * later. Header-only, included by .cu files only.
 *
 * Fragment layout (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane
 * g = lane / 4, t = lane % 4, each register two 16-bit elements:
 *   A (16 x 16, row-major): a0 = row g, k 2t..2t+1; a1 = row g+8, same k;
 *                           a2 = row g, k 2t+8..2t+9; a3 = row g+8, same k
 *   B (16 x 8, col-major):  b0 = col g, k 2t..2t+1; b1 = col g, k 2t+8..2t+9
 *   C (16 x 8, fp32):       c0, c1 = row g, cols 2t, 2t+1; c2, c3 = row g+8
 * So the four lanes of a quad share the rows of C: row reductions are
 * kern_quad_sum / kern_quad_max (cuda_util.cuh).
 */
#ifndef KERN_MMA_CUH
#define KERN_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* c[16 x 8] += a[16 x 16] * b[16 x 8]. No side effects and no memory
 * operands, so not volatile: the compiler may schedule it freely. */
template <typename T>
__device__ __forceinline__ void kern_mma_m16n8k16(float c[4], const uint32_t a[4], uint32_t b0,
						  uint32_t b1);

template <>
__device__ __forceinline__ void kern_mma_m16n8k16<__half>(float c[4], const uint32_t a[4],
							  uint32_t b0, uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
	    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void kern_mma_m16n8k16<__nv_bfloat16>(float c[4], const uint32_t a[4],
								 uint32_t b0, uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
	    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8x8 matrices of 16-bit elements from shared memory: lanes 8j .. 8j+7
 * give the row addresses of matrix j (16 bytes each), r[j] is this lane's
 * part of it (row lane / 4, elements 2 (lane % 4) .. +1). Volatile: it reads
 * shared memory the compiler cannot see, so it must stay between the
 * barriers that guard it. */
__device__ __forceinline__ void kern_ldmatrix_x4(uint32_t r[4], const void *smem)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(s));
}

/* The same, each matrix transposed: B fragments of a row-major [k][n] tile. */
__device__ __forceinline__ void kern_ldmatrix_x4_trans(uint32_t r[4], const void *smem)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(s));
}

#endif
