/*
 * quant.cu — the linear layer with quantized weights on the GPU:
 * out[n, rows] = x[n, cols] @ W^T, W int8 / fp8 E4M3 / int4 codes with
 * scales (formats and bit layouts: kernels/quant.h; semantics and the
 * reference: kernels/quant.c). x and out are fp16 or bf16 (out may be
 * fp32); accumulation is fp32.
 *
 * Four paths (kern_qpath); the fourth, GEMM (a tiled tensor-core GEMM
 * dequantizing in its main loop, AUTO's choice for int8 and int4 from 17
 * to 256 tokens), is kernels/quant_gemm.cu, sharing this file's
 * dequantization (kernels/quant_dequant.cuh):
 *
 * GEMV (n <= 64): decoding reads every weight byte once, so the kernel is
 *   matmul.cu's tensor-core GEMV with the dequantization in registers. A
 *   lane streams 16 bytes of a row per chunk (16 int8/fp8 codes or 32 int4
 *   codes), turns them into fp16/bf16 pairs holding the codes' exact
 *   values (integers, or e4m3 values, which both dtypes represent
 *   exactly; zero points are subtracted here), and feeds mma.sync
 *   m16n8k16 directly, in matmul.cu's k order. Scales are applied to the
 *   fp32 accumulators, never to the weights: a per-row scale once at the
 *   end; a group scale to each chunk's partial sum (a chunk is one group
 *   of 64/128 columns or a part of one), so the products stay exact and
 *   the sum differs from the CPU reference only in fp32 order. Rounding
 *   scale * code to bf16 instead would cost 2^-9 per weight, the size of
 *   int8's own rounding. int8 with groups of 32 (GGUF Q8_0) and int4 with
 *   groups of 64 have two groups per chunk: each MMA runs twice, once per
 *   group with the other group's lanes giving zeros (double the tensor
 *   work, which a GEMV has to spare). int4 with groups of 32 (GGUF Q4_1's
 *   d * u + m) is the exception: a lane's 32 codes of a chunk are one
 *   group, so each weight is made d * u + m in one fused multiply-add,
 *   rounded once to the run dtype, and the accumulators need no scale.
 *   Up to 64 tokens: n-tiles of 8 share each dequantized fragment (NT =
 *   1, 2, 4, 8 tiles), so W is read once.
 *   Split-K over blocks and the in-block warp sum run in a fixed order:
 *   results are deterministic. A round's group scales and zero points are
 *   fetched with its codes as the bits stored and converted where the
 *   chunk uses them, so a warp waits for its loads once a round.
 *
 * FP8_LT (FP8 weights, large n): W8A8. A kernel quantizes x per token to
 *   e4m3 with scale max|x| / 448, then one cuBLASLt fp8 GEMM scales the
 *   product by the weight's per-row and the activation's per-token scale
 *   (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on A and B). Hopper fp8
 *   tensor cores: twice the fp16 rate. Where cuBLASLt has no algorithm
 *   for a shape (older GPUs, odd shapes) the call goes to DEQUANT and the
 *   fallback is logged once.
 *
 * DEQUANT (int8/int4 above the GEMM's range, FP8 fallback): W dequantized to the run
 *   dtype (scale * code, rounded once) slab by slab into a scratch buffer
 *   sized at create, each slab a cuBLAS GEMM. Costs reading the codes and
 *   writing and re-reading 2 bytes per weight (mostly in L2 for a slab of
 *   a few tens of MiB); for prefill, where the GEMM is compute bound, that
 *   is a small part of the GEMM's own time.
 *
 * kern_qblas owns everything these need, allocated at create; no call
 * allocates device memory or synchronises, so every call is CUDA-graph
 * capturable. Called by the CUDA backend for quantized layers (later),
 * tests/gpu/test_quant.c and lab/qgemv.cu.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp8.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "kernels/act_fp8.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/epilogue.cuh"
#include "kernels/mma.cuh"
#include "kernels/quant.h"
#include "kernels/quant_dequant.cuh"

/* cuBLAS, cuBLASLt and the GEMV's split-K partials, in stream order. */
#define QB_WORKSPACE_BYTES ((size_t)32 << 20)
#define QB_DEQUANT_DEFAULT_BYTES ((size_t)32 << 20)
#define QB_LT_PLANS 32

/* One cuBLASLt fp8 problem shape, its layouts and chosen algorithm;
 * splits > 1: K cut into that many slices, the layouts and algorithm
 * those of one slice (lt_split_count). */
typedef struct lt_plan {
	int m, n, k, asked; /* asked: the kern_qblas's lt_splits when made */
	int asked_unit;     /* and its lt_unit_max */
	int splits;
	bool unit; /* unit scalar scales, fp32 product; the scales applied after (lt_unit_scale) */
	sl_dtype out_dt;
	int state; /* 0 empty, 1 ready, -1 no algorithm (use DEQUANT) */
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulAlgo_t algo;
} lt_plan;

struct kern_qblas {
	cudaStream_t stream;
	cublasHandle_t blas;
	cublasLtHandle_t lt;
	cublasLtMatmulDesc_t lt_op;       /* fp8 x fp8, fp32 compute, outer-vector scales */
	cublasLtMatmulDesc_t lt_unit_op;  /* the same with unit scalar scales (lt_unit_takes) */
	float *one;                       /* the device 1.0f those scales point to */
	int lt_unit_max;                  /* kern_qblas_set_lt_unit */
	cublasLtMatmulPreference_t lt_pref;
	cublasLtMatmulPreference_t lt_pref_slice; /* a K slice's: its share of the workspace */
	cudaStream_t side[KERN_LT_MAX_SPLITS - 1]; /* K slices 1.. run here, concurrently */
	cudaEvent_t fork, join[KERN_LT_MAX_SPLITS - 1];
	void *workspace;                  /* QB_WORKSPACE_BYTES */
	void *dequant;                    /* dequant_bytes: one slab of W in the run dtype */
	size_t dequant_bytes;
	uint8_t *xq;                      /* [max_tokens, max_cols] e4m3 activations */
	float *xs;                        /* [max_tokens] their scales */
	int max_tokens, max_cols;
	int sm_count, cc;                 /* cc: 10 * major + minor */
	bool pdl;
	bool lt_usable;                   /* fp8 tensor cores (sm_89+) and a cuBLASLt to ask */
	int gemv_max[4];                  /* by kern_qformat */
	int gemm_lo[4], gemm_hi[4];       /* AUTO's GEMM range by kern_qformat: lo < n <= hi */
	int split_lo, split_hi;           /* AUTO's int8 split range: lo < n <= hi */
	int8_t *sq;                       /* the split path's slices [2 split_tokens, max_cols] */
	float *ss;                        /* and their scales [split_tokens] */
	int split_tokens;                 /* min(max_tokens, KERN_QSPLIT_MAX_TOKENS) */
	kern_qsplit_plans *split_plans;   /* its cuBLASLt plans and tuned algorithms */
	int gemm_variant;                 /* the GEMM's block shape (0: by n; lab/qgemv.cu sets it) */
	bool wide;                        /* the wide GEMV where it runs (SL_QGEMV_WIDE) */
	kern_qgemm_tuned *gemm_tuned;     /* and the shapes tuned for (weight, tokens) */
	lt_plan plans[QB_LT_PLANS];
	int next_plan;
	int lt_splits;                    /* kern_qblas_set_lt_splits: 0 by rule, 1 never, N */
	bool warned_lt;
	/* xq / xs hold the activations of act_x (act_n rows of act_cols), made
	 * by the kernel that wrote it (kern_qblas_act_mark); NULL: nothing */
	const void *act_x;
	int act_n, act_cols;
	bool act_codes;                   /* act_x unwritten: the codes are its only copy */
	sl_dtype act_dt;                  /* act_x's dtype, when act_codes */
	unsigned *counter;                /* the fused add + norm's blocks done (epilogue.cuh) */
};

/* ---- the GEMV ---- */

#define QG_ROWS 16        /* W rows per tile: the MMA's M */
#define QG_CHUNK_BYTES 64 /* bytes of a row per warp chunk: 4 lanes x 16 */

/* The weight (q_layout), and this call's. */
struct qgemv_args : q_layout {
	void *out;            /* [n, rows] of T or fp32; fp32 partials [splits][n][rows] */
	int n, chunks_per_split;
	bool out_f32;
	kern_epi_dev e;       /* what the product feeds (kernels/epilogue.h); out_f32: STORE */
};

/* M MMA tiles' fp32 accumulators (or partial sums), zeroed. */
template <int M>
__device__ __forceinline__ void qg_zero(float (&v)[M][4])
{
#pragma unroll
	for (int i = 0; i < M; i++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			v[i][e] = 0;
}

/* Warp 0's accumulators, summed over the block: per-row scales, then out. */
template <typename T, int GM, int NT, int EPI>
__device__ __forceinline__ void qgemv_store(const qgemv_args &a, float (&acc)[NT][4], int ra,
					    int rb, int row_a, int row_b, bool ok_a, bool ok_b,
					    int c, const float res[6])
{
	if constexpr (GM == QG_ROW) {
		const float s_a = q_scale(a.scales, ra, a.scale_f16);
		const float s_b = q_scale(a.scales, rb, a.scale_f16);
#pragma unroll
		for (int j = 0; j < NT; j++) {
			acc[j][0] *= s_a;
			acc[j][1] *= s_a;
			acc[j][2] *= s_b;
			acc[j][3] *= s_b;
		}
	}
	/* accumulator e: row a (e < 2) or b, token 8 j + 2 c + (e & 1) */
	float *of = reinterpret_cast<float *>(a.out) + (size_t)blockIdx.y * a.n * a.rows;
	T *ot = reinterpret_cast<T *>(a.out);
#pragma unroll
	for (int j = 0; j < NT; j++) {
		if (!a.out_f32) {
			kern_epi_store<T, EPI>(a.e, ot, a.rows, a.n, row_a, row_b, ok_a, ok_b,
					       8 * j + 2 * c, acc[j], res);
			continue;
		}
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int row = e < 2 ? row_a : row_b, tok = 8 * j + 2 * c + (e & 1);
			if (row < a.rows && tok < a.n)
				of[(size_t)tok * a.rows + row] = acc[j][e];
		}
	}
}

/*
 * One chunk of rows a and b (16 bytes of codes each, this lane's share):
 * dequantized, multiplied with x's NT token tiles on the tensor cores, and
 * added to acc (scaled by the chunk's group scales sa, sb unless QG_ROW).
 * za, zb: int4's zero points (QG_AFFINE: the (d, m) pairs). ok: the
 * lane's bytes lie in the row (else its codes are zeros and x is not
 * read, so the products are 0 whatever the scales). The k order is
 * matmul.cu's gemv_kernel's: a lane's own 16 loaded bytes feed the MMA
 * slots of its column of the fragment, the same for W and x.
 */
template <typename T, int FMT, int GM, int NT>
__device__ __forceinline__ void qg_chunk(const qgemv_args &a, const T *x, uint4 va, uint4 vb,
					 uint32_t za, uint32_t zb, const float *sa, const float *sb,
					 int cu, bool ok, int g, int c, float (&acc)[NT][4])
{
	constexpr int KL = q_geom<FMT>::KL; /* columns per lane per row per chunk */
	constexpr int CK = 4 * KL;          /* columns per chunk */
	constexpr int NP = KL / 2;          /* packed pairs per lane per row */
	constexpr int NX = KL / 8;          /* 16-byte vectors of x per lane per tile */
	constexpr int NH = GM == QG_HALF ? 2 : 1;
	const uint4 zero = make_uint4(0, 0, 0, 0);
	uint32_t fa[NP], fb[NP];
	if constexpr (GM == QG_AFFINE) { /* za, zb: the rows' (d, m) pairs */
		q_dequant_affine<T>(va, fa, za);
		q_dequant_affine<T>(vb, fb, zb);
	} else if constexpr (FMT == KERN_Q_INT4) { /* za, zb: the rows' zero points */
		q_dequant16<T, FMT>(va, fa, q_zsub<T>(za));
		q_dequant16<T, FMT>(vb, fb, q_zsub<T>(zb));
	} else {
		q_dequant16<T, FMT>(va, fa, 0);
		q_dequant16<T, FMT>(vb, fb, 0);
	}
	const size_t xk = (size_t)cu * CK + c * KL;
#pragma unroll
	for (int j = 0; j < NT; j++) {
		const int tok = 8 * j + g;
		const bool okx = ok && tok < a.n;
		const uint4 *xp =
			reinterpret_cast<const uint4 *>(x + (okx ? (size_t)tok * a.cols + xk : 0));
		uint32_t xr[NP];
#pragma unroll
		for (int m = 0; m < NX; m++) {
			const uint4 v = okx ? xp[m] : zero;
			xr[4 * m] = v.x;
			xr[4 * m + 1] = v.y;
			xr[4 * m + 2] = v.z;
			xr[4 * m + 3] = v.w;
		}
		float t[NH][4];
		qg_zero(t);
#pragma unroll
		for (int i = 0; i < NP / 2; i++) {
			const uint32_t af[4] = {fa[2 * i], fb[2 * i], fa[2 * i + 1], fb[2 * i + 1]};
			q_mma_step<T, GM>(acc[j], t, af, xr[2 * i], xr[2 * i + 1], c);
		}
		if constexpr (GM == QG_CHUNK || GM == QG_HALF) {
			/* accumulator e: row a for e < 2, row b for e >= 2 */
#pragma unroll
			for (int h = 0; h < NH; h++) {
				acc[j][0] += sa[h] * t[h][0];
				acc[j][1] += sa[h] * t[h][1];
				acc[j][2] += sb[h] * t[h][2];
				acc[j][3] += sb[h] * t[h][3];
			}
		}
	}
}

/* The in-block sum in a fixed order, called by every warp: warps 1..
 * leave their M x 4 accumulators in shared memory ([warp][value][lane]:
 * lanes on consecutive words, no bank conflicts), `between` runs before
 * the barrier, then warp 0 adds them in warp order. */
template <int KSPLIT, int M, typename F>
__device__ __forceinline__ void qg_warp_sum(float (&acc)[M][4], F between)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	__shared__ float part[KSPLIT - 1][M * 4][32];
	if (warp > 0)
