/*
 * test_quant.c — the quantized linear layer (kernels/quant.cu) against its
 * CPU reference (kernels/quant.c), for every format (int8 per row with
 * fp32 and fp16 scales, int8 groups of 32 / 64 / 128, fp8 per row, int4
 * groups of 128 asymmetric, symmetric and with fp32 scales, int4 groups
 * of 64 asymmetric and symmetric, int4 groups of 32 with (d, m) pairs as
 * GGUF Q4_1 stores them), fp16 and
 * bf16 activations, run-dtype and fp32 outputs, every path (the GEMV at
 * 1..64 tokens, the tiled GEMM at any count, dequantize + cuBLAS, fp8
 * W8A8 through cuBLASLt, int8 per row on the int8 tensor cores with x in
 * two slices: AUTO's choice from 33 tokens, and forced in int8_split with
 * W's rows in many slabs), token counts 1, 2, 3, 5, 8, 13, 32, 64, 65, 70,
 * 200, 2048 (the GEMM forced at 1, 7, 17, 33, 64, 65, 100, 129, 256), and
 * shapes off the tile widths (rows 16k + 7 and not a multiple of the
 * GEMM's 64/128-row tiles; columns a multiple of the group but not of the
 * 64/128-column chunk, and the smallest legal; SmolLM2's 576; few rows and
 * many columns, which splits the columns across blocks). Inputs are fresh random values (the seed is
 * printed; SL_TEST_SEED replays it) rounded to the dtype first, outputs
 * are poisoned with NaN before each call.
 *
 * Also: every code of every format decoded exactly through the GEMV, the
 * GEMM and the dequantize path (one-hot activations pick single weights, so a
 * wrong column order or scale index shows as a wrong value, not as a
 * tolerance), the fp8 activation quantizer bit for bit against the CPU,
 * the norm and SiLU * up kernels that also make those activations (their
 * output bit for bit the unfused kernels', their codes the CPU's of that
 * output), a W8A8 call on activations marked in the kern_qblas's slot,
 * and on the activations alone (x written from them before any other
 * path reads it),
 * the wide GEMV against the CPU and the narrow kernel (gemv_wide),
 * the four paths captured in a CUDA graph and replayed to the same bits,
 * AUTO's GEMM range (gemm_auto: its bounds, kern_qblas_set_gemm_range,
 * SL_QGEMM and SL_QGEMM_MIN), refused calls, and fp8 again with
 * cuBLASLt's fast accumulation, W8A8 with K cut into slices run at once
 * (forced and by rule), and W8A8 with unit scales and the scales applied
 * after. One "worst rel err" line per case.
 * Runs on a GPU host only (make test-gpu).
 */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kernels/quant.h"
#include "qw_test.h"
#include "kernels/rmsnorm.h"
#include "common/sl.h"
#include "kernels/swiglu.h"

/*
 * Tolerances, as worst |gpu - ref| / max |ref| over an output.
 *
 * GEMV and GEMM: the products of exact codes and dtype-rounded x are the reference's
 * (the scales are applied to fp32 sums, never rounded into the weights);
 * only the fp32 summation order differs (~sqrt(K) 2^-24), plus the output's
 * rounding to the dtype (2^-11 f16, 2^-8 bf16, relative to the element).
 * The same bounds as the fp16/bf16 GEMM test: 10x / 5x the output rounding,
 * and 2e-4 for fp32 outputs.
 * Dequantize + cuBLAS: each weight scale * code is rounded to the dtype
 * once (2^-11 / 2^-8 relative, random signs): within the same bounds, and
 * fp32 outputs take the dtype's bound. So does int4 with groups of 32 on
 * every path (its GEMV rounds d * u + m to the dtype too), and the GEMM
 * where it folds group scales into fp16 weights (int8 groups of 32, int4
 * groups of 64: kern_qblas_gemm_rounds).
 * W8A8 (cuBLASLt fp8) against the W8A8 reference: the activations' codes
 * and scales are the reference's bit for bit (tested apart), products of
 * two e4m3 values are exact; cuBLASLt's fp8 accumulation is fp32 with
 * periodic promotion: 1e-3 for fp32 outputs. With its fast accumulation
 * (kern_qblas_config's fp8_fast_accum: no promotion, the tensor cores'
 * own narrower sums over the whole K) TOL_W8A8_FAST for every output.
 */
#define TOL_F16 5e-3
#define TOL_BF16 2e-2
#define TOL_F32OUT 2e-4
#define TOL_W8A8_F32OUT 1e-3
#define TOL_W8A8_FAST 1e-2
/*
 * The int8 split path (int8 per row) against its reference
 * (kern_qmatmul_int8_split_cpu): the slices, their integer sums and the
 * float operations after them are the reference's, so fp32 outputs agree
 * to the last bit (1e-6 leaves room for nothing else); run-dtype outputs
 * take the dtype's rounding. Against the weight-only reference: x's
 * rounding to 15 bits, at most max|x| / 32766 a value with random signs,
 * about 3e-5 of max|ref| at 4096 columns; TOL_SPLIT_W bounds it.
 */
#define TOL_SPLIT 1e-6
#define TOL_SPLIT_W 1e-3

static uint64_t g_seed;
static const sl_dtype k_dts[] = {SL_DT_F16, SL_DT_BF16};

static double tol_dt(sl_dtype dt) { return dt == SL_DT_F16 ? TOL_F16 : TOL_BF16; }
static double dmax(double a, double b) { return a > b ? a : b; }


/* ---- weights on both sides (qw_test.h) ---- */


/* test_fp8_fast: the kern_qblas's W8A8 GEMMs accumulate fast */
static int g_fp8_fast;

static kern_qblas *qblas_make(void *stream)
{
	kern_qblas_config cfg = {.max_tokens = 2048, .max_cols = 11008,
				 .fp8_fast_accum = g_fp8_fast};
	kern_qblas *qb = NULL;
	ck_assert_int_eq(kern_qblas_create(stream, &cfg, &qb), 0);
	kern_qblas_set_pdl(qb, gt_pdl_on());
	return qb;
}

static const char *path_name(int p)
{
	return p == KERN_QPATH_GEMV     ? "gemv"
	       : p == KERN_QPATH_FP8_LT ? "fp8-lt"
	       : p == KERN_QPATH_GEMM   ? "gemm"
	       : p == KERN_QPATH_INT8_SPLIT ? "int8-split"
					: "dequant";
}

/* ---- random inputs against the reference ---- */

typedef struct shape {
	const char *name;
	int rows, cols;
	int ns[8], n_ns;
} shape;

/* columns a multiple of the group (or of 16) but not of the chunk */
static int odd_cols(const qcfg *c)
{
	if (c->group == 128)
		return 4224; /* 33 x 128 */
	if (c->group == 64) /* int4: a half chunk at the end */
		return 4160; /* 65 x 64 */
	if (c->group == 32)
		return 4128; /* 129 x 32: a half chunk at the end */
	return 4144;         /* 259 x 16 */
}

/* Worst errors of one (format, dtype) by path and output kind. */
typedef struct worst {
	double v[5][2]; /* [path - 1][out f32] */
	int runs[5][2];
	int rounded[5][2]; /* calls that rounded the weights (kern_qblas_gemm_rounds) */
	int w8a8_calls, w8a8_lt; /* fp8 calls meant for cuBLASLt, and those it ran */
} worst;

static void record(worst *w, int path, int f32, double e, int rounded)
{
	w->v[path - 1][f32] = dmax(w->v[path - 1][f32], e);
	w->runs[path - 1][f32]++;
	w->rounded[path - 1][f32] += rounded;
}

/* int4 groups of 32: every path rounds each weight d * u + m to the dtype */
static int rounds_weights(const qcfg *c)
{
	return c->format == KERN_Q_INT4 && c->group == KERN_Q_INT4_GROUP_AFFINE;
}

/* rounded: the call rounded each weight to the dtype (the GEMM's folded
 * scales: kern_qblas_gemm_rounds) */
static double tol_for(const qcfg *c, int path, int f32, sl_dtype dt, int rounded)
{
	if (path == KERN_QPATH_FP8_LT && g_fp8_fast)
		return dmax(TOL_W8A8_FAST, f32 ? 0 : tol_dt(dt));
	if (path == KERN_QPATH_INT8_SPLIT)
		return f32 ? TOL_SPLIT : tol_dt(dt);
	if (!f32 || path == KERN_QPATH_DEQUANT || rounds_weights(c) || rounded)
		return tol_dt(dt);
	return path == KERN_QPATH_FP8_LT ? TOL_W8A8_F32OUT : TOL_F32OUT;
}

/* The int8 split path takes the format: int8 with per-row scales. */
static int split_format(const qcfg *c)
{
	return c->format == KERN_Q_INT8 && c->group == 0;
}

/* One call of one path with both output kinds, against ref (weight-only)
 * or ref_act, the reference of the paths that round x: W8A8 (FP8_LT) for
 * fp8, the int8 split path for int8 per row. Returns 0, or SL_ENOTSUP
 * when the path cannot take the call (FP8_LT without a cuBLASLt
 * algorithm). */
static int run_path(kern_qblas *qb, int path, const qcfg *c, const qw *q, const shape *s,
		    int n, sl_dtype dt, void *d_x, const float *ref, const float *ref_act,
		    worst *w)
{
	size_t no = (size_t)n * s->rows;
	float *got = gt_malloc(sizeof(float) * no);
	for (int f32 = 0; f32 < 2; f32++) {
		sl_dtype ot = f32 ? SL_DT_F32 : dt;
		void *d_out = gt_dev_poison(sl_dtype_size(ot) * no);
		int rc = kern_qmatmul_cuda(qb, path, d_out, ot, d_x, dt, &q->d, n);
		/* after the call: an fp8 call cuBLASLt refused went to DEQUANT */
		int taken = path == KERN_QPATH_AUTO ? kern_qmatmul_path(qb, &q->d, n, dt, ot) : path;
		if (c->format == KERN_Q_FP8 &&
		    (path == KERN_QPATH_FP8_LT ||
		     (path == KERN_QPATH_AUTO && n > KERN_QGEMV_FP8_MAX_TOKENS))) {
			w->w8a8_calls++;
			w->w8a8_lt += rc == 0 && taken == KERN_QPATH_FP8_LT;
		}
		if (rc == SL_ENOTSUP && path == KERN_QPATH_FP8_LT) {
			gt_dev_free(d_out);
			free(got);
			return SL_ENOTSUP;
		}
		ck_assert_msg(rc == 0, "%s %s n %d path %s: rc %d", c->name, s->name, n,
			      path_name(taken), rc);
		GT_CUDA(cudaDeviceSynchronize());
		gt_download(got, d_out, no, ot);
		char what[160];
		snprintf(what, sizeof what, "qmatmul %s %s %s->%s %s rows %d cols %d n %d",
			 path_name(taken), c->name, gt_dt_name(dt), gt_dt_name(ot), s->name, s->rows,
			 s->cols, n);
		const int acts = taken == KERN_QPATH_FP8_LT || taken == KERN_QPATH_INT8_SPLIT;
		const float *want = acts ? ref_act : ref;
		ck_assert_ptr_nonnull(want);
		const int rounded =
			taken == KERN_QPATH_GEMM && kern_qblas_gemm_rounds(qb, &q->d, dt);
		double tol = tol_for(c, taken, f32, dt, rounded);
		double e = gt_compare(what, got, want, no, tol);
		record(w, taken, f32, e, rounded);
		ck_assert_msg(e <= tol, "%s: worst %.3g > tol %.3g", what, e, tol);
		gt_dev_free(d_out);
	}
	free(got);
	return 0;
}

