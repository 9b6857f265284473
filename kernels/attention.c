/* attention.c — CPU reference paged causal GQA attention (two-pass softmax). */
#include "kernels/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void attend_one(float *o, const float *q, const float *k_cache, const float *v_cache,
		       const int32_t *table, int n_ctx, int kvh, int n_kv_heads, int bt,
		       int head_dim, float scale, float *score)
{
	float mx = -INFINITY;
	for (int t = 0; t < n_ctx; t++) {
		int slot = table[t / bt] * bt + t % bt;
		const float *k = k_cache + kern_kv_offset(slot, kvh, n_kv_heads, bt, head_dim);
		float s = 0;
		for (int d = 0; d < head_dim; d++)
			s += q[d] * k[d];
		score[t] = s * scale;
		if (score[t] > mx)
			mx = score[t];
	}
	float sum = 0;
	for (int t = 0; t < n_ctx; t++) {
		score[t] = expf(score[t] - mx);
		sum += score[t];
	}
	memset(o, 0, sizeof(float) * head_dim);
	for (int t = 0; t < n_ctx; t++) {
		int slot = table[t / bt] * bt + t % bt;
		const float *v = v_cache + kern_kv_offset(slot, kvh, n_kv_heads, bt, head_dim);
		float p = score[t] / sum;
		for (int d = 0; d < head_dim; d++)
			o[d] += p * v[d];
	}
}

void kern_attention_cpu(float *out, const float *qkv, int q_stride, const float *k_cache,
			const float *v_cache, const kern_paged_batch *b, int n_heads,
			int n_kv_heads, int head_dim, float scale)
{
	int group = n_heads / n_kv_heads;
#pragma omp parallel
	{
		float *score = malloc(sizeof(float) * (b->max_kv_len > 0 ? b->max_kv_len : 1));
#pragma omp for collapse(2) schedule(dynamic)
		for (int s = 0; s < b->n_seqs; s++) {
			for (int h = 0; h < n_heads; h++) {
				const int32_t *table = b->block_tables + (long)s * b->max_blocks;
				for (int i = 0; i < b->q_len[s]; i++) {
					int t = b->q_start[s] + i;
					int n_ctx = b->kv_len[s] - b->q_len[s] + i + 1;
					attend_one(out + (long)t * n_heads * head_dim + h * head_dim,
						   qkv + (long)t * q_stride + h * head_dim, k_cache,
						   v_cache, table, n_ctx, h / group, n_kv_heads,
						   b->block_tokens, head_dim, scale, score);
				}
			}
		}
		free(score);
	}
}
