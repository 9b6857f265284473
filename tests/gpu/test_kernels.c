/*
 * test_kernels.c — every CUDA kernel in kernels/<op>.cu against its CPU
 * reference (kernels/<op>.c) on fresh random inputs, for F16 and BF16 storage,
 * over shapes that do and do not fit the 16-byte vector paths (widths 72,
 * 100, 4096, 5120; 1, 3, 17, 64 tokens; head_dim 64, 128, 80, 72; paged KV
 * with shuffled block tables). Inputs are rounded to the dtype first, so
 * the reference sees exactly what the GPU sees; device outputs are poisoned
 * (NaN) before each launch. One line per kernel and dtype reports the worst
 * error; the seed is printed first and SL_TEST_SEED replays it.
 * Runs on a GPU host only (make test-gpu).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/embedding.h"
#include "gpu_test.h"
#include "kernels/matmul.h"
#include "kernels/paged.h"
#include "kernels/rmsnorm.h"
#include "kernels/quant.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "common/sl.h"
#include "kernels/swiglu.h"

/* Defined in kernels/embedding.cu and kernels/matmul.cu; repeated here until
 * their headers declare them (a compatible redeclaration is harmless then). */
int kern_gather_rows_cuda(void *out, const void *x, const int32_t *rows_dev, int n, int dim,
			  sl_dtype dt, void *stream);
int kern_matmul_f32out_cuda(kern_blas *b, float *out, const void *x, const void *w, int n,
			    int in_dim, int out_dim, sl_dtype dt);

/*
 * Tolerances, as worst |gpu - ref| / max |ref| over a tensor.
 *
 * Elementwise kernels (rmsnorm, swiglu, rope) compute in fp32 from the same
 * dtype-rounded inputs as the reference; what differs is the final rounding
 * to the dtype (half an ulp of the element: 2^-11 = 4.9e-4 for f16, 2^-8 =
 * 3.9e-3 for bf16, relative to the element and so at most that relative to
 * max |ref|) plus fp32 op order and CUDA vs libm expf/cosf (~1e-6). The
 * tolerances are 4x the rounding bound.
 */
#define TOL_ELEM_F16 2e-3
#define TOL_ELEM_BF16 1.6e-2
/* GEMM: the same fp32 accumulation in another order (cuBLAS tiling, the
 * GEMV's k permutation and split-K, tensor cores): about sqrt(K) * 2^-24 of
 * the sum of |terms|, below 1e-5 here for K <= 11008, plus the output
 * rounding above. 10x (f16) and 5x (bf16) the
 * output rounding bound. */
#define TOL_GEMM_F16 5e-3
#define TOL_GEMM_BF16 2e-2
/* GEMM with fp32 output: only the accumulation order remains (~1e-5 at
 * K = 11008); 20x margin for tensor-core accumulation. */
#define TOL_GEMM_F32OUT 2e-4
/* Embedding and row gather move values; the residual update r += d is the
 * same single fp32 add on both sides: bit-exact. */
#define TOL_EXACT 0.0
/* Sampling: a GPU token may differ from the CPU's only when a prefix sum of
 * the sorted probabilities lies this close to u or to top_p (expf differs
 * by an ulp between CUDA and libm, and the sums run in another order). */
#define SAMPLE_NEAR_TIE 1e-5

static uint64_t g_seed;
static const sl_dtype k_dts[] = {SL_DT_F16, SL_DT_BF16};
#define N_DTS 2

/* rmsnorm's paths: 72 and 4096 in registers (1 and 2 vectors a thread),
 * 5120 too (3, held as 4), 100 unaligned and 12288 too wide: the loop */
static const int k_widths[] = {72, 100, 4096, 5120, 12288};
static const int k_ntok[] = {1, 3, 17, 64};
#define N_WIDTHS 5
#define N_NTOK 4

static double tol_elem(sl_dtype dt) { return dt == SL_DT_F16 ? TOL_ELEM_F16 : TOL_ELEM_BF16; }
static double tol_gemm(sl_dtype dt) { return dt == SL_DT_F16 ? TOL_GEMM_F16 : TOL_GEMM_BF16; }
static double dmax(double a, double b) { return a > b ? a : b; }

/* ---- embedding and row gather ---- */

START_TEST(test_embedding)
{
	const int rows = 300, row0 = 100; /* a vocab shard: ids [100, 400) */
	for (int di = 0; di < N_DTS; di++) {
		sl_dtype dt = k_dts[di];
		gt_reseed(g_seed, 100 + di);
		double worst = 0;
		for (int wi = 0; wi < N_WIDTHS; wi++) {
			for (int ni = 0; ni < N_NTOK; ni++) {
				int dim = k_widths[wi], n = k_ntok[ni];
				float *table = gt_malloc(sizeof(float) * rows * dim);
				float *ref = gt_malloc(sizeof(float) * n * dim);
				float *got = gt_malloc(sizeof(float) * n * dim);
				int32_t *tok = gt_malloc(sizeof(int32_t) * n);
				gt_fill(table, (size_t)rows * dim, -1, 1);
				gt_round(table, (size_t)rows * dim, dt);
				/* ids below, inside and above the shard; the first always inside */
				for (int i = 0; i < n; i++)
					tok[i] = i == 0 ? gt_int(row0, row0 + rows - 1)
							: gt_int(0, row0 + rows + 50);
				kern_embedding_cpu(ref, table, tok, n, dim, row0, rows);

				void *d_table = gt_upload(table, (size_t)rows * dim, dt);
				int32_t *d_tok = gt_upload_raw(tok, sizeof(int32_t) * n);
				float *d_out = gt_dev_poison(sizeof(float) * n * dim);
				GT_KERNEL(kern_embedding_cuda(d_out, d_table, d_tok, n, dim, row0, rows,
							      dt, NULL));
				gt_download(got, d_out, (size_t)n * dim, SL_DT_F32);
				char what[96];
				snprintf(what, sizeof what, "embedding %s dim %d n %d", gt_dt_name(dt),
					 dim, n);
				worst = dmax(worst, gt_compare(what, got, ref, (size_t)n * dim,
							       TOL_EXACT));
				gt_dev_free(d_table);
				gt_dev_free(d_tok);
				gt_dev_free(d_out);
				free(table);
				free(ref);
				free(got);
				free(tok);
			}
		}
		gt_report("embedding", dt, worst, TOL_EXACT);
		ck_assert_msg(worst <= TOL_EXACT, "embedding %s: worst %.3g > tol %.3g",
			      gt_dt_name(dt), worst, TOL_EXACT);
	}
}
END_TEST

START_TEST(test_gather_rows)
{
	const int src_rows = 80;
	for (int di = 0; di < N_DTS; di++) {
		sl_dtype dt = k_dts[di];
		gt_reseed(g_seed, 200 + di);
		double worst = 0;
		for (int wi = 0; wi < N_WIDTHS; wi++) {
			for (int ni = 0; ni < N_NTOK; ni++) {
				int dim = k_widths[wi], n = k_ntok[ni];
				float *x = gt_malloc(sizeof(float) * src_rows * dim);
				float *ref = gt_malloc(sizeof(float) * n * dim);
				float *got = gt_malloc(sizeof(float) * n * dim);
				int32_t *rows = gt_malloc(sizeof(int32_t) * n);
				gt_fill(x, (size_t)src_rows * dim, -4, 4);
				gt_round(x, (size_t)src_rows * dim, dt);
				for (int i = 0; i < n; i++) {
					rows[i] = gt_int(0, src_rows - 1);
					memcpy(ref + (size_t)i * dim, x + (size_t)rows[i] * dim,
					       sizeof(float) * dim);
				}
				void *d_x = gt_upload(x, (size_t)src_rows * dim, dt);
				int32_t *d_rows = gt_upload_raw(rows, sizeof(int32_t) * n);
				void *d_out = gt_dev_poison(sl_dtype_size(dt) * n * dim);
				GT_KERNEL(kern_gather_rows_cuda(d_out, d_x, d_rows, n, dim, dt, NULL));
				gt_download(got, d_out, (size_t)n * dim, dt);
				char what[96];
				snprintf(what, sizeof what, "gather_rows %s dim %d n %d",
					 gt_dt_name(dt), dim, n);
				worst = dmax(worst, gt_compare(what, got, ref, (size_t)n * dim,
							       TOL_EXACT));
				gt_dev_free(d_x);
				gt_dev_free(d_rows);
				gt_dev_free(d_out);
				free(x);
				free(ref);
				free(got);
				free(rows);
			}
		}
		gt_report("gather_rows", dt, worst, TOL_EXACT);
		ck_assert_msg(worst <= TOL_EXACT, "gather_rows %s: worst %.3g", gt_dt_name(dt),
			      worst);
	}
}
END_TEST

/* ---- rmsnorm and residual add + rmsnorm ---- */

