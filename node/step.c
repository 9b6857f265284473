/*
 * step.c — one step plan across the group (see step.h): micro-batch
 * slicing, the stage-to-stage hand-off, sampling on the last stage and the
 * return of tokens to the leader.
 */
#include "step.h"

#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "checks.h"
#include "sl.h"

/* Scratch for one micro-batch's rebased indices; sized per call. */
typedef struct micro {
	kern_paged_batch b;
	int32_t *q_start;  /* [n_seqs] rebased to the micro-batch's first token */
	int32_t *rows;     /* [n_rows] rebased */
	int n_rows, row0;  /* its rows are plan rows [row0, row0 + n_rows) */
} micro;

static void slice_micro(const node_plan *p, int k, micro *u)
{
	const kern_paged_batch *b = &p->b;
	int s0 = p->micro_seq0[k], s1 = p->micro_seq0[k + 1];
	int t0 = b->q_start[s0], t1 = b->q_start[s1 - 1] + b->q_len[s1 - 1];
	u->b = *b;
	u->b.n_seqs = s1 - s0;
	u->b.n_tokens = t1 - t0;
	u->b.tokens = b->tokens + t0;
	u->b.positions = b->positions + t0;
	u->b.slots = b->slots + t0;
	u->b.q_len = b->q_len + s0;
	u->b.kv_len = b->kv_len + s0;
	u->b.block_tables = b->block_tables + (size_t)s0 * b->max_blocks;
	for (int s = s0; s < s1; s++)
		u->q_start[s - s0] = b->q_start[s] - t0;
	u->b.q_start = u->q_start;
	u->row0 = 0;
	while (u->row0 < p->n_rows && p->rows[u->row0] < t0)
		u->row0++;
	u->n_rows = 0;
	while (u->row0 + u->n_rows < p->n_rows && p->rows[u->row0 + u->n_rows] < t1) {
		u->rows[u->n_rows] = p->rows[u->row0 + u->n_rows] - t0;
		u->n_rows++;
	}
}

/* KV slots and block ids must lie inside this rank's pool. */
static int check_pool(const model *m, const node_plan *p, char *err, size_t errlen)
{
	long n_slots = (long)m->opts.n_kv_blocks * p->b.block_tokens;
	if (p->b.block_tokens != m->opts.block_tokens)
		return sl_errf(err, errlen, SL_EINVAL, "step plan: block size %d, pool has %d",
			       p->b.block_tokens, m->opts.block_tokens);
	for (int t = 0; t < p->b.n_tokens; t++)
		if (p->b.slots[t] < 0 || p->b.slots[t] >= n_slots)
			return sl_errf(err, errlen, SL_EINVAL, "step plan: KV slot %d out of the pool",
				       p->b.slots[t]);
	for (long i = 0; i < (long)p->b.n_seqs * p->b.max_blocks; i++)
		if (p->b.block_tables[i] < 0 || p->b.block_tables[i] >= m->opts.n_kv_blocks)
			return sl_errf(err, errlen, SL_EINVAL, "step plan: block id out of the pool");
	return SL_OK;
}

typedef struct stage_ctx {
	model *m;
	micro *u;
} stage_ctx;

/* This stage's share of one micro-batch, after its batch is on the
 * device: no host synchronisation inside, so it can run as a CUDA graph. */
static int run_stage(void *arg)
{
	stage_ctx *x = arg;
	model *m = x->m;
	const par_shard *s = &m->shard;
	size_t x_count = (size_t)x->u->b.n_tokens * m->cfg.dim;
	if (s->grid.pp_rank == 0)
		TRY(model_embed(m));
	else
		TRY(par_recv_prev(m->comm, m->a.x, x_count, SL_DT_F32));
	TRY(model_layers(m));
	if (s->grid.pp_rank < s->grid.pp - 1)
		return par_send_next(m->comm, m->a.x, x_count, SL_DT_F32);
	return model_lm_head(m, x->u->rows, x->u->n_rows, x->u->row0);
}

/* Decode steps (one token per sequence, every row's logits, one
 * micro-batch) have the same shapes whenever the batch size is the same:
 * cache them under that size. Everything else runs directly. */
static int graph_key(const node_plan *p, const micro *u)
{
	if (p->n_micro != 1 || p->b.max_q_len != 1 || u->n_rows != u->b.n_tokens)
		return -1;
	return u->b.n_seqs;
}

static int run_micro(model *m, const node_plan *p, micro *u, char *err, size_t errlen)
{
	TRY(model_set_batch(m, &u->b, err, errlen));
	stage_ctx x = {m, u};
	return m->be->ops->run_cached(m->be, graph_key(p, u), run_stage, &x);
}

/* Last stage, first tp rank: sample, then hand tokens (and logits) to the
 * leader, or keep them when this rank is the leader. */
