/*
 * quant_w8a8.cu — the W8A8 path's own GEMM on Hopper (KERN_QPATH_FP8_LT
 * with the KERN_W8A8_WGMMA engine, kernels/quant.h) for fp8 weights at
 * decode batches: e4m3 weight codes times the per-token e4m3 activations
 * quant.cu makes (kern_quantize_act_fp8_cuda, or the norm / SiLU kernels
 * that write them), on warpgroup MMAs (wgmma m64n128k32, sm_90a) with
 * fp32 sums.
 *
 * Why not only cuBLASLt: at decode sizes its fp8 GEMM has one algorithm
 * with per-row scales, a 128-row tile without split-K, so the o and down
 * projections (4096 rows) run 32 blocks on 132 SMs; with unit scales it
 * picks faster kernels, still at 1.4-2.3 TB/s on the 7B's projections at
 * 64 tokens (bench/results/2026-11-29-nvidia-h200-lt-unit). Here the
 * columns split across blocks (split-K) until every SM streams W. An
 * mma.sync engine did the same and lost (2026-11-29-nvidia-h200-w8a8-mma):
 * mma.sync with fp8 inputs runs at half the rate; wgmma at the full one.
 *
 * Numerics: the W8A8 contract (kern_qmatmul_w8a8_cpu): exact products of
 * codes summed in fp32, times the weight row's and the token's scale at
 * the end. Each 128-column tile's four MMAs sum into a fresh accumulator
 * that is then added to the total in fp32 (the tensor cores may keep
 * fewer mantissa bits in an fp8 sum than fp32; DeepGEMM promotes the same
 * way). Split-K partials, already scaled (the scales commute with the
 * sum), are reduced in a fixed order (q_splitk_finish).
 *
 * A block is one warpgroup: 64 tokens (wgmma's M; rows past n zero-filled)
 * x 128 weight rows (N) over a range of 128-byte column tiles, staged by
 * a kW8Stages-deep cp.async pipeline in the 128-byte swizzle (wgmma.cuh):
 * an fp8 row of a tile is one swizzle row. W's first stages are issued
 * before waiting for the kernel that wrote x (W is constant).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_util.cuh"
#include "kernels/quant_dequant.cuh"
#include "kernels/wgmma.cuh"

namespace {

constexpr int kW8Rows = 128;  /* weight rows a block (wgmma N) */
constexpr int kW8Toks = 64;   /* tokens a block (wgmma M) */
constexpr int kW8K = 128;     /* bytes (codes) of a column tile */
constexpr int kW8Stages = 4;
constexpr int kW8Threads = 128;
constexpr int kW8MinTiles = 2; /* column tiles a split takes at least */
constexpr uint32_t kW8WBytes = kW8Rows * kW8K, kW8XBytes = kW8Toks * kW8K;
constexpr uint32_t kW8Stage = kW8WBytes + kW8XBytes; /* 24 KiB, a multiple of 1024 */
constexpr size_t kW8Smem = 1024 + kW8Stages * kW8Stage;

struct w8a8_args {
	const uint8_t *w;  /* [rows, cols] e4m3 codes */
	const void *ws;    /* [rows] weight scales, fp32 or fp16 */
	const uint8_t *xq; /* [n, cols] e4m3 activations */
	const float *xs;   /* [n] their scales */
	void *out;         /* [n, rows] of T or fp32; partials [splits][n][rows] fp32 */
	int rows, cols, n, n_tiles, tiles_per_split;
	bool ws_f16, out_f32;
	bool no_fence; /* experiment: SL_W8A8_NOFENCE=1 skips the proxy fence */
};

/* Rows [0, R) of column tile kt of a [lim_rows, cols] code matrix from
 * row r0 into a swizzled stage; rows and bytes past the ends zero-filled. */
template <int R>
__device__ __forceinline__ void w8_load(const uint8_t *m, int lim_rows, int cols, int r0, int kt,
					uint8_t *dst)
{
#pragma unroll
	for (int k = 0; k < R * 8 / kW8Threads; k++) {
		const int i = threadIdx.x + k * kW8Threads, r = i >> 3, c = i & 7;
		const int byte = kt * kW8K + 16 * c;
		const bool ok = r0 + r < lim_rows && byte < cols;
		const uint8_t *src = ok ? m + (size_t)(r0 + r) * cols + byte : m;
		cp_async16(dst + kern_sw128_off(r, c, R), src, ok);
	}
}

/* The sums times both scales to out (or the split's partials): lane
 * (warp, g, t4) holds tokens 16 warp + g (+ 8) at rows 8 j + 2 t4 (+ 1). */
