/*
 * test_text_util.c — the shared text helpers: text/utf8.h's strict decoder
 * (well-formed characters of every length at their edges; overlong forms,
 * surrogates, code points past U+10FFFF, stray continuation bytes and
 * truncated sequences cut into maximal ill-formed subparts as Unicode's
 * Table 3-7 and Python's errors="replace" do), the encoder, text/json.h's
 * string writer (Python json.dumps(ensure_ascii=False) escapes) and
 * common/buf.h's buffer (growth, the NUL, a custom allocator, failure).
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/sl.h"
#include "text/json.h"
#include "text/utf8.h"

/* The units text_utf8_next cuts s into: their lengths and code points. */
typedef struct unit { size_t len; uint32_t cp; } unit;

static void expect_units(const char *s, size_t n, const unit *want, int nwant, const char *what)
{
	size_t i = 0;
	int k = 0;
	while (i < n) {
		uint32_t cp;
		size_t len = text_utf8_next(s + i, n - i, &cp);
		ck_assert_msg(k < nwant, "%s: more than %d units (offset %zu)", what, nwant, i);
		ck_assert_msg(len == want[k].len && cp == want[k].cp,
			      "%s: unit %d at offset %zu: length %zu cp 0x%X, want length %zu cp 0x%X",
			      what, k, i, len, cp, want[k].len, want[k].cp);
		i += len;
		k++;
	}
	ck_assert_msg(k == nwant, "%s: %d units, want %d", what, k, nwant);
}

#define BAD TEXT_UTF8_BAD
#define TRUNC TEXT_UTF8_TRUNC
#define UNITS(s, ...)                                                                   \
	do {                                                                            \
		static const unit w_[] = {__VA_ARGS__};                                 \
		expect_units(s, sizeof(s) - 1, w_, (int)(sizeof w_ / sizeof w_[0]), #s); \
	} while (0)

START_TEST(utf8_well_formed_edges)
{
	UNITS("\x00", {1, 0});
	UNITS("\x7F", {1, 0x7F});
	UNITS("\xC2\x80", {2, 0x80});
	UNITS("\xDF\xBF", {2, 0x7FF});
	UNITS("\xE0\xA0\x80", {3, 0x800});
	UNITS("\xED\x9F\xBF", {3, 0xD7FF});
	UNITS("\xEE\x80\x80", {3, 0xE000});
	UNITS("\xEF\xBF\xBF", {3, 0xFFFF});
	UNITS("\xF0\x90\x80\x80", {4, 0x10000});
	UNITS("\xF4\x8F\xBF\xBF", {4, 0x10FFFF});
	UNITS("a\xC3\xA9z", {1, 'a'}, {2, 0xE9}, {1, 'z'});
	ck_assert(text_utf8_valid("h\xC3\xA9llo \xF0\x9F\x98\x80", 11));
	ck_assert(text_utf8_valid("", 0));
}
END_TEST

START_TEST(utf8_overlong_forms)
{
	/* C0 and C1 can only start overlongs: ill-formed on their own. */
	UNITS("\xC0\x80", {1, BAD}, {1, BAD});
	UNITS("\xC1\xBF", {1, BAD}, {1, BAD});
	/* E0 80..9F and F0 80..8F would be overlong: the lead alone is the subpart. */
	UNITS("\xE0\x80\x80", {1, BAD}, {1, BAD}, {1, BAD});
	UNITS("\xE0\x9F\xBF", {1, BAD}, {1, BAD}, {1, BAD});
	UNITS("\xF0\x8F\xBF\xBF", {1, BAD}, {1, BAD}, {1, BAD}, {1, BAD});
	ck_assert(!text_utf8_valid("\xC0\xAF", 2));  /* the classic overlong '/' */
	ck_assert(!text_utf8_valid("\xE0\x80\xAF", 3));
	ck_assert(!text_utf8_valid("\xF0\x80\x80\xAF", 4));
	ck_assert_uint_eq(text_utf8_first_bad("ok\xC0\xAF", 4), 2);
}
END_TEST

START_TEST(utf8_surrogates_and_range)
{
	UNITS("\xED\xA0\x80", {1, BAD}, {1, BAD}, {1, BAD});  /* U+D800 */
	UNITS("\xED\xBF\xBF", {1, BAD}, {1, BAD}, {1, BAD});  /* U+DFFF */
	UNITS("\xF4\x90\x80\x80", {1, BAD}, {1, BAD}, {1, BAD}, {1, BAD});  /* U+110000 */
	UNITS("\xF5\x80\x80\x80", {1, BAD}, {1, BAD}, {1, BAD}, {1, BAD});
	UNITS("\xFF", {1, BAD});
	UNITS("\xFE", {1, BAD});
	UNITS("\x80", {1, BAD});  /* a stray continuation byte */
	ck_assert(!text_utf8_valid("\xED\xA0\x80", 3));
	ck_assert(!text_utf8_valid("\xF4\x90\x80\x80", 4));
}
END_TEST

START_TEST(utf8_truncated_and_maximal_subparts)
{
	/* The input ends inside a character: TRUNC, the whole rest. */
	UNITS("\xE2\x82", {2, TRUNC});
	UNITS("\xF0\x9F\x98", {3, TRUNC});
	UNITS("\xC3", {1, TRUNC});
	/* A character broken by a non-continuation byte: the well-formed
	 * prefix is one subpart (one U+FFFD in Python), then the next byte. */
	UNITS("\xE2\x82" "A", {2, BAD}, {1, 'A'});
	UNITS("\xF0\x9F\x98" "A", {3, BAD}, {1, 'A'});
	UNITS("\xF0\x9F\xC3\xA9", {2, BAD}, {2, 0xE9});
	ck_assert(!text_utf8_valid("\xE2\x82", 2));
	ck_assert_uint_eq(text_utf8_first_bad("ab\xE2\x82", 4), 2);
	ck_assert_uint_eq(text_utf8_first_bad("abc", 3), 3);
}
END_TEST

START_TEST(utf8_put_round_trips)
{
	static const uint32_t cps[] = {0, 0x41, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000,
				       0xFFFD, 0xFFFF, 0x10000, 0x10FFFF};
	for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
		char b[4];
		size_t n = text_utf8_put(b, cps[i]);
		uint32_t back;
		ck_assert_msg(n >= 1 && n <= 4, "U+%04X: %zu bytes", cps[i], n);
		ck_assert_msg(text_utf8_next(b, n, &back) == n && back == cps[i],
			      "U+%04X does not decode back (got 0x%X)", cps[i], back);
	}
	char b[4];
	ck_assert_uint_eq(text_utf8_put(b, 0xD800), 0);
	ck_assert_uint_eq(text_utf8_put(b, 0x110000), 0);
}
END_TEST

