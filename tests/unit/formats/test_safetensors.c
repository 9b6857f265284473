/*
 * test_safetensors.c — formats/safetensors.c against crafted files: every
 * malformed input must fail with the right code and a message naming the
 * file and tensor; files from the writer must read back bit-exact, and
 * read_slice must convert sub-blocks correctly and count the bytes read.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dtype.h"
#include "formats/safetensors.h"
#include "formats/st_writer.h"
#include "common/sl.h"
#include "unit/st_craft.h"

#define CRAFT_TAG "st"
#include "unit/craft_fixture.h"

/* Deterministic non-zero values: an LCG, so failures reproduce. */
static uint32_t g_lcg = 12345;
static float rand_val(void)
{
	g_lcg = g_lcg * 1664525u + 1013904223u;
	float u = (float)(g_lcg >> 8) / 16777216.0f;  /* [0, 1) */
	return (u - 0.5f) * 4.0f + (u < 0.5f ? -0.01f : 0.01f);
}

static void fill_rand(void *dst, sl_dtype dt, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float v = rand_val();
		if (dt == SL_DT_F32)
			((float *)dst)[i] = v;
		else if (dt == SL_DT_F16)
			((uint16_t *)dst)[i] = sl_f32_to_f16(v);
		else
			((uint16_t *)dst)[i] = sl_f32_to_bf16(v);
	}
}

/* Frames `header` + ndata zero bytes as bad.safetensors and expects the
 * open to fail with `want`, naming the file and `what`. */
static void open_bad(const char *header, size_t ndata, int want, const char *what)
{
	const char *path = tpath("bad.safetensors");
	ck_assert_int_eq(craft_st(path, header, NULL, ndata), 0);
	sl_st_set *s = (sl_st_set *)&g_err;  /* must be reset to NULL */
	int rc = sl_st_open_file(path, &s, g_err, sizeof g_err);
	ck_assert_ptr_null(s);
	expect_err(rc, want, path, what);
}

/* ---- framing ---- */

START_TEST(test_truncated)
{
	const char *path = tpath("t.safetensors");
	sl_st_set *s;
	ck_assert_int_eq(craft_raw(path, "\x10\0\0\0\0", 5), 0);
	expect_err(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_EINVAL, path,
		   "truncated");
	ck_assert_int_eq(craft_raw(path, "", 0), 0);
	expect_err(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_EINVAL, path,
		   "truncated");
}
END_TEST

START_TEST(test_header_len_bad)
{
	const char *path = tpath("h.safetensors");
	sl_st_set *s;
	ck_assert_int_eq(craft_st_len(path, 1000, "{}", NULL, 16), 0);
	expect_err(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_EINVAL, path,
		   "past the end");
	ck_assert_int_eq(craft_st_len(path, 0, "{}", NULL, 0), 0);
	expect_err(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_EINVAL, path,
		   "header length is 0");
	ck_assert_int_eq(craft_st_len(path, (uint64_t)1 << 40, "{}", NULL, 0), 0);
	expect_err(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_EINVAL, path, "absurd");
	ck_assert_int_eq(craft_st_len(path, UINT64_MAX, "{}", NULL, 0), 0);
	expect_err(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_EINVAL, path, "absurd");
}
END_TEST

START_TEST(test_missing_file)
{
	sl_st_set *s;
	const char *path = tpath("nope.safetensors");
	expect_err(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_ENOTFOUND, path, NULL);
}
END_TEST

START_TEST(test_bad_json)
{
	open_bad("{\"w\": {\"dtype\": \"F32\", ", 0, SL_EINVAL, "not valid JSON");
	open_bad("{} trailing", 0, SL_EINVAL, "not valid JSON");
}
END_TEST

START_TEST(test_not_object)
{
	open_bad("[1, 2]", 0, SL_EINVAL, "not a JSON object");
	open_bad("\"w\"", 0, SL_EINVAL, "not a JSON object");
}
END_TEST

START_TEST(test_embedded_nul)
{
	/* a NUL inside the declared header must not hide the bytes after it */
	const char hdr[] = "{}\0garbage";
	const char *path = tpath("nul.safetensors");
	sl_st_set *s;
	FILE *f = fopen(path, "wb");
	uint64_t n = sizeof hdr - 1;
	unsigned char le[8];
	for (int i = 0; i < 8; i++)
		le[i] = (unsigned char)(n >> (8 * i));
	ck_assert(f && fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, n, f) == n);
	fclose(f);
	expect_err(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_EINVAL, path,
		   "not valid JSON");
}
END_TEST

