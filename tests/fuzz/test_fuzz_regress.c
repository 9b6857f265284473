/*
 * test_fuzz_regress.c — one test per defect the libFuzzer runs found
 * (issue 16; docs/fuzzing.md), each on the crafted input that showed it,
 * so the fix stays fixed without a fuzzer in the loop:
 *   - a vocab_size of 2^31 - 1 accepted by config.json and overflowing the
 *     vocab-parallel split in parallel/grid.c;
 *   - a positive rms_norm_eps (or rope value) below float's range, such as
 *     1e-205, accepted and stored as 0.0f, from config.json and from GGUF;
 *   - a stop string starting with a UTF-8 continuation byte cutting a
 *     character in half in the stream, and the stop search running on a
 *     NULL buffer before any text is held (coordinator/stream.c);
 *   - tokenizer.json normalizer and decoder strings that are not UTF-8
 *     making decode return text that is not UTF-8;
 * and the defects tests/fuzz's harnesses found since (each named below).
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "unit/coord_inproc.h"
#include "text/jinja/chat_template.h"
#include "text/tokenizer/tokenizer.h"
#include "text/utf8.h"
#include "unit/gguf_craft.h"
#include "parallel/grid.h"
#include "node/plan.h"
#include "common/sl.h"

static char g_err[SL_ERRLEN];

/* A minimal valid config.json with one field set to `value` (JSON text). */
static int parse_with(const char *key, const char *value, model_config *m)
{
	cJSON *root = cJSON_Parse("{\"hidden_size\": 64, \"intermediate_size\": 172,"
				  " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
				  " \"vocab_size\": 256}");
	cJSON_DeleteItemFromObjectCaseSensitive(root, key);
	cJSON_AddItemToObject(root, key, cJSON_CreateRaw(value));
	char *json = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	g_err[0] = 0;
	memset(m, 0, sizeof *m);
	int rc = model_config_parse(json, "fz/config.json", m, g_err, sizeof g_err);
	free(json);
	return rc;
}

static void expect_refused(const char *key, const char *value)
{
	model_config m;
	int rc = parse_with(key, value, &m);
	ck_assert_msg(rc == SL_EINVAL, "%s = %s: rc %d, want %d (SL_EINVAL); stored eps %g "
		      "theta %g; error: %s", key, value, rc, SL_EINVAL, (double)m.norm_eps,
		      (double)m.rope_theta, g_err);
	ck_assert_msg(strstr(g_err, "fz/config.json") && strstr(g_err, key),
		      "error \"%s\" does not name the file and %s", g_err, key);
}

/* ---- vocab_size 2147483647 ---- */

START_TEST(test_config_refuses_huge_vocab)
{
	expect_refused("vocab_size", "2147483647");
	/* every size field has a bound, as the GGUF reader's keys do */
	expect_refused("hidden_size", "2147483647");
	expect_refused("intermediate_size", "2147483647");
	expect_refused("num_hidden_layers", "2147483647");
}
END_TEST

/* The split must stay in range (or be refused) for any vocabulary an int
 * holds, whatever reaches par_shard_init. */
START_TEST(test_grid_vocab_no_overflow)
{
	const int vocabs[] = {INT_MAX, INT_MAX - 1, (1 << 30) + 1};
	for (int tp = 2; tp <= 8; tp *= 2)
		for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++)
			for (int r = 0; r < tp; r++) {
				par_grid g = {.tp = tp, .pp = 1, .tp_rank = r, .pp_rank = 0};
				par_shard s;
				memset(&s, 0, sizeof s);
				int rc = par_shard_init(&g, 2, 8, 8, 64, vocabs[v], &s, g_err,
							sizeof g_err);
				if (rc) {
					ck_assert_msg(rc == SL_EINVAL && strstr(g_err, "vocab"),
						      "tp %d vocab %d: rc %d, error \"%s\" does "
						      "not name the vocabulary", tp, vocabs[v], rc,
						      g_err);
					continue;
				}
				long long end = (long long)s.vocab0 + s.vocab;
				ck_assert_msg(s.vocab0 >= 0 && s.vocab >= 0 && end <= vocabs[v] &&
					      (long long)s.vocab_padded >= vocabs[v],
					      "tp %d rank %d vocab %d: rows [%d, +%d), padded %d",
					      tp, r, vocabs[v], s.vocab0, s.vocab,
					      s.vocab_padded);
			}
}
END_TEST

