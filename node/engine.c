/*
 * engine.c — sequence bookkeeping and the step loop (see engine.h).
 * All step arrays are sized once: for the step budget at create, for the
 * number of sequences when one is added. A step allocates nothing but the
 * growth of a sequence's token list.
 */
#include "node/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/block_hash.h"
#include "common/checks.h"
#include "kernels/logits_mask.h"
#include "node/constrain.h"
#include "node/kv.h"
#include "node/plan.h"
#include "common/sl.h"
#include "node/step.h"

typedef struct seq {
	int id, used;
	node_request req;
	int32_t *tokens;      /* prompt then generated */
	int n_tokens, cap;
	int n_cached;         /* tokens whose K/V are in the cache */
	int n_generated;
	node_seq_state state;
	int flight;           /* pipeline slot of the step it is in, or -1 */
	kv_table kv;
	/* prefix cache: off for requests that want prompt logits (every
	 * prompt row must be computed) and when the engine's cache is off */
	int cacheable;
	int n_published;      /* leading blocks of kv published (or acquired) */
	uint64_t *bhash;      /* [n_bhash] chain hashes of its full blocks of tokens */
	int n_bhash, cap_bhash;
	/* with req.sampling wanting log-probs: per generated token */
	int n_top;            /* alternatives per token: kern_top_logprobs */
	int lp_cap;
	float *lp;            /* [lp_cap] the token's log-prob */
	int32_t *lp_ids;      /* [lp_cap, n_top] alternatives, most likely first */
	float *lp_top;        /* [lp_cap, n_top] their log-probs */
	/* req.lists' copies (req.lists itself is cleared: it was borrowed) */
	int32_t *bias_ids;    /* [n_bias] logit_bias tokens, distinct */
	float *bias;          /* [n_bias] their bias */
	int32_t *stop_ids;    /* [n_stop_ids] tokens that end it */
	int n_bias, n_stop_ids;
	grammar_matcher *gm;  /* req.matcher: constrained decoding, NULL when free */
} seq;

/* Step scratch, sized once for the model's token budget T. */
typedef struct step_scratch {
	int32_t *tokens, *positions, *slots;      /* [T] */
	int32_t *q_start, *q_len, *kv_len;        /* [T] (at most T sequences per step) */
	int32_t *rows, *sample_rows, *micro_seq0; /* [T], [T], [T + 1] */
	int32_t *tables;                          /* [T, max_blocks] */
	int *seq_of;                              /* [T] engine index of step sequence k */
	int *id_of;                               /* [T] its id (a drop may reuse the index) */
	int *sample_of;                           /* [T] sample index of step sequence k, or -1 */
	kern_sample_params *sampling;             /* [T] */
	int64_t *sample_pos;                      /* [T] */
	int32_t *sampled;                         /* [T] tokens back from the step */
	kern_logprobs lp;                         /* [S] rows of log-probs back from the step */
	int32_t *hist_off;                        /* [T + 1] penalty history rows */
	int32_t *hist_ids, *hist_gen, *hist_prompt; /* [max_hist] its entries */
	int32_t *hist_at;                         /* [vocab] a token's entry in the row being
						   * built, -1 otherwise */
	int *take;                                /* [T] tokens of step sequence k */
	int32_t *bias_off;                        /* [T + 1] logit bias rows */
	int32_t *bias_ids;                        /* [S * NODE_PLAN_BIAS_PER_ROW] its entries */
	float *bias_val;                          /* [S * NODE_PLAN_BIAS_PER_ROW] */
	float *logits;                            /* [max_rows, vocab] prompt logits back: one
						   * buffer for all slots (a plan that wants
						   * them runs alone) */
	/* constrained rows, allocated with the first constrained request */
	int32_t *mask_rows;                       /* [S] the plan's mask_rows */
	int *mask_seq;                            /* [S] engine index of each */
	uint32_t *masks;                          /* [S, words] */
	struct node_engine *e;                    /* for fill_masks */
} step_scratch;

/* A step in flight: its plan and the scratch the plan points into. */
typedef struct flight {
	step_scratch w;
	node_plan p;
	int prefill;          /* the step holds prefill tokens (stats) */
	int busy;             /* issued, not yet collected */
} flight;

struct node_engine {
	model *m;
	kv_pool *pool;
	seq *seqs;
	int n_seqs, cap_seqs, next_id;
	int max_blocks;       /* blocks of a full-context sequence */
	int *order;           /* [cap_seqs] running sequences in arrival order */
	int *want;            /* [cap_seqs] tokens each running sequence asks for this step */
	int *from;            /* [cap_seqs] where its tokens start: n_cached, or for one
			       * without blocks the cached prefix it would start from */
	int prefix_cache;     /* reuse and publish full blocks (node_engine_set_prefix_cache) */
	node_stats stats;
	/* Pipeline parallel keeps up to n_slots steps of disjoint sequences
	 * in flight (docs/parallel.md); pp 1 has one slot, issued and
	 * collected in the same call. */
	flight *fl;           /* [n_slots] */
	int n_slots;
	int inflight;         /* groups in flight (SL_PP_INFLIGHT=0: one step at a time,
			       * cut into pp micro-batches) */
	int *fifo;            /* [n_slots] slots in flight, oldest at fifo_head */
	int fifo_head, n_flying;
	int broken;           /* a step failed to go out or come back: collect nothing more */
	step_scratch *w;      /* the slot being planned or applied */
	node_stepper *stepper;
	node_constrain *cons; /* constrained decoding: the grammar compiler */
	int mask_words;       /* kern_mask_words(vocab) */
};