#pragma unroll
		for (int j = 0; j < M; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				part[warp - 1][4 * j + e][lane] = acc[j][e];
	between();
	__syncthreads();
	if (warp == 0)
		for (int k = 0; k < KSPLIT - 1; k++)
#pragma unroll
			for (int j = 0; j < M; j++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					acc[j][e] += part[k][4 * j + e][lane];
}

/* The block's end: warp 0 sums the other warps' accumulators (shared
 * memory, fixed order), divides them by the rms of an input that was not
 * (PRE, from the parts pre_p) and stores, the add's residual and norm
 * weights in res (kern_epi_prefetch); ADD_NORM's last block then
 * normalises with every warp. */
template <typename T, int GM, int NT, int KSPLIT, int EPI, bool PRE>
__device__ __forceinline__ void qg_block_end(const qgemv_args &a, float (&acc)[NT][4], int ra,
					     int rb, int row_a, int row_b, bool ok_a, bool ok_b,
					     const float res[6], const float pre_p[2])
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	static_assert(!PRE || (KSPLIT >= 8 && NT == 1), "kern_pre_load: 8 warps, 8 tokens");
	__shared__ float pss[KSPLIT][KERN_PRE_MAX_TOKENS]; /* PRE's sums (kern_pre_part) */
	if constexpr (KSPLIT > 1) {
		qg_warp_sum<KSPLIT>(acc, [&] {
			if constexpr (PRE)
				kern_pre_part<KSPLIT>(a.n, pre_p, pss);
		});
		if (warp > 0 && EPI != KERN_EPI_ADD_NORM)
			return;
	}
	if constexpr (PRE)
		if (warp == 0)
			kern_pre_scale<KSPLIT>(a.e, a.n, a.cols, 2 * (lane & 3), pss, acc[0]);
	if (warp == 0)
		qgemv_store<T, GM, NT, EPI>(a, acc, ra, rb, row_a, row_b, ok_a, ok_b, lane & 3, res);
	/* every warp: ADD_NORM's last block normalises with all of them */
	if constexpr (EPI == KERN_EPI_ADD_NORM)
		kern_epi_finish<T>(a.e, a.rows, a.n);
}

/* Resident blocks the GEMV's registers are sized for, where the launch
 * does not say (qgemv_tiles: int4 with groups of 128). int4 up to 8
 * tokens: 3, so 80 registers a thread (ptxas spills a few words, in the
 * epilogues and, for SwiGLU, one load a round): 24 warps an SM against
 * 16 took the 7B int4 decode on an H100 from 376.7 to 397.3 tokens/s at
 * batch 1 and from 2475 to 2623 at batch 8
 * (bench/results/2026-11-24-nvidia-h100-qgemv2/). */
template <int FMT, int NT> constexpr int qg_min_blocks()
{
	return FMT == KERN_Q_INT4 && NT == 1 ? 3 : 2;
}

/*
 * One block: rows [16 blockIdx.x, +16) of W, chunks [blockIdx.y *
 * chunks_per_split, +chunks_per_split) of each row; KSPLIT warps take
 * interleaved runs of UNROLL chunks, as matmul.cu's gemv_kernel (whose
 * comment explains the k order: a lane's own 16 loaded bytes feed the
 * MMA slots of its column of the fragment, the same for W and x). NT
 * token tiles of 8 share each dequantized chunk. A chunk is 64 bytes of
 * a row: 64 int8/fp8 columns or 128 int4 columns.
 * GM: QG_ROW accumulates everything and scales once at the end; QG_CHUNK
 * sums each chunk apart and adds scale * partial (its group holds the
 * whole chunk); QG_HALF (int8 with groups of 32, int4 with groups of 64:
 * two groups per chunk, lanes c = 0, 1 in the first) splits each MMA by
 * group; QG_AFFINE (int4 groups of 32) makes each lane's weights d * u + m
 * from its group's pair and accumulates them unscaled. EPI, PRE: as
 * matmul.cu's gemv_kernel (kernels/epilogue.cuh), fused kinds with NT == 1
 * only. MT (int4, QG_CHUNK, one token tile): the weight's meta words
 * instead of its scales and zero points, as qgemv_wide_kernel's.
 */
template <typename T, int FMT, int GM, int NT, int KSPLIT, int UNROLL, int MINB, int EPI, bool PRE,
	  bool MT = false>
__global__ void __launch_bounds__(KSPLIT * 32, MINB) qgemv_kernel(const T *x, qgemv_args a)
{
	static_assert(!MT || GM == QG_CHUNK, "meta words: one group a chunk or more");
	constexpr int CK = 4 * q_geom<FMT>::KL; /* columns per chunk */
	constexpr int NH = GM == QG_HALF ? 2 : 1;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int g = lane >> 2, c = lane & 3;
	int row_a, row_b;
	bool ok_a, ok_b;
	kern_epi_rows<EPI>(a.e, a.rows, blockIdx.x, g, &row_a, &row_b, &ok_a, &ok_b);
	/* rows past the end are never stored: read row 0 instead */
	const int ra = ok_a ? row_a : 0, rb = ok_b ? row_b : 0;
	const int n_chunk = (a.row_bytes + QG_CHUNK_BYTES - 1) / QG_CHUNK_BYTES;
	const int ch_begin = blockIdx.y * a.chunks_per_split;
	const int ch_end = min(n_chunk, ch_begin + a.chunks_per_split);
	const uint8_t *wa = a.w + (size_t)ra * a.row_bytes + c * 16;
	const uint8_t *wb = a.w + (size_t)rb * a.row_bytes + c * 16;
	const uint4 zero = make_uint4(0, 0, 0, 0);
	/* QG_CHUNK: chunk cu lies in group cu >> lg (a group is 1 or 2 chunks),
	 * a shift per chunk instead of a division */
	const unsigned lg = GM == QG_CHUNK ? __ffs(a.group / CK) - 1 : 0;

	float acc[NT][4];
	qg_zero(acc);
	/* W codes, group scales' bits (QG_CHUNK, QG_HALF) and int4 zero
	 * points of one round: chunks ch .. ch + UNROLL - 1 */
	uint4 va[UNROLL], vb[UNROLL];
	uint32_t sa[UNROLL][NH], sb[UNROLL][NH];
	uint32_t za[UNROLL], zb[UNROLL];
	int ch = ch_begin + warp * UNROLL;
	const int stride = KSPLIT * UNROLL;
	/* Chunks past ch_end hold zeros (W, scales and x), so a round may run
	 * whole with no branch between its chunks, and the compiler then
	 * interleaves their unpacking and MMAs. On an H100 that took the 7B
	 * GEMVs at n = 1 from 2086-2700 to 2165-2747 GB/s (int8) and int4
	 * from 1415 to 1442 on qkv. int4 with several token tiles (NT > 1)
	 * keeps the branch: without it int4 fell 10-16% at n = 32 (not
	 * profiled; bench/results/2026-11-24-nvidia-h100-qgemv2/). */
	constexpr bool kBranch = FMT == KERN_Q_INT4 && NT > 1;

	auto fetch = [&](int ch0) {
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			const int cu = ch0 + u;
			const bool in = cu < ch_end;
			const bool ok = in && cu * QG_CHUNK_BYTES + c * 16 < a.row_bytes;
			const size_t off = (size_t)cu * QG_CHUNK_BYTES;
			va[u] = ok && ok_a ? kern_ld_stream(wa + off) : zero;
			vb[u] = ok && ok_b ? kern_ld_stream(wb + off) : zero;
			const int grp0 = GM == QG_HALF ? 2 * cu : GM == QG_CHUNK ? (int)((unsigned)cu >> lg) : 0;
			if constexpr (GM == QG_CHUNK || GM == QG_HALF) {
				/* a group past the row: group 0's scale (finite)
				 * on products that are 0 */
#pragma unroll
				for (int h = 0; h < NH; h++) {
					const int gr = in && grp0 + h < a.groups ? grp0 + h : 0;
					if constexpr (MT) { /* scale and zero point: one word */
						sa[u][h] = __ldg(a.meta + (size_t)gr * a.rows + ra);
						sb[u][h] = __ldg(a.meta + (size_t)gr * a.rows + rb);
						continue;
					}
					sa[u][h] = q_scale_bits(a.scales, (size_t)ra * a.groups + gr,
								a.scale_f16);
					sb[u][h] = q_scale_bits(a.scales, (size_t)rb * a.groups + gr,
								a.scale_f16);
				}
			}
			if constexpr (GM == QG_AFFINE) {
				/* the lane's 32 codes are group 4 cu + c; lanes
				 * past the row get (0, 0): weights 0 */
				const uint32_t *pr = reinterpret_cast<const uint32_t *>(a.scales);
				const size_t gi = (size_t)4 * cu + c;
				za[u] = ok ? __ldg(pr + (size_t)ra * a.groups + gi) : 0u;
				zb[u] = ok ? __ldg(pr + (size_t)rb * a.groups + gi) : 0u;
			} else if constexpr (FMT == KERN_Q_INT4 && MT) {
				za[u] = zb[u] = 0; /* in sa, sb's top halves */
			} else if constexpr (FMT == KERN_Q_INT4) {
				/* groups of 64 (QG_HALF): lanes c = 0, 1 hold the
				 * chunk's first group, 2, 3 the second */
				int zg = grp0 + (GM == QG_HALF ? (c >> 1) : 0);
				zg = in && zg < a.groups ? zg : 0;
				za[u] = a.zeros ? __ldg(a.zeros + (size_t)ra * a.groups + zg) : 8u;
				zb[u] = a.zeros ? __ldg(a.zeros + (size_t)rb * a.groups + zg) : 8u;
			} else {
				za[u] = zb[u] = 0; /* unused */
			}
		}
	};

	fetch(ch);
	kern_pdl_wait(); /* x is the previous kernel's output */
	float pre_r[6], pre_p[2];
	kern_epi_prefetch<T, EPI>(a.e, a.rows, a.n, row_a, row_b, ok_a, ok_b, 2 * c, pre_r);
	if constexpr (PRE)
		kern_pre_load(a.e, a.n, pre_p);
	while (ch < ch_end) {
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			const int cu = ch + u;
			if (kBranch && cu >= ch_end) /* the same for the whole warp */
				break;
			const bool ok = cu < ch_end && cu * QG_CHUNK_BYTES + c * 16 < a.row_bytes;
			float fsa[NH] = {}, fsb[NH] = {};
			if constexpr (GM == QG_CHUNK || GM == QG_HALF)
#pragma unroll
				for (int h = 0; h < NH; h++) {
					fsa[h] = q_scale_of(sa[u][h], a.scale_f16);
					fsb[h] = q_scale_of(sb[u][h], a.scale_f16);
				}
			const uint32_t zpa = MT ? sa[u][0] >> 16 : za[u];
			const uint32_t zpb = MT ? sb[u][0] >> 16 : zb[u];
			qg_chunk<T, FMT, GM, NT>(a, x, va[u], vb[u], zpa, zpb, fsa, fsb, cu, ok, g, c,
						 acc);
		}
		ch += stride;
		if (ch >= ch_end)
			break;
		fetch(ch);
	}
	kern_pdl_launch_next();
	qg_block_end<T, GM, NT, KSPLIT, EPI, PRE>(a, acc, ra, rb, row_a, row_b, ok_a, ok_b, pre_r,
						  pre_p);
}

/* Launch, as a programmatic dependent when qb->pdl (a refused PDL launch
 * falls back to a plain one, once and for all). */
template <typename K, typename... Args>
static int q_launch(kern_qblas *qb, K kernel, dim3 grid, dim3 block, Args... args)
{
	kern_gemv_l1((const void *)kernel, (int)(block.x * block.y * block.z));
	return kern_launch_pdl(&qb->pdl, "quant", qb->stream, kernel, grid, block, args...);
}

/*
 * Block shape: KSPLIT warps on a 16-row tile, UNROLL chunks of 1 KiB (16
 * rows x 64 bytes) in flight per warp. Up to 8 tokens (NT 1) the shapes are
 * the ones lab/qgemv.cu's sweep measured best on an H100
 * (bench/results/2026-11-23-nvidia-h100-qgemv, table 4): int8 and fp8 16
 * warps x 2 chunks (2469 / 2542 GB/s on the 7B qkv / down rows against
 * 2192 / 2081 for the fp16 GEMV's 8 x 8), int4 8 x 2 (1584 / 1436 against
 * 1412 / 1479 for 8 x 4). int8 with group scales takes int8's per-row
 * shape (same loads, a scale multiply per chunk; not swept separately).
 * Two groups per chunk (QG_HALF) and NT >= 2, where accumulators and x
 * take the registers, keep 8 warps and fewer chunks.
 */
template <int FMT, int GM, int NT> constexpr int qg_ksplit()
{
	return NT == 1 && GM != QG_HALF && FMT != KERN_Q_INT4 ? 16 : 8;
}
template <int FMT, int GM, int NT> constexpr int qg_unroll()
{
	return GM == QG_HALF ? (NT <= 4 ? 2 : 1)
	       : NT == 1 ? 2
	       : NT == 2 ? (FMT == KERN_Q_INT4 ? 2 : 4)
			 : 2;
}

/* A fused epilogue that cannot run (the columns split across blocks):
 * nothing launched, the caller runs the unfused pair. */
#define QG_UNFUSED 1

/* Launch the GEMV of a shape and epilogue, MINB blocks an SM (0:
 * qg_min_blocks); PRE: its input not yet divided by its rms. */
template <typename T, int FMT, int GM, int NT, int KSPLIT, int UNROLL, int MINB, int EPI,
	  bool PRE = false>
static int qg_launch(kern_qblas *qb, dim3 grid, const T *x, const qgemv_args &a)
{
	constexpr int MB = MINB > 0 ? MINB : qg_min_blocks<FMT, NT>();
	if constexpr (FMT == KERN_Q_INT4 && GM == QG_CHUNK && NT == 1)
		if (a.meta && a.scale_f16) /* int4 up to 8 tokens: the meta words */
			return q_launch(qb,
					qgemv_kernel<T, FMT, GM, NT, KSPLIT, UNROLL, MB, EPI, PRE, true>,
					grid, dim3(KSPLIT * 32), x, a);
	return q_launch(qb, qgemv_kernel<T, FMT, GM, NT, KSPLIT, UNROLL, MB, EPI, PRE>, grid,
			dim3(KSPLIT * 32), x, a);
}

/* SWIGLU or ROPE, PRE when the input is not yet divided by its rms: there
 * only with 8 warps or more (kern_pre_load), one token tile. */
template <typename T, int FMT, int GM, int NT, int KSPLIT, int UNROLL, int MINB, int EPI>
static int qg_launch_pre(kern_qblas *qb, dim3 grid, const T *x, const qgemv_args &a)
{
	if (!a.e.h.pre_ss)
		return qg_launch<T, FMT, GM, NT, KSPLIT, UNROLL, MINB, EPI>(qb, grid, x, a);
	if constexpr (NT == 1 && KSPLIT >= 8)
		return qg_launch<T, FMT, GM, NT, KSPLIT, UNROLL, MINB, EPI, true>(qb, grid, x, a);
	return QG_UNFUSED;
}

/* The GEMV with a given shape. Splits the columns across blocks only when
 * the 16-row tiles alone leave SMs idle (out_dim < 16 x SMs: tensor-
 * parallel shards, small layers), each split at least one full round of
 * the block's warps, the partials fitting the workspace. */
