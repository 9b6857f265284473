/*
 * quant_gemm.cu — the quantized linear layer's tiled GEMM (KERN_QPATH_GEMM,
 * kernels/quant.h) for batches of tens to hundreds of tokens: W int8 /
 * fp8 / int4 codes dequantized in the main loop and fed to the tensor
 * cores (W4A16 / W8A16, as Marlin does). The GEMV (quant.cu) re-reads x
 * from global memory per warp and reuses a W fragment only across the
 * tokens; DEQUANT writes and re-reads 2 bytes a weight. Here a block
 * stages a tile of W codes and of x in shared memory and reuses both.
 *
 * Numerics: the GEMV's contract. Codes become exact fp16/bf16 values in
 * registers (quant_dequant.cuh), products are exact on the tensor cores
 * with fp32 accumulation, group scales are applied to each chunk's fp32
 * partial sums (per-row scales once at the end), int4 groups of 32 make
 * d * u + m rounded once to the run dtype. Results differ from
 * kern_qmatmul_cpu only in fp32 summation order. Split-K partials are
 * reduced by kern_splitk_reduce in a fixed order: deterministic.
 *
 * Folded scales (fp16 activations, two groups a chunk: QG_HALF, int8
 * groups of 32 as GGUF's Q8_0, int4 groups of 64). There each lane
 * multiplies its dequantized codes by their group's scale in fp16 (one
 * HMUL2 a pair, each weight s x q rounded once, as DEQUANT and int4
 * groups of 32 round theirs) and the MMAs run once, straight into the
 * fp32 accumulators, instead of once per group with the other group's
 * lanes giving zeros (each lane's 16 bytes lie in one group): half the
 * tensor work. On an H200 that took int8 groups of 32 at batch 32-128
 * from 4,386-7,036 to 5,609-9,357 tokens/s (+28% to +33%,
 * bench/results/2026-11-30-nvidia-h200-qgemm-fold/). Folding whole-chunk
 * groups (QG_CHUNK), where it only saves the per-chunk scale FMAs, was
 * measured too and not kept: int4 groups of 128 -1.8% at batch 32, +2.4%
 * at 64, -4.0% at 128. fp32 group scales are rounded to fp16 first (the
 * loader stores group scales in fp16). bf16 keeps the exact contract
 * above (its 8-bit mantissa would round each weight 8x coarser).
 * kern_qblas_gemm_rounds tells a caller which calls round;
 * SL_QGEMM_FOLD=0 turns it off, for A/B runs.
 *
 * Tiling. A block owns BM = 32 WM rows of W and BN tokens; each of its
 * WM x WN warps 32 rows (two m16 tiles) x BN / WN tokens (NT n8 tiles).
 * The k step is a chunk: 64 bytes of a W row (64 int8/fp8 or 128 int4
 * columns), the GEMV's chunk, so group scales and zero points change at
 * most once (twice for int8 groups of 32 and int4 groups of 64) a step.
 * A STAGES-deep cp.async pipeline (16-byte cp.async.cg, zero-filled past
 * the ends) stages W [BM x 64 bytes] and x [BN x chunk columns] per step.
 *
 * k order: the GEMV's (quant.cu's qg_chunk). Lane (g, c) of a warp takes
 * 16 code bytes of rows g and g + 8 at byte 16c of the chunk and feeds
 * them to its column of the A fragment over KL / 8 MMA pairs; x gets the
 * same permutation (token g's columns c KL .. c KL + KL - 1), so every
 * shared load is a 16-byte vector load and no shuffle is needed. A
 * permutation of k applied to both operands leaves the sum unchanged.
 * lab/qgemm_map.py emulates this mapping on the CPU (run it after
 * changing the layout).
 * Bank conflicts: a quarter warp (8 lanes: g = 2p, 2p + 1, c = 0..3)
 * reads W rows 64 bytes apart at 16c: 8 distinct 16-byte slots of a
 * 128-byte line, none. x rows are 128 (int8) or 256 (int4) bytes, so the
 * same lanes would collide; unit u (16 bytes) of token t is stored at
 * u ^ (t & 1) ^ ((u >> 2) & 2) (q_swz), which spreads them over all 8.
 *
 * Why these choices: a warp's two m16 tiles reuse each x fragment twice
 * and each dequantized W fragment NT times; the dequantization (about one
 * instruction per 2 int4 codes) is done once per warp row pair per chunk
 * (WN warps along the tokens repeat it: WN = 1 for small n). Group scales
 * need the chunk's partial sums apart, so tokens are the outer loop of a
 * chunk (one temporary per m tile) and the chunk's W fragments stay in
 * registers (int4: 64 a lane). Two groups per chunk run each MMA once per
 * group with the other group's lanes giving zeros, as the GEMV: double
 * the tensor work for int8 groups of 32 and int4 groups of 64 (a
 * different lane-to-byte map would avoid it; not done). Scale and zero
 * bits for the next chunk are fetched while this one computes.
 * Block shapes (kern_qgemm_variant_name) are template arguments chosen by
 * n; lab/qgemv.cu times each by number. Where the tiles alone leave SMs
 * idle (tensor-parallel shards, few rows), the columns split across
 * blocks into the workspace (split-K), at least 4 chunks a split.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_util.cuh"
#include "kernels/mma.cuh"
#include "kernels/quant_gemm.cuh"

/* Where 16-byte unit u of token row t of an x stage lives (header). */
__device__ __forceinline__ int q_swz(int u, int t) { return u ^ (t & 1) ^ ((u >> 2) & 2); }

