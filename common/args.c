/* args.c — strict numeric flag parsing shared by the binaries. */
#include "common/args.h"

#include <errno.h>
#include <stdlib.h>

#include "common/sl.h"

int sl_parse_int(const char *flag, const char *s, long lo, long hi, long *out, char *err,
		 size_t errlen)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return sl_errf(err, errlen, SL_EINVAL, "%s: '%s' is not an integer in [%ld, %ld]",
			       flag, s, lo, hi);
	*out = v;
	return SL_OK;
}

int sl_parse_float(const char *flag, const char *s, double lo, double hi, double *out, char *err,
		   size_t errlen)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return sl_errf(err, errlen, SL_EINVAL, "%s: '%s' is not a number in [%g, %g]", flag,
			       s, lo, hi);
	*out = v;
	return SL_OK;
}

int sl_parse_u64(const char *flag, const char *s, uint64_t *out, char *err, size_t errlen)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-')
		return sl_errf(err, errlen, SL_EINVAL, "%s: '%s' is not a non-negative integer", flag, s);
	*out = v;
	return SL_OK;
}

int sl_parse_ids(const char *flag, const char *s, long max_id, int32_t **ids, int *n, char *err,
		 size_t errlen)
{
	int cap = 16, k = 0;
	int32_t *v = malloc(sizeof(int32_t) * cap);
	if (!v)
		return SL_ENOMEM;
	const char *p = s;
	while (*p) {
		char *end;
		errno = 0;
		long x = strtol(p, &end, 10);
		if (errno || end == p || x < 0 || x > max_id || (*end && *end != ',')) {
			free(v);
			return sl_errf(err, errlen, SL_EINVAL,
				       "%s: '%s' must be comma-separated token ids in [0, %ld]", flag, s,
				       max_id);
		}
		if (k == cap) {
			int32_t *nv = realloc(v, sizeof(int32_t) * (cap *= 2));
			if (!nv) {
				free(v);
				return SL_ENOMEM;
			}
			v = nv;
		}
		v[k++] = (int32_t)x;
		p = *end ? end + 1 : end;
	}
	if (k == 0) {
		free(v);
		return sl_errf(err, errlen, SL_EINVAL, "%s: no token ids given", flag);
	}
	*ids = v;
	*n = k;
	return SL_OK;
}
