/*
 * test_fuzz_regress.c — one test per defect the libFuzzer runs found
 * (issue 16; docs/fuzzing.md), each on the crafted input that showed it,
 * so the fix stays fixed without a fuzzer in the loop:
 *   - a vocab_size of 2^31 - 1 accepted by config.json and overflowing the
 *     vocab-parallel split in parallel/grid.c;
 *   - a positive rms_norm_eps (or rope value) below float's range, such as
 *     1e-205, accepted and stored as 0.0f, from config.json and from GGUF;
 * and the defects tests/fuzz's harnesses found since (each named below).
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "gguf_craft.h"
#include "grid.h"
#include "plan.h"
#include "sl.h"

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

int main(void)
{
	Suite *su = suite_create("fuzz_regress");
	TCase *tc = tcase_create("defects");
	tcase_add_test(tc, test_config_refuses_huge_vocab);
	tcase_add_test(tc, test_grid_vocab_no_overflow);
	tcase_add_test(tc, test_config_refuses_eps_below_float);
	tcase_add_test(tc, test_config_refuses_rope_factor_below_float);
	tcase_add_test(tc, test_gguf_refuses_eps_below_float);
	tcase_add_test(tc, test_plan_refuses_overflowing_sequence);
	suite_add_tcase(su, tc);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
