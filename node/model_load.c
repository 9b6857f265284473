/*
 * model_load.c — model_create/model_destroy: loads one rank's shard of a
 * Llama checkpoint into backend memory and takes the KV pools and the step
 * arena, once, up front.
 *
 * A checkpoint is a Hugging Face folder (config.json + safetensors) or a
 * GGUF file (llama.cpp's format, possibly split in parts). Weight loading
 * reads exactly this rank's rows/columns (sl_st_read_slice from the mmapped
 * safetensors, or sl_gguf_read_slice, which dequantizes whole blocks),
 * converting to the backend dtype in a host staging buffer, then uploads.
 * Tensors are named the Hugging Face way here; GGUF names are mapped, and
 * the rows llama.cpp's converter permuted in Q and K are put back (see
 * gguf_unpermute). Fused layouts: q|k|v rows in one matrix and gate|up rows
 * in another, so each is one GEMM.
 */
#include "node/model.h"
#include "node/plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/random.h"
#include "kernels/rope.h"
#include "formats/safetensors.h"
#include "formats/gguf.h"
#include "common/checks.h"
#include "common/sl.h"

/* Loading context: where slices come from and the staging buffers. */
typedef struct loader {
	model *m;
	sl_st_set *st;     /* safetensors checkpoint, or */
	sl_gguf *gg;       /* GGUF checkpoint; neither: random weights */
	uint64_t seed;
	void *stage;       /* host staging: a run-dtype matrix, or fp32 rows to quantize */
	size_t stage_bytes;
	float *rows_full;  /* fp32 whole rows of a row-parallel matrix (their max |w|) */
	size_t rows_full_bytes;
	kern_qweight rnd[5]; /* random weights: one quantized host shard per projection
			      * (and the LM head), made once and uploaded for every layer */
	uint64_t copied_bytes; /* GGUF Q8_0 / Q4_0 / Q4_1 bytes copied as they are
				* (not through the reader) */
	unsigned logged;   /* projections whose format choice was logged (bit per kind) */
	int n_quantized, n_projections;
	char *err;
	size_t errlen;
} loader;

static size_t esize(const model *m) { return sl_dtype_size(m->be->dtype); }

/* Grow a host buffer to at least `bytes`. */
static int grow(loader *L, void **buf, size_t *cap, size_t bytes)
{
	if (bytes <= *cap)
		return SL_OK;
	void *p = realloc(*buf, bytes);
	if (!p)
		return sl_errf(L->err, L->errlen, SL_ENOMEM, "out of host memory (%zu bytes)", bytes);
	*buf = p;
	*cap = bytes;
	return SL_OK;
}

/* Hugging Face tensor names and their GGUF names (llama.cpp's). */
static const struct { const char *hf, *gguf; } k_gguf_names[] = {
	{"input_layernorm.weight", "attn_norm.weight"},
	{"post_attention_layernorm.weight", "ffn_norm.weight"},
	{"self_attn.q_proj.weight", "attn_q.weight"},
	{"self_attn.k_proj.weight", "attn_k.weight"},
	{"self_attn.v_proj.weight", "attn_v.weight"},
	{"self_attn.o_proj.weight", "attn_output.weight"},
	{"mlp.gate_proj.weight", "ffn_gate.weight"},
	{"mlp.up_proj.weight", "ffn_up.weight"},
	{"mlp.down_proj.weight", "ffn_down.weight"},
	{"model.embed_tokens.weight", "token_embd.weight"},
	{"model.norm.weight", "output_norm.weight"},
	{"lm_head.weight", "output.weight"},
};

/* The GGUF name of a Hugging Face tensor name: model.layers.N.X -> blk.N.Y. */
static int gguf_name(const char *hf, char *out, size_t n)
{
	int layer = -1, used = 0;
	if (sscanf(hf, "model.layers.%d.%n", &layer, &used) == 1 && used > 0)
		hf += used;
	for (size_t i = 0; i < sizeof k_gguf_names / sizeof k_gguf_names[0]; i++) {
		if (strcmp(hf, k_gguf_names[i].hf))
			continue;
		if (layer >= 0)
			snprintf(out, n, "blk.%d.%s", layer, k_gguf_names[i].gguf);
		else
			snprintf(out, n, "%s", k_gguf_names[i].gguf);
		return SL_OK;
	}
	return SL_ENOTFOUND;
}

/* llama.cpp's converter reorders the rows of each Q and K head so that its
 * RoPE, which rotates adjacent pairs (2i, 2i+1), gives what Hugging Face's
 * rotate_half gives on pairs (i, i + hd/2): HF row a * hd/2 + i is stored as
 * row 2i + a. Our RoPE is Hugging Face's, so the staged rows of `heads`
 * whole heads (row_bytes each: values, codes or scales) are put back. */
static int gguf_unpermute(loader *L, void *rows, int64_t heads, int64_t hd, size_t row)
{
	size_t half = (size_t)hd / 2;
	char *tmp = malloc((size_t)hd * row);
	if (!tmp)
		return sl_errf(L->err, L->errlen, SL_ENOMEM, "out of host memory");
	for (int64_t h = 0; h < heads; h++) {
		char *head = (char *)rows + (size_t)h * (size_t)hd * row;
		memcpy(tmp, head, (size_t)hd * row);
		for (size_t r = 0; r < (size_t)hd; r++) {
			size_t stored = 2 * (r % half) + r / half;
			memcpy(head + r * row, tmp + stored * row, row);
		}
	}
	free(tmp);
	return SL_OK;
}

static int is_qk(const char *name) { return strstr(name, "q_proj") || strstr(name, "k_proj"); }

/* The GGUF tensor of a Hugging Face name, checked against its shape. */
static int gguf_tensor(loader *L, const char *name, int64_t rows, int64_t cols,
		       const sl_gguf_tensor **t)
{
	char gname[160];
	if (gguf_name(name, gname, sizeof gname))
		return sl_errf(L->err, L->errlen, SL_ENOTFOUND, "no GGUF name for tensor %s", name);
	int64_t ne[2] = {cols, rows};
	return sl_gguf_get_tensor(L->gg, gname, rows == 1 ? 1 : 2, ne, t, L->err, L->errlen);
}

/* stage_slice from a GGUF file: shapes in GGUF order (ne[0] = columns). */
static int stage_gguf(loader *L, const char *name, int64_t rows, int64_t cols, int64_t r0,
		      int64_t nr, int64_t c0, int64_t nc, void *dst, sl_dtype dt)
{
	const sl_gguf_tensor *t;
	TRY(gguf_tensor(L, name, rows, cols, &t));
	TRY(sl_gguf_read_slice(L->gg, t, r0, nr, c0, nc, dt, dst, L->err, L->errlen));
	int64_t hd = L->m->cfg.head_dim;
	if (is_qk(name)) /* whole heads: r0, nr % hd == 0 */
		return gguf_unpermute(L, dst, nr / hd, hd, (size_t)nc * sl_dtype_size(dt));
	return SL_OK;
}

/* Read rows [r0, r0+nr) x cols [c0, c0+nc) of tensor `name` (full shape
 * rows x cols, Hugging Face naming) into dst as dtype dt. */
