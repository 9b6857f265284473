/*
 * matmul.c — the CPU linear layer: kern_matmul_cpu, the fp32 reference (one
 * plain dot product per output, the spec every other matmul is checked
 * against), and kern_matmul_cpu_fast beside it, what the CPU backend runs.
 * tests/unit/kernels/test_matmul.c holds the two together.
 */
#include "kernels/matmul.h"

#include <stddef.h>
#include <string.h>

void kern_matmul_cpu(float *out, const float *x, const float *w, int n, int in_dim, int out_dim)
{
#pragma omp parallel for schedule(static) if ((long)n * out_dim * in_dim > 1 << 18)
	for (int o = 0; o < out_dim; o++) {
		const float *wr = w + (size_t)o * in_dim;
		for (int i = 0; i < n; i++) {
			const float *xr = x + (size_t)i * in_dim;
			float acc = 0;
#pragma omp simd reduction(+ : acc)
			for (int k = 0; k < in_dim; k++)
				acc += xr[k] * wr[k];
			out[(size_t)i * out_dim + o] = acc;
		}
	}
}

/*
 * The fast path. The reference is slow because its one running sum is a
 * dependency chain the compiler may not reorder (no -ffast-math), so it
 * runs one scalar multiply-add per cycle or so. Here every output is a dot
 * product split over 8 lanes (lane l sums the products k = l mod 8),
 * written with GCC vector types so the lane sums ARE the C semantics: a
 * compiler may put them in one AVX register or two SSE ones, never sum
 * them in another order. The 8 lane sums then fold in a fixed tree and the
 * last in_dim % 8 products follow one by one. So an output's value depends
 * only on its x row and W row: not on n, the tiling, the thread count or
 * the instruction set (no FMA: -std=c11 turns contraction off, and neither
 * clone's target has it). Like the reference, then, a token's matmul does
 * not depend on what it is batched with (batched, chunked-prefill and
 * single-sequence runs stay equal); versus the reference only the
 * summation order differs.
 *
 * Speed: register tiles of 4 W rows x 2 x rows (each W load feeds two
 * products, each x load four; the 4 W rows stay in L1 while the x rows of
 * a cache tile pass them), cache tiles of MM_TILE_X x rows (in L2) by
 * MM_TILE_W W rows, OpenMP over the tiles. Decode (n = 1) streams W once,
 * as it must: it is bound by memory bandwidth, no longer by the adds.
 */
typedef float mm_v8 __attribute__((vector_size(32)));

enum { MM_TILE_W = 16, MM_TILE_X = 32 };

#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
/* AVX2 where the CPU has it, chosen once at load time (ifunc); same results. */
#define MM_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef MM_CLONES
#define MM_CLONES
#endif

/* Helpers are inlined into each clone, so they take its instruction set
 * (and no 32-byte vector crosses a call: that ABI differs without AVX). */
#define MM_INLINE static inline __attribute__((always_inline))

/* v = p[0..7], unaligned: rows start anywhere */
#define MM_LOAD(v, p) memcpy(&(v), (p), sizeof(mm_v8))

/* One output from its 8 lane sums and the products from k on. */
MM_INLINE float mm_finish(const mm_v8 *lanes, const float *x, const float *w, int k, int in_dim)
{
	const mm_v8 a = *lanes;
	float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
	for (; k < in_dim; k++)
		s += x[k] * w[k];
	return s;
}

/* out[i..i+1][o..o+3] */
MM_INLINE void mm_4x2(float *out, const float *x, const float *w, int in_dim, int out_dim,
		      int i, int o)
{
	const float *x0 = x + (size_t)i * in_dim, *x1 = x0 + in_dim;
	const float *w0 = w + (size_t)o * in_dim, *w1 = w0 + in_dim, *w2 = w1 + in_dim,
		    *w3 = w2 + in_dim;
	mm_v8 a00 = {0}, a01 = {0}, a02 = {0}, a03 = {0}, a10 = {0}, a11 = {0}, a12 = {0},
	      a13 = {0};
	int k = 0;
	for (; k + 8 <= in_dim; k += 8) {
		mm_v8 xa, xb, v;
		MM_LOAD(xa, x0 + k), MM_LOAD(xb, x1 + k);
		MM_LOAD(v, w0 + k), a00 += xa * v, a10 += xb * v;
		MM_LOAD(v, w1 + k), a01 += xa * v, a11 += xb * v;
		MM_LOAD(v, w2 + k), a02 += xa * v, a12 += xb * v;
		MM_LOAD(v, w3 + k), a03 += xa * v, a13 += xb * v;
	}
	float *r0 = out + (size_t)i * out_dim + o, *r1 = r0 + out_dim;
	r0[0] = mm_finish(&a00, x0, w0, k, in_dim), r1[0] = mm_finish(&a10, x1, w0, k, in_dim);
	r0[1] = mm_finish(&a01, x0, w1, k, in_dim), r1[1] = mm_finish(&a11, x1, w1, k, in_dim);
	r0[2] = mm_finish(&a02, x0, w2, k, in_dim), r1[2] = mm_finish(&a12, x1, w2, k, in_dim);
	r0[3] = mm_finish(&a03, x0, w3, k, in_dim), r1[3] = mm_finish(&a13, x1, w3, k, in_dim);
}