/* ---- positive numbers that round to 0.0f ---- */

START_TEST(test_config_refuses_eps_below_float)
{
	expect_refused("rms_norm_eps", "1e-205");
	expect_refused("rms_norm_eps", "1e-46");
	expect_refused("rope_theta", "1e-205");
	expect_refused("rms_norm_eps", "1e300");
	/* the smallest normal float and ordinary values still load */
	model_config m;
	ck_assert_msg(parse_with("rms_norm_eps", "1.2e-38", &m) == 0, "%s", g_err);
	ck_assert_msg(m.norm_eps > 0, "eps 1.2e-38 stored as %g", (double)m.norm_eps);
	ck_assert_msg(parse_with("rms_norm_eps", "1e-6", &m) == 0, "%s", g_err);
}
END_TEST

START_TEST(test_config_refuses_rope_factor_below_float)
{
	model_config m;
	g_err[0] = 0;
	const char *json =
		"{\"hidden_size\": 64, \"intermediate_size\": 172, \"num_hidden_layers\": 2,"
		" \"num_attention_heads\": 4, \"vocab_size\": 256, \"rope_scaling\": {"
		"\"rope_type\": \"llama3\", \"factor\": 1e-205, \"low_freq_factor\": 1,"
		" \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}}";
	int rc = model_config_parse(json, "fz/config.json", &m, g_err, sizeof g_err);
	ck_assert_msg(rc == SL_EINVAL && strstr(g_err, "factor"),
		      "rope factor 1e-205: rc %d (stored %g), error \"%s\"", rc,
		      (double)m.rope_factor, g_err);
}
END_TEST

/* A GGUF with an F64 epsilon of 1e-205: the same refusal. */
START_TEST(test_gguf_refuses_eps_below_float)
{
	char dir[64], path[128];
	ck_assert_int_eq(craft_tmpdir(dir, sizeof dir, "fzreg"), 0);
	snprintf(path, sizeof path, "%s/eps.gguf", dir);
	gb b = {0};
	double eps = 1e-205;
	uint64_t bits;
	memcpy(&bits, &eps, 8);
	gb_header(&b, 3, 0, 8);
	gb_kv_str(&b, "general.architecture", "llama");
	gb_kv_u32(&b, "llama.block_count", 1);
	gb_kv_u32(&b, "llama.embedding_length", 8);
	gb_kv_u32(&b, "llama.feed_forward_length", 16);
	gb_kv_u32(&b, "llama.attention.head_count", 2);
	gb_kv_u32(&b, "llama.vocab_size", 6);
	gb_kv_u32(&b, "llama.context_length", 64);
	gb_key(&b, "llama.attention.layer_norm_rms_epsilon", SL_GGUF_F64);
	gb_u64(&b, bits);
	ck_assert_int_eq(gb_write(&b, path), 0);
	sl_gguf *g = NULL;
	ck_assert_msg(sl_gguf_open(path, &g, g_err, sizeof g_err) == 0, "%s", g_err);
	model_config m;
	memset(&m, 0, sizeof m);
	int rc = model_config_from_gguf(g, &m, g_err, sizeof g_err);
	sl_gguf_close(g);
	craft_rmdir(dir);
	ck_assert_msg(rc == SL_EINVAL && strstr(g_err, "layer_norm_rms_epsilon"),
		      "GGUF eps 1e-205: rc %d (stored %g), error \"%s\"", rc, (double)m.norm_eps,
		      g_err);
}
END_TEST

