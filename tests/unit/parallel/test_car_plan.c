/*
 * test_car_plan.c — the host-only half of the custom all-reduce
 * (parallel/allreduce.c): default limits per tp size, the size rule that
 * picks one-shot, two-shot or NCCL (at and around each boundary, and for
 * the model's message sizes), slot and grid sizing, and the parsers of --custom-allreduce and the SL_CUSTOM_AR*
 * variables, whose errors must name the flag or variable. The kernels
 * themselves are tested on the GPU host (tests/gpu/test_allreduce.c).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/allreduce.h"
#include "common/sl.h"

static char g_err[SL_ERRLEN];

START_TEST(test_defaults)
{
	par_car_limits l;
	/* tp 2: push, then one-shot, to 4 MiB; NCCL beyond (issue 35) */
	par_car_default_limits(2, &l);
	ck_assert_uint_eq(l.push_max, (size_t)4 << 20); /* push won at every size (2 H200) */
	ck_assert_uint_eq(l.custom_max, (size_t)4 << 20);
	ck_assert_uint_eq(l.oneshot_max, (size_t)4 << 20);
	ck_assert_int_eq(l.blocks, 32);
	ck_assert_int_eq(l.fused, 1);
	ck_assert_int_eq(l.gemv, 1); /* the all-reduce in the GEMV, where it runs */
	/* tp 4: one-shot lost above 512 KiB, two-shot above 2 MiB (4 H200) */
	par_car_default_limits(4, &l);
	ck_assert_uint_eq(l.push_max, 0); /* not measured on 4 GPUs: off */
	ck_assert_uint_eq(l.oneshot_max, (size_t)512 << 10);
	ck_assert_uint_eq(l.custom_max, (size_t)2 << 20);
	par_car_default_limits(8, &l);
	ck_assert_uint_eq(l.push_max, 0);
	ck_assert_uint_eq(l.oneshot_max, (size_t)128 << 10);
	ck_assert_uint_eq(l.custom_max, (size_t)4 << 20);
	/* sizes between and beyond the table's rows take the next larger row */
	par_car_default_limits(3, &l);
	ck_assert_uint_eq(l.oneshot_max, (size_t)512 << 10);
	par_car_default_limits(6, &l);
	ck_assert_uint_eq(l.oneshot_max, (size_t)128 << 10);
	par_car_default_limits(16, &l);
	ck_assert_uint_eq(l.oneshot_max, (size_t)128 << 10);
}
END_TEST

START_TEST(test_choose_boundaries)
{
	par_car_limits l = {.oneshot_max = 1000, .custom_max = 5000, .blocks = 0};
	ck_assert_int_eq(par_car_choose(&l, 0), PAR_AR_ONESHOT);
	ck_assert_int_eq(par_car_choose(&l, 1), PAR_AR_ONESHOT);
	ck_assert_int_eq(par_car_choose(&l, 1000), PAR_AR_ONESHOT);
	ck_assert_int_eq(par_car_choose(&l, 1001), PAR_AR_TWOSHOT);
	ck_assert_int_eq(par_car_choose(&l, 5000), PAR_AR_TWOSHOT);
	ck_assert_int_eq(par_car_choose(&l, 5001), PAR_AR_NCCL);
	/* the push one-shot first, up to push_max, within custom_max */
	l.push_max = 400;
	ck_assert_int_eq(par_car_choose(&l, 0), PAR_AR_ONESHOT); /* the empty message: as before */
	ck_assert_int_eq(par_car_choose(&l, 1), PAR_AR_PUSH);
	ck_assert_int_eq(par_car_choose(&l, 400), PAR_AR_PUSH);
	ck_assert_int_eq(par_car_choose(&l, 401), PAR_AR_ONESHOT);
	ck_assert_int_eq(par_car_choose(&l, 1001), PAR_AR_TWOSHOT);
	l.push_max = 8000;
	ck_assert_int_eq(par_car_choose(&l, 5000), PAR_AR_PUSH);
	ck_assert_int_eq(par_car_choose(&l, 5001), PAR_AR_NCCL);
	l.push_max = 0;
	/* one-shot above custom_max never wins over NCCL */
	l.oneshot_max = 10000;
	ck_assert_int_eq(par_car_choose(&l, 5000), PAR_AR_ONESHOT);
	ck_assert_int_eq(par_car_choose(&l, 5001), PAR_AR_NCCL);
	/* custom_max 0: everything goes to NCCL but the empty message */
	l.custom_max = 0;
	ck_assert_int_eq(par_car_choose(&l, 1), PAR_AR_NCCL);
}
END_TEST