/* Every token count of a shape on AUTO (and some on the other paths), or
 * on the path `forced` alone. */
static void run_shape(kern_qblas *qb, const qcfg *c, const shape *s, worst *ws, int forced)
{
	qw q;
	qw_random(&q, c, s->rows, s->cols);
	for (int di = 0; di < 2; di++) {
		sl_dtype dt = k_dts[di];
		for (int i = 0; i < s->n_ns; i++) {
			int n = s->ns[i];
			size_t nx = (size_t)n * s->cols, no = (size_t)n * s->rows;
			float *x = gt_malloc(sizeof(float) * nx), *ref = gt_malloc(sizeof(float) * no);
			float *ref8 = NULL;
			gt_fill(x, nx, -1, 1);
			gt_round(x, nx, dt);
			kern_qmatmul_cpu(ref, x, &q.h, n);
			if (c->format == KERN_Q_FP8 && (!forced || forced == KERN_QPATH_FP8_LT)) {
				ref8 = gt_malloc(sizeof(float) * no);
				kern_qmatmul_w8a8_cpu(ref8, x, &q.h, n);
			}
			if (split_format(c) && (!forced || forced == KERN_QPATH_INT8_SPLIT)) {
				ref8 = gt_malloc(sizeof(float) * no);
				kern_qmatmul_int8_split_cpu(ref8, x, &q.h, n);
			}
			void *d_x = gt_upload(x, nx, dt);
			run_path(qb, forced ? forced : KERN_QPATH_AUTO, c, &q, s, n, dt, d_x, ref, ref8,
				 &ws[di]);
			/* the other paths on some token counts of each shape */
			if (!forced && (i == 1 || (n > 64 && c->format == KERN_Q_FP8)))
				run_path(qb, KERN_QPATH_DEQUANT, c, &q, s, n, dt, d_x, ref, ref8, &ws[di]);
			if (!forced && c->format == KERN_Q_FP8 && (i == 0 || n > 64) &&
			    run_path(qb, KERN_QPATH_FP8_LT, c, &q, s, n, dt, d_x, ref, ref8, &ws[di]))
				printf("  note: no cuBLASLt fp8 algorithm for %s rows %d cols %d n %d %s\n",
				       s->name, s->rows, s->cols, n, gt_dt_name(dt));
			gt_dev_free(d_x);
			free(x);
			free(ref);
			free(ref8);
		}
	}
	qw_free(&q);
}

/* The smallest columns the format takes: one group, or 16 (per row). */
static int least_cols(const qcfg *c)
{
	return c->group ? c->group : 16;
}

/* The GEMM forced on every token count around its tiles (32, 64 and 128
 * tokens), on rows that are no multiple of its 64/128-row tiles. */
static void run_gemm_shapes(kern_qblas *qb, const qcfg *c, worst *ws)
{
	const shape shapes[] = {
		{"gemm", 263, odd_cols(c), {1, 7, 17, 33, 64, 65, 100, 129}, 8},
		{"gemm-256", 135, 1024, {256}, 1},
		{"gemm-least-cols", 135, least_cols(c), {1, 17, 65, 256}, 4},
		/* SmolLM2's in_dim: int4 groups of 64, a half chunk at the end */
		{"gemm-576", 577, 576, {17, 64, 129}, 576 % (c->group ? c->group : 16) ? 0 : 3},
		/* two row tiles: split across blocks, then kern_splitk_reduce */
		{"gemm-split-k", 135, 11008, {33, 256}, 2},
	};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
		if (shapes[i].n_ns)
			run_shape(qb, c, &shapes[i], ws, KERN_QPATH_GEMM);
}

/* Compute capability 9.0: where the wgmma GEMM must run. */
static int is_sm90(void)
{
	int dev = 0, major = 0, minor = 0;
	GT_CUDA(cudaGetDevice(&dev));
	GT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
	GT_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
	return major == 9 && minor == 0;
}

/* Whether the wgmma GEMM takes the format: per-row scales, or groups of
 * whole 64-byte chunks (quant_gemm_wgmma.cu). */
static int wgmma_format(const qcfg *c)
{
	if (c->format == KERN_Q_INT4)
		return c->group == 128;
	return c->group == 0 || c->group == 64 || c->group == 128;
}

/* Each of the wgmma GEMM's block shapes forced on the GEMM's shapes. On
 * an H100 / H200 (this build's CUDA_ARCHS has 90) every format it takes
 * must run; elsewhere, and for the groups it does not take, a forced
 * call must return SL_ENOTSUP. */
static void run_gemm_wgmma(kern_qblas *qb, const qcfg *c, worst *ws)
{
	qw q;
	qw_random(&q, c, 263, odd_cols(c));
	const int runs = kern_qblas_gemm_wgmma(qb, &q.d);
	ck_assert_int_eq(runs, is_sm90() && wgmma_format(c));
	for (int v = KERN_QGEMM_WGMMA_FIRST; v < KERN_QGEMM_WGMMA_FIRST + KERN_QGEMM_WGMMA_COUNT;
	     v++) {
		kern_qblas_set_gemm_variant(qb, v);
		if (runs) {
			run_gemm_shapes(qb, c, ws);
		} else {
			void *d_x = gt_dev_poison(sizeof(uint16_t) * 64 * q.d.cols);
			void *d_out = gt_dev_poison(sizeof(uint16_t) * 64 * q.d.rows);
			ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_GEMM, d_out, SL_DT_F16, d_x,
							   SL_DT_F16, &q.d, 64),
					 SL_ENOTSUP);
			gt_dev_free(d_x);
			gt_dev_free(d_out);
		}
	}
	kern_qblas_set_gemm_variant(qb, 0);
	printf("kernel qgemm wgmma %s: %s\n", c->name,
	       runs ? "every block shape checked" : "not taken here (SL_ENOTSUP)");
	fflush(stdout);
	qw_free(&q);
}

static void report(const qcfg *c, const worst *ws)
{
	for (int di = 0; di < 2; di++)
		for (int p = 1; p <= 5; p++)
			for (int f32 = 0; f32 < 2; f32++) {
				if (!ws[di].runs[p - 1][f32])
					continue;
				char name[96];
				snprintf(name, sizeof name, "qmatmul(%s%s) %s%s", path_name(p),
					 p == KERN_QPATH_FP8_LT && g_fp8_fast ? ", fast accum" : "",
					 c->name, f32 ? " f32out" : "");
				gt_report(name, k_dts[di], ws[di].v[p - 1][f32],
					  tol_for(c, p, f32, k_dts[di], ws[di].rounded[p - 1][f32]));
			}
}

static void test_format(int ci)
{
	const qcfg *c = &qw_cfgs[ci];
	gt_reseed(g_seed, 1000 + ci);
	kern_qblas *qb = qblas_make(NULL);
	const shape shapes[] = {
		/* decode: 16k + 7 rows, every GEMV tile count */
		{"decode", 2055, 4096, {1, 2, 5, 8, 13, 32, 64}, 7},
		/* columns off the chunk; 200 tokens leaves the GEMV */
		{"odd-cols", 519, odd_cols(c), {1, 5, 13, 64, 200}, 5},
		/* few rows, many columns: split across blocks */
		{"split-k", 135, 11008, {1, 8, 64}, 3},
		/* long rows, a tile per SM or more */
		{"long-rows", 2120, 11008, {1, 3, 8, 9}, 4},
		/* on 132 SMs tiles for 4 to 6 blocks an SM, and more (int4
		 * with groups of 128 up to 8 tokens: 4 warps x 2 and x 4
		 * chunks, kernels/quant.cu's qgemv_tiles) */
		{"many-rows", 8471, 1024, {1, 8}, 2},
		{"more-rows", 12703, 512, {1, 5}, 2},
		{"tiny", 7, 128, {1, 3, 70}, 3},
		/* aligned: where cuBLASLt's fp8 GEMM has algorithms */
		{"aligned", 512, 2048, {65, 200}, 2},
		{"prefill", 263, 1024, {2048}, 1},
		{"prefill-aligned", 512, 2048, {2048}, c->format == KERN_Q_FP8},
	};
	worst ws[2];
	memset(ws, 0, sizeof ws);
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
		if (shapes[i].n_ns)
			run_shape(qb, c, &shapes[i], ws, 0);
	run_gemm_shapes(qb, c, ws);
	run_gemm_wgmma(qb, c, ws);
	report(c, ws);
	if (c->format == KERN_Q_FP8) {
		/* not a failure when 0: those calls were dequantized and checked as such */
		printf("kernel qmatmul %s: cuBLASLt ran %d of %d W8A8 calls\n", c->name,
		       ws[0].w8a8_lt + ws[1].w8a8_lt, ws[0].w8a8_calls + ws[1].w8a8_calls);
		fflush(stdout);
	}
	kern_qblas_destroy(qb);
}

START_TEST(test_int8_row) { test_format(0); test_format(1); }
END_TEST
START_TEST(test_int8_groups) { test_format(2); test_format(3); test_format(4); }
END_TEST
START_TEST(test_fp8) { test_format(5); }
END_TEST
START_TEST(test_fp8_fast)
{
	g_fp8_fast = 1;
	test_format(5);
	g_fp8_fast = 0;
}
END_TEST
/*
 * W8A8 on cuBLASLt with K cut into 2, 4 and 8 slices run at once (fp32
 * partials summed by kern_splitk_reduce), forced, and by the library's
 * rule: against the W8A8 reference on 2048 columns (slices of 1024, 512;
 * 8 would be 256, under the 512 the rule allows: not split) and on
 * down's 11008 (slices of 5504, 2752, 1376). A forced count the columns
 * allow must be the one the call takes, unless cuBLASLt has no fp8
 * algorithm at all (noted).
 */
