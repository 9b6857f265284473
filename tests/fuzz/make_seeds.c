/*
 * make_seeds.c — the seeds of the binary-message fuzz targets, packed by
 * the real packers so they get past the first checks: step plans
 * (node_plan_pack) into tests/fuzz/corpus/plan/, and scripts of protobuf
 * messages (protobuf-c) for the coordinator harnesses (coord_fuzz.h). `make fuzz-seeds` builds
 * and runs it from the repository root; tests/fuzz/make_seeds.py makes
 * the seeds that come from test data files.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "node/plan.h"
#include "proto/client.pb-c.h"
#include "proto/node.pb-c.h"
#include "common/sl.h"

static void put(const char *target, const char *name, const void *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof path, "tests/fuzz/corpus/%s", target);
	if (mkdir(path, 0755) && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof path, "tests/fuzz/corpus/%s/%s", target, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
		perror(path);
		exit(1);
	}
}

static void put_plan(const char *name, const node_plan *p)
{
	void *buf = NULL;
	size_t cap = 0, bytes = 0;
	if (node_plan_pack(p, &buf, &cap, &bytes)) {
		fprintf(stderr, "make_seeds: packing plan %s failed\n", name);
		exit(1);
	}
	put("plan", name, buf, bytes);
	free(buf);
}

/* Two sequences: a prefill of 3 tokens and a decode of 1, both sampled;
 * then with micro-batches, penalty history, a constrained row's mask. */
static void plan_seeds(void)
{
	static const int32_t tokens[] = {1, 15, 27, 9}, positions[] = {0, 1, 2, 7};
	static const int32_t slots[] = {0, 1, 2, 23}, q_start[] = {0, 3}, q_len[] = {3, 1};
	static const int32_t kv_len[] = {3, 8}, blocks[] = {0, -1, 5, 6}, rows[] = {2, 3};
	static const int32_t sample_rows[] = {0, 1}, micro1[] = {0, 2}, micro2[] = {0, 1, 2};
	static const int64_t sample_pos[] = {3, 8};
	static const int32_t off[] = {0, 2, 3}, ids[] = {15, 27, 9}, n_gen[] = {0, 1, 2};
	static const int32_t in_prompt[] = {1, 1, 0};
	kern_sample_params sp[2] = {
		{.temperature = 0.7f, .top_k = 40, .top_p = 0.9f, .seed = 42, .logprobs = 1,
		 .top_logprobs = 2},
		{.temperature = 0, .top_p = 1, .repetition_penalty = 1.1f,
		 .presence_penalty = 0.5f},
	};
	node_plan p = {
		.cmd = NODE_PLAN_STEP,
		.b = {.tokens = tokens, .positions = positions, .slots = slots, .n_tokens = 4,
		      .q_start = q_start, .q_len = q_len, .kv_len = kv_len, .n_seqs = 2,
		      .block_tables = blocks, .max_blocks = 2, .block_tokens = 4, .max_q_len = 3,
		      .max_kv_len = 8},
		.n_rows = 2, .rows = rows, .n_sample = 2, .sample_rows = sample_rows,
		.sampling = sp, .sample_pos = sample_pos, .n_micro = 1, .micro_seq0 = micro1,
	};
	put_plan("step", &p);
	p.n_micro = 2;
	p.micro_seq0 = micro2;
	p.want_logits = 1;
	put_plan("step_two_micro", &p);
	p.hist = (kern_token_hist){off, ids, n_gen, in_prompt};
	p.n_hist = 3;
	put_plan("step_history", &p);
	static const int32_t boff[] = {0, 0, 2}, bids[] = {9, 2};
	static const float bval[] = {-100, -INFINITY};
	p.bias = (kern_logit_bias){boff, bids, bval};
	p.n_bias = 2;
	put_plan("step_bias", &p);
	/* the decode row constrained: its mask over a 40-token vocabulary */
	static const int32_t mask_rows[] = {1};
	static const uint32_t masks[] = {0x00ff00f0u, 0x0000000fu};
	p.n_mask = 1, p.mask_words = 2, p.mask_rows = mask_rows, p.masks = masks;
	put_plan("step_mask", &p);
	node_plan stop = {.cmd = NODE_PLAN_STOP};
	put_plan("stop", &stop);
}

/* ---- coordinator scripts (tests/fuzz/coord_fuzz.h's format) ---- */

typedef struct script {
	uint8_t p[4096];
	size_t n;
} script;

