/*
 * gguf.c — GGUF reader (see gguf.h for the contract): maps each file of a
 * model read-only, walks its header once to build a key index and the
 * tensor directory, and afterwards hands out typed metadata and dequantized
 * tensor slices. Used by the node's loader (node/model_load.c, weights and
 * config) and the coordinator's tokenizer (vocabulary, merges, template).
 *
 * The walk trusts nothing: every count is weighed against the bytes left
 * before anything is allocated for it, every string length, array length
 * and nesting depth is bounded, every tensor's offset and size must fall
 * inside the data section without overlapping another, and every error
 * names the file and the key or tensor, because a truncated download must
 * end in a message, not a SIGBUS, an allocation of 2^60 bytes or a
 * silently wrong model.
 *
 * Storage types are gguf_quant.c's business: this file asks it how big a
 * block of each type is (sl_ggml_block) and hands it each row to decode
 * (sl_ggml_dequant_row); it never reaches back here.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 kv
 * count, the key/values (string key, u32 type, value), the tensor infos
 * (string name, u32 ndim, u64 ne[ndim], u32 type, u64 offset), padding to
 * general.alignment (default 32), then the data section; tensor offsets
 * are relative to its start.
 */
#include "formats/gguf.h"
#include "common/checked.h"
#include "common/checks.h"
#include "common/sl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_KEY 65535      /* the format's own bound on key length */
#define GGUF_MAX_NAME 256       /* llama.cpp's bound is 64; be a little lenient */
#define GGUF_MAX_DEPTH 3        /* arrays of arrays: allowed, but only this deep */
#define GGUF_MAX_SPLITS 1024
#define GGUF_PATH_MAX 4096

/* One key/value of a file. Values stay in the mapping. */
typedef struct gguf_kv {
	char *key;                 /* NUL-terminated copy */
	sl_gguf_vtype type;
	const unsigned char *val;  /* scalar: its bytes; string: its length prefix;
				    * array: its first element */
	sl_gguf_vtype elem;        /* arrays: element type */
	uint64_t n;                /* arrays: element count */
	const unsigned char **strs;/* arrays of strings: each element's length prefix */
} gguf_kv;

typedef struct gguf_file {
	char *path;
	unsigned char *map;        /* the whole file, PROT_READ */
	size_t size;
	gguf_kv *kv;               /* [n_kv], sorted by key once read */
	int n_kv;
	uint64_t alignment;
	const unsigned char *data; /* the data section */
	uint64_t data_size;
} gguf_file;

struct sl_gguf {
	gguf_file *files;          /* [n_files]; files[0] holds the metadata */
	int n_files;
	sl_gguf_tensor *tensors;   /* [n_tensors], in file order, file by file */
	int n_tensors;
	int *by_name;              /* [n_tensors] indices sorted by name */
	uint64_t bytes_read;
};

/* A cursor over one file's header. */
typedef struct rd {
	const char *path;
	const unsigned char *base, *p, *end;
	char *err;
	size_t errlen;
} rd;

static const char *vtype_name(uint32_t t)
{
	static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
				      "string", "array", "u64", "i64", "f64"};
	return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* Bytes of a scalar value; 0 for string, array and unknown types. */
static uint64_t scalar_size(uint32_t t)
{
	switch (t) {
	case SL_GGUF_U8: case SL_GGUF_I8: case SL_GGUF_BOOL: return 1;
	case SL_GGUF_U16: case SL_GGUF_I16: return 2;
	case SL_GGUF_U32: case SL_GGUF_I32: case SL_GGUF_F32: return 4;
	case SL_GGUF_U64: case SL_GGUF_I64: case SL_GGUF_F64: return 8;
	}
	return 0;
}

/* The fewest bytes one value of type t can take: bounds array lengths
 * before anything is allocated for them. */
static uint64_t min_value_size(uint32_t t)
{
	if (t == SL_GGUF_STRING)
		return 8;
	if (t == SL_GGUF_ARRAY)
		return 12;
	return scalar_size(t);
}

/* ---- little-endian loads (the mapping has no alignment) ---- */

static uint16_t ld16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

static uint32_t ld32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t ld64(const unsigned char *p) { return ld32(p) | (uint64_t)ld32(p + 4) << 32; }

/* ---- the cursor ---- */

static uint64_t rd_left(const rd *r) { return (uint64_t)(r->end - r->p); }
static uint64_t rd_pos(const rd *r) { return (uint64_t)(r->p - r->base); }

/* n more bytes must be there; `what` says what was being read. */
static int rd_need(rd *r, uint64_t n, const char *what)
{
	if (n <= rd_left(r))
		return SL_OK;
	return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: truncated: %s needs %" PRIu64 " bytes "
		       "at offset %" PRIu64 " but the file ends %" PRIu64 " bytes later",
		       r->path, what, n, rd_pos(r), rd_left(r));
}

static int rd_u32(rd *r, uint32_t *v, const char *what)
{
	TRY(rd_need(r, 4, what));
	*v = ld32(r->p);
	r->p += 4;
	return SL_OK;
}

static int rd_u64(rd *r, uint64_t *v, const char *what)
{
	TRY(rd_need(r, 8, what));
	*v = ld64(r->p);
	r->p += 8;
	return SL_OK;
}