START_TEST(test_fp8_lt_splits)
{
	const qcfg *c = &qw_cfgs[5];
	gt_reseed(g_seed, 3000);
	kern_qblas *qb = qblas_make(NULL);
	const shape shapes[] = {
		{"lt-split", 512, 2048, {33, 64, 200}, 3},
		{"lt-split-down", 1024, 11008, {33, 129}, 2},
	};
	static const int counts[] = {2, 4, 8, 0};
	worst ws[2];
	memset(ws, 0, sizeof ws);
	kern_qblas_set_lt_unit(qb, 0); /* slices are for per-row-scale calls */
	for (int ci = 0; ci < 4; ci++) {
		kern_qblas_set_lt_splits(qb, counts[ci]);
		for (int i = 0; i < 2; i++) {
			const shape *sh = &shapes[i];
			qw q;
			qw_random(&q, c, sh->rows, sh->cols);
			const int want = counts[ci] && sh->cols / counts[ci] >= 512 ? counts[ci] : 1;
			for (int j = 0; j < sh->n_ns; j++) {
				const int got = kern_qmatmul_lt_splits(qb, &q.d, sh->ns[j], SL_DT_F16);
				printf("  %s n %d: asked %d K slices, took %d\n", sh->name, sh->ns[j],
				       counts[ci], got);
				if (got == 0) {
					printf("  note: no cuBLASLt fp8 algorithm\n");
					continue;
				}
				if (counts[ci])
					ck_assert_int_eq(got, want);
			}
			qw_free(&q);
			run_shape(qb, c, sh, ws, KERN_QPATH_FP8_LT);
		}
	}
	report(c, ws);
	kern_qblas_destroy(qb);
}
END_TEST
/*
 * W8A8 on cuBLASLt with unit scalar scales and the per-row and per-token
 * scales applied after (the default up to KERN_LT_UNIT_MAX_TOKENS): every
 * call of an aligned shape up to that many tokens must take it, one token
 * more must not, and every output is checked against the W8A8 reference
 * (odd rows included, where cuBLASLt may have no algorithm: noted).
 */
START_TEST(test_fp8_lt_unit)
{
	const qcfg *c = &qw_cfgs[5];
	gt_reseed(g_seed, 4000);
	kern_qblas *qb = qblas_make(NULL);
	const shape shapes[] = {
		{"lt-unit", 512, 2048, {33, 48, 200, KERN_LT_UNIT_MAX_TOKENS,
					KERN_LT_UNIT_MAX_TOKENS + 1}, 5},
		{"lt-unit-down", 1024, 11008, {33, 129}, 2},
		{"lt-unit-odd", 519, odd_cols(c), {64}, 1},
	};
	worst ws[2];
	memset(ws, 0, sizeof ws);
	for (int i = 0; i < 3; i++) {
		const shape *sh = &shapes[i];
		qw q;
		qw_random(&q, c, sh->rows, sh->cols);
		for (int j = 0; j < sh->n_ns && i < 2; j++) {
			const int n = sh->ns[j];
			if (!kern_qmatmul_lt_splits(qb, &q.d, n, SL_DT_F16)) {
				printf("  note: no cuBLASLt fp8 algorithm for %s n %d\n", sh->name, n);
				continue;
			}
			ck_assert_int_eq(kern_qmatmul_lt_unit(qb, &q.d, n, SL_DT_F16),
					 n <= KERN_LT_UNIT_MAX_TOKENS);
			ck_assert_int_eq(kern_qmatmul_lt_unit(qb, &q.d, n, SL_DT_F32),
					 n <= KERN_LT_UNIT_MAX_TOKENS);
		}
		qw_free(&q);
		run_shape(qb, c, sh, ws, KERN_QPATH_FP8_LT);
	}
	printf("kernel qmatmul %s: cuBLASLt ran %d of %d W8A8 calls (unit scales)\n", c->name,
	       ws[0].w8a8_lt + ws[1].w8a8_lt, ws[0].w8a8_calls + ws[1].w8a8_calls);
	report(c, ws);
	kern_qblas_destroy(qb);
}
END_TEST
/* ---- the int8 split path ---- */

/* Worst |got - ref| / max |ref| of the forced split path on one shape
 * against the weight-only reference (fp32 out): x's 15-bit rounding. */
static double split_vs_weights(kern_qblas *qb, const qw *q, int n, sl_dtype dt)
{
	const size_t nx = (size_t)n * q->d.cols, no = (size_t)n * q->d.rows;
	float *x = gt_malloc(sizeof(float) * nx), *ref = gt_malloc(sizeof(float) * no);
	float *got = gt_malloc(sizeof(float) * no);
	gt_fill(x, nx, -1, 1);
	gt_round(x, nx, dt);
	kern_qmatmul_cpu(ref, x, &q->h, n);
	void *d_x = gt_upload(x, nx, dt), *d_out = gt_dev_poison(sizeof(float) * no);
	ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_INT8_SPLIT, d_out, SL_DT_F32, d_x, dt,
					   &q->d, n), 0);
	GT_CUDA(cudaDeviceSynchronize());
	gt_download(got, d_out, no, SL_DT_F32);
	char what[96];
	snprintf(what, sizeof what, "qsplit vs weight-only %s rows %d cols %d n %d", gt_dt_name(dt),
		 q->d.rows, q->d.cols, n);
	const double e = gt_compare(what, got, ref, no, TOL_SPLIT_W);
	gt_dev_free(d_x);
	gt_dev_free(d_out);
	free(x);
	free(ref);
	free(got);
	return e;
}

/* The algorithms kern_qblas_tune_split picks give the bits the
 * heuristic's first gives (exact int32 sums), on a weight of the tuned
 * shape at token counts between and on the tuned ones. */
static void split_tuned_same(kern_qblas *untuned)
{
	static const int ns[] = {33, 64, 100, 200, 256};
	kern_qblas *qb = qblas_make(NULL);
	ck_assert_int_eq(kern_qblas_tune_split(qb, 2055, 4096), 0);
	ck_assert_int_eq(kern_qblas_tune_split(qb, 2055, 4096), 0); /* tuned once */
	ck_assert_int_ne(kern_qblas_tune_split(qb, 2055, 4100), 0);  /* not a multiple of 16 */
	qw q;
	qw_random(&q, &qw_cfgs[0], 2055, 4096);
	for (int i = 0; i < 5; i++) {
		const int n = ns[i];
		const size_t nx = (size_t)n * 4096, no = (size_t)n * 2055;
		float *x = gt_malloc(sizeof(float) * nx), *a = gt_malloc(sizeof(float) * no);
		float *b = gt_malloc(sizeof(float) * no);
		gt_fill(x, nx, -1, 1);
		void *d_x = gt_upload(x, nx, SL_DT_F16);
		void *d_a = gt_dev_poison(sizeof(float) * no), *d_b = gt_dev_poison(sizeof(float) * no);
		ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_INT8_SPLIT, d_a, SL_DT_F32, d_x,
						   SL_DT_F16, &q.d, n), 0);
		ck_assert_int_eq(kern_qmatmul_cuda(untuned, KERN_QPATH_INT8_SPLIT, d_b, SL_DT_F32, d_x,
						   SL_DT_F16, &q.d, n), 0);
		GT_CUDA(cudaDeviceSynchronize());
		gt_download(a, d_a, no, SL_DT_F32);
		gt_download(b, d_b, no, SL_DT_F32);
		ck_assert_msg(memcmp(a, b, sizeof(float) * no) == 0, "tuned split n %d differs", n);
		gt_dev_free(d_x);
		gt_dev_free(d_a);
		gt_dev_free(d_b);
		free(x);
		free(a);
		free(b);
	}
	printf("kernel qsplit tuned: the same bits as the heuristic's algorithm at 33-256 tokens\n");
	qw_free(&q);
	kern_qblas_destroy(qb);
}

/* One call of path on x (fp32 out) into a host buffer. */
static void call_once(kern_qblas *qb, int path, const qw *q, const void *d_x, int n, float *got)
{
	const size_t no = (size_t)n * q->d.rows;
	void *d_out = gt_dev_poison(sizeof(float) * no);
	ck_assert_int_eq(kern_qmatmul_cuda(qb, path, d_out, SL_DT_F32, d_x, SL_DT_F16, &q->d, n), 0);
	GT_CUDA(cudaDeviceSynchronize());
	gt_download(got, d_out, no, SL_DT_F32);
	gt_dev_free(d_out);
}

/* After kern_qblas_tune_gemm, a GEMM call of n tokens runs the shape kept
 * for n: its output is that shape's, forced, to the bit; both within the
 * GEMM's tolerance of the CPU reference. Where AUTO now takes the GEMM
 * (int8 per row: where it timed faster than the split path), AUTO's
 * output is the GEMM's too. */
static void gemm_tuned_case(kern_qblas *qb, kern_qblas *forced, const qcfg *c, const qw *q, int n)
{
	const int v = kern_qblas_gemm_tuned(qb, &q->d, SL_DT_F16, n);
	ck_assert_msg(v >= 0 && v <= KERN_QGEMM_VARIANTS, "%s n %d: shape %d", c->name, n, v);
	const size_t nx = (size_t)n * q->d.cols, no = (size_t)n * q->d.rows;
	float *x = gt_malloc(sizeof(float) * nx), *ref = gt_malloc(sizeof(float) * no);
	float *a = gt_malloc(sizeof(float) * no), *b = gt_malloc(sizeof(float) * no);
	gt_fill(x, nx, -1, 1);
	gt_round(x, nx, SL_DT_F16);
	kern_qmatmul_cpu(ref, x, &q->h, n);
	void *d_x = gt_upload(x, nx, SL_DT_F16);
	call_once(qb, KERN_QPATH_GEMM, q, d_x, n, a);
	kern_qblas_set_gemm_variant(forced, v);
	call_once(forced, KERN_QPATH_GEMM, q, d_x, n, b);
	ck_assert_msg(memcmp(a, b, sizeof(float) * no) == 0, "%s n %d: tuned call is not shape %d",
		      c->name, n, v);
	const int path = kern_qmatmul_path(qb, &q->d, n, SL_DT_F16, SL_DT_F32);
	ck_assert_msg(path == KERN_QPATH_GEMM || (split_format(c) && path == KERN_QPATH_INT8_SPLIT),
		      "%s n %d: AUTO takes %s", c->name, n, path_name(path));
	if (path == KERN_QPATH_GEMM) {
		call_once(qb, KERN_QPATH_AUTO, q, d_x, n, b);
		ck_assert_msg(memcmp(a, b, sizeof(float) * no) == 0, "%s n %d: AUTO is not the GEMM",
			      c->name, n);
	}
	char what[96];
	snprintf(what, sizeof what, "qgemm tuned %s n %d shape %d", c->name, n, v);
	const double tol = tol_for(c, KERN_QPATH_GEMM, 1, SL_DT_F16,
				   kern_qblas_gemm_rounds(qb, &q->d, SL_DT_F16));
	ck_assert_msg(gt_compare(what, a, ref, no, tol) <= tol, "%s beyond %.3g", what, tol);
	gt_dev_free(d_x);
	free(x);
	free(ref);
	free(a);
	free(b);
}

/*
 * kern_qblas_tune_gemm on int4 and int8 groups of 128 (what AUTO gives
 * the GEMM) and int8 per row (the split path, which the GEMM may win
 * from): every call between and on the tuned token counts runs the shape
 * kept and stays exact to the contract; SL_QGEMM_TUNE=0 keeps nothing.
 */