template <typename T, int FMT, int GM, int NT, int KSPLIT, int UNROLL, int MINB = 0>
static int qgemv_run(kern_qblas *qb, qgemv_args a, const T *x)
{
	const int tiles = kern_epi_tiles(a.e, a.rows);
	const int n_chunk = (a.row_bytes + QG_CHUNK_BYTES - 1) / QG_CHUNK_BYTES;
	int splits = 1;
	if (tiles < qb->sm_count) {
		splits = (2 * qb->sm_count + tiles - 1) / tiles;
		int most = n_chunk / (KSPLIT * UNROLL);
		size_t fit = QB_WORKSPACE_BYTES / (sizeof(float) * (size_t)a.n * a.rows);
		if (splits > most)
			splits = most;
		if ((size_t)splits > fit)
			splits = (int)fit;
		if (splits < 1)
			splits = 1;
	}
	const int per = (n_chunk + splits - 1) / splits;
	splits = (n_chunk + per - 1) / per;
	a.chunks_per_split = per;
	const dim3 grid(tiles, splits);
	if ((splits > 1 || NT > 1) && a.e.kind != KERN_EPI_STORE)
		return QG_UNFUSED;
#define QG_LAUNCH(EPI, args) qg_launch<T, FMT, GM, NT, KSPLIT, UNROLL, MINB, EPI>(qb, grid, x, args)
	if (splits == 1) {
		if constexpr (NT == 1) { /* fused: up to 8 tokens */
			if (a.e.kind == KERN_EPI_SWIGLU)
				return qg_launch_pre<T, FMT, GM, NT, KSPLIT, UNROLL, MINB,
						     KERN_EPI_SWIGLU>(qb, grid, x, a);
			if (a.e.kind == KERN_EPI_ADD_NORM)
				return QG_LAUNCH(KERN_EPI_ADD_NORM, a);
			if (a.e.kind == KERN_EPI_ADD)
				return QG_LAUNCH(KERN_EPI_ADD, a);
			if (a.e.kind == KERN_EPI_ROPE)
				return qg_launch_pre<T, FMT, GM, NT, KSPLIT, UNROLL, MINB,
						     KERN_EPI_ROPE>(qb, grid, x, a);
		}
		return QG_LAUNCH(KERN_EPI_STORE, a);
	}
	qgemv_args p = a;
	p.out = qb->workspace;
	p.out_f32 = true;
	TRY(QG_LAUNCH(KERN_EPI_STORE, p));
#undef QG_LAUNCH
	return q_splitk_finish<T>(a.out, a.out_f32, qb->workspace, splits, (size_t)a.n * a.rows,
				  qb->stream);
}

/* The wide GEMV's block end: warp 0 sums every warp's accumulators of
 * each tile in qg_block_end's order and stores them (ADD_NORM's last
 * block then normalises with every warp). */
template <typename T, int GM, int KSPLIT, int EPI, int RT>
__device__ __forceinline__ void qw_block_end(const qgemv_args &a, float (&acc)[RT][4],
					     const int (&ra)[RT], const int (&rb)[RT],
					     const int (&row_a)[RT], const int (&row_b)[RT],
					     const bool (&ok_a)[RT], const bool (&ok_b)[RT])
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if constexpr (KSPLIT > 1) {
		qg_warp_sum<KSPLIT>(acc, [] {});
		if (warp > 0 && EPI != KERN_EPI_ADD_NORM)
			return;
	}
	if (warp == 0)
#pragma unroll
		for (int r = 0; r < RT; r++) {
			float pre[6] = {0, 0, 0, 0, 0, 0}; /* ADD's only */
			float(&one)[1][4] = *reinterpret_cast<float(*)[1][4]>(&acc[r]);
			qgemv_store<T, GM, 1, EPI>(a, one, ra[r], rb[r], row_a[r], row_b[r], ok_a[r],
						   ok_b[r], lane & 3, pre);
		}
	if constexpr (EPI == KERN_EPI_ADD_NORM)
		kern_epi_finish<T>(a.e, a.rows, a.n);
}

/* ---- the wide GEMV: one token tile, RT row tiles a warp ---- */

/* The epilogue's rows of block bx's RT tiles (kern_epi_rows) and the rows
 * its warps read: rows past the end read row 0, never stored. */
template <int EPI, int RT>
__device__ __forceinline__ void qw_rows(const qgemv_args &a, int bx, int g, int (&row_a)[RT],
					int (&row_b)[RT], int (&ra)[RT], int (&rb)[RT],
					bool (&ok_a)[RT], bool (&ok_b)[RT])
{
#pragma unroll
	for (int r = 0; r < RT; r++) {
		kern_epi_rows<EPI>(a.e, a.rows, bx * RT + r, g, &row_a[r], &row_b[r], &ok_a[r],
				   &ok_b[r]);
		ra[r] = ok_a[r] ? row_a[r] : 0;
		rb[r] = ok_b[r] ? row_b[r] : 0;
	}
}

/* blockIdx.x read anew (volatile): the compiler can neither reuse an
 * earlier read nor keep what was made of it live through a loop to stand
 * in for this one */
__device__ __forceinline__ int qw_ctaid_x()
{
	unsigned v;
	asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
	return (int)v;
}

/*
 * A lane's W bytes of rows a and b of each of RT 16-row tiles for one
 * chunk, with x's fragment loaded once for all of them: qg_chunk's k
 * order and MMAs, so the products and their fp32 order are qg_chunk's,
 * and every tile's output is the same bits. FULL: the chunk lies whole in
 * the row (no predicate on x); else ok says whether it does.
 */
template <typename T, int FMT, int GM, int RT, bool FULL>
__device__ __forceinline__ void qw_chunk(const T *xk, const uint4 (&va)[RT], const uint4 (&vb)[RT],
					 const uint32_t (&za)[RT], const uint32_t (&zb)[RT],
					 const float (&sa)[RT], const float (&sb)[RT], bool ok, int c,
					 float (&acc)[RT][4])
{
	constexpr int KL = q_geom<FMT>::KL, NP = KL / 2, NX = KL / 8;
	uint32_t xr[NP];
	const uint4 *xp = reinterpret_cast<const uint4 *>(xk);
#pragma unroll
	for (int m = 0; m < NX; m++) {
		const uint4 v = FULL || ok ? xp[m] : make_uint4(0, 0, 0, 0);
		xr[4 * m] = v.x;
		xr[4 * m + 1] = v.y;
		xr[4 * m + 2] = v.z;
		xr[4 * m + 3] = v.w;
	}
#pragma unroll
	for (int r = 0; r < RT; r++) {
		uint32_t fa[NP], fb[NP];
		if constexpr (FMT == KERN_Q_INT4) {
			q_dequant16<T, FMT>(va[r], fa, q_zsub<T>(za[r]));
			q_dequant16<T, FMT>(vb[r], fb, q_zsub<T>(zb[r]));
		} else {
			q_dequant16<T, FMT>(va[r], fa, 0);
			q_dequant16<T, FMT>(vb[r], fb, 0);
		}
		float t[1][4] = {{0, 0, 0, 0}};
#pragma unroll
		for (int i = 0; i < NP / 2; i++) {
			const uint32_t af[4] = {fa[2 * i], fb[2 * i], fa[2 * i + 1], fb[2 * i + 1]};
			q_mma_step<T, GM>(acc[r], t, af, xr[2 * i], xr[2 * i + 1], c);
		}
		if constexpr (GM == QG_CHUNK) {
			acc[r][0] += sa[r] * t[0][0];
			acc[r][1] += sa[r] * t[0][1];
			acc[r][2] += sb[r] * t[0][2];
			acc[r][3] += sb[r] * t[0][3];
		}
	}
}

/*
 * The GEMV at one token tile (n <= 8), as qgemv_kernel but lean where a
 * round is whole: rounds whose UNROLL chunks lie whole in the row (every
 * round but a row's last where the row is a multiple of 64 bytes) load
 * with no predicate and no zero fill; rows past the end read row 0
 * (never stored), and lanes of tokens past n read token n - 1 (their MMA
 * column is never stored either); scale indices are 32-bit; SF: fp16
 * group scales (QG_CHUNK), no branch on the dtype. A whole round of int8
 * per row at 16 warps x 2 chunks takes 60 instructions a KiB of W against
 * qgemv_kernel's 87 (SASS); int4 at 8 x 2, 133 against 173-188, which
 * alone did not make int4 faster.
 * ROLL: in a whole round followed by a whole one, each chunk's registers
 * take the next round's chunk as soon as the chunk is used, so loads stay
 * in flight while the warp computes (int4 qkv at 4 x 2: 2,215 -> 2,529
 * GB/s).
 * RT 16-row tiles a block, each warp taking all of them, share x's
 * fragment and a chunk's address arithmetic RT ways; the library runs
 * RT = 1 (RT = 2 and 4 lost in lab-qgemv's table 4 on every 7B row,
 * 2026-12-01).
 * Same k order, chunk split and warp sum as qgemv_kernel: at the same
 * block shape the same bits. GM: QG_ROW or QG_CHUNK; EPI: STORE, SWIGLU,
 * ROPE or ADD_NORM (no PRE, no add alone: qgemv_kernel's). MT: int4's
 * meta words (kern_qweight.meta) for the scale and zero point arrays,
 * one load a row a chunk from a sector the warp's 8 rows share; the same
 * values, so the same bits.
 * Group scales (int4, int8 groups of 64 and 128: QG_CHUNK) work the
 * epilogue's rows out again after the loop (qw_rows from a fresh
 * %ctaid.x), so the loop holds only the rows it reads: int4's RoPE frame
 * 56 -> 32 bytes (cosf / sinf's, after the loop), SwiGLU's 16 -> 0, int4
 * +2.4% at batch 1; int8 groups of 128 40 -> 32 and 16 -> 0, +2.7% at
 * batch 1, +5.6% at 8. Per-row scales (int8, fp8) spill nothing there
 * and lost 0.1-1.0% with it, so they keep theirs
 * (bench/results/2026-12-01-nvidia-h200-qgemv-epilogue-rows/).
 */
template <typename T, int FMT, int GM, int KSPLIT, int UNROLL, int MINB, int EPI, int RT, bool ROLL,
	  bool SF, bool MT>
__global__ void __launch_bounds__(KSPLIT * 32, MINB) qgemv_wide_kernel(const T *x, qgemv_args a)
{
	static_assert(GM == QG_ROW || GM == QG_CHUNK, "one group a chunk at most");
	static_assert(!MT || (GM == QG_CHUNK && SF), "meta words: fp16 group scales");
	static_assert(EPI != KERN_EPI_ADD && EPI != KERN_EPI_ALLREDUCE_ADD, "sums by block");
	constexpr int CK = 4 * q_geom<FMT>::KL; /* columns per chunk */
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int g = lane >> 2, c = lane & 3;
	int row_a[RT], row_b[RT], ra[RT], rb[RT];
	bool ok_a[RT], ok_b[RT];
	const uint8_t *wa[RT], *wb[RT];
	qw_rows<EPI, RT>(a, blockIdx.x, g, row_a, row_b, ra, rb, ok_a, ok_b);
#pragma unroll
	for (int r = 0; r < RT; r++) {
		wa[r] = a.w + (size_t)ra[r] * a.row_bytes + c * 16;
		wb[r] = a.w + (size_t)rb[r] * a.row_bytes + c * 16;
	}
	const int n_chunk = (a.row_bytes + QG_CHUNK_BYTES - 1) / QG_CHUNK_BYTES;
	const int ch_begin = blockIdx.y * a.chunks_per_split;
	const int ch_end = min(n_chunk, ch_begin + a.chunks_per_split);
	const bool whole = a.row_bytes % QG_CHUNK_BYTES == 0;
	const unsigned lg = GM == QG_CHUNK ? __ffs(a.group / CK) - 1 : 0;
	const T *xl = x + (size_t)min(g, a.n - 1) * a.cols + c * q_geom<FMT>::KL;

	float acc[RT][4];
	qg_zero(acc);
	uint4 va[UNROLL][RT], vb[UNROLL][RT];
	uint32_t sa[UNROLL][RT], sb[UNROLL][RT], za[UNROLL][RT], zb[UNROLL][RT];
	int ch = ch_begin + warp * UNROLL;
	const int stride = KSPLIT * UNROLL;

	/* chunk cu's codes, scale bits and zero points into slot u; FULL: in the row */
	auto fetch_one = [&](int u, int cu, auto full) {
		constexpr bool FULL = decltype(full)::value;
		const bool in = FULL || cu < ch_end;
		const bool ok = FULL || (in && cu * QG_CHUNK_BYTES + c * 16 < a.row_bytes);
		const size_t off = (size_t)cu * QG_CHUNK_BYTES;
		const int gr = GM == QG_CHUNK && in ? (int)((unsigned)cu >> lg) : 0;
#pragma unroll
		for (int r = 0; r < RT; r++) {
			va[u][r] = ok ? kern_ld_stream(wa[r] + off) : make_uint4(0, 0, 0, 0);
			vb[u][r] = ok ? kern_ld_stream(wb[r] + off) : make_uint4(0, 0, 0, 0);
			/* 32-bit indices: one multiply-add an address */
			[[maybe_unused]] const unsigned ia = (unsigned)(ra[r] * a.groups + gr);
			[[maybe_unused]] const unsigned ib = (unsigned)(rb[r] * a.groups + gr);
			if constexpr (MT) { /* scale and zero point in one word */
				sa[u][r] = __ldg(a.meta + (unsigned)(gr * a.rows + ra[r]));
				sb[u][r] = __ldg(a.meta + (unsigned)(gr * a.rows + rb[r]));
				continue;
			}
			if constexpr (GM == QG_CHUNK) {
				sa[u][r] = q_scale_bits(a.scales, ia, SF);
				sb[u][r] = q_scale_bits(a.scales, ib, SF);
			}
			if constexpr (FMT == KERN_Q_INT4) {
				za[u][r] = a.zeros ? __ldg(a.zeros + ia) : 8u;
				zb[u][r] = a.zeros ? __ldg(a.zeros + ib) : 8u;
			} else {
				za[u][r] = zb[u][r] = 0; /* unused */
			}
		}
	};
	/* chunk cu, held in slot u, into the accumulators */
	auto chunk = [&](int u, int cu, auto full) {
		constexpr bool FULL = decltype(full)::value;
		const bool ok = FULL || (cu < ch_end && cu * QG_CHUNK_BYTES + c * 16 < a.row_bytes);
		float fsa[RT], fsb[RT];
		uint32_t zpa[RT], zpb[RT];
#pragma unroll
		for (int r = 0; r < RT; r++) {
			fsa[r] = GM == QG_CHUNK ? q_scale_of(sa[u][r], SF) : 0.0f; /* MT: low half */
			fsb[r] = GM == QG_CHUNK ? q_scale_of(sb[u][r], SF) : 0.0f;
			zpa[r] = MT ? sa[u][r] >> 16 : za[u][r];
			zpb[r] = MT ? sb[u][r] >> 16 : zb[u][r];
		}
		qw_chunk<T, FMT, GM, RT, FULL>(xl + (size_t)cu * CK, va[u], vb[u], zpa, zpb, fsa, fsb,
					       ok, c, acc);
	};
	auto fetch = [&](int ch0, auto full) {
#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			fetch_one(u, ch0 + u, full);
	};
	auto round = [&](int ch0, auto full) {
#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			chunk(u, ch0 + u, full);
	};
	/* ROLL: a whole round followed by a whole one refills each chunk's
	 * registers with the next round's chunk as soon as it is used, so
	 * the warp's loads stay in flight while it computes */
	auto round_roll = [&](int ch0, int next) {
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			chunk(u, ch0 + u, std::true_type());
			fetch_one(u, next + u, std::true_type());
		}
	};
	using yes = std::true_type;
	using no = std::false_type;

	bool full = whole && ch + UNROLL <= ch_end;
	if (full)
		fetch(ch, yes());
	else
		fetch(ch, no());
	kern_pdl_wait(); /* x is the previous kernel's output */
	while (ch < ch_end) {
		const int next = ch + stride;
		const bool next_full = whole && next + UNROLL <= ch_end;
		if (ROLL && full && next_full) {
			round_roll(ch, next);
			ch = next;
			continue;
		}
		if (full)
			round(ch, yes());
		else
			round(ch, no());
		ch = next;
		if (ch >= ch_end)
			break;
		full = next_full;
		if (full)
			fetch(ch, yes());
		else
			fetch(ch, no());
	}
	kern_pdl_launch_next();
	if constexpr (GM == QG_CHUNK) /* the rows again: none held through the loop */
		qw_rows<EPI, RT>(a, qw_ctaid_x(), g, row_a, row_b, ra, rb, ok_a, ok_b);
	qw_block_end<T, GM, KSPLIT, EPI, RT>(a, acc, ra, rb, row_a, row_b, ok_a, ok_b);
}

