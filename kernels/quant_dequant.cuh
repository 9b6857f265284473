/*
 * quant_dequant.cuh — the device helpers both quantized kernels share
 * (quant.cu's GEMV and dequantizer, quant_gemm.cu's GEMM): quantized codes
 * into packed fp16/bf16 pairs holding their exact values, scale loads,
 * and the ways group scales meet the fp32 accumulators. Formats and bit
 * layouts: kernels/quant.h. Header-only, included by .cu files only.
 *
 * Also the GEMM's entry for quant.cu (kern_qgemm_run): the kern_qblas
 * struct stays private to quant.cu, which passes what the GEMM needs.
 */
#ifndef KERN_QUANT_DEQUANT_CUH
#define KERN_QUANT_DEQUANT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda_util.cuh"
#include "kernels/mma.cuh"
#include "kernels/quant.h"

#include <algorithm>

__device__ __forceinline__ float q_scale(const void *s, size_t i, bool f16)
{
	return f16 ? __half2float(__ldg(reinterpret_cast<const __half *>(s) + i))
		   : __ldg(reinterpret_cast<const float *>(s) + i);
}

/* A scale's bits as stored (fp16 in the low half, or fp32), and their
 * value. The GEMV fetches the bits with its codes and converts them where
 * the chunk uses them: converted at the fetch, each conversion made the
 * warp wait there for its own load, several memory latencies a round
 * (on an H100 the 7B int4 batch-1 decode went from 428 to 448 tokens/s,
 * int8 with groups of 128 from 295 to 322: docs/cuda.md). */
__device__ __forceinline__ uint32_t q_scale_bits(const void *s, size_t i, bool f16)
{
	return f16 ? (uint32_t)__ldg(reinterpret_cast<const unsigned short *>(s) + i)
		   : __ldg(reinterpret_cast<const unsigned int *>(s) + i);
}
__device__ __forceinline__ float q_scale_of(uint32_t b, bool f16)
{
	return f16 ? __half2float(__ushort_as_half((unsigned short)b)) : __uint_as_float(b);
}

/* a - b on packed pairs of T. */
template <typename T> __device__ __forceinline__ uint32_t q_sub2(uint32_t a, uint32_t b);
template <> __device__ __forceinline__ uint32_t q_sub2<__half>(uint32_t a, uint32_t b)
{
	__half2 r = __hsub2(*reinterpret_cast<const __half2 *>(&a),
			    *reinterpret_cast<const __half2 *>(&b));
	return *reinterpret_cast<const uint32_t *>(&r);
}
template <> __device__ __forceinline__ uint32_t q_sub2<__nv_bfloat16>(uint32_t a, uint32_t b)
{
	__nv_bfloat162 r = __hsub2(*reinterpret_cast<const __nv_bfloat162 *>(&a),
				   *reinterpret_cast<const __nv_bfloat162 *>(&b));
	return *reinterpret_cast<const uint32_t *>(&r);
}

