/*
 * test_gguf.c — formats/gguf.c and gguf_quant.c against crafted files:
 * every malformed header, key/value, tensor directory and split model must
 * fail with the right code and a message naming the file and the key or
 * tensor at fault; a well-formed file must read back exactly (typed
 * metadata, tensors, slices and the bytes they count); and every storage
 * type must decode exactly as gguf-py does (tests/data/gguf/quant_ref.gguf,
 * made by tools/make_gguf_fixtures.py).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "formats/gguf.h"
#include "unit/gguf_craft.h"
#include "common/sl.h"

#define CRAFT_TAG "gguf"
#include "unit/craft_fixture.h"

/* Writes b as bad.gguf and expects the open to fail with `want`, naming
 * the file, s1 and s2. */
static void open_bad(gb *b, int want, const char *s1, const char *s2)
{
	const char *path = tpath("bad.gguf");
	ck_assert_int_eq(gb_write(b, path), 0);
	sl_gguf *g = (sl_gguf *)&g_err; /* must be reset to NULL */
	int rc = sl_gguf_open(path, &g, g_err, sizeof g_err);
	ck_assert_ptr_null(g);
	expect_err(rc, want, path, s1);
	if (s2)
		ck_assert_msg(strstr(g_err, s2), "error \"%s\" does not name \"%s\"", g_err, s2);
}

static const int64_t NE_W[2] = {8, 2};   /* F32 "w": 2 rows of 8 */
static const int64_t NE_Q[2] = {64, 2};  /* Q8_0 "q": 2 rows of 2 blocks */

/* Data of the two tensors of the well-formed file: w at 0 (64 bytes), q
 * at 64 (2 x 2 x 34 = 136 bytes). */
static void good_data(gb *b)
{
	for (int i = 0; i < 16; i++)
		gb_f32(b, (float)i - 4.5f);
	for (int r = 0; r < 2; r++)
		for (int k = 0; k < 2; k++) {
			gb_u16(b, sl_f32_to_f16(0.5f * (float)(r * 2 + k + 1))); /* d */
			for (int j = 0; j < 32; j++)
				gb_u8(b, (uint8_t)(int8_t)(j - 16));
		}
}

static const char *const TOKENS[] = {"<s>", "</s>", "hello"};

/* A well-formed file: metadata of several types, two tensors. */
static void good_file(gb *b)
{
	gb_header(b, 3, 2, 7);
	gb_kv_str(b, "general.architecture", "llama");
	gb_kv_u32(b, "llama.block_count", 2);
	gb_kv_f32(b, "llama.rope.freq_base", 10000.0f);
	gb_kv_bool(b, "tokenizer.ggml.add_bos_token", 1);
	gb_kv_strs(b, "tokenizer.ggml.tokens", TOKENS, 3);
	int32_t types[3] = {3, 3, -1};
	gb_kv_i32s(b, "tokenizer.ggml.token_type", types, 3);
	gb_key(b, "general.big", SL_GGUF_U64);
	gb_u64(b, UINT64_MAX);
	gb_tensor(b, "w", 2, NE_W, SL_GGML_F32, 0);
	gb_tensor(b, "q", 2, NE_Q, SL_GGML_Q8_0, 64);
	gb_align(b, 32);
	good_data(b);
}

static sl_gguf *open_ok(const char *path)
{
	sl_gguf *g = NULL;
	int rc = sl_gguf_open(path, &g, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "open %s: %s", path, g_err);
	return g;
}

/* ---- a well-formed file ---- */

