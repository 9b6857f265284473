/*
 * attention_common.cuh — what the attention kernels share, private to
 * kernels/attention*.cu: the launch arguments (attn_args), the workspace
 * (kern_attn_ws), the block shape, the paged K/V tile loader, the
 * online-softmax step, and each kernel file's host entry. Tensor-core
 * instructions are in mma.cuh; reductions, conversions and cp.async
 * copies in cuda_util.cuh.
 *
 * Files: attention.cu (kern_attention_cuda: checks, dispatch, workspace),
 * attention_decode.cu (q_len == 1, split-context), attention_prefill.cu
 * (q_len > 1, tiled), attention_generic.cu (the shapes the tensor-core
 * kernels do not take).
 */
#ifndef KERN_ATTENTION_COMMON_CUH
#define KERN_ATTENTION_COMMON_CUH

#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/attention.h"
#include "kernels/cuda_util.cuh"
#include "kernels/mma.cuh"

constexpr int kThreads = 128;   /* decode and prefill: 4 warps */
constexpr int kDecTile = 64;    /* decode: cache positions per shared-memory tile */
/* query heads per KV head in decode: rows 0-7 of its MMAs */
constexpr int kMaxGroup = KERN_ATTN_MMA_MAX_GROUP;

/* Decode blocks of one launch are meant to fill the GPU once: the split
 * count per sequence is sized so (sequences x KV heads x splits) about
 * matches the blocks resident at once, hence never more pairs than this. */
constexpr int kMaxDecBlocksPerSm = 4;

struct kern_attn_ws {
	int n_heads, head_dim;  /* capacity the partial buffers were sized for */
	long cap_pairs;         /* (sequence, split) pairs they hold */
	int n_sms, smem_per_sm; /* of the device the workspace was created on */
	float *part_o;          /* [cap_pairs, n_heads, head_dim] fp32, unnormalised split outputs */
	float2 *part_ml;        /* [cap_pairs, n_heads] (max, sum of 2^(s - max)) per split */
	int *split_done;        /* [cap_pairs, n_heads] per (sequence, KV head) counters, zero at rest */
	int fp8_smem;           /* decode over an fp8 cache: convert tiles in shared memory
				 * (kern_attn_ws_set_fp8_smem) */
	int wgmma_usable;       /* the wgmma prefill kernel runs on this device and build */
	int wgmma;              /* and is chosen (kern_attn_ws_set_prefill_wgmma) */
};

/* Everything a launch needs; device pointers except where noted. */
struct attn_args {
	void *out;                  /* [n_tokens, n_heads * D] */
	const void *qkv;            /* rows of q_stride elements, q first */
	long q_stride;
	const void *k_cache, *v_cache;  /* [blocks][n_kv_heads][block_tokens][D] of E, or of
					 * fp8 E4M3 codes (kv_fp8) */
	int kv_fp8;
	const int32_t *q_start, *q_len, *kv_len, *block_tables;
	int max_blocks, bt_shift;   /* block_tokens = 1 << bt_shift */
	int n_heads, n_kv_heads, group;
	float scale_log2;           /* scale * log2(e) */
	int n_splits;               /* decode: splits per sequence (each divides its own context) */
	float *part_o;              /* [n_seqs * n_splits, n_heads, D] fp32, unnormalised */
	float2 *part_ml;            /* [n_seqs * n_splits, n_heads] (max, sum), base 2 */
	int *split_done;            /* [n_seqs, n_kv_heads] splits finished; zero between launches */
	int deep;                   /* decode: every block resident at once (one wave): the
				     * first copy groups take all kDecStages tiles */
};

/* The query tile a prefill block takes (attention_prefill.cu,
 * attention_wgmma.cu): grid (heads, query tiles of m rows, sequences),
 * blocks in index order, x fastest, so every head's last query tiles,
 * which see the most context, go first and the short ones fill the tail
 * of the launch. */
struct pre_tile {
	int h, s, kvh;
	int kv_len, past; /* the sequence's context, and what precedes its new tokens */
	int row0, rows;   /* the tile's first new token and how many it has */
	long tok0;        /* row0's token in the batch */
	const int32_t *table;
};

/* False when the block has nothing to do: a single-token sequence (the
 * decode kernel's) or a tile past the sequence's new tokens. */
__device__ __forceinline__ bool pre_tile_of(const attn_args &a, int m, pre_tile &t)
{
	const int qt = gridDim.y - 1 - blockIdx.y;
	t.h = blockIdx.x;
	t.s = blockIdx.z;
	const int q_len = a.q_len[t.s];
	if (q_len <= 1 || qt * m >= q_len)
		return false;
	t.kv_len = a.kv_len[t.s];
	t.past = t.kv_len - q_len;
	t.row0 = qt * m;
	t.rows = min(m, q_len - t.row0);
	t.tok0 = (long)a.q_start[t.s] + t.row0;
	t.kvh = t.h / a.group;
	t.table = a.block_tables + (long)t.s * a.max_blocks;
	return true;
}

