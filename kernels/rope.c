/* rope.c — CPU reference for RoPE frequencies and the fused rotate + KV
 * write (fp32 cache values, or fp32 values rounded through fp8 E4M3). */
#include "kernels/rope.h"

#include <math.h>
#include <string.h>

#include "kernels/quant.h"

void kern_rope_inv_freq(float *inv_freq, int head_dim, const kern_rope_params *p)
{
	int half = head_dim / 2;
	for (int i = 0; i < half; i++) {
		float expo = (float)(2 * i) / (float)head_dim;
		float f = 1.0f / powf(p->theta, expo);
		if (p->llama3) {
			/* transformers' _compute_llama3_parameters: long wavelengths are
			 * slowed by `factor`, short ones kept, the band between blended. */
			float low_wl = (float)p->orig_max_pos / p->low_freq_factor;
			float high_wl = (float)p->orig_max_pos / p->high_freq_factor;
			float wl = 2.0f * (float)M_PI / f;
			float scaled = wl > low_wl ? f / p->factor : f;
			if (!(wl < high_wl) && !(wl > low_wl)) {
				float s = ((float)p->orig_max_pos / wl - p->low_freq_factor) /
					  (p->high_freq_factor - p->low_freq_factor);
				scaled = (1 - s) * scaled / p->factor + s * scaled;
			}
			f = scaled;
		}
		inv_freq[i] = f;
	}
}

static void rotate(float *x, int head_dim, const float *cs, const float *sn)
{
	int half = head_dim / 2;
	for (int i = 0; i < half; i++) {
		float a = x[i], b = x[i + half];
		x[i] = a * cs[i] - b * sn[i];
		x[i + half] = b * cs[i] + a * sn[i];
	}
}

/* n values into the cache: as they are, or rounded through fp8 E4M3. */
static void cache_store(float *dst, const float *src, int n, int kv_fp8)
{
	if (!kv_fp8) {
		memcpy(dst, src, sizeof(float) * n);
		return;
	}
	for (int i = 0; i < n; i++)
		dst[i] = kern_fp8_e4m3_to_f32(kern_f32_to_fp8_e4m3(src[i]));
}

void kern_rope_kv_write_cpu(float *qkv, float *k_cache, float *v_cache, const kern_paged_batch *b,
			    int n_heads, int n_kv_heads, int head_dim, const float *inv_freq,
			    int kv_fp8)
{
	int half = head_dim / 2, stride = (n_heads + 2 * n_kv_heads) * head_dim;
	float cs[half > 0 ? half : 1], sn[half > 0 ? half : 1];
	for (int t = 0; t < b->n_tokens; t++) {
		float *q = qkv + (long)t * stride, *k = q + n_heads * head_dim;
		float *v = k + n_kv_heads * head_dim;
		for (int i = 0; i < half; i++) {
			float ang = (float)b->positions[t] * inv_freq[i];
			cs[i] = cosf(ang);
			sn[i] = sinf(ang);
		}
		for (int h = 0; h < n_heads; h++)
			rotate(q + h * head_dim, head_dim, cs, sn);
		for (int h = 0; h < n_kv_heads; h++) {
			rotate(k + h * head_dim, head_dim, cs, sn);
			if (b->slots[t] < 0) /* padding: no cache row, as rope.cu */
				continue;
			long off = kern_kv_offset(b->slots[t], h, n_kv_heads, b->block_tokens, head_dim);
			cache_store(k_cache + off, k + h * head_dim, head_dim, kv_fp8);
			cache_store(v_cache + off, v + h * head_dim, head_dim, kv_fp8);
		}
	}
}
