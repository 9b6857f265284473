/*
 * test_attention.c — kern_attention_cuda (kernels/attention.cu) against the
 * CPU reference kern_attention_cpu on fresh random inputs every run (the
 * seed is printed; SL_TEST_SEED=N repeats a run).
 *
 * Inputs are rounded to the device dtype first and the reference runs in
 * fp32 on the rounded values, so the only differences left are the GPU's
 * own rounding (output, and P in the tensor-core prefill). Block tables are
 * shuffled, non-contiguous, with columns past each sequence's end and every
 * unused slot (spare blocks, tails of last blocks) holding large garbage, so
 * a read outside the context shows up as a wrong answer. The output is
 * poisoned with NaN (0xFF bytes) before each launch so rows the kernels
 * fail to write show up too.
 *
 * Cases per dtype (F16, BF16) and head shape (n_heads, n_kv_heads, head_dim):
 * decode (one sequence of context 1, 7, 300, 4097; 13 mixed), prefill
 * (prompts of 1, 17, 200, 1000), chunked prefill (37 new on 500 cached), a
 * mixed prefill + decode batch; each again over fp8 E4M3 caches
 * (--kv-dtype fp8: values rounded through E4M3 on both sides, one-byte
 * codes on the GPU). A last case times the decode path (prints GB/s of K/V
 * read, fp16 and fp8 caches) and prefill (TFLOP/s; prompts of 512, 2048
 * and 4096 over an fp16 cache, 2048 over fp8; on Hopper both prefill
 * kernels); no assertions. Run it alone with CK_RUN_CASE=bench, the
 * prefill cases alone with CK_RUN_CASE=prefill. On Hopper the head_dim
 * 128 prefill cases (fp16/bf16 and fp8 caches) run on the wgmma kernel
 * and again on the mma.sync one.
 * GPU host only.
 */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/attention.h"
#include "common/dtype.h"
#include "kernels/pdl.h"
#include "kernels/quant.h"
#include "common/rng.h"
#include "common/sl.h"

/* Positions a cache page holds: the engine's default (--block-tokens 16);
 * SL_ATTN_BENCH's seventh field sets it for a timing. */
static int g_block_tokens = 16;
/* 0: sequences take pages in pool order (as a fresh engine's free stack
 * hands them out), not shuffled; SL_ATTN_BENCH's eighth field. */
static int g_shuffle = 1;

static unsigned g_seed;
static uint64_t g_rng;

static void rng_seed(uint64_t s) { g_rng = s * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull; }

static uint64_t rng_next(void) { return sl_splitmix64(&g_rng); }

static float rng_uniform(float lo, float hi)
{
	return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}

static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

#define CU(call)                                                                         \
	do {                                                                             \
		cudaError_t e_ = (call);                                                 \
		ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_)); \
	} while (0)

typedef struct {
	int n_heads, n_kv_heads, head_dim;
} head_shape;

static const head_shape k_shapes[] = {
	{32, 32, 128}, {32, 8, 128}, {8, 1, 64}, {12, 4, 80}, {28, 4, 128}, {16, 2, 96},
	/* the generic path: head_dim outside the tensor-core set, a group of 16 */
	{8, 2, 16}, {6, 2, 12}, {4, 1, 48}, {16, 1, 64}, {8, 8, 8},
};
#define N_SHAPES ((int)(sizeof k_shapes / sizeof k_shapes[0]))
#define N_COMBOS (2 * N_SHAPES) /* loop index i: dtype i / N_SHAPES, shape i % N_SHAPES */

static sl_dtype combo_dt(int i) { return i / N_SHAPES ? SL_DT_BF16 : SL_DT_F16; }
static const head_shape *combo_shape(int i) { return &k_shapes[i % N_SHAPES]; }
static const char *dt_label(sl_dtype dt) { return dt == SL_DT_F16 ? "f16" : "bf16"; }

/*
 * Tolerance on max |gpu - ref| / max |ref|. Both sides see identical
 * rounded inputs and accumulate in fp32, so the error is the dtype's own
 * rounding: the output store (half an ulp: 2^-11 = 4.9e-4 for F16, 2^-8 =
 * 3.9e-3 relative for BF16) plus P rounded to the dtype before the P V
 * tensor-core product (same unit roundoff per weight; independent errors
 * that mostly cancel over the context). Worst case over ~10^6
 * elements stays within about 4 unit roundoffs: 2e-3 (F16) and 1.5e-2
 * (BF16). A wrong mask, a stale tile or a garbage read is off by O(1).
 */
