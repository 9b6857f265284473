/*
 * rope.cu — CUDA RoPE fused with the paged KV-cache write. One block per
 * token: the block computes cos/sin of position * inv_freq[i] once into
 * shared memory (fp32, cosf/sinf as the reference does), then rotates every
 * q and k head in place (rotate_half: element i pairs with i + head_dim/2)
 * and stores the rotated k and the unchanged v at the token's cache slot.
 * k is also left rotated in qkv, exactly as kern_rope_kv_write_cpu leaves
 * it, so both backends hold the same qkv afterwards (a few extra bytes per
 * token). Semantics: kernels/rope.c; cache layout: kernels/paged.h.
 */
#include "cuda_util.cuh"
#include "rope.h"

#define ROPE_THREADS 128

/* kern_kv_offset (paged.h) on the device. */
__device__ __forceinline__ long kv_offset(int slot, int kv_head, int n_kv_heads, int block_tokens,
					  int head_dim)
{
	long blk = slot / block_tokens, off = slot % block_tokens;
	return ((blk * n_kv_heads + kv_head) * block_tokens + off) * (long)head_dim;
}

/* V = elements per unit of work: 8 (16-byte vectors, needs head_dim/2 % 8
 * == 0) or 1. */
template <typename T, int V>
__global__ void __launch_bounds__(ROPE_THREADS)
	rope_kv_kernel(T *__restrict__ qkv, T *__restrict__ k_cache, T *__restrict__ v_cache,
		       const int32_t *__restrict__ positions, const int32_t *__restrict__ slots,
		       int n_heads, int n_kv_heads, int head_dim, int block_tokens,
		       const float *__restrict__ inv_freq)
{
	extern __shared__ float trig[]; /* cos [half] then sin [half] */
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

	for (int u = threadIdx.x; u < rot_units + v_units; u += blockDim.x) {
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
			for (int k = 0; k < V; k++) {
				float c = cs[i + k], s = sn[i + k], ak = a[k];
				a[k] = ak * c - b[k] * s;
				b[k] = b[k] * c + ak * s;
			}
			T *kc = nullptr;
			if (h >= n_heads && slot >= 0) /* a k head: also into the cache */
				kc = k_cache + kv_offset(slot, h - n_heads, n_kv_heads, block_tokens,
							 head_dim);
			if constexpr (V == 8) {
				kern_store8(x + i, a);
				kern_store8(x + i + half, b);
				if (kc) {
					kern_store8(kc + i, a);
					kern_store8(kc + i + half, b);
				}
			} else {
				T ta = kern_from_f32<T>(a[0]), tb = kern_from_f32<T>(b[0]);
				x[i] = ta;
				x[i + half] = tb;
				if (kc) {
					kc[i] = ta;
					kc[i + half] = tb;
				}
			}
		} else if (slot >= 0) {
			int w = u - rot_units, h = w / (head_dim / V), i = (w - h * (head_dim / V)) * V;
			T *dst = v_cache + kv_offset(slot, h, n_kv_heads, block_tokens, head_dim) + i;
			const T *src = vrow + h * head_dim + i;
			if constexpr (V == 8)
				*reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
			else
				*dst = *src;
		}
	}
}

template <typename T>
static int rope_launch(void *qkv, void *k_cache, void *v_cache, const kern_paged_batch *b,
		       int n_heads, int n_kv_heads, int head_dim, const float *inv_freq,
		       cudaStream_t st)
{
	int half = head_dim / 2;
	/* half % 8 == 0 makes every head, row and cache offset a multiple of 16
	 * bytes from its (aligned) base. */
	bool vec = half % KERN_VEC == 0 && kern_aligned16(qkv) && kern_aligned16(k_cache) &&
		   kern_aligned16(v_cache);
	size_t smem = sizeof(float) * 2 * (half > 0 ? half : 1);
	if (vec)
		rope_kv_kernel<T, 8><<<b->n_tokens, ROPE_THREADS, smem, st>>>(
			(T *)qkv, (T *)k_cache, (T *)v_cache, b->positions, b->slots, n_heads,
			n_kv_heads, head_dim, b->block_tokens, inv_freq);
	else
		rope_kv_kernel<T, 1><<<b->n_tokens, ROPE_THREADS, smem, st>>>(
			(T *)qkv, (T *)k_cache, (T *)v_cache, b->positions, b->slots, n_heads,
			n_kv_heads, head_dim, b->block_tokens, inv_freq);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

extern "C" int kern_rope_kv_write_cuda(void *qkv, void *k_cache, void *v_cache,
				       const kern_paged_batch *b, int n_heads, int n_kv_heads,
				       int head_dim, const float *inv_freq, sl_dtype dt,
				       void *stream)
{
	if (b->n_tokens <= 0)
		return SL_OK;
	if (head_dim <= 0 || head_dim % 2 || n_heads < 0 || n_kv_heads <= 0) {
		sl_log(SL_LOG_ERROR, "cuda", "rope: bad shape heads %d kv %d head_dim %d", n_heads,
		       n_kv_heads, head_dim);
		return SL_EINVAL;
	}
	KERN_DISPATCH_DT(dt, rope_launch, qkv, k_cache, v_cache, b, n_heads, n_kv_heads, head_dim,
			 inv_freq, kern_stream(stream));
}
