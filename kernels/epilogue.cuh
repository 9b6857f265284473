/*
 * epilogue.cuh — the device side of kernels/epilogue.h, shared by the two
 * decode GEMVs (matmul.cu's gemv_kernel, quant.cu's qgemv_kernel). Both
 * keep a 16-row tile per block and leave each lane four accumulators: rows
 * a and b (i < 2: a), tokens tok0 and tok0 + 1 (i & 1), so one store
 * function serves both. The kind is a template parameter of the kernels
 * (EPI): the plain GEMV compiles as if there were no epilogue (a run-time
 * kind cost it 26 of its 126 registers and 4% of its bandwidth on an H100).
 *
 * ROPE pairs each row with its rotate_half partner in the same tile and
 * does rope.cu's work on the lane's two values (rope.cuh).
 *
 * ADD_NORM's norm is serial work at the end of the grid: one block, one
 * row after another (about a microsecond a row held in registers). The
 * callers fuse it for up to KERN_EPI_NORM_MAX_TOKENS rows, where it beats
 * a kernel of its own; more rows take the unfused pair.
 *
 * The norm's other place is split across the GEMVs around it: the add
 * (ADD) leaves each block's part of the sum of squares (kern_epi_sumsq)
 * and x = residual * the norm's weight, and the next GEMV reads that x
 * as any input, its threads holding the parts (kern_pre_load) until the
 * block's end, where they sum them and scale the block's sums by 1 / rms
 * (kern_pre_part, kern_pre_scale). No kernel, no shared memory beyond a
 * word a warp and token, no wait before the loop.
 */
#ifndef KERN_EPILOGUE_CUH
#define KERN_EPILOGUE_CUH

#include <type_traits>

#include "kernels/cuda_util.cuh"
#include "kernels/epilogue.h"
#include "kernels/rope.cuh"
#include "kernels/xchg.cuh"

/* silu(g) * u, kernels/swiglu.c's formula (expf, not __expf). */
__device__ __forceinline__ float kern_silu_mul(float g, float u)
{
	return g / (1.0f + expf(-g)) * u;
}

#define KERN_EPI_NORM_MAX_TOKENS 2

/* Whether a GEMV of n tokens and `rows` output rows takes epilogue e
 * (else: the unfused pair). */
static inline bool kern_epi_takes(const kern_epi *e, int rows, int n)
{
	if (e->pre_ss && (!kern_pre_fits(n, e->pre_parts) ||
			  !(e->kind == KERN_EPI_SWIGLU || e->kind == KERN_EPI_ROPE)))
		return false;
	switch (e->kind) {
	case KERN_EPI_SWIGLU: return rows % 2 == 0;
	case KERN_EPI_ADD_NORM: return n <= KERN_EPI_NORM_MAX_TOKENS;
	case KERN_EPI_ADD: return e->residual != NULL && (!e->norm_out || e->norm_w);
	case KERN_EPI_ALLREDUCE_ADD: /* the exchange holds 2 tokens of each tile */
		return e->residual != NULL && (!e->norm_out || e->norm_w) && n <= 2 &&
		       e->xchg.tp >= 2 && e->xchg.tp <= KERN_XCHG_MAX_RANKS && e->xchg.rank >= 0 &&
		       e->xchg.rank < e->xchg.tp && e->xchg.epoch &&
		       (rows + 15) / 16 <= KERN_XCHG_MAX_TILES;
	case KERN_EPI_ROPE:
		return e->head_dim > 0 && e->head_dim % 16 == 0 && e->n_heads > 0 &&
		       e->n_kv_heads > 0 && rows == (e->n_heads + 2 * e->n_kv_heads) * e->head_dim;
	}
	return true;
}

/* kern_epi as a kernel argument, with what the GEMV's owner adds. */
struct kern_epi_dev {
	int kind;
	int half;          /* SWIGLU: hidden, the rows of each of gate and up */
	unsigned *counter; /* ADD_NORM: blocks done, back to 0 after each call */
	kern_epi h;        /* the caller's description (kernels/epilogue.h) */
};

