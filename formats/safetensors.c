/*
 * safetensors.c — Hugging Face safetensors reader and writer (see
 * safetensors.h for the contract).
 *
 * A set owns the read-only mappings of every shard of one checkpoint and a
 * name-sorted array of tensor descriptors pointing into them; the model
 * loader looks tensors up by name and copies out the slice its rank needs.
 * The writer is used by tools and tests to produce checkpoints.
 *
 * Nothing here trusts the file: every length, offset and shape is checked
 * before it is used, because a truncated download or a hand-edited header
 * must end in a message naming the file and tensor, not a SIGBUS or a
 * silently wrong model.
 */
#include "formats/safetensors.h"
#include "common/checked.h"
#include "common/checks.h"
#include "common/sl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Real headers are well under 1 MB; anything past this is not a header. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
/* cJSON prints doubles with %1.15g: integers below 1e15 stay integers. */
#define ST_MAX_JSON_INT ((uint64_t)1000 * 1000 * 1000 * 1000 * 1000)
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"
#define ST_PATH_MAX 4096

typedef struct st_file {
	char *path;
	void *map;          /* the whole file, PROT_READ, MAP_PRIVATE */
	size_t size;
} st_file;

struct sl_st_set {
	char *origin;           /* the file or index opened; for messages */
	st_file *files;         /* [n_files] */
	int n_files;
	sl_st_tensor *tensors;  /* [n], sorted by name once loading ends */
	int n, cap;
	uint64_t bytes_read;    /* source bytes copied by sl_st_read_slice */
};

/* What parse_entry needs to know about the file it is reading. */
typedef struct st_ctx {
	const char *path;
	const char *data;       /* start of the data section in the mapping */
	uint64_t data_size;
	int file_index;
} st_ctx;

static const struct { const char *name; sl_dtype dt; } st_dtypes[] = {
	{"F32", SL_DT_F32}, {"F16", SL_DT_F16}, {"BF16", SL_DT_BF16},
};

/* ---- small helpers ---- */

static int st_dtype_from_name(const char *s)
{
	for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
		if (!strcmp(s, st_dtypes[i].name))
			return (int)st_dtypes[i].dt;
	return -1;
}

static int st_dtype_valid(sl_dtype t)
{
	return t == SL_DT_F32 || t == SL_DT_F16 || t == SL_DT_BF16;
}

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t w = (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < ndim && w < n; i++)
		w += (size_t)snprintf(buf + w, n - w, "%s%lld", i ? ", " : "",
				      (long long)shape[i]);
	if (w < n)
		snprintf(buf + w, n - w, "]");
}

/* A JSON number that is a non-negative integer a double holds exactly
 * (cJSON keeps every number as a double). */
static int json_uint(const cJSON *j, uint64_t *out)
{
	if (!cJSON_IsNumber(j))
		return -1;
	double d = j->valuedouble;
	if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d)
		return -1;
	*out = (uint64_t)d;
	return 0;
}

static int is_json_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* ---- set building ---- */

static int st_create(const char *origin, sl_st_set **out, char *err, size_t errlen)
{
	sl_st_set *s = calloc(1, sizeof *s);
	if (!s || !(s->origin = strdup(origin))) {
		free(s);
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", origin);
	}
	*out = s;
	return SL_OK;
}

void sl_st_close(sl_st_set *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n; i++)
		free((char *)s->tensors[i].name);
	for (int i = 0; i < s->n_files; i++) {
		if (s->files[i].map)
			munmap(s->files[i].map, s->files[i].size);
		free(s->files[i].path);
	}
	free(s->tensors);
	free(s->files);
	free(s->origin);
	free(s);
}

static int st_push_tensor(sl_st_set *s, const sl_st_tensor *t, const char *path,
			  char *err, size_t errlen)
{
	if (s->n == s->cap) {
		int ncap = s->cap ? s->cap * 2 : 64;
		sl_st_tensor *nt = realloc(s->tensors, (size_t)ncap * sizeof *nt);
		if (!nt)
			return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
		s->tensors = nt;
		s->cap = ncap;
	}
	sl_st_tensor *d = &s->tensors[s->n];
	*d = *t;
	if (!(d->name = strdup(t->name)))
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
	s->n++;
	return SL_OK;
}

