/*
 * test_cpu_kernels.c — the CPU references against independent, naive
 * formulations: paged attention vs dense attention over the same tokens
 * with shuffled block tables; dtype rounding; the KV block pool; sampling
 * determinism and top-k / top-p semantics.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "common/dtype.h"
#include "node/kv.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "common/sl.h"

static float frand(unsigned *s) { return (float)rand_r(s) / RAND_MAX * 2 - 1; }

/* Dense causal GQA attention: k, v as [n_ctx, n_kv, hd]. */
static void dense_attention(float *out, const float *q, const float *k, const float *v, int n_q,
			    int n_ctx, int nh, int nkv, int hd)
{
	for (int i = 0; i < n_q; i++)
		for (int h = 0; h < nh; h++) {
			int pos = n_ctx - n_q + i, kh = h / (nh / nkv);
			double s[n_ctx], mx = -1e30, sum = 0;
			for (int t = 0; t <= pos; t++) {
				s[t] = 0;
				for (int d = 0; d < hd; d++)
					s[t] += q[(i * nh + h) * hd + d] * k[(t * nkv + kh) * hd + d];
				s[t] /= sqrt(hd);
				mx = s[t] > mx ? s[t] : mx;
			}
			for (int t = 0; t <= pos; t++)
				sum += (s[t] = exp(s[t] - mx));
			for (int d = 0; d < hd; d++) {
				double o = 0;
				for (int t = 0; t <= pos; t++)
					o += s[t] / sum * v[(t * nkv + kh) * hd + d];
				out[(i * nh + h) * hd + d] = (float)o;
			}
		}
}

START_TEST(paged_attention_matches_dense)
{
	enum { NH = 6, NKV = 2, HD = 8, BT = 4, NB = 16, NCTX = 23, NQ = 5 };
	unsigned seed = 1234;
	float q[NQ * NH * HD], k[NCTX * NKV * HD], v[NCTX * NKV * HD];
	for (size_t i = 0; i < sizeof q / 4; i++) q[i] = frand(&seed);
	for (size_t i = 0; i < sizeof k / 4; i++) k[i] = frand(&seed), v[i] = frand(&seed);
	/* scatter the context into shuffled blocks; fill the rest with garbage */
	int32_t table[NB] = {9, 3, 14, 0, 7, 11, 2};
	static float kc[NB * NKV * BT * HD], vc[NB * NKV * BT * HD];
	for (size_t i = 0; i < sizeof kc / 4; i++) kc[i] = vc[i] = 1e6f;
	for (int t = 0; t < NCTX; t++)
		for (int h = 0; h < NKV; h++) {
			long off = kern_kv_offset(table[t / BT] * BT + t % BT, h, NKV, BT, HD);
			memcpy(kc + off, k + (t * NKV + h) * HD, sizeof(float) * HD);
			memcpy(vc + off, v + (t * NKV + h) * HD, sizeof(float) * HD);
		}
	int32_t q_start = 0, q_len = NQ, kv_len = NCTX;
	kern_paged_batch b = {.n_tokens = NQ, .n_seqs = 1, .q_start = &q_start, .q_len = &q_len,
			      .kv_len = &kv_len, .block_tables = table, .max_blocks = NB,
			      .block_tokens = BT, .max_q_len = NQ, .max_kv_len = NCTX};
	float got[NQ * NH * HD], want[NQ * NH * HD];
	kern_attention_cpu(got, q, NH * HD, kc, vc, &b, NH, NKV, HD, 1.0f / sqrtf(HD));
	dense_attention(want, q, k, v, NQ, NCTX, NH, NKV, HD);
	for (int i = 0; i < NQ * NH * HD; i++)
		ck_assert_msg(fabsf(got[i] - want[i]) < 1e-5f, "element %d: paged %g dense %g", i,
			      got[i], want[i]);
}
END_TEST