START_TEST(test_gemm_tuned)
{
	static const int ns[] = {33, 64, 100, 160, 200, 256};
	gt_reseed(g_seed, 6100);
	kern_qblas *qb = qblas_make(NULL), *forced = qblas_make(NULL);
	const int cfgs[] = {6, 4, 0};
	for (int ci = 0; ci < 3; ci++) {
		const qcfg *c = &qw_cfgs[cfgs[ci]];
		qw q;
		qw_random(&q, c, 1031, 2048);
		int kept = -1;
		ck_assert_int_eq(kern_qblas_tune_gemm(qb, &q.d, SL_DT_F16, &kept), 0);
		ck_assert_int_ge(kept, 0);
		for (int i = 0; i < 6; i++)
			gemm_tuned_case(qb, forced, c, &q, ns[i]);
		printf("kernel qgemm tuned %s: %d token counts changed shape; 64/128/256 -> %d/%d/%d\n",
		       c->name, kept, kern_qblas_gemm_tuned(qb, &q.d, SL_DT_F16, 64),
		       kern_qblas_gemm_tuned(qb, &q.d, SL_DT_F16, 128),
		       kern_qblas_gemm_tuned(qb, &q.d, SL_DT_F16, 256));
		qw_free(&q);
	}
	kern_qblas_destroy(qb);
	int kept = -1;
	setenv("SL_QGEMM_TUNE", "0", 1);
	qb = qblas_make(NULL);
	qw q;
	qw_random(&q, &qw_cfgs[6], 1031, 2048);
	ck_assert_int_eq(kern_qblas_tune_gemm(qb, &q.d, SL_DT_F16, &kept), 0);
	ck_assert_int_eq(kept, 0);
	ck_assert_int_eq(kern_qblas_gemm_tuned(qb, &q.d, SL_DT_F16, 128), 0);
	unsetenv("SL_QGEMM_TUNE");
	qw_free(&q);
	kern_qblas_destroy(qb);
	kern_qblas_destroy(forced);
	fflush(stdout);
}
END_TEST

/* One GEMV call (fp16 in, fp32 out) with the wide kernel on or off. */
static void gemv_once(kern_qblas *qb, int wide, const qw *q, const void *d_x, int n, float *got)
{
	kern_qblas_set_gemv_wide(qb, wide);
	call_once(qb, KERN_QPATH_GEMV, q, d_x, n, got);
	kern_qblas_set_gemv_wide(qb, 1);
}

/* Where q has meta words (kern_qweight_meta_bytes: int4, fp16 scales),
 * the GEMV again with them packed and uploaded, wide kernel on and off:
 * the bits of the calls without them, wide and narrow (the same scales
 * and zero points, one load a row); 1 when it ran. */
static int meta_same(kern_qblas *qb, qw *q, const void *d_x, int n, const float *wide,
		     const float *narrow)
{
	const size_t mb = kern_qweight_meta_bytes(&q->h), no = (size_t)n * q->d.rows;
	if (!mb)
		return 0;
	uint32_t *m = gt_malloc(mb);
	float *got = gt_malloc(sizeof(float) * no);
	kern_qweight_meta_pack(&q->h, m);
	q->d.meta = gt_upload_raw(m, mb);
	for (int w = 0; w < 2; w++) {
		gemv_once(qb, w, q, d_x, n, got);
		ck_assert_msg(memcmp(got, w ? wide : narrow, sizeof(float) * no) == 0,
			      "%s rows %d cols %d n %d wide %d: meta words changed the GEMV's bits",
			      kern_qformat_name(q->h.format), q->d.rows, q->d.cols, n, w);
	}
	gt_dev_free(q->d.meta);
	q->d.meta = NULL;
	free(m);
	free(got);
	return 1;
}

/*
 * The wide GEMV (kernels/quant.cu, qgemv_wide_kernel: int8 and fp8 up to
 * 8 tokens, int4 on wide projections) against the CPU reference and
 * against qgemv_kernel, 1, 3 and 8 tokens, on shapes whose row tiles fall
 * in each band of block shapes on 132 SMs (fewer than 4 blocks' worth an
 * SM, 4 to 6, more): rows past the last whole tile, and for per-row
 * scales columns off the 64-byte chunk (a partial last round, with
 * predicates). Both within the GEMV's tolerance; int4 with 4 to 6
 * blocks' worth takes 4 warps x 2 chunks on both kernels, so their bits
 * must agree there (the lean loads and the refilled registers change no
 * sum). The calls that reach the wide kernel are counted
 * (kern_qblas_gemv_wide_runs): some on every format, none for int4 below
 * 4 blocks' worth. int4 with fp16 group scales runs each call once more
 * with its meta words (meta_same), wide and narrow: the same bits.
 */
START_TEST(test_gemv_wide)
{
	static const int cfgs[] = {0, 1, 3, 4, 5, 6, 7}, ns[] = {1, 3, 8};
	gt_reseed(g_seed, 6300);
	int dev = 0, sms = 0;
	GT_CUDA(cudaGetDevice(&dev));
	GT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	kern_qblas *qb = qblas_make(NULL);
	for (int ci = 0; ci < 7; ci++) {
		const qcfg *c = &qw_cfgs[cfgs[ci]];
		const int shapes[3][2] = {{2120, c->group ? odd_cols(c) : 4144}, {8471, 1024},
					  {12703, 512}};
		int wide = 0, same = 0, must = 0, metas = 0;
		double worst = 0;
		for (int si = 0; si < 3; si++) {
			qw q;
			qw_random(&q, c, shapes[si][0], shapes[si][1]);
			for (int i = 0; i < 3; i++) {
				const int n = ns[i];
				const size_t nx = (size_t)n * q.d.cols, no = (size_t)n * q.d.rows;
				float *x = gt_malloc(sizeof(float) * nx), *ref = gt_malloc(sizeof(float) * no);
				float *a = gt_malloc(sizeof(float) * no), *b = gt_malloc(sizeof(float) * no);
				gt_fill(x, nx, -1, 1);
				gt_round(x, nx, SL_DT_F16);
				kern_qmatmul_cpu(ref, x, &q.h, n);
				void *d_x = gt_upload(x, nx, SL_DT_F16);
				gemv_once(qb, 1, &q, d_x, n, a);
				gemv_once(qb, 0, &q, d_x, n, b);
				const int runs = kern_qblas_gemv_wide_runs(qb, &q.d, n);
				wide += runs;
				char what[96];
				snprintf(what, sizeof what, "gemv wide %s rows %d cols %d n %d", c->name,
					 q.d.rows, q.d.cols, n);
				const double tol = tol_for(c, KERN_QPATH_GEMV, 1, SL_DT_F16, 0);
				const double e = gt_compare(what, a, ref, no, tol);
				worst = dmax(worst, e);
				ck_assert_msg(e <= tol, "%s: worst %.3g > tol %.3g", what, e, tol);
				ck_assert_msg(gt_compare("gemv narrow", b, ref, no, tol) <= tol, "%s", what);
				metas += meta_same(qb, &q, d_x, n, a, b);
				const int eq = memcmp(a, b, sizeof(float) * no) == 0;
				const int tiles = (q.d.rows + 15) / 16;
				const int alike = !runs || (c->format == KERN_Q_INT4 &&
							    tiles >= 4 * sms && tiles <= 6 * sms);
				ck_assert_msg(!(c->format == KERN_Q_INT4 && tiles < 4 * sms && runs),
					      "%s: int4 below 4 blocks' worth on the wide GEMV", what);
				same += eq;
				must += alike;
				ck_assert_msg(eq || !alike, "%s: not the bits of qgemv_kernel's same shape",
					      what);
				gt_dev_free(d_x);
				free(x);
				free(ref);
				free(a);
				free(b);
			}
			qw_free(&q);
		}
		printf("kernel qgemv wide %s: %d of 9 calls on the wide kernel, %d the narrow one's "
		       "bits (%d had to be), %d with meta words (the same bits), worst rel err %.3g\n",
		       c->name, wide, same, must, metas, worst);
		ck_assert_msg(wide > 0, "%s: no call reached the wide GEMV", c->name);
		ck_assert_msg(metas == (c->format == KERN_Q_INT4 && c->scale_dt == SL_DT_F16 ? 9 : 0),
			      "%s: %d of 9 calls with meta words", c->name, metas);
	}
	kern_qblas_destroy(qb);
	fflush(stdout);
}
END_TEST

/*
 * The split path forced on int8 per row: against its reference on shapes
 * off every tile (both dtypes, both outputs), against the weight-only
 * reference within TOL_SPLIT_W, with W's rows cut into several slabs (a
 * 1 MiB scratch), and refused where it does not run: other formats, n
 * past KERN_QSPLIT_MAX_TOKENS.
 */
START_TEST(test_int8_split)
{
	gt_reseed(g_seed, 6000);
	const shape shapes[] = {
		{"split-decode", 2055, 4096, {1, 33, 64, 100}, 4},
		{"split-odd-cols", 519, 4144, {5, 200}, 2},
		{"split-long", 135, 11008, {256}, 1},
		{"split-tiny", 7, 16, {3, 70}, 2},
	};
	for (int slabbed = 0; slabbed < 2; slabbed++) {
		kern_qblas_config cfg = {.max_tokens = 2048, .max_cols = 11008,
					 .dequant_bytes = slabbed ? (size_t)1 << 20 : 0};
		kern_qblas *qb = NULL;
		ck_assert_int_eq(kern_qblas_create(NULL, &cfg, &qb), 0);
		for (int ci = 0; ci < 2; ci++) {
			worst ws[2];
			memset(ws, 0, sizeof ws);
			for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
				run_shape(qb, &qw_cfgs[ci], &shapes[i], ws, KERN_QPATH_INT8_SPLIT);
			report(&qw_cfgs[ci], ws);
		}
		kern_qblas_destroy(qb);
	}
	kern_qblas *qb = qblas_make(NULL);
	double worst_w = 0;
	for (int di = 0; di < 2; di++) {
		qw q;
		qw_random(&q, &qw_cfgs[di], 2055, 4096);
		static const int ns[] = {1, 64, 256};
		for (int i = 0; i < 3; i++)
			worst_w = dmax(worst_w, split_vs_weights(qb, &q, ns[i], k_dts[di]));
		qw_free(&q);
	}
	gt_report("qsplit against the weight-only reference, f32 out", SL_DT_F16, worst_w,
		  TOL_SPLIT_W);
	ck_assert_msg(worst_w <= TOL_SPLIT_W, "split vs weight-only: %.3g", worst_w);
	split_tuned_same(qb);
	/* refused: every other format, and n past the slices' buffer */
	void *d_x = gt_dev_poison(2 * 300 * 4224), *d_out = gt_dev_poison(4 * 300 * 263);
	for (int ci = 2; ci < QW_N_CFGS; ci++) {
		qw q;
		qw_random(&q, &qw_cfgs[ci], 263, odd_cols(&qw_cfgs[ci]));
		ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_INT8_SPLIT, d_out, SL_DT_F16, d_x,
						   SL_DT_F16, &q.d, 64), SL_ENOTSUP);
		qw_free(&q);
	}
	qw q;
	qw_random(&q, &qw_cfgs[0], 263, 1024);
	ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_INT8_SPLIT, d_out, SL_DT_F16, d_x,
					   SL_DT_F16, &q.d, KERN_QSPLIT_MAX_TOKENS + 1), SL_ENOTSUP);
	qw_free(&q);
	GT_CUDA(cudaDeviceSynchronize());
	gt_dev_free(d_x);
	gt_dev_free(d_out);
	kern_qblas_destroy(qb);
}
END_TEST