/* Maps `path` and records it in s->files, so sl_st_close unmaps it. */
static int st_map_file(sl_st_set *s, const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sl_errf(err, errlen, errno == ENOENT ? SL_ENOTFOUND : SL_EIO,
			       "%s: %s", path, strerror(errno));
	struct stat st;
	int rc = SL_OK;
	void *map = NULL;
	if (fstat(fd, &st) != 0) {
		rc = sl_errf(err, errlen, SL_EIO, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: not a regular file", path);
		goto fail;
	}
	if (st.st_size < 8) {
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: truncated: %lld bytes, a "
			     "safetensors file starts with an 8-byte header length",
			     path, (long long)st.st_size);
		goto fail;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		map = NULL;
		rc = sl_errf(err, errlen, SL_EIO, "%s: mmap: %s", path, strerror(errno));
		goto fail;
	}
	st_file *nf = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *nf);
	char *p = strdup(path);
	if (nf)
		s->files = nf;
	if (!nf || !p) {
		free(p);
		rc = sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
		goto fail;
	}
	s->files[s->n_files++] = (st_file){p, map, (size_t)st.st_size};
	close(fd);
	return SL_OK;
fail:
	if (map)
		munmap(map, (size_t)st.st_size);
	close(fd);
	return rc;
}

/* ---- header parsing ---- */

static int parse_dtype(const st_ctx *c, const char *name, const cJSON *e,
		       sl_st_tensor *t, char *err, size_t errlen)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	if (!j)
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s: missing dtype",
			       name, c->path);
	if (!cJSON_IsString(j))
		return sl_errf(err, errlen, SL_EINVAL,
			       "tensor %s in %s: dtype is not a string", name, c->path);
	int dt = st_dtype_from_name(j->valuestring);
	if (dt < 0)
		return sl_errf(err, errlen, SL_ENOTSUP,
			       "unsupported dtype %s for tensor %s in %s (F32, F16, BF16 only)",
			       j->valuestring, name, c->path);
	t->dtype = (sl_dtype)dt;
	return SL_OK;
}

static int parse_shape(const st_ctx *c, const char *name, const cJSON *e,
		       sl_st_tensor *t, char *err, size_t errlen)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(e, "shape");
	if (!cJSON_IsArray(j))
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s: %s", name, c->path,
			       j ? "shape is not an array" : "missing shape");
	int n = cJSON_GetArraySize(j);
	if (n > SL_ST_MAX_DIMS)
		return sl_errf(err, errlen, SL_ENOTSUP, "tensor %s in %s: shape has %d dims, "
			       "at most %d are supported", name, c->path, n, SL_ST_MAX_DIMS);
	t->ndim = n;
	int i = 0;
	const cJSON *d;
	cJSON_ArrayForEach(d, j) {
		uint64_t v;
		if (json_uint(d, &v))
			return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s: shape dim %d "
				       "is not a non-negative integer", name, c->path, i);
		t->shape[i++] = (int64_t)v;
	}
	return SL_OK;
}

/* Reads data_offsets into [*begin, *end) and checks them against the data
 * section. */
static int parse_offsets(const st_ctx *c, const char *name, const cJSON *e,
			 uint64_t *begin, uint64_t *end, char *err, size_t errlen)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	if (!j)
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s: missing data_offsets",
			       name, c->path);
	if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2 ||
	    json_uint(cJSON_GetArrayItem(j, 0), begin) ||
	    json_uint(cJSON_GetArrayItem(j, 1), end) || *begin > *end)
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s: data_offsets must be "
			       "[begin, end] with 0 <= begin <= end", name, c->path);
	if (*end > c->data_size)
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s: data_offsets [%llu, %llu] "
			       "out of range: the data section is %llu bytes (truncated file?)",
			       name, c->path, (unsigned long long)*begin,
			       (unsigned long long)*end, (unsigned long long)c->data_size);
	return SL_OK;
}

static int check_nbytes(const st_ctx *c, const char *name, const sl_st_tensor *t,
			char *err, size_t errlen)
{
	char sh[128];
	uint64_t numel, want;
	fmt_shape(sh, sizeof sh, t->ndim, t->shape);
	if (sl_shape_numel(t->ndim, t->shape, &numel) ||
	    sl_mul_u64(numel, sl_dtype_size(t->dtype), &want))
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s: shape %s is too large",
			       name, c->path, sh);
	if (want != t->nbytes)
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s: data_offsets span %zu "
			       "bytes but shape %s of %s needs %llu", name, c->path,
			       t->nbytes, sh, sl_dtype_name(t->dtype), (unsigned long long)want);
	return SL_OK;
}