START_TEST(test_good_metadata)
{
	gb b = {0};
	good_file(&b);
	const char *path = tpath("good.gguf");
	ck_assert_int_eq(gb_write(&b, path), 0);
	sl_gguf *g = open_ok(path);
	int64_t i;
	double f;
	int on;
	sl_gguf_str s;
	sl_gguf_vtype et;
	uint64_t n;
	ck_assert_str_eq(sl_gguf_file_path(g, 0), path);
	ck_assert(sl_gguf_has(g, "llama.block_count") && !sl_gguf_has(g, "llama.nope"));
	ck_assert_int_eq(sl_gguf_get_i64(g, "llama.block_count", &i, g_err, sizeof g_err), 0);
	ck_assert_int_eq(i, 2);
	ck_assert_int_eq(sl_gguf_get_f64(g, "llama.rope.freq_base", &f, g_err, sizeof g_err), 0);
	ck_assert(f == 10000.0);
	ck_assert_int_eq(sl_gguf_get_f64(g, "llama.block_count", &f, g_err, sizeof g_err), 0);
	ck_assert(f == 2.0);
	ck_assert_int_eq(sl_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &on, g_err, sizeof g_err), 0);
	ck_assert_int_eq(on, 1);
	ck_assert_int_eq(sl_gguf_get_str(g, "general.architecture", &s, g_err, sizeof g_err), 0);
	ck_assert(s.n == 5 && !memcmp(s.p, "llama", 5));
	ck_assert_int_eq(sl_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, g_err, sizeof g_err), 0);
	ck_assert(et == SL_GGUF_STRING && n == 3);
	for (uint64_t k = 0; k < n; k++) {
		ck_assert_int_eq(sl_gguf_arr_str(g, "tokenizer.ggml.tokens", k, &s), 0);
		ck_assert(s.n == strlen(TOKENS[k]) && !memcmp(s.p, TOKENS[k], s.n));
	}
	ck_assert_int_ne(sl_gguf_arr_str(g, "tokenizer.ggml.tokens", 3, &s), 0);
	ck_assert_int_ne(sl_gguf_arr_i64(g, "tokenizer.ggml.tokens", 0, &i), 0);
	ck_assert_int_eq(sl_gguf_arr_i64(g, "tokenizer.ggml.token_type", 2, &i), 0);
	ck_assert_int_eq(i, -1);
	ck_assert_int_eq(sl_gguf_arr_f64(g, "tokenizer.ggml.token_type", 0, &f), 0);
	ck_assert(f == 3.0);
	ck_assert_int_ne(sl_gguf_arr_str(g, "tokenizer.ggml.token_type", 0, &s), 0);
	ck_assert_int_ne(sl_gguf_arr_i64(g, "llama.block_count", 0, &i), 0);
	/* absent keys and wrong types name file and key */
	expect_err(sl_gguf_get_i64(g, "llama.nope", &i, g_err, sizeof g_err), SL_ENOTFOUND, path,
		   "llama.nope");
	expect_err(sl_gguf_get_i64(g, "general.architecture", &i, g_err, sizeof g_err), SL_EINVAL,
		   path, "general.architecture");
	expect_err(sl_gguf_get_i64(g, "general.big", &i, g_err, sizeof g_err), SL_EINVAL, path,
		   "out of range");
	expect_err(sl_gguf_get_f64(g, "tokenizer.ggml.tokens", &f, g_err, sizeof g_err), SL_EINVAL,
		   path, "tokenizer.ggml.tokens");
	expect_err(sl_gguf_get_str(g, "llama.block_count", &s, g_err, sizeof g_err), SL_EINVAL,
		   path, "llama.block_count");
	expect_err(sl_gguf_get_bool(g, "llama.block_count", &on, g_err, sizeof g_err), SL_EINVAL,
		   path, "llama.block_count");
	expect_err(sl_gguf_get_arr(g, "llama.block_count", &et, &n, g_err, sizeof g_err), SL_EINVAL,
		   path, "llama.block_count");
	sl_gguf_close(g);
}
END_TEST

START_TEST(test_good_tensors)
{
	gb b = {0};
	good_file(&b);
	const char *path = tpath("good.gguf");
	ck_assert_int_eq(gb_write(&b, path), 0);
	sl_gguf *g = open_ok(path);
	ck_assert_int_eq(sl_gguf_tensor_count(g), 2);
	ck_assert_str_eq(sl_gguf_tensor_at(g, 0)->name, "w"); /* file order */
	ck_assert_ptr_null(sl_gguf_tensor_at(g, 2));
	const sl_gguf_tensor *w, *q, *none;
	ck_assert_int_eq(sl_gguf_get_tensor(g, "w", 2, NE_W, &w, g_err, sizeof g_err), 0);
	ck_assert(w->type == SL_GGML_F32 && w->nbytes == 64 && w->ne[2] == 1 && w->ne[3] == 1);
	ck_assert_int_eq(sl_gguf_get_tensor(g, "q", 2, NE_Q, &q, g_err, sizeof g_err), 0);
	ck_assert(q->type == SL_GGML_Q8_0 && q->nbytes == 136);
	ck_assert_ptr_eq(sl_gguf_find_tensor(g, "q"), q);
	ck_assert_ptr_null(sl_gguf_find_tensor(g, "x"));
	expect_err(sl_gguf_get_tensor(g, "x", 2, NE_W, &none, g_err, sizeof g_err), SL_ENOTFOUND,
		   path, "missing tensor x");
	expect_err(sl_gguf_get_tensor(g, "w", 2, NE_Q, &none, g_err, sizeof g_err), SL_EINVAL, path,
		   "tensor w has ne {8, 2}");
	ck_assert_ptr_null(none);
	/* F32 rows 1, cols [3, 8) */
	float out[64];
	ck_assert_msg(sl_gguf_read_slice(g, w, 1, 1, 3, 5, SL_DT_F32, out, g_err, sizeof g_err) == 0,
		      "%s", g_err);
	for (int j = 0; j < 5; j++)
		ck_assert_float_eq(out[j], (float)(8 + 3 + j) - 4.5f);
	ck_assert_int_eq(sl_gguf_bytes_read(g), 20);
	/* Q8_0: row 1, cols [40, 50) lie in block 1: d = 2.0, q[j] = j - 16 */
	ck_assert_int_eq(sl_gguf_read_slice(g, q, 1, 1, 40, 10, SL_DT_F32, out, g_err, sizeof g_err), 0);
	for (int j = 0; j < 10; j++)
		ck_assert_float_eq(out[j], 2.0f * (float)(40 + j - 32 - 16));
	ck_assert_int_eq(sl_gguf_bytes_read(g), 20 + 34);
	/* cols [30, 34) straddle both blocks: both are read */
	uint16_t h[4];
	ck_assert_int_eq(sl_gguf_read_slice(g, q, 0, 1, 30, 4, SL_DT_F16, h, g_err, sizeof g_err), 0);
	ck_assert_float_eq(sl_f16_to_f32(h[0]), 0.5f * 14);
	ck_assert_float_eq(sl_f16_to_f32(h[2]), 1.0f * -16);
	ck_assert_int_eq(sl_gguf_bytes_read(g), 20 + 34 + 68);
	expect_err(sl_gguf_read_slice(g, q, 1, 2, 0, 64, SL_DT_F32, out, g_err, sizeof g_err),
		   SL_EINVAL, path, "tensor q");
	expect_err(sl_gguf_read_slice(g, q, 0, 1, 60, 5, SL_DT_F32, out, g_err, sizeof g_err),
		   SL_EINVAL, path, "outside");
	sl_gguf_close(g);
	sl_gguf_close(NULL);
}
END_TEST

