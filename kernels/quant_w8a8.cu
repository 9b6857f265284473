/*
 * quant_w8a8.cu — the W8A8 path's own GEMM on Hopper (KERN_QPATH_FP8_LT
 * with the KERN_W8A8_WGMMA engine, kernels/quant.h) for fp8 weights at
 * decode batches: e4m3 weight codes times the per-token e4m3 activations
 * quant.cu makes (kern_quantize_act_fp8_cuda, or the norm / SiLU kernels
 * that write them), on warpgroup MMAs (wgmma m64n128k32, sm_90a) with
 * fp32 sums.
 *
 * Why not only cuBLASLt: at decode sizes its fp8 GEMM reads the 7B's
 * projections at 1.4-2.3 TB/s of the H200's 4.2 (64 tokens,
 * bench/results/2026-11-29-nvidia-h200-lt-unit): the 4096-row o and down
 * projections run 32 blocks on 132 SMs. A first engine of our own with
 * cp.async stages streamed about one 24 KiB tile a microsecond a block
 * and lost (bench/results/2026-11-29-nvidia-h200-w8a8-wgmma: too few
 * bytes in flight). This one is warp-specialized, as DeepGEMM's and
 * CUTLASS's Hopper mainloops are: one producer warp issues TMA tile loads
 * (cp.async.bulk.tensor, one instruction a tile) into a ring of stages
 * guarded by mbarriers, so up to kW8Stages tiles a block are in flight
 * without any thread waiting for them; the consumer warpgroup waits on a
 * stage's "full" barrier, runs its MMAs and frees it on its "empty" one.
 *
 * A block is 64 tokens (wgmma's M; TMA zero-fills tokens past n) x 128
 * weight rows (N) over a range of 128-byte column tiles. The column tiles
 * split across the blocks of a thread-block cluster (split-K, up to 8)
 * until the row tiles fill the SMs; the cluster's blocks then sum their
 * fp32 accumulators through distributed shared memory in rank order, so
 * nothing goes through global memory and the sums are deterministic.
 *
 * Measured on one H200 (bench/results/2026-11-29-nvidia-h200-w8a8-tma/)
 * and not kept: at 64 tokens it ties cuBLASLt on qkv (24.5 us), wins a
 * little on gate_up (35.7 against 37.3) and loses on the 4096-row o
 * (15.6 at its best split against 11.8) and down (25.3 against 23.7), so
 * fp8 + fp8 KV decode at batch 64 fell from 11,147-11,579 to 10,617
 * tokens/s. Experiment switches, read at init: SL_W8A8_VAR=0..3 the ring
 * shape (w8_s0..3 below), SL_W8A8_ROT=0 tiles in order, SL_W8A8_L2=0 no
 * L2 promotion of the TMA loads.
 *
 * Numerics: the W8A8 contract (kern_qmatmul_w8a8_cpu): exact products of
 * codes summed in fp32, times the weight row's and the token's scale at
 * the end. Each 128-column tile's four MMAs sum into a fresh accumulator
 * that is then added to the total in fp32 (the tensor cores may keep
 * fewer mantissa bits in an fp8 sum than fp32; DeepGEMM promotes the same
 * way).
 */
#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_util.cuh"
#include "kernels/quant_dequant.cuh"
#include "kernels/wgmma.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int kW8Rows = 128;   /* weight rows a block (wgmma N) */
constexpr int kW8Toks = 64;    /* tokens a block (wgmma M) */
constexpr int kW8K = 128;      /* bytes (codes) of a column tile: one swizzle row */
constexpr int kW8MaxSplits = 8; /* a portable cluster */
constexpr int kW8MinTiles = 2;  /* column tiles a split takes at least */
constexpr uint32_t kW8WBytes = kW8Rows * kW8K, kW8XBytes = kW8Toks * kW8K;
constexpr uint32_t kW8Tile = kW8WBytes + kW8XBytes; /* 24 KiB, a multiple of 1024 */

/* A ring shape: KB column tiles a stage (KB * 128 contiguous bytes of
 * each W row at once), ST stages. */