/* Block shape: WM x WN warps, BN tokens, STAGES buffers; MINB blocks an
 * SM the registers are sized for (__launch_bounds__). */
template <int BN_, int WM_, int WN_, int STAGES_, int MINB_ = 1> struct qm_shape {
	static constexpr int BN = BN_, WM = WM_, WN = WN_, STAGES = STAGES_, MINB = MINB_;
	static constexpr int BM = WM * QM_WARP_ROWS, NT = BN / (8 * WN), THREADS = 32 * WM * WN;
	static_assert(BN % (8 * WN) == 0, "whole n8 tiles a warp");
};

template <int FMT, typename S> constexpr int qm_stage_bytes()
{
	return S::BM * QM_CHUNK_BYTES + S::BN * qm_geom<FMT>::CK * 2;
}

/*
 * A thread's share of each stage's copies, worked out once per block:
 * round k of W is row r0 + k RW at byte 16 u of the chunk, round k of x
 * token t0 + k RX at unit u (the same unit every round, so the same
 * swizzle: RX is even). Per chunk only the column offset moves; the
 * rows and tokens in range are a count of rounds, the columns one
 * compare. The copy loop had recomputed every index, bound and 64-bit
 * address per round and chunk: about 200 of the int4 main loop's 745
 * instructions (now 594; int8's 313 -> 239).
 */
template <typename T, int FMT, typename S> struct qm_loader {
	using G = qm_geom<FMT>;
	static constexpr int NW = S::BM * 4 / S::THREADS, RW = S::THREADS / 4;
	static constexpr int NX = S::BN * G::XU / S::THREADS, RX = S::THREADS / G::XU;
	static_assert(S::BM * 4 % S::THREADS == 0, "whole W rounds");
	static_assert(S::BN * G::XU % S::THREADS == 0, "whole x rounds");
	static_assert(S::THREADS % G::XU == 0 && RX % 2 == 0, "x rounds keep the unit and swizzle");
	const uint8_t *w;   /* round 0's row, byte 16 u (chunk 0) */
	const T *x;         /* round 0's token, column 8 u (chunk 0) */
	int w_round;        /* bytes from one W round to the next (< 2^31: RW rows) */
	int x_round;        /* elements from one x round to the next */
	int w_rows, x_toks; /* rounds k < these: the row / token is in range */
	int w_byte, x_col;  /* the thread's offset in a chunk */
	int sw_off, sx_off; /* round 0's place in a stage (bytes, elements) */

	__device__ __forceinline__ qm_loader(const qgemm_args &a, const T *xp, int row0, int tok0)
	{
		const int r0 = threadIdx.x >> 2, wu = threadIdx.x & 3;
		const int t0 = threadIdx.x / G::XU, xu = threadIdx.x % G::XU;
		w_byte = 16 * wu;
		x_col = 8 * xu;
		w_round = RW * a.row_bytes;
		x_round = RX * a.cols;
		/* the rounds k with row0 + r0 + k RW < rows (tokens alike) */
		w_rows = max(0, a.rows - row0 - r0 + RW - 1) / RW;
		x_toks = max(0, a.n - tok0 - t0 + RX - 1) / RX;
		w = a.w + (size_t)(row0 + r0) * a.row_bytes + w_byte;
		x = xp + (size_t)(tok0 + t0) * a.cols + x_col;
		sw_off = r0 * QM_CHUNK_BYTES + w_byte;
		sx_off = t0 * G::CK + 8 * q_swz(xu, t0);
	}

	/* Chunk cu of W (W_PART) and x (X_PART) into stage buffers sw, sx;
	 * zeros past the ends: a copy masked off reads no byte (src-size 0),
	 * so its address, past the end or not, is never dereferenced. */
	template <bool W_PART, bool X_PART>
	__device__ __forceinline__ void load(const qgemm_args &a, const T *xp, uint8_t *sw, T *sx,
					     int cu) const
	{
		if constexpr (W_PART) {
			const bool col = cu * QM_CHUNK_BYTES + w_byte < a.row_bytes;
			const uint8_t *src = w + (size_t)cu * QM_CHUNK_BYTES;
#pragma unroll
			for (int k = 0; k < NW; k++, src += w_round)
				cp_async16(sw + sw_off + k * RW * QM_CHUNK_BYTES, src, col && k < w_rows);
		}
		if constexpr (X_PART) {
			const bool col = cu * G::CK + x_col < a.cols;
			const T *src = x + (size_t)cu * G::CK;
#pragma unroll
			for (int k = 0; k < NX; k++, src += x_round)
				cp_async16(sx + sx_off + k * RX * G::CK, src, col && k < x_toks);
		}
	}
};