/* A string: u64 length, then that many bytes (no terminator). */
static int rd_str(rd *r, sl_gguf_str *s, const char *what)
{
	uint64_t n;
	TRY(rd_need(r, 8, what));
	n = ld64(r->p);
	if (n > rd_left(r) - 8)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: %s has length %" PRIu64 ", past "
			       "the end of the file (%" PRIu64 " bytes left at offset %" PRIu64 ")",
			       r->path, what, n, rd_left(r) - 8, rd_pos(r));
	s->p = (const char *)r->p + 8;
	s->n = n;
	r->p += 8 + n;
	return SL_OK;
}

/* A key or tensor name: bounded, no NUL inside; *out is a C copy. */
static int rd_name(rd *r, uint64_t max, char **out, const char *what)
{
	sl_gguf_str s;
	TRY(rd_str(r, &s, what));
	if (s.n == 0 || s.n > max)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: %s at offset %" PRIu64 " has "
			       "length %" PRIu64 " (1 to %" PRIu64 " allowed)", r->path, what,
			       rd_pos(r) - 8 - s.n, s.n, max);
	if (memchr(s.p, 0, s.n))
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: %s \"%.*s\" contains a NUL byte",
			       r->path, what, (int)strnlen(s.p, s.n), s.p);
	if (!(*out = strndup(s.p, s.n)))
		return sl_errf(r->err, r->errlen, SL_ENOMEM, "%s: out of memory", r->path);
	return SL_OK;
}

/* ---- metadata ---- */

static int skip_value(rd *r, uint32_t type, int depth, const char *key);

/* The elements of an array whose header (type, count) was just read. */
static int skip_array_body(rd *r, uint32_t elem, uint64_t n, int depth, const char *key)
{
	uint64_t sz = scalar_size(elem), bytes;
	if (sz) {
		if (sl_mul_u64(sz, n, &bytes) || bytes > rd_left(r))
			goto past_end;
		r->p += bytes;
		return SL_OK;
	}
	for (uint64_t i = 0; i < n; i++)
		TRY(skip_value(r, elem, depth + 1, key));
	return SL_OK;
past_end:
	return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: key %s: array of %" PRIu64 " %s "
		       "elements is past the end of the file (%" PRIu64 " bytes left)", r->path,
		       key, n, vtype_name(elem), rd_left(r));
}

/* An array's header: element type and count, the count checked against
 * what the rest of the file could hold. */
static int rd_array_head(rd *r, int depth, const char *key, uint32_t *elem, uint64_t *n)
{
	char what[96];
	snprintf(what, sizeof what, "the array header of key %.60s", key);
	TRY(rd_u32(r, elem, what));
	TRY(rd_u64(r, n, what));
	if (*elem > SL_GGUF_F64)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: key %s: unknown array element "
			       "type %" PRIu32, r->path, key, *elem);
	if (*elem == SL_GGUF_ARRAY && depth + 1 >= GGUF_MAX_DEPTH)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: key %s: arrays nested more than "
			       "%d deep", r->path, key, GGUF_MAX_DEPTH);
	uint64_t min = min_value_size(*elem), need;
	if (sl_mul_u64(min, *n, &need) || need > rd_left(r))
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: key %s: array length %" PRIu64
			       " is past the end of the file (%" PRIu64 " bytes left, each %s "
			       "takes at least %" PRIu64 ")", r->path, key, *n, rd_left(r),
			       vtype_name(*elem), min);
	return SL_OK;
}

static int skip_value(rd *r, uint32_t type, int depth, const char *key)
{
	char what[96];
	snprintf(what, sizeof what, "the value of key %.60s", key);
	if (type == SL_GGUF_STRING) {
		sl_gguf_str s;
		return rd_str(r, &s, what);
	}
	if (type == SL_GGUF_ARRAY) {
		uint32_t elem;
		uint64_t n;
		TRY(rd_array_head(r, depth, key, &elem, &n));
		return skip_array_body(r, elem, n, depth, key);
	}
	uint64_t sz = scalar_size(type);
	if (!sz)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: key %s: unknown value type %" PRIu32,
			       r->path, key, type);
	TRY(rd_need(r, sz, what));
	if (type == SL_GGUF_BOOL && r->p[0] > 1)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: key %s: bool value %u is neither "
			       "0 nor 1", r->path, key, r->p[0]);
	r->p += sz;
	return SL_OK;
}

/* An array of strings: walk it once, keeping each element's position, so
 * element i is found without walking again (the tokenizer reads 100k). */
static int index_strings(rd *r, gguf_kv *kv)
{
	if (!(kv->strs = malloc((kv->n ? kv->n : 1) * sizeof *kv->strs)))
		return sl_errf(r->err, r->errlen, SL_ENOMEM, "%s: key %s: out of memory for %" PRIu64
			       " strings", r->path, kv->key, kv->n);
	char what[128];
	for (uint64_t i = 0; i < kv->n; i++) {
		sl_gguf_str s;
		kv->strs[i] = r->p;
		snprintf(what, sizeof what, "string %" PRIu64 " of key %.60s", i, kv->key);
		TRY(rd_str(r, &s, what));
	}
	return SL_OK;
}