START_TEST(test_rmsnorm)
{
	const float eps = 1e-5f;
	for (int di = 0; di < N_DTS; di++) {
		sl_dtype dt = k_dts[di];
		double tol = tol_elem(dt);
		gt_reseed(g_seed, 300 + di);
		double w_norm = 0, w_add = 0, w_res = 0;
		for (int wi = 0; wi < N_WIDTHS; wi++) {
			for (int ni = 0; ni < N_NTOK; ni++) {
				int dim = k_widths[wi], n = k_ntok[ni];
				size_t nd = (size_t)n * dim;
				float *x = gt_malloc(sizeof(float) * nd);
				float *delta = gt_malloc(sizeof(float) * nd);
				float *w = gt_malloc(sizeof(float) * dim);
				float *ref = gt_malloc(sizeof(float) * nd);
				float *ref_res = gt_malloc(sizeof(float) * nd);
				float *got = gt_malloc(sizeof(float) * nd);
				gt_fill(x, nd, -3, 3); /* the fp32 residual: not rounded */
				gt_fill(delta, nd, -1, 1);
				gt_round(delta, nd, dt);
				gt_fill(w, dim, -1.5f, 1.5f);
				gt_round(w, dim, dt);
				char what[96];

				/* rmsnorm: out = x / rms(x) * w */
				kern_rmsnorm_cpu(ref, x, w, n, dim, eps);
				float *d_x = gt_upload(x, nd, SL_DT_F32);
				void *d_w = gt_upload(w, dim, dt);
				void *d_out = gt_dev_poison(sl_dtype_size(dt) * nd);
				GT_KERNEL(kern_rmsnorm_cuda(d_out, d_x, d_w, n, dim, eps, dt, NULL));
				gt_download(got, d_out, nd, dt);
				snprintf(what, sizeof what, "rmsnorm %s dim %d n %d", gt_dt_name(dt),
					 dim, n);
				w_norm = dmax(w_norm, gt_compare(what, got, ref, nd, tol));

				/* add_rmsnorm: x += delta; out = rmsnorm(x) * w */
				memcpy(ref_res, x, sizeof(float) * nd);
				kern_add_rmsnorm_cpu(ref_res, delta, w, ref, n, dim, eps);
				void *d_delta = gt_upload(delta, nd, dt);
				GT_CUDA(cudaMemset(d_out, 0xFF, sl_dtype_size(dt) * nd));
				GT_KERNEL(kern_add_rmsnorm_cuda(d_x, d_delta, d_w, d_out, n, dim, eps,
								dt, NULL));
				gt_download(got, d_out, nd, dt);
				snprintf(what, sizeof what, "add_rmsnorm %s dim %d n %d",
					 gt_dt_name(dt), dim, n);
				w_add = dmax(w_add, gt_compare(what, got, ref, nd, tol));
				gt_download(got, d_x, nd, SL_DT_F32);
				snprintf(what, sizeof what, "add_rmsnorm residual %s dim %d n %d",
					 gt_dt_name(dt), dim, n);
				w_res = dmax(w_res, gt_compare(what, got, ref_res, nd, TOL_EXACT));

				/* w == NULL: only the add (x was reset to the input) */
				gt_upload_to(d_x, x, nd, SL_DT_F32);
				memcpy(ref_res, x, sizeof(float) * nd);
				kern_add_rmsnorm_cpu(ref_res, delta, NULL, NULL, n, dim, eps);
				GT_KERNEL(kern_add_rmsnorm_cuda(d_x, d_delta, NULL, NULL, n, dim, eps,
								dt, NULL));
				gt_download(got, d_x, nd, SL_DT_F32);
				snprintf(what, sizeof what, "add (w NULL) residual %s dim %d n %d",
					 gt_dt_name(dt), dim, n);
				w_res = dmax(w_res, gt_compare(what, got, ref_res, nd, TOL_EXACT));

				gt_dev_free(d_x);
				gt_dev_free(d_w);
				gt_dev_free(d_out);
				gt_dev_free(d_delta);
				free(x);
				free(delta);
				free(w);
				free(ref);
				free(ref_res);
				free(got);
			}
		}
		gt_report("rmsnorm", dt, w_norm, tol);
		gt_report("add_rmsnorm", dt, w_add, tol);
		gt_report("add_rmsnorm(residual)", dt, w_res, TOL_EXACT);
		ck_assert_msg(w_norm <= tol && w_add <= tol && w_res <= TOL_EXACT,
			      "rmsnorm %s: worst %.3g / add %.3g / residual %.3g", gt_dt_name(dt),
			      w_norm, w_add, w_res);
	}
}
END_TEST

/* ---- swiglu ---- */

START_TEST(test_swiglu)
{
	static const int hiddens[] = {72, 100, 4096, 5120, 13824};
	for (int di = 0; di < N_DTS; di++) {
		sl_dtype dt = k_dts[di];
		double tol = tol_elem(dt), worst = 0;
		gt_reseed(g_seed, 400 + di);
		for (int hi = 0; hi < 5; hi++) {
			for (int ni = 0; ni < N_NTOK; ni++) {
				int hidden = hiddens[hi], n = k_ntok[ni];
				size_t nin = (size_t)n * 2 * hidden, nout = (size_t)n * hidden;
				float *gu = gt_malloc(sizeof(float) * nin);
				float *ref = gt_malloc(sizeof(float) * nout);
				float *got = gt_malloc(sizeof(float) * nout);
				gt_fill(gu, nin, -6, 6); /* reaches silu's saturated tails */
				gt_round(gu, nin, dt);
				kern_silu_mul_cpu(ref, gu, n, hidden);
				void *d_gu = gt_upload(gu, nin, dt);
				void *d_out = gt_dev_poison(sl_dtype_size(dt) * nout);
				GT_KERNEL(kern_silu_mul_cuda(d_out, d_gu, n, hidden, dt, NULL));
				gt_download(got, d_out, nout, dt);
				char what[96];
				snprintf(what, sizeof what, "silu_mul %s hidden %d n %d",
					 gt_dt_name(dt), hidden, n);
				worst = dmax(worst, gt_compare(what, got, ref, nout, tol));
				gt_dev_free(d_gu);
				gt_dev_free(d_out);
				free(gu);
				free(ref);
				free(got);
			}
		}
		gt_report("silu_mul", dt, worst, tol);
		ck_assert_msg(worst <= tol, "silu_mul %s: worst %.3g", gt_dt_name(dt), worst);
	}
}
END_TEST

/* ---- matmul ---- */

/*
 * Two implementations sit behind kern_matmul_cuda: a tensor-core GEMV for
 * n <= 8 tokens, in_dim % 8 == 0 and W of at least 1 Mi elements (16-row
 * tiles, 32-k chunks, split-K through the workspace when out_dim is
 * small), cuBLAS for the rest. The shapes cover both: the decode token
 * counts that fill the MMA's 8 token slots differently (1, 2, 3, 5, 8) on
 * the Llama-2-7B projections (in x out: wqkv/wo-like 4096 x 4096, w13-like
 * 4096 x 11008, w2-like 11008 x 4096, the LM head 4096 x 32000 in fp32);
 * GEMV edge cases (in 72 and 4104: a partial last chunk; out 300 and 512:
 * not a multiple of 16, and split-K); small odd layers that stay on cuBLAS
 * (72 x 200, 200 x 72, 100 x 36: too small, 100 not a multiple of 8); and
 * the prefill-sized cuBLAS calls (n 9..64).
 */
typedef struct gemm_shape {
	int in_dim, out_dim;
	int ns[6], n_ns; /* token counts run against one W */
} gemm_shape;

#define DECODE_NS {1, 2, 3, 5, 8}, 5
static const gemm_shape k_gemm[] = {
	{4096, 4096, DECODE_NS},  {4096, 11008, DECODE_NS}, {11008, 4096, DECODE_NS},
	{72, 16000, DECODE_NS},   {4104, 300, DECODE_NS},   {11008, 512, {1, 2}, 2},
	{72, 200, DECODE_NS},     {100, 36, DECODE_NS},     {200, 72, DECODE_NS},
	{4096, 100, {3}, 1},      {100, 300, {3}, 1},       {5120, 72, {17}, 1},
	{72, 1000, {64}, 1},      {4096, 512, {64}, 1},     {5120, 13824, {1}, 1},
	{100, 4096, {17}, 1},     {4096, 4096, {9, 16}, 2},
};
/* LM-head-like: fp32 logits */
static const gemm_shape k_gemm_f32[] = {
	{4096, 32000, DECODE_NS}, {72, 16000, {1, 8}, 2}, {4104, 300, {3, 8}, 2},
	{11008, 512, {2, 7}, 2},  {72, 200, DECODE_NS},   {100, 36, DECODE_NS},
	{100, 32000, {3}, 1},     {72, 300, {17}, 1},     {5120, 1000, {64}, 1},
};

/* The calls kernels/matmul.cu gives its GEMV (gemv_fits there; the test's
 * buffers are 16-byte aligned): reported apart. */
static int takes_gemv(int n, int in_dim, int out_dim)
{
	return n <= 8 && in_dim % 8 == 0 && (long)in_dim * out_dim >= 1L << 20;
}

typedef struct gemm_worst {
	double gemv, blas;
} gemm_worst;

