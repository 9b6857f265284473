/*
 * attention_prefill.cu — prefill attention (sequences with q_len > 1),
 * FlashAttention-2 style. A block takes 64 query rows of one head (128
 * over an fp8 cache); each of its warps owns 16 rows and keeps them in
 * registers, and skips the tiles its rows do not see. K/V tiles of 64
 * cache positions are staged through shared memory with cp.async (double
 * buffered, gathered from the paged cache row by row, so chunked prefill
 * over earlier context works; each thread reads its rows' block-table
 * entries before issuing any copy); S = Q K^T and O += P V run on tensor cores
 * (mma.sync m16n8k16, fp16 or bf16 in, fp32 accumulate: mma.cuh); the
 * online softmax stays in registers, each exponent one FMA and one ex2 on
 * the special-function unit. Q passes through shared memory only until it
 * is in registers, in the space tile 1 then takes, so three blocks share
 * an SM. Blocks are ordered heads fastest, the query tiles that see the
 * most context first: the short causal tiles fill the launch's tail. An
 * fp8 cache (kv_fp8) is gathered as raw E4M3 tiles and converted by the
 * block into one E tile pair before the MMAs. Launched by
 * kern_attention_cuda (attention.cu) before the decode blocks of the same
 * batch.
 */
#include "kernels/attention_common.cuh"

