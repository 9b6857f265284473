/*
 * attention_decode.cu — decode attention (sequences with q_len == 1) on
 * tensor cores. Memory bound, so each K/V row is read once for the whole
 * GQA group: a block takes one KV head and its G query heads, which become
 * the rows of the same tensor-core MMAs (zero padded to 16), so the
 * arithmetic costs next to nothing and the block only streams K/V through
 * a 3-stage pipeline of 16-byte cp.async loads. The context is split
 * across blocks (flash-decoding) so one long sequence still fills every
 * SM; each split writes its unnormalised output and (max, sum) to the
 * workspace and the last split to finish merges them (merge_splits). When
 * one split per sequence already fills the GPU the blocks write the output
 * directly, and so does a split whose sequence fits in it whole. The launch
 * sizes the number of splits for the longest context it may see (decode
 * graphs: the reserved one); each sequence then divides its own context
 * among them (split_chunk), so a short context still spreads over the
 * GPU. Under PDL the first tiles (three
 * when the launch is one wave, else two) are requested before
 * griddepcontrol.wait, while the kernel before still runs (see the
 * kernel). An fp8 cache (kv_fp8) streams half the bytes through the same
 * pipeline; head_dims 64, 96 and 128 load the codes straight into MMA
 * fragments (kDecFp8Reg below), head_dim 80 (and SL_ATTN_FP8=smem) has
 * each warp convert its 16 rows of a tile to E in shared memory before
 * its MMAs. Launched by kern_attention_cuda (attention.cu).
 */
#include "kernels/attention_common.cuh"