/* A tensor-parallel split of a matrix read in pieces equals the whole. */
START_TEST(test_slices_tile_the_tensor)
{
	sl_gguf *g = open_ok("tests/data/gguf/quant_ref.gguf");
	const sl_gguf_tensor *t = sl_gguf_find_tensor(g, "q.Q4_K");
	ck_assert_ptr_nonnull(t);
	float whole[3 * 512], part[3 * 512];
	ck_assert_int_eq(sl_gguf_read_slice(g, t, 0, 3, 0, 512, SL_DT_F32, whole, g_err, sizeof g_err), 0);
	ck_assert_int_eq(sl_gguf_bytes_read(g), t->nbytes);
	for (int c0 = 0; c0 < 512; c0 += 128) {
		ck_assert_int_eq(sl_gguf_read_slice(g, t, 1, 2, c0, 128, SL_DT_F32, part, g_err,
						    sizeof g_err), 0);
		for (int r = 0; r < 2; r++)
			for (int c = 0; c < 128; c++)
				ck_assert_msg(part[r * 128 + c] == whole[(r + 1) * 512 + c0 + c],
					      "row %d col %d: %g vs %g", r + 1, c0 + c,
					      part[r * 128 + c], whole[(r + 1) * 512 + c0 + c]);
	}
	sl_gguf_close(g);
}
END_TEST

/* ---- dequantization against gguf-py ---- */

static const char *QTYPES[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K",
			       "Q5_K", "Q6_K", "F32", "F16", "BF16"};

START_TEST(test_dequant_matches_gguf_py)
{
	sl_gguf *g = open_ok("tests/data/gguf/quant_ref.gguf");
	char qn[32], wn[32];
	snprintf(qn, sizeof qn, "q.%s", QTYPES[_i]);
	snprintf(wn, sizeof wn, "want.%s", QTYPES[_i]);
	const sl_gguf_tensor *q = sl_gguf_find_tensor(g, qn), *w = sl_gguf_find_tensor(g, wn);
	ck_assert_msg(q && w, "fixture lacks %s", qn);
	ck_assert_str_eq(sl_ggml_type_name(q->type), QTYPES[_i]);
	ck_assert(w->type == SL_GGML_F32 && q->ne[0] == w->ne[0] && q->ne[1] == w->ne[1]);
	int64_t n = q->ne[0];
	int be, bb;
	ck_assert(sl_ggml_block(q->type, &be, &bb));
	float *got = malloc(sizeof(float) * n), want[512];
	for (int64_t r = 0; r < q->ne[1]; r++) {
		for (int64_t i = 0; i < n; i++)
			got[i] = NAN; /* poisoned: every value must be written */
		const unsigned char *src = (const unsigned char *)q->data + r * (n / be) * bb;
		ck_assert_int_eq(sl_ggml_dequant_row(q->type, src, got, n), 0);
		memcpy(want, (const float *)w->data + r * n, sizeof(float) * n);
		for (int64_t i = 0; i < n; i++)
			ck_assert_msg(got[i] == want[i], "%s row %lld value %lld: got %.9g, gguf-py "
				      "%.9g (tolerance 0: bit-exact)", QTYPES[_i], (long long)r,
				      (long long)i, got[i], want[i]);
	}
	free(got);
	sl_gguf_close(g);
}
END_TEST

START_TEST(test_dequant_refuses)
{
	float y[32];
	unsigned char x[64] = {0};
	ck_assert_int_eq(sl_ggml_dequant_row(11 /* Q3_K */, x, y, 256), SL_ENOTSUP);
	ck_assert_int_eq(sl_ggml_dequant_row(SL_GGML_Q8_0, x, y, 31), SL_ENOTSUP);
	ck_assert_int_eq(sl_ggml_block(11, NULL, NULL), 0);
	ck_assert_str_eq(sl_ggml_type_name(11), "Q3_K");
	ck_assert_str_eq(sl_ggml_type_name(SL_GGML_Q6_K), "Q6_K");
}
END_TEST