static int finish_last_stage(model *m, const node_plan *p, int32_t *tokens_out, float *logits_out)
{
	node_backend *be = m->be;
	int V = m->cfg.vocab_size, leader = !m->comm || par_world_rank(m->comm) == 0;
	int32_t stack_tokens[256], *tok = leader ? tokens_out : stack_tokens;
	int32_t *heap = NULL;
	if (!leader && p->n_sample > 256 && !(tok = heap = malloc(4 * (size_t)p->n_sample)))
		return SL_ENOMEM;
	int rc = p->n_sample ? be->ops->sample(be, tok, m->a.logits, p->sample_rows, p->n_sample, V,
					      p->sampling, p->sample_pos) : SL_OK;
	size_t lbytes = sizeof(float) * (size_t)p->n_rows * V;
	float *lg = leader ? logits_out : NULL;
	if (!rc && p->want_logits && !leader && !(lg = malloc(lbytes ? lbytes : 1)))
		rc = SL_ENOMEM;
	if (!rc && p->want_logits && lg)
		rc = be->ops->download(be, lg, m->a.logits, lbytes);
	if (!rc && !leader && p->n_sample)
		rc = par_host_send(m->comm, 0, tok, 4 * (size_t)p->n_sample);
	if (!rc && !leader && p->want_logits)
		rc = par_host_send(m->comm, 0, lg, lbytes);
	if (!leader)
		free(lg);
	free(heap);
	return rc;
}

static int step_run(model *m, const node_plan *p, int32_t *tokens_out, float *logits_out,
		    char *err, size_t errlen)
{
	TRY(check_pool(m, p, err, errlen));
	micro u = {0};
	u.q_start = malloc(sizeof(int32_t) * (p->b.n_seqs + 1));
	u.rows = malloc(sizeof(int32_t) * (p->n_rows + 1));
	int rc = (!u.q_start || !u.rows) ? SL_ENOMEM : SL_OK;
	for (int k = 0; !rc && k < p->n_micro; k++) {
		slice_micro(p, k, &u);
		rc = run_micro(m, p, &u, err, errlen);
	}
	free(u.q_start);
	free(u.rows);
	const par_shard *s = &m->shard;
	if (!rc && s->grid.pp_rank == s->grid.pp - 1 && s->grid.tp_rank == 0)
		rc = finish_last_stage(m, p, tokens_out, logits_out);
	if (!rc)
		rc = m->be->ops->sync(m->be);
	if (rc && !err[0])
		sl_errf(err, errlen, rc, "step failed on rank %d (see the log)",
			m->comm ? par_world_rank(m->comm) : 0);
	return rc;
}

/* Scratch for packing plans on the leader. */
static void *g_pack;
static size_t g_pack_cap;

int node_step_lead(model *m, const node_plan *p, int32_t *tokens_out, float *logits_out,
		   char *err, size_t errlen)
{
	par_comm *c = m->comm;
	if (c && par_world_size(c) > 1) {
		size_t n;
		if (node_plan_pack(p, &g_pack, &g_pack_cap, &n) || par_host_bcast_msg(c, g_pack, n))
			return sl_errf(err, errlen, SL_ECOMM, "cannot send the step plan");
	}
	TRY(step_run(m, p, tokens_out, logits_out, err, errlen));
	const par_shard *s = &m->shard;
	if (s->grid.pp == 1)
		return SL_OK;
	int last = par_grid_rank(&s->grid, 0, s->grid.pp - 1); /* the last stage's first tp rank */
	if (p->n_sample && par_host_recv(c, last, tokens_out, 4 * (size_t)p->n_sample))
		return sl_errf(err, errlen, SL_ECOMM, "no tokens from rank %d", last);
	if (p->want_logits && logits_out &&
	    par_host_recv(c, last, logits_out, sizeof(float) * (size_t)p->n_rows * m->cfg.vocab_size))
		return sl_errf(err, errlen, SL_ECOMM, "no logits from rank %d", last);
	return SL_OK;
}

int node_step_stop(model *m)
{
	if (!m->comm || par_world_size(m->comm) == 1)
		return SL_OK;
	node_plan p = {.cmd = NODE_PLAN_STOP};
	size_t n;
	if (node_plan_pack(&p, &g_pack, &g_pack_cap, &n))
		return SL_ENOMEM;
	return par_host_bcast_msg(m->comm, g_pack, n);
}

int node_worker_loop(model *m, char *err, size_t errlen)
{
	void *buf = NULL;
	size_t cap = 0, n;
	int rc;
	for (;;) {
		node_plan p;
		if ((rc = par_host_recv_msg(m->comm, &buf, &cap, &n)))
			break;
		if ((rc = node_plan_unpack(buf, n, &p, err, errlen)) || p.cmd == NODE_PLAN_STOP)
			break;
		if ((rc = step_run(m, &p, NULL, NULL, err, errlen)))
			break;
	}
	free(buf);
	return rc;
}
