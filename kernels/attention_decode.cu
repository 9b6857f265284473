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
 * pipeline; each warp converts its 16 rows of a tile to E in shared memory
 * before its MMAs. Launched by kern_attention_cuda (attention.cu).
 */
#include "attention_common.cuh"

namespace {

constexpr int kDecStages = 3;   /* cp.async pipeline depth (tiles in flight + 1) */
constexpr int kMaxSplits = 256; /* per sequence; bounds the merge's shared memory */

/* FP8: the stages hold raw E4M3 tiles ([K|V][kDecTile][D] bytes each) and
 * one E tile pair takes the converted rows (each warp converts and reads
 * only its own 16). */
template <int D, bool FP8 = false> struct dec_shape {
	/* +8 elements (16 bytes) per row keeps ldmatrix conflict-free, as in prefill */
	static constexpr int stride = D + 8;
	static constexpr int nc = D / 8;
	static constexpr size_t q_elems = (size_t)16 * stride;
	static constexpr size_t tile_elems = (size_t)kDecTile * stride;
	static constexpr size_t raw_bytes = (size_t)kDecTile * D; /* one fp8 K or V tile */
	/* bytes after q: the stages (and, for FP8, the E tile pair) */
	static constexpr size_t kv_bytes = FP8 ? kDecStages * 2 * raw_bytes + 2 * tile_elems * 2
					       : kDecStages * 2 /* K, V */ * tile_elems * 2;
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
template <int D, typename E, bool FP8>
__global__ void __launch_bounds__(kThreads) attn_decode_kernel(attn_args a)
{
	using S = dec_shape<D, FP8>;
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
	E *q_s = reinterpret_cast<E *>(smem); /* [16][stride], rows >= G zero */
	E *kv_s = q_s + S::q_elems;           /* [stage][K|V][kDecTile][stride] */
	/* FP8: raw [stage][K|V][kDecTile][D] bytes, then the E pair [K|V][kDecTile][stride] */
	uint8_t *raw_s = reinterpret_cast<uint8_t *>(kv_s);
	E *conv_s = reinterpret_cast<E *>(raw_s + kDecStages * 2 * S::raw_bytes);
	/* rows [t0, t0 + rows) of tile slot `st`, from row `r0` of the slot on */
	auto load_rows = [&](int st, int r0, int t0, int rows, int skip) {
		if constexpr (FP8) {
			uint8_t *kr = raw_s + (size_t)st * 2 * S::raw_bytes + (size_t)r0 * D;
			load_kv_tile_fp8<D>(a, table, kvh, t0, end, rows, kr, kr + S::raw_bytes, skip);
		} else {
			E *ks = kv_s + (size_t)st * 2 * S::tile_elems + (size_t)r0 * S::stride;
			load_kv_tile<D, E>(a, table, kvh, t0, end, rows, S::stride, ks,
					   ks + S::tile_elems, skip);
		}
	};
	auto load_tile = [&](int st, int t0) { load_rows(st, 0, t0, kDecTile, -1); };

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
				load_rows(st, 0, begin + st * kDecTile, kDecTile, fresh);
			cp_async_commit(); /* possibly empty: keeps one group per tile */
		}
	kern_pdl_start();
	/* the query and the newest row with plain loads, outside the groups;
	 * the barrier before tile 0 publishes them */
	const uint4 *qrow = reinterpret_cast<const uint4 *>((const E *)a.qkv + tok * a.q_stride +
							    (long)kvh * G * D);
	for (int i = tid; i < 16 * S::nc; i += kThreads) {
		const int r = i / S::nc, c = i - r * S::nc;
		*reinterpret_cast<uint4 *>(q_s + r * S::stride + c * 8) =
			r < G ? qrow[r * S::nc + c] : make_uint4(0, 0, 0, 0);
	}
	{
		const int ft = (fresh - begin) / kDecTile; /* its tile, if this split has it */
		const int fr = fresh - begin - ft * kDecTile;
		if (fresh < end && ft < pro) {
			if constexpr (FP8) {
				uint8_t *kr = raw_s + (size_t)ft * 2 * S::raw_bytes + (size_t)fr * D;
				copy_kv_row<D>(a, table, kvh, fresh, kr, kr + S::raw_bytes);
			} else {
				E *ks = kv_s + (size_t)ft * 2 * S::tile_elems + (size_t)fr * S::stride;
				copy_kv_row<D * 2>(a, table, kvh, fresh, ks, ks + S::tile_elems);
			}
		}
	}

	uint32_t qf[D / 16][4];
	float o[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
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
				load_tile(nt % kDecStages, begin + nt * kDecTile);
			cp_async_commit();
		}
		if (tile == 0) {
#pragma unroll
			for (int kk = 0; kk < D / 16; kk++)
				kern_ldmatrix_x4(qf[kk], q_s + ((lm & 1) * 8 + lr) * S::stride +
								 kk * 16 + (lm >> 1) * 8);
		}
		const E *ks, *vs;
		if constexpr (FP8) {
			/* this warp's 16 rows only: no other warp reads them */
			const uint8_t *kr = raw_s + (size_t)(tile % kDecStages) * 2 * S::raw_bytes;
			__syncwarp(); /* done reading the previous tile's rows */
			convert_kv_rows<D, E>(kr, kr + S::raw_bytes, conv_s, conv_s + S::tile_elems,
					      warp * 16, 16, S::stride, lane, 32);
			__syncwarp();
			ks = conv_s + warp * 16 * S::stride;
		} else {
			ks = kv_s + (size_t)(tile % kDecStages) * 2 * S::tile_elems + warp * 16 * S::stride;
		}
		vs = ks + S::tile_elems;

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
		/* a warp whose positions all lie past the end keeps m = -inf */
		float al;
		const float base = softmax_step(m, mx, al);
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

template <int D, typename E, bool FP8>
int decode_launch(const kern_attn_ws *ws, attn_args a, const kern_paged_batch *b, cudaStream_t st)
{
	/* Split the context until the grid covers the resident blocks
	 * once, at least one tile per split, within the workspace. */
	int per_sm = ws->smem_per_sm / (int)(dec_shape<D, FP8>::smem + 1024);
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
	a.n_splits = (tiles + per_split - 1) / per_split;
	a.deep = base * a.n_splits <= target;

	dim3 grid(a.n_splits, a.n_kv_heads, b->n_seqs);
	return kern_launch_small("attn_decode", st, attn_decode_kernel<D, E, FP8>, grid,
				 dim3(kThreads), dec_shape<D, FP8>::smem, a);
}

template <typename E>
int decode_dim(const kern_attn_ws *ws, const attn_args &a, const kern_paged_batch *b, int head_dim,
	       cudaStream_t st)
{
	switch (head_dim) {
#define CASE(D)                                                                   \
	case D:                                                                   \
		return a.kv_fp8 ? decode_launch<D, E, true>(ws, a, b, st)         \
				: decode_launch<D, E, false>(ws, a, b, st);
	KERN_ATTN_MMA_HEAD_DIMS(CASE)
#undef CASE
	}
	return SL_ENOTSUP;
}

/* Each head_dim's kernel may use more than the default 48 KiB of shared
 * memory only once opted in. */
template <typename E> int set_smem_limits()
{
#define SET(D)                                                                      \
	CUDA_TRY(cudaFuncSetAttribute(attn_decode_kernel<D, E, false>,              \
				      cudaFuncAttributeMaxDynamicSharedMemorySize,  \
				      (int)dec_shape<D>::smem));                    \
	CUDA_TRY(cudaFuncSetAttribute(attn_decode_kernel<D, E, true>,               \
				      cudaFuncAttributeMaxDynamicSharedMemorySize,  \
				      (int)dec_shape<D, true>::smem));
	KERN_ATTN_MMA_HEAD_DIMS(SET)
#undef SET
	return 0;
}

} /* namespace */

int attn_decode_init()
{
	int rc;
	if ((rc = set_smem_limits<__half>()) || (rc = set_smem_limits<__nv_bfloat16>()))
		return rc;
	return 0;
}

int attn_decode_launch(const kern_attn_ws *ws, attn_args a, const kern_paged_batch *b,
		       int head_dim, sl_dtype dt, cudaStream_t st)
{
	KERN_DISPATCH_DT(dt, decode_dim, ws, a, b, head_dim, st);
}
