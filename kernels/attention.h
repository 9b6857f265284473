/*
 * attention.h — causal grouped-query attention over the paged KV cache.
 * Query head h reads KV head h / (n_heads / n_kv_heads). Prefill and decode
 * share the semantics; the CUDA side has a tiled prefill kernel and a
 * split-context decode kernel behind one entry point.
 */
#ifndef KERN_ATTENTION_H
#define KERN_ATTENTION_H

#include "paged.h"
#ifdef __cplusplus
extern "C" {
#endif

/* out: [n_tokens, n_heads * head_dim]; q read from qkv rows of stride
 * q_stride elements (q is the first n_heads * head_dim of each row);
 * caches as in paged.h; scale usually 1/sqrt(head_dim). */
void kern_attention_cpu(float *out, const float *qkv, int q_stride, const float *k_cache,
			const float *v_cache, const kern_paged_batch *b, int n_heads,
			int n_kv_heads, int head_dim, float scale);

#ifdef SL_HAVE_CUDA
#include "dtype.h"
typedef struct kern_attn_ws kern_attn_ws;  /* split-context scratch, sized once */
int kern_attn_ws_create(int max_tokens, int n_heads, int head_dim, int max_ctx,
			kern_attn_ws **out);
void kern_attn_ws_destroy(kern_attn_ws *ws);
int kern_attention_cuda(kern_attn_ws *ws, void *out, const void *qkv, int q_stride,
			const void *k_cache, const void *v_cache, const kern_paged_batch *b,
			int n_heads, int n_kv_heads, int head_dim, float scale, sl_dtype dt,
			void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