/* One slot's scratch; logits: the first slot's buffer, or NULL in it. */
static int alloc_scratch(node_engine *e, step_scratch *w, float *logits)
{
	size_t T = e->m->opts.step_tokens, R = e->m->opts.max_rows, V = e->m->cfg.vocab_size;
	size_t S = e->m->opts.max_seqs, H = e->m->opts.max_hist;
	int32_t **i32[] = {&w->tokens, &w->positions, &w->slots, &w->q_start, &w->q_len, &w->kv_len,
			   &w->rows, &w->sample_rows, &w->sampled};
	for (size_t i = 0; i < sizeof i32 / sizeof i32[0]; i++)
		if (!(*i32[i] = malloc(sizeof(int32_t) * T)))
			return SL_ENOMEM;
	w->micro_seq0 = malloc(sizeof(int32_t) * (T + 1));
	w->tables = malloc(sizeof(int32_t) * T * e->max_blocks);
	w->seq_of = malloc(sizeof(int) * T);
	w->id_of = malloc(sizeof(int) * T);
	w->sample_of = malloc(sizeof(int) * T);
	w->take = malloc(sizeof(int) * T);
	w->sampling = malloc(sizeof(kern_sample_params) * T);
	w->sample_pos = malloc(sizeof(int64_t) * T);
	w->logits = logits ? logits : malloc(sizeof(float) * R * V);
	w->lp.chosen = malloc(sizeof(float) * S);
	w->lp.top_ids = malloc(sizeof(int32_t) * S * KERN_MAX_TOP_LOGPROBS);
	w->lp.top = malloc(sizeof(float) * S * KERN_MAX_TOP_LOGPROBS);
	w->hist_off = malloc(sizeof(int32_t) * (T + 1));
	w->hist_ids = malloc(sizeof(int32_t) * (H ? H : 1));
	w->hist_gen = malloc(sizeof(int32_t) * (H ? H : 1));
	w->hist_prompt = malloc(sizeof(int32_t) * (H ? H : 1));
	w->hist_at = malloc(sizeof(int32_t) * V);
	w->bias_off = malloc(sizeof(int32_t) * (T + 1));
	w->bias_ids = malloc(sizeof(int32_t) * S * NODE_PLAN_BIAS_PER_ROW);
	w->bias_val = malloc(sizeof(float) * S * NODE_PLAN_BIAS_PER_ROW);
	if (w->hist_at)
		for (size_t i = 0; i < V; i++)
			w->hist_at[i] = -1;
	return (w->micro_seq0 && w->tables && w->seq_of && w->id_of && w->sample_of && w->take &&
		w->sampling && w->sample_pos && w->logits && w->lp.chosen && w->lp.top_ids &&
		w->lp.top && w->hist_off && w->hist_ids && w->hist_gen && w->hist_prompt &&
		w->hist_at && w->bias_off && w->bias_ids && w->bias_val) ? SL_OK : SL_ENOMEM;
}

static void free_scratch(step_scratch *w, int own_logits)
{
	void *all[] = {w->tokens, w->positions, w->slots, w->q_start, w->q_len, w->kv_len, w->rows,
		       w->sample_rows, w->sampled, w->micro_seq0, w->tables, w->seq_of, w->id_of,
		       w->sample_of, w->take, w->sampling, w->sample_pos,
		       own_logits ? w->logits : NULL, w->lp.chosen,
		       w->lp.top_ids, w->lp.top, w->hist_off, w->hist_ids, w->hist_gen,
		       w->hist_prompt, w->hist_at, w->bias_off, w->bias_ids, w->bias_val};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		free(all[i]);
	free(w->mask_rows);
	free(w->mask_seq);
	free(w->masks);
}

int node_engine_pp_inflight(const model *m)
{
	(void)m;
	const char *env = getenv("SL_PP_INFLIGHT");
	if (env && (!strcmp(env, "0") || !strcmp(env, "1")))
		return env[0] == '1';
	/* Every grid keeps groups in flight. On 4 H200 (2026-11-28) tp 2 x
	 * pp 2 in flight hung at batch 32 until the leader finished sending
	 * each plan to its own stage's tp peers before running the step
	 * (node_step_issue): it blocked in NCCL's first-use connection set-up
	 * while its peers waited in MPI for the rest of the plan. */
	return 1;
}

int node_engine_create(model *m, node_engine **out, char *err, size_t errlen)
{
	node_engine *e = calloc(1, sizeof *e);
	if (!e)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	e->m = m;
	e->prefix_cache = 1;
	e->inflight = node_engine_pp_inflight(m);
	int rc = node_stepper_create(m, &e->stepper, err, errlen);
	if (rc) {
		node_engine_destroy(e);
		return rc;
	}
	e->n_slots = node_step_slots(e->stepper);
	e->fl = calloc((size_t)e->n_slots, sizeof *e->fl);
	e->fifo = calloc((size_t)e->n_slots, sizeof *e->fifo);
	rc = e->fl && e->fifo ? SL_OK : SL_ENOMEM;
	if (!rc)
		rc = kv_pool_create(m->opts.n_kv_blocks, m->opts.block_tokens, &e->pool);
	if (!rc)
		e->max_blocks = kv_blocks_for(e->pool, e->m->cfg.max_pos);
	for (int i = 0; !rc && i < e->n_slots; i++)
		rc = alloc_scratch(e, &e->fl[i].w, i ? e->fl[0].w.logits : NULL);
	if (rc) {
		node_engine_destroy(e);
		return sl_errf(err, errlen, rc, "engine: out of memory");
	}
	for (int i = 0; i < e->n_slots; i++)
		e->fl[i].w.e = e;
	e->mask_words = kern_mask_words(m->cfg.vocab_size);
	if (node_constrain_create(NULL, &m->cfg, &e->cons)) {
		node_engine_destroy(e);
		return sl_errf(err, errlen, SL_ENOMEM, "engine: out of memory");
	}
	e->w = &e->fl[0].w;
	*out = e;
	return SL_OK;
}

int node_engine_set_tokenizer(node_engine *e, const char *path)
{
	node_constrain *c;
	TRY(node_constrain_create(path, &e->m->cfg, &c));
	node_constrain_destroy(e->cons);
	e->cons = c;
	return SL_OK;
}

void node_engine_set_grammar_limit(node_engine *e, int pct)
{
	node_constrain_set_max_uncertain(e->cons, pct);
}

int node_engine_constrain(node_engine *e, sl_constraint_kind kind, const char *text, size_t len,
			  grammar_matcher **out, char *err, size_t errlen)
{
	return node_constrain_matcher(e->cons, kind, text, len, out, err, errlen);
}

/* Every slot's mask scratch, once: a group without constrained requests
 * never holds it. */
static int mask_scratch(node_engine *e)
{
	size_t S = e->m->opts.max_seqs;
	for (int i = 0; i < e->n_slots; i++) {
		step_scratch *w = &e->fl[i].w;
		if (w->masks)
			continue;
		w->mask_rows = malloc(sizeof(int32_t) * S);
		w->mask_seq = malloc(sizeof(int) * S);
		w->masks = malloc(sizeof(uint32_t) * S * e->mask_words);
		if (!w->mask_rows || !w->mask_seq || !w->masks)
			return SL_ENOMEM;
	}
	return SL_OK;
}

/* Below min_tokens, a constrained row's end tokens (the model's EOS ids
 * unless ignore_eos, and its stop ids) come off its mask, as fill_bias
 * bans them for a free row; unless they are all the grammar allows (it
 * is complete): then it ends, min_tokens or not, where a ban would leave
 * no token at all and the row would draw one outside its grammar. */