/* (a & b) | c in one instruction. */
__device__ __forceinline__ uint32_t q_and_or(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t d;
	asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

/* a * b + c on packed fp16 pairs. */
__device__ __forceinline__ uint32_t q_fma2(uint32_t a, uint32_t b, uint32_t c)
{
	__half2 r = __hfma2(*reinterpret_cast<const __half2 *>(&a), *reinterpret_cast<const __half2 *>(&b),
			    *reinterpret_cast<const __half2 *>(&c));
	return *reinterpret_cast<const uint32_t *>(&r);
}

/* Codes per 16-byte load: 16 bytes of int8/fp8, or 32 int4. */
template <int FMT> struct q_geom {
	static constexpr int KL = FMT == KERN_Q_INT4 ? 32 : 16;
};

/* int4 magic: a nibble OR-ed into the low mantissa bits of 1024.0 (fp16)
 * or 128.0 (bf16) gives 1024 + u / 128 + u exactly. */
template <typename T> __device__ __forceinline__ constexpr uint32_t q_magic4()
{
	return std::is_same<T, __half>::value ? 0x64006400u : 0x43004300u;
}

/* The packed subtrahend that turns magic + u into u - z. */
template <typename T> __device__ __forceinline__ uint32_t q_zsub(uint32_t z)
{
	return q_magic4<T>() | z | (z << 16);
}

/*
 * 16 bytes of codes -> KL / 2 packed pairs of T holding their exact values,
 * pair p = codes (2p, 2p + 1) in column order. zsub: int4 only (q_zsub).
 *   int8, fp16: byte ^ 0x80 = q + 128 as the low byte of fp16 0x64XX (1024 +
 *     q + 128), minus 1152: q. Two byte permutes and two subtracts per 4.
 *   int8, bf16: q + 128 as the low byte of fp32 0x4B0000XX (2^23 + q + 128),
 *     minus 2^23 + 128: q in fp32; an integer of at most 8 significant bits,
 *     so its top 16 bits are q as bf16 exactly.
 *   fp8: cvt.rn.f16x2.e4m3x2 (sm_89+; the header's exact software path
 *     before), for bf16 through fp32 and the top 16 bits (4 significant bits).
 *   int4: see quant.h's bit layout. Nibble pair j of word w is (w >> 4j)
 *     & 0x000F000F. bf16: OR-ed into the magic (1024 + u), minus magic + z,
 *     four instructions a pair. fp16 (the int4 GEMV's usual case): pairs 0
 *     and 2 the same from w and w >> 8 with the AND and OR in one LOP3;
 *     pairs 1 and 3 unshifted, so the nibble lands on 16 u: (1024 + 16 u) /
 *     16 - (64 + z) in one HFMA2, exact (small integers, a power-of-two
 *     scale). 9 instructions per 8 codes against 15: int4 batch-1 decode
 *     on an H100 went from 360.6 to 378.6 tokens/s.
 */
template <typename T, int FMT>
__device__ __forceinline__ void q_dequant16(uint4 raw, uint32_t *f, uint32_t zsub)
{
	constexpr bool H = std::is_same<T, __half>::value;
	const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if constexpr (FMT == KERN_Q_INT8) {
			const uint32_t u = w[i] ^ 0x80808080u;
			if constexpr (H) {
				f[2 * i] = q_sub2<__half>(__byte_perm(u, 0x64646464u, 0x4140), 0x64806480u);
				f[2 * i + 1] =
					q_sub2<__half>(__byte_perm(u, 0x64646464u, 0x4342), 0x64806480u);
			} else {
				float v[4];
#pragma unroll
				for (int b = 0; b < 4; b++)
					v[b] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540 + b)) -
					       8388736.0f;
				f[2 * i] = __byte_perm(__float_as_uint(v[0]), __float_as_uint(v[1]), 0x7632);
				f[2 * i + 1] =
					__byte_perm(__float_as_uint(v[2]), __float_as_uint(v[3]), 0x7632);
			}
		} else if constexpr (FMT == KERN_Q_FP8) {
#pragma unroll
			for (int h = 0; h < 2; h++) {
				__half2_raw p = __nv_cvt_fp8x2_to_halfraw2(
					(__nv_fp8x2_storage_t)((w[i] >> (16 * h)) & 0xFFFFu), __NV_E4M3);
				if constexpr (H) {
					f[2 * i + h] = (uint32_t)p.x | ((uint32_t)p.y << 16);
				} else {
					float lo = __half2float(__ushort_as_half(p.x));
					float hi = __half2float(__ushort_as_half(p.y));
					f[2 * i + h] = __byte_perm(__float_as_uint(lo), __float_as_uint(hi),
								   0x7632);
				}
			}
		} else if constexpr (H) {
			/* odd pairs unshifted: 1024 + 16 u, times 1/16 minus 64 + z */
			const uint32_t zneg = 0xD400D400u + ((zsub & 0x000F000Fu) << 4);
			const uint32_t w8 = w[i] >> 8;
			f[4 * i] = q_sub2<T>(q_and_or(w[i], 0x000F000Fu, q_magic4<T>()), zsub);
			f[4 * i + 1] = q_fma2(q_and_or(w[i], 0x00F000F0u, q_magic4<T>()), 0x2C002C00u, zneg);
			f[4 * i + 2] = q_sub2<T>(q_and_or(w8, 0x000F000Fu, q_magic4<T>()), zsub);
			f[4 * i + 3] = q_fma2(q_and_or(w8, 0x00F000F0u, q_magic4<T>()), 0x2C002C00u, zneg);
		} else {
#pragma unroll
			for (int j = 0; j < 4; j++)
				f[4 * i + j] =
					q_sub2<T>(((w[i] >> (4 * j)) & 0x000F000Fu) | q_magic4<T>(), zsub);
		}
	}
}

/*
 * int4 with groups of 32: 16 bytes of codes (one group: a lane's share of
 * a chunk, or a dequant thread's) -> 16 packed pairs of T holding d * u +
 * m, dm the group's (d, m) fp16 pair as stored (d in the low half). fp16:
 * u exactly as q_dequant16 makes it (zero point 0), then one HFMA2 a pair,
 * rounded once. bf16: the same u, d * u + m in fp32, rounded to bf16.
 */