/* Whether a kernel folds its group scales into the weights (fp16 runs
 * with two groups a chunk: QG_HALF), the header's "Folded scales". */
template <typename T, int GM> constexpr bool qm_can_fold()
{
	return std::is_same<T, __half>::value && GM == QG_HALF;
}

/* The lane's NP dequantized pairs of one row times its group's scale
 * (bits b as stored: fp16, or fp32 rounded to fp16 first), each product
 * rounded once to fp16. */
template <int NP> __device__ __forceinline__ void qm_fold(uint32_t *f, uint32_t b, bool f16)
{
	const __half s = f16 ? __ushort_as_half((unsigned short)b) : __float2half_rn(__uint_as_float(b));
	const __half2 s2 = __half2half2(s);
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const __half2 r = __hmul2(*reinterpret_cast<const __half2 *>(&f[i]), s2);
		f[i] = *reinterpret_cast<const uint32_t *>(&r);
	}
}

/* One stage: the lane's W codes dequantized (rows g, g + 8 of both m
 * tiles), then per n tile the MMAs over the chunk's k, scaled into acc
 * (QG_CHUNK, QG_HALF) or accumulated there directly (QG_ROW, QG_AFFINE,
 * and FOLD: the scales already in the weights). */
template <typename T, int FMT, int GM, typename S, bool FOLD>
__device__ __forceinline__ void qm_compute(const uint8_t *sw, const T *sx,
					   const qm_meta<FMT, GM> &m, bool f16, int wrow, int wtok,
					   int g, int c, float (&acc)[2][S::NT][4])
{
	using G = qm_geom<FMT>;
	constexpr int NP = G::KL / 2; /* packed pairs a lane a row */
	constexpr int NH = qm_meta<FMT, GM>::NH;
	/* how the MMAs meet the accumulators */
	constexpr int GMM = FOLD ? QG_ROW : GM;
	constexpr bool SCALED = GMM == QG_CHUNK || GMM == QG_HALF;
	uint32_t f[2][2][NP];
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int h2 = 0; h2 < 2; h2++) {
			const int r = wrow + 16 * mt + 8 * h2 + g;
			const uint4 raw = *reinterpret_cast<const uint4 *>(sw + r * QM_CHUNK_BYTES + 16 * c);
			if constexpr (GM == QG_AFFINE)
				q_dequant_affine<T>(raw, f[mt][h2], m.z[mt][h2]);
			else if constexpr (FMT == KERN_Q_INT4)
				q_dequant16<T, FMT>(raw, f[mt][h2], q_zsub<T>(m.z[mt][h2]));
			else
				q_dequant16<T, FMT>(raw, f[mt][h2], 0);
			/* QG_HALF: lanes c = 0, 1 hold the chunk's first group */
			if constexpr (FOLD) {
				const uint32_t *s = m.s[mt][h2];
				qm_fold<NP>(f[mt][h2], NH == 2 && (c >> 1) ? s[NH - 1] : s[0], f16);
			}
		}
	float sc[2][2][NH];
	if constexpr (SCALED)
#pragma unroll
		for (int mt = 0; mt < 2; mt++)
#pragma unroll
			for (int h2 = 0; h2 < 2; h2++)
#pragma unroll
				for (int h = 0; h < NH; h++)
					sc[mt][h2][h] = q_scale_of(m.s[mt][h2][h], f16);