static void hold_back_ends(const node_engine *e, const seq *s, uint32_t *m)
{
	if (s->n_generated + s->req.n_resumed >= s->req.sampling.min_tokens)
		return;
	const model_config *c = &e->m->cfg;
	int32_t ends[MODEL_MAX_EOS + SL_SAMPLING_MAX_STOP_IDS_NODE];
	int n = 0;
	for (int k = 0; k < c->n_eos && !s->req.ignore_eos; k++)
		ends[n++] = c->eos_ids[k];
	for (int k = 0; k < s->n_stop_ids && n < (int)(sizeof ends / sizeof ends[0]); k++)
		ends[n++] = s->stop_ids[k];
	uint32_t was[sizeof ends / sizeof ends[0]];
	for (int k = 0; k < n; k++) {
		if (ends[k] < 0 || ends[k] >= c->vocab_size) {
			ends[k] = -1;
			continue;
		}
		uint32_t *w = &m[ends[k] / 32], bit = 1u << (ends[k] % 32);
		was[k] = *w & bit;
		*w &= ~bit;
	}
	for (int i = 0; i < e->mask_words; i++)
		if (m[i])
			return; /* something else may follow: the ends wait */
	for (int k = 0; k < n; k++)
		if (ends[k] >= 0)
			m[ends[k] / 32] |= was[k];
}

/* node_plan.fill_masks: each constrained row's allowed tokens, from its
 * matcher's state after the tokens it has taken. A matcher that fails
 * (it should not) leaves its row free rather than failing the step. */
static int fill_masks(void *ctx)
{
	step_scratch *w = ctx;
	node_engine *e = w->e;
	const node_plan *p = NULL;
	for (int i = 0; i < e->n_slots; i++)
		if (&e->fl[i].w == w)
			p = &e->fl[i].p;
	int n = p ? p->n_mask : 0;
	/* one matcher per row, each only its own: rows in parallel (a batch
	 * of 64 constrained rows is 64 masks each step) */
#pragma omp parallel for schedule(dynamic, 1) if (n >= 4)
	for (int j = 0; j < n; j++) {
		uint32_t *m = w->masks + (size_t)j * e->mask_words;
		seq *s = &e->seqs[w->mask_seq[j]];
		if (grammar_matcher_fill_mask(s->gm, m, e->mask_words)) {
			SL_WARN("engine", "sequence %d: grammar mask failed; its row is left free", s->id);
			memset(m, 0xff, sizeof(uint32_t) * e->mask_words);
		}
		hold_back_ends(e, s, m);
	}
	return SL_OK;
}

/* Give back what a sequence holds (KV blocks, its token and log-prob
 * lists) and free its slot. */
static void release_seq(node_engine *e, seq *s)
{
	kv_table_release(e->pool, &s->kv);
	free(s->tokens);
	free(s->lp);
	free(s->lp_ids);
	free(s->lp_top);
	free(s->bhash);
	free(s->bias_ids);
	free(s->bias);
	free(s->stop_ids);
	grammar_matcher_destroy(s->gm);
	s->tokens = NULL, s->lp = NULL, s->lp_ids = NULL, s->lp_top = NULL, s->bhash = NULL;
	s->bias_ids = NULL, s->bias = NULL, s->stop_ids = NULL;
	s->gm = NULL;
	s->used = 0;
}

static int land_step(node_engine *e, double *t0, char *err, size_t errlen);

void node_engine_destroy(node_engine *e)
{
	if (!e)
		return;
	/* the last stage's results of steps still in flight: take them, so
	 * that no send is left pending when the group stops */
	char err[SL_ERRLEN];
	double t0 = sl_now();
	while (!e->broken && e->n_flying > 0 && land_step(e, &t0, err, sizeof err) == SL_OK)
		;
	for (int i = 0; i < e->n_seqs; i++)
		if (e->seqs[i].used)
			release_seq(e, &e->seqs[i]);
	free(e->seqs);
	free(e->order);
	free(e->want);
	free(e->from);
	node_stepper_destroy(e->stepper);
	node_constrain_destroy(e->cons);
	kv_pool_destroy(e->pool);
	for (int i = 0; e->fl && i < e->n_slots; i++)
		free_scratch(&e->fl[i].w, i == 0);
	free(e->fl);
	free(e->fifo);
	free(e);
}

static int push_token(seq *s, int32_t t)
{
	if (s->n_tokens == s->cap) {
		int cap = s->cap ? s->cap * 2 : 64;
		int32_t *nt = realloc(s->tokens, sizeof(int32_t) * cap);
		if (!nt)
			return SL_ENOMEM;
		s->tokens = nt;
		s->cap = cap;
	}
	s->tokens[s->n_tokens++] = t;
	return SL_OK;
}

/* The one range check (common/sampling.h), with repetition_penalty 0 also
 * meaning "off" as the kernels take it (in-process requests leave it 0). */
static int check_sampling(const kern_sample_params *p, int vocab, char *err, size_t errlen)
{
	sl_sampling q = *p;
	if (q.repetition_penalty == 0)
		q.repetition_penalty = 1;
	return sl_sampling_check(&q, vocab, err, errlen);
}

int node_engine_check_request(const node_engine *e, const node_request *r, char *err,
			      size_t errlen)
{
	const model_config *c = &e->m->cfg;
	if (r->n_prompt <= 0)
		return sl_errf(err, errlen, SL_EINVAL, "empty prompt");
	if (r->max_new_tokens <= 0)
		return sl_errf(err, errlen, SL_EINVAL, "max_new_tokens must be > 0");
	if (r->n_resumed < 0 || r->n_resumed >= r->n_prompt)
		return sl_errf(err, errlen, SL_EINVAL, "%d resumed tokens for a prompt of %d: want [0, %d)",
			       r->n_resumed, r->n_prompt, r->n_prompt);
	long total = (long)r->n_prompt + r->max_new_tokens;
	if (total > c->max_pos)
		return sl_errf(err, errlen, SL_EINVAL,
			       "prompt (%d) + max_new_tokens (%d) exceeds the context of %d",
			       r->n_prompt, r->max_new_tokens, c->max_pos);
	if (kv_blocks_for(e->pool, (int)total) > kv_pool_blocks(e->pool))
		return sl_errf(err, errlen, SL_EINVAL, "%ld tokens need more KV blocks than the pool's %d",
			       total, kv_pool_blocks(e->pool));
	for (int i = 0; i < r->n_prompt; i++)
		if (r->prompt[i] < 0 || r->prompt[i] >= c->vocab_size)
			return sl_errf(err, errlen, SL_EINVAL, "prompt token %d at index %d is outside the vocabulary (%d)",
				       r->prompt[i], i, c->vocab_size);
	TRY(check_sampling(&r->sampling, c->vocab_size, err, errlen));
	return sl_token_lists_check(&r->lists, c->vocab_size, SL_SAMPLING_MAX_STOP_IDS_NODE, err,
				    errlen);
}

/* s's own copies of r's token lists (r's are borrowed). */
static int copy_lists(seq *s, const sl_token_lists *t)
{
	size_t nb = (size_t)t->n_bias, ns = (size_t)t->n_stop_ids;
	s->bias_ids = malloc(sizeof(int32_t) * (nb ? nb : 1));
	s->bias = malloc(sizeof(float) * (nb ? nb : 1));
	s->stop_ids = malloc(sizeof(int32_t) * (ns ? ns : 1));
	if (!s->bias_ids || !s->bias || !s->stop_ids)
		return SL_ENOMEM;
	if (nb) {
		memcpy(s->bias_ids, t->bias_ids, sizeof(int32_t) * nb);
		memcpy(s->bias, t->bias, sizeof(float) * nb);
	}
	if (ns)
		memcpy(s->stop_ids, t->stop_ids, sizeof(int32_t) * ns);
	s->n_bias = (int)nb, s->n_stop_ids = (int)ns;
	s->req.lists = (sl_token_lists){0};
	return SL_OK;
}

