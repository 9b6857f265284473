/*
 * fuzz_tok_load.c — tokenizer.json text through text_tok_load_buffer;
 * a tokenizer that loads is exercised (tok_fuzz.h): encode of fixed texts,
 * decode of every early id and of unknown ones, each output checked as
 * UTF-8. This is where a normalizer or decoder string that is not UTF-8
 * (Prepend, Replace) showed up in decoded text.
 */
#include "fuzz_util.h"
#include "tok_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	char err[SL_ERRLEN];
	text_tok *t = NULL;
	if (text_tok_load_buffer((const char *)data, size, "fuzz/tokenizer.json", &t, err,
				  sizeof err) == 0) {
		fuzz_tok_exercise(t);
		text_tok_destroy(t);
	}
	return 0;
}