/*
 * out[i][o..o+3]: decode's kernel. The four W rows are four short streams
 * (a row of SmolLM2 is 2.3 KB) that the hardware prefetcher keeps losing;
 * fetching the next four rows while these are summed lifted the measured
 * read bandwidth by about 40% (prefetches never fault past the end of W).
 */
MM_INLINE void mm_4x1(float *out, const float *x, const float *w, int in_dim, int out_dim,
		      int i, int o)
{
	const float *x0 = x + (size_t)i * in_dim;
	const float *w0 = w + (size_t)o * in_dim, *w1 = w0 + in_dim, *w2 = w1 + in_dim,
		    *w3 = w2 + in_dim;
	const size_t ahead = (size_t)4 * in_dim;
	mm_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
	int k = 0;
	for (; k + 8 <= in_dim; k += 8) {
		__builtin_prefetch(w0 + ahead + k), __builtin_prefetch(w1 + ahead + k);
		__builtin_prefetch(w2 + ahead + k), __builtin_prefetch(w3 + ahead + k);
		mm_v8 xa, v0, v1, v2, v3;
		MM_LOAD(xa, x0 + k), MM_LOAD(v0, w0 + k), MM_LOAD(v1, w1 + k);
		MM_LOAD(v2, w2 + k), MM_LOAD(v3, w3 + k);
		a0 += xa * v0, a1 += xa * v1, a2 += xa * v2, a3 += xa * v3;
	}
	float *r0 = out + (size_t)i * out_dim + o;
	r0[0] = mm_finish(&a0, x0, w0, k, in_dim), r0[1] = mm_finish(&a1, x0, w1, k, in_dim);
	r0[2] = mm_finish(&a2, x0, w2, k, in_dim), r0[3] = mm_finish(&a3, x0, w3, k, in_dim);
}

/* out[i][o]: the W rows left over when out_dim % 4 != 0 */
MM_INLINE void mm_1x1(float *out, const float *x, const float *w, int in_dim, int out_dim,
		      int i, int o)
{
	const float *x0 = x + (size_t)i * in_dim, *w0 = w + (size_t)o * in_dim;
	mm_v8 a = {0};
	int k = 0;
	for (; k + 8 <= in_dim; k += 8) {
		mm_v8 xa, v;
		MM_LOAD(xa, x0 + k), MM_LOAD(v, w0 + k);
		a += xa * v;
	}
	out[(size_t)i * out_dim + o] = mm_finish(&a, x0, w0, k, in_dim);
}

/* x rows [i0, i1) times W rows [o0, o1): one cache tile */
MM_CLONES static void mm_tile(float *out, const float *x, const float *w, int in_dim, int out_dim,
			      int i0, int i1, int o0, int o1)
{
	int o = o0;
	for (; o + 4 <= o1; o += 4) {
		int i = i0;
		for (; i + 2 <= i1; i += 2)
			mm_4x2(out, x, w, in_dim, out_dim, i, o);
		if (i < i1)
			mm_4x1(out, x, w, in_dim, out_dim, i, o);
	}
	for (; o < o1; o++)
		for (int i = i0; i < i1; i++)
			mm_1x1(out, x, w, in_dim, out_dim, i, o);
}

void kern_matmul_cpu_fast(float *out, const float *x, const float *w, int n, int in_dim,
			  int out_dim)
{
	long tiles_w = (out_dim + MM_TILE_W - 1) / MM_TILE_W;
	long tiles = (n + MM_TILE_X - 1) / MM_TILE_X * tiles_w;
	/* W-tile fastest: consecutive tiles of a thread share their x rows */
#pragma omp parallel for schedule(static) if ((long)n * out_dim * in_dim > 1 << 18)
	for (long t = 0; t < tiles; t++) {
		int i0 = (int)(t / tiles_w) * MM_TILE_X, o0 = (int)(t % tiles_w) * MM_TILE_W;
		int i1 = i0 + MM_TILE_X < n ? i0 + MM_TILE_X : n;
		int o1 = o0 + MM_TILE_W < out_dim ? o0 + MM_TILE_W : out_dim;
		mm_tile(out, x, w, in_dim, out_dim, i0, i1, o0, o1);
	}
}