/* ---- stop strings and UTF-8 in the coordinator's stream ---- */

/* Every Reply the client got for tag: chunks and Done text each UTF-8
 * (checked with the tokenizer's validator, itself tested against HF);
 * returns the concatenated text and the finish reason. */
static char *collect(ci_env *e, uint64_t tag, int *finish)
{
	static char text[4096];
	size_t n = 0;
	Shardline__Client__Reply *rep;
	*finish = -1;
	while ((rep = ci_client_next(e))) {
		const ProtobufCBinaryData *t = NULL;
		if (rep->msg_case == SHARDLINE__CLIENT__REPLY__MSG_CHUNK && rep->chunk->tag == tag)
			t = &rep->chunk->text;
		if (rep->msg_case == SHARDLINE__CLIENT__REPLY__MSG_DONE && rep->done->tag == tag) {
			t = &rep->done->text;
			*finish = rep->done->finish;
		}
		if (t && t->len) {
			ck_assert_msg(text_utf8_valid((const char *)t->data, t->len),
				      "tag %llu: a %s of %zu bytes is not UTF-8 (first byte 0x%02x)",
				      (unsigned long long)tag, *finish < 0 ? "Chunk" : "Done",
				      t->len, t->data[0]);
			ck_assert(n + t->len < sizeof text);
			memcpy(text + n, t->data, t->len);
			n += t->len;
		}
		shardline__client__reply__free_unpacked(rep, NULL);
	}
	text[n] = 0;
	return text;
}

/* Submit "hi" with one stop string; the node answers with the byte
 * tokens of `bytes` (llama2-small's <0xNN>), one batch per byte when
 * `one_by_one`. Returns the text the client got. */
static char *stop_run(const char *stop, size_t stop_len, const char *bytes, int stream,
		      int one_by_one, int *finish)
{
	ci_env e;
	ck_assert_msg(ci_create(&e, "tests/data/llama2-small/tokenizer.json", NULL, g_err,
				sizeof g_err) == 0, "%s", g_err);
	ck_assert_msg(ci_register(&e) == 0, "the node group was not registered");
	ProtobufCBinaryData st = {stop_len, (uint8_t *)stop};
	Shardline__Client__Submit sub = SHARDLINE__CLIENT__SUBMIT__INIT;
	sub.has_tag = sub.has_prompt = sub.has_max_tokens = sub.has_stream = 1;
	sub.tag = 7;
	sub.prompt = (ProtobufCBinaryData){2, (uint8_t *)"hi"};
	sub.max_tokens = 16;
	sub.stream = stream;
	sub.n_stop = 1;
	sub.stop = &st;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT;
	q.submit = &sub;
	ck_assert_int_eq(ci_send(e.client, &q.base), 0);
	ci_pump(&e);
	Shardline__Node__CoordMsg *m = ci_node_next(&e);
	ck_assert_msg(m && m->msg_case == SHARDLINE__NODE__COORD_MSG__MSG_ENQUEUE,
		      "no Enqueue reached the node");
	uint64_t req = m->enqueue->req_id;
	shardline__node__coord_msg__free_unpacked(m, NULL);
	int32_t ids[16];
	size_t n = strlen(bytes);
	const text_tok *tok = e.c->models[0].tok;
	for (size_t i = 0; i < n; i++) {
		char name[8];
		snprintf(name, sizeof name, "<0x%02X>", (unsigned char)bytes[i]);
		ids[i] = text_tok_token_to_id(tok, name);
		ck_assert_msg(ids[i] >= 0, "no token %s", name);
	}
	for (size_t i = 0; one_by_one && i < n; i++)
		ci_tokens(&e, req, &ids[i], 1, SHARDLINE__NODE__FINISH__RUNNING);
	if (!one_by_one)
		ci_tokens(&e, req, ids, n, SHARDLINE__NODE__FINISH__RUNNING);
	ci_tokens(&e, req, NULL, 0, SHARDLINE__NODE__FINISH__LENGTH);
	char *text = collect(&e, 7, finish);
	ci_destroy(&e);
	return text;
}