START_TEST(test_empty_header_ok)
{
	const char *path = tpath("e.safetensors");
	sl_st_set *s;
	ck_assert_int_eq(craft_st(path, "{\"__metadata__\": {\"format\": \"pt\"}}  ", NULL, 0), 0);
	ck_assert_int_eq(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_OK);
	ck_assert_int_eq(sl_st_count(s), 0);
	ck_assert_ptr_null(sl_st_find(s, "w"));
	sl_st_close(s);
}
END_TEST

START_TEST(test_bad_metadata)
{
	open_bad("{\"__metadata__\": {\"format\": 1}}", 0, SL_EINVAL, "__metadata__.format");
	open_bad("{\"__metadata__\": [1]}", 0, SL_EINVAL, "__metadata__");
}
END_TEST

/* ---- tensor entries ---- */

#define W "model.layers.0.mlp.up_proj.weight"

START_TEST(test_offsets_out_of_range)
{
	open_bad("{\"" W "\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
		 4, SL_EINVAL, W);
	ck_assert_ptr_nonnull(strstr(g_err, "out of range"));
}
END_TEST

START_TEST(test_overlap)
{
	open_bad("{\"a.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
		 " \"b.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
		 12, SL_EINVAL, "a.weight");
	ck_assert_ptr_nonnull(strstr(g_err, "b.weight"));
	ck_assert_ptr_nonnull(strstr(g_err, "overlap"));
	/* the same, listed in the other order */
	open_bad("{\"b.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]},"
		 " \"a.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
		 12, SL_EINVAL, "a.weight");
	ck_assert_ptr_nonnull(strstr(g_err, "overlap"));
}
END_TEST

START_TEST(test_adjacent_and_empty_ok)
{
	const char *path = tpath("adj.safetensors");
	sl_st_set *s;
	ck_assert_int_eq(craft_st(path,
		"{\"b\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [8, 12]},"
		" \"z\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [8, 8]},"
		" \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
		NULL, 12), 0);
	ck_assert_int_eq(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_OK);
	ck_assert_int_eq(sl_st_count(s), 3);
	/* sl_st_at is in name order */
	ck_assert_str_eq(sl_st_at(s, 0)->name, "a");
	ck_assert_str_eq(sl_st_at(s, 2)->name, "z");
	ck_assert_ptr_null(sl_st_at(s, 3));
	ck_assert_int_eq(sl_st_find(s, "z")->nbytes, 0);
	sl_st_close(s);
}
END_TEST

START_TEST(test_unknown_dtype)
{
	open_bad("{\"" W "\": {\"dtype\": \"I8\", \"shape\": [4], \"data_offsets\": [0, 4]}}",
		 4, SL_ENOTSUP, W);
	ck_assert_ptr_nonnull(strstr(g_err, "unsupported dtype I8"));
	open_bad("{\"" W "\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}",
		 8, SL_ENOTSUP, "F64");
	/* config.json spellings are not safetensors dtypes */
	open_bad("{\"" W "\": {\"dtype\": \"float32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
		 4, SL_ENOTSUP, W);
}
END_TEST

START_TEST(test_size_mismatch)
{
	open_bad("{\"" W "\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}",
		 8, SL_EINVAL, W);
	ck_assert_ptr_nonnull(strstr(g_err, "needs 12"));
	open_bad("{\"" W "\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}",
		 16, SL_EINVAL, W);
	/* a shape whose element count overflows must not wrap to a small size */
	open_bad("{\"" W "\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296,"
		 " 0], \"data_offsets\": [0, 0]}}", 0, SL_EINVAL, "too large");
}
END_TEST

