/*
 * fuzz_st_index.c — a sharded checkpoint folder: the input up to its first
 * NUL byte is model.safetensors.index.json, the rest (when there is a NUL)
 * is shard a.safetensors; shard b.safetensors is fixed and well formed
 * (b.x F32 [2, 3], b.y BF16 [4]). sl_st_open_dir must either refuse the
 * folder or give a set whose every tensor reads back (st_fuzz.h).
 */
#include "fuzz_util.h"
#include "formats/safetensors.h"
#include "common/sl.h"
#include "st_fuzz.h"

/* b.safetensors: header length, header JSON (padded to 8), data. */
static void write_shard_b(void)
{
	static const char hdr[] =
		"{\"b.x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
		"\"b.y\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}}";
	unsigned char file[8 + 128 + 32] = {0};
	size_t hlen = (sizeof hdr - 1 + 7) / 8 * 8;
	for (int i = 0; i < 8; i++)
		file[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	memset(file + 8, ' ', hlen);
	memcpy(file + 8, hdr, sizeof hdr - 1);
	for (size_t i = 0; i < 32; i++)
		file[8 + hlen + i] = (unsigned char)(i * 37);
	fuzz_write("b.safetensors", file, 8 + hlen + 32);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		write_shard_b();
		ready = 1;
	}
	fuzz_selftest(data, size);
	const uint8_t *nul = memchr(data, 0, size);
	size_t ilen = nul ? (size_t)(nul - data) : size;
	fuzz_write("model.safetensors.index.json", data, ilen);
	if (nul)
		fuzz_write("a.safetensors", nul + 1, size - ilen - 1);
	else
		unlink(fuzz_path("a.safetensors"));
	char err[SL_ERRLEN];
	sl_st_set *s = NULL;
	if (sl_st_open_dir(fuzz_dir(), &s, err, sizeof err) == 0) {
		fuzz_st_read_all(s);
		sl_st_close(s);
	}
	return 0;
}