static void expect_json(const char *s, size_t n, const char *want)
{
	sl_buf b = {0};
	ck_assert_int_eq(text_json_str(&b, s, n), 0);
	ck_assert_msg(b.n == strlen(want) && !memcmp(b.p, want, b.n), "got [%s], want [%s]", b.p,
		      want);
	sl_buf_free(&b);
}

START_TEST(json_string_escapes)
{
	expect_json("", 0, "\"\"");
	expect_json("plain", 5, "\"plain\"");
	expect_json("q\"b\\s/", 6, "\"q\\\"b\\\\s/\"");
	expect_json("\b\f\n\r\t", 5, "\"\\b\\f\\n\\r\\t\"");
	expect_json("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\x7f\"");
	expect_json("a\0b", 3, "\"a\\u0000b\"");
	expect_json("\xC3\xA9\xF0\x9F\x98\x80", 6, "\"\xC3\xA9\xF0\x9F\x98\x80\"");
	/* not UTF-8: one \ufffd per byte, so the output stays valid JSON */
	expect_json("a\xC0\xAFz", 4, "\"a\\ufffd\\ufffdz\"");
	expect_json("\xED\xA0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\"");
	expect_json("cut\xE2\x82", 5, "\"cut\\ufffd\\ufffd\"");
}
END_TEST

START_TEST(buf_grows_and_terminates)
{
	sl_buf b = {0};
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(sl_buf_putc(&b, (char)('a' + i % 26)), 0);
	ck_assert_uint_eq(b.n, 1000);
	ck_assert_int_eq(b.p[1000], 0);
	ck_assert_int_eq(b.p[27], 'b');
	ck_assert_int_eq(sl_buf_printf(&b, "%d-%s", 42, "x"), 0);
	ck_assert_str_eq(b.p + 1000, "42-x");
	ck_assert_int_eq(sl_buf_put(&b, NULL, 0), 0);
	ck_assert_uint_eq(b.n, 1004);
	sl_buf e = {0}; /* reserved, nothing put: still an empty C string */
	ck_assert_int_eq(sl_buf_reserve(&e, 100), 0);
	ck_assert_int_eq(e.p[0], 0);
	sl_buf_free(&e);
	ck_assert(!b.failed);
	sl_buf_free(&b);
	ck_assert_ptr_null(b.p);
	ck_assert_uint_eq(b.n, 0);
	sl_buf_free(NULL);
}
END_TEST

/* An allocator with a budget: what the template engine's arena does. */
typedef struct budget { size_t left; int calls; void *blocks[32]; } budget;

static void *budget_grow(void *ctx, void *old, size_t old_size, size_t new_size)
{
	budget *g = ctx;
	if (new_size > g->left || g->calls == 32)
		return NULL;
	char *p = malloc(new_size);
	if (!p)
		return NULL;
	memcpy(p, old, old_size);
	g->left -= new_size;
	g->blocks[g->calls++] = p;
	return p;
}

START_TEST(buf_custom_allocator_and_failure)
{
	budget g = {.left = 64 + 128};
	sl_buf b = {.grow = budget_grow, .grow_ctx = &g};
	char chunk[50];
	memset(chunk, 'x', sizeof chunk);
	ck_assert_int_eq(sl_buf_put(&b, chunk, 50), 0);   /* 64 bytes */
	ck_assert_int_eq(sl_buf_put(&b, chunk, 50), 0);   /* 128 bytes */
	ck_assert_int_eq(g.calls, 2);
	ck_assert_int_eq(sl_buf_put(&b, chunk, 50), SL_ENOMEM);  /* 256: past the budget */
	ck_assert(b.failed);
	ck_assert_uint_eq(b.n, 100);  /* contents kept */
	ck_assert_int_eq(b.p[100], 0);
	/* failed stays set: a builder checks once, at the end */
	ck_assert_int_eq(text_json_str(&b, "a", 1), SL_ENOMEM);
	ck_assert_uint_eq(b.n, 103);
	ck_assert_str_eq(b.p + 100, "\"a\"");
	for (int i = 0; i < g.calls; i++)
		free(g.blocks[i]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("text_util");
	TCase *tc = tcase_create("text_util");
	tcase_add_test(tc, utf8_well_formed_edges);
	tcase_add_test(tc, utf8_overlong_forms);
	tcase_add_test(tc, utf8_surrogates_and_range);
	tcase_add_test(tc, utf8_truncated_and_maximal_subparts);
	tcase_add_test(tc, utf8_put_round_trips);
	tcase_add_test(tc, json_string_escapes);
	tcase_add_test(tc, buf_grows_and_terminates);
	tcase_add_test(tc, buf_custom_allocator_and_failure);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