START_TEST(test_bad_shape)
{
	static const char *shapes[] = {
		"[-1, 2]", "[1.5]", "[\"2\"]", "[true]", "3", "{\"a\": 1}", "null",
	};
	char hdr[256];
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		snprintf(hdr, sizeof hdr, "{\"" W "\": {\"dtype\": \"F32\", \"shape\": %s, "
			 "\"data_offsets\": [0, 4]}}", shapes[i]);
		open_bad(hdr, 4, SL_EINVAL, W);
		ck_assert_ptr_nonnull(strstr(g_err, "shape"));
	}
	open_bad("{\"" W "\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, SL_EINVAL,
		 "missing shape");
	open_bad("{\"" W "\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], "
		 "\"data_offsets\": [0, 4]}}", 4, SL_ENOTSUP, W);
}
END_TEST

START_TEST(test_bad_offsets)
{
	static const char *offs[] = {
		"[8, 4]", "[0, 4, 8]", "[0]", "[-4, 4]", "[0, \"4\"]", "[0.5, 4]", "{}", "4",
	};
	char hdr[256];
	for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
		snprintf(hdr, sizeof hdr, "{\"" W "\": {\"dtype\": \"F32\", \"shape\": [1], "
			 "\"data_offsets\": %s}}", offs[i]);
		open_bad(hdr, 8, SL_EINVAL, W);
		ck_assert_ptr_nonnull(strstr(g_err, "data_offsets"));
	}
	open_bad("{\"" W "\": {\"dtype\": \"F32\", \"shape\": [1]}}", 8, SL_EINVAL,
		 "missing data_offsets");
}
END_TEST

START_TEST(test_bad_entry)
{
	open_bad("{\"" W "\": 3}", 0, SL_EINVAL, W);
	ck_assert_ptr_nonnull(strstr(g_err, "not an object"));
	open_bad("{\"" W "\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, SL_EINVAL,
		 "missing dtype");
	ck_assert_ptr_nonnull(strstr(g_err, W));
	open_bad("{\"" W "\": {\"dtype\": 1, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
		 SL_EINVAL, W);
}
END_TEST

START_TEST(test_duplicate_in_file)
{
	open_bad("{\"" W "\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
		 " \"" W "\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
		 8, SL_EINVAL, W);
	ck_assert_ptr_nonnull(strstr(g_err, "duplicate"));
}
END_TEST

/* ---- writer, lookup, read_slice ---- */

/* Writes `n` tensors with random data to path; data[i] receives a malloc'd
 * copy of what was written (caller frees) when data is not NULL. */
static void write_ckpt(const char *path, int n, const sl_st_desc *d, void **data)
{
	sl_st_writer *w;
	ck_assert_msg(sl_st_writer_open(path, n, d, &w, g_err, sizeof g_err) == SL_OK, "%s",
		      g_err);
	for (int i = 0; i < n; i++) {
		size_t numel = 1;
		for (int k = 0; k < d[i].ndim; k++)
			numel *= (size_t)d[i].shape[k];
		size_t nb = numel * sl_dtype_size(d[i].dtype);
		void *buf = malloc(nb ? nb : 1);
		fill_rand(buf, d[i].dtype, numel);
		ck_assert_msg(sl_st_writer_put(w, buf, nb, g_err, sizeof g_err) == SL_OK, "%s",
			      g_err);
		if (data)
			data[i] = buf;
		else
			free(buf);
	}
	ck_assert_msg(sl_st_writer_close(w, g_err, sizeof g_err) == SL_OK, "%s", g_err);
}

static const sl_st_desc g_descs[] = {
	{"model.embed_tokens.weight", SL_DT_F32, 2, {3, 5}},
	{"model.layers.0.self_attn.q_proj.weight", SL_DT_F16, 2, {4, 6}},
	{"model.norm.weight", SL_DT_BF16, 1, {7}},
	{"scalar", SL_DT_F32, 0, {0}},
	{"empty", SL_DT_BF16, 2, {0, 4}},
	{"cube", SL_DT_F16, 3, {2, 3, 4}},
};
#define N_DESCS ((int)(sizeof g_descs / sizeof g_descs[0]))