static seq *new_slot(node_engine *e)
{
	for (int i = 0; i < e->n_seqs; i++)
		if (!e->seqs[i].used)
			return &e->seqs[i];
	if (e->n_seqs == e->cap_seqs) {
		int cap = e->cap_seqs ? e->cap_seqs * 2 : 16;
		seq *ns = realloc(e->seqs, sizeof(seq) * cap);
		if (!ns)
			return NULL;
		e->seqs = ns;
		int *no = realloc(e->order, sizeof(int) * cap);
		if (!no)
			return NULL;
		e->order = no;
		int *nw = realloc(e->want, sizeof(int) * cap);
		if (!nw)
			return NULL;
		e->want = nw;
		int *nf = realloc(e->from, sizeof(int) * cap);
		if (!nf)
			return NULL;
		e->from = nf;
		e->cap_seqs = cap;
	}
	return &e->seqs[e->n_seqs++];
}

/* A resumed request's generated tokens (the prompt's last n_resumed) go
 * through its matcher first, so it goes on from where the lost run was. */
static int resume_matcher(const node_request *r, char *err, size_t errlen)
{
	for (int i = r->n_prompt - r->n_resumed; r->matcher && i < r->n_prompt; i++)
		if (grammar_matcher_accept(r->matcher, r->prompt[i]))
			return sl_errf(err, errlen, SL_EINVAL, "resumed token %d at index %d does not "
				       "follow the request's constraint", r->prompt[i], i);
	return SL_OK;
}

int node_engine_add(node_engine *e, const node_request *r, int *id, char *err, size_t errlen)
{
	int rc = node_engine_check_request(e, r, err, errlen);
	if (!rc && r->matcher && mask_scratch(e))
		rc = sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	if (!rc)
		rc = resume_matcher(r, err, errlen);
	seq *s = rc ? NULL : new_slot(e);
	if (!s) {
		grammar_matcher_destroy(r->matcher);
		return rc ? rc : sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	}
	memset(s, 0, sizeof *s);
	s->used = 1;
	s->flight = -1;
	s->id = e->next_id++;
	s->req = *r;
	s->gm = r->matcher;
	s->req.matcher = NULL;
	s->n_top = kern_top_logprobs(&r->sampling, e->m->cfg.vocab_size);
	s->cacheable = e->prefix_cache && !r->prompt_logits;
	if (copy_lists(s, &r->lists)) {
		release_seq(e, s);
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	}
	for (int i = 0; i < r->n_prompt; i++)
		if (push_token(s, r->prompt[i])) {
			release_seq(e, s);
			return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
		}
	*id = s->id;
	return SL_OK;
}

/* Running sequences in arrival (id) order: FIFO, so a sequence never waits
 * behind one that came later. */
static int running_in_order(node_engine *e)
{
	int n = 0;
	for (int i = 0; i < e->n_seqs; i++) {
		if (!e->seqs[i].used || e->seqs[i].state != SEQ_RUNNING)
			continue;
		int j = n++;
		while (j > 0 && e->seqs[e->order[j - 1]].id > e->seqs[i].id) {
			e->order[j] = e->order[j - 1];
			j--;
		}
		e->order[j] = i;
	}
	return n;
}

/* s's chain hashes (common/block_hash.h) for its first n full blocks,
 * extended as its tokens grow (an allocation only when the list grows,
 * like the token list); NULL when out of memory. */
static const uint64_t *seq_hashes(node_engine *e, seq *s, int n)
{
	if (n > s->cap_bhash) {
		int cap = s->cap_bhash ? s->cap_bhash : 16;
		while (cap < n)
			cap *= 2;
		uint64_t *nh = realloc(s->bhash, sizeof(uint64_t) * cap);
		if (!nh)
			return NULL;
		s->bhash = nh;
		s->cap_bhash = cap;
	}
	if (n > s->n_bhash) {
		sl_block_hashes(s->tokens, kv_pool_block_tokens(e->pool), s->n_bhash, n, s->bhash);
		s->n_bhash = n;
	}
	return s->bhash;
}

/* Where s's uncached tokens start: n_cached once it holds blocks. One
 * without blocks (new, or preempted) would start after the longest
 * prefix the cache holds now, in whole blocks and never its last token,
 * whose logits it needs (a prompt that is cached whole recomputes its
 * last block). Probed only: reserve_for takes the blocks. */
static int start_of(node_engine *e, seq *s)
{
	if (s->kv.n > 0 || !s->cacheable)
		return s->n_cached;
	int bt = kv_pool_block_tokens(e->pool), n = (s->n_tokens - 1) / bt;
	const uint64_t *h = n > 0 ? seq_hashes(e, s, n) : NULL;
	return h ? kv_cache_match(e->pool, h, s->tokens, n) * bt : 0;
}

/* Publish s's blocks that the step just filled: full, K/V written. */
static void publish(node_engine *e, seq *s)
{
	int full = s->n_cached / kv_pool_block_tokens(e->pool);
	if (!s->cacheable || full <= s->n_published)
		return;
	const uint64_t *h = seq_hashes(e, s, full);
	if (!h) /* out of memory: they stay private, nothing else changes */
		return;
	kv_cache_publish(e->pool, &s->kv, h, s->tokens, s->n_published, full);
	s->n_published = full;
}

/* History entries s's sample row may need: one per distinct token it
 * knows, bounded by its length and the vocabulary; 0 without penalties. */
static int hist_bound(const node_engine *e, const seq *s)
{
	if (!kern_has_penalty(&s->req.sampling))
		return 0;
	return s->n_tokens < e->m->cfg.vocab_size ? s->n_tokens : e->m->cfg.vocab_size;
}

/* Token budget of running sequence k (order index) in want[k], decodes
 * first: every sequence with one token left gets it (FIFO) before any
 * prefill chunk, so a long prompt never stalls the sequences already
 * generating; then prefill chunks in FIFO order with what remains. At
 * most max_ns sequences, none already in a step in flight. */
