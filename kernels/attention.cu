/*
 * attention.cu — causal grouped-query attention over the paged KV cache on
 * the GPU; kernels/attention.c is the spec (same arguments, same results up
 * to fp16/bf16 rounding).
 *
 * One entry point, two kernels chosen per sequence:
 *
 *  - prefill (sequences with q_len > 1): FlashAttention-2 style. A block
 *    takes 64 query rows of one head; each of its 4 warps owns 16 rows and
 *    keeps them in registers. K/V tiles of 64 cache positions are staged
 *    through shared memory with cp.async (double buffered, gathered from the
 *    paged cache row by row, so chunked prefill over earlier context works);
 *    S = Q K^T and O += P V run on tensor cores (mma.sync m16n8k16, fp16 or
 *    bf16 in, fp32 accumulate: mma.cuh); the online softmax stays in
 *    registers.
 *
 *  - decode (sequences with q_len == 1): memory bound, so each K/V row is
 *    read once for the whole GQA group: a block takes one KV head and its G
 *    query heads, which become the rows of the same tensor-core MMAs (zero
 *    padded to 16), so the arithmetic costs next to nothing and the block
 *    only streams K/V through a 3-stage pipeline of 16-byte cp.async loads.
 *    The context is split across blocks (flash-decoding) so one long
 *    sequence still fills every SM; each split writes its unnormalised
 *    output and (max, sum) to the workspace and the last split to finish
 *    merges them. When one split per sequence already fills the GPU the
 *    blocks write the output directly.
 *
 * A mixed batch launches both: prefill blocks skip q_len <= 1 sequences and
 * decode blocks skip q_len != 1 ones. Scores are scaled by scale * log2(e)
 * in fp32 and the softmax runs in base 2. Workspace: kern_attn_ws, allocated
 * once by kern_attn_ws_create; kern_attention_cuda never allocates. One
 * workspace serves one stream at a time (its split buffers and counters are
 * reused by every launch).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "attention.h"
#include "cuda_util.cuh"
#include "mma.cuh"

namespace {

constexpr int kThreads = 128;   /* both kernels: 4 warps */
constexpr int kMaxGroup = 8;    /* query heads per KV head in decode: rows 0-7 of an MMA */
constexpr int kDecTile = 64;    /* decode: cache positions per shared-memory tile */
constexpr int kPreM = 64;       /* prefill: query rows per block (16 per warp) */
constexpr int kPreN = 64;       /* prefill: cache positions per tile */
constexpr float kLog2e = 1.4426950408889634f;

/* ---- async copies ------------------------------------------------------ */

/* 16 bytes global -> shared; when !valid nothing is read and the 16 bytes are
 * zero-filled (rows past the context must be finite: p = 0 times garbage
 * left in shared memory could be 0 * NaN). */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	int n = valid ? 16 : 0;
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait()
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Everything a launch needs; device pointers except where noted. */
struct attn_args {
	void *out;                  /* [n_tokens, n_heads * D] */
	const void *qkv;            /* rows of q_stride elements, q first */
	long q_stride;
	const void *k_cache, *v_cache;  /* [blocks][n_kv_heads][block_tokens][D] */
	const int32_t *q_start, *q_len, *kv_len, *block_tables;
	int max_blocks, bt_shift;   /* block_tokens = 1 << bt_shift */
	int n_heads, n_kv_heads, group;
	float scale_log2;           /* scale * log2(e) */
	int chunk, n_splits;        /* decode: positions per split (tile multiple), splits per sequence */
	float *part_o;              /* [n_seqs * n_splits, n_heads, D] fp32, unnormalised */
	float2 *part_ml;            /* [n_seqs * n_splits, n_heads] (max, sum), base 2 */
	int *split_done;            /* [n_seqs, n_kv_heads] splits finished; zero between launches */
};

/* Gathers cache rows [t0, t0 + rows) of one KV head into a shared tile of
 * row stride `stride` elements, K then V at v_off elements further. Rows at
 * or past `end` are zero-filled and their block-table entries never read. */
