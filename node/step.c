/*
 * step.c — one step plan across the group (see step.h): micro-batch
 * slicing, the stage-to-stage hand-off, sampling on the last stage and the
 * return of tokens (and log-probs) to the leader.
 */
#include "node/step.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parallel/comm.h"
#include "common/checks.h"
#include "common/sl.h"
#include "kernels/logits_mask.h"
#include "node/watchdog.h"

/* One pipeline slot: what a step in flight keeps until its sends are
 * done. The leader sends plan k from slot k; the last stage returns its
 * results from slots in turn (a ring as deep as the pipeline: slot j is
 * reused pp steps later, when the leader has long collected its step). */
typedef struct step_slot {
	void *msg;          /* [cap] leader: this slot's packed plan, being sent */
	size_t cap;
	int32_t *tokens;    /* [max_seqs] last stage: sampled ids going back to the leader */
	kern_logprobs lp;   /* [max_seqs] rows of log-probs going back (kernels/sampling.h) */
	par_sends *sends;   /* the sends from msg (leader) or tokens and lp (last stage) */
} step_slot;

/* Scratch every step needs, taken once when the stepper is created (the
 * step loop allocates nothing). Who runs steps owns one: the engine on the
 * leader, node_worker_loop on the other ranks. */
struct node_stepper {
	model *m;
	int32_t *q_start;   /* [max_seqs + 1] a micro-batch's q_start, rebased */
	int32_t *rows;      /* [max_rows + 1] its logits rows, rebased */
	kern_logprobs lp;   /* [max_seqs] the leader's log-probs when the caller gives none */
	float *logits;      /* [LOGIT_CHUNK, vocab] fp32 logits rows going back, a chunk at a time */
	void *msg;          /* [msg_cap] a received plan (workers), NODE_PLAN_STOP (leader) */
	size_t msg_cap;
	step_slot *slots;   /* [n_slots] pipeline slots: pp */
	int peer_wait;      /* groups in flight: plan to the own stage's tp peers first */
	int n_slots, ring;  /* ring: the last stage's next slot */
};

/* Logits rows sent back to the leader per message: bounds the buffer on
 * the last stage whatever --max-step-tokens is (prompt logits are only
 * wanted by tests and perplexity runs). */
#define LOGIT_CHUNK 64

/* One micro-batch of a plan: a view of the plan's batch, rebased. */
typedef struct micro {
	kern_paged_batch b;
	int32_t *q_start;  /* [n_seqs] rebased to the micro-batch's first token */
	int32_t *rows;     /* [n_rows] rebased */
	int n_rows, row0;  /* its rows are plan rows [row0, row0 + n_rows) */
} micro;

static int lp_alloc(kern_logprobs *lp, int max_seqs)
{
	size_t top = (size_t)max_seqs * KERN_MAX_TOP_LOGPROBS;
	lp->chosen = malloc(sizeof(float) * max_seqs);
	lp->top_ids = malloc(sizeof(int32_t) * top);
	lp->top = malloc(sizeof(float) * top);
	return lp->chosen && lp->top_ids && lp->top ? SL_OK : SL_ENOMEM;
}

static void lp_free(kern_logprobs *lp)
{
	free(lp->chosen);
	free(lp->top_ids);
	free(lp->top);
}

/* Slots' buffers: plans as large as the limits allow (the leader packs
 * without growing), results for max_seqs rows; sends for every other
 * rank (a plan) or the four result messages. */
static int slots_create(node_stepper *st, size_t plan_bytes)
{
	const model_opts *o = &st->m->opts;
	int world = st->m->comm ? par_world_size(st->m->comm) : 1;
	st->n_slots = st->m->shard.grid.pp > 1 ? st->m->shard.grid.pp : 1;
	if (!(st->slots = calloc((size_t)st->n_slots, sizeof *st->slots)))
		return SL_ENOMEM;
	for (int i = 0; i < st->n_slots; i++) {
		step_slot *s = &st->slots[i];
		s->cap = plan_bytes;
		s->msg = malloc(plan_bytes);
		s->tokens = malloc(sizeof(int32_t) * o->max_seqs);
		if (!s->msg || !s->tokens || lp_alloc(&s->lp, o->max_seqs) ||
		    par_sends_create(world + 4, &s->sends))
			return SL_ENOMEM;
	}
	return SL_OK;
}