template <int KB, int ST, int C> struct w8_shape {
	static constexpr int kb = KB, stages = ST;
	static constexpr int consumers = C; /* warpgroups, taking the steps in turn */
	static constexpr int threads = 128 * C + 32; /* then the producer warp */
	static constexpr uint32_t stage_bytes = KB * kW8Tile;
	static constexpr size_t smem = 1024 + ST * stage_bytes;
	static_assert(C * kW8Toks * kW8Rows * sizeof(float) <= ST * stage_bytes,
		      "the cluster's sums reuse the ring");
};

struct w8a8_args {
	const void *ws;    /* [rows] weight scales, fp32 or fp16 */
	const float *xs;   /* [n] the tokens' scales */
	void *out;         /* [n, rows] of T or fp32 */
	int rows, n, n_tiles, tiles_per_split;
	bool ws_f16, out_f32;
	bool rotate; /* experiment (SL_W8A8_ROT=0: off): rotated tile order */
};

/* ---- mbarriers and TMA (PTX ISA: "Parallel Synchronization and
 * Communication Instructions: mbarrier", "cp.async.bulk.tensor") ---- */

__device__ __forceinline__ void mb_init(uint32_t bar, uint32_t count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* One arrival that also expects `bytes` of transactions (the TMA loads). */
__device__ __forceinline__ void mb_expect(uint32_t bar, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
		     "r"(bytes)
		     : "memory");
}

__device__ __forceinline__ void mb_arrive(uint32_t bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Until the phase of parity `parity` has completed. */
__device__ __forceinline__ void mb_wait(uint32_t bar, uint32_t parity)
{
	uint32_t done = 0;
	while (!done)
		asm volatile("{\n.reg .pred p;\n"
			     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
			     "selp.u32 %0, 1, 0, p;\n}\n"
			     : "=r"(done)
			     : "r"(bar), "r"(parity)
			     : "memory");
}

/* The box at (c0 bytes, c1 rows) of `map` into shared `dst`, completing
 * on `bar`; out-of-bounds elements arrive as zeros. */
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0,
					 int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
		     "[%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
		     "l"(map), "r"(bar), "r"(c0), "r"(c1)
		     : "memory");
}

/* ---- the kernel ---- */

/* Stage s holds its KB W tiles, then its KB x tiles. */
template <class S> struct w8_ring {
	uint8_t *smem;   /* S::stages stages */
	uint32_t base;   /* its shared address */
	uint32_t full;   /* S::stages barriers: the stage's tiles landed */
	uint32_t empty;  /* S::stages barriers: its MMAs are done with it */
	int kt0, nk, rot; /* column tiles kt0 .. kt0 + nk - 1, from kt0 + rot on */
	__device__ uint32_t stage(int s) const { return base + s * S::stage_bytes; }
	__device__ uint32_t w_tile(int s, int b) const { return stage(s) + b * kW8WBytes; }
	__device__ uint32_t x_tile(int s, int b) const
	{
		return stage(s) + S::kb * kW8WBytes + b * kW8XBytes;
	}
	/* the column tile of step k's b-th: in a rotated order, so that the
	 * blocks' loads spread over the rows' bytes instead of moving in step */
	__device__ int tile(int k, int b) const
	{
		const int i = k * S::kb + b + rot;
		return kt0 + (i >= nk ? i - nk : i);
	}
	__device__ uint32_t bar_full(int s) const { return full + 8 * s; }
	__device__ uint32_t bar_empty(int s) const { return empty + 8 * s; }
};

/* The producer (one lane): W's first stages before the PDL wait (W is
 * constant), x's after it, then each stage again once its MMAs are done.
 * Step k takes tiles k KB .. k KB + KB - 1 of the rotated order; a last
 * step's tiles past nk are not loaded (the stage keeps whatever it held,
 * and the consumer skips them). */
template <class S>
__device__ __forceinline__ void w8_produce(const w8_ring<S> &r, const CUtensorMap *tw,
					   const CUtensorMap *tx, int row0, int tok0, int steps)
{
	auto tiles_of = [&](int k) { return min(S::kb, r.nk - k * S::kb); };
	const int first = steps < S::stages ? steps : S::stages;
	for (int k = 0; k < first; k++) {
		mb_expect(r.bar_full(k), tiles_of(k) * kW8Tile);
		for (int b = 0; b < tiles_of(k); b++)
			tma_load(r.w_tile(k, b), tw, r.bar_full(k), r.tile(k, b) * kW8K, row0);
	}
	kern_pdl_wait();
	for (int k = 0; k < first; k++)
		for (int b = 0; b < tiles_of(k); b++)
			tma_load(r.x_tile(k, b), tx, r.bar_full(k), r.tile(k, b) * kW8K, tok0);
	for (int k = S::stages; k < steps; k++) {
		const int s = k % S::stages;
		mb_wait(r.bar_empty(s), ((k / S::stages) - 1) & 1);
		mb_expect(r.bar_full(s), tiles_of(k) * kW8Tile);
		for (int b = 0; b < tiles_of(k); b++) {
			tma_load(r.w_tile(s, b), tw, r.bar_full(s), r.tile(k, b) * kW8K, row0);
			tma_load(r.x_tile(s, b), tx, r.bar_full(s), r.tile(k, b) * kW8K, tok0);
		}
	}
}