template <typename T>
__device__ __forceinline__ void w8_store(const w8a8_args &a, const float (&acc)[64], int row0,
					 int tok0)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
	float *of = reinterpret_cast<float *>(a.out) + (size_t)blockIdx.y * a.n * a.rows;
	T *ot = reinterpret_cast<T *>(a.out);
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int tok = tok0 + 16 * warp + g + 8 * h;
		if (tok >= a.n)
			continue;
		const float sx = a.xs[tok];
#pragma unroll
		for (int j = 0; j < kW8Rows / 8; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int row = row0 + 8 * j + 2 * t4 + e;
				if (row >= a.rows)
					continue;
				const float v = acc[4 * j + 2 * h + e] * q_scale(a.ws, row, a.ws_f16) * sx;
				const size_t o = (size_t)tok * a.rows + row;
				if (a.out_f32)
					of[o] = v;
				else
					ot[o] = kern_from_f32<T>(v);
			}
	}
}

/* grid (row tiles, splits, token tiles), one warpgroup. The barrier after
 * each wait publishes the landed stage and retires the one the next load
 * overwrites (its MMAs were waited for before it). */
template <typename T>
__global__ void __launch_bounds__(kW8Threads, 2) w8a8_wg_kernel(w8a8_args a)
{
#ifdef KERN_HAVE_WGMMA
	extern __shared__ unsigned char w8_raw[];
	uint8_t *smem = (uint8_t *)(((uintptr_t)w8_raw + 1023) & ~(uintptr_t)1023);
	const uint32_t smem_a = (uint32_t)__cvta_generic_to_shared(smem);
	const int row0 = blockIdx.x * kW8Rows, tok0 = blockIdx.z * kW8Toks;
	const int kt0 = blockIdx.y * a.tiles_per_split;
	const int nk = min(a.n_tiles, kt0 + a.tiles_per_split) - kt0;
	auto stage_w = [&](int s) { return smem + s * kW8Stage; };
	auto stage_x = [&](int s) { return smem + s * kW8Stage + kW8WBytes; };
#pragma unroll
	for (int s = 0; s < kW8Stages - 1; s++)
		if (s < nk)
			w8_load<kW8Rows>(a.w, a.rows, a.cols, row0, kt0 + s, stage_w(s));
	kern_pdl_wait();
#pragma unroll
	for (int s = 0; s < kW8Stages - 1; s++) {
		if (s < nk)
			w8_load<kW8Toks>(a.xq, a.n, a.cols, tok0, kt0 + s, stage_x(s));
		cp_async_commit(); /* empty groups keep the wait count uniform */
	}
	float acc[64], pa[64], pb[64];
#pragma unroll
	for (int i = 0; i < 64; i++)
		acc[i] = 0.f;
	/* Tile k: its copies landed and published, its four MMAs issued into
	 * cur; then tile k - 1's (into prev) waited for and added to acc, so
	 * the MMAs of one tile run while the block publishes the next; only
	 * then does stage (k - 1) % kW8Stages take tile k + kW8Stages - 1. */
	auto step = [&](int k, float(&cur)[64], float(&prev)[64]) {
		cp_async_wait<kW8Stages - 2>();
		if (!a.no_fence)
			kern_fence_proxy_async();
		__syncthreads();
		const uint32_t sw = smem_a + (k % kW8Stages) * kW8Stage, sx = sw + kW8WBytes;
		kern_wgmma_pin(cur);
		kern_wgmma_fence();
#pragma unroll
		for (int kk = 0; kk < kW8K / 32; kk++)
			kern_wgmma_ss_n128_e4m3(cur, kern_wgmma_desc(sx + 32 * kk, 16, 1024),
						kern_wgmma_desc(sw + 32 * kk, 16, 1024), kk > 0);
		kern_wgmma_commit();
		kern_wgmma_wait<1>();
		kern_wgmma_pin(prev);
		if (k > 0)
#pragma unroll
			for (int i = 0; i < 64; i++)
				acc[i] += prev[i];
		const int ld = k + kW8Stages - 1;
		if (ld < nk) {
			w8_load<kW8Rows>(a.w, a.rows, a.cols, row0, kt0 + ld, stage_w(ld % kW8Stages));
			w8_load<kW8Toks>(a.xq, a.n, a.cols, tok0, kt0 + ld, stage_x(ld % kW8Stages));
		}
		cp_async_commit();
	};
	for (int k = 0; k < nk; k += 2) {
		step(k, pa, pb);
		if (k + 1 < nk)
			step(k + 1, pb, pa);
	}
	kern_wgmma_wait<0>();
	kern_wgmma_pin(pa);
	kern_wgmma_pin(pb);
	if (nk > 0)
#pragma unroll
		for (int i = 0; i < 64; i++)
			acc[i] += nk & 1 ? pa[i] : pb[i]; /* the last tile's */
	cp_async_wait<0>();
	kern_pdl_launch_next();
	w8_store<T>(a, acc, row0, tok0);
#endif
}

