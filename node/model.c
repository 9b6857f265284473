/*
 * model.c — the forward pass of one rank over one step's flat token batch.
 * Reads top to bottom like the model: embed, per layer (qkv, rope + KV
 * write, attention, output projection, all-reduce, residual + norm, gate/up,
 * silu*up, down projection, all-reduce, residual + norm), LM head on the
 * rows whose logits are wanted. Loading lives in model_load.c.
 */
#include <math.h>

#include "model.h"
#include "sl.h"

#define TRY(x) do { int rc_ = (x); if (rc_) return rc_; } while (0)

/* Sum partial results across the tensor-parallel group. One rank: nothing
 * to do; the communicator arrives with tensor parallelism. */
static int tp_all_reduce(model *m, void *buf, size_t n)
{
	return m->shard.tp == 1 ? SL_OK : SL_ENOTSUP;
}

/* The norm that follows layer l's FFN: the next layer's input norm, the
 * final norm after the model's last layer, or none (plain residual add)
 * at the end of a pipeline stage that hands x to the next stage. */
static const void *norm_after(const model *m, int l)
{
	if (l + 1 < m->shard.n_layers)
		return m->w.layers[l + 1].attn_norm;
	return m->shard.pp_rank == m->shard.pp - 1 ? m->w.final_norm : NULL;
}

static int check_batch(const model *m, const kern_paged_batch *b, int n_logits, char *err,
		       size_t errlen)
{
	if (b->n_tokens <= 0 || b->n_tokens > m->opts.max_tokens)
		return sl_errf(err, errlen, SL_EINVAL, "step has %d tokens; the arena holds %d",
			       b->n_tokens, m->opts.max_tokens);
	if (n_logits < 0 || n_logits > b->n_tokens)
		return sl_errf(err, errlen, SL_EINVAL, "%d logit rows for %d tokens", n_logits,
			       b->n_tokens);
	if (m->shard.pp != 1)
		return sl_errf(err, errlen, SL_ENOTSUP, "pipeline stages need a communicator");
	return SL_OK;
}

int model_forward(model *m, const kern_paged_batch *hb, const int32_t *logit_rows, int n_logits,
		  float *logits_out, char *err, size_t errlen)
{
	TRY(check_batch(m, hb, n_logits, err, errlen));
	const model_config *c = &m->cfg;
	const par_shard *s = &m->shard;
	node_backend *be = m->be;
	const node_backend_ops *op = be->ops;
	model_arena *a = &m->a;
	int n = hb->n_tokens, dim = c->dim, hd = c->head_dim, hq = s->n_heads, hkv = s->n_kv_heads;
	int qkv_dim = (hq + 2 * hkv) * hd;
	float eps = c->norm_eps, scale = 1.0f / sqrtf((float)hd);
	kern_paged_batch b;
	TRY(op->set_batch(be, hb, &b));

	TRY(op->embed(be, a->x, m->w.tok_emb, b.tokens, n, dim, s->vocab0, s->vocab));
	TRY(tp_all_reduce(m, a->x, (size_t)n * dim));
	TRY(op->rmsnorm(be, a->xb, a->x, m->w.layers[0].attn_norm, n, dim, eps));
	for (int l = 0; l < s->n_layers; l++) {
		const layer_weights *w = &m->w.layers[l];
		TRY(op->matmul(be, a->qkv, a->xb, w->wqkv, n, dim, qkv_dim));
		TRY(op->rope_kv_write(be, a->qkv, m->k_cache[l], m->v_cache[l], &b, hq, hkv, hd,
				      a->inv_freq));
		TRY(op->attention(be, a->att, a->qkv, qkv_dim, m->k_cache[l], m->v_cache[l], &b, hq,
				  hkv, hd, scale));
		TRY(op->matmul(be, a->proj, a->att, w->wo, n, hq * hd, dim));
		TRY(tp_all_reduce(m, a->proj, (size_t)n * dim));
		TRY(op->add_rmsnorm(be, a->x, a->proj, w->ffn_norm, a->xb, n, dim, eps));
		TRY(op->matmul(be, a->gate_up, a->xb, w->w13, n, dim, 2 * s->hidden));
		TRY(op->silu_mul(be, a->hb, a->gate_up, n, s->hidden));
		TRY(op->matmul(be, a->proj, a->hb, w->w2, n, s->hidden, dim));
		TRY(tp_all_reduce(m, a->proj, (size_t)n * dim));
		TRY(op->add_rmsnorm(be, a->x, a->proj, norm_after(m, l), a->xb, n, dim, eps));
	}
	if (n_logits > 0) {
		TRY(op->gather_rows(be, a->lm_in, a->xb, logit_rows, n_logits, dim));
		TRY(op->matmul_f32out(be, a->logits, a->lm_in, m->w.lm_head, n_logits, dim, s->vocab));
		if (logits_out)
			TRY(op->download(be, logits_out, a->logits,
					 sizeof(float) * (size_t)n_logits * s->vocab));
	}
	return op->sync(be);
}