static inline kern_epi_dev kern_epi_of(const kern_epi *e, int rows, unsigned *counter)
{
	kern_epi_dev d = {};
	d.kind = e ? e->kind : KERN_EPI_STORE;
	d.half = e && e->kind == KERN_EPI_SWIGLU ? rows / 2 : 0;
	d.counter = counter;
	if (e)
		d.h = *e;
	return d;
}

/* 16-row tiles the GEMV launches: SWIGLU pairs 8 gate rows with their 8
 * up rows, ROPE 8 rows of a head with their rotate_half partners, every
 * other kind takes 16 consecutive rows. */
static inline int kern_epi_tiles(const kern_epi_dev &e, int rows)
{
	return e.kind == KERN_EPI_SWIGLU ? (e.half + 7) / 8 : (rows + 15) / 16;
}

/* Rows a and b of lane group g (0..7) in tile t. */
template <int EPI>
__device__ __forceinline__ void kern_epi_rows(const kern_epi_dev &e, int rows, int t, int g,
					      int *ra, int *rb, bool *ok_a, bool *ok_b)
{
	if constexpr (EPI == KERN_EPI_SWIGLU) {
		*ra = 8 * t + g;
		*rb = *ra + e.half;
		*ok_a = *ok_b = *ra < e.half;
	} else if constexpr (EPI == KERN_EPI_ROPE) {
		const int per_head = e.h.head_dim / 16; /* tiles of 8 pairs */
		const int h = t / per_head;
		*ra = h * e.h.head_dim + (t - h * per_head) * 8 + g;
		*rb = *ra + e.h.head_dim / 2;
		*ok_a = *ok_b = *ra < rows;
	} else {
		*ra = 16 * t + g;
		*rb = *ra + 8;
		*ok_a = *ra < rows;
		*ok_b = *rb < rows;
	}
}

/* ROPE: element i of head h (row ra) and its partner (row rb) for one
 * token, from the product rounded to T as the unfused pair stores it:
 * turned for q and k heads, stored to qkv, and for k and v heads to the
 * cache, as rope.cu's kernel does. */
template <typename T>
__device__ __forceinline__ void kern_epi_rope(const kern_epi_dev &e, T *out, int rows, int ra,
					      int rb, int tok, float va, float vb)
{
	const int hd = e.h.head_dim, half = hd / 2, h = ra / hd, i = ra - h * hd;
	float a = kern_to_f32(kern_from_f32<T>(va)), b = kern_to_f32(kern_from_f32<T>(vb));
	const bool is_v = h >= e.h.n_heads + e.h.n_kv_heads;
	if (!is_v) {
		const float ang = (float)e.h.positions[tok] * e.h.inv_freq[i];
		rope_turn(&a, &b, cosf(ang), sinf(ang));
	}
	out[(size_t)tok * rows + ra] = kern_from_f32<T>(a);
	out[(size_t)tok * rows + rb] = kern_from_f32<T>(b);
	const int slot = e.h.slots[tok];
	if (h < e.h.n_heads || slot < 0)
		return;
	const int kvh = h - e.h.n_heads - (is_v ? e.h.n_kv_heads : 0);
	const long off = kv_offset(slot, kvh, e.h.n_kv_heads, e.h.block_tokens, hd) + i;
	void *cache = is_v ? e.h.v_cache : e.h.k_cache;
	if (e.h.kv_fp8) {
		cache_put<uint8_t, 1>(reinterpret_cast<uint8_t *>(cache) + off, &a);
		cache_put<uint8_t, 1>(reinterpret_cast<uint8_t *>(cache) + off + half, &b);
	} else {
		cache_put<T, 1>(reinterpret_cast<T *>(cache) + off, &a);
		cache_put<T, 1>(reinterpret_cast<T *>(cache) + off + half, &b);
	}
}

/* The add alone's parts of the sum of squares (kern_epi's sumsq): sq[i]
 * holds this lane's squares for token tok0 + i; the lanes of one column
 * c (tokens 2c, 2c + 1) sum theirs in a fixed order and lane c stores
 * them as block blockIdx.x's part. From every lane of the warp. */