namespace {

constexpr int kPreN = 64;       /* cache positions per tile */

/* A block of W warps takes 16 W query rows of one head; each warp owns 16
 * rows. An fp16/bf16 cache: 4 warps, three blocks an SM (12 warps, at
 * most 168 registers a thread; two blocks 215 us, three 206 us on an H100
 * for a 2048-token prompt, tests/gpu/test_attention.c's bench). An fp8
 * cache: 8 warps, one block an SM, so each tile the block converts serves
 * twice the rows: 191 -> 175 us there (2048 tokens, 8 KV heads), while
 * the fp16 cache's kernel took the same time with 4, 8 or 12 warps
 * (bench/results/2026-11-25-nvidia-h100-prefill-attn/). */
constexpr int pre_warps(bool fp8) { return fp8 ? 8 : 4; }
constexpr int pre_min_blocks(int w) { return w == 4 ? 3 : 1; }

/* Shared memory. fp16/bf16 cache: two stages of K/V tiles
 * ([stage][K|V][kPreN][stride]). FP8: one E tile pair the block converts
 * each tile into, then two raw stages of E4M3 tiles ([stage][K|V][kPreN][D]
 * bytes). The Q tile (M rows) is staged once, in the region tile 1 (or the
 * first conversion) overwrites only after Q is in registers; past it when
 * M is longer than that region. At 66-70 KiB for D = 128 and M = 64,
 * three blocks fit on an SM. */
template <int D, bool FP8, int M> struct pre_shape {
	/* +8 elements (16 bytes) per row: the eight rows one ldmatrix phase
	 * reads then start on distinct bank groups for every D used here. */
	static constexpr int stride = D + 8;
	static constexpr int nc = D / 8;
	static constexpr size_t tile_elems = (size_t)kPreN * stride;
	static constexpr size_t q_elems = (size_t)M * stride;
	static constexpr size_t raw_bytes = (size_t)kPreN * D;
	/* where Q waits, in elements from the start: stage 1's K, or the E pair */
	static constexpr size_t q_off = FP8 ? 0 : 2 * tile_elems;
	/* FP8: the E pair, or Q where it is longer; then the raw stages */
	static constexpr size_t e_elems = q_elems > 2 * tile_elems ? q_elems : 2 * tile_elems;
	static constexpr size_t raw_off = e_elems * 2; /* bytes */
	static constexpr size_t smem = FP8 ? raw_off + 2 * 2 * raw_bytes
					   : 2 * (q_off + (q_elems > 2 * tile_elems ? q_elems
										    : 2 * tile_elems));
};

/* grid (n_heads, ceil(max_q_len / (16 W)), n_seqs), 32 W threads. Warp w
 * owns query rows 16w .. 16w+15 of the block's; lane (g = lane/4,
 * t = lane%4) holds, per 8-column MMA tile, rows g and g+8 at columns 2t and
 * 2t+1 (the m16n8 accumulator layout). A warp skips the tiles past its
 * last row (causal), but still meets the block at each barrier. */
template <int D, typename E, bool FP8, int W>
__global__ void __launch_bounds__(32 * W, pre_min_blocks(W)) attn_prefill_kernel(attn_args a)
{
	constexpr int kPreM = 16 * W, NT = 32 * W;
	using P = pre_shape<D, FP8, kPreM>;
	pre_tile pt;
	if (!pre_tile_of(a, kPreM, pt))
		return;
	const int h = pt.h, kv_len = pt.kv_len, rows = pt.rows, kvh = pt.kvh;
	const long tok0 = pt.tok0;
	const int32_t *table = pt.table;
	const int first_pos = pt.past + pt.row0, last_pos = first_pos + rows - 1;
	const int n_tiles = last_pos / kPreN + 1;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, t4 = lane & 3;

	extern __shared__ __align__(16) unsigned char smem[];
	E *kv_s = reinterpret_cast<E *>(smem); /* [stage][K|V][kPreN][stride]; FP8: [K|V] */
	E *q_s = kv_s + P::q_off;              /* [kPreM][stride], until Q is in registers */
	uint8_t *raw_s = smem + P::raw_off;    /* FP8 [stage][K|V] */
	auto load_tile = [&](int stage, int t0) {
		if constexpr (FP8) {
			uint8_t *kr = raw_s + (size_t)stage * 2 * P::raw_bytes;
			load_kv_rows<D, kPreN, NT, D>(a, table, kvh, t0, kv_len, kr, kr + P::raw_bytes);
		} else {
			E *ks = kv_s + (size_t)stage * 2 * P::tile_elems;
			load_kv_rows<D * 2, kPreN, NT, P::stride * 2>(
				a, table, kvh, t0, kv_len, reinterpret_cast<unsigned char *>(ks),
				reinterpret_cast<unsigned char *>(ks + P::tile_elems));
		}
	};

	for (int i = tid; i < kPreM * P::nc; i += NT) {
		int r = i / P::nc, c = i - r * P::nc;
		bool ok = r < rows;
		const E *src = (const E *)a.qkv + (ok ? (tok0 + r) * a.q_stride + (long)h * D + c * 8 : 0);
		cp_async16(q_s + r * P::stride + c * 8, src, ok);
	}
	load_tile(0, 0);
	cp_async_commit();

	/* ldmatrix x4: lanes 8j..8j+7 address the rows of matrix j */
	const int lm = lane >> 3, lr = lane & 7;
	/* Q rows of this warp as MMA A fragments; matrices: (rows 0-7, k 0-7),
	 * (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3.
	 * Q's shared memory is tile 1's (or the conversion's) from here on. */
	uint32_t qf[D / 16][4];
	cp_async_wait<0>();
	__syncthreads();
#pragma unroll
	for (int kk = 0; kk < D / 16; kk++)
		kern_ldmatrix_x4(qf[kk], q_s + (warp * 16 + (lm & 1) * 8 + lr) * P::stride + kk * 16 +
						 (lm >> 1) * 8);
	__syncthreads();

	float o[D / 8][4];       /* output accumulator, fp32 */
#pragma unroll
	for (int n = 0; n < D / 8; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
	float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
	const int warp_first = first_pos + warp * 16;
	const int qpos_lo = warp_first + g, qpos_hi = qpos_lo + 8;

	for (int tile = 0; tile < n_tiles; tile++) {
		const int stage = tile & 1;
		if (tile + 1 < n_tiles) {
			load_tile(stage ^ 1, (tile + 1) * kPreN);
			cp_async_commit();
			cp_async_wait<1>();
		} else {
			cp_async_wait<0>();
		}
		__syncthreads();
		const E *ks, *vs;
		if constexpr (FP8) { /* the block converts the raw tile into the E pair */
			const uint8_t *kr = raw_s + (size_t)stage * 2 * P::raw_bytes;
			convert_kv_rows<D, E>(kr, kr + P::raw_bytes, kv_s, kv_s + P::tile_elems, 0, kPreN,
					      P::stride, tid, NT);
			__syncthreads();
			ks = kv_s;
		} else {
			ks = kv_s + (size_t)stage * 2 * P::tile_elems;
		}
		vs = ks + P::tile_elems;

		/* a warp whose rows all precede the tile sees none of it */
		const int kv0 = tile * kPreN;
		if (kv0 <= warp_first + 15) {
			/* S = Q K^T: K rows (positions) are B's columns, so plain
			 * ldmatrix on [pos][d] yields B fragments; matrices:
			 * (pos 0-7, d 0-7), (pos 0-7, d 8-15) = b0,b1 of column tile
			 * 2jp, then the same for positions 8-15 = tile 2jp+1. */
			float sc[kPreN / 8][4];
#pragma unroll
			for (int j = 0; j < kPreN / 8; j++)
				sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
#pragma unroll
			for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
				for (int jp = 0; jp < kPreN / 16; jp++) {
					uint32_t b[4];
					kern_ldmatrix_x4(b, ks + (jp * 16 + (lm >> 1) * 8 + lr) * P::stride +
								    kk * 16 + (lm & 1) * 8);
					kern_mma_m16n8k16<E>(sc[2 * jp], qf[kk], b[0], b[1]);
					kern_mma_m16n8k16<E>(sc[2 * jp + 1], qf[kk], b[2], b[3]);
				}
			}

			/* causal mask on the raw scores (only tiles reaching past the
			 * warp's first query position or the context end need it) */
			if (kv0 + kPreN - 1 > warp_first || kv0 + kPreN > kv_len) {
#pragma unroll
				for (int j = 0; j < kPreN / 8; j++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						int kp = kv0 + j * 8 + 2 * t4 + (e & 1);
						if (kp > (e < 2 ? qpos_lo : qpos_hi) || kp >= kv_len)
							sc[j][e] = -INFINITY;
					}
			}

			/* online softmax on rows g (lo) and g+8 (hi) in base 2; the four
			 * lanes of a quad share a row. The scale is positive (attention.cu),
			 * so the scaled max is the max scaled, and each exponent is one FMA.
			 * Tile 0 holds position 0, which every row sees, so the running max
			 * is finite from then on. */
			float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
			for (int j = 0; j < kPreN / 8; j++) {
				mx_lo = fmaxf(mx_lo, fmaxf(sc[j][0], sc[j][1]));
				mx_hi = fmaxf(mx_hi, fmaxf(sc[j][2], sc[j][3]));
			}
			const float sl = a.scale_log2;
			mx_lo = kern_quad_max(mx_lo) * sl;
			mx_hi = kern_quad_max(mx_hi) * sl;
			float al_lo, al_hi;
			const float nb_lo = -softmax_step<true>(m_lo, mx_lo, al_lo);
			const float nb_hi = -softmax_step<true>(m_hi, mx_hi, al_hi);
			float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
			for (int j = 0; j < kPreN / 8; j++) {
				sc[j][0] = exp2_ftz(fmaf(sc[j][0], sl, nb_lo));
				sc[j][1] = exp2_ftz(fmaf(sc[j][1], sl, nb_lo));
				sc[j][2] = exp2_ftz(fmaf(sc[j][2], sl, nb_hi));
				sc[j][3] = exp2_ftz(fmaf(sc[j][3], sl, nb_hi));
				sum_lo += sc[j][0] + sc[j][1];
				sum_hi += sc[j][2] + sc[j][3];
			}
			l_lo = l_lo * al_lo + sum_lo; /* per-lane partial; quad-reduced at the end */
			l_hi = l_hi * al_hi + sum_hi;
#pragma unroll
			for (int n = 0; n < D / 8; n++) {
				o[n][0] *= al_lo;
				o[n][1] *= al_lo;
				o[n][2] *= al_hi;
				o[n][3] *= al_hi;
			}

			/* O += P V: two accumulator tiles of P form one A fragment;
			 * V is [pos][d], so B fragments come from ldmatrix.trans;
			 * matrices: (pos 0-7, d 0-7), (pos 8-15, d 0-7) = b0,b1 of
			 * column tile 2np, then d 8-15 = tile 2np+1. */
#pragma unroll
			for (int kt = 0; kt < kPreN / 16; kt++) {
				uint32_t pa[4];
				pa[0] = kern_pack2<E>(sc[2 * kt][0], sc[2 * kt][1]);
				pa[1] = kern_pack2<E>(sc[2 * kt][2], sc[2 * kt][3]);
				pa[2] = kern_pack2<E>(sc[2 * kt + 1][0], sc[2 * kt + 1][1]);
				pa[3] = kern_pack2<E>(sc[2 * kt + 1][2], sc[2 * kt + 1][3]);
#pragma unroll
				for (int np = 0; np < D / 16; np++) {
					uint32_t b[4];
					kern_ldmatrix_x4_trans(b, vs + (kt * 16 + (lm & 1) * 8 + lr) * P::stride +
									  np * 16 + (lm >> 1) * 8);
					kern_mma_m16n8k16<E>(o[2 * np], pa, b[0], b[1]);
					kern_mma_m16n8k16<E>(o[2 * np + 1], pa, b[2], b[3]);
				}
			}
		}
		__syncthreads(); /* the next prefetch overwrites this stage */
	}

	l_lo = kern_quad_sum(l_lo);
	l_hi = kern_quad_sum(l_hi);
	const float inv_lo = 1.f / l_lo, inv_hi = 1.f / l_hi;
	const int r_lo = warp * 16 + g, r_hi = r_lo + 8;
	const long ostride = (long)a.n_heads * D;
	E *out_lo = (E *)a.out + (tok0 + r_lo) * ostride + (long)h * D + 2 * t4;
	E *out_hi = (E *)a.out + (tok0 + r_hi) * ostride + (long)h * D + 2 * t4;
#pragma unroll
	for (int n = 0; n < D / 8; n++) {
		if (r_lo < rows)
			*reinterpret_cast<uint32_t *>(out_lo + n * 8) =
				kern_pack2<E>(o[n][0] * inv_lo, o[n][1] * inv_lo);
		if (r_hi < rows)
			*reinterpret_cast<uint32_t *>(out_hi + n * 8) =
				kern_pack2<E>(o[n][2] * inv_hi, o[n][3] * inv_hi);
	}
}

template <int D, typename E, bool FP8>
int prefill_launch_as(const attn_args &a, const kern_paged_batch *b, cudaStream_t st)
{
	constexpr int W = pre_warps(FP8), M = 16 * W;
	dim3 grid(a.n_heads, (b->max_q_len + M - 1) / M, b->n_seqs);
	attn_prefill_kernel<D, E, FP8, W><<<grid, 32 * W, pre_shape<D, FP8, M>::smem, st>>>(a);
	CUDA_TRY_LAUNCH();
	return 0;
}

template <int D, typename E>
int prefill_launch(const attn_args &a, const kern_paged_batch *b, cudaStream_t st)
{
	return a.kv_fp8 ? prefill_launch_as<D, E, true>(a, b, st)
			: prefill_launch_as<D, E, false>(a, b, st);
}

template <typename E>
int prefill_dim(const attn_args &a, const kern_paged_batch *b, int head_dim, cudaStream_t st)
{
	switch (head_dim) {
#define CASE(D) case D: return prefill_launch<D, E>(a, b, st);
	KERN_ATTN_MMA_HEAD_DIMS(CASE)
#undef CASE
	}
	return SL_ENOTSUP;
}

/* Each head_dim's kernel may use more than the default 48 KiB of shared
 * memory only once opted in. */
template <int D, typename E> int set_limits_d()
{
	CUDA_TRY(cudaFuncSetAttribute(attn_prefill_kernel<D, E, false, pre_warps(false)>,
				      cudaFuncAttributeMaxDynamicSharedMemorySize,
				      (int)pre_shape<D, false, 16 * pre_warps(false)>::smem));
	CUDA_TRY(cudaFuncSetAttribute(attn_prefill_kernel<D, E, true, pre_warps(true)>,
				      cudaFuncAttributeMaxDynamicSharedMemorySize,
				      (int)pre_shape<D, true, 16 * pre_warps(true)>::smem));
	return 0;
}

template <typename E> int set_smem_limits()
{
	int rc = 0;
#define SET(D) if (!rc) rc = set_limits_d<D, E>();
	KERN_ATTN_MMA_HEAD_DIMS(SET)
#undef SET
	return rc;
}

} /* namespace */

int attn_prefill_init()
{
	int rc;
	if ((rc = set_smem_limits<__half>()) || (rc = set_smem_limits<__nv_bfloat16>()))
		return rc;
	return 0;
}

int attn_prefill_launch(const attn_args &a, const kern_paged_batch *b, int head_dim, sl_dtype dt,
			cudaStream_t st)
{
	KERN_DISPATCH_DT(dt, prefill_dim, a, b, head_dim, st);
}
