/*
 * model_load.c — model_create/model_destroy: loads one rank's shard of a
 * Llama checkpoint into backend memory and takes the KV pools and the step
 * arena, once, up front.
 *
 * Weight loading reads exactly this rank's rows/columns from the mmapped
 * safetensors (sl_st_read_slice), converting to the backend dtype in a host
 * staging buffer, then uploads. Fused layouts: q|k|v rows in one matrix and
 * gate|up rows in another, so each is one GEMM.
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rope.h"
#include "safetensors.h"
#include "checks.h"
#include "sl.h"

/* Loading context: where slices come from and the staging buffer. */
typedef struct loader {
	model *m;
	sl_st_set *st;     /* NULL: random weights */
	uint64_t seed;
	void *stage;       /* host staging, be->dtype */
	size_t stage_bytes;
	char *err;
	size_t errlen;
} loader;

static size_t esize(const model *m) { return sl_dtype_size(m->be->dtype); }

/* Read rows [r0, r0+nr) x cols [c0, c0+nc) of tensor `name` (full shape
 * rows x cols) into the staging buffer at element offset `at`. */
static int stage_slice(loader *L, const char *name, int64_t rows, int64_t cols, int64_t r0,
		       int64_t nr, int64_t c0, int64_t nc, size_t at)
{
	if (!L->st)
		return SL_OK; /* random weights: nothing to read */
	const sl_st_tensor *t;
	int64_t shape[2] = {rows, cols};
	int nd = rows == 1 ? 1 : 2;
	TRY(sl_st_get(L->st, name, nd, nd == 1 ? &shape[1] : shape, &t, L->err, L->errlen));
	return sl_st_read_slice(L->st, t, r0, nr, c0, nc, L->m->be->dtype,
				(char *)L->stage + at * esize(L->m), L->err, L->errlen);
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
	if (!L->st) /* norms around 1, matrices small: activations stay finite */
		return be->ops->fill_random(be, *out, n, n == (size_t)L->m->cfg.dim ? 1.0f : 0.0f,
					    n == (size_t)L->m->cfg.dim ? 0.1f : 0.02f, L->seed++);
	return be->ops->upload(be, *out, L->stage, bytes);
}

static int load_vector(loader *L, const char *name, int64_t n, void **out)
{
	TRY(stage_slice(L, name, 1, n, 0, 1, 0, n, 0));
	return upload_stage(L, n, out);
}

static int load_layer(loader *L, int li, layer_weights *lw)
{
	const model_config *c = &L->m->cfg;
	const par_shard *s = &L->m->shard;
	int64_t hd = c->head_dim, dim = c->dim;
	char n[160];
	int l = s->layer0 + li;
#define NAME(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), n)
	TRY(load_vector(L, NAME("input_layernorm.weight"), dim, &lw->attn_norm));
	TRY(load_vector(L, NAME("post_attention_layernorm.weight"), dim, &lw->ffn_norm));
	int64_t qr = s->n_heads * hd, kr = s->n_kv_heads * hd;
	TRY(stage_slice(L, NAME("self_attn.q_proj.weight"), c->n_heads * hd, dim, s->head0 * hd, qr, 0, dim, 0));
	TRY(stage_slice(L, NAME("self_attn.k_proj.weight"), c->n_kv_heads * hd, dim, s->kv_head0 * hd, kr, 0, dim, qr * dim));
	TRY(stage_slice(L, NAME("self_attn.v_proj.weight"), c->n_kv_heads * hd, dim, s->kv_head0 * hd, kr, 0, dim, (qr + kr) * dim));
	TRY(upload_stage(L, (qr + 2 * kr) * dim, &lw->wqkv));
	TRY(stage_slice(L, NAME("self_attn.o_proj.weight"), dim, c->n_heads * hd, 0, dim, s->head0 * hd, qr, 0));
	TRY(upload_stage(L, dim * qr, &lw->wo));
	int64_t H = c->hidden_dim, h = s->hidden;
	TRY(stage_slice(L, NAME("mlp.gate_proj.weight"), H, dim, s->hidden0, h, 0, dim, 0));
	TRY(stage_slice(L, NAME("mlp.up_proj.weight"), H, dim, s->hidden0, h, 0, dim, h * dim));
	TRY(upload_stage(L, 2 * h * dim, &lw->w13));
	TRY(stage_slice(L, NAME("mlp.down_proj.weight"), dim, H, 0, dim, s->hidden0, h, 0));
	return upload_stage(L, dim * h, &lw->w2);
#undef NAME
}