static void plan_budget(node_engine *e, int n_run, int *want, int max_ns)
{
	int T = e->m->opts.step_tokens, R = e->m->opts.max_rows, S = e->m->opts.max_seqs;
	int H = e->m->opts.max_hist, n_tok = 0, n_rows = 0, ns = 0, n_hist = 0;
	S = max_ns < S ? max_ns : S;
	for (int k = 0; k < n_run; k++) {
		seq *s = &e->seqs[e->order[k]];
		want[k] = 0;
		e->from[k] = s->flight < 0 ? start_of(e, s) : s->n_tokens;
	}
	for (int pass = 0; pass < 2; pass++)
		for (int k = 0; k < n_run && n_tok < T && n_rows < R && ns < S; k++) {
			seq *s = &e->seqs[e->order[k]];
			int left = s->n_tokens - e->from[k], t = left;
			if (s->flight >= 0 || (t == 1) != (pass == 0))
				continue;
			t = t < T - n_tok ? t : T - n_tok;
			/* with prompt logits every prompt row is a logits row */
			if (s->req.prompt_logits && t > R - n_rows)
				t = R - n_rows;
			/* a chunk that reaches the last known token samples, and its
			 * history must fit: else it stops one short (or, a decode,
			 * sits out); the oldest always fits (max_hist >= one sequence) */
			int hist = t == left ? hist_bound(e, s) : 0;
			if (n_hist + hist > H) {
				if (t == 1)
					continue;
				t--, hist = 0;
			}
			int rows = s->req.prompt_logits ? t : 1;
			want[k] = t;
			ns++;
			n_tok += t;
			n_rows += rows;
			n_hist += hist;
		}
}

/* Give up a sequence's KV blocks; it stays running with every token it
 * knows (prompt and generated) and recomputes them as a prefill when
 * blocks are free again. Sampling is keyed by (seed, position), so the
 * tokens it goes on to generate are the ones it would have. */
static void preempt(node_engine *e, seq *s)
{
	kv_table_release(e->pool, &s->kv); /* its published blocks stay cached, idle */
	s->n_cached = 0;
	s->n_published = 0;
	e->stats.preemptions++;
}

/* The newest running sequence after order index k that holds blocks, or
 * -1. Never one in a step in flight: its result comes back to it. */
static int newest_holder(const node_engine *e, int k, int n_run)
{
	for (int v = n_run - 1; v > k; v--)
		if (e->seqs[e->order[v]].kv.n > 0 && e->seqs[e->order[v]].flight < 0)
			return v;
	return -1;
}

/* A sequence without blocks starts: it takes its cached prefix (at most
 * what plan_budget probed; blocks that older sequences evicted since
 * leave a shorter hit, and the same want[k] tokens then stop short of
 * the end) and reserves blocks for want[k] tokens after it. All or
 * nothing: 0 when the chunk does not fit, holding no blocks. */
static int start(node_engine *e, seq *s, int from, int want)
{
	int bt = kv_pool_block_tokens(e->pool), hit = 0;
	if (from >= bt)
		hit = kv_cache_acquire(e->pool, &s->kv, s->bhash, s->tokens, from / bt);
	if (kv_table_reserve(e->pool, &s->kv, hit * bt + want)) {
		kv_table_release(e->pool, &s->kv); /* the hit goes back to the cache */
		return 0;
	}
	s->n_cached = hit * bt;
	s->n_published = hit;
	if (s->cacheable) {
		e->stats.prefix_queried_tokens += s->n_tokens;
		e->stats.prefix_hit_tokens += s->n_cached;
	}
	return want;
}

/* Reserve KV for want[k] tokens of sequence k; returns the tokens it may
 * take (0: it sits this step out). A sequence that holds a cache preempts
 * newer ones while the pool is short and, with none left, takes what fits
 * (a shorter prefill chunk, or nothing). One without a cache (new, or
 * preempted) starts only when its chunk fits in free blocks, and only
 * while no older one was turned away and nothing was preempted this step
 * (*closed): starting it would take blocks from an older sequence or hand
 * just-freed blocks to one that would likely be preempted again. */
static int reserve_for(node_engine *e, int k, int n_run, int *want, int *closed)
{
	seq *s = &e->seqs[e->order[k]];
	if (s->kv.n == 0) {
		if (*closed || start(e, s, e->from[k], want[k]) == 0) {
			*closed = 1;
			return 0;
		}
		return want[k];
	}
	while (kv_table_reserve(e->pool, &s->kv, s->n_cached + want[k])) {
		int v = newest_holder(e, k, n_run);
		if (v < 0)
			break;
		preempt(e, &e->seqs[e->order[v]]);
		want[v] = 0;
		*closed = 1;
	}
	if (kv_blocks_for(e->pool, s->n_cached + want[k]) <= s->kv.n)
		return want[k];
	int bt = kv_pool_block_tokens(e->pool);
	int fit = (s->kv.n + kv_pool_free_blocks(e->pool)) * bt - s->n_cached;
	if (fit <= 0)
		return 0;
	return kv_table_reserve(e->pool, &s->kv, s->n_cached + fit) ? 0 : fit;
}

/* Pick (sequence, token count) pairs for the step: the token budget by
 * plan_budget, then KV blocks in FIFO order, so an older sequence always
 * wins blocks from a newer one and the oldest is never preempted. Some
 * sequence always progresses: the oldest holding a cache can preempt all
 * newer ones and fits alone (node_engine_add checks); with no caches held
 * the pool is empty and the oldest starts. Returns how many were picked. */
static int choose(node_engine *e, int n_run, int *take, int max_ns)
{
	int *want = e->want, ns = 0, closed = 0;
	plan_budget(e, n_run, want, max_ns);
	for (int k = 0; k < n_run; k++) {
		if (want[k] == 0 || (want[k] = reserve_for(e, k, n_run, want, &closed)) == 0)
			continue;
		e->w->seq_of[ns] = e->order[k];
		take[ns++] = want[k];
	}
	return ns;
}

/* Sample row p->n_sample's penalty history: one entry per distinct token
 * of s's prompt and generated text, in first-seen order, for a request
 * with penalties (an empty row otherwise). plan_budget made room for it. */
static void fill_hist(node_engine *e, node_plan *p, const seq *s)
{
	step_scratch *w = e->w;
	int n = p->n_hist, max = e->m->opts.max_hist;
	for (int i = 0; kern_has_penalty(&s->req.sampling) && i < s->n_tokens; i++) {
		int32_t id = s->tokens[i];
		int at = w->hist_at[id];
		if (at < 0) {
			if (n == max) /* cannot happen: plan_budget bounds it */
				break;
			at = w->hist_at[id] = n++;
			w->hist_ids[at] = id, w->hist_gen[at] = 0, w->hist_prompt[at] = 0;
		}
		if (i < s->req.n_prompt - s->req.n_resumed) /* resumed ids count as generated */
			w->hist_prompt[at] = 1;
		else
			w->hist_gen[at]++;
	}
	for (int j = p->n_hist; j < n; j++)
		w->hist_at[w->hist_ids[j]] = -1;
	w->hist_off[p->n_sample + 1] = n;
	p->n_hist = n;
}

/* id banned (-INFINITY) in the bias row that starts at row0 and has n
 * entries so far: its entry changed if it has one (ids stay distinct),
 * else a new one. Returns the new n. */