START_TEST(test_int4) { test_format(6); test_format(7); test_format(8); }
END_TEST
START_TEST(test_int4_g64) { test_format(9); test_format(10); }
END_TEST
START_TEST(test_int4_g32) { test_format(11); }
END_TEST

/* ---- every code, exactly ---- */

static void set_code(kern_qweight *w, int r, int k, int code)
{
	if (w->format != KERN_Q_INT4) {
		((uint8_t *)w->data)[(size_t)r * w->cols + k] = (uint8_t)code;
		return;
	}
	static const int nib[8] = {0, 4, 1, 5, 2, 6, 3, 7};
	int p = nib[k % 8];
	uint8_t *b = (uint8_t *)w->data + (size_t)r * (w->cols / 2) + (k / 8) * 4 + p / 2;
	int shift = (p & 1) * 4;
	*b = (uint8_t)((*b & ~(0xF << shift)) | (code << shift));
}

/*
 * Codes laid out by hand over every value (int8 -128..127, fp8's 254 finite
 * codes, int4 0..15 with random zero points), random scales, and one-hot
 * activations: token t is 1 at column k_t, so out[t][r] must be exactly
 * W[r][k_t] (fp32 output), or it rounded to the dtype. A wrong column
 * order, lane, nibble, scale or zero-point index gives a wrong value.
 */
START_TEST(test_decode_exact)
{
	const int rows = 263, cols = 8192; /* 8192 columns: split-K on 17 tiles */
	static const int ns[] = {1, 8, 16, 40, 64, 129};
	gt_reseed(g_seed, 2000);
	kern_qblas *qb = qblas_make(NULL);
	for (int ci = 0; ci < QW_N_CFGS; ci++) {
		const qcfg *c = &qw_cfgs[ci];
		qw q;
		qw_alloc_host(&q, c, rows, cols);
		const int groups = kern_qweight_groups(&q.h);
		for (int r = 0; r < rows; r++)
			for (int k = 0; k < cols; k++) {
				int code = c->format == KERN_Q_INT4 ? (r + 3 * k) & 15 : (r * 3 + k * 5) & 255;
				if (c->format == KERN_Q_FP8 && (code & 0x7F) == 0x7F)
					code -= 1; /* NaN codes: their neighbour */
				set_code(&q.h, r, k, code);
			}
		const int affine = c->format == KERN_Q_INT4 && c->group == KERN_Q_INT4_GROUP_AFFINE;
		for (int i = 0; i < rows * groups; i++) {
			float s = (float)gt_int(1, 2047) / 1024.0f; /* exact in fp16 */
			if (affine) { /* d, and m in [-16, 16]: d * u + m exact in fp32 */
				((uint16_t *)q.h.scales)[2 * i] = sl_f32_to_f16(s);
				((uint16_t *)q.h.scales)[2 * i + 1] =
					sl_f32_to_f16((float)gt_int(-16384, 16384) / 1024.0f);
			} else if (c->scale_dt == SL_DT_F32)
				((float *)q.h.scales)[i] = s;
			else
				((uint16_t *)q.h.scales)[i] = sl_f32_to_f16(s);
			if (q.h.zeros)
				((uint8_t *)q.h.zeros)[i] = (uint8_t)gt_int(0, 15);
		}
		qw_upload(&q);
		float *deq = gt_malloc(sizeof(float) * rows * cols);
		for (int r = 0; r < rows; r++)
			kern_qweight_dequant_row_cpu(&q.h, r, deq + (size_t)r * cols);
		for (int di = 0; di < 2; di++) {
			sl_dtype dt = k_dts[di];
			double worst = 0;
			for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
				int n = ns[ni];
				float *x = gt_malloc(sizeof(float) * n * cols);
				float *want = gt_malloc(sizeof(float) * n * rows);
				float *got = gt_malloc(sizeof(float) * n * rows);
				memset(x, 0, sizeof(float) * n * cols);
				for (int t = 0; t < n; t++) {
					int kt = (t * 37 + 11 + ci) % cols;
					x[(size_t)t * cols + kt] = 1.0f;
					for (int r = 0; r < rows; r++)
						want[(size_t)t * rows + r] = deq[(size_t)r * cols + kt];
				}
				void *d_x = gt_upload(x, (size_t)n * cols, dt);
				static const int paths[] = {KERN_QPATH_GEMV, KERN_QPATH_DEQUANT,
							    KERN_QPATH_GEMM};
				for (int pi = 0; pi < 3; pi++)
					for (int f32 = 0; f32 < 2; f32++) {
						if (paths[pi] == KERN_QPATH_GEMV && n > KERN_QGEMV_MAX_TOKENS)
							continue;
						sl_dtype ot = f32 ? SL_DT_F32 : dt;
						/* dequantize (and int4 groups of 32 on any path,
						 * and the GEMM where it folds the scales) rounds
						 * each weight to the dtype once; so does a dtype
						 * output */
						float *exp = gt_malloc(sizeof(float) * n * rows);
						memcpy(exp, want, sizeof(float) * n * rows);
						if (!f32 || paths[pi] == KERN_QPATH_DEQUANT || affine ||
						    (paths[pi] == KERN_QPATH_GEMM &&
						     kern_qblas_gemm_rounds(qb, &q.d, dt)))
							gt_round(exp, (size_t)n * rows, dt);
						void *d_out = gt_dev_poison(sl_dtype_size(ot) * n * rows);
						GT_KERNEL(kern_qmatmul_cuda(qb, paths[pi], d_out, ot, d_x, dt,
									    &q.d, n));
						gt_download(got, d_out, (size_t)n * rows, ot);
						char what[128];
						snprintf(what, sizeof what, "decode %s %s %s->%s n %d", c->name,
							 path_name(paths[pi]), gt_dt_name(dt), gt_dt_name(ot), n);
						worst = dmax(worst, gt_compare(what, got, exp, (size_t)n * rows, 0));
						gt_dev_free(d_out);
						free(exp);
					}
				gt_dev_free(d_x);
				free(x);
				free(want);
				free(got);
			}
			char name[64];
			snprintf(name, sizeof name, "qdecode(exact) %s", c->name);
			gt_report(name, dt, worst, 0);
			ck_assert_msg(worst == 0, "%s %s: worst %.3g, want exact", name, gt_dt_name(dt),
				      worst);
		}
		free(deq);
		qw_free(&q);
	}
	kern_qblas_destroy(qb);
}
END_TEST

/* ---- fp8 activations, bit for bit ---- */

START_TEST(test_act_fp8)
{
	/* rows of 72 to 16392 values: every register depth of the kernel (1, 2,
	 * 4, 8 vectors a thread) and its two-pass loop past 16384 */
	static const int shapes[][2] = {{1, 4096}, {7, 72}, {33, 11008}, {200, 4096}, {3, 5128},
					{2, 16392}};
	const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
	gt_reseed(g_seed, 3000);
	for (int di = 0; di < 2; di++) {
		sl_dtype dt = k_dts[di];
		int bad = 0, total = 0;
		for (int si = 0; si < n_shapes; si++) {
			int n = shapes[si][0], cols = shapes[si][1];
			size_t nx = (size_t)n * cols;
			float *x = gt_malloc(sizeof(float) * nx), *xs = gt_malloc(sizeof(float) * n);
			float *gs = gt_malloc(sizeof(float) * n);
			uint8_t *xq = gt_malloc(nx), *gq = gt_malloc(nx);
			gt_fill(x, nx, -1, 1);
			for (int t = 0; t < n; t++) /* magnitudes 2^-12 .. 2^8; token 3 all zero */
				for (int k = 0; k < cols; k++)
					x[(size_t)t * cols + k] *= t == 3 ? 0.0f : ldexpf(1, t % 21 - 12);
			gt_round(x, nx, dt);
			kern_quantize_act_fp8_cpu(xq, xs, x, n, cols);
			void *d_x = gt_upload(x, nx, dt);
			uint8_t *d_q = gt_dev_poison(nx);
			float *d_s = gt_dev_poison(sizeof(float) * n);
			GT_KERNEL(kern_quantize_act_fp8_cuda(d_q, d_s, d_x, dt, n, cols, NULL));
			GT_CUDA(cudaMemcpy(gq, d_q, nx, cudaMemcpyDeviceToHost));
			GT_CUDA(cudaMemcpy(gs, d_s, sizeof(float) * n, cudaMemcpyDeviceToHost));
			for (int t = 0; t < n; t++) {
				if (memcmp(&gs[t], &xs[t], 4)) {
					if (bad++ < 5)
						printf("  FAIL act_fp8 %s n %d cols %d: scale[%d] %.9g want %.9g\n",
						       gt_dt_name(dt), n, cols, t, gs[t], xs[t]);
				}
				for (int k = 0; k < cols; k++, total++)
					if (gq[(size_t)t * cols + k] != xq[(size_t)t * cols + k] && bad++ < 5)
						printf("  FAIL act_fp8 %s n %d cols %d: [%d][%d] x %.9g code 0x%02x "
						       "want 0x%02x\n",
						       gt_dt_name(dt), n, cols, t, k, x[(size_t)t * cols + k],
						       gq[(size_t)t * cols + k], xq[(size_t)t * cols + k]);
			}
			gt_dev_free(d_x);
			gt_dev_free(d_q);
			gt_dev_free(d_s);
			free(x);
			free(xs);
			free(gs);
			free(xq);
			free(gq);
		}
		printf("kernel act_fp8 %s: %d codes, %d mismatches (must be exact)\n", gt_dt_name(dt),
		       total, bad);
		fflush(stdout);
		ck_assert_msg(bad == 0, "act_fp8 %s: %d mismatches", gt_dt_name(dt), bad);
	}
}
END_TEST

/* ---- fp8 activations made by the norm and SiLU * up kernels ---- */

/* n rows of cols values written by a fused kernel (d_out, codes d_q,
 * scales d_s) against the unfused kernel's output (d_ref): the outputs
 * bit for bit, and the codes and scales bit for bit those the CPU
 * quantizer makes from that output. Returns the mismatches. */