#pragma unroll
	for (int nt = 0; nt < S::NT; nt++) {
		const int t = wtok + 8 * nt + g;
		const T *xr = sx + t * G::CK;
		float tmp[2][NH][4]; /* the chunk's partial sums (SCALED) */
#pragma unroll
		for (int mt = 0; mt < 2; mt++)
#pragma unroll
			for (int h = 0; h < NH; h++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					tmp[mt][h][e] = 0;
#pragma unroll
		for (int j = 0; j < G::NU; j++) {
			/* x unit j of the lane: its pairs 4j .. 4j + 3, MMA steps 2j, 2j + 1 */
			const uint4 xv = *reinterpret_cast<const uint4 *>(xr + 8 * q_swz(c * G::NU + j, t));
			const uint32_t xb[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
			for (int s2 = 0; s2 < 2; s2++) {
				const int i = 2 * j + s2;
#pragma unroll
				for (int mt = 0; mt < 2; mt++) {
					const uint32_t af[4] = {f[mt][0][2 * i], f[mt][1][2 * i],
								f[mt][0][2 * i + 1], f[mt][1][2 * i + 1]};
					q_mma_step<T, GMM>(acc[mt][nt], tmp[mt], af, xb[2 * s2],
							   xb[2 * s2 + 1], c);
				}
			}
		}
		if constexpr (SCALED)
#pragma unroll
			for (int h = 0; h < NH; h++)
#pragma unroll
				for (int mt = 0; mt < 2; mt++) {
					/* accumulator e: row g (e < 2) or g + 8 */
					acc[mt][nt][0] += sc[mt][0][h] * tmp[mt][h][0];
					acc[mt][nt][1] += sc[mt][0][h] * tmp[mt][h][1];
					acc[mt][nt][2] += sc[mt][1][h] * tmp[mt][h][2];
					acc[mt][nt][3] += sc[mt][1][h] * tmp[mt][h][3];
				}
	}
}

/* The lane's accumulators to out (or the split's partials): per-row
 * scales first (QG_ROW); rows and tokens past the ends are not stored. */
template <typename T, int GM, typename S>
__device__ __forceinline__ void qm_store(const qgemm_args &a, float (&acc)[2][S::NT][4],
					 int row_w, int tok_w, int g, int c)
{
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int h2 = 0; h2 < 2; h2++) {
			const int row = row_w + 16 * mt + 8 * h2 + g;
			if (row >= a.rows)
				continue;
			const float s = GM == QG_ROW ? q_scale(a.scales, row, a.scale_f16) : 1.0f;
#pragma unroll
			for (int nt = 0; nt < S::NT; nt++)
#pragma unroll
				for (int e = 0; e < 2; e++)
					qm_put<T>(a, tok_w + 8 * nt + 2 * c + e, row,
						  s * acc[mt][nt][2 * h2 + e]);
		}
}

/*
 * One block: rows [BM blockIdx.y, +BM), tokens [BN blockIdx.x, +BN),
 * chunks [chunks_per_split blockIdx.z, +chunks_per_split). The pipeline:
 * STAGES - 1 chunks in flight while one computes; the barrier after each
 * wait both publishes the landed stage and retires the stage the next
 * load overwrites (computed in the previous iteration).
 */
template <typename T, int FMT, int GM, typename S, bool FOLD>
__global__ void __launch_bounds__(S::THREADS, S::MINB) qgemm_kernel(const T *x, qgemm_args a)
{
	using G = qm_geom<FMT>;
	extern __shared__ uint4 q_smem[];
	uint8_t *sw = reinterpret_cast<uint8_t *>(q_smem);
	T *sx = reinterpret_cast<T *>(sw + S::STAGES * S::BM * QM_CHUNK_BYTES);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int g = lane >> 2, c = lane & 3;
	const int wrow = (warp % S::WM) * QM_WARP_ROWS, wtok = (warp / S::WM) * (S::BN / S::WN);
	const int row0 = blockIdx.y * S::BM, tok0 = blockIdx.x * S::BN;
	const int ch_begin = blockIdx.z * a.chunks_per_split;
	const int ch_end = min(a.n_chunk, ch_begin + a.chunks_per_split);
	const int nk = ch_end - ch_begin;
	/* QG_CHUNK: chunk cu lies in group cu >> lg (a group is 1 or 2 chunks) */
	const unsigned lg = GM == QG_CHUNK ? __ffs(a.group / G::CK) - 1 : 0;
	int rr[2][2]; /* the lane's rows, clamped: rows past the end read row 0 */
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int h2 = 0; h2 < 2; h2++) {
			const int row = row0 + wrow + 16 * mt + 8 * h2 + g;
			rr[mt][h2] = row < a.rows ? row : 0;
		}
	auto stage_w = [&](int s) { return sw + s * S::BM * QM_CHUNK_BYTES; };
	auto stage_x = [&](int s) { return sx + s * S::BN * G::CK; };

	const qm_loader<T, FMT, S> ld(a, x, row0, tok0);
	/* W is constant: its first stages go before waiting for x's writer */
