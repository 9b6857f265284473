/*
 * fuzz_gguf.c — a GGUF file through sl_gguf_open (as the first part of a
 * split model, see LLVMFuzzerInitialize), then everything the
 * node does with an opened file: model_config_from_gguf, typed reads of
 * the keys the loaders use (arrays element by element), and every tensor
 * read back through sl_gguf_read_slice (dequantized to F32, and to F16),
 * bounded so a fuzzed shape cannot ask for gigabytes.
 */
#include "formats/config.h"
#include "fuzz_util.h"
#include "formats/gguf.h"
#include "common/sl.h"

#define MAX_ELEMS 4096

static const char *const k_keys[] = {
	"general.architecture", "general.alignment", "split.count", "split.no",
	"llama.block_count", "llama.embedding_length", "llama.context_length",
	"llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base",
	"llama.rope.scaling.type", "tokenizer.ggml.model", "tokenizer.ggml.pre",
	"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
	"tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.chat_template",
};

/* Each key read as every type: the wrong ones must be refused cleanly. */
static void read_keys(const sl_gguf *g)
{
	char err[SL_ERRLEN];
	for (size_t k = 0; k < sizeof k_keys / sizeof k_keys[0]; k++) {
		const char *key = k_keys[k];
		int64_t i;
		double f;
		int b;
		sl_gguf_str s;
		sl_gguf_vtype et;
		uint64_t n;
		(void)sl_gguf_has(g, key);
		(void)sl_gguf_get_i64(g, key, &i, err, sizeof err);
		(void)sl_gguf_get_f64(g, key, &f, err, sizeof err);
		(void)sl_gguf_get_bool(g, key, &b, err, sizeof err);
		if (sl_gguf_get_str(g, key, &s, err, sizeof err) == 0 && s.n) {
			volatile char c = (char)(s.p[0] ^ s.p[s.n - 1]); /* ASan: inside the file */
			(void)c;
		}
		if (sl_gguf_get_arr(g, key, &et, &n, err, sizeof err))
			continue;
		for (uint64_t e = 0; e < n && e < 1024; e++) {
			if (et == SL_GGUF_STRING) {
				int rc = sl_gguf_arr_str(g, key, e, &s);
				FUZZ_CHECK(rc == 0, "%s[%llu] of a string array", key,
					   (unsigned long long)e);
				volatile char c = s.n ? s.p[s.n - 1] : 0;
				(void)c;
			} else {
				(void)sl_gguf_arr_i64(g, key, e, &i);
				(void)sl_gguf_arr_f64(g, key, e, &f);
			}
		}
	}
}

static void read_tensor(sl_gguf *g, const sl_gguf_tensor *t)
{
	static float f32[MAX_ELEMS];
	static uint16_t f16[MAX_ELEMS];
	char err[SL_ERRLEN];
	int64_t cols = t->ne[0], rows = 1;
	for (int d = 1; d < t->ndim; d++)
		rows *= t->ne[d];
	if (rows <= 0 || cols <= 0)
		return;
	int64_t nc = cols < MAX_ELEMS ? cols : MAX_ELEMS;
	int64_t nr = rows * nc <= MAX_ELEMS ? rows : 1;
	int rc = sl_gguf_read_slice(g, t, 0, nr, 0, nc, SL_DT_F32, f32, err, sizeof err);
	FUZZ_CHECK(rc == 0, "tensor %s: first rows of an accepted tensor: %s", t->name, err);
	rc = sl_gguf_read_slice(g, t, rows - 1, 1, cols - nc, nc, SL_DT_F16, f16, err, sizeof err);
	FUZZ_CHECK(rc == 0, "tensor %s: last row: %s", t->name, err);
	int64_t c0 = cols / 3, n = cols - c0 < 7 ? cols - c0 : 7;
	if (n > 0) {
		rc = sl_gguf_read_slice(g, t, rows / 2, 1, c0, n, SL_DT_F32, f32, err, sizeof err);
		FUZZ_CHECK(rc == 0, "tensor %s: columns [%lld, +%lld): %s", t->name,
			   (long long)c0, (long long)n, err);
	}
	FUZZ_CHECK(sl_gguf_read_slice(g, t, rows, 1, 0, 1, SL_DT_F32, f32, err, sizeof err),
		   "tensor %s: a row past the end was read", t->name);
}

/* The input is the first part of a two-part split model whose second part
 * is the golden one (tests/golden/gguf_gqa_bf16_split): an input with
 * split.count 2 opens both, any other is one file as usual. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_copy_repo_file("tests/golden/gguf_gqa_bf16_split/model-00002-of-00002.gguf",
			    "model-00002-of-00002.gguf");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	const char *path = fuzz_write("model-00001-of-00002.gguf", data, size);
	char err[SL_ERRLEN];
	sl_gguf *g = NULL;
	if (sl_gguf_open(path, &g, err, sizeof err))
		return 0;
	model_config m;
	(void)model_config_from_gguf(g, &m, err, sizeof err);
	read_keys(g);
	for (int i = 0; i < sl_gguf_tensor_count(g); i++) {
		const sl_gguf_tensor *t = sl_gguf_tensor_at(g, i);
		FUZZ_CHECK(t && sl_gguf_find_tensor(g, t->name), "tensor %d not found by name", i);
		read_tensor(g, t);
	}
	sl_gguf_close(g);
	return 0;
}