static int stage_slice(loader *L, const char *name, int64_t rows, int64_t cols, int64_t r0,
		       int64_t nr, int64_t c0, int64_t nc, void *dst, sl_dtype dt)
{
	if (L->gg)
		return stage_gguf(L, name, rows, cols, r0, nr, c0, nc, dst, dt);
	if (!L->st)
		return SL_OK; /* random weights: nothing to read */
	const sl_st_tensor *t;
	int64_t shape[2] = {rows, cols};
	int nd = rows == 1 ? 1 : 2;
	TRY(sl_st_get(L->st, name, nd, nd == 1 ? &shape[1] : shape, &t, L->err, L->errlen));
	return sl_st_read_slice(L->st, t, r0, nr, c0, nc, dt, dst, L->err, L->errlen);
}

/* Read into the staging buffer at element offset `at` (run dtype). */
static int stage_at(loader *L, const char *name, int64_t rows, int64_t cols, int64_t r0,
		    int64_t nr, int64_t c0, int64_t nc, size_t at)
{
	sl_dtype dt = L->m->be->dtype;
	if (!L->st && !L->gg)
		return SL_OK; /* random weights: upload_stage fills them on the device */
	TRY(grow(L, &L->stage, &L->stage_bytes, (at + (size_t)nr * nc) * esize(L->m)));
	return stage_slice(L, name, rows, cols, r0, nr, c0, nc,
			   (char *)L->stage + at * esize(L->m), dt);
}

/* Allocate n elements of backend memory and upload the staging buffer. */
static int upload_stage(loader *L, size_t n, void **out)
{
	node_backend *be = L->m->be;
	size_t bytes = n * esize(L->m);
	int rc = be->ops->alloc(be, bytes, out);
	if (rc)
		return sl_errf(L->err, L->errlen, rc, "out of %s memory for weights (%zu bytes)",
			       be->name, bytes);
	L->m->weight_bytes += bytes;
	if (!L->st && !L->gg) /* norms around 1, matrices small: activations stay finite */
		return be->ops->fill_random(be, *out, n, n == (size_t)L->m->cfg.dim ? 1.0f : 0.0f,
					    n == (size_t)L->m->cfg.dim ? 0.1f : 0.02f, L->seed++);
	return be->ops->upload(be, *out, L->stage, bytes);
}

static int load_vector(loader *L, const char *name, int64_t n, void **out)
{
	TRY(stage_at(L, name, 1, n, 0, 1, 0, n, 0));
	return upload_stage(L, n, out);
}

/* ---- the projections: run dtype or quantized (--quant) ---- */

/* One source tensor of a (possibly fused) projection: rows [r0, r0 + nr)
 * and columns [c0, c0 + nc) of `name`, whose full shape is rows x cols. */
typedef struct mat_part {
	char name[160];
	int64_t rows, cols, r0, nr, c0, nc;
} mat_part;

enum { P_QKV = 0, P_O, P_GATE_UP, P_DOWN, P_LM_HEAD };
static const char *const k_proj_names[] = {"qkv", "o", "gate_up", "down", "lm_head"};

/* A projection shard: its parts stacked by rows (q | k | v, gate | up).
 * row_parallel: the shard is a column slice (o, down under tensor
 * parallelism), so per-row scales need the whole rows' max |w|. */
typedef struct mat_spec {
	int kind; /* P_* */
	int row_parallel;
	mat_part part[3];
	int n_part;
} mat_spec;

static int64_t spec_rows(const mat_spec *sp)
{
	int64_t r = 0;
	for (int i = 0; i < sp->n_part; i++)
		r += sp->part[i].nr;
	return r;
}

/* The GGUF tensor behind a part when it is stored as `type` and can be
 * copied as it is (blocks of 32, the slice on block boundaries); else NULL. */
static const sl_gguf_tensor *block_source(loader *L, const mat_part *p, int type)
{
	const sl_gguf_tensor *t;
	if (!L->gg || p->c0 % 32 || p->nc % 32)
		return NULL;
	if (gguf_tensor(L, p->name, p->rows, p->cols, &t)) {
		L->err[0] = 0;
		return NULL;
	}
	return t->type == type ? t : NULL;
}

static const sl_gguf_tensor *q8_0_source(loader *L, const mat_part *p)
{
	return block_source(L, p, SL_GGML_Q8_0);
}

/* A GGUF Q4_1 or Q4_0 tensor behind a part, copied into int4 groups of 32. */
static const sl_gguf_tensor *q4_source(loader *L, const mat_part *p)
{
	const sl_gguf_tensor *t = block_source(L, p, SL_GGML_Q4_1);
	return t ? t : block_source(L, p, SL_GGML_Q4_0);
}

/* The int8 / int4 groups to try, largest first, from the one asked for. */
static int group_fits(int format, int g, int64_t cols)
{
	if (format == KERN_Q_INT4)
		return g > 0 && cols % g == 0;
	/* int8: group 0 is one scale per row */
	return g > 0 ? cols % g == 0 : cols % 16 == 0;
}