static int ban(step_scratch *w, int row0, int n, int32_t id)
{
	for (int j = row0; j < n; j++)
		if (w->bias_ids[j] == id) {
			w->bias_val[j] = -INFINITY;
			return n;
		}
	w->bias_ids[n] = id, w->bias_val[n] = -INFINITY;
	return n + 1;
}

/* Sample row p->n_sample's logit bias: s's logit_bias, and while s has
 * generated fewer than min_tokens (resumed ones count), a ban of the
 * model's EOS ids (unless ignore_eos) and of its stop ids, so neither can
 * end it early; a constrained row has them held back in its mask instead
 * (hold_back_ends), where a complete grammar can still end it. At most
 * NODE_PLAN_BIAS_PER_ROW entries (the limits of sl_token_lists_check and
 * MODEL_MAX_EOS). */
static void fill_bias(node_engine *e, node_plan *p, const seq *s)
{
	step_scratch *w = e->w;
	int row0 = p->n_bias, n = row0;
	for (int i = 0; i < s->n_bias; i++)
		w->bias_ids[n] = s->bias_ids[i], w->bias_val[n++] = s->bias[i];
	if (!s->gm && s->n_generated + s->req.n_resumed < s->req.sampling.min_tokens) {
		const model_config *c = &e->m->cfg;
		for (int k = 0; k < c->n_eos && !s->req.ignore_eos; k++)
			n = ban(w, row0, n, c->eos_ids[k]);
		for (int k = 0; k < s->n_stop_ids; k++)
			n = ban(w, row0, n, s->stop_ids[k]);
	}
	w->bias_off[p->n_sample + 1] = n;
	p->n_bias = n;
}

/* Fill step sequence k with `take` tokens of its sequence. */
static void fill_seq(node_engine *e, node_plan *p, int k, int take, int stride)
{
	step_scratch *w = e->w;
	seq *s = &e->seqs[w->seq_of[k]];
	kern_paged_batch *b = &p->b;
	int bt = kv_pool_block_tokens(e->pool), t0 = b->n_tokens;
	w->q_start[k] = t0;
	w->q_len[k] = take;
	w->kv_len[k] = s->n_cached + take;
	memcpy(w->tables + (size_t)k * stride, s->kv.blocks, sizeof(int32_t) * s->kv.n);
	for (int j = s->kv.n; j < stride; j++)
		w->tables[(size_t)k * stride + j] = 0;
	w->sample_of[k] = -1;
	w->id_of[k] = s->id;
	for (int i = 0; i < take; i++) {
		int pos = s->n_cached + i;
		w->tokens[t0 + i] = s->tokens[pos];
		w->positions[t0 + i] = pos;
		w->slots[t0 + i] = s->kv.blocks[pos / bt] * bt + pos % bt;
		int last = pos == s->n_tokens - 1;
		if ((s->req.prompt_logits && pos < s->req.n_prompt) || last) {
			if (last) {
				w->sample_of[k] = p->n_sample;
				w->sample_rows[p->n_sample] = p->n_rows;
				w->sampling[p->n_sample] = s->req.sampling;
				if (s->gm) {
					w->mask_rows[p->n_mask] = p->n_rows;
					w->mask_seq[p->n_mask++] = w->seq_of[k];
				}
				fill_hist(e, p, s);
				fill_bias(e, p, s);
				w->sample_pos[p->n_sample++] = s->n_tokens;
			}
			w->rows[p->n_rows++] = t0 + i;
		}
	}
	b->n_tokens += take;
	b->max_q_len = take > b->max_q_len ? take : b->max_q_len;
	b->max_kv_len = w->kv_len[k] > b->max_kv_len ? w->kv_len[k] : b->max_kv_len;
}

/* Split ns sequences into up to `parts` contiguous micro-batches of about
 * equal token counts, so pipeline stages can overlap. */
static int split_micro(node_engine *e, int ns, int n_tok, int parts)
{
	int32_t *cut = e->w->micro_seq0;
	int n = 0, acc = 0;
	parts = parts < ns ? parts : ns;
	cut[n++] = 0;
	for (int k = 0; k < ns - 1 && n < parts; k++) {
		acc += e->w->q_len[k];
		if ((long)acc * parts >= (long)n_tok * n)
			cut[n++] = k + 1;
	}
	cut[n] = ns;
	return n;
}

static int build_plan(node_engine *e, node_plan *p, int ns, const int *take, int parts)
{
	step_scratch *w = e->w;
	int stride = 1;
	for (int k = 0; k < ns; k++) {
		int nb = e->seqs[w->seq_of[k]].kv.n;
		stride = nb > stride ? nb : stride;
	}
	*p = (node_plan){.cmd = NODE_PLAN_STEP, .rows = w->rows, .sample_rows = w->sample_rows,
			 .sampling = w->sampling, .sample_pos = w->sample_pos,
			 .micro_seq0 = w->micro_seq0};
	w->hist_off[0] = 0;
	w->bias_off[0] = 0;
	p->b = (kern_paged_batch){.tokens = w->tokens, .positions = w->positions, .slots = w->slots,
				  .q_start = w->q_start, .q_len = w->q_len, .kv_len = w->kv_len,
				  .block_tables = w->tables, .max_blocks = stride, .n_seqs = ns,
				  .block_tokens = kv_pool_block_tokens(e->pool)};
	int prefill = 0;
	for (int k = 0; k < ns; k++) {
		seq *s = &e->seqs[w->seq_of[k]];
		prefill |= take[k] > 1 || s->n_cached < s->req.n_prompt;
		p->want_logits |= s->req.prompt_logits != NULL;
		fill_seq(e, p, k, take[k], stride);
	}
	p->n_micro = split_micro(e, ns, p->b.n_tokens, parts);
	if (p->n_hist > 0) /* only steps with a penalised row carry a history */
		p->hist = (kern_token_hist){w->hist_off, w->hist_ids, w->hist_gen, w->hist_prompt};
	if (p->n_bias > 0) /* only steps with a biased row carry bias: the rest pay nothing */
		p->bias = (kern_logit_bias){w->bias_off, w->bias_ids, w->bias_val};
	if (p->n_mask > 0) { /* only steps with a constrained row carry masks */
		p->mask_words = e->mask_words;
		p->mask_rows = w->mask_rows;
		p->masks = w->masks;
		p->fill_masks = fill_masks;
		p->fill_ctx = w;
	}
	return prefill;
}

