/*
 * test_config.c — formats/config.c on a real Llama 3.2 1B config.json (as
 * published on the Hugging Face hub), a minimal config for the defaults,
 * and one edit per refused field: each must fail with the right code and a
 * message naming the file and the field.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "node/shapes.h"
#include "common/sl.h"
#include "unit/st_craft.h"

#define NAME "ckpt/config.json"

static char g_err[SL_ERRLEN];

/* meta-llama/Llama-3.2-1B config.json (transformers 4.45). */
static const char *k_llama3 =
	"{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
	" \"attention_dropout\": 0.0, \"bos_token_id\": 128000,"
	" \"eos_token_id\": [128001, 128008, 128009], \"head_dim\": 64,"
	" \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02,"
	" \"intermediate_size\": 8192, \"max_position_embeddings\": 131072,"
	" \"mlp_bias\": false, \"model_type\": \"llama\", \"num_attention_heads\": 32,"
	" \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, \"pretraining_tp\": 1,"
	" \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0,"
	" \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0,"
	" \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
	" \"rope_theta\": 500000.0, \"tie_word_embeddings\": true,"
	" \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.45.0.dev0\","
	" \"use_cache\": true, \"vocab_size\": 128256}";

static const char *k_minimal =
	"{\"hidden_size\": 64, \"intermediate_size\": 172, \"num_hidden_layers\": 2,"
	" \"num_attention_heads\": 4, \"vocab_size\": 256}";

/* Parses `base` with one field replaced by `value` (JSON text), or deleted
 * when value is NULL. "a.b" edits key b of object a. */
static int parse_edit(const char *base, const char *key, const char *value, model_config *m)
{
	cJSON *root = cJSON_Parse(base), *obj = root;
	char k[128];
	snprintf(k, sizeof k, "%s", key);
	char *dot = strchr(k, '.');
	if (dot) {
		*dot = 0;
		obj = cJSON_GetObjectItemCaseSensitive(root, k);
	}
	const char *leaf = dot ? dot + 1 : k;
	ck_assert_ptr_nonnull(obj);
	cJSON_DeleteItemFromObjectCaseSensitive(obj, leaf);
	if (value) {
		cJSON *v = cJSON_Parse(value);
		ck_assert_msg(v != NULL, "test bug: bad value %s", value);
		cJSON_AddItemToObject(obj, leaf, v);
	}
	char *text = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	g_err[0] = 0;
	int rc = model_config_parse(text, NAME, m, g_err, sizeof g_err);
	free(text);
	return rc;
}

/* The edit fails with `want`, naming the file and `what`. */
static void expect_fail(const char *base, const char *key, const char *value, int want,
			const char *what)
{
	model_config m;
	int rc = parse_edit(base, key, value, &m);
	ck_assert_msg(rc == want, "%s = %s: rc %d, want %d; error: %s", key,
		      value ? value : "(deleted)", rc, want, g_err);
	ck_assert_msg(strstr(g_err, NAME), "error \"%s\" does not name the file", g_err);
	ck_assert_msg(strstr(g_err, what), "error \"%s\" does not name %s", g_err, what);
}

START_TEST(test_llama3_full)
{
	model_config m;
	ck_assert_int_eq(model_config_parse(k_llama3, NAME, &m, g_err, sizeof g_err), SL_OK);
	ck_assert_int_eq(m.dim, 2048);
	ck_assert_int_eq(m.hidden_dim, 8192);
	ck_assert_int_eq(m.n_layers, 16);
	ck_assert_int_eq(m.n_heads, 32);
	ck_assert_int_eq(m.n_kv_heads, 8);
	ck_assert_int_eq(m.head_dim, 64);
	ck_assert_int_eq(m.vocab_size, 128256);
	ck_assert_int_eq(m.max_pos, 131072);
	ck_assert_float_eq(m.norm_eps, 1e-5f);
	ck_assert_float_eq(m.rope_theta, 500000.0f);
	ck_assert_int_eq(m.rope, ROPE_LLAMA3);
	ck_assert_float_eq(m.rope_factor, 32.0f);
	ck_assert_float_eq(m.rope_low_freq_factor, 1.0f);
	ck_assert_float_eq(m.rope_high_freq_factor, 4.0f);
	ck_assert_int_eq(m.rope_orig_max_pos, 8192);
	ck_assert_int_eq(m.tie_embeddings, 1);
	ck_assert_int_eq(m.bos_id, 128000);
	ck_assert_int_eq(m.n_eos, 3);
	ck_assert_int_eq(m.eos_ids[0], 128001);
	ck_assert_int_eq(m.eos_ids[2], 128009);
	ck_assert_int_eq(m.dtype, SL_DT_BF16);
}
END_TEST

