/*
 * attention_wgmma.cu — prefill attention on Hopper's warpgroup MMA
 * (wgmma, sm_90a): the same causal flash attention as attention_prefill.cu
 * (same arguments, same online softmax in base 2, P rounded to the dtype
 * before P V), for head_dim 128. The mma.sync kernel stays for the other
 * head sizes and other GPUs (attn_wgmma_takes).
 *
 * A block takes 128 query rows of one head with two warpgroups of 64 rows
 * each; tiles of 128 cache positions are gathered from the paged cache
 * with cp.async (each thread reading its rows' block-table entries before
 * any copy) into shared memory in the 128-byte swizzle wgmma reads
 * (wgmma.cuh). Per tile and warpgroup: S = Q K^T is 8 m64n128k16 MMAs
 * with Q and K in shared memory; the online softmax runs on S in
 * registers (the four lanes of a quad share a row, as in the mma.sync
 * kernel); O += P V is 8 more with P from registers (the accumulator
 * converted pairwise) and V read transposed. P V of one tile runs on the
 * tensor cores while the softmax of the next runs on the others
 * (attn_wgmma_kernel). Blocks are ordered heads fastest, the query tiles
 * that see the most context first. One block an SM (225 KiB of shared
 * memory: Q and three K/V pairs; 256 threads of up to 255 registers).
 *
 * An fp8 cache (kv_fp8): the tiles are gathered as raw E4M3 rows (128
 * bytes each, two stages) and the block converts each into a swizzled
 * K/V pair of E (two pairs) before the MMAs, exactly (E4M3 values are
 * exact in fp16 and bf16), so the products are those of a cache in E
 * holding the same values.
 */
#include "kernels/attention_common.cuh"
#include "kernels/wgmma.cuh"