/* Launch the wide GEMV of a shape, one split: fp16 or fp32 group scales,
 * or int4's meta words where the weight has them (one load a row a chunk
 * instead of a scale and a zero point). */
template <typename T, int FMT, int GM, int KSPLIT, int UNROLL, int MINB, int EPI, int RT, bool ROLL>
static int qw_launch(kern_qblas *qb, dim3 grid, const T *x, const qgemv_args &a)
{
	if constexpr (GM == QG_CHUNK) {
		if constexpr (FMT == KERN_Q_INT4)
			if (a.meta && a.scale_f16)
				return q_launch(qb,
						qgemv_wide_kernel<T, FMT, GM, KSPLIT, UNROLL, MINB, EPI,
								  RT, ROLL, true, true>,
						grid, dim3(KSPLIT * 32), x, a);
		if (!a.scale_f16)
			return q_launch(qb,
					qgemv_wide_kernel<T, FMT, GM, KSPLIT, UNROLL, MINB, EPI, RT, ROLL,
							  false, false>,
					grid, dim3(KSPLIT * 32), x, a);
	}
	return q_launch(qb,
			qgemv_wide_kernel<T, FMT, GM, KSPLIT, UNROLL, MINB, EPI, RT, ROLL, true, false>,
			grid, dim3(KSPLIT * 32), x, a);
}

/* The wide GEMV with a given shape, every tile's columns in one block:
 * QG_UNFUSED where it does not run (more than one token tile, two groups
 * a chunk, an epilogue it lacks), the caller then takes qgemv_run. */
template <typename T, int FMT, int GM, int KSPLIT, int UNROLL, int MINB, int RT, bool ROLL = false>
static int qgemv_wide_run(kern_qblas *qb, qgemv_args a, const T *x)
{
	if constexpr (GM != QG_ROW && GM != QG_CHUNK) {
		return QG_UNFUSED;
	} else {
		if (a.n > 8 || a.e.h.pre_ss)
			return QG_UNFUSED;
		const int tiles = kern_epi_tiles(a.e, a.rows);
		a.chunks_per_split = (a.row_bytes + QG_CHUNK_BYTES - 1) / QG_CHUNK_BYTES;
		const dim3 grid((tiles + RT - 1) / RT, 1);
		switch (a.e.kind) {
		case KERN_EPI_STORE:
			return qw_launch<T, FMT, GM, KSPLIT, UNROLL, MINB, KERN_EPI_STORE, RT, ROLL>(qb, grid,
											       x, a);
		case KERN_EPI_SWIGLU:
			return qw_launch<T, FMT, GM, KSPLIT, UNROLL, MINB, KERN_EPI_SWIGLU, RT, ROLL>(qb, grid,
												x, a);
		case KERN_EPI_ROPE:
			return qw_launch<T, FMT, GM, KSPLIT, UNROLL, MINB, KERN_EPI_ROPE, RT, ROLL>(qb, grid, x,
											      a);
		case KERN_EPI_ADD_NORM:
			return qw_launch<T, FMT, GM, KSPLIT, UNROLL, MINB, KERN_EPI_ADD_NORM, RT, ROLL>(
				qb, grid, x, a);
		}
		return QG_UNFUSED;
	}
}

/* Bands of row tiles by the blocks an SM they make, for the GEMV's
 * shapes at one token tile (here, and int4's in qgemv_tiles): from
 * QG_MID_BLOCKS, 4 warps a block; up to QG_WAVE_BLOCKS (one wave of 4 x 2
 * blocks), 2 chunks; beyond it the widest rows' shape. */
#define QG_MID_BLOCKS 4
#define QG_WAVE_BLOCKS 6
#define QG_NARROW_BLOCKS 2 /* below QG_MID_BLOCKS: 8 warps a block */

/* Whether a GEMV call runs on the wide kernel: the switch on, one token
 * tile, one group a chunk at most (not int8 groups of 32, int4 groups of
 * 64 or 32), an epilogue it has, and tiles enough that one split covers
 * the SMs (else qgemv_kernel splits the columns); int4 without its meta
 * words from 4 blocks' worth of tiles an SM: below that (the 7B's o and
 * down) qgemv_kernel's 8 x 2 ran o 2-10% faster than any wide shape
 * (bench/results/2026-12-01-nvidia-h200-qgemv-wide/); with them the wide
 * 8 x 2 ties it on o and reads down 10.6% faster
 * (bench/results/2026-12-01-nvidia-h200-int4-meta/). */
static bool wide_takes(const kern_qblas *qb, const qgemv_args &a, int format)
{
	const int k = a.e.kind, tiles = kern_epi_tiles(a.e, a.rows);
	const bool fmt = format == KERN_Q_FP8 || (format == KERN_Q_INT8 && a.group != 32) ||
			 (format == KERN_Q_INT4 && a.group != KERN_Q_INT4_GROUP_AFFINE &&
			  a.group != KERN_Q_INT4_GROUP_SMALL &&
			  (a.meta || tiles >= QG_MID_BLOCKS * qb->sm_count));
	return qb->wide && fmt && a.n >= 1 && a.n <= 8 && !a.e.h.pre_ss &&
	       (k == KERN_EPI_STORE || k == KERN_EPI_SWIGLU || k == KERN_EPI_ROPE ||
		k == KERN_EPI_ADD_NORM) &&
	       tiles >= qb->sm_count;
}


/*
 * The wide GEMV's block shape by the tiles (QG_UNFUSED where wide_takes
 * says no: the caller takes qgemv_kernel), one row tile a block, each
 * chunk's registers refilled with the next round's chunk as soon as it
 * is used (ROLL): the fastest of lab-qgemv's table 4 on the 7B rows at
 * one token on an H200 (2026-12-01, GB/s). From 4 blocks' worth of tiles
 * an SM (qkv, gate_up) 4 warps x 2 chunks at 6 blocks an SM (int4 qkv
 * 2,529 against qgemv_kernel's 2,259, gate_up 2,636 against 2,636; fp8
 * qkv / gate_up 3,652 / 3,927 against 3,505 / 3,733 without ROLL; int8
 * 3,532 / 3,682 against 3,518 / 3,687), fewer (o, down; int8 and fp8) 8 x
 * 3 at 2 (fp8 2,736 / 3,463 against 2,667 / 3,359 for 16 x 2, int8 2,689
 * / 3,417 against 2,660 / 3,337); int4 with meta words 8 x 2 at 2 (o
 * 1,662 against 1,675 for qgemv_kernel's 8 x 2, down 2,460 against 2,225).
 */
template <typename T, int FMT, int GM>
static int qgemv_wide_tiles(kern_qblas *qb, const qgemv_args &a, const T *x)
{
	if (!wide_takes(qb, a, FMT))
		return QG_UNFUSED;
	if constexpr (GM == QG_ROW || GM == QG_CHUNK) {
		if (kern_epi_tiles(a.e, a.rows) >= QG_MID_BLOCKS * qb->sm_count)
			return qgemv_wide_run<T, FMT, GM, 4, 2, QG_WAVE_BLOCKS, 1, true>(qb, a, x);
		if constexpr (FMT != KERN_Q_INT4)
			return qgemv_wide_run<T, FMT, GM, 8, 3, QG_NARROW_BLOCKS, 1, true>(qb, a,
											    x);
		else /* meta words (wide_takes) */
			return qgemv_wide_run<T, FMT, GM, 8, 2, QG_NARROW_BLOCKS, 1, true>(qb, a,
											    x);
	}
	return QG_UNFUSED;
}

/*
 * The wide GEMV with K split into `splits` slices (kern_qmatmul_parts_cuda),
 * each slice's fp32 product stored apart, [splits][n][rows] in the
 * workspace, for a consumer that sums them (the add + RMSNorm after o and
 * down): 4 warps x 2 chunks at 6 blocks an SM, so a projection of fewer
 * tiles than 4 blocks' worth an SM (the 7B's o and down: 256) fills the
 * SMs' block slots as qkv and gate_up do, each slice a whole number of
 * rounds. At most as many slices as one wave of 6 blocks an SM holds:
 * 13B's 320 tiles ran slower in 3 slices (960 blocks) than in 2, int8
 * 239.3 against 246.4 tokens/s at batch 1 on one H200, fp8 239.7 against
 * 245.7 (bench/results/2026-12-01-nvidia-h200-gemv-parts16/), as the 7B's
 * 4 slices had lost to 3; against the unsplit GEMV, three runs a side,
 * 13B int8 +4.9% / +6.7% at batch 1 / 8 in 2 slices, fp8 +6.7% / +8.2%.
 * *splits: the count run (1: nothing launched, QG_UNFUSED).
 */
#define QG_PARTS_ROUND 8 /* chunks a round of the 4 x 2 shape */
template <typename T, int FMT, int GM>
static int qgemv_parts_run(kern_qblas *qb, qgemv_args a, const T *x, int max_splits, int *splits)
{
	*splits = 1;
	if constexpr (GM != QG_ROW && GM != QG_CHUNK) {
		return QG_UNFUSED;
	} else {
		const int n_chunk = (a.row_bytes + QG_CHUNK_BYTES - 1) / QG_CHUNK_BYTES;
		const int tiles = (a.rows + QG_ROWS - 1) / QG_ROWS;
		const size_t fit = QB_WORKSPACE_BYTES / (sizeof(float) * (size_t)a.n * a.rows);
		const int wave = QG_WAVE_BLOCKS * qb->sm_count / tiles;
		int s = max_splits < (int)fit ? max_splits : (int)fit;
		if (s > wave)
			s = wave;
		if (s < 2 || a.n > 8 || n_chunk < 2 * QG_PARTS_ROUND)
			return QG_UNFUSED;
		int per = (n_chunk + s - 1) / s;
		per = (per + QG_PARTS_ROUND - 1) / QG_PARTS_ROUND * QG_PARTS_ROUND;
		s = (n_chunk + per - 1) / per;
		if (s < 2)
			return QG_UNFUSED;
		a.chunks_per_split = per;
		a.out = qb->workspace;
		a.out_f32 = true;
		a.e = kern_epi_of(nullptr, a.rows, nullptr);
		*splits = s;
		return qw_launch<T, FMT, GM, 4, 2, QG_WAVE_BLOCKS, KERN_EPI_STORE, 1, true>(
			qb, dim3(tiles, s), x, a);
	}
}

template <typename T>
static int qgemv_parts(kern_qblas *qb, const qgemv_args &a, const void *x, int format,
		       int max_splits, int *splits)
{
	const T *xt = (const T *)x;
	if (format == KERN_Q_INT8 && a.group == 0)
		return qgemv_parts_run<T, KERN_Q_INT8, QG_ROW>(qb, a, xt, max_splits, splits);
	if (format == KERN_Q_INT8 && a.group != 32)
		return qgemv_parts_run<T, KERN_Q_INT8, QG_CHUNK>(qb, a, xt, max_splits, splits);
	if (format == KERN_Q_FP8)
		return qgemv_parts_run<T, KERN_Q_FP8, QG_ROW>(qb, a, xt, max_splits, splits);
	if (format == KERN_Q_INT4 && a.group != KERN_Q_INT4_GROUP_AFFINE &&
	    a.group != KERN_Q_INT4_GROUP_SMALL)
		return qgemv_parts_run<T, KERN_Q_INT4, QG_CHUNK>(qb, a, xt, max_splits, splits);
	*splits = 1;
	return QG_UNFUSED;
}

/*
 * int4 with group scales (groups of 128) up to 8 tokens: the shape by
 * the tiles. lab/qgemv.cu's table 4 on an H100 (7B rows, n = 1, GB/s,
 * bench/results/2026-11-25-nvidia-h100-q4-2/h3 and h4), against 8 x 2
 * chunks at 3 blocks an SM before:
 *   - up to 6 blocks an SM hold every tile in one wave: 4 warps x 2
 *     chunks at 6 (qkv, 768 tiles on 132 SMs: 2153 against 1982);
 *   - more tiles: 4 x 4 at 4 (gate-up, 1376 tiles: 2377 against 2161);
 *   - fewer than 4 blocks' worth: 8 x 2 at 2, whose 128 registers hold
 *     a round without spilling (o and down, 256 tiles: 1546 and 1994
 *     against 1392 and 1892).
 */

template <typename T, int FMT, int GM>
static int qgemv_tiles(kern_qblas *qb, const qgemv_args &a, const T *x)
{
#define QG_RUN(NT) \
	qgemv_run<T, FMT, GM, NT, qg_ksplit<FMT, GM, NT>(), qg_unroll<FMT, GM, NT>()>(qb, a, x)
	if (a.n <= 8) {
		const int rc = qgemv_wide_tiles<T, FMT, GM>(qb, a, x);
		if (rc != QG_UNFUSED)
			return rc;
	}
	if constexpr (FMT == KERN_Q_INT4 && GM == QG_CHUNK) {
		const int tiles = kern_epi_tiles(a.e, a.rows);
		if (a.n <= 8 && tiles > QG_WAVE_BLOCKS * qb->sm_count)
			return qgemv_run<T, FMT, GM, 1, 4, 4, 4>(qb, a, x);
		if (a.n <= 8 && tiles >= QG_MID_BLOCKS * qb->sm_count)
			return qgemv_run<T, FMT, GM, 1, 4, 2, QG_WAVE_BLOCKS>(qb, a, x);
		if (a.n <= 8)
			return qgemv_run<T, FMT, GM, 1, 8, 2, QG_NARROW_BLOCKS>(qb, a, x);
	}
	if (a.n <= 8)
		return QG_RUN(1);
	if (a.n <= 16)
		return QG_RUN(2);
	if (a.n <= 32)
		return QG_RUN(4);
	return QG_RUN(8);
#undef QG_RUN
}