/* Keep sample row si's log-probs for s's newest token. */
static int keep_logprobs(node_engine *e, seq *s, int si)
{
	const kern_logprobs *lp = &e->w->lp;
	int g = s->n_generated, nt = s->n_top;
	if (g == s->lp_cap) {
		int cap = s->lp_cap ? s->lp_cap * 2 : 64;
		float *l = realloc(s->lp, sizeof(float) * cap);
		if (l)
			s->lp = l;
		int32_t *ids = realloc(s->lp_ids, sizeof(int32_t) * cap * (nt ? nt : 1));
		if (ids)
			s->lp_ids = ids;
		float *top = realloc(s->lp_top, sizeof(float) * cap * (nt ? nt : 1));
		if (top)
			s->lp_top = top;
		if (!l || !ids || !top)
			return SL_ENOMEM;
		s->lp_cap = cap;
	}
	s->lp[g] = lp->chosen[si];
	memcpy(s->lp_ids + (size_t)g * nt, lp->top_ids + (size_t)si * KERN_MAX_TOP_LOGPROBS,
	       sizeof(int32_t) * nt);
	memcpy(s->lp_top + (size_t)g * nt, lp->top + (size_t)si * KERN_MAX_TOP_LOGPROBS,
	       sizeof(float) * nt);
	return SL_OK;
}

/* s's sampled token t (sample row si) in: its log-probs, EOS, length. */
static int finish_seq(node_engine *e, seq *s, int32_t t, int si)
{
	if (kern_wants_logprobs(&s->req.sampling) && keep_logprobs(e, s, si))
		return SL_ENOMEM;
	if (push_token(s, t))
		return SL_ENOMEM;
	s->n_generated++;
	const model_config *c = &e->m->cfg;
	for (int k = 0; k < c->n_eos && !s->req.ignore_eos; k++)
		if (t == c->eos_ids[k])
			s->state = SEQ_DONE_EOS;
	for (int k = 0; k < s->n_stop_ids; k++) /* stop_token_ids end it as EOS does */
		if (t == s->stop_ids[k])
			s->state = SEQ_DONE_EOS;
	/* the mask allowed only what the grammar takes; a complete grammar
	 * allowed only EOS, which ends the sequence even with ignore_eos */
	if (s->gm && grammar_matcher_accept(s->gm, t)) {
		SL_WARN("engine", "sequence %d: token %d outside its grammar; it ends here", s->id, t);
		s->state = SEQ_DONE_EOS;
	}
	if (s->gm && grammar_matcher_is_terminated(s->gm))
		s->state = SEQ_DONE_EOS;
	if (s->state == SEQ_RUNNING && s->n_generated >= s->req.max_new_tokens)
		s->state = SEQ_DONE_LENGTH;
	return SL_OK;
}

/* After the step: prompt logits out, cache counts up, sampled tokens in. */
static int apply_step(node_engine *e, const node_plan *p)
{
	step_scratch *w = e->w;
	int V = e->m->cfg.vocab_size, row = 0;
	for (int k = 0; k < p->b.n_seqs; k++) {
		seq *s = &e->seqs[w->seq_of[k]];
		if (!s->used || s->id != w->id_of[k]) /* dropped while in flight */
			continue;
		s->flight = -1;
		for (int i = 0; i < w->q_len[k]; i++) {
			int pos = s->n_cached + i;
			while (row < p->n_rows && w->rows[row] < w->q_start[k] + i)
				row++;
			if (s->req.prompt_logits && pos < s->req.n_prompt)
				memcpy(s->req.prompt_logits + (size_t)pos * V,
				       w->logits + (size_t)row * V, sizeof(float) * V);
		}
		s->n_cached += w->q_len[k];
		publish(e, s);
		int si = w->sample_of[k];
		if (si >= 0 && finish_seq(e, s, w->sampled[si], si))
			return SL_ENOMEM;
		/* a finished sequence's cache is never read again: free it now,
		 * not at take, so running sequences can grow into it */
		if (s->state != SEQ_RUNNING)
			kv_table_release(e->pool, &s->kv);
	}
	return SL_OK;
}

/* Steps in flight at once: pp in-flight groups, or one (pp 1, the
 * micro-batch schedule, or a running request that wants prompt logits:
 * the last stage sends those back while the leader waits for them). */
static int step_depth(node_engine *e, int n_run)
{
	if (!e->inflight || e->n_slots == 1)
		return 1;
	for (int k = 0; k < n_run; k++)
		if (e->seqs[e->order[k]].req.prompt_logits)
			return 1;
	return e->n_slots;
}

/* Plan a step from the running sequences not in flight, at most a
 * 1/depth share of all running ones (so the groups stay even), and issue
 * it from a free slot. *issued 0: no sequence could take a token. */
static int issue_step(node_engine *e, int n_run, int depth, int *issued, double *t0, char *err,
		      size_t errlen)
{
	int slot = 0;
	while (e->fl[slot].busy)
		slot++;
	flight *f = &e->fl[slot];
	e->w = &f->w;
	int ns = choose(e, n_run, f->w.take, (n_run + depth - 1) / depth);
	if (!(*issued = ns > 0))
		return SL_OK;
	f->prefill = build_plan(e, &f->p, ns, f->w.take, depth == 1 ? e->m->shard.grid.pp : 1);
	for (int k = 0; k < ns; k++)
		e->seqs[f->w.seq_of[k]].flight = slot;
	f->busy = 1;
	e->stats.overlapped_steps += e->n_flying > 0;
	e->fifo[(e->fifo_head + e->n_flying++) % e->n_slots] = slot;
	if (*t0 == 0)
		*t0 = sl_now();
	int rc = node_step_issue(e->stepper, slot, &f->p, f->w.sampled, &f->w.lp, f->w.logits, err,
				 errlen);
	e->broken |= rc != SL_OK;
	return rc;
}

/* Collect the oldest step in flight and apply it; its wall time is the
 * time since *t0 (steps overlap: the sum over steps is the elapsed time). */
static int land_step(node_engine *e, double *t0, char *err, size_t errlen)
{
	flight *f = &e->fl[e->fifo[e->fifo_head]];
	e->fifo_head = (e->fifo_head + 1) % e->n_slots;
	e->n_flying--;
	f->busy = 0;
	e->w = &f->w;
	int rc = node_step_collect(e->stepper, &f->p, f->w.sampled, &f->w.lp, f->w.logits, err,
				   errlen);
	if (rc) {
		e->broken = 1;
		return rc;
	}
	if ((rc = apply_step(e, &f->p)))
		return sl_errf(err, errlen, rc, "out of memory");
	double now = sl_now(), dt = now - *t0;
	*t0 = now;
	e->stats.steps++;
	if (f->prefill)
		e->stats.prefill_s += dt, e->stats.prefill_tokens += f->p.b.n_tokens;
	else
		e->stats.decode_s += dt, e->stats.decode_tokens += f->p.b.n_tokens, e->stats.decode_steps++;
	return SL_OK;
}

/* Fill the pipeline (every free slot that can take sequences gets a
 * step), then collect the oldest step. With pp 1 that is one step,
 * issued and collected. When nothing runs any more, steps still in
 * flight (of dropped sequences) are collected too. */
