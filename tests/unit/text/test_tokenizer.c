/*
 * test_tokenizer.c -- text/tokenizer/tokenizer.c: load errors, ids recorded
 * from Hugging Face `tokenizers` 0.23.3 on the tokenizers in tests/data
 * (built by tools/make_tokenizers.py), round trips, special tokens, the
 * streaming detokenizer's UTF-8 safety, and hostile bytes that must never
 * crash.  The exhaustive comparison with HF is tests/tokenizer_conformance.py;
 * this suite needs no Python.  Data folder: $SL_TOKENIZER_DATA or tests/data.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl.h"
#include "coordinator/model_meta.h"
#include "text/tokenizer/tokenizer.h"
#include "unit/gguf_craft.h"

static char g_err[SL_ERRLEN];

static const char *data_dir(void)
{
	const char *d = getenv("SL_TOKENIZER_DATA");
	return d ? d : "tests/data";
}

static text_tok *load(const char *name)
{
	char path[512];
	text_tok *t = NULL;
	snprintf(path, sizeof path, "%s/%s/tokenizer.json", data_dir(), name);
	int rc = text_tok_load(path, &t, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "load %s: %s", path, g_err);
	return t;
}

static int load_str(const char *json, text_tok **t)
{
	g_err[0] = 0;
	return text_tok_load_buffer(json, strlen(json), "mem/tokenizer.json", t, g_err,
				     sizeof g_err);
}

/* Encodes text and compares with the expected ids, printing the first
 * difference. */
static void expect_ids(const text_tok *t, const char *text, int flags, const int32_t *want,
		       size_t n_want)
{
	int32_t *ids;
	size_t n;
	int rc = text_tok_encode(t, text, strlen(text), flags, &ids, &n, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "encode %s: %s", text, g_err);
	for (size_t i = 0; i < n && i < n_want; i++)
		ck_assert_msg(ids[i] == want[i], "encode \"%s\" flags %d: id %zu is %d, HF says %d",
			      text, flags, i, ids[i], want[i]);
	ck_assert_msg(n == n_want, "encode \"%s\" flags %d: %zu ids, HF gives %zu", text, flags,
		      n, n_want);
	free(ids);
}

#define EXPECT(t, text, flags, ...) \
	do { \
		const int32_t w_[] = {__VA_ARGS__}; \
		expect_ids(t, text, flags, w_, sizeof w_ / sizeof w_[0]); \
	} while (0)

/* Decoded text; *len may exceed strlen: U+0000 is a valid character. */
static char *decode_n(const text_tok *t, const int32_t *ids, size_t n, int skip, size_t *len)
{
	char *text;
	int rc = text_tok_decode(t, ids, n, skip, &text, len, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "decode: %s", g_err);
	ck_assert(text[*len] == 0);
	return text;
}

static char *decode(const text_tok *t, const int32_t *ids, size_t n, int skip)
{
	size_t len;
	return decode_n(t, ids, n, skip, &len);
}

/* Strict UTF-8 validity (the decoder must never produce anything else). */
/* Deliberately not text_utf8_valid: these checks judge the tokenizer's
 * output, so the judge must not share its code. */
static int valid_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned b = s[i], need, lo = 0x80, hi = 0xBF;
		if (b < 0x80) {
			i++;
			continue;
		}
		if (b >= 0xC2 && b <= 0xDF)
			need = 1;
		else if (b >= 0xE0 && b <= 0xEF)
			need = 2, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
		else if (b >= 0xF0 && b <= 0xF4)
			need = 3, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
		else
			return 0;
		for (unsigned k = 1; k <= need; k++, lo = 0x80, hi = 0xBF)
			if (i + k >= n || s[i + k] < lo || s[i + k] > hi)
				return 0;
		i += need + 1;
	}
	return 1;
}

/* ---- load errors ------------------------------------------------- */

#define TINY_HEAD "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}"

START_TEST(missing_file)
{
	text_tok *t = (text_tok *)1;
	int rc = text_tok_load("/nonexistent/tokenizer.json", &t, g_err, sizeof g_err);
	ck_assert_int_eq(rc, SL_ENOTFOUND);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(g_err, "/nonexistent/tokenizer.json"), "%s", g_err);
}
END_TEST

/* Each malformed or unsupported file: the code, and the message must name
 * the file and the offending part. */