START_TEST(test_defaults)
{
	model_config m;
	ck_assert_int_eq(model_config_parse(k_minimal, NAME, &m, g_err, sizeof g_err), SL_OK);
	ck_assert_int_eq(m.dim, 64);
	ck_assert_int_eq(m.hidden_dim, 172);
	ck_assert_int_eq(m.n_kv_heads, 4);
	ck_assert_int_eq(m.head_dim, 16);
	ck_assert_int_eq(m.max_pos, 2048);
	ck_assert_float_eq(m.norm_eps, 1e-6f);
	ck_assert_float_eq(m.rope_theta, 10000.0f);
	ck_assert_int_eq(m.rope, ROPE_DEFAULT);
	ck_assert_int_eq(m.tie_embeddings, 0);
	ck_assert_int_eq(m.bos_id, -1);
	ck_assert_int_eq(m.n_eos, 0);
	ck_assert_int_eq(m.dtype, SL_DT_F32);
}
END_TEST

START_TEST(test_nulls_are_defaults)
{
	model_config m;
	ck_assert_int_eq(parse_edit(k_llama3, "head_dim", "null", &m), SL_OK);
	ck_assert_int_eq(m.head_dim, 64);
	ck_assert_int_eq(parse_edit(k_llama3, "rope_scaling", "null", &m), SL_OK);
	ck_assert_int_eq(m.rope, ROPE_DEFAULT);
	ck_assert_int_eq(parse_edit(k_llama3, "bos_token_id", "null", &m), SL_OK);
	ck_assert_int_eq(m.bos_id, -1);
	ck_assert_int_eq(parse_edit(k_llama3, "eos_token_id", "null", &m), SL_OK);
	ck_assert_int_eq(m.n_eos, 0);
	ck_assert_int_eq(parse_edit(k_llama3, "torch_dtype", "null", &m), SL_OK);
	ck_assert_int_eq(m.dtype, SL_DT_F32);
	ck_assert_int_eq(parse_edit(k_llama3, "num_key_value_heads", "null", &m), SL_OK);
	ck_assert_int_eq(m.n_kv_heads, 32);
}
END_TEST

START_TEST(test_variants)
{
	model_config m;
	ck_assert_int_eq(parse_edit(k_minimal, "head_dim", "32", &m), SL_OK);
	ck_assert_int_eq(m.head_dim, 32);
	ck_assert_int_eq(parse_edit(k_minimal, "eos_token_id", "2", &m), SL_OK);
	ck_assert_int_eq(m.n_eos, 1);
	ck_assert_int_eq(m.eos_ids[0], 2);
	ck_assert_int_eq(parse_edit(k_minimal, "eos_token_id", "[]", &m), SL_OK);
	ck_assert_int_eq(m.n_eos, 0);
	ck_assert_int_eq(parse_edit(k_minimal, "dtype", "\"float16\"", &m), SL_OK);
	ck_assert_int_eq(m.dtype, SL_DT_F16);
	ck_assert_int_eq(parse_edit(k_minimal, "rope_scaling", "{\"rope_type\": \"default\"}", &m),
			 SL_OK);
	ck_assert_int_eq(m.rope, ROPE_DEFAULT);
}
END_TEST

START_TEST(test_rope_legacy_type)
{
	model_config m;
	cJSON *root = cJSON_Parse(k_llama3);
	cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
	cJSON_DeleteItemFromObjectCaseSensitive(rs, "rope_type");
	cJSON_AddStringToObject(rs, "type", "llama3");
	char *text = cJSON_PrintUnformatted(root);
	ck_assert_int_eq(model_config_parse(text, NAME, &m, g_err, sizeof g_err), SL_OK);
	ck_assert_int_eq(m.rope, ROPE_LLAMA3);
	free(text);
	expect_fail(k_llama3, "rope_scaling.rope_type", NULL, SL_EINVAL, "rope_scaling.rope_type");
	cJSON_DeleteItemFromObjectCaseSensitive(rs, "type");
	cJSON_AddStringToObject(rs, "type", "linear");
	text = cJSON_PrintUnformatted(root);
	ck_assert_int_eq(model_config_parse(text, NAME, &m, g_err, sizeof g_err), SL_ENOTSUP);
	ck_assert_ptr_nonnull(strstr(g_err, "rope_scaling.type"));
	free(text);
	cJSON_Delete(root);
}
END_TEST