static int parse_entry(const st_ctx *c, const cJSON *e, sl_st_tensor *t,
		       char *err, size_t errlen)
{
	const char *name = e->string;
	uint64_t begin = 0, end = 0;
	int rc;
	memset(t, 0, sizeof *t);
	if (!cJSON_IsObject(e))
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s: entry is not an object",
			       name, c->path);
	if ((rc = parse_dtype(c, name, e, t, err, errlen)) ||
	    (rc = parse_shape(c, name, e, t, err, errlen)) ||
	    (rc = parse_offsets(c, name, e, &begin, &end, err, errlen)))
		return rc;
	t->name = name;
	t->data = c->data + begin;
	t->nbytes = (size_t)(end - begin);
	t->file_index = c->file_index;
	return check_nbytes(c, name, t, err, errlen);
}

/* __metadata__ is a string-to-string map in the format; we do not use it
 * but refuse anything else, as the reference implementation does. */
static int check_metadata(const char *path, const cJSON *m, char *err, size_t errlen)
{
	if (!cJSON_IsObject(m))
		return sl_errf(err, errlen, SL_EINVAL, "%s: __metadata__ is not an object", path);
	const cJSON *v;
	cJSON_ArrayForEach(v, m) {
		if (!cJSON_IsString(v))
			return sl_errf(err, errlen, SL_EINVAL, "%s: __metadata__.%s is not a string",
				       path, v->string);
	}
	return SL_OK;
}

/* Parses the n-byte header text; on success *out is the root object. */
static int parse_header_json(const char *path, const char *text, uint64_t n,
			     cJSON **out, char *err, size_t errlen)
{
	char *buf = malloc(n + 1);
	if (!buf)
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
	memcpy(buf, text, n);
	buf[n] = 0;
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithOpts(buf, &end, 0);
	/* a NUL inside the header also stops the parser: treat it as garbage */
	if (root && end)
		while (end < buf + n && is_json_space(*end))
			end++;
	int rc = SL_OK;
	if (!root || !end || end != buf + n)
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: header is not valid JSON (near byte %lld "
			     "of %llu)", path, end ? (long long)(end - buf) : -1LL,
			     (unsigned long long)n);
	else if (!cJSON_IsObject(root))
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: header is not a JSON object", path);
	free(buf);
	if (rc)
		cJSON_Delete(root);
	else
		*out = root;
	return rc;
}