/* One W, then each token count of the shape against it. */
static void run_gemm(kern_blas *blas, sl_dtype dt, const gemm_shape *s, int f32_out, double tol,
		     gemm_worst *worst)
{
	size_t nw = (size_t)s->out_dim * s->in_dim;
	float *w = gt_malloc(sizeof(float) * nw);
	gt_fill(w, nw, -1, 1);
	gt_round(w, nw, dt);
	void *d_w = gt_upload(w, nw, dt);
	for (int k = 0; k < s->n_ns; k++) {
		int n = s->ns[k];
		size_t nx = (size_t)n * s->in_dim, no = (size_t)n * s->out_dim;
		float *x = gt_malloc(sizeof(float) * nx);
		float *ref = gt_malloc(sizeof(float) * no), *got = gt_malloc(sizeof(float) * no);
		gt_fill(x, nx, -1, 1);
		gt_round(x, nx, dt);
		kern_matmul_cpu(ref, x, w, n, s->in_dim, s->out_dim);
		void *d_x = gt_upload(x, nx, dt);
		sl_dtype ot = f32_out ? SL_DT_F32 : dt;
		void *d_out = gt_dev_poison(sl_dtype_size(ot) * no);
		if (f32_out)
			GT_KERNEL(kern_matmul_f32out_cuda(blas, d_out, d_x, d_w, n, s->in_dim,
							  s->out_dim, dt));
		else
			GT_KERNEL(kern_matmul_cuda(blas, d_out, d_x, d_w, n, s->in_dim, s->out_dim,
						   dt));
		gt_download(got, d_out, no, ot);
		char what[112];
		snprintf(what, sizeof what, "matmul%s %s n %d in %d out %d",
			 f32_out ? "_f32out" : "", gt_dt_name(dt), n, s->in_dim, s->out_dim);
		double e = gt_compare(what, got, ref, no, tol);
		double *slot = takes_gemv(n, s->in_dim, s->out_dim) ? &worst->gemv : &worst->blas;
		*slot = dmax(*slot, e);
		gt_dev_free(d_x);
		gt_dev_free(d_out);
		free(x);
		free(ref);
		free(got);
	}
	gt_dev_free(d_w);
	free(w);
}

START_TEST(test_matmul)
{
	kern_blas *blas = NULL;
	ck_assert_int_eq(kern_blas_create(NULL, &blas), 0);
	/* the GEMV as a programmatic dependent, as the backend runs it (SL_PDL=0: not) */
	kern_blas_set_pdl(blas, gt_pdl_on());
	/* both GEMV block shapes (kern_blas_set_gemv_warps): 4 and 8 warps a tile */
	for (int wd = 0; wd < 2 * N_DTS; wd++) {
		int di = wd % N_DTS, warps = wd < N_DTS ? 4 : 8;
		kern_blas_set_gemv_warps(blas, warps);
		sl_dtype dt = k_dts[di];
		printf("matmul: GEMV %d warps a tile\n", warps);
		gt_reseed(g_seed, 500 + di);
		double tol = tol_gemm(dt);
		gemm_worst w = {0, 0}, w32 = {0, 0};
		for (size_t i = 0; i < sizeof k_gemm / sizeof *k_gemm; i++)
			run_gemm(blas, dt, &k_gemm[i], 0, tol, &w);
		for (size_t i = 0; i < sizeof k_gemm_f32 / sizeof *k_gemm_f32; i++)
			run_gemm(blas, dt, &k_gemm_f32[i], 1, TOL_GEMM_F32OUT, &w32);
		gt_report("matmul(gemv)", dt, w.gemv, tol);
		gt_report("matmul(cublas)", dt, w.blas, tol);
		gt_report("matmul_f32out(gemv)", dt, w32.gemv, TOL_GEMM_F32OUT);
		gt_report("matmul_f32out(cublas)", dt, w32.blas, TOL_GEMM_F32OUT);
		double worst = dmax(w.gemv, w.blas), worst32 = dmax(w32.gemv, w32.blas);
		ck_assert_msg(worst <= tol && worst32 <= TOL_GEMM_F32OUT,
			      "matmul %s: worst %.3g, f32out %.3g", gt_dt_name(dt), worst, worst32);
	}
	kern_blas_destroy(blas);
}
END_TEST

/* kern_matmul_add_f32_cuda: acc += x @ W^T on cuBLAS with beta 1, above the
 * GEMV's sizes; a residual as large as the product, so an overwrite shows.
 * Where the GEMV would take the call (n <= 8 on a large W) nothing runs
 * and acc keeps its bits. */
static double run_gemm_add(kern_blas *blas, sl_dtype dt, int in_dim, int out_dim, int n)
{
	size_t nw = (size_t)out_dim * in_dim, nx = (size_t)n * in_dim, no = (size_t)n * out_dim;
	float *w = gt_malloc(sizeof(float) * nw), *x = gt_malloc(sizeof(float) * nx);
	float *acc = gt_malloc(sizeof(float) * no), *ref = gt_malloc(sizeof(float) * no);
	float *got = gt_malloc(sizeof(float) * no);
	gt_fill(w, nw, -1, 1);
	gt_round(w, nw, dt);
	gt_fill(x, nx, -1, 1);
	gt_round(x, nx, dt);
	gt_fill(acc, no, -50, 50);
	kern_matmul_cpu(ref, x, w, n, in_dim, out_dim);
	void *d_w = gt_upload(w, nw, dt), *d_x = gt_upload(x, nx, dt);
	float *d_acc = gt_upload(acc, no, SL_DT_F32);
	int done = -1;
	GT_KERNEL(kern_matmul_add_f32_cuda(blas, d_acc, d_x, d_w, n, in_dim, out_dim, dt, &done));
	gt_download(got, d_acc, no, SL_DT_F32);
	double e = 0;
	if (takes_gemv(n, in_dim, out_dim)) {
		ck_assert_int_eq(done, 0);
		ck_assert_int_eq(memcmp(got, acc, sizeof(float) * no), 0);
	} else {
		char what[96];
		ck_assert_int_eq(done, 1);
		for (size_t i = 0; i < no; i++)
			ref[i] += acc[i];
		snprintf(what, sizeof what, "matmul_add_f32 %s n %d in %d out %d", gt_dt_name(dt), n,
			 in_dim, out_dim);
		e = gt_compare(what, got, ref, no, TOL_GEMM_F32OUT);
	}
	gt_dev_free(d_w), gt_dev_free(d_x), gt_dev_free(d_acc);
	free(w), free(x), free(acc), free(ref), free(got);
	return e;
}

START_TEST(test_matmul_add)
{
	static const int cases[][3] = {{4096, 4096, 9},   {4096, 4096, 64}, {11008, 4096, 17},
				       {4104, 300, 33},   {100, 300, 3},    {72, 200, 1},
				       {4096, 4096, 1},   {4096, 4096, 8}};
	kern_blas *blas = NULL;
	ck_assert_int_eq(kern_blas_create(NULL, &blas), 0);
	for (int di = 0; di < N_DTS; di++) {
		gt_reseed(g_seed, 520 + di);
		double worst = 0;
		for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
			worst = dmax(worst, run_gemm_add(blas, k_dts[di], cases[i][0], cases[i][1],
							 cases[i][2]));
		gt_report("matmul_add_f32(cublas)", k_dts[di], worst, TOL_GEMM_F32OUT);
		ck_assert_msg(worst <= TOL_GEMM_F32OUT, "matmul_add_f32 %s: worst %.3g",
			      gt_dt_name(k_dts[di]), worst);
	}
	kern_blas_destroy(blas);
}
END_TEST

/* ---- rope + paged KV write ---- */

typedef struct seq_shape {
	int q_len, kv_len;
} seq_shape;

/* batches of 1, 3, 17 and 64 tokens: decode, several decodes, a prefill, and
 * a mix with a continued prefill chunk and a long context (large angles) */
static const seq_shape k_b1[] = {{1, 37}};
static const seq_shape k_b3[] = {{1, 5}, {1, 200}, {1, 16}};
static const seq_shape k_b17[] = {{17, 17}};
static const seq_shape k_b64[] = {{40, 100}, {1, 3000}, {23, 23}};
static const struct {
	const seq_shape *s;
	int n;
} k_batches[] = {{k_b1, 1}, {k_b3, 3}, {k_b17, 1}, {k_b64, 3}};

#define BLOCK_TOKENS 16

/* The cache written as fp8 E4M3 codes against the CPU's E4M3-rounded
 * values: V exactly (both round the same dtype-rounded value); K to within
 * one E4M3 step (2^-3 of the value's power of two; 2^-9 below 2^-6), since
 * the rotated fp32 value may differ in its last bits (cosf, sinf) and
 * land on the other side of a rounding tie. Returns the worst difference
 * in steps (0 or 1 pass). */
static double fp8_steps(const char *what, const uint8_t *codes, const float *ref, size_t n)
{
	double worst = 0;
	size_t bad = 0, diff = 0;
	for (size_t i = 0; i < n; i++) {
		float got = kern_fp8_e4m3_to_f32(codes[i]), r = ref[i];
		int e;
		frexpf(fabsf(r), &e);
		double step = fabsf(r) < 0x1p-6f ? 0x1p-9 : ldexp(1.0, e - 1 - 3);
		double steps = fabs((double)got - r) / step;
		if (steps > 0)
			diff++;
		if (steps > worst)
			worst = steps;
		if (steps > 1 && bad++ < 3)
			printf("  FAIL %s: [%zu] code 0x%02x = %g, ref %g\n", what, i, codes[i], got, r);
	}
	if (diff)
		printf("  %s: %zu of %zu values one E4M3 step apart\n", what, diff, n);
	return worst;
}