/* A stop string that starts inside a character (here the last three
 * bytes of U+1F600) matched mid-character and cut the character in half:
 * text must stay whole characters. A stop string matches where a
 * character begins. */
START_TEST(test_stop_inside_a_character)
{
	static const char *emoji = "\xF0\x9F\x98\x80";
	for (int stream = 0; stream < 2; stream++) {
		int finish;
		char *text = stop_run("\x9F\x98\x80", 3, emoji, stream, 0, &finish);
		ck_assert_msg(!strcmp(text, emoji), "stream %d: text \"%s\" (%zu bytes), want the "
			      "whole U+1F600", stream, text, strlen(text));
		ck_assert_int_eq(finish, SHARDLINE__CLIENT__FINISH_REASON__LENGTH);
	}
	/* at a character boundary the stop string still ends the text */
	int finish;
	char *text = stop_run("\xF0\x9F", 2, "a\xF0\x9F\x98\x80", 1, 0, &finish);
	ck_assert_msg(!strcmp(text, "a"), "text \"%s\", want \"a\"", text);
	ck_assert_int_eq(finish, SHARDLINE__CLIENT__FINISH_REASON__STOP);
}
END_TEST

/* The first token's bytes are held by the detokenizer (an unfinished
 * character), so no text is held yet when the stop strings are searched:
 * memmem got a NULL haystack. Undefined behaviour that does nothing
 * visible here: this test fails before the fix only in a build with
 * UBSan that halts (make SANITIZE=undefined, UBSAN_OPTIONS=halt_on_error=1);
 * tests/fuzz's coordinator harness reports it always. */
START_TEST(test_stop_search_before_any_text)
{
	int finish;
	char *text = stop_run("zz", 2, "\xF0\x9F\x98\x80", 1, 1, &finish);
	ck_assert_msg(!strcmp(text, "\xF0\x9F\x98\x80"), "text \"%s\"", text);
}
END_TEST

/* ---- tokenizer strings that are not UTF-8 ---- */

/* A Llama-2 style tokenizer.json with one string replaced. */
static int load_with(const char *normalizer, const char *decoder_content, text_tok **t)
{
	char json[2048];
	snprintf(json, sizeof json,
		 "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"<unk>\": 0, \"\\u2581\": 1,"
		 " \"a\": 2, \"\\u2581a\": 3}, \"merges\": [\"\\u2581 a\"], \"unk_token\": \"<unk>\"},"
		 " \"added_tokens\": [{\"id\": 4, \"content\": \"x\", \"normalized\": true,"
		 " \"special\": false}], \"normalizer\": %s, \"pre_tokenizer\": null, \"decoder\": {\"type\":"
		 " \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\":"
		 " \"\\u2581\"}, \"content\": \"%s\"}, {\"type\": \"Fuse\"}]}}",
		 normalizer, decoder_content);
	g_err[0] = 0;
	return text_tok_load_buffer(json, strlen(json), "fz/tokenizer.json", t, g_err,
				     sizeof g_err);
}

/* Either refused at load, or every decode is UTF-8. Appends what broke
 * the promise to bad (so one run names every variant that does). */