/* The model's messages at the defaults: 13B decode (dim 5120, fp16). */
START_TEST(test_choose_model_sizes)
{
	par_car_limits l;
	size_t b1 = 5120 * 2, b32 = 32 * 5120 * 2, emb = 5120 * 4, prefill = 2048 * 5120 * 2;
	size_t b128 = 128 * 5120 * 2, seventy_b128 = 128 * 8192 * 2, mib8 = (size_t)8 << 20;
	par_car_default_limits(2, &l);
	ck_assert_int_eq(par_car_choose(&l, b1), PAR_AR_PUSH);
	ck_assert_int_eq(par_car_choose(&l, emb), PAR_AR_PUSH);
	ck_assert_int_eq(par_car_choose(&l, b32), PAR_AR_PUSH);
	ck_assert_int_eq(par_car_choose(&l, b128), PAR_AR_PUSH);
	ck_assert_int_eq(par_car_choose(&l, seventy_b128), PAR_AR_PUSH);
	ck_assert_int_eq(par_car_choose(&l, (size_t)4 << 20), PAR_AR_PUSH);
	ck_assert_int_eq(par_car_choose(&l, mib8), PAR_AR_NCCL); /* beyond the custom kernels */
	ck_assert_int_eq(par_car_choose(&l, prefill), PAR_AR_NCCL);
	par_car_default_limits(4, &l);
	ck_assert_int_eq(par_car_choose(&l, b1), PAR_AR_ONESHOT);
	ck_assert_int_eq(par_car_choose(&l, b32), PAR_AR_ONESHOT); /* 320 KiB */
	ck_assert_int_eq(par_car_choose(&l, (size_t)512 << 10), PAR_AR_ONESHOT);
	ck_assert_int_eq(par_car_choose(&l, ((size_t)512 << 10) + 2), PAR_AR_TWOSHOT);
	ck_assert_int_eq(par_car_choose(&l, (size_t)2 << 20), PAR_AR_TWOSHOT);
	ck_assert_int_eq(par_car_choose(&l, ((size_t)2 << 20) + 2), PAR_AR_NCCL);
	ck_assert_int_eq(par_car_choose(&l, (size_t)4 << 20), PAR_AR_NCCL); /* NCCL's win at 4 MiB */
	par_car_default_limits(8, &l);
	ck_assert_int_eq(par_car_choose(&l, b1), PAR_AR_ONESHOT);
	ck_assert_int_eq(par_car_choose(&l, b32), PAR_AR_TWOSHOT);
	ck_assert_int_eq(par_car_choose(&l, prefill), PAR_AR_NCCL);
}
END_TEST

