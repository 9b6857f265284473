/*
 * fuzz_safetensors.c — one .safetensors file, as a checkpoint folder's
 * model.safetensors, through sl_st_open_dir; then every tensor it accepted
 * is looked up by name and shape and read back through sl_st_read_slice
 * (whole when small, else its first and last rows), converted to F32 and
 * to BF16, so ASan sees any offset or size the header made up.
 */
#include "fuzz_util.h"
#include "formats/safetensors.h"
#include "common/sl.h"
#include "st_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	fuzz_write("model.safetensors", data, size);
	char err[SL_ERRLEN];
	sl_st_set *s = NULL;
	if (sl_st_open_dir(fuzz_dir(), &s, err, sizeof err) == 0) {
		fuzz_st_read_all(s);
		sl_st_close(s);
	}
	return 0;
}