template <typename T>
static int qgemv_dispatch(kern_qblas *qb, const qgemv_args &a, const void *x, int format)
{
	const T *xt = (const T *)x;
	switch (format) {
	case KERN_Q_INT8:
		if (a.group == 0)
			return qgemv_tiles<T, KERN_Q_INT8, QG_ROW>(qb, a, xt);
		if (a.group == 32)
			return qgemv_tiles<T, KERN_Q_INT8, QG_HALF>(qb, a, xt);
		return qgemv_tiles<T, KERN_Q_INT8, QG_CHUNK>(qb, a, xt);
	case KERN_Q_FP8:
		return qgemv_tiles<T, KERN_Q_FP8, QG_ROW>(qb, a, xt);
	case KERN_Q_INT4:
		if (a.group == KERN_Q_INT4_GROUP_AFFINE)
			return qgemv_tiles<T, KERN_Q_INT4, QG_AFFINE>(qb, a, xt);
		if (a.group == KERN_Q_INT4_GROUP_SMALL)
			return qgemv_tiles<T, KERN_Q_INT4, QG_HALF>(qb, a, xt);
		return qgemv_tiles<T, KERN_Q_INT4, QG_CHUNK>(qb, a, xt);
	}
	return SL_EINVAL;
}

static qgemv_args qgemv_args_of(const kern_qweight *w, void *out, bool out_f32, int n)
{
	qgemv_args a;
	memset(&a, 0, sizeof a);
	static_cast<q_layout &>(a) = q_layout_of(w);
	a.out = out;
	a.n = n;
	a.out_f32 = out_f32;
	a.e = kern_epi_of(nullptr, w->rows, nullptr);
	return a;
}

/* ---- dequantize + cuBLAS ---- */

/* Rows [row0, row0 + nrows) of W into dst [nrows, cols] of T: each value
 * scale * code (int4 groups of 32: d * u + m in fp32) rounded once to T.
 * One thread per 16 bytes of codes. */
template <typename T, int FMT>
__global__ void qdequant_kernel(T *__restrict__ dst, qgemv_args a, int row0, int nrows)
{
	constexpr int KL = q_geom<FMT>::KL;
	const int per_row = a.row_bytes / 16;
	const size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (v >= (size_t)nrows * per_row)
		return;
	const int r = (int)(v / per_row), j = (int)(v % per_row), row = row0 + r;
	const uint4 raw = kern_ld_stream(a.w + (size_t)row * a.row_bytes + (size_t)j * 16);
	const int k0 = j * KL, grp = a.group ? k0 / a.group : 0; /* KL divides every group */
	const size_t gi = (size_t)row * a.groups + grp;
	const bool affine = FMT == KERN_Q_INT4 && a.group == KERN_Q_INT4_GROUP_AFFINE;
	float s, mn = 0; /* affine: the group's minimum */
	uint32_t z = 8;
	if (affine) { /* the thread's 32 codes are group gi */
		const uint32_t dm = __ldg(reinterpret_cast<const uint32_t *>(a.scales) + gi);
		s = __half2float(__ushort_as_half((unsigned short)(dm & 0xFFFFu)));
		mn = __half2float(__ushort_as_half((unsigned short)(dm >> 16)));
		z = 0;
	} else {
		s = q_scale(a.scales, gi, a.scale_f16);
		if (FMT == KERN_Q_INT4 && a.zeros)
			z = __ldg(a.zeros + gi);
	}
	uint32_t f[KL / 2]; /* exact code values (u - z) as fp16 pairs */
	q_dequant16<__half, FMT>(raw, f, q_zsub<__half>(z));
	T *o = dst + (size_t)r * a.cols + k0;
#pragma unroll
	for (int m = 0; m < KL / 8; m++) {
		float vals[8];
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const float2 p = __half22float2(*reinterpret_cast<const __half2 *>(&f[4 * m + i]));
			vals[2 * i] = fmaf(s, p.x, mn);
			vals[2 * i + 1] = fmaf(s, p.y, mn);
		}
		kern_store8(o + 8 * m, vals);
	}
}