START_TEST(test_rope_parameters_v5)
{
	/* transformers 5 moved rope_theta and the scaling into rope_parameters */
	model_config m;
	cJSON *root = cJSON_Parse(k_llama3);
	cJSON *rs = cJSON_DetachItemFromObjectCaseSensitive(root, "rope_scaling");
	cJSON_DeleteItemFromObjectCaseSensitive(root, "rope_theta");
	cJSON_AddNumberToObject(rs, "rope_theta", 250000.0);
	cJSON_AddItemToObject(root, "rope_parameters", rs);
	char *text = cJSON_PrintUnformatted(root);
	ck_assert_int_eq(model_config_parse(text, NAME, &m, g_err, sizeof g_err), SL_OK);
	ck_assert_int_eq(m.rope, ROPE_LLAMA3);
	ck_assert_float_eq(m.rope_theta, 250000.0f);
	ck_assert_float_eq(m.rope_factor, 32.0f);
	free(text);
	cJSON_Delete(root);
}
END_TEST

static const char *k_rope_other[] = {"linear", "dynamic", "yarn", "longrope"};

START_TEST(test_rope_unsupported)
{
	char v[64];
	snprintf(v, sizeof v, "\"%s\"", k_rope_other[_i]);
	expect_fail(k_llama3, "rope_scaling.rope_type", v, SL_ENOTSUP, "rope_scaling.rope_type");
	ck_assert_ptr_nonnull(strstr(g_err, k_rope_other[_i]));
}
END_TEST

static const char *k_llama3_fields[] = {
	"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
};

START_TEST(test_llama3_missing_field)
{
	char key[96];
	snprintf(key, sizeof key, "rope_scaling.%s", k_llama3_fields[_i]);
	expect_fail(k_llama3, key, NULL, SL_EINVAL, key);
	expect_fail(k_llama3, key, "\"4\"", SL_EINVAL, key);
	expect_fail(k_llama3, key, "0", SL_EINVAL, key);
}
END_TEST

START_TEST(test_llama3_bad_factors)
{
	expect_fail(k_llama3, "rope_scaling.low_freq_factor", "4.0", SL_EINVAL, "high_freq_factor");
	expect_fail(k_llama3, "rope_scaling", "3", SL_EINVAL, "rope_scaling");
}
END_TEST

static const char *k_required[] = {
	"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
	"vocab_size",
};

START_TEST(test_missing_required)
{
	expect_fail(k_llama3, k_required[_i], NULL, SL_EINVAL, k_required[_i]);
	expect_fail(k_llama3, k_required[_i], "null", SL_EINVAL, k_required[_i]);
	expect_fail(k_llama3, k_required[_i], "0", SL_EINVAL, k_required[_i]);
	expect_fail(k_llama3, k_required[_i], "-8", SL_EINVAL, k_required[_i]);
	expect_fail(k_llama3, k_required[_i], "\"64\"", SL_EINVAL, k_required[_i]);
	expect_fail(k_llama3, k_required[_i], "64.5", SL_EINVAL, k_required[_i]);
	expect_fail(k_llama3, k_required[_i], "1e12", SL_EINVAL, k_required[_i]);
}
END_TEST

START_TEST(test_unsupported_fields)
{
	expect_fail(k_llama3, "model_type", "\"mistral\"", SL_ENOTSUP, "model_type");
	expect_fail(k_llama3, "attention_bias", "true", SL_ENOTSUP, "attention_bias");
	expect_fail(k_llama3, "mlp_bias", "true", SL_ENOTSUP, "mlp_bias");
	expect_fail(k_llama3, "hidden_act", "\"gelu\"", SL_ENOTSUP, "hidden_act");
	expect_fail(k_llama3, "num_key_value_heads", "5", SL_ENOTSUP, "num_key_value_heads");
	expect_fail(k_llama3, "num_key_value_heads", "64", SL_ENOTSUP, "num_key_value_heads");
	expect_fail(k_llama3, "torch_dtype", "\"float64\"", SL_ENOTSUP, "torch_dtype");
	expect_fail(k_llama3, "eos_token_id", "[1, 2, 3, 4, 5, 6, 7, 8, 9]", SL_ENOTSUP,
		    "eos_token_id");
}
END_TEST

START_TEST(test_bad_types)
{
	expect_fail(k_llama3, "num_key_value_heads", "0", SL_EINVAL, "num_key_value_heads");
	expect_fail(k_llama3, "head_dim", "\"64\"", SL_EINVAL, "head_dim");
	expect_fail(k_llama3, "head_dim", "0", SL_EINVAL, "head_dim");
	expect_fail(k_llama3, "max_position_embeddings", "-1", SL_EINVAL, "max_position_embeddings");
	expect_fail(k_llama3, "rms_norm_eps", "\"1e-5\"", SL_EINVAL, "rms_norm_eps");
	expect_fail(k_llama3, "rms_norm_eps", "0", SL_EINVAL, "rms_norm_eps");
	expect_fail(k_llama3, "rope_theta", "-1", SL_EINVAL, "rope_theta");
	expect_fail(k_llama3, "tie_word_embeddings", "\"yes\"", SL_EINVAL, "tie_word_embeddings");
	expect_fail(k_llama3, "attention_bias", "0", SL_EINVAL, "attention_bias");
	expect_fail(k_llama3, "model_type", "7", SL_EINVAL, "model_type");
	expect_fail(k_llama3, "bos_token_id", "-2", SL_EINVAL, "bos_token_id");
	expect_fail(k_llama3, "eos_token_id", "[1, \"2\"]", SL_EINVAL, "eos_token_id");
	expect_fail(k_llama3, "eos_token_id", "{}", SL_EINVAL, "eos_token_id");
	/* no head_dim and hidden_size not a multiple of the heads */
	expect_fail(k_minimal, "hidden_size", "66", SL_EINVAL, "num_attention_heads");
}
END_TEST