static int load_ends(loader *L)
{
	model *m = L->m;
	const model_config *c = &m->cfg;
	const par_shard *s = &m->shard;
	int first = s->grid.pp_rank == 0, last = s->grid.pp_rank == s->grid.pp - 1;
	if (first || (last && c->tie_embeddings)) {
		TRY(stage_slice(L, "model.embed_tokens.weight", c->vocab_size, c->dim, s->vocab0,
				s->vocab, 0, c->dim, 0));
		TRY(upload_stage(L, (size_t)s->vocab * c->dim, &m->w.tok_emb));
	}
	if (!last)
		return SL_OK;
	TRY(load_vector(L, "model.norm.weight", c->dim, &m->w.final_norm));
	if (c->tie_embeddings) {
		m->w.lm_head = m->w.tok_emb;
		return SL_OK;
	}
	TRY(stage_slice(L, "lm_head.weight", c->vocab_size, c->dim, s->vocab0, s->vocab, 0, c->dim, 0));
	return upload_stage(L, (size_t)s->vocab * c->dim, &m->w.lm_head);
}

static size_t max_staging_elems(const model *m)
{
	const model_config *c = &m->cfg;
	const par_shard *s = &m->shard;
	size_t dim = c->dim, hd = c->head_dim;
	size_t qkv = (s->n_heads + 2 * s->n_kv_heads) * hd * dim;
	size_t ffn = 2 * (size_t)s->hidden * dim;
	size_t emb = (size_t)s->vocab * dim;
	size_t mx = qkv > ffn ? qkv : ffn;
	return mx > emb ? mx : emb;
}

static int load_weights(model *m, sl_st_set *st, uint64_t seed, char *err, size_t errlen)
{
	loader L = {.m = m, .st = st, .seed = seed, .err = err, .errlen = errlen};
	L.stage_bytes = st ? max_staging_elems(m) * esize(m) : 16;
	L.stage = malloc(L.stage_bytes);
	m->w.layers = calloc(m->shard.n_layers, sizeof(layer_weights));
	int rc = (!L.stage || !m->w.layers) ? sl_errf(err, errlen, SL_ENOMEM, "out of host memory") : 0;
	double t0 = sl_now(), last_log = t0;
	for (int i = 0; !rc && i < m->shard.n_layers; i++) {
		rc = load_layer(&L, i, &m->w.layers[i]);
		if (!rc && sl_now() - last_log > 2.0) {
			SL_INFO("load", "layer %d/%d, %.1f GiB", i + 1, m->shard.n_layers,
				m->weight_bytes / 1073741824.0);
			last_log = sl_now();
		}
	}
	if (!rc)
		rc = load_ends(&L);
	free(L.stage);
	m->bytes_read = st ? sl_st_bytes_read(st) : 0;
	if (!rc)
		SL_INFO("load", "%d layers, %.1f MiB of weights, %.1f MiB read from checkpoint in %.2f s",
			m->shard.n_layers, m->weight_bytes / 1048576.0, m->bytes_read / 1048576.0,
			sl_now() - t0);
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
			   m->opts.block_tokens * m->cfg.head_dim * esize(m);
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
		SL_INFO("kv", "%.2f of %.1f GiB for KV: %d blocks", frac, total_b / 1073741824.0,
			m->opts.n_kv_blocks);
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
		       m->cfg.head_dim * esize(m);
	m->k_cache = calloc(s->n_layers, sizeof(void *));
	m->v_cache = calloc(s->n_layers, sizeof(void *));
	if (!m->k_cache || !m->v_cache)
		return sl_errf(err, errlen, SL_ENOMEM, "out of host memory");
	for (int l = 0; l < s->n_layers; l++) {
		TRY(alloc_buf(m, bytes, &m->k_cache[l], err, errlen));
		TRY(alloc_buf(m, bytes, &m->v_cache[l], err, errlen));
	}
	SL_INFO("kv", "%d blocks of %d tokens (%.1f MiB)", m->opts.n_kv_blocks,
		m->opts.block_tokens, 2.0 * bytes * s->n_layers / 1048576.0);
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
	return m->be->ops->upload(m->be, a->inv_freq, inv, sizeof(float) * (hd / 2));
}

