/*
 * quant_w8a8.cu — the W8A8 path's own GEMM (KERN_QPATH_FP8_LT with the
 * KERN_W8A8_MMA engine, kernels/quant.h) for fp8 weights at tens to
 * hundreds of tokens: e4m3 weight codes times the per-token e4m3
 * activations quant.cu makes (kern_quantize_act_fp8_cuda, or the norm /
 * SiLU kernels that write them), on mma.sync m16n8k32 with fp32 sums.
 *
 * Why not only cuBLASLt: at decode sizes its fp8 GEMM with per-row
 * scales has one algorithm, a 128-row tile without split-K. The o and
 * down projections (4096 rows) then run 32 blocks on 132 SMs, at 0.24
 * waves and 1.0-1.5 TB/s (bench/results/2026-11-24-nvidia-h100-lt-algos,
 * 2026-11-29-nvidia-h200-qgemm). The codes go to the tensor cores as
 * they are (no dequantization in the main loop, unlike quant_gemm.cu),
 * so the loop is cheap and the columns can split across blocks (split-K)
 * until every SM streams W.
 *
 * Numerics: the W8A8 contract (kern_qmatmul_w8a8_cpu): exact products of
 * codes summed in fp32, times the weight row's and the token's scale at
 * the end; only the fp32 summation order differs from the reference.
 * Split-K partials (already scaled: the scales are per row and per
 * token, so they commute with the sum) are reduced in a fixed order.
 *
 * Tiling, as quant_gemm.cu: a block owns BM = 32 WM rows and BN tokens,
 * each warp 32 rows (two m16 tiles) x BN / WN tokens (NT n8 tiles); a k
 * step is a 64-byte chunk of W rows and of x rows (64 codes each), staged
 * by a STAGES-deep cp.async pipeline, zero-filled past the ends.
 * k order: lane (g, c) loads 16 bytes at byte 16c of W rows g, g + 8 and
 * of token g, and its words 0-1 feed MMA step 0 (a0/a2, b0/b1), words
 * 2-3 step 1. The same byte-to-k map on both operands: the sum is the
 * same. Shared rows are 64 bytes, so a quarter warp (rows 2p, 2p + 1,
 * c = 0..3) reads one 128-byte line: no bank conflicts, no swizzle.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_util.cuh"
#include "kernels/mma.cuh"
#include "kernels/quant_dequant.cuh"

/* One call. */
struct w8a8_args {
	const uint8_t *w;   /* [rows, cols] e4m3 codes */
	const void *ws;     /* [rows] weight scales, fp32 or fp16 */
	const uint8_t *xq;  /* [n, cols] e4m3 activations */
	const float *xs;    /* [n] their scales */
	void *out;          /* [n, rows] of T or fp32; partials [splits][n][rows] fp32 */
	int rows, cols, n, n_chunk, chunks_per_split;
	bool ws_f16, out_f32;
};

template <typename S> constexpr int w8_stage_bytes()
{
	return (S::BM + S::BN) * QM_CHUNK_BYTES;
}

/* Chunk cu of W (W_PART) and x (X_PART) into a stage. */
template <typename S, bool W_PART, bool X_PART>
__device__ __forceinline__ void w8_load(const w8a8_args &a, uint8_t *sw, uint8_t *sx, int cu,
					int row0, int tok0)
{
	const int byte0 = cu * QM_CHUNK_BYTES;
	if constexpr (W_PART) {
		static_assert(S::BM * 4 % S::THREADS == 0, "whole W rounds");
#pragma unroll
		for (int k = 0; k < S::BM * 4 / S::THREADS; k++) {
			const int i = threadIdx.x + k * S::THREADS;
			const int r = i >> 2, byte = byte0 + 16 * (i & 3);
			const bool ok = row0 + r < a.rows && byte < a.cols;
			const uint8_t *src = ok ? a.w + (size_t)(row0 + r) * a.cols + byte : a.w;
			cp_async16(sw + r * QM_CHUNK_BYTES + 16 * (i & 3), src, ok);
		}
	}
	if constexpr (X_PART) {
		static_assert(S::BN * 4 % S::THREADS == 0, "whole x rounds");
#pragma unroll
		for (int k = 0; k < S::BN * 4 / S::THREADS; k++) {
			const int i = threadIdx.x + k * S::THREADS;
			const int t = i >> 2, byte = byte0 + 16 * (i & 3);
			const bool ok = tok0 + t < a.n && byte < a.cols;
			const uint8_t *src = ok ? a.xq + (size_t)(tok0 + t) * a.cols + byte : a.xq;
			cp_async16(sx + t * QM_CHUNK_BYTES + 16 * (i & 3), src, ok);
		}
	}
}

