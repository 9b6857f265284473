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
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rope.h"
#include "safetensors.h"
#include "gguf.h"
#include "checks.h"
#include "sl.h"

/* Loading context: where slices come from and the staging buffer. */
typedef struct loader {
	model *m;
	sl_st_set *st;     /* safetensors checkpoint, or */
	sl_gguf *gg;       /* GGUF checkpoint; neither: random weights */
	uint64_t seed;
	void *stage;       /* host staging, be->dtype */
	size_t stage_bytes;
	char *err;
	size_t errlen;
} loader;

static size_t esize(const model *m) { return sl_dtype_size(m->be->dtype); }

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
 * whole heads ([heads * hd, cols], element size es) are put back. */
static int gguf_unpermute(loader *L, void *rows, int64_t heads, int64_t hd, int64_t cols)
{
	size_t es = esize(L->m), row = (size_t)cols * es, half = (size_t)hd / 2;
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

/* stage_slice from a GGUF file: shapes in GGUF order (ne[0] = columns). */
static int stage_gguf(loader *L, const char *name, int64_t rows, int64_t cols, int64_t r0,
		      int64_t nr, int64_t c0, int64_t nc, size_t at)
{
	char gname[160];
	const sl_gguf_tensor *t;
	if (gguf_name(name, gname, sizeof gname))
		return sl_errf(L->err, L->errlen, SL_ENOTFOUND, "no GGUF name for tensor %s", name);
	int64_t ne[2] = {cols, rows};
	TRY(sl_gguf_get_tensor(L->gg, gname, rows == 1 ? 1 : 2, ne, &t, L->err, L->errlen));
	void *dst = (char *)L->stage + at * esize(L->m);
	TRY(sl_gguf_read_slice(L->gg, t, r0, nr, c0, nc, L->m->be->dtype, dst, L->err, L->errlen));
	int64_t hd = L->m->cfg.head_dim;
	if (strstr(name, "q_proj") || strstr(name, "k_proj"))
		return gguf_unpermute(L, dst, nr / hd, hd, nc); /* whole heads: r0, nr % hd == 0 */
	return SL_OK;
}

/* Read rows [r0, r0+nr) x cols [c0, c0+nc) of tensor `name` (full shape
 * rows x cols, Hugging Face naming) into the staging buffer at element
 * offset `at`. */
static int stage_slice(loader *L, const char *name, int64_t rows, int64_t cols, int64_t r0,
		       int64_t nr, int64_t c0, int64_t nc, size_t at)
{
	if (L->gg)
		return stage_gguf(L, name, rows, cols, r0, nr, c0, nc, at);
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
	if (!L->st && !L->gg) /* norms around 1, matrices small: activations stay finite */
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

/* From a checkpoint (st or gg) or, with neither, random (seed). */
static int load_weights(model *m, sl_st_set *st, sl_gguf *gg, uint64_t seed, char *err,
			size_t errlen)
{
	loader L = {.m = m, .st = st, .gg = gg, .seed = seed, .err = err, .errlen = errlen};
	L.stage_bytes = st || gg ? max_staging_elems(m) * esize(m) : 16;
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
	if (!rc)
		rc = load_rope_freqs(&L);
	free(L.stage);
	m->bytes_read = st ? sl_st_bytes_read(st) : gg ? sl_gguf_bytes_read(gg) : 0;
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

/* Scratch every backend needs per step, sized once; the backend also
 * refuses here what its kernels cannot run. */
static int reserve_backend(model *m, char *err, size_t errlen)
{
	const model_opts *o = &m->opts;
	int per_seq = (m->cfg.max_pos + o->block_tokens - 1) / o->block_tokens;
	node_backend_limits lim = {
		.step_tokens = o->step_tokens, .max_rows = o->max_rows, .max_seqs = o->max_seqs,
		.max_table_entries = o->max_seqs * per_seq, .max_hist = o->max_hist,
		.vocab = m->cfg.vocab_size,
		.n_heads = m->shard.n_heads, .n_kv_heads = m->shard.n_kv_heads,
		.head_dim = m->cfg.head_dim, .max_ctx = m->cfg.max_pos,
		.block_tokens = o->block_tokens};
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
	free(m->rope_freqs);
	model_arena *a = &m->a;
	fr(be, a->x), fr(be, a->xb), fr(be, a->qkv), fr(be, a->att), fr(be, a->proj);
	fr(be, a->gate_up), fr(be, a->hb), fr(be, a->lm_in), fr(be, a->logits), fr(be, a->inv_freq);
	fr(be, a->logits_local), fr(be, a->logits_gather);
	free(m);
}