START_TEST(dtype_rounding)
{
	/* exact values survive; halfway cases round to even; extremes saturate */
	ck_assert_float_eq(sl_f16_to_f32(sl_f32_to_f16(1.5f)), 1.5f);
	ck_assert_float_eq(sl_f16_to_f32(sl_f32_to_f16(-65504.0f)), -65504.0f);
	ck_assert(isinf(sl_f16_to_f32(sl_f32_to_f16(70000.0f))));
	ck_assert(isnan(sl_f16_to_f32(sl_f32_to_f16(NAN))));
	ck_assert_float_eq(sl_f16_to_f32(sl_f32_to_f16(1.0f + 1.0f / 2048)), 1.0f);  /* tie -> even */
	ck_assert_float_eq(sl_f16_to_f32(sl_f32_to_f16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
	ck_assert_float_eq(sl_f16_to_f32(sl_f32_to_f16(5.96e-8f)), 5.9604645e-8f); /* subnormal */
	ck_assert_float_eq(sl_bf16_to_f32(sl_f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
	ck_assert_float_eq(sl_bf16_to_f32(sl_f32_to_bf16(3.0f)), 3.0f);
	unsigned seed = 7;
	for (int i = 0; i < 100000; i++) {
		float x = frand(&seed) * 1000;
		float h = sl_f16_to_f32(sl_f32_to_f16(x)), b = sl_bf16_to_f32(sl_f32_to_bf16(x));
		ck_assert_msg(fabsf(h - x) <= fabsf(x) * (1.0f / 2048) + 6e-8f, "f16 %g -> %g", x, h);
		ck_assert_msg(fabsf(b - x) <= fabsf(x) * (1.0f / 256), "bf16 %g -> %g", x, b);
	}
}
END_TEST

START_TEST(kv_pool_all_or_nothing)
{
	kv_pool *p;
	ck_assert_int_eq(kv_pool_create(5, 4, &p), 0);
	kv_table a = {0}, b = {0};
	ck_assert_int_eq(kv_table_reserve(p, &a, 9), 0);  /* 3 blocks */
	ck_assert_int_eq(a.n, 3);
	ck_assert_int_eq(kv_pool_free_blocks(p), 2);
	ck_assert_int_eq(kv_table_reserve(p, &b, 12), SL_ENOMEM); /* needs 3, has 2 */
	ck_assert_int_eq(b.n, 0);
	ck_assert_int_eq(kv_pool_free_blocks(p), 2);
	ck_assert_int_eq(kv_table_reserve(p, &a, 12), 0);  /* same block count: no-op */
	ck_assert_int_eq(kv_table_reserve(p, &b, 8), 0);
	ck_assert_int_eq(kv_pool_free_blocks(p), 0);
	for (int i = 0; i < a.n; i++)
		for (int j = 0; j < b.n; j++)
			ck_assert_int_ne(a.blocks[i], b.blocks[j]);
	kv_table_release(p, &a);
	kv_table_release(p, &b);
	ck_assert_int_eq(kv_pool_free_blocks(p), 5);
	kv_pool_destroy(p);
}
END_TEST

/* RoPE + KV write: a padding token (slot -1) is turned in qkv like any
 * other but writes no cache row; the real token's row lands at its slot. */
START_TEST(rope_padding_slot_writes_nothing)
{
	enum { HD = 8, HQ = 2, HKV = 1, BT = 4, NB = 2, ROW = (HQ + 2 * HKV) * HD };
	float qkv[2 * ROW], kc[NB * BT * HD], vc[NB * BT * HD], inv[HD / 2];
	unsigned seed = 7;
	for (int i = 0; i < 2 * ROW; i++)
		qkv[i] = frand(&seed);
	for (int i = 0; i < NB * BT * HD; i++)
		kc[i] = vc[i] = 1234.0f;
	const kern_rope_params rp = {.theta = 10000.0f};
	kern_rope_inv_freq(inv, HD, &rp);
	const int32_t pos[2] = {5, 9}, slots[2] = {-1, 6};
	const kern_paged_batch b = {.n_tokens = 2, .positions = pos, .slots = slots,
				    .block_tokens = BT};
	float before0 = qkv[1];
	kern_rope_kv_write_cpu(qkv, kc, vc, &b, HQ, HKV, HD, inv, 0);
	ck_assert_msg(qkv[1] != before0, "the padding token's q was not turned");
	long off = kern_kv_offset(6, 0, HKV, BT, HD);
	for (int i = 0; i < NB * BT * HD; i++) {
		int mine = i >= off && i < off + HD;
		ck_assert_msg(mine ? kc[i] == qkv[ROW + HQ * HD + i - off] : kc[i] == 1234.0f,
			      "k cache element %d", i);
		ck_assert_msg(mine ? vc[i] == qkv[ROW + (HQ + HKV) * HD + i - off] : vc[i] == 1234.0f,
			      "v cache element %d", i);
	}
}
END_TEST

static void random_logits(float *l, int n, unsigned seed)
{
	for (int i = 0; i < n; i++)
		l[i] = frand(&seed) * 5;
}

START_TEST(sampling_reproducible)
{
	enum { V = 1000 };
	float l[V];
	void *w = malloc(kern_sample_work_bytes(V));
	random_logits(l, V, 3);
	kern_sample_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 42};
	int differs = 0;
	for (uint64_t pos = 0; pos < 50; pos++) {
		int a = kern_sample_cpu(l, V, &p, pos, w), b = kern_sample_cpu(l, V, &p, pos, w);
		ck_assert_int_eq(a, b);
		p.seed = 43;
		differs += kern_sample_cpu(l, V, &p, pos, w) != a;
		p.seed = 42;
	}
	ck_assert_int_gt(differs, 25); /* another seed gives other tokens */
	free(w);
}
END_TEST

START_TEST(sampling_topk_topp)
{
	enum { V = 500 };
	float l[V];
	void *w = malloc(kern_sample_work_bytes(V));
	random_logits(l, V, 5);
	int best = kern_argmax_cpu(l, V);
	kern_sample_params g = {.temperature = 0, .top_p = 1};
	ck_assert_int_eq(kern_sample_cpu(l, V, &g, 0, w), best);
	kern_sample_params k1 = {.temperature = 2, .top_k = 1, .top_p = 1, .seed = 9};
	kern_sample_params p0 = {.temperature = 2, .top_p = 1e-6f, .seed = 9};
	kern_sample_params k5 = {.temperature = 5, .top_k = 5, .top_p = 1, .seed = 9};
	/* the 5 largest logits */
	int top[5];
	for (int j = 0; j < 5; j++) {
		top[j] = -1;
		for (int i = 0; i < V; i++) {
			int used = 0;
			for (int q = 0; q < j; q++) used |= top[q] == i;
			if (!used && (top[j] < 0 || l[i] > l[top[j]])) top[j] = i;
		}
	}
	int seen[5] = {0};
	for (uint64_t pos = 0; pos < 400; pos++) {
		ck_assert_int_eq(kern_sample_cpu(l, V, &k1, pos, w), best);
		ck_assert_int_eq(kern_sample_cpu(l, V, &p0, pos, w), best);
		int t = kern_sample_cpu(l, V, &k5, pos, w), in = 0;
		for (int j = 0; j < 5; j++)
			if (t == top[j]) in = 1, seen[j]++;
		ck_assert_msg(in, "top-k 5 sampled %d, outside the top 5", t);
	}
	for (int j = 0; j < 5; j++)
		ck_assert_int_gt(seen[j], 0); /* high temperature: all five occur */
	free(w);
}
END_TEST

START_TEST(sampling_frequencies)
{
	/* logits ln(1), ln(2), ln(3), ln(4): probabilities 0.1 .. 0.4 */
	float l[4] = {0, logf(2), logf(3), logf(4)};
	void *w = malloc(kern_sample_work_bytes(4));
	kern_sample_params p = {.temperature = 1, .top_p = 1, .seed = 77};
	int count[4] = {0};
	enum { N = 20000 };
	for (uint64_t pos = 0; pos < N; pos++)
		count[kern_sample_cpu(l, 4, &p, pos, w)]++;
	for (int i = 0; i < 4; i++)
		ck_assert_msg(fabs(count[i] / (double)N - 0.1 * (i + 1)) < 0.015,
			      "token %d drawn %d of %d times", i, count[i], N);
	free(w);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cpu_kernels");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, paged_attention_matches_dense);
	tcase_add_test(tc, dtype_rounding);
	tcase_add_test(tc, kv_pool_all_or_nothing);
	tcase_add_test(tc, rope_padding_slot_writes_nothing);
	tcase_add_test(tc, sampling_reproducible);
	tcase_add_test(tc, sampling_topk_topp);
	tcase_add_test(tc, sampling_frequencies);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