START_TEST(test_roundtrip)
{
	const char *path = tpath("model.safetensors");
	void *data[N_DESCS];
	sl_st_set *s;
	write_ckpt(path, N_DESCS, g_descs, data);
	ck_assert_msg(sl_st_open_file(path, &s, g_err, sizeof g_err) == SL_OK, "%s", g_err);
	ck_assert_int_eq(sl_st_count(s), N_DESCS);
	ck_assert_str_eq(sl_st_file_path(s, 0), path);
	ck_assert_ptr_null(sl_st_file_path(s, 1));
	for (int i = 0; i < N_DESCS; i++) {
		const sl_st_tensor *t = sl_st_find(s, g_descs[i].name);
		ck_assert_ptr_nonnull(t);
		ck_assert_int_eq(t->dtype, g_descs[i].dtype);
		ck_assert_int_eq(t->ndim, g_descs[i].ndim);
		ck_assert_int_eq(t->file_index, 0);
		size_t numel = 1;
		for (int k = 0; k < t->ndim; k++) {
			ck_assert_int_eq(t->shape[k], g_descs[i].shape[k]);
			numel *= (size_t)t->shape[k];
		}
		ck_assert_uint_eq(t->nbytes, numel * sl_dtype_size(t->dtype));
		ck_assert_msg(!memcmp(t->data, data[i], t->nbytes), "tensor %s differs", t->name);
		free(data[i]);
	}
	ck_assert_ptr_null(sl_st_find(s, "model.missing"));
	ck_assert_uint_eq(sl_st_bytes_read(s), 0);
	sl_st_close(s);
}
END_TEST

START_TEST(test_header_aligned)
{
	const char *path = tpath("al.safetensors");
	unsigned char le[8];
	write_ckpt(path, 1, g_descs + 2, NULL);  /* odd-length name */
	FILE *f = fopen(path, "rb");
	ck_assert(f && fread(le, 1, 8, f) == 8);
	fclose(f);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | le[i];
	ck_assert_uint_eq((8 + n) % 8, 0);
}
END_TEST

START_TEST(test_get_missing)
{
	const char *path = tpath("model.safetensors");
	sl_st_set *s;
	const sl_st_tensor *t = (const sl_st_tensor *)&g_err;
	int64_t shape[2] = {64, 32};
	write_ckpt(path, N_DESCS, g_descs, NULL);
	ck_assert_int_eq(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_OK);
	expect_err(sl_st_get(s, "lm_head.weight", 2, shape, &t, g_err, sizeof g_err),
		   SL_ENOTFOUND, "lm_head.weight", path);
	ck_assert_ptr_null(t);
	sl_st_close(s);
}
END_TEST

START_TEST(test_get_shape_mismatch)
{
	const char *path = tpath("model.safetensors");
	sl_st_set *s;
	const sl_st_tensor *t;
	int64_t want[2] = {5, 3}, right[2] = {3, 5}, one[1] = {15};
	write_ckpt(path, N_DESCS, g_descs, NULL);
	ck_assert_int_eq(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_OK);
	expect_err(sl_st_get(s, "model.embed_tokens.weight", 2, want, &t, g_err, sizeof g_err),
		   SL_EINVAL, "model.embed_tokens.weight", path);
	ck_assert_ptr_nonnull(strstr(g_err, "has shape [3, 5], config expects [5, 3]"));
	expect_err(sl_st_get(s, "model.embed_tokens.weight", 1, one, &t, g_err, sizeof g_err),
		   SL_EINVAL, "[15]", "[3, 5]");
	ck_assert_int_eq(sl_st_get(s, "model.embed_tokens.weight", 2, right, &t, g_err,
				   sizeof g_err), SL_OK);
	ck_assert_str_eq(t->name, "model.embed_tokens.weight");
	sl_st_close(s);
}
END_TEST

/* Element (r, c) of a row-major [rows, cols] buffer of dtype dt, as f32. */
static float elem(const void *p, sl_dtype dt, int64_t cols, int64_t r, int64_t c)
{
	size_t i = (size_t)(r * cols + c);
	if (dt == SL_DT_F32)
		return ((const float *)p)[i];
	uint16_t h = ((const uint16_t *)p)[i];
	return dt == SL_DT_F16 ? sl_f16_to_f32(h) : sl_bf16_to_f32(h);
}