/* One stage: the lane's W words of its 4 rows, then per n tile two MMAs
 * per m tile. The chunk's 64 products go into a fresh accumulator that
 * is then added to acc in fp32 ("promotion", as DeepGEMM does every 128
 * k): the tensor cores may keep fewer mantissa bits in an fp8 MMA's sum
 * than fp32, so a 64-term partial is all they ever hold. */
template <typename S>
__device__ __forceinline__ void w8_compute(const uint8_t *sw, const uint8_t *sx, int wrow,
					   int wtok, int g, int c, float (&acc)[2][S::NT][4])
{
	uint4 wv[2][2];
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int h2 = 0; h2 < 2; h2++)
			wv[mt][h2] = *reinterpret_cast<const uint4 *>(
				sw + (wrow + 16 * mt + 8 * h2 + g) * QM_CHUNK_BYTES + 16 * c);
#pragma unroll
	for (int nt = 0; nt < S::NT; nt++) {
		const uint4 xv = *reinterpret_cast<const uint4 *>(
			sx + (wtok + 8 * nt + g) * QM_CHUNK_BYTES + 16 * c);
#pragma unroll
		for (int mt = 0; mt < 2; mt++) {
			const uint32_t a0[4] = {wv[mt][0].x, wv[mt][1].x, wv[mt][0].y, wv[mt][1].y};
			const uint32_t a1[4] = {wv[mt][0].z, wv[mt][1].z, wv[mt][0].w, wv[mt][1].w};
			float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
			kern_mma_m16n8k32_e4m3(t, a0, xv.x, xv.y);
			kern_mma_m16n8k32_e4m3(t, a1, xv.z, xv.w);
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[mt][nt][e] += t[e];
		}
	}
}

/* The lane's sums times both scales to out (or the split's partials);
 * rows and tokens past the ends are not stored. */
template <typename T, typename S>
__device__ __forceinline__ void w8_store(const w8a8_args &a, float (&acc)[2][S::NT][4],
					 int row_w, int tok_w, int g, int c)
{
	float *of = reinterpret_cast<float *>(a.out) + (size_t)blockIdx.z * a.n * a.rows;
	T *ot = reinterpret_cast<T *>(a.out);
	float xs[S::NT][2];
#pragma unroll
	for (int nt = 0; nt < S::NT; nt++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int tok = tok_w + 8 * nt + 2 * c + e;
			xs[nt][e] = tok < a.n ? a.xs[tok] : 0.0f;
		}
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int h2 = 0; h2 < 2; h2++) {
			const int row = row_w + 16 * mt + 8 * h2 + g;
			if (row >= a.rows)
				continue;
			const float s = q_scale(a.ws, row, a.ws_f16);
#pragma unroll
			for (int nt = 0; nt < S::NT; nt++)
#pragma unroll
				for (int e = 0; e < 2; e++) {
					const int tok = tok_w + 8 * nt + 2 * c + e;
					if (tok >= a.n)
						continue;
					const float v = acc[mt][nt][2 * h2 + e] * s * xs[nt][e];
					const size_t o = (size_t)tok * a.rows + row;
					if (a.out_f32)
						of[o] = v;
					else
						ot[o] = kern_from_f32<T>(v);
				}
		}
}

/*
 * One block: rows [BM blockIdx.y, +BM), tokens [BN blockIdx.x, +BN),
 * chunks [chunks_per_split blockIdx.z, +chunks_per_split). W's first
 * stages are issued before waiting for the kernel that wrote x (W is
 * constant); the barrier after each wait publishes the landed stage and
 * retires the one the next load overwrites.
 */
