/*
 * test_backend.c — the CUDA backend (node/backend_cuda.c) driven the way
 * node/model.c drives it. Reserve: a shape the kernels cannot run is
 * refused there, before any step, naming the flag or config field; one
 * they can run is taken. Ranges: a run of ops inside per-layer NVTX
 * ranges, captured into a CUDA graph by run_cached and replayed, must
 * give exactly what the same ops give when run directly (NVTX calls are
 * host-side markers and must neither break the capture nor leave
 * anything in the graph). The add + norm after a projection: the
 * residual and the norm's output against the CPU's, on a 7B-sized fp16
 * projection the decode GEMV takes, with its K slices (SL_GEMV_PARTS)
 * and without. GPU host only (make test-gpu).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/backend.h"
#include "gpu_test.h"
#include "common/sl.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"

#define DIM 256
#define ROWS 4

static uint64_t g_seed;

static node_backend *make_backend(void)
{
	char err[256] = "";
	node_backend *be = NULL;
	int rc = node_backend_cuda_create(0, SL_DT_F16, &be, err, sizeof err);
	ck_assert_msg(rc == 0, "node_backend_cuda_create: %s", err);
	return be;
}

/* Limits of a small model whose shapes every kernel takes. */
static node_backend_limits small_limits(void)
{
	node_backend_limits lim = {.step_tokens = 8, .max_rows = 8, .max_seqs = 4,
				   .max_table_entries = 16, .vocab = 128, .n_heads = 4,
				   .n_kv_heads = 2, .head_dim = 64, .max_ctx = 64,
				   .block_tokens = 16};
	return lim;
}

/* Refused at reserve with the flag or field in the message; each refusal
 * on a fresh backend, then the fixed shape is taken. */
START_TEST(test_reserve_refuses)
{
	static const struct {
		int block_tokens, head_dim;
		const char *says;
	} bad[] = {{24, 64, "--block-tokens 24"}, {16, 320, "head_dim 320"}, {16, 63, "head_dim 63"}};
	for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
		node_backend *be = make_backend();
		node_backend_limits lim = small_limits();
		lim.block_tokens = bad[i].block_tokens;
		lim.head_dim = bad[i].head_dim;
		char err[SL_ERRLEN] = "";
		int rc = be->ops->reserve(be, &lim, err, sizeof err);
		ck_assert_msg(rc != 0 && strstr(err, bad[i].says),
			      "reserve of block_tokens %d, head_dim %d: rc %d, \"%s\" (want an "
			      "error naming \"%s\")", bad[i].block_tokens, bad[i].head_dim, rc, err,
			      bad[i].says);
		printf("backend: reserve refuses: %s\n", err);
		node_backend_destroy(be);
	}
	node_backend *be = make_backend();
	node_backend_limits lim = small_limits();
	char err[SL_ERRLEN] = "";
	ck_assert_msg(be->ops->reserve(be, &lim, err, sizeof err) == 0, "reserve: %s", err);
	node_backend_destroy(be);
}
END_TEST

typedef struct {
	node_backend *be;
	float *x;     /* device fp32 [ROWS, DIM] */
	void *w, *out; /* device fp16 [DIM], [ROWS, DIM] */
} norm_run;

/* Two "layers" of one op each, as model_layers brackets its layers. */
static int two_layers(void *ctx)
{
	norm_run *r = ctx;
	const node_backend_ops *op = r->be->ops;
	for (int l = 0; l < 2; l++) {
		op->range_push(r->be, "layer", l);
		int rc = op->rmsnorm(r->be, r->out, r->x, r->w, ROWS, DIM, 1e-5f);
		op->range_pop(r->be);
		if (rc)
			return rc;
	}
	return SL_OK;
}