/* Consumer warpgroup wg (of S::consumers, which take the steps in turn):
 * each tile's four MMAs into a fresh accumulator, added to acc; the stage
 * freed (one arrival a warp) once they are done. */
template <class S>
__device__ __forceinline__ void w8_consume(const w8_ring<S> &r, int steps, int wg,
					   float (&acc)[64])
{
	float cur[64];
#pragma unroll
	for (int i = 0; i < 64; i++)
		acc[i] = 0.f;
	for (int k = wg; k < steps; k += S::consumers) {
		const int s = k % S::stages;
		mb_wait(r.bar_full(s), (k / S::stages) & 1);
#pragma unroll
		for (int b = 0; b < S::kb; b++) {
			if (k * S::kb + b >= r.nk)
				break;
			const uint32_t sw = r.w_tile(s, b), sx = r.x_tile(s, b);
			kern_wgmma_fence();
#pragma unroll
			for (int kk = 0; kk < kW8K / 32; kk++)
				kern_wgmma_ss_n128_e4m3(cur, kern_wgmma_desc(sx + 32 * kk, 16, 1024),
							kern_wgmma_desc(sw + 32 * kk, 16, 1024),
							kk > 0);
			kern_wgmma_commit();
			kern_wgmma_wait<0>();
			kern_wgmma_pin(cur);
#pragma unroll
			for (int i = 0; i < 64; i++)
				acc[i] += cur[i];
		}
		__syncwarp();
		if ((threadIdx.x & 31) == 0)
			mb_arrive(r.bar_empty(s));
	}
}

/* The scales of the block's 128 weight rows and 64 tokens into shared
 * memory (0 past the ends), one each a consumer thread: loaded while the
 * first tiles are on their way, so that no load waits in the store loop. */
__device__ __forceinline__ void w8_scales(const w8a8_args &a, int row0, int tok0, float *s_sw,
					  float *s_sx)
{
	const int t = threadIdx.x, row = row0 + t, tok = tok0 + t;
	s_sw[t] = row < a.rows ? q_scale(a.ws, row, a.ws_f16) : 0.f;
	if (t < kW8Toks)
		s_sx[t] = tok < a.n ? a.xs[tok] : 0.f;
}

/* After every block of the cluster has its sums in its ring (red, as
 * [C warpgroups][64 accumulators][128 threads]): this block's share,
 * summed over the ranks and then the warpgroups in order (all loads
 * first, then the stores), scaled and stored; by the first warpgroup. */
template <typename T, int C>
__device__ __forceinline__ void w8_reduce_store(const w8a8_args &a, const float *s_sw,
						const float *s_sx, cg::cluster_group &cl,
						float *red, int row0, int tok0)
{
	const int t = threadIdx.x, g = (t & 31) >> 2, t4 = t & 3;
	const int splits = (int)cl.num_blocks(), rank = (int)cl.block_rank();
	float v[16][4];
#pragma unroll
	for (int jj = 0; jj < 16; jj++)
#pragma unroll
		for (int k = 0; k < 4; k++)
			v[jj][k] = 0.f;
	for (int q = 0; q < splits; q++) {
		const float *pr = cl.map_shared_rank(red, q);
#pragma unroll
		for (int w = 0; w < C; w++)
#pragma unroll
			for (int jj = 0; jj < 16; jj++) {
				const int j = rank + jj * splits;
				if (j < 16)
#pragma unroll
					for (int k = 0; k < 4; k++)
						v[jj][k] += pr[w * 64 * 128 + (4 * j + k) * 128 + t];
			}
	}
	float *of = reinterpret_cast<float *>(a.out);
	T *ot = reinterpret_cast<T *>(a.out);
#pragma unroll
	for (int jj = 0; jj < 16; jj++)
#pragma unroll
		for (int k = 0; k < 4; k++) {
			const int j = rank + jj * splits, h = k >> 1, e = k & 1;
			const int tok = tok0 + 16 * (t >> 5) + g + 8 * h, row = row0 + 8 * j + 2 * t4 + e;
			if (j >= 16 || tok >= a.n || row >= a.rows)
				continue;
			const float x = v[jj][k] * s_sw[8 * j + 2 * t4 + e] * s_sx[16 * (t >> 5) + g + 8 * h];
			const size_t i = (size_t)tok * a.rows + row;
			if (a.out_f32)
				of[i] = x;
			else
				ot[i] = kern_from_f32<T>(x);
		}
}

