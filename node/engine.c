/*
 * engine.c — sequence bookkeeping and the step loop (see engine.h).
 * All step arrays are sized once for the model's token budget; a step
 * allocates nothing but the growth of a sequence's token list.
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "sl.h"

typedef struct seq {
	int id, used;
	node_request req;
	int32_t *tokens;      /* prompt then generated */
	int n_tokens, cap;
	int n_cached;         /* tokens whose K/V are in the cache */
	int n_generated;
	node_seq_state state;
	kv_table kv;
} seq;

struct node_engine {
	model *m;
	kv_pool *pool;
	seq *seqs;
	int n_seqs, cap_seqs, next_id;
	node_stats stats;
	/* step scratch, [max_tokens] each unless noted */
	int32_t *tokens, *positions, *slots, *q_start, *q_len, *kv_len, *rows;
	int32_t *tables;      /* [max_tokens, max_blocks] */
	int max_blocks;
	int *step_seq;        /* [max_tokens]: engine index of each sequence in the step */
	float *logits;        /* [max_tokens, vocab] */
	void *sample_work;
};

static int alloc_scratch(node_engine *e)
{
	int T = e->m->opts.max_tokens, V = e->m->shard.vocab;
	e->max_blocks = kv_blocks_for(e->pool, e->m->cfg.max_pos);
	int32_t **arr[] = {&e->tokens, &e->positions, &e->slots, &e->q_start, &e->q_len, &e->kv_len,
			   &e->rows};
	for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++)
		if (!(*arr[i] = malloc(sizeof(int32_t) * T)))
			return SL_ENOMEM;
	e->tables = malloc(sizeof(int32_t) * (size_t)T * e->max_blocks);
	e->step_seq = malloc(sizeof(int) * T);
	e->logits = malloc(sizeof(float) * (size_t)T * V);
	e->sample_work = malloc(kern_sample_work_bytes(V));
	return (e->tables && e->step_seq && e->logits && e->sample_work) ? SL_OK : SL_ENOMEM;
}

int node_engine_create(model *m, node_engine **out, char *err, size_t errlen)
{
	if (m->shard.tp != 1 || m->shard.pp != 1)
		return sl_errf(err, errlen, SL_ENOTSUP, "the local engine runs tp=1 pp=1 only");
	node_engine *e = calloc(1, sizeof *e);
	if (!e)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	e->m = m;
	int rc = kv_pool_create(m->opts.n_kv_blocks, m->opts.block_tokens, &e->pool);
	if (!rc)
		rc = alloc_scratch(e);
	if (rc) {
		node_engine_destroy(e);
		return sl_errf(err, errlen, rc, "engine: out of memory");
	}
	*out = e;
	return SL_OK;
}

void node_engine_destroy(node_engine *e)
{
	if (!e)
		return;
	for (int i = 0; i < e->n_seqs; i++)
		if (e->seqs[i].used) {
			kv_table_release(e->pool, &e->seqs[i].kv);
			free(e->seqs[i].tokens);
		}
	free(e->seqs);
	kv_pool_destroy(e->pool);
	free(e->tokens), free(e->positions), free(e->slots), free(e->q_start), free(e->q_len);
	free(e->kv_len), free(e->rows), free(e->tables), free(e->step_seq), free(e->logits);
	free(e->sample_work);
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

static int validate_request(const node_engine *e, const node_request *r, char *err, size_t errlen)
{
	const model_config *c = &e->m->cfg;
	if (r->n_prompt <= 0)
		return sl_errf(err, errlen, SL_EINVAL, "empty prompt");
	if (r->max_new_tokens <= 0)
		return sl_errf(err, errlen, SL_EINVAL, "max_new_tokens must be > 0");
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
	if (r->sampling.top_p <= 0 || r->sampling.top_p > 1)
		return sl_errf(err, errlen, SL_EINVAL, "top_p must be in (0, 1]");
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
		e->cap_seqs = cap;
	}
	return &e->seqs[e->n_seqs++];
}