namespace {

constexpr int kDecStages = 3;   /* cp.async pipeline depth (tiles in flight + 1) */
constexpr int kMaxSplits = 256; /* per sequence; bounds the merge's shared memory */
constexpr int kDecSplitBlocksPerSm = 2; /* what splitting a context aims for (decode_launch) */

/* How a block reads its cache: tiles of E through ldmatrix (kDecE); fp8
 * codes each warp first converts into E tiles in shared memory
 * (kDecFp8Smem, the only fp8 way for head_dim 80, and SL_ATTN_FP8=smem);
 * fp8 codes loaded straight into MMA fragments and converted in
 * registers (kDecFp8Reg, head_dim a multiple of 32: dec_qk_reg). */
enum { kDecE = 0, kDecFp8Smem = 1, kDecFp8Reg = 2 };

template <int D> constexpr bool dec_reg_ok() { return D % 32 == 0; }

/* kDecFp8Smem: the stages hold raw E4M3 tiles ([K|V][kDecTile][D] bytes
 * each) and one E tile pair takes the converted rows (each warp converts
 * and reads only its own 16). kDecFp8Reg: raw tiles only, rows padded to
 * D + 16 bytes so the fragment loads of a quarter warp hit distinct banks,
 * and no query tile (each thread loads its fragments itself). Without the
 * E tiles a 128-dim block takes 55 KiB: 4 resident an SM, not 2. */
template <int D, int MODE = kDecE> struct dec_shape {
	/* +8 elements (16 bytes) per row keeps ldmatrix conflict-free, as in prefill */
	static constexpr int stride = D + 8;
	static constexpr int raw_stride = MODE == kDecFp8Reg ? D + 16 : D; /* bytes */
	static constexpr size_t q_elems = MODE == kDecFp8Reg ? 0 : (size_t)16 * stride;
	static constexpr size_t tile_elems = (size_t)kDecTile * stride;
	static constexpr size_t raw_bytes = (size_t)kDecTile * raw_stride; /* one fp8 K or V tile */
	/* bytes after q: the stages (and, for kDecFp8Smem, the E tile pair) */
	static constexpr size_t kv_bytes =
		MODE == kDecE ? kDecStages * 2 /* K, V */ * tile_elems * 2
		: MODE == kDecFp8Smem ? kDecStages * 2 * raw_bytes + 2 * tile_elems * 2
				      : kDecStages * 2 * raw_bytes;
	static constexpr size_t smem = q_elems * 2 + kv_bytes;
	/* the end-of-block merge reuses the tiles: [4 warps][8 heads][D] + m, l */
	static_assert((size_t)4 * 8 * (D + 2) * 4 <= kv_bytes, "merge fits");
	static_assert((size_t)kMaxGroup * kMaxSplits * 12 <= kv_bytes, "split weights fit");
};

/* Positions per split for a sequence of kv_len: its tiles shared evenly
 * among the launch's splits. The graphs of decode steps size n_splits
 * for the reserved context, where a chunk fixed at launch (reserved
 * context / n_splits) left a 1024-token context on 2 or 3 of 8 splits; on an
 * H100 (7B, one sequence) this took fp16 from 180.2 to 187.8 tokens/s at
 * 1024 + 128 tokens and fp8 weights + fp8 KV from 288.3 to 317.5 at 512
 * + 64, unchanged at 128 + 128 and at batch 8 and up (one split there;
 * bench/results/2026-11-24-nvidia-h100-decode-attn/). */
__device__ __forceinline__ int split_chunk(const attn_args &a, int kv_len)
{
	const int tiles = (kv_len + kDecTile - 1) / kDecTile;
	return max(1, (tiles + a.n_splits - 1) / a.n_splits) * kDecTile;
}

/* ---- kDecFp8Reg: fp8 codes into MMA fragments ---------------------------
 *
 * The fragments of m16n8k16 want pairs of values along k. Read as they are
 * stored, K's pairs are two consecutive codes of a row but V's are the
 * same column of two rows, and either would take a 2-byte load per pair.
 * Both products are free to permute a dimension instead:
 * - Q K^T sums over the head dimension in any order. Thread (g, t4) takes
 *   bytes [t4 D/4, (t4 + 1) D/4) of K rows g and 8 + g, word kk of them at
 *   MMA step kk, its four codes as the k indices 2t4, 2t4 + 1, 2t4 + 8,
 *   2t4 + 9; its Q fragment takes the same dimensions of the query.
 * - P V is taken transposed, O^T = V^T P^T: the head dimension is the M
 *   side (16 rows an MMA, not 8 columns: half the MMAs, half the
 *   accumulators, none of them padding rows), the heads are the N side
 *   and P^T's fragments are exactly P's registers from Q K^T. Rows g and
 *   g + 8 of M-tile mt are dimensions g D/8 + 2mt and g D/8 + 2mt + 1, so
 *   thread (g, t4) reads bytes [g D/8, (g + 1) D/8) of V rows 2t4, 2t4 + 1,
 *   2t4 + 8, 2t4 + 9 and pairs one dimension's codes from two rows with a
 *   byte permute. dec_store_o puts the dimensions back.
 * Each tile then costs a thread eight 16-byte loads (D = 128), one
 * conversion a pair and 24 MMAs, where kDecFp8Smem converted the rows into
 * shared memory, waited for the warp, read them back with ldmatrix and
 * ran 32 MMAs. */

/* N 32-bit words from shared memory at p, aligned to A (16, 8 or 4)
 * bytes: the widest loads that allows. */
template <int N, int A> __device__ __forceinline__ void lds_words(uint32_t (&w)[N], const uint8_t *p)
{
	if constexpr (A >= 16 && N % 4 == 0) {
#pragma unroll
		for (int i = 0; i < N; i += 4) {
			const uint4 v = *reinterpret_cast<const uint4 *>(p + 4 * i);
			w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
		}
	} else if constexpr (A >= 8 && N % 2 == 0) {
#pragma unroll
		for (int i = 0; i < N; i += 2) {
			const uint2 v = *reinterpret_cast<const uint2 *>(p + 4 * i);
			w[i] = v.x, w[i + 1] = v.y;
		}
	} else {
#pragma unroll
		for (int i = 0; i < N; i++)
			w[i] = *reinterpret_cast<const uint32_t *>(p + 4 * i);
	}
}

/* The alignment of a byte offset that is a multiple of `step`, up to 16 */
constexpr int dec_align(int step) { return step % 16 == 0 ? 16 : step % 8 == 0 ? 8 : 4; }

/* Thread (g, t4)'s query fragments: words 2kk and 2kk + 1 are a0 and a2 of
 * MMA step kk (rows g + 8 are padding, a1 = a3 = 0), D/4 consecutive
 * values of head g from dimension t4 D/4; zero for g >= G. q: the group's
 * first head. */
template <int D, typename E>
__device__ __forceinline__ void dec_q_reg(uint32_t (&qr)[D / 8], const E *q, int G, int g, int t4)
{
	const uint4 *src = reinterpret_cast<const uint4 *>(q + (long)g * D + t4 * (D / 4));
#pragma unroll
	for (int i = 0; i < D / 32; i++) {
		const uint4 v = g < G ? src[i] : make_uint4(0, 0, 0, 0);
		qr[4 * i] = v.x, qr[4 * i + 1] = v.y, qr[4 * i + 2] = v.z, qr[4 * i + 3] = v.w;
	}
}

/* S = Q K^T over the warp's 16 positions, kr its first raw K row. */
template <int D, typename E>
__device__ __forceinline__ void dec_qk_reg(float (&sc)[2][4], const uint32_t (&qr)[D / 8],
					   const uint8_t *kr, int g, int t4)
{
	constexpr int RS = dec_shape<D, kDecFp8Reg>::raw_stride, NW = D / 16;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		uint32_t kw[NW];
		lds_words<NW, dec_align(D / 4)>(kw, kr + (h * 8 + g) * RS + t4 * (D / 4));
#pragma unroll
		for (int kk = 0; kk < NW; kk++) {
			const uint32_t af[4] = {qr[2 * kk], 0u, qr[2 * kk + 1], 0u};
			kern_mma_m16n8k16<E>(sc[h], af, fp8x2_to<E>(kw[kk]), fp8x2_to<E>(kw[kk] >> 16));
		}
	}
}

