/*
 * test_stall.c — the coordinator acts on a group's progress counters
 * (--stall-ms, docs/operations.md): a group whose heartbeats keep coming
 * while one step's progress stands still for longer than the bound gets
 * no new work and its requests move to another group (issue 39: a leader
 * in a partitioned step keeps sending Loads from its heartbeat thread, so
 * silence never tells); one whose counter moves slowly but steadily is
 * left alone however long its step runs; a stalled group that moves again
 * takes work again. The coordinator runs in-process
 * (tests/unit/coord_inproc.h); the fake groups' Loads carry the step
 * clock (in_step_ms) the bound is measured on, so nothing here depends on
 * how fast the test runs.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "unit/coord_inproc.h"

#define STALL_MS 2000

static char g_err[SL_ERRLEN];

/* A heartbeat from sock: `steps` ended, the running one in_step_ms old
 * (0: none runs), its progress counter at `progress`. */
static void beat(ci_env *e, void *sock, long steps, long in_step_ms, long progress)
{
	Shardline__Node__Load l = SHARDLINE__NODE__LOAD__INIT;
	l.has_running = l.has_waiting = l.has_kv_free = 1;
	l.running = in_step_ms > 0;
	l.kv_free = 4000;
	l.has_steps = l.has_in_step_ms = l.has_progress = 1;
	l.steps = (uint64_t)steps;
	l.in_step_ms = in_step_ms;
	l.progress = (uint64_t)progress;
	Shardline__Node__NodeMsg m = SHARDLINE__NODE__NODE_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_HEARTBEAT;
	m.heartbeat = &l;
	ck_assert_int_eq(ci_send(sock, &m.base), 0);
	ci_pump(e);
}

/* What sock got since the last call: the req_id of the last Enqueue and
 * of the last Cancel (0: none). */
static void got(void *sock, uint64_t *enq, uint64_t *cancel)
{
	size_t n;
	void *p;
	*enq = *cancel = 0;
	while ((p = ci_recv(sock, &n))) {
		Shardline__Node__CoordMsg *m = shardline__node__coord_msg__unpack(NULL, n, p);
		free(p);
		if (m && m->msg_case == SHARDLINE__NODE__COORD_MSG__MSG_ENQUEUE)
			*enq = m->enqueue->req_id;
		if (m && m->msg_case == SHARDLINE__NODE__COORD_MSG__MSG_CANCEL)
			*cancel = m->cancel->req_id;
		if (m)
			shardline__node__coord_msg__free_unpacked(m, NULL);
	}
}

static void submit(ci_env *e, uint64_t tag)
{
	Shardline__Client__Submit sub = SHARDLINE__CLIENT__SUBMIT__INIT;
	sub.has_tag = sub.has_prompt = sub.has_max_tokens = 1;
	sub.tag = tag;
	sub.prompt = (ProtobufCBinaryData){5, (uint8_t *)"hello"};
	sub.max_tokens = 4;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT;
	q.submit = &sub;
	ck_assert_int_eq(ci_send(e->client, &q.base), 0);
	ci_pump(e);
}

static coord_group *group_named(coord *c, const char *name)
{
	for (int i = 0; i < c->n_groups; i++)
		if (!strcmp(c->groups[i]->name, name))
			return c->groups[i];
	return NULL;
}

/* Two groups, each running one request in a step that lasts 20 s on its
 * own clock: "still"'s counter stops at the step's start, "slow"'s moves
 * once every 1.5 s (under the bound, slow but steady). */