template <typename T, typename S>
__global__ void __launch_bounds__(S::THREADS, S::MINB) w8a8_kernel(w8a8_args a)
{
	extern __shared__ uint4 w8_smem[];
	uint8_t *sw = reinterpret_cast<uint8_t *>(w8_smem);
	uint8_t *sx = sw + S::STAGES * S::BM * QM_CHUNK_BYTES;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int g = lane >> 2, c = lane & 3;
	const int wrow = (warp % S::WM) * QM_WARP_ROWS, wtok = (warp / S::WM) * (S::BN / S::WN);
	const int row0 = blockIdx.y * S::BM, tok0 = blockIdx.x * S::BN;
	const int ch_begin = blockIdx.z * a.chunks_per_split;
	const int nk = min(a.n_chunk, ch_begin + a.chunks_per_split) - ch_begin;
	auto stage_w = [&](int s) { return sw + s * S::BM * QM_CHUNK_BYTES; };
	auto stage_x = [&](int s) { return sx + s * S::BN * QM_CHUNK_BYTES; };
#pragma unroll
	for (int s = 0; s < S::STAGES - 1; s++)
		if (s < nk)
			w8_load<S, true, false>(a, stage_w(s), stage_x(s), ch_begin + s, row0, tok0);
	kern_pdl_wait();
#pragma unroll
	for (int s = 0; s < S::STAGES - 1; s++) {
		if (s < nk)
			w8_load<S, false, true>(a, stage_w(s), stage_x(s), ch_begin + s, row0, tok0);
		cp_async_commit(); /* empty groups keep the wait count uniform */
	}
	float acc[2][S::NT][4];
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int nt = 0; nt < S::NT; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[mt][nt][e] = 0;
	for (int k = 0; k < nk; k++) {
		cp_async_wait<S::STAGES - 2>();
		__syncthreads();
		const int ld = k + S::STAGES - 1;
		if (ld < nk)
			w8_load<S, true, true>(a, stage_w(ld % S::STAGES), stage_x(ld % S::STAGES),
					       ch_begin + ld, row0, tok0);
		cp_async_commit();
		w8_compute<S>(stage_w(k % S::STAGES), stage_x(k % S::STAGES), wrow, wtok, g, c, acc);
	}
	cp_async_wait<0>();
	kern_pdl_launch_next();
	w8_store<T, S>(a, acc, row0 + wrow, tok0 + wtok, g, c);
}

/* ---- launch ---- */

/* Block shapes by variant number (kern_w8a8_variant_name; lab/qgemv.cu
 * table 9 times each): w8_auto says which AUTO takes and why. */
typedef qm_shape<32, 4, 1, 4> w8_v1;
typedef qm_shape<64, 4, 1, 4> w8_v2;
typedef qm_shape<64, 2, 2, 4> w8_v3;
typedef qm_shape<64, 2, 1, 4> w8_v4;
typedef qm_shape<128, 4, 2, 4> w8_v5;
typedef qm_shape<128, 2, 4, 4> w8_v6;
typedef qm_shape<64, 4, 1, 6> w8_v7;
typedef qm_shape<128, 4, 1, 3> w8_v8;

const char *kern_w8a8_variant_name(int variant)
{
	static const char *const names[KERN_W8A8_VARIANTS + 1] = {
		"auto",          "32t 4x1w 4st", "64t 4x1w 4st", "64t 2x2w 4st", "64t 2x1w 4st",
		"128t 4x2w 4st", "128t 2x4w 4st", "64t 4x1w 6st", "128t 4x1w 3st"};
	return variant >= 0 && variant <= KERN_W8A8_VARIANTS ? names[variant] : "?";
}

template <typename T, typename S> struct w8_resident {
	static int per_sm;
};
template <typename T, typename S> int w8_resident<T, S>::per_sm;

template <typename T, typename S> static int w8_init_one()
{
	constexpr int smem = S::STAGES * w8_stage_bytes<S>();
	auto kernel = w8a8_kernel<T, S>;
	CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
	CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&w8_resident<T, S>::per_sm, kernel,
							       S::THREADS, smem));
	return SL_OK;
}

template <typename T> static int w8_init_dt()
{
	TRY((w8_init_one<T, w8_v1>()));
	TRY((w8_init_one<T, w8_v2>()));
	TRY((w8_init_one<T, w8_v3>()));
	TRY((w8_init_one<T, w8_v4>()));
	TRY((w8_init_one<T, w8_v5>()));
	TRY((w8_init_one<T, w8_v6>()));
	TRY((w8_init_one<T, w8_v7>()));
	return w8_init_one<T, w8_v8>();
}

