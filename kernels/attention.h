/*
 * attention.h — causal grouped-query attention over the paged KV cache.
 * Query head h reads KV head h / (n_heads / n_kv_heads). Prefill and decode
 * share the semantics; the CUDA side has a tiled prefill kernel and a
 * split-context decode kernel behind one entry point.
 */
#ifndef KERN_ATTENTION_H
#define KERN_ATTENTION_H

#include "kernels/paged.h"
#ifdef __cplusplus
extern "C" {
#endif

/* out: [n_tokens, n_heads * head_dim]; q read from qkv rows of stride
 * q_stride elements (q is the first n_heads * head_dim of each row);
 * caches as in paged.h; scale usually 1/sqrt(head_dim). */
void kern_attention_cpu(float *out, const float *qkv, int q_stride, const float *k_cache,
			const float *v_cache, const kern_paged_batch *b, int n_heads,
			int n_kv_heads, int head_dim, float scale);

/* What kern_attention_cuda takes: KV blocks of a power-of-two number of
 * tokens, any head_dim up to KERN_ATTN_MAX_HEAD_DIM, any whole number of
 * query heads per KV head. Tensor-core kernels run head_dim 64, 80, 96 or
 * 128 with up to KERN_ATTN_MMA_MAX_GROUP query heads per KV head (the G
 * rows of the decode kernel's MMAs); every other shape runs on a slower
 * CUDA-core kernel. Plain C, so the node checks a model against it at
 * start (node/backend_cuda.c) without a device. */
#define KERN_ATTN_MAX_HEAD_DIM 256
#define KERN_ATTN_MMA_MAX_GROUP 8
/* The head_dims the tensor-core kernels are compiled for, the one list of
 * them: X(D) is expanded once per head_dim. */
#define KERN_ATTN_MMA_HEAD_DIMS(X) X(64) X(80) X(96) X(128)

static inline int kern_attn_mma_shape(int head_dim, int group)
{
	int listed = 0;
#define KERN_ATTN_IS_(D) listed |= head_dim == D;
	KERN_ATTN_MMA_HEAD_DIMS(KERN_ATTN_IS_)
#undef KERN_ATTN_IS_
	return listed && group <= KERN_ATTN_MMA_MAX_GROUP;
}

#ifdef SL_HAVE_CUDA
#include "common/dtype.h"
typedef struct kern_attn_ws kern_attn_ws;  /* split-context scratch, sized once */
int kern_attn_ws_create(int step_tokens, int n_heads, int head_dim, int max_ctx,
			kern_attn_ws **out);
void kern_attn_ws_destroy(kern_attn_ws *ws);
/* Decode over an fp8 cache: on, each warp converts its rows into fp16/bf16
 * tiles in shared memory before its MMAs (the older way, and head_dim 80's
 * only one); off (the default), head_dims 64, 96 and 128 load the codes
 * straight into MMA fragments (kernels/attention_decode.cu). Same values
 * either way. */
void kern_attn_ws_set_fp8_smem(kern_attn_ws *ws, int on);
/* Prefill on Hopper: on (the default where usable), head_dim 128 (any
 * cache dtype) runs on warpgroup MMAs (kernels/attention_wgmma.cu);
 * off, on the mma.sync kernel every GPU runs. Returns whether the wgmma
 * kernel is now chosen: never on other GPUs, or in builds whose
 * CUDA_ARCHS leave out 90. */
int kern_attn_ws_set_prefill_wgmma(kern_attn_ws *ws, int on);
/* q, out in dt; caches in dt, or fp8 E4M3 codes (kv_fp8, one byte per
 * value, as kern_rope_kv_write_cuda writes them; the CPU reference reads
 * the same values as fp32). */
int kern_attention_cuda(kern_attn_ws *ws, void *out, const void *qkv, int q_stride,
			const void *k_cache, const void *v_cache, const kern_paged_batch *b,
			int n_heads, int n_kv_heads, int head_dim, float scale, sl_dtype dt,
			int kv_fp8, void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