static void sc_bytes(script *s, const void *p, size_t n)
{
	if (s->n + n > sizeof s->p) {
		fprintf(stderr, "make_seeds: script too long\n");
		exit(1);
	}
	memcpy(s->p + s->n, p, n);
	s->n += n;
}

static void sc_u8(script *s, int v)
{
	uint8_t b = (uint8_t)v;
	sc_bytes(s, &b, 1);
}

/* Operation 3 (client frame, two-byte length) or 1 (node frame). */
static void sc_msg(script *s, int op, const ProtobufCMessage *m)
{
	uint8_t buf[2048];
	size_t n = protobuf_c_message_get_packed_size(m);
	if (n > sizeof buf)
		exit(1);
	protobuf_c_message_pack(m, buf);
	sc_u8(s, op);
	if (op == 3) {
		sc_u8(s, (int)(n & 255));
		sc_u8(s, (int)(n >> 8));
	} else {
		sc_u8(s, (int)n);
	}
	sc_bytes(s, buf, n);
}

static void sc_request(script *s, Shardline__Client__Request *q) { sc_msg(s, 3, &q->base); }

/* Operation 2: tokens for the k-th Enqueue; ids as given. */
static void sc_tokens(script *s, int k, const int *ids, int n, int finish, int lp)
{
	sc_u8(s, 2);
	sc_u8(s, k);
	sc_u8(s, n);
	for (int i = 0; i < n; i++) {
		sc_u8(s, (ids[i] + 2) & 255); /* the harness maps v -> v - 2 */
		sc_u8(s, (ids[i] + 2) >> 8);
	}
	sc_u8(s, finish);
	sc_u8(s, lp);
}

/* llama2-small's byte tokens: <0xNN> is id 3 + NN. */
#define BYTE_ID(b) (3 + (b))

static Shardline__Client__Request submit_req(Shardline__Client__Submit *sub, uint64_t tag)
{
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	sub->has_tag = 1;
	sub->tag = tag;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT;
	q.submit = sub;
	return q;
}

static void coord_client_seeds(void)
{
	static const int emoji[] = {BYTE_ID(0xF0), BYTE_ID(0x9F), BYTE_ID(0x98), BYTE_ID(0x80)};
	static const int word[] = {260, 261, 262, 270, 280};
	script s = {0};
	/* stop strings: one starting inside U+1F600, one ordinary */
	ProtobufCBinaryData stops[2] = {{3, (uint8_t *)"\x9f\x98\x80"}, {2, (uint8_t *)"lo"}};
	Shardline__Client__Submit sub = SHARDLINE__CLIENT__SUBMIT__INIT;
	sub.has_prompt = sub.has_max_tokens = sub.has_stream = 1;
	sub.prompt = (ProtobufCBinaryData){2, (uint8_t *)"hi"};
	sub.max_tokens = 8;
	sub.stream = 1;
	sub.n_stop = 2;
	sub.stop = stops;
	Shardline__Client__Request q = submit_req(&sub, 1);
	sc_request(&s, &q);
	sc_tokens(&s, 0, emoji, 4, 0, 0);
	sc_tokens(&s, 0, word, 5, 1, 0);
	put("coord_client", "stream_stops", s.p, s.n);

	/* the first token holds no text yet when stop strings are searched */
	s.n = 0;
	sc_request(&s, &q);
	for (int i = 0; i < 4; i++)
		sc_tokens(&s, 0, &emoji[i], 1, 0, 0);
	sc_tokens(&s, 0, word, 0, 2, 0);
	put("coord_client", "stop_before_text", s.p, s.n);

	/* not streamed, prompt ids, sampling, log-probs with alternatives */
	s.n = 0;
	int32_t pids[3] = {1, 270, 280};
	Shardline__Client__Sampling sp = SHARDLINE__CLIENT__SAMPLING__INIT;
	sp.has_temperature = sp.has_top_k = sp.has_top_p = sp.has_seed = sp.has_min_p = 1;
	sp.temperature = 0.7f, sp.top_k = 5, sp.top_p = 0.9f, sp.seed = 9, sp.min_p = 0.05f;
	sp.has_presence_penalty = sp.has_repetition_penalty = 1;
	sp.presence_penalty = 0.5f, sp.repetition_penalty = 1.1f;
	Shardline__Client__Submit sub2 = SHARDLINE__CLIENT__SUBMIT__INIT;
	sub2.n_prompt_ids = 3;
	sub2.prompt_ids = pids;
	sub2.sampling = &sp;
	sub2.has_stream = sub2.has_logprobs = sub2.has_top_logprobs = sub2.has_max_tokens = 1;
	sub2.stream = 0, sub2.logprobs = 1, sub2.top_logprobs = 2, sub2.max_tokens = 6;
	q = submit_req(&sub2, 2);
	sc_request(&s, &q);
	sc_tokens(&s, 0, word, 3, 0, 0);
	sc_tokens(&s, 0, word, 3, 0, 2);
	put("coord_client", "logprobs", s.p, s.n);

	/* cancel, status, drain, and frames that are not Requests */
	s.n = 0;
	sub.n_stop = 0;
	q = submit_req(&sub, 3);
	sc_request(&s, &q);
	Shardline__Client__Cancel cancel = SHARDLINE__CLIENT__CANCEL__INIT;
	cancel.has_tag = 1, cancel.tag = 3;
	Shardline__Client__Request qc = SHARDLINE__CLIENT__REQUEST__INIT;
	qc.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_CANCEL, qc.cancel = &cancel;
	sc_request(&s, &qc);
	Shardline__Client__StatusRequest st = SHARDLINE__CLIENT__STATUS_REQUEST__INIT;
	Shardline__Client__Request qs = SHARDLINE__CLIENT__REQUEST__INIT;
	qs.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_STATUS, qs.status = &st;
	sc_request(&s, &qs);
	Shardline__Client__Drain dr = SHARDLINE__CLIENT__DRAIN__INIT;
	Shardline__Client__Request qd = SHARDLINE__CLIENT__REQUEST__INIT;
	qd.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_DRAIN, qd.drain = &dr;
	sc_request(&s, &qd);
	sc_u8(&s, 0);
	sc_u8(&s, 4);
	sc_bytes(&s, "\x0a\x02\x08", 4);
	put("coord_client", "control", s.p, s.n);
}

