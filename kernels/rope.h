/*
 * rope.h — rotary position embedding (Hugging Face's rotate_half layout:
 * element i pairs with i + head_dim/2), default or Llama-3 frequency
 * scaling, fused with writing K and V into the paged cache.
 */
#ifndef KERN_ROPE_H
#define KERN_ROPE_H

#include "kernels/paged.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct kern_rope_params {
	float theta;
	int llama3;                 /* apply Llama-3 frequency scaling */
	float factor, low_freq_factor, high_freq_factor;
	int orig_max_pos;
} kern_rope_params;

/* inv_freq: [head_dim / 2], computed as transformers does (fp32). */
void kern_rope_inv_freq(float *inv_freq, int head_dim, const kern_rope_params *p);

/* qkv: [n_tokens, (n_heads + 2 * n_kv_heads) * head_dim] = per token [q | k | v].
 * Rotates q in place; writes rotated k and v into k_cache / v_cache at each
 * token's slot (a slot < 0 marks a padding token: nothing written). kv_fp8:
 * the cache is fp8 E4M3 (--kv-dtype fp8); on the CPU its values stay fp32,
 * rounded through E4M3 (round to nearest even, saturating at +-448:
 * kern_f32_to_fp8_e4m3, scale 1), which is what the GPU stores as one-byte
 * codes. qkv keeps the unrounded k and v. */
void kern_rope_kv_write_cpu(float *qkv, float *k_cache, float *v_cache, const kern_paged_batch *b,
			    int n_heads, int n_kv_heads, int head_dim, const float *inv_freq,
			    int kv_fp8);

#ifdef SL_HAVE_CUDA
#include "common/dtype.h"
/* GPU: qkv in dtype dt, caches in dt or (kv_fp8) E4M3 codes, one byte per
 * value; inv_freq fp32 on the device. */
int kern_rope_kv_write_cuda(void *qkv, void *k_cache, void *v_cache, const kern_paged_batch *b,
			    int n_heads, int n_kv_heads, int head_dim, const float *inv_freq,
			    sl_dtype dt, int kv_fp8, void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