static double tol_for(sl_dtype dt) { return dt == SL_DT_F16 ? 2e-3 : 1.5e-2; }

static uint16_t to_bits(float x, sl_dtype dt)
{
	return dt == SL_DT_F16 ? sl_f32_to_f16(x) : sl_f32_to_bf16(x);
}

static float from_bits(uint16_t u, sl_dtype dt)
{
	return dt == SL_DT_F16 ? sl_f16_to_f32(u) : sl_bf16_to_f32(u);
}

/* One batch on both backends: host fp32 copies (already rounded to dt) for
 * the reference and device copies in dt for the kernel. */
typedef struct {
	sl_dtype dt;
	int kv_fp8; /* caches of fp8 E4M3 codes (values rounded through E4M3 on both sides) */
	head_shape hs;
	int n_seqs, n_tokens, q_stride, n_blocks;
	int32_t *q_start, *q_len, *kv_len, *table; /* host */
	float *qkv, *kc, *vc;                      /* host, [n_tokens, q_stride], pools */
	size_t pool_elems;
	void *d_qkv, *d_k, *d_v, *d_out;
	int32_t *d_q_start, *d_q_len, *d_kv_len, *d_table;
	kern_paged_batch hb, db;
	kern_attn_ws *ws;
} attn_case;

/* A context bound above every sequence's, as a decode graph launches with
 * (the reserved context); 0: the batch's longest. */
static int g_reserve;

/* Decode over fp8 caches converts tiles in shared memory (the older path,
 * kern_attn_ws_set_fp8_smem) rather than in registers. */
static int g_fp8_smem;

/* Prefill on the mma.sync kernel on Hopper too, rather than the wgmma one
 * (kern_attn_ws_set_prefill_wgmma; other GPUs always run mma.sync). */
static int g_prefill_mma;

/* Sequence s gets q_len[s] new tokens ending a context of kv_len[s]. */
/* A cache value as both sides hold it: dt-rounded, or E4M3-rounded. */
static float cache_val(float x, const attn_case *c)
{
	if (c->kv_fp8)
		return kern_fp8_e4m3_to_f32(kern_f32_to_fp8_e4m3(x));
	return from_bits(to_bits(x, c->dt), c->dt);
}