/* O^T += V^T P^T over the warp's 16 positions, vr its first raw V row:
 * o[mt] = (dimension g D/8 + 2mt, heads 2t4 and 2t4 + 1), then dimension
 * + 1 of the same heads. pb: P's fragments a0 and a2 (head g, positions
 * 2t4, 2t4 + 1 and 2t4 + 8, 2t4 + 9), which are P^T's b0 and b1. */
template <int D, typename E>
__device__ __forceinline__ void dec_pv_reg(float (&o)[D / 16][4], uint32_t pb0, uint32_t pb1,
					   const uint8_t *vr, int g, int t4)
{
	constexpr int RS = dec_shape<D, kDecFp8Reg>::raw_stride, NW = D / 32;
	constexpr int AL = dec_align(D / 8);
	const uint8_t *col = vr + g * (D / 8);
	uint32_t v[4][NW]; /* rows 2t4, 2t4 + 1, 2t4 + 8, 2t4 + 9 */
	lds_words<NW, AL>(v[0], col + (2 * t4) * RS);
	lds_words<NW, AL>(v[1], col + (2 * t4 + 1) * RS);
	lds_words<NW, AL>(v[2], col + (2 * t4 + 8) * RS);
	lds_words<NW, AL>(v[3], col + (2 * t4 + 9) * RS);
#pragma unroll
	for (int i = 0; i < NW; i++) {
		/* byte j of word i is dimension 4i + j of the run: M-tile 2i + j / 2,
		 * row g + 8 (j % 2); (a0 b0 a1 b1) and (a2 b2 a3 b3) pair two rows */
		const uint32_t lo = __byte_perm(v[0][i], v[1][i], 0x5140);
		const uint32_t hi = __byte_perm(v[0][i], v[1][i], 0x7362);
		const uint32_t lo8 = __byte_perm(v[2][i], v[3][i], 0x5140);
		const uint32_t hi8 = __byte_perm(v[2][i], v[3][i], 0x7362);
		const uint32_t a_lo[4] = {fp8x2_to<E>(lo), fp8x2_to<E>(lo >> 16), fp8x2_to<E>(lo8),
					  fp8x2_to<E>(lo8 >> 16)};
		const uint32_t a_hi[4] = {fp8x2_to<E>(hi), fp8x2_to<E>(hi >> 16), fp8x2_to<E>(hi8),
					  fp8x2_to<E>(hi8 >> 16)};
		kern_mma_m16n8k16<E>(o[2 * i], a_lo, pb0, pb1);
		kern_mma_m16n8k16<E>(o[2 * i + 1], a_hi, pb0, pb1);
	}
}

/* Rescales dec_pv_reg's accumulators by each of their heads' alpha: the
 * lanes of quad h hold head h's (al). */
template <int D>
__device__ __forceinline__ void dec_rescale_reg(float (&o)[D / 16][4], float al, int t4)
{
	const float a0 = __shfl_sync(0xffffffffu, al, 8 * t4);
	const float a1 = __shfl_sync(0xffffffffu, al, 8 * t4 + 4);
#pragma unroll
	for (int mt = 0; mt < D / 16; mt++) {
		o[mt][0] *= a0, o[mt][2] *= a0;
		o[mt][1] *= a1, o[mt][3] *= a1;
	}
}

/* A warp's accumulators into ow [8 heads][D] fp32, dimensions in order:
 * REG as dec_pv_reg leaves them, else o[n] = (head g, dimensions
 * 8n + 2t4, + 1) of P V. */
template <int D, bool REG, int NO>
__device__ __forceinline__ void dec_store_o(float *ow, const float (&o)[NO][4], int g, int t4)
{
#pragma unroll
	for (int n = 0; n < NO; n++) {
		if constexpr (REG) { /* two dimensions of head 2t4, then of 2t4 + 1 */
			float *c = ow + (2 * t4) * D + g * (D / 8) + 2 * n;
			*reinterpret_cast<float2 *>(c) = make_float2(o[n][0], o[n][2]);
			*reinterpret_cast<float2 *>(c + D) = make_float2(o[n][1], o[n][3]);
		} else {
			ow[g * D + n * 8 + 2 * t4] = o[n][0];
			ow[g * D + n * 8 + 2 * t4 + 1] = o[n][1];
		}
	}
}