#pragma unroll
	for (int s = 0; s < S::STAGES - 1; s++)
		if (s < nk)
			ld.template load<true, false>(a, x, stage_w(s), stage_x(s), ch_begin + s);
	qm_meta<FMT, GM> meta, next;
	qm_fetch_meta<FMT, GM>(a, next, ch_begin, ch_end, rr, c, lg);
	kern_pdl_wait();
#pragma unroll
	for (int s = 0; s < S::STAGES - 1; s++) {
		if (s < nk)
			ld.template load<false, true>(a, x, stage_w(s), stage_x(s), ch_begin + s);
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
		const int nx = k + S::STAGES - 1;
		if (nx < nk)
			ld.template load<true, true>(a, x, stage_w(nx % S::STAGES), stage_x(nx % S::STAGES),
						     ch_begin + nx);
		cp_async_commit();
		meta = next;
		qm_spread_meta<FMT, GM, 2>(meta, c);
		if (k + 1 < nk)
			qm_fetch_meta<FMT, GM>(a, next, ch_begin + k + 1, ch_end, rr, c, lg);
		const int s = k % S::STAGES;
		qm_compute<T, FMT, GM, S, FOLD>(stage_w(s), stage_x(s), meta, a.scale_f16, wrow, wtok,
						g, c, acc);
	}
	cp_async_wait<0>();
	kern_pdl_launch_next();
	qm_store<T, GM, S>(a, acc, row0 + wrow, tok0 + wtok, g, c);
}

/* ---- launch ---- */

/* The block shapes by variant number (lab/qgemv.cu names them; "bN":
 * registers sized for N blocks an SM): 1: 32 tokens, 4 x 1 warps;
 * 2, 3: 64 tokens, 4 x 1 warps, 3 stages, b3 / b4; 4: 64 tokens, 4 x 1
 * warps (NT 8); 5: 64 tokens, 2 x 2 warps (BM 64: twice the row tiles);
 * 6, 7: 5 at b3, and with 3 stages at b4; 8: 4 with 6 stages; 9: 1 at
 * b4; 10: 128 tokens, 4 x 2 warps, 3 stages, b2. qm_auto says which AUTO
 * takes and why. The b4 shapes still run at most QM_MAX_RESIDENT blocks
 * an SM (3). */
typedef qm_shape<32, 4, 1, 4> qm_v1;
typedef qm_shape<64, 4, 1, 3, 3> qm_v2;
typedef qm_shape<64, 4, 1, 3, 4> qm_v3;
typedef qm_shape<64, 4, 1, 4> qm_v4;
typedef qm_shape<64, 2, 2, 4> qm_v5;
typedef qm_shape<64, 2, 2, 4, 3> qm_v6;
typedef qm_shape<64, 2, 2, 3, 4> qm_v7;
typedef qm_shape<64, 4, 1, 6> qm_v8;
typedef qm_shape<32, 4, 1, 4, 4> qm_v9;
typedef qm_shape<128, 4, 2, 3, 2> qm_v10;

const char *kern_qgemm_variant_name(int variant)
{
	static const char *const names[KERN_QGW_FIRST] = {
		"auto",           "32t 4x1w 4st",   "64t 4x1w 3st b3", "64t 4x1w 3st b4",
		"64t 4x1w 4st",   "64t 2x2w 4st",   "64t 2x2w 4st b3", "64t 2x2w 3st b4",
		"64t 4x1w 6st",   "32t 4x1w 4st b4", "128t 4x2w 3st b2"};
	if (variant >= KERN_QGW_FIRST)
		return kern_qgw_variant_name(variant);
	return variant >= 0 ? names[variant] : "?";
}

/* Blocks of one instantiation resident on an SM, as kern_qgemm_init found
 * (0 before it). */
template <typename T, int FMT, int GM, typename S, bool FOLD> struct qm_resident {
	static int per_sm, smem;
};
template <typename T, int FMT, int GM, typename S, bool FOLD>
int qm_resident<T, FMT, GM, S, FOLD>::per_sm;
template <typename T, int FMT, int GM, typename S, bool FOLD>
int qm_resident<T, FMT, GM, S, FOLD>::smem;