int kern_w8a8_init(void)
{
	TRY(w8_init_dt<__half>());
	return w8_init_dt<__nv_bfloat16>();
}

template <typename T, typename S>
static int w8_launch(const kern_qgemm_ctx *ctx, w8a8_args a)
{
	constexpr int smem = S::STAGES * w8_stage_bytes<S>();
	auto kernel = w8a8_kernel<T, S>;
	const int tiles = (a.rows + S::BM - 1) / S::BM, ntiles = (a.n + S::BN - 1) / S::BN;
	const int per_sm = w8_resident<T, S>::per_sm;
	int splits = qm_splits(ctx, a.n, a.rows, a.n_chunk, tiles * ntiles,
			       ctx->sm_count * (per_sm > 0 ? per_sm : 1));
	const int per = (a.n_chunk + splits - 1) / splits;
	splits = (a.n_chunk + per - 1) / per;
	a.chunks_per_split = per;
	/* token tiles fastest: the blocks that read one W tile run together */
	const dim3 grid(ntiles, tiles, splits);
	if (splits == 1)
		return kern_launch_pdl_smem(ctx->pdl, "w8a8 gemm", ctx->stream, kernel, grid,
					    dim3(S::THREADS), smem, a);
	w8a8_args p = a;
	p.out = ctx->workspace;
	p.out_f32 = true;
	TRY(kern_launch_pdl_smem(ctx->pdl, "w8a8 gemm", ctx->stream, kernel, grid, dim3(S::THREADS),
				 smem, p));
	return q_splitk_finish<T>(a.out, a.out_f32, ctx->workspace, splits, (size_t)a.n * a.rows,
				  ctx->stream);
}

/* AUTO's block shape by tokens and rows: a first rule, to be replaced by
 * the measured one (lab-qgemv table 9). */
static int w8_auto(const w8a8_args &a)
{
	if (a.n <= 32)
		return 1;
	if (a.n <= 64)
		return a.rows < 8192 ? 3 : 2;
	return 5;
}

template <typename T> static int w8_dispatch(const kern_qgemm_ctx *ctx, const w8a8_args &a,
					     int variant)
{
	switch (variant ? variant : w8_auto(a)) {
	case 1: return w8_launch<T, w8_v1>(ctx, a);
	case 2: return w8_launch<T, w8_v2>(ctx, a);
	case 3: return w8_launch<T, w8_v3>(ctx, a);
	case 4: return w8_launch<T, w8_v4>(ctx, a);
	case 5: return w8_launch<T, w8_v5>(ctx, a);
	case 6: return w8_launch<T, w8_v6>(ctx, a);
	case 7: return w8_launch<T, w8_v7>(ctx, a);
	case 8: return w8_launch<T, w8_v8>(ctx, a);
	}
	return SL_ENOTSUP;
}

bool kern_w8a8_takes(const kern_qweight *w)
{
	return w->format == KERN_Q_FP8 && w->group == 0 && w->cols % 16 == 0;
}

int kern_w8a8_run(const kern_qgemm_ctx *ctx, const kern_qweight *w, void *out, sl_dtype out_dt,
		  const uint8_t *xq, const float *xs, int n, int variant)
{
	if (!kern_w8a8_takes(w) || variant < 0 || variant > KERN_W8A8_VARIANTS ||
	    (out_dt != SL_DT_F16 && out_dt != SL_DT_BF16 && out_dt != SL_DT_F32))
		return SL_ENOTSUP;
	w8a8_args a;
	memset(&a, 0, sizeof a);
	a.w = (const uint8_t *)w->data;
	a.ws = w->scales;
	a.ws_f16 = w->scale_dt == SL_DT_F16;
	a.xq = xq;
	a.xs = xs;
	a.out = out;
	a.rows = w->rows;
	a.cols = w->cols;
	a.n = n;
	a.n_chunk = (w->cols + QM_CHUNK_BYTES - 1) / QM_CHUNK_BYTES;
	a.out_f32 = out_dt == SL_DT_F32;
	/* an fp32 output still needs a T for the template: the store takes of */
	if (out_dt == SL_DT_BF16)
		return w8_dispatch<__nv_bfloat16>(ctx, a, variant);
	return w8_dispatch<__half>(ctx, a, variant);
}
