/*
 * route.c — which live group gets a queued request: among the groups
 * serving its model that can hold it (context, KV capacity, vocabulary)
 * and have room (fewer requests assigned than they run plus hold), the
 * one with the least outstanding work relative to its size, then the
 * most free KV blocks. The queue is FIFO per model: a request only
 * overtakes others that no group can take now.
 */
#include <stdio.h>

#include "coord_int.h"
#include "sl.h"

static int fits(const coord_group *g, const coord_req *r)
{
	long need = (long)r->n_prompt + r->max_tokens;
	return need <= g->max_pos && (long)g->kv_blocks * g->block_tokens >= need &&
	       r->max_prompt_id < g->vocab;
}

static int usable(const coord_group *g) { return !g->lost && !g->draining; }

/* Outstanding work per running slot; lower is less loaded. */
static double load(const coord_group *g) { return (double)g->assigned / g->max_running; }

static coord_group *pick(coord *c, const coord_req *r, int *any_live, int *any_fit)
{
	coord_group *best = NULL;
	for (int i = 0; i < c->n_groups; i++) {
		coord_group *g = c->groups[i];
		if (g->model != r->model || !usable(g))
			continue;
		*any_live = 1;
		if (!fits(g, r))
			continue;
		*any_fit = 1;
		if (g->assigned >= g->max_running + g->max_waiting)
			continue;
		if (!best || load(g) < load(best) || (load(g) == load(best) && g->kv_free > best->kv_free))
			best = g;
	}
	return best;
}

static int send_enqueue(coord *c, coord_group *g, const coord_req *r)
{
	const coord_sampling *rs = &r->sampling;
	Shardline__Node__Sampling sp = SHARDLINE__NODE__SAMPLING__INIT;
	sp.has_temperature = sp.has_top_k = sp.has_top_p = sp.has_seed = sp.has_min_p = 1;
	sp.has_presence_penalty = sp.has_frequency_penalty = sp.has_repetition_penalty = 1;
	sp.temperature = rs->temperature;
	sp.top_k = rs->top_k;
	sp.top_p = rs->top_p;
	sp.seed = rs->seed;
	sp.min_p = rs->min_p;
	sp.presence_penalty = rs->presence_penalty;
	sp.frequency_penalty = rs->frequency_penalty;
	sp.repetition_penalty = rs->repetition_penalty;
	Shardline__Node__Enqueue q = SHARDLINE__NODE__ENQUEUE__INIT;
	q.has_req_id = q.has_max_tokens = q.has_ignore_eos = 1;
	q.has_logprobs = q.has_top_logprobs = 1;
	q.logprobs = rs->logprobs != 0;
	q.top_logprobs = rs->top_logprobs;
	q.req_id = r->id;
	q.n_prompt = r->n_prompt;
	q.prompt = r->prompt;
	q.sampling = &sp;
	q.max_tokens = r->max_tokens;
	q.ignore_eos = r->ignore_eos;
	Shardline__Node__CoordMsg m = SHARDLINE__NODE__COORD_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__COORD_MSG__MSG_ENQUEUE;
	m.enqueue = &q;
	return coord_send_node(c, g, &m);
}

static int any_room(const coord *c)
{
	for (int i = 0; i < c->n_groups; i++) {
		const coord_group *g = c->groups[i];
		if (usable(g) && g->assigned < g->max_running + g->max_waiting)
			return 1;
	}
	return 0;
}

void coord_dispatch(coord *c)
{
	coord_req *next;
	for (coord_req *r = c->qhead; r && any_room(c); r = next) {
		next = r->qnext;
		int any_live = 0, any_fit = 0;
		coord_group *g = pick(c, r, &any_live, &any_fit);
		if (!g) {
			if (any_live && !any_fit) {
				char msg[256];
				snprintf(msg, sizeof msg, "no node group of model %s can hold prompt (%d tokens) "
					 "+ max_tokens (%d)", c->models[r->model].name, r->n_prompt, r->max_tokens);
				coord_finish(c, r, SHARDLINE__CLIENT__FINISH_REASON__ERROR, msg);
			}
			continue;
		}
		if (send_enqueue(c, g, r))
			continue; /* g is marked lost; r stays queued */
		coord_req_dequeue(c, r);
		r->state = REQ_ASSIGNED;
		r->group = g;
		g->assigned++;
		if (r->t_assigned == 0)
			r->t_assigned = sl_now();
	}
}

int coord_model_context(const coord *c, int m)
{
	int best = 0;
	for (int i = 0; i < c->n_groups; i++) {
		const coord_group *g = c->groups[i];
		if (g->model != m || !usable(g))
			continue;
		long kv = (long)g->kv_blocks * g->block_tokens;
		int ctx = kv < g->max_pos ? (int)kv : g->max_pos;
		best = ctx > best ? ctx : best;
	}
	return best;
}
