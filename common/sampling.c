/*
 * sampling.c — the sampling table at run time, the defaults and the one
 * range check (see sampling.h). Callers: coordinator/submit.c (every
 * request, both front doors) and node/engine.c (every request a node
 * runs, the coordinator's or an in-process one).
 */
#include "common/sampling.h"

#include <math.h>
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

/* ids[0, n) in [0, vocab) and distinct (n is small: a quadratic scan). */
static int check_ids(const char *what, const int32_t *ids, int n, int vocab, char *err,
		     size_t errlen)
{
	for (int i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= vocab)
			return sl_errf(err, errlen, SL_EINVAL,
				       "%s: token %d is outside the vocabulary [0, %d)", what, ids[i],
				       vocab);
		for (int j = 0; j < i; j++)
			if (ids[j] == ids[i])
				return sl_errf(err, errlen, SL_EINVAL, "%s: token %d given twice", what,
					       ids[i]);
	}
	return 0;
}

int sl_token_lists_check(const sl_token_lists *t, int vocab, int max_stop_ids, char *err,
			 size_t errlen)
{
	if (t->n_bias < 0 || t->n_bias > SL_SAMPLING_MAX_LOGIT_BIAS)
		return sl_errf(err, errlen, SL_EINVAL, "logit_bias: %d entries, at most %d",
			       t->n_bias, SL_SAMPLING_MAX_LOGIT_BIAS);
	if (t->n_stop_ids < 0 || t->n_stop_ids > max_stop_ids)
		return sl_errf(err, errlen, SL_EINVAL, "stop_token_ids: %d ids, at most %d",
			       t->n_stop_ids, max_stop_ids);
	for (int i = 0; i < t->n_bias; i++)
		if (!(fabsf(t->bias[i]) <= SL_SAMPLING_MAX_BIAS)) /* NaN fails too */
			return sl_errf(err, errlen, SL_EINVAL,
				       "logit_bias: the bias of token %d must be in [-%g, %g], got %g",
				       t->bias_ids[i], SL_SAMPLING_MAX_BIAS, SL_SAMPLING_MAX_BIAS,
				       t->bias[i]);
	if (check_ids("logit_bias", t->bias_ids, t->n_bias, vocab, err, errlen))
		return SL_EINVAL;
	return check_ids("stop_token_ids", t->stop_ids, t->n_stop_ids, vocab, err, errlen);
}