START_TEST(test_ranges_in_graph)
{
	gt_reseed(g_seed, 1);
	node_backend *be = make_backend();
	const node_backend_ops *op = be->ops;
	node_backend_limits lim = small_limits();
	char err[SL_ERRLEN] = "";
	ck_assert_msg(op->reserve(be, &lim, err, sizeof err) == 0, "reserve: %s", err);

	float hx[ROWS * DIM], hw[DIM];
	gt_fill(hx, ROWS * DIM, -2.f, 2.f);
	gt_fill(hw, DIM, 0.5f, 1.5f);
	uint16_t hw16[DIM], direct[ROWS * DIM], graphed[ROWS * DIM], poison[ROWS * DIM];
	sl_convert(hw16, SL_DT_F16, hw, SL_DT_F32, DIM);
	memset(poison, 0xFF, sizeof poison);
	norm_run r = {.be = be};
	ck_assert_int_eq(op->alloc(be, sizeof hx, (void **)&r.x), 0);
	ck_assert_int_eq(op->alloc(be, sizeof hw16, &r.w), 0);
	ck_assert_int_eq(op->alloc(be, sizeof direct, &r.out), 0);
	ck_assert_int_eq(op->upload(be, r.x, hx, sizeof hx), 0);
	ck_assert_int_eq(op->upload(be, r.w, hw16, sizeof hw16), 0);

	ck_assert_int_eq(two_layers(&r), 0);
	ck_assert_int_eq(op->download(be, direct, r.out, sizeof direct), 0);
	/* first call captures and launches, the second replays */
	for (int pass = 0; pass < 2; pass++) {
		ck_assert_int_eq(op->upload(be, r.out, poison, sizeof poison), 0);
		ck_assert_int_eq(op->run_cached(be, 3, two_layers, &r), 0);
		ck_assert_int_eq(op->download(be, graphed, r.out, sizeof graphed), 0);
		for (int i = 0; i < ROWS * DIM; i++)
			ck_assert_msg(graphed[i] == direct[i],
				      "pass %d: element %d: graph 0x%04x, direct 0x%04x (must be equal)",
				      pass, i, graphed[i], direct[i]);
	}
	printf("backend: ranges inside a captured graph: capture and replay match the direct run\n");
	op->free(be, r.x);
	op->free(be, r.w);
	op->free(be, r.out);
	node_backend_destroy(be);
}
END_TEST

/*
 * matmul_add_rmsnorm on a 4,096 x 4,096 fp16 projection (the 7B's o) for
 * 1, 3 and 8 tokens, without and with defer, on a backend made with
 * SL_GEMV_PARTS=0 (the GEMV's add and the norm, or the norm deferred)
 * and one with the default (the GEMV in K slices and the norm summing
 * them): the residual x against the CPU's x + in @ W^T within TOL_ADD
 * (the product may be rounded to fp16 before the add: 2^-11 of it, 4x),
 * out against RMSNorm(x) * norm_w (or x * norm_w where the op deferred
 * the norm) within TOL_NORM, test_kernels' norm bound.
 */
#define PD 4096
#define TOL_ADD 2e-3
#define TOL_NORM 5e-3

typedef struct {
	float *x, *in, *w, *norm_w; /* host: the inputs, dtype-rounded */
} add_norm_case;

