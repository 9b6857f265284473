/*
 * test_errors.c — the error path of common/: sl_fail and sl_take_error (a
 * reason travels up with its code from code that holds no err buffer), and
 * TRY_GOTO (a function holding resources jumps to its cleanup with the code).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/checks.h"
#include "common/sl.h"

START_TEST(fail_records_and_take_moves)
{
	char err[64] = "";
	sl_take_error(NULL, 0, 0); /* start clean */
	ck_assert_int_eq(sl_fail(SL_EINVAL, "rope: bad shape %d", 7), SL_EINVAL);
	ck_assert_str_eq(sl_last_error(), "rope: bad shape 7");
	ck_assert_int_eq(sl_take_error(err, sizeof err, SL_EINVAL), SL_EINVAL);
	ck_assert_str_eq(err, "rope: bad shape 7");
	ck_assert_str_eq(sl_last_error(), ""); /* taken */
}
END_TEST

START_TEST(caller_message_wins)
{
	char err[64] = "step failed: own reason";
	sl_fail(SL_EDEVICE, "kernel reason");
	sl_take_error(err, sizeof err, SL_EDEVICE);
	ck_assert_str_eq(err, "step failed: own reason");
	ck_assert_str_eq(sl_last_error(), "");
}
END_TEST

START_TEST(take_truncates_to_the_buffer)
{
	char err[8] = "";
	sl_fail(SL_EIO, "0123456789abcdef");
	sl_take_error(err, sizeof err, SL_EIO);
	ck_assert_str_eq(err, "0123456");
}
END_TEST

static int step(int rc) { return rc; }

/* Holds two buffers; frees both on every path; returns the first failure. */
static int holds_resources(int fail_at, int *freed)
{
	int rc = SL_OK;
	char *a = NULL, *b = NULL;
	a = malloc(16);
	TRY_GOTO(rc, fail, step(fail_at == 1 ? SL_ENOMEM : SL_OK));
	b = malloc(16);
	TRY_GOTO(rc, fail, step(fail_at == 2 ? SL_EIO : SL_OK));
	rc = 42; /* reached only when no step failed */
fail:
	*freed += (a != NULL) + (b != NULL);
	free(a);
	free(b);
	return rc;
}

START_TEST(try_goto_jumps_with_the_code)
{
	int freed = 0;
	ck_assert_int_eq(holds_resources(1, &freed), SL_ENOMEM);
	ck_assert_int_eq(freed, 1);
	freed = 0;
	ck_assert_int_eq(holds_resources(2, &freed), SL_EIO);
	ck_assert_int_eq(freed, 2);
	freed = 0;
	ck_assert_int_eq(holds_resources(0, &freed), 42);
	ck_assert_int_eq(freed, 2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("errors");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, fail_records_and_take_moves);
	tcase_add_test(tc, caller_message_wins);
	tcase_add_test(tc, take_truncates_to_the_buffer);
	tcase_add_test(tc, try_goto_jumps_with_the_code);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