int node_stepper_create(model *m, node_stepper **out, char *err, size_t errlen)
{
	node_stepper *st = calloc(1, sizeof *st);
	const model_opts *o = &m->opts;
	int per_seq = (m->cfg.max_pos + o->block_tokens - 1) / o->block_tokens;
	int rc = st ? SL_OK : SL_ENOMEM;
	if (st) {
		st->m = m;
		const char *pw = getenv("SL_PP_PEER_WAIT");
		st->peer_wait = !(pw && !strcmp(pw, "0"));
		st->msg_cap = node_plan_max_bytes(o->step_tokens, o->max_seqs, per_seq, o->max_rows,
						  o->max_hist) +
			      node_plan_mask_bytes(o->max_seqs, kern_mask_words(m->cfg.vocab_size));
		st->q_start = malloc(sizeof(int32_t) * (o->max_seqs + 1));
		st->rows = malloc(sizeof(int32_t) * (o->max_rows + 1));
		st->logits = malloc(sizeof(float) * LOGIT_CHUNK * m->cfg.vocab_size);
		st->msg = malloc(st->msg_cap);
		rc = lp_alloc(&st->lp, o->max_seqs);
		if (!rc)
			rc = slots_create(st, st->msg_cap);
	}
	if (rc || !st->q_start || !st->rows || !st->logits || !st->msg) {
		node_stepper_destroy(st);
		return sl_errf(err, errlen, SL_ENOMEM, "step scratch: out of memory");
	}
	*out = st;
	return SL_OK;
}

void node_stepper_destroy(node_stepper *st)
{
	if (!st)
		return;
	for (int i = 0; st->slots && i < st->n_slots; i++) {
		step_slot *s = &st->slots[i];
		/* no wait: after a failure the receiver may never come; a send
		 * still pending then is one nobody will read */
		par_sends_destroy(s->sends);
		free(s->msg);
		free(s->tokens);
		lp_free(&s->lp);
	}
	free(st->slots);
	free(st->q_start);
	free(st->rows);
	lp_free(&st->lp);
	free(st->logits);
	free(st->msg);
	free(st);
}

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

/* The plan must fit the step limits the scratch was sized for, and its KV
 * slots and block ids must lie inside this rank's pool. */