/* The cluster barrier without a memory fence: what it orders is done
 * (the peers' reads of this block's ring have returned their values). */
__device__ __forceinline__ void w8_cluster_sync_relaxed()
{
	asm volatile("barrier.cluster.arrive.relaxed.aligned;\n"
		     "barrier.cluster.wait.aligned;\n" ::: "memory");
}

/* grid (row tiles, splits, token tiles), clusters (1, splits, 1). */
template <typename T, class S>
__global__ void __launch_bounds__(S::threads, 1)
	w8a8_tma_kernel(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx,
			w8a8_args a)
{
#ifdef KERN_HAVE_WGMMA
	extern __shared__ unsigned char w8_raw[];
	__shared__ __align__(8) uint64_t bars[2 * S::stages];
	__shared__ float s_sw[kW8Rows], s_sx[kW8Toks];
	uint8_t *smem = (uint8_t *)(((uintptr_t)w8_raw + 1023) & ~(uintptr_t)1023);
	w8_ring<S> r;
	r.smem = smem;
	r.base = (uint32_t)__cvta_generic_to_shared(smem);
	r.full = (uint32_t)__cvta_generic_to_shared(bars);
	r.empty = r.full + 8 * S::stages;
	cg::cluster_group cl = cg::this_cluster();
	const int row0 = blockIdx.x * kW8Rows, tok0 = blockIdx.z * kW8Toks;
	r.kt0 = blockIdx.y * a.tiles_per_split;
	r.nk = max(0, min(a.n_tiles, r.kt0 + a.tiles_per_split) - r.kt0);
	r.rot = a.rotate && r.nk ? (int)((blockIdx.x * 5u + blockIdx.z * 3u) % (unsigned)r.nk) : 0;
	const int steps = (r.nk + S::kb - 1) / S::kb;
	constexpr int kProd = 128 * S::consumers; /* the producer warp's first thread */
	const bool producer = threadIdx.x >= kProd;
	const int wg = threadIdx.x >> 7;
	if (threadIdx.x == kProd) {
		for (int s = 0; s < S::stages; s++) {
			mb_init(r.bar_full(s), 1);
			mb_init(r.bar_empty(s), 4);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();
	float acc[64];
	if (producer) {
		if (threadIdx.x == kProd)
			w8_produce(r, &tw, &tx, row0, tok0, steps);
		__syncwarp();
		kern_pdl_wait();
	} else {
		kern_pdl_wait(); /* xs and out: the previous kernels' */
		if (wg == 0)
			w8_scales(a, row0, tok0, s_sw, s_sx);
		w8_consume(r, steps, wg, acc);
		/* every MMA of the warpgroups is done with the ring */
		asm volatile("bar.sync 1, %0;\n" ::"n"(kProd) : "memory");
		float *red = reinterpret_cast<float *>(smem) + wg * 64 * 128;
#pragma unroll
		for (int i = 0; i < 64; i++)
			red[i * 128 + (threadIdx.x & 127)] = acc[i];
	}
	kern_pdl_launch_next();
	cl.sync(); /* every block's sums in its ring */
	if (wg == 0)
		w8_reduce_store<T, S::consumers>(a, s_sw, s_sx, cl, reinterpret_cast<float *>(smem),
						 row0, tok0);
	if (cl.num_blocks() > 1)
		w8_cluster_sync_relaxed(); /* no block leaves while a peer reads its ring */
#endif
}

/* The ring shapes (SL_W8A8_VAR=N picks one; experiment): tiles a stage
 * x stages x consumer warpgroups. One warpgroup fits two blocks an SM,
 * two warpgroups one. */
typedef w8_shape<1, 4, 1> w8_s0;
typedef w8_shape<1, 8, 2> w8_s1;
typedef w8_shape<1, 6, 2> w8_s2;
typedef w8_shape<2, 4, 2> w8_s3;
constexpr int kW8Shapes = 4;
int g_w8_per_sm[kW8Shapes]; /* blocks resident an SM (occupancy, at init) */
int g_w8_shape;             /* the one calls take */
bool g_w8_rotate = true;
bool g_w8_l2 = true; /* experiment (SL_W8A8_L2=0): no L2 promotion */
PFN_cuTensorMapEncodeTiled_v12000 g_encode;

template <typename T, class S> int w8_init_one(int i)
{
	CUDA_TRY(cudaFuncSetAttribute(w8a8_tma_kernel<T, S>,
				      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::smem));
	CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&g_w8_per_sm[i], w8a8_tma_kernel<T, S>,
							       S::threads, S::smem));
	return SL_OK;
}