static int check_fused_act(const char *what, sl_dtype dt, int n, int cols, const void *d_out,
			   const void *d_ref, const uint8_t *d_q, const float *d_s)
{
	size_t nx = (size_t)n * cols, bytes = nx * sl_dtype_size(dt);
	uint8_t *out = gt_malloc(bytes), *ref = gt_malloc(bytes), *q = gt_malloc(nx);
	uint8_t *want_q = gt_malloc(nx);
	float *x = gt_malloc(sizeof(float) * nx), *s = gt_malloc(sizeof(float) * n);
	float *want_s = gt_malloc(sizeof(float) * n);
	GT_CUDA(cudaMemcpy(out, d_out, bytes, cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(ref, d_ref, bytes, cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(q, d_q, nx, cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(s, d_s, sizeof(float) * n, cudaMemcpyDeviceToHost));
	sl_convert(x, SL_DT_F32, out, dt, nx);
	kern_quantize_act_fp8_cpu(want_q, want_s, x, n, cols);
	int bad = memcmp(out, ref, bytes) != 0;
	for (int t = 0; t < n; t++)
		bad += memcmp(&s[t], &want_s[t], sizeof(float)) != 0;
	for (size_t i = 0; i < nx; i++)
		bad += q[i] != want_q[i];
	if (bad)
		printf("  FAIL %s %s n %d cols %d: %d mismatches\n", what, gt_dt_name(dt), n, cols, bad);
	free(out), free(ref), free(q), free(want_q), free(x), free(s), free(want_s);
	return bad;
}

/* kern_rmsnorm_fp8_cuda with out NULL, from the residual x the call that
 * made codes d_q, scales d_s and residual d_after started from: the same
 * codes, scales and residual. */
static int codes_alone_case(const float *x, const void *delta, const void *d_w,
			    const uint8_t *d_q, const float *d_s, const float *d_after, int n,
			    int dim, sl_dtype dt)
{
	size_t nx = (size_t)n * dim;
	float *d_x = gt_upload(x, nx, SL_DT_F32), *d_s2 = gt_dev_poison(sizeof(float) * n);
	uint8_t *d_q2 = gt_dev_poison(nx);
	GT_KERNEL(kern_rmsnorm_fp8_cuda(d_x, delta, d_w, NULL, d_q2, d_s2, n, dim, 1e-5f, dt,
					NULL));
	int bad = !gt_dev_equal(d_q, d_q2, nx) + !gt_dev_equal(d_s, d_s2, sizeof(float) * n) +
		  !gt_dev_equal(d_x, d_after, sizeof(float) * nx);
	if (bad)
		printf("  FAIL codes alone %s n %d dim %d\n", gt_dt_name(dt), n, dim);
	gt_dev_free(d_x), gt_dev_free(d_q2), gt_dev_free(d_s2);
	return bad;
}

/* residual add + RMSNorm (and RMSNorm alone) with the activations, at
 * every register depth; SL_ENOTSUP past 8192 columns. */
static int fused_norm_case(sl_dtype dt, int n, int dim)
{
	size_t nx = (size_t)n * dim;
	float *x = gt_malloc(sizeof(float) * nx), *d = gt_malloc(sizeof(float) * nx);
	float *w = gt_malloc(sizeof(float) * dim), *x1 = gt_malloc(sizeof(float) * nx);
	float *x2 = gt_malloc(sizeof(float) * nx);
	gt_fill(x, nx, -3, 3);
	gt_fill(d, nx, -1, 1);
	gt_fill(w, dim, 0.5f, 1.5f);
	gt_round(d, nx, dt);
	gt_round(w, dim, dt);
	float *d_x1 = gt_upload(x, nx, SL_DT_F32), *d_x2 = gt_upload(x, nx, SL_DT_F32);
	void *d_d = gt_upload(d, nx, dt), *d_w = gt_upload(w, dim, dt);
	void *d_out = gt_dev_poison(nx * 2), *d_ref = gt_dev_poison(nx * 2);
	uint8_t *d_q = gt_dev_poison(nx);
	float *d_s = gt_dev_poison(sizeof(float) * n);
	int bad = 0;
	for (int add = 0; add < 2; add++) {
		const void *delta = add ? d_d : NULL;
		if (add)
			GT_KERNEL(kern_add_rmsnorm_cuda(d_x1, d_d, d_w, d_ref, n, dim, 1e-5f, dt, NULL));
		else
			GT_KERNEL(kern_rmsnorm_cuda(d_ref, d_x1, d_w, n, dim, 1e-5f, dt, NULL));
		GT_KERNEL(kern_rmsnorm_fp8_cuda(d_x2, delta, d_w, d_out, d_q, d_s, n, dim, 1e-5f, dt,
						NULL));
		bad += check_fused_act(add ? "add_rmsnorm+fp8" : "rmsnorm+fp8", dt, n, dim, d_out,
				       d_ref, d_q, d_s);
		gt_download(x1, d_x1, nx, SL_DT_F32); /* the residual, updated alike */
		gt_download(x2, d_x2, nx, SL_DT_F32);
		bad += memcmp(x1, x2, sizeof(float) * nx) != 0;
		/* out NULL (x was unchanged before this pass) */
		bad += codes_alone_case(x, delta, d_w, d_q, d_s, d_x2, n, dim, dt);
	}
	gt_dev_free(d_x1), gt_dev_free(d_x2), gt_dev_free(d_d), gt_dev_free(d_w);
	gt_dev_free(d_out), gt_dev_free(d_ref), gt_dev_free(d_q), gt_dev_free(d_s);
	free(x), free(d), free(w), free(x1), free(x2);
	return bad;
}

static int fused_silu_case(sl_dtype dt, int n, int hidden)
{
	size_t nin = (size_t)n * 2 * hidden, nx = (size_t)n * hidden;
	float *gu = gt_malloc(sizeof(float) * nin);
	gt_fill(gu, nin, -6, 6);
	void *d_gu = gt_upload(gu, nin, dt);
	void *d_out = gt_dev_poison(nx * 2), *d_ref = gt_dev_poison(nx * 2);
	uint8_t *d_q = gt_dev_poison(nx);
	float *d_s = gt_dev_poison(sizeof(float) * n);
	GT_KERNEL(kern_silu_mul_cuda(d_ref, d_gu, n, hidden, dt, NULL));
	GT_KERNEL(kern_silu_mul_fp8_cuda(d_out, d_gu, d_q, d_s, n, hidden, dt, NULL));
	int bad = check_fused_act("silu_mul+fp8", dt, n, hidden, d_out, d_ref, d_q, d_s);
	/* out NULL: the same codes and scales, alone */
	uint8_t *d_q2 = gt_dev_poison(nx);
	float *d_s2 = gt_dev_poison(sizeof(float) * n);
	GT_KERNEL(kern_silu_mul_fp8_cuda(NULL, d_gu, d_q2, d_s2, n, hidden, dt, NULL));
	bad += !gt_dev_equal(d_q, d_q2, nx) + !gt_dev_equal(d_s, d_s2, sizeof(float) * n);
	gt_dev_free(d_gu), gt_dev_free(d_out), gt_dev_free(d_ref), gt_dev_free(d_q);
	gt_dev_free(d_s), gt_dev_free(d_q2), gt_dev_free(d_s2);
	free(gu);
	return bad;
}

START_TEST(test_act_fp8_fused)
{
	/* norm rows of 1, 2, 3 and 4 vectors a thread (72 and 576: fewer
	 * threads than 256); SiLU rows of every count from 1 to 8 (72 and
	 * 1536: 1; 2816: 2; 5128: 3; 8192: 4; 9728: 5; 11008: 6; 14336: 7;
	 * 16384: 8) */
	static const int dims[] = {72, 576, 4096, 5128, 8192};
	static const int hiddens[] = {72, 1536, 2816, 5128, 8192, 9728, 11008, 14336, 16384};
	static const int ns[] = {1, 3, 40};
	gt_reseed(g_seed, 3100);
	int bad = 0, cases = 0;
	for (int di = 0; di < 2; di++)
		for (int i = 0; i < 3; i++) {
			for (int k = 0; k < 5; k++, cases++)
				bad += fused_norm_case(k_dts[di], ns[i], dims[k]);
			for (int k = 0; k < 9; k++, cases++)
				bad += fused_silu_case(k_dts[di], ns[i], hiddens[k]);
		}
	/* rows the register kernels do not hold: refused, nothing launched */
	ck_assert_int_eq(kern_rmsnorm_fp8_cuda(NULL, NULL, (void *)16, (void *)16, (uint8_t *)16,
					       NULL, 1, 8200, 1e-5f, SL_DT_F16, NULL), SL_ENOTSUP);
	ck_assert_int_eq(kern_silu_mul_fp8_cuda((void *)16, (void *)16, (uint8_t *)16, NULL, 1,
						16392, SL_DT_F16, NULL), SL_ENOTSUP);
	printf("kernel act_fp8 fused (norm, silu_mul): %d cases, %d mismatches (must be exact)\n",
	       cases, bad);
	fflush(stdout);
	ck_assert_msg(bad == 0, "fused fp8 activations: %d mismatches", bad);
}
END_TEST

/* The mark (quant.h): a W8A8 call whose x the norm quantized into the
 * slot gives the bits of one that quantizes x itself; the mark is spent
 * by the call after it, and a call on another x makes its own. */
START_TEST(test_act_mark)
{
	const int n = 100, dim = 4096, rows = 1024;
	gt_reseed(g_seed, 3200);
	kern_qblas *qb = qblas_make(NULL);
	kern_act_fp8 slot = kern_qblas_act_slot(qb, n, dim);
	kern_act_fp8 small = kern_qblas_act_slot(qb, 32, dim); /* 32 tokens: the GEMV's */
	ck_assert_ptr_null(small.q);
	int bad = 0;
	if (!slot.q) { /* no fp8 tensor cores or cuBLASLt: nothing to mark */
		printf("kernel act_fp8 mark: no W8A8 on this GPU, skipped\n");
		kern_qblas_destroy(qb);
		return;
	}
	qw q;
	qw_random(&q, &qw_cfgs[5], rows, dim); /* fp8/row */
	size_t nx = (size_t)n * dim, no = (size_t)n * rows;
	float *x = gt_malloc(sizeof(float) * nx), *w = gt_malloc(sizeof(float) * dim);
	gt_fill(x, nx, -3, 3);
	gt_fill(w, dim, 0.5f, 1.5f);
	gt_round(w, dim, SL_DT_F16);
	float *d_x = gt_upload(x, nx, SL_DT_F32);
	void *d_w = gt_upload(w, dim, SL_DT_F16), *d_xb = gt_dev_poison(nx * 2);
	void *d_other = gt_dev_poison(nx * 2);
	void *o_ref = gt_dev_poison(no * 2), *o_marked = gt_dev_poison(no * 2);
	void *o_after = gt_dev_poison(no * 2);
	GT_KERNEL(kern_rmsnorm_fp8_cuda(d_x, NULL, d_w, d_xb, slot.q, slot.s, n, dim, 1e-5f,
					SL_DT_F16, NULL));
	kern_qblas_act_mark(qb, d_xb, n, dim);
	GT_KERNEL(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, o_marked, SL_DT_F16, d_xb, SL_DT_F16, &q.d,
				    n));
	GT_KERNEL(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, o_ref, SL_DT_F16, d_xb, SL_DT_F16, &q.d, n));
	/* a mark for d_xb, a call on another x: that x's own activations */
	GT_CUDA(cudaMemcpy(d_other, d_xb, nx * 2, cudaMemcpyDeviceToDevice));
	GT_KERNEL(kern_rmsnorm_fp8_cuda(d_x, NULL, d_w, d_xb, slot.q, slot.s, n, dim, 1e-5f,
					SL_DT_F16, NULL));
	GT_CUDA(cudaMemset(slot.q, 0, nx)); /* the slot no longer holds d_xb's codes */
	kern_qblas_act_mark(qb, d_xb, n, dim);
	GT_KERNEL(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, o_after, SL_DT_F16, d_other, SL_DT_F16,
				    &q.d, n));
	GT_CUDA(cudaDeviceSynchronize());
	uint16_t *a = gt_malloc(no * 2), *b = gt_malloc(no * 2), *c = gt_malloc(no * 2);
	GT_CUDA(cudaMemcpy(a, o_ref, no * 2, cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(b, o_marked, no * 2, cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(c, o_after, no * 2, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < no; i++)
		bad += (a[i] != b[i]) + (a[i] != c[i]);
	ck_assert_int_eq(kern_qmatmul_path(qb, &q.d, n, SL_DT_F16, SL_DT_F16), KERN_QPATH_FP8_LT);
	printf("kernel act_fp8 mark: W8A8 on marked activations, %zu outputs, %d mismatches "
	       "(must be exact)\n", no, bad);
	fflush(stdout);
	ck_assert_msg(bad == 0, "marked activations: %d mismatches", bad);
	gt_dev_free(d_x), gt_dev_free(d_w), gt_dev_free(d_xb), gt_dev_free(d_other);
	gt_dev_free(o_ref), gt_dev_free(o_marked), gt_dev_free(o_after);
	free(x), free(w), free(a), free(b), free(c);
	qw_free(&q);
	kern_qblas_destroy(qb);
}
END_TEST

/* The values of x the codes-only mark stands for (quant.h,
 * kern_qblas_act_mark_codes): e4m3(q) * s in fp32, rounded to fp16. */
static void codes_values(uint16_t *want, const void *d_q, const float *d_s, int n, int cols)
{
	size_t nx = (size_t)n * cols;
	uint8_t *q = gt_malloc(nx);
	float *s = gt_malloc(sizeof(float) * n), *v = gt_malloc(sizeof(float) * nx);
	GT_CUDA(cudaMemcpy(q, d_q, nx, cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(s, d_s, sizeof(float) * n, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < nx; i++)
		v[i] = kern_fp8_e4m3_to_f32(q[i]) * s[i / cols];
	sl_convert(want, SL_DT_F16, v, SL_DT_F32, nx);
	free(q), free(s), free(v);
}

/* Whether x on the device holds exactly the values its codes stand for. */
static int settled(const void *d_x, const kern_act_fp8 *slot, int n, int cols)
{
	size_t nx = (size_t)n * cols;
	uint16_t *want = gt_malloc(nx * 2), *got = gt_malloc(nx * 2);
	codes_values(want, slot->q, slot->s, n, cols);
	GT_CUDA(cudaMemcpy(got, d_x, nx * 2, cudaMemcpyDeviceToHost));
	int ok = !memcmp(want, got, nx * 2);
	free(want), free(got);
	return ok;
}

/* SiLU * up's activations alone, marked as x's only copy: a W8A8 call
 * spends them to the bits of one on the stored values, leaving x
 * unwritten; a call by another path, or a new mark, first writes x from
 * them (exactly the values they stand for). */
START_TEST(test_act_mark_codes)
{
	const int n = 100, cols = 4096, rows = 1024;
	gt_reseed(g_seed, 3300);
	kern_qblas *qb = qblas_make(NULL);
	kern_act_fp8 slot = kern_qblas_act_slot(qb, n, cols);
	if (!slot.q) {
		printf("kernel act_fp8 codes-only mark: no W8A8 on this GPU, skipped\n");
		kern_qblas_destroy(qb);
		return;
	}
	qw q;
	qw_random(&q, &qw_cfgs[5], rows, cols); /* fp8/row */
	size_t nin = (size_t)n * 2 * cols, nx = (size_t)n * cols, no = (size_t)n * rows;
	float *gu = gt_malloc(sizeof(float) * nin);
	gt_fill(gu, nin, -6, 6);
	void *d_gu = gt_upload(gu, nin, SL_DT_F16), *d_hb = gt_dev_poison(nx * 2);
	void *d_hb2 = gt_dev_poison(nx * 2), *d_copy = gt_dev_poison(nx * 2);
	void *o_ref = gt_dev_poison(no * 2), *o_codes = gt_dev_poison(no * 2);
	void *o_deq = gt_dev_poison(no * 2), *o_deq_ref = gt_dev_poison(no * 2);
	int bad = 0;
	/* the stored values, marked: the reference */
	GT_KERNEL(kern_silu_mul_fp8_cuda(d_hb, d_gu, slot.q, slot.s, n, cols, SL_DT_F16, NULL));
	kern_qblas_act_mark(qb, d_hb, n, cols);
	GT_KERNEL(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, o_ref, SL_DT_F16, d_hb, SL_DT_F16, &q.d, n));
	/* codes alone: the same bits, x never written */
	GT_KERNEL(kern_silu_mul_fp8_cuda(NULL, d_gu, slot.q, slot.s, n, cols, SL_DT_F16, NULL));
	kern_qblas_act_mark_codes(qb, d_hb2, SL_DT_F16, n, cols);
	GT_KERNEL(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, o_codes, SL_DT_F16, d_hb2, SL_DT_F16, &q.d,
				    n));
	bad += !gt_dev_equal(o_ref, o_codes, no * 2);
	GT_CUDA(cudaMemset(d_copy, 0xFF, nx * 2));
	bad += !gt_dev_equal(d_hb2, d_copy, nx * 2); /* still the poison */
	/* another path first: x written from the codes, then read */
	kern_qblas_act_mark_codes(qb, d_hb2, SL_DT_F16, n, cols);
	GT_KERNEL(kern_qmatmul_cuda(qb, KERN_QPATH_DEQUANT, o_deq, SL_DT_F16, d_hb2, SL_DT_F16, &q.d,
				    n));
	bad += !settled(d_hb2, &slot, n, cols);
	GT_CUDA(cudaMemcpy(d_copy, d_hb2, nx * 2, cudaMemcpyDeviceToDevice));
	GT_KERNEL(kern_qmatmul_cuda(qb, KERN_QPATH_DEQUANT, o_deq_ref, SL_DT_F16, d_copy, SL_DT_F16,
				    &q.d, n));
	bad += !gt_dev_equal(o_deq, o_deq_ref, no * 2);
	/* a new mark, or a call on another x, first: x written from the codes */
	for (int k = 0; k < 2; k++) {
		GT_CUDA(cudaMemset(d_hb2, 0xFF, nx * 2));
		kern_qblas_act_mark_codes(qb, d_hb2, SL_DT_F16, n, cols);
		if (k == 0)
			kern_qblas_act_mark(qb, NULL, 0, 0);
		else
			GT_KERNEL(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, o_deq, SL_DT_F16, d_hb, SL_DT_F16,
						    &q.d, n));
		bad += !settled(d_hb2, &slot, n, cols);
	}
	printf("kernel act_fp8 codes-only mark: W8A8 bits, x untouched, x written before any "
	       "other reader: %d mismatches (must be exact)\n", bad);
	fflush(stdout);
	ck_assert_msg(bad == 0, "codes-only activations: %d mismatches", bad);
	gt_dev_free(d_gu), gt_dev_free(d_hb), gt_dev_free(d_hb2), gt_dev_free(d_copy);
	gt_dev_free(o_ref), gt_dev_free(o_codes), gt_dev_free(o_deq), gt_dev_free(o_deq_ref);
	free(gu);
	qw_free(&q);
	kern_qblas_destroy(qb);
}
END_TEST

/* ---- CUDA graphs: capture, replay, same bits ---- */

START_TEST(test_graph)
{
	static const struct {
		int cfg, rows, cols, n;
	} calls[] = {
		{4, 135, 11008, 3},  /* int8 g128 GEMV, split across blocks + reduce */
		{6, 519, 4224, 13},  /* int4 GEMV, 2 token tiles */
		{6, 519, 4224, 40},  /* int4 GEMM (AUTO from 17 tokens) */
		{4, 135, 11008, 64}, /* int8 g128 GEMM, split across blocks + reduce */
		{7, 263, 1024, 300}, /* int4 dequantize + cuBLAS (above the GEMM's 256) */
		{5, 512, 2048, 100}, /* fp8 W8A8 through cuBLASLt (or its fallback) */
		{2, 2055, 4096, 8},  /* int8 groups of 32 */
		{9, 519, 4160, 13},  /* int4 groups of 64, half a chunk at the end */
		{11, 519, 4128, 5},  /* int4 groups of 32, a quarter chunk at the end */
		{0, 2055, 4096, 100}, /* int8 per row: the split path (cuBLAS's int8 GEMM) */
	};
	gt_reseed(g_seed, 4000);
	cudaStream_t st;
	GT_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	kern_qblas *qb = qblas_make(st);
	for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
		const qcfg *c = &qw_cfgs[calls[i].cfg];
		const int n = calls[i].n;
		shape s = {"graph", calls[i].rows, calls[i].cols, {n}, 1};
		qw q;
		qw_random(&q, c, s.rows, s.cols);
		for (int di = 0; di < 2; di++) {
			sl_dtype dt = k_dts[di];
			size_t nx = (size_t)n * s.cols, no = (size_t)n * s.rows;
			float *x = gt_malloc(sizeof(float) * nx);
			gt_fill(x, nx, -1, 1);
			void *d_x = gt_upload(x, nx, dt);
			void *d_a = gt_dev_poison(2 * no), *d_b = gt_dev_poison(2 * no);
			/* direct, once: also picks and caches any cuBLASLt plan */
			ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, d_a, dt, d_x, dt, &q.d, n), 0);
			GT_CUDA(cudaStreamSynchronize(st));
			cudaGraph_t g;
			cudaGraphExec_t ge;
			GT_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
			int rc = kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, d_b, dt, d_x, dt, &q.d, n);
			GT_CUDA(cudaStreamEndCapture(st, &g));
			ck_assert_msg(rc == 0, "capture %s n %d: rc %d", c->name, n, rc);
			GT_CUDA(cudaGraphInstantiate(&ge, g, 0));
			GT_CUDA(cudaGraphLaunch(ge, st));
			GT_CUDA(cudaGraphLaunch(ge, st)); /* a replay overwrites the same bits */
			GT_CUDA(cudaStreamSynchronize(st));
			uint16_t *a = gt_malloc(2 * no), *b = gt_malloc(2 * no);
			GT_CUDA(cudaMemcpy(a, d_a, 2 * no, cudaMemcpyDeviceToHost));
			GT_CUDA(cudaMemcpy(b, d_b, 2 * no, cudaMemcpyDeviceToHost));
			size_t diff = 0;
			while (diff < no && a[diff] == b[diff])
				diff++;
			ck_assert_msg(diff == no, "graph %s %s n %d (%s): element %zu 0x%04x direct, 0x%04x "
				      "replayed", c->name, gt_dt_name(dt), n,
				      path_name(kern_qmatmul_path(qb, &q.d, n, dt, dt)), diff, a[diff], b[diff]);
			printf("kernel qgraph %s %s n %d (%s): replay bit-identical\n", c->name,
			       gt_dt_name(dt), n, path_name(kern_qmatmul_path(qb, &q.d, n, dt, dt)));
			GT_CUDA(cudaGraphExecDestroy(ge));
			GT_CUDA(cudaGraphDestroy(g));
			gt_dev_free(d_x);
			gt_dev_free(d_a);
			gt_dev_free(d_b);
			free(x);
			free(a);
			free(b);
		}
		qw_free(&q);
	}
	kern_qblas_destroy(qb);
	GT_CUDA(cudaStreamDestroy(st));
}
END_TEST