/*
 * At most QM_MAX_RESIDENT blocks of a GEMM on an SM: every kernel asks
 * for at least qm_floor_smem bytes of shared memory (kern_qgemm_init),
 * too many for one more. With fewer registers (the loader above) the
 * int8 kernels fit 4 blocks an SM where they had fit 3, and though each
 * launch alone ran faster, the 7B decode step ran slower: int8 batch 64
 * 9,170 -> 8,517 tokens/s. Held to 3 (the same binary, smem padded): 8,414
 * -> 9,139, batch 32 +5.6%, int4 (2 an SM by registers) unchanged
 * (bench/results/2026-11-30-nvidia-h200-qgemm-loader/, call 4).
 */
#define QM_MAX_RESIDENT 3
static int qm_floor_smem;

template <typename T, int FMT, int GM, typename S, bool FOLD> static int qm_init_fold()
{
	const int smem = max(S::STAGES * qm_stage_bytes<FMT, S>(), qm_floor_smem);
	qm_resident<T, FMT, GM, S, FOLD>::smem = smem;
	auto kernel = qgemm_kernel<T, FMT, GM, S, FOLD>;
	CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
	CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
		&qm_resident<T, FMT, GM, S, FOLD>::per_sm, kernel, S::THREADS, smem));
	return SL_OK;
}

template <typename T, int FMT, int GM, typename S> static int qm_init_one()
{
	if constexpr (qm_can_fold<T, GM>())
		TRY((qm_init_fold<T, FMT, GM, S, true>()));
	return qm_init_fold<T, FMT, GM, S, false>();
}

template <typename T, int FMT, int GM>
static int qm_init_shapes()
{
	TRY((qm_init_one<T, FMT, GM, qm_v1>()));
	TRY((qm_init_one<T, FMT, GM, qm_v2>()));
	TRY((qm_init_one<T, FMT, GM, qm_v3>()));
	TRY((qm_init_one<T, FMT, GM, qm_v4>()));
	TRY((qm_init_one<T, FMT, GM, qm_v5>()));
	TRY((qm_init_one<T, FMT, GM, qm_v6>()));
	TRY((qm_init_one<T, FMT, GM, qm_v7>()));
	TRY((qm_init_one<T, FMT, GM, qm_v8>()));
	TRY((qm_init_one<T, FMT, GM, qm_v9>()));
	return qm_init_one<T, FMT, GM, qm_v10>();
}

template <typename T> static int qm_init_dt()
{
	TRY((qm_init_shapes<T, KERN_Q_INT8, QG_ROW>()));
	TRY((qm_init_shapes<T, KERN_Q_INT8, QG_HALF>()));
	TRY((qm_init_shapes<T, KERN_Q_INT8, QG_CHUNK>()));
	TRY((qm_init_shapes<T, KERN_Q_FP8, QG_ROW>()));
	TRY((qm_init_shapes<T, KERN_Q_INT4, QG_AFFINE>()));
	TRY((qm_init_shapes<T, KERN_Q_INT4, QG_HALF>()));
	return qm_init_shapes<T, KERN_Q_INT4, QG_CHUNK>();
}

/* Whether the wgmma GEMM can run here (kern_qgw_init), and whether AUTO
 * takes it (SL_QGEMM_WGMMA=0 in the environment: never, for A/B runs). */
static int qm_wgmma_usable, qm_wgmma_auto;
int qm_forced_splits;
/* SL_QGEMM_VARIANT=N: every call not given a block shape takes shape N
 * instead of qm_auto's (0: qm_auto), for A/B runs of one binary. */
static int qm_env_variant;
/* Folded scales where a kernel can (SL_QGEMM_FOLD=0: never, for A/B runs). */
static int qm_fold_on;

/* Once per device, before any launch (not capturable: kern_qblas_create
 * calls it): the shared memory every kernel asks for, and how many of its
 * blocks an SM holds (the split-K choice). */
