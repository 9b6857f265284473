/*
 * st_writer.c — a streaming safetensors writer for the tools and tests that
 * make checkpoints (shardline-mkckpt, crafted test files). Not part of the
 * node library: serving only ever reads checkpoints (formats/safetensors.c).
 */
#include "formats/st_writer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/checked.h"
#include "common/sl.h"

/* safetensors keeps sizes within what a JSON double holds exactly */
#define ST_MAX_JSON_INT ((uint64_t)1000 * 1000 * 1000 * 1000 * 1000)

static int st_dtype_valid(sl_dtype t)
{
	return t == SL_DT_F32 || t == SL_DT_F16 || t == SL_DT_BF16;
}

struct sl_st_writer {
	FILE *f;
	char *path;
	int n, next;        /* tensors described, tensors written */
	char **names;       /* [n] copies, for messages */
	size_t *nbytes;     /* [n] expected size of each put */
};

static int desc_check(const char *path, int i, const sl_st_desc *descs, size_t *nbytes,
		      char *err, size_t errlen)
{
	const sl_st_desc *d = &descs[i];
	uint64_t numel, nb;
	if (!d->name || !strcmp(d->name, "__metadata__"))
		return sl_errf(err, errlen, SL_EINVAL, "%s: tensor %d has no usable name", path, i);
	for (int k = 0; k < i; k++)
		if (!strcmp(descs[k].name, d->name))
			return sl_errf(err, errlen, SL_EINVAL, "%s: duplicate tensor name %s",
				       path, d->name);
	if (!st_dtype_valid(d->dtype) || d->ndim < 0 || d->ndim > SL_ST_MAX_DIMS)
		return sl_errf(err, errlen, SL_EINVAL, "%s: tensor %s: bad dtype or ndim",
			       path, d->name);
	for (int k = 0; k < d->ndim; k++)
		if (d->shape[k] < 0)
			return sl_errf(err, errlen, SL_EINVAL, "%s: tensor %s: negative dim %d",
				       path, d->name, k);
	if (sl_shape_numel(d->ndim, d->shape, &numel) ||
	    sl_mul_u64(numel, sl_dtype_size(d->dtype), &nb) || nb > SIZE_MAX)
		return sl_errf(err, errlen, SL_EINVAL, "%s: tensor %s is too large", path, d->name);
	*nbytes = (size_t)nb;
	return SL_OK;
}

static cJSON *json_int_array(const uint64_t *v, int n)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < n; i++) {
		cJSON *x = cJSON_CreateNumber((double)v[i]);
		if (!x || !cJSON_AddItemToArray(a, x)) {
			cJSON_Delete(x);
			cJSON_Delete(a);
			return NULL;
		}
	}
	return a;
}

/* Adds item to obj, or frees it; false when either failed. */
static int add_owned(cJSON *obj, const char *key, cJSON *item)
{
	if (item && cJSON_AddItemToObject(obj, key, item))
		return 1;
	cJSON_Delete(item);
	return 0;
}

/* One header entry: {"dtype":..., "shape":[...], "data_offsets":[b, e]}. */
static cJSON *json_entry(const sl_st_desc *d, uint64_t begin, uint64_t end)
{
	uint64_t shape[SL_ST_MAX_DIMS], off[2] = {begin, end};
	for (int k = 0; k < d->ndim; k++)
		shape[k] = (uint64_t)d->shape[k];
	cJSON *e = cJSON_CreateObject();
	if (!e || !cJSON_AddStringToObject(e, "dtype", sl_dtype_name(d->dtype)) ||
	    !add_owned(e, "shape", json_int_array(shape, d->ndim)) ||
	    !add_owned(e, "data_offsets", json_int_array(off, 2))) {
		cJSON_Delete(e);
		return NULL;
	}
	return e;
}

/* Header text for descs laid out contiguously in order; NULL on OOM. */
static char *build_header(int n, const sl_st_desc *descs, const size_t *nbytes)
{
	cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject();
	char *text = NULL;
	uint64_t off = 0;
	if (!root || !add_owned(root, "__metadata__", meta) ||
	    !cJSON_AddStringToObject(meta, "format", "pt")) {
		if (!root)
			cJSON_Delete(meta);
		goto done;
	}
	for (int i = 0; i < n; i++) {
		if (!add_owned(root, descs[i].name, json_entry(&descs[i], off, off + nbytes[i])))
			goto done;
		off += nbytes[i];
	}
	text = cJSON_PrintUnformatted(root);
done:
	cJSON_Delete(root);
	return text;
}