static int cmp_by_offset(const void *a, const void *b)
{
	const sl_st_tensor *x = *(const sl_st_tensor *const *)a;
	const sl_st_tensor *y = *(const sl_st_tensor *const *)b;
	const char *xd = x->data, *yd = y->data;
	if (xd != yd)
		return xd < yd ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Tensors [first, s->n) all come from file c; no two may share a byte. */
static int check_overlaps(const sl_st_set *s, int first, const st_ctx *c,
			  char *err, size_t errlen)
{
	int n = s->n - first;
	if (n < 2)
		return SL_OK;
	const sl_st_tensor **v = malloc((size_t)n * sizeof *v);
	if (!v)
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", c->path);
	for (int i = 0; i < n; i++)
		v[i] = &s->tensors[first + i];
	qsort(v, (size_t)n, sizeof *v, cmp_by_offset);
	int rc = SL_OK;
	for (int i = 1; i < n && !rc; i++) {
		const sl_st_tensor *p = v[i - 1], *t = v[i];
		const char *pd = p->data, *td = t->data;
		if (td >= pd + p->nbytes)
			continue;
		rc = sl_errf(err, errlen, SL_EINVAL, "tensors %s and %s in %s overlap: "
			     "[%td, %td) and [%td, %td)", p->name, t->name, c->path,
			     pd - c->data, pd - c->data + (ptrdiff_t)p->nbytes,
			     td - c->data, td - c->data + (ptrdiff_t)t->nbytes);
	}
	free(v);
	return rc;
}

static int load_entries(sl_st_set *s, const st_ctx *c, const cJSON *root,
			char *err, size_t errlen)
{
	int first = s->n, rc;
	const cJSON *e;
	cJSON_ArrayForEach(e, root) {
		sl_st_tensor t;
		if (!strcmp(e->string, "__metadata__"))
			rc = check_metadata(c->path, e, err, errlen);
		else if (!(rc = parse_entry(c, e, &t, err, errlen)))
			rc = st_push_tensor(s, &t, c->path, err, errlen);
		if (rc)
			return rc;
	}
	return check_overlaps(s, first, c, err, errlen);
}

/* Maps one file and appends its tensors to s (not yet sorted). */
static int st_load_file(sl_st_set *s, const char *path, char *err, size_t errlen)
{
	int rc = st_map_file(s, path, err, errlen);
	if (rc)
		return rc;
	const st_file *f = &s->files[s->n_files - 1];
	const unsigned char *b = f->map;
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | b[i];
	if (hlen == 0)
		return sl_errf(err, errlen, SL_EINVAL, "%s: header length is 0", path);
	if (hlen > ST_MAX_HEADER)
		return sl_errf(err, errlen, SL_EINVAL, "%s: header length %llu is absurd "
			       "(> 100 MB): not a safetensors file?", path, (unsigned long long)hlen);
	if (hlen > f->size - 8)
		return sl_errf(err, errlen, SL_EINVAL, "%s: header length %llu is past the end "
			       "of the file (%zu bytes): truncated?", path,
			       (unsigned long long)hlen, f->size);
	cJSON *root = NULL;
	if ((rc = parse_header_json(path, (const char *)b + 8, hlen, &root, err, errlen)))
		return rc;
	st_ctx c = {path, (const char *)b + 8 + hlen, f->size - 8 - hlen, s->n_files - 1};
	rc = load_entries(s, &c, root, err, errlen);
	cJSON_Delete(root);
	return rc;
}

static int cmp_by_name(const void *a, const void *b)
{
	return strcmp(((const sl_st_tensor *)a)->name, ((const sl_st_tensor *)b)->name);
}

/* Sorts by name for bsearch and refuses a name seen twice, in one file
 * (duplicate JSON keys, which cJSON keeps) or across shards. */
static int st_finish(sl_st_set *s, char *err, size_t errlen)
{
	if (s->n > 1)
		qsort(s->tensors, (size_t)s->n, sizeof *s->tensors, cmp_by_name);
	for (int i = 1; i < s->n; i++) {
		const sl_st_tensor *p = &s->tensors[i - 1], *t = &s->tensors[i];
		if (strcmp(p->name, t->name))
			continue;
		if (p->file_index == t->file_index)
			return sl_errf(err, errlen, SL_EINVAL, "duplicate tensor name %s in %s",
				       t->name, s->files[t->file_index].path);
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s appears in both %s and %s",
			       t->name, s->files[p->file_index].path,
			       s->files[t->file_index].path);
	}
	return SL_OK;
}

/* ---- opening ---- */

int sl_st_open_file(const char *path, sl_st_set **out, char *err, size_t errlen)
{
	sl_st_set *s;
	*out = NULL;
	int rc = st_create(path, &s, err, errlen);
	if (rc)
		return rc;
	TRY_GOTO(rc, fail, st_load_file(s, path, err, errlen));
	TRY_GOTO(rc, fail, st_finish(s, err, errlen));
	*out = s;
	return SL_OK;
fail:
	sl_st_close(s);
	return rc;
}

/* A shard name must stay inside the checkpoint folder. */
static int shard_name_ok(const char *n)
{
	return n[0] && !strchr(n, '/') && !strstr(n, "..");
}

/* Distinct shard names of weight_map in first-seen order; they point into
 * the JSON tree. */
static int index_shards(const char *ipath, const cJSON *wm, const char ***out, int *n_out,
			char *err, size_t errlen)
{
	const char **v = malloc((size_t)cJSON_GetArraySize(wm) * sizeof *v);
	int n = 0;
	if (!v)
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", ipath);
	const cJSON *e;
	cJSON_ArrayForEach(e, wm) {
		if (!cJSON_IsString(e) || !shard_name_ok(e->valuestring)) {
			free(v);
			return sl_errf(err, errlen, SL_EINVAL, "%s: weight_map entry for tensor %s "
				       "is not a plain shard file name", ipath, e->string);
		}
		int k = 0;
		while (k < n && strcmp(v[k], e->valuestring))
			k++;
		if (k == n)
			v[n++] = e->valuestring;
	}
	*out = v;
	*n_out = n;
	return SL_OK;
}