template <typename T>
static int dequant_launch(kern_qblas *qb, T *dst, const qgemv_args &a, int format, int row0,
			  int nrows)
{
	const size_t threads = (size_t)nrows * (a.row_bytes / 16);
	const unsigned blocks = (unsigned)((threads + 255) / 256);
	switch (format) {
	case KERN_Q_INT8:
		qdequant_kernel<T, KERN_Q_INT8><<<blocks, 256, 0, qb->stream>>>(dst, a, row0, nrows);
		break;
	case KERN_Q_FP8:
		qdequant_kernel<T, KERN_Q_FP8><<<blocks, 256, 0, qb->stream>>>(dst, a, row0, nrows);
		break;
	default:
		qdequant_kernel<T, KERN_Q_INT4><<<blocks, 256, 0, qb->stream>>>(dst, a, row0, nrows);
		break;
	}
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

/* W slab by slab: dequantize rows [r0, r0 + slab) into the scratch, then
 * out[:, r0 : r0 + slab] = x @ slab^T (cuBLAS, column-major view as in
 * matmul.cu, ldc = rows). Stream order keeps a slab's GEMM before the
 * next slab overwrites the scratch. */
template <typename T>
static int dequant_gemm(kern_qblas *qb, const kern_qweight *w, void *out, sl_dtype out_dt,
			const void *x, int n)
{
	const cudaDataType in_type = std::is_same<T, __half>::value ? CUDA_R_16F : CUDA_R_16BF;
	const cudaDataType out_type = out_dt == SL_DT_F32 ? CUDA_R_32F : in_type;
	const size_t row_bytes = (size_t)w->cols * sizeof(T);
	size_t slab = qb->dequant_bytes / row_bytes;
	if (slab >= 8)
		slab &= ~(size_t)7; /* every slab's output columns start 16-byte aligned */
	if (slab < 1) {
		return sl_fail(SL_EINVAL, "quant: dequant scratch of %zu bytes holds no row of %d columns",
			       qb->dequant_bytes, w->cols);
	}
	const qgemv_args a = qgemv_args_of(w, NULL, false, n);
	const float one = 1.0f, zero = 0.0f;
	for (int r0 = 0; r0 < w->rows; r0 += (int)slab) {
		const int nr = (int)((size_t)(w->rows - r0) < slab ? (size_t)(w->rows - r0) : slab);
		TRY(dequant_launch<T>(qb, (T *)qb->dequant, a, w->format, r0, nr));
		void *o = (char *)out + (size_t)r0 * sl_dtype_size(out_dt);
		CUBLAS_TRY(cublasGemmEx(qb->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, n, w->cols, &one,
					qb->dequant, in_type, w->cols, x, in_type, w->cols, &zero, o,
					out_type, w->rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	}
	return SL_OK;
}

/* ---- fp8 activations and cuBLASLt ---- */

constexpr int kActThreads = 256;

/* One block per token: xs = max|x| / 448, xq = e4m3(x / xs) (act_fp8.cuh).
 * cols % 8 == 0. V > 0: the row, at most V x 8 values a thread, stays in
 * registers from the max to the codes (one read of x); V == 0 reads it
 * twice, any cols. */
template <typename T, int V>
__global__ void __launch_bounds__(kActThreads) act_fp8_kernel(uint8_t *__restrict__ xq,
							      float *__restrict__ xs,
							      const T *__restrict__ x, int cols)
{
	const T *xr = x + (size_t)blockIdx.x * cols;
	uint8_t *q = xq + (size_t)blockIdx.x * cols;
	if constexpr (V > 0) {
		float f[V][8];
#pragma unroll
		for (int r = 0; r < V; r++) {
			const int j = (threadIdx.x + r * kActThreads) * 8;
			if (j < cols)
				kern_load8(xr + j, f[r]);
		}
		act_fp8_row<V>(q, xs + blockIdx.x, f, cols);
	} else {
		constexpr int step = kActThreads * 8;
		const float inv = act_fp8_scale(xs + blockIdx.x, kern_row_absmax8(xr, cols));
		for (int i = threadIdx.x * 8; i < cols; i += step) {
			float f[8];
			kern_load8(xr + i, f);
			act_fp8x8(q + i, f, inv);
		}
	}
}

template <typename T>
static int act_fp8_launch(uint8_t *xq, float *xs, const void *x, int n, int cols,
			  cudaStream_t stream)
{
	const int per = (cols + kActThreads * 8 - 1) / (kActThreads * 8); /* vectors a thread */
	const T *xt = (const T *)x;
	if (per <= 1)
		act_fp8_kernel<T, 1><<<n, kActThreads, 0, stream>>>(xq, xs, xt, cols);
	else if (per <= 2)
		act_fp8_kernel<T, 2><<<n, kActThreads, 0, stream>>>(xq, xs, xt, cols);
	else if (per <= 4)
		act_fp8_kernel<T, 4><<<n, kActThreads, 0, stream>>>(xq, xs, xt, cols);
	else if (per <= 8)
		act_fp8_kernel<T, 8><<<n, kActThreads, 0, stream>>>(xq, xs, xt, cols);
	else
		act_fp8_kernel<T, 0><<<n, kActThreads, 0, stream>>>(xq, xs, xt, cols);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

/* One block per token: x = e4m3(q) * s, 8 values a thread at a time. */
template <typename T>
__global__ void __launch_bounds__(kActThreads) act_fp8_values_kernel(T *__restrict__ x,
								 const uint8_t *__restrict__ q,
								 const float *__restrict__ s,
								 int cols)
{
	const size_t row = blockIdx.x;
	const float sc = s[row];
	for (int j = threadIdx.x * 8; j < cols; j += kActThreads * 8) {
		const uint2 raw = *reinterpret_cast<const uint2 *>(q + row * cols + j);
		float f[8];
#pragma unroll
		for (int k = 0; k < 8; k++) {
			const uint8_t c = (uint8_t)((k < 4 ? raw.x : raw.y) >> (8 * (k & 3)));
			const __half_raw h = __nv_cvt_fp8_to_halfraw(c, __NV_E4M3);
			f[k] = __fmul_rn(__half2float(__half(h)), sc);
		}
		kern_store8(x + row * cols + j, f);
	}
}

template <typename T>
static int act_values_launch(void *x, const uint8_t *q, const float *s, int n, int cols,
			     cudaStream_t stream)
{
	act_fp8_values_kernel<T><<<n, kActThreads, 0, stream>>>((T *)x, q, s, cols);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

extern "C" int kern_act_fp8_values_cuda(void *x, sl_dtype dt, const uint8_t *q, const float *s,
					int n, int cols, void *stream)
{
	if (n <= 0 || cols <= 0)
		return SL_OK;
	if (cols % 8 || !kern_aligned16(x) || ((uintptr_t)q & 7))
		return SL_EINVAL;
	KERN_DISPATCH_DT(dt, act_values_launch, x, q, s, n, cols, kern_stream(stream));
}

extern "C" int kern_quantize_act_fp8_cuda(uint8_t *xq, float *xs, const void *x, sl_dtype dt,
					  int n, int cols, void *stream)
{
	if (n <= 0)
		return SL_OK;
	if (cols <= 0 || cols % 8 || !kern_aligned16(x) || ((uintptr_t)xq & 7)) {
		return sl_fail(SL_EINVAL, "quant: fp8 activations need cols %% 8 == 0 (%d) and "
			       "aligned buffers", cols);
	}
	KERN_DISPATCH_DT(dt, act_fp8_launch, xq, xs, x, n, cols, kern_stream(stream));
}

static cudaDataType cuda_type(sl_dtype dt)
{
	return dt == SL_DT_F32 ? CUDA_R_32F : dt == SL_DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

static void plan_release(lt_plan *p)
{
	kern_lt_layouts_destroy(p->la, p->lb, p->ld);
	memset(p, 0, sizeof *p);
}

/* Column-major views of one product, or of one of its K slices (k of
 * the row length ld_k): A = W as [k, m] (op T), B = xq as [k, n], D = out
 * as [m, n] of d_type (fp32 partials for a slice). */
static int lt_layouts(lt_plan *p, int m, int n, int k, int ld_k, cudaDataType d_type)
{
	if (cublasLtMatrixLayoutCreate(&p->la, CUDA_R_8F_E4M3, k, m, ld_k) ||
	    cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_8F_E4M3, k, n, ld_k) ||
	    cublasLtMatrixLayoutCreate(&p->ld, d_type, m, n, m))
		return SL_EINVAL;
	return SL_OK;
}

/* The heuristic's algorithm for p's layouts within pref's workspace, and
 * its waves estimate; SL_ENOTSUP when it has none. */
static int lt_pick(kern_qblas *qb, lt_plan *p, cublasLtMatmulPreference_t pref, float *waves)
{
	cublasLtMatmulHeuristicResult_t res;
	int found = 0;
	if (cublasLtMatmulAlgoGetHeuristic(qb->lt, p->unit ? qb->lt_unit_op : qb->lt_op, p->la, p->lb,
					   p->ld, p->ld, pref, 1, &res, &found) ||
	    found < 1)
		return SL_ENOTSUP;
	p->algo = res.algo;
	*waves = res.wavesCount;
	return SL_OK;
}

/*
 * How many K slices a product whose unsplit algorithm fills `waves` of a
 * wave takes. cuBLASLt's fp8 GEMM with per-row scales has one algorithm at
 * decode sizes, a 128-row tile without split-K: the 4096-row projections
 * (o, down) get 0.24 waves and read W at a quarter to a third of copy
 * bandwidth (bench/results/2026-11-29-nvidia-h200-qgemm). By rule: the
 * most of 8, 4, 2 that keeps slices x waves within one wave, when under a
 * third of a wave is filled. Measured on an H200 (lab-qgemv table 9,
 * bench/results/2026-11-29-nvidia-h200-lt-splits): at 33-128 tokens
 * (0.24 waves) 4 slices take o from 15.5 to 14.5 us and down from 33.1
 * to 26.7 at 64 tokens, 8 are slower than 4; at 192 and 256 tokens (0.48
 * waves) 2 slices cost o 3-4 us, so those stay whole. Every slice a
 * multiple of 16 columns and its partials 16-byte aligned (what the
 * heuristic was promised), slices at least 512 columns, the fp32
 * partials within the dequantization scratch, which no W8A8 call
 * otherwise uses.
 */
static int lt_split_count(const kern_qblas *qb, int m, int n, int k, float waves)
{
	if (qb->lt_splits == 1)
		return 1;
	for (int s = qb->lt_splits ? qb->lt_splits : 8; s >= 2; s = qb->lt_splits ? 1 : s / 2) {
		const bool fits = k % (16 * s) == 0 && k / s >= 512 && (size_t)m * n % 4 == 0 &&
				  sizeof(float) * (size_t)s * m * n <= qb->dequant_bytes;
		if (fits && (qb->lt_splits || (waves < 1.0f / 3 && s * waves <= 1.0f)))
			return s;
	}
	return 1;
}

static lt_plan *lt_plan_find(kern_qblas *qb, int m, int n, int k, sl_dtype out_dt)
{
	for (int i = 0; i < QB_LT_PLANS; i++) {
		lt_plan *p = &qb->plans[i];
		if (p->state && p->m == m && p->n == n && p->k == k && p->out_dt == out_dt &&
		    p->asked == qb->lt_splits && p->asked_unit == qb->lt_unit_max)
			return p;
	}
	return NULL;
}

/*
 * Whether an m x n product takes unit scalar scales: an fp32 product in
 * the dequantization scratch, then lt_unit_scale applies the weight's
 * per-row and the token's scale. With scalar scales cuBLASLt picks other
 * kernels at decode sizes, about twice as fast on the 4096-row o and
 * down projections as its one per-row-scale algorithm (lab-qgemv table 6
 * on an H200 at 64 tokens, warm W: o 6.5 against 13.1 us, down 14.7
 * against 29.1; bench/results/2026-11-29-nvidia-h200-lt-splits/final).
 * With the pass over the fp32 product (n x m x 6 bytes), cold W, table 9
 * (bench/results/2026-11-29-nvidia-h200-lt-unit): at 33 and 64 tokens
 * every 7B shape is as fast or faster (o 15.4 -> 11.8 us, down 32.3 ->
 * 23.6 at 64, against 14.5 and 26.7 with K slices); from 96 tokens qkv
 * and gate_up lose up to 40%, at 128 the decode step 12%. So up to
 * lt_unit_max = KERN_LT_UNIT_MAX_TOKENS (64) tokens; above, per-row
 * scales and K slices.
 */
static bool lt_unit_takes(const kern_qblas *qb, int m, int n)
{
	return n <= qb->lt_unit_max && n <= 65535 /* lt_unit_scale's grid.y */ &&
	       sizeof(float) * (size_t)m * n <= qb->dequant_bytes;
}

/* The cuBLASLt plan for an m x n x k fp8 problem with out_dt output:
 * cached (host memory only; heuristics are a host call, so this is safe
 * during graph capture too), NULL when cuBLASLt has no algorithm. The
 * split plan when lt_split_count asks for one and cuBLASLt has an
 * algorithm for it, else the plain one. */
static lt_plan *lt_plan_get(kern_qblas *qb, int m, int n, int k, sl_dtype out_dt)
{
	if (!qb->lt_usable)
		return NULL;
	lt_plan *p = lt_plan_find(qb, m, n, k, out_dt);
	if (p)
		return p->state > 0 ? p : NULL;
	p = &qb->plans[qb->next_plan];
	qb->next_plan = (qb->next_plan + 1) % QB_LT_PLANS;
	plan_release(p);
	float waves = 0;
	int splits = 1;
	p->m = m, p->n = n, p->k = k, p->out_dt = out_dt, p->asked = qb->lt_splits;
	p->asked_unit = qb->lt_unit_max;
	if (lt_unit_takes(qb, m, n)) {
		p->unit = true;
		if (!lt_layouts(p, m, n, k, k, CUDA_R_32F) && !lt_pick(qb, p, qb->lt_pref, &waves)) {
			p->splits = 1;
			p->state = 1;
			return p;
		}
		plan_release(p);
	}
	if (!lt_layouts(p, m, n, k, k, cuda_type(out_dt)) && !lt_pick(qb, p, qb->lt_pref, &waves))
		splits = lt_split_count(qb, m, n, k, waves);
	else
		plan_release(p), splits = 0;
	if (splits > 1) {
		lt_plan split;
		memset(&split, 0, sizeof split);
		if (!lt_layouts(&split, m, n, k / splits, k, CUDA_R_32F) &&
		    !lt_pick(qb, &split, qb->lt_pref_slice, &waves)) {
			plan_release(p);
			*p = split;
		} else {
			plan_release(&split);
			splits = 1;
		}
	}
	p->m = m, p->n = n, p->k = k, p->out_dt = out_dt, p->asked = qb->lt_splits;
	p->asked_unit = qb->lt_unit_max;
	p->splits = splits;
	p->state = splits ? 1 : -1;
	return splits ? p : NULL;
}

static void lt_warn(kern_qblas *qb, const kern_qweight *w, int n, sl_dtype out_dt, const char *why)
{
	if (qb->warned_lt)
		return;
	qb->warned_lt = true;
	sl_log(SL_LOG_WARN, "cuda",
	       "quant: no cuBLASLt fp8 GEMM for %d x %d x %d (%s out: %s); such calls dequantize "
	       "the fp8 weight and use cuBLAS (logged once)",
	       w->rows, n, w->cols, sl_dtype_name(out_dt), why);
}

static cublasStatus_t lt_matmul(kern_qblas *qb, const lt_plan *p, const void *a, const void *b,
				 void *d, void *ws, size_t ws_bytes, cudaStream_t stream)
{
	const float one = 1.0f, zero = 0.0f;
	return cublasLtMatmul(qb->lt, p->unit ? qb->lt_unit_op : qb->lt_op, &one, a, p->la, b, p->lb,
			      &zero, d, p->ld, d, p->ld, &p->algo, ws, ws_bytes, stream);
}

/* out[t, r] = d[t, r] s_w[r] s_x[t]: a unit-scale product's scales
 * (lt_unit_takes), out fp32 or T. Token t is blockIdx.y and each thread
 * takes V consecutive rows (16-byte loads of d where V is 4), so no
 * thread divides: a grid-stride loop of one element a thread, each
 * finding its token by a 64-bit division, took 7.8 us on the 7B's
 * gate_up product at 64 tokens (5.6 MB of fp32; Nsight Compute on an
 * H200, bench/results/2026-12-01-nvidia-h200-lt-scale). */
template <typename T, int V>
__global__ void lt_unit_scale_kernel(void *out, bool out_f32, const float *__restrict__ d,
				     const void *sw, bool sw_f16, const float *__restrict__ sx,
				     int m)
{
	const int t = blockIdx.y, r = (blockIdx.x * blockDim.x + threadIdx.x) * V;
	if (r >= m)
		return;
	const size_t i = (size_t)t * m + r;
	const float st = sx[t];
	float v[V];
	if constexpr (V == 4) {
		const float4 q = __ldg(reinterpret_cast<const float4 *>(d + i));
		v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
	} else {
		v[0] = d[i];
	}
#pragma unroll
	for (int j = 0; j < V; j++)
		v[j] *= q_scale(sw, r + j, sw_f16) * st;
	if (out_f32) {
		float *o = reinterpret_cast<float *>(out) + i;
		if constexpr (V == 4)
			*reinterpret_cast<float4 *>(o) = make_float4(v[0], v[1], v[2], v[3]);
		else
			o[0] = v[0];
		return;
	}
	T *o = reinterpret_cast<T *>(out) + i;
	if constexpr (V == 4) {
		T h[4] = {kern_from_f32<T>(v[0]), kern_from_f32<T>(v[1]), kern_from_f32<T>(v[2]),
			  kern_from_f32<T>(v[3])};
		*reinterpret_cast<uint2 *>(o) = *reinterpret_cast<const uint2 *>(h);
	} else {
		o[0] = kern_from_f32<T>(v[0]);
	}
}

/* V = 4 where every row's run of 4 is aligned for its loads and stores
 * (rows a multiple of 4, 16-byte aligned buffers), else one a thread. */
template <typename T>
static int lt_unit_scale(void *out, bool out_f32, const float *d, const kern_qweight *w,
			 const float *sx, int n, cudaStream_t stream)
{
	const int m = w->rows;
	const bool vec = m % 4 == 0 && kern_aligned16(out) && kern_aligned16(d);
	const int per = vec ? 4 : 1, threads = 256;
	const dim3 grid((unsigned)((m + per * threads - 1) / (per * threads)), (unsigned)n);
	const bool f16 = w->scale_dt == SL_DT_F16;
	if (vec)
		lt_unit_scale_kernel<T, 4><<<grid, threads, 0, stream>>>(out, out_f32, d, w->scales,
									 f16, sx, m);
	else
		lt_unit_scale_kernel<T, 1><<<grid, threads, 0, stream>>>(out, out_f32, d, w->scales,
									 f16, sx, m);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

/*
 * p's K slices at once: slice 0 on the kern_qblas's stream, slice i on
 * side stream i - 1 after an event fork, each into its fp32 partials
 * ([splits][n][m] in the dequantization scratch) with its share of the
 * workspace, joined back by events (graph capture turns these into
 * parallel branches). Each slice alone fills the SMs no better than the
 * whole product did; together they do.
 */
static cublasStatus_t lt_sliced(kern_qblas *qb, const lt_plan *p, const kern_qweight *w)
{
	const int ks = p->k / p->splits;
	const size_t part = (size_t)p->m * p->n, ws = QB_WORKSPACE_BYTES / KERN_LT_MAX_SPLITS;
	if (cudaEventRecord(qb->fork, qb->stream) != cudaSuccess)
		return CUBLAS_STATUS_EXECUTION_FAILED;
	for (int i = 0; i < p->splits; i++) {
		cudaStream_t st = i ? qb->side[i - 1] : qb->stream;
		if (i && cudaStreamWaitEvent(st, qb->fork, 0) != cudaSuccess)
			return CUBLAS_STATUS_EXECUTION_FAILED;
		cublasStatus_t rc = lt_matmul(qb, p, (const uint8_t *)w->data + (size_t)i * ks,
					      qb->xq + (size_t)i * ks, (float *)qb->dequant + i * part,
					      (char *)qb->workspace + i * ws, ws, st);
		if (rc != CUBLAS_STATUS_SUCCESS)
			return rc;
		if (i && cudaEventRecord(qb->join[i - 1], st) != cudaSuccess)
			return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	for (int i = 1; i < p->splits; i++)
		if (cudaStreamWaitEvent(qb->stream, qb->join[i - 1], 0) != cudaSuccess)
			return CUBLAS_STATUS_EXECUTION_FAILED;
	return CUBLAS_STATUS_SUCCESS;
}

/* W8A8: x -> e4m3 per token (unless act_ready: xq / xs hold x's), then
 * the cuBLASLt GEMM. SL_ENOTSUP when cuBLASLt has no algorithm or refuses
 * the call (nothing was written to out then). */
static int fp8_lt(kern_qblas *qb, const kern_qweight *w, void *out, sl_dtype out_dt,
		  const void *x, sl_dtype x_dt, int n, bool act_ready)
{
	if (n > qb->max_tokens || w->cols > qb->max_cols)
		return SL_ENOTSUP;
	lt_plan *p = lt_plan_get(qb, w->rows, n, w->cols, out_dt);
	if (!p)
		return SL_ENOTSUP;
	if (!act_ready)
		TRY(kern_quantize_act_fp8_cuda(qb->xq, qb->xs, x, x_dt, n, w->cols, qb->stream));
	const void *sa = w->scales, *sb = qb->xs;
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(qb->lt_op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
						  &sa, sizeof sa));
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(qb->lt_op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
						  &sb, sizeof sb));
	void *d = p->unit ? qb->dequant : out;
	cublasStatus_t st = p->splits > 1 ? lt_sliced(qb, p, w)
					  : lt_matmul(qb, p, w->data, qb->xq, d, qb->workspace,
						      QB_WORKSPACE_BYTES, qb->stream);
	if (st != CUBLAS_STATUS_SUCCESS) {
		p->state = -1;
		lt_warn(qb, w, n, out_dt, cublasGetStatusString(st));
		return SL_ENOTSUP;
	}
	if (p->unit)
		KERN_DISPATCH_DT(out_dt == SL_DT_F32 ? x_dt : out_dt, lt_unit_scale, out,
				 out_dt == SL_DT_F32, (const float *)d, w, qb->xs, n, qb->stream);
	if (p->splits == 1)
		return SL_OK;
	KERN_DISPATCH_DT(out_dt == SL_DT_F32 ? x_dt : out_dt, q_splitk_finish, out,
			 out_dt == SL_DT_F32, qb->dequant, p->splits, (size_t)n * w->rows, qb->stream);
}

/* ---- kern_qblas ---- */

static size_t act_bytes(const kern_qblas_config *cfg)
{
	size_t codes = ((size_t)cfg->max_tokens * cfg->max_cols + 255) & ~(size_t)255;
	return codes + sizeof(float) * (size_t)cfg->max_tokens;
}

static int split_tokens(const kern_qblas_config *cfg)
{
	return cfg->max_tokens < KERN_QSPLIT_MAX_TOKENS ? cfg->max_tokens : KERN_QSPLIT_MAX_TOKENS;
}

/* The int8 split path's slices and scales (quant_split.cu). */
static size_t split_bytes(const kern_qblas_config *cfg)
{
	size_t codes = (2 * (size_t)split_tokens(cfg) * cfg->max_cols + 255) & ~(size_t)255;
	return codes + sizeof(float) * (size_t)split_tokens(cfg);
}

static size_t dequant_bytes(const kern_qblas_config *cfg)
{
	return cfg->dequant_bytes ? cfg->dequant_bytes : QB_DEQUANT_DEFAULT_BYTES;
}

extern "C" size_t kern_qblas_device_bytes(const kern_qblas_config *cfg)
{
	return QB_WORKSPACE_BYTES + dequant_bytes(cfg) + act_bytes(cfg) + split_bytes(cfg);
}

extern "C" void kern_qblas_destroy(kern_qblas *qb)
{
	if (!qb)
		return;
	for (int i = 0; i < QB_LT_PLANS; i++)
		plan_release(&qb->plans[i]);
	kern_qgemm_tuned_destroy(qb->gemm_tuned);
	if (qb->lt_pref)
		cublasLtMatmulPreferenceDestroy(qb->lt_pref);
	if (qb->lt_pref_slice)
		cublasLtMatmulPreferenceDestroy(qb->lt_pref_slice);
	for (int i = 0; i < KERN_LT_MAX_SPLITS - 1; i++) {
		if (qb->side[i])
			cudaStreamDestroy(qb->side[i]);
		if (qb->join[i])
			cudaEventDestroy(qb->join[i]);
	}
	if (qb->fork)
		cudaEventDestroy(qb->fork);
	if (qb->lt_op)
		cublasLtMatmulDescDestroy(qb->lt_op);
	if (qb->lt_unit_op)
		cublasLtMatmulDescDestroy(qb->lt_unit_op);
	cudaFree(qb->one);
	if (qb->lt)
		cublasLtDestroy(qb->lt);
	if (qb->blas)
		cublasDestroy(qb->blas);
	cudaFree(qb->workspace);
	cudaFree(qb->dequant);
	cudaFree(qb->xq);
	cudaFree(qb->sq);
	kern_qsplit_plans_destroy(qb->split_plans);
	cudaFree(qb->counter);
	free(qb);
}

/* A heuristic preference: at most ws bytes of workspace, the 16-byte
 * alignment kern_qmatmul_cuda promises of its pointers. */
static int lt_pref_make(cublasLtMatmulPreference_t *pref, uint64_t ws)
{
	const uint32_t align = 16;
	const cublasLtMatmulPreferenceAttributes_t al[4] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
	CUBLAS_TRY(cublasLtMatmulPreferenceCreate(pref));
	CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
		*pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
	for (int i = 0; i < 4; i++)
		CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(*pref, al[i], &align, sizeof align));
	return SL_OK;
}

/* W (op T) x xq, fp32 compute, scales of `mode` on both sides pointing
 * at sp (per-row / per-token ones are set per call; heuristics see valid
 * pointers), fp32 promotion unless fast. */
static int lt_desc_make(cublasLtMatmulDesc_t *d, int32_t mode, const void *sp, int8_t fast)
{
	const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
	CUBLAS_TRY(cublasLtMatmulDescCreate(d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
						  sizeof mode));
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
						  sizeof mode));
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
						  sizeof fast));
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sp,
						  sizeof sp));
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sp,
						  sizeof sp));
	return SL_OK;
}

