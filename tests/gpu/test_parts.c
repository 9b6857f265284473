/*
 * test_parts.c — the quantized and the fp16 / bf16 GEMVs with K in
 * slices, each slice's fp32 product kept apart (kern_qmatmul_parts_cuda,
 * kern_matmul_parts_cuda), and the residual add + RMSNorm that sums the
 * slices as it adds them (kern_add_rmsnorm_parts_cuda): the pair the CUDA
 * backend runs for the o and down projections with SL_GEMV_PARTS.
 *
 * Tolerances: the slices' sum against the CPU's GEMV (kern_qmatmul_cpu,
 * kern_matmul_cpu) is the GEMV's fp32 bound, TOL_F32OUT as test_quant's
 * and test_kernels' (the same products; only the fp32 summation order
 * differs). The norm's
 * residual is exact (the slices added in order, the CPU's order), its
 * output within the output dtype's rounding (2^-11 f16, 2^-8 bf16,
 * relative), TOL_F16 / TOL_BF16 as test_kernels' norm; with fp8
 * activations, the output the same bits as without and the codes and
 * scales those the CPU quantizer makes from it.
 */
#include "qw_test.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"

#define TOL_F32OUT 2e-4
#define TOL_F16 5e-3
#define TOL_BF16 2e-2
#define TOL_EXACT 0.0

static uint64_t g_seed;
static const sl_dtype k_dts[] = {SL_DT_F16, SL_DT_BF16};

/* ---- the norm summing the slices ---- */

/* x fp32 [n, dim] += the sum of parts [p][n, dim] in order; out =
 * rmsnorm(x) * w: the CPU's add + RMSNorm on the summed delta. */
static void parts_ref(float *x, const float *parts, int p, const float *w, float *out, int n,
		      int dim, float eps)
{
	const size_t nd = (size_t)n * dim;
	float *d = gt_malloc(sizeof(float) * nd);
	memcpy(d, parts, sizeof(float) * nd);
	for (int q = 1; q < p; q++)
		for (size_t i = 0; i < nd; i++)
			d[i] += parts[q * nd + i];
	kern_add_rmsnorm_cpu(x, d, w, out, n, dim, eps);
	free(d);
}

/* The codes and scales of d_out's values as the CPU quantizer makes them,
 * and d_out the bits of d_ref: the mismatches. */