static void writer_free(sl_st_writer *w)
{
	if (!w)
		return;
	for (int i = 0; w->names && i < w->n; i++)
		free(w->names[i]);
	free(w->names);
	free(w->nbytes);
	free(w->path);
	free(w);
}

static int writer_alloc(const char *path, int n, const sl_st_desc *descs,
			sl_st_writer **out, char *err, size_t errlen)
{
	sl_st_writer *w = calloc(1, sizeof *w);
	if (!w || !(w->path = strdup(path)) ||
	    !(w->names = calloc((size_t)n + 1, sizeof *w->names)) ||
	    !(w->nbytes = calloc((size_t)n + 1, sizeof *w->nbytes)))
		goto oom;
	w->n = n;
	for (int i = 0; i < n; i++) {
		int rc = desc_check(path, i, descs, &w->nbytes[i], err, errlen);
		if (rc) {
			writer_free(w);
			return rc;
		}
		if (!(w->names[i] = strdup(descs[i].name)))
			goto oom;
	}
	*out = w;
	return SL_OK;
oom:
	writer_free(w);
	return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
}

/* 8-byte little-endian length, the header, then spaces up to an 8-byte
 * boundary so the data section starts aligned (as HF writes it). */
static int write_header(FILE *f, const char *text)
{
	size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
	unsigned char le[8];
	for (int i = 0; i < 8; i++)
		le[i] = (unsigned char)((uint64_t)padded >> (8 * i));
	if (fwrite(le, 1, 8, f) != 8 || fwrite(text, 1, len, f) != len)
		return -1;
	for (size_t i = len; i < padded; i++)
		if (fputc(' ', f) == EOF)
			return -1;
	return 0;
}

int sl_st_writer_open(const char *path, int n, const sl_st_desc *descs,
		      sl_st_writer **out, char *err, size_t errlen)
{
	sl_st_writer *w = NULL;
	char *text = NULL;
	*out = NULL;
	if (!path || n < 0 || (n && !descs))
		return sl_errf(err, errlen, SL_EINVAL, "writer_open: bad arguments");
	int rc = writer_alloc(path, n, descs, &w, err, errlen);
	if (rc)
		return rc;
	uint64_t total = 0;
	for (int i = 0; i < n; i++) {
		if (w->nbytes[i] > ST_MAX_JSON_INT - total) {
			rc = sl_errf(err, errlen, SL_ENOTSUP, "%s: over %llu bytes of tensors",
				     path, (unsigned long long)ST_MAX_JSON_INT);
			goto fail;
		}
		total += w->nbytes[i];
	}
	if (!(text = build_header(n, descs, w->nbytes))) {
		rc = sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
		goto fail;
	}
	if (!(w->f = fopen(path, "wb"))) {
		rc = sl_errf(err, errlen, SL_EIO, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (write_header(w->f, text)) {
		rc = sl_errf(err, errlen, SL_EIO, "%s: write: %s", path, strerror(errno));
		fclose(w->f);
		unlink(path);
		goto fail;
	}
	free(text);
	*out = w;
	return SL_OK;
fail:
	free(text);
	writer_free(w);
	return rc;
}

int sl_st_writer_put(sl_st_writer *w, const void *data, size_t nbytes, char *err, size_t errlen)
{
	if (!w)
		return sl_errf(err, errlen, SL_EINVAL, "writer_put: no writer");
	if (w->next >= w->n)
		return sl_errf(err, errlen, SL_EINVAL, "%s: all %d tensors already written",
			       w->path, w->n);
	const char *name = w->names[w->next];
	if (nbytes != w->nbytes[w->next])
		return sl_errf(err, errlen, SL_EINVAL, "%s: tensor %s needs %zu bytes, got %zu",
			       w->path, name, w->nbytes[w->next], nbytes);
	if (nbytes && (!data || fwrite(data, 1, nbytes, w->f) != nbytes))
		return sl_errf(err, errlen, SL_EIO, "%s: writing tensor %s: %s", w->path, name,
			       data ? strerror(errno) : "no data");
	w->next++;
	return SL_OK;
}

/* A half-written checkpoint is removed: it would only fail later, further
 * from the cause. */
int sl_st_writer_close(sl_st_writer *w, char *err, size_t errlen)
{
	if (!w)
		return SL_OK;
	int rc = SL_OK;
	if (w->next != w->n)
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: only %d of %d tensors written",
			     w->path, w->next, w->n);
	if (fclose(w->f) != 0 && !rc)
		rc = sl_errf(err, errlen, SL_EIO, "%s: close: %s", w->path, strerror(errno));
	if (rc)
		unlink(w->path);
	writer_free(w);
	return rc;
}
