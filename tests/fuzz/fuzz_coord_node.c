/*
 * fuzz_coord_node.c — the coordinator's node handler (coord_on_node:
 * Register, heartbeat Load, TokenBatch with its log-probs, unknown and
 * finished request ids) driven in-process. Before the script runs, the
 * client has three requests running on the registered group (ids 1, 2
 * and 3: streamed with stop strings, not streamed with log-probs, streamed
 * with top log-probs), so node frames of the script (coord_fuzz.h,
 * operations 1 and 2) reach live requests. Replies are checked as in
 * fuzz_coord_client.c.
 */
#include "coord_fuzz.h"

static void submit(cf_state *s, uint64_t tag, int stream, int top_logprobs, const char *stop)
{
	ProtobufCBinaryData st[2] = {{1, (uint8_t *)"\n"}, {stop ? strlen(stop) : 0, (uint8_t *)stop}};
	Shardline__Client__Submit sub = SHARDLINE__CLIENT__SUBMIT__INIT;
	sub.has_tag = sub.has_prompt = sub.has_max_tokens = sub.has_stream = 1;
	sub.tag = tag;
	sub.prompt = (ProtobufCBinaryData){5, (uint8_t *)"Hello"};
	sub.max_tokens = 64;
	sub.stream = stream;
	sub.n_stop = stop ? 2 : 0;
	sub.stop = st;
	sub.has_logprobs = sub.has_top_logprobs = top_logprobs >= 0;
	sub.logprobs = 1;
	sub.top_logprobs = top_logprobs > 0 ? top_logprobs : 0;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT;
	q.submit = &sub;
	size_t n = protobuf_c_message_get_packed_size(&q.base);
	uint8_t *buf = malloc(n);
	protobuf_c_message_pack(&q.base, buf);
	cf_note_submit(s, buf, n);
	ci_send_raw(s->e.client, buf, n);
	free(buf);
	cf_turn(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	cf_state s;
	cf_begin(&s, NULL);
	submit(&s, 1, 1, -1, "\x9f\x98");
	submit(&s, 2, 0, 0, NULL);
	submit(&s, 3, 1, 3, "ab");
	FUZZ_CHECK(s.n_enq == 3, "the prelude's requests did not all reach the node (%d)", s.n_enq);
	cf_play(&s, data, size);
	cf_end(&s);
	return 0;
}