/* ---- the header ---- */

START_TEST(test_bad_magic)
{
	gb b = {0};
	good_file(&b);
	memcpy(b.p, "GGML", 4);
	open_bad(&b, SL_EINVAL, "not a GGUF file", NULL);
}
END_TEST

START_TEST(test_bad_version)
{
	gb b = {0};
	gb_header(&b, 1, 0, 0);
	open_bad(&b, SL_ENOTSUP, "version 1", NULL);
	gb_header(&b, 4, 0, 0);
	open_bad(&b, SL_ENOTSUP, "version 4", NULL);
	gb_header(&b, 0x03000000u, 0, 0); /* a big-endian file's version, read little-endian */
	open_bad(&b, SL_ENOTSUP, "big-endian", NULL);
}
END_TEST

START_TEST(test_truncated_header)
{
	gb b = {0};
	gb_header(&b, 3, 0, 0);
	b.n = 20;
	open_bad(&b, SL_EINVAL, "truncated", NULL);
	/* empty file */
	open_bad(&b, SL_EINVAL, "truncated", NULL);
	/* cut inside a key/value */
	gb_header(&b, 3, 0, 1);
	gb_kv_str(&b, "general.architecture", "llama");
	b.n = 24 + 8 + 10;
	open_bad(&b, SL_EINVAL, "key 0", "past the end");
	/* cut inside the tensor infos */
	gb_header(&b, 3, 2, 0);
	gb_tensor(&b, "w", 2, NE_W, SL_GGML_F32, 0);
	size_t cut = b.n + 37; /* inside q's offset field */
	gb_tensor(&b, "q", 2, NE_Q, SL_GGML_Q8_0, 64);
	gb_align(&b, 32);
	good_data(&b);
	b.n = cut;
	open_bad(&b, SL_EINVAL, "truncated", "offset of tensor q");
	/* cut inside the data: the last tensor runs past the end */
	good_file(&b);
	b.n -= 10;
	open_bad(&b, SL_EINVAL, "tensor q", "past the end");
}
END_TEST

START_TEST(test_counts_beyond_file)
{
	gb b = {0};
	gb_header(&b, 3, UINT64_MAX, 0);
	open_bad(&b, SL_EINVAL, "tensor count", NULL);
	gb_header(&b, 3, 1u << 30, 0);
	gb_zeros(&b, 64);
	open_bad(&b, SL_EINVAL, "tensor count", NULL);
	gb_header(&b, 3, 0, UINT64_MAX / 2);
	open_bad(&b, SL_EINVAL, "key/value count", NULL);
	/* a count the file could hold, but fewer are there */
	gb_header(&b, 3, 0, 3);
	gb_kv_u32(&b, "a.b", 1);
	gb_kv_u32(&b, "a.c", 1);
	gb_u64(&b, 1000);
	open_bad(&b, SL_EINVAL, "key 2", "past the end");
}
END_TEST

/* ---- key/values ---- */

START_TEST(test_string_length_beyond_file)
{
	gb b = {0};
	gb_header(&b, 3, 0, 1);
	gb_u64(&b, 1ull << 40); /* the key's length */
	gb_bytes(&b, "general.name", 12);
	open_bad(&b, SL_EINVAL, "key 0", "past the end");
	gb_header(&b, 3, 0, 1);
	gb_key(&b, "general.name", SL_GGUF_STRING);
	gb_u64(&b, UINT64_MAX); /* the value's length */
	gb_bytes(&b, "x", 1);
	open_bad(&b, SL_EINVAL, "general.name", "past the end");
	/* a string in an array */
	gb_header(&b, 3, 0, 1);
	gb_key(&b, "tokenizer.ggml.tokens", SL_GGUF_ARRAY);
	gb_u32(&b, SL_GGUF_STRING);
	gb_u64(&b, 2);
	gb_str(&b, "a");
	gb_u64(&b, 1000);
	gb_bytes(&b, "b", 1);
	open_bad(&b, SL_EINVAL, "string 1 of key tokenizer.ggml.tokens", "past the end");
}
END_TEST

START_TEST(test_bad_key_names)
{
	gb b = {0};
	gb_header(&b, 3, 0, 1);
	gb_u64(&b, 0);
	gb_u32(&b, SL_GGUF_U8);
	gb_u8(&b, 0);
	gb_zeros(&b, 8);
	open_bad(&b, SL_EINVAL, "key 0", "length 0");
	gb_header(&b, 3, 0, 1);
	gb_u64(&b, 5);
	gb_bytes(&b, "ab\0cd", 5);
	gb_u32(&b, SL_GGUF_U8);
	gb_u8(&b, 0);
	open_bad(&b, SL_EINVAL, "NUL", NULL);
}
END_TEST

