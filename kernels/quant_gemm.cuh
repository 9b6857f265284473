/*
 * quant_gemm.cuh — what the two quantized GEMMs share: quant_gemm.cu's
 * (mma.sync, every GPU) and quant_gemm_wgmma.cu's (Hopper's wgmma, sm_90a
 * only). Their arguments, the k step (a 64-byte chunk of a W row) and
 * its group scales, and the launch with split-K. Numerics and the
 * lane-to-code map: quant_gemm.cu's header. Included by those two only.
 */
#ifndef KERN_QUANT_GEMM_CUH
#define KERN_QUANT_GEMM_CUH

#include "kernels/cuda_util.cuh"
#include "kernels/quant_dequant.cuh"

#define QM_CHUNK_BYTES 64 /* bytes of a W row per k step: 4 lanes x 16 */
#define QM_WARP_ROWS 32   /* two m16 tiles a warp */
#define QM_MIN_CHUNKS 4   /* chunks a split-K part takes at least */

/* The weight (q_layout), and this call's. */
struct qgemm_args : q_layout {
	void *out; /* [n, rows] of T or fp32; partials [splits][n][rows] fp32 */
	int n, n_chunk, chunks_per_split;
	bool out_f32;
};

/* Product v of token tok and row `row` to out (x's dtype or fp32), or,
 * with a split-K launch, to this split's fp32 partials (blockIdx.z);
 * tokens past n are not stored. */
template <typename T>
__device__ __forceinline__ void qm_put(const qgemm_args &a, int tok, int row, float v)
{
	if (tok >= a.n)
		return;
	const size_t o = (size_t)tok * a.rows + row;
	if (a.out_f32)
		reinterpret_cast<float *>(a.out)[(size_t)blockIdx.z * a.n * a.rows + o] = v;
	else
		reinterpret_cast<T *>(a.out)[o] = kern_from_f32<T>(v);
}

/* Per format: columns per lane per row per chunk (KL), per chunk (CK),
 * and 16-byte x units per lane (NU) and per token row (XU). */
template <int FMT> struct qm_geom {
	static constexpr int KL = q_geom<FMT>::KL, CK = 4 * KL, NU = KL / 8, XU = CK / 8;
};

/* A chunk's group scale bits (QG_CHUNK, QG_HALF) and int4 zero points or
 * (d, m) pairs (QG_AFFINE) for the lane's rows: [m tile][row g, g + 8],
 * MT m16 tiles a warp (the mma.sync GEMM 2, the wgmma one 1). Fetched
 * for the mma.sync GEMM's groups, only [0][0] holds anything (the lane's
 * share) until qm_spread_meta fills the rest. */
template <int FMT, int GM, int MT = 2> struct qm_meta {
	static constexpr int NH = GM == QG_HALF ? 2 : 1;
	uint32_t s[MT][2][NH];
	uint32_t z[MT][2];
};

/*
 * The mma.sync GEMM's group scales and int4 zero points (MT 2, QG_CHUNK or
 * QG_HALF): the four lanes of a quad hold the same four rows, so lane c
 * fetches only slot c's (m tile c >> 1, row g + 8 (c & 1)), one row's
 * address arithmetic and loads a lane instead of four, into s[0][0] and
 * z[0][0] (int4: both groups' zero points, 0..15, in one word); once the
 * loads have landed, a chunk later, qm_spread_meta exchanges them across
 * the quad. Exchanging them at once made each chunk wait for its loads:
 * the int4 layer at 64 tokens fell from 0.83x fp16's to 0.76x (lab-qgemv
 * table 7, H200; bench/results/2026-11-30-nvidia-h200-qgemm-meta/). Values as qm_fetch_meta's below: group 0's past the
 * row or the split's end; int4 groups of 64 (QG_HALF) give lanes c = 0,
 * 1 the chunk's first group's zero point and 2, 3 the second's.
 */
template <int GM, int MT> constexpr bool qm_meta_quad()
{
	return MT == 2 && (GM == QG_CHUNK || GM == QG_HALF);
}

