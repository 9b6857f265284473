/*
 * fuzz_chat_template.c — a chat template (model files carry them, so they
 * are untrusted) through text_tmpl_compile, and a template that compiles
 * rendered with fixed conversations: string contents, content parts, a
 * None content, with and without the generation prompt and the BOS/EOS
 * variables. The limits are tightened (output, memory, steps) so a
 * template that loops is refused within the fuzzer's time per input; the
 * renderer must stop at them, never run past or crash.
 */
#include "text/jinja/chat_template.h"
#include "fuzz_util.h"
#include "common/sl.h"

static const text_chat_part k_parts[] = {
	{"text", "first part", 10}, {"image_url", "", 0}, {"text", "caf\xc3\xa9", 5},
};

static const text_chat_msg k_chat[] = {
	{"system", "You are terse.", 14, NULL, 0},
	{"user", "Hello!", 6, NULL, 0},
	{"assistant", "Hi. {{ not a tag }}", 19, NULL, 0},
	{"user", "Bye\n", 4, NULL, 0},
};

static const text_chat_msg k_odd[] = {
	{"user", NULL, 0, k_parts, 3},
	{"assistant", NULL, 0, NULL, 0},
	{"tool", "x\0y", 3, NULL, 0},
	{"user", NULL, 0, k_parts, 0},
};

static void render(const text_tmpl *t, const text_chat_msg *m, int n, int gen, int with_bos)
{
	text_tmpl_vars v = {
		.add_generation_prompt = gen,
		.bos_token = with_bos ? "<s>" : NULL,
		.eos_token = with_bos ? "</s>" : NULL,
		.date_string = "26 Jul 2024",
		.now_unix = 1721952000,
		.max_output_bytes = 1 << 16,
		.max_memory_bytes = 4 << 20,
		.max_steps = 20000,
	};
	char *out = NULL, err[SL_ERRLEN];
	size_t len = 0;
	if (text_tmpl_render(t, m, n, &v, &out, &len, err, sizeof err) == 0) {
		FUZZ_CHECK(out && out[len] == 0 && len <= v.max_output_bytes,
			   "rendered %zu bytes, limit %zu", len, v.max_output_bytes);
		free(out);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	char err[SL_ERRLEN];
	text_tmpl *t = NULL;
	if (text_tmpl_compile((const char *)data, size, "fuzz.jinja", &t, err, sizeof err))
		return 0;
	(void)text_tmpl_iterates_content(t);
	render(t, k_chat, 4, 1, 1);
	render(t, k_chat, 3, 0, 0);
	render(t, k_odd, 4, 1, 1);
	render(t, k_chat, 0, 1, 0);
	text_tmpl_destroy(t);
	return 0;
}