START_TEST(test_absurd_array_length)
{
	gb b = {0};
	gb_header(&b, 3, 0, 1);
	gb_key(&b, "tokenizer.ggml.scores", SL_GGUF_ARRAY);
	gb_u32(&b, SL_GGUF_F32);
	gb_u64(&b, UINT64_MAX / 2); /* times 4 bytes overflows */
	gb_zeros(&b, 16);
	open_bad(&b, SL_EINVAL, "tokenizer.ggml.scores", "array length");
	gb_header(&b, 3, 0, 1);
	gb_key(&b, "tokenizer.ggml.tokens", SL_GGUF_ARRAY);
	gb_u32(&b, SL_GGUF_STRING);
	gb_u64(&b, 1ull << 40);
	gb_zeros(&b, 64);
	open_bad(&b, SL_EINVAL, "tokenizer.ggml.tokens", "array length");
}
END_TEST

/* An array nested `depth` deep (arrays of one array of ... of one u8). */
static void nested(gb *b, int depth)
{
	gb_header(b, 3, 0, 1);
	gb_key(b, "x.nested", SL_GGUF_ARRAY);
	for (int d = 1; d < depth; d++) {
		gb_u32(b, SL_GGUF_ARRAY);
		gb_u64(b, 1);
	}
	gb_u32(b, SL_GGUF_U8);
	gb_u64(b, 1);
	gb_u8(b, 7);
}

START_TEST(test_nested_arrays)
{
	gb b = {0};
	nested(&b, 3); /* allowed: skipped, not readable as scalars */
	const char *path = tpath("n.gguf");
	ck_assert_int_eq(gb_write(&b, path), 0);
	sl_gguf *g = open_ok(path);
	sl_gguf_vtype et;
	uint64_t n;
	int64_t v;
	ck_assert_int_eq(sl_gguf_get_arr(g, "x.nested", &et, &n, g_err, sizeof g_err), 0);
	ck_assert(et == SL_GGUF_ARRAY && n == 1);
	ck_assert_int_ne(sl_gguf_arr_i64(g, "x.nested", 0, &v), 0);
	sl_gguf_close(g);
	nested(&b, 4);
	open_bad(&b, SL_EINVAL, "x.nested", "nested more than");
	nested(&b, 100000);
	open_bad(&b, SL_EINVAL, "x.nested", "nested more than");
}
END_TEST

START_TEST(test_unknown_value_type)
{
	gb b = {0};
	gb_header(&b, 3, 0, 1);
	gb_key(&b, "general.odd", 13);
	gb_u32(&b, 0);
	open_bad(&b, SL_EINVAL, "general.odd", "unknown value type 13");
	gb_header(&b, 3, 0, 1);
	gb_key(&b, "general.odd", SL_GGUF_ARRAY);
	gb_u32(&b, 99);
	gb_u64(&b, 0);
	open_bad(&b, SL_EINVAL, "general.odd", "unknown array element type 99");
	gb_header(&b, 3, 0, 1);
	gb_kv_bool(&b, "general.flag", 2);
	open_bad(&b, SL_EINVAL, "general.flag", "neither 0 nor 1");
}
END_TEST

START_TEST(test_duplicate_key)
{
	gb b = {0};
	gb_header(&b, 3, 0, 3);
	gb_kv_str(&b, "general.name", "a");
	gb_kv_u32(&b, "llama.block_count", 2);
	gb_kv_str(&b, "general.name", "b");
	open_bad(&b, SL_EINVAL, "duplicate key general.name", NULL);
}
END_TEST

START_TEST(test_bad_alignment)
{
	gb b = {0};
	gb_header(&b, 3, 0, 1);
	gb_kv_u32(&b, "general.alignment", 48);
	open_bad(&b, SL_EINVAL, "general.alignment", "power of two");
	gb_header(&b, 3, 0, 1);
	gb_kv_u32(&b, "general.alignment", 0);
	open_bad(&b, SL_EINVAL, "general.alignment", "power of two");
	gb_header(&b, 3, 0, 1);
	gb_kv_str(&b, "general.alignment", "32");
	open_bad(&b, SL_EINVAL, "general.alignment", "u32");
	/* a good non-default alignment moves the data section */
	int64_t ne[1] = {4};
	gb_header(&b, 3, 1, 1);
	gb_kv_u32(&b, "general.alignment", 64);
	gb_tensor(&b, "v", 1, ne, SL_GGML_F32, 0);
	gb_align(&b, 64);
	for (int i = 0; i < 4; i++)
		gb_f32(&b, (float)i);
	const char *path = tpath("a64.gguf");
	ck_assert_int_eq(gb_write(&b, path), 0);
	sl_gguf *g = open_ok(path);
	float out[4];
	ck_assert_int_eq(sl_gguf_read_slice(g, sl_gguf_find_tensor(g, "v"), 0, 1, 0, 4, SL_DT_F32,
					    out, g_err, sizeof g_err), 0);
	ck_assert(out[0] == 0 && out[3] == 3);
	sl_gguf_close(g);
}
END_TEST

/* ---- the tensor directory ---- */

/* A file with one tensor whose info the caller writes, then data. */
static void one_tensor(gb *b, const char *name, int ndim, const int64_t *ne, int type,
		       uint64_t off, size_t ndata)
{
	gb_header(b, 3, 1, 0);
	gb_tensor(b, name, ndim, ne, type, off);
	gb_align(b, 32);
	gb_zeros(b, ndata);
}