static const struct {
	const char *json, *needle;
	int code;
} k_bad[] = {
	{"{\"model\": ", "not valid JSON", SL_EINVAL},
	{"[1, 2]", "not a JSON object", SL_EINVAL},
	{"{}", "missing \"model\"", SL_EINVAL},
	{"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", "Unigram", SL_ENOTSUP},
	{"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "WordPiece", SL_ENOTSUP},
	{"{\"model\": {\"type\": \"BPE\", \"merges\": []}}", "model.vocab", SL_EINVAL},
	{"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}", "empty", SL_EINVAL},
	{TINY_HEAD "}}", "model.merges", SL_EINVAL},
	{TINY_HEAD ", \"merges\": [\"a c\"]}}", "merges[0]: \"c\"", SL_EINVAL},
	{TINY_HEAD ", \"merges\": [\"a b\", \"b a\"]}}", "merges[1]: \"ba\"", SL_EINVAL},
	{TINY_HEAD ", \"merges\": [\"a b c\"]}}", "merges[0]", SL_EINVAL},
	{TINY_HEAD ", \"merges\": [7]}}", "merges[0]", SL_EINVAL},
	{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", "id must",
	 SL_EINVAL},
	{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
	 "id 0 is used", SL_EINVAL},
	{TINY_HEAD ", \"merges\": [], \"unk_token\": \"<unk>\"}}", "unk_token", SL_EINVAL},
	{TINY_HEAD ", \"merges\": [], \"dropout\": 0.1}}", "dropout", SL_ENOTSUP},
	{TINY_HEAD ", \"merges\": []}, \"normalizer\": {\"type\": \"BertNormalizer\"}}",
	 "BertNormalizer", SL_ENOTSUP},
	{TINY_HEAD ", \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\":"
	 " {\"Regex\": \"(\\\\w+\"}, \"behavior\": \"Isolated\", \"invert\": false}}",
	 "does not compile", SL_EINVAL},
	{TINY_HEAD ", \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\":"
	 " {\"Regex\": \"\\\\w+\"}, \"behavior\": \"Sideways\", \"invert\": false}}",
	 "Sideways", SL_ENOTSUP},
	{TINY_HEAD ", \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
	 "{\"type\": \"ByteLevel\"}, {\"type\": \"Digits\"}]}}", "Digits\" after ByteLevel",
	 SL_ENOTSUP},
	{TINY_HEAD ", \"merges\": []}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
	 "BertPreTokenizer", SL_ENOTSUP},
	{TINY_HEAD ", \"merges\": []}, \"added_tokens\": [{\"id\": 3, \"content\": \"<m>\","
	 " \"lstrip\": true}]}", "lstrip", SL_ENOTSUP},
	{TINY_HEAD ", \"merges\": []}, \"added_tokens\": {}}", "added_tokens", SL_EINVAL},
	{TINY_HEAD ", \"merges\": []}, \"post_processor\": {\"type\": \"BertProcessing\"}}",
	 "BertProcessing", SL_ENOTSUP},
	{TINY_HEAD ", \"merges\": []}, \"post_processor\": {\"type\": \"TemplateProcessing\","
	 " \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], \"special_tokens\": {}}}", "<s>",
	 SL_EINVAL},
	{TINY_HEAD ", \"merges\": []}, \"decoder\": {\"type\": \"WordPiece\"}}", "WordPiece",
	 SL_ENOTSUP},
	{TINY_HEAD ", \"merges\": []}, \"decoder\": {\"type\": \"Sequence\", \"decoders\": ["
	 "{\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}}", "Strip",
	 SL_ENOTSUP},
};

START_TEST(bad_files)
{
	text_tok *t = (text_tok *)1;
	int rc = load_str(k_bad[_i].json, &t);
	ck_assert_msg(rc == k_bad[_i].code, "case %d: rc %d, want %d (%s)", _i, rc,
		      k_bad[_i].code, g_err);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(g_err, "mem/tokenizer.json") && strstr(g_err, k_bad[_i].needle),
		      "case %d: message \"%s\" should name the file and \"%s\"", _i, g_err,
		      k_bad[_i].needle);
}
END_TEST

/* Every prefix of a valid file, and random byte damage: an error or a
 * usable tokenizer, never a crash (run under valgrind/ASan to mean it). */
START_TEST(truncated_and_damaged)
{
	const char *good = TINY_HEAD ", \"merges\": [\"a b\"], \"unk_token\": null},"
		" \"added_tokens\": [{\"id\": 3, \"content\": \"<s>\", \"special\": true}],"
		" \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\":"
		" \"Prepend\", \"prepend\": \"_\"}]}, \"post_processor\": {\"type\":"
		" \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
		" {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"ids\": [3]}}},"
		" \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"},"
		" {\"type\": \"Fuse\"}]}}";
	size_t n = strlen(good);
	char *buf = malloc(n + 1);
	text_tok *t;
	ck_assert_int_eq(load_str(good, &t), 0);
	text_tok_destroy(t);
	for (size_t cut = 0; cut < n; cut++) {
		if (text_tok_load_buffer(good, cut, "cut", &t, g_err, sizeof g_err) == 0)
			text_tok_destroy(t);
	}
	srand(7);
	for (int k = 0; k < 2000; k++) {
		memcpy(buf, good, n + 1);
		for (int f = 0; f < 3; f++)
			buf[rand() % n] = (char)(rand() % 256);
		if (text_tok_load_buffer(buf, n, "damaged", &t, g_err, sizeof g_err) == 0) {
			int32_t *ids;
			size_t m;
			if (text_tok_encode(t, "abab ba", 7, 1, &ids, &m, g_err, sizeof g_err) == 0)
				free(ids);
			text_tok_destroy(t);
		}
	}
	free(buf);
}
END_TEST

