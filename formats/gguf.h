/*
 * gguf.h — read GGUF files (llama.cpp's single-file model format, v2 and
 * v3): the header, the metadata key/values, the tensor directory, and the
 * tensor data through a read-only mapping. Shared by the node (weights and
 * config, node/model_load.c) and the coordinator (tokenizer and chat
 * template, text/tokenizer/tokenizer.c).
 *
 * A GGUF file is untrusted input: every count, offset, size, string length
 * and nesting read from it is checked against the file before use, and
 * every error names the file and the key or tensor at fault. Nothing is
 * copied at open except the directory; tensor data is read only when a
 * caller asks for a slice (sl_gguf_read_slice counts the bytes it
 * touched, so a tensor-parallel rank can show it read only its share).
 *
 * Split models (`NAME-00001-of-0000N.gguf`, llama.cpp's gguf-split) open
 * as one: give the first file; its `split.count` names how many follow,
 * each must carry the same count and its own `split.no`, and tensors are
 * looked up across all of them. Metadata comes from the first file.
 *
 * Dimension order is GGUF's own: ne[0] is the innermost (contiguous) one.
 * A 2-D weight stored as ne = {in, out} is the Hugging Face [out, in]
 * matrix; seen as 2-D, a tensor has ne[0] columns and ne[1] * ne[2] * ...
 * rows.
 */
#ifndef SL_GGUF_H
#define SL_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"

#define SL_GGUF_MAX_DIMS 4

/* Metadata value types, as numbered in the file format. */
typedef enum {
	SL_GGUF_U8 = 0, SL_GGUF_I8 = 1, SL_GGUF_U16 = 2, SL_GGUF_I16 = 3,
	SL_GGUF_U32 = 4, SL_GGUF_I32 = 5, SL_GGUF_F32 = 6, SL_GGUF_BOOL = 7,
	SL_GGUF_STRING = 8, SL_GGUF_ARRAY = 9, SL_GGUF_U64 = 10, SL_GGUF_I64 = 11,
	SL_GGUF_F64 = 12,
} sl_gguf_vtype;

/* Tensor storage types (ggml's numbering) that shardline can read. */
typedef enum {
	SL_GGML_F32 = 0, SL_GGML_F16 = 1, SL_GGML_Q4_0 = 2, SL_GGML_Q4_1 = 3,
	SL_GGML_Q5_0 = 6, SL_GGML_Q5_1 = 7, SL_GGML_Q8_0 = 8, SL_GGML_Q4_K = 12,
	SL_GGML_Q5_K = 13, SL_GGML_Q6_K = 14, SL_GGML_BF16 = 30,
} sl_ggml_type;

/* A string in the file: not NUL-terminated, points into the mapping. */
typedef struct sl_gguf_str {
	const char *p;
	uint64_t n;
} sl_gguf_str;

typedef struct sl_gguf_tensor {
	const char *name;       /* NUL-terminated copy, owned by the set */
	int type;               /* sl_ggml_type (other values are refused at open) */
	int ndim;
	int64_t ne[SL_GGUF_MAX_DIMS]; /* ne[0] innermost; unused dims are 1 */
	const void *data;       /* into its file's mapping */
	uint64_t nbytes;
	int file_index;         /* which split file holds it */
} sl_gguf_tensor;

typedef struct sl_gguf sl_gguf; /* opaque: one model, all its split files */

int sl_gguf_open(const char *path, sl_gguf **out, char *err, size_t errlen);
void sl_gguf_close(sl_gguf *g);
const char *sl_gguf_file_path(const sl_gguf *g, int file_index);

/* ---- metadata ---- */

/* 1 if the key is present. */
int sl_gguf_has(const sl_gguf *g, const char *key);
/* Typed reads. Each returns SL_ENOTFOUND when the key is absent (the
 * message names file and key, so a caller may pass a missing optional key
 * through unchanged or ignore it) and SL_EINVAL when its type does not
 * fit: integers of any width convert when the value is in range, floats
 * from F32/F64. */
int sl_gguf_get_i64(const sl_gguf *g, const char *key, int64_t *out, char *err, size_t errlen);
int sl_gguf_get_f64(const sl_gguf *g, const char *key, double *out, char *err, size_t errlen);
int sl_gguf_get_bool(const sl_gguf *g, const char *key, int *out, char *err, size_t errlen);
int sl_gguf_get_str(const sl_gguf *g, const char *key, sl_gguf_str *out, char *err,
		    size_t errlen);
/* An array: its element type and length. */
int sl_gguf_get_arr(const sl_gguf *g, const char *key, sl_gguf_vtype *elem, uint64_t *n,
		    char *err, size_t errlen);
/* Element i of an array of strings / of integers (any width) / of floats.
 * No error text: the caller checked the array's type and length first. */
int sl_gguf_arr_str(const sl_gguf *g, const char *key, uint64_t i, sl_gguf_str *out);
int sl_gguf_arr_i64(const sl_gguf *g, const char *key, uint64_t i, int64_t *out);
int sl_gguf_arr_f64(const sl_gguf *g, const char *key, uint64_t i, double *out);

/* ---- tensors ---- */

int sl_gguf_tensor_count(const sl_gguf *g);
const sl_gguf_tensor *sl_gguf_tensor_at(const sl_gguf *g, int i);
const sl_gguf_tensor *sl_gguf_find_tensor(const sl_gguf *g, const char *name);
/* Look a tensor up and check its shape in GGUF order (ne[0] first); the
 * error names file and tensor when it is missing or differs. */
int sl_gguf_get_tensor(const sl_gguf *g, const char *name, int ndim, const int64_t *ne,
		       const sl_gguf_tensor **out, char *err, size_t errlen);

/* Elements per block and bytes per block of a storage type (1 and the
 * element size for F32/F16/BF16); 0 for a type shardline cannot read. */
int sl_ggml_block(int type, int *block_elems, int *block_bytes);
const char *sl_ggml_type_name(int type);

/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of a tensor seen as 2-D,
 * dequantized (block-quantized types) or converted to dst_dtype (F32,
 * F16 or BF16), into dst laid out row-major [nr, nc]. Reads whole blocks:
 * the blocks covering the columns are decoded and the asked-for columns
 * kept. Adds the source bytes read to the set's counter. */
int sl_gguf_read_slice(sl_gguf *g, const sl_gguf_tensor *t, int64_t r0, int64_t nr, int64_t c0,
		       int64_t nc, sl_dtype dst_dtype, void *dst, char *err, size_t errlen);
uint64_t sl_gguf_bytes_read(const sl_gguf *g);

/* Decode n elements (a multiple of the type's block size) of one row of
 * a block-quantized or float tensor into fp32: the CPU reference of every
 * GGUF storage type. SL_ENOTSUP for a type it does not know. */
int sl_ggml_dequant_row(int type, const void *src, float *dst, int64_t n);

#endif