static int check_limits(const model *m, const node_plan *p, char *err, size_t errlen)
{
	const model_opts *o = &m->opts;
	long n_slots = (long)o->n_kv_blocks * p->b.block_tokens;
	if (p->b.n_tokens > o->step_tokens || p->b.n_seqs > o->max_seqs || p->n_rows > o->max_rows ||
	    p->n_sample > p->b.n_seqs)
		return sl_errf(err, errlen, SL_EINVAL,
			       "step plan: %d tokens, %d sequences, %d rows, %d samples exceed the "
			       "step limits (%d, %d, %d)", p->b.n_tokens, p->b.n_seqs, p->n_rows,
			       p->n_sample, o->step_tokens, o->max_seqs, o->max_rows);
	if (p->b.block_tokens != o->block_tokens)
		return sl_errf(err, errlen, SL_EINVAL, "step plan: block size %d, pool has %d",
			       p->b.block_tokens, o->block_tokens);
	for (int t = 0; t < p->b.n_tokens; t++)
		if (p->b.slots[t] < 0 || p->b.slots[t] >= n_slots)
			return sl_errf(err, errlen, SL_EINVAL, "step plan: KV slot %d out of the pool",
				       p->b.slots[t]);
	for (long i = 0; i < (long)p->b.n_seqs * p->b.max_blocks; i++)
		if (p->b.block_tables[i] < 0 || p->b.block_tables[i] >= o->n_kv_blocks)
			return sl_errf(err, errlen, SL_EINVAL, "step plan: block id out of the pool");
	if (p->n_hist > o->max_hist)
		return sl_errf(err, errlen, SL_EINVAL, "step plan: %d history entries exceed the limit %d",
			       p->n_hist, o->max_hist);
	for (int e = 0; p->hist.off && e < p->n_hist; e++)
		if (p->hist.ids[e] < 0 || p->hist.ids[e] >= m->cfg.vocab_size)
			return sl_errf(err, errlen, SL_EINVAL, "step plan: history token %d outside the "
				       "vocabulary", p->hist.ids[e]);
	for (int e = 0; p->bias.off && e < p->n_bias; e++)
		if (p->bias.ids[e] < 0 || p->bias.ids[e] >= m->cfg.vocab_size)
			return sl_errf(err, errlen, SL_EINVAL, "step plan: logit bias token %d outside "
				       "the vocabulary", p->bias.ids[e]);
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

/* The micro-batch's profiler range: "decode N" when every one of its N
 * sequences adds one token, else "tokens N" (bench/ncu_layer.sh profiles
 * the decode steps of one batch size through it). */
static int run_micro(model *m, const node_plan *p, micro *u, char *err, size_t errlen)
{
	node_backend *be = m->be;
	TRY(model_set_batch(m, &u->b, err, errlen));
	stage_ctx x = {m, u};
	const int decode = u->b.n_seqs == u->b.n_tokens;
	be->ops->range_push(be, decode ? "decode" : "tokens", u->b.n_tokens);
	int rc = be->ops->run_cached(be, graph_key(p, u), run_stage, &x);
	be->ops->range_pop(be);
	return rc;
}

/* Whether any sampled row reports log-probs: both ends of the return
 * trip decide it from the plan, so they agree on what travels. */
static int wants_logprobs(const node_plan *p)
{
	for (int k = 0; k < p->n_sample; k++)
		if (kern_wants_logprobs(&p->sampling[k]))
			return 1;
	return 0;
}

/* Constrained rows first lose the tokens their grammar forbids. */
static int sample(model *m, const node_plan *p, int32_t *tokens, const kern_logprobs *lp)
{
	node_backend *be = m->be;
	if (p->n_mask) {
		if (p->mask_words != kern_mask_words(m->cfg.vocab_size))
			return sl_fail(SL_EINVAL, "step plan: masks of %d words, vocabulary %d",
				       p->mask_words, m->cfg.vocab_size);
		TRY(be->ops->mask_logits(be, m->a.logits, p->mask_rows, p->masks, p->n_mask,
					 m->cfg.vocab_size));
	}
	return be->ops->sample(be, tokens, m->a.logits, p->sample_rows, p->n_sample,
			       m->cfg.vocab_size, p->sampling, p->sample_pos,
			       p->bias.off ? &p->bias : NULL, p->hist.off ? &p->hist : NULL,
			       wants_logprobs(p) ? lp : NULL);
}

/* Sizes of the three log-prob arrays for n rows. */
static size_t lp_bytes(int n, int part)
{
	return (size_t)n * (part == 0 ? sizeof(float) : KERN_MAX_TOP_LOGPROBS * sizeof(float));
}

static void *lp_part(const kern_logprobs *lp, int part)
{
	return part == 0 ? (void *)lp->chosen : part == 1 ? (void *)lp->top_ids : (void *)lp->top;
}

/* Last stage, first tp rank, when that is not the leader: sample, then
 * send the tokens (the log-probs when a row wants them, and the logits
 * rows, a chunk at a time) to the leader, which receives them in the same
 * order in node_step_collect. Tokens and log-probs leave without waiting
 * for the leader (it may be sending this stage the next group's
 * activations); logits rows wait, a chunk at a time, which is safe
 * because the leader runs a plan that wants them alone. */
static int send_back(node_stepper *st, const node_plan *p)
{
	model *m = st->m;
	node_backend *be = m->be;
	int V = m->cfg.vocab_size;
	step_slot *r = &st->slots[st->ring];
	st->ring = (st->ring + 1) % st->n_slots;
	TRY(par_sends_wait(r->sends)); /* the step pp plans ago: collected already */
	if (p->n_sample) {
		TRY(sample(m, p, r->tokens, &r->lp));
		TRY(par_host_isend(m->comm, r->sends, 0, r->tokens, 4 * (size_t)p->n_sample));
		for (int part = 0; part < 3 && wants_logprobs(p); part++)
			TRY(par_host_isend(m->comm, r->sends, 0, lp_part(&r->lp, part),
					   lp_bytes(p->n_sample, part)));
	}
	for (int r0 = 0; p->want_logits && r0 < p->n_rows; r0 += LOGIT_CHUNK) {
		size_t n = (size_t)(p->n_rows - r0 < LOGIT_CHUNK ? p->n_rows - r0 : LOGIT_CHUNK) * V;
		TRY(be->ops->download(be, st->logits, m->a.logits + (size_t)r0 * V, sizeof(float) * n));
		TRY(par_host_send(m->comm, 0, st->logits, sizeof(float) * n));
	}
	return SL_OK;
}

/* The leader is the last stage's first tp rank: sample and download here.
 * The forward is queued on the device: constrained rows' masks are
 * filled now, while it runs (unless they had to leave with the plan). */
static int keep_here(node_stepper *st, const node_plan *p, int masks_ready, int32_t *tokens_out,
		     const kern_logprobs *lp_out, float *logits_out)
{
	model *m = st->m;
	node_backend *be = m->be;
	int V = m->cfg.vocab_size;
	if (p->n_mask && p->fill_masks && !masks_ready)
		TRY(p->fill_masks(p->fill_ctx));
	if (p->n_sample)
		TRY(sample(m, p, tokens_out, lp_out));
	if (p->want_logits && logits_out)
		TRY(be->ops->download(be, logits_out, m->a.logits,
				      sizeof(float) * (size_t)p->n_rows * V));
	return SL_OK;
}

static int is_leader(const model *m) { return !m->comm || par_world_rank(m->comm) == 0; }

static int step_run(node_stepper *st, const node_plan *p, int masks_ready, int32_t *tokens_out,
		    const kern_logprobs *lp_out, float *logits_out, char *err, size_t errlen)
{
	model *m = st->m;
	TRY(check_limits(m, p, err, errlen));
	/* a rank may wait for every other stage's compute of this plan */
	int pp = m->shard.grid.pp;
	node_progress_work((long)p->b.n_tokens * (pp > 1 ? pp - 1 : 1), pp > 1);
	node_test_stall(m->comm ? par_world_rank(m->comm) : 0);
	micro u = {.q_start = st->q_start, .rows = st->rows};
	int rc = SL_OK;
	for (int k = 0; !rc && k < p->n_micro; k++) {
		slice_micro(p, k, &u);
		rc = run_micro(m, p, &u, err, errlen);
		node_progress_tick();
	}
	const par_grid *g = &m->shard.grid;
	int last = g->pp_rank == g->pp - 1;
	if (!rc && last && g->tp_rank == 0)
		rc = is_leader(m) ? keep_here(st, p, masks_ready, tokens_out, lp_out, logits_out)
				   : send_back(st, p);
	/* Earlier stages leave their work queued on the stream: the host
	 * goes on to the next plan (the leader: to collect and plan the next
	 * group) while the device still computes and sends this one on. */
	if (!rc && last)
		rc = m->be->ops->sync(m->be);
	if (rc && !err[0]) /* a kernel's or library call's reason (common/sl.h) */
		sl_errf(err, errlen, rc, "step failed on rank %d: %s",
			m->comm ? par_world_rank(m->comm) : 0,
			sl_last_error()[0] ? sl_last_error() : "see the log");
	return rc;
}

int node_step_collect(node_stepper *st, const node_plan *p, int32_t *tokens_out,
		      const kern_logprobs *lp_out, float *logits_out, char *err, size_t errlen)
{
	model *m = st->m;
	if (m->shard.grid.pp == 1)
		return SL_OK;
	if (!lp_out)
		lp_out = &st->lp;
	int V = m->cfg.vocab_size, last = par_grid_rank(&m->shard.grid, 0, m->shard.grid.pp - 1);
	if (p->n_sample && par_host_recv(m->comm, last, tokens_out, 4 * (size_t)p->n_sample))
		return sl_errf(err, errlen, SL_ECOMM, "no tokens from rank %d", last);
	node_progress_tick();
	for (int part = 0; p->n_sample && part < 3 && wants_logprobs(p); part++)
		if (par_host_recv(m->comm, last, lp_part(lp_out, part), lp_bytes(p->n_sample, part)))
			return sl_errf(err, errlen, SL_ECOMM, "no log-probs from rank %d", last);
	for (int r0 = 0; p->want_logits && r0 < p->n_rows; r0 += LOGIT_CHUNK) {
		size_t n = (size_t)(p->n_rows - r0 < LOGIT_CHUNK ? p->n_rows - r0 : LOGIT_CHUNK) * V;
		float *dst = logits_out ? logits_out + (size_t)r0 * V : st->logits;
		if (par_host_recv(m->comm, last, dst, sizeof(float) * n))
			return sl_errf(err, errlen, SL_ECOMM, "no logits from rank %d", last);
	}
	return SL_OK;
}

int node_step_slots(const node_stepper *st) { return st->n_slots; }

/* The plan leaves from the slot's buffer without waiting for the
 * receivers, except where this rank's own work could wait on a device
 * queue that needs a receiver to have it first: with pp 1 (the tp peers'
 * all-reduce before sampling) and with micro-batches (the next one's
 * upload waits for the last one's send to the next stage); MPI may need
 * the sender in a call to finish a large message. With groups in flight
 * the later stages' copies stay pending (those ranks take the plan only
 * once they finish the step before it; the leader's next MPI call
 * finishes them), but the leader's own stage's tp peers get theirs before
 * the step runs: the step's collectives need them at once, and the leader
 * may block outside MPI inside the step (the next upload's event, a
 * connection NCCL sets up on first use) while a peer still waits in MPI
 * for the rest of a plan too large to go eagerly (SL_PP_PEER_WAIT=0
 * turns the wait off, to show the hang it prevents). */
int node_step_issue(node_stepper *st, int slot, const node_plan *p, int32_t *tokens_out,
		    const kern_logprobs *lp_out, float *logits_out, char *err, size_t errlen)
{
	par_comm *c = st->m->comm;
	if (slot < 0 || slot >= st->n_slots)
		return sl_errf(err, errlen, SL_EINVAL, "pipeline slot %d of %d", slot, st->n_slots);
	if (!lp_out) /* nowhere to put them: the stepper's scratch takes them */
		lp_out = &st->lp;
	/* another rank samples (pp > 1): the masks travel in the plan */
	int masks_ready = 0;
	if (p->n_mask && p->fill_masks && st->m->shard.grid.pp > 1) {
		int rc = p->fill_masks(p->fill_ctx);
		if (rc)
			return sl_errf(err, errlen, rc, "constrained decoding: cannot fill the masks");
		masks_ready = 1;
	}
	if (c && par_world_size(c) > 1) {
		step_slot *s = &st->slots[slot];
		size_t n;
		int all = st->m->shard.grid.pp == 1 || p->n_micro > 1;
		/* with pp 1 the leader samples: the tp peers need no masks */
		node_plan sent = *p;
		if (st->m->shard.grid.pp == 1)
			sent.n_mask = 0, sent.mask_words = 0;
		if (par_sends_wait(s->sends) || node_plan_pack(&sent, &s->msg, &s->cap, &n) ||
		    par_host_ibcast_msg(c, s->sends, s->msg, n) ||
		    (all && par_sends_wait(s->sends)) ||
		    (!all && st->peer_wait &&
		     par_sends_wait_first(s->sends, st->m->shard.grid.tp - 1)))
			return sl_errf(err, errlen, SL_ECOMM, "cannot send the step plan");
	}
	return step_run(st, p, masks_ready, tokens_out, lp_out, logits_out, err, errlen);
}

int node_step_lead(node_stepper *st, const node_plan *p, int32_t *tokens_out,
		   const kern_logprobs *lp_out, float *logits_out, char *err, size_t errlen)
{
	TRY(node_step_issue(st, 0, p, tokens_out, lp_out, logits_out, err, errlen));
	return node_step_collect(st, p, tokens_out, lp_out, logits_out, err, errlen);
}

/* A plan without a batch (STOP, PING) to every worker. */
static int send_cmd(model *m, int cmd)
{
	if (!m || !m->comm || par_world_size(m->comm) == 1)
		return SL_OK;
	node_plan p = {.cmd = cmd};
	void *buf = NULL;
	size_t cap = 0, n;
	int rc = node_plan_pack(&p, &buf, &cap, &n);
	if (!rc)
		rc = par_host_bcast_msg(m->comm, buf, n);
	free(buf);
	return rc;
}

int node_step_stop(model *m) { return send_cmd(m, NODE_PLAN_STOP); }

int node_step_ping(model *m) { return send_cmd(m, NODE_PLAN_PING); }

/* How a non-leader rank waits for the next plan. MPI's blocking receive
 * busy-polls (Open MPI spins in its progress engine), so an idle group
 * held a core per non-leader rank at 100%. Instead: probe without
 * blocking, spin only for a while after a step (the next plan of a
 * running batch comes within the leader's turnaround, and a sleep there
 * would add to every step), then sleep with a backoff that grows while
 * idle and starts over on work. Worst added latency for the first plan
 * after an idle spell: one WAIT_MAX_NS sleep. The spin is longer on the
 * GPU, where a decode step is a few ms and the host has cores to spare,
 * than on the CPU, where the spinning core is one the leader may need.
 * docs/operations.md has the figures. */
#define WAIT_SPIN_CPU_S 200e-6  /* probe without sleeping this long after a step */
#define WAIT_SPIN_GPU_S 2e-3
#define WAIT_MIN_NS 50000L      /* first sleep: 50 us */
#define WAIT_MAX_NS 2000000L    /* backoff cap: 2 ms */

static int wait_for_plan(par_comm *c, double spin_s)
{
	double t0 = sl_now();
	long sleep_ns = 0;
	for (;;) {
		int ready = 0;
		TRY(par_host_msg_ready(c, &ready));
		if (ready)
			return SL_OK;
		if (sl_now() - t0 < spin_s)
			continue;
		sleep_ns = sleep_ns ? sleep_ns * 2 : WAIT_MIN_NS;
		if (sleep_ns > WAIT_MAX_NS)
			sleep_ns = WAIT_MAX_NS;
		struct timespec ts = {0, sleep_ns};
		nanosleep(&ts, NULL);
	}
}

int node_worker_loop(model *m, char *err, size_t errlen)
{
	node_stepper *st = NULL;
	int rc = node_stepper_create(m, &st, err, errlen);
	double spin_s = strcmp(m->be->name, "cuda") ? WAIT_SPIN_CPU_S : WAIT_SPIN_GPU_S;
	while (!rc) {
		node_plan p;
		size_t n;
		if ((rc = wait_for_plan(m->comm, spin_s)) ||
		    (rc = par_host_recv_msg(m->comm, &st->msg, &st->msg_cap, &n)))
			break;
		if ((rc = node_plan_unpack(st->msg, n, &p, err, errlen)) || p.cmd == NODE_PLAN_STOP)
			break;
		if (p.cmd == NODE_PLAN_PING) { /* the leader lives: the watchdog hears it */
			node_progress_tick();
			continue;
		}
		node_progress_begin();
		rc = step_run(st, &p, 1, NULL, NULL, NULL, err, errlen);
		node_progress_end();
	}
	node_stepper_destroy(st);
	return rc;
}
