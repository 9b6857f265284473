/*
 * craft_fixture.h — the Check fixture of the suites that read crafted files
 * (test_gguf.c, test_safetensors.c, test_config_sources.c): a fresh temp
 * folder per test (g_dir, removed after it), an error buffer (g_err),
 * paths in the folder and the check that a call failed naming what it
 * should. Define CRAFT_TAG (the folder name's tag) before including;
 * header-only, one suite per binary.
 */
#ifndef TESTS_CRAFT_FIXTURE_H
#define TESTS_CRAFT_FIXTURE_H

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "common/sl.h"
#include "st_craft.h"

#ifndef CRAFT_TAG
#error "define CRAFT_TAG before including craft_fixture.h"
#endif

static char g_dir[64];
static char g_err[SL_ERRLEN];

static void setup(void)
{
	ck_assert_int_eq(craft_tmpdir(g_dir, sizeof g_dir, CRAFT_TAG), 0);
	g_err[0] = 0;
}

static void teardown(void) { craft_rmdir(g_dir); }

/* g_dir/name; four rotating buffers so a test can hold a few at once. */
static inline const char *tpath(const char *name)
{
	static char buf[4][256];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
	return buf[k];
}

/* The call failed with `want` and the message names s1 and s2 (if given). */
static inline void expect_err(int rc, int want, const char *s1, const char *s2)
{
	ck_assert_msg(rc == want, "rc %d, want %d; error: %s", rc, want, g_err);
	ck_assert_msg(strstr(g_err, s1), "error \"%s\" does not name \"%s\"", g_err, s1);
	if (s2)
		ck_assert_msg(strstr(g_err, s2), "error \"%s\" does not name \"%s\"", g_err, s2);
}

#endif