int node_engine_step(node_engine *e, int *n_active, char *err, size_t errlen)
{
	int rc, issued = 1, n_run = running_in_order(e), depth = step_depth(e, n_run);
	double t0 = 0;
	*n_active = n_run;
	while (issued && e->n_flying < depth)
		if ((rc = issue_step(e, n_run, depth, &issued, &t0, err, errlen)))
			return rc;
	if (e->n_flying == 0 && n_run > 0) /* cannot happen: the oldest always fits */
		return sl_errf(err, errlen, SL_ENOMEM, "KV pool (%d blocks) holds no running sequence",
			       kv_pool_blocks(e->pool));
	if (t0 == 0)
		t0 = sl_now();
	while (e->n_flying > 0) {
		if ((rc = land_step(e, &t0, err, errlen)))
			return rc;
		if ((n_run = running_in_order(e)) > 0)
			break;
	}
	*n_active = n_run;
	return SL_OK;
}

static seq *find_seq(node_engine *e, int id)
{
	for (int i = 0; i < e->n_seqs; i++)
		if (e->seqs[i].used && e->seqs[i].id == id)
			return &e->seqs[i];
	return NULL;
}

/* out's log-prob lists: copies of s's (none when it did not ask). */
static int take_logprobs(const seq *s, node_result *out)
{
	size_t n = (size_t)s->n_generated, nt = (size_t)s->n_top, all = n * nt > 0 ? n * nt : 1;
	if (!kern_wants_logprobs(&s->req.sampling))
		return SL_OK;
	out->top_n = s->n_top;
	out->logprobs = malloc(sizeof(float) * (n ? n : 1));
	out->top_ids = malloc(sizeof(int32_t) * all);
	out->top_logprobs = malloc(sizeof(float) * all);
	if (!out->logprobs || !out->top_ids || !out->top_logprobs)
		return SL_ENOMEM;
	if (n) {
		memcpy(out->logprobs, s->lp, sizeof(float) * n);
		memcpy(out->top_ids, s->lp_ids, sizeof(int32_t) * n * nt);
		memcpy(out->top_logprobs, s->lp_top, sizeof(float) * n * nt);
	}
	return SL_OK;
}

int node_engine_take(node_engine *e, int id, node_result *out)
{
	seq *s = find_seq(e, id);
	if (!s)
		return SL_ENOTFOUND;
	int n = s->n_tokens - s->req.n_prompt;
	*out = (node_result){.n_tokens = n, .finish = s->state};
	out->tokens = malloc(sizeof(int32_t) * (n > 0 ? n : 1));
	if (!out->tokens || take_logprobs(s, out)) {
		node_result_free(out);
		return SL_ENOMEM;
	}
	memcpy(out->tokens, s->tokens + s->req.n_prompt, sizeof(int32_t) * n);
	release_seq(e, s);
	return SL_OK;
}

void node_result_free(node_result *r)
{
	if (!r)
		return;
	free(r->tokens);
	free(r->logprobs);
	free(r->top_ids);
	free(r->top_logprobs);
	*r = (node_result){0};
}

int node_generate(node_engine *e, int n, const node_request *reqs, node_result *results,
		  char *err, size_t errlen)
{
	int *ids = malloc(sizeof(int) * (n > 0 ? n : 1)), rc = SL_OK, k = 0, active = 1;
	if (!ids)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	while (k < n && !rc)
		if (!(rc = node_engine_add(e, &reqs[k], &ids[k], err, errlen)))
			k++;
	while (!rc && active > 0)
		rc = node_engine_step(e, &active, err, errlen);
	for (int i = 0; i < k; i++) {
		node_result r = {0};
		/* take every added sequence, even after an error, to free its blocks */
		if (node_engine_take(e, ids[i], &r) == SL_OK && !rc)
			results[i] = r;
		else
			node_result_free(&r);
	}
	free(ids);
	return rc;
}

const node_stats *node_engine_stats(const node_engine *e) { return &e->stats; }
int node_engine_free_blocks(const node_engine *e) { return kv_pool_free_blocks(e->pool); }

int node_engine_drop(node_engine *e, int id)
{
	seq *s = find_seq(e, id);
	if (!s)
		return SL_ENOTFOUND;
	release_seq(e, s);
	return SL_OK;
}

int node_engine_peek(const node_engine *e, int id, const int32_t **gen, int *n_gen,
		     node_seq_state *state)
{
	seq *s = find_seq((node_engine *)e, id);
	if (!s)
		return SL_ENOTFOUND;
	*gen = s->tokens + s->req.n_prompt;
	*n_gen = s->n_tokens - s->req.n_prompt;
	*state = s->state;
	return SL_OK;
}

int node_engine_peek_logprobs(const node_engine *e, int id, node_logprobs *out)
{
	seq *s = find_seq((node_engine *)e, id);
	if (!s)
		return SL_ENOTFOUND;
	*out = (node_logprobs){0};
	if (kern_wants_logprobs(&s->req.sampling))
		*out = (node_logprobs){.logprobs = s->lp, .top_ids = s->lp_ids,
				       .top_logprobs = s->lp_top, .top_n = s->n_top};
	return SL_OK;
}

int node_engine_blocks_wanted(const node_engine *e)
{
	int n = 0;
	for (int i = 0; i < e->n_seqs; i++) {
		const seq *s = &e->seqs[i];
		if (s->used && s->state == SEQ_RUNNING) {
			int need = kv_blocks_for(e->pool, s->n_tokens) - s->kv.n;
			n += need > 0 ? need : 0;
		}
	}
	return n;
}

int node_engine_total_blocks(const node_engine *e) { return kv_pool_blocks(e->pool); }
int node_engine_blocks_for(const node_engine *e, int n_tokens) { return kv_blocks_for(e->pool, n_tokens); }
const model_config *node_engine_config(const node_engine *e) { return &e->m->cfg; }

void node_engine_set_prefix_cache(node_engine *e, int on) { e->prefix_cache = on != 0; }

void node_engine_cache_stats(const node_engine *e, node_cache_stats *out)
{
	kv_cache_counts c;
	kv_cache_counts_get(e->pool, &c);
	*out = (node_cache_stats){.enabled = e->prefix_cache,
				  .queried_tokens = e->stats.prefix_queried_tokens,
				  .hit_tokens = e->stats.prefix_hit_tokens, .evictions = c.evictions,
				  .cached_blocks = c.cached_blocks, .idle_blocks = c.idle_blocks};
}

void node_engine_flush_cache(node_engine *e) { kv_cache_flush(e->pool); }

int node_engine_check_pool(const node_engine *e, char *err, size_t errlen)
{
	return kv_pool_check(e->pool, err, errlen);
}

int node_engine_cache_events_enable(node_engine *e) { return kv_cache_events_enable(e->pool); }
void node_engine_cache_events_resync(node_engine *e) { kv_cache_events_resync(e->pool); }
int node_engine_cache_events_pending(const node_engine *e) { return kv_cache_events_pending(e->pool); }

void node_engine_cache_events_take(node_engine *e, const uint64_t **stored, int *n_stored,
				   const uint64_t **evicted, int *n_evicted, int *reset)
{
	kv_cache_events_take(e->pool, stored, n_stored, evicted, n_evicted, reset);
}