template <int FMT, int GM>
__device__ __forceinline__ void qm_fetch_meta_quad(const qgemm_args &a, qm_meta<FMT, GM, 2> &m,
						   int cu, int ch_end, const int (&rr)[2][2], int c,
						   unsigned lg)
{
	constexpr int NH = qm_meta<FMT, GM, 2>::NH;
	const bool in = cu < ch_end;
	const int grp0 = GM == QG_HALF ? 2 * cu : (int)((unsigned)cu >> lg);
	const int mine = c == 0 ? rr[0][0] : c == 1 ? rr[0][1] : c == 2 ? rr[1][0] : rr[1][1];
	const size_t base = (size_t)mine * a.groups;
	uint32_t z = 0;
#pragma unroll
	for (int h = 0; h < NH; h++) {
		const int gr = in && grp0 + h < a.groups ? grp0 + h : 0;
		m.s[0][0][h] = q_scale_bits(a.scales, base + gr, a.scale_f16);
		if constexpr (FMT == KERN_Q_INT4)
			z |= (a.zeros ? (uint32_t)__ldg(a.zeros + base + gr) : 8u) << (16 * h);
	}
	m.z[0][0] = z;
}

/* A fetched chunk's meta made ready for its MMAs (qm_fetch_meta_quad's
 * exchange; nothing for the other kinds). All 32 lanes call it. */
template <int FMT, int GM, int MT>
__device__ __forceinline__ void qm_spread_meta(qm_meta<FMT, GM, MT> &m, int c)
{
	if constexpr (qm_meta_quad<GM, MT>()) {
		constexpr int NH = qm_meta<FMT, GM, MT>::NH;
		uint32_t s[NH];
#pragma unroll
		for (int h = 0; h < NH; h++)
			s[h] = m.s[0][0][h];
		const uint32_t z = m.z[0][0];
		const int quad = threadIdx.x & 28;
#pragma unroll
		for (int slot = 0; slot < 4; slot++) {
			const int mt = slot >> 1, h2 = slot & 1;
#pragma unroll
			for (int h = 0; h < NH; h++)
				m.s[mt][h2][h] = __shfl_sync(0xffffffffu, s[h], quad | slot);
			if constexpr (FMT == KERN_Q_INT4) {
				const uint32_t zs = __shfl_sync(0xffffffffu, z, quad | slot);
				m.z[mt][h2] = GM == QG_HALF && (c >> 1) ? zs >> 16 : zs & 0xFFFFu;
			} else {
				m.z[mt][h2] = 0;
			}
		}
	}
}

template <int FMT, int GM, int MT>
__device__ __forceinline__ void qm_fetch_meta(const qgemm_args &a, qm_meta<FMT, GM, MT> &m, int cu,
					      int ch_end, const int (&rr)[MT][2], int c, unsigned lg)
{
	if constexpr (qm_meta_quad<GM, MT>()) {
		qm_fetch_meta_quad<FMT, GM>(a, m, cu, ch_end, rr, c, lg);
		return;
	}
	constexpr int NH = qm_meta<FMT, GM, MT>::NH;
	const bool in = cu < ch_end;
	const int grp0 = GM == QG_HALF ? 2 * cu : GM == QG_CHUNK ? (int)((unsigned)cu >> lg) : 0;
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int h2 = 0; h2 < 2; h2++) {
			const size_t base = (size_t)rr[mt][h2] * a.groups;
			if constexpr (GM == QG_CHUNK || GM == QG_HALF) {
				/* a group past the row: group 0's (finite) scale on
				 * products that are 0 */
#pragma unroll
				for (int h = 0; h < NH; h++) {
					const int gr = in && grp0 + h < a.groups ? grp0 + h : 0;
					m.s[mt][h2][h] = q_scale_bits(a.scales, base + gr, a.scale_f16);
				}
			}
			if constexpr (GM == QG_AFFINE) {
				/* the lane's 32 codes are group 4 cu + c; past the
				 * row (0, 0): weights 0 */
				const bool ok = in && cu * QM_CHUNK_BYTES + 16 * c < a.row_bytes;
				const uint32_t *pr = reinterpret_cast<const uint32_t *>(a.scales);
				m.z[mt][h2] = ok ? __ldg(pr + base + 4 * cu + c) : 0u;
			} else if constexpr (FMT == KERN_Q_INT4) {
				int zg = grp0 + (GM == QG_HALF ? (c >> 1) : 0);
				zg = in && zg < a.groups ? zg : 0;
				m.z[mt][h2] = a.zeros ? __ldg(a.zeros + base + zg) : 8u;
			} else {
				m.z[mt][h2] = 0;
			}
		}
}