/* ---- ids recorded from HF ---------------------------------------- */

START_TEST(hf_llama2_small)
{
	text_tok *t = load("llama2-small");
	EXPECT(t, "Hello world", 1, 1, 1000, 599, 1042);
	EXPECT(t, "Hello world", 0, 1000, 599, 1042);
	EXPECT(t, " leading space", 1, 1, 1323, 315, 318, 624, 321, 609, 330, 315, 317, 319);
	EXPECT(t, "naïve café 123", 1, 1, 1329, 601, 315, 320, 357, 1612, 278);
	EXPECT(t, "\xF0\xA0\x80\x80", 1, 1, 512, 243, 163, 131, 131); /* U+20000: bytes */
	EXPECT(t, "a\n\tb", 0, 606, 260, 259, 316);
	EXPECT(t, "", 1, 1);
	ck_assert_int_eq(text_tok_vocab_size(t), 2000);
	ck_assert_int_eq(text_tok_bos_id(t), 1);
	ck_assert_int_eq(text_tok_eos_id(t), 2);
	text_tok_destroy(t);

	t = load("llama2-small-legacy");
	EXPECT(t, "Hello world", 1, 1, 1000, 599, 1042);
	EXPECT(t, "x<s>y", 1, 1, 1275, 1, 693); /* Prepend again after <s> */
	text_tok_destroy(t);

	t = load("llama2-small-split");
	EXPECT(t, "Hello  world", 0, 1000, 512, 599, 1042);
	text_tok_destroy(t);

	t = load("llama2-small-added");
	EXPECT(t, "say good morning<tool>", 1, 1, 609, 644, 2001, 2000);
	EXPECT(t, "\xF0\xA0\x80\x80\xF0\xA0\x80\x81 x", 0, 512, 0, 1275); /* fused <unk> */
	text_tok_destroy(t);
}
END_TEST

START_TEST(hf_llama3_small)
{
	text_tok *t = load("llama3-small");
	EXPECT(t, "Hello world", 1, 2980, 1526, 263, 888);
	EXPECT(t, "it's 12345 DON'T", 0, 413, 1346, 220, 2865, 1421, 220, 35, 857, 6, 51);
	EXPECT(t, "  \n\n x", 0, 1124, 198, 198, 1249);
	EXPECT(t, "<|begin_of_text|>hi<|eot_id|>", 1, 2980, 2980, 1339, 2989);
	/* U+017F folds to 's' in (?i:'s): "'ſ" is a contraction piece */
	EXPECT(t, "\xC5\xBF'\xC5\xBF \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xF0\x9F\x98\x80", 0,
	       129, 123, 6, 129, 123, 220, 724, 1826);
	/* special tokens as plain text (HF encode_special_tokens=True) */
	EXPECT(t, "<|begin_of_text|>hi", COORD_TOK_ADD_SPECIAL | COORD_TOK_SPLIT_SPECIAL, 2980,
	       27, 91, 1515, 70, 288, 62, 1823, 62, 83, 68, 87, 83, 91, 29, 1339);
	ck_assert_int_eq(text_tok_bos_id(t), 2980);
	ck_assert_int_eq(text_tok_eos_id(t), 2981);
	ck_assert_int_eq(text_tok_token_to_id(t, "<|eot_id|>"), 2989);
	ck_assert_str_eq(text_tok_id_to_token(t, 2989), "<|eot_id|>");
	ck_assert(text_tok_is_special(t, 2989));
	ck_assert(!text_tok_is_special(t, 263));
	ck_assert_ptr_null(text_tok_id_to_token(t, 1 << 20));
	ck_assert_int_eq(text_tok_token_to_id(t, "no such token"), -1);
	text_tok_destroy(t);
}
END_TEST

START_TEST(hf_llama2_real)
{
	text_tok *t = load("llama2");
	EXPECT(t, "Hello world", 1, 1, 15043, 3186);
	EXPECT(t, "The capital of France is", 0, 450, 7483, 310, 3444, 338);
	EXPECT(t, "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80", 1, 1, 29871, 30325,
	       30346, 30968, 29871, 243, 162, 155, 131);
	ck_assert_int_eq(text_tok_vocab_size(t), 32000);
	text_tok_destroy(t);
}
END_TEST

