/*
 * attention_generic.cu — attention for the shapes the tensor-core kernels
 * do not take: any even head_dim up to 256, any GQA group, any alignment,
 * prefill and decode alike. CUDA cores, one block per (token, query head), each warp walking every
 * kGenWarps-th context position with an online softmax, lanes splitting
 * head_dim; warps merge through shared memory. It exists so every model
 * runs (the golden test models have head_dim 8 to 32); real Llama shapes
 * take the tensor-core kernels (attention_decode.cu, attention_prefill.cu).
 * Reads an fp8 cache value by value. Launched by kern_attention_cuda
 * (attention.cu).
 */
#include "kernels/attention_common.cuh"

namespace {

constexpr int kGenWarps = 4;
constexpr int kGenMaxD = KERN_ATTN_MAX_HEAD_DIM;

/* C: the cache's element, E or uint8_t (fp8 E4M3 codes) */
template <typename E, typename C>
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
		const C *k = (const C *)a.k_cache + off, *v = (const C *)a.v_cache + off;
		float dot = 0.f;
		for (int j = 0; j < per; j++) {
			int d = lane + 32 * j;
			if (d < head_dim)
				dot += qv[j] * kv_value(k, d);
		}
		dot = kern_warp_sum(dot);
		float mn = fmaxf(m, dot), corr = __expf(m - mn), p = __expf(dot - mn);
		l = l * corr + p;
		for (int j = 0; j < per; j++) {
			int d = lane + 32 * j;
			o[j] = o[j] * corr + (d < head_dim ? p * kv_value(v, d) : 0.f);
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
int generic_launch(const attn_args &a, const kern_paged_batch *b, int head_dim, float scale,
		   cudaStream_t st)
{
	if (head_dim > kGenMaxD) {
		SL_ERROR("attn", "head_dim %d not supported (at most %d)", head_dim, kGenMaxD);
		return SL_ENOTSUP;
	}
	dim3 grid(b->n_tokens, a.n_heads);
	if (a.kv_fp8)
		attn_generic_kernel<E, uint8_t><<<grid, kGenWarps * 32, 0, st>>>(a, b->n_seqs, head_dim,
										 scale);
	else
		attn_generic_kernel<E, E><<<grid, kGenWarps * 32, 0, st>>>(a, b->n_seqs, head_dim, scale);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

} /* namespace */

int attn_generic_launch(const attn_args &a, const kern_paged_batch *b, int head_dim, float scale,
			sl_dtype dt, cudaStream_t st)
{
	KERN_DISPATCH_DT(dt, generic_launch, a, b, head_dim, scale, st);
}