int node_engine_add(node_engine *e, const node_request *r, int *id, char *err, size_t errlen)
{
	int rc = validate_request(e, r, err, errlen);
	if (rc)
		return rc;
	seq *s = new_slot(e);
	if (!s)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	memset(s, 0, sizeof *s);
	s->used = 1;
	s->id = e->next_id++;
	s->req = *r;
	for (int i = 0; i < r->n_prompt; i++)
		if (push_token(s, r->prompt[i])) {
			free(s->tokens);
			s->used = 0;
			return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
		}
	*id = s->id;
	return SL_OK;
}

/* Running sequences in arrival (id) order: FIFO, so a sequence never waits
 * behind one that came later. */
static int running_in_order(node_engine *e, int *order)
{
	int n = 0;
	for (int i = 0; i < e->n_seqs; i++) {
		if (!e->seqs[i].used || e->seqs[i].state != SEQ_RUNNING)
			continue;
		int j = n++;
		while (j > 0 && e->seqs[order[j - 1]].id > e->seqs[i].id) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
	return n;
}

/* Add `take` tokens of sequence s (engine index si) as step sequence ns. */
static void plan_seq(node_engine *e, int si, int take, int ns, int *n_tok, int *n_rows,
		     int *sample_row)
{
	seq *s = &e->seqs[si];
	int bt = kv_pool_block_tokens(e->pool), t0 = *n_tok;
	e->q_start[ns] = t0;
	e->q_len[ns] = take;
	e->kv_len[ns] = s->n_cached + take;
	memcpy(e->tables + (size_t)ns * e->max_blocks, s->kv.blocks, sizeof(int32_t) * s->kv.n);
	for (int i = 0; i < take; i++) {
		int p = s->n_cached + i;
		e->tokens[t0 + i] = s->tokens[p];
		e->positions[t0 + i] = p;
		e->slots[t0 + i] = s->kv.blocks[p / bt] * bt + p % bt;
		/* a row's logits are wanted for prompt logits or to sample */
		int want_prompt = s->req.prompt_logits && p < s->req.n_prompt;
		int last = p == s->n_tokens - 1;
		if (want_prompt || last) {
			if (last)
				*sample_row = *n_rows;
			e->rows[(*n_rows)++] = t0 + i;
		}
	}
	e->step_seq[ns] = si;
	*n_tok += take;
}

static int finish_seq(node_engine *e, seq *s, const float *logits)
{
	int V = e->m->cfg.vocab_size;
	int32_t t = kern_sample_cpu(logits, V, &s->req.sampling, (uint64_t)s->n_tokens, e->sample_work);
	if (push_token(s, t))
		return SL_ENOMEM;
	s->n_generated++;
	const model_config *c = &e->m->cfg;
	for (int k = 0; k < c->n_eos && !s->req.ignore_eos; k++)
		if (t == c->eos_ids[k])
			s->state = SEQ_DONE_EOS;
	if (s->state == SEQ_RUNNING && s->n_generated >= s->req.max_new_tokens)
		s->state = SEQ_DONE_LENGTH;
	return SL_OK;
}

/* After the forward pass: prompt logits out, cache counts up, samples in. */
static int apply_step(node_engine *e, int ns, const int *sample_rows, const int *row_base)
{
	int V = e->m->cfg.vocab_size;
	for (int k = 0; k < ns; k++) {
		seq *s = &e->seqs[e->step_seq[k]];
		if (s->req.prompt_logits)
			for (int i = 0; i < e->q_len[k]; i++) {
				int p = s->n_cached + i;
				if (p < s->req.n_prompt)
					memcpy(s->req.prompt_logits + (size_t)p * V,
					       e->logits + (size_t)(row_base[k] + i) * V, sizeof(float) * V);
			}
		s->n_cached += e->q_len[k];
		if (sample_rows[k] >= 0) {
			int rc = finish_seq(e, s, e->logits + (size_t)sample_rows[k] * V);
			if (rc)
				return rc;
		}
	}
	return SL_OK;
}

int node_engine_step(node_engine *e, int *n_active, char *err, size_t errlen)
{
	int T = e->m->opts.max_tokens;
	int order[e->n_seqs > 0 ? e->n_seqs : 1], sample_rows[T], row_base[T];
	int n_run = running_in_order(e, order), n_tok = 0, ns = 0, n_rows = 0, prefill = 0;
	int max_q = 0, max_kv = 0;
	for (int k = 0; k < n_run && n_tok < T; k++) {
		seq *s = &e->seqs[order[k]];
		int take = s->n_tokens - s->n_cached;
		if (take > T - n_tok)
			take = T - n_tok;
		if (kv_table_reserve(e->pool, &s->kv, s->n_cached + take)) {
			if (ns > 0)
				break;
			return sl_errf(err, errlen, SL_ENOMEM, "KV pool exhausted (%d blocks); raise --kv-blocks",
				       kv_pool_blocks(e->pool));
		}
		sample_rows[ns] = -1;
		row_base[ns] = n_rows;
		prefill |= take > 1 || s->n_cached < s->req.n_prompt;
		plan_seq(e, order[k], take, ns, &n_tok, &n_rows, &sample_rows[ns]);
		max_q = take > max_q ? take : max_q;
		max_kv = e->kv_len[ns] > max_kv ? e->kv_len[ns] : max_kv;
		ns++;
	}
	*n_active = n_run;
	if (ns == 0)
		return SL_OK;
	kern_paged_batch b = {
		.n_tokens = n_tok, .n_seqs = ns, .tokens = e->tokens, .positions = e->positions,
		.slots = e->slots, .q_start = e->q_start, .q_len = e->q_len, .kv_len = e->kv_len,
		.block_tables = e->tables, .max_blocks = e->max_blocks,
		.block_tokens = kv_pool_block_tokens(e->pool), .max_q_len = max_q, .max_kv_len = max_kv,
	};
	double t0 = sl_now();
	int rc = model_forward(e->m, &b, e->rows, n_rows, e->logits, err, errlen);
	if (rc)
		return rc;
	if ((rc = apply_step(e, ns, sample_rows, row_base)))
		return sl_errf(err, errlen, rc, "out of memory");
	double dt = sl_now() - t0;
	e->stats.steps++;
	if (prefill)
		e->stats.prefill_s += dt, e->stats.prefill_tokens += n_tok;
	else
		e->stats.decode_s += dt, e->stats.decode_tokens += n_tok, e->stats.decode_steps++;
	*n_active = running_in_order(e, order);
	return SL_OK;
}

static seq *find_seq(node_engine *e, int id)
{
	for (int i = 0; i < e->n_seqs; i++)
		if (e->seqs[i].used && e->seqs[i].id == id)
			return &e->seqs[i];
	return NULL;
}

int node_engine_take(node_engine *e, int id, node_result *out)
{
	seq *s = find_seq(e, id);
	if (!s)
		return SL_ENOTFOUND;
	int n = s->n_tokens - s->req.n_prompt;
	out->tokens = malloc(sizeof(int32_t) * (n > 0 ? n : 1));
	if (!out->tokens)
		return SL_ENOMEM;
	memcpy(out->tokens, s->tokens + s->req.n_prompt, sizeof(int32_t) * n);
	out->n_tokens = n;
	out->finish = s->state;
	kv_table_release(e->pool, &s->kv);
	free(s->tokens);
	s->used = 0;
	return SL_OK;
}

int node_generate(node_engine *e, int n, const node_request *reqs, node_result *results,
		  char *err, size_t errlen)
{
	int ids[n > 0 ? n : 1], rc = SL_OK, k = 0, active = 1;
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
			free(r.tokens);
	}
	return rc;
}

const node_stats *node_engine_stats(const node_engine *e) { return &e->stats; }
int node_engine_free_blocks(const node_engine *e) { return kv_pool_free_blocks(e->pool); }