static int codes_of(sl_dtype dt, int n, int dim, const void *d_out, const void *d_ref,
		    const uint8_t *d_q, const float *d_s)
{
	const size_t nd = (size_t)n * dim, bytes = nd * sl_dtype_size(dt);
	uint8_t *out = gt_malloc(bytes), *q = gt_malloc(nd), *want_q = gt_malloc(nd);
	float *x = gt_malloc(sizeof(float) * nd), *s = gt_malloc(sizeof(float) * n);
	float *want_s = gt_malloc(sizeof(float) * n);
	GT_CUDA(cudaMemcpy(out, d_out, bytes, cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(q, d_q, nd, cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(s, d_s, sizeof(float) * n, cudaMemcpyDeviceToHost));
	sl_convert(x, SL_DT_F32, out, dt, nd);
	kern_quantize_act_fp8_cpu(want_q, want_s, x, n, dim);
	int bad = !gt_dev_equal(d_out, d_ref, bytes);
	for (int t = 0; t < n; t++)
		bad += memcmp(&s[t], &want_s[t], sizeof(float)) != 0;
	for (size_t i = 0; i < nd; i++)
		bad += q[i] != want_q[i];
	free(out), free(q), free(want_q), free(x), free(s), free(want_s);
	return bad;
}

/* One row shape: worst relative error of out in *w_out, of the residual
 * in *w_res; returns the fp8 activations' mismatches. */
static int norm_case(sl_dtype dt, int n, int dim, int p, double *w_out, double *w_res)
{
	const float eps = 1e-5f;
	const size_t nd = (size_t)n * dim;
	float *x = gt_malloc(sizeof(float) * nd), *parts = gt_malloc(sizeof(float) * p * nd);
	float *w = gt_malloc(sizeof(float) * dim), *ref = gt_malloc(sizeof(float) * nd);
	float *ref_x = gt_malloc(sizeof(float) * nd), *got = gt_malloc(sizeof(float) * nd);
	gt_fill(x, nd, -3, 3);
	gt_fill(parts, p * nd, -1, 1); /* fp32 slices: not rounded */
	gt_fill(w, dim, -1.5f, 1.5f);
	gt_round(w, dim, dt);
	memcpy(ref_x, x, sizeof(float) * nd);
	parts_ref(ref_x, parts, p, w, ref, n, dim, eps);
	float *d_x = gt_upload(x, nd, SL_DT_F32), *d_p = gt_upload(parts, p * nd, SL_DT_F32);
	void *d_w = gt_upload(w, dim, dt), *d_out = gt_dev_poison(nd * sl_dtype_size(dt));
	GT_KERNEL(kern_add_rmsnorm_parts_cuda(d_x, d_p, p, d_w, d_out, NULL, NULL, n, dim, eps, dt,
					      NULL));
	char what[96];
	snprintf(what, sizeof what, "add_rmsnorm parts %s n %d dim %d parts %d", gt_dt_name(dt),
		 n, dim, p);
	gt_download(got, d_out, nd, dt);
	*w_out = fmax(*w_out, gt_compare(what, got, ref, nd, dt == SL_DT_F16 ? TOL_F16 : TOL_BF16));
	gt_download(got, d_x, nd, SL_DT_F32);
	*w_res = fmax(*w_res, gt_compare(what, got, ref_x, nd, TOL_EXACT));
	/* again from x with the fp8 activations: out's bits, and its codes */
	void *d_out2 = gt_dev_poison(nd * sl_dtype_size(dt));
	uint8_t *d_q = gt_dev_poison(nd);
	float *d_s = gt_dev_poison(sizeof(float) * n);
	gt_upload_to(d_x, x, nd, SL_DT_F32);
	GT_KERNEL(kern_add_rmsnorm_parts_cuda(d_x, d_p, p, d_w, d_out2, d_q, d_s, n, dim, eps, dt,
					      NULL));
	int bad = codes_of(dt, n, dim, d_out2, d_out, d_q, d_s);
	gt_download(got, d_x, nd, SL_DT_F32);
	bad += memcmp(got, ref_x, sizeof(float) * nd) != 0;
	if (bad)
		printf("  FAIL %s with fp8 activations: %d mismatches\n", what, bad);
	gt_dev_free(d_x), gt_dev_free(d_p), gt_dev_free(d_w), gt_dev_free(d_out);
	gt_dev_free(d_out2), gt_dev_free(d_q), gt_dev_free(d_s);
	free(x), free(parts), free(w), free(ref), free(ref_x), free(got);
	return bad;
}

/*
 * Rows of 1, 2, 3 and 4 vectors of 8 a thread (72 and 576: fewer threads
 * than 256; 4096, 5128, 8192), 1, 3 and 8 tokens, 1 to 4 slices, both
 * dtypes; rows the register kernel cannot hold and more slices than it
 * sums are refused with nothing launched.
 */
START_TEST(test_norm_parts)
{
	static const int dims[] = {72, 576, 4096, 5128, 8192}, ns[] = {1, 3, 8};
	gt_reseed(g_seed, 7100);
	int bad = 0, cases = 0;
	for (int di = 0; di < 2; di++) {
		double w_out = 0, w_res = 0;
		for (int k = 0; k < 5; k++)
			for (int i = 0; i < 3; i++)
				for (int p = 1; p <= 4; p++, cases++)
					bad += norm_case(k_dts[di], ns[i], dims[k], p, &w_out, &w_res);
		const double tol = k_dts[di] == SL_DT_F16 ? TOL_F16 : TOL_BF16;
		gt_report("add_rmsnorm parts", k_dts[di], w_out, tol);
		gt_report("add_rmsnorm parts (residual)", k_dts[di], w_res, TOL_EXACT);
		ck_assert_msg(w_out <= tol && w_res <= TOL_EXACT, "%s: worst %.3g, residual %.3g",
			      gt_dt_name(k_dts[di]), w_out, w_res);
	}
	ck_assert(!kern_add_rmsnorm_parts_fits(8200, 2) && !kern_add_rmsnorm_parts_fits(4100, 2));
	ck_assert(!kern_add_rmsnorm_parts_fits(4096, 5) && !kern_add_rmsnorm_parts_fits(4096, 0));
	ck_assert_int_eq(kern_add_rmsnorm_parts_cuda((float *)16, (float *)16, 2, (void *)16,
						     (void *)16, NULL, NULL, 1, 8200, 1e-5f,
						     SL_DT_F16, NULL),
			 SL_ENOTSUP);
	ck_assert_int_eq(kern_add_rmsnorm_parts_cuda((float *)16, (float *)16, 5, (void *)16,
						     (void *)16, NULL, NULL, 1, 4096, 1e-5f,
						     SL_DT_F16, NULL),
			 SL_ENOTSUP);
	printf("kernel add_rmsnorm parts: %d cases, %d fp8 activation mismatches (must be exact)\n",
	       cases, bad);
	fflush(stdout);
	ck_assert_msg(bad == 0, "fp8 activations of the parts norm: %d mismatches", bad);
}
END_TEST

/* ---- the GEMV in slices ---- */

/* every format the wide GEMV takes (qw_cfgs) */
static const char *const k_formats[] = {"int8/row", "int8/row-f16s", "int8/g64", "int8/g128",
					"fp8/row", "int4/g128", "int4/g128-sym", "int4/g128-f32s"};
#define N_FORMATS (int)(sizeof k_formats / sizeof *k_formats)

static kern_qblas *qblas_make(void)
{
	kern_qblas_config cfg = {.max_tokens = 64, .max_cols = 11008};
	kern_qblas *qb = NULL;
	ck_assert_int_eq(kern_qblas_create(NULL, &cfg, &qb), 0);
	kern_qblas_set_pdl(qb, gt_pdl_on());
	return qb;
}

/* The device slices [splits][no], summed in order on the host into got
 * [no], once the GPU is done. */
static void sum_slices(const float *parts, int splits, size_t no, float *got)
{
	GT_CUDA(cudaDeviceSynchronize());
	float *all = gt_malloc(sizeof(float) * no * splits);
	gt_download(all, parts, no * splits, SL_DT_F32);
	memcpy(got, all, sizeof(float) * no);
	for (int s = 1; s < splits; s++)
		for (size_t i = 0; i < no; i++)
			got[i] += all[s * no + i];
	free(all);
}

/* The slices of one call, poisoned first, summed in order on the host
 * into got [n, rows]; returns the slice count. */
static int parts_call(kern_qblas *qb, const qw *q, const void *d_x, int n, int max_splits,
		      float *got)
{
	const size_t no = (size_t)n * q->d.rows;
	const float *parts = NULL;
	int splits = 0;
	ck_assert_int_eq(kern_qmatmul_parts_cuda(qb, d_x, SL_DT_F16, &q->d, n, max_splits, &parts,
						 &splits), 0);
	if (!splits)
		return 0;
	GT_CUDA(cudaMemset((void *)parts, 0xFF, sizeof(float) * no * splits));
	ck_assert_int_eq(kern_qmatmul_parts_cuda(qb, d_x, SL_DT_F16, &q->d, n, max_splits, &parts,
						 &splits), 0);
	sum_slices(parts, splits, no, got);
	return splits;
}

/* int4 with fp16 group scales: the same call with its meta words packed
 * (kern_qweight_meta_bytes): the same slices' bits. */
static void meta_same(kern_qblas *qb, qw *q, const void *d_x, int n, int max_splits,
		      const float *want)
{
	const size_t mb = kern_qweight_meta_bytes(&q->h), no = (size_t)n * q->d.rows;
	if (!mb)
		return;
	uint32_t *m = gt_malloc(mb);
	float *got = gt_malloc(sizeof(float) * no);
	kern_qweight_meta_pack(&q->h, m);
	q->d.meta = gt_upload_raw(m, mb);
	parts_call(qb, q, d_x, n, max_splits, got);
	ck_assert_msg(memcmp(got, want, sizeof(float) * no) == 0,
		      "%s rows %d cols %d n %d: meta words changed the slices' bits",
		      kern_qformat_name(q->h.format), q->d.rows, q->d.cols, n);
	gt_dev_free(q->d.meta);
	q->d.meta = NULL;
	free(m);
	free(got);
}

/*
 * Every format the wide GEMV takes, on rows of 2,048, 4,096 and 11,008
 * columns (32, 64 and 172 chunks of int8, 16, 32 and 86 of int4: the
 * slices rounded up to whole rounds of 8, the last one shorter) and 524 /
 * 1,048 rows (33 and 66 tiles, the last one partial: few enough that 4
 * slices fit one wave of 6 blocks an SM on any GPU of 44 SMs or more), 1,
 * 3 and 8 tokens, up to 2, 3 and 4 slices: the sum of the slices against
 * the CPU. A row of fewer than 16 chunks, 9 tokens, one slice asked for,
 * int8 groups of 32 and rows whose tiles fill a wave alone (16,384: 1,024
 * tiles) are refused (*splits 0).
 */
START_TEST(test_gemv_parts)
{
	static const int shapes[][2] = {{1048, 11008}, {524, 2048}, {1048, 4096}};
	static const int ns[] = {1, 3, 8};
	gt_reseed(g_seed, 7200);
	kern_qblas *qb = qblas_make();
	for (int ci = 0; ci < N_FORMATS; ci++) {
		const qcfg *c = qw_cfg(k_formats[ci]);
		double worst = 0;
		int calls = 0;
		for (int si = 0; si < 3; si++) {
			qw q;
			qw_random(&q, c, shapes[si][0], shapes[si][1]);
			for (int i = 0; i < 3; i++)
				for (int ms = 2; ms <= 4; ms++, calls++) {
					const int n = ns[i];
					const size_t nx = (size_t)n * q.d.cols, no = (size_t)n * q.d.rows;
					float *x = gt_malloc(sizeof(float) * nx);
					float *ref = gt_malloc(sizeof(float) * no);
					float *got = gt_malloc(sizeof(float) * no);
					gt_fill(x, nx, -1, 1);
					gt_round(x, nx, SL_DT_F16);
					kern_qmatmul_cpu(ref, x, &q.h, n);
					void *d_x = gt_upload(x, nx, SL_DT_F16);
					const int s = parts_call(qb, &q, d_x, n, ms, got);
					const int chunks = (int)(kern_qweight_data_bytes(&q.h) /
								 q.h.rows / 64);
					ck_assert_msg(s >= 2 && s <= ms, "%s rows %d cols %d n %d: %d "
						      "slices asked at most %d", c->name, q.d.rows,
						      q.d.cols, n, s, ms);
					ck_assert_msg(chunks >= 16, "a row of %d chunks sliced", chunks);
					char what[96];
					snprintf(what, sizeof what, "gemv parts %s rows %d cols %d n %d "
						 "splits %d", c->name, q.d.rows, q.d.cols, n, s);
					const double e = gt_compare(what, got, ref, no, TOL_F32OUT);
					worst = fmax(worst, e);
					ck_assert_msg(e <= TOL_F32OUT, "%s: worst %.3g", what, e);
					meta_same(qb, &q, d_x, n, ms, got);
					gt_dev_free(d_x);
					free(x), free(ref), free(got);
				}
			qw_free(&q);
		}
		printf("kernel qgemv parts %s: %d calls, each in 2 or more slices, worst rel err "
		       "%.3g (tol %.0e)\n", c->name, calls, worst, TOL_F32OUT);
	}
	/* refused: nothing launched */
	qw q;
	float *got = gt_malloc(sizeof(float) * 9 * 16384);
	void *d_x = gt_dev_poison(sizeof(uint16_t) * 9 * 11008);
	const qcfg *row = qw_cfg("int8/row");
	qw_random(&q, row, 1040, 960); /* 15 chunks */
	ck_assert_int_eq(parts_call(qb, &q, d_x, 1, 4, got), 0);
	qw_free(&q);
	qw_random(&q, row, 1040, 4096);
	ck_assert_int_eq(parts_call(qb, &q, d_x, 9, 4, got), 0);
	ck_assert_int_eq(parts_call(qb, &q, d_x, 1, 1, got), 0);
	qw_free(&q);
	qw_random(&q, qw_cfg("int8/g32"), 1040, 4096);
	ck_assert_int_eq(parts_call(qb, &q, d_x, 1, 4, got), 0);
	qw_free(&q);
	qw_random(&q, row, 16384, 2048);
	ck_assert_int_eq(parts_call(qb, &q, d_x, 1, 4, got), 0);
	qw_free(&q);
	gt_dev_free(d_x);
	free(got);
	kern_qblas_destroy(qb);
	fflush(stdout);
}
END_TEST

/* ---- the fp16 / bf16 GEMV in slices ---- */

/* One call's slices (poisoned first) summed in order on the host into
 * got [n, rows]; returns the slice count (0: refused, nothing launched). */
static int plain_call(kern_blas *b, const void *d_x, const void *d_w, int n, int cols, int rows,
		      sl_dtype dt, int max_splits, float *got)
{
	const size_t no = (size_t)n * rows;
	const float *parts = NULL;
	int splits = 0;
	ck_assert_int_eq(kern_matmul_parts_cuda(b, d_x, d_w, n, cols, rows, dt, max_splits, &parts,
						&splits), 0);
	if (!splits)
		return 0;
	ck_assert_ptr_nonnull(parts);
	GT_CUDA(cudaMemset((void *)parts, 0xFF, sizeof(float) * no * splits));
	ck_assert_int_eq(kern_matmul_parts_cuda(b, d_x, d_w, n, cols, rows, dt, max_splits, &parts,
						&splits), 0);
	sum_slices(parts, splits, no, got);
	return splits;
}

/* One W of rows x cols in dt against every token count and slice count
 * asked: the worst relative error; every call must take 2 or more
 * slices, at most the count asked. */
static double plain_shape(kern_blas *b, sl_dtype dt, int rows, int cols)
{
	static const int ns[] = {1, 3, 8};
	const size_t nw = (size_t)rows * cols;
	float *w = gt_malloc(sizeof(float) * nw);
	gt_fill(w, nw, -1, 1);
	gt_round(w, nw, dt);
	void *d_w = gt_upload(w, nw, dt);
	double worst = 0;
	for (int i = 0; i < 3; i++)
		for (int ms = 2; ms <= 4; ms++) {
			const int n = ns[i];
			const size_t nx = (size_t)n * cols, no = (size_t)n * rows;
			float *x = gt_malloc(sizeof(float) * nx);
			float *got = gt_malloc(sizeof(float) * no);
			float *ref = gt_malloc(sizeof(float) * no);
			gt_fill(x, nx, -1, 1);
			gt_round(x, nx, dt);
			kern_matmul_cpu(ref, x, w, n, cols, rows);
			void *d_x = gt_upload(x, nx, dt);
			const int s = plain_call(b, d_x, d_w, n, cols, rows, dt, ms, got);
			char what[96];
			snprintf(what, sizeof what, "gemv parts %s rows %d cols %d n %d splits %d",
				 gt_dt_name(dt), rows, cols, n, s);
			ck_assert_msg(s >= 2 && s <= ms, "%s: at most %d asked", what, ms);
			const double e = gt_compare(what, got, ref, no, TOL_F32OUT);
			ck_assert_msg(e <= TOL_F32OUT, "%s: worst %.3g", what, e);
			worst = fmax(worst, e);
			gt_dev_free(d_x);
			free(x), free(ref), free(got);
		}
	gt_dev_free(d_w);
	free(w);
	return worst;
}

/*
 * Rows of 2,048, 4,096 and 11,008 columns (64, 128 and 344 chunks of 32:
 * 2, 4 and 10.75 rounds of 4 warps x 8 chunks, the slices whole rounds,
 * the last one shorter) and 524 / 1,048 rows (33 and 66 tiles, the last
 * one partial: few enough that 4 slices fit one wave of blocks on any
 * GPU of 66 SMs or more), 1, 3 and 8 tokens, up to 2, 3 and 4 slices,
 * both dtypes; 8 warps a tile (rounds of 64 chunks) on the 4,096 and
 * 11,008 columns. A row of fewer than 2 rounds, 9 tokens, one slice
 * asked for, a layer under the GEMV's size and rows whose tiles fill a
 * wave alone (16,384: 1,024 tiles) are refused (*splits 0).
 */
START_TEST(test_gemv16_parts)
{
	static const int shapes[][2] = {{1048, 11008}, {524, 2048}, {1048, 4096}};
	gt_reseed(g_seed, 7300);
	kern_blas *b = NULL;
	ck_assert_int_eq(kern_blas_create(NULL, &b), 0);
	kern_blas_set_pdl(b, gt_pdl_on());
	for (int di = 0; di < 2; di++) {
		const sl_dtype dt = k_dts[di];
		double worst = 0;
		kern_blas_set_gemv_warps(b, 4);
		for (int si = 0; si < 3; si++)
			worst = fmax(worst, plain_shape(b, dt, shapes[si][0], shapes[si][1]));
		kern_blas_set_gemv_warps(b, 8);
		if (kern_blas_gemv_warps(b) == 8) /* unless SL_GEMV_WARPS says 4 */
			for (int si = 0; si < 3; si += 2)
				worst = fmax(worst,
					     plain_shape(b, dt, shapes[si][0], shapes[si][1]));
		printf("kernel gemv parts %s: worst rel err %.3g (tol %.0e)\n", gt_dt_name(dt),
		       worst, TOL_F32OUT);
	}
	/* refused: nothing launched */
	kern_blas_set_gemv_warps(b, 4);
	float *got = gt_malloc(sizeof(float) * 9 * 16384);
	void *d_x = gt_dev_poison(sizeof(uint16_t) * 9 * 4096);
	void *d_w = gt_dev_poison(sizeof(uint16_t) * 16384 * 2048);
	/* 62 chunks */
	ck_assert_int_eq(plain_call(b, d_x, d_w, 1, 1984, 1040, SL_DT_F16, 4, got), 0);
	ck_assert_int_eq(plain_call(b, d_x, d_w, 9, 4096, 1040, SL_DT_F16, 4, got), 0);
	ck_assert_int_eq(plain_call(b, d_x, d_w, 1, 4096, 1040, SL_DT_F16, 1, got), 0);
	ck_assert_int_eq(plain_call(b, d_x, d_w, 1, 4096, 200, SL_DT_F16, 4, got), 0);
	ck_assert_int_eq(plain_call(b, d_x, d_w, 1, 2048, 16384, SL_DT_F16, 4, got), 0);
	gt_dev_free(d_x), gt_dev_free(d_w);
	free(got);
	kern_blas_destroy(b);
	fflush(stdout);
}
END_TEST

int main(void)
{
	/* No CUDA call here: Check forks per test, each child makes its own context. */
	g_seed = gt_seed_from_env();
	Suite *s = suite_create("gpu_parts");
	TCase *tc = tcase_create("parts");
	tcase_set_timeout(tc, 600); /* CPU references of 11008-column rows take seconds */
	tcase_add_test(tc, test_norm_parts);
	tcase_add_test(tc, test_gemv_parts);
	tcase_add_test(tc, test_gemv16_parts);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	const int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