static double add_norm_run(const char *parts, const add_norm_case *k, int n, int with_defer)
{
	setenv("SL_GEMV_PARTS", parts, 1);
	node_backend *be = make_backend();
	unsetenv("SL_GEMV_PARTS");
	const node_backend_ops *op = be->ops;
	node_backend_limits lim = small_limits();
	char err[SL_ERRLEN] = "";
	ck_assert_msg(op->reserve(be, &lim, err, sizeof err) == 0, "reserve: %s", err);
	const size_t nd = (size_t)n * PD, nw = (size_t)PD * PD;
	void *d_w = gt_upload(k->w, nw, SL_DT_F16), *d_in = gt_upload(k->in, nd, SL_DT_F16);
	void *d_nw = gt_upload(k->norm_w, PD, SL_DT_F16), *d_out = gt_dev_poison(nd * 2);
	void *d_proj = gt_dev_poison(nd * 2);
	float *d_x = gt_upload(k->x, nd, SL_DT_F32);
	const kern_qweight w = {.format = KERN_Q_NONE, .rows = PD, .cols = PD, .data = d_w};
	node_prenorm defer = {0};
	ck_assert_int_eq(op->matmul_add_rmsnorm(be, d_x, d_out, d_proj, d_in, &w, d_nw, n, 1e-5f,
						with_defer ? &defer : NULL),
			 0);
	ck_assert_int_eq(op->sync(be), 0);
	float *ref_x = gt_malloc(sizeof(float) * nd), *prod = gt_malloc(sizeof(float) * nd);
	float *ref = gt_malloc(sizeof(float) * nd), *got = gt_malloc(sizeof(float) * nd);
	kern_matmul_cpu(prod, k->in, k->w, n, PD, PD);
	memcpy(ref_x, k->x, sizeof(float) * nd);
	kern_add_rmsnorm_cpu(ref_x, prod, k->norm_w, ref, n, PD, 1e-5f);
	if (defer.x) /* out holds x * norm_w, the rms still to divide */
		for (size_t i = 0; i < nd; i++)
			ref[i] = ref_x[i] * k->norm_w[i % PD];
	char what[96];
	snprintf(what, sizeof what, "matmul_add_rmsnorm SL_GEMV_PARTS=%s n %d%s", parts, n,
		 defer.x ? " (deferred)" : "");
	gt_download(got, d_x, nd, SL_DT_F32);
	double worst = gt_compare(what, got, ref_x, nd, TOL_ADD) / TOL_ADD;
	gt_download(got, d_out, nd, SL_DT_F16);
	worst = fmax(worst, gt_compare(what, got, ref, nd, TOL_NORM) / TOL_NORM);
	gt_dev_free(d_w), gt_dev_free(d_in), gt_dev_free(d_nw), gt_dev_free(d_out);
	gt_dev_free(d_proj), gt_dev_free(d_x);
	free(ref_x), free(prod), free(ref), free(got);
	node_backend_destroy(be);
	return worst;
}

START_TEST(test_add_norm_paths)
{
	static const int ns[] = {1, 3, 8};
	static const char *const parts[] = {"0", "3"};
	gt_reseed(g_seed, 2);
	add_norm_case k = {gt_malloc(sizeof(float) * 8 * PD), gt_malloc(sizeof(float) * 8 * PD),
			   gt_malloc(sizeof(float) * PD * PD), gt_malloc(sizeof(float) * PD)};
	gt_fill(k.x, 8 * PD, -2, 2);
	gt_fill(k.in, 8 * PD, -1, 1);
	gt_round(k.in, 8 * PD, SL_DT_F16);
	gt_fill(k.w, (size_t)PD * PD, -0.05f, 0.05f);
	gt_round(k.w, (size_t)PD * PD, SL_DT_F16);
	gt_fill(k.norm_w, PD, 0.5f, 1.5f);
	gt_round(k.norm_w, PD, SL_DT_F16);
	double worst = 0;
	for (int p = 0; p < 2; p++)
		for (int i = 0; i < 3; i++)
			for (int d = 0; d < 2; d++)
				worst = fmax(worst, add_norm_run(parts[p], &k, ns[i], d));
	printf("backend: matmul_add_rmsnorm 4096 x 4096 fp16, slices and not, 1-8 tokens: worst "
	       "%.2f of its tolerance\n", worst);
	ck_assert_msg(worst <= 1.0, "matmul_add_rmsnorm: worst %.3g of its tolerance", worst);
	free(k.x), free(k.in), free(k.w), free(k.norm_w);
}
END_TEST

static Suite *backend_suite(void)
{
	Suite *s = suite_create("cuda_backend");
	TCase *tc = tcase_create("backend");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_reserve_refuses);
	tcase_add_test(tc, test_ranges_in_graph);
	tcase_add_test(tc, test_add_norm_paths);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* No CUDA call here: Check forks per test, each child makes its own
	 * context. */
	g_seed = gt_seed_from_env();
	SRunner *sr = srunner_create(backend_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
