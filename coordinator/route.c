/*
 * route.c — which live group gets a queued request: among the groups
 * serving its model that can hold it (context, KV capacity, vocabulary)
 * and have room (fewer requests held than they run plus hold), by
 * default the best blend of the prompt prefix the group has cached (its
 * reported block hashes, prefix.h) and its load, passing over groups far
 * busier than the least loaded; with --route load the least loaded
 * (outstanding work relative to its size, then the most free KV blocks).
 * docs/scheduling.md has the score. The queue is FIFO per model: a
 * request only overtakes others that no group can take now.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/block_hash.h"
#include "coordinator/coord_int.h"
#include "coordinator/prefix.h"
#include "common/sl.h"

/* The route score (docs/scheduling.md): cached share - LOAD_WEIGHT x load,
 * among groups whose load is below the least loaded's + IMBALANCE. */
#define ROUTE_LOAD_WEIGHT 0.5
#define ROUTE_IMBALANCE 0.5

/* A request's block chain hashes for one block size, computed once per
 * dispatch and block size (groups of a model usually share one). */
typedef struct route_hashes {
	const coord_req *r;
	int block_tokens, n;
	uint64_t *h;
	size_t cap;
} route_hashes;

static int fits(const coord_group *g, const coord_req *r)
{
	long need = (long)r->n_prompt + r->max_tokens;
	return need <= g->max_pos && (long)g->kv_blocks * g->block_tokens >= need &&
	       r->max_prompt_id < g->vocab;
}

static int usable(const coord_group *g) { return !g->lost && !g->draining; }
/* It takes new work: usable, and its step is not stalled (a stalled group
 * still counts as live for the model: it may move again, and its node
 * watchdog ends it if not). */
static int routable(const coord_group *g) { return usable(g) && !g->stalled; }

/* Requests the group holds: ours, or what its last Load says when that is
 * more (a group registered with both coordinators of a standby pair may
 * still run the other's; docs/protocol.md). */
static int occupied(const coord_group *g)
{
	int told = g->running + g->waiting;
	return g->assigned > told ? g->assigned : told;
}

static int has_room(const coord_group *g) { return occupied(g) < g->max_running + g->max_waiting; }

/* Outstanding work per running slot; lower is less loaded. */
static double load(const coord_group *g) { return (double)occupied(g) / g->max_running; }

/* The prefix route's load: outstanding work per running slot plus the
 * share of the KV pool in use (cached blocks nobody uses count free). */
static double load_kv(const coord_group *g)
{
	double used = 1.0 - (double)g->kv_free / g->kv_blocks;
	return load(g) + (used < 0 ? 0 : used > 1 ? 1 : used);
}

/* Prompt tokens of r in leading blocks g holds, as the node would reuse
 * them: whole blocks, never the prompt's last token. */
static int cached_tokens(const coord_group *g, const coord_req *r, route_hashes *rh)
{
	int bt = g->block_tokens, n = (r->n_prompt - 1) / bt;
	if (!g->cached || n <= 0)
		return 0;
	if (rh->r != r || rh->block_tokens != bt) {
		if ((size_t)n > rh->cap) {
			uint64_t *nh = realloc(rh->h, sizeof(uint64_t) * n);
			if (!nh)
				return 0; /* out of memory: route as if nothing were cached */
			rh->h = nh, rh->cap = (size_t)n;
		}
		sl_block_hashes(r->prompt, bt, 0, n, rh->h);
		rh->r = r, rh->block_tokens = bt, rh->n = n;
	}
	return coord_prefix_match(g->cached, rh->h, n) * bt;
}

/* r was lost on g last: a group that just failed a request (a step that
 * hung, a host cut off) is never given it back; another may take it. */
static int failed_here(const coord_group *g, const coord_req *r)
{
	return r->failed_on[0] && !strcmp(g->name, r->failed_on);
}

/* Can g take r now? *any_live / *any_fit say why not, for the caller. */
static int eligible(const coord_group *g, const coord_req *r, int *any_live, int *any_fit)
{
	if (g->model != r->model || !routable(g) || failed_here(g, r))
		return 0;
	*any_live = 1;
	if (!fits(g, r))
		return 0;
	*any_fit = 1;
	return has_room(g);
}

/* The group for r, or NULL; *cached: the prompt tokens it holds. */
static coord_group *pick(coord *c, const coord_req *r, route_hashes *rh, int *cached,
			 int *any_live, int *any_fit)
{
	coord_group *best = NULL;
	double min_load = 0, best_score = 0;
	int n_ok = 0;
	for (int i = 0; i < c->n_groups; i++) {
		coord_group *g = c->groups[i];
		if (!eligible(g, r, any_live, any_fit))
			continue;
		if (c->o.route_by_load) {
			if (!best || load(g) < load(best) ||
			    (load(g) == load(best) && g->kv_free > best->kv_free))
				best = g;
			continue;
		}
		min_load = n_ok++ == 0 || load_kv(g) < min_load ? load_kv(g) : min_load;
	}
	for (int i = 0; !c->o.route_by_load && i < c->n_groups; i++) {
		coord_group *g = c->groups[i];
		int a = 0, f = 0;
		if (!eligible(g, r, &a, &f) || load_kv(g) >= min_load + ROUTE_IMBALANCE)
			continue; /* far busier than the least loaded: whatever it holds */
		double score = (double)cached_tokens(g, r, rh) / r->n_prompt -
			       ROUTE_LOAD_WEIGHT * load_kv(g);
		if (!best || score > best_score ||
		    (score == best_score && (load_kv(g) < load_kv(best) ||
					     (load_kv(g) == load_kv(best) && g->kv_free > best->kv_free))))
			best = g, best_score = score;
	}
	*cached = best ? cached_tokens(best, r, rh) : 0;
	return best;
}

