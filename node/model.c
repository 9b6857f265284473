/*
 * model.c — the forward pass of one rank over one step's flat token batch,
 * in three pieces so a pipeline stage runs only its part: model_embed
 * (first stage), model_layers (every stage: its layer range), model_lm_head
 * (last stage). Read together they are the model, top to bottom: embed,
 * per layer (qkv, rope + KV write, attention, output projection,
 * all-reduce, residual + norm, gate/up, silu*up, down projection,
 * all-reduce, residual + norm), final norm, LM head. A backend may fuse
 * gate/up with silu*up, and at tp 1 a projection with the residual add
 * that follows it (node/backend.h's optional fused ops); at tp > 1 the
 * communicator may fuse the all-reduce with that add
 * (par_tp_allreduce_add_prenorm), or the projection itself may do both
 * (the backend's matmul_allreduce_add). Each leaves the norm for the next
 * projection to finish (node_prenorm). Where the next projection cannot
 * (more tokens), the communicator may fuse the all-reduce with the add
 * and the whole norm (par_tp_allreduce_add_norm). The projections may be
 * quantized (--quant): the backend's matmul takes their descriptors as
 * they are. Loading lives in model_load.c, the stage-to-stage
 * orchestration in step.c.
 */
#include <math.h>

#include "parallel/comm.h"
#include "node/model.h"
#include "common/checks.h"
#include "common/sl.h"
#include "node/watchdog.h"

/* Sum partial results across the tensor-parallel group. */
static int tp_all_reduce(model *m, void *buf, size_t n, sl_dtype dt)
{
	if (!m->comm || m->opts.skip_tp_comm)
		return SL_OK;
	return par_tp_allreduce(m->comm, buf, n, dt);
}

/* x += the group's sum of part and xb = x * norm_w, the norm left in
 * pend for the projection that reads xb next, in one kernel of the
 * communicator (parallel/comm.h), where the communicator has one for this
 * call and the backend would defer the norm at tp 1 (prenorm_sumsq);
 * SL_ENOTSUP otherwise, nothing done (every rank of the group answers
 * alike). */
static int tp_all_reduce_add_defer(model *m, const void *part, const kern_qweight *w,
				   const void *norm_w, int n, node_prenorm *pend)
{
	node_backend *be = m->be;
	float *ss;
	size_t cap;
	int parts;
	if (!pend || !norm_w || !m->comm || m->opts.skip_tp_comm || !be->ops->prenorm_sumsq ||
	    be->ops->prenorm_sumsq(be, w, n, &ss, &cap))
		return SL_ENOTSUP;
	int rc = par_tp_allreduce_add_prenorm(m->comm, part, m->a.x, norm_w, m->a.xb, ss, cap, n,
					      m->cfg.dim, be->dtype, &parts);
	if (rc == SL_OK)
		*pend = (node_prenorm){m->a.x, norm_w, m->cfg.norm_eps, ss, parts};
	return rc;
}

/* x += the group's sum of part and xb = RMSNorm(x) * norm_w in one kernel
 * of the communicator (parallel/comm.h), where it has one for this call;
 * SL_ENOTSUP otherwise, nothing done (every rank of the group answers
 * alike). Not with fp8 projections: their W8A8 path reads the next
 * projection's activations from the backend's norm, which makes and marks
 * them (node/backend_cuda.c, act_slot); this kernel makes none and clears
 * no mark. int8 and int4 read xb itself, as every unquantized projection
 * does. */
static int tp_all_reduce_add_norm(model *m, const void *part, const kern_qweight *w,
				  const void *norm_w, int n)
{
	if (!norm_w || !m->comm || m->opts.skip_tp_comm || w->format == KERN_Q_FP8 ||
	    m->opts.quant == KERN_Q_FP8)
		return SL_ENOTSUP;
	return par_tp_allreduce_add_norm(m->comm, part, m->a.x, norm_w, m->a.xb, n, m->cfg.dim,
					 m->cfg.norm_eps, m->be->dtype);
}

/* x += the group's sum of in @ W^T and xb = x * norm_w, the norm left in
 * pend, all in the projection's own kernel (the backend's
 * matmul_allreduce_add through the communicator's exchange), where both
 * have one for this call; SL_ENOTSUP otherwise, nothing done (every rank
 * of the group answers alike). */
static int tp_matmul_all_reduce_add(model *m, const void *in, const kern_qweight *w,
				    const void *norm_w, int n, node_prenorm *pend)
{
	node_backend *be = m->be;
	kern_xchg xg;
	int done = 0;
	if (!pend || !norm_w || !m->comm || m->opts.skip_tp_comm ||
	    !be->ops->matmul_allreduce_add || par_tp_gemv_xchg(m->comm, &xg))
		return SL_ENOTSUP;
	TRY(be->ops->matmul_allreduce_add(be, &xg, m->a.x, m->a.xb, in, w, norm_w, n,
					  m->cfg.norm_eps, pend, &done));
	return done ? SL_OK : SL_ENOTSUP;
}