template <typename T> int w8_init_dt()
{
	TRY((w8_init_one<T, w8_s0>(0)));
	TRY((w8_init_one<T, w8_s1>(1)));
	TRY((w8_init_one<T, w8_s2>(2)));
	TRY((w8_init_one<T, w8_s3>(3)));
	return SL_OK;
}

/* A [outer, inner] byte matrix's map, boxes of kW8K bytes x box_rows
 * rows in the 128-byte swizzle. */
int w8_map(CUtensorMap *map, const void *p, int outer, int inner, int box_rows)
{
	const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
	const cuuint64_t strides[1] = {(cuuint64_t)inner};
	const cuuint32_t box[2] = {(cuuint32_t)kW8K, (cuuint32_t)box_rows};
	const cuuint32_t estr[2] = {1, 1};
	CUresult rc = g_encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)p, dims, strides, box,
			       estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
			       g_w8_l2 ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (rc != CUDA_SUCCESS) {
		sl_log(SL_LOG_ERROR, "cuda", "w8a8: cuTensorMapEncodeTiled failed (%d) for %d x %d",
		       (int)rc, outer, inner);
		return SL_EDEVICE;
	}
	return SL_OK;
}

/* K splits: the most (up to a cluster of 8) that keep the blocks within
 * one wave of the resident slots, each at least kW8MinTiles column
 * tiles; forced > 0: that many, within the same bounds. */
int w8_splits(const kern_qgemm_ctx *ctx, int n_tiles, int blocks, int forced)
{
	const int per_sm = g_w8_per_sm[g_w8_shape];
	const int slots = ctx->sm_count * (per_sm > 0 ? per_sm : 1);
	int splits = forced > 0 ? forced : blocks >= slots ? 1 : slots / blocks;
	if (splits > kW8MaxSplits)
		splits = kW8MaxSplits;
	if (splits > n_tiles / kW8MinTiles)
		splits = n_tiles / kW8MinTiles;
	return splits < 1 ? 1 : splits;
}

/* Launch with a (1, splits, 1) cluster, as a programmatic dependent while
 * *ctx->pdl (a refused PDL launch falls back to a plain one, for good). */
template <typename T, class S>
int w8_launch_kernel(const kern_qgemm_ctx *ctx, dim3 grid, const CUtensorMap &tw,
		     const CUtensorMap &tx, const w8a8_args &a)
{
	cudaLaunchAttribute attr[2];
	attr[0].id = cudaLaunchAttributeClusterDimension;
	attr[0].val.clusterDim.x = 1;
	attr[0].val.clusterDim.y = grid.y;
	attr[0].val.clusterDim.z = 1;
	attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[1].val.programmaticStreamSerializationAllowed = 1;
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = grid;
	cfg.blockDim = dim3(S::threads);
	cfg.dynamicSmemBytes = S::smem;
	cfg.stream = ctx->stream;
	cfg.attrs = attr;
	cfg.numAttrs = *ctx->pdl ? 2 : 1;
	cudaError_t e = cudaLaunchKernelEx(&cfg, w8a8_tma_kernel<T, S>, tw, tx, a);
	if (e != cudaSuccess && *ctx->pdl) {
		cudaGetLastError();
		sl_log(SL_LOG_WARN, "cuda", "w8a8: PDL launch refused (%s); plain launches from now",
		       cudaGetErrorString(e));
		*ctx->pdl = false;
		cfg.numAttrs = 1;
		e = cudaLaunchKernelEx(&cfg, w8a8_tma_kernel<T, S>, tw, tx, a);
	}
	CUDA_TRY(e);
	return SL_OK;
}