static int lt_init(kern_qblas *qb, const kern_qblas_config *cfg)
{
	const int8_t fast = cfg->fp8_fast_accum != 0;
	const float one = 1.0f;
	CUBLAS_TRY(cublasLtCreate(&qb->lt));
	TRY(lt_desc_make(&qb->lt_op, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, qb->xs, fast));
	CUDA_TRY(cudaMalloc((void **)&qb->one, sizeof one));
	CUDA_TRY(cudaMemcpy(qb->one, &one, sizeof one, cudaMemcpyHostToDevice));
	TRY(lt_desc_make(&qb->lt_unit_op, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, qb->one, fast));
	TRY(lt_pref_make(&qb->lt_pref, QB_WORKSPACE_BYTES));
	TRY(lt_pref_make(&qb->lt_pref_slice, QB_WORKSPACE_BYTES / KERN_LT_MAX_SPLITS));
	/* the K slices' side streams and the events that fork and join them */
	CUDA_TRY(cudaEventCreateWithFlags(&qb->fork, cudaEventDisableTiming));
	for (int i = 0; i < KERN_LT_MAX_SPLITS - 1; i++) {
		CUDA_TRY(cudaStreamCreateWithFlags(&qb->side[i], cudaStreamNonBlocking));
		CUDA_TRY(cudaEventCreateWithFlags(&qb->join[i], cudaEventDisableTiming));
	}
	return SL_OK;
}

/* An AUTO range from the environment: NAME=0 off (lo = hi = 0),
 * NAME_MIN=N and NAME_MAX=N its bounds, the defaults otherwise. */
static void env_range(const char *name, int *lo, int *hi)
{
	char key[32];
	snprintf(key, sizeof key, "%s_MIN", name);
	const char *elo = getenv(key);
	snprintf(key, sizeof key, "%s_MAX", name);
	const char *ehi = getenv(key), *off = getenv(name);
	if (elo && *elo)
		*lo = atoi(elo);
	if (ehi && *ehi)
		*hi = atoi(ehi);
	if (off && strcmp(off, "0") == 0)
		*hi = *lo = 0;
}

/* AUTO's GEMM ranges (quant.h, kern_qblas_set_gemm_range): int8 and int4
 * from 17 to 256 tokens, where the GEMV re-reads x per warp and DEQUANT
 * writes and re-reads W; fp8 none (W8A8 on cuBLASLt above 32). The GEMV
 * keeps n <= 16, where its fused epilogues (n <= 8) also live. The
 * environment may move or switch them off (tuning without a rebuild). */
static void gemm_defaults(kern_qblas *qb)
{
	int lo = KERN_QGEMM_MIN_TOKENS, hi = KERN_QGEMM_MAX_TOKENS;
	env_range("SL_QGEMM", &lo, &hi);
	for (int f = 0; f < 4; f++)
		qb->gemm_lo[f] = qb->gemm_hi[f] = 0;
	for (int f : {KERN_Q_INT8, KERN_Q_INT4})
		kern_qblas_set_gemm_range(qb, f, lo, hi);
}

/* AUTO's int8 split range (quant.h, kern_qblas_set_split_range), which
 * the environment may move or switch off, as the GEMM's. */
static void split_defaults(kern_qblas *qb)
{
	int lo = KERN_QSPLIT_MIN_AUTO, hi = KERN_QSPLIT_MAX_AUTO;
	env_range("SL_QSPLIT", &lo, &hi);
	kern_qblas_set_split_range(qb, lo, hi);
}

static int qblas_init(kern_qblas *qb, void *stream, const kern_qblas_config *cfg)
{
	int dev = 0, major = 0, minor = 0;
	qb->stream = kern_stream(stream);
	qb->max_tokens = cfg->max_tokens;
	qb->max_cols = cfg->max_cols;
	qb->dequant_bytes = dequant_bytes(cfg);
	for (int f = 0; f < 4; f++)
		qb->gemv_max[f] = KERN_QGEMV_MAX_TOKENS;
	/* fp8 above 32 tokens: W8A8 on cuBLASLt. Measured on an H100 (lab-qgemv
	 * table 1): at 32 tokens the GEMV and W8A8 read the 7B projections at
	 * about the same rate (qkv 1833 / 1829 GB/s, down 1945 / 1205), at 64
	 * W8A8 is 1.2-1.8x faster (the GEMV's 8-tile shape drops to 31-37% of
	 * copy bandwidth). int8 and int4 keep the GEMV to 64: their
	 * alternative, dequantize + cuBLAS, reads at 8-20%. */
	qb->gemv_max[KERN_Q_FP8] = KERN_QGEMV_FP8_MAX_TOKENS;
	gemm_defaults(qb);
	split_defaults(qb);
	const char *wide = getenv("SL_QGEMV_WIDE");
	qb->wide = !(wide && *wide == '0');
	const char *split = getenv("SL_LT_SPLITK"), *unit = getenv("SL_LT_UNIT");
	kern_qblas_set_lt_splits(qb, split && *split ? atoi(split) : 0);
	kern_qblas_set_lt_unit(qb, unit && *unit ? atoi(unit) : KERN_LT_UNIT_MAX_TOKENS);
	CUDA_TRY(cudaGetDevice(&dev));
	CUDA_TRY(cudaDeviceGetAttribute(&qb->sm_count, cudaDevAttrMultiProcessorCount, dev));
	CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
	CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
	qb->cc = 10 * major + minor;
	TRY(kern_qgemm_init());
	TRY(kern_qgemm_tuned_create(&qb->gemm_tuned));
	CUDA_TRY(cudaMalloc(&qb->workspace, QB_WORKSPACE_BYTES));
	CUDA_TRY(cudaMalloc(&qb->dequant, qb->dequant_bytes));
	CUDA_TRY(cudaMalloc(&qb->counter, sizeof *qb->counter));
	CUDA_TRY(cudaMemset(qb->counter, 0, sizeof *qb->counter));
	CUDA_TRY(cudaMalloc((void **)&qb->xq, act_bytes(cfg)));
	qb->xs = (float *)(qb->xq + (act_bytes(cfg) - sizeof(float) * (size_t)cfg->max_tokens));
	qb->split_tokens = split_tokens(cfg);
	CUDA_TRY(cudaMalloc((void **)&qb->sq, split_bytes(cfg)));
	qb->ss = (float *)((uint8_t *)qb->sq + split_bytes(cfg) -
			   sizeof(float) * (size_t)qb->split_tokens);
	CUBLAS_TRY(cublasCreate(&qb->blas));
	CUBLAS_TRY(cublasSetStream(qb->blas, qb->stream));
	CUBLAS_TRY(cublasSetWorkspace(qb->blas, qb->workspace, QB_WORKSPACE_BYTES));
	/* results must not depend on what else runs: no atomics-based split-K */
	CUBLAS_TRY(cublasSetAtomicsMode(qb->blas, CUBLAS_ATOMICS_NOT_ALLOWED));
	/* fp8 tensor cores: Ada, Hopper and later; a cuBLASLt without outer-
	 * vector scales leaves the GEMV and dequantize paths working */
	if (lt_init(qb, cfg))
		sl_log(SL_LOG_WARN, "cuda", "quant: no cuBLASLt fp8 GEMM with per-row scales; fp8 "
		       "weights dequantize above the GEMV");
	else
		qb->lt_usable = qb->cc >= 89;
	/* the int8 split path: cuBLASLt's int8 GEMM (Turing and later) */
	if (qb->lt && qb->cc >= 75 && kern_qsplit_plans_create(QB_WORKSPACE_BYTES, &qb->split_plans))
		sl_log(SL_LOG_WARN, "cuda", "quant: no cuBLASLt int8 GEMM; int8 weights take the "
		       "dequantizing GEMM instead of the split path");
	return SL_OK;
}

extern "C" int kern_qblas_create(void *stream, const kern_qblas_config *cfg, kern_qblas **out)
{
	if (!cfg || cfg->max_tokens < 1 || cfg->max_cols < 16)
		return sl_fail(SL_EINVAL, "quant: kern_qblas needs max_tokens >= 1 and max_cols >= 16");
	kern_qblas *qb = (kern_qblas *)calloc(1, sizeof *qb);
	if (!qb)
		return SL_ENOMEM;
	int rc = qblas_init(qb, stream, cfg);
	if (rc) {
		kern_qblas_destroy(qb);
		return rc;
	}
	*out = qb;
	return SL_OK;
}

extern "C" void kern_qblas_set_pdl(kern_qblas *qb, int on)
{
	qb->pdl = on && qb->cc >= 90;
}

extern "C" void kern_qblas_set_gemv_wide(kern_qblas *qb, int on)
{
	qb->wide = on != 0;
}

extern "C" void kern_qblas_set_gemv_max(kern_qblas *qb, int format, int n)
{
	if (format >= KERN_Q_INT8 && format <= KERN_Q_INT4)
		qb->gemv_max[format] = n < 0 ? 0 : n > KERN_QGEMV_MAX_TOKENS ? KERN_QGEMV_MAX_TOKENS : n;
}

extern "C" void kern_qblas_set_lt_splits(kern_qblas *qb, int splits)
{
	if (splits >= 0 && splits <= KERN_LT_MAX_SPLITS)
		qb->lt_splits = splits;
}

extern "C" void kern_qblas_set_lt_unit(kern_qblas *qb, int max_tokens)
{
	qb->lt_unit_max = max_tokens < 0 ? 0 : max_tokens;
}

static const lt_plan *lt_plan_of(kern_qblas *qb, const kern_qweight *w, int n, sl_dtype out_dt)
{
	if (w->format != KERN_Q_FP8 || n > qb->max_tokens || w->cols > qb->max_cols)
		return NULL;
	return lt_plan_get(qb, w->rows, n, w->cols, out_dt);
}

extern "C" int kern_qmatmul_lt_splits(kern_qblas *qb, const kern_qweight *w, int n,
				      sl_dtype out_dt)
{
	const lt_plan *p = lt_plan_of(qb, w, n, out_dt);
	return p ? p->splits : 0;
}

extern "C" int kern_qmatmul_lt_unit(kern_qblas *qb, const kern_qweight *w, int n, sl_dtype out_dt)
{
	const lt_plan *p = lt_plan_of(qb, w, n, out_dt);
	return p && p->unit;
}

extern "C" void kern_qblas_set_gemm_range(kern_qblas *qb, int format, int lo, int hi)
{
	if (format >= KERN_Q_INT8 && format <= KERN_Q_INT4) {
		qb->gemm_lo[format] = lo < 0 ? 0 : lo;
		qb->gemm_hi[format] = hi < lo ? lo : hi;
	}
}

extern "C" void kern_qblas_set_split_range(kern_qblas *qb, int lo, int hi)
{
	qb->split_lo = lo < 0 ? 0 : lo;
	hi = hi > KERN_QSPLIT_MAX_TOKENS ? KERN_QSPLIT_MAX_TOKENS : hi;
	qb->split_hi = hi < qb->split_lo ? qb->split_lo : hi;
}

extern "C" void kern_qblas_set_gemm_variant(kern_qblas *qb, int variant)
{
	qb->gemm_variant = variant;
}

extern "C" int kern_qblas_gemm_wgmma(kern_qblas *qb, const kern_qweight *w)
{
	return kern_qgemm_wgmma_takes(w);
}

extern "C" int kern_qblas_gemm_tuned(kern_qblas *qb, const kern_qweight *w, sl_dtype dt, int n)
{
	return kern_qgemm_tuned_variant(qb->gemm_tuned, w, dt, n);
}

extern "C" int kern_qblas_gemm_rounds(kern_qblas *qb, const kern_qweight *w, sl_dtype x_dt)
{
	return kern_qgemm_rounds(w, x_dt);
}

/* ---- entry points ---- */

static bool in_gemm_range(const kern_qblas *qb, int format, int n)
{
	return n > qb->gemm_lo[format] && n <= qb->gemm_hi[format];
}

static bool split_takes(const kern_qblas *qb, const kern_qweight *w, int n)
{
	return qb->split_plans && n > qb->split_lo && n <= qb->split_hi && n <= qb->split_tokens &&
	       w->cols <= qb->max_cols && kern_qsplit_takes(w);
}

static int choose_path(kern_qblas *qb, const kern_qweight *w, int n, sl_dtype x_dt,
		       sl_dtype out_dt)
{
	if (split_takes(qb, w, n))
		return kern_qgemm_tuned_over(qb->gemm_tuned, w, x_dt, n) ? KERN_QPATH_GEMM
									 : KERN_QPATH_INT8_SPLIT;
	if (in_gemm_range(qb, w->format, n) && kern_qgemm_takes(w))
		return KERN_QPATH_GEMM;
	if (n <= qb->gemv_max[w->format])
		return KERN_QPATH_GEMV;
	if (w->format == KERN_Q_FP8 && n <= qb->max_tokens && w->cols <= qb->max_cols) {
		if (lt_plan_get(qb, w->rows, n, w->cols, out_dt))
			return KERN_QPATH_FP8_LT;
		lt_warn(qb, w, n, out_dt, qb->lt_usable ? "no algorithm" : "no fp8 tensor cores");
	}
	return KERN_QPATH_DEQUANT;
}

extern "C" int kern_qmatmul_path(kern_qblas *qb, const kern_qweight *w, int n, sl_dtype x_dt,
				 sl_dtype out_dt)
{
	return choose_path(qb, w, n, x_dt, out_dt);
}