/* ---- round trips and decode -------------------------------------- */

static const char *k_texts[] = {
	"Hello world", " leading and trailing  ", "it's 2024!\n\tcode();\r\n",
	"na\xC3\xAFve caf\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
	"\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7", "e\xCC\x81",
	"\xF0\xA0\x80\x80\xF0\xA0\x80\x81", "    ", "x", "",
};

/* decode(encode(s)) == s, except where HF itself differs: a Metaspace
 * pre-tokenizer does not prepend to text already starting with a space,
 * yet the decoder strips one, so "  x" comes back as " x". */
START_TEST(round_trip)
{
	const char *names[] = {"llama2-small", "llama2-small-legacy", "llama2-small-split",
			       "llama3-small", "llama2"};
	const int drops_space[] = {1, 0, 1, 0, 0};
	for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
		text_tok *t = load(names[k]);
		for (size_t i = 0; i < sizeof k_texts / sizeof *k_texts; i++) {
			int32_t *ids;
			size_t n;
			const char *want = k_texts[i] + (drops_space[k] && k_texts[i][0] == ' ');
			ck_assert_int_eq(text_tok_encode(t, k_texts[i], strlen(k_texts[i]), 1, &ids,
							  &n, g_err, sizeof g_err), 0);
			char *back = decode(t, ids, n, 1);
			ck_assert_msg(strcmp(back, want) == 0, "%s: \"%s\" came back as \"%s\"",
				      names[k], k_texts[i], back);
			free(back);
			free(ids);
		}
		text_tok_destroy(t);
	}
}
END_TEST

START_TEST(decode_specials_and_bytes)
{
	text_tok *t = load("llama2-small");
	const int32_t a[] = {1, 3 + 0x20, 1000}; /* <s> <0x20> ▁Hello */
	char *s = decode(t, a, 3, 1);
	ck_assert_str_eq(s, " Hello"); /* one leading space stripped: HF */
	free(s);
	s = decode(t, a, 3, 0);
	ck_assert_str_eq(s, "<s>  Hello");
	free(s);
	const int32_t bad[] = {3 + 0xE2, 3 + 0x82, 1000}; /* unfinished run */
	s = decode(t, bad, 3, 1);
	ck_assert_str_eq(s, "\xEF\xBF\xBD\xEF\xBF\xBD Hello"); /* one U+FFFD per byte */
	free(s);
	const int32_t junk[] = {-5, 1 << 30, 2000, 1000};  /* unknown ids are skipped */
	s = decode(t, junk, 4, 1);
	ck_assert_str_eq(s, "Hello");
	free(s);
	text_tok_destroy(t);

	t = load("llama3-small");
	const int32_t lossy[] = {1526, 158, 2980}; /* Hello, byte 0xE2 alone, BOS */
	s = decode(t, lossy, 3, 0);
	ck_assert_str_eq(s, "Hello\xEF\xBF\xBD<|begin_of_text|>");
	free(s);
	text_tok_destroy(t);
}
END_TEST

/* A tokenizer without a decoder: HF joins tokens with spaces. */
START_TEST(decoder_null_joins)
{
	text_tok *t;
	ck_assert_int_eq(load_str(TINY_HEAD ", \"merges\": [\"a b\"]}}", &t), 0);
	EXPECT(t, "abab", 1, 2, 2);
	EXPECT(t, "aba", 1, 2, 0);
	const int32_t ids[] = {2, 0, 1};
	char *s = decode(t, ids, 3, 1);
	ck_assert_str_eq(s, "ab a b");
	free(s);
	ck_assert_int_eq(text_tok_bos_id(t), -1);
	text_tok_destroy(t);
}
END_TEST

/* ---- streaming detokenizer --------------------------------------- */

/* Streams ids through a detokenizer; checks every chunk is whole UTF-8 and
 * returns the joined text (malloc'd). */
static char *stream(const text_tok *t, const int32_t *ids, size_t n, int skip,
		    size_t *n_chunks, size_t *total)
{
	text_detok *d;
	ck_assert_int_eq(text_detok_create(t, skip, &d, g_err, sizeof g_err), 0);
	char *all = calloc(1, 1);
	size_t len = 0;
	*n_chunks = 0;
	for (size_t i = 0; i <= n; i++) {
		const char *c;
		size_t cl;
		int rc = i < n ? text_detok_step(d, ids[i], &c, &cl) : text_detok_finish(d, &c, &cl);
		ck_assert_int_eq(rc, 0);
		ck_assert_msg(valid_utf8((const unsigned char *)c, cl), "chunk %zu not UTF-8", i);
		ck_assert(c[cl] == 0);
		all = realloc(all, len + cl + 1);
		memcpy(all + len, c, cl + 1);
		len += cl;
		*n_chunks += cl > 0;
	}
	text_detok_destroy(d);
	*total = len;
	return all;
}