/* The split-K merge. Every split of sequence s and KV head kvh writes its
 * unnormalised output and (max, sum) to the workspace; the last of them to
 * finish merges all of them into the output (threadFenceReduction
 * pattern: saves a second launch):
 * out = sum_i 2^(m_i - M) o_i / sum_i 2^(m_i - M) l_i. Called by every
 * thread of the block after its split's partials are written; kv_s, the
 * block's K/V tiles, is idle by then and serves as scratch. */
template <int D, typename E>
__device__ __forceinline__ void merge_splits(const attn_args &a, int s, int kvh, long tok,
					     int kv_len, int chunk, E *kv_s)
{
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int G = a.group;
	__shared__ int is_last;
	const int n_run = (kv_len + chunk - 1) / chunk; /* splits that ran */
	int *counter = a.split_done + (long)s * a.n_kv_heads + kvh;
	__threadfence();
	__syncthreads();
	if (tid == 0)
		is_last = atomicAdd(counter, 1) == n_run - 1;
	__syncthreads();
	if (!is_last)
		return;
	__threadfence();
	/* weights per (head, split) into the idle tiles: ml_s [G][n_run], w_s [G][n_run] */
	const long pair0 = (long)s * a.n_splits;
	float2 *ml_s = reinterpret_cast<float2 *>(kv_s);
	float *w_s = reinterpret_cast<float *>(ml_s + G * n_run);
	for (int i = tid; i < G * n_run; i += kThreads) {
		const int hg = i / n_run, k = i - hg * n_run;
		ml_s[i] = __ldcg(&a.part_ml[(pair0 + k) * a.n_heads + kvh * G + hg]);
	}
	__syncthreads();
	for (int hg = warp; hg < G; hg += kThreads / 32) {
		const float2 *ml = ml_s + hg * n_run;
		float M = -INFINITY, L = 0.f;
		for (int k = lane; k < n_run; k += 32)
			M = fmaxf(M, ml[k].x);
		M = kern_warp_max(M);
		for (int k = lane; k < n_run; k += 32)
			L += exp2f(ml[k].x - M) * ml[k].y;
		L = kern_warp_sum(L);
		for (int k = lane; k < n_run; k += 32)
			w_s[hg * n_run + k] = exp2f(ml[k].x - M) / L;
	}
	__syncthreads();
	/* the group's G heads are contiguous: G * D floats per split, read as
	 * float4 with all splits' loads independent */
	const long kstride = (long)a.n_heads * D;
	const float4 *po = reinterpret_cast<const float4 *>(a.part_o + pair0 * kstride +
							      (long)kvh * G * D);
	E *out = (E *)a.out + tok * a.n_heads * D + (long)kvh * G * D;
	for (int v = tid; v < G * D / 4; v += kThreads) {
		const float *w = w_s + (v * 4 / D) * n_run;
		float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
		for (int k = 0; k < n_run; k++) {
			float4 x = __ldcg(po + k * (kstride / 4) + v);
			acc.x += w[k] * x.x;
			acc.y += w[k] * x.y;
			acc.z += w[k] * x.z;
			acc.w += w[k] * x.w;
		}
		uint2 packed = make_uint2(kern_pack2<E>(acc.x, acc.y), kern_pack2<E>(acc.z, acc.w));
		*reinterpret_cast<uint2 *>(out + v * 4) = packed;
	}
	if (tid == 0)
		*counter = 0; /* ready for the next launch */
}

/* grid (n_splits, n_kv_heads, n_seqs), kThreads threads. One block: one
 * split of one sequence's context for all G query heads of one KV head.
 * The G query rows (zero-padded to 16) are the M side of the tensor-core
 * MMAs, so every K/V element is read once per group and multiplied in
 * hardware. Warp w takes positions 16w .. 16w+15 of every 64-position tile
 * and keeps its own running max/sum/output (lane g = lane/4 holds head g);
 * the four warps are merged once at the end, so tiles need no barriers
 * beyond the copy pipeline's. */
/* The register path is held to 128 registers, so 4 blocks fit an SM (its
 * shared memory allows that many). Unbounded it took 110 and its steps
 * measured 0.1-3.7% slower (7B and 8b, batch 1-64, fp8 + fp8 KV, H100,
 * bench/results/2026-11-24-nvidia-h100-fp8-kv-regs/). */