START_TEST(test_unknown_tensor_type)
{
	gb b = {0};
	int64_t ne[2] = {256, 1};
	one_tensor(&b, "blk.0.attn_q.weight", 2, ne, 11, 0, 512);
	open_bad(&b, SL_ENOTSUP, "blk.0.attn_q.weight", "Q3_K");
	one_tensor(&b, "blk.0.attn_q.weight", 2, ne, 1234, 0, 512);
	open_bad(&b, SL_ENOTSUP, "blk.0.attn_q.weight", "type 1234");
	one_tensor(&b, "blk.0.attn_q.weight", 2, ne, -1, 0, 512);
	open_bad(&b, SL_ENOTSUP, "blk.0.attn_q.weight", NULL);
}
END_TEST

START_TEST(test_bad_dims)
{
	gb b = {0};
	int64_t ne[5] = {1, 1, 1, 1, 1};
	one_tensor(&b, "t5", 5, ne, SL_GGML_F32, 0, 32);
	open_bad(&b, SL_EINVAL, "tensor t5", "5 dimensions");
	one_tensor(&b, "t0", 0, ne, SL_GGML_F32, 0, 32);
	open_bad(&b, SL_EINVAL, "tensor t0", "0 dimensions");
	int64_t big[3] = {1ll << 40, 1ll << 40, 2};
	one_tensor(&b, "huge", 3, big, SL_GGML_F32, 0, 32);
	open_bad(&b, SL_EINVAL, "tensor huge", "overflow");
	int64_t neg[2] = {4, -1};
	one_tensor(&b, "neg", 2, neg, SL_GGML_F32, 0, 32);
	open_bad(&b, SL_EINVAL, "tensor neg", "too large");
	/* fits in int64 as a count, not as bytes */
	int64_t wide[2] = {1ll << 32, 1ll << 30};
	one_tensor(&b, "wide", 2, wide, SL_GGML_F32, 0, 32);
	open_bad(&b, SL_EINVAL, "tensor wide", NULL);
	int64_t odd[2] = {40, 1};
	one_tensor(&b, "odd", 2, odd, SL_GGML_Q8_0, 0, 64);
	open_bad(&b, SL_EINVAL, "tensor odd", "block size 32");
	gb_header(&b, 3, 1, 0);
	gb_u64(&b, 0); /* empty name */
	gb_u32(&b, 1);
	gb_u64(&b, 1);
	gb_u32(&b, 0);
	gb_u64(&b, 0);
	gb_zeros(&b, 64);
	open_bad(&b, SL_EINVAL, "name of tensor 0", "length 0");
}
END_TEST

START_TEST(test_bad_offsets)
{
	gb b = {0};
	int64_t ne[1] = {8};
	one_tensor(&b, "mis", 1, ne, SL_GGML_F32, 4, 64);
	open_bad(&b, SL_EINVAL, "tensor mis", "not a multiple of the alignment 32");
	one_tensor(&b, "far", 1, ne, SL_GGML_F32, 1ull << 40, 64);
	open_bad(&b, SL_EINVAL, "tensor far", "past the end");
	one_tensor(&b, "wrap", 1, ne, SL_GGML_F32, UINT64_MAX - 31, 64);
	open_bad(&b, SL_EINVAL, "tensor wrap", "past the end");
	one_tensor(&b, "edge", 1, ne, SL_GGML_F32, 32, 63);
	open_bad(&b, SL_EINVAL, "tensor edge", "past the end");
	/* two tensors sharing bytes */
	gb_header(&b, 3, 2, 0);
	int64_t ne16[1] = {16};
	gb_tensor(&b, "a.weight", 1, ne16, SL_GGML_F32, 0);
	gb_tensor(&b, "b.weight", 1, ne, SL_GGML_F32, 32);
	gb_align(&b, 32);
	gb_zeros(&b, 128);
	open_bad(&b, SL_EINVAL, "a.weight", "overlap");
	ck_assert_ptr_nonnull(strstr(g_err, "b.weight"));
}
END_TEST

START_TEST(test_duplicate_tensor)
{
	gb b = {0};
	int64_t ne[1] = {8};
	gb_header(&b, 3, 2, 0);
	gb_tensor(&b, "output_norm.weight", 1, ne, SL_GGML_F32, 0);
	gb_tensor(&b, "output_norm.weight", 1, ne, SL_GGML_F32, 32);
	gb_align(&b, 32);
	gb_zeros(&b, 64);
	open_bad(&b, SL_EINVAL, "duplicate tensor name output_norm.weight", NULL);
}
END_TEST