START_TEST(stream_holds_split_characters)
{
	text_tok *t = load("llama2-small");
	text_detok *d;
	const int32_t emoji[] = {512, 243, 163, 131, 131}; /* ▁ + U+20000 as 4 bytes */
	const char *c;
	size_t cl;
	ck_assert_int_eq(text_detok_create(t, 1, &d, g_err, sizeof g_err), 0);
	ck_assert_int_eq(text_detok_step(d, emoji[0], &c, &cl), 0);
	ck_assert_uint_eq(cl, 0); /* the first "▁" is stripped */
	for (int i = 1; i < 4; i++) {
		ck_assert_int_eq(text_detok_step(d, emoji[i], &c, &cl), 0);
		ck_assert_msg(cl == 0, "byte %d of 4 let out %zu bytes", i, cl);
	}
	ck_assert_int_eq(text_detok_step(d, emoji[4], &c, &cl), 0);
	ck_assert_str_eq(c, "\xF0\xA0\x80\x80");
	ck_assert_int_eq(text_detok_step(d, 1000, &c, &cl), 0);
	ck_assert_str_eq(c, " Hello"); /* strip happened once only */

	text_detok_reset(d); /* a new sequence strips again */
	ck_assert_int_eq(text_detok_step(d, 1000, &c, &cl), 0);
	ck_assert_str_eq(c, "Hello");
	ck_assert_int_eq(text_detok_step(d, 3 + 0xE2, &c, &cl), 0);
	ck_assert_uint_eq(cl, 0);
	ck_assert_int_eq(text_detok_finish(d, &c, &cl), 0);
	ck_assert_str_eq(c, "\xEF\xBF\xBD"); /* unfinished at the end */
	text_detok_destroy(d);
	text_tok_destroy(t);
}
END_TEST

START_TEST(stream_equals_decode)
{
	const char *names[] = {"llama2-small", "llama2-small-split", "llama3-small", "llama2"};
	for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
		text_tok *t = load(names[k]);
		for (size_t i = 0; i < sizeof k_texts / sizeof *k_texts; i++) {
			int32_t *ids;
			size_t n, chunks;
			ck_assert_int_eq(text_tok_encode(t, k_texts[i], strlen(k_texts[i]), 1, &ids,
							  &n, g_err, sizeof g_err), 0);
			for (int skip = 0; skip < 2; skip++) {
				size_t total;
				char *whole = decode(t, ids, n, skip);
				char *streamed = stream(t, ids, n, skip, &chunks, &total);
				ck_assert_msg(strcmp(whole, streamed) == 0, "%s \"%s\": stream \"%s\"",
					      names[k], whole, streamed);
				free(whole);
				free(streamed);
			}
			free(ids);
		}
		text_tok_destroy(t);
	}
}
END_TEST

/* Byte-level streams of random ids: every chunk whole, the joined text
 * equal to decode (exact for byte-level models, whatever the bytes). */
START_TEST(stream_random_bytelevel)
{
	text_tok *t = load("llama3-small");
	int32_t ids[40];
	srand(11);
	for (int k = 0; k < 300; k++) {
		size_t n = (size_t)(rand() % 40), chunks, wl, sl;
		for (size_t i = 0; i < n; i++)
			ids[i] = rand() % 3 ? rand() % 256 : rand() % 3000;
		char *whole = decode_n(t, ids, n, k & 1, &wl);
		char *streamed = stream(t, ids, n, k & 1, &chunks, &sl);
		ck_assert(valid_utf8((const unsigned char *)whole, wl));
		ck_assert(wl == sl && memcmp(whole, streamed, wl) == 0);
		free(whole);
		free(streamed);
	}
	text_tok_destroy(t);
}
END_TEST

/* ---- hostile input ------------------------------------------------ */

START_TEST(random_bytes_never_crash)
{
	const char *names[] = {"llama2-small", "llama2-small-split", "llama2-small-added",
			       "llama3-small"};
	char buf[200];
	srand(3);
	for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
		text_tok *t = load(names[k]);
		for (int r = 0; r < 400; r++) {
			size_t n = (size_t)(rand() % (int)sizeof buf);
			for (size_t i = 0; i < n; i++)
				buf[i] = (char)(rand() % 4 ? rand() % 256 : " \n'a1<"[rand() % 6]);
			int32_t *ids;
			size_t m;
			ck_assert_int_eq(text_tok_encode(t, buf, n, r & 3, &ids, &m, g_err,
							  sizeof g_err), 0);
			for (size_t i = 0; i < m; i++)
				ck_assert(ids[i] >= 0 && ids[i] < text_tok_vocab_size(t));
			size_t bl;
			char *back = decode_n(t, ids, m, r & 1, &bl);
			ck_assert(valid_utf8((const unsigned char *)back, bl));
			free(back);
			free(ids);
		}
		text_tok_destroy(t);
	}
}
END_TEST