static void coord_node_seeds(void)
{
	static const int text[] = {260, 261, BYTE_ID(0x0A), 262, BYTE_ID(0xF0), BYTE_ID(0x9F)};
	script s = {0};
	/* the prelude's three requests (ids 1..3) answered, log-probs as asked */
	sc_tokens(&s, 0, text, 6, 0, 0);
	sc_tokens(&s, 1, text, 4, 2, 0);
	sc_tokens(&s, 2, text, 3, 0, 0);
	sc_tokens(&s, 2, text, 2, 1, 3);
	put("coord_node", "answers", s.p, s.n);

	/* heartbeat, a raw TokenBatch for ids 1 and 99, a re-register */
	s.n = 0;
	Shardline__Node__Load load = SHARDLINE__NODE__LOAD__INIT;
	load.has_running = load.has_waiting = load.has_kv_free = 1;
	load.running = 3, load.waiting = 0, load.kv_free = 100;
	Shardline__Node__NodeMsg m = SHARDLINE__NODE__NODE_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_HEARTBEAT, m.heartbeat = &load;
	sc_msg(&s, 1, &m.base);
	int32_t ids[3] = {260, 261, 2};
	Shardline__Node__SeqTokens a = SHARDLINE__NODE__SEQ_TOKENS__INIT, b = a;
	Shardline__Node__SeqTokens *seqs[2] = {&a, &b};
	a.has_req_id = a.has_finish = 1, a.req_id = 1, a.tokens = ids, a.n_tokens = 3;
	b.has_req_id = b.has_finish = 1, b.req_id = 99, b.finish = 4, b.error = "oops";
	Shardline__Node__TokenBatch tb = SHARDLINE__NODE__TOKEN_BATCH__INIT;
	tb.has_step = 1, tb.step = 5, tb.n_seqs = 2, tb.seqs = seqs, tb.load = &load;
	m.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_TOKENS, m.tokens = &tb;
	sc_msg(&s, 1, &m.base);
	Shardline__Node__Register r = SHARDLINE__NODE__REGISTER__INIT;
	r.has_protocol = r.has_session = r.has_tp = r.has_pp = r.has_kv_blocks = 1;
	r.has_block_tokens = r.has_max_pos = r.has_vocab_size = 1;
	r.protocol = 1, r.model = "m", r.name = "again", r.session = 2, r.tp = 2, r.pp = 1;
	r.kv_blocks = 64, r.block_tokens = 16, r.max_pos = 512, r.vocab_size = 300;
	m.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_REGISTER, m.register_ = &r;
	sc_msg(&s, 1, &m.base);
	put("coord_node", "raw_frames", s.p, s.n);
}

int main(void)
{
	plan_seeds();
	coord_client_seeds();
	coord_node_seeds();
	printf("seeds: plan, coord_client, coord_node written under tests/fuzz/corpus/\n");
	return 0;
}