/* Every weight_map entry must be found in the shard it names; shard k of
 * `shards` was loaded as file index k. */
static int index_verify(const sl_st_set *s, const cJSON *wm, const char **shards,
			int n_shards, char *err, size_t errlen)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, wm) {
		int k = 0;
		while (k < n_shards && strcmp(shards[k], e->valuestring))
			k++;
		const sl_st_tensor *t = sl_st_find(s, e->string);
		if (!t || t->file_index != k)
			return sl_errf(err, errlen, SL_ENOTFOUND, "missing tensor %s: index says "
				       "%s but it is not there", e->string, s->files[k].path);
	}
	return SL_OK;
}

static int index_weight_map(const char *ipath, const char *text, cJSON **root,
			    const cJSON **wm, char *err, size_t errlen)
{
	const char *end = NULL;
	*root = cJSON_ParseWithOpts(text, &end, 1);
	if (!*root)
		return sl_errf(err, errlen, SL_EINVAL, "%s: not valid JSON (near byte %lld)",
			       ipath, end ? (long long)(end - text) : -1LL);
	*wm = cJSON_GetObjectItemCaseSensitive(*root, "weight_map");
	if (!cJSON_IsObject(*wm))
		return sl_errf(err, errlen, SL_EINVAL, "%s: %s", ipath, *wm ?
			       "weight_map is not an object" : "missing weight_map");
	if (!(*wm)->child)
		return sl_errf(err, errlen, SL_EINVAL, "%s: weight_map is empty", ipath);
	return SL_OK;
}

static int st_open_index(const char *dir, const char *ipath, sl_st_set **out,
			 char *err, size_t errlen)
{
	char *text = NULL, path[ST_PATH_MAX];
	cJSON *root = NULL;
	const cJSON *wm = NULL;
	const char **shards = NULL;
	int n_shards = 0;
	sl_st_set *s = NULL;
	int rc;
	TRY_GOTO(rc, fail, sl_read_file(ipath, &text, NULL, err, errlen));
	TRY_GOTO(rc, fail, index_weight_map(ipath, text, &root, &wm, err, errlen));
	TRY_GOTO(rc, fail, index_shards(ipath, wm, &shards, &n_shards, err, errlen));
	TRY_GOTO(rc, fail, st_create(ipath, &s, err, errlen));
	for (int k = 0; k < n_shards; k++) {
		if (sl_path_join(path, sizeof path, dir, shards[k])) {
			rc = sl_errf(err, errlen, SL_EINVAL, "%s/%s: path too long", dir, shards[k]);
			goto fail;
		}
		TRY_GOTO(rc, fail, st_load_file(s, path, err, errlen));
	}
	TRY_GOTO(rc, fail, st_finish(s, err, errlen));
	TRY_GOTO(rc, fail, index_verify(s, wm, shards, n_shards, err, errlen));
	*out = s;
	s = NULL;
fail:
	sl_st_close(s);
	free(shards);
	cJSON_Delete(root);
	free(text);
	return rc;
}

/* True unless stat says plainly that nothing is there: a permission error
 * is better reported by the open that follows. */
static int path_present(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 || errno != ENOENT;
}