template <typename T>
int w8_launch(const kern_qgemm_ctx *ctx, const kern_qweight *w, const uint8_t *xq, w8a8_args a,
	      int forced)
{
	CUtensorMap tw, tx;
	TRY(w8_map(&tw, w->data, w->rows, w->cols, kW8Rows));
	TRY(w8_map(&tx, xq, a.n, w->cols, kW8Toks));
	const int tiles = (a.rows + kW8Rows - 1) / kW8Rows, ttiles = (a.n + kW8Toks - 1) / kW8Toks;
	int splits = w8_splits(ctx, a.n_tiles, tiles * ttiles, forced);
	const int per = (a.n_tiles + splits - 1) / splits;
	splits = (a.n_tiles + per - 1) / per; /* no split without tiles */
	a.tiles_per_split = per;
	a.rotate = g_w8_rotate;
	const dim3 grid(tiles, splits, ttiles);
	switch (g_w8_shape) {
	case 1:
		return w8_launch_kernel<T, w8_s1>(ctx, grid, tw, tx, a);
	case 2:
		return w8_launch_kernel<T, w8_s2>(ctx, grid, tw, tx, a);
	case 3:
		return w8_launch_kernel<T, w8_s3>(ctx, grid, tw, tx, a);
	default:
		return w8_launch_kernel<T, w8_s0>(ctx, grid, tw, tx, a);
	}
}

} /* namespace */

int kern_w8a8_init(int *usable)
{
	*usable = 0;
	if (!kern_wgmma_usable(w8a8_tma_kernel<__half, w8_s0>))
		return SL_OK;
	void *fn = NULL;
	cudaDriverEntryPointQueryResult q;
	if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
					     &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess || !fn) {
		cudaGetLastError();
		sl_log(SL_LOG_WARN, "cuda", "w8a8: no cuTensorMapEncodeTiled in the driver");
		return SL_OK;
	}
	g_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
	const char *v = getenv("SL_W8A8_VAR"), *rot = getenv("SL_W8A8_ROT");
	g_w8_shape = v && atoi(v) > 0 && atoi(v) < kW8Shapes ? atoi(v) : 0;
	g_w8_rotate = !(rot && *rot == '0');
	const char *l2 = getenv("SL_W8A8_L2");
	g_w8_l2 = !(l2 && *l2 == '0');
	TRY(w8_init_dt<__half>());
	TRY(w8_init_dt<__nv_bfloat16>());
	*usable = 1;
	return SL_OK;
}

bool kern_w8a8_takes(const kern_qweight *w)
{
	/* TMA: 16-byte aligned rows */
	return w->format == KERN_Q_FP8 && w->group == 0 && w->cols % 16 == 0;
}

int kern_w8a8_run(const kern_qgemm_ctx *ctx, const kern_qweight *w, void *out, sl_dtype out_dt,
		  const uint8_t *xq, const float *xs, int n, int splits)
{
	if (!kern_w8a8_takes(w) || n <= 0 || !g_encode || ((uintptr_t)w->data & 15) ||
	    ((uintptr_t)xq & 15) ||
	    (out_dt != SL_DT_F16 && out_dt != SL_DT_BF16 && out_dt != SL_DT_F32))
		return SL_ENOTSUP;
	w8a8_args a;
	memset(&a, 0, sizeof a);
	a.ws = w->scales;
	a.ws_f16 = w->scale_dt == SL_DT_F16;
	a.xs = xs;
	a.out = out;
	a.rows = w->rows;
	a.n = n;
	a.n_tiles = (w->cols + kW8K - 1) / kW8K;
	a.out_f32 = out_dt == SL_DT_F32;
	/* an fp32 output still needs a T for the template: the store takes of */
	if (out_dt == SL_DT_BF16)
		return w8_launch<__nv_bfloat16>(ctx, w, xq, a, splits);
	return w8_launch<__half>(ctx, w, xq, a, splits);
}