/* ---- refused calls ---- */

/* What AUTO takes in the GEMM's range: the int8 split path inside its
 * own (KERN_QSPLIT_MIN_AUTO, KERN_QSPLIT_MAX_AUTO] for int8 per row. */
static int gemm_range_path(const qcfg *c, int n)
{
	return split_format(c) && n > KERN_QSPLIT_MIN_AUTO && n <= KERN_QSPLIT_MAX_AUTO
		       ? KERN_QPATH_INT8_SPLIT
		       : KERN_QPATH_GEMM;
}

/* AUTO takes the GEMM in its range (KERN_QGEMM_MIN_TOKENS, KERN_QGEMM_MAX_TOKENS]
 * for int8 and int4 (int8 per row: the split path inside its own range),
 * none for fp8 until asked; the environment moves them. */
START_TEST(test_gemm_auto)
{
	kern_qblas *qb = qblas_make(NULL);
	static const int cfgs[] = {0, 2, 4, 6, 7, 9, 11};
	for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
		const qcfg *c = &qw_cfgs[cfgs[i]];
		kern_qweight w = {c->format, 4096, 4096, c->group, c->scale_dt, NULL, NULL, NULL};
		const int lo = KERN_QGEMM_MIN_TOKENS, hi = KERN_QGEMM_MAX_TOKENS;
		ck_assert_int_eq(kern_qmatmul_path(qb, &w, lo, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMV);
		ck_assert_int_eq(kern_qmatmul_path(qb, &w, lo + 1, SL_DT_F16, SL_DT_F16),
				 gemm_range_path(c, lo + 1));
		ck_assert_int_eq(kern_qmatmul_path(qb, &w, 64, SL_DT_BF16, SL_DT_F32),
				 gemm_range_path(c, 64));
		ck_assert_int_eq(kern_qmatmul_path(qb, &w, hi, SL_DT_F16, SL_DT_F16),
				 gemm_range_path(c, hi));
		ck_assert_int_eq(kern_qmatmul_path(qb, &w, hi + 1, SL_DT_F16, SL_DT_F16),
				 KERN_QPATH_DEQUANT);
		printf("kernel qgemm auto %s: gemv to %d tokens, gemm %d..%d, dequant above\n",
		       c->name, lo, lo + 1, hi);
	}
	kern_qweight f8 = {KERN_Q_FP8, 4096, 4096, 0, SL_DT_F32, NULL, NULL, NULL};
	ck_assert_int_ne(kern_qmatmul_path(qb, &f8, 64, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMM);
	kern_qblas_set_gemm_range(qb, KERN_Q_FP8, 32, 256);
	ck_assert_int_eq(kern_qmatmul_path(qb, &f8, 64, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMM);
	ck_assert_int_eq(kern_qmatmul_path(qb, &f8, 32, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMV);
	kern_qblas_destroy(qb);
	/* the environment, read at create (Check forks per test: this child only) */
	kern_qweight w = {KERN_Q_INT4, 4096, 4096, 128, SL_DT_F16, NULL, NULL, NULL};
	setenv("SL_QGEMM_MIN", "32", 1);
	qb = qblas_make(NULL);
	ck_assert_int_eq(kern_qmatmul_path(qb, &w, 32, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMV);
	ck_assert_int_eq(kern_qmatmul_path(qb, &w, 33, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMM);
	kern_qblas_destroy(qb);
	setenv("SL_QGEMM", "0", 1);
	qb = qblas_make(NULL);
	ck_assert_int_eq(kern_qmatmul_path(qb, &w, 64, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMV);
	ck_assert_int_eq(kern_qmatmul_path(qb, &w, 65, SL_DT_F16, SL_DT_F16), KERN_QPATH_DEQUANT);
	kern_qblas_destroy(qb);
	unsetenv("SL_QGEMM");
	unsetenv("SL_QGEMM_MIN");
	/* the split path's range: the setter and the environment */
	kern_qweight i8 = {KERN_Q_INT8, 4096, 4096, 0, SL_DT_F32, NULL, NULL, NULL};
	kern_qweight i8g = {KERN_Q_INT8, 4096, 4096, 128, SL_DT_F16, NULL, NULL, NULL};
	qb = qblas_make(NULL);
	ck_assert_int_eq(kern_qmatmul_path(qb, &i8g, 64, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMM);
	kern_qblas_set_split_range(qb, 8, 1000); /* hi capped at KERN_QSPLIT_MAX_TOKENS */
	ck_assert_int_eq(kern_qmatmul_path(qb, &i8, 8, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMV);
	ck_assert_int_eq(kern_qmatmul_path(qb, &i8, 9, SL_DT_F16, SL_DT_F16),
			 KERN_QPATH_INT8_SPLIT);
	ck_assert_int_eq(kern_qmatmul_path(qb, &i8, KERN_QSPLIT_MAX_TOKENS + 1, SL_DT_F16,
					   SL_DT_F16), KERN_QPATH_DEQUANT);
	kern_qblas_destroy(qb);
	setenv("SL_QSPLIT_MIN", "64", 1);
	setenv("SL_QSPLIT_MAX", "128", 1);
	qb = qblas_make(NULL);
	ck_assert_int_eq(kern_qmatmul_path(qb, &i8, 64, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMM);
	ck_assert_int_eq(kern_qmatmul_path(qb, &i8, 65, SL_DT_F16, SL_DT_F16),
			 KERN_QPATH_INT8_SPLIT);
	ck_assert_int_eq(kern_qmatmul_path(qb, &i8, 129, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMM);
	kern_qblas_destroy(qb);
	setenv("SL_QSPLIT", "0", 1);
	qb = qblas_make(NULL);
	ck_assert_int_eq(kern_qmatmul_path(qb, &i8, 100, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMM);
	kern_qblas_destroy(qb);
	unsetenv("SL_QSPLIT");
	unsetenv("SL_QSPLIT_MIN");
	unsetenv("SL_QSPLIT_MAX");
	printf("kernel qsplit auto: int8 per row %d..%d tokens, moved by the setter and the "
	       "environment\n", KERN_QSPLIT_MIN_AUTO + 1, KERN_QSPLIT_MAX_AUTO);
}
END_TEST

START_TEST(test_refused)
{
	gt_reseed(g_seed, 5000);
	kern_qblas *qb = qblas_make(NULL);
	qw q;
	qw_random(&q, &qw_cfgs[0], 64, 256);
	void *d_x = gt_dev_poison(2 * 100 * 256 + 16), *d_out = gt_dev_poison(4 * 100 * 64);
	/* a path that cannot take the call */
	ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_FP8_LT, d_out, SL_DT_F16, d_x, SL_DT_F16,
					   &q.d, 8), SL_ENOTSUP);
	ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_GEMV, d_out, SL_DT_F16, d_x, SL_DT_F16,
					   &q.d, 65), SL_ENOTSUP);
	/* dtypes */
	ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, d_out, SL_DT_BF16, d_x, SL_DT_F16,
					   &q.d, 8), SL_ENOTSUP);
	ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, d_out, SL_DT_F32, d_x, SL_DT_F32,
					   &q.d, 8), SL_ENOTSUP);
	/* alignment and the descriptor */
	ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, d_out, SL_DT_F16,
					   (char *)d_x + 2, SL_DT_F16, &q.d, 8), SL_EINVAL);
	kern_qweight bad = q.d;
	bad.group = 48;
	ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, d_out, SL_DT_F16, d_x, SL_DT_F16,
					   &bad, 8), SL_EINVAL);
	/* nothing to do is no error */
	ck_assert_int_eq(kern_qmatmul_cuda(qb, KERN_QPATH_AUTO, d_out, SL_DT_F16, d_x, SL_DT_F16,
					   &q.d, 0), 0);
	/* the AUTO choice follows kern_qblas_set_gemm_range, then
	 * kern_qblas_set_gemv_max */
	kern_qblas_set_gemm_range(qb, KERN_Q_INT8, 0, 0);
	kern_qblas_set_split_range(qb, 0, 0);
	ck_assert_int_eq(kern_qmatmul_path(qb, &q.d, 64, SL_DT_F16, SL_DT_F16), KERN_QPATH_GEMV);
	kern_qblas_set_gemv_max(qb, KERN_Q_INT8, 8);
	ck_assert_int_eq(kern_qmatmul_path(qb, &q.d, 9, SL_DT_F16, SL_DT_F16), KERN_QPATH_DEQUANT);
	kern_qblas_config none = {.max_tokens = 0, .max_cols = 4096};
	kern_qblas *qb2 = NULL;
	ck_assert_int_eq(kern_qblas_create(NULL, &none, &qb2), SL_EINVAL);
	GT_CUDA(cudaDeviceSynchronize());
	gt_dev_free(d_x);
	gt_dev_free(d_out);
	qw_free(&q);
	kern_qblas_destroy(qb);
}
END_TEST