START_TEST(test_slice_bf16_to_f32)
{
	static const sl_st_desc d[] = {{"w", SL_DT_BF16, 2, {6, 8}}};
	const char *path = tpath("s.safetensors");
	void *src;
	sl_st_set *s;
	float out[3 * 5];
	write_ckpt(path, 1, d, &src);
	ck_assert_int_eq(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_OK);
	const sl_st_tensor *t = sl_st_find(s, "w");
	ck_assert_int_eq(sl_st_read_slice(s, t, 1, 3, 2, 5, SL_DT_F32, out, g_err,
					  sizeof g_err), SL_OK);
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 5; c++) {
			float want = elem(src, SL_DT_BF16, 8, 1 + r, 2 + c);
			ck_assert_msg(out[r * 5 + c] == want && want != 0,
				      "[%d, %d]: got %g, want %g", r, c, out[r * 5 + c], want);
		}
	ck_assert_uint_eq(sl_st_bytes_read(s), 3 * 5 * 2);
	free(src);
	sl_st_close(s);
}
END_TEST

START_TEST(test_slice_f32_to_f16)
{
	static const sl_st_desc d[] = {{"w", SL_DT_F32, 2, {5, 4}}, {"b", SL_DT_F32, 1, {10}}};
	const char *path = tpath("s.safetensors");
	void *src[2];
	sl_st_set *s;
	uint16_t out[3 * 3];
	write_ckpt(path, 2, d, src);
	ck_assert_int_eq(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_OK);
	const sl_st_tensor *t = sl_st_find(s, "w");
	ck_assert_int_eq(sl_st_read_slice(s, t, 2, 3, 0, 3, SL_DT_F16, out, g_err,
					  sizeof g_err), SL_OK);
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 3; c++) {
			uint16_t want = sl_f32_to_f16(elem(src[0], SL_DT_F32, 4, 2 + r, c));
			ck_assert_msg(out[r * 3 + c] == want, "[%d, %d]: got 0x%04x, want 0x%04x",
				      r, c, out[r * 3 + c], want);
		}
	ck_assert_uint_eq(sl_st_bytes_read(s), 3 * 3 * 4);
	/* 1-D: one row */
	t = sl_st_find(s, "b");
	ck_assert_int_eq(sl_st_read_slice(s, t, 0, 1, 3, 4, SL_DT_F16, out, g_err,
					  sizeof g_err), SL_OK);
	for (int c = 0; c < 4; c++)
		ck_assert_uint_eq(out[c], sl_f32_to_f16(((float *)src[1])[3 + c]));
	ck_assert_uint_eq(sl_st_bytes_read(s), 3 * 3 * 4 + 4 * 4);
	free(src[0]);
	free(src[1]);
	sl_st_close(s);
}
END_TEST

START_TEST(test_slice_3d_same_dtype)
{
	const char *path = tpath("s.safetensors");
	void *src[N_DESCS];
	sl_st_set *s;
	uint16_t out[6 * 4];
	write_ckpt(path, N_DESCS, g_descs, src);
	ck_assert_int_eq(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_OK);
	/* cube [2, 3, 4] is a [6, 4] view */
	const sl_st_tensor *t = sl_st_find(s, "cube");
	ck_assert_int_eq(sl_st_read_slice(s, t, 0, 6, 0, 4, SL_DT_F16, out, g_err,
					  sizeof g_err), SL_OK);
	ck_assert(!memcmp(out, src[5], sizeof out));
	/* a 0-D scalar is one row of one column */
	float v;
	t = sl_st_find(s, "scalar");
	ck_assert_int_eq(sl_st_read_slice(s, t, 0, 1, 0, 1, SL_DT_F32, &v, g_err,
					  sizeof g_err), SL_OK);
	ck_assert(v == *(float *)src[3]);
	ck_assert_uint_eq(sl_st_bytes_read(s), 6 * 4 * 2 + 4);
	for (int i = 0; i < N_DESCS; i++)
		free(src[i]);
	sl_st_close(s);
}
END_TEST