/* Invalid UTF-8 keeps every byte: byte-level tokens / byte fallback. */
START_TEST(invalid_utf8_bytes_kept)
{
	text_tok *t = load("llama3-small");
	const char bad[] = "ab\xFF\xE2\x82 c\xC0";
	EXPECT(t, bad, 0, 64, 65, 187, 158, 224, 272, 124); /* HF parts, see conformance */
	text_tok_destroy(t);
	t = load("llama2-small");
	EXPECT(t, "\xFF", 0, 512, 3 + 0xFF); /* ▁, <0xFF> */
	text_tok_destroy(t);
}
END_TEST

/* ---- the families tokenizers serve through Oniguruma --------------- */

START_TEST(hf_families)
{
	text_tok *t = load("gpt2-small");
	EXPECT(t, "Hello world", 1, 1504, 263, 879);
	EXPECT(t, "it's 12345 DON'T", 1, 413, 1329, 1855, 2673, 220, 35, 846, 6, 51);
	EXPECT(t, "  \n\n x", 1, 1118, 198, 198, 1251);
	text_tok_destroy(t);
	t = load("smollm2-small"); /* Digits(individual) before GPT-2's split */
	EXPECT(t, "Hello  12 world", 1, 1423, 1108, 16, 17, 263, 872);
	EXPECT(t, "<|im_start|>hi<|im_end|>", 1, 2996, 1286, 2997);
	text_tok_destroy(t);
	t = load("qwen2-small"); /* NFC composes e + U+0301 */
	EXPECT(t, "Cafe\xCC\x81 1234", 1, 34, 64, 69, 390, 220, 16, 17, 18, 19);
	EXPECT(t, "WE'RE here", 1, 1737, 1253, 394, 306);
	text_tok_destroy(t);
	t = load("deepseek-small");
	EXPECT(t, "Hello \xE4\xB8\x96\xE7\x95\x8C 123\n", 1, 2998, 1485, 220, 455, 220, 2745, 198);
	EXPECT(t, "\xCE\xA9mega K", 1, 2998, 138, 102, 352, 70, 64, 220, 42);
	text_tok_destroy(t);
	t = load("misc-small"); /* NFKC, Replace(Regex), Lowercase, Strip, ... */
	EXPECT(t, "\xEF\xBC\xA8\xEF\xBC\xA5\xEF\xBC\xAC\xEF\xBC\xAC\xEF\xBC\xAF-World 12345 "
	       "na\xC3\xAFve", 1, 354, 857, 1089, 384, 884, 278, 409, 1042);
	text_tok_destroy(t);
	t = load("misc2-small"); /* Strip drops the start: no Metaspace prefix */
	EXPECT(t, "  H\xC3\xA9llo, w\xC3\xB6rld!", 1, 594, 56, 281, 310);
	text_tok_destroy(t);
}
END_TEST

/* A genuine private-use character next to invalid bytes keeps its own
 * bytes: the invalid byte's stand-in must be another code point. */
START_TEST(stand_in_avoids_private_use)
{
	text_tok *t = load("gpt2-small");
	const char text[] = "\xF3\xB0\x80\x80\xFF\xF3\xB0\x80\x81";
	int32_t *ids;
	size_t n, len;
	ck_assert_int_eq(text_tok_encode(t, text, sizeof text - 1, 0, &ids, &n, g_err,
					  sizeof g_err), 0);
	char *s = decode_n(t, ids, n, 0, &len);
	ck_assert_msg(len == 11 && memcmp(s, "\xF3\xB0\x80\x80\xEF\xBF\xBD\xF3\xB0\x80\x81", 11) == 0,
		      "decode gave %zu bytes", len);
	free(s);
	free(ids);
	text_tok_destroy(t);
}
END_TEST

/* ---- GGUF ---------------------------------------------------------- */

static text_tok *load_gguf(const char *name)
{
	char path[512];
	text_tok *t = NULL;
	snprintf(path, sizeof path, "%s/%s/tokenizer.gguf", data_dir(), name);
	int rc = text_tok_load(path, &t, g_err, sizeof g_err);
	ck_assert_msg(rc == 0, "load %s: %s", path, g_err);
	return t;
}