static int read_kv(rd *r, gguf_kv *kv, uint64_t index)
{
	char what[64];
	snprintf(what, sizeof what, "key %" PRIu64, index);
	TRY(rd_name(r, GGUF_MAX_KEY, &kv->key, what));
	uint32_t type;
	snprintf(what, sizeof what, "the type of key %.40s", kv->key);
	TRY(rd_u32(r, &type, what));
	if (type > SL_GGUF_F64)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: key %s: unknown value type %" PRIu32,
			       r->path, kv->key, type);
	kv->type = (sl_gguf_vtype)type;
	if (type != SL_GGUF_ARRAY) {
		kv->val = r->p;
		return skip_value(r, type, 0, kv->key);
	}
	uint32_t elem;
	TRY(rd_array_head(r, 0, kv->key, &elem, &kv->n));
	kv->elem = (sl_gguf_vtype)elem;
	kv->val = r->p;
	if (elem == SL_GGUF_STRING)
		return index_strings(r, kv);
	return skip_array_body(r, elem, kv->n, 0, kv->key);
}

static int cmp_kv(const void *a, const void *b)
{
	return strcmp(((const gguf_kv *)a)->key, ((const gguf_kv *)b)->key);
}

static const gguf_kv *file_kv(const gguf_file *f, const char *key)
{
	if (!f || !key || !f->n_kv)
		return NULL;
	gguf_kv k = {.key = (char *)key};
	return bsearch(&k, f->kv, (size_t)f->n_kv, sizeof k, cmp_kv);
}

static int read_kvs(rd *r, gguf_file *f, uint64_t n)
{
	/* each key/value takes at least 8 + 1 (key) + 4 (type) + 1 (value) bytes */
	if (n > rd_left(r) / 14)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: key/value count %" PRIu64 " is "
			       "more than the file can hold (%" PRIu64 " bytes left)", r->path, n,
			       rd_left(r));
	if (!(f->kv = calloc(n ? n : 1, sizeof *f->kv)))
		return sl_errf(r->err, r->errlen, SL_ENOMEM, "%s: out of memory", r->path);
	for (uint64_t i = 0; i < n; i++) {
		f->n_kv++;
		TRY(read_kv(r, &f->kv[i], i));
	}
	qsort(f->kv, (size_t)f->n_kv, sizeof *f->kv, cmp_kv);
	for (int i = 1; i < f->n_kv; i++)
		if (!strcmp(f->kv[i - 1].key, f->kv[i].key))
			return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: duplicate key %s", r->path,
				       f->kv[i].key);
	return SL_OK;
}

/* general.alignment: a u32 power of two; default 32. */
static int read_alignment(gguf_file *f, char *err, size_t errlen)
{
	const gguf_kv *kv = file_kv(f, "general.alignment");
	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	if (!kv)
		return SL_OK;
	if (kv->type != SL_GGUF_U32)
		return sl_errf(err, errlen, SL_EINVAL, "%s: key general.alignment is a %s, the "
			       "format says u32", f->path, vtype_name(kv->type));
	uint32_t a = ld32(kv->val);
	if (a == 0 || (a & (a - 1)) || a > (1u << 20))
		return sl_errf(err, errlen, SL_EINVAL, "%s: key general.alignment is %" PRIu32
			       ": not a power of two up to 1 MiB", f->path, a);
	f->alignment = a;
	return SL_OK;
}

/* ---- tensor directory ---- */

/* What a tensor info gives before its data is placed. */
typedef struct tinfo {
	uint64_t offset;
} tinfo;

static int read_dims(rd *r, sl_gguf_tensor *t)
{
	uint32_t nd;
	char what[GGUF_MAX_NAME + 48];
	snprintf(what, sizeof what, "the dimensions of tensor %s", t->name);
	TRY(rd_u32(r, &nd, what));
	if (nd < 1 || nd > SL_GGUF_MAX_DIMS)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: tensor %s has %" PRIu32 " dimensions "
			       "(1 to %d supported)", r->path, t->name, nd, SL_GGUF_MAX_DIMS);
	t->ndim = (int)nd;
	for (int i = 0; i < SL_GGUF_MAX_DIMS; i++)
		t->ne[i] = 1;
	for (uint32_t i = 0; i < nd; i++) {
		uint64_t v;
		TRY(rd_u64(r, &v, what));
		if (v > INT64_MAX)
			return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: tensor %s: dimension %" PRIu32
				       " is %" PRIu64 ", too large", r->path, t->name, i, v);
		t->ne[i] = (int64_t)v;
	}
	return SL_OK;
}

/* Type, element count and byte size: whole blocks per row, no overflow. */
static int read_type(rd *r, sl_gguf_tensor *t)
{
	uint32_t type;
	char what[GGUF_MAX_NAME + 48];
	snprintf(what, sizeof what, "the type of tensor %s", t->name);
	TRY(rd_u32(r, &type, what));
	int be, bb;
	if (type > INT32_MAX || !sl_ggml_block((int)type, &be, &bb))
		return sl_errf(r->err, r->errlen, SL_ENOTSUP, "%s: tensor %s has storage type %" PRIu32
			       " (%s), which shardline cannot read (F32, F16, BF16, Q4_0, Q4_1, "
			       "Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)", r->path, t->name, type,
			       type > INT32_MAX ? "unknown" : sl_ggml_type_name((int)type));
	t->type = (int)type;
	uint64_t numel, bytes;
	if (sl_shape_numel(t->ndim, t->ne, &numel))
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: tensor %s: dimensions overflow "
			       "(%" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64 ")", r->path,
			       t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
	if (t->ne[0] % be)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: tensor %s: row length %" PRId64
			       " is not a multiple of the %s block size %d", r->path, t->name,
			       t->ne[0], sl_ggml_type_name(t->type), be);
	if (sl_mul_u64(numel / (uint64_t)be, (uint64_t)bb, &bytes))
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: tensor %s is too large", r->path,
			       t->name);
	t->nbytes = bytes;
	return SL_OK;
}

