/*
 * backend_cpu.c — the reference backend: fp32 everywhere, host memory, each
 * op a direct call to the kernels' CPU reference. It is the oracle for the
 * CUDA kernels and what CI and `make demo` run. Quantized projections
 * compute on their exact dequantized values; an fp8 KV cache holds fp32
 * values rounded through E4M3, so both backends attend over the same K/V.
 * The one exception to "direct call to the reference" is the unquantized
 * matmul, nearly all of the time: it runs kern_matmul_cpu_fast, the
 * reference's vectorized twin (same values but for fp32 summation order,
 * checked by tests/unit/kernels/test_matmul.c).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "node/backend.h"
#include "kernels/embedding.h"
#include "kernels/logits_mask.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/random.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "common/sl.h"
#include "kernels/swiglu.h"

/* Scratch for the sampler's sort, grown to the largest vocabulary seen;
 * the KV dtype from reserve. */
typedef struct cpu_state {
	void *work;
	size_t work_bytes;
	int kv_fp8; /* K and V rounded through fp8 E4M3 as they are cached */
} cpu_state;

static int cpu_alloc(node_backend *be, size_t bytes, void **out)
{
	/* 64-byte aligned for vectorised loops; zeroed so unwritten KV is benign */
	size_t n = (bytes + 63) & ~(size_t)63;
	void *p = aligned_alloc(64, n ? n : 64);
	if (!p)
		return SL_ENOMEM;
	memset(p, 0, n ? n : 64);
	*out = p;
	return SL_OK;
}

static void cpu_free(node_backend *be, void *p) { free(p); }

static int cpu_copy(node_backend *be, void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
	return SL_OK;
}

static int cpu_sync(node_backend *be) { return SL_OK; }

static int cpu_set_batch(node_backend *be, const kern_paged_batch *host, kern_paged_batch *dev)
{
	*dev = *host; /* host memory is the backend's memory */
	return SL_OK;
}

static int cpu_embed(node_backend *be, float *x, const void *table, const int32_t *tokens, int n,
		     int dim, int row0, int rows)
{
	kern_embedding_cpu(x, table, tokens, n, dim, row0, rows);
	return SL_OK;
}

static int cpu_rmsnorm(node_backend *be, void *out, const float *x, const void *w, int n, int dim,
		       float eps)
{
	kern_rmsnorm_cpu(out, x, w, n, dim, eps);
	return SL_OK;
}

static int cpu_add_rmsnorm(node_backend *be, float *x, const void *delta, const void *w, void *out,
			   int n, int dim, float eps)
{
	kern_add_rmsnorm_cpu(x, delta, w, out, n, dim, eps);
	return SL_OK;
}

/* Quantized weights: the reference's exact dequantized values in fp32. */
static int cpu_matmul(node_backend *be, void *out, const void *x, const kern_qweight *w, int n)
{
	if (w->format != KERN_Q_NONE)
		kern_qmatmul_cpu(out, x, w, n);
	else
		kern_matmul_cpu_fast(out, x, w->data, n, w->cols, w->rows);
	return SL_OK;
}

/* Activations are fp32 here: the LM head is any other matmul. */
static int cpu_matmul_f32out(node_backend *be, float *out, const void *x, const kern_qweight *w,
			     int n)
{
	return cpu_matmul(be, out, x, w, n);
}

static int cpu_rope_kv_write(node_backend *be, void *qkv, void *k_cache, void *v_cache,
			     const kern_paged_batch *b, int n_heads, int n_kv_heads, int head_dim,
			     const float *inv_freq)
{
	const cpu_state *st = be->impl;
	kern_rope_kv_write_cpu(qkv, k_cache, v_cache, b, n_heads, n_kv_heads, head_dim, inv_freq,
			       st->kv_fp8);
	return SL_OK;
}

static int cpu_attention(node_backend *be, void *out, const void *qkv, int q_stride,
			 const void *k_cache, const void *v_cache, const kern_paged_batch *b,
			 int n_heads, int n_kv_heads, int head_dim, float scale)
{
	kern_attention_cpu(out, qkv, q_stride, k_cache, v_cache, b, n_heads, n_kv_heads, head_dim,
			   scale);
	return SL_OK;
}