START_TEST(test_slice_out_of_bounds)
{
	static const sl_st_desc d[] = {{"w", SL_DT_F32, 2, {5, 4}}};
	static const int64_t bad[][4] = {
		{0, 6, 0, 4}, {5, 1, 0, 1}, {-1, 1, 0, 1}, {0, 1, 0, 5}, {0, 1, 3, 2},
		{0, 1, -1, 2}, {0, -1, 0, 1}, {INT64_MAX, 2, 0, 1}, {0, 1, 1, INT64_MAX},
	};
	const char *path = tpath("s.safetensors");
	sl_st_set *s;
	float out[32];
	write_ckpt(path, 1, d, NULL);
	ck_assert_int_eq(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_OK);
	const sl_st_tensor *t = sl_st_find(s, "w");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		expect_err(sl_st_read_slice(s, t, bad[i][0], bad[i][1], bad[i][2], bad[i][3],
					    SL_DT_F32, out, g_err, sizeof g_err),
			   SL_EINVAL, "w in", path);
	ck_assert_uint_eq(sl_st_bytes_read(s), 0);
	sl_st_close(s);
}
END_TEST

START_TEST(test_slice_misaligned)
{
	/* a foreign writer that did not pad: data starts at an odd offset */
	char hdr[256];
	float f[6];
	uint16_t h[4], out16[6];
	float out32[4];
	unsigned char data[sizeof f + sizeof h];
	const char *path = tpath("odd.safetensors");
	sl_st_set *s;
	fill_rand(f, SL_DT_F32, 6);
	fill_rand(h, SL_DT_F16, 4);
	memcpy(data, f, sizeof f);
	memcpy(data + sizeof f, h, sizeof h);
	int n = snprintf(hdr, sizeof hdr, "{\"f\": {\"dtype\": \"F32\", \"shape\": [2, 3], "
			 "\"data_offsets\": [0, 24]}, \"h\": {\"dtype\": \"F16\", \"shape\": [4], "
			 "\"data_offsets\": [24, 32]}}");
	while ((8 + n) % 2 == 0)
		hdr[n++] = ' ', hdr[n] = 0;
	ck_assert_int_eq(craft_st(path, hdr, data, sizeof data), 0);
	ck_assert_int_eq(sl_st_open_file(path, &s, g_err, sizeof g_err), SL_OK);
	const sl_st_tensor *t = sl_st_find(s, "f");
	ck_assert_uint_ne((uintptr_t)t->data % 2, 0);
	ck_assert_int_eq(sl_st_read_slice(s, t, 0, 2, 0, 3, SL_DT_F16, out16, g_err,
					  sizeof g_err), SL_OK);
	for (int i = 0; i < 6; i++)
		ck_assert_uint_eq(out16[i], sl_f32_to_f16(f[i]));
	t = sl_st_find(s, "h");
	ck_assert_int_eq(sl_st_read_slice(s, t, 0, 1, 0, 4, SL_DT_F32, out32, g_err,
					  sizeof g_err), SL_OK);
	for (int i = 0; i < 4; i++)
		ck_assert(out32[i] == sl_f16_to_f32(h[i]));
	sl_st_close(s);
}
END_TEST

START_TEST(test_writer_errors)
{
	static const sl_st_desc dup[] = {{"a", SL_DT_F32, 1, {2}}, {"a", SL_DT_F32, 1, {2}}};
	static const sl_st_desc neg[] = {{"n", SL_DT_F32, 2, {2, -3}}};
	static const sl_st_desc two[] = {{"a", SL_DT_F32, 1, {2}}, {"b", SL_DT_F16, 1, {3}}};
	const char *path = tpath("w.safetensors");
	sl_st_writer *w;
	float buf[4] = {1, 2, 3, 4};
	expect_err(sl_st_writer_open(path, 2, dup, &w, g_err, sizeof g_err), SL_EINVAL,
		   "duplicate", "a");
	expect_err(sl_st_writer_open(path, 1, neg, &w, g_err, sizeof g_err), SL_EINVAL,
		   "n", "negative");
	ck_assert_int_eq(sl_st_writer_open(path, 2, two, &w, g_err, sizeof g_err), SL_OK);
	expect_err(sl_st_writer_put(w, buf, 12, g_err, sizeof g_err), SL_EINVAL, "a", path);
	ck_assert_int_eq(sl_st_writer_put(w, buf, 8, g_err, sizeof g_err), SL_OK);
	expect_err(sl_st_writer_close(w, g_err, sizeof g_err), SL_EINVAL, "1 of 2", path);
	ck_assert_int_ne(access(path, F_OK), 0);  /* a partial file is removed */
	ck_assert_int_eq(sl_st_writer_open(path, 1, two, &w, g_err, sizeof g_err), SL_OK);
	ck_assert_int_eq(sl_st_writer_put(w, buf, 8, g_err, sizeof g_err), SL_OK);
	expect_err(sl_st_writer_put(w, buf, 8, g_err, sizeof g_err), SL_EINVAL, "already", path);
	ck_assert_int_eq(sl_st_writer_close(w, g_err, sizeof g_err), SL_OK);
	ck_assert_int_eq(sl_st_writer_close(NULL, g_err, sizeof g_err), SL_OK);
	expect_err(sl_st_writer_open(tpath("nodir/x.safetensors"), 1, two, &w, g_err,
				     sizeof g_err), SL_EIO, "nodir", NULL);
}
END_TEST