__device__ __forceinline__ void kern_epi_sumsq(const kern_epi_dev &e, int n, int tok0,
					       float sq[2])
{
#pragma unroll
	for (int i = 0; i < 2; i++) {
#pragma unroll
		for (int o = 4; o < 32; o <<= 1)
			sq[i] += __shfl_xor_sync(0xffffffffu, sq[i], o);
		if ((threadIdx.x & 31) < 4 && tok0 + i < n)
			e.h.sumsq[(size_t)blockIdx.x * n + tok0 + i] = sq[i];
	}
}

/* ADD: the residual values warp 0's lane will add to (as kern_epi_store's
 * v), and with norm_out the norm weights of rows a and b, loaded after the
 * PDL wait, before the GEMV's loop, so its end does not wait on them.
 * Other kinds and warps: zeros. */
template <typename T, int EPI>
__device__ __forceinline__ void kern_epi_prefetch(const kern_epi_dev &e, int rows, int n, int ra,
						  int rb, bool ok_a, bool ok_b, int tok0, float r[6])
{
	const bool w0 = (EPI == KERN_EPI_ADD || EPI == KERN_EPI_ALLREDUCE_ADD) &&
			(threadIdx.x >> 5) == 0;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int row = i < 2 ? ra : rb, tok = tok0 + (i & 1);
		const bool ok = w0 && (i < 2 ? ok_a : ok_b) && tok < n;
		r[i] = ok ? e.h.residual[(size_t)tok * rows + row] : 0.0f;
	}
	const T *w = reinterpret_cast<const T *>(e.h.norm_w);
	const bool nw = w0 && e.h.norm_out;
	r[4] = nw && ok_a ? kern_to_f32(w[ra]) : 0.0f;
	r[5] = nw && ok_b ? kern_to_f32(w[rb]) : 0.0f;
}

/* v rounded to T, fp16 saturating at +-65504 (kernels/epilogue.h). */
template <typename T> __device__ __forceinline__ T kern_from_f32_sat(float v)
{
	if constexpr (std::is_same<T, __half>::value)
		v = fminf(fmaxf(v, -65504.0f), 65504.0f);
	return kern_from_f32<T>(v);
}

/* A lane's four values v (i < 2: row ra) for tokens tok0 + (i & 1) < n. out:
 * [n, rows] for STORE and ROPE, [n, half] for SWIGLU, unused for ADD_NORM
 * and ADD, which add them to the residual (ADD: to its values res[0..3],
 * from kern_epi_prefetch, and leaves the parts of the sums of squares and
 * norm_out, the residual times res[4..5], the rows' norm weights). */
template <typename T, int EPI>
__device__ __forceinline__ void kern_epi_store(const kern_epi_dev &e, T *out, int rows, int n,
					       int ra, int rb, bool ok_a, bool ok_b, int tok0,
					       const float v[4], const float res[4])
{
	if constexpr (EPI == KERN_EPI_ROPE) {
#pragma unroll
		for (int i = 0; i < 2; i++)
			if (ok_a && tok0 + i < n)
				kern_epi_rope<T>(e, out, rows, ra, rb, tok0 + i, v[i], v[i + 2]);
	} else if constexpr (EPI == KERN_EPI_SWIGLU) {
#pragma unroll
		for (int i = 0; i < 2; i++) {
			const int tok = tok0 + i;
			if (ok_a && tok < n) {
				const float g = kern_to_f32(kern_from_f32<T>(v[i]));
				const float u = kern_to_f32(kern_from_f32<T>(v[i + 2]));
				out[(size_t)tok * e.half + ra] = kern_from_f32<T>(kern_silu_mul(g, u));
			}
		}
	} else {
		float sq[2] = {0, 0};
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int row = i < 2 ? ra : rb, tok = tok0 + (i & 1);
			if (!(i < 2 ? ok_a : ok_b) || tok >= n)
				continue;
			const size_t o = (size_t)tok * rows + row;
			if constexpr (EPI == KERN_EPI_ADD) {
				const float r = res[i] + kern_to_f32(kern_from_f32<T>(v[i]));
				e.h.residual[o] = r;
				sq[i & 1] += r * r;
				if (e.h.norm_out)
					reinterpret_cast<T *>(e.h.norm_out)[o] =
						kern_from_f32_sat<T>(r * res[i < 2 ? 4 : 5]);
			} else if constexpr (EPI == KERN_EPI_ADD_NORM) {
				e.h.residual[o] += kern_to_f32(kern_from_f32<T>(v[i]));
			} else {
				out[o] = kern_from_f32<T>(v[i]);
			}
		}
		if constexpr (EPI == KERN_EPI_ADD)
			if (e.h.sumsq)
				kern_epi_sumsq(e, n, tok0, sq);
	}
}