static int read_tensor_info(rd *r, sl_gguf_tensor *t, tinfo *ti, uint64_t index)
{
	char what[GGUF_MAX_NAME + 48];
	snprintf(what, sizeof what, "the name of tensor %" PRIu64, index);
	TRY(rd_name(r, GGUF_MAX_NAME, (char **)&t->name, what));
	TRY(read_dims(r, t));
	TRY(read_type(r, t));
	snprintf(what, sizeof what, "the offset of tensor %s", t->name);
	return rd_u64(r, &ti->offset, what);
}

/* Offsets are aligned and inside the data section. */
static int place_tensor(const gguf_file *f, sl_gguf_tensor *t, const tinfo *ti, char *err,
			size_t errlen)
{
	if (ti->offset % f->alignment)
		return sl_errf(err, errlen, SL_EINVAL, "%s: tensor %s: data offset %" PRIu64 " is not "
			       "a multiple of the alignment %" PRIu64, f->path, t->name, ti->offset,
			       f->alignment);
	if (ti->offset > f->data_size || t->nbytes > f->data_size - ti->offset)
		return sl_errf(err, errlen, SL_EINVAL, "%s: tensor %s: data [%" PRIu64 ", +%" PRIu64
			       ") is past the end of the data section (%" PRIu64 " bytes; truncated "
			       "file?)", f->path, t->name, ti->offset, t->nbytes, f->data_size);
	t->data = f->data + ti->offset;
	return SL_OK;
}

static int cmp_by_data(const void *a, const void *b)
{
	const sl_gguf_tensor *x = *(const sl_gguf_tensor *const *)a;
	const sl_gguf_tensor *y = *(const sl_gguf_tensor *const *)b;
	const char *xd = x->data, *yd = y->data;
	if (xd != yd)
		return xd < yd ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* No two tensors of one file may share a byte. */
static int check_overlaps(const gguf_file *f, sl_gguf_tensor *ts, int n, char *err, size_t errlen)
{
	if (n < 2)
		return SL_OK;
	const sl_gguf_tensor **v = malloc((size_t)n * sizeof *v);
	if (!v)
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", f->path);
	for (int i = 0; i < n; i++)
		v[i] = &ts[i];
	qsort(v, (size_t)n, sizeof *v, cmp_by_data);
	int rc = SL_OK;
	for (int i = 1; i < n && !rc; i++) {
		const unsigned char *pd = v[i - 1]->data, *td = v[i]->data;
		if (v[i]->nbytes && v[i - 1]->nbytes && td < pd + v[i - 1]->nbytes)
			rc = sl_errf(err, errlen, SL_EINVAL, "%s: tensors %s and %s overlap: [%td, "
				     "+%" PRIu64 ") and [%td, +%" PRIu64 ")", f->path, v[i - 1]->name,
				     v[i]->name, pd - f->data, v[i - 1]->nbytes, td - f->data,
				     v[i]->nbytes);
	}
	free(v);
	return rc;
}

/* ---- files ---- */

static int grow_tensors(sl_gguf *g, uint64_t more, const char *path, char *err, size_t errlen)
{
	if (more > (uint64_t)(INT32_MAX / 2) - (uint64_t)g->n_tensors)
		return sl_errf(err, errlen, SL_EINVAL, "%s: too many tensors", path);
	sl_gguf_tensor *nt = realloc(g->tensors, ((size_t)g->n_tensors + more + 1) * sizeof *nt);
	if (!nt)
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
	g->tensors = nt;
	return SL_OK;
}

static int read_tensors(rd *r, sl_gguf *g, gguf_file *f, int file_index, uint64_t n,
			tinfo **infos)
{
	/* each info takes at least 8 + 1 (name) + 4 + 8 (one dim) + 4 + 8 bytes */
	if (n > rd_left(r) / 33)
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: tensor count %" PRIu64 " is more "
			       "than the file can hold (%" PRIu64 " bytes left)", r->path, n,
			       rd_left(r));
	TRY(grow_tensors(g, n, f->path, r->err, r->errlen));
	if (!(*infos = calloc(n ? n : 1, sizeof **infos)))
		return sl_errf(r->err, r->errlen, SL_ENOMEM, "%s: out of memory", r->path);
	for (uint64_t i = 0; i < n; i++) {
		sl_gguf_tensor *t = &g->tensors[g->n_tensors];
		memset(t, 0, sizeof *t);
		t->file_index = file_index;
		g->n_tensors++; /* counted now so close frees its name */
		TRY(read_tensor_info(r, t, &(*infos)[i], i));
	}
	return SL_OK;
}

/* Where the data section starts: the header's end rounded up. */
static int locate_data(rd *r, gguf_file *f, uint64_t n_tensors)
{
	uint64_t at = rd_pos(r), pad = (f->alignment - at % f->alignment) % f->alignment;
	if (at + pad > f->size) {
		if (n_tensors)
			return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: truncated: the data section "
				       "would start at %" PRIu64 ", past the end of the file (%zu "
				       "bytes)", f->path, at + pad, f->size);
		pad = f->size - at; /* metadata only: nothing to align */
	}
	f->data = f->map + at + pad;
	f->data_size = f->size - at - pad;
	return SL_OK;
}