/* The cache row of position `pos` of KV head kvh (kernels/paged.h): its
 * page from the block table, then the row within the page. */
__device__ __forceinline__ long kv_row(const attn_args &a, const int32_t *table, int kvh, int pos)
{
	const long page = table[pos >> a.bt_shift];
	return ((page * a.n_kv_heads + kvh) << a.bt_shift) + (pos & ((1 << a.bt_shift) - 1));
}

/* Cache rows [t0, t0 + ROWS) of one KV head, RB bytes each (D elements of
 * E, or D fp8 codes), K to ks and V to vs at DS bytes a shared row, by all
 * NT threads of the block: each reads the block-table entries of all its
 * rows before it issues a copy, so their latencies overlap. (A loop that
 * read each row's entry just before its copy waited for every entry in
 * turn: on an H100 that wait was 38% of the prefill kernel's stall
 * samples, and on an H200 the decode kernel's hottest stall.) Rows at or
 * past `end` are zero-filled and their entries never read; row `skip`
 * is left alone entirely (decode copies it later, see there). */
template <int RB, int ROWS, int NT, int DS>
__device__ __forceinline__ void load_kv_rows(const attn_args &a, const int32_t *table, int kvh,
					     int t0, int end, unsigned char *ks, unsigned char *vs,
					     int skip = -1)
{
	constexpr int nc = RB / 16, per = (ROWS * nc + NT - 1) / NT;
	const int mask = (1 << a.bt_shift) - 1;
	int page[per];
#pragma unroll
	for (int k = 0; k < per; k++) {
		const int i = threadIdx.x + k * NT, pos = t0 + i / nc;
		page[k] = i < ROWS * nc && pos < end ? table[pos >> a.bt_shift] : 0;
	}
#pragma unroll
	for (int k = 0; k < per; k++) {
		const int i = threadIdx.x + k * NT, r = i / nc, c = i - r * nc, pos = t0 + r;
		if (i >= ROWS * nc)
			break;
		if (pos == skip)
			continue;
		const bool ok = pos < end;
		const long row = (((long)page[k] * a.n_kv_heads + kvh) << a.bt_shift) + (pos & mask);
		const long off = ok ? row * RB + c * 16 : 0;
		cp_async16(ks + r * DS + c * 16, (const unsigned char *)a.k_cache + off, ok);
		cp_async16(vs + r * DS + c * 16, (const unsigned char *)a.v_cache + off, ok);
	}
}

/* Cache row `pos` of one KV head, K to ks and V to vs, with plain 16-byte
 * loads by the block's first threads (no copy group: decode reads the
 * newest row this way after its PDL wait, its tiles' groups already in
 * flight). bytes: of one row, D elements or D fp8 codes. */
template <int BYTES>
__device__ __forceinline__ void copy_kv_row(const attn_args &a, const int32_t *table, int kvh,
					    int pos, void *ks, void *vs)
{
	constexpr int nv = BYTES / 16;
	const int t = threadIdx.x;
	if (t >= 2 * nv)
		return;
	const long row = kv_row(a, table, kvh, pos);
	const bool v = t >= nv;
	const uint4 *src = reinterpret_cast<const uint4 *>(
		(const unsigned char *)(v ? a.v_cache : a.k_cache) + row * BYTES);
	reinterpret_cast<uint4 *>(v ? vs : ks)[t - (v ? nv : 0)] = src[t - (v ? nv : 0)];
}

/* ---- fp8 E4M3 caches (--kv-dtype fp8) -----------------------------------
 *
 * The tensor-core kernels gather fp8 tiles with the same cp.async copies
 * (16 codes per 16 bytes) into a raw stage, then convert them in shared
 * memory into the E tile their ldmatrix/MMA code reads (prefill, and
 * decode at head_dim 80) or load them straight into MMA fragments
 * (decode: attention_decode.cu, kDecFp8Reg). E4M3 values are exact in
 * fp16 and bf16, so every product is what it would be with a cache in E
 * holding the same values (the CPU reference's). Scale 1: the codes are
 * the values (docs/cuda.md). */

/* The E4M3 codes in the low 16 bits of w -> two values of E (exact) as
 * one pair: the lower byte's value in the lower half, as MMA fragments
 * hold them. */
