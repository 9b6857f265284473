/*
 * test_compiles.c — node/compiles.c, the leader's constraint compiles on a
 * worker thread, over the mha_f32 golden model (256 ids) with the Llama 2
 * tokenizer cut to them (its byte tokens and </s>): finished compiles come
 * back in order with their matcher or their constraint's error, the
 * descriptor is readable exactly while one waits, the request's prompt
 * and token lists travel as copies (the caller's buffers are overwritten
 * after submitting), cancelled ones never come back, and destroying the
 * queue with work in it frees everything (CK_FORK=no valgrind
 * --leak-check=full on this binary: no error, nothing definitely lost).
 * Waits have a bound of 60 s and assert nothing about how long they took.
 */
#include <check.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"
#include "node/backend.h"
#include "node/compiles.h"
#include "node/engine.h"
#include "node/model.h"

typedef struct rig {
	node_backend *be;
	model *m;
	node_engine *e;
	node_compiles *q;
} rig;

static void rig_open(rig *r)
{
	char dir[512], tok[512], err[SL_ERRLEN] = "";
	const char *root = getenv("SL_GOLDEN_DIR"), *data = getenv("SL_TOKENIZER_DATA");
	snprintf(dir, sizeof dir, "%s/mha_f32", root ? root : "tests/golden");
	snprintf(tok, sizeof tok, "%s/llama2/tokenizer.json", data ? data : "tests/data");
	memset(r, 0, sizeof *r);
	ck_assert_int_eq(node_backend_cpu_create(&r->be), 0);
	model_opts o = {.step_tokens = 64, .n_kv_blocks = 64, .block_tokens = 4};
	ck_assert_msg(model_create(dir, r->be, &o, &r->m, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(node_engine_create(r->m, &r->e, err, sizeof err), 0);
	ck_assert_int_eq(node_engine_set_tokenizer(r->e, tok), 0);
	ck_assert_msg(node_compiles_create(r->e, &r->q, err, sizeof err) == 0, "%s", err);
}

static void rig_close(rig *r)
{
	node_compiles_destroy(r->q);
	node_engine_destroy(r->e);
	model_destroy(r->m);
	node_backend_destroy(r->be);
}

static int readable(const rig *r, int timeout_ms)
{
	struct pollfd p = {.fd = node_compiles_fd(r->q), .events = POLLIN};
	return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

/* Everything submitted comes back: take until n are in. */
static int take_n(rig *r, node_compile_done *out, int n)
{
	int got = 0;
	for (int tries = 0; got < n && tries < 600; tries++) {
		if (!readable(r, 100))
			continue;
		while (got < n && node_compiles_take(r->q, &out[got]))
			got++;
	}
	return got;
}

static void submit(rig *r, uint64_t id, sl_constraint_kind kind, const char *text,
		   int32_t *prompt, int n_prompt, int32_t *stop_ids, int n_stop)
{
	char err[SL_ERRLEN] = "";
	node_request q = {.prompt = prompt, .n_prompt = n_prompt, .max_new_tokens = 8,
			  .lists = {.stop_ids = stop_ids, .n_stop_ids = n_stop}};
	ck_assert_msg(node_compiles_submit(r->q, id, &q, kind, text, strlen(text), err,
					   sizeof err) == 0, "%s", err);
}

START_TEST(compiles_come_back_in_order)
{
	rig r;
	rig_open(&r);
	ck_assert(!readable(&r, 0));
	int32_t prompt[3] = {5, 6, 7}, stop[2] = {9, 10};
	submit(&r, 11, SL_CONSTRAINT_REGEX, "(ab|cd)+", prompt, 3, stop, 2);
	submit(&r, 12, SL_CONSTRAINT_REGEX, "(unclosed", prompt, 3, NULL, 0);
	submit(&r, 13, SL_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"integer\"}", prompt, 3, NULL, 0);
	prompt[0] = prompt[1] = prompt[2] = -1, stop[0] = stop[1] = -1; /* copies travel */
	node_compile_done d[3];
	ck_assert_int_eq(take_n(&r, d, 3), 3);
	ck_assert(!readable(&r, 0));
	ck_assert_int_eq(node_compiles_pending(r.q), 0);
	node_compile_done none;
	ck_assert_int_eq(node_compiles_take(r.q, &none), 0);
	const uint64_t ids[3] = {11, 12, 13};
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(d[i].id, ids[i]);
		ck_assert_int_eq(d[i].r.n_prompt, 3);
		ck_assert_int_eq(d[i].r.prompt[0], 5);
		ck_assert_int_eq(d[i].r.prompt[2], 7);
		ck_assert_int_eq(d[i].r.max_new_tokens, 8);
	}
	ck_assert_msg(d[0].rc == 0 && d[0].r.matcher, "%s", d[0].err);
	ck_assert_int_eq(d[0].r.lists.n_stop_ids, 2);
	ck_assert_int_eq(d[0].r.lists.stop_ids[1], 10);
	ck_assert_int_ne(d[1].rc, 0);
	ck_assert_ptr_null(d[1].r.matcher);
	ck_assert_msg(strlen(d[1].err) > 0, "a refused constraint says why");
	ck_assert_msg(d[2].rc == 0 && d[2].r.matcher, "%s", d[2].err);
	for (int i = 0; i < 3; i++)
		node_compile_done_free(&d[i]);
	rig_close(&r);
}
END_TEST

static int match_odd(uint64_t id, void *arg)
{
	(void)arg;
	return id & 1;
}

START_TEST(cancelled_never_come_back)
{
	rig r;
	rig_open(&r);
	int32_t prompt[1] = {5};
	for (uint64_t id = 1; id <= 8; id++)
		submit(&r, id, SL_CONSTRAINT_REGEX, id % 3 ? "[a-c]+x" : "q*", prompt, 1, NULL, 0);
	node_compiles_cancel_if(r.q, match_odd, NULL); /* waiting, compiling or finished */
	node_compile_done d[8];
	ck_assert_int_eq(take_n(&r, d, 4), 4);
	for (int i = 0; i < 4; i++) {
		ck_assert_uint_eq(d[i].id, (uint64_t)(2 * i + 2));
		node_compile_done_free(&d[i]);
	}
	for (int tries = 0; tries < 600 && node_compiles_pending(r.q); tries++)
		readable(&r, 100);
	ck_assert_int_eq(node_compiles_pending(r.q), 0);
	ck_assert_int_eq(node_compiles_take(r.q, &d[0]), 0);
	/* work left behind at destroy is freed (valgrind) */
	for (uint64_t id = 20; id < 24; id++)
		submit(&r, id, SL_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\"}", prompt, 1, NULL, 0);
	rig_close(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("compiles");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, compiles_come_back_in_order);
	tcase_add_test(tc, cancelled_never_come_back);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