template <int D, typename E, int MODE>
__global__ void __launch_bounds__(kThreads, MODE == kDecFp8Reg ? 4 : 1) attn_decode_kernel(attn_args a)
{
	using S = dec_shape<D, MODE>;
	constexpr bool FP8 = MODE != kDecE, REG = MODE == kDecFp8Reg;
	/* Under PDL this block may start while the kernel before it (RoPE +
	 * KV write, or the QKV projection with it fused) still runs. That
	 * kernel writes only the query and the newest cache row (position
	 * kv_len - 1) of each decode sequence; the step's metadata was copied
	 * in before the step's first kernel, the older rows by earlier steps.
	 * So those are read, and the first tiles' copies started, before
	 * griddepcontrol.wait; the query and the newest row after it. On an
	 * H100 (7B) this and the direct write below took batch 1 fp16 from
	 * 192.4 to 195.2 tokens/s, fp8 + fp8 KV from 318.3 to 325.4, but cost
	 * batch 64 1.5-3.6% while every block waited for three tiles before
	 * its first MMA (bench/results/2026-11-24-nvidia-h100-attn-rope/).
	 * A launch of more than one wave now starts with two; that won back
	 * fp8 + fp8 KV batch 32 +1.6%, batch 64 +1.3%, fp16 within +-0.7%
	 * (bench/results/2026-11-24-nvidia-h100-qgemv2/). */
	const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
	if (a.q_len[s] != 1)
		return;
	const int kv_len = a.kv_len[s];
	const int chunk = split_chunk(a, kv_len);
	const int begin = split * chunk;
	if (begin >= kv_len)
		return; /* nor counted: the merge waits for splits below kv_len */
	const int end = min(begin + chunk, kv_len);
	const int fresh = kv_len - 1; /* the row the kernel before writes */
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, t4 = lane & 3, lm = lane >> 3, lr = lane & 7;
	const int G = a.group;
	const long tok = a.q_start[s];
	const int32_t *table = a.block_tables + (long)s * a.max_blocks;

	extern __shared__ __align__(16) unsigned char smem[];
	E *q_s = reinterpret_cast<E *>(smem); /* [16][stride], rows >= G zero (not REG) */
	E *kv_s = q_s + S::q_elems;           /* [stage][K|V][kDecTile][stride] */
	/* FP8: raw [stage][K|V][kDecTile][raw_stride] bytes, then (not REG) the E
	 * pair [K|V][kDecTile][stride] */
	uint8_t *raw_s = reinterpret_cast<uint8_t *>(kv_s);
	E *conv_s = reinterpret_cast<E *>(raw_s + kDecStages * 2 * S::raw_bytes);
	/* the tile of rows [t0, t0 + kDecTile) into slot `st`, but row `skip` */
	auto load_tile = [&](int st, int t0, int skip) {
		if constexpr (FP8) {
			uint8_t *kr = raw_s + (size_t)st * 2 * S::raw_bytes;
			load_kv_rows<D, kDecTile, kThreads, S::raw_stride>(a, table, kvh, t0, end, kr,
									   kr + S::raw_bytes, skip);
		} else {
			E *ks = kv_s + (size_t)st * 2 * S::tile_elems;
			load_kv_rows<D * (int)sizeof(E), kDecTile, kThreads, S::stride * (int)sizeof(E)>(
				a, table, kvh, t0, end, reinterpret_cast<unsigned char *>(ks),
				reinterpret_cast<unsigned char *>(ks + S::tile_elems), skip);
		}
	};

	const int n_tiles = (end - begin + kDecTile - 1) / kDecTile;
	/* The first tiles, one copy group each, without the newest row: all
	 * kDecStages of them when the launch is one wave (a.deep), else one
	 * less, so the copy of the third overlaps the first tile's MMAs (a
	 * full first round slowed batch 64 by 2-4%). */
	const int pro = a.deep ? kDecStages : kDecStages - 1;
#pragma unroll
	for (int st = 0; st < kDecStages; st++)
		if (st < pro) {
			if (st < n_tiles)
				load_tile(st, begin + st * kDecTile, fresh);
			cp_async_commit(); /* possibly empty: keeps one group per tile */
		}
	kern_pdl_start();
	/* the query and the newest row with plain loads, outside the groups;
	 * the barrier before tile 0 publishes them */
	const E *qg = (const E *)a.qkv + tok * a.q_stride + (long)kvh * G * D;
	uint32_t qf[D / 16][4];
	uint32_t qr[REG ? D / 8 : 1]; /* REG: this thread's fragments (dec_q_reg) */
	if constexpr (REG) {
		dec_q_reg<D, E>(qr, qg, G, g, t4);
	} else {
		const uint4 *qrow = reinterpret_cast<const uint4 *>(qg);
		constexpr int nc = D / 8; /* 16-byte chunks a row */
		for (int i = tid; i < 16 * nc; i += kThreads) {
			const int r = i / nc, c = i - r * nc;
			*reinterpret_cast<uint4 *>(q_s + r * S::stride + c * 8) =
				r < G ? qrow[r * nc + c] : make_uint4(0, 0, 0, 0);
		}
	}
	{
		const int ft = (fresh - begin) / kDecTile; /* its tile, if this split has it */
		const int fr = fresh - begin - ft * kDecTile;
		if (fresh < end && ft < pro) {
			if constexpr (FP8) {
				uint8_t *kr = raw_s + (size_t)ft * 2 * S::raw_bytes +
					      (size_t)fr * S::raw_stride;
				copy_kv_row<D>(a, table, kvh, fresh, kr, kr + S::raw_bytes);
			} else {
				E *ks = kv_s + (size_t)ft * 2 * S::tile_elems + (size_t)fr * S::stride;
				copy_kv_row<D * 2>(a, table, kvh, fresh, ks, ks + S::tile_elems);
			}
		}
	}

	constexpr int NO = REG ? D / 16 : D / 8; /* accumulator tiles (dec_pv_reg) */
	float o[NO][4];
#pragma unroll
	for (int n = 0; n < NO; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
	float m = -INFINITY, l = 0.f; /* head g; rows g+8 are padding */

	for (int tile = 0; tile < n_tiles; tile++) {
		if (tile == 0 && a.deep) {
			cp_async_wait<0>(); /* every first tile (the third was in the prologue) */
			__syncthreads();
		} else {
			cp_async_wait<kDecStages - 2>();
			__syncthreads(); /* tile visible; everyone is done with tile - 1 */
			/* into tile - 1's slot (at tile 0 of a shallow start, the unused last one) */
			const int nt = tile + kDecStages - 1;
			if (nt < n_tiles)
				load_tile(nt % kDecStages, begin + nt * kDecTile, -1);
			cp_async_commit();
		}
		if (!REG && tile == 0) {
#pragma unroll
			for (int kk = 0; kk < D / 16; kk++)
				kern_ldmatrix_x4(qf[kk], q_s + ((lm & 1) * 8 + lr) * S::stride +
								 kk * 16 + (lm >> 1) * 8);
		}
		float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
		const E *ks = nullptr, *vs = nullptr;
		const uint8_t *kr = raw_s + (size_t)(tile % kDecStages) * 2 * S::raw_bytes;
		if constexpr (REG) {
			kr += (size_t)warp * 16 * S::raw_stride; /* this warp's rows */
			dec_qk_reg<D, E>(sc, qr, kr, g, t4);
		} else if constexpr (FP8) {
			/* this warp's 16 rows only: no other warp reads them */
			__syncwarp(); /* done reading the previous tile's rows */
			convert_kv_rows<D, E>(kr, kr + S::raw_bytes, conv_s, conv_s + S::tile_elems,
					      warp * 16, 16, S::stride, lane, 32);
			__syncwarp();
			ks = conv_s + warp * 16 * S::stride;
		} else {
			ks = kv_s + (size_t)(tile % kDecStages) * 2 * S::tile_elems + warp * 16 * S::stride;
		}
		if constexpr (!REG) {
			vs = ks + S::tile_elems;
			/* S = Q K^T over this warp's 16 positions (two 8-column tiles) */
#pragma unroll
			for (int kk = 0; kk < D / 16; kk++) {
				uint32_t b[4];
				kern_ldmatrix_x4(b, ks + ((lm >> 1) * 8 + lr) * S::stride +
						    kk * 16 + (lm & 1) * 8);
				kern_mma_m16n8k16<E>(sc[0], qf[kk], b[0], b[1]);
				kern_mma_m16n8k16<E>(sc[1], qf[kk], b[2], b[3]);
			}
		}

		/* online softmax of row g over positions p0 + {2t, 2t+1, 8+2t, 9+2t} */
		const int p0 = begin + tile * kDecTile + warp * 16 + 2 * t4;
		float x[4];
		x[0] = p0 < end ? sc[0][0] * a.scale_log2 : -INFINITY;
		x[1] = p0 + 1 < end ? sc[0][1] * a.scale_log2 : -INFINITY;
		x[2] = p0 + 8 < end ? sc[1][0] * a.scale_log2 : -INFINITY;
		x[3] = p0 + 9 < end ? sc[1][1] * a.scale_log2 : -INFINITY;
		float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
		mx = kern_quad_max(mx);
		/* a warp whose positions all lie past the end keeps m = -inf */
		float al;
		const float base = softmax_step(m, mx, al);
		float p[4];
#pragma unroll
		for (int e = 0; e < 4; e++)
			p[e] = exp2f(x[e] - base);
		l = l * al + (p[0] + p[1]) + (p[2] + p[3]); /* per lane; quad-summed at the end */
		if constexpr (REG) {
			dec_rescale_reg<D>(o, al, t4);
		} else {
#pragma unroll
			for (int n = 0; n < NO; n++) {
				o[n][0] *= al;
				o[n][1] *= al;
			}
		}

		/* O += P V, P as one A fragment (padding rows zero) */
		uint32_t pa[4];
		pa[0] = kern_pack2<E>(p[0], p[1]);
		pa[1] = 0u;
		pa[2] = kern_pack2<E>(p[2], p[3]);
		pa[3] = 0u;
		if constexpr (REG) {
			dec_pv_reg<D, E>(o, pa[0], pa[2], kr + S::raw_bytes, g, t4);
		} else {
#pragma unroll
			for (int np = 0; np < D / 16; np++) {
				uint32_t b[4];
				kern_ldmatrix_x4_trans(b, vs + ((lm & 1) * 8 + lr) * S::stride +
							  np * 16 + (lm >> 1) * 8);
				kern_mma_m16n8k16<E>(o[2 * np], pa, b[0], b[1]);
				kern_mma_m16n8k16<E>(o[2 * np + 1], pa, b[2], b[3]);
			}
		}
	}

	/* merge the four warps through the idle tiles */
	cp_async_wait<0>();
	__syncthreads();
	l = kern_quad_sum(l);
	float *o_s = reinterpret_cast<float *>(kv_s); /* [4][8][D] */
	float *m_s = o_s + 4 * 8 * D;                  /* [4][8] */
	float *l_s = m_s + 4 * 8;                      /* [4][8] */
	dec_store_o<D, REG>(o_s + warp * 8 * D, o, g, t4);
	if (t4 == 0) {
		m_s[warp * 8 + g] = m;
		l_s[warp * 8 + g] = l;
	}
	__syncthreads();
	/* one split holds the whole context: nothing to merge */
	const bool direct = kv_len <= chunk;
	for (int i = tid; i < G * D; i += kThreads) {
		const int hg = i / D, d = i - hg * D;
		float M = -INFINITY;
#pragma unroll
		for (int w = 0; w < 4; w++)
			M = fmaxf(M, m_s[w * 8 + hg]);
		float L = 0.f, O = 0.f;
#pragma unroll
		for (int w = 0; w < 4; w++) {
			float f = exp2f(m_s[w * 8 + hg] - M); /* 0 for a warp that saw nothing */
			L += f * l_s[w * 8 + hg];
			O += f * o_s[(w * 8 + hg) * D + d];
		}
		const int h = kvh * G + hg;
		if (direct) {
			((E *)a.out)[tok * a.n_heads * D + (long)h * D + d] = kern_from_f32<E>(O / L);
		} else {
			const long pair = (long)s * a.n_splits + split;
			a.part_o[(pair * a.n_heads + h) * D + d] = O;
			if (d == 0)
				a.part_ml[pair * a.n_heads + h] = make_float2(M, L);
		}
	}
	if (direct)
		return;

	merge_splits<D, E>(a, s, kvh, tok, kv_len, chunk, kv_s);
}

/* The register fp8 path's blocks are small enough for 4 an SM. A grid
 * that 2 an SM would hold (batch 1 and 2 of a 7B) was slower packed
 * 4 an SM: the 7B fp8 + fp8 KV batch-1 step 331.9 -> 323.2 tokens/s on an
 * H100. Such a launch asks for this much shared memory, which leaves
 * room for 2 blocks an SM and not 3 (it then took 330.9; the older path
 * 332.1). */
static size_t dec_spread_smem(int smem_per_sm)
{
	/* past a third of the SM with the 1 KiB each block reserves, rounded
	 * up to the 128-byte allocation unit */
	return ((size_t)(smem_per_sm / 3 - 1024 + 1) + 127) & ~(size_t)127;
}

template <int D, typename E, int MODE>
int decode_launch(const kern_attn_ws *ws, attn_args a, const kern_paged_batch *b, cudaStream_t st)
{
	/* Split the context until the grid covers the resident blocks
	 * once, at least one tile per split, within the workspace; but for
	 * no more than kDecSplitBlocksPerSm blocks an SM: past that, more
	 * splits of fewer tiles only lengthen the merge (the register fp8
	 * path split for 4 blocks an SM took 13.9 us over a 4096-token GQA
	 * context, 10.3 us split for 2). */
	int per_sm = ws->smem_per_sm / (int)(dec_shape<D, MODE>::smem + 1024);
	per_sm = per_sm < 1 ? 1 : per_sm > kMaxDecBlocksPerSm ? kMaxDecBlocksPerSm : per_sm;
	const long resident = (long)ws->n_sms * per_sm;
	const long target = (long)ws->n_sms * (per_sm < kDecSplitBlocksPerSm ? per_sm
									      : kDecSplitBlocksPerSm);
	const long base = (long)b->n_seqs * a.n_kv_heads;
	const int tiles = b->max_kv_len > 0 ? (b->max_kv_len + kDecTile - 1) / kDecTile : 1;
	long splits = base < target ? target / base : 1; /* floor: never a second partial wave */
	if (splits > tiles)
		splits = tiles;
	if (splits > kMaxSplits)
		splits = kMaxSplits;
	if (splits > ws->cap_pairs / b->n_seqs)
		splits = ws->cap_pairs / b->n_seqs;
	if (splits < 1)
		splits = 1;
	const int per_split = (int)((tiles + splits - 1) / splits);
	a.n_splits = (tiles + per_split - 1) / per_split;
	a.deep = base * a.n_splits <= resident;

	dim3 grid(a.n_splits, a.n_kv_heads, b->n_seqs);
	size_t smem = dec_shape<D, MODE>::smem;
	if (MODE == kDecFp8Reg && base * a.n_splits <= target)
		smem = dec_spread_smem(ws->smem_per_sm);
	return kern_launch_small("attn_decode", st, attn_decode_kernel<D, E, MODE>, grid,
				 dim3(kThreads), smem, a);
}

template <int D, typename E>
int decode_mode(const kern_attn_ws *ws, const attn_args &a, const kern_paged_batch *b,
		cudaStream_t st)
{
	if (!a.kv_fp8)
		return decode_launch<D, E, kDecE>(ws, a, b, st);
	if constexpr (dec_reg_ok<D>())
		if (!ws->fp8_smem)
			return decode_launch<D, E, kDecFp8Reg>(ws, a, b, st);
	return decode_launch<D, E, kDecFp8Smem>(ws, a, b, st);
}

template <typename E>
int decode_dim(const kern_attn_ws *ws, const attn_args &a, const kern_paged_batch *b, int head_dim,
	       cudaStream_t st)
{
	switch (head_dim) {
#define CASE(D)                                        \
	case D:                                        \
		return decode_mode<D, E>(ws, a, b, st);
	KERN_ATTN_MMA_HEAD_DIMS(CASE)
#undef CASE
	}
	return SL_ENOTSUP;
}

/* Each head_dim's kernel may use more than the default 48 KiB of shared
 * memory only once opted in. */
template <int D, typename E, int MODE> int set_smem_limit(size_t most)
{
	const size_t own = dec_shape<D, MODE>::smem;
	CUDA_TRY(cudaFuncSetAttribute(attn_decode_kernel<D, E, MODE>,
				      cudaFuncAttributeMaxDynamicSharedMemorySize,
				      (int)(most > own ? most : own)));
	return 0;
}

template <int D, typename E> int set_smem_limits_dim(size_t spread)
{
	int rc = set_smem_limit<D, E, kDecE>(0);
	if (!rc)
		rc = set_smem_limit<D, E, kDecFp8Smem>(0);
	if constexpr (dec_reg_ok<D>())
		if (!rc)
			rc = set_smem_limit<D, E, kDecFp8Reg>(spread);
	return rc;
}

template <typename E> int set_smem_limits(size_t spread)
{
	int rc = 0;
#define SET(D)              \
	if (!rc)            \
		rc = set_smem_limits_dim<D, E>(spread);
	KERN_ATTN_MMA_HEAD_DIMS(SET)
#undef SET
	return rc;
}

} /* namespace */

int attn_decode_init()
{
	int dev = 0, per_sm = 0, rc;
	CUDA_TRY(cudaGetDevice(&dev));
	CUDA_TRY(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
	const size_t spread = dec_spread_smem(per_sm);
	if ((rc = set_smem_limits<__half>(spread)) || (rc = set_smem_limits<__nv_bfloat16>(spread)))
		return rc;
	return 0;
}

int attn_decode_launch(const kern_attn_ws *ws, attn_args a, const kern_paged_batch *b,
		       int head_dim, sl_dtype dt, cudaStream_t st)
{
	KERN_DISPATCH_DT(dt, decode_dim, ws, a, b, head_dim, st);
}