START_TEST(test_metadata_only_file)
{
	/* a tokenizer-only file has no tensors and need not pad */
	gb b = {0};
	gb_header(&b, 2, 0, 1);
	gb_kv_str(&b, "general.architecture", "llama");
	const char *path = tpath("meta.gguf");
	ck_assert_int_eq(gb_write(&b, path), 0);
	sl_gguf *g = open_ok(path);
	ck_assert_int_eq(sl_gguf_tensor_count(g), 0);
	ck_assert_ptr_null(sl_gguf_find_tensor(g, "x"));
	sl_gguf_close(g);
	expect_err(sl_gguf_open(tpath("none.gguf"), &g, g_err, sizeof g_err), SL_ENOTFOUND,
		   "none.gguf", NULL);
	expect_err(sl_gguf_open(g_dir, &g, g_err, sizeof g_err), SL_EINVAL, g_dir,
		   "not a regular file");
}
END_TEST

/* ---- split models ---- */

/* Part `no` (0-based) of `count`, holding one F32 tensor `name` of 8
 * values equal to `no`. */
static void split_part(gb *b, const char *name, int no, int count, int64_t total)
{
	int64_t ne[1] = {8};
	gb_header(b, 3, 1, total >= 0 ? 3 : 2);
	gb_kv_u16(b, "split.no", (uint16_t)no);
	gb_kv_u16(b, "split.count", (uint16_t)count);
	if (total >= 0)
		gb_kv_i32(b, "split.tensors.count", (int32_t)total);
	gb_tensor(b, name, 1, ne, SL_GGML_F32, 0);
	gb_align(b, 32);
	for (int i = 0; i < 8; i++)
		gb_f32(b, (float)no);
}

static const char *part_path(int no, int count)
{
	char name[64];
	snprintf(name, sizeof name, "m-%05d-of-%05d.gguf", no + 1, count);
	return tpath(name);
}

static void write_part(const char *name, int no, int count, int64_t total)
{
	gb b = {0};
	split_part(&b, name, no, count, total);
	ck_assert_int_eq(gb_write(&b, part_path(no, count)), 0);
}

START_TEST(test_split_ok)
{
	write_part("token_embd.weight", 0, 3, 3);
	write_part("blk.0.attn_q.weight", 1, 3, -1);
	write_part("output.weight", 2, 3, -1);
	sl_gguf *g = open_ok(part_path(0, 3));
	ck_assert_int_eq(sl_gguf_tensor_count(g), 3);
	const sl_gguf_tensor *t = sl_gguf_find_tensor(g, "output.weight");
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(t->file_index, 2);
	ck_assert_str_eq(sl_gguf_file_path(g, 2), part_path(2, 3));
	float out[8];
	ck_assert_int_eq(sl_gguf_read_slice(g, t, 0, 1, 0, 8, SL_DT_F32, out, g_err, sizeof g_err), 0);
	ck_assert(out[0] == 2.0f && out[7] == 2.0f);
	int64_t v;
	ck_assert_int_eq(sl_gguf_get_i64(g, "split.no", &v, g_err, sizeof g_err), 0);
	ck_assert_int_eq(v, 0); /* metadata comes from the first file */
	sl_gguf_close(g);
}
END_TEST

START_TEST(test_split_bad)
{
	sl_gguf *g;
	/* a part is missing */
	write_part("a", 0, 3, -1);
	write_part("b", 1, 3, -1);
	expect_err(sl_gguf_open(part_path(0, 3), &g, g_err, sizeof g_err), SL_ENOTFOUND,
		   part_path(2, 3), "missing part 3 of 3");
	/* a part disagrees on the count */
	gb b = {0};
	split_part(&b, "c", 2, 4, -1);
	ck_assert_int_eq(gb_write(&b, part_path(2, 3)), 0);
	expect_err(sl_gguf_open(part_path(0, 3), &g, g_err, sizeof g_err), SL_EINVAL,
		   part_path(2, 3), "split.count is 4");
	/* a part has the wrong number */
	split_part(&b, "c", 1, 3, -1);
	ck_assert_int_eq(gb_write(&b, part_path(2, 3)), 0);
	expect_err(sl_gguf_open(part_path(0, 3), &g, g_err, sizeof g_err), SL_EINVAL,
		   part_path(2, 3), "split.no is 1, expected 2");
	/* the same tensor in two parts */
	write_part("a", 2, 3, -1);
	expect_err(sl_gguf_open(part_path(0, 3), &g, g_err, sizeof g_err), SL_EINVAL,
		   "tensor a appears in both", part_path(2, 3));
	/* split.tensors.count disagrees */
	write_part("a", 0, 3, 5);
	write_part("c", 2, 3, -1);
	expect_err(sl_gguf_open(part_path(0, 3), &g, g_err, sizeof g_err), SL_EINVAL,
		   "split.tensors.count is 5", "3 tensors");
	/* opened at the second part */
	expect_err(sl_gguf_open(part_path(1, 3), &g, g_err, sizeof g_err), SL_EINVAL,
		   part_path(1, 3), "open the first part");
	/* split.count > 1 but a name without the -0000k-of-0000n suffix */
	split_part(&b, "a", 0, 3, -1);
	ck_assert_int_eq(gb_write(&b, tpath("plain.gguf")), 0);
	expect_err(sl_gguf_open(tpath("plain.gguf"), &g, g_err, sizeof g_err), SL_EINVAL,
		   "plain.gguf", "-00001-of-00003.gguf");
	/* split.no missing from a later part */
	write_part("a", 0, 2, -1);
	int64_t ne[1] = {8};
	gb_header(&b, 3, 1, 1);
	gb_kv_u16(&b, "split.count", 2);
	gb_tensor(&b, "b", 1, ne, SL_GGML_F32, 0);
	gb_align(&b, 32);
	gb_zeros(&b, 32);
	ck_assert_int_eq(gb_write(&b, part_path(1, 2)), 0);
	expect_err(sl_gguf_open(part_path(0, 2), &g, g_err, sizeof g_err), SL_EINVAL,
		   part_path(1, 2), "split.no is missing");
	/* split.count absurd */
	split_part(&b, "a", 0, 0, -1);
	ck_assert_int_eq(gb_write(&b, tpath("zero.gguf")), 0);
	expect_err(sl_gguf_open(tpath("zero.gguf"), &g, g_err, sizeof g_err), SL_EINVAL,
		   "zero.gguf", "split.count is 0");
}
END_TEST