/* SL_QGEMM_SPLITS=N (kern_qgemm_init): every launch asks for N splits
 * (still at most one a QM_MIN_CHUNKS chunks and what the workspace holds),
 * for measurements; 0: the rule. */
extern int qm_forced_splits;

/* Splits of the columns when the tiles fill less than one wave (slots:
 * blocks resident at once): as many as fit in that wave, rounded down to
 * a power of two, each at least QM_MIN_CHUNKS chunks, the partials
 * fitting the workspace. Never more than a wave: the partials cost n x
 * rows x 4 bytes a split, which only idle SMs repay. The power of two:
 * once the int8 kernels fit 3 blocks an SM (2026-11-30, 156 registers),
 * the wave asked 12 splits of the 32 tiles of a 4096-row projection,
 * and lab-qgemv table 10 on an H200 timed 12 at 17.4 us against 15.2 for
 * 8 (int8 o, 64 tokens; down 31.3 against 27.7; 6 against 4 at 128
 * tokens 23.4 against 20.8), while 2 and 4 stayed the best where the
 * wave gave them (bench/results/2026-11-30-nvidia-h200-qgemm-loader/). */
static int qm_splits(const kern_qgemm_ctx *ctx, const qgemm_args &a, int blocks, int slots)
{
	if (qm_forced_splits <= 0 && blocks >= slots)
		return 1;
	int splits = qm_forced_splits;
	if (splits <= 0)
		for (splits = 1; 2 * splits <= slots / blocks;)
			splits *= 2;
	const int most = a.n_chunk / QM_MIN_CHUNKS;
	const size_t fit = ctx->workspace_bytes / (sizeof(float) * (size_t)a.n * a.rows);
	if (splits > most)
		splits = most;
	if ((size_t)splits > fit)
		splits = (int)fit;
	return splits < 1 ? 1 : splits;
}

/*
 * One GEMM launch of `kernel` (blocks of bm rows x bn tokens, `threads`
 * threads, `smem` bytes; per_sm of them resident on an SM, 0 unknown):
 * split-K where the tiles fill less than a wave, then the partials'
 * reduction. Both GEMMs (quant_gemm.cu, quant_gemm_wgmma.cu) launch so.
 */
template <typename T, typename K>
static int qm_launch_grid(const kern_qgemm_ctx *ctx, qgemm_args a, const T *x, K kernel, int bm,
			  int bn, int threads, int smem, int per_sm)
{
	const int tiles = (a.rows + bm - 1) / bm, ntiles = (a.n + bn - 1) / bn;
	int splits = qm_splits(ctx, a, tiles * ntiles, ctx->sm_count * (per_sm > 0 ? per_sm : 1));
	const int per = (a.n_chunk + splits - 1) / splits;
	splits = (a.n_chunk + per - 1) / per;
	a.chunks_per_split = per;
	/* token tiles fastest: the blocks that read one W tile run together,
	 * so W comes from DRAM once and from L2 for the other token tiles */
	const dim3 grid(ntiles, tiles, splits);
	if (splits == 1)
		return kern_launch_pdl_smem(ctx->pdl, "quant gemm", ctx->stream, kernel, grid,
					    dim3(threads), smem, x, a);
	qgemm_args p = a;
	p.out = ctx->workspace;
	p.out_f32 = true;
	TRY(kern_launch_pdl_smem(ctx->pdl, "quant gemm", ctx->stream, kernel, grid, dim3(threads),
				 smem, x, p));
	return q_splitk_finish<T>(a.out, a.out_f32, ctx->workspace, splits, (size_t)a.n * a.rows,
				  ctx->stream);
}

/* The wgmma GEMM (quant_gemm_wgmma.cu). kern_qgw_init: once per device;
 * *usable 1 on compute capability 9.0 with an sm_90a image of it. It
 * takes per-row scales and whole-chunk groups (QG_ROW, QG_CHUNK);
 * kern_qgw_run launches variant (KERN_QGW_FIRST..) for format FMT. */
#define KERN_QGW_FIRST KERN_QGEMM_WGMMA_FIRST
#define KERN_QGW_VARIANTS KERN_QGEMM_WGMMA_COUNT
int kern_qgw_init(int *usable);
bool kern_qgw_takes(int gm);
const char *kern_qgw_variant_name(int variant);
int kern_qgw_run(const kern_qgemm_ctx *ctx, const qgemm_args &a, const void *x, sl_dtype x_dt,
		 int format, int gm, int variant);

#endif
