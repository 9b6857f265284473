/*
 * attention.cu — causal grouped-query attention over the paged KV cache on
 * the GPU; kernels/attention.c is the spec (same arguments, same results up
 * to fp16/bf16 rounding). This file is the entry point: argument checks,
 * the workspace, and the choice of kernels:
 *
 *   attention_prefill.cu  q_len > 1: tiled flash attention on tensor cores
 *   attention_wgmma.cu    the same on Hopper's warpgroup MMA (head_dim 128;
 *                         kern_attn_ws_set_prefill_wgmma)
 *   attention_decode.cu   q_len == 1: split-context, the GQA group as MMA rows
 *   attention_generic.cu  the other shapes (kern_attn_mma_shape in
 *                         attention.h): CUDA cores, head_dim up to 256
 *   attention_common.cuh  what they share
 *
 * A mixed batch launches prefill then decode (decode not at all when the
 * batch's min_q_len says no sequence has q_len 1): prefill blocks skip
 * q_len <= 1 sequences and decode blocks skip q_len != 1 ones. Scores are scaled by
 * scale * log2(e) in fp32 and the softmax runs in base 2. Workspace:
 * kern_attn_ws, allocated once by kern_attn_ws_create; kern_attention_cuda
 * never allocates. One workspace serves one stream at a time (its split
 * buffers and counters are reused by every launch). kv_fp8: the caches
 * hold fp8 E4M3 codes (one byte per value, scale 1), which every kernel
 * converts to fp16/bf16 exactly as it reads them.
 */
#include <stdlib.h>

#include "kernels/attention_common.cuh"

constexpr float kLog2e = 1.4426950408889634f;

extern "C" int kern_attn_ws_create(int step_tokens, int n_heads, int head_dim, int max_ctx,
				   kern_attn_ws **out)
{
	*out = NULL;
	if (step_tokens <= 0 || n_heads <= 0 || head_dim <= 0 || max_ctx <= 0) {
		SL_ERROR("attn", "ws_create: bad sizes (tokens %d, heads %d, head_dim %d, ctx %d)",
			 step_tokens, n_heads, head_dim, max_ctx);
		return SL_EINVAL;
	}
	int dev, rc;
	CUDA_TRY(cudaGetDevice(&dev));
	kern_attn_ws *ws = (kern_attn_ws *)calloc(1, sizeof *ws);
	if (!ws)
		return SL_ENOMEM;
	ws->n_heads = n_heads;
	ws->head_dim = head_dim;
	if (cudaDeviceGetAttribute(&ws->n_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&ws->smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
				   dev) != cudaSuccess) {
		SL_ERROR("attn", "ws_create: cannot query device %d", dev);
		free(ws);
		return SL_EDEVICE;
	}
	long tiles = (max_ctx + kDecTile - 1) / kDecTile;
	long cap = 2L * ws->n_sms * kMaxDecBlocksPerSm;
	if ((long)step_tokens * tiles < cap)
		cap = (long)step_tokens * tiles;
	ws->cap_pairs = cap;
	if ((rc = attn_decode_init()) || (rc = attn_prefill_init()) ||
	    (rc = attn_wgmma_init(&ws->wgmma_usable)))
		goto fail;
	ws->wgmma = ws->wgmma_usable;
	if (cudaMalloc((void **)&ws->part_o, sizeof(float) * cap * n_heads * head_dim) !=
		    cudaSuccess ||
	    cudaMalloc((void **)&ws->part_ml, sizeof(float2) * cap * n_heads) != cudaSuccess ||
	    cudaMalloc((void **)&ws->split_done, sizeof(int) * cap * n_heads) != cudaSuccess) {
		SL_ERROR("attn", "ws_create: cannot allocate %.1f MiB of split scratch",
			 (sizeof(float) * head_dim + sizeof(float2)) * cap * n_heads / 1048576.0);
		rc = SL_ENOMEM;
		goto fail;
	}
	if (cudaMemset(ws->split_done, 0, sizeof(int) * cap * n_heads) != cudaSuccess) {
		rc = SL_EDEVICE;
		goto fail;
	}
	*out = ws;
	return 0;
fail:
	kern_attn_ws_destroy(ws);
	return rc;
}