template <typename E> __device__ __forceinline__ uint32_t fp8x2_to(uint32_t w)
{
	__half2_raw p = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xFFFFu), __NV_E4M3);
	if constexpr (std::is_same<E, __half>::value) {
		return (uint32_t)p.x | ((uint32_t)p.y << 16);
	} else { /* 4 significant bits: the top half of the fp32 is exact */
		float lo = __half2float(__ushort_as_half(p.x));
		float hi = __half2float(__ushort_as_half(p.y));
		return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
	}
}

/* 8 E4M3 codes -> 8 values of E (exact), as one 16-byte vector. */
template <typename E> __device__ __forceinline__ uint4 fp8x8_to(uint2 raw)
{
	return make_uint4(fp8x2_to<E>(raw.x), fp8x2_to<E>(raw.x >> 16), fp8x2_to<E>(raw.y),
			  fp8x2_to<E>(raw.y >> 16));
}

/* Rows [r0, r0 + rows) of a raw fp8 K/V stage (row stride RS bytes) into
 * E tiles of row stride `stride`, by the threads [tid0, tid0 + nthreads)
 * (a warp, or the block). */
template <int D, typename E, int RS = D>
__device__ __forceinline__ void convert_kv_rows(const uint8_t *kr, const uint8_t *vr, E *ks, E *vs,
						int r0, int rows, int stride, int tid, int nthreads)
{
	constexpr int nv = D / 8;
	for (int i = tid; i < 2 * rows * nv; i += nthreads) {
		const int kv = i / (rows * nv), j = i - kv * rows * nv;
		const int r = r0 + j / nv, c = (j % nv) * 8;
		const uint8_t *src = (kv ? vr : kr) + r * RS + c;
		E *dst = (kv ? vs : ks) + r * stride + c;
		*reinterpret_cast<uint4 *>(dst) = fp8x8_to<E>(*reinterpret_cast<const uint2 *>(src));
	}
}

/* One value of a cache of E, or of E4M3 codes, as fp32 (the CUDA-core kernel). */
__device__ __forceinline__ float kv_value(const __half *p, long i) { return __half2float(p[i]); }
__device__ __forceinline__ float kv_value(const __nv_bfloat16 *p, long i)
{
	return __bfloat162float(p[i]);
}
__device__ __forceinline__ float kv_value(const uint8_t *p, long i)
{
	return __half2float(__ushort_as_half(__nv_cvt_fp8_to_halfraw(p[i], __NV_E4M3).x));
}

/* exp2 of x (x <= 0 here) on the special-function unit, without exp2f's
 * subnormal fix-up: results under 2^-126 flush to 0, far below what an
 * fp16 or bf16 probability P, or the fp32 running sum, can hold. */
__device__ __forceinline__ float exp2_ftz(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

/* One online-softmax step of a row (scores in base 2): m is the running
 * max, mx the max of the row's new scores. Updates m and returns the base
 * the new exponents are taken against; alpha rescales the running sum and
 * output. A row that has seen only -inf so far (positions past its end)
 * keeps base 0, so its exponents are 0, not NaN. FTZ: alpha by exp2_ftz
 * (the prefill kernel, whose exponents all are). */
template <bool FTZ = false>
__device__ __forceinline__ float softmax_step(float &m, float mx, float &alpha)
{
	const float mn = fmaxf(m, mx);
	const float base = mn == -INFINITY ? 0.f : mn;
	alpha = FTZ ? exp2_ftz(m - base) : exp2f(m - base);
	m = mn;
	return base;
}

/* ---- each kernel file's host side --------------------------------------- */

/* Opt in to the dynamic shared memory every head_dim and dtype needs
 * (over the 48 KiB default): once, from kern_attn_ws_create. */
int attn_decode_init();
int attn_prefill_init();

/* Launch on st; a.n_splits is the decode launch's to fill.
 * head_dim one of 64, 80, 96, 128 and the group at most kMaxGroup. */
int attn_decode_launch(const kern_attn_ws *ws, attn_args a, const kern_paged_batch *b,
		       int head_dim, sl_dtype dt, cudaStream_t st);
int attn_prefill_launch(const attn_args &a, const kern_paged_batch *b, int head_dim, sl_dtype dt,
			cudaStream_t st);
/* Hopper's prefill (attention_wgmma.cu): init says whether it can run
 * here; takes says whether it serves these arguments. */
int attn_wgmma_init(int *usable);
bool attn_wgmma_takes(const attn_args &a, int head_dim);
int attn_wgmma_launch(const attn_args &a, const kern_paged_batch *b, sl_dtype dt,
		      cudaStream_t st);
/* Any head_dim up to KERN_ATTN_MAX_HEAD_DIM, any group, any alignment. */
int attn_generic_launch(const attn_args &a, const kern_paged_batch *b, int head_dim, float scale,
			sl_dtype dt, cudaStream_t st);

#endif