template <int D, typename E>
__device__ __forceinline__ void load_kv_tile(const attn_args &a, const int32_t *table, int kvh,
					     int t0, int end, int rows, int stride, E *ks, E *vs)
{
	constexpr int nc = D / 8;
	const int mask = (1 << a.bt_shift) - 1;
	for (int i = threadIdx.x; i < rows * nc; i += kThreads) {
		int r = i / nc, c = i - r * nc, pos = t0 + r;
		bool ok = pos < end;
		long off = 0;
		if (ok) {
			long page = table[pos >> a.bt_shift];
			off = (((page * a.n_kv_heads + kvh) << a.bt_shift) + (pos & mask)) * D + c * 8;
		}
		cp_async16(ks + r * stride + c * 8, (const E *)a.k_cache + off, ok);
		cp_async16(vs + r * stride + c * 8, (const E *)a.v_cache + off, ok);
	}
}

/* ---- decode ------------------------------------------------------------ */

constexpr int kDecStages = 3;   /* cp.async pipeline depth (tiles in flight + 1) */
constexpr int kMaxSplits = 256; /* per sequence; bounds the merge's shared memory */

template <int D> struct dec_shape {
	/* +8 elements (16 bytes) per row keeps ldmatrix conflict-free, as in prefill */
	static constexpr int stride = D + 8;
	static constexpr int nc = D / 8;
	static constexpr size_t q_elems = (size_t)16 * stride;
	static constexpr size_t tile_elems = (size_t)kDecTile * stride;
	static constexpr size_t smem = (q_elems + kDecStages * 2 /* K, V */ * tile_elems) * 2;
	/* the end-of-block merge reuses the tiles: [4 warps][8 heads][D] + m, l */
	static_assert((size_t)4 * 8 * (D + 2) * 4 <= kDecStages * 2 * tile_elems * 2, "merge fits");
	static_assert((size_t)kMaxGroup * kMaxSplits * 12 <= kDecStages * 2 * tile_elems * 2,
		      "split weights fit");
};

/* grid (n_splits, n_kv_heads, n_seqs), kThreads threads. One block: one
 * split of one sequence's context for all G query heads of one KV head.
 * The G query rows (zero-padded to 16) are the M side of the tensor-core
 * MMAs, so every K/V element is read once per group and multiplied in
 * hardware. Warp w takes positions 16w .. 16w+15 of every 64-position tile
 * and keeps its own running max/sum/output (lane g = lane/4 holds head g);
 * the four warps are merged once at the end, so tiles need no barriers
 * beyond the copy pipeline's. */