namespace {

constexpr int kWgD = 128;               /* head_dim */
constexpr int kWgM = 128;               /* query rows a block: two warpgroups */
constexpr int kWgN = 128;               /* cache positions a tile */
constexpr int kWgThreads = 256;
constexpr uint32_t kWgTile = kWgN * kWgD * 2; /* bytes of a K or V tile: two 16 KiB slabs */
constexpr uint32_t kWgQ = kWgM * kWgD * 2;
constexpr uint32_t kWgSlab = kWgN * 128;      /* = kWgM * 128 */
constexpr uint32_t kWgRaw = kWgN * kWgD;        /* bytes of a raw fp8 K or V tile */
/* Q, then kWgPairs K/V pairs of E; FP8: then two raw stages. + alignment
 * slack. 230,400 bytes either way, under the 227 KiB an H100/H200 block
 * may have. */
template <bool FP8> constexpr int kWgPairs() { return FP8 ? 2 : 3; }
template <bool FP8> constexpr size_t wg_smem()
{
	return 1024 + kWgQ + kWgPairs<FP8>() * 2 * kWgTile + (FP8 ? 2 * 2 * kWgRaw : 0);
}

/* Raw fp8 rows [0, kWgN) of a K and a V stage into the swizzled E pair,
 * by the whole block; thread tid converts 8-code chunks tid, tid + 256 ... */
template <typename E>
__device__ __forceinline__ void wg_convert(const unsigned char *kr, const unsigned char *vr,
					   unsigned char *ke, unsigned char *ve)
{
#pragma unroll
	for (int k = 0; k < 2 * kWgN * 16 / kWgThreads; k++) {
		const int i = threadIdx.x + k * kWgThreads, v = i >= kWgN * 16, j = i & (kWgN * 16 - 1);
		const int r = j >> 4, c = j & 15;
		const uint2 raw = *reinterpret_cast<const uint2 *>((v ? vr : kr) + r * kWgD + c * 8);
		*reinterpret_cast<uint4 *>((v ? ve : ke) + kern_sw128_off(r, c, kWgN)) =
			fp8x8_to<E>(raw);
	}
}

/* Cache rows [t0, t0 + kWgN) of one KV head into the swizzled K and V
 * tiles; thread tid copies chunk tid % 16 of rows tid / 16 + 16 k. Rows
 * at or past `end` are zero-filled (P is 0 there, and 0 * garbage could
 * be NaN) and their block-table entries never read. */
__device__ __forceinline__ void wg_load_kv(const attn_args &a, const int32_t *table, int kvh,
					   int t0, int end, unsigned char *ks, unsigned char *vs)
{
	constexpr int per = kWgN * 16 / kWgThreads;
	const int c = threadIdx.x & 15, r0 = threadIdx.x >> 4, mask = (1 << a.bt_shift) - 1;
	int page[per];
#pragma unroll
	for (int k = 0; k < per; k++) {
		const int pos = t0 + r0 + 16 * k;
		page[k] = pos < end ? table[pos >> a.bt_shift] : 0;
	}
#pragma unroll
	for (int k = 0; k < per; k++) {
		const int r = r0 + 16 * k, pos = t0 + r;
		const bool ok = pos < end;
		const long row = (((long)page[k] * a.n_kv_heads + kvh) << a.bt_shift) + (pos & mask);
		const long off = ok ? row * (kWgD * 2) + c * 16 : 0;
		const uint32_t dst = kern_sw128_off(r, c, kWgN);
		cp_async16(ks + dst, (const unsigned char *)a.k_cache + off, ok);
		cp_async16(vs + dst, (const unsigned char *)a.v_cache + off, ok);
	}
}

/* The block's query rows (rows past `rows` zero-filled) into the swizzled Q tile. */
template <typename E>
__device__ __forceinline__ void wg_load_q(const attn_args &a, long tok0, int h, int rows,
					  unsigned char *qs)
{
	const int c = threadIdx.x & 15, r0 = threadIdx.x >> 4;
#pragma unroll
	for (int k = 0; k < kWgM * 16 / kWgThreads; k++) {
		const int r = r0 + 16 * k;
		const bool ok = r < rows;
		const E *src = (const E *)a.qkv + (ok ? (tok0 + r) * a.q_stride + (long)h * kWgD + c * 8 : 0);
		cp_async16(qs + kern_sw128_off(r, c, kWgM), src, ok);
	}
}

/* Causal mask on the raw scores of rows qlo and qlo + 8 (this lane's). */
__device__ __forceinline__ void wg_mask(float (&s)[64], int kv0, int t4, int qlo, int kv_len)
{
#pragma unroll
	for (int j = 0; j < kWgN / 8; j++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int kp = kv0 + j * 8 + 2 * t4 + (e & 1);
			if (kp > qlo + (e < 2 ? 0 : 8) || kp >= kv_len)
				s[4 * j + e] = -INFINITY;
		}
}

/* The online-softmax step on this lane's two rows: S becomes P (as A
 * fragments of E, p[kt] for cache positions 16 kt ..), the running sums
 * are rescaled, and al says by what O must be (the caller does that once
 * the previous tile's P V has landed in O). Tile 0 holds position 0,
 * which every row sees, so the running max is finite from then on. */
template <typename E>
__device__ __forceinline__ void wg_softmax(float (&s)[64], uint32_t (&p)[8][4], float sl,
					   float (&m)[2], float (&l)[2], float (&al)[2])
{
	float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
	for (int j = 0; j < kWgN / 8; j++) {
		mx[0] = fmaxf(mx[0], fmaxf(s[4 * j], s[4 * j + 1]));
		mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
	}
	float nb[2], sum[2] = {0.f, 0.f};
#pragma unroll
	for (int i = 0; i < 2; i++)
		nb[i] = -softmax_step<true>(m[i], kern_quad_max(mx[i]) * sl, al[i]);
#pragma unroll
	for (int j = 0; j < kWgN / 8; j++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			s[4 * j + e] = exp2_ftz(fmaf(s[4 * j + e], sl, nb[e >> 1]));
			sum[e >> 1] += s[4 * j + e];
		}
#pragma unroll
	for (int i = 0; i < 2; i++)
		l[i] = l[i] * al[i] + sum[i]; /* per-lane partial; quad-reduced at the end */
#pragma unroll
	for (int kt = 0; kt < kWgN / 16; kt++) {
		const float *lo = s + 8 * kt, *hi = lo + 4;
		p[kt][0] = kern_pack2<E>(lo[0], lo[1]);
		p[kt][1] = kern_pack2<E>(lo[2], lo[3]);
		p[kt][2] = kern_pack2<E>(hi[0], hi[1]);
		p[kt][3] = kern_pack2<E>(hi[2], hi[3]);
	}
}

/* grid (n_heads, ceil(max_q_len / kWgM), n_seqs), kWgThreads threads.
 * Warpgroup wg owns query rows 64 wg .. 64 wg + 63 of the block's.
 *
 * Per tile t and warpgroup (FlashAttention-3's intra-warpgroup overlap):
 * S_t = Q K_t^T and O += P_{t-1} V_{t-1} are issued back to back; once S_t
 * has landed its softmax runs while P_{t-1} V_{t-1} is still on the tensor
 * cores; then O is rescaled for tile t's max. The last tile's P V follows
 * the loop. So a tile's V is read one iteration after its K: three stages
 * of K/V pairs (tiles t - 1, t, t + 1); FP8: two converted pairs and two
 * raw stages. Tile t + 1 is requested at the top of iteration t, after the
 * barrier that says every warpgroup is done with tile t - 2. */
template <typename E, bool FP8>
__global__ void __launch_bounds__(kWgThreads, 1) attn_wgmma_kernel(attn_args a)
{
#ifdef KERN_HAVE_WGMMA
	pre_tile pt;
	if (!pre_tile_of(a, kWgM, pt))
		return;
	const int h = pt.h, kv_len = pt.kv_len, rows = pt.rows, kvh = pt.kvh;
	const long tok0 = pt.tok0;
	const int32_t *table = pt.table;
	const int n_tiles = (pt.past + pt.row0 + rows - 1) / kWgN + 1;
	const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
	const int g = lane >> 2, t4 = lane & 3;
	const int wg_first = pt.past + pt.row0 + 64 * wg; /* this warpgroup's first query position */

	extern __shared__ unsigned char smem_raw[];
	unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
	/* kv: [pair][K|V] of E, kWgPairs<FP8> pairs; FP8: then raw [stage][K|V] */
	unsigned char *q_s = smem, *kv_s = smem + kWgQ;
	unsigned char *raw_s = kv_s + kWgPairs<FP8>() * 2 * kWgTile;
	const uint32_t q_a = (uint32_t)__cvta_generic_to_shared(q_s);
	const uint32_t kv_a = (uint32_t)__cvta_generic_to_shared(kv_s);
	auto load_tile = [&](int t) {
		if constexpr (FP8) {
			unsigned char *kr = raw_s + (t & 1) * 2 * kWgRaw;
			load_kv_rows<kWgD, kWgN, kWgThreads, kWgD>(a, table, kvh, t * kWgN, kv_len, kr,
								   kr + kWgRaw);
		} else {
			unsigned char *ks = kv_s + (t % kWgPairs<FP8>()) * 2 * kWgTile;
			wg_load_kv(a, table, kvh, t * kWgN, kv_len, ks, ks + kWgTile);
		}
	};
	auto pair_a = [&](int t) { return kv_a + (t % kWgPairs<FP8>()) * 2 * kWgTile; };

	wg_load_q<E>(a, tok0, h, rows, q_s);
	load_tile(0);
	cp_async_commit();

	float o[64];
#pragma unroll
	for (int i = 0; i < 64; i++)
		o[i] = 0.f;
	float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
	uint32_t p[8][4], pn[8][4]; /* P of the tile whose P V is in flight, and the next */
	const int qlo = wg_first + warp * 16 + g;

	/* Tile t's copies landed and published (FP8: converted), tile t + 1
	 * requested: the barrier first says every warpgroup is done with tile
	 * t - 2, whose pair (FP8: converted pair) tile t + 1 (t) takes. */
	auto sync_tile = [&](int t) {
		cp_async_wait<0>();
		kern_fence_proxy_async(); /* this thread's Q and K/V copies, for wgmma */
		__syncthreads();
		if constexpr (FP8) {
			const unsigned char *kr = raw_s + (t & 1) * 2 * kWgRaw;
			unsigned char *ke = kv_s + (t % kWgPairs<FP8>()) * 2 * kWgTile;
			wg_convert<E>(kr, kr + kWgRaw, ke, ke + kWgTile);
			kern_fence_proxy_async();
		}
		if (t + 1 < n_tiles)
			load_tile(t + 1);
		cp_async_commit();
		if constexpr (FP8)
			__syncthreads();
	};
	auto issue_s = [&](int t, float(&sc)[64]) {
		const uint32_t k_a = pair_a(t);
#pragma unroll
		for (int ks = 0; ks < kWgD / 16; ks++) {
			const uint32_t koff = (ks >> 2) * kWgSlab + (ks & 3) * 32;
			kern_wgmma_ss_n128<E>(sc, kern_wgmma_desc(q_a + koff + wg * 64 * 128, 16, 1024),
					      kern_wgmma_desc(k_a + koff, 16, 1024), ks > 0);
		}
		kern_wgmma_commit();
	};
	auto issue_pv = [&](int t) {
		const uint32_t v_a = pair_a(t) + kWgTile;
#pragma unroll
		for (int kt = 0; kt < kWgN / 16; kt++)
			kern_wgmma_rs_n128_tb<E>(o, p[kt],
						 kern_wgmma_desc(v_a + kt * 16 * 128, kWgSlab, 1024));
		kern_wgmma_commit();
	};
	/* S landed: mask, softmax into pn, al for O */
	auto softmax = [&](int t, float(&sc)[64], float(&al)[2]) {
		kern_wgmma_pin(sc);
		const int kv0 = t * kWgN;
		if (kv0 + kWgN - 1 > wg_first || kv0 + kWgN > kv_len)
			wg_mask(sc, kv0, t4, qlo, kv_len);
		wg_softmax<E>(sc, pn, a.scale_log2, m, l, al);
	};
	auto rescale = [&](const float(&al)[2]) {
		kern_wgmma_pin(o);
#pragma unroll
		for (int kt = 0; kt < kWgN / 16; kt++)
			kern_wgmma_pin(p[kt]); /* the P V that read p has landed */
#pragma unroll
		for (int j = 0; j < kWgD / 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				o[4 * j + e] *= al[e >> 1];
#pragma unroll
		for (int kt = 0; kt < kWgN / 16; kt++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				p[kt][r] = pn[kt][r];
	};
	auto fence_regs = [&]() {
		kern_wgmma_pin(o);
#pragma unroll
		for (int kt = 0; kt < kWgN / 16; kt++)
			kern_wgmma_pin(p[kt]);
		kern_wgmma_fence();
	};

	/* Both warpgroups take every tile of the block, so the MMAs are issued
	 * on paths the compiler sees as uniform (ptxas serializes wgmma behind
	 * divergent branches); a tile past a warpgroup's rows is all masked. */
	{
		float sc[64], al[2];
		sync_tile(0);
		fence_regs();
		issue_s(0, sc);
		kern_wgmma_wait<0>();
		softmax(0, sc, al);
		rescale(al);
	}
	for (int tile = 1; tile < n_tiles; tile++) {
		float sc[64], al[2];
		sync_tile(tile);
		fence_regs();
		issue_s(tile, sc);
		issue_pv(tile - 1);
		kern_wgmma_wait<1>();
		softmax(tile, sc, al);
		kern_wgmma_wait<0>();
		rescale(al);
	}
	fence_regs();
	issue_pv(n_tiles - 1);
	kern_wgmma_wait<0>();
	kern_wgmma_pin(o);
	if (64 * wg >= rows)
		return;

	const int r_lo = 64 * wg + warp * 16 + g, r_hi = r_lo + 8;
	const float inv_lo = 1.f / kern_quad_sum(l[0]), inv_hi = 1.f / kern_quad_sum(l[1]);
	const long ostride = (long)a.n_heads * kWgD;
	E *out_lo = (E *)a.out + (tok0 + r_lo) * ostride + (long)h * kWgD + 2 * t4;
	E *out_hi = (E *)a.out + (tok0 + r_hi) * ostride + (long)h * kWgD + 2 * t4;
#pragma unroll
	for (int j = 0; j < kWgD / 8; j++) {
		if (r_lo < rows)
			*reinterpret_cast<uint32_t *>(out_lo + j * 8) =
				kern_pack2<E>(o[4 * j] * inv_lo, o[4 * j + 1] * inv_lo);
		if (r_hi < rows)
			*reinterpret_cast<uint32_t *>(out_hi + j * 8) =
				kern_pack2<E>(o[4 * j + 2] * inv_hi, o[4 * j + 3] * inv_hi);
	}
#endif
}

template <typename E> int wg_launch(const attn_args &a, const kern_paged_batch *b, cudaStream_t st)
{
	dim3 grid(a.n_heads, (b->max_q_len + kWgM - 1) / kWgM, b->n_seqs);
	if (a.kv_fp8)
		attn_wgmma_kernel<E, true><<<grid, kWgThreads, wg_smem<true>(), st>>>(a);
	else
		attn_wgmma_kernel<E, false><<<grid, kWgThreads, wg_smem<false>(), st>>>(a);
	CUDA_TRY_LAUNCH();
	return 0;
}

template <typename E, bool FP8> int wg_set_smem()
{
	CUDA_TRY(cudaFuncSetAttribute(attn_wgmma_kernel<E, FP8>,
				      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wg_smem<FP8>()));
	return 0;
}

} /* namespace */

int attn_wgmma_init(int *usable)
{
	*usable = 0;
	if (!kern_wgmma_usable(attn_wgmma_kernel<__half, false>))
		return 0;
	int rc;
	if ((rc = wg_set_smem<__half, false>()) || (rc = wg_set_smem<__half, true>()) ||
	    (rc = wg_set_smem<__nv_bfloat16, false>()) || (rc = wg_set_smem<__nv_bfloat16, true>()))
		return rc;
	*usable = 1;
	return 0;
}

bool attn_wgmma_takes(const attn_args &a, int head_dim)
{
	return head_dim == kWgD;
}

int attn_wgmma_launch(const attn_args &a, const kern_paged_batch *b, sl_dtype dt,
		      cudaStream_t st)
{
	if (dt == SL_DT_BF16)
		return wg_launch<__nv_bfloat16>(a, b, st);
	return wg_launch<__half>(a, b, st);
}