int g_w8_per_sm; /* blocks resident an SM (occupancy, at init) */

template <typename T> int w8_init_dt()
{
	CUDA_TRY(cudaFuncSetAttribute(w8a8_wg_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
				      (int)kW8Smem));
	CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&g_w8_per_sm, w8a8_wg_kernel<T>,
							       kW8Threads, kW8Smem));
	return SL_OK;
}

/* Splits of the column tiles when the blocks fill less than one wave
 * (slots: blocks resident at once): as many as fit in that wave, each at
 * least kW8MinTiles tiles, the partials fitting the workspace. forced >
 * 0: that many (tests and lab/qgemv.cu), within the same bounds. */
int w8_splits(const kern_qgemm_ctx *ctx, const w8a8_args &a, int blocks, int forced)
{
	const int slots = ctx->sm_count * (g_w8_per_sm > 0 ? g_w8_per_sm : 1);
	int splits = forced > 0 ? forced : blocks >= slots ? 1 : slots / blocks;
	const int most = a.n_tiles / kW8MinTiles;
	const size_t fit = ctx->workspace_bytes / (sizeof(float) * (size_t)a.n * a.rows);
	if (splits > most)
		splits = most;
	if ((size_t)splits > fit)
		splits = (int)fit;
	return splits < 1 ? 1 : splits;
}

template <typename T> int w8_launch(const kern_qgemm_ctx *ctx, w8a8_args a, int forced)
{
	const int tiles = (a.rows + kW8Rows - 1) / kW8Rows, ttiles = (a.n + kW8Toks - 1) / kW8Toks;
	int splits = w8_splits(ctx, a, tiles * ttiles, forced);
	const int per = (a.n_tiles + splits - 1) / splits;
	splits = (a.n_tiles + per - 1) / per;
	a.tiles_per_split = per;
	const dim3 grid(tiles, splits, ttiles);
	if (splits == 1)
		return kern_launch_pdl_smem(ctx->pdl, "w8a8 wgmma", ctx->stream, w8a8_wg_kernel<T>,
					    grid, dim3(kW8Threads), kW8Smem, a);
	w8a8_args p = a;
	p.out = ctx->workspace;
	p.out_f32 = true;
	TRY(kern_launch_pdl_smem(ctx->pdl, "w8a8 wgmma", ctx->stream, w8a8_wg_kernel<T>, grid,
				 dim3(kW8Threads), kW8Smem, p));
	return q_splitk_finish<T>(a.out, a.out_f32, ctx->workspace, splits, (size_t)a.n * a.rows,
				  ctx->stream);
}

} /* namespace */

int kern_w8a8_init(int *usable)
{
	*usable = 0;
	int dev, major, minor;
	CUDA_TRY(cudaGetDevice(&dev));
	CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
	CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
	cudaFuncAttributes fa;
	/* sm_90a code: compute capability 9.0 only, and only in builds whose
	 * CUDA_ARCHS list 90 (Makefile) */
	if (major != 9 || minor != 0 ||
	    cudaFuncGetAttributes(&fa, w8a8_wg_kernel<__half>) != cudaSuccess ||
	    fa.binaryVersion != 90)
		return SL_OK;
	TRY(w8_init_dt<__half>());
	TRY(w8_init_dt<__nv_bfloat16>());
	*usable = 1;
	return SL_OK;
}

bool kern_w8a8_takes(const kern_qweight *w)
{
	return w->format == KERN_Q_FP8 && w->group == 0 && w->cols % 16 == 0;
}

int kern_w8a8_run(const kern_qgemm_ctx *ctx, const kern_qweight *w, void *out, sl_dtype out_dt,
		  const uint8_t *xq, const float *xs, int n, int splits)
{
	if (!kern_w8a8_takes(w) || n <= 0 ||
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
	a.n_tiles = (w->cols + kW8K - 1) / kW8K;
	a.out_f32 = out_dt == SL_DT_F32;
	const char *nf = getenv("SL_W8A8_NOFENCE");
	a.no_fence = nf && *nf == '1';
	/* an fp32 output still needs a T for the template: the store takes of */
	if (out_dt == SL_DT_BF16)
		return w8_launch<__nv_bfloat16>(ctx, a, splits);
	return w8_launch<__half>(ctx, a, splits);
}