START_TEST(test_stall_moves_work_off_a_still_group)
{
	ci_env e;
	uint64_t enq, cancel, enq2, cancel2;
	ck_assert_msg(ci_create(&e, "tests/data/llama2-small/tokenizer.json", NULL, g_err,
				sizeof g_err) == 0, "%s", g_err);
	e.c->o.stall_ms = STALL_MS;
	void *slow = ci_dealer(&e, "ci-node-slow", "inproc://ci-nodes");
	ck_assert_ptr_nonnull(slow);
	ck_assert_int_eq(ci_register_as(&e, e.node, "still", 1), 0);
	submit(&e, 1);
	got(e.node, &enq, &cancel);
	uint64_t on_still = enq;
	ck_assert_msg(on_still != 0, "the first request did not reach 'still'");
	ck_assert_int_eq(ci_register_as(&e, slow, "slow", 1), 0);
	submit(&e, 2);
	got(slow, &enq, &cancel);
	uint64_t on_slow = enq;
	ck_assert_msg(on_slow != 0, "the second request did not reach 'slow'");

	coord_group *still = group_named(e.c, "still"), *sg = group_named(e.c, "slow");
	long progress_slow = 7;
	for (long t = 0; t <= 20000; t += 250) {
		if (t % 1500 == 0)
			progress_slow++;
		beat(&e, slow, 3, t + 1, progress_slow);
		ck_assert_msg(!sg->stalled, "'slow' (progress %ld at %ld ms into its step) was declared "
			      "stalled", progress_slow, t + 1);
		if (t <= STALL_MS) { /* up to the bound: nothing happens to 'still' */
			beat(&e, e.node, 5, t + 1, 40);
			ck_assert_msg(!still->stalled, "'still' stalled at %ld ms, bound %d", t + 1, STALL_MS);
			got(e.node, &enq, &cancel);
			ck_assert_msg(cancel == 0, "'still' lost its request before the bound");
		} else if (t == STALL_MS + 250) {
			beat(&e, e.node, 5, t + 1, 40);
			ck_assert_msg(still->stalled, "'still' (progress 40 for %ld ms) not stalled", t + 1);
		}
	}
	/* 'still's request moved to 'slow', and 'still' was told to drop it */
	got(e.node, &enq, &cancel);
	got(slow, &enq2, &cancel2);
	ck_assert_msg(cancel == on_still, "'still' got no Cancel for its request");
	ck_assert_msg(enq2 == on_still, "the request did not move to 'slow'");
	coord_req *r = coord_req_find(e.c, on_still);
	ck_assert_msg(r && r->group == sg, "the moved request is not assigned to 'slow'");
	r = coord_req_find(e.c, on_slow);
	ck_assert_msg(r && r->group == sg, "'slow' lost its own request");
	ck_assert_int_eq(still->assigned, 0);

	/* new work passes 'still' by, though it is idle and 'slow' is not */
	submit(&e, 3);
	got(e.node, &enq, &cancel);
	got(slow, &enq2, &cancel2);
	ck_assert_msg(enq == 0 && enq2 != 0, "a new request went to the stalled group");

	/* 'still''s step ends: it takes work again */
	beat(&e, e.node, 6, 0, 41);
	ck_assert_msg(!still->stalled, "'still' moved again and is still marked stalled");
	for (int i = 0; i < 3; i++)
		submit(&e, 4 + i);
	got(e.node, &enq, &cancel);
	ck_assert_msg(enq != 0, "'still' got no new work after it moved again");
	zmq_close(slow);
	ci_destroy(&e);
}
END_TEST

/* With no other group to take them, a stalled group keeps its requests
 * (moving them would only end them after the admission timeout); they
 * move as soon as a group that can take them registers. --stall-ms 0
 * turns the check off. */
START_TEST(test_stall_alone_keeps_its_work)
{
	ci_env e;
	uint64_t enq, cancel;
	ck_assert_msg(ci_create(&e, "tests/data/llama2-small/tokenizer.json", NULL, g_err,
				sizeof g_err) == 0, "%s", g_err);
	e.c->o.stall_ms = 0;
	ck_assert_int_eq(ci_register_as(&e, e.node, "still", 1), 0);
	submit(&e, 1);
	got(e.node, &enq, &cancel);
	uint64_t id = enq;
	ck_assert(id != 0);
	coord_group *still = group_named(e.c, "still");
	beat(&e, e.node, 0, 1, 9);
	beat(&e, e.node, 0, 60000, 9);
	ck_assert_msg(!still->stalled, "--stall-ms 0: a group was declared stalled");

	e.c->o.stall_ms = STALL_MS;
	beat(&e, e.node, 0, 60000 + STALL_MS + 1, 9);
	ck_assert_msg(still->stalled, "not stalled after the bound");
	got(e.node, &enq, &cancel);
	ck_assert_msg(cancel == 0, "the only group's request was taken off it");
	coord_req *r = coord_req_find(e.c, id);
	ck_assert_msg(r && r->state == REQ_ASSIGNED && r->group == still, "the request left its group");

	void *other = ci_dealer(&e, "ci-node-2", "inproc://ci-nodes");
	ck_assert_ptr_nonnull(other);
	ck_assert_int_eq(ci_register_as(&e, other, "other", 1), 0);
	ck_assert_int_eq(coord_group_unload_stalled(e.c, still), 1); /* what the tick does */
	ci_pump(&e);
	uint64_t enq2, cancel2;
	got(e.node, &enq, &cancel);
	got(other, &enq2, &cancel2);
	ck_assert_msg(cancel == id && enq2 == id, "the request did not move to the new group");
	zmq_close(other);
	ci_destroy(&e);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("stall");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_stall_moves_work_off_a_still_group);
	tcase_add_test(tc, test_stall_alone_keeps_its_work);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