int sl_st_open_dir(const char *dir, sl_st_set **out, char *err, size_t errlen)
{
	char path[ST_PATH_MAX];
	struct stat st;
	*out = NULL;
	if (stat(dir, &st) != 0)
		return sl_errf(err, errlen, errno == ENOENT ? SL_ENOTFOUND : SL_EIO,
			       "checkpoint folder %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return sl_errf(err, errlen, SL_EINVAL, "checkpoint folder %s: not a folder", dir);
	if (sl_path_join(path, sizeof path, dir, ST_INDEX_NAME))
		return sl_errf(err, errlen, SL_EINVAL, "checkpoint folder %s: path too long", dir);
	if (path_present(path))
		return st_open_index(dir, path, out, err, errlen);
	sl_path_join(path, sizeof path, dir, ST_SINGLE_NAME);
	if (path_present(path))
		return sl_st_open_file(path, out, err, errlen);
	return sl_errf(err, errlen, SL_ENOTFOUND, "checkpoint folder %s has neither "
		       ST_INDEX_NAME " nor " ST_SINGLE_NAME, dir);
}

/* ---- lookup ---- */

int sl_st_count(const sl_st_set *s) { return s ? s->n : 0; }

const sl_st_tensor *sl_st_at(const sl_st_set *s, int i)
{
	return s && i >= 0 && i < s->n ? &s->tensors[i] : NULL;
}

const sl_st_tensor *sl_st_find(const sl_st_set *s, const char *name)
{
	if (!s || !name || !s->n)
		return NULL;
	sl_st_tensor key = {.name = name};
	return bsearch(&key, s->tensors, (size_t)s->n, sizeof key, cmp_by_name);
}

const char *sl_st_file_path(const sl_st_set *s, int file_index)
{
	return s && file_index >= 0 && file_index < s->n_files ? s->files[file_index].path
							       : NULL;
}

int sl_st_get(const sl_st_set *s, const char *name, int ndim, const int64_t *shape,
	      const sl_st_tensor **out, char *err, size_t errlen)
{
	const sl_st_tensor *t = sl_st_find(s, name);
	*out = NULL;
	if (!t)
		return sl_errf(err, errlen, SL_ENOTFOUND, "missing tensor %s in %s", name,
			       s ? s->origin : "(no checkpoint)");
	int same = t->ndim == ndim;
	for (int i = 0; same && i < ndim; i++)
		same = t->shape[i] == shape[i];
	if (!same) {
		char have[128], want[128];
		fmt_shape(have, sizeof have, t->ndim, t->shape);
		fmt_shape(want, sizeof want, ndim, shape);
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s has shape %s, config "
			       "expects %s", name, s->files[t->file_index].path, have, want);
	}
	*out = t;
	return SL_OK;
}

/* ---- reading ---- */

/* The 2-D view of read_slice: leading dims collapse into rows. */
static void view_2d(const sl_st_tensor *t, int64_t *rows, int64_t *cols)
{
	*rows = 1;
	*cols = t->ndim ? t->shape[t->ndim - 1] : 1;
	for (int i = 0; i + 1 < t->ndim; i++)
		*rows *= t->shape[i];  /* cannot overflow: checked at open */
}

static int range_ok(int64_t start, int64_t n, int64_t limit)
{
	return start >= 0 && n >= 0 && start <= limit && n <= limit - start;
}

int sl_st_read_slice(sl_st_set *s, const sl_st_tensor *t, int64_t r0, int64_t nr,
		     int64_t c0, int64_t nc, sl_dtype dst_dtype, void *dst,
		     char *err, size_t errlen)
{
	int64_t rows, cols;
	if (!s || !t || !st_dtype_valid(dst_dtype))
		return sl_errf(err, errlen, SL_EINVAL, "read_slice: bad arguments");
	const char *path = sl_st_file_path(s, t->file_index);
	view_2d(t, &rows, &cols);
	if (!range_ok(r0, nr, rows) || !range_ok(c0, nc, cols))
		return sl_errf(err, errlen, SL_EINVAL, "tensor %s in %s: slice rows [%lld, +%lld) "
			       "cols [%lld, +%lld) is outside its [%lld, %lld] view", t->name,
			       path, (long long)r0, (long long)nr, (long long)c0,
			       (long long)nc, (long long)rows, (long long)cols);
	if (!nr || !nc)
		return SL_OK;
	size_t ssz = sl_dtype_size(t->dtype), dsz = sl_dtype_size(dst_dtype);
	size_t row_bytes = (size_t)nc * ssz;
	/* headers not padded to 8 bytes leave data misaligned for typed loads */
	void *bounce = NULL;
	if (((uintptr_t)t->data % ssz) && !(bounce = malloc(row_bytes)))
		return sl_errf(err, errlen, SL_ENOMEM, "tensor %s in %s: out of memory",
			       t->name, path);
	for (int64_t i = 0; i < nr; i++) {
		const char *src = (const char *)t->data +
				  ((size_t)(r0 + i) * (size_t)cols + (size_t)c0) * ssz;
		if (bounce)
			src = memcpy(bounce, src, row_bytes);
		sl_convert((char *)dst + (size_t)i * (size_t)nc * dsz, dst_dtype, src,
			   t->dtype, (size_t)nc);
	}
	free(bounce);
	s->bytes_read += (uint64_t)nr * (uint64_t)nc * ssz;
	return SL_OK;
}

uint64_t sl_st_bytes_read(const sl_st_set *s) { return s ? s->bytes_read : 0; }