/* Four normalized values, kernels/rmsnorm.cu's formula: v * inv * w,
 * rounded once to T; w holds four T. */
template <typename T> __device__ __forceinline__ uint2 kern_norm4(float4 v, uint2 w, float inv)
{
	const T *g = reinterpret_cast<const T *>(&w);
	return make_uint2(kern_pack2<T>(v.x * inv * kern_to_f32(g[0]), v.y * inv * kern_to_f32(g[1])),
			  kern_pack2<T>(v.z * inv * kern_to_f32(g[2]), v.w * inv * kern_to_f32(g[3])));
}

/*
 * The input not yet divided by its rms (kern_epi's pre_ss), in three
 * steps of the GEMV that takes it, every thread of its block (KSPLIT
 * warps, 4 or more, each thread holding Q = KERN_PRE_WORDS(KSPLIT) words:
 * Q * 32 * KSPLIT >= KERN_PRE_MAX_PARTS):
 * - kern_pre_load, after the PDL wait: the thread's Q of the n * parts
 *   words of pre_ss, p[q] = word q * blockDim.x + threadIdx.x, held in
 *   registers through the loop (no wait: nothing reads them before the
 *   end). pre_ss is [part, n], so a word's token is its index mod n, the
 *   thread's lane's parity for n = 2.
 * - kern_pre_part, before the block's barrier: each warp's sum per
 *   token (xor shuffles that keep the lanes of a token apart) into
 *   pss[warp][token].
 * - kern_pre_scale, warp 0 after the barrier: the warps' sums in warp
 *   order, 1 / rms per token, and the lane's four sums v (tokens tok0 +
 *   (i & 1)) multiplied by it.
 * An even blockDim.x keeps a word's token the lane's parity for n = 2.
 */
#define KERN_PRE_WORDS(KSPLIT) (KERN_PRE_MAX_PARTS / (32 * (KSPLIT)))

template <int Q = 2>
__device__ __forceinline__ void kern_pre_load(const kern_epi_dev &e, int n, float *p)
{
	const int total = n * e.h.pre_parts;
#pragma unroll
	for (int q = 0; q < Q; q++) {
		const int f = q * blockDim.x + threadIdx.x;
		p[q] = f < total ? e.h.pre_ss[f] : 0.0f;
	}
}

template <int KSPLIT, int Q = 2>
__device__ __forceinline__ void kern_pre_part(int n, const float *p,
					      float (&pss)[KSPLIT][KERN_PRE_MAX_TOKENS])
{
	float v = 0;
#pragma unroll
	for (int q = 0; q < Q; q++)
		v += p[q];
	for (int o = n; o < 32; o <<= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	const int lane = threadIdx.x & 31;
	if (lane < n)
		pss[threadIdx.x >> 5][lane] = v;
}

template <int KSPLIT>
__device__ __forceinline__ void kern_pre_scale(const kern_epi_dev &e, int n, int cols, int tok0,
					       const float (&pss)[KSPLIT][KERN_PRE_MAX_TOKENS],
					       float v[4])
{
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const int tok = tok0 + i;
		if (tok >= n)
			continue;
		float s = 0;
#pragma unroll
		for (int w = 0; w < KSPLIT; w++)
			s += pss[w][tok];
		const float inv = 1.0f / sqrtf(s / (float)cols + e.h.pre_eps);
		v[i] *= inv;
		v[i + 2] *= inv;
	}
}

/* Up to this many float4 of a residual row per thread stay in registers
 * (8192 wide at 256 threads); kern_epi_finish's VECS, for a block of
 * KSPLIT warps: the same 8192 at any block size. */
#define KERN_EPI_NORM_VECS 8
#define KERN_EPI_NORM_VECS_FOR(KSPLIT) (KERN_EPI_NORM_VECS * 8 / (KSPLIT))

