/*
 * safetensors.h — read Hugging Face safetensors checkpoints (formats/st_writer.h
 * writes them).
 *
 * A checkpoint is one `model.safetensors` or several shards listed by
 * `model.safetensors.index.json`. Files are memory-mapped; nothing is read
 * until a caller copies a slice out with sl_st_read_slice(), which also
 * counts the source bytes it touched (so a tensor-parallel rank can log and
 * test that it read only its share).
 *
 * Every malformed input is reported as an error naming the file and, where
 * there is one, the tensor: truncated file, header length past the end, bad
 * JSON, offsets out of range or overlapping, unknown dtype, byte size not
 * matching shape x dtype, missing tensor.
 */
#ifndef NODE_SAFETENSORS_H
#define NODE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"

#define SL_ST_MAX_DIMS 8

typedef struct sl_st_tensor {
	const char *name;              /* owned by the set */
	sl_dtype dtype;
	int ndim;
	int64_t shape[SL_ST_MAX_DIMS];
	const void *data;              /* into the file's mapping */
	size_t nbytes;
	int file_index;                /* which shard holds it */
} sl_st_tensor;

typedef struct sl_st_set sl_st_set;    /* opaque: all tensors of a checkpoint */

/* Open a checkpoint folder: model.safetensors.index.json when present
 * (every shard it names is opened and every tensor it lists must exist in
 * the shard it names), otherwise model.safetensors. */
int sl_st_open_dir(const char *dir, sl_st_set **out, char *err, size_t errlen);
/* Open one .safetensors file. */
int sl_st_open_file(const char *path, sl_st_set **out, char *err, size_t errlen);
void sl_st_close(sl_st_set *s);

int sl_st_count(const sl_st_set *s);
const sl_st_tensor *sl_st_at(const sl_st_set *s, int i);
const sl_st_tensor *sl_st_find(const sl_st_set *s, const char *name);
const char *sl_st_file_path(const sl_st_set *s, int file_index);

/* Look a tensor up and check its shape: error names file and tensor when it
 * is missing or its shape differs from the `ndim` dims in `shape`. */
int sl_st_get(const sl_st_set *s, const char *name, int ndim, const int64_t *shape,
	      const sl_st_tensor **out, char *err, size_t errlen);

/* Copy rows [r0, r0+nr) and columns [c0, c0+nc) of a tensor seen as 2-D
 * (1-D tensors are one row; >2-D collapse leading dims into rows),
 * converted to dst_dtype, into dst laid out row-major [nr, nc]. Adds the
 * source bytes read to the set's counter. */
int sl_st_read_slice(sl_st_set *s, const sl_st_tensor *t, int64_t r0, int64_t nr,
		     int64_t c0, int64_t nc, sl_dtype dst_dtype, void *dst,
		     char *err, size_t errlen);
uint64_t sl_st_bytes_read(const sl_st_set *s);

#endif