/* ---- folders and sharded checkpoints ---- */

/* Two shards: 1 holds a, b; 2 holds c (and b too when dup_b). */
static void write_shards(int dup_b)
{
	static const sl_st_desc s1[] = {{"a", SL_DT_F32, 1, {4}}, {"b", SL_DT_F16, 2, {2, 2}}};
	static const sl_st_desc s2[] = {{"c", SL_DT_BF16, 1, {3}}, {"b", SL_DT_F16, 2, {2, 2}}};
	write_ckpt(tpath("model-00001-of-00002.safetensors"), 2, s1, NULL);
	write_ckpt(tpath("model-00002-of-00002.safetensors"), dup_b ? 2 : 1, s2, NULL);
}

static void write_index(const char *weight_map)
{
	char text[1024];
	snprintf(text, sizeof text, "{\"metadata\": {\"total_size\": 30}, \"weight_map\": %s}",
		 weight_map);
	ck_assert_int_eq(craft_text(tpath("model.safetensors.index.json"), text), 0);
}

#define SH1 "model-00001-of-00002.safetensors"
#define SH2 "model-00002-of-00002.safetensors"

START_TEST(test_dir_single)
{
	sl_st_set *s;
	write_ckpt(tpath("model.safetensors"), N_DESCS, g_descs, NULL);
	ck_assert_int_eq(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_OK);
	ck_assert_int_eq(sl_st_count(s), N_DESCS);
	sl_st_close(s);
}
END_TEST

START_TEST(test_dir_sharded)
{
	sl_st_set *s;
	write_shards(0);
	write_index("{\"a\": \"" SH1 "\", \"b\": \"" SH1 "\", \"c\": \"" SH2 "\"}");
	ck_assert_msg(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err) == SL_OK, "%s", g_err);
	ck_assert_int_eq(sl_st_count(s), 3);
	const sl_st_tensor *c = sl_st_find(s, "c");
	ck_assert_int_eq(c->file_index, 1);
	ck_assert_ptr_nonnull(strstr(sl_st_file_path(s, c->file_index), SH2));
	ck_assert_int_eq(sl_st_find(s, "a")->file_index, 0);
	int64_t shape[2] = {2, 3};
	const sl_st_tensor *t;
	expect_err(sl_st_get(s, "b", 2, shape, &t, g_err, sizeof g_err), SL_EINVAL, SH1, "[2, 2]");
	expect_err(sl_st_get(s, "d", 2, shape, &t, g_err, sizeof g_err), SL_ENOTFOUND,
		   "missing tensor d in", "model.safetensors.index.json");
	sl_st_close(s);
}
END_TEST

START_TEST(test_dir_dup_across_shards)
{
	sl_st_set *s;
	write_shards(1);
	write_index("{\"a\": \"" SH1 "\", \"b\": \"" SH1 "\", \"c\": \"" SH2 "\"}");
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_EINVAL, "tensor b", SH1);
	ck_assert_ptr_nonnull(strstr(g_err, SH2));
	ck_assert_ptr_null(s);
}
END_TEST

START_TEST(test_dir_missing_shard)
{
	sl_st_set *s;
	write_shards(0);
	write_index("{\"a\": \"" SH1 "\", \"z\": \"model-00003-of-00003.safetensors\"}");
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_ENOTFOUND,
		   "model-00003-of-00003.safetensors", g_dir);
}
END_TEST