extern "C" int kern_qblas_gemv_wide_runs(kern_qblas *qb, const kern_qweight *w, int n)
{
	return choose_path(qb, w, n, SL_DT_F16, SL_DT_F16) == KERN_QPATH_GEMV &&
	       wide_takes(qb, qgemv_args_of(w, NULL, false, n), w->format);
}

static int qgemv_call(kern_qblas *qb, const qgemv_args &a, const void *x, sl_dtype x_dt,
		      int format)
{
	KERN_DISPATCH_DT(x_dt, qgemv_dispatch, qb, a, x, format);
}

static int gemv_path(kern_qblas *qb, const kern_qweight *w, void *out, sl_dtype out_dt,
		     const void *x, sl_dtype x_dt, int n)
{
	return qgemv_call(qb, qgemv_args_of(w, out, out_dt == SL_DT_F32, n), x, x_dt, w->format);
}

static int gemm_path(kern_qblas *qb, const kern_qweight *w, void *out, sl_dtype out_dt,
		     const void *x, sl_dtype x_dt, int n)
{
	const kern_qgemm_ctx ctx = {qb->stream, qb->workspace, QB_WORKSPACE_BYTES, qb->sm_count,
				    &qb->pdl, qb->gemm_tuned};
	return kern_qgemm_run(&ctx, w, out, out_dt == SL_DT_F32, x, x_dt, n, qb->gemm_variant);
}

static kern_qsplit_ctx split_ctx(const kern_qblas *qb)
{
	kern_qsplit_ctx c;
	c.stream = qb->stream;
	c.lt = (void *)qb->lt;
	c.plans = qb->split_plans;
	c.workspace = qb->workspace;
	c.workspace_bytes = QB_WORKSPACE_BYTES;
	c.xq = qb->sq;
	c.xs = qb->ss;
	c.scratch = qb->dequant;
	c.scratch_bytes = qb->dequant_bytes;
	c.max_tokens = qb->split_tokens;
	c.max_cols = qb->max_cols;
	return c;
}

static int split_path(kern_qblas *qb, const kern_qweight *w, void *out, sl_dtype out_dt,
		      const void *x, sl_dtype x_dt, int n)
{
	if (!qb->split_plans)
		return SL_ENOTSUP;
	const kern_qsplit_ctx c = split_ctx(qb);
	return kern_qsplit_run(&c, w, out, out_dt == SL_DT_F32, x, x_dt, n);
}

extern "C" int kern_qblas_tune_split(kern_qblas *qb, int rows, int cols)
{
	const char *env = getenv("SL_QSPLIT_TUNE");
	if (!qb->split_plans || qb->split_hi <= qb->split_lo || (env && strcmp(env, "0") == 0))
		return SL_OK;
	const kern_qsplit_ctx c = split_ctx(qb);
	return kern_qsplit_tune(&c, rows, cols);
}

/* The token counts (at most cap) at which AUTO gives w `path`, into ns;
 * their number. */
static int tune_ns(kern_qblas *qb, const kern_qweight *w, sl_dtype dt, int path, int *ns,
		   int cap)
{
	int count = 0, k = 0;
	const int *all = kern_qgemm_tune_ns(&count);
	for (int i = 0; i < count && k < cap; i++)
		if (all[i] <= qb->max_tokens && choose_path(qb, w, all[i], dt, dt) == path)
			ns[k++] = all[i];
	return k;
}

/* The int8 split path timed for kern_qgemm_tune's comparison. */
typedef struct split_timer {
	kern_qblas *qb;
	const kern_qweight *w;
	const kern_qgemm_bufs *buf;
} split_timer;

static double split_us(void *arg, const kern_cold_bench *b, int n)
{
	const split_timer *s = (const split_timer *)arg;
	auto run = [&] {
		return split_path(s->qb, s->w, s->buf->out, s->buf->dt, s->buf->x, s->buf->dt, n) ==
		       SL_OK;
	};
	if (!run()) {
		cudaGetLastError();
		return -1;
	}
	return kern_cold_time(s->qb->stream, b, 5, run);
}

extern "C" int kern_qblas_tune_gemm(kern_qblas *qb, const kern_qweight *w, sl_dtype dt, int *kept)
{
	*kept = 0;
	const char *env = getenv("SL_QGEMM_TUNE");
	int ns[16], sns[16];
	if (!kern_qgemm_takes(w) || (dt != SL_DT_F16 && dt != SL_DT_BF16) ||
	    (env && strcmp(env, "0") == 0))
		return SL_OK;
	/* where AUTO gives the GEMM: its shapes against its rule's; where it
	 * gives the int8 split path: the GEMM's best against that path */
	const int n_ns = tune_ns(qb, w, dt, KERN_QPATH_GEMM, ns, 16);
	const int n_sns = tune_ns(qb, w, dt, KERN_QPATH_INT8_SPLIT, sns, 16);
	if (n_ns + n_sns == 0)
		return SL_OK;
	int top = n_ns ? ns[n_ns - 1] : 0;
	if (n_sns && sns[n_sns - 1] > top)
		top = sns[n_sns - 1];
	const kern_qgemm_ctx ctx = {qb->stream, qb->workspace, QB_WORKSPACE_BYTES, qb->sm_count,
				    &qb->pdl, NULL};
	/* x and out of their own: the split path's product lives in the
	 * dequantization scratch */
	const size_t x_bytes = 2 * (size_t)top * w->cols, out_bytes = 2 * (size_t)top * w->rows;
	kern_qgemm_bufs buf = {NULL, NULL, dt};
	int rc = SL_OK;
	if (cudaMalloc(&buf.x, x_bytes) != cudaSuccess ||
	    cudaMalloc(&buf.out, out_bytes) != cudaSuccess ||
	    /* x about 0.05 (fp16 0x2a2a): values only change the tensor cores' power */
	    cudaMemsetAsync(buf.x, 0x2a, x_bytes, qb->stream) != cudaSuccess) {
		rc = sl_fail(SL_EDEVICE, "quant: GEMM tuning: %s",
			     cudaGetErrorString(cudaGetLastError()));
	} else {
		split_timer st = {qb, w, &buf};
		const kern_qgemm_other other = {split_us, &st};
		int k = 0;
		rc = n_ns ? kern_qgemm_tune(&ctx, qb->gemm_tuned, w, &buf, ns, n_ns, NULL, kept)
			  : SL_OK;
		if (rc == SL_OK && n_sns)
			rc = kern_qgemm_tune(&ctx, qb->gemm_tuned, w, &buf, sns, n_sns, &other, &k);
		*kept += k;
	}
	cudaStreamSynchronize(qb->stream);
	cudaFree(buf.x);
	cudaFree(buf.out);
	return rc;
}


static int check_call(const kern_qweight *w, sl_dtype out_dt, const void *x, sl_dtype x_dt,
		      int n)
{
	char err[SL_ERRLEN];
	if (kern_qweight_check(w, err, sizeof err))
		return sl_fail(SL_EINVAL, "quant: %s", err);
	if ((x_dt != SL_DT_F16 && x_dt != SL_DT_BF16) || (out_dt != x_dt && out_dt != SL_DT_F32))
		return sl_fail(SL_ENOTSUP, "quant: x %s, out %s (x F16 or BF16, out the same or F32)",
			       sl_dtype_name(x_dt), sl_dtype_name(out_dt));
	if (n < 0 || !kern_aligned16(x) || !kern_aligned16(w->data))
		return sl_fail(SL_EINVAL, "quant: n %d, x and W must be 16-byte aligned", n);
	return SL_OK;
}

/* A mark whose x was left unwritten (kern_qblas_act_mark_codes): x from
 * its codes, and the mark now an ordinary one. */
static int act_settle(kern_qblas *qb)
{
	if (!qb->act_x || !qb->act_codes)
		return SL_OK;
	qb->act_codes = false;
	return kern_act_fp8_values_cuda((void *)qb->act_x, qb->act_dt, qb->xq, qb->xs, qb->act_n,
					qb->act_cols, qb->stream);
}

/* Whether xq / xs hold x's activations for this call (*codes: and x was
 * left unwritten); either way the mark is spent (a later call must not
 * trust buffers this one may overwrite). A mark for another x settles
 * that x first. */
static int take_act(kern_qblas *qb, const void *x, int n, int cols, bool *ready, bool *codes)
{
	*ready = qb->act_x && qb->act_x == x && qb->act_n == n && qb->act_cols == cols;
	*codes = *ready && qb->act_codes;
	int rc = *ready ? SL_OK : act_settle(qb);
	qb->act_x = NULL;
	qb->act_codes = false;
	return rc;
}

extern "C" kern_act_fp8 kern_qblas_act_slot(kern_qblas *qb, int n, int cols)
{
	kern_act_fp8 slot = {NULL, NULL};
	if (qb && qb->lt_usable && n > qb->gemv_max[KERN_Q_FP8] && n <= qb->max_tokens &&
	    !in_gemm_range(qb, KERN_Q_FP8, n) &&
	    cols <= qb->max_cols && cols % 8 == 0)
		slot = (kern_act_fp8){qb->xq, qb->xs};
	return slot;
}

extern "C" void kern_qblas_act_mark(kern_qblas *qb, const void *x, int n, int cols)
{
	if (!qb)
		return;
	if (act_settle(qb)) /* the launch failed: so will the next, which reports it */
		sl_log(SL_LOG_ERROR, "cuda", "quant: cannot write the marked activations' values");
	qb->act_x = x;
	qb->act_n = n;
	qb->act_cols = cols;
	qb->act_codes = false;
}

extern "C" void kern_qblas_act_mark_codes(kern_qblas *qb, void *x, sl_dtype dt, int n, int cols)
{
	kern_qblas_act_mark(qb, x, n, cols);
	if (qb && x) {
		qb->act_codes = true;
		qb->act_dt = dt;
	}
}

extern "C" int kern_qmatmul_cuda(kern_qblas *qb, int path, void *out, sl_dtype out_dt,
				 const void *x, sl_dtype x_dt, const kern_qweight *w, int n)
{
	bool act_ready, codes;
	TRY(take_act(qb, x, n, w->cols, &act_ready, &codes));
	/* x's values from its codes, for a path that reads x itself */
	auto settle_x = [&]() {
		codes = false;
		return kern_act_fp8_values_cuda((void *)x, x_dt, qb->xq, qb->xs, n, w->cols,
						qb->stream);
	};
	const int bad = check_call(w, out_dt, x, x_dt, n);
	if (bad) {
		if (codes)
			settle_x();
		return bad;
	}
	if (n == 0 || w->rows == 0)
		return SL_OK;
	const bool automatic = path == KERN_QPATH_AUTO;
	if (automatic)
		path = choose_path(qb, w, n, x_dt, out_dt);
	if (codes && (path != KERN_QPATH_FP8_LT || w->format != KERN_Q_FP8))
		TRY(settle_x());
	switch (path) {
	case KERN_QPATH_GEMV:
		if (n > KERN_QGEMV_MAX_TOKENS)
			return SL_ENOTSUP;
		return gemv_path(qb, w, out, out_dt, x, x_dt, n);
	case KERN_QPATH_FP8_LT: {
		if (w->format != KERN_Q_FP8)
			return SL_ENOTSUP;
		int rc = fp8_lt(qb, w, out, out_dt, x, x_dt, n, act_ready);
		if (rc == SL_ENOTSUP && codes)
			TRY(settle_x());
		if (rc != SL_ENOTSUP || !automatic)
			return rc;
		break; /* refused at run time: dequantize instead */
	}
	case KERN_QPATH_GEMM:
		return gemm_path(qb, w, out, out_dt, x, x_dt, n);
	case KERN_QPATH_INT8_SPLIT: {
		const int rc = split_path(qb, w, out, out_dt, x, x_dt, n);
		if (rc != SL_ENOTSUP || !automatic)
			return rc;
		return gemm_path(qb, w, out, out_dt, x, x_dt, n); /* refused: nothing written */
	}
	case KERN_QPATH_DEQUANT:
		break;
	default:
		return SL_EINVAL;
	}
	KERN_DISPATCH_DT(x_dt, dequant_gemm, qb, w, out, out_dt, x, n);
}

extern "C" int kern_qblas_gemv_narrow_wave(const kern_qblas *qb)
{
	return QG_NARROW_BLOCKS * qb->sm_count;
}

extern "C" int kern_qmatmul_parts_cuda(kern_qblas *qb, const void *x, sl_dtype dt,
				       const kern_qweight *w, int n, int max_splits,
				       const float **parts, int *splits)
{
	*parts = NULL;
	*splits = 0;
	TRY(check_call(w, dt, x, dt, n));
	if (n == 0 || n > 8 || w->rows == 0 || !qb->wide || max_splits < 2 ||
	    choose_path(qb, w, n, dt, dt) != KERN_QPATH_GEMV)
		return SL_OK;
	TRY(act_settle(qb)); /* as kern_qmatmul_epi_cuda */
	qb->act_x = NULL;
	const qgemv_args a = qgemv_args_of(w, NULL, true, n);
	int s = 1, rc = SL_EINVAL;
	if (dt == SL_DT_F16)
		rc = qgemv_parts<__half>(qb, a, x, w->format, max_splits, &s);
	else if (dt == SL_DT_BF16)
		rc = qgemv_parts<__nv_bfloat16>(qb, a, x, w->format, max_splits, &s);
	if (rc == QG_UNFUSED)
		return SL_OK;
	if (rc == SL_OK)
		*parts = (const float *)qb->workspace, *splits = s;
	return rc;
}

/* The GEMV with a fused epilogue (kernels/epilogue.h, kern_qmatmul_epi_cuda
 * in quant.h): *fused 0 and nothing launched when AUTO would not take the
 * GEMV, the columns split across blocks, or (an input not yet divided by
 * its rms) the block has fewer than 8 warps. */
extern "C" int kern_qmatmul_epi_cuda(kern_qblas *qb, void *out, sl_dtype dt, const void *x,
				     const kern_qweight *w, int n, const kern_epi *epi, int *fused)
{
	*fused = 0;
	TRY(check_call(w, dt, x, dt, n));
	if (n == 0 || n > 8 || w->rows == 0 || !kern_epi_takes(epi, w->rows, n) ||
	    epi->kind == KERN_EPI_ALLREDUCE_ADD /* the fp16/bf16 GEMV's alone */ ||
	    choose_path(qb, w, n, dt, dt) != KERN_QPATH_GEMV)
		return SL_OK; /* the caller's kern_qmatmul_cuda takes any activations marked */
	TRY(act_settle(qb)); /* a call that runs spends the mark, as take_act */
	qb->act_x = NULL;
	qgemv_args a = qgemv_args_of(w, out, false, n);
	a.e = kern_epi_of(epi, w->rows, qb->counter);
	const int rc = qgemv_call(qb, a, x, dt, w->format);
	if (rc == QG_UNFUSED)
		return SL_OK;
	*fused = rc == SL_OK;
	return rc;
}
