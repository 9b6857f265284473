/*
 * rope.cu — CUDA RoPE fused with the paged KV-cache write. A row of blocks
 * per token (gridDim.y of them share its heads, so a decode step's single
 * token is not one block's sequential work): each computes cos/sin of
 * position * inv_freq[i] into shared memory (fp32, cosf/sinf as the
 * reference does), then rotates its share of the q and k heads in place (rotate_half: element i pairs with i + head_dim/2)
 * and stores the rotated k and the unchanged v at the token's cache slot.
 * k is also left rotated in qkv, exactly as kern_rope_kv_write_cpu leaves
 * it, so both backends hold the same qkv afterwards (a few extra bytes per
 * token). With an fp8 cache (kv_fp8) k and v go in as E4M3 codes, rounded
 * from fp32 as the CPU rounds them. Semantics: kernels/rope.c; cache
 * layout: kernels/paged.h; the rotation and cache stores: rope.cuh, which
 * the QKV GEMV's fused epilogue (epilogue.cuh) shares.
 */
#include <type_traits>

#include "kernels/rope.cuh"
#include "kernels/rope.h"

#define ROPE_THREADS 128
#define ROPE_MAX_Y 16 /* blocks per token */

/* V = elements per unit of work: 8 (16-byte vectors, needs head_dim/2 % 8
 * == 0) or 1. C: the cache element, T or uint8_t (fp8 E4M3 codes). */
template <typename T, typename C, int V>
__global__ void __launch_bounds__(ROPE_THREADS)
	rope_kv_kernel(T *__restrict__ qkv, C *__restrict__ k_cache, C *__restrict__ v_cache,
		       const int32_t *__restrict__ positions, const int32_t *__restrict__ slots,
		       int n_heads, int n_kv_heads, int head_dim, int block_tokens,
		       const float *__restrict__ inv_freq)
{
	extern __shared__ float trig[]; /* cos [half] then sin [half] */
	kern_pdl_start();
	int t = blockIdx.x, half = head_dim / 2;
	float *cs = trig, *sn = trig + half;
	float pos = (float)positions[t];
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float ang = pos * inv_freq[i];
		cs[i] = cosf(ang);
		sn[i] = sinf(ang);
	}
	__syncthreads();

	int stride = (n_heads + 2 * n_kv_heads) * head_dim;
	T *row = qkv + (size_t)t * stride;
	T *vrow = row + (n_heads + n_kv_heads) * head_dim;
	int slot = slots[t];
	int per_head = half / V;
	int rot_units = (n_heads + n_kv_heads) * per_head;
	int v_units = n_kv_heads * (head_dim / V);

	for (int u = blockIdx.y * blockDim.x + threadIdx.x; u < rot_units + v_units;
	     u += gridDim.y * blockDim.x) {
		if (u < rot_units) {
			int h = u / per_head, i = (u - h * per_head) * V;
			T *x = row + h * head_dim;
			float a[V], b[V];
			if constexpr (V == 8) {
				kern_load8(x + i, a);
				kern_load8(x + i + half, b);
			} else {
				a[0] = kern_to_f32(x[i]);
				b[0] = kern_to_f32(x[i + half]);
			}
#pragma unroll
			for (int k = 0; k < V; k++)
				rope_turn(&a[k], &b[k], cs[i + k], sn[i + k]);
			C *kc = nullptr;
			if (h >= n_heads && slot >= 0) /* a k head: also into the cache */
				kc = k_cache + kv_offset(slot, h - n_heads, n_kv_heads, block_tokens,
							 head_dim);
			if constexpr (V == 8) {
				kern_store8(x + i, a);
				kern_store8(x + i + half, b);
			} else {
				x[i] = kern_from_f32<T>(a[0]);
				x[i + half] = kern_from_f32<T>(b[0]);
			}
			if (kc) {
				cache_put<C, V>(kc + i, a);
				cache_put<C, V>(kc + i + half, b);
			}
		} else if (slot >= 0) {
			int w = u - rot_units, h = w / (head_dim / V), i = (w - h * (head_dim / V)) * V;
			C *dst = v_cache + kv_offset(slot, h, n_kv_heads, block_tokens, head_dim) + i;
			const T *src = vrow + h * head_dim + i;
			if constexpr (std::is_same<C, T>::value) {
				if constexpr (V == 8)
					*reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
				else
					*dst = *src;
			} else {
				float f[V];
				if constexpr (V == 8)
					kern_load8(src, f);
				else
					f[0] = kern_to_f32(src[0]);
				cache_put<C, V>(dst, f);
			}
		}
	}
}

template <typename T, typename C>
static int rope_launch_c(bool vec, void *qkv, void *k_cache, void *v_cache,
			 const kern_paged_batch *b, int n_heads, int n_kv_heads, int head_dim,
			 const float *inv_freq, size_t smem, cudaStream_t st)
{
	auto kernel = vec ? rope_kv_kernel<T, C, 8> : rope_kv_kernel<T, C, 1>;
	/* one unit of work per thread (at most ROPE_MAX_Y blocks a token) */
	int v = vec ? 8 : 1, units = (n_heads + n_kv_heads) * (head_dim / 2 / v) +
				      n_kv_heads * (head_dim / v);
	int y = (units + ROPE_THREADS - 1) / ROPE_THREADS;
	y = y < 1 ? 1 : y > ROPE_MAX_Y ? ROPE_MAX_Y : y;
	return kern_launch_small("rope_kv", st, kernel, dim3(b->n_tokens, y), dim3(ROPE_THREADS), smem,
				 (T *)qkv, (C *)k_cache, (C *)v_cache, b->positions, b->slots,
				 n_heads, n_kv_heads, head_dim, b->block_tokens, inv_freq);
}

template <typename T>
static int rope_launch(void *qkv, void *k_cache, void *v_cache, const kern_paged_batch *b,
		       int n_heads, int n_kv_heads, int head_dim, const float *inv_freq,
		       int kv_fp8, cudaStream_t st)
{
	int half = head_dim / 2;
	/* half % 8 == 0 makes every head, row and cache offset a multiple of 16
	 * bytes (8 for fp8 codes) from its (aligned) base. */
	bool vec = half % KERN_VEC == 0 && kern_aligned16(qkv) && kern_aligned16(k_cache) &&
		   kern_aligned16(v_cache);
	size_t smem = sizeof(float) * 2 * (half > 0 ? half : 1);
	if (kv_fp8)
		return rope_launch_c<T, uint8_t>(vec, qkv, k_cache, v_cache, b, n_heads, n_kv_heads,
						 head_dim, inv_freq, smem, st);
	return rope_launch_c<T, T>(vec, qkv, k_cache, v_cache, b, n_heads, n_kv_heads, head_dim,
				   inv_freq, smem, st);
}

extern "C" int kern_rope_kv_write_cuda(void *qkv, void *k_cache, void *v_cache,
				       const kern_paged_batch *b, int n_heads, int n_kv_heads,
				       int head_dim, const float *inv_freq, sl_dtype dt,
				       int kv_fp8, void *stream)
{
	if (b->n_tokens <= 0)
		return SL_OK;
	if (head_dim <= 0 || head_dim % 2 || n_heads < 0 || n_kv_heads <= 0)
		return sl_fail(SL_EINVAL, "rope: bad shape heads %d kv %d head_dim %d", n_heads,
			       n_kv_heads, head_dim);
	KERN_DISPATCH_DT(dt, rope_launch, qkv, k_cache, v_cache, b, n_heads, n_kv_heads, head_dim,
			 inv_freq, kv_fp8, kern_stream(stream));
}
