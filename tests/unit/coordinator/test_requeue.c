/*
 * test_requeue.c — a request re-queued off a lost group never goes back
 * to that group (issue 39: a group lost while busy registered again and
 * got the same request, lost it again, and the client got a 503), and it
 * goes to another group of its model as before. The coordinator runs
 * in-process (tests/unit/coord_inproc.h); the loss is coord_group_lost,
 * what the coordinator's tick calls after 3 silent heartbeats.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "unit/coord_inproc.h"

static char g_err[SL_ERRLEN];

/* The req_id of the next Enqueue sock got; 0: none came. */
static uint64_t next_enqueue(void *sock)
{
	size_t n;
	void *p;
	uint64_t id = 0;
	while (!id && (p = ci_recv(sock, &n))) {
		Shardline__Node__CoordMsg *m = shardline__node__coord_msg__unpack(NULL, n, p);
		free(p);
		if (m && m->msg_case == SHARDLINE__NODE__COORD_MSG__MSG_ENQUEUE)
			id = m->enqueue->req_id;
		if (m)
			shardline__node__coord_msg__free_unpacked(m, NULL);
	}
	return id;
}

static coord_group *group_named(coord *c, const char *name, uint64_t session)
{
	for (int i = 0; i < c->n_groups; i++)
		if (!strcmp(c->groups[i]->name, name) && c->groups[i]->session == session)
			return c->groups[i];
	return NULL;
}

START_TEST(test_requeue_skips_the_failed_group)
{
	ci_env e;
	ck_assert_msg(ci_create(&e, "tests/data/llama2-small/tokenizer.json", NULL, g_err,
				sizeof g_err) == 0, "%s", g_err);
	ck_assert_int_eq(ci_register_as(&e, e.node, "host:1", 1), 0);
	Shardline__Client__Submit sub = SHARDLINE__CLIENT__SUBMIT__INIT;
	sub.has_tag = sub.has_prompt = sub.has_max_tokens = 1;
	sub.tag = 3;
	sub.prompt = (ProtobufCBinaryData){5, (uint8_t *)"hello"};
	sub.max_tokens = 4;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT;
	q.submit = &sub;
	ck_assert_int_eq(ci_send(e.client, &q.base), 0);
	ci_pump(&e);
	uint64_t id = next_enqueue(e.node);
	ck_assert_msg(id != 0, "no Enqueue reached the first group");

	/* lost (silent while busy), then the same leader registers again */
	coord_group_lost(e.c, group_named(e.c, "host:1", 1), "silent for 3000 ms");
	ck_assert_int_eq(ci_register_as(&e, e.node, "host:1", 2), 0);
	ci_pump(&e);
	ck_assert_msg(next_enqueue(e.node) == 0, "the request went back to the group it was lost on");
	coord_req *r = coord_req_find(e.c, id);
	ck_assert_msg(r && r->state == REQ_QUEUED, "the request should wait in the queue");

	/* another group of the model takes it */
	void *other = ci_dealer(&e, "ci-node-2", "inproc://ci-nodes");
	ck_assert_ptr_nonnull(other);
	ck_assert_int_eq(ci_register_as(&e, other, "host:2", 7), 0);
	ci_pump(&e);
	ck_assert_msg(next_enqueue(other) == id, "the other group did not get the request");
	ck_assert_msg(next_enqueue(e.node) == 0, "the failed group got it too");
	zmq_close(other);
	ci_destroy(&e);
}
END_TEST

/* With only the failed group left, the request ends after the admission
 * timeout naming it (HTTP 503), rather than waiting for its deadline. */
START_TEST(test_requeue_only_failed_group_ends)
{
	ci_env e;
	ck_assert_msg(ci_create(&e, "tests/data/llama2-small/tokenizer.json", NULL, g_err,
				sizeof g_err) == 0, "%s", g_err);
	e.c->o.admission_timeout_ms = 0;
	ck_assert_int_eq(ci_register_as(&e, e.node, "host:1", 1), 0);
	Shardline__Client__Submit sub = SHARDLINE__CLIENT__SUBMIT__INIT;
	sub.has_tag = sub.has_prompt = sub.has_max_tokens = 1;
	sub.tag = 4;
	sub.prompt = (ProtobufCBinaryData){5, (uint8_t *)"hello"};
	sub.max_tokens = 4;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT;
	q.submit = &sub;
	ck_assert_int_eq(ci_send(e.client, &q.base), 0);
	ci_pump(&e);
	uint64_t id = next_enqueue(e.node);
	ck_assert(id != 0);
	coord_group_lost(e.c, group_named(e.c, "host:1", 1), "silent for 3000 ms");
	ck_assert_int_eq(ci_register_as(&e, e.node, "host:1", 2), 0);
	ci_pump(&e);
	ck_assert_msg(coord_req_find(e.c, id) == NULL, "the request should have ended");
	int found = 0;
	Shardline__Client__Reply *rep;
	while ((rep = ci_client_next(&e))) {
		if (rep->msg_case == SHARDLINE__CLIENT__REPLY__MSG_DONE && rep->done->error &&
		    strstr(rep->done->error, "but host:1, which was lost with this request"))
			found = 1;
		shardline__client__reply__free_unpacked(rep, NULL);
	}
	ck_assert_msg(found, "no Done naming the failed group");
	ci_destroy(&e);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("requeue");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_requeue_skips_the_failed_group);
	tcase_add_test(tc, test_requeue_only_failed_group_ends);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
