/*
 * test_sampling_fields.c — the one sampling struct (common/sampling.h)
 * and its protobuf mapping (proto/sampling_pb.c): every table field has a
 * protobuf field of its name and kind in client.proto's Sampling or the
 * Submit / Enqueue around it; values survive Submit and Enqueue bytes
 * both ways; absent fields are the defaults; and the range check names
 * the field and its range, refusing NaN. The list-valued options
 * (sl_token_lists: logit_bias, stop_token_ids) survive Enqueue bytes, a
 * bias list whose two halves differ in length is refused, and their check
 * names what is wrong (id outside the vocabulary, repeated, bias out of
 * [-100, 100] or NaN, too many).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sampling.h"
#include "common/sl.h"
#include "proto/client.pb-c.h"
#include "proto/node.pb-c.h"
#include "proto/sampling_pb.h"

START_TEST(every_field_maps_in_both_messages)
{
	char err[SL_ERRLEN] = "";
	ck_assert_msg(sl_sampling_pb_check(&shardline__client__sampling__descriptor,
					   &shardline__client__submit__descriptor, err, sizeof err) == 0,
		      "Submit: %s", err);
	ck_assert_msg(sl_sampling_pb_check(&shardline__client__sampling__descriptor,
					   &shardline__node__enqueue__descriptor, err, sizeof err) == 0,
		      "Enqueue: %s", err);
	/* a message without them is refused, naming the first field */
	ck_assert_int_eq(sl_sampling_pb_check(&shardline__client__cancel__descriptor,
					      &shardline__client__cancel__descriptor, err, sizeof err),
			 SL_EINVAL);
	ck_assert_msg(strstr(err, "temperature"), "'%s' does not name temperature", err);
}
END_TEST

/* Every field off its default (seed beyond 2^53: all 64 bits must pass). */
static sl_sampling odd_values(void)
{
	sl_sampling s = {.temperature = 0.7f, .top_k = 40, .top_p = 0.9f,
			 .seed = 0xFEDCBA9876543211ull, .min_p = 0.05f, .repetition_penalty = 1.3f,
			 .presence_penalty = -0.5f, .frequency_penalty = 1.25f, .logprobs = 1,
			 .top_logprobs = 3};
	return s;
}

static void expect_same(const sl_sampling *a, const sl_sampling *b, const char *what)
{
	for (int i = 0; i < sl_sampling_n_fields; i++) {
		const sl_sampling_field *f = &sl_sampling_fields[i];
		ck_assert_msg(!memcmp((const char *)a + f->offset, (const char *)b + f->offset,
				      f->type == SL_SF_UINT64 ? 8 : 4),
			      "%s: %s differs (%g vs %g)", what, f->name, sl_sampling_get(a, f),
			      sl_sampling_get(b, f));
	}
}

START_TEST(enqueue_round_trip)
{
	sl_sampling in = odd_values(), out;
	Shardline__Client__Sampling sp = SHARDLINE__CLIENT__SAMPLING__INIT;
	Shardline__Node__Enqueue q = SHARDLINE__NODE__ENQUEUE__INIT;
	q.sampling = &sp;
	sl_sampling_to_pb(&in, &sp.base, &q.base);
	ck_assert(q.has_logprobs && q.logprobs && q.has_top_logprobs && q.top_logprobs == 3);
	ck_assert(sp.has_seed && sp.seed == in.seed);
	size_t n = shardline__node__enqueue__get_packed_size(&q);
	uint8_t *buf = malloc(n);
	shardline__node__enqueue__pack(&q, buf);
	Shardline__Node__Enqueue *back = shardline__node__enqueue__unpack(NULL, n, buf);
	ck_assert_ptr_nonnull(back);
	sl_sampling_from_pb(&out, &back->sampling->base, &back->base);
	expect_same(&in, &out, "Enqueue");
	shardline__node__enqueue__free_unpacked(back, NULL);
	free(buf);
}
END_TEST

START_TEST(submit_defaults_and_implication)
{
	sl_sampling s, d;
	sl_sampling_default(&d);
	Shardline__Client__Submit m = SHARDLINE__CLIENT__SUBMIT__INIT;
	sl_sampling_from_pb(&s, NULL, &m.base); /* no Sampling at all */
	expect_same(&s, &d, "absent");
	ck_assert(d.top_p == 1 && d.repetition_penalty == 1 && d.temperature == 0);
	Shardline__Client__Sampling sp = SHARDLINE__CLIENT__SAMPLING__INIT;
	sp.has_top_k = 1, sp.top_k = 7;
	m.sampling = &sp;
	m.has_top_logprobs = 1, m.top_logprobs = 2; /* logprobs not set: implied */
	sl_sampling_from_pb(&s, &sp.base, &m.base);
	ck_assert_int_eq(s.top_k, 7);
	ck_assert_int_eq(s.top_logprobs, 2);
	ck_assert_int_eq(s.logprobs, 1);
	ck_assert(s.top_p == 1 && s.repetition_penalty == 1); /* the rest: defaults */
}
END_TEST

static void expect_refused(sl_sampling s, int vocab, const char *want)
{
	char err[SL_ERRLEN] = "";
	ck_assert_int_eq(sl_sampling_check(&s, vocab, err, sizeof err), SL_EINVAL);
	ck_assert_msg(strstr(err, want), "'%s' does not say '%s'", err, want);
}