START_TEST(test_bad_json)
{
	model_config m;
	ck_assert_int_eq(model_config_parse("{\"hidden_size\": 64,", NAME, &m, g_err,
					    sizeof g_err), SL_EINVAL);
	ck_assert_ptr_nonnull(strstr(g_err, NAME));
	ck_assert_int_eq(model_config_parse("[64]", NAME, &m, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_ptr_nonnull(strstr(g_err, NAME));
	ck_assert_int_eq(model_config_parse("{} {}", NAME, &m, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_ptr_nonnull(strstr(g_err, NAME));
	ck_assert_int_eq(model_config_parse("", NAME, &m, g_err, sizeof g_err), SL_EINVAL);
}
END_TEST

START_TEST(test_load_file)
{
	char dir[64], path[128];
	model_config m;
	ck_assert_int_eq(craft_tmpdir(dir, sizeof dir, "cfg"), 0);
	snprintf(path, sizeof path, "%s/config.json", dir);
	ck_assert_int_eq(model_config_load(path, &m, g_err, sizeof g_err), SL_ENOTFOUND);
	ck_assert_ptr_nonnull(strstr(g_err, path));
	ck_assert_int_eq(craft_text(path, k_llama3), 0);
	ck_assert_int_eq(model_config_load(path, &m, g_err, sizeof g_err), SL_OK);
	ck_assert_int_eq(m.n_kv_heads, 8);
	ck_assert_int_eq(craft_text(path, "{\"hidden_size\": \"64\"}"), 0);
	ck_assert_int_eq(model_config_load(path, &m, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_ptr_nonnull(strstr(g_err, path));
	ck_assert_ptr_nonnull(strstr(g_err, "hidden_size"));
	ck_assert_int_eq(craft_text(path, "not json"), 0);
	ck_assert_int_eq(model_config_load(path, &m, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_ptr_nonnull(strstr(g_err, path));
	craft_rmdir(dir);
}
END_TEST

/* The named random-weight shapes: 8b is the grouped-query one of Llama
 * 3 8B's size; an unknown name is refused. */
START_TEST(test_named_shapes)
{
	model_config m;
	ck_assert_int_eq(model_config_shape("8b", SL_DT_F16, &m), SL_OK);
	ck_assert_int_eq(m.dim, 4096);
	ck_assert_int_eq(m.hidden_dim, 14336);
	ck_assert_int_eq(m.n_heads, 32);
	ck_assert_int_eq(m.n_kv_heads, 8);
	ck_assert_int_eq(m.head_dim, 128);
	ck_assert_int_eq(model_config_shape("7b", SL_DT_F16, &m), SL_OK);
	ck_assert_int_eq(m.n_kv_heads, 32);
	ck_assert_int_eq(model_config_shape("9b", SL_DT_F16, &m), SL_EINVAL);
}
END_TEST

#define N_OF(a) ((int)(sizeof a / sizeof a[0]))

static Suite *config_suite(void)
{
	Suite *su = suite_create("config");
	TCase *tc = tcase_create("parse");
	tcase_add_test(tc, test_llama3_full);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_nulls_are_defaults);
	tcase_add_test(tc, test_variants);
	tcase_add_test(tc, test_rope_legacy_type);
	tcase_add_test(tc, test_rope_parameters_v5);
	tcase_add_loop_test(tc, test_rope_unsupported, 0, N_OF(k_rope_other));
	tcase_add_loop_test(tc, test_llama3_missing_field, 0, N_OF(k_llama3_fields));
	tcase_add_test(tc, test_llama3_bad_factors);
	tcase_add_loop_test(tc, test_missing_required, 0, N_OF(k_required));
	tcase_add_test(tc, test_unsupported_fields);
	tcase_add_test(tc, test_bad_types);
	tcase_add_test(tc, test_bad_json);
	tcase_add_test(tc, test_load_file);
	tcase_add_test(tc, test_named_shapes);
	suite_add_tcase(su, tc);
	return su;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
