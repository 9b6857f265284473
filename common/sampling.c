/*
 * sampling.c — the sampling table at run time, the defaults and the one
 * range check (see sampling.h). Callers: coordinator/submit.c (every
 * request, both front doors) and node/engine.c (every request a node
 * runs, the coordinator's or an in-process one).
 */
#include "common/sampling.h"

#include <stdio.h>
#include <string.h>

#include "common/sl.h"

#define SL_SAMPLING_TYPE_float SL_SF_FLOAT
#define SL_SAMPLING_TYPE_int32_t SL_SF_INT32
#define SL_SAMPLING_TYPE_uint64_t SL_SF_UINT64
#define SL_SAMPLING_ROW_(t, name, d, lo, hi, range, json) \
	{#name, SL_SAMPLING_TYPE_##t, offsetof(sl_sampling, name), d, lo, hi, range, json},

const sl_sampling_field sl_sampling_fields[] = {SL_SAMPLING_FIELDS(SL_SAMPLING_ROW_)};
const int sl_sampling_n_fields = (int)(sizeof sl_sampling_fields / sizeof sl_sampling_fields[0]);

void sl_sampling_default(sl_sampling *s)
{
	*s = (sl_sampling)SL_SAMPLING_DEFAULTS;
}

double sl_sampling_get(const sl_sampling *s, const sl_sampling_field *f)
{
	const char *p = (const char *)s + f->offset;
	switch (f->type) {
	case SL_SF_FLOAT: return *(const float *)p;
	case SL_SF_INT32: return *(const int32_t *)p;
	default: return (double)*(const uint64_t *)p;
	}
}

void sl_sampling_set(sl_sampling *s, const sl_sampling_field *f, double v)
{
	char *p = (char *)s + f->offset;
	switch (f->type) {
	case SL_SF_FLOAT: *(float *)p = (float)v; break;
	case SL_SF_INT32: *(int32_t *)p = (int32_t)v; break;
	default: *(uint64_t *)p = (uint64_t)v; break;
	}
}

/* "[lo, hi]" or "(lo, hi]", integers as integers. */
static void range_text(const sl_sampling_field *f, double hi, char *out, size_t n)
{
	snprintf(out, n, "%c%.15g, %.15g]", f->range == SL_RANGE_LO_OPEN ? '(' : '[', f->lo, hi);
}

int sl_sampling_check(const sl_sampling *s, int vocab, char *err, size_t errlen)
{
	for (int i = 0; i < sl_sampling_n_fields; i++) {
		const sl_sampling_field *f = &sl_sampling_fields[i];
		if (f->range == SL_RANGE_NONE)
			continue;
		double hi = f->hi == SL_SAMPLING_VOCAB ? vocab : f->hi;
		double v = sl_sampling_get(s, f);
		/* written so that NaN fails every test */
		int ok = f->range == SL_RANGE_LO_OPEN ? v > f->lo && v <= hi : v >= f->lo && v <= hi;
		if (ok)
			continue;
		char r[64];
		range_text(f, hi, r, sizeof r);
		if (f->type == SL_SF_FLOAT)
			return sl_errf(err, errlen, SL_EINVAL, "%s must be in %s, got %g", f->name, r, v);
		return sl_errf(err, errlen, SL_EINVAL, "%s must be in %s, got %lld", f->name, r,
			       (long long)v);
	}
	return 0;
}