static void log_choice(loader *L, const mat_spec *sp, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void log_choice(loader *L, const mat_spec *sp, const char *fmt, ...)
{
	char msg[320];
	va_list ap;
	if (L->logged & (1u << sp->kind))
		return;
	L->logged |= 1u << sp->kind;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	SL_INFO("quant", "%s: %s", k_proj_names[sp->kind], msg);
}

/*
 * The format of one projection shard: --quant where this rank's in_dim
 * (cols) allows it, else the run dtype (logged once per projection).
 * fp8: one fp32 scale per row, cols % 16. int8: GGUF Q8_0 parts keep their
 * groups of 32 (fp16 scales); else the asked group (--quant-group, default
 * MODEL_INT8_GROUP), or the next smaller one that divides cols, down to one
 * scale per row (fp32); int4: GGUF Q4_1 / Q4_0 parts keep their blocks
 * (groups of 32 with a minimum) unless --quant-group asks for 64 or 128;
 * else groups of 128, 64 (asymmetric, fp16 scales) or 32 (Q4_1's rule).
 * The choice depends on the shard's columns and the checkpoint's types
 * only, so every rank of a tensor-parallel group makes the same one.
 */
static void choose_format(loader *L, const mat_spec *sp, kern_qweight *q)
{
	const model_opts *o = &L->m->opts;
	const int64_t cols = sp->part[0].nc;
	const char *run = sl_dtype_name(L->m->be->dtype);
	*q = (kern_qweight){.format = KERN_Q_NONE, .rows = (int)spec_rows(sp), .cols = (int)cols};
	if (o->quant == KERN_Q_NONE)
		return;
	if (o->quant == KERN_Q_FP8) {
		if (cols % 16)
			log_choice(L, sp, "in_dim %lld on this rank is not a multiple of 16: stays %s "
				   "(fp8 needs 16-byte rows)", (long long)cols, run);
		else
			*q = (kern_qweight){.format = KERN_Q_FP8, .rows = q->rows, .cols = q->cols,
					    .scale_dt = SL_DT_F32};
		return;
	}
	if (o->quant == KERN_Q_INT8) {
		for (int i = 0; i < sp->n_part; i++)
			if (q8_0_source(L, &sp->part[i])) {
				*q = (kern_qweight){.format = KERN_Q_INT8, .rows = q->rows, .cols = q->cols,
						    .group = 32, .scale_dt = SL_DT_F16};
				log_choice(L, sp, "int8, groups of 32: the GGUF's Q8_0 blocks as they are");
				return;
			}
	}
	const int int4 = o->quant == KERN_Q_INT4;
	if (int4 && (o->quant_group == MODEL_QGROUP_AUTO ||
		     o->quant_group == KERN_Q_INT4_GROUP_AFFINE)) {
		for (int i = 0; i < sp->n_part; i++)
			if (q4_source(L, &sp->part[i])) {
				*q = (kern_qweight){.format = KERN_Q_INT4, .rows = q->rows,
						    .cols = q->cols, .group = KERN_Q_INT4_GROUP_AFFINE,
						    .scale_dt = SL_DT_F16};
				log_choice(L, sp, "int4, groups of 32 with a minimum: the GGUF's "
					   "Q4_1 / Q4_0 blocks as they are");
				return;
			}
	}
	const int want = o->quant_group == MODEL_QGROUP_ROW ? 0
			 : o->quant_group != MODEL_QGROUP_AUTO ? o->quant_group
			 : int4 ? KERN_Q_INT4_GROUP : MODEL_INT8_GROUP;
	static const int chain8[] = {128, 64, 32, 0}, chain4[] = {128, 64, 32};
	const int *chain = int4 ? chain4 : chain8, n = int4 ? 3 : 4;
	int i = 0;
	while (i < n && chain[i] != want)
		i++;
	for (; i < n; i++) {
		int g = chain[i];
		if (!group_fits(o->quant, g, cols))
			continue;
		*q = (kern_qweight){.format = o->quant, .rows = q->rows, .cols = q->cols, .group = g,
				    .scale_dt = g ? SL_DT_F16 : SL_DT_F32};
		char how[32] = "one scale per row";
		if (g)
			snprintf(how, sizeof how, "groups of %d", g);
		if (g != want)
			log_choice(L, sp, "in_dim %lld on this rank is not a multiple of %d: %s with %s",
				   (long long)cols, want, kern_qformat_name(o->quant), how);
		return;
	}
	log_choice(L, sp, "in_dim %lld on this rank fits no %s group (%s): stays %s",
		   (long long)cols, kern_qformat_name(o->quant), int4 ? "32, 64 or 128" : "16", run);
}

static int qweight_alloc_host(loader *L, kern_qweight *h)
{
	const size_t zb = kern_qweight_zero_bytes(h); /* int4 but groups of 32 */
	h->data = calloc(1, kern_qweight_data_bytes(h) + 1);
	h->scales = calloc(1, kern_qweight_scale_bytes(h) + 1);
	if (zb)
		h->zeros = calloc(1, zb + 1);
	if (!h->data || !h->scales || (zb && !h->zeros))
		return sl_errf(L->err, L->errlen, SL_ENOMEM, "out of host memory for a %s weight",
			       kern_qformat_name(h->format));
	return SL_OK;
}

static void qweight_free_host(kern_qweight *h)
{
	free(h->data), free(h->scales), free(h->zeros);
	h->data = h->scales = h->zeros = NULL;
}

/* A host descriptor's buffers into backend memory: *d gets h's shape and
 * the backend's copies. */
static int qweight_upload(loader *L, const kern_qweight *h, kern_qweight *d)
{
	node_backend *be = L->m->be;
	void *const src[3] = {h->data, h->scales, h->zeros};
	void **dst[3] = {&d->data, &d->scales, &d->zeros};
	const size_t bytes[3] = {kern_qweight_data_bytes(h), kern_qweight_scale_bytes(h),
				 h->zeros ? kern_qweight_zero_bytes(h) : 0};
	*d = *h;
	d->data = d->scales = d->zeros = d->meta = NULL;
	for (int i = 0; i < 3; i++) {
		if (!src[i])
			continue;
		int rc = be->ops->alloc(be, bytes[i], dst[i]);
		if (rc)
			return sl_errf(L->err, L->errlen, rc, "out of %s memory for weights (%zu bytes)",
				       be->name, bytes[i]);
		TRY(be->ops->upload(be, *dst[i], src[i], bytes[i]));
		L->m->weight_bytes += bytes[i];
	}
	size_t derived = 0;
	if (be->ops->qweight_prepare) {
		int rc = be->ops->qweight_prepare(be, h, d, &derived);
		if (rc)
			return sl_errf(L->err, L->errlen, rc,
				       "out of %s memory for a weight's scale words", be->name);
	}
	L->m->derived_bytes += derived;
	return SL_OK;
}

/* Rows per quantization chunk: about 8 MiB of fp32, whole heads (Q and K
 * rows of a GGUF are put back in head order). */
static int64_t chunk_rows(const loader *L, int64_t cols)
{
	int64_t hd = L->m->cfg.head_dim, n = ((int64_t)2 << 20) / (cols > 0 ? cols : 1) / hd * hd;
	return n > hd ? n : hd;
}

/* max |w| of rows [r0, r0 + nr) of part p over all of its columns: the
 * scale tensor parallelism 1 would give a per-row scaled slice. */
static int whole_row_amax(loader *L, const mat_part *p, int64_t r0, int64_t nr, float *amax)
{
	TRY(grow(L, (void **)&L->rows_full, &L->rows_full_bytes,
		 sizeof(float) * (size_t)nr * (size_t)p->cols));
	TRY(stage_slice(L, p->name, p->rows, p->cols, r0, nr, 0, p->cols, L->rows_full,
			SL_DT_F32));
	for (int64_t r = 0; r < nr; r++) {
		float m = 0;
		const float *v = L->rows_full + (size_t)r * p->cols;
		for (int64_t k = 0; k < p->cols; k++)
			m = fmaxf(m, fabsf(v[k]));
		amax[r] = m;
	}
	return SL_OK;
}

/* Rows [r0, r0 + nr) of part p into rows from `row` of h, copied from a
 * GGUF Q4_1 / Q4_0 tensor (int4 groups of 32); Q and K rows' codes and
 * (d, m) pairs put back in head order, as stage_gguf does values. */
static int copy_q4_rows(loader *L, const sl_gguf_tensor *t, const mat_part *p, kern_qweight *h,
			int64_t row, int64_t r0, int64_t nr)
{
	const int q4_1 = t->type == SL_GGML_Q4_1, block = q4_1 ? 20 : 18;
	size_t row_bytes = (size_t)(p->cols / 32) * block;
	const char *src = (const char *)t->data + (size_t)r0 * row_bytes + (size_t)(p->c0 / 32) * block;
	TRY(kern_qweight_load_q4_rows(h, q4_1, (int)row, (int)nr, src, row_bytes, L->err,
				      L->errlen));
	L->copied_bytes += (uint64_t)nr * (uint64_t)(p->nc / 32) * block;
	if (is_qk(p->name)) {
		int64_t hd = L->m->cfg.head_dim;
		TRY(gguf_unpermute(L, (uint8_t *)h->data + (size_t)row * (h->cols / 2), nr / hd, hd,
				   (size_t)h->cols / 2));
		TRY(gguf_unpermute(L, (uint32_t *)h->scales + (size_t)row * (h->cols / 32), nr / hd,
				   hd, (size_t)(h->cols / 32) * 4));
	}
	return SL_OK;
}

/* Rows [r0, r0 + nr) of part p into rows from `row` of h: a GGUF Q8_0 or
 * Q4_1 / Q4_0 copy, or read as fp32 and quantized. */
static int quantize_part_rows(loader *L, const mat_spec *sp, const mat_part *p, kern_qweight *h,
			      int64_t row, int64_t r0, int64_t nr)
{
	const sl_gguf_tensor *q8 = h->format == KERN_Q_INT8 && h->group == 32 &&
					   h->scale_dt == SL_DT_F16 ? q8_0_source(L, p) : NULL;
	const sl_gguf_tensor *q4 = h->format == KERN_Q_INT4 &&
					   h->group == KERN_Q_INT4_GROUP_AFFINE ? q4_source(L, p) : NULL;
	if (q4)
		return copy_q4_rows(L, q4, p, h, row, r0, nr);
	if (q8) {
		size_t row_bytes = (size_t)(p->cols / 32) * 34;
		const char *src = (const char *)q8->data + (size_t)r0 * row_bytes + (size_t)(p->c0 / 32) * 34;
		TRY(kern_qweight_load_q8_0_rows(h, (int)row, (int)nr, src, row_bytes, L->err, L->errlen));
		L->copied_bytes += (uint64_t)nr * (uint64_t)(p->nc / 32) * 34;
		if (is_qk(p->name)) { /* codes and scales rows, as stage_gguf does values */
			int64_t hd = L->m->cfg.head_dim;
			TRY(gguf_unpermute(L, (int8_t *)h->data + (size_t)row * h->cols, nr / hd, hd,
					   (size_t)h->cols));
			TRY(gguf_unpermute(L, (uint16_t *)h->scales + (size_t)row * (h->cols / 32),
					   nr / hd, hd, (size_t)(h->cols / 32) * 2));
		}
		return SL_OK;
	}
	TRY(grow(L, &L->stage, &L->stage_bytes, sizeof(float) * (size_t)nr * (size_t)p->nc));
	float *v = L->stage;
	TRY(stage_slice(L, p->name, p->rows, p->cols, r0, nr, p->c0, p->nc, v, SL_DT_F32));
	float *amax = NULL;
	int rc = SL_OK;
	if (h->group == 0 && sp->row_parallel && p->nc < p->cols) {
		if (!(amax = malloc(sizeof(float) * (size_t)nr)))
			return sl_errf(L->err, L->errlen, SL_ENOMEM, "out of host memory");
		rc = whole_row_amax(L, p, r0, nr, amax);
	}
	if (!rc && (rc = kern_quantize_rows(h, (int)row, (int)nr, v, amax, L->err, L->errlen)))
		sl_errf(L->err, L->errlen, rc, "%s rows %lld..%lld: %s", p->name, (long long)r0,
			(long long)(r0 + nr), strdupa(L->err));
	free(amax);
	return rc;
}

/* Random weights: uniform, standard deviation 0.02 as the run-dtype path,
 * quantized once per projection and shared by every layer (speed does not
 * depend on the values; quantizing each layer of a 70B on the host would). */
static int random_qweight(loader *L, const mat_spec *sp, const kern_qweight *fmt,
			  kern_qweight *out)
{
	kern_qweight *h = &L->rnd[sp->kind];
	if (!h->data) {
		*h = *fmt;
		TRY(qweight_alloc_host(L, h));
		int64_t ch = chunk_rows(L, h->cols);
		for (int64_t r = 0; r < h->rows; r += ch) {
			int64_t nr = h->rows - r < ch ? h->rows - r : ch;
			TRY(grow(L, &L->stage, &L->stage_bytes, sizeof(float) * (size_t)nr * h->cols));
			kern_fill_uniform_cpu(L->stage, (size_t)nr * h->cols, 0.0f, 0.02f,
					      L->seed + 1000 * (uint64_t)sp->kind + (uint64_t)r);
			TRY(kern_quantize_rows(h, (int)r, (int)nr, L->stage, NULL, L->err, L->errlen));
		}
	}
	return qweight_upload(L, h, out);
}

/* One matrix of this rank in format fmt (choose_format's or the LM
 * head's): read, quantized or in the run dtype, uploaded. */
static int load_matrix_as(loader *L, const mat_spec *sp, const kern_qweight *fmt,
			  kern_qweight *out)
{
	const kern_qweight q = *fmt;
	if (q.format == KERN_Q_NONE) {
		size_t at = 0;
		for (int i = 0; i < sp->n_part; i++) {
			const mat_part *p = &sp->part[i];
			TRY(stage_at(L, p->name, p->rows, p->cols, p->r0, p->nr, p->c0, p->nc, at));
			at += (size_t)p->nr * p->nc;
		}
		*out = q;
		return upload_stage(L, at, &out->data);
	}
	if (!L->st && !L->gg)
		return random_qweight(L, sp, &q, out);
	kern_qweight h = q;
	int rc = qweight_alloc_host(L, &h);
	int64_t row = 0, ch = chunk_rows(L, q.cols);
	for (int i = 0; !rc && i < sp->n_part; i++) {
		const mat_part *p = &sp->part[i];
		for (int64_t r = 0; !rc && r < p->nr; r += ch) {
			int64_t nr = p->nr - r < ch ? p->nr - r : ch;
			rc = quantize_part_rows(L, sp, p, &h, row + r, p->r0 + r, nr);
		}
		row += p->nr;
	}
	if (!rc)
		rc = qweight_upload(L, &h, out);
	qweight_free_host(&h);
	return rc;
}

/* One projection of this rank, quantized per --quant or in the run dtype;
 * its bytes counted in proj_bytes. */
static int load_matrix(loader *L, const mat_spec *sp, kern_qweight *out)
{
	kern_qweight q;
	choose_format(L, sp, &q);
	L->n_projections++;
	L->n_quantized += q.format != KERN_Q_NONE;
	uint64_t before = L->m->weight_bytes;
	TRY(load_matrix_as(L, sp, &q, out));
	L->m->proj_bytes += L->m->weight_bytes - before;
	return SL_OK;
}

static void set_part(mat_part *p, const char *prefix, const char *suffix, int64_t rows,
		     int64_t cols, int64_t r0, int64_t nr, int64_t c0, int64_t nc)
{
	*p = (mat_part){.rows = rows, .cols = cols, .r0 = r0, .nr = nr, .c0 = c0, .nc = nc};
	snprintf(p->name, sizeof p->name, "%s%s", prefix, suffix);
}

static int load_layer(loader *L, int li, layer_weights *lw)
{
	const model_config *c = &L->m->cfg;
	const par_shard *s = &L->m->shard;
	int64_t hd = c->head_dim, dim = c->dim;
	char n[160], pre[64];
	int l = s->layer0 + li;
	int tp = s->grid.tp > 1;
	snprintf(pre, sizeof pre, "model.layers.%d.", l);
#define NAME(suffix) (snprintf(n, sizeof n, "%s%s", pre, suffix), n)
	TRY(load_vector(L, NAME("input_layernorm.weight"), dim, &lw->attn_norm));
	TRY(load_vector(L, NAME("post_attention_layernorm.weight"), dim, &lw->ffn_norm));
#undef NAME
	int64_t qr = s->n_heads * hd, kr = s->n_kv_heads * hd, H = c->hidden_dim, h = s->hidden;
	mat_spec qkv = {.kind = P_QKV, .n_part = 3}, o = {.kind = P_O, .row_parallel = tp, .n_part = 1};
	mat_spec ffn = {.kind = P_GATE_UP, .n_part = 2}, down = {.kind = P_DOWN, .row_parallel = tp,
								 .n_part = 1};
	set_part(&qkv.part[0], pre, "self_attn.q_proj.weight", c->n_heads * hd, dim, s->head0 * hd, qr, 0, dim);
	set_part(&qkv.part[1], pre, "self_attn.k_proj.weight", c->n_kv_heads * hd, dim, s->kv_head0 * hd, kr, 0, dim);
	set_part(&qkv.part[2], pre, "self_attn.v_proj.weight", c->n_kv_heads * hd, dim, s->kv_head0 * hd, kr, 0, dim);
	set_part(&o.part[0], pre, "self_attn.o_proj.weight", dim, c->n_heads * hd, 0, dim, s->head0 * hd, qr);
	set_part(&ffn.part[0], pre, "mlp.gate_proj.weight", H, dim, s->hidden0, h, 0, dim);
	set_part(&ffn.part[1], pre, "mlp.up_proj.weight", H, dim, s->hidden0, h, 0, dim);
	set_part(&down.part[0], pre, "mlp.down_proj.weight", dim, H, 0, dim, s->hidden0, h);
	TRY(load_matrix(L, &qkv, &lw->wqkv));
	TRY(load_matrix(L, &o, &lw->wo));
	TRY(load_matrix(L, &ffn, &lw->w13));
	return load_matrix(L, &down, &lw->w2);
}

int model_lm_head_int8(const model_opts *o)
{
	return o->quant_lm_head == MODEL_LMQ_INT8 ||
	       (o->quant_lm_head == MODEL_LMQ_AUTO && o->quant != KERN_Q_NONE);
}

/* The LM head's format: int8 where asked (model_lm_head_int8) and its
 * in_dim allows: the GGUF's Q8_0 blocks as they are where it has them
 * (groups of 32, fp16 scales: the checkpoint's own values), else groups
 * of 128 (64, 32, or one scale per row where in_dim needs it), which read
 * as fast as one scale per row (qbench's int8/g128 against int8/row) and
 * round less. Every rank holds whole rows (the head splits by vocabulary),
 * so each rank's groups are tensor parallelism 1's. Else the run dtype. */
static void lm_head_format(loader *L, const mat_spec *sp, kern_qweight *q)
{
	const mat_part *p = &sp->part[0];
	*q = (kern_qweight){.format = KERN_Q_NONE, .rows = (int)p->nr, .cols = (int)p->nc};
	if (!model_lm_head_int8(&L->m->opts))
		return;
	if (q8_0_source(L, p)) {
		*q = (kern_qweight){.format = KERN_Q_INT8, .rows = q->rows, .cols = q->cols,
				    .group = 32, .scale_dt = SL_DT_F16};
		log_choice(L, sp, "int8, groups of 32: the GGUF's Q8_0 blocks as they are");
		return;
	}
	static const int chain[] = {128, 64, 32, 0};
	for (int i = 0; i < 4; i++) {
		int g = chain[i];
		if (!group_fits(KERN_Q_INT8, g, p->nc))
			continue;
		*q = (kern_qweight){.format = KERN_Q_INT8, .rows = q->rows, .cols = q->cols,
				    .group = g, .scale_dt = g ? SL_DT_F16 : SL_DT_F32};
		if (g)
			log_choice(L, sp, "int8, groups of %d", g);
		else
			log_choice(L, sp, "int8, one scale per row");
		return;
	}
	log_choice(L, sp, "in_dim %lld fits no int8 group (16): stays %s", (long long)p->nc,
		   sl_dtype_name(L->m->be->dtype));
}

static int load_ends(loader *L)
{
	model *m = L->m;
	const model_config *c = &m->cfg;
	const par_shard *s = &m->shard;
	int first = s->grid.pp_rank == 0, last = s->grid.pp_rank == s->grid.pp - 1;
	/* an int8 head of a tied model is a copy of the table's rows (random
	 * weights: made apart, as every random projection is), so a last stage
	 * that is not the first holds no table */
	mat_spec sp = {.kind = P_LM_HEAD, .n_part = 1};
	set_part(&sp.part[0], c->tie_embeddings ? "model.embed_tokens." : "lm_head.", "weight",
		 c->vocab_size, c->dim, s->vocab0, s->vocab, 0, c->dim);
	kern_qweight q = {0};
	if (last)
		lm_head_format(L, &sp, &q);
	const int head_is_table = last && c->tie_embeddings && q.format == KERN_Q_NONE;
	if (first || head_is_table) {
		TRY(stage_at(L, "model.embed_tokens.weight", c->vocab_size, c->dim, s->vocab0,
			     s->vocab, 0, c->dim, 0));
		TRY(upload_stage(L, (size_t)s->vocab * c->dim, &m->w.tok_emb));
	}
	if (!last)
		return SL_OK;
	TRY(load_vector(L, "model.norm.weight", c->dim, &m->w.final_norm));
	if (head_is_table) {
		m->w.lm_head = q;
		m->w.lm_head.data = m->w.tok_emb;
		return SL_OK;
	}
	return load_matrix_as(L, &sp, &q, &m->w.lm_head);
}

/* GGUF's rope_freqs.weight ([head_dim / 2] F32): llama.cpp's form of
 * Llama 3 rope scaling, a divisor per frequency; kept for alloc_arena. */
static int load_rope_freqs(loader *L)
{
	model *m = L->m;
	int64_t n = m->cfg.head_dim / 2;
	const sl_gguf_tensor *t;
	if (!L->gg || !m->cfg.rope_freqs)
		return SL_OK;
	TRY(sl_gguf_get_tensor(L->gg, "rope_freqs.weight", 1, &n, &t, L->err, L->errlen));
	if (!(m->rope_freqs = malloc(sizeof(float) * (size_t)n)))
		return sl_errf(L->err, L->errlen, SL_ENOMEM, "out of host memory");
	TRY(sl_gguf_read_slice(L->gg, t, 0, 1, 0, n, SL_DT_F32, m->rope_freqs, L->err, L->errlen));
	for (int64_t i = 0; i < n; i++)
		if (!(m->rope_freqs[i] > 0) || !isfinite(m->rope_freqs[i]))
			return sl_errf(L->err, L->errlen, SL_EINVAL, "%s: tensor rope_freqs.weight: "
				       "value %lld is %g, expected a positive number",
				       sl_gguf_file_path(L->gg, t->file_index), (long long)i,
				       m->rope_freqs[i]);
	return SL_OK;
}

/* What the projections became, once per rank. */
static void log_quant(const loader *L)
{
	const model *m = L->m;
	if (m->opts.quant == KERN_Q_NONE)
		return;
	SL_INFO("quant", "%s: %d of %d projections quantized (%.1f MiB of projections%s); "
		"embedding and norms stay %s", kern_qformat_name(m->opts.quant),
		L->n_quantized, L->n_projections, m->proj_bytes / 1048576.0,
		L->copied_bytes ? ", GGUF blocks copied as they are" : "",
		sl_dtype_name(m->be->dtype));
}

/* From a checkpoint (st or gg) or, with neither, random (seed). Long work
 * (a 70B model, or quantizing on the host) reports progress: every 2 s,
 * and at each tenth of the layers when quantizing. */
static int load_weights(model *m, sl_st_set *st, sl_gguf *gg, uint64_t seed, char *err,
			size_t errlen)
{
	loader L = {.m = m, .st = st, .gg = gg, .seed = seed, .err = err, .errlen = errlen};
	const int n = m->shard.n_layers, quant = m->opts.quant != KERN_Q_NONE;
	m->w.layers = calloc(n, sizeof(layer_weights));
	int rc = !m->w.layers ? sl_errf(err, errlen, SL_ENOMEM, "out of host memory") : 0;
	double t0 = sl_now(), last_log = t0;
	if (!rc && quant)
		SL_INFO("load", "quantizing the projections to %s as they load",
			kern_qformat_name(m->opts.quant));
	for (int i = 0; !rc && i < n; i++) {
		rc = load_layer(&L, i, &m->w.layers[i]);
		int tenth = quant && (10 * (i + 1) / n != 10 * i / n);
		if (!rc && (tenth || sl_now() - last_log > 2.0)) {
			SL_INFO("load", "layer %d/%d (%d%%), %.1f GiB", i + 1, n, 100 * (i + 1) / n,
				m->weight_bytes / 1073741824.0);
			last_log = sl_now();
		}
	}
	if (!rc)
		rc = load_ends(&L);
	if (!rc)
		rc = load_rope_freqs(&L);
	free(L.stage);
	free(L.rows_full);
	for (int k = 0; k < 5; k++)
		qweight_free_host(&L.rnd[k]);
	m->bytes_read = st ? sl_st_bytes_read(st) : gg ? sl_gguf_bytes_read(gg) + L.copied_bytes : 0;
	if (!rc) {
		log_quant(&L);
		SL_INFO("load", "%d layers, %.1f MiB of weights (+%.1f MiB derived), %.1f MiB read "
			"from checkpoint in %.2f s",
			m->shard.n_layers, m->weight_bytes / 1048576.0, m->derived_bytes / 1048576.0,
			m->bytes_read / 1048576.0, sl_now() - t0);
	}
	return rc;
}

static int alloc_buf(model *m, size_t bytes, void **out, char *err, size_t errlen)
{
	int rc = m->be->ops->alloc(m->be, bytes, out);
	if (rc)
		return sl_errf(err, errlen, rc, "out of %s memory (%zu bytes)", m->be->name, bytes);
	return SL_OK;
}

/* KV blocks that fit in mem_fraction of the device, after weights and
 * the arena are in place. */
static int size_kv_pool(model *m, char *err, size_t errlen)
{
#ifdef SL_HAVE_CUDA
	size_t per_block = 2 * (size_t)m->shard.n_layers * m->shard.n_kv_heads *
			   m->opts.block_tokens * m->cfg.head_dim * m->kv_bytes;
	size_t free_b, total_b;
	if (!strcmp(m->be->name, "cuda") && !node_backend_cuda_meminfo(m->be, &free_b, &total_b)) {
		double frac = m->opts.mem_fraction > 0 ? m->opts.mem_fraction : 0.9;
		double budget = frac * (double)total_b - (double)(total_b - free_b);
		long n = budget > 0 ? (long)(budget / per_block) : 0;
		if (n < 1)
			return sl_errf(err, errlen, SL_ENOMEM,
				       "no room for KV blocks: %.1f GiB free of %.1f GiB, --gpu-mem-fraction %.2f",
				       free_b / 1073741824.0, total_b / 1073741824.0, frac);
		/* no more than max_seqs sequences at full context can ever use */
		long useful = (long)m->opts.max_seqs *
			      ((m->cfg.max_pos + m->opts.block_tokens - 1) / m->opts.block_tokens);
		n = n < useful ? n : useful;
		m->opts.n_kv_blocks = n > (1 << 24) ? 1 << 24 : (int)n;
		SL_INFO("kv", "%.2f of %.1f GiB for KV: %d blocks (%s)", frac, total_b / 1073741824.0,
			m->opts.n_kv_blocks, m->opts.kv_fp8 ? "fp8 E4M3" : sl_dtype_name(m->be->dtype));
		return SL_OK;
	}
#endif
	return sl_errf(err, errlen, SL_EINVAL, "the %s backend needs an explicit KV block count",
		       m->be->name);
}

static int alloc_kv(model *m, char *err, size_t errlen)
{
	const par_shard *s = &m->shard;
	if (m->opts.n_kv_blocks <= 0)
		TRY(size_kv_pool(m, err, errlen));
	size_t bytes = (size_t)m->opts.n_kv_blocks * s->n_kv_heads * m->opts.block_tokens *
		       m->cfg.head_dim * m->kv_bytes;
	m->k_cache = calloc(s->n_layers, sizeof(void *));
	m->v_cache = calloc(s->n_layers, sizeof(void *));
	if (!m->k_cache || !m->v_cache)
		return sl_errf(err, errlen, SL_ENOMEM, "out of host memory");
	for (int l = 0; l < s->n_layers; l++) {
		TRY(alloc_buf(m, bytes, &m->k_cache[l], err, errlen));
		TRY(alloc_buf(m, bytes, &m->v_cache[l], err, errlen));
	}
	SL_INFO("kv", "%d blocks of %d tokens (%.1f MiB, %s)", m->opts.n_kv_blocks,
		m->opts.block_tokens, 2.0 * bytes * s->n_layers / 1048576.0,
		m->opts.kv_fp8 ? "fp8 E4M3, scale 1" : sl_dtype_name(m->be->dtype));
	return SL_OK;
}

static int alloc_arena(model *m, char *err, size_t errlen)
{
	const model_config *c = &m->cfg;
	const par_shard *s = &m->shard;
	size_t T = m->opts.step_tokens, e = esize(m), hd = c->head_dim;
	model_arena *a = &m->a;
	TRY(alloc_buf(m, T * c->dim * sizeof(float), (void **)&a->x, err, errlen));
	TRY(alloc_buf(m, T * c->dim * e, &a->xb, err, errlen));
	TRY(alloc_buf(m, T * (s->n_heads + 2 * s->n_kv_heads) * hd * e, &a->qkv, err, errlen));
	TRY(alloc_buf(m, T * s->n_heads * hd * e, &a->att, err, errlen));
	TRY(alloc_buf(m, T * c->dim * e, &a->proj, err, errlen));
	TRY(alloc_buf(m, T * 2 * s->hidden * e, &a->gate_up, err, errlen));
	TRY(alloc_buf(m, T * s->hidden * e, &a->hb, err, errlen));
	size_t R = m->opts.max_rows, per = s->vocab_padded / s->grid.tp;
	TRY(alloc_buf(m, R * c->dim * e, &a->lm_in, err, errlen));
	TRY(alloc_buf(m, R * c->vocab_size * sizeof(float), (void **)&a->logits, err, errlen));
	if (s->grid.tp > 1) {
		TRY(alloc_buf(m, R * per * sizeof(float), (void **)&a->logits_local, err, errlen));
		TRY(alloc_buf(m, R * per * s->grid.tp * sizeof(float), (void **)&a->logits_gather, err,
			      errlen));
	}
	TRY(alloc_buf(m, hd / 2 * sizeof(float), (void **)&a->inv_freq, err, errlen));
	float inv[hd / 2 > 0 ? hd / 2 : 1];
	kern_rope_params rp = {c->rope_theta, c->rope == ROPE_LLAMA3, c->rope_factor,
			       c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_orig_max_pos};
	kern_rope_inv_freq(inv, (int)hd, &rp);
	for (size_t i = 0; i < hd / 2; i++) {
		if (c->rope == ROPE_LINEAR)
			inv[i] /= c->rope_factor;
		if (m->rope_freqs)
			inv[i] /= m->rope_freqs[i];
	}
	return m->be->ops->upload(m->be, a->inv_freq, inv, sizeof(float) * (hd / 2));
}

/* Config from the checkpoint (a GGUF file, else a Hugging Face folder),
 * this rank's shard of it, and the weights opened for reading. */
static int open_checkpoint(model *m, const char *path, sl_st_set **st, sl_gguf **gg, char *err,
			   size_t errlen)
{
	if (model_path_is_file(path)) {
		TRY(sl_gguf_open(path, gg, err, errlen));
		TRY(model_config_from_gguf(*gg, &m->cfg, err, errlen));
	} else {
		TRY(model_config_load_dir(path, &m->cfg, err, errlen));
	}
	const model_config *c = &m->cfg;
	const model_opts *o = &m->opts;
	TRY(par_shard_init(&o->grid, c->n_layers, c->n_heads,
			   c->n_kv_heads, c->hidden_dim, c->vocab_size, &m->shard, err, errlen));
	return *gg ? SL_OK : sl_st_open_dir(path, st, err, errlen);
}

/* The most columns of any quantized projection or LM head (0: none is). */
static int quant_max_cols(const model *m)
{
	int most = 0;
	for (int l = 0; l < m->shard.n_layers; l++) {
		const layer_weights *w = &m->w.layers[l];
		const kern_qweight *q[4] = {&w->wqkv, &w->wo, &w->w13, &w->w2};
		for (int i = 0; i < 4; i++)
			if (q[i]->format != KERN_Q_NONE && q[i]->cols > most)
				most = q[i]->cols;
	}
	const kern_qweight *lm = &m->w.lm_head;
	return lm->format != KERN_Q_NONE && lm->cols > most ? lm->cols : most;
}

/* Layer 0's quantized projections and the LM head (every layer's are
 * layer 0's shapes and formats), for the backend to tune at reserve. */
static void quant_weights(const model *m, node_backend_limits *lim)
{
	lim->n_quant_weights = 0;
	if (m->shard.n_layers < 1 || !m->w.layers)
		return;
	const layer_weights *w = &m->w.layers[0];
	const kern_qweight *q[NODE_QUANT_WEIGHTS] = {&w->wqkv, &w->wo, &w->w13, &w->w2,
						     &m->w.lm_head};
	for (int i = 0; i < NODE_QUANT_WEIGHTS; i++)
		if (q[i]->format != KERN_Q_NONE && q[i]->rows > 0)
			lim->quant_weights[lim->n_quant_weights++] = q[i];
}

/* Scratch every backend needs per step, sized once; the backend also
 * refuses here what its kernels cannot run. */
static int reserve_backend(model *m, char *err, size_t errlen)
{
	const model_opts *o = &m->opts;
	int per_seq = (m->cfg.max_pos + o->block_tokens - 1) / o->block_tokens;
	node_backend_limits lim = {
		.step_tokens = o->step_tokens, .max_rows = o->max_rows, .max_seqs = o->max_seqs,
		.max_table_entries = o->max_seqs * per_seq, .max_hist = o->max_hist,
		.max_bias = o->max_seqs * NODE_PLAN_BIAS_PER_ROW, .vocab = m->cfg.vocab_size,
		.n_heads = m->shard.n_heads, .n_kv_heads = m->shard.n_kv_heads,
		.head_dim = m->cfg.head_dim, .max_ctx = m->cfg.max_pos,
		.block_tokens = o->block_tokens, .quant_max_cols = quant_max_cols(m),
		.quant_fp8 = o->quant == KERN_Q_FP8, .kv_fp8 = o->kv_fp8, .dim = m->cfg.dim};
	quant_weights(m, &lim);
	return m->be->ops->reserve(m->be, &lim, err, errlen);
}

static model *model_new(node_backend *be, const model_opts *opts)
{
	model *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->be = be;
	m->opts = *opts;
	model_opts *o = &m->opts;
	if (o->grid.tp == 0) /* not placed: the whole group is this rank */
		o->grid = (par_grid){.tp = 1, .pp = 1};
	if (o->max_rows <= 0 || o->max_rows > o->step_tokens)
		o->max_rows = o->step_tokens;
	if (o->max_seqs <= 0)
		o->max_seqs = 256;
	if (o->max_seqs > o->step_tokens)
		o->max_seqs = o->step_tokens;
	/* fp8 KV: one byte per value on a GPU (twice the blocks of fp16 in the
	 * same memory); the fp32 CPU reference keeps fp32 values rounded
	 * through E4M3 */
	m->kv_bytes = o->kv_fp8 && be->dtype != SL_DT_F32 ? 1 : sl_dtype_size(be->dtype);
	return m;
}

/* Penalty history entries per step (the tokens sampled rows have seen,
 * node/plan.h): at least what one sequence can need (one entry per
 * distinct token: min(context, vocab)); by default room for every
 * sequence of a step, up to 2^18 entries (3 MiB of int32 per buffer). */
static void set_hist_limit(model *m)
{
	model_opts *o = &m->opts;
	int one = m->cfg.max_pos < m->cfg.vocab_size ? m->cfg.max_pos : m->cfg.vocab_size;
	if (o->max_hist <= 0) {
		long all = (long)o->max_seqs * one;
		o->max_hist = all < (1 << 18) ? (int)all : 1 << 18;
	}
	if (o->max_hist < one)
		o->max_hist = one;
}

/* Weights are in; now the arena, the backend's step scratch, the KV pool
 * (last, so automatic sizing sees everything else already allocated). */
static int finish_create(model *m, int rc, model **out, char *err, size_t errlen)
{
	if (!rc)
		set_hist_limit(m);
	if (!rc)
		rc = alloc_arena(m, err, errlen);
	if (!rc)
		rc = reserve_backend(m, err, errlen);
	if (!rc)
		rc = alloc_kv(m, err, errlen);
	if (rc) {
		model_destroy(m);
		return rc;
	}
	*out = m;
	return SL_OK;
}

static int check_opts(const model_opts *opts, char *err, size_t errlen)
{
	if (opts->step_tokens <= 0 || opts->n_kv_blocks < 0 || opts->block_tokens <= 0)
		return sl_errf(err, errlen, SL_EINVAL, "step_tokens and block size must be > 0");
	return model_check_quant(opts->quant, opts->quant_group, err, errlen);
}

int model_parse_quant(const char *s, int *quant, char *err, size_t errlen)
{
	int q = kern_qformat_parse(s);
	if (q < 0)
		return sl_errf(err, errlen, SL_EINVAL, "--quant: '%s' is not none, int8, fp8 or int4", s);
	*quant = q;
	return SL_OK;
}

int model_parse_quant_group(const char *s, int *group, char *err, size_t errlen)
{
	if (!strcmp(s, "auto"))
		*group = MODEL_QGROUP_AUTO;
	else if (!strcmp(s, "row"))
		*group = MODEL_QGROUP_ROW;
	else if (!strcmp(s, "32") || !strcmp(s, "64") || !strcmp(s, "128"))
		*group = atoi(s);
	else
		return sl_errf(err, errlen, SL_EINVAL, "--quant-group: '%s' is not auto, row, 32, "
			       "64 or 128", s);
	return SL_OK;
}

int model_parse_kv_dtype(const char *s, int *kv_fp8, char *err, size_t errlen)
{
	if (strcmp(s, "auto") && strcmp(s, "fp8"))
		return sl_errf(err, errlen, SL_EINVAL, "--kv-dtype: '%s' is not auto (the run "
			       "dtype) or fp8", s);
	*kv_fp8 = !strcmp(s, "fp8");
	return SL_OK;
}

int model_parse_quant_lm_head(const char *s, int *lmq, char *err, size_t errlen)
{
	if (!strcmp(s, "auto"))
		*lmq = MODEL_LMQ_AUTO;
	else if (!strcmp(s, "none"))
		*lmq = MODEL_LMQ_NONE;
	else if (!strcmp(s, "int8"))
		*lmq = MODEL_LMQ_INT8;
	else
		return sl_errf(err, errlen, SL_EINVAL, "--quant-lm-head: '%s' is not auto (int8 "
			       "with any --quant but none), none (the run dtype) or int8", s);
	return SL_OK;
}

int model_check_quant(int quant, int group, char *err, size_t errlen)
{
	if (quant != KERN_Q_NONE && quant != KERN_Q_INT8 && quant != KERN_Q_FP8 &&
	    quant != KERN_Q_INT4)
		return sl_errf(err, errlen, SL_EINVAL, "--quant: format %d is not none, int8, fp8 "
			       "or int4", quant);
	if (group == MODEL_QGROUP_AUTO)
		return SL_OK;
	if (quant == KERN_Q_INT8 && group != MODEL_QGROUP_ROW && group != 32 && group != 64 &&
	    group != 128)
		return sl_errf(err, errlen, SL_EINVAL, "--quant-group %d: int8 takes row (one "
			       "scale per output row), 32, 64 or 128", group);
	if (quant == KERN_Q_INT4 && group != 32 && group != 64 && group != 128) {
		char g[16] = "row";
		if (group != MODEL_QGROUP_ROW)
			snprintf(g, sizeof g, "%d", group);
		return sl_errf(err, errlen, SL_EINVAL, "--quant-group %s: int4 takes 32, 64 or 128", g);
	}
	if (quant != KERN_Q_INT8 && quant != KERN_Q_INT4)
		return sl_errf(err, errlen, SL_EINVAL, "--quant-group: only int8 and int4 have "
			       "groups (--quant %s)", kern_qformat_name(quant));
	return SL_OK;
}

int model_create(const char *path, node_backend *be, const model_opts *opts, model **out,
		 char *err, size_t errlen)
{
	if (check_opts(opts, err, errlen))
		return SL_EINVAL;
	model *m = model_new(be, opts);
	if (!m)
		return sl_errf(err, errlen, SL_ENOMEM, "out of host memory");
	sl_st_set *st = NULL;
	sl_gguf *gg = NULL;
	int rc = open_checkpoint(m, path, &st, &gg, err, errlen);
	if (!rc)
		rc = load_weights(m, st, gg, 0, err, errlen);
	sl_st_close(st);
	sl_gguf_close(gg);
	return finish_create(m, rc, out, err, errlen);
}

int model_create_random(const model_config *cfg, node_backend *be, const model_opts *opts,
			uint64_t seed, model **out, char *err, size_t errlen)
{
	if (check_opts(opts, err, errlen))
		return SL_EINVAL;
	model *m = model_new(be, opts);
	if (!m)
		return sl_errf(err, errlen, SL_ENOMEM, "out of host memory");
	m->cfg = *cfg;
	const model_opts *o = &m->opts;
	int rc = par_shard_init(&o->grid, cfg->n_layers, cfg->n_heads,
				cfg->n_kv_heads, cfg->hidden_dim, cfg->vocab_size, &m->shard, err,
				errlen);
	if (!rc)
		rc = load_weights(m, NULL, NULL, seed, err, errlen);
	return finish_create(m, rc, out, err, errlen);
}

void model_destroy(model *m)
{
	if (!m)
		return;
	node_backend *be = m->be;
	void (*fr)(node_backend *, void *) = be->ops->free;
	for (int l = 0; m->w.layers && l < m->shard.n_layers; l++) {
		layer_weights *lw = &m->w.layers[l];
		fr(be, lw->attn_norm), fr(be, lw->ffn_norm);
		kern_qweight *q[4] = {&lw->wqkv, &lw->wo, &lw->w13, &lw->w2};
		for (int i = 0; i < 4; i++)
			fr(be, q[i]->data), fr(be, q[i]->scales), fr(be, q[i]->zeros),
				fr(be, q[i]->meta);
	}
	free(m->w.layers);
	if (m->w.lm_head.data != m->w.tok_emb)
		fr(be, m->w.lm_head.data);
	fr(be, m->w.lm_head.scales), fr(be, m->w.lm_head.zeros), fr(be, m->w.lm_head.meta);
	fr(be, m->w.tok_emb);
	fr(be, m->w.final_norm);
	for (int l = 0; l < m->shard.n_layers; l++) {
		if (m->k_cache) fr(be, m->k_cache[l]);
		if (m->v_cache) fr(be, m->v_cache[l]);
	}
	free(m->k_cache);
	free(m->v_cache);
	free(m->rope_freqs);
	model_arena *a = &m->a;
	fr(be, a->x), fr(be, a->xb), fr(be, a->qkv), fr(be, a->att), fr(be, a->proj);
	fr(be, a->gate_up), fr(be, a->hb), fr(be, a->lm_in), fr(be, a->logits), fr(be, a->inv_freq);
	fr(be, a->logits_local), fr(be, a->logits_gather);
	free(m);
}