START_TEST(test_slot_and_blocks)
{
	par_car_limits l = {.oneshot_max = 0, .custom_max = (size_t)8 << 20, .blocks = 0};
	ck_assert_uint_eq(par_car_slot_bytes(&l), (size_t)8 << 20);
	l.custom_max = (1 << 20) + 1; /* rounded up to 16 bytes */
	ck_assert_uint_eq(par_car_slot_bytes(&l), (1 << 20) + 16);
	ck_assert_uint_eq(par_car_slot_bytes(&l) % 16, 0);
	/* the push area: push_max rounded up to 16, at least 64 KiB, at most 64 MiB */
	l.push_max = 0;
	ck_assert_uint_eq(par_car_push_cap(&l), PAR_CAR_PUSH_MIN_CAP);
	l.push_max = (1 << 20) + 1;
	ck_assert_uint_eq(par_car_push_cap(&l), (1 << 20) + 16);
	l.push_max = (size_t)1 << 30;
	ck_assert_uint_eq(par_car_push_cap(&l), (size_t)64 << 20);
	l.custom_max = 100; /* never below 64 KiB: car_only groups chunk through it */
	ck_assert_uint_eq(par_car_slot_bytes(&l), (size_t)64 << 10);
	l.custom_max = 0;
	ck_assert_uint_eq(par_car_slot_bytes(&l), (size_t)64 << 10);
	ck_assert_int_eq(par_car_blocks(&l), 32);
	l.blocks = 1;
	ck_assert_int_eq(par_car_blocks(&l), 1);
	l.blocks = 64;
	ck_assert_int_eq(par_car_blocks(&l), 64);
	l.blocks = 65;
	ck_assert_int_eq(par_car_blocks(&l), 32);
	l.blocks = -3;
	ck_assert_int_eq(par_car_blocks(&l), 32);
}
END_TEST

/* Small calls move their data with few blocks, large ones with all. */
START_TEST(test_active_blocks)
{
	par_car_limits l;
	par_car_default_limits(4, &l);
	ck_assert_uint_eq(l.block_bytes, (size_t)8 << 10);
	ck_assert_int_eq(par_car_active_blocks(&l, 2), PAR_CAR_MIN_ACTIVE);
	ck_assert_int_eq(par_car_active_blocks(&l, 10240), PAR_CAR_MIN_ACTIVE); /* 13B decode */
	ck_assert_int_eq(par_car_active_blocks(&l, (size_t)40 << 10), 5);
	ck_assert_int_eq(par_car_active_blocks(&l, ((size_t)40 << 10) + 1), 6);
	ck_assert_int_eq(par_car_active_blocks(&l, (size_t)256 << 10), 32);
	ck_assert_int_eq(par_car_active_blocks(&l, (size_t)320 << 10), 32); /* batch 32 */
	l.blocks = 3; /* fewer than the minimum: all of them */
	ck_assert_int_eq(par_car_active_blocks(&l, 1), 3);
	l.blocks = 32;
	l.block_bytes = 0; /* every block, always */
	ck_assert_int_eq(par_car_active_blocks(&l, 1), 32);
	setenv("SL_CUSTOM_AR_BLOCK_BYTES", "0", 1);
	ck_assert_int_eq(par_car_limits_from_env(2, &l, g_err, sizeof g_err), 0);
	ck_assert_uint_eq(l.block_bytes, 0);
	setenv("SL_CUSTOM_AR_BLOCK_BYTES", "32K", 1);
	ck_assert_int_eq(par_car_limits_from_env(2, &l, g_err, sizeof g_err), 0);
	ck_assert_int_eq(par_car_active_blocks(&l, (size_t)256 << 10), 8);
	setenv("SL_CUSTOM_AR_BLOCK_BYTES", "few", 1);
	ck_assert_int_eq(par_car_limits_from_env(2, &l, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "SL_CUSTOM_AR_BLOCK_BYTES"), "%s", g_err);
	unsetenv("SL_CUSTOM_AR_BLOCK_BYTES");
}
END_TEST