template <typename T>
__device__ __forceinline__ void q_dequant_affine(uint4 raw, uint32_t *f, uint32_t dm)
{
	q_dequant16<__half, KERN_Q_INT4>(raw, f, q_zsub<__half>(0));
	if constexpr (std::is_same<T, __half>::value) {
		const uint32_t dd = __byte_perm(dm, 0, 0x1010), mm = __byte_perm(dm, 0, 0x3232);
#pragma unroll
		for (int i = 0; i < 16; i++)
			f[i] = q_fma2(f[i], dd, mm);
	} else {
		const float d = __half2float(__ushort_as_half((unsigned short)(dm & 0xFFFFu)));
		const float m = __half2float(__ushort_as_half((unsigned short)(dm >> 16)));
#pragma unroll
		for (int i = 0; i < 16; i++) {
			const float2 u = __half22float2(*reinterpret_cast<const __half2 *>(&f[i]));
			__nv_bfloat162 r = __floats2bfloat162_rn(fmaf(d, u.x, m), fmaf(d, u.y, m));
			f[i] = *reinterpret_cast<const uint32_t *>(&r);
		}
	}
}

/* How scales meet the accumulators, in the GEMV and the GEMM alike:
 * QG_ROW (int8 per row, fp8) scales the sums once at the end; QG_CHUNK
 * (a group holds a whole 64-byte chunk) adds scale x each chunk's partial
 * sum; QG_HALF (int8 groups of 32, int4 groups of 64: two groups a chunk,
 * lanes c = 0, 1 in the first) runs each MMA once per group, except in
 * the GEMM on fp16 activations, which folds the scales into the weights
 * (quant_gemm.cu, "Folded scales") and steps as QG_ROW; QG_AFFINE (int4
 * groups of 32): they do not, the weights carry them (q_dequant_affine). */
enum { QG_ROW = 0, QG_CHUNK = 1, QG_HALF = 2, QG_AFFINE = 3 };

/* One m16n8k16 step of a chunk, by GM: QG_ROW and QG_AFFINE into acc;
 * QG_CHUNK into the chunk's partial sum t[0]; QG_HALF once per group into
 * t[0] and t[1], lanes c = 0, 1 holding the chunk's first group, 2, 3 the
 * second, the other group's lanes giving zeros. */
template <typename T, int GM>
__device__ __forceinline__ void q_mma_step(float acc[4], float (*t)[4], const uint32_t af[4],
					   uint32_t b0, uint32_t b1, int c)
{
	if constexpr (GM == QG_ROW || GM == QG_AFFINE) {
		kern_mma_m16n8k16<T>(acc, af, b0, b1);
	} else if constexpr (GM == QG_CHUNK) {
		kern_mma_m16n8k16<T>(t[0], af, b0, b1);
	} else {
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const bool mine = (c >> 1) == h;
			const uint32_t ah[4] = {mine ? af[0] : 0u, mine ? af[1] : 0u, mine ? af[2] : 0u,
						mine ? af[3] : 0u};
			kern_mma_m16n8k16<T>(t[h], ah, b0, b1);
		}
	}
}

/* The split-K partials ([splits][count] fp32) summed in a fixed order
 * into out, fp32 or T. */
template <typename T>
static inline int q_splitk_finish(void *out, bool out_f32, const void *part, int splits,
				  size_t count, cudaStream_t stream)
{
	const float *p = (const float *)part;
	if (out_f32)
		return kern_splitk_reduce<float>((float *)out, p, splits, count, stream);
	return kern_splitk_reduce<T>((T *)out, p, splits, count, stream);
}

/* A weight as the GEMV and the GEMM read it; each kernel's arguments
 * extend it with their own. */
struct q_layout {
	const uint8_t *w;     /* [rows, row_bytes] codes */
	const void *scales;   /* [rows, groups]; QG_AFFINE: [rows, groups] (d, m) fp16 pairs */
	const uint8_t *zeros; /* int4: [rows, groups] or NULL (z = 8) */
	const uint32_t *meta; /* NULL, or kern_qweight's meta words [groups, rows] */
	int rows, cols, row_bytes, groups, group;
	bool scale_f16;
};

static inline q_layout q_layout_of(const kern_qweight *w)
{
	q_layout l;
	l.w = (const uint8_t *)w->data;
	l.scales = w->scales;
	l.zeros = (const uint8_t *)w->zeros;
	l.meta = (const uint32_t *)w->meta;
	l.rows = w->rows;
	l.cols = w->cols;
	l.row_bytes = w->format == KERN_Q_INT4 ? w->cols / 2 : w->cols;
	l.groups = kern_qweight_groups(w);
	l.group = w->group;
	l.scale_f16 = w->scale_dt == SL_DT_F16;
	return l;
}