static int map_file(const char *path, gguf_file *f, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sl_errf(err, errlen, errno == ENOENT ? SL_ENOTFOUND : SL_EIO, "%s: %s", path,
			       strerror(errno));
	struct stat st;
	int rc = SL_OK;
	if (fstat(fd, &st) != 0)
		rc = sl_errf(err, errlen, SL_EIO, "%s: %s", path, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: not a regular file", path);
	else if (st.st_size < 24)
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: truncated: %lld bytes, a GGUF header "
			     "(magic, version, counts) takes 24", path, (long long)st.st_size);
	if (!rc) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED)
			rc = sl_errf(err, errlen, SL_EIO, "%s: mmap: %s", path, strerror(errno));
		else
			f->map = m, f->size = (size_t)st.st_size;
	}
	close(fd);
	return rc;
}

static int check_magic(rd *r, uint32_t *version)
{
	if (memcmp(r->p, "GGUF", 4))
		return sl_errf(r->err, r->errlen, SL_EINVAL, "%s: not a GGUF file (magic %02x %02x "
			       "%02x %02x, expected \"GGUF\")", r->path, r->p[0], r->p[1], r->p[2],
			       r->p[3]);
	r->p += 4;
	TRY(rd_u32(r, version, "the version"));
	if (*version == 2 || *version == 3)
		return SL_OK;
	if (*version > 0xffff && __builtin_bswap32(*version) <= 3)
		return sl_errf(r->err, r->errlen, SL_ENOTSUP, "%s: a big-endian GGUF file; only "
			       "little-endian files are supported", r->path);
	return sl_errf(r->err, r->errlen, SL_ENOTSUP, "%s: GGUF version %" PRIu32 " is not "
		       "supported (2 and 3 are)", r->path, *version);
}

/* Maps one file and reads its header into g (metadata into its own
 * gguf_file, tensors appended to g's directory). */
static int load_file(sl_gguf *g, const char *path, char *err, size_t errlen)
{
	gguf_file *nf = realloc(g->files, (size_t)(g->n_files + 1) * sizeof *nf);
	if (!nf)
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
	g->files = nf;
	gguf_file *f = &g->files[g->n_files];
	memset(f, 0, sizeof *f);
	if (!(f->path = strdup(path)))
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
	int file_index = g->n_files++, first = g->n_tensors, rc;
	TRY(map_file(path, f, err, errlen));
	rd r = {path, f->map, f->map, f->map + f->size, err, errlen};
	uint32_t version;
	uint64_t n_tensors, n_kv;
	tinfo *infos = NULL;
	if ((rc = check_magic(&r, &version)) ||
	    (rc = rd_u64(&r, &n_tensors, "the tensor count")) ||
	    (rc = rd_u64(&r, &n_kv, "the key/value count")) ||
	    (rc = read_kvs(&r, f, n_kv)) || (rc = read_alignment(f, err, errlen)) ||
	    (rc = read_tensors(&r, g, f, file_index, n_tensors, &infos)) ||
	    (rc = locate_data(&r, f, n_tensors)))
		goto done;
	for (uint64_t i = 0; i < n_tensors && !rc; i++)
		rc = place_tensor(f, &g->tensors[first + i], &infos[i], err, errlen);
	if (!rc)
		rc = check_overlaps(f, g->tensors + first, (int)n_tensors, err, errlen);
done:
	free(infos);
	return rc;
}

/* ---- split models ---- */

/* Typed integer read of one file's key (for the split keys). */
static int file_int(const gguf_file *f, const char *key, int64_t *out, char *err, size_t errlen);

/* "PREFIX-00001-of-00003.gguf": the prefix length, or -1. */
static long split_prefix(const char *path, int count)
{
	char tail[40];
	snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", 1, count);
	size_t n = strlen(path), t = strlen(tail);
	return n > t && !strcmp(path + n - t, tail) ? (long)(n - t) : -1;
}

static int split_count(const gguf_file *f, int64_t *count, char *err, size_t errlen)
{
	*count = 1;
	int rc = file_int(f, "split.count", count, err, errlen);
	if (rc == SL_ENOTFOUND)
		return SL_OK;
	if (rc)
		return rc;
	if (*count < 1 || *count > GGUF_MAX_SPLITS)
		return sl_errf(err, errlen, SL_EINVAL, "%s: key split.count is %" PRId64 " (1 to %d)",
			       f->path, *count, GGUF_MAX_SPLITS);
	return SL_OK;
}

/* File k of a split model must say it is part k of `count`. */
static int check_part(const gguf_file *f, int k, int64_t count, char *err, size_t errlen)
{
	int64_t c, no = -1;
	TRY(split_count(f, &c, err, errlen));
	int rc = file_int(f, "split.no", &no, err, errlen);
	if (rc == SL_ENOTFOUND && count > 1)
		return sl_errf(err, errlen, SL_EINVAL, "%s: key split.no is missing from a part of a "
			       "split model", f->path);
	if (rc && rc != SL_ENOTFOUND)
		return rc;
	if (c != count)
		return sl_errf(err, errlen, SL_EINVAL, "%s: key split.count is %" PRId64 " but the "
			       "first part says %" PRId64, f->path, c, count);
	if (count > 1 && no != k)
		return sl_errf(err, errlen, SL_EINVAL, "%s: key split.no is %" PRId64 ", expected %d "
			       "(file %d of %" PRId64 ")%s", f->path, no, k, k + 1, count,
			       k == 0 ? ": open the first part" : "");
	return SL_OK;
}