/* Each family's GGUF (written as llama.cpp writes one) encodes as its
 * tokenizer.json does; the conformance test does this exhaustively. */
START_TEST(gguf_equals_json)
{
	static const char *const names[] = {"gpt2-small", "smollm2-small", "qwen2-small",
					    "deepseek-small", "llama3-small", "llama2"};
	static const char *const texts[] = {"Hello  12 world", "it's 12345 DON'T\r\n\t x",
					    "Cafe\xCC\x81 \xE6\x97\xA5\xE6\x9C\xAC 3.14159",
					    "<|im_end|><s>", ""};
	const char *name = names[_i];
	text_tok *j = load(name), *g = load_gguf(name);
	for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
		int32_t *a, *b;
		size_t na, nb;
		ck_assert_int_eq(text_tok_encode(j, texts[k], strlen(texts[k]), 1, &a, &na, g_err,
						  sizeof g_err), 0);
		ck_assert_int_eq(text_tok_encode(g, texts[k], strlen(texts[k]), 1, &b, &nb, g_err,
						  sizeof g_err), 0);
		for (size_t i = 0; i < na && i < nb; i++)
			ck_assert_msg(a[i] == b[i], "%s \"%s\": id %zu json %d gguf %d", name, texts[k],
				      i, a[i], b[i]);
		ck_assert_msg(na == nb, "%s \"%s\": json %zu ids, gguf %zu", name, texts[k], na, nb);
		free(a);
		free(b);
	}
	ck_assert_int_eq(text_tok_vocab_size(j), text_tok_vocab_size(g));
	text_tok_destroy(j);
	text_tok_destroy(g);
}
END_TEST

/* A tiny byte-level GGUF: tokens a b ab <|end|> <|eot|>, one merge. */
static void craft_tiny(const char *path, const char *model, const char *pre, const char *merge)
{
	static const char *const toks[] = {"a", "b", "ab", "<|end|>", "<|eot|>"};
	static const int32_t types[] = {1, 1, 1, 3, 3};
	const char *merges[] = {merge};
	gb b = {0};
	gb_header(&b, 3, 0, 9);
	gb_kv_str(&b, "general.architecture", "llama");
	gb_kv_str(&b, "tokenizer.ggml.model", model);
	gb_kv_str(&b, "tokenizer.ggml.pre", pre);
	gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 5);
	gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, 5);
	gb_kv_strs(&b, "tokenizer.ggml.merges", merges, 1);
	gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", 3);
	gb_kv_u32(&b, "tokenizer.ggml.eot_token_id", 4);
	gb_kv_str(&b, "tokenizer.chat_template", "{{ bos_token }}");
	gb_align(&b, 32);
	ck_assert_int_eq(gb_write(&b, path), 0);
}

START_TEST(gguf_crafted)
{
	char path[] = "/tmp/sl_tok_tinyXXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	text_tok *t;
	coord_model_meta *m;

	craft_tiny(path, "gpt2", "gpt-2", "a b");
	ck_assert_int_eq(text_tok_load(path, &t, g_err, sizeof g_err), 0);
	EXPECT(t, "abab<|end|>b", 0, 2, 2, 3, 1);
	text_tok_destroy(t);
	ck_assert_int_eq(coord_model_meta_load(path, &m, g_err, sizeof g_err), 0);
	ck_assert_int_eq(m->n_eos, 2); /* eos and eot, both */
	ck_assert_int_eq(m->eos[0], 3);
	ck_assert_int_eq(m->eos[1], 4);
	ck_assert_str_eq(m->eos_token, "<|end|>");
	ck_assert_str_eq(m->chat_template, "{{ bos_token }}");
	coord_model_meta_destroy(m);

	const struct {
		const char *model, *pre, *merge, *needle;
		int code;
	} bad[] = {
		{"gpt2", "tekken", "a b", "\"tekken\" not supported (default, llama-bpe", SL_ENOTSUP},
		{"bert", "default", "a b", "tokenizer.ggml.model \"bert\" not supported", SL_ENOTSUP},
		{"gpt2", "gpt-2", "ab", "tokenizer.ggml.merges[0]", SL_EINVAL},
		{"gpt2", "gpt-2", "a c", "merges[0]: \"c\" is not in the vocabulary", SL_EINVAL},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		craft_tiny(path, bad[i].model, bad[i].pre, bad[i].merge);
		t = (text_tok *)1;
		int rc = text_tok_load(path, &t, g_err, sizeof g_err);
		ck_assert_msg(rc == bad[i].code && !t, "case %zu: rc %d (%s)", i, rc, g_err);
		ck_assert_msg(strstr(g_err, bad[i].needle) && strstr(g_err, path),
			      "case %zu: \"%s\" should name the file and say \"%s\"", i, g_err,
			      bad[i].needle);
	}
	unlink(path);
}
END_TEST

