/*
 * test_config_sources.c — the model config from its other sources:
 * a GGUF file's llama.* and tokenizer.ggml.* keys (formats/config.c's
 * model_config_from_gguf) and generation_config.json's EOS ids, then
 * model_create on crafted GGUF files: a good one loads, a tensor missing or
 * of the wrong shape is an error naming the file and the tensor. Each
 * refusal names the file and the key.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "unit/gguf_craft.h"
#include "node/model.h"
#include "common/sl.h"

#define CRAFT_TAG "cfgsrc"
#include "unit/craft_fixture.h"

/* ---- GGUF metadata ---- */

/* What a test changes in the crafted model's metadata. */
typedef struct meta {
	const char *arch;         /* general.architecture */
	int skip;                 /* 1: leave llama.block_count out */
	int kv_heads, key_length, rope_dims;
	const char *scaling;      /* llama.rope.scaling.type, or NULL */
	int eot;                  /* tokenizer.ggml.eot_token_id, or -1 */
	int block_count_as_str;   /* llama.block_count written as a string */
	int experts;              /* llama.expert_count, or 0 */
	const char *extra_tensor; /* one more tensor, e.g. a bias, or NULL */
	int with_output;          /* an output.weight (untied) */
	const char *drop;         /* a tensor left out, or NULL */
	int down_rows;            /* ffn_down's rows, DIM when right */
} meta;

static const meta M0 = {"llama", 0, 2, 0, 4, NULL, -1, 0, 0, NULL, 0, NULL, 8};

static const char *const TOKENS[] = {"<s>", "</s>", "a", "b", "c", "<|eot|>"};
#define N_TOK 6
#define DIM 8
#define HID 16

/* A tiny Llama (1 layer, dim 8, 2 heads of 4, hidden 16, vocab 6) in
 * F32, values small and deterministic. */
