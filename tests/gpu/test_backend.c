/*
 * test_backend.c — the CUDA backend (node/backend_cuda.c) driven the way
 * node/model.c drives it. Reserve: a shape the kernels cannot run is
 * refused there, before any step, naming the flag or config field; one
 * they can run is taken. Ranges: a run of ops inside per-layer NVTX
 * ranges, captured into a CUDA graph by run_cached and replayed, must
 * give exactly what the same ops give when run directly (NVTX calls are
 * host-side markers and must neither break the capture nor leave
 * anything in the graph). GPU host only (make test-gpu).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/backend.h"
#include "gpu_test.h"
#include "common/sl.h"

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

static Suite *backend_suite(void)
{
	Suite *s = suite_create("cuda_backend");
	TCase *tc = tcase_create("backend");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_reserve_refuses);
	tcase_add_test(tc, test_ranges_in_graph);
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
