/*
 * fuzz_coord_client.c — the coordinator's client handler (coord_on_client:
 * Submit validation and tokenizing, Cancel, Status, Drain) and its stream
 * relay (coordinator/stream.c: detokenizing, EOS, stop strings, Done),
 * driven in-process by a script of client frames and node token batches
 * (coord_fuzz.h). Every reply is checked: text is UTF-8 and never holds
 * a stop string of its request.
 */
#include "coord_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	cf_state s;
	cf_begin(&s, NULL);
	cf_play(&s, data, size);
	cf_end(&s);
	return 0;
}