/* The norm that follows layer l's FFN: the next layer's input norm, the
 * final norm after the model's last layer, or none (plain residual add)
 * at the end of a pipeline stage that hands x to the next stage. */
static const void *norm_after(const model *m, int l)
{
	if (l + 1 < m->shard.n_layers)
		return m->w.layers[l + 1].attn_norm;
	return m->shard.grid.pp_rank == m->shard.grid.pp - 1 ? m->w.final_norm : NULL;
}

/* x += in @ W^T summed over the tensor-parallel group, then xb =
 * RMSNorm(x) * norm_w (norm_w NULL: the add only). Given pend, the norm
 * may be left to the projection that reads xb next (node_prenorm; pend->x
 * NULL if not): at tp 1 by the backend, which folds the add into the
 * projection (kernels/epilogue.h), at tp > 1 by the all-reduce. */
static int proj_add_norm(model *m, const void *in, const kern_qweight *w, const void *norm_w,
			 int n, node_prenorm *pend)
{
	node_backend *be = m->be;
	const node_backend_ops *op = be->ops;
	model_arena *a = &m->a;
	int dim = m->cfg.dim;
	float eps = m->cfg.norm_eps;
	if (op->matmul_add_rmsnorm && m->shard.grid.tp == 1)
		return op->matmul_add_rmsnorm(be, a->x, a->xb, a->proj, in, w, norm_w, n, eps, pend);
	if (pend)
		pend->x = NULL;
	int rc = tp_matmul_all_reduce_add(m, in, w, norm_w, n, pend);
	if (rc != SL_ENOTSUP)
		return rc;
	TRY(op->matmul(be, a->proj, in, w, n));
	rc = tp_all_reduce_add_defer(m, a->proj, w, norm_w, n, pend);
	if (rc != SL_ENOTSUP)
		return rc;
	rc = tp_all_reduce_add_norm(m, a->proj, w, norm_w, n);
	if (rc != SL_ENOTSUP)
		return rc;
	TRY(tp_all_reduce(m, a->proj, (size_t)n * dim, be->dtype));
	return op->add_rmsnorm(be, a->x, a->proj, norm_w, a->xb, n, dim, eps);
}

/* xb = the norm pend holds, if any: for an op that cannot take it. */
static int settle(model *m, node_prenorm *pend, int n)
{
	if (!pend->x)
		return SL_OK;
	const float *x = pend->x;
	pend->x = NULL;
	return m->be->ops->rmsnorm(m->be, m->a.xb, x, pend->w, n, m->cfg.dim, pend->eps);
}

/* qkv = the QKV projection of xb (its norm pending in pend), q and k
 * turned by RoPE, k and v written into layer l's cache. */
static int qkv_rope(model *m, const kern_qweight *wqkv, int l, node_prenorm *pend)
{
	const par_shard *s = &m->shard;
	node_backend *be = m->be;
	const node_backend_ops *op = be->ops;
	model_arena *a = &m->a;
	const kern_paged_batch *b = &m->batch;
	int n = b->n_tokens, hd = m->cfg.head_dim;
	if (op->matmul_rope) {
		const node_prenorm pre = *pend;
		pend->x = NULL;
		return op->matmul_rope(be, a->qkv, a->xb, &pre, wqkv, n, m->k_cache[l],
				       m->v_cache[l], b, s->n_heads, s->n_kv_heads, hd, a->inv_freq);
	}
	TRY(settle(m, pend, n));
	TRY(op->matmul(be, a->qkv, a->xb, wqkv, n));
	return op->rope_kv_write(be, a->qkv, m->k_cache[l], m->v_cache[l], b, s->n_heads,
				 s->n_kv_heads, hd, a->inv_freq);
}

/* hb = silu(gate) * up from the fused gate/up projection of xb (its norm
 * pending in pend). */
static int ffn_in(model *m, const kern_qweight *w13, int n, node_prenorm *pend)
{
	node_backend *be = m->be;
	const node_backend_ops *op = be->ops;
	model_arena *a = &m->a;
	int hidden = m->shard.hidden;
	if (op->matmul_swiglu) {
		const node_prenorm pre = *pend;
		pend->x = NULL;
		return op->matmul_swiglu(be, a->hb, a->gate_up, a->xb, &pre, w13, n, hidden);
	}
	TRY(settle(m, pend, n));
	TRY(op->matmul(be, a->gate_up, a->xb, w13, n));
	return op->silu_mul(be, a->hb, a->gate_up, n, hidden);
}