/* RMSNorm of residual row tok into norm_out by the whole block, the row in
 * registers: every load issued before the first is used, one round trip.
 * dim % 4 == 0, dim <= 4 * VECS * blockDim.x, res and
 * norm_out rows 8- and 16-byte aligned. Reads go to L2 (__ldcg): other
 * blocks wrote the row. */
template <typename T, int VECS>
__device__ void kern_epi_norm_row_reg(const kern_epi_dev &e, int dim, int tok)
{
	const float4 *x = reinterpret_cast<const float4 *>(e.h.residual + (size_t)tok * dim);
	const uint2 *w = reinterpret_cast<const uint2 *>(e.h.norm_w);
	uint2 *o = reinterpret_cast<uint2 *>(reinterpret_cast<T *>(e.h.norm_out) + (size_t)tok * dim);
	const int nv = dim / 4;
	float4 v[VECS];
	uint2 g[VECS];
	float ss = 0;
#pragma unroll
	for (int r = 0; r < VECS; r++) {
		const int j = threadIdx.x + r * blockDim.x;
		if (j < nv) {
			v[r] = __ldcg(x + j);
			g[r] = w[j];
		}
	}
#pragma unroll
	for (int r = 0; r < VECS; r++)
		if (threadIdx.x + r * blockDim.x < nv)
			ss += v[r].x * v[r].x + v[r].y * v[r].y + v[r].z * v[r].z + v[r].w * v[r].w;
	ss = kern_block_sum(ss);
	const float inv = 1.0f / sqrtf(ss / (float)dim + e.h.eps);
#pragma unroll
	for (int r = 0; r < VECS; r++) {
		const int j = threadIdx.x + r * blockDim.x;
		if (j >= nv)
			continue;
		o[j] = kern_norm4<T>(v[r], g[r], inv);
	}
}

/* The same for any width and alignment, element by element (slow: each
 * thread's loads wait on each other). */
template <typename T>
__device__ void kern_epi_norm_row(const kern_epi_dev &e, int dim, int tok)
{
	const float *x = e.h.residual + (size_t)tok * dim;
	const T *w = reinterpret_cast<const T *>(e.h.norm_w);
	T *o = reinterpret_cast<T *>(e.h.norm_out) + (size_t)tok * dim;
	float ss = 0;
#pragma unroll 8
	for (int j = threadIdx.x; j < dim; j += blockDim.x) {
		const float v = __ldcg(x + j);
		ss += v * v;
	}
	ss = kern_block_sum(ss);
	const float inv = 1.0f / sqrtf(ss / (float)dim + e.h.eps);
#pragma unroll 8
	for (int j = threadIdx.x; j < dim; j += blockDim.x)
		o[j] = kern_from_f32<T>(__ldcg(x + j) * inv * kern_to_f32(w[j]));
}

/*
 * ADD_NORM, after the block's stores, from every thread of the block: the
 * last block to finish (a counter in global memory, the threadfence
 * reduction pattern) normalises the n residual rows, then resets the
 * counter for the next call. Under PDL the next kernel waits for this
 * grid to complete, last block included.
 */
template <typename T, int VECS = KERN_EPI_NORM_VECS>
__device__ void kern_epi_finish(const kern_epi_dev &e, int dim, int n)
{
	__shared__ unsigned last;
	__threadfence(); /* this thread's residual stores, before the count */
	__syncthreads();
	if (threadIdx.x == 0)
		last = atomicAdd(e.counter, 1u) == gridDim.x * gridDim.y - 1;
	__syncthreads();
	if (!last)
		return;
	__threadfence(); /* the other blocks' stores, before the reads */
	const bool reg = dim % 4 == 0 && dim <= 4 * VECS * (int)blockDim.x &&
			 ((uintptr_t)e.h.residual & 15) == 0 && ((uintptr_t)e.h.norm_w & 7) == 0 &&
			 ((uintptr_t)e.h.norm_out & 7) == 0;
	if (e.h.norm_w)
		for (int t = 0; t < n; t++) {
			if (reg)
				kern_epi_norm_row_reg<T, VECS>(e, dim, t);
			else
				kern_epi_norm_row<T>(e, dim, t);
		}
	if (threadIdx.x == 0)
		*e.counter = 0;
}

#endif