/* The other parts of a split model, named after the first. */
static int load_parts(sl_gguf *g, const char *path, char *err, size_t errlen)
{
	int64_t count;
	TRY(split_count(&g->files[0], &count, err, errlen));
	TRY(check_part(&g->files[0], 0, count, err, errlen));
	if (count == 1)
		return SL_OK;
	long pre = split_prefix(path, (int)count);
	if (pre < 0 || pre > GGUF_PATH_MAX - 40)
		return sl_errf(err, errlen, SL_EINVAL, "%s: key split.count is %" PRId64 " but the "
			       "file name does not end in -00001-of-%05d.gguf", path, count,
			       (int)count);
	for (int k = 1; k < count; k++) {
		char part[GGUF_PATH_MAX];
		snprintf(part, sizeof part, "%.*s-%05d-of-%05d.gguf", (int)pre, path, k + 1,
			 (int)count);
		int rc = load_file(g, part, err, errlen);
		if (rc == SL_ENOTFOUND)
			return sl_errf(err, errlen, SL_ENOTFOUND, "%s: missing part %d of %" PRId64
				       " of the split model %s", part, k + 1, count, path);
		TRY(rc);
		TRY(check_part(&g->files[k], k, count, err, errlen));
	}
	int64_t total;
	int rc = file_int(&g->files[0], "split.tensors.count", &total, err, errlen);
	if (rc && rc != SL_ENOTFOUND)
		return rc;
	if (!rc && total != g->n_tensors)
		return sl_errf(err, errlen, SL_EINVAL, "%s: key split.tensors.count is %" PRId64
			       " but the %" PRId64 " parts hold %d tensors", path, total, count,
			       g->n_tensors);
	return SL_OK;
}

static const sl_gguf *g_sort_set; /* qsort has no context argument */

static int cmp_by_name(const void *a, const void *b)
{
	return strcmp(g_sort_set->tensors[*(const int *)a].name,
		      g_sort_set->tensors[*(const int *)b].name);
}

/* The name index; a name seen twice is an error naming both places. */
static int index_names(sl_gguf *g, char *err, size_t errlen)
{
	if (!(g->by_name = malloc(((size_t)g->n_tensors + 1) * sizeof *g->by_name)))
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", g->files[0].path);
	for (int i = 0; i < g->n_tensors; i++)
		g->by_name[i] = i;
	g_sort_set = g;
	qsort(g->by_name, (size_t)g->n_tensors, sizeof *g->by_name, cmp_by_name);
	g_sort_set = NULL;
	for (int i = 1; i < g->n_tensors; i++) {
		const sl_gguf_tensor *p = &g->tensors[g->by_name[i - 1]];
		const sl_gguf_tensor *t = &g->tensors[g->by_name[i]];
		if (strcmp(p->name, t->name))
			continue;
		if (p->file_index == t->file_index)
			return sl_errf(err, errlen, SL_EINVAL, "%s: duplicate tensor name %s",
				       g->files[t->file_index].path, t->name);
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s appears in both %s and %s",
			       t->name, g->files[p->file_index].path, g->files[t->file_index].path);
	}
	return SL_OK;
}

/* ---- open / close ---- */

int sl_gguf_open(const char *path, sl_gguf **out, char *err, size_t errlen)
{
	*out = NULL;
	sl_gguf *g = calloc(1, sizeof *g);
	if (!g)
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
	int rc = load_file(g, path, err, errlen);
	if (!rc)
		rc = load_parts(g, path, err, errlen);
	if (!rc)
		rc = index_names(g, err, errlen);
	if (rc) {
		sl_gguf_close(g);
		return rc;
	}
	*out = g;
	return SL_OK;
}

void sl_gguf_close(sl_gguf *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->n_tensors; i++)
		free((char *)g->tensors[i].name);
	for (int i = 0; i < g->n_files; i++) {
		gguf_file *f = &g->files[i];
		for (int k = 0; k < f->n_kv; k++)
			free(f->kv[k].key), free(f->kv[k].strs);
		free(f->kv);
		if (f->map)
			munmap(f->map, f->size);
		free(f->path);
	}
	free(g->files);
	free(g->tensors);
	free(g->by_name);
	free(g);
}

const char *sl_gguf_file_path(const sl_gguf *g, int file_index)
{
	return g && file_index >= 0 && file_index < g->n_files ? g->files[file_index].path : NULL;
}

/* ---- typed metadata ---- */

static const gguf_kv *find_kv(const sl_gguf *g, const char *key)
{
	return g ? file_kv(&g->files[0], key) : NULL;
}

int sl_gguf_has(const sl_gguf *g, const char *key) { return find_kv(g, key) != NULL; }

static int absent(const char *path, const char *key, char *err, size_t errlen)
{
	return sl_errf(err, errlen, SL_ENOTFOUND, "%s: key %s is missing", path, key);
}

/* A scalar integer value of type t at p. */
static int load_int(uint32_t t, const unsigned char *p, int64_t *out)
{
	switch (t) {
	case SL_GGUF_U8: *out = p[0]; return 0;
	case SL_GGUF_I8: *out = (int8_t)p[0]; return 0;
	case SL_GGUF_U16: *out = ld16(p); return 0;
	case SL_GGUF_I16: *out = (int16_t)ld16(p); return 0;
	case SL_GGUF_U32: *out = ld32(p); return 0;
	case SL_GGUF_I32: *out = (int32_t)ld32(p); return 0;
	case SL_GGUF_I64: *out = (int64_t)ld64(p); return 0;
	case SL_GGUF_U64: {
		uint64_t v = ld64(p);
		if (v > INT64_MAX)
			return -2; /* out of range */
		*out = (int64_t)v;
		return 0;
	}
	}
	return -1;
}

