/*
 * test_cuda_check.c — node_backend_cuda_check (node/backend_cuda.c), what
 * the CUDA backend's reserve refuses before a node starts serving. It needs
 * no device, so it runs in every build: real model shapes must pass (the
 * tensor-core ones and those only the CUDA-core attention kernel takes),
 * and each shape the kernels cannot run must fail with the right code and
 * a message naming the flag or config field and the value.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "node/backend.h"
#include "common/sl.h"

static char g_err[SL_ERRLEN];

/* Llama-2-7B on one GPU with the node's defaults. */
static node_backend_limits base(void)
{
	node_backend_limits lim = {.step_tokens = 2048, .max_rows = 256, .max_seqs = 256,
				   .max_table_entries = 256 * 256, .vocab = 32000, .n_heads = 32,
				   .n_kv_heads = 32, .head_dim = 128, .max_ctx = 4096,
				   .block_tokens = 16};
	return lim;
}

static int check(const node_backend_limits *lim)
{
	g_err[0] = '\0';
	return node_backend_cuda_check(lim, g_err, sizeof g_err);
}

/* The message holds every one of the given strings. */
static void expect_msg(const char *a, const char *b)
{
	ck_assert_msg(strstr(g_err, a) && strstr(g_err, b),
		      "message \"%s\" should name \"%s\" and \"%s\"", g_err, a, b);
}

static const struct {
	const char *what;
	int n_heads, n_kv_heads, head_dim, block_tokens;
} k_ok[] = {
	{"llama-2-7b", 32, 32, 128, 16},
	{"llama-3-8b at tp 2", 16, 4, 128, 16},
	{"llama-3-70b at tp 8", 8, 1, 128, 32},
	{"smollm2-135m", 9, 3, 64, 16},
	{"phi-like head_dim 80", 32, 32, 80, 1},
	{"head_dim 96, blocks of 1024", 12, 4, 96, 1024},
	{"golden model head_dim 8 (CUDA-core kernel)", 4, 2, 8, 4},
	{"group of 16 (CUDA-core kernel)", 16, 1, 64, 16},
	{"head_dim 256, the largest", 8, 8, 256, 16},
};

START_TEST(test_accepts)
{
	node_backend_limits lim = base();
	lim.n_heads = k_ok[_i].n_heads;
	lim.n_kv_heads = k_ok[_i].n_kv_heads;
	lim.head_dim = k_ok[_i].head_dim;
	lim.block_tokens = k_ok[_i].block_tokens;
	ck_assert_msg(check(&lim) == 0, "%s refused: %s", k_ok[_i].what, g_err);
}
END_TEST

/* The attention kernels index a block by shift and mask. */
static const int k_bad_blocks[] = {24, 3, 12, 1000, 0, -16};

START_TEST(test_block_tokens)
{
	node_backend_limits lim = base();
	lim.block_tokens = k_bad_blocks[_i];
	ck_assert_int_eq(check(&lim), SL_EINVAL);
	char want[32];
	snprintf(want, sizeof want, "--block-tokens %d", k_bad_blocks[_i]);
	expect_msg(want, "power of two");
}
END_TEST

START_TEST(test_head_dim)
{
	node_backend_limits lim = base();
	lim.head_dim = KERN_ATTN_MAX_HEAD_DIM + 2;
	ck_assert_int_eq(check(&lim), SL_ENOTSUP);
	expect_msg("head_dim 258", "at most 256");
	lim.head_dim = 65; /* RoPE rotates pairs */
	ck_assert_int_eq(check(&lim), SL_ENOTSUP);
	expect_msg("head_dim 65", "even");
	lim.head_dim = 0;
	ck_assert_int_eq(check(&lim), SL_ENOTSUP);
	expect_msg("head_dim 0", "head_dim");
}
END_TEST

START_TEST(test_groups)
{
	node_backend_limits lim = base();
	lim.n_heads = 12;
	lim.n_kv_heads = 8;
	ck_assert_int_eq(check(&lim), SL_EINVAL);
	expect_msg("12 query heads over 8 KV heads", "--tp");
	lim.n_kv_heads = 0;
	ck_assert_int_eq(check(&lim), SL_EINVAL);
	expect_msg("over 0 KV heads", "num_key_value_heads");
}
END_TEST

/* Which shapes get the tensor-core kernels: the rule reserve logs. */
START_TEST(test_mma_shapes)
{
	ck_assert(kern_attn_mma_shape(128, 1));
	ck_assert(kern_attn_mma_shape(128, 8));
	ck_assert(kern_attn_mma_shape(64, 3));
	ck_assert(kern_attn_mma_shape(80, 4));
	ck_assert(kern_attn_mma_shape(96, 2));
	ck_assert(!kern_attn_mma_shape(128, 9));
	ck_assert(!kern_attn_mma_shape(32, 1));
	ck_assert(!kern_attn_mma_shape(256, 1));
}
END_TEST

#define N_OF(a) ((int)(sizeof a / sizeof a[0]))

static Suite *check_suite(void)
{
	Suite *su = suite_create("cuda_check");
	TCase *tc = tcase_create("reserve");
	tcase_add_loop_test(tc, test_accepts, 0, N_OF(k_ok));
	tcase_add_loop_test(tc, test_block_tokens, 0, N_OF(k_bad_blocks));
	tcase_add_test(tc, test_head_dim);
	tcase_add_test(tc, test_groups);
	tcase_add_test(tc, test_mma_shapes);
	suite_add_tcase(su, tc);
	return su;
}

int main(void)
{
	SRunner *sr = srunner_create(check_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
