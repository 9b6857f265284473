/*
 * test_log.c — common/'s log line and version string: every line starts
 * with the date and time to the millisecond, then role, rank and
 * subsystem (operators merge logs of many hosts and days by that prefix);
 * --version is one string for every program.
 */
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/sl.h"
#include "common/version.h"

/* What sl_log writes for one call, read back from a temporary stderr. */
static void logged(char *out, size_t n, sl_log_level level, const char *msg)
{
	char path[] = "/tmp/sl_test_log_XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	fflush(stderr);
	int saved = dup(2);
	dup2(fd, 2);
	sl_log(level, "kv", "%s", msg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	FILE *f = fdopen(fd, "r");
	rewind(f);
	size_t k = fread(out, 1, n - 1, f);
	out[k] = 0;
	fclose(f);
	unlink(path);
}

/* s starts with "YYYY-MM-DD HH:MM:SS.mmm " (digits where the template has
 * 9s), then rest. By hand: libonig, linked into every test, exports its
 * own regcomp with other rules. */
static int stamped(const char *s, const char *rest)
{
	static const char tmpl[] = "9999-99-99 99:99:99.999 ";
	for (size_t i = 0; i < sizeof tmpl - 1; i++)
		if (tmpl[i] == '9' ? !isdigit((unsigned char)s[i]) : s[i] != tmpl[i])
			return 0;
	return !strcmp(s + sizeof tmpl - 1, rest);
}

START_TEST(line_starts_with_date_ms_role_rank)
{
	char line[256];
	sl_log_set_role("node", 3, 8);
	logged(line, sizeof line, SL_LOG_INFO, "hello");
	ck_assert_msg(stamped(line, "node r3/8 kv: hello\n"), "log line: '%s'", line);
	/* today's date, not a fixed one */
	char before[16], after[16];
	time_t now = time(NULL);
	struct tm tm;
	strftime(before, sizeof before, "%Y-%m-%d", localtime_r(&now, &tm));
	logged(line, sizeof line, SL_LOG_WARN, "careful");
	now = time(NULL);
	strftime(after, sizeof after, "%Y-%m-%d", localtime_r(&now, &tm));
	ck_assert_msg(!strncmp(line, before, 10) || !strncmp(line, after, 10), "'%s' is not today %s",
		      line, after);
	ck_assert_msg(stamped(line, "node r3/8 kv: WARN careful\n"), "warn line: '%s'", line);
}
END_TEST

START_TEST(version_is_one_string)
{
	const char *v = sl_version();
	ck_assert_msg(!strncmp(v, SL_VERSION_RELEASE, strlen(SL_VERSION_RELEASE)), "version '%s'", v);
	char *args[] = {"prog", "--version"}, *other[] = {"prog", "x", "--version"};
	ck_assert_int_eq(sl_version_asked(2, other, "prog"), 0);
	ck_assert_int_eq(sl_version_asked(1, args, "prog"), 0);
	fflush(stdout);
	ck_assert_int_eq(sl_version_asked(2, args, "prog"), 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, line_starts_with_date_ms_role_rank);
	tcase_add_test(tc, version_is_one_string);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