/* The GEMM's block shapes tuned per weight and token count
 * (quant_tune.cu). */
typedef struct kern_qgemm_tuned kern_qgemm_tuned;

/* What quant.cu's kern_qblas lends the GEMM (quant_gemm.cu) for one call. */
typedef struct kern_qgemm_ctx {
	cudaStream_t stream;
	void *workspace; /* split-K partials */
	size_t workspace_bytes;
	int sm_count;
	bool *pdl; /* launch as a programmatic dependent while set (cuda_util.cuh) */
	const kern_qgemm_tuned *tuned; /* variant 0 takes its choice where it has one; may be NULL */
} kern_qgemm_ctx;

/* Once per device before the GEMM's first launch (kern_qblas_create). */
int kern_qgemm_init(void);

/* Whether the GEMM takes this weight (format, group and shape), and
 * whether its wgmma kernels can (quant.h, kern_qblas_gemm_wgmma). */
bool kern_qgemm_takes(const kern_qweight *w);
bool kern_qgemm_wgmma_takes(const kern_qweight *w);
/* Whether a call on x_dt activations rounds each weight to x_dt
 * (kern_qblas_gemm_rounds). */
bool kern_qgemm_rounds(const kern_qweight *w, sl_dtype x_dt);

/* The GEMM (KERN_QPATH_GEMM, quant_gemm.cu): out[n, rows] (fp32 when
 * out_f32, else x's dtype) = x[n, cols] @ W^T. variant: 0 picks the block
 * shape by n; 1.. force one (lab/qgemv.cu sweeps them). SL_ENOTSUP when
 * the weight is not one it takes or the variant does not exist. */
int kern_qgemm_run(const kern_qgemm_ctx *ctx, const kern_qweight *w, void *out, bool out_f32,
		   const void *x, sl_dtype x_dt, int n, int variant);

/* The tuning's scratch: x [n, cols] and out [n, rows] of dt for the
 * largest n tuned, whatever they hold. */
typedef struct kern_qgemm_bufs {
	void *x, *out;
	sl_dtype dt;
} kern_qgemm_bufs;

int kern_qgemm_tuned_create(kern_qgemm_tuned **out);
void kern_qgemm_tuned_destroy(kern_qgemm_tuned *t);
/* The block shape tuned for w on dt activations at n tokens (the smallest
 * tuned count >= n); 0 (AUTO's rule) where none was kept. */
int kern_qgemm_tuned_variant(const kern_qgemm_tuned *t, const kern_qweight *w, sl_dtype dt, int n);
/* 1 when the tuning found the GEMM faster for w at n tokens than the
 * other path AUTO gives it (kern_qgemm_other): AUTO takes the GEMM. */
int kern_qgemm_tuned_over(const kern_qgemm_tuned *t, const kern_qweight *w, sl_dtype dt, int n);
struct kern_cold_bench;
/* The path AUTO gives a weight instead of the GEMM (the int8 split
 * path), timed: us(arg, b, n) its median us at n tokens with W cold
 * (kern_cold_time over b), negative when it cannot run. */
typedef struct kern_qgemm_other {
	double (*us)(void *arg, const struct kern_cold_bench *b, int n);
	void *arg;
} kern_qgemm_other;
/* Times every block shape on w at each of ns[0 .. n_ns) (tuned counts:
 * kern_qgemm_tune_ns) and keeps in t the fastest where it takes at most
 * 95% of AUTO's time, or with `other` (may be NULL), of the other path's
 * (then marked to take the GEMM over it); *kept the number kept.
 * Synchronises ctx->stream: never while a graph is captured. ctx->tuned
 * is not consulted. */
int kern_qgemm_tune(const kern_qgemm_ctx *ctx, kern_qgemm_tuned *t, const kern_qweight *w,
		    const kern_qgemm_bufs *buf, const int *ns, int n_ns,
		    const kern_qgemm_other *other, int *kept);
/* The token counts tuning takes, ascending. */
const int *kern_qgemm_tune_ns(int *count);

/* What timing a call with its weight cold borrows (the tunings,
 * quant_split.cu and quant_tune.cu): a buffer of twice L2 written over
 * before each timed call, so W comes from DRAM as in a decode step, and
 * two events. */
typedef struct kern_cold_bench {
	void *flush;
	size_t flush_bytes;
	cudaEvent_t e0, e1;
} kern_cold_bench;