static int load_float(uint32_t t, const unsigned char *p, double *out)
{
	int64_t i;
	if (t == SL_GGUF_F32) {
		uint32_t u = ld32(p);
		float f;
		memcpy(&f, &u, 4);
		*out = f;
	} else if (t == SL_GGUF_F64) {
		uint64_t u = ld64(p);
		memcpy(out, &u, 8);
	} else if (!load_int(t, p, &i)) {
		*out = (double)i;
	} else {
		return -1;
	}
	return 0;
}

static int file_int(const gguf_file *f, const char *key, int64_t *out, char *err, size_t errlen)
{
	const gguf_kv *kv = file_kv(f, key);
	if (!kv)
		return absent(f->path, key, err, errlen);
	int rc = kv->type == SL_GGUF_ARRAY ? -1 : load_int(kv->type, kv->val, out);
	if (rc == -2)
		return sl_errf(err, errlen, SL_EINVAL, "%s: key %s: %" PRIu64 " is out of range",
			       f->path, key, ld64(kv->val));
	if (rc)
		return sl_errf(err, errlen, SL_EINVAL, "%s: key %s is a %s, expected an integer",
			       f->path, key, vtype_name(kv->type));
	return SL_OK;
}

int sl_gguf_get_i64(const sl_gguf *g, const char *key, int64_t *out, char *err, size_t errlen)
{
	if (!g)
		return sl_errf(err, errlen, SL_EINVAL, "no GGUF file");
	return file_int(&g->files[0], key, out, err, errlen);
}

int sl_gguf_get_f64(const sl_gguf *g, const char *key, double *out, char *err, size_t errlen)
{
	const gguf_kv *kv = find_kv(g, key);
	if (!g)
		return sl_errf(err, errlen, SL_EINVAL, "no GGUF file");
	if (!kv)
		return absent(g->files[0].path, key, err, errlen);
	if (kv->type == SL_GGUF_ARRAY || load_float(kv->type, kv->val, out))
		return sl_errf(err, errlen, SL_EINVAL, "%s: key %s is a %s, expected a number",
			       g->files[0].path, key, vtype_name(kv->type));
	return SL_OK;
}

/* The key, which must have type `want` (its name in messages: `what`). */
static int typed_kv(const sl_gguf *g, const char *key, sl_gguf_vtype want, const gguf_kv **out,
		    char *err, size_t errlen)
{
	if (!g)
		return sl_errf(err, errlen, SL_EINVAL, "no GGUF file");
	const gguf_kv *kv = find_kv(g, key);
	if (!kv)
		return absent(g->files[0].path, key, err, errlen);
	if (kv->type != want)
		return sl_errf(err, errlen, SL_EINVAL, "%s: key %s is a %s, expected a %s",
			       g->files[0].path, key, vtype_name(kv->type), vtype_name(want));
	*out = kv;
	return SL_OK;
}

int sl_gguf_get_bool(const sl_gguf *g, const char *key, int *out, char *err, size_t errlen)
{
	const gguf_kv *kv;
	TRY(typed_kv(g, key, SL_GGUF_BOOL, &kv, err, errlen));
	*out = kv->val[0] != 0;
	return SL_OK;
}

int sl_gguf_get_str(const sl_gguf *g, const char *key, sl_gguf_str *out, char *err,
		    size_t errlen)
{
	const gguf_kv *kv;
	TRY(typed_kv(g, key, SL_GGUF_STRING, &kv, err, errlen));
	out->n = ld64(kv->val);
	out->p = (const char *)kv->val + 8;
	return SL_OK;
}

int sl_gguf_get_arr(const sl_gguf *g, const char *key, sl_gguf_vtype *elem, uint64_t *n,
		    char *err, size_t errlen)
{
	const gguf_kv *kv;
	TRY(typed_kv(g, key, SL_GGUF_ARRAY, &kv, err, errlen));
	*elem = kv->elem;
	*n = kv->n;
	return SL_OK;
}

/* Element i of an array of scalars: its bytes, or NULL. */
static const unsigned char *arr_elem(const sl_gguf *g, const char *key, uint64_t i,
				     sl_gguf_vtype *elem)
{
	const gguf_kv *kv = find_kv(g, key);
	if (!kv || kv->type != SL_GGUF_ARRAY || i >= kv->n || !scalar_size(kv->elem))
		return NULL;
	*elem = kv->elem;
	return kv->val + i * scalar_size(kv->elem);
}

int sl_gguf_arr_str(const sl_gguf *g, const char *key, uint64_t i, sl_gguf_str *out)
{
	const gguf_kv *kv = find_kv(g, key);
	if (!kv || kv->type != SL_GGUF_ARRAY || kv->elem != SL_GGUF_STRING || i >= kv->n)
		return SL_EINVAL;
	out->n = ld64(kv->strs[i]);
	out->p = (const char *)kv->strs[i] + 8;
	return SL_OK;
}

int sl_gguf_arr_i64(const sl_gguf *g, const char *key, uint64_t i, int64_t *out)
{
	sl_gguf_vtype t;
	const unsigned char *p = arr_elem(g, key, i, &t);
	return p && !load_int(t, p, out) ? SL_OK : SL_EINVAL;
}