START_TEST(range_check_names_field_and_range)
{
	char err[SL_ERRLEN] = "";
	sl_sampling ok = odd_values();
	ck_assert_msg(sl_sampling_check(&ok, 100, err, sizeof err) == 0, "%s", err);
	sl_sampling d = SL_SAMPLING_DEFAULTS;
	ck_assert_msg(sl_sampling_check(&d, 100, err, sizeof err) == 0, "%s", err);
	sl_sampling s = d;
	s.temperature = 101;
	expect_refused(s, 100, "temperature must be in [0, 100], got 101");
	s = d, s.top_k = 101;
	expect_refused(s, 100, "top_k must be in [0, 100], got 101");
	s = d, s.top_k = -3;
	expect_refused(s, 100, "top_k must be in [0, 100], got -3");
	s = d, s.top_p = 0;
	expect_refused(s, 100, "top_p must be in (0, 1], got 0");
	s = d, s.min_p = NAN;
	expect_refused(s, 100, "min_p must be in [0, 1], got nan");
	s = d, s.repetition_penalty = 0;
	expect_refused(s, 100, "repetition_penalty must be in (0, 10], got 0");
	s = d, s.presence_penalty = 2.5f;
	expect_refused(s, 100, "presence_penalty must be in [-2, 2], got 2.5");
	s = d, s.frequency_penalty = -3;
	expect_refused(s, 100, "frequency_penalty must be in [-2, 2], got -3");
	s = d, s.top_logprobs = 21;
	expect_refused(s, 100, "top_logprobs must be in [0, 20], got 21");
}
END_TEST

START_TEST(token_lists_round_trip_and_check)
{
	static const int32_t ids[] = {5, 900, 7}, stop[] = {2, 0};
	static const float bias[] = {-100, 3.25f, 100};
	sl_token_lists t = {ids, bias, 3, stop, 2}, u;
	Shardline__Client__Sampling sp = SHARDLINE__CLIENT__SAMPLING__INIT;
	sl_token_lists_to_pb(&t, &sp);
	size_t n = protobuf_c_message_get_packed_size(&sp.base);
	uint8_t *b = malloc(n);
	protobuf_c_message_pack(&sp.base, b);
	Shardline__Client__Sampling *back = shardline__client__sampling__unpack(NULL, n, b);
	char err[SL_ERRLEN] = "";
	ck_assert_ptr_nonnull(back);
	ck_assert_int_eq(sl_token_lists_from_pb(&u, back, err, sizeof err), 0);
	ck_assert_int_eq(u.n_bias, 3);
	ck_assert_int_eq(u.n_stop_ids, 2);
	for (int i = 0; i < 3; i++)
		ck_assert(u.bias_ids[i] == ids[i] && u.bias[i] == bias[i]);
	ck_assert(u.stop_ids[0] == 2 && u.stop_ids[1] == 0);
	ck_assert_int_eq(sl_token_lists_check(&u, 1000, SL_SAMPLING_MAX_STOP_TOKEN_IDS, err, sizeof err), 0);
	back->n_logit_bias = 2; /* ids and values of different lengths */
	ck_assert_int_eq(sl_token_lists_from_pb(&u, back, err, sizeof err), SL_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "logit_bias"));
	shardline__client__sampling__free_unpacked(back, NULL);
	free(b);
	ck_assert_int_eq(sl_token_lists_from_pb(&u, NULL, err, sizeof err), 0);
	ck_assert_int_eq(u.n_bias + u.n_stop_ids, 0);

	struct { sl_token_lists t; const char *want; } bad[] = {
		{{ids, bias, 3, NULL, 0}, "token 900 is outside the vocabulary [0, 800)"},
		{{(const int32_t[]){4, 4}, bias, 2, NULL, 0}, "logit_bias: token 4 given twice"},
		{{ids, (const float[]){1, 100.5f, 0}, 3, NULL, 0}, "must be in [-100, 100], got 100.5"},
		{{ids, (const float[]){1, NAN, 0}, 3, NULL, 0}, "the bias of token 900"},
		{{NULL, NULL, 0, (const int32_t[]){1, 1}, 2}, "stop_token_ids: token 1 given twice"},
		{{NULL, NULL, 0, (const int32_t[]){-1}, 1}, "stop_token_ids: token -1 is outside"},
		{{NULL, NULL, 301, NULL, 0}, "logit_bias: 301 entries, at most 300"},
		{{NULL, NULL, 0, stop, 33}, "stop_token_ids: 33 ids, at most 32"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int vocab = i == 0 ? 800 : 1000;
		int rc = sl_token_lists_check(&bad[i].t, vocab, SL_SAMPLING_MAX_STOP_TOKEN_IDS, err,
					      sizeof err);
		ck_assert_msg(rc == SL_EINVAL && strstr(err, bad[i].want), "case %zu: rc %d, '%s', want "
			      "'%s'", i, rc, err, bad[i].want);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sampling_fields");
	TCase *tc = tcase_create("sampling_fields");
	tcase_add_test(tc, every_field_maps_in_both_messages);
	tcase_add_test(tc, enqueue_round_trip);
	tcase_add_test(tc, submit_defaults_and_implication);
	tcase_add_test(tc, range_check_names_field_and_range);
	tcase_add_test(tc, token_lists_round_trip_and_check);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