static void expect_utf8_or_refused(const char *what, const char *normalizer, const char *content,
				   char *bad, size_t badlen)
{
	text_tok *t = NULL;
	int rc = load_with(normalizer, content, &t);
	if (rc) {
		ck_assert_msg(rc == SL_EINVAL && strstr(g_err, "UTF-8"),
			      "%s: rc %d, error \"%s\" does not say UTF-8", what, rc, g_err);
		return;
	}
	int32_t *ids = NULL;
	size_t n = 0;
	ck_assert_int_eq(text_tok_encode(t, "a xa", 4, 0, &ids, &n, g_err, sizeof g_err), 0);
	int32_t all[8] = {0, 1, 2, 3, 3, 1, 4};
	for (int k = 0; k < 2; k++) {
		char *text = NULL;
		size_t len = 0;
		ck_assert_int_eq(text_tok_decode(t, k ? all : ids, k ? 7 : n, 0, &text, &len,
						  g_err, sizeof g_err), 0);
		if (!text_utf8_valid(text, len)) {
			snprintf(bad + strlen(bad), badlen - strlen(bad), "\n  %s: decode of %s "
				 "gave %zu bytes that are not UTF-8", what,
				 k ? "every id" : "encode(\"a xa\")", len);
			k = 2;
		}
		free(text);
	}
	free(ids);
	text_tok_destroy(t);
}

START_TEST(test_tokenizer_strings_not_utf8)
{
	char bad[1024] = "";
	/* raw bytes: cJSON refuses escaped lone surrogates, not these */
	expect_utf8_or_refused("decoder Replace content 0xed 0xa0 0x80 (a surrogate)", "null",
			       "\xed\xa0\x80", bad, sizeof bad);
	expect_utf8_or_refused("decoder Replace content 0xff", "null", "\xff", bad, sizeof bad);
	expect_utf8_or_refused("normalizer Prepend 0xc0 0xaf (overlong)",
			       "{\"type\": \"Prepend\", \"prepend\": \"\xc0\xaf\"}", " ", bad,
			       sizeof bad);
	expect_utf8_or_refused("normalizer Replace content 0xc3",
			       "{\"type\": \"Replace\", \"pattern\": {\"String\": \"x\"},"
			       " \"content\": \"\xc3\"}", " ", bad, sizeof bad);
	/* a pattern that is half of U+2581: the replacement strands its last byte */
	expect_utf8_or_refused("normalizer Replace pattern 0xe2 0x96",
			       "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\","
			       " \"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", \"pattern\":"
			       " {\"String\": \"\xe2\x96\"}, \"content\": \"b\"}]}", " ", bad, sizeof bad);
	ck_assert_msg(!bad[0], "tokenizer.h promises UTF-8 out of decode:%s", bad);
}
END_TEST

/* ---- found by the harnesses of tests/fuzz ---- */

/* A plan whose q_start + q_len overflows int passed the range check
 * (the sum wrapped negative) and sent ranks past the token arrays. */
START_TEST(test_plan_refuses_overflowing_sequence)
{
	const int32_t tok[2] = {1, 2}, q_start[1] = {1296911693}, q_len[1] = {1296911693};
	const int32_t kv_len[1] = {1296911693}, bt[1] = {0}, rows[1] = {1}, srow[1] = {0};
	const int32_t micro[2] = {0, 1};
	const int64_t pos[1] = {2};
	kern_sample_params sp = {.top_p = 1};
	node_plan p = {
		.cmd = NODE_PLAN_STEP,
		.b = {.tokens = tok, .positions = tok, .slots = tok, .n_tokens = 2,
		      .q_start = q_start, .q_len = q_len, .kv_len = kv_len, .n_seqs = 1,
		      .block_tables = bt, .max_blocks = 1, .block_tokens = 16, .max_q_len = 2,
		      .max_kv_len = 2},
		.n_rows = 1, .rows = rows, .n_sample = 1, .sample_rows = srow, .sampling = &sp,
		.sample_pos = pos, .n_micro = 1, .micro_seq0 = micro,
	};
	void *buf = NULL;
	size_t cap = 0, bytes = 0;
	ck_assert_int_eq(node_plan_pack(&p, &buf, &cap, &bytes), 0);
	node_plan q;
	g_err[0] = 0;
	int rc = node_plan_unpack(buf, bytes, &q, g_err, sizeof g_err);
	free(buf);
	ck_assert_msg(rc == SL_EINVAL && strstr(g_err, "sequence 0"),
		      "q_start %d + q_len %d of 2 tokens: rc %d, want %d; error \"%s\"",
		      q_start[0], q_len[0], rc, SL_EINVAL, g_err);
}
END_TEST