static int open_checkpoint(model *m, const char *dir, sl_st_set **st, char *err, size_t errlen)
{
	char path[4096];
	if (sl_path_join(path, sizeof path, dir, "config.json"))
		return sl_errf(err, errlen, SL_EINVAL, "model path too long: %s", dir);
	TRY(model_config_load(path, &m->cfg, err, errlen));
	const model_config *c = &m->cfg;
	const model_opts *o = &m->opts;
	TRY(par_shard_init(&o->grid, c->n_layers, c->n_heads,
			   c->n_kv_heads, c->hidden_dim, c->vocab_size, &m->shard, err, errlen));
	return sl_st_open_dir(dir, st, err, errlen);
}

/* Scratch every backend needs per step, sized once. */
static int reserve_backend(model *m)
{
	const model_opts *o = &m->opts;
	int per_seq = (m->cfg.max_pos + o->block_tokens - 1) / o->block_tokens;
	node_backend_limits lim = {
		.step_tokens = o->step_tokens, .max_rows = o->max_rows, .max_seqs = o->max_seqs,
		.max_table_entries = o->max_seqs * per_seq, .max_hist = o->max_hist,
		.vocab = m->cfg.vocab_size,
		.n_heads = m->shard.n_heads, .head_dim = m->cfg.head_dim, .max_ctx = m->cfg.max_pos};
	return m->be->ops->reserve(m->be, &lim);
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
	if (!rc && (rc = reserve_backend(m)))
		sl_errf(err, errlen, rc, "cannot reserve %s step scratch", m->be->name);
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
	return SL_OK;
}

int model_create(const char *dir, node_backend *be, const model_opts *opts, model **out,
		 char *err, size_t errlen)
{
	if (check_opts(opts, err, errlen))
		return SL_EINVAL;
	model *m = model_new(be, opts);
	if (!m)
		return sl_errf(err, errlen, SL_ENOMEM, "out of host memory");
	sl_st_set *st = NULL;
	int rc = open_checkpoint(m, dir, &st, err, errlen);
	if (!rc)
		rc = load_weights(m, st, 0, err, errlen);
	sl_st_close(st);
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
		rc = load_weights(m, NULL, seed, err, errlen);
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
		fr(be, lw->attn_norm), fr(be, lw->wqkv), fr(be, lw->wo);
		fr(be, lw->ffn_norm), fr(be, lw->w13), fr(be, lw->w2);
	}
	free(m->w.layers);
	if (m->w.lm_head != m->w.tok_emb)
		fr(be, m->w.lm_head);
	fr(be, m->w.tok_emb);
	fr(be, m->w.final_norm);
	for (int l = 0; l < m->shard.n_layers; l++) {
		if (m->k_cache) fr(be, m->k_cache[l]);
		if (m->v_cache) fr(be, m->v_cache[l]);
	}
	free(m->k_cache);
	free(m->v_cache);
	model_arena *a = &m->a;
	fr(be, a->x), fr(be, a->xb), fr(be, a->qkv), fr(be, a->att), fr(be, a->proj);
	fr(be, a->gate_up), fr(be, a->hb), fr(be, a->lm_in), fr(be, a->logits), fr(be, a->inv_freq);
	fr(be, a->logits_local), fr(be, a->logits_gather);
	free(m);
}