static int any_room(const coord *c)
{
	for (int i = 0; i < c->n_groups; i++) {
		const coord_group *g = c->groups[i];
		if (routable(g) && has_room(g))
			return 1;
	}
	return 0;
}

void coord_dispatch(coord *c)
{
	coord_req *next;
	route_hashes rh = {0};
	coord_expire_unserved(c);
	for (coord_req *r = c->qhead; r && any_room(c); r = next) {
		next = r->qnext;
		int any_live = 0, any_fit = 0, cached = 0;
		coord_group *g = pick(c, r, &rh, &cached, &any_live, &any_fit);
		if (!g) {
			if (any_live && !any_fit) {
				char msg[256];
				snprintf(msg, sizeof msg, "no node group of model %s can hold prompt (%d tokens) "
					 "+ max_tokens (%d)", c->models[r->model].name, r->n_prompt, r->max_tokens);
				coord_finish(c, r, SHARDLINE__CLIENT__FINISH_REASON__ERROR, msg);
				rh.r = NULL; /* r is freed: its address may come back */
			}
			continue;
		}
		if (coord_node_enqueue(c, g, r))
			continue; /* g is marked lost (or no memory now); r stays queued */
		coord_req_dequeue(c, r);
		r->state = REQ_ASSIGNED;
		r->group = g;
		r->node_done = 0;
		if (r->gen.n)
			SL_INFO("coord", "request %llu continues on group %u after %zu tokens",
				(unsigned long long)r->id, g->id, r->gen.n);
		g->assigned++;
		g->routed_prefix_tokens += cached;
		if (r->t_assigned == 0)
			r->t_assigned = sl_now();
	}
	free(rh.h);
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

/* Whether a live group serves model m; keeps m's dead_since. */
static int model_served(coord *c, int m, double now)
{
	for (int i = 0; i < c->n_groups; i++)
		if (c->groups[i]->model == m && usable(c->groups[i]))
			return c->models[m].dead_since = 0, 1;
	if (c->models[m].dead_since == 0)
		c->models[m].dead_since = now;
	return 0;
}

/* A live group other than the one r was lost on serves r's model. */
static int served_elsewhere(const coord *c, const coord_req *r)
{
	for (int i = 0; i < c->n_groups; i++) {
		const coord_group *g = c->groups[i];
		if (g->model == r->model && usable(g) && !failed_here(g, r))
			return 1;
	}
	return 0;
}

void coord_expire_unserved(coord *c)
{
	double now = sl_now(), wait = c->o.admission_timeout_ms * 1e-3;
	int dead[COORD_MAX_MODELS];
	for (int m = 0; m < c->n_models; m++)
		dead[m] = !model_served(c, m, now);
	coord_req *next;
	for (coord_req *r = c->qhead; r; r = next) {
		next = r->qnext;
		const coord_model *m = &c->models[r->model];
		/* a re-queued request cannot go back where it was lost: with no
		 * other group it waits as one whose model nobody serves */
		int only_failed = !dead[r->model] && r->failed_on[0] && !served_elsewhere(c, r);
		if (!dead[r->model] && !only_failed)
			continue;
		double since = m->dead_since > r->t_queued && !only_failed ? m->dead_since : r->t_queued;
		if (now - since < wait)
			continue;
		char msg[256];
		int n = only_failed
			? snprintf(msg, sizeof msg, "no live node group of model %s but %s, which was lost "
				   "with this request (waited %.0f ms)", m->name, r->failed_on,
				   (now - since) * 1e3)
			: snprintf(msg, sizeof msg, "no live node group serves model %s (waited %.0f ms)",
				   m->name, (now - since) * 1e3);
		if (r->migrations && n > 0 && (size_t)n < sizeof msg)
			snprintf(msg + n, sizeof msg - n, "; its group was lost after %d tokens",
				 r->n_generated);
		coord_finish(c, r, SHARDLINE__CLIENT__FINISH_REASON__ERROR, msg);
	}
}

int coord_model_live(coord *c, int m) { return model_served(c, m, sl_now()); }

int coord_model_routable_elsewhere(const coord *c, const coord_group *g)
{
	for (int i = 0; i < c->n_groups; i++)
		if (c->groups[i] != g && c->groups[i]->model == g->model && routable(c->groups[i]))
			return 1;
	return 0;
}