/* Corrupt the fixture's header a byte (or a run of bytes) at a time: each
 * open must either fail with a message naming the file or give a set whose
 * every tensor reads back; under SANITIZE=address this is a small fuzzer. */
START_TEST(test_corrupted_headers)
{
	char *orig;
	size_t n;
	ck_assert_int_eq(sl_read_file("tests/data/gguf/quant_ref.gguf", &orig, &n, g_err,
				      sizeof g_err), 0);
	size_t header = n < 1400 ? n : 1400; /* the fixture's header and tensor infos */
	const char *path = tpath("fuzz.gguf");
	uint32_t lcg = 7;
	float *out = malloc(sizeof(float) * 3 * 512);
	int opened = 0;
	for (int it = 0; it < 800; it++) {
		char *buf = malloc(n);
		memcpy(buf, orig, n);
		int runs = 1 + it % 3;
		for (int k = 0; k < runs; k++) {
			lcg = lcg * 1664525u + 1013904223u;
			size_t at = (lcg >> 8) % header;
			lcg = lcg * 1664525u + 1013904223u;
			buf[at] = (char)(it % 2 ? (int)(lcg >> 24) : buf[at] ^ (1 << (lcg % 8)));
		}
		lcg = lcg * 1664525u + 1013904223u;
		size_t len = it % 7 == 0 ? (lcg >> 8) % n : n; /* sometimes truncated too */
		ck_assert_int_eq(craft_raw(path, buf, len), 0);
		free(buf);
		sl_gguf *g = NULL;
		g_err[0] = 0;
		int rc = sl_gguf_open(path, &g, g_err, sizeof g_err);
		if (rc) {
			ck_assert_msg(strstr(g_err, path), "error \"%s\" does not name the file", g_err);
			continue;
		}
		opened++;
		for (int i = 0; i < sl_gguf_tensor_count(g); i++) {
			const sl_gguf_tensor *t = sl_gguf_tensor_at(g, i);
			int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
			if (rows * t->ne[0] > 3 * 512)
				continue;
			ck_assert_int_eq(sl_gguf_read_slice(g, t, 0, rows, 0, t->ne[0], SL_DT_F32, out,
							    g_err, sizeof g_err), 0);
		}
		sl_gguf_close(g);
	}
	printf("gguf: %d of 800 corrupted headers opened, the rest refused\n", opened);
	ck_assert_int_gt(opened, 0); /* some corruptions only touch values */
	free(out);
	free(orig);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gguf");
	TCase *tc = tcase_create("gguf");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_good_metadata);
	tcase_add_test(tc, test_good_tensors);
	tcase_add_test(tc, test_slices_tile_the_tensor);
	tcase_add_loop_test(tc, test_dequant_matches_gguf_py, 0,
			    (int)(sizeof QTYPES / sizeof QTYPES[0]));
	tcase_add_test(tc, test_dequant_refuses);
	tcase_add_test(tc, test_bad_magic);
	tcase_add_test(tc, test_bad_version);
	tcase_add_test(tc, test_truncated_header);
	tcase_add_test(tc, test_counts_beyond_file);
	tcase_add_test(tc, test_string_length_beyond_file);
	tcase_add_test(tc, test_bad_key_names);
	tcase_add_test(tc, test_absurd_array_length);
	tcase_add_test(tc, test_nested_arrays);
	tcase_add_test(tc, test_unknown_value_type);
	tcase_add_test(tc, test_duplicate_key);
	tcase_add_test(tc, test_bad_alignment);
	tcase_add_test(tc, test_unknown_tensor_type);
	tcase_add_test(tc, test_bad_dims);
	tcase_add_test(tc, test_bad_offsets);
	tcase_add_test(tc, test_duplicate_tensor);
	tcase_add_test(tc, test_metadata_only_file);
	tcase_add_test(tc, test_split_ok);
	tcase_add_test(tc, test_split_bad);
	tcase_add_test(tc, test_corrupted_headers);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