/* A Llama-type GGUF tokenizer from which no merge can be derived (no
 * piece splits into two others) reached qsort(NULL, 0, ...): undefined
 * behaviour, seen by UBSan (make fuzz runs this suite under it). */
START_TEST(test_gguf_tokenizer_without_merges)
{
	static const char *const toks[] = {"<unk>", "<s>", "</s>", "a", "b"};
	char dir[64], path[128], *json = NULL;
	size_t len = 0;
	ck_assert_int_eq(craft_tmpdir(dir, sizeof dir, "fzreg"), 0);
	snprintf(path, sizeof path, "%s/tok.gguf", dir);
	gb b = {0};
	gb_header(&b, 3, 0, 2);
	gb_kv_str(&b, "tokenizer.ggml.model", "llama");
	gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 5);
	ck_assert_int_eq(gb_write(&b, path), 0);
	g_err[0] = 0;
	int rc = text_tok_gguf_json(path, &json, &len, g_err, sizeof g_err);
	craft_rmdir(dir);
	ck_assert_msg(rc == 0, "rc %d: %s", rc, g_err);
	ck_assert_msg(strstr(json, "\"merges\":[]"), "no empty merges in %.200s", json);
	free(json);
}
END_TEST

/* libFuzzer (chat_template, 10M-execution run of 2026-11-23): a slice
 * inside a tuple subscript, 'abc'[::,4], compiled into a tuple holding a
 * slice with no object, and rendering it evaluated a NULL node. It is now
 * refused at compile time, naming the construct. */
START_TEST(test_template_slice_in_tuple_subscript)
{
	static const char src[] = "{{ 'abc'[::,4] }}";
	text_tmpl *t = NULL;
	g_err[0] = 0;
	int rc = text_tmpl_compile(src, strlen(src), "fuzz", &t, g_err, sizeof g_err);
	if (rc == 0) { /* before the fix: rendering crashed */
		text_chat_msg m = {0};
		char *out = NULL;
		size_t len = 0;
		text_tmpl_render(t, &m, 0, NULL, &out, &len, g_err, sizeof g_err);
		free(out);
		text_tmpl_destroy(t);
	}
	ck_assert_msg(rc == SL_EINVAL, "compiled (rc %d); want SL_EINVAL", rc);
	ck_assert_msg(strstr(g_err, "slice inside a tuple subscript"), "error: %s", g_err);
}
END_TEST

/* Compiles and renders src with no messages; both must succeed. The caller
 * frees *out. */
static void render_ok(const char *src, char **out, size_t *len)
{
	text_tmpl *t = NULL;
	g_err[0] = 0;
	ck_assert_msg(text_tmpl_compile(src, strlen(src), "fuzz", &t, g_err, sizeof g_err) == 0,
		      "compile: %s", g_err);
	text_chat_msg m = {0};
	*out = NULL;
	*len = 0;
	int rc = text_tmpl_render(t, &m, 0, NULL, out, len, g_err, sizeof g_err);
	text_tmpl_destroy(t);
	ck_assert_msg(rc == 0, "render: %s", g_err);
}

/* libFuzzer (chat_template, long run of 2026-11-23 after the fix above,
 * 3.2M executions in): select/reject with no test name and no arguments
 * ("x | reject") took the test's arguments at a NULL + 1 (undefined
 * behaviour that UBSan reports; harmless in an ordinary build, which is why
 * this test runs in `make fuzz`'s sanitized build too). */