int kern_qgemm_init(void)
{
	int dev = 0, sm_smem = 0, reserved = 0;
	CUDA_TRY(cudaGetDevice(&dev));
	CUDA_TRY(cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
	CUDA_TRY(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
	/* QM_MAX_RESIDENT + 1 blocks of (this + reserved) bytes do not fit */
	qm_floor_smem = sm_smem / (QM_MAX_RESIDENT + 1) - reserved + 1;
	TRY(qm_init_dt<__half>());
	TRY(qm_init_dt<__nv_bfloat16>());
	TRY(kern_qgw_init(&qm_wgmma_usable));
	const char *e = getenv("SL_QGEMM_WGMMA");
	qm_wgmma_auto = qm_wgmma_usable && !(e && strcmp(e, "0") == 0);
	const char *sp = getenv("SL_QGEMM_SPLITS"), *fo = getenv("SL_QGEMM_FOLD");
	qm_forced_splits = sp ? atoi(sp) : 0;
	const char *v = getenv("SL_QGEMM_VARIANT");
	qm_env_variant = v && atoi(v) > 0 && atoi(v) <= KERN_QGEMM_VARIANTS ? atoi(v) : 0;
	qm_fold_on = !(fo && strcmp(fo, "0") == 0);
	return SL_OK;
}

template <typename T, int FMT, int GM, typename S>
static int qm_launch(const kern_qgemm_ctx *ctx, qgemm_args a, const T *x)
{
	if constexpr (qm_can_fold<T, GM>())
		if (qm_fold_on)
			return qm_launch_grid<T>(ctx, a, x, qgemm_kernel<T, FMT, GM, S, true>, S::BM,
						 S::BN, S::THREADS, qm_resident<T, FMT, GM, S, true>::smem,
						 qm_resident<T, FMT, GM, S, true>::per_sm);
	return qm_launch_grid<T>(ctx, a, x, qgemm_kernel<T, FMT, GM, S, false>, S::BM, S::BN,
				 S::THREADS, qm_resident<T, FMT, GM, S, false>::smem,
				 qm_resident<T, FMT, GM, S, false>::per_sm);
}

/*
 * AUTO's block shape, from lab-qgemv table 8 on an H200 (7B rows, cold W,
 * bench/results/2026-11-29-nvidia-h200-qgemm/): up to 32 tokens 1 (the
 * others within 5% or slower); int4 above that 4, fastest on every
 * shape from 64 tokens (qkv at 64: 37.4 us against 38.9-114.5). int8
 * and fp8 above 32 tokens: the narrow rows (o and down, under 8192
 * rows) 4 too; the wide ones (qkv, gate_up) 5 up to 64 tokens with
 * per-row scales (gate_up 52.6 us against 53.5 for 2 and 53.5 for 4),
 * else 2, whose registers for 3 blocks an SM hide the dequantization
 * (int8 gate_up at 128 tokens 83.0 us against 103.1 for 4; at 64 with
 * groups of 128, 61.8 against 67.5). Above 224 tokens, on an sm_90a
 * image, the wgmma GEMM's 128-token tiles for the formats it takes
 * (quant_gemm_wgmma.cu): at 256 the four int8 projections took 323 us
 * against 346 for the rule above, int4 383 against 394; at 192 (a
 * second tile half empty) it lost (int8 gate_up 140 against 105), at
 * 128 and below it lost or tied (2026-11-29-nvidia-h200-qgemm-wgmma/).
 * This rule is what a call takes where the start-up tuning kept nothing
 * (quant_tune.cu, kern_qgemm_run).
 */
template <int FMT, int GM> static int qm_auto(const qgemm_args &a)
{
	if (a.n > 224 && qm_wgmma_auto && kern_qgw_takes(GM))
		return KERN_QGW_FIRST + 1;
	if (a.n <= 32)
		return 1;
	if (FMT == KERN_Q_INT4 || a.rows < 8192)
		return 4;
	return a.n <= 64 && GM == QG_ROW ? 5 : 2;
}

/* The block shape: the variant asked for, or qm_auto's (0). */
template <typename T, int FMT, int GM>
static int qm_shapes(const kern_qgemm_ctx *ctx, const qgemm_args &a, const T *x, int variant)
{
	if (variant == 0)
		variant = qm_env_variant ? qm_env_variant : qm_auto<FMT, GM>(a);
	switch (variant) {
	case 1: return qm_launch<T, FMT, GM, qm_v1>(ctx, a, x);
	case 2: return qm_launch<T, FMT, GM, qm_v2>(ctx, a, x);
	case 3: return qm_launch<T, FMT, GM, qm_v3>(ctx, a, x);
	case 4: return qm_launch<T, FMT, GM, qm_v4>(ctx, a, x);
	case 5: return qm_launch<T, FMT, GM, qm_v5>(ctx, a, x);
	case 6: return qm_launch<T, FMT, GM, qm_v6>(ctx, a, x);
	case 7: return qm_launch<T, FMT, GM, qm_v7>(ctx, a, x);
	case 8: return qm_launch<T, FMT, GM, qm_v8>(ctx, a, x);
	case 9: return qm_launch<T, FMT, GM, qm_v9>(ctx, a, x);
	case 10: return qm_launch<T, FMT, GM, qm_v10>(ctx, a, x);
	}
	if (variant >= KERN_QGW_FIRST && qm_wgmma_usable && kern_qgw_takes(GM))
		return kern_qgw_run(ctx, a, x,
				    std::is_same<T, __half>::value ? SL_DT_F16 : SL_DT_BF16, FMT, GM,
				    variant);
	return SL_ENOTSUP;
}

template <typename T>
static int qm_dispatch(const kern_qgemm_ctx *ctx, const qgemm_args &a, const void *x, int format,
		       int variant)
{
	const T *xt = (const T *)x;
	switch (format) {
	case KERN_Q_INT8:
		if (a.group == 0)
			return qm_shapes<T, KERN_Q_INT8, QG_ROW>(ctx, a, xt, variant);
		if (a.group == 32)
			return qm_shapes<T, KERN_Q_INT8, QG_HALF>(ctx, a, xt, variant);
		return qm_shapes<T, KERN_Q_INT8, QG_CHUNK>(ctx, a, xt, variant);
	case KERN_Q_FP8:
		return qm_shapes<T, KERN_Q_FP8, QG_ROW>(ctx, a, xt, variant);
	case KERN_Q_INT4:
		if (a.group == KERN_Q_INT4_GROUP_AFFINE)
			return qm_shapes<T, KERN_Q_INT4, QG_AFFINE>(ctx, a, xt, variant);
		if (a.group == KERN_Q_INT4_GROUP_SMALL)
			return qm_shapes<T, KERN_Q_INT4, QG_HALF>(ctx, a, xt, variant);
		return qm_shapes<T, KERN_Q_INT4, QG_CHUNK>(ctx, a, xt, variant);
	}
	return SL_ENOTSUP;
}

bool kern_qgemm_takes(const kern_qweight *w)
{
	switch (w->format) {
	case KERN_Q_INT8:
		return w->group == 0 || w->group == 32 || w->group == 64 || w->group == 128;
	case KERN_Q_FP8:
		return w->group == 0;
	case KERN_Q_INT4:
		return w->group == KERN_Q_INT4_GROUP || w->group == KERN_Q_INT4_GROUP_SMALL ||
		       w->group == KERN_Q_INT4_GROUP_AFFINE;
	}
	return false;
}

/* The scale mode a weight's GEMM runs (qm_dispatch's choice). */
static int qm_gm_of(const kern_qweight *w)
{
	if (w->format == KERN_Q_INT4)
		return w->group == KERN_Q_INT4_GROUP_AFFINE  ? QG_AFFINE
		       : w->group == KERN_Q_INT4_GROUP_SMALL ? QG_HALF
							     : QG_CHUNK;
	return w->group == 0 ? QG_ROW : w->group == 32 ? QG_HALF : QG_CHUNK;
}

bool kern_qgemm_wgmma_takes(const kern_qweight *w)
{
	return qm_wgmma_usable && kern_qgemm_takes(w) && kern_qgw_takes(qm_gm_of(w));
}

bool kern_qgemm_rounds(const kern_qweight *w, sl_dtype x_dt)
{
	if (!kern_qgemm_takes(w))
		return false;
	const int gm = qm_gm_of(w);
	if (gm == QG_AFFINE)
		return true;
	/* the wgmma kernel does not take QG_HALF: every block shape folds */
	return x_dt == SL_DT_F16 && gm == QG_HALF && qm_fold_on;
}

int kern_qgemm_run(const kern_qgemm_ctx *ctx, const kern_qweight *w, void *out, bool out_f32,
		    const void *x, sl_dtype x_dt, int n, int variant)
{
	if (!kern_qgemm_takes(w) || variant < 0 || variant > KERN_QGEMM_VARIANTS)
		return SL_ENOTSUP;
	if (variant == 0 && !qm_env_variant)
		variant = kern_qgemm_tuned_variant(ctx->tuned, w, x_dt, n);
	qgemm_args a;
	memset(&a, 0, sizeof a);
	static_cast<q_layout &>(a) = q_layout_of(w);
	a.out = out;
	a.n = n;
	a.n_chunk = (a.row_bytes + QM_CHUNK_BYTES - 1) / QM_CHUNK_BYTES;
	a.out_f32 = out_f32;
	KERN_DISPATCH_DT(x_dt, qm_dispatch, ctx, a, x, w->format, variant);
}