template <int D, typename E>
__global__ void __launch_bounds__(kThreads) attn_decode_kernel(attn_args a)
{
	using S = dec_shape<D>;
	const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
	if (a.q_len[s] != 1)
		return;
	const int kv_len = a.kv_len[s];
	const int begin = split * a.chunk;
	if (begin >= kv_len)
		return; /* nor counted: the merge waits for splits below kv_len */
	const int end = min(begin + a.chunk, kv_len);
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, t4 = lane & 3, lm = lane >> 3, lr = lane & 7;
	const int G = a.group;
	const long tok = a.q_start[s];
	const int32_t *table = a.block_tables + (long)s * a.max_blocks;

	extern __shared__ __align__(16) unsigned char smem[];
	E *q_s = reinterpret_cast<E *>(smem); /* [16][stride], rows >= G zero */
	E *kv_s = q_s + S::q_elems;           /* [stage][K|V][kDecTile][stride] */

	const int n_tiles = (end - begin + kDecTile - 1) / kDecTile;
	const E *qrow = (const E *)a.qkv + tok * a.q_stride + (long)kvh * G * D;
	for (int i = tid; i < 16 * S::nc; i += kThreads) {
		int r = i / S::nc, c = i - r * S::nc;
		bool ok = r < G;
		cp_async16(q_s + r * S::stride + c * 8, qrow + (ok ? r * D + c * 8 : 0), ok);
	}
#pragma unroll
	for (int st = 0; st < kDecStages - 1; st++) {
		if (st < n_tiles) {
			E *ks = kv_s + (size_t)st * 2 * S::tile_elems;
			load_kv_tile<D, E>(a, table, kvh, begin + st * kDecTile, end, kDecTile,
					   S::stride, ks, ks + S::tile_elems);
		}
		cp_async_commit(); /* possibly empty: keeps one group per tile */
	}

	uint32_t qf[D / 16][4];
	float o[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
	float m = -INFINITY, l = 0.f; /* head g; rows g+8 are padding */

	for (int tile = 0; tile < n_tiles; tile++) {
		cp_async_wait<kDecStages - 2>();
		__syncthreads(); /* tile visible; everyone is done with tile - 1 */
		{
			const int nt = tile + kDecStages - 1;
			if (nt < n_tiles) {
				E *ks = kv_s + (size_t)(nt % kDecStages) * 2 * S::tile_elems;
				load_kv_tile<D, E>(a, table, kvh, begin + nt * kDecTile, end, kDecTile,
						   S::stride, ks, ks + S::tile_elems);
			}
			cp_async_commit();
		}
		if (tile == 0) {
#pragma unroll
			for (int kk = 0; kk < D / 16; kk++)
				kern_ldmatrix_x4(qf[kk], q_s + ((lm & 1) * 8 + lr) * S::stride +
								 kk * 16 + (lm >> 1) * 8);
		}
		const E *ks = kv_s + (size_t)(tile % kDecStages) * 2 * S::tile_elems + warp * 16 * S::stride;
		const E *vs = ks + S::tile_elems;

		/* S = Q K^T over this warp's 16 positions (two 8-column tiles) */
		float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			uint32_t b[4];
			kern_ldmatrix_x4(b, ks + ((lm >> 1) * 8 + lr) * S::stride + kk * 16 +
					    (lm & 1) * 8);
			kern_mma_m16n8k16<E>(sc[0], qf[kk], b[0], b[1]);
			kern_mma_m16n8k16<E>(sc[1], qf[kk], b[2], b[3]);
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
		const float mn = fmaxf(m, mx);
		/* a warp whose positions all lie past the end has mn = -inf */
		const float base = mn == -INFINITY ? 0.f : mn;
		const float al = exp2f(m - base);
		m = mn;
		float p[4];
#pragma unroll
		for (int e = 0; e < 4; e++)
			p[e] = exp2f(x[e] - base);
		l = l * al + (p[0] + p[1]) + (p[2] + p[3]); /* per lane; quad-summed at the end */
#pragma unroll
		for (int n = 0; n < D / 8; n++) {
			o[n][0] *= al;
			o[n][1] *= al;
		}

		/* O += P V, P as one A fragment (padding rows zero) */
		uint32_t pa[4];
		pa[0] = kern_pack2<E>(p[0], p[1]);
		pa[1] = 0u;
		pa[2] = kern_pack2<E>(p[2], p[3]);
		pa[3] = 0u;
#pragma unroll
		for (int np = 0; np < D / 16; np++) {
			uint32_t b[4];
			kern_ldmatrix_x4_trans(b, vs + ((lm & 1) * 8 + lr) * S::stride + np * 16 +
						  (lm >> 1) * 8);
			kern_mma_m16n8k16<E>(o[2 * np], pa, b[0], b[1]);
			kern_mma_m16n8k16<E>(o[2 * np + 1], pa, b[2], b[3]);
		}
	}

	/* merge the four warps through the idle tiles */
	cp_async_wait<0>();
	__syncthreads();
	l = kern_quad_sum(l);
	float *o_s = reinterpret_cast<float *>(kv_s); /* [4][8][D] */
	float *m_s = o_s + 4 * 8 * D;                  /* [4][8] */
	float *l_s = m_s + 4 * 8;                      /* [4][8] */
	float *ow = o_s + (warp * 8 + g) * D + 2 * t4;
#pragma unroll
	for (int n = 0; n < D / 8; n++) {
		ow[n * 8] = o[n][0];
		ow[n * 8 + 1] = o[n][1];
	}
	if (t4 == 0) {
		m_s[warp * 8 + g] = m;
		l_s[warp * 8 + g] = l;
	}
	__syncthreads();
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
		if (a.n_splits == 1) {
			((E *)a.out)[tok * a.n_heads * D + (long)h * D + d] = kern_from_f32<E>(O / L);
		} else {
			const long pair = (long)s * a.n_splits + split;
			a.part_o[(pair * a.n_heads + h) * D + d] = O;
			if (d == 0)
				a.part_ml[pair * a.n_heads + h] = make_float2(M, L);
		}
	}
	if (a.n_splits == 1)
		return;

	/* The last split of (sequence, KV head) to finish merges all of them
	 * (threadFenceReduction pattern: saves a second launch):
	 * out = sum_i 2^(m_i - M) o_i / sum_i 2^(m_i - M) l_i. */
	__shared__ int is_last;
	const int n_run = (kv_len + a.chunk - 1) / a.chunk; /* splits that ran */
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

/* ---- prefill ----------------------------------------------------------- */

template <int D> struct pre_shape {
	/* +8 elements (16 bytes) per row: the eight rows one ldmatrix phase
	 * reads then start on distinct bank groups for every D used here. */
	static constexpr int stride = D + 8;
	static constexpr int nc = D / 8;
	static constexpr size_t q_elems = (size_t)kPreM * stride;
	static constexpr size_t tile_elems = (size_t)kPreN * stride;
	static constexpr size_t smem = (q_elems + 2 /* stages */ * 2 /* K, V */ * tile_elems) * 2;
};

/* grid (ceil(max_q_len / kPreM), n_heads, n_seqs), kThreads threads. Warp w
 * owns query rows 16w .. 16w+15 of the block's 64; lane (g = lane/4,
 * t = lane%4) holds, per 8-column MMA tile, rows g and g+8 at columns 2t and
 * 2t+1 (the m16n8 accumulator layout). */
template <int D, typename E>
__global__ void __launch_bounds__(kThreads) attn_prefill_kernel(attn_args a)
{
	using P = pre_shape<D>;
	/* last query tiles see the most context: schedule them first */
	const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, s = blockIdx.z;
	const int q_len = a.q_len[s];
	if (q_len <= 1 || qt * kPreM >= q_len)
		return; /* single-token sequences go to the decode kernel */
	const int kv_len = a.kv_len[s], past = kv_len - q_len;
	const int row0 = qt * kPreM, rows = min(kPreM, q_len - row0);
	const long tok0 = (long)a.q_start[s] + row0;
	const int kvh = h / a.group;
	const int first_pos = past + row0, last_pos = past + row0 + rows - 1;
	const int n_tiles = last_pos / kPreN + 1;
	const int32_t *table = a.block_tables + (long)s * a.max_blocks;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, t4 = lane & 3;

	extern __shared__ __align__(16) unsigned char smem[];
	E *q_s = reinterpret_cast<E *>(smem); /* [kPreM][stride] */
	E *kv_s = q_s + P::q_elems;           /* [stage][K|V][kPreN][stride] */

	for (int i = tid; i < kPreM * P::nc; i += kThreads) {
		int r = i / P::nc, c = i - r * P::nc;
		bool ok = r < rows;
		const E *src = (const E *)a.qkv + (ok ? (tok0 + r) * a.q_stride + (long)h * D + c * 8 : 0);
		cp_async16(q_s + r * P::stride + c * 8, src, ok);
	}
	load_kv_tile<D, E>(a, table, kvh, 0, kv_len, kPreN, P::stride, kv_s, kv_s + P::tile_elems);
	cp_async_commit();

	uint32_t qf[D / 16][4];  /* Q rows of this warp as MMA A fragments */
	float o[D / 8][4];       /* output accumulator, fp32 */
#pragma unroll
	for (int n = 0; n < D / 8; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
	float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
	const int qpos_lo = first_pos + warp * 16 + g, qpos_hi = qpos_lo + 8;
	/* ldmatrix x4: lanes 8j..8j+7 address the rows of matrix j */
	const int lm = lane >> 3, lr = lane & 7;

	for (int tile = 0; tile < n_tiles; tile++) {
		const int stage = tile & 1;
		if (tile + 1 < n_tiles) {
			E *nk = kv_s + (size_t)(stage ^ 1) * 2 * P::tile_elems;
			load_kv_tile<D, E>(a, table, kvh, (tile + 1) * kPreN, kv_len, kPreN, P::stride,
					   nk, nk + P::tile_elems);
			cp_async_commit();
			cp_async_wait<1>();
		} else {
			cp_async_wait<0>();
		}
		__syncthreads();
		const E *ks = kv_s + (size_t)stage * 2 * P::tile_elems, *vs = ks + P::tile_elems;

		if (tile == 0) {
			/* matrices: (rows 0-7, k 0-7), (rows 8-15, k 0-7),
			 * (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3 */
#pragma unroll
			for (int kk = 0; kk < D / 16; kk++)
				kern_ldmatrix_x4(qf[kk], q_s + (warp * 16 + (lm & 1) * 8 + lr) * P::stride +
								 kk * 16 + (lm >> 1) * 8);
		}

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

		/* scale, causal mask (only tiles reaching past the block's first
		 * query position or the context end need it) */
		const int kv0 = tile * kPreN;
		const bool need_mask = kv0 + kPreN - 1 > first_pos || kv0 + kPreN > kv_len;
#pragma unroll
		for (int j = 0; j < kPreN / 8; j++) {
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float x = sc[j][e] * a.scale_log2;
				if (need_mask) {
					int kp = kv0 + j * 8 + 2 * t4 + (e & 1);
					int qp = e < 2 ? qpos_lo : qpos_hi;
					if (kp > qp || kp >= kv_len)
						x = -INFINITY;
				}
				sc[j][e] = x;
			}
		}

		/* online softmax on rows g (lo) and g+8 (hi); the four lanes of
		 * a quad share a row. Tile 0 holds position 0, which every row
		 * sees, so the running max is finite from then on. */
		float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
		for (int j = 0; j < kPreN / 8; j++) {
			mx_lo = fmaxf(mx_lo, fmaxf(sc[j][0], sc[j][1]));
			mx_hi = fmaxf(mx_hi, fmaxf(sc[j][2], sc[j][3]));
		}
		mx_lo = kern_quad_max(mx_lo);
		mx_hi = kern_quad_max(mx_hi);
		const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
		const float base_lo = mn_lo == -INFINITY ? 0.f : mn_lo;
		const float base_hi = mn_hi == -INFINITY ? 0.f : mn_hi;
		const float al_lo = exp2f(m_lo - base_lo), al_hi = exp2f(m_hi - base_hi);
		m_lo = mn_lo;
		m_hi = mn_hi;
		float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
		for (int j = 0; j < kPreN / 8; j++) {
			sc[j][0] = exp2f(sc[j][0] - base_lo);
			sc[j][1] = exp2f(sc[j][1] - base_lo);
			sc[j][2] = exp2f(sc[j][2] - base_hi);
			sc[j][3] = exp2f(sc[j][3] - base_hi);
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

/* ---- host side ---------------------------------------------------------- */

template <int D, typename E> int set_smem_limits()
{
	CUDA_TRY(cudaFuncSetAttribute(attn_decode_kernel<D, E>,
				      cudaFuncAttributeMaxDynamicSharedMemorySize,
				      (int)dec_shape<D>::smem));
	CUDA_TRY(cudaFuncSetAttribute(attn_prefill_kernel<D, E>,
				      cudaFuncAttributeMaxDynamicSharedMemorySize,
				      (int)pre_shape<D>::smem));
	return 0;
}

template <typename E> int set_smem_limits_all()
{
	int rc;
	if ((rc = set_smem_limits<64, E>()) || (rc = set_smem_limits<80, E>()) ||
	    (rc = set_smem_limits<96, E>()) || (rc = set_smem_limits<128, E>()))
		return rc;
	return 0;
}

} /* namespace */

struct kern_attn_ws {
	int n_heads, head_dim;  /* capacity the partial buffers were sized for */
	long cap_pairs;         /* (sequence, split) pairs they hold */
	int n_sms, smem_per_sm; /* of the device the workspace was created on */
	float *part_o;          /* [cap_pairs, n_heads, head_dim] fp32, unnormalised split outputs */
	float2 *part_ml;        /* [cap_pairs, n_heads] (max, sum of 2^(s - max)) per split */
	int *split_done;        /* [cap_pairs, n_heads] per (sequence, KV head) counters, zero at rest */
};

/* Decode blocks of one launch are meant to fill the GPU once: the split
 * count per sequence is sized so (sequences x KV heads x splits) about
 * matches the blocks resident at once, hence never more pairs than this. */
static const int kMaxDecBlocksPerSm = 4;

extern "C" int kern_attn_ws_create(int max_tokens, int n_heads, int head_dim, int max_ctx,
				   kern_attn_ws **out)
{
	*out = NULL;
	if (max_tokens <= 0 || n_heads <= 0 || head_dim <= 0 || max_ctx <= 0) {
		SL_ERROR("attn", "ws_create: bad sizes (tokens %d, heads %d, head_dim %d, ctx %d)",
			 max_tokens, n_heads, head_dim, max_ctx);
		return SL_EINVAL;
	}
	int dev, rc;
	CUDA_TRY(cudaGetDevice(&dev));
	kern_attn_ws *ws = (kern_attn_ws *)calloc(1, sizeof *ws);
	if (!ws)
		return SL_ENOMEM;
	ws->n_heads = n_heads;
	ws->head_dim = head_dim;
	if (cudaDeviceGetAttribute(&ws->n_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&ws->smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
				   dev) != cudaSuccess) {
		SL_ERROR("attn", "ws_create: cannot query device %d", dev);
		free(ws);
		return SL_EDEVICE;
	}
	long tiles = (max_ctx + kDecTile - 1) / kDecTile;
	long cap = 2L * ws->n_sms * kMaxDecBlocksPerSm;
	if ((long)max_tokens * tiles < cap)
		cap = (long)max_tokens * tiles;
	ws->cap_pairs = cap;
	if ((rc = set_smem_limits_all<__half>()) || (rc = set_smem_limits_all<__nv_bfloat16>()))
		goto fail;
	if (cudaMalloc((void **)&ws->part_o, sizeof(float) * cap * n_heads * head_dim) !=
		    cudaSuccess ||
	    cudaMalloc((void **)&ws->part_ml, sizeof(float2) * cap * n_heads) != cudaSuccess ||
	    cudaMalloc((void **)&ws->split_done, sizeof(int) * cap * n_heads) != cudaSuccess) {
		SL_ERROR("attn", "ws_create: cannot allocate %.1f MiB of split scratch",
			 (sizeof(float) * head_dim + sizeof(float2)) * cap * n_heads / 1048576.0);
		rc = SL_ENOMEM;
		goto fail;
	}
	if (cudaMemset(ws->split_done, 0, sizeof(int) * cap * n_heads) != cudaSuccess) {
		rc = SL_EDEVICE;
		goto fail;
	}
	*out = ws;
	return 0;
fail:
	kern_attn_ws_destroy(ws);
	return rc;
}

extern "C" void kern_attn_ws_destroy(kern_attn_ws *ws)
{
	if (!ws)
		return;
	cudaFree(ws->part_o);
	cudaFree(ws->part_ml);
	cudaFree(ws->split_done);
	free(ws);
}

template <int D, typename E>
static int launch(kern_attn_ws *ws, attn_args a, const kern_paged_batch *b, cudaStream_t st)
{
	if (b->max_q_len > 1) {
		dim3 grid((b->max_q_len + kPreM - 1) / kPreM, a.n_heads, b->n_seqs);
		attn_prefill_kernel<D, E><<<grid, kThreads, pre_shape<D>::smem, st>>>(a);
		CUDA_TRY_LAUNCH();
	}

	/* Decode: split the context until the grid covers the resident blocks
	 * once, at least one tile per split, within the workspace. */
	int per_sm = ws->smem_per_sm / (int)(dec_shape<D>::smem + 1024);
	per_sm = per_sm < 1 ? 1 : per_sm > kMaxDecBlocksPerSm ? kMaxDecBlocksPerSm : per_sm;
	const long target = (long)ws->n_sms * per_sm;
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
	a.chunk = per_split * kDecTile;
	a.n_splits = (tiles + per_split - 1) / per_split;

	dim3 grid(a.n_splits, a.n_kv_heads, b->n_seqs);
	attn_decode_kernel<D, E><<<grid, kThreads, dec_shape<D>::smem, st>>>(a);
	CUDA_TRY_LAUNCH();
	return 0;
}

template <typename E>
static int launch_dim(kern_attn_ws *ws, const attn_args &a, const kern_paged_batch *b,
		      int head_dim, cudaStream_t st)
{
	switch (head_dim) {
	case 64: return launch<64, E>(ws, a, b, st);
	case 80: return launch<80, E>(ws, a, b, st);
	case 96: return launch<96, E>(ws, a, b, st);
	case 128: return launch<128, E>(ws, a, b, st);
	}
	return SL_ENOTSUP;
}

/*
 * Generic path: any even head_dim up to 256, any GQA group, any alignment.
 * CUDA cores, one block per (token, query head), each warp walking every
 * kGenWarps-th context position with an online softmax, lanes splitting
 * head_dim; warps merge through shared memory. It exists so every model
 * runs (the golden test models have head_dim 8 to 32); real Llama shapes
 * take the tensor-core kernels above.
 */
static const int kGenWarps = 4;
static const int kGenMaxD = 256;

template <typename E>
__global__ void __launch_bounds__(kGenWarps * 32)
attn_generic_kernel(attn_args a, int n_seqs, int head_dim, float scale)
{
	const int t = blockIdx.x, h = blockIdx.y, w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int s = -1;
	for (int i = 0; i < n_seqs; i++)
		if (t >= a.q_start[i] && t < a.q_start[i] + a.q_len[i])
			s = i;
	if (s < 0)
		return;
	const int n_ctx = a.kv_len[s] - a.q_len[s] + (t - a.q_start[s]) + 1;
	const int kvh = h / a.group, bt = 1 << a.bt_shift, per = (head_dim + 31) / 32;
	const E *q = (const E *)a.qkv + (long)t * a.q_stride + (long)h * head_dim;
	const int32_t *table = a.block_tables + (long)s * a.max_blocks;
	float qv[kGenMaxD / 32], o[kGenMaxD / 32], m = -INFINITY, l = 0;
	for (int j = 0; j < per; j++) {
		int d = lane + 32 * j;
		qv[j] = d < head_dim ? kern_to_f32(q[d]) * scale : 0.f;
		o[j] = 0.f;
	}
	for (int pos = w; pos < n_ctx; pos += kGenWarps) {
		long slot = (long)table[pos >> a.bt_shift] * bt + (pos & (bt - 1));
		long off = ((slot / bt * a.n_kv_heads + kvh) * bt + slot % bt) * head_dim;
		const E *k = (const E *)a.k_cache + off, *v = (const E *)a.v_cache + off;
		float dot = 0.f;
		for (int j = 0; j < per; j++) {
			int d = lane + 32 * j;
			if (d < head_dim)
				dot += qv[j] * kern_to_f32(k[d]);
		}
		dot = kern_warp_sum(dot);
		float mn = fmaxf(m, dot), corr = __expf(m - mn), p = __expf(dot - mn);
		l = l * corr + p;
		for (int j = 0; j < per; j++) {
			int d = lane + 32 * j;
			o[j] = o[j] * corr + (d < head_dim ? p * kern_to_f32(v[d]) : 0.f);
		}
		m = mn;
	}
	__shared__ float sm[kGenWarps], sl[kGenWarps], so[kGenWarps][kGenMaxD];
	if (lane == 0)
		sm[w] = m, sl[w] = l;
	for (int j = 0; j < per; j++)
		if (lane + 32 * j < head_dim)
			so[w][lane + 32 * j] = o[j];
	__syncthreads();
	float M = -INFINITY, L = 0.f;
	for (int i = 0; i < kGenWarps; i++)
		M = fmaxf(M, sm[i]);
	for (int i = 0; i < kGenWarps; i++)
		L += sm[i] == -INFINITY ? 0.f : sl[i] * __expf(sm[i] - M);
	E *out = (E *)a.out + (long)t * a.n_heads * head_dim + (long)h * head_dim;
	for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
		float acc = 0.f;
		for (int i = 0; i < kGenWarps; i++)
			acc += sm[i] == -INFINITY ? 0.f : so[i][d] * __expf(sm[i] - M);
		out[d] = kern_from_f32<E>(acc / L);
	}
}

template <typename E>
static int launch_generic(const attn_args &a, const kern_paged_batch *b, int head_dim, float scale,
			  cudaStream_t st)
{
	if (head_dim > kGenMaxD) {
		SL_ERROR("attn", "head_dim %d not supported (at most %d)", head_dim, kGenMaxD);
		return SL_ENOTSUP;
	}
	dim3 grid(b->n_tokens, a.n_heads);
	attn_generic_kernel<E><<<grid, kGenWarps * 32, 0, st>>>(a, b->n_seqs, head_dim, scale);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

static int fast_shape(int head_dim, int group)
{
	return (head_dim == 64 || head_dim == 80 || head_dim == 96 || head_dim == 128) &&
	       group <= kMaxGroup;
}

extern "C" int kern_attention_cuda(kern_attn_ws *ws, void *out, const void *qkv, int q_stride,
				   const void *k_cache, const void *v_cache,
				   const kern_paged_batch *b, int n_heads, int n_kv_heads,
				   int head_dim, float scale, sl_dtype dt, void *stream)
{
	if (!ws || !b || !out || !qkv || !k_cache || !v_cache) {
		SL_ERROR("attn", "kern_attention_cuda: NULL argument");
		return SL_EINVAL;
	}
	if (b->n_seqs <= 0 || b->n_tokens <= 0)
		return 0;
	if (dt != SL_DT_F16 && dt != SL_DT_BF16) {
		SL_ERROR("attn", "dtype %s not supported (F16, BF16)", sl_dtype_name(dt));
		return SL_ENOTSUP;
	}
	const int bt = b->block_tokens;
	if (bt <= 0 || (bt & (bt - 1))) {
		SL_ERROR("attn", "block_tokens %d not supported (a power of two)", bt);
		return SL_ENOTSUP;
	}
	if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads) {
		SL_ERROR("attn", "%d query heads do not group over %d KV heads", n_heads, n_kv_heads);
		return SL_EINVAL;
	}
	if (n_heads > ws->n_heads || head_dim > ws->head_dim) {
		SL_ERROR("attn", "workspace sized for %d heads of %d, called with %d of %d",
			 ws->n_heads, ws->head_dim, n_heads, head_dim);
		return SL_EINVAL;
	}
	int fast = fast_shape(head_dim, n_heads / n_kv_heads);
	if (q_stride < n_heads * head_dim ||
	    (fast && (q_stride % 8 || !kern_aligned16(out) || !kern_aligned16(qkv) ||
		      !kern_aligned16(k_cache) || !kern_aligned16(v_cache)))) {
		SL_ERROR("attn", "q_stride %d or a buffer is not 16-byte aligned", q_stride);
		return SL_EINVAL;
	}

	attn_args a = {};
	a.out = out;
	a.qkv = qkv;
	a.q_stride = q_stride;
	a.k_cache = k_cache;
	a.v_cache = v_cache;
	a.q_start = b->q_start;
	a.q_len = b->q_len;
	a.kv_len = b->kv_len;
	a.block_tables = b->block_tables;
	a.max_blocks = b->max_blocks;
	a.bt_shift = __builtin_ctz((unsigned)bt);
	a.n_heads = n_heads;
	a.n_kv_heads = n_kv_heads;
	a.group = n_heads / n_kv_heads;
	a.scale_log2 = scale * kLog2e;
	a.part_o = ws->part_o;
	a.part_ml = ws->part_ml;
	a.split_done = ws->split_done;
	cudaStream_t st = (cudaStream_t)stream;
	if (!fast)
		KERN_DISPATCH_DT(dt, launch_generic, a, b, head_dim, scale, st);
	KERN_DISPATCH_DT(dt, launch_dim, ws, a, b, head_dim, st);
}