START_TEST(test_template_reject_without_arguments)
{
	char *out;
	size_t len;
	render_ok("{{ [0, 1, 2, ''] | reject | list | length }}", &out, &len);
	ck_assert_msg(len == 1 && out[0] == '2', "rendered '%.*s', want 2 (0 and '' are falsy)",
		      (int)len, out ? out : "");
	free(out);
}
END_TEST

/* libFuzzer (chat_template, 2.2M executions into the run after that fix):
 * two empty sequences added ('[] + []', here an empty reject result and
 * an empty tuple) called memcpy with the empty list's NULL items array,
 * undefined behaviour for UBSan though zero bytes were copied. The run
 * after that fix found the same in list repetition ('[] * 80') at 9.9M. */
START_TEST(test_template_add_empty_lists)
{
	char *out;
	size_t len;
	render_ok("{{ ([1] | reject | list) + [] }}{{ (() + ()) | length }}{{ '' + '' }}"
		  "{{ [] * 80 }}",
		  &out, &len);
	ck_assert_msg(len == 5 && !memcmp(out, "[]0[]", 5), "rendered '%.*s', want '[]0[]'",
		      (int)len, out ? out : "");
	free(out);
}
END_TEST

/* libFuzzer (chat_template, 9.9M executions into the 10M run of
 * 2026-11-24): an empty string repeated 99999999999990 times skipped the
 * size check (which divides by the length) and appended nothing that many
 * times, a render that never ends. Before the fix this test hangs until
 * Check's timeout fails it; now the result is the empty string at once,
 * as in Python, and the same for an empty list. */
START_TEST(test_template_repeat_empty_string)
{
	char *out;
	size_t len;
	render_ok("[{{ '' * 99999999999990 }}][{{ ([] * 99999999999990) | length }}]", &out, &len);
	ck_assert_msg(len == 5 && !memcmp(out, "[][0]", 5), "rendered '%.*s', want '[][0]'",
		      (int)len, out ? out : "");
	free(out);
}
END_TEST

/* libFuzzer (chat_template, 2026-11-28, the first execution after the
 * template engine moved to the shared buffer, common/buf.h): an empty
 * template rendered 0 bytes into a buffer that had been reserved but never
 * written, so its first byte was not the promised NUL. Every render must
 * hand back a terminated string, the empty one too. */
START_TEST(test_template_empty_render_terminated)
{
	char *out;
	size_t len;
	render_ok("", &out, &len);
	ck_assert_msg(out && len == 0 && out[0] == 0, "empty render: %p, %zu bytes", (void *)out, len);
	free(out);
	render_ok("{% if false %}x{% endif %}", &out, &len);
	ck_assert_msg(out && len == 0 && out[0] == 0, "empty render: %p, %zu bytes", (void *)out, len);
	free(out);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("fuzz_regress");
	TCase *tc = tcase_create("defects");
	tcase_add_test(tc, test_config_refuses_huge_vocab);
	tcase_add_test(tc, test_grid_vocab_no_overflow);
	tcase_add_test(tc, test_config_refuses_eps_below_float);
	tcase_add_test(tc, test_config_refuses_rope_factor_below_float);
	tcase_add_test(tc, test_gguf_refuses_eps_below_float);
	tcase_add_test(tc, test_stop_inside_a_character);
	tcase_add_test(tc, test_stop_search_before_any_text);
	tcase_add_test(tc, test_tokenizer_strings_not_utf8);
	tcase_add_test(tc, test_plan_refuses_overflowing_sequence);
	tcase_add_test(tc, test_gguf_tokenizer_without_merges);
	tcase_add_test(tc, test_template_slice_in_tuple_subscript);
	tcase_add_test(tc, test_template_reject_without_arguments);
	tcase_add_test(tc, test_template_add_empty_lists);
	tcase_add_test(tc, test_template_repeat_empty_string);
	tcase_add_test(tc, test_template_empty_render_terminated);
	suite_add_tcase(su, tc);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
