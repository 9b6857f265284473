/*
 * st_fuzz.h — reads back every tensor of an opened safetensors set, as the
 * model loader would, for fuzz_safetensors.c and fuzz_st_index.c: lookup
 * by name and shape, then rows through sl_st_read_slice into F32 and BF16.
 * Reading whole tensors would let a fuzzed shape ask for gigabytes, so
 * large ones read their first and last row and a middle column band.
 */
#ifndef TESTS_FUZZ_ST_H
#define TESTS_FUZZ_ST_H

#include "fuzz_util.h"
#include "formats/safetensors.h"
#include "common/sl.h"

#define FUZZ_ST_MAX_ELEMS 4096

static inline void fuzz_st_read(sl_st_set *s, const sl_st_tensor *t, int64_t r0, int64_t nr,
				int64_t c0, int64_t nc)
{
	char err[SL_ERRLEN];
	static float f32[FUZZ_ST_MAX_ELEMS];
	static uint16_t b16[FUZZ_ST_MAX_ELEMS];
	if (nr * nc > FUZZ_ST_MAX_ELEMS)
		return;
	int rc = sl_st_read_slice(s, t, r0, nr, c0, nc, SL_DT_F32, f32, err, sizeof err);
	FUZZ_CHECK(rc == 0, "tensor %s: slice [%lld +%lld, %lld +%lld] of an accepted tensor: %s",
		   t->name, (long long)r0, (long long)nr, (long long)c0, (long long)nc, err);
	rc = sl_st_read_slice(s, t, r0, nr, c0, nc, SL_DT_BF16, b16, err, sizeof err);
	FUZZ_CHECK(rc == 0, "tensor %s (bf16): %s", t->name, err);
}

static inline void fuzz_st_read_all(sl_st_set *s)
{
	char err[SL_ERRLEN];
	for (int i = 0; i < sl_st_count(s); i++) {
		const sl_st_tensor *t = sl_st_at(s, i), *u = NULL;
		FUZZ_CHECK(t && sl_st_find(s, t->name) == t, "tensor %d not found by its name", i);
		int rc = sl_st_get(s, t->name, t->ndim, t->shape, &u, err, sizeof err);
		FUZZ_CHECK(rc == 0 && u == t, "tensor %s: its own shape refused: %s", t->name, err);
		int64_t rows = 1, cols = t->ndim ? t->shape[t->ndim - 1] : 1;
		for (int d = 0; d + 1 < t->ndim; d++)
			rows *= t->shape[d];
		if (!rows || !cols)
			continue;
		int64_t nc = cols < FUZZ_ST_MAX_ELEMS ? cols : FUZZ_ST_MAX_ELEMS;
		if (rows * cols <= FUZZ_ST_MAX_ELEMS) {
			fuzz_st_read(s, t, 0, rows, 0, cols);
		} else {
			fuzz_st_read(s, t, 0, 1, 0, nc);
			fuzz_st_read(s, t, rows - 1, 1, cols - nc, nc);
			fuzz_st_read(s, t, rows / 2, 1, cols / 3, cols / 3 < nc ? cols / 3 : nc);
		}
		/* out of range must be refused, not read */
		static float one;
		FUZZ_CHECK(sl_st_read_slice(s, t, rows, 1, 0, 1, SL_DT_F32, &one, err, sizeof err),
			   "tensor %s: row %lld past its %lld rows was read", t->name,
			   (long long)rows, (long long)rows);
	}
}

#endif