START_TEST(test_parse_mode)
{
	par_car_mode m = PAR_CAR_AUTO;
	ck_assert_int_eq(par_car_parse_mode("--x", "off", &m, g_err, sizeof g_err), 0);
	ck_assert_int_eq(m, PAR_CAR_OFF);
	ck_assert_int_eq(par_car_parse_mode("--x", "1", &m, g_err, sizeof g_err), 0);
	ck_assert_int_eq(m, PAR_CAR_ON);
	ck_assert_int_eq(par_car_parse_mode("--x", "0", &m, g_err, sizeof g_err), 0);
	ck_assert_int_eq(m, PAR_CAR_OFF);
	ck_assert_int_eq(par_car_parse_mode("--x", "on", &m, g_err, sizeof g_err), 0);
	ck_assert_int_eq(m, PAR_CAR_ON);
	ck_assert_int_eq(par_car_parse_mode("--x", "auto", &m, g_err, sizeof g_err), 0);
	ck_assert_int_eq(m, PAR_CAR_AUTO);
	const char *bad[] = {"", "yes", "ON", "2", "auto "};
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(par_car_parse_mode("--custom-allreduce", bad[i], &m, g_err,
						    sizeof g_err), SL_EINVAL);
		ck_assert_msg(strstr(g_err, "--custom-allreduce"), "error names the flag: %s", g_err);
	}
}
END_TEST

START_TEST(test_parse_bytes)
{
	size_t v = 0;
	ck_assert_int_eq(par_car_parse_bytes("V", "12345", &v, g_err, sizeof g_err), 0);
	ck_assert_uint_eq(v, 12345);
	ck_assert_int_eq(par_car_parse_bytes("V", "64K", &v, g_err, sizeof g_err), 0);
	ck_assert_uint_eq(v, 65536);
	ck_assert_int_eq(par_car_parse_bytes("V", "8m", &v, g_err, sizeof g_err), 0);
	ck_assert_uint_eq(v, (size_t)8 << 20);
	ck_assert_int_eq(par_car_parse_bytes("V", "1G", &v, g_err, sizeof g_err), 0);
	ck_assert_uint_eq(v, (size_t)1 << 30);
	ck_assert_int_eq(par_car_parse_bytes("V", "0", &v, g_err, sizeof g_err), 0);
	ck_assert_uint_eq(v, 0);
	const char *bad[] = {"", "-1", "K", "12Q", "2G", "1073741825", "8MB", " 5",
			     "99999999999999999999999"};
	for (int i = 0; i < 9; i++) {
		v = 77;
		ck_assert_msg(par_car_parse_bytes("SL_CUSTOM_AR_MAX", bad[i], &v, g_err,
						  sizeof g_err) == SL_EINVAL, "'%s' accepted", bad[i]);
		ck_assert_msg(strstr(g_err, "SL_CUSTOM_AR_MAX"), "error names the variable: %s", g_err);
		ck_assert_uint_eq(v, 77);
	}
}
END_TEST

