/*
 * args.h — small, strict parsers for command-line values: a number that is
 * not entirely a number, or out of range, is an error that names the flag.
 */
#ifndef SL_ARGS_H
#define SL_ARGS_H

#include <stddef.h>
#include <stdint.h>

int sl_parse_int(const char *flag, const char *s, long lo, long hi, long *out, char *err,
		 size_t errlen);
int sl_parse_float(const char *flag, const char *s, double lo, double hi, double *out, char *err,
		   size_t errlen);
int sl_parse_u64(const char *flag, const char *s, uint64_t *out, char *err, size_t errlen);
/* "1,2,3" -> malloc'd ids; every id in [0, max_id]. */
int sl_parse_ids(const char *flag, const char *s, long max_id, int32_t **ids, int *n, char *err,
		 size_t errlen);

#endif