static void case_build(attn_case *c, sl_dtype dt, int kv_fp8, const head_shape *hs, int n_seqs,
		       const int *q_len, const int *kv_len)
{
	memset(c, 0, sizeof *c);
	c->dt = dt;
	c->kv_fp8 = kv_fp8;
	c->hs = *hs;
	c->n_seqs = n_seqs;
	const int H = hs->n_heads, KH = hs->n_kv_heads, D = hs->head_dim, bt = g_block_tokens;
	c->q_stride = (H + 2 * KH) * D;
	c->q_start = malloc(sizeof(int32_t) * n_seqs);
	c->q_len = malloc(sizeof(int32_t) * n_seqs);
	c->kv_len = malloc(sizeof(int32_t) * n_seqs);
	int max_q = 0, min_q = 0, max_kv = 0, max_blocks = 0, used = 0;
	for (int s = 0; s < n_seqs; s++) {
		ck_assert(q_len[s] >= 1 && kv_len[s] >= q_len[s]);
		c->q_start[s] = c->n_tokens;
		c->q_len[s] = q_len[s];
		c->kv_len[s] = kv_len[s];
		c->n_tokens += q_len[s];
		int nb = (kv_len[s] + bt - 1) / bt;
		used += nb;
		max_q = q_len[s] > max_q ? q_len[s] : max_q;
		min_q = s == 0 || q_len[s] < min_q ? q_len[s] : min_q;
		max_kv = kv_len[s] > max_kv ? kv_len[s] : max_kv;
		max_blocks = nb > max_blocks ? nb : max_blocks;
	}
	max_blocks += 2; /* table columns past every sequence's end */
	const int spare = used / 4 + 3;
	c->n_blocks = used + spare;

	/* Shuffled pool: the first `used` ids of a random permutation go to the
	 * sequences in table order, the rest are spare; table columns past a
	 * sequence's end point at spare blocks. */
	int32_t *perm = malloc(sizeof(int32_t) * c->n_blocks);
	for (int i = 0; i < c->n_blocks; i++)
		perm[i] = i;
	for (int i = c->n_blocks - 1; i > 0 && g_shuffle; i--) {
		int j = rng_int(i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	c->table = malloc(sizeof(int32_t) * n_seqs * max_blocks);
	for (int s = 0, k = 0; s < n_seqs; s++) {
		int nb = (kv_len[s] + bt - 1) / bt;
		for (int j = 0; j < max_blocks; j++)
			c->table[s * max_blocks + j] = j < nb ? perm[k++] : perm[used + rng_int(spare)];
	}
	free(perm);

	/* Garbage everywhere first (finite, so a stray read makes a wrong
	 * number rather than a NaN the poison check would also catch), then
	 * the live positions. */
	const float garbage = kv_fp8 ? 400.f : dt == SL_DT_F16 ? 30000.f : 1e30f;
	c->pool_elems = (size_t)c->n_blocks * KH * bt * D;
	c->kc = malloc(sizeof(float) * c->pool_elems);
	c->vc = malloc(sizeof(float) * c->pool_elems);
	for (size_t i = 0; i < c->pool_elems; i++) {
		c->kc[i] = cache_val(garbage * rng_uniform(-1.f, 1.f), c);
		c->vc[i] = cache_val(garbage * rng_uniform(-1.f, 1.f), c);
	}
	for (int s = 0; s < n_seqs; s++)
		for (int p = 0; p < kv_len[s]; p++) {
			int slot = c->table[s * max_blocks + p / bt] * bt + p % bt;
			for (int kh = 0; kh < KH; kh++) {
				long off = kern_kv_offset(slot, kh, KH, bt, D);
				for (int d = 0; d < D; d++) {
					c->kc[off + d] = cache_val(rng_uniform(-1.f, 1.f), c);
					c->vc[off + d] = cache_val(rng_uniform(-1.f, 1.f), c);
				}
			}
		}
	/* q in [-2, 2] makes scores of std ~0.7: some peaked rows, some flat */
	c->qkv = malloc(sizeof(float) * c->n_tokens * c->q_stride);
	for (long i = 0; i < (long)c->n_tokens * c->q_stride; i++)
		c->qkv[i] = from_bits(to_bits(rng_uniform(-2.f, 2.f), dt), dt);

	if (g_reserve > max_kv)
		max_kv = g_reserve;
	kern_paged_batch hb = {
		.n_tokens = c->n_tokens, .n_seqs = n_seqs, .q_start = c->q_start,
		.q_len = c->q_len, .kv_len = c->kv_len, .block_tables = c->table,
		.max_blocks = max_blocks, .block_tokens = bt, .max_q_len = max_q,
		.max_kv_len = max_kv, .min_q_len = min_q, /* all-prefill batches skip decode */
	};
	c->hb = hb;

	/* device copies in dt */
	uint16_t *bits = malloc(sizeof(uint16_t) *
				(c->pool_elems > (size_t)c->n_tokens * c->q_stride
					 ? c->pool_elems
					 : (size_t)c->n_tokens * c->q_stride));
	const size_t es = kv_fp8 ? 1 : 2;
	CU(cudaMalloc(&c->d_k, es * c->pool_elems));
	CU(cudaMalloc(&c->d_v, es * c->pool_elems));
	CU(cudaMalloc(&c->d_qkv, 2 * (size_t)c->n_tokens * c->q_stride));
	CU(cudaMalloc(&c->d_out, 2 * (size_t)c->n_tokens * H * D));
	uint8_t *codes = (uint8_t *)bits;
	for (size_t i = 0; i < c->pool_elems; i++)
		if (kv_fp8)
			codes[i] = kern_f32_to_fp8_e4m3(c->kc[i]);
		else
			bits[i] = to_bits(c->kc[i], dt);
	CU(cudaMemcpy(c->d_k, bits, es * c->pool_elems, cudaMemcpyHostToDevice));
	for (size_t i = 0; i < c->pool_elems; i++)
		if (kv_fp8)
			codes[i] = kern_f32_to_fp8_e4m3(c->vc[i]);
		else
			bits[i] = to_bits(c->vc[i], dt);
	CU(cudaMemcpy(c->d_v, bits, es * c->pool_elems, cudaMemcpyHostToDevice));
	for (long i = 0; i < (long)c->n_tokens * c->q_stride; i++)
		bits[i] = to_bits(c->qkv[i], dt);
	CU(cudaMemcpy(c->d_qkv, bits, 2 * (size_t)c->n_tokens * c->q_stride,
		      cudaMemcpyHostToDevice));
	free(bits);
	CU(cudaMalloc((void **)&c->d_q_start, sizeof(int32_t) * n_seqs));
	CU(cudaMalloc((void **)&c->d_q_len, sizeof(int32_t) * n_seqs));
	CU(cudaMalloc((void **)&c->d_kv_len, sizeof(int32_t) * n_seqs));
	CU(cudaMalloc((void **)&c->d_table, sizeof(int32_t) * n_seqs * max_blocks));
	CU(cudaMemcpy(c->d_q_start, c->q_start, sizeof(int32_t) * n_seqs, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(c->d_q_len, c->q_len, sizeof(int32_t) * n_seqs, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(c->d_kv_len, c->kv_len, sizeof(int32_t) * n_seqs, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(c->d_table, c->table, sizeof(int32_t) * n_seqs * max_blocks,
		      cudaMemcpyHostToDevice));
	c->db = hb;
	c->db.q_start = c->d_q_start;
	c->db.q_len = c->d_q_len;
	c->db.kv_len = c->d_kv_len;
	c->db.block_tables = c->d_table;

	int rc = kern_attn_ws_create(c->n_tokens, H, D, max_kv, &c->ws);
	ck_assert_msg(rc == 0, "kern_attn_ws_create: %d", rc);
	kern_attn_ws_set_fp8_smem(c->ws, g_fp8_smem);
	kern_attn_ws_set_prefill_wgmma(c->ws, !g_prefill_mma);
}

static void case_free(attn_case *c)
{
	kern_attn_ws_destroy(c->ws);
	cudaFree(c->d_k);
	cudaFree(c->d_v);
	cudaFree(c->d_qkv);
	cudaFree(c->d_out);
	cudaFree(c->d_q_start);
	cudaFree(c->d_q_len);
	cudaFree(c->d_kv_len);
	cudaFree(c->d_table);
	free(c->q_start);
	free(c->q_len);
	free(c->kv_len);
	free(c->table);
	free(c->qkv);
	free(c->kc);
	free(c->vc);
}

static int case_launch(attn_case *c)
{
	const head_shape *hs = &c->hs;
	return kern_attention_cuda(c->ws, c->d_out, c->d_qkv, c->q_stride, c->d_k, c->d_v, &c->db,
				   hs->n_heads, hs->n_kv_heads, hs->head_dim,
				   1.0f / sqrtf((float)hs->head_dim), c->dt, c->kv_fp8, NULL);
}

/* Builds, runs both sides, prints one line, asserts the tolerance. */
static int g_kv_fp8; /* the cases below with fp8 caches (the *_fp8 tests set it) */

static void check_batch(const char *kind, const char *label, sl_dtype dt, const head_shape *hs,
			int n_seqs, const int *q_len, const int *kv_len)
{
	attn_case c;
	case_build(&c, dt, g_kv_fp8, hs, n_seqs, q_len, kv_len);
	const int H = hs->n_heads, D = hs->head_dim;
	const size_t n_out = (size_t)c.n_tokens * H * D;

	float *ref = malloc(sizeof(float) * n_out);
	kern_attention_cpu(ref, c.qkv, c.q_stride, c.kc, c.vc, &c.hb, H, hs->n_kv_heads, D,
			   1.0f / sqrtf((float)D));

	CU(cudaMemset(c.d_out, 0xff, 2 * n_out)); /* NaN in both F16 and BF16 */
	int rc = case_launch(&c);
	ck_assert_msg(rc == 0, "kern_attention_cuda: %d", rc);
	CU(cudaDeviceSynchronize());
	uint16_t *bits = malloc(2 * n_out);
	CU(cudaMemcpy(bits, c.d_out, 2 * n_out, cudaMemcpyDeviceToHost));

	double max_ref = 0, worst = 0;
	for (size_t i = 0; i < n_out; i++)
		max_ref = fmax(max_ref, fabs(ref[i]));
	const double tol = tol_for(dt);
	long first_bad = -1;
	for (size_t i = 0; i < n_out; i++) {
		float got = from_bits(bits[i], dt);
		double rel = isfinite(got) ? fabs(got - ref[i]) / max_ref : INFINITY;
		if (rel > worst)
			worst = rel;
		if (rel > tol && first_bad < 0)
			first_bad = (long)i;
	}
	printf("attention %s %s%s%s (%d,%d,%d) %s: worst rel err %.1e (tol %.1e)\n", kind,
	       dt_label(dt), c.kv_fp8 ? " kv-fp8" : "", g_prefill_mma ? " mma-prefill" : "", H,
	       hs->n_kv_heads, D, label, worst, tol);
	fflush(stdout);
	float got_bad = first_bad >= 0 ? from_bits(bits[first_bad], dt) : 0.f;
	float ref_bad = first_bad >= 0 ? ref[first_bad] : 0.f;
	free(bits);
	free(ref);
	case_free(&c);
	ck_assert_msg(first_bad < 0,
		      "%s %s%s (%d,%d,%d) %s: token %ld head %ld dim %ld: gpu %g, ref %g "
		      "(max |ref| %g, tol %g relative; seed %u)",
		      kind, dt_label(dt), g_kv_fp8 ? g_fp8_smem ? " kv-fp8 smem" : " kv-fp8" : "", H, hs->n_kv_heads, D, label, first_bad / (H * D),
		      first_bad % (H * D) / D, first_bad % D, got_bad, ref_bad, max_ref, tol,
		      g_seed);
}

START_TEST(test_decode)
{
	sl_dtype dt = combo_dt(_i);
	const head_shape *hs = combo_shape(_i);
	rng_seed(g_seed * 131ull + 1000 + _i);
	static const int ctx[] = {1, 7, 300, 4097};
	for (int k = 0; k < 4; k++) {
		int q = 1, kv = ctx[k];
		char label[32];
		snprintf(label, sizeof label, "ctx %d", kv);
		check_batch("decode", label, dt, hs, 1, &q, &kv);
	}
	int q[13], kv[13];
	for (int s = 0; s < 13; s++) {
		q[s] = 1;
		kv[s] = 1 + rng_int(s == 5 ? 3000 : 700);
	}
	check_batch("decode", "13 seqs mixed ctx", dt, hs, 13, q, kv);
	/* launched for a reserved 4096-token context, as a decode graph is:
	 * each sequence spreads its own context over the splits */
	g_reserve = 4096;
	static const int short_ctx[] = {65, 300, 1500};
	for (int k = 0; k < 3; k++) {
		int q1 = 1, kv1 = short_ctx[k];
		char label[48];
		snprintf(label, sizeof label, "ctx %d of 4096 reserved", kv1);
		check_batch("decode", label, dt, hs, 1, &q1, &kv1);
	}
	const int q3[] = {1, 1, 1};
	check_batch("decode", "3 seqs of 4096 reserved", dt, hs, 3, q3, short_ctx);
	g_reserve = 0;
}
END_TEST

START_TEST(test_prefill)
{
	sl_dtype dt = combo_dt(_i);
	const head_shape *hs = combo_shape(_i);
	rng_seed(g_seed * 131ull + 2000 + _i);
	static const int len[] = {1, 17, 200, 1000};
	for (int k = 0; k < 4; k++) {
		char label[32];
		snprintf(label, sizeof label, "prompt %d", len[k]);
		check_batch("prefill", label, dt, hs, 1, &len[k], &len[k]);
	}
}
END_TEST

START_TEST(test_chunked_prefill)
{
	sl_dtype dt = combo_dt(_i);
	const head_shape *hs = combo_shape(_i);
	rng_seed(g_seed * 131ull + 3000 + _i);
	int q = 37, kv = 500 + 37;
	check_batch("chunked", "37 on 500 cached", dt, hs, 1, &q, &kv);
}
END_TEST

START_TEST(test_mixed_batch)
{
	sl_dtype dt = combo_dt(_i);
	const head_shape *hs = combo_shape(_i);
	rng_seed(g_seed * 131ull + 4000 + _i);
	/* new prompts, a chunk on cached context, decodes short and long */
	static const int q[] = {50, 1, 20, 1, 130, 1, 1, 65};
	static const int kv[] = {50, 800, 333, 1, 130, 64, 2049, 193};
	check_batch("mixed", "5 decode + 3 prefill", dt, hs, 8, q, kv);
}
END_TEST

/* The same cases over fp8 E4M3 caches: both sides read the same E4M3
 * values (the kernels convert them exactly), so the tolerances stay. */
START_TEST(test_decode_fp8)
{
	g_kv_fp8 = 1;
	test_decode_fn(_i);
	g_kv_fp8 = 0;
}
END_TEST

/* The decode cases again on the older shared-memory conversion: every
 * head_dim takes it when asked (64, 96 and 128 take the register path
 * by default, 80 this one always). */
START_TEST(test_decode_fp8_smem)
{
	g_kv_fp8 = g_fp8_smem = 1;
	test_decode_fn(_i);
	g_kv_fp8 = g_fp8_smem = 0;
}
END_TEST

START_TEST(test_prefill_fp8)
{
	g_kv_fp8 = 1;
	test_prefill_fn(_i);
	g_kv_fp8 = 0;
}
END_TEST

START_TEST(test_chunked_prefill_fp8)
{
	g_kv_fp8 = 1;
	test_chunked_prefill_fn(_i);
	g_kv_fp8 = 0;
}
END_TEST

START_TEST(test_mixed_batch_fp8)
{
	g_kv_fp8 = 1;
	test_mixed_batch_fn(_i);
	g_kv_fp8 = 0;
}
END_TEST

/* The prefill cases again on the mma.sync kernel where Hopper would take
 * the wgmma one (head_dim 128): both kernels stay checked on the H200. */
START_TEST(test_prefill_mma)
{
	if (combo_shape(_i)->head_dim != 128)
		return;
	g_prefill_mma = 1;
	for (g_kv_fp8 = 0; g_kv_fp8 <= 1; g_kv_fp8++) {
		test_prefill_fn(_i);
		test_chunked_prefill_fn(_i);
		test_mixed_batch_fn(_i);
	}
	g_kv_fp8 = g_prefill_mma = 0;
}
END_TEST

/* On an sm_90 GPU the wgmma prefill kernel must be there to choose (the
 * build lists 90 in CUDA_ARCHS), or the cases above would test only the
 * mma.sync one; elsewhere it must never be chosen. */
START_TEST(test_prefill_engine)
{
	struct cudaDeviceProp prop;
	CU(cudaGetDeviceProperties(&prop, 0));
	kern_attn_ws *ws = NULL;
	ck_assert_int_eq(kern_attn_ws_create(4, 32, 128, 64, &ws), 0);
	const int hopper = prop.major == 9 && prop.minor == 0;
	const int on = kern_attn_ws_set_prefill_wgmma(ws, 1);
	printf("attention prefill engine on %s (sm_%d%d): %s\n", prop.name, prop.major, prop.minor,
	       on ? "wgmma" : "mma.sync");
	ck_assert_int_eq(on, hopper);
	ck_assert_int_eq(kern_attn_ws_set_prefill_wgmma(ws, 0), 0);
	kern_attn_ws_destroy(ws);
}
END_TEST

/* Shapes and sizes the kernels do not take are refused, not miscomputed. */
START_TEST(test_refusals)
{
	kern_attn_ws *ws = NULL;
	ck_assert_int_eq(kern_attn_ws_create(4, 16, 128, 64, &ws), 0);
	void *buf = NULL;
	CU(cudaMalloc(&buf, 1 << 20));
	int32_t zeros[4] = {0, 0, 0, 0};
	kern_paged_batch b = {.n_tokens = 1, .n_seqs = 1, .q_start = zeros, .q_len = zeros,
			      .kv_len = zeros, .block_tables = zeros, .max_blocks = 1,
			      .block_tokens = 16, .max_q_len = 1, .max_kv_len = 1};
	/* head_dim 258: past the generic path's 256 (workspace made big enough) */
	kern_attn_ws *big = NULL;
	ck_assert_int_eq(kern_attn_ws_create(4, 16, 512, 64, &big), 0);
	ck_assert_int_eq(kern_attention_cuda(big, buf, buf, 4 * 258, buf, buf, &b, 4, 4, 258, 1.f,
					     SL_DT_F16, 0, NULL),
			 SL_ENOTSUP);
	kern_attn_ws_destroy(big);
	/* block_tokens 24 */
	b.block_tokens = 24;
	ck_assert_int_eq(kern_attention_cuda(ws, buf, buf, 8 * 64, buf, buf, &b, 4, 4, 64, 1.f,
					     SL_DT_F16, 0, NULL),
			 SL_ENOTSUP);
	b.block_tokens = 16;
	/* F32 storage */
	ck_assert_int_eq(kern_attention_cuda(ws, buf, buf, 8 * 64, buf, buf, &b, 4, 4, 64, 1.f,
					     SL_DT_F32, 0, NULL),
			 SL_ENOTSUP);
	cudaFree(buf);
	kern_attn_ws_destroy(ws);
}
END_TEST

/* Mean time of one launch over back-to-back launches, in microseconds. */
static double time_launches(attn_case *c, int iters)
{
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(case_launch(c), 0);
	cudaEvent_t e0, e1;
	CU(cudaEventCreate(&e0));
	CU(cudaEventCreate(&e1));
	CU(cudaEventRecord(e0, NULL));
	for (int i = 0; i < iters; i++)
		case_launch(c);
	CU(cudaEventRecord(e1, NULL));
	CU(cudaEventSynchronize(e1));
	float ms = 0;
	CU(cudaEventElapsedTime(&ms, e0, e1));
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return 1e3 * ms / iters;
}

/* One line of decode timing: us per launch and K/V bytes read per second. */
static void bench_decode_print(attn_case *c, const head_shape *hs, int n_seqs, int ctx,
			       const char *cache)
{
	double us = time_launches(c, 100);
	double bytes = 2.0 /* K, V */ * n_seqs * ctx * hs->n_kv_heads * hs->head_dim *
		       (c->kv_fp8 ? 1 : 2);
	printf("attention decode bench f16%s (%d,%d,%d) batch %d ctx %d pages %d: %.1f us/call, "
	       "K/V %.1f MB, %.0f GB/s\n",
	       cache, hs->n_heads, hs->n_kv_heads, hs->head_dim, n_seqs, ctx, g_block_tokens, us,
	       bytes / 1e6, bytes / (us * 1e3));
	fflush(stdout);
}

/* Informational: decode over an fp16 cache (kv_fp8 0), or over an fp8 one
 * (1) on both paths: codes into registers, then the shared-memory
 * conversion, on the same case (building one takes most of the time). */
static void bench_decode(head_shape hs, int n_seqs, int ctx, int kv_fp8)
{
	int *q = malloc(sizeof(int) * n_seqs), *kv = malloc(sizeof(int) * n_seqs);
	for (int s = 0; s < n_seqs; s++) {
		q[s] = 1;
		kv[s] = ctx;
	}
	attn_case c;
	case_build(&c, SL_DT_F16, kv_fp8, &hs, n_seqs, q, kv);
	bench_decode_print(&c, &hs, n_seqs, ctx, kv_fp8 ? " kv-fp8" : "");
	if (kv_fp8) {
		kern_attn_ws_set_fp8_smem(c.ws, 1);
		bench_decode_print(&c, &hs, n_seqs, ctx, " kv-fp8 smem");
	}
	case_free(&c);
	free(q);
	free(kv);
}

/* Informational: one causal prompt, useful FLOPs (QK and PV) per second;
 * 32 heads of 128, kv_heads of them for K and V. */
static void bench_prefill(int len, int kv_heads, int kv_fp8)
{
	const head_shape hs = {32, kv_heads, 128};
	attn_case c;
	case_build(&c, SL_DT_F16, kv_fp8, &hs, 1, &len, &len);
	double flops = 4.0 * hs.n_heads * hs.head_dim * ((double)len * (len + 1) / 2);
	for (int mma = 0; mma <= 1; mma++) {
		int wg = kern_attn_ws_set_prefill_wgmma(c.ws, !mma);
		if (!mma && !wg)
			continue; /* not Hopper: mma.sync only */
		double us = time_launches(&c, 20);
		printf("attention prefill bench f16%s (32,%d,128) prompt %d %s: %.1f us/call, "
		       "%.0f TFLOP/s\n",
		       kv_fp8 ? " kv-fp8" : "", kv_heads, len, wg ? "wgmma" : "mma.sync", us,
		       flops / (us * 1e6));
	}
	fflush(stdout);
	case_free(&c);
}

/* SL_ATTN_BENCH="H,KH,D,SEQS,CTX[,RESERVE[,BT[,SHUFFLE]]]": that decode
 * case alone, on each path, launched for a reserved context as a decode
 * graph is, over cache pages of BT positions (default 16; a power of two)
 * drawn from the pool shuffled (SHUFFLE 1, the default) or in order (0).
 * SL_ATTN_BENCH=prefill: the prefill cases alone. */
static int bench_one(const char *spec)
{
	head_shape hs;
	int seqs, ctx, reserve = 0, bt = 16, shuffle = 1;
	if (sscanf(spec, "%d,%d,%d,%d,%d,%d,%d,%d", &hs.n_heads, &hs.n_kv_heads, &hs.head_dim,
		   &seqs, &ctx, &reserve, &bt, &shuffle) < 5)
		return 0;
	ck_assert_msg(bt >= 1 && bt <= 1024 && !(bt & (bt - 1)), "SL_ATTN_BENCH: BT %d", bt);
	printf("SL_ATTN_BENCH=%s (reserved context %d, pages of %d positions, %s)\n", spec,
	       reserve, bt, shuffle ? "shuffled" : "in pool order");
	g_reserve = reserve;
	g_block_tokens = bt;
	g_shuffle = shuffle;
	for (int f = 0; f <= 1; f++)
		bench_decode(hs, seqs, ctx, f);
	g_reserve = 0;
	g_block_tokens = 16;
	g_shuffle = 1;
	return 1;
}

START_TEST(test_bench)
{
	rng_seed(g_seed * 131ull + 5000);
	const char *one = getenv("SL_ATTN_BENCH");
	if (one && bench_one(one))
		return;
	const head_shape gqa = {32, 8, 128}, mha = {32, 32, 128}; /* 8B-like, 7B */
	for (int f = 0; f <= 1 && !(one && !strcmp(one, "prefill")); f++) {
		bench_decode(gqa, 1, 4096, f);
		bench_decode(gqa, 32, 1024, f);
		bench_decode(mha, 1, 4096, f);
		bench_decode(mha, 64, 640, f); /* bench/serve.sh's 64 streams, mid-way */
	}
	bench_prefill(512, 8, 0);
	bench_prefill(2048, 8, 0);
	bench_prefill(4096, 8, 0);
	bench_prefill(2048, 8, 1);
	bench_prefill(2048, 32, 0); /* the 7B's */
}
END_TEST

static Suite *attention_suite(void)
{
	Suite *s = suite_create("attention");
	TCase *tc = tcase_create("vs_cpu");
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_decode, 0, N_COMBOS);
	tcase_add_loop_test(tc, test_decode_fp8, 0, N_COMBOS);
	tcase_add_loop_test(tc, test_decode_fp8_smem, 0, N_COMBOS);
	tcase_add_test(tc, test_refusals);
	suite_add_tcase(s, tc);
	/* CK_RUN_CASE=prefill: the prefill cases alone, over fp16/bf16 and
	 * fp8 caches, on both prefill kernels where Hopper has two */
	TCase *tp = tcase_create("prefill");
	tcase_set_timeout(tp, 600);
	tcase_add_test(tp, test_prefill_engine);
	tcase_add_loop_test(tp, test_prefill, 0, N_COMBOS);
	tcase_add_loop_test(tp, test_chunked_prefill, 0, N_COMBOS);
	tcase_add_loop_test(tp, test_mixed_batch, 0, N_COMBOS);
	tcase_add_loop_test(tp, test_prefill_fp8, 0, N_COMBOS);
	tcase_add_loop_test(tp, test_chunked_prefill_fp8, 0, N_COMBOS);
	tcase_add_loop_test(tp, test_mixed_batch_fp8, 0, N_COMBOS);
	tcase_add_loop_test(tp, test_prefill_mma, 0, N_COMBOS);
	suite_add_tcase(s, tp);
	TCase *tb = tcase_create("bench");
	tcase_set_timeout(tb, 300);
	tcase_add_test(tb, test_bench);
	suite_add_tcase(s, tb);
	return s;
}

int main(void)
{
	const char *env = getenv("SL_TEST_SEED");
	g_seed = env ? (unsigned)strtoul(env, NULL, 10) : (unsigned)time(NULL);
	int n_dev = 0;
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
		fprintf(stderr, "test_attention: no CUDA device\n");
		return 1;
	}
	const char *pdl = getenv("SL_PDL"); /* as the backend launches them (kernels/pdl.h) */
	kern_pdl_enable(!(pdl && !strcmp(pdl, "0")));
	struct cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
	printf("test_attention: seed %u (SL_TEST_SEED=%u repeats), device %s\n", g_seed, g_seed,
	       prop.name);
	fflush(stdout);
	SRunner *sr = srunner_create(attention_suite());
	/* one CUDA context for the whole run: no fork per test */
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