START_TEST(test_env)
{
	par_car_mode m;
	par_car_limits l;
	unsetenv("SL_CUSTOM_AR");
	ck_assert_int_eq(par_car_mode_from_env(PAR_CAR_ON, &m, g_err, sizeof g_err), 0);
	ck_assert_int_eq(m, PAR_CAR_ON); /* unset: the flag */
	setenv("SL_CUSTOM_AR", "0", 1);
	ck_assert_int_eq(par_car_mode_from_env(PAR_CAR_ON, &m, g_err, sizeof g_err), 0);
	ck_assert_int_eq(m, PAR_CAR_OFF); /* set: overrides the flag */
	setenv("SL_CUSTOM_AR", "maybe", 1);
	ck_assert_int_eq(par_car_mode_from_env(PAR_CAR_AUTO, &m, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "SL_CUSTOM_AR"), "%s", g_err);
	unsetenv("SL_CUSTOM_AR");

	setenv("SL_CUSTOM_AR_ONESHOT_MAX", "64K", 1);
	setenv("SL_CUSTOM_AR_MAX", "2M", 1);
	setenv("SL_CUSTOM_AR_BLOCKS", "16", 1);
	setenv("SL_CUSTOM_AR_PUSH_MAX", "32K", 1);
	ck_assert_int_eq(par_car_limits_from_env(4, &l, g_err, sizeof g_err), 0);
	ck_assert_uint_eq(l.push_max, 32768);
	setenv("SL_CUSTOM_AR_PUSH_MAX", "0", 1); /* off */
	ck_assert_int_eq(par_car_limits_from_env(2, &l, g_err, sizeof g_err), 0);
	ck_assert_uint_eq(l.push_max, 0);
	ck_assert_int_eq(par_car_choose(&l, 10240), PAR_AR_ONESHOT);
	setenv("SL_CUSTOM_AR_PUSH_MAX", "-1", 1);
	ck_assert_int_eq(par_car_limits_from_env(2, &l, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "SL_CUSTOM_AR_PUSH_MAX"), "%s", g_err);
	unsetenv("SL_CUSTOM_AR_PUSH_MAX");
	ck_assert_int_eq(par_car_limits_from_env(4, &l, g_err, sizeof g_err), 0);
	ck_assert_uint_eq(l.oneshot_max, 65536);
	ck_assert_uint_eq(l.custom_max, (size_t)2 << 20);
	ck_assert_int_eq(l.blocks, 16);
	setenv("SL_CUSTOM_AR_BLOCKS", "65", 1);
	ck_assert_int_eq(par_car_limits_from_env(4, &l, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "SL_CUSTOM_AR_BLOCKS"), "%s", g_err);
	unsetenv("SL_CUSTOM_AR_BLOCKS");
	setenv("SL_CUSTOM_AR_ONESHOT_MAX", "lots", 1);
	ck_assert_int_eq(par_car_limits_from_env(4, &l, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "SL_CUSTOM_AR_ONESHOT_MAX"), "%s", g_err);
	unsetenv("SL_CUSTOM_AR_ONESHOT_MAX");
	unsetenv("SL_CUSTOM_AR_MAX");
	ck_assert_int_eq(par_car_limits_from_env(8, &l, g_err, sizeof g_err), 0);
	par_car_limits d;
	par_car_default_limits(8, &d);
	ck_assert_uint_eq(l.oneshot_max, d.oneshot_max);
	ck_assert_uint_eq(l.custom_max, d.custom_max);
	ck_assert_int_eq(l.blocks, d.blocks);
	ck_assert_int_eq(l.fused, 1);
	setenv("SL_FUSED_AR", "0", 1);
	ck_assert_int_eq(par_car_limits_from_env(2, &l, g_err, sizeof g_err), 0);
	ck_assert_int_eq(l.fused, 0);
	setenv("SL_FUSED_AR", "yes", 1);
	ck_assert_int_eq(par_car_limits_from_env(2, &l, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "SL_FUSED_AR"), "%s", g_err);
	unsetenv("SL_FUSED_AR");
	setenv("SL_GEMV_AR", "0", 1);
	ck_assert_int_eq(par_car_limits_from_env(2, &l, g_err, sizeof g_err), 0);
	ck_assert_int_eq(l.gemv, 0);
	ck_assert_int_eq(l.fused, 1);
	setenv("SL_GEMV_AR", "1", 1);
	ck_assert_int_eq(par_car_limits_from_env(2, &l, g_err, sizeof g_err), 0);
	ck_assert_int_eq(l.gemv, 1);
	setenv("SL_GEMV_AR", "2", 1);
	ck_assert_int_eq(par_car_limits_from_env(2, &l, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_msg(strstr(g_err, "SL_GEMV_AR"), "%s", g_err);
	unsetenv("SL_GEMV_AR");
}
END_TEST

static Suite *car_suite(void)
{
	Suite *su = suite_create("car_plan");
	TCase *tc = tcase_create("plan");
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_choose_boundaries);
	tcase_add_test(tc, test_active_blocks);
	tcase_add_test(tc, test_choose_model_sizes);
	tcase_add_test(tc, test_slot_and_blocks);
	tcase_add_test(tc, test_parse_mode);
	tcase_add_test(tc, test_parse_bytes);
	tcase_add_test(tc, test_env);
	suite_add_tcase(su, tc);
	return su;
}

int main(void)
{
	SRunner *sr = srunner_create(car_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