static inline int kern_cold_bench_init(kern_cold_bench *b)
{
	int l2 = 0, dev = 0;
	*b = (kern_cold_bench){};
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess)
		return SL_EDEVICE;
	b->flush_bytes = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
	if (cudaMalloc(&b->flush, b->flush_bytes) != cudaSuccess ||
	    cudaEventCreate(&b->e0) != cudaSuccess || cudaEventCreate(&b->e1) != cudaSuccess)
		return SL_EDEVICE;
	return SL_OK;
}

static inline void kern_cold_bench_free(kern_cold_bench *b)
{
	cudaFree(b->flush);
	if (b->e0)
		cudaEventDestroy(b->e0);
	if (b->e1)
		cudaEventDestroy(b->e1);
	*b = (kern_cold_bench){};
}

/* The median us of `reps` (1..16) calls of run() (true when it
 * launched) on st, each after the flush; negative on any failure. */
template <typename F>
static double kern_cold_time(cudaStream_t st, const kern_cold_bench *b, int reps, F run)
{
	float ms[16];
	if (reps < 1 || reps > 16)
		return -1;
	for (int r = 0; r < reps; r++) {
		if (cudaMemsetAsync(b->flush, r, b->flush_bytes, st) != cudaSuccess ||
		    cudaEventRecord(b->e0, st) != cudaSuccess || !run() ||
		    cudaEventRecord(b->e1, st) != cudaSuccess ||
		    cudaEventSynchronize(b->e1) != cudaSuccess ||
		    cudaEventElapsedTime(&ms[r], b->e0, b->e1) != cudaSuccess)
			return -1;
	}
	std::sort(ms, ms + reps);
	return 1e3 * ms[reps / 2];
}

/* Destroys a cuBLASLt plan's layouts that are set (quant.cu's fp8 plans,
 * quant_split.cu's int8 ones: A, B and D). */
static inline void kern_lt_layouts_destroy(cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
					   cublasLtMatrixLayout_t ld)
{
	const cublasLtMatrixLayout_t l[3] = {la, lb, ld};
	for (int i = 0; i < 3; i++)
		if (l[i])
			cublasLtMatrixLayoutDestroy(l[i]);
}

/* The int8 split path's cuBLASLt plans and the algorithms tuned for its
 * shapes (quant_split.cu); one per kern_qblas. */
typedef struct kern_qsplit_plans kern_qsplit_plans;
int kern_qsplit_plans_create(size_t workspace_bytes, kern_qsplit_plans **out);
void kern_qsplit_plans_destroy(kern_qsplit_plans *p);

/* What quant.cu's kern_qblas lends the int8 split path (quant_split.cu,
 * KERN_QPATH_INT8_SPLIT) for one call: its cuBLASLt handle and plans,
 * the workspace, the slices' buffer [2 max_tokens, max_cols] and scales
 * [max_tokens], and the scratch for the int32 product. */
typedef struct kern_qsplit_ctx {
	cudaStream_t stream;
	void *lt; /* cublasLtHandle_t */
	kern_qsplit_plans *plans;
	void *workspace;
	size_t workspace_bytes;
	int8_t *xq;
	float *xs;
	void *scratch;
	size_t scratch_bytes;
	int max_tokens, max_cols;
} kern_qsplit_ctx;

/* Whether the split path takes this weight: int8 with per-row scales. */
bool kern_qsplit_takes(const kern_qweight *w);
/* out[n, rows] (fp32 when out_f32, else x's dtype) = x[n, cols] @ W^T as
 * kern_qmatmul_int8_split_cpu; SL_ENOTSUP when the weight or n is not one
 * it takes or cuBLASLt has no int8 GEMM for the shape. */
int kern_qsplit_run(const kern_qsplit_ctx *c, const kern_qweight *w, void *out, bool out_f32,
		    const void *x, sl_dtype x_dt, int n);
/* Times cuBLASLt's candidate algorithms for a rows x cols weight at the
 * token counts the path takes and keeps the fastest (kern_qblas_tune_split
 * in quant.h). Synchronises c->stream: never during a graph capture. */
int kern_qsplit_tune(const kern_qsplit_ctx *c, int rows, int cols);

/* Block shapes: kern_qgemm_run's variant numbers 1..KERN_QGEMM_VARIANTS
 * (quant.h); 11.. are the wgmma GEMM's (sm_90a only: SL_ENOTSUP
 * elsewhere, and for groups it does not take). */
const char *kern_qgemm_variant_name(int variant);

#endif