/* ---- stop tokens and chat template beside a tokenizer.json ---------- */

static void write_text(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

START_TEST(model_meta_folder)
{
	char dir[] = "/tmp/sl_meta_XXXXXX", path[512], src[512], *json;
	size_t len;
	coord_model_meta *m;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(src, sizeof src, "%s/smollm2-small/tokenizer.json", data_dir());
	ck_assert_int_eq(sl_read_file(src, &json, &len, g_err, sizeof g_err), 0);
	write_text(dir, "tokenizer.json", json);
	free(json);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);

	/* nothing beside it: the tokenizer's own guess */
	ck_assert_int_eq(coord_model_meta_load(path, &m, g_err, sizeof g_err), 0);
	ck_assert_int_eq(m->n_eos, 1);
	ck_assert_int_eq(m->eos[0], 2995); /* <|endoftext|> */
	ck_assert_ptr_null(m->chat_template);
	coord_model_meta_destroy(m);

	write_text(dir, "generation_config.json", "{\"eos_token_id\": [2997, 2995]}");
	write_text(dir, "config.json", "{\"eos_token_id\": 2995, \"vocab_size\": 3000}");
	write_text(dir, "tokenizer_config.json",
		   "{\"eos_token\": {\"content\": \"<|im_end|>\"}, \"bos_token\": \"<|im_start|>\","
		   " \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
		   " {\"name\": \"default\", \"template\": \"D\"}]}");
	ck_assert_int_eq(coord_model_meta_load(path, &m, g_err, sizeof g_err), 0);
	ck_assert_int_eq(m->n_eos, 2);
	ck_assert_int_eq(m->eos[0], 2997);
	ck_assert_int_eq(m->eos[1], 2995);
	ck_assert_str_eq(m->eos_token, "<|im_end|>");
	ck_assert_str_eq(m->bos_token, "<|im_start|>");
	ck_assert_str_eq(m->chat_template, "D");
	coord_model_meta_destroy(m);

	write_text(dir, "generation_config.json", "{\"eos_token_id\": [2997,");
	m = (coord_model_meta *)1;
	ck_assert_int_eq(coord_model_meta_load(path, &m, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(g_err, "generation_config.json"), "%s", g_err);

	const char *names[] = {"tokenizer.json", "generation_config.json", "config.json",
			       "tokenizer_config.json"};
	for (int i = 0; i < 4; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}
END_TEST

START_TEST(null_arguments)
{
	text_tok *t = load("llama2-small");
	int32_t *ids;
	size_t n;
	char *s;
	ck_assert_int_eq(text_tok_encode(NULL, "x", 1, 0, &ids, &n, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_int_eq(text_tok_encode(t, NULL, 1, 0, &ids, &n, g_err, sizeof g_err), SL_EINVAL);
	ck_assert_int_eq(text_tok_encode(t, NULL, 0, 0, &ids, &n, g_err, sizeof g_err), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(text_tok_decode(t, NULL, 0, 1, &s, &n, g_err, sizeof g_err), 0);
	ck_assert_str_eq(s, "");
	free(s);
	ck_assert_int_eq(text_tok_load(NULL, &t, g_err, sizeof g_err), SL_EINVAL);
	text_tok_destroy(NULL);
	text_detok_destroy(NULL);
	text_tok_destroy(t);
}
END_TEST

static Suite *tokenizer_suite(void)
{
	Suite *s = suite_create("tokenizer");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, missing_file);
	tcase_add_loop_test(tc, bad_files, 0, (int)(sizeof k_bad / sizeof k_bad[0]));
	tcase_add_test(tc, truncated_and_damaged);
	tcase_add_test(tc, hf_llama2_small);
	tcase_add_test(tc, hf_llama3_small);
	tcase_add_test(tc, hf_llama2_real);
	tcase_add_test(tc, hf_families);
	tcase_add_test(tc, stand_in_avoids_private_use);
	tcase_add_loop_test(tc, gguf_equals_json, 0, 6);
	tcase_add_test(tc, gguf_crafted);
	tcase_add_test(tc, model_meta_folder);
	tcase_add_test(tc, round_trip);
	tcase_add_test(tc, decode_specials_and_bytes);
	tcase_add_test(tc, decoder_null_joins);
	tcase_add_test(tc, stream_holds_split_characters);
	tcase_add_test(tc, stream_equals_decode);
	tcase_add_test(tc, stream_random_bytelevel);
	tcase_add_test(tc, random_bytes_never_crash);
	tcase_add_test(tc, invalid_utf8_bytes_kept);
	tcase_add_test(tc, null_arguments);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tokenizer_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