static void model_file(gb *b, const meta *m, const char *path)
{
	int n_kv = 13 + (m->key_length > 0) + (m->scaling != NULL) * 2 + (m->eot >= 0) +
		   (m->experts > 0) - m->skip;
	struct { const char *name; int64_t ne0, ne1; } t[12] = {
		{"token_embd.weight", DIM, N_TOK}, {"output_norm.weight", DIM, 1},
		{"blk.0.attn_norm.weight", DIM, 1}, {"blk.0.ffn_norm.weight", DIM, 1},
		{"blk.0.attn_q.weight", DIM, 8}, {"blk.0.attn_k.weight", DIM, 4 * m->kv_heads},
		{"blk.0.attn_v.weight", DIM, 4 * m->kv_heads}, {"blk.0.attn_output.weight", 8, DIM},
		{"blk.0.ffn_gate.weight", DIM, HID}, {"blk.0.ffn_up.weight", DIM, HID},
		{"blk.0.ffn_down.weight", HID, m->down_rows}, {"output.weight", DIM, N_TOK},
	};
	int nt = 11 + m->with_output, extra = m->extra_tensor != NULL;
	for (int i = 0; m->drop && i < nt; i++)
		if (!strcmp(t[i].name, m->drop)) {
			memmove(&t[i], &t[i + 1], sizeof t[0] * (size_t)(nt - i - 1));
			nt--;
		}
	gb_header(b, 3, (uint64_t)(nt + extra), (uint64_t)n_kv);
	gb_kv_str(b, "general.architecture", m->arch);
	if (!m->skip) {
		if (m->block_count_as_str)
			gb_kv_str(b, "llama.block_count", "1");
		else
			gb_kv_u32(b, "llama.block_count", 1);
	}
	gb_kv_u32(b, "llama.embedding_length", DIM);
	gb_kv_u32(b, "llama.feed_forward_length", HID);
	gb_kv_u32(b, "llama.attention.head_count", 2);
	gb_kv_u32(b, "llama.attention.head_count_kv", (uint32_t)m->kv_heads);
	gb_kv_u32(b, "llama.context_length", 64);
	gb_kv_f32(b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	gb_kv_f32(b, "llama.rope.freq_base", 50000.0f);
	gb_kv_u32(b, "llama.rope.dimension_count", (uint32_t)m->rope_dims);
	gb_kv_strs(b, "tokenizer.ggml.tokens", TOKENS, N_TOK);
	gb_kv_u32(b, "tokenizer.ggml.bos_token_id", 0);
	gb_kv_u32(b, "tokenizer.ggml.eos_token_id", 1);
	if (m->key_length)
		gb_kv_u32(b, "llama.attention.key_length", (uint32_t)m->key_length);
	if (m->scaling) {
		gb_kv_str(b, "llama.rope.scaling.type", m->scaling);
		gb_kv_f32(b, "llama.rope.scaling.factor", 4.0f);
	}
	if (m->eot >= 0)
		gb_kv_u32(b, "tokenizer.ggml.eot_token_id", (uint32_t)m->eot);
	if (m->experts)
		gb_kv_u32(b, "llama.expert_count", (uint32_t)m->experts);
	uint64_t off = 0;
	for (int i = 0; i < nt + extra; i++) {
		int64_t ne[2] = {i < nt ? t[i].ne0 : DIM, i < nt ? t[i].ne1 : 1};
		gb_tensor(b, i < nt ? t[i].name : m->extra_tensor, ne[1] == 1 ? 1 : 2, ne,
			  SL_GGML_F32, off);
		off += (uint64_t)(ne[0] * ne[1] * 4 + 31) / 32 * 32;
	}
	gb_align(b, 32);
	for (int i = 0; i < nt + extra; i++) {
		int64_t n = i < nt ? t[i].ne0 * t[i].ne1 : DIM;
		for (int64_t k = 0; k < n; k++)
			gb_f32(b, strstr(i < nt ? t[i].name : "", "norm") ? 1.0f
									  : 0.05f * (float)((k * 7 + i) % 11 - 5));
		gb_align(b, 32);
	}
	ck_assert_int_eq(gb_write(b, path), 0);
}

/* Config from a crafted file: returns the code, config in *c. */
static int config_of(const meta *m, model_config *c)
{
	gb b = {0};
	const char *path = tpath("m.gguf");
	model_file(&b, m, path);
	sl_gguf *g = NULL;
	int rc = sl_gguf_open(path, &g, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "open: %s", g_err);
	rc = model_config_from_gguf(g, c, g_err, sizeof g_err);
	sl_gguf_close(g);
	return rc;
}

static void expect_refused(const meta *m, int want, const char *what)
{
	model_config c;
	int rc = config_of(m, &c);
	ck_assert_msg(rc == want, "rc %d, want %d: %s", rc, want, g_err);
	ck_assert_msg(strstr(g_err, "m.gguf"), "error \"%s\" does not name the file", g_err);
	ck_assert_msg(strstr(g_err, what), "error \"%s\" does not name %s", g_err, what);
}

START_TEST(test_gguf_config)
{
	model_config c;
	meta m = M0;
	m.eot = 5;
	ck_assert_msg(config_of(&m, &c) == 0, "%s", g_err);
	ck_assert_int_eq(c.n_layers, 1);
	ck_assert_int_eq(c.dim, DIM);
	ck_assert_int_eq(c.hidden_dim, HID);
	ck_assert_int_eq(c.n_heads, 2);
	ck_assert_int_eq(c.n_kv_heads, 2);
	ck_assert_int_eq(c.head_dim, 4);
	ck_assert_int_eq(c.vocab_size, N_TOK);
	ck_assert_int_eq(c.max_pos, 64);
	ck_assert_float_eq(c.norm_eps, 1e-5f);
	ck_assert_float_eq(c.rope_theta, 50000.0f);
	ck_assert_int_eq(c.rope, ROPE_DEFAULT);
	ck_assert_int_eq(c.tie_embeddings, 1);  /* no output.weight */
	ck_assert_int_eq(c.bos_id, 0);
	ck_assert_int_eq(c.n_eos, 2);           /* eos and eot */
	ck_assert_int_eq(c.eos_ids[0], 1);
	ck_assert_int_eq(c.eos_ids[1], 5);
	ck_assert_int_eq(c.dtype, SL_DT_F32);
	ck_assert_int_eq(c.rope_freqs, 0);
	m.with_output = 1;
	m.eot = 1; /* the same id twice is one EOS */
	m.kv_heads = 1;
	m.scaling = "linear";
	ck_assert_msg(config_of(&m, &c) == 0, "%s", g_err);
	ck_assert_int_eq(c.tie_embeddings, 0);
	ck_assert_int_eq(c.n_eos, 1);
	ck_assert_int_eq(c.n_kv_heads, 1);
	ck_assert_int_eq(c.rope, ROPE_LINEAR);
	ck_assert_float_eq(c.rope_factor, 4.0f);
	m.scaling = "none";
	ck_assert_msg(config_of(&m, &c) == 0, "%s", g_err);
	ck_assert_int_eq(c.rope, ROPE_DEFAULT);
}
END_TEST

START_TEST(test_gguf_config_refusals)
{
	meta m = M0;
	m.arch = "qwen2";
	expect_refused(&m, SL_ENOTSUP, "general.architecture qwen2");
	m = M0;
	m.skip = 1;
	expect_refused(&m, SL_EINVAL, "llama.block_count");
	m = M0;
	m.block_count_as_str = 1;
	expect_refused(&m, SL_EINVAL, "llama.block_count");
	m = M0;
	m.kv_heads = 3;
	expect_refused(&m, SL_ENOTSUP, "llama.attention.head_count_kv");
	m = M0;
	m.kv_heads = 0;
	expect_refused(&m, SL_EINVAL, "llama.attention.head_count_kv");
	m = M0;
	m.rope_dims = 2; /* partial rotary */
	expect_refused(&m, SL_ENOTSUP, "rope.dimension_count");
	m = M0;
	m.key_length = 6;
	expect_refused(&m, SL_ENOTSUP, "rope.dimension_count");
	m = M0;
	m.scaling = "yarn";
	expect_refused(&m, SL_ENOTSUP, "llama.rope.scaling.type yarn");
	m = M0;
	m.eot = N_TOK;
	expect_refused(&m, SL_EINVAL, "tokenizer.ggml.eot_token_id");
	m = M0;
	m.experts = 8;
	expect_refused(&m, SL_ENOTSUP, "llama.expert_count");
	m = M0;
	m.extra_tensor = "blk.0.attn_q.bias";
	expect_refused(&m, SL_ENOTSUP, "blk.0.attn_q.bias");
}
END_TEST

/* ---- generation_config.json ---- */

START_TEST(test_generation_config)
{
	model_config c = {.n_eos = 1, .eos_ids = {128001}};
	ck_assert_int_eq(model_config_parse_generation("{\"eos_token_id\": [128001, 128008, 128009]}",
						       "g.json", &c, g_err, sizeof g_err), 0);
	ck_assert_int_eq(c.n_eos, 3);
	ck_assert_int_eq(c.eos_ids[2], 128009);
	ck_assert_int_eq(model_config_parse_generation("{\"eos_token_id\": 2, \"bos_token_id\": 1}",
						       "g.json", &c, g_err, sizeof g_err), 0);
	ck_assert_int_eq(c.n_eos, 4);
	ck_assert_int_eq(model_config_parse_generation("{\"do_sample\": true}", "g.json", &c, g_err,
						       sizeof g_err), 0);
	ck_assert_int_eq(c.n_eos, 4);
	int rc = model_config_parse_generation("{\"eos_token_id\": \"2\"}", "g.json", &c, g_err,
					       sizeof g_err);
	ck_assert_int_eq(rc, SL_EINVAL);
	ck_assert(strstr(g_err, "g.json") && strstr(g_err, "eos_token_id"));
	ck_assert_int_eq(c.n_eos, 4); /* untouched on error */
	rc = model_config_parse_generation("{\"eos_token_id\": [10, 11, 12, 13, 14]}", "g.json", &c,
					   g_err, sizeof g_err);
	ck_assert_int_eq(rc, SL_ENOTSUP);
	ck_assert(strstr(g_err, "g.json") && strstr(g_err, "eos_token_id"));
	ck_assert_int_eq(c.n_eos, 4);
	rc = model_config_parse_generation("[", "g.json", &c, g_err, sizeof g_err);
	ck_assert(rc == SL_EINVAL && strstr(g_err, "g.json"));
}
END_TEST

START_TEST(test_load_dir_reads_generation_config)
{
	ck_assert_int_eq(craft_text(tpath("config.json"),
				    "{\"hidden_size\": 64, \"intermediate_size\": 172, "
				    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
				    "\"vocab_size\": 256, \"eos_token_id\": 2}"), 0);
	model_config c;
	ck_assert_int_eq(model_config_load_dir(g_dir, &c, g_err, sizeof g_err), 0);
	ck_assert_int_eq(c.n_eos, 1);
	ck_assert_int_eq(craft_text(tpath("generation_config.json"),
				    "{\"eos_token_id\": [2, 7]}"), 0);
	ck_assert_int_eq(model_config_load_dir(g_dir, &c, g_err, sizeof g_err), 0);
	ck_assert_int_eq(c.n_eos, 2);
	ck_assert_int_eq(c.eos_ids[1], 7);
	ck_assert_int_eq(craft_text(tpath("generation_config.json"), "{\"eos_token_id\": -1}"), 0);
	ck_assert_int_eq(model_config_load_dir(g_dir, &c, g_err, sizeof g_err), SL_EINVAL);
	ck_assert(strstr(g_err, "generation_config.json"));
	ck_assert(model_path_is_file(tpath("config.json")) && !model_path_is_file(g_dir));
}
END_TEST

/* A model path that is not there is named itself (not PATH/config.json). */
START_TEST(test_missing_path_named)
{
	model_config c;
	const char *missing = tpath("nowhere.gguf");
	ck_assert_int_eq(model_config_load_path(missing, &c, g_err, sizeof g_err), SL_ENOTFOUND);
	ck_assert_msg(strstr(g_err, missing) && !strstr(g_err, "config.json") &&
		      strstr(g_err, "No such file"), "err: %s", g_err);
}
END_TEST

/* ---- loading ---- */

static int create(const char *path, model **m, node_backend **be)
{
	model_opts o = {.step_tokens = 16, .n_kv_blocks = 4, .block_tokens = 4};
	ck_assert_int_eq(node_backend_cpu_create(be), 0);
	return model_create(path, *be, &o, m, g_err, sizeof g_err);
}

static void expect_create_fails(const meta *m, int want, const char *what)
{
	gb b = {0};
	model_file(&b, m, tpath("bad.gguf"));
	node_backend *be;
	model *md = (model *)&g_err;
	int rc = create(tpath("bad.gguf"), &md, &be);
	ck_assert_msg(rc == want, "rc %d, want %d: %s", rc, want, g_err);
	ck_assert_msg(strstr(g_err, "bad.gguf") && strstr(g_err, what),
		      "error \"%s\" does not name the file and %s", g_err, what);
	node_backend_destroy(be);
}

START_TEST(test_model_create_gguf)
{
	gb b = {0};
	meta m = M0;
	model_file(&b, &m, tpath("ok.gguf"));
	node_backend *be;
	model *md = NULL;
	int rc = create(tpath("ok.gguf"), &md, &be);
	ck_assert_msg(rc == 0, "%s", g_err);
	ck_assert_int_eq(md->cfg.vocab_size, N_TOK);
	ck_assert_ptr_eq(md->w.lm_head.data, md->w.tok_emb); /* tied */
	ck_assert(md->bytes_read > 0);
	model_destroy(md);
	node_backend_destroy(be);
	m.drop = "blk.0.ffn_up.weight";
	expect_create_fails(&m, SL_ENOTFOUND, "missing tensor blk.0.ffn_up.weight");
	m = M0;
	m.down_rows = 4;
	expect_create_fails(&m, SL_EINVAL, "tensor blk.0.ffn_down.weight has ne {16, 4}");
	m = M0;
	m.arch = "gpt2";
	expect_create_fails(&m, SL_ENOTSUP, "general.architecture gpt2");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("config_sources");
	TCase *tc = tcase_create("config_sources");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_gguf_config);
	tcase_add_test(tc, test_gguf_config_refusals);
	tcase_add_test(tc, test_generation_config);
	tcase_add_test(tc, test_load_dir_reads_generation_config);
	tcase_add_test(tc, test_missing_path_named);
	tcase_add_test(tc, test_model_create_gguf);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