int model_set_batch(model *m, const kern_paged_batch *host, char *err, size_t errlen)
{
	if (host->n_tokens <= 0 || host->n_tokens > m->opts.step_tokens)
		return sl_errf(err, errlen, SL_EINVAL, "step has %d tokens; the arena holds %d",
			       host->n_tokens, m->opts.step_tokens);
	return m->be->ops->set_batch(m->be, host, &m->batch);
}

/* x = embedding of the tokens; vocab-parallel shards give zero rows for ids
 * they do not own, so the all-reduce completes the lookup. */
int model_embed(model *m)
{
	const par_shard *s = &m->shard;
	const kern_paged_batch *b = &m->batch;
	int n = b->n_tokens, dim = m->cfg.dim;
	TRY(m->be->ops->embed(m->be, m->a.x, m->w.tok_emb, b->tokens, n, dim, s->vocab0, s->vocab));
	return tp_all_reduce(m, m->a.x, (size_t)n * dim, SL_DT_F32);
}

int model_layers(model *m)
{
	const model_config *c = &m->cfg;
	const par_shard *s = &m->shard;
	const kern_paged_batch *b = &m->batch;
	node_backend *be = m->be;
	const node_backend_ops *op = be->ops;
	model_arena *a = &m->a;
	int n = b->n_tokens, dim = c->dim, hd = c->head_dim, hq = s->n_heads, hkv = s->n_kv_heads;
	int qkv_dim = (hq + 2 * hkv) * hd; /* the projections' shapes are in their descriptors */
	float eps = c->norm_eps, scale = 1.0f / sqrtf((float)hd);

	/* xb's norm, when the projection before left it to the one reading
	 * xb next (node_prenorm): never across anything else, nor past the
	 * last layer (the LM head or the next stage reads xb or x) */
	node_prenorm pend = {0};
	TRY(op->rmsnorm(be, a->xb, a->x, m->w.layers[0].attn_norm, n, dim, eps));
	for (int l = 0; l < s->n_layers; l++) {
		const layer_weights *w = &m->w.layers[l];
		op->range_push(be, "layer", s->layer0 + l);
		TRY(qkv_rope(m, &w->wqkv, l, &pend));
		TRY(op->attention(be, a->att, a->qkv, qkv_dim, m->k_cache[l], m->v_cache[l], b, hq,
				  hkv, hd, scale));
		TRY(proj_add_norm(m, a->att, &w->wo, w->ffn_norm, n, &pend));
		TRY(ffn_in(m, &w->w13, n, &pend));
		TRY(proj_add_norm(m, a->hb, &w->w2, norm_after(m, l), n,
				  l + 1 < s->n_layers ? &pend : NULL));
		op->range_pop(be);
		node_progress_tick(); /* the watchdog and the heartbeats see a long step move */
	}
	return SL_OK;
}

/* Logits of the given rows (indices into this batch) into rows
 * [row0, row0 + n_rows) of a->logits, full vocabulary: each tp rank
 * computes its vocabulary slice, then the slices are gathered. */
int model_lm_head(model *m, const int32_t *rows, int n_rows, int row0)
{
	const par_shard *s = &m->shard;
	node_backend *be = m->be;
	model_arena *a = &m->a;
	int dim = m->cfg.dim, V = m->cfg.vocab_size;
	if (n_rows <= 0)
		return SL_OK;
	if (row0 + n_rows > m->opts.max_rows)
		return SL_EINVAL;
	/* decode wants every row: read xb in place, no gather (and no host
	 * staging inside a captured graph) */
	int identity = n_rows == m->batch.n_tokens;
	for (int i = 0; identity && i < n_rows; i++)
		identity = rows[i] == i;
	const void *in = a->xb;
	if (!identity) {
		TRY(be->ops->gather_rows(be, a->lm_in, a->xb, rows, n_rows, dim));
		in = a->lm_in;
	}
	float *dst = a->logits + (size_t)row0 * V;
	if (s->grid.tp == 1)
		return be->ops->matmul_f32out(be, dst, in, &m->w.lm_head, n_rows);
	int per = s->vocab_padded / s->grid.tp;
	TRY(be->ops->matmul_f32out(be, a->logits_local, in, &m->w.lm_head, n_rows));
	TRY(par_tp_allgather(m->comm, a->logits_local, a->logits_gather, (size_t)n_rows * per,
			     SL_DT_F32));
	/* [tp][n_rows][per] -> [n_rows][V]; the last slice may be short */
	for (int r = 0; r < s->grid.tp; r++) {
		int v0 = r * per, w = v0 + per <= V ? per : V - v0;
		if (w > 0)
			TRY(be->ops->copy2d(be, dst + v0, sizeof(float) * V,
					    a->logits_gather + (size_t)r * n_rows * per,
					    sizeof(float) * per, sizeof(float) * w, n_rows));
	}
	return SL_OK;
}