static int cpu_silu_mul(node_backend *be, void *out, const void *gate_up, int n, int hidden)
{
	kern_silu_mul_cpu(out, gate_up, n, hidden);
	return SL_OK;
}

static int cpu_gather_rows(node_backend *be, void *out, const void *x, const int32_t *rows, int n,
			   int dim)
{
	for (int i = 0; i < n; i++)
		memcpy((float *)out + (size_t)i * dim, (const float *)x + (size_t)rows[i] * dim,
		       sizeof(float) * dim);
	return SL_OK;
}

static int cpu_copy2d(node_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
		      size_t width_bytes, size_t rows)
{
	for (size_t r = 0; r < rows; r++)
		memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width_bytes);
	return SL_OK;
}


static int cpu_sample(node_backend *be, int32_t *tokens_out, const float *logits, const int32_t *rows,
		      int n, int vocab, const kern_sample_params *params, const int64_t *positions,
		      const kern_logit_bias *bias, const kern_token_hist *hist,
		      const kern_logprobs *lp)
{
	cpu_state *st = be->impl;
	size_t need = kern_sample_work_bytes(vocab);
	if (need > st->work_bytes) {
		void *w = realloc(st->work, need);
		if (!w)
			return SL_ENOMEM;
		st->work = w;
		st->work_bytes = need;
	}
	kern_sample_rows_cpu(tokens_out, lp, logits, rows, n, vocab, params, positions, bias, hist,
			     st->work);
	return SL_OK;
}

static int cpu_mask_logits(node_backend *be, float *logits, const int32_t *rows,
			   const uint32_t *masks, int n, int vocab)
{
	kern_logits_mask_cpu(logits, rows, masks, n, vocab);
	return SL_OK;
}

static int cpu_reserve(node_backend *be, const node_backend_limits *lim, char *err, size_t errlen)
{
	((cpu_state *)be->impl)->kv_fp8 = lim->kv_fp8;
	return SL_OK;
}

static int cpu_run_cached(node_backend *be, int key, int (*fn)(void *), void *ctx)
{
	return fn(ctx);
}

static int cpu_fill_random(node_backend *be, void *dst, size_t n, float mean, float std,
			   uint64_t seed)
{
	kern_fill_uniform_cpu(dst, n, mean, std, seed);
	return SL_OK;
}

static void cpu_range_push(node_backend *be, const char *name, int index) {}

static void cpu_range_pop(node_backend *be) {}

static void cpu_destroy(node_backend *be)
{
	cpu_state *st = be->impl;
	if (st)
		free(st->work);
	free(st);
	free(be);
}

static const node_backend_ops cpu_ops = {
	.alloc = cpu_alloc,
	.free = cpu_free,
	.upload = cpu_copy,
	.download = cpu_copy,
	.sync = cpu_sync,
	.set_batch = cpu_set_batch,
	.embed = cpu_embed,
	.rmsnorm = cpu_rmsnorm,
	.add_rmsnorm = cpu_add_rmsnorm,
	.matmul = cpu_matmul,
	.matmul_f32out = cpu_matmul_f32out,
	.rope_kv_write = cpu_rope_kv_write,
	.attention = cpu_attention,
	.silu_mul = cpu_silu_mul,
	.gather_rows = cpu_gather_rows,
	.copy2d = cpu_copy2d,
	.sample = cpu_sample,
	.mask_logits = cpu_mask_logits,
	.reserve = cpu_reserve,
	.run_cached = cpu_run_cached,
	.fill_random = cpu_fill_random,
	.range_push = cpu_range_push,
	.range_pop = cpu_range_pop,
	.destroy = cpu_destroy,
};

int node_backend_cpu_create(node_backend **out)
{
	node_backend *be = calloc(1, sizeof *be);
	cpu_state *st = calloc(1, sizeof *st);
	if (!be || !st) {
		free(be), free(st);
		return SL_ENOMEM;
	}
	be->impl = st;
	be->ops = &cpu_ops;
	be->name = "cpu";
	be->dtype = SL_DT_F32;
	*out = be;
	return SL_OK;
}

void node_backend_destroy(node_backend *be)
{
	if (be)
		be->ops->destroy(be);
}