START_TEST(test_dir_tensor_not_in_shard)
{
	sl_st_set *s;
	write_shards(0);
	write_index("{\"a\": \"" SH1 "\", \"x\": \"" SH1 "\"}");
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_ENOTFOUND,
		   "missing tensor x: index says", SH1);
	/* present, but in the other shard than the index says */
	write_index("{\"a\": \"" SH1 "\", \"c\": \"" SH1 "\", \"b\": \"" SH2 "\"}");
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_ENOTFOUND,
		   "missing tensor c", SH1);
}
END_TEST

START_TEST(test_dir_bad_index)
{
	sl_st_set *s;
	const char *ipath = tpath("model.safetensors.index.json");
	write_shards(0);
	write_index("{\"a\": \"../" SH1 "\"}");
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_EINVAL, ipath, "a");
	write_index("{\"a\": \"sub/" SH1 "\"}");
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_EINVAL, ipath, "a");
	write_index("{\"a\": 1}");
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_EINVAL, ipath, "a");
	write_index("{}");
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_EINVAL, ipath, "empty");
	write_index("[]");
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_EINVAL, ipath,
		   "weight_map");
	ck_assert_int_eq(craft_text(ipath, "{\"metadata\": {}}"), 0);
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_EINVAL, ipath,
		   "missing weight_map");
	ck_assert_int_eq(craft_text(ipath, "{\"weight_map\": {\"a\": "), 0);
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_EINVAL, ipath,
		   "not valid JSON");
}
END_TEST

START_TEST(test_dir_empty)
{
	sl_st_set *s;
	char sub[128];
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_ENOTFOUND, g_dir,
		   "model.safetensors");
	snprintf(sub, sizeof sub, "%s/nope", g_dir);
	expect_err(sl_st_open_dir(sub, &s, g_err, sizeof g_err), SL_ENOTFOUND, sub, NULL);
	/* a bad single file in a folder is reported with its path */
	ck_assert_int_eq(craft_raw(tpath("model.safetensors"), "abc", 3), 0);
	expect_err(sl_st_open_dir(g_dir, &s, g_err, sizeof g_err), SL_EINVAL,
		   tpath("model.safetensors"), "truncated");
}
END_TEST

static Suite *st_suite(void)
{
	Suite *su = suite_create("safetensors");
	TCase *tc = tcase_create("format");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_truncated);
	tcase_add_test(tc, test_header_len_bad);
	tcase_add_test(tc, test_missing_file);
	tcase_add_test(tc, test_bad_json);
	tcase_add_test(tc, test_not_object);
	tcase_add_test(tc, test_embedded_nul);
	tcase_add_test(tc, test_empty_header_ok);
	tcase_add_test(tc, test_bad_metadata);
	tcase_add_test(tc, test_offsets_out_of_range);
	tcase_add_test(tc, test_overlap);
	tcase_add_test(tc, test_adjacent_and_empty_ok);
	tcase_add_test(tc, test_unknown_dtype);
	tcase_add_test(tc, test_size_mismatch);
	tcase_add_test(tc, test_bad_shape);
	tcase_add_test(tc, test_bad_offsets);
	tcase_add_test(tc, test_bad_entry);
	tcase_add_test(tc, test_duplicate_in_file);
	suite_add_tcase(su, tc);

	tc = tcase_create("read_write");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_roundtrip);
	tcase_add_test(tc, test_header_aligned);
	tcase_add_test(tc, test_get_missing);
	tcase_add_test(tc, test_get_shape_mismatch);
	tcase_add_test(tc, test_slice_bf16_to_f32);
	tcase_add_test(tc, test_slice_f32_to_f16);
	tcase_add_test(tc, test_slice_3d_same_dtype);
	tcase_add_test(tc, test_slice_out_of_bounds);
	tcase_add_test(tc, test_slice_misaligned);
	tcase_add_test(tc, test_writer_errors);
	suite_add_tcase(su, tc);

	tc = tcase_create("folders");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_dir_single);
	tcase_add_test(tc, test_dir_sharded);
	tcase_add_test(tc, test_dir_dup_across_shards);
	tcase_add_test(tc, test_dir_missing_shard);
	tcase_add_test(tc, test_dir_tensor_not_in_shard);
	tcase_add_test(tc, test_dir_bad_index);
	tcase_add_test(tc, test_dir_empty);
	suite_add_tcase(su, tc);
	return su;
}

int main(void)
{
	SRunner *sr = srunner_create(st_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