static double run_rope(sl_dtype dt, int head_dim, int n_heads, int n_kv, const seq_shape *seqs,
		       int n_seqs, double tol, int kv_fp8)
{
	/* paged layout: blocks handed out from a shuffled pool, so each
	 * sequence's table is non-contiguous and unordered */
	int n_tokens = 0, total_blocks = 7 /* spare, never written */, max_blocks = 0;
	for (int s = 0; s < n_seqs; s++) {
		int nb = (seqs[s].kv_len + BLOCK_TOKENS - 1) / BLOCK_TOKENS;
		n_tokens += seqs[s].q_len;
		total_blocks += nb;
		if (nb > max_blocks)
			max_blocks = nb;
	}
	int32_t *pool = gt_malloc(sizeof(int32_t) * total_blocks);
	for (int i = 0; i < total_blocks; i++)
		pool[i] = i;
	gt_shuffle(pool, total_blocks);
	int32_t *tables = gt_malloc(sizeof(int32_t) * n_seqs * max_blocks);
	int32_t *pos = gt_malloc(sizeof(int32_t) * n_tokens);
	int32_t *slots = gt_malloc(sizeof(int32_t) * n_tokens);
	int next = 0, t = 0;
	for (int s = 0; s < n_seqs; s++) {
		int nb = (seqs[s].kv_len + BLOCK_TOKENS - 1) / BLOCK_TOKENS;
		int32_t *tab = tables + s * max_blocks;
		for (int b = 0; b < max_blocks; b++)
			tab[b] = b < nb ? pool[next++] : -1;
		for (int i = 0; i < seqs[s].q_len; i++, t++) {
			int p = seqs[s].kv_len - seqs[s].q_len + i;
			pos[t] = p;
			slots[t] = tab[p / BLOCK_TOKENS] * BLOCK_TOKENS + p % BLOCK_TOKENS;
		}
	}

	int stride = (n_heads + 2 * n_kv) * head_dim;
	size_t nq = (size_t)n_tokens * stride;
	size_t nc = (size_t)total_blocks * n_kv * BLOCK_TOKENS * head_dim;
	float *qkv = gt_malloc(sizeof(float) * nq), *kc = gt_malloc(sizeof(float) * nc);
	float *vc = gt_malloc(sizeof(float) * nc);
	gt_fill(qkv, nq, -2, 2);
	gt_round(qkv, nq, dt);
	/* the caches start with random contents on both sides rather than
	 * poison: a missed write and a stray write both show as a difference */
	gt_fill(kc, nc, -2, 2);
	gt_round(kc, nc, dt);
	gt_fill(vc, nc, -2, 2);
	gt_round(vc, nc, dt);
	uint8_t *kq = gt_malloc(nc), *vq = gt_malloc(nc);
	for (size_t i = 0; kv_fp8 && i < nc; i++) {
		kq[i] = kern_f32_to_fp8_e4m3(kc[i]);
		vq[i] = kern_f32_to_fp8_e4m3(vc[i]);
		kc[i] = kern_fp8_e4m3_to_f32(kq[i]);
		vc[i] = kern_fp8_e4m3_to_f32(vq[i]);
	}

	kern_rope_params rp = {.theta = 10000.0f};
	if (head_dim == 128) /* Llama-3 frequencies */
		rp = (kern_rope_params){.theta = 500000.0f, .llama3 = 1, .factor = 8.0f,
					.low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
					.orig_max_pos = 8192};
	float *inv_freq = gt_malloc(sizeof(float) * head_dim / 2);
	kern_rope_inv_freq(inv_freq, head_dim, &rp);

	void *d_qkv = gt_upload(qkv, nq, dt);
	void *d_kc = kv_fp8 ? gt_upload_raw(kq, nc) : gt_upload(kc, nc, dt);
	void *d_vc = kv_fp8 ? gt_upload_raw(vq, nc) : gt_upload(vc, nc, dt);
	float *d_inv = gt_upload(inv_freq, head_dim / 2, SL_DT_F32);
	int32_t *d_pos = gt_upload_raw(pos, sizeof(int32_t) * n_tokens);
	int32_t *d_slots = gt_upload_raw(slots, sizeof(int32_t) * n_tokens);

	kern_paged_batch hb = {.n_tokens = n_tokens, .n_seqs = n_seqs, .positions = pos,
			       .slots = slots, .block_tables = tables, .max_blocks = max_blocks,
			       .block_tokens = BLOCK_TOKENS};
	kern_paged_batch db = hb;
	db.positions = d_pos;
	db.slots = d_slots;
	db.block_tables = NULL; /* not read by this kernel */

	kern_rope_kv_write_cpu(qkv, kc, vc, &hb, n_heads, n_kv, head_dim, inv_freq, kv_fp8);
	GT_KERNEL(kern_rope_kv_write_cuda(d_qkv, d_kc, d_vc, &db, n_heads, n_kv, head_dim, d_inv,
					  dt, kv_fp8, NULL));

	float *got = gt_malloc(sizeof(float) * (nq > nc ? nq : nc));
	char what[128];
	double worst = 0;
	gt_download(got, d_qkv, nq, dt);
	snprintf(what, sizeof what, "rope qkv %s head_dim %d heads %d/%d tokens %d",
		 gt_dt_name(dt), head_dim, n_heads, n_kv, n_tokens);
	worst = dmax(worst, gt_compare(what, got, qkv, nq, tol));
	if (kv_fp8) {
		GT_CUDA(cudaMemcpy(kq, d_kc, nc, cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(vq, d_vc, nc, cudaMemcpyDeviceToHost));
		snprintf(what, sizeof what, "rope k_cache fp8 %s head_dim %d heads %d/%d tokens %d",
			 gt_dt_name(dt), head_dim, n_heads, n_kv, n_tokens);
		double ks = fp8_steps(what, kq, kc, nc);
		snprintf(what, sizeof what, "rope v_cache fp8 %s head_dim %d heads %d/%d tokens %d",
			 gt_dt_name(dt), head_dim, n_heads, n_kv, n_tokens);
		double vs = fp8_steps(what, vq, vc, nc);
		ck_assert_msg(ks <= 1 && vs == 0, "rope fp8 cache %s head_dim %d: k %g steps, v %g "
			      "steps apart (k at most 1, v exact)", gt_dt_name(dt), head_dim, ks, vs);
		goto done;
	}
	gt_download(got, d_kc, nc, dt);
	snprintf(what, sizeof what, "rope k_cache %s head_dim %d heads %d/%d tokens %d",
		 gt_dt_name(dt), head_dim, n_heads, n_kv, n_tokens);
	worst = dmax(worst, gt_compare(what, got, kc, nc, tol));
	gt_download(got, d_vc, nc, dt);
	snprintf(what, sizeof what, "rope v_cache %s head_dim %d heads %d/%d tokens %d",
		 gt_dt_name(dt), head_dim, n_heads, n_kv, n_tokens);
	worst = dmax(worst, gt_compare(what, got, vc, nc, TOL_EXACT)); /* v is copied */
done:
	free(kq);
	free(vq);

	gt_dev_free(d_qkv);
	gt_dev_free(d_kc);
	gt_dev_free(d_vc);
	gt_dev_free(d_inv);
	gt_dev_free(d_pos);
	gt_dev_free(d_slots);
	free(pool);
	free(tables);
	free(pos);
	free(slots);
	free(qkv);
	free(kc);
	free(vc);
	free(inv_freq);
	free(got);
	return worst;
}

START_TEST(test_rope)
{
	static const int head_dims[] = {64, 128, 80, 72}; /* 72: half 36, scalar path */
	static const int heads[][2] = {{4, 4}, {8, 2}, {32, 8}};
	for (int di = 0; di < N_DTS; di++) {
		sl_dtype dt = k_dts[di];
		double tol = tol_elem(dt), worst = 0;
		gt_reseed(g_seed, 600 + di);
		for (int hd = 0; hd < 4; hd++)
			for (int h = 0; h < 3; h++)
				for (int b = 0; b < 4; b++)
					worst = dmax(worst, run_rope(dt, head_dims[hd], heads[h][0],
								     heads[h][1], k_batches[b].s,
								     k_batches[b].n, tol, 0));
		gt_report("rope_kv_write", dt, worst, tol);
		ck_assert_msg(worst <= tol, "rope %s: worst %.3g", gt_dt_name(dt), worst);
	}
}
END_TEST

/* The same writes into fp8 E4M3 caches (--kv-dtype fp8). */
START_TEST(test_rope_fp8)
{
	static const int head_dims[] = {64, 128, 72};
	static const int heads[][2] = {{4, 4}, {32, 8}};
	for (int di = 0; di < N_DTS; di++) {
		sl_dtype dt = k_dts[di];
		double tol = tol_elem(dt), worst = 0;
		gt_reseed(g_seed, 650 + di);
		for (int hd = 0; hd < 3; hd++)
			for (int h = 0; h < 2; h++)
				for (int b = 0; b < 4; b++)
					worst = dmax(worst, run_rope(dt, head_dims[hd], heads[h][0],
								     heads[h][1], k_batches[b].s,
								     k_batches[b].n, tol, 1));
		gt_report("rope_kv_write kv-fp8 (q)", dt, worst, tol);
		ck_assert_msg(worst <= tol, "rope fp8 %s: worst %.3g", gt_dt_name(dt), worst);
	}
}
END_TEST

/* ---- sampling ---- */

/* Per-row parameter mix; seeds and positions are drawn per row. */
static const kern_sample_params k_params[] = {
	{.temperature = 0.0f, .top_p = 1.0f},                /* greedy */
	{.temperature = 1.0f, .top_p = 1.0f},                /* temperature only */
	{.temperature = 0.7f, .top_k = 40, .top_p = 1.0f},   /* top-k */
	{.temperature = 1.0f, .top_p = 0.9f},                /* top-p */
	{.temperature = 0.8f, .top_k = 50, .top_p = 0.95f},  /* both */
	{.temperature = 1.3f, .top_k = 1000, .top_p = 0.5f}, /* both, hot */
	{.temperature = 0.5f, .top_k = 1, .top_p = 1.0f},    /* top-1: the lowest-index maximum,
								* even when tied */
	{.temperature = 1.0f, .top_k = 2, .top_p = 1.0f},    /* top-2 over tied maxima */
	{.temperature = -1.0f, .top_k = 5, .top_p = 0.5f},   /* negative temperature: greedy */
	{.temperature = 2.0f, .top_p = 0.99f},               /* flat, nearly everything kept */
	{.temperature = 1.0f, .top_k = 5000, .top_p = 1.0f}, /* k beyond a small vocab */
	{.temperature = 0.9f, .top_p = 0.0f},                /* top_p 0: keeps exactly one */
};
#define N_PARAMS (int)(sizeof k_params / sizeof *k_params)

typedef struct pi_pair {
	float p;
	int i;
} pi_pair;

static int by_prob_desc(const void *a, const void *b)
{
	const pi_pair *x = a, *y = b;
	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return (x->i > y->i) - (x->i < y->i);
}

/* The distance from any prefix sum of the sorted kept probabilities to u
 * or to top_p, and from a kept probability to min_p * p_max, recomputed
 * as kern_sample_cpu does: how close this row is to a decision boundary. */
static double boundary_margin(const float *logits, int n, const kern_sample_params *p,
			      uint64_t position)
{
	pi_pair *c = gt_malloc(sizeof *c * n);
	float mx = logits[kern_argmax_cpu(logits, n)];
	double sum = 0;
	for (int i = 0; i < n; i++) {
		c[i].p = expf((logits[i] - mx) / p->temperature);
		c[i].i = i;
		sum += c[i].p;
	}
	for (int i = 0; i < n; i++)
		c[i].p = (float)(c[i].p / sum);
	qsort(c, n, sizeof *c, by_prob_desc);
	int keep = (p->top_k > 0 && p->top_k < n) ? p->top_k : n;
	double cum = 0, margin = INFINITY;
	int k = 0;
	while (k < keep) {
		cum += c[k++].p;
		if (p->top_p < 1.0f && fabs(cum - p->top_p) < margin)
			margin = fabs(cum - p->top_p);
		if (p->top_p < 1.0f && cum >= p->top_p)
			break;
	}
	keep = k;
	if (p->min_p > 0) { /* min-p: how close a kept p_k lies to min_p * p_0 */
		float thr = p->min_p * c[0].p;
		for (k = 1; k < keep; k++)
			if (fabs((double)c[k].p - thr) < margin)
				margin = fabs((double)c[k].p - thr);
		k = 1;
		while (k < keep && c[k].p >= thr)
			k++;
		keep = k;
	}
	double total = 0;
	for (k = 0; k < keep; k++)
		total += c[k].p;
	double u = kern_philox_uniform(p->seed, position) * total, acc = 0;
	for (k = 0; k < keep; k++) {
		acc += c[k].p;
		if (fabs(acc - u) < margin)
			margin = fabs(acc - u);
	}
	free(c);
	return margin;
}

START_TEST(test_sampling)
{
	static const int vocabs[] = {300, 32000, 128256}, quick_vocabs[] = {300, 5000, 0};
	const int rows = 70; /* more than one 32-row chunk of the sampler */
	/* SL_TEST_QUICK=1 (under compute-sanitizer): smaller vocabularies that
	 * still span several scan tiles */
	int quick = getenv("SL_TEST_QUICK") != NULL;
	for (int di = 0; di < N_DTS; di++) {
		sl_dtype dt = k_dts[di];
		gt_reseed(g_seed, 700 + di);
		int greedy = 0, greedy_bad = 0, sampled = 0, bad = 0, near = 0;
		for (int vi = 0; vi < 3; vi++) {
			int vocab = quick ? quick_vocabs[vi] : vocabs[vi];
			if (vocab == 0)
				continue;
			size_t nl = (size_t)rows * vocab;
			float *logits = gt_malloc(sizeof(float) * nl);
			kern_sample_params *params = gt_malloc(sizeof *params * rows);
			int64_t *positions = gt_malloc(sizeof(int64_t) * rows);
			int32_t *got = gt_malloc(sizeof(int32_t) * rows);
			void *work = gt_malloc(kern_sample_work_bytes(vocab));
			for (int r = 0; r < rows; r++) {
				float *l = logits + (size_t)r * vocab;
				/* from flat to peaked distributions */
				static const float scales[] = {0.5f, 2.0f, 5.0f, 12.0f};
				float sc = scales[r % 4];
				gt_fill(l, vocab, -sc, sc);
				gt_round(l, vocab, dt);
				if (r % 3 == 0) { /* tie the maximum at two more places */
					float mx = l[kern_argmax_cpu(l, vocab)];
					l[gt_int(0, vocab - 1)] = mx;
					l[gt_int(0, vocab - 1)] = mx;
				}
				params[r] = k_params[(r + vi) % N_PARAMS];
				params[r].seed = gt_next();
				positions[r] = (int64_t)(gt_next() >> 20);
			}
			kern_sampler *smp = NULL;
			ck_assert_int_eq(kern_sampler_create(rows, vocab, &smp), 0);
			float *d_logits = gt_upload(logits, nl, SL_DT_F32);
			kern_sample_params *d_params = gt_upload_raw(params, sizeof *params * rows);
			int64_t *d_pos = gt_upload_raw(positions, sizeof(int64_t) * rows);
			int32_t *d_tok = gt_dev_poison(sizeof(int32_t) * rows);
			GT_KERNEL(kern_sample_cuda(smp, d_tok, d_logits, rows, vocab, d_params, d_pos,
						   NULL, NULL, NULL, NULL));
			GT_CUDA(cudaMemcpy(got, d_tok, sizeof(int32_t) * rows,
					   cudaMemcpyDeviceToHost));
			for (int r = 0; r < rows; r++) {
				const float *l = logits + (size_t)r * vocab;
				int want = kern_sample_cpu(l, vocab, &params[r], (uint64_t)positions[r],
							   work);
				const kern_sample_params *p = &params[r];
				if (p->temperature <= 0) {
					greedy++;
					if (got[r] != want) {
						greedy_bad++;
						printf("  FAIL argmax %s vocab %d row %d: got %d want %d\n",
						       gt_dt_name(dt), vocab, r, got[r], want);
					}
					continue;
				}
				sampled++;
				if (got[r] == want)
					continue;
				double m = boundary_margin(l, vocab, p, (uint64_t)positions[r]);
				printf("  %s sample %s vocab %d row %d (T %.2f k %d p %.2f seed %llu "
				       "pos %lld): got %d want %d, boundary margin %.2e\n",
				       m < SAMPLE_NEAR_TIE ? "near-tie" : "FAIL", gt_dt_name(dt), vocab,
				       r, p->temperature, p->top_k, p->top_p,
				       (unsigned long long)p->seed, (long long)positions[r], got[r],
				       want, m);
				if (m < SAMPLE_NEAR_TIE)
					near++;
				else
					bad++;
			}
			fflush(stdout);
			kern_sampler_destroy(smp);
			gt_dev_free(d_logits);
			gt_dev_free(d_params);
			gt_dev_free(d_pos);
			gt_dev_free(d_tok);
			free(logits);
			free(params);
			free(positions);
			free(got);
			free(work);
		}
		printf("kernel argmax %s: %d greedy rows, %d mismatches (must be exact)\n",
		       gt_dt_name(dt), greedy, greedy_bad);
		printf("kernel sample %s: %d sampled rows (vocab %s), %d mismatches, "
		       "%d near-ties within %.0e tolerated\n",
		       gt_dt_name(dt), sampled, quick ? "300/5000" : "300/32000/128256", bad, near,
		       SAMPLE_NEAR_TIE);
		fflush(stdout);
		ck_assert_msg(greedy_bad == 0 && bad == 0, "sampling %s: %d argmax, %d sample mismatches",
			      gt_dt_name(dt), greedy_bad, bad);
	}
}
END_TEST

/* ---- greedy argmax alone ---- */

/* Row r's shape for the argmax test: random, or a maximum placed where a
 * wrong scan order or tie rule would show (first, last, tied, flat). */
static void argmax_row(float *l, int vocab, int r)
{
	gt_fill(l, vocab, -8.0f, 8.0f);
	float mx = l[kern_argmax_cpu(l, vocab)] + 1.0f;
	switch (r % 6) {
	case 1: /* the maximum at the first and the last index */
		l[0] = l[vocab - 1] = mx;
		break;
	case 2: /* at the last index alone */
		l[vocab - 1] = mx;
		break;
	case 3: /* tied at three random places */
		for (int k = 0; k < 3; k++)
			l[gt_int(0, vocab - 1)] = mx;
		break;
	case 4: /* a flat row: every index ties */
		for (int i = 0; i < vocab; i++)
			l[i] = -1.5f;
		break;
	case 5: /* all negative, far below zero */
		for (int i = 0; i < vocab; i++)
			l[i] -= 1e4f;
		break;
	}
}

/* kern_argmax_rows_cuda picks kern_argmax_cpu's index (the lowest among
 * tied maxima) exactly, over vocabularies off the block width. */
START_TEST(test_argmax_rows)
{
	static const int vocabs[] = {1, 7, 300, 1025, 32000, 32001, 128256};
	static const int row_counts[] = {1, 3, 70};
	gt_reseed(g_seed, 800);
	int checked = 0, bad = 0;
	for (int vi = 0; vi < (int)(sizeof vocabs / sizeof *vocabs); vi++) {
		for (int ri = 0; ri < 3; ri++) {
			int vocab = vocabs[vi], rows = row_counts[ri];
			size_t nl = (size_t)rows * vocab;
			float *logits = gt_malloc(sizeof(float) * nl);
			int32_t *got = gt_malloc(sizeof(int32_t) * rows);
			for (int r = 0; r < rows; r++)
				argmax_row(logits + (size_t)r * vocab, vocab, r + vi);
			float *d_logits = gt_upload(logits, nl, SL_DT_F32);
			int32_t *d_tok = gt_dev_poison(sizeof(int32_t) * rows);
			GT_KERNEL(kern_argmax_rows_cuda(d_tok, d_logits, rows, vocab, NULL));
			GT_CUDA(cudaMemcpy(got, d_tok, sizeof(int32_t) * rows,
					   cudaMemcpyDeviceToHost));
			for (int r = 0; r < rows; r++, checked++) {
				int want = kern_argmax_cpu(logits + (size_t)r * vocab, vocab);
				if (got[r] != want && bad++ < 10)
					printf("  FAIL argmax_rows vocab %d rows %d row %d (shape %d): "
					       "got %d want %d\n", vocab, rows, r, (r + vi) % 6, got[r],
					       want);
			}
			gt_dev_free(d_logits);
			gt_dev_free(d_tok);
			free(logits);
			free(got);
		}
	}
	printf("kernel argmax_rows: %d rows (vocab 1 to 128256), %d mismatches (must be exact)\n",
	       checked, bad);
	fflush(stdout);
	ck_assert_msg(bad == 0, "argmax_rows: %d of %d rows differ from kern_argmax_cpu", bad,
		      checked);
}
END_TEST

/* ---- sampling with penalties, min-p and log-probs ---- */

/* Log-probs: top ids must be the CPU's exactly (they compare raw logits);
 * values are log_softmax with the sum in double, differing only by CUDA's
 * expf (<= 2 ulp) inside the sum. */
#define LOGPROB_TOL 1e-5

/* Per-row mix: penalties alone and together, min-p, log-probs of every
 * width (0, 1, 5, 20), greedy and sampled. */
static const kern_sample_params k_ext_params[] = {
	{.temperature = 0, .top_p = 1, .repetition_penalty = 1.5f, .logprobs = 1, .top_logprobs = 5},
	{.temperature = 0, .top_p = 1, .presence_penalty = 1.5f, .frequency_penalty = 0.5f},
	{.temperature = 0.8f, .top_p = 0.95f, .top_k = 40, .repetition_penalty = 1.2f,
	 .presence_penalty = 0.4f, .frequency_penalty = 0.3f, .logprobs = 1, .top_logprobs = 20},
	{.temperature = 1.0f, .top_p = 1, .min_p = 0.05f, .logprobs = 1},
	{.temperature = 1.3f, .top_p = 0.9f, .min_p = 0.2f, .repetition_penalty = 0.7f,
	 .top_logprobs = 1},
	{.temperature = 0.6f, .top_p = 1, .min_p = 0.5f, .frequency_penalty = -1,
	 .presence_penalty = -0.5f, .logprobs = 1, .top_logprobs = 3},
	{.temperature = 2.0f, .top_p = 1, .frequency_penalty = 2, .presence_penalty = 2,
	 .repetition_penalty = 10},
	{.temperature = 0.9f, .top_p = 1, .min_p = 1.0f, .logprobs = 1, .top_logprobs = 20},
};
#define N_EXT (int)(sizeof k_ext_params / sizeof *k_ext_params)

/* Row r's history: up to 48 draws (with repeats) among the 32 largest
 * logits, some from the "prompt", the rest "generated". */
static int make_hist(const float *l, int vocab, int32_t *ids, int32_t *n_gen, int32_t *in_prompt)
{
	int32_t top[32];
	int have = 0;
	for (int i = 0; i < vocab; i++) { /* the 32 largest, by insertion */
		if (have == 32 && !(l[i] > l[top[31]]))
			continue;
		int k = have < 32 ? have++ : 31;
		while (k > 0 && l[i] > l[top[k - 1]]) {
			top[k] = top[k - 1];
			k--;
		}
		top[k] = i;
	}
	int n = 0, draws = gt_int(1, 48), np = gt_int(1, draws);
	for (int d = 0; d < draws; d++) {
		int32_t id = top[gt_int(0, 31)];
		int at = -1;
		for (int e = 0; e < n; e++)
			if (ids[e] == id)
				at = e;
		if (at < 0)
			at = n++, ids[at] = id, n_gen[at] = 0, in_prompt[at] = 0;
		if (d < np)
			in_prompt[at] = 1;
		else
			n_gen[at]++;
	}
	return n;
}

/* log_softmax of logits[n] in double at index i. */
static double ref_logprob(const float *l, int n, int i)
{
	double mx = l[0], sum = 0;
	for (int k = 1; k < n; k++)
		mx = l[k] > mx ? l[k] : mx;
	for (int k = 0; k < n; k++)
		sum += exp((double)l[k] - mx);
	return (double)l[i] - mx - log(sum);
}

START_TEST(test_sampling_penalties_logprobs)
{
	static const int vocabs[] = {300, 32000, 128256}, quick_vocabs[] = {300, 5000, 4099};
	const int rows = 70, W = KERN_MAX_TOP_LOGPROBS;
	int quick = getenv("SL_TEST_QUICK") != NULL;
	gt_reseed(g_seed, 800);
	int greedy_bad = 0, bad = 0, near = 0, sampled = 0, lp_bad = 0;
	double lp_worst = 0;
	for (int vi = 0; vi < 3; vi++) {
		int vocab = quick ? quick_vocabs[vi] : vocabs[vi];
		size_t nl = (size_t)rows * vocab;
		float *logits = gt_malloc(sizeof(float) * nl), *pen = gt_malloc(sizeof(float) * vocab);
		kern_sample_params *params = gt_malloc(sizeof *params * rows);
		int64_t *positions = gt_malloc(sizeof(int64_t) * rows);
		int32_t *off = gt_malloc(sizeof(int32_t) * (rows + 1));
		int32_t *ids = gt_malloc(sizeof(int32_t) * rows * 48);
		int32_t *n_gen = gt_malloc(sizeof(int32_t) * rows * 48);
		int32_t *in_prompt = gt_malloc(sizeof(int32_t) * rows * 48);
		int32_t *want = gt_malloc(sizeof(int32_t) * rows), *got = gt_malloc(sizeof(int32_t) * rows);
		float *w_ch = gt_malloc(sizeof(float) * rows), *g_ch = gt_malloc(sizeof(float) * rows);
		int32_t *w_ids = gt_malloc(sizeof(int32_t) * rows * W);
		int32_t *g_ids = gt_malloc(sizeof(int32_t) * rows * W);
		float *w_top = gt_malloc(sizeof(float) * rows * W), *g_top = gt_malloc(sizeof(float) * rows * W);
		void *work = gt_malloc(kern_sample_work_bytes(vocab));
		off[0] = 0;
		for (int r = 0; r < rows; r++) {
			float *l = logits + (size_t)r * vocab;
			static const float scales[] = {0.5f, 2.0f, 5.0f, 12.0f};
			gt_fill(l, vocab, -scales[r % 4], scales[r % 4]);
			if (r % 5 == 0) { /* ties at the top, for the log-prob order */
				float mx = l[kern_argmax_cpu(l, vocab)];
				l[gt_int(0, vocab - 1)] = mx;
				l[gt_int(0, vocab - 1)] = mx;
			}
			params[r] = k_ext_params[(r + vi) % N_EXT];
			params[r].seed = gt_next();
			positions[r] = (int64_t)(gt_next() >> 20);
			/* every third row has no history at all */
			int n = r % 3 == 2 ? 0 : make_hist(l, vocab, ids + off[r], n_gen + off[r],
							   in_prompt + off[r]);
			off[r + 1] = off[r] + n;
		}
		kern_token_hist h = {off, ids, n_gen, in_prompt};
		kern_logprobs wl = {w_ch, w_ids, w_top};
		kern_sample_rows_cpu(want, &wl, logits, NULL, rows, vocab, params, positions, NULL, &h,
				     work);

		kern_sampler *smp = NULL;
		ck_assert_int_eq(kern_sampler_create(rows, vocab, &smp), 0);
		size_t ne = (size_t)off[rows] ? (size_t)off[rows] : 1;
		float *d_logits = gt_upload(logits, nl, SL_DT_F32);
		kern_sample_params *d_params = gt_upload_raw(params, sizeof *params * rows);
		int64_t *d_pos = gt_upload_raw(positions, sizeof(int64_t) * rows);
		kern_token_hist d_h = {gt_upload_raw(off, sizeof(int32_t) * (rows + 1)),
				       gt_upload_raw(ids, sizeof(int32_t) * ne),
				       gt_upload_raw(n_gen, sizeof(int32_t) * ne),
				       gt_upload_raw(in_prompt, sizeof(int32_t) * ne)};
		int32_t *d_tok = gt_dev_poison(sizeof(int32_t) * rows);
		/* ids poisoned with 0x7F7F7F7F (0xFF bytes would read as the -1 of an empty slot) */
		kern_logprobs d_lp = {gt_dev_poison(sizeof(float) * rows),
				      gt_dev_alloc(sizeof(int32_t) * rows * W),
				      gt_dev_poison(sizeof(float) * rows * W)};
		GT_CUDA(cudaMemset(d_lp.top_ids, 0x7F, sizeof(int32_t) * rows * W));
		GT_KERNEL(kern_sample_cuda(smp, d_tok, d_logits, rows, vocab, d_params, d_pos, NULL, &d_h,
					   &d_lp, NULL));
		GT_CUDA(cudaMemcpy(got, d_tok, sizeof(int32_t) * rows, cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(g_ch, d_lp.chosen, sizeof(float) * rows, cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(g_ids, d_lp.top_ids, sizeof(int32_t) * rows * W, cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(g_top, d_lp.top, sizeof(float) * rows * W, cudaMemcpyDeviceToHost));

		for (int r = 0; r < rows; r++) {
			const float *l = logits + (size_t)r * vocab;
			const kern_sample_params *p = &params[r];
			if (got[r] != want[r]) {
				/* the boundary margin of the penalised row */
				memcpy(pen, l, sizeof(float) * vocab);
				if (kern_has_penalty(p))
					for (int e = off[r]; e < off[r + 1]; e++)
						pen[ids[e]] = kern_penalise(l[ids[e]], n_gen[e], in_prompt[e], p);
				double m = p->temperature > 0 ? boundary_margin(pen, vocab, p, (uint64_t)positions[r]) : 0;
				int tolerated = p->temperature > 0 && m < SAMPLE_NEAR_TIE;
				printf("  %s vocab %d row %d (T %.2f k %d p %.2f min_p %.2f rep %.2f pres %.2f "
				       "freq %.2f, %d history): got %d want %d, margin %.2e\n",
				       tolerated ? "near-tie" : "FAIL", vocab, r, p->temperature, p->top_k,
				       p->top_p, p->min_p, p->repetition_penalty, p->presence_penalty,
				       p->frequency_penalty, off[r + 1] - off[r], got[r], want[r], m);
				if (p->temperature <= 0)
					greedy_bad++;
				else if (tolerated)
					near++;
				else
					bad++;
			}
			sampled += p->temperature > 0;
			/* log-probs: chosen against the GPU's own token */
			int wants = kern_wants_logprobs(p), n_top = kern_top_logprobs(p, vocab);
			double ch = wants ? ref_logprob(l, vocab, got[r]) : 0;
			double e = fabs(g_ch[r] - ch);
			if (!(e <= LOGPROB_TOL)) {
				lp_bad++;
				printf("  FAIL logprob vocab %d row %d: chosen %d got %.8g want %.8g (tol %.0e)\n",
				       vocab, r, got[r], g_ch[r], ch, LOGPROB_TOL);
			}
			lp_worst = e > lp_worst ? e : lp_worst;
			for (int k = 0; k < W; k++) {
				int32_t gi = g_ids[r * W + k], wi = w_ids[r * W + k];
				float gv = g_top[r * W + k], wv = w_top[r * W + k];
				double te = fabs((double)gv - wv);
				if (gi != wi || !(te <= LOGPROB_TOL) || (k >= n_top && gv != 0)) {
					lp_bad++;
					printf("  FAIL top logprob vocab %d row %d slot %d of %d: got (%d, %.8g) "
					       "want (%d, %.8g)\n", vocab, r, k, n_top, gi, gv, wi, wv);
					break;
				}
				lp_worst = k < n_top && te > lp_worst ? te : lp_worst;
			}
		}
		fflush(stdout);
		kern_sampler_destroy(smp);
		gt_dev_free(d_logits), gt_dev_free(d_params), gt_dev_free(d_pos), gt_dev_free(d_tok);
		gt_dev_free((void *)d_h.off), gt_dev_free((void *)d_h.ids);
		gt_dev_free((void *)d_h.n_gen), gt_dev_free((void *)d_h.in_prompt);
		gt_dev_free(d_lp.chosen), gt_dev_free(d_lp.top_ids), gt_dev_free(d_lp.top);
		free(logits), free(pen), free(params), free(positions), free(off), free(ids), free(n_gen);
		free(in_prompt), free(want), free(got), free(w_ch), free(g_ch), free(w_ids), free(g_ids);
		free(w_top), free(g_top), free(work);
	}
	printf("kernel sample+penalties+min_p: %d sampled rows (vocab %s), %d greedy and %d sample "
	       "mismatches, %d near-ties within %.0e tolerated\n", sampled,
	       quick ? "300/5000/4099" : "300/32000/128256", greedy_bad, bad, near, SAMPLE_NEAR_TIE);
	printf("kernel logprobs: worst abs err %.1e (tol %.0e), %d mismatches\n", lp_worst,
	       LOGPROB_TOL, lp_bad);
	fflush(stdout);
	ck_assert_msg(greedy_bad == 0 && bad == 0 && lp_bad == 0,
		      "sampling with penalties: %d argmax, %d sample, %d log-prob mismatches", greedy_bad,
		      bad, lp_bad);
}
END_TEST

/* ---- logit bias (logit_bias, min_tokens' bans) ---- */

/* Row r's bias: up to 40 distinct ids, the first few among the row's
 * likeliest (where a bias changes the draw), values in [-100, 100] with
 * some -inf bans and some +-100. Returns the count. */
static int make_bias(const float *l, int vocab, int32_t *ids, float *bias)
{
	int n = 0, want = gt_int(1, 40), best = kern_argmax_cpu(l, vocab);
	for (int e = 0; e < want; e++) {
		int32_t id = e < 3 ? (best + 11 * e) % vocab : gt_int(0, vocab - 1);
		int dup = 0;
		for (int k = 0; k < n; k++)
			dup |= ids[k] == id;
		if (dup)
			continue;
		int kind = gt_int(0, 9);
		ids[n] = id;
		bias[n++] = kind == 0 ? -INFINITY : kind == 1 ? -100.0f : kind == 2 ? 100.0f
			  : (float)gt_int(-10000, 10000) / 100.0f;
	}
	return n;
}

/* CUDA against the CPU reference on fresh random batches where two rows in
 * three have a bias row and half of those also a penalty history (the
 * bias is applied first, then the penalties read the biased logits), with
 * unbiased rows in the same batch; outputs poisoned. Tokens must be the
 * CPU's (sampled rows: but for near-ties of the biased, penalised row),
 * never a banned one, and log-probs the raw distribution's. */
START_TEST(test_sampling_logit_bias)
{
	static const int vocabs[] = {300, 49152, 128256}, quick_vocabs[] = {300, 5000, 4099};
	const int rows = 70, W = KERN_MAX_TOP_LOGPROBS;
	int quick = getenv("SL_TEST_QUICK") != NULL;
	gt_reseed(g_seed, 900);
	int bad = 0, near = 0, greedy_bad = 0, banned = 0, lp_bad = 0, biased_rows = 0;
	for (int vi = 0; vi < 3; vi++) {
		int vocab = quick ? quick_vocabs[vi] : vocabs[vi];
		size_t nl = (size_t)rows * vocab;
		float *logits = gt_malloc(sizeof(float) * nl), *pen = gt_malloc(sizeof(float) * vocab);
		kern_sample_params *params = gt_malloc(sizeof *params * rows);
		int64_t *positions = gt_malloc(sizeof(int64_t) * rows);
		int32_t *boff = gt_malloc(sizeof(int32_t) * (rows + 1));
		int32_t *bids = gt_malloc(sizeof(int32_t) * rows * 40);
		float *bval = gt_malloc(sizeof(float) * rows * 40);
		int32_t *hoff = gt_malloc(sizeof(int32_t) * (rows + 1));
		int32_t *ids = gt_malloc(sizeof(int32_t) * rows * 48);
		int32_t *n_gen = gt_malloc(sizeof(int32_t) * rows * 48);
		int32_t *in_prompt = gt_malloc(sizeof(int32_t) * rows * 48);
		int32_t *want = gt_malloc(sizeof(int32_t) * rows), *got = gt_malloc(sizeof(int32_t) * rows);
		float *w_ch = gt_malloc(sizeof(float) * rows), *g_ch = gt_malloc(sizeof(float) * rows);
		int32_t *w_ids = gt_malloc(sizeof(int32_t) * rows * W);
		float *w_top = gt_malloc(sizeof(float) * rows * W);
		void *work = gt_malloc(kern_sample_work_bytes(vocab));
		boff[0] = hoff[0] = 0;
		for (int r = 0; r < rows; r++) {
			float *l = logits + (size_t)r * vocab;
			static const float scales[] = {0.5f, 2.0f, 5.0f, 12.0f};
			gt_fill(l, vocab, -scales[r % 4], scales[r % 4]);
			params[r] = k_ext_params[(r + vi) % N_EXT];
			params[r].seed = gt_next();
			positions[r] = (int64_t)(gt_next() >> 20);
			int nb = r % 3 == 2 ? 0 : make_bias(l, vocab, bids + boff[r], bval + boff[r]);
			boff[r + 1] = boff[r] + nb;
			int nh = r % 2 ? make_hist(l, vocab, ids + hoff[r], n_gen + hoff[r], in_prompt + hoff[r])
				       : 0;
			hoff[r + 1] = hoff[r] + nh;
			biased_rows += nb > 0;
		}
		kern_logit_bias b = {boff, bids, bval};
		kern_token_hist h = {hoff, ids, n_gen, in_prompt};
		kern_logprobs wl = {w_ch, w_ids, w_top};
		kern_sample_rows_cpu(want, &wl, logits, NULL, rows, vocab, params, positions, &b, &h,
				     work);

		kern_sampler *smp = NULL;
		ck_assert_int_eq(kern_sampler_create(rows, vocab, &smp), 0);
		size_t nbe = boff[rows] ? (size_t)boff[rows] : 1, nhe = hoff[rows] ? (size_t)hoff[rows] : 1;
		float *d_logits = gt_upload(logits, nl, SL_DT_F32);
		kern_sample_params *d_params = gt_upload_raw(params, sizeof *params * rows);
		int64_t *d_pos = gt_upload_raw(positions, sizeof(int64_t) * rows);
		kern_logit_bias d_b = {gt_upload_raw(boff, sizeof(int32_t) * (rows + 1)),
				       gt_upload_raw(bids, sizeof(int32_t) * nbe),
				       gt_upload_raw(bval, sizeof(float) * nbe)};
		kern_token_hist d_h = {gt_upload_raw(hoff, sizeof(int32_t) * (rows + 1)),
				       gt_upload_raw(ids, sizeof(int32_t) * nhe),
				       gt_upload_raw(n_gen, sizeof(int32_t) * nhe),
				       gt_upload_raw(in_prompt, sizeof(int32_t) * nhe)};
		int32_t *d_tok = gt_dev_poison(sizeof(int32_t) * rows);
		kern_logprobs d_lp = {gt_dev_poison(sizeof(float) * rows),
				      gt_dev_alloc(sizeof(int32_t) * rows * W),
				      gt_dev_poison(sizeof(float) * rows * W)};
		GT_CUDA(cudaMemset(d_lp.top_ids, 0x7F, sizeof(int32_t) * rows * W));
		GT_KERNEL(kern_sample_cuda(smp, d_tok, d_logits, rows, vocab, d_params, d_pos, &d_b, &d_h,
					   &d_lp, NULL));
		GT_CUDA(cudaMemcpy(got, d_tok, sizeof(int32_t) * rows, cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(g_ch, d_lp.chosen, sizeof(float) * rows, cudaMemcpyDeviceToHost));
		for (int r = 0; r < rows; r++) {
			const float *l = logits + (size_t)r * vocab;
			const kern_sample_params *p = &params[r];
			/* the row as the sampler sees it: biased, then penalised */
			memcpy(pen, l, sizeof(float) * vocab);
			for (int e = boff[r]; e < boff[r + 1]; e++)
				pen[bids[e]] = l[bids[e]] + bval[e];
			if (kern_has_penalty(p))
				for (int e = hoff[r]; e < hoff[r + 1]; e++)
					pen[ids[e]] = kern_penalise(pen[ids[e]], n_gen[e], in_prompt[e], p);
			if (got[r] < 0 || got[r] >= vocab || !isfinite(pen[got[r]])) {
				banned++;
				printf("  FAIL vocab %d row %d: drew %d, banned or out of range\n", vocab, r,
				       got[r]);
				continue;
			}
			if (got[r] != want[r]) {
				double m = p->temperature > 0 ? boundary_margin(pen, vocab, p, (uint64_t)positions[r]) : 0;
				int tolerated = p->temperature > 0 && m < SAMPLE_NEAR_TIE;
				printf("  %s vocab %d row %d (T %.2f, %d bias, %d history): got %d want %d, "
				       "margin %.2e\n", tolerated ? "near-tie" : "FAIL", vocab, r,
				       p->temperature, boff[r + 1] - boff[r], hoff[r + 1] - hoff[r], got[r],
				       want[r], m);
				if (p->temperature <= 0)
					greedy_bad++;
				else if (tolerated)
					near++;
				else
					bad++;
			}
			double ch = kern_wants_logprobs(p) ? ref_logprob(l, vocab, got[r]) : 0;
			if (!(fabs(g_ch[r] - ch) <= LOGPROB_TOL)) {
				lp_bad++;
				printf("  FAIL logprob vocab %d row %d: got %.8g want %.8g (raw logits)\n",
				       vocab, r, g_ch[r], ch);
			}
		}
		fflush(stdout);
		kern_sampler_destroy(smp);
		gt_dev_free(d_logits), gt_dev_free(d_params), gt_dev_free(d_pos), gt_dev_free(d_tok);
		gt_dev_free((void *)d_b.off), gt_dev_free((void *)d_b.ids), gt_dev_free((void *)d_b.bias);
		gt_dev_free((void *)d_h.off), gt_dev_free((void *)d_h.ids);
		gt_dev_free((void *)d_h.n_gen), gt_dev_free((void *)d_h.in_prompt);
		gt_dev_free(d_lp.chosen), gt_dev_free(d_lp.top_ids), gt_dev_free(d_lp.top);
		free(logits), free(pen), free(params), free(positions), free(boff), free(bids);
		free(bval), free(hoff), free(ids), free(n_gen), free(in_prompt), free(want), free(got);
		free(w_ch), free(g_ch), free(w_ids), free(w_top), free(work);
	}
	printf("kernel sample+logit_bias: %d biased rows (vocab %s), %d greedy and %d sample "
	       "mismatches, %d banned draws, %d log-prob mismatches, %d near-ties tolerated\n",
	       biased_rows, quick ? "300/5000/4099" : "300/49152/128256", greedy_bad, bad, banned,
	       lp_bad, near);
	fflush(stdout);
	ck_assert_msg(greedy_bad == 0 && bad == 0 && banned == 0 && lp_bad == 0,
		      "sampling with logit bias: %d argmax, %d sample, %d banned, %d log-prob mismatches",
		      greedy_bad, bad, banned, lp_bad);
}
END_TEST

/* One test case per kernel family, so one can be run alone:
 * CK_RUN_CASE=sampling build/tests/gpu/test_kernels */
static void add_case(Suite *s, const char *name, const TTest *test)
{
	TCase *tc = tcase_create(name);
	tcase_set_timeout(tc, 300); /* CPU references of the larger GEMMs take seconds */
	tcase_add_test(tc, test);
	suite_add_tcase(s, tc);
}

static Suite *kernels_suite(void)
{
	Suite *s = suite_create("gpu_kernels");
	add_case(s, "embedding", test_embedding);
	add_case(s, "gather_rows", test_gather_rows);
	add_case(s, "rmsnorm", test_rmsnorm);
	add_case(s, "swiglu", test_swiglu);
	add_case(s, "matmul", test_matmul);
	add_case(s, "matmul_add", test_matmul_add);
	add_case(s, "rope", test_rope);
	add_case(s, "rope_fp8", test_rope_fp8);
	add_case(s, "sampling", test_sampling);
	add_case(s, "argmax_rows", test_argmax_rows);
	add_case(s, "sampling_ext", test_sampling_penalties_logprobs);
	add_case(s, "sampling_bias", test_sampling_logit_bias);
	return s;
}

int main(void)
{
	/* No CUDA call here: Check forks per test and each child makes its own
	 * context (a context does not survive fork). */
	g_seed = gt_seed_from_env();
	SRunner *sr = srunner_create(kernels_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