int sl_gguf_arr_f64(const sl_gguf *g, const char *key, uint64_t i, double *out)
{
	sl_gguf_vtype t;
	const unsigned char *p = arr_elem(g, key, i, &t);
	return p && t != SL_GGUF_BOOL && !load_float(t, p, out) ? SL_OK : SL_EINVAL;
}

/* ---- tensors ---- */

int sl_gguf_tensor_count(const sl_gguf *g) { return g ? g->n_tensors : 0; }

const sl_gguf_tensor *sl_gguf_tensor_at(const sl_gguf *g, int i)
{
	return g && i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const sl_gguf_tensor *sl_gguf_find_tensor(const sl_gguf *g, const char *name)
{
	int lo = 0, hi = g && name ? g->n_tensors - 1 : -1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2, c = strcmp(name, g->tensors[g->by_name[mid]].name);
		if (!c)
			return &g->tensors[g->by_name[mid]];
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return NULL;
}

static void fmt_ne(char *buf, size_t n, int ndim, const int64_t *ne)
{
	size_t w = (size_t)snprintf(buf, n, "{");
	for (int i = 0; i < ndim && w < n; i++)
		w += (size_t)snprintf(buf + w, n - w, "%s%" PRId64, i ? ", " : "", ne[i]);
	if (w < n)
		snprintf(buf + w, n - w, "}");
}

int sl_gguf_get_tensor(const sl_gguf *g, const char *name, int ndim, const int64_t *ne,
		       const sl_gguf_tensor **out, char *err, size_t errlen)
{
	const sl_gguf_tensor *t = sl_gguf_find_tensor(g, name);
	*out = NULL;
	if (!t)
		return sl_errf(err, errlen, SL_ENOTFOUND, "%s: missing tensor %s",
			       g ? g->files[0].path : "(no GGUF file)", name);
	int same = t->ndim == ndim;
	for (int i = 0; same && i < ndim; i++)
		same = t->ne[i] == ne[i];
	if (!same) {
		char have[128], want[128];
		fmt_ne(have, sizeof have, t->ndim, t->ne);
		fmt_ne(want, sizeof want, ndim, ne);
		return sl_errf(err, errlen, SL_EINVAL, "%s: tensor %s has ne %s, the config expects "
			       "%s (GGUF order, innermost first)", g->files[t->file_index].path,
			       name, have, want);
	}
	*out = t;
	return SL_OK;
}

/* ---- reading ---- */

static int range_ok(int64_t start, int64_t n, int64_t limit)
{
	return start >= 0 && n >= 0 && start <= limit && n <= limit - start;
}

int sl_gguf_read_slice(sl_gguf *g, const sl_gguf_tensor *t, int64_t r0, int64_t nr, int64_t c0,
		       int64_t nc, sl_dtype dst_dtype, void *dst, char *err, size_t errlen)
{
	int be, bb;
	if (!g || !t || !sl_ggml_block(t->type, &be, &bb) ||
	    (dst_dtype != SL_DT_F32 && dst_dtype != SL_DT_F16 && dst_dtype != SL_DT_BF16))
		return sl_errf(err, errlen, SL_EINVAL, "gguf read_slice: bad arguments");
	const char *path = g->files[t->file_index].path;
	int64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3]; /* checked at open */
	if (!range_ok(r0, nr, rows) || !range_ok(c0, nc, cols))
		return sl_errf(err, errlen, SL_EINVAL, "%s: tensor %s: slice rows [%" PRId64 ", +%"
			       PRId64 ") cols [%" PRId64 ", +%" PRId64 ") is outside its [%" PRId64
			       ", %" PRId64 "] view", path, t->name, r0, nr, c0, nc, rows, cols);
	if (!nr || !nc)
		return SL_OK;
	/* the whole blocks that cover the columns */
	int64_t b0 = c0 / be, b1 = (c0 + nc + be - 1) / be;
	size_t row_bytes = (size_t)(cols / be) * (size_t)bb, span = (size_t)(b1 - b0) * be;
	size_t dsz = sl_dtype_size(dst_dtype);
	int threads = 1;
#ifdef _OPENMP
	threads = omp_get_max_threads(); /* decoding a 70B model is long work: share it */
#endif
	float *tmp = malloc(span * (size_t)threads * sizeof *tmp);
	if (!tmp)
		return sl_errf(err, errlen, SL_ENOMEM, "%s: tensor %s: out of memory", path, t->name);
#pragma omp parallel for schedule(static) if (nr * (int64_t)span > (1 << 18))
	for (int64_t i = 0; i < nr; i++) {
		int me = 0;
#ifdef _OPENMP
		me = omp_get_thread_num();
#endif
		float *row = tmp + (size_t)me * span;
		const unsigned char *src = (const unsigned char *)t->data +
					   (size_t)(r0 + i) * row_bytes + (size_t)b0 * (size_t)bb;
		sl_ggml_dequant_row(t->type, src, row, (int64_t)span);
		sl_convert((char *)dst + (size_t)i * (size_t)nc * dsz, dst_dtype,
			   row + (c0 - b0 * be), SL_DT_F32, (size_t)nc);
	}
	free(tmp);
	g->bytes_read += (uint64_t)nr * (uint64_t)(b1 - b0) * (uint64_t)bb;
	return SL_OK;
}

uint64_t sl_gguf_bytes_read(const sl_gguf *g) { return g ? g->bytes_read : 0; }
