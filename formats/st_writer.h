/*
 * st_writer.h — write a safetensors file (tools and tests only).
 */
#ifndef TOOLS_ST_WRITER_H
#define TOOLS_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "formats/safetensors.h"

/* Streaming writer: the header is written from the descriptors up front,
 * then each tensor's data in order with sl_st_writer_put(). */
typedef struct sl_st_desc {
	const char *name;
	sl_dtype dtype;
	int ndim;
	int64_t shape[SL_ST_MAX_DIMS];
} sl_st_desc;
typedef struct sl_st_writer sl_st_writer;
int sl_st_writer_open(const char *path, int n, const sl_st_desc *descs,
		      sl_st_writer **out, char *err, size_t errlen);
/* Append the next tensor's bytes (nbytes must equal shape x dtype size). */
int sl_st_writer_put(sl_st_writer *w, const void *data, size_t nbytes, char *err, size_t errlen);
/* Finish: checks every tensor was written; frees w whatever the result. */
int sl_st_writer_close(sl_st_writer *w, char *err, size_t errlen);

#endif