static void add_case(Suite *s, const char *name, const TTest *test)
{
	TCase *tc = tcase_create(name);
	tcase_set_timeout(tc, 600); /* CPU references of the larger shapes take seconds */
	tcase_add_test(tc, test);
	suite_add_tcase(s, tc);
}

int main(void)
{
	/* No CUDA call here: Check forks per test, each child makes its own context. */
	g_seed = gt_seed_from_env();
	Suite *s = suite_create("gpu_quant");
	add_case(s, "decode_exact", test_decode_exact);
	add_case(s, "fp8_lt_splits", test_fp8_lt_splits);
	add_case(s, "fp8_lt_unit", test_fp8_lt_unit);
	add_case(s, "act_fp8", test_act_fp8);
	add_case(s, "act_fp8_fused", test_act_fp8_fused);
	add_case(s, "act_mark", test_act_mark);
	add_case(s, "act_mark_codes", test_act_mark_codes);
	add_case(s, "int8_row", test_int8_row);
	add_case(s, "int8_groups", test_int8_groups);
	add_case(s, "int8_split", test_int8_split);
	add_case(s, "fp8", test_fp8);
	add_case(s, "fp8_fast", test_fp8_fast);
	add_case(s, "int4", test_int4);
	add_case(s, "int4_g64", test_int4_g64);
	add_case(s, "int4_g32", test_int4_g32);
	add_case(s, "graph", test_graph);
	add_case(s, "gemm_auto", test_gemm_auto);
	add_case(s, "gemm_tuned", test_gemm_tuned);
	add_case(s, "gemv_wide", test_gemv_wide);
	add_case(s, "refused", test_refused);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