extern "C" void kern_attn_ws_destroy(kern_attn_ws *ws)
{
	if (!ws)
		return;
	cudaFree(ws->part_o);
	cudaFree(ws->part_ml);
	cudaFree(ws->split_done);
	free(ws);
}

extern "C" void kern_attn_ws_set_fp8_smem(kern_attn_ws *ws, int on)
{
	if (ws)
		ws->fp8_smem = on != 0;
}

extern "C" int kern_attn_ws_set_prefill_wgmma(kern_attn_ws *ws, int on)
{
	if (!ws)
		return 0;
	ws->wgmma = on && ws->wgmma_usable;
	return ws->wgmma;
}

extern "C" int kern_attention_cuda(kern_attn_ws *ws, void *out, const void *qkv, int q_stride,
				   const void *k_cache, const void *v_cache,
				   const kern_paged_batch *b, int n_heads, int n_kv_heads,
				   int head_dim, float scale, sl_dtype dt, int kv_fp8, void *stream)
{
	if (!ws || !b || !out || !qkv || !k_cache || !v_cache) {
		SL_ERROR("attn", "kern_attention_cuda: NULL argument");
		return SL_EINVAL;
	}
	if (b->n_seqs <= 0 || b->n_tokens <= 0)
		return 0;
	if (dt != SL_DT_F16 && dt != SL_DT_BF16) {
		SL_ERROR("attn", "dtype %s not supported (F16, BF16)", sl_dtype_name(dt));
		return SL_ENOTSUP;
	}
	const int bt = b->block_tokens;
	if (bt <= 0 || (bt & (bt - 1))) {
		SL_ERROR("attn", "block_tokens %d not supported (a power of two)", bt);
		return SL_ENOTSUP;
	}
	if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads) {
		SL_ERROR("attn", "%d query heads do not group over %d KV heads", n_heads, n_kv_heads);
		return SL_EINVAL;
	}
	if (n_heads > ws->n_heads || head_dim > ws->head_dim) {
		SL_ERROR("attn", "workspace sized for %d heads of %d, called with %d of %d",
			 ws->n_heads, ws->head_dim, n_heads, head_dim);
		return SL_EINVAL;
	}
	/* the tensor-core kernels take the row max of the raw scores: a
	 * positive scale (any other, NaN included, goes to the generic one) */
	int fast = kern_attn_mma_shape(head_dim, n_heads / n_kv_heads) && scale > 0.f;
	if (q_stride < n_heads * head_dim ||
	    (fast && (q_stride % 8 || !kern_aligned16(out) || !kern_aligned16(qkv) ||
		      !kern_aligned16(k_cache) || !kern_aligned16(v_cache)))) {
		SL_ERROR("attn", "q_stride %d or a buffer is not 16-byte aligned", q_stride);
		return SL_EINVAL;
	}

	attn_args a = {};
	a.out = out;
	a.qkv = qkv;
	a.q_stride = q_stride;
	a.k_cache = k_cache;
	a.v_cache = v_cache;
	a.kv_fp8 = kv_fp8 != 0;
	a.q_start = b->q_start;
	a.q_len = b->q_len;
	a.kv_len = b->kv_len;
	a.block_tables = b->block_tables;
	a.max_blocks = b->max_blocks;
	a.bt_shift = __builtin_ctz((unsigned)bt);
	a.n_heads = n_heads;
	a.n_kv_heads = n_kv_heads;
	a.group = n_heads / n_kv_heads;
	a.scale_log2 = scale * kLog2e;
	a.part_o = ws->part_o;
	a.part_ml = ws->part_ml;
	a.split_done = ws->split_done;
	cudaStream_t st = (cudaStream_t)stream;
	if (!fast)
		return attn_generic_launch(a, b, head_dim, scale, dt, st);
	if (b->max_q_len > 1)
		TRY(ws->wgmma && attn_wgmma_takes(a, head_dim)
			    ? attn_wgmma_launch(a, b, dt, st)
			    : attn_prefill_launch(a, b, head_dim, dt, st));
	/* a batch known to hold no q_len-1 sequence has no decode blocks to
	 * run: 2.6 us a layer saved on a 7B prompt (H100) */
	if (b->min_q_len > 1)
		return SL_OK;
	return attn_decode_launch(ws, a, b, head_dim, dt, st);
}
