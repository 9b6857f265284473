/*
 * on_node.c — messages from node group leaders: Register (validated; the
 * group becomes routable), heartbeats (Load), TokenBatch (relayed to the
 * requests' clients through stream.c); and what happens when a group is
 * lost: its requests go back to the front of the queue for another group,
 * those that streamed tokens with them (migration: the next group goes on
 * from prompt + those ids, docs/protocol.md); with no live group left for
 * the model they end after the admission timeout (route.c). A group whose
 * Loads show one step making no progress for --stall-ms is stalled: it
 * gets no new work and its requests move the same way, once another
 * group can take them (check_stall). A leader the
 * coordinator does not know (it restarted) is told to register again.
 * Every Load also updates the group's prefix cache picture (prefix.h)
 * from the block hashes it cached and evicted, which route.c reads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord_int.h"
#include "coordinator/prefix.h"
#include "common/sl.h"

/* Hashes kept per group, at most (a group with a larger pool is mirrored
 * in part: 64 MiB of table at most). */
#define COORD_MAX_PREFIX_HASHES (1 << 22)

typedef Shardline__Node__Register pb_register;

static coord_group *find_group(coord *c, const void *ident, size_t len)
{
	for (int i = 0; i < c->n_groups; i++)
		if (c->groups[i]->ident_len == len && !memcmp(c->groups[i]->ident, ident, len))
			return c->groups[i];
	return NULL;
}

static void send_ack(coord *c, const void *ident, size_t len, uint32_t id, const char *error)
{
	Shardline__Node__RegisterAck a = SHARDLINE__NODE__REGISTER_ACK__INIT;
	a.has_ok = a.has_group_id = a.has_heartbeat_ms = 1;
	a.ok = error == NULL;
	a.error = (char *)error;
	a.group_id = id;
	a.heartbeat_ms = (uint32_t)c->o.heartbeat_ms;
	Shardline__Node__CoordMsg m = SHARDLINE__NODE__COORD_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__COORD_MSG__MSG_ACK;
	m.ack = &a;
	coord_send_ident(c, ident, len, &m);
}

static void send_reregister(coord *c, const void *ident, size_t len)
{
	Shardline__Node__Reregister rr = SHARDLINE__NODE__REREGISTER__INIT;
	Shardline__Node__CoordMsg m = SHARDLINE__NODE__COORD_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__COORD_MSG__MSG_REREGISTER;
	m.reregister = &rr;
	coord_send_ident(c, ident, len, &m);
}

static int in_range(int has, long v, long lo, long hi) { return has && v >= lo && v <= hi; }

/* Why a Register cannot be accepted, or NULL; *model gets the model index. */
static const char *check_register(coord *c, const pb_register *r, int *model, char *why, size_t n)
{
	*model = -1;
	if (!r->has_protocol || r->protocol != 1)
		return snprintf(why, n, "protocol version %u is not 1", r->has_protocol ? r->protocol : 0), why;
	if (!r->model || !r->model[0] || strnlen(r->model, COORD_MAX_NAME + 1) > COORD_MAX_NAME)
		return snprintf(why, n, "register without a model name (at most %d bytes)", COORD_MAX_NAME), why;
	for (int i = 0; i < c->n_models; i++)
		if (!strcmp(c->models[i].name, r->model))
			*model = i;
	if (*model < 0)
		return snprintf(why, n, "this coordinator does not serve model '%.64s'", r->model), why;
	if (!r->has_session || !in_range(r->has_tp, r->tp, 1, 4096) || !in_range(r->has_pp, r->pp, 1, 4096) ||
	    !in_range(r->has_kv_blocks, r->kv_blocks, 1, 1L << 30) ||
	    !in_range(r->has_block_tokens, r->block_tokens, 1, 4096) ||
	    !in_range(r->has_max_pos, r->max_pos, 2, 1L << 24) ||
	    !in_range(r->has_vocab_size, r->vocab_size, 1, 1L << 24) ||
	    !in_range(r->has_max_running, r->max_running, 1, 1 << 16) ||
	    !in_range(r->has_max_waiting, r->max_waiting, 0, 1 << 16))
		return snprintf(why, n, "register: a field is missing or out of range"), why;
	if (c->n_groups == COORD_MAX_GROUPS)
		return snprintf(why, n, "too many groups (%d)", COORD_MAX_GROUPS), why;
	return NULL;
}

static void on_register(coord *c, const void *ident, size_t len, coord_group *g, const pb_register *r)
{
	char why[SL_ERRLEN];
	int model;
	if (g && r->has_session && r->session == g->session) { /* repeated: same answer */
		g->last_seen = sl_now();
		send_ack(c, ident, len, g->id, NULL);
		return;
	}
	if (g) /* a new session of a known leader: it dropped what it ran */
		coord_group_lost(c, g, "it registered again");
	if (check_register(c, r, &model, why, sizeof why)) {
		SL_WARN("coord", "refused a group: %s", why);
		send_ack(c, ident, len, 0, why);
		return;
	}
	if (!(g = calloc(1, sizeof *g))) {
		send_ack(c, ident, len, 0, "coordinator out of memory");
		return;
	}
	g->id = ++c->next_group_id;
	memcpy(g->ident, ident, len);
	g->ident_len = len;
	g->session = r->session;
	snprintf(g->name, sizeof g->name, "%s", r->name ? r->name : "?");
	g->model = model;
	g->tp = r->tp, g->pp = r->pp, g->kv_blocks = r->kv_blocks, g->block_tokens = r->block_tokens;
	g->max_pos = r->max_pos, g->vocab = r->vocab_size;
	g->max_running = r->max_running, g->max_waiting = r->max_waiting;
	g->kv_free = r->kv_blocks;
	/* twice its blocks: one Load's cached hashes go in before its evicted ones leave */
	long bound = 2L * r->kv_blocks < COORD_MAX_PREFIX_HASHES ? 2L * r->kv_blocks
								  : COORD_MAX_PREFIX_HASHES;
	g->prefix_cache = r->has_prefix_cache && r->prefix_cache;
	if (g->prefix_cache && coord_prefix_create((int)bound, &g->cached)) {
		SL_WARN("coord", "group %s: out of memory for its prefix cache hashes; routing by load",
			g->name);
		g->cached = NULL;
	}
	g->last_seen = g->last_ping = sl_now();
	c->groups[c->n_groups++] = g;
	SL_INFO("coord", "group %u (%s) registered: model %s, tp %d x pp %d, %d KV blocks of %d tokens, "
		"context %d, %d running + %d waiting, prefix cache %s", g->id, g->name,
		c->models[model].name, g->tp, g->pp, g->kv_blocks, g->block_tokens, g->max_pos,
		g->max_running, g->max_waiting, g->prefix_cache ? "on" : "off");
	send_ack(c, ident, len, g->id, NULL);
}

/* The prefix cache's counters and events: cached hashes go in before
 * evicted ones leave (a block evicted and cached again within one Load
 * stays); a reset starts the picture over from this Load's hashes. */
static void on_cache(coord_group *g, const Shardline__Node__Load *l)
{
	if (l->has_cache_queried_tokens && l->cache_queried_tokens >= 0)
		g->cache_queried = (long)l->cache_queried_tokens;
	if (l->has_cache_hit_tokens && l->cache_hit_tokens >= 0)
		g->cache_hit = (long)l->cache_hit_tokens;
	if (l->has_cache_evictions && l->cache_evictions >= 0)
		g->cache_evictions = (long)l->cache_evictions;
	if (l->has_cache_blocks && l->cache_blocks >= 0 && l->cache_blocks <= g->kv_blocks)
		g->cache_blocks = l->cache_blocks;
	if (!g->cached)
		return;
	if (l->has_cache_reset && l->cache_reset)
		coord_prefix_reset(g->cached);
	size_t dropped = 0;
	for (size_t i = 0; i < l->n_cache_stored; i++)
		dropped += coord_prefix_add(g->cached, l->cache_stored[i]) != SL_OK;
	for (size_t i = 0; i < l->n_cache_evicted; i++)
		coord_prefix_remove(g->cached, l->cache_evicted[i]);
	if (dropped)
		SL_DEBUG("coord", "group %u: %zu cached block hashes past the bound not kept", g->id,
			 dropped);
}

/* Whether g's step is getting anywhere, from one Load's counters (before
 * they are stored): a step that has run --stall-ms longer, on the node's
 * own step clock, than when its progress (or step count) last moved is
 * stalled. The leader's heartbeat thread keeps sending Loads while its
 * step hangs (a partition: the step waits in a collective that will not
 * return), so silence alone never says so; the node's watchdog ends such
 * a group in time, this stops the coordinator from waiting for that. The
 * node's clock, not ours: a coordinator that was itself held up for a
 * while sees no stall that was not there. Any movement, a new step or an
 * idle Load (no step) makes the group routable again. */
static void check_stall(coord *c, coord_group *g, long long steps, long long progress,
			long long in_step)
{
	int moved = !g->has_progress || steps != g->steps || progress != g->progress ||
		    in_step == 0 || in_step < g->in_step_ms;
	g->has_progress = 1;
	if (moved) {
		g->still_since_ms = in_step;
		if (g->stalled) {
			g->stalled = 0;
			SL_INFO("coord", "group %u (%s) makes progress again (step %lld, progress %lld): "
				"routable", g->id, g->name, steps + (in_step > 0), progress);
		}
		return;
	}
	long long still = in_step - g->still_since_ms;
	if (g->stalled || c->o.stall_ms <= 0 || still <= c->o.stall_ms)
		return;
	g->stalled = 1;
	SL_WARN("coord", "group %u (%s) stalled: step %lld has made no progress for %lld ms (running "
		"%lld ms, progress %lld; --stall-ms %d) while its heartbeats go on: no new work until "
		"it moves", g->id, g->name, steps + 1, still, in_step, progress, c->o.stall_ms);
	coord_group_unload_stalled(c, g);
}

/* The step counters: a Load during a long step says the group is busy,
 * not dead (its heartbeat thread, node/leader.c); said once per step that
 * outlasts the interval the coordinator would have waited before. */
static void on_progress(coord *c, coord_group *g, const Shardline__Node__Load *l)
{
	long long steps = l->has_steps ? (long long)l->steps : g->steps;
	long long progress = l->has_progress ? (long long)l->progress : g->progress;
	long long in_step = l->has_in_step_ms && l->in_step_ms > 0 ? (long long)l->in_step_ms : 0;
	check_stall(c, g, steps, progress, in_step);
	g->steps = steps;
	g->progress = progress;
	g->in_step_ms = in_step;
	if (g->in_step_ms > COORD_DEAD_INTERVALS * c->o.heartbeat_ms && g->busy_logged != g->steps + 1) {
		g->busy_logged = g->steps + 1;
		SL_INFO("coord", "group %u busy on one step for %lld ms (progress %lld): alive, not lost",
			g->id, g->in_step_ms, g->progress);
	}
}

static void on_load(coord *c, coord_group *g, const Shardline__Node__Load *l)
{
	if (!l)
		return;
	on_progress(c, g, l);
	if (l->has_running && l->running >= 0)
		g->running = l->running;
	if (l->has_waiting && l->waiting >= 0)
		g->waiting = l->waiting;
	if (l->has_kv_free && l->kv_free >= 0)
		g->kv_free = l->kv_free;
	if (l->has_draining)
		g->draining |= l->draining;
	if (l->has_leaving)
		g->leaving |= l->leaving;
	on_cache(g, l);
}

static void cancel_stray(coord *c, coord_group *g, uint64_t req_id)
{
	Shardline__Node__Cancel cn = SHARDLINE__NODE__CANCEL__INIT;
	cn.has_req_id = 1;
	cn.req_id = req_id;
	Shardline__Node__CoordMsg m = SHARDLINE__NODE__COORD_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__COORD_MSG__MSG_CANCEL;
	m.cancel = &cn;
	coord_send_node(c, g, &m);
}

/* The log-probs of s as r asked for them (one per token, top_n =
 * min(top_logprobs, the group's vocabulary), ids inside it, values <= 0,
 * NaN refused) into *v; 0, or nonzero with why. A request that did not
 * ask ignores whatever came. */
static int check_logprobs(const coord_group *g, const coord_req *r,
			  const Shardline__Node__SeqTokens *s, coord_lp_view *v, char *why, size_t n)
{
	if (s->n_tokens == 0)
		return 0;
	int want_n = r->sampling.top_logprobs < g->vocab ? r->sampling.top_logprobs : g->vocab;
	size_t all = s->n_tokens * (size_t)want_n;
	if (s->n_logprobs != s->n_tokens || !s->has_top_n || s->top_n != want_n ||
	    s->n_top_ids != all || s->n_top_logprobs != all)
		return snprintf(why, n, "%zu log-probs and %zu + %zu alternatives (top_n %d) for %zu "
				"tokens, want %d alternatives each", s->n_logprobs, s->n_top_ids,
				s->n_top_logprobs, s->has_top_n ? s->top_n : -1, s->n_tokens, want_n), 1;
	for (size_t i = 0; i < s->n_logprobs; i++)
		if (!(s->logprobs[i] <= 0))
			return snprintf(why, n, "log-prob %g of token %zu is not <= 0", s->logprobs[i], i), 1;
	for (size_t i = 0; i < all; i++)
		if (s->top_ids[i] < 0 || s->top_ids[i] >= g->vocab || !(s->top_logprobs[i] <= 0))
			return snprintf(why, n, "alternative %zu (id %d, log-prob %g) is out of range", i,
					s->top_ids[i], s->top_logprobs[i]), 1;
	*v = (coord_lp_view){s->logprobs, s->top_ids, s->top_logprobs, want_n};
	return 0;
}

static void on_tokens(coord *c, coord_group *g, const Shardline__Node__TokenBatch *tb)
{
	on_load(c, g, tb->load);
	for (size_t i = 0; i < tb->n_seqs; i++) {
		const Shardline__Node__SeqTokens *s = tb->seqs[i];
		Shardline__Node__Finish f = s->has_finish ? s->finish : SHARDLINE__NODE__FINISH__RUNNING;
		if (f < SHARDLINE__NODE__FINISH__RUNNING || f > SHARDLINE__NODE__FINISH__REFUSED)
			f = SHARDLINE__NODE__FINISH__ERROR;
		coord_req *r = s->has_req_id ? coord_req_find(c, s->req_id) : NULL;
		if (!r || r->state != REQ_ASSIGNED || r->group != g) {
			/* finished here already (stop string, cancel, timeout) or unknown */
			if (s->has_req_id && f == SHARDLINE__NODE__FINISH__RUNNING)
				cancel_stray(c, g, s->req_id);
			else if (f >= SHARDLINE__NODE__FINISH__ERROR && s->error)
				SL_WARN("coord", "group %u: %.200s", g->id, s->error);
			continue;
		}
		char error[256], why[200];
		coord_lp_view lp;
		if (r->sampling.logprobs && check_logprobs(g, r, s, &lp, why, sizeof why)) {
			SL_WARN("coord", "group %u sent malformed log-probs for request %llu: %s", g->id,
				(unsigned long long)r->id, why);
			snprintf(error, sizeof error, "node group %u sent malformed log-probs: %s", g->id, why);
			coord_finish(c, r, SHARDLINE__CLIENT__FINISH_REASON__ERROR, error);
			continue;
		}
		snprintf(error, sizeof error, "node group %u: %s", g->id, s->error ? s->error : "failed");
		/* a refusal is about the request, not the group: its words as they are */
		coord_stream_tokens(c, r, s->tokens, s->n_tokens,
				    r->sampling.logprobs && s->n_tokens ? &lp : NULL, f,
				    f == SHARDLINE__NODE__FINISH__REFUSED && s->error ? s->error : error);
	}
}

void coord_on_node(coord *c, sl_wire_msg *m)
{
	if (m->n < 1)
		return;
	const void *ident = sl_wire_data(m, 0);
	size_t len = sl_wire_size(m, 0);
	if (m->n_total != 2) {
		SL_WARN("coord", "node socket: dropped a %d-frame message", m->n_total);
		return;
	}
	Shardline__Node__NodeMsg *q = shardline__node__node_msg__unpack(NULL, sl_wire_size(m, 1),
									 sl_wire_data(m, 1));
	if (!q) {
		SL_WARN("coord", "node socket: dropped a malformed message (%zu bytes)",
			sl_wire_size(m, 1));
		return;
	}
	coord_group *g = find_group(c, ident, len);
	if (g) {
		double now = sl_now();
		g->max_gap = now - g->last_seen > g->max_gap ? now - g->last_seen : g->max_gap;
		g->last_seen = now;
	}
	switch (q->msg_case) {
	case SHARDLINE__NODE__NODE_MSG__MSG_REGISTER:
		on_register(c, ident, len, g, q->register_);
		g = NULL; /* a new session frees the old group */
		break;
	case SHARDLINE__NODE__NODE_MSG__MSG_HEARTBEAT:
		if (g)
			on_load(c, g, q->heartbeat);
		else
			send_reregister(c, ident, len);
		break;
	case SHARDLINE__NODE__NODE_MSG__MSG_TOKENS:
		if (g)
			on_tokens(c, g, q->tokens);
		else
			send_reregister(c, ident, len);
		break;
	default: SL_WARN("coord", "node socket: unknown message type %d", (int)q->msg_case);
	}
	shardline__node__node_msg__free_unpacked(q, NULL);
	if (g && g->leaving) /* drained or out of grace: what still runs moves now */
		coord_group_lost(c, g, "it left");
}

/* Every request assigned to g back to the front of the queue, never to g
 * again: from its prompt when it has no tokens yet, else from where g left
 * it (migration). cancel: g still runs, tell it to drop each. */
static void move_requests(coord *c, coord_group *g, int cancel, int *requeued, int *migrated)
{
	/* c->all runs newest first; pushing each to the queue front leaves the
	 * oldest first */
	coord_req *next;
	*requeued = *migrated = 0;
	for (coord_req *r = c->all; r; r = next) {
		next = r->anext;
		if (r->state != REQ_ASSIGNED || r->group != g)
			continue;
		if (cancel)
			coord_node_cancel(c, r);
		g->assigned--;
		r->group = NULL;
		snprintf(r->failed_on, sizeof r->failed_on, "%s", g->name);
		r->node_done = 1;
		if (r->n_generated == 0) {
			coord_req_reset_output(r);
			++*requeued;
		} else { /* output state stays: the next group goes on from its ids */
			r->migrations++;
			++*migrated;
			c->n_migrated++;
		}
		coord_req_enqueue(c, r, 1);
		c->n_requeued++;
	}
}

int coord_group_unload_stalled(coord *c, coord_group *g)
{
	int requeued, migrated;
	if (!g->stalled || !g->assigned || !coord_model_routable_elsewhere(c, g))
		return 0;
	move_requests(c, g, 1, &requeued, &migrated);
	SL_WARN("coord", "group %u (%s) stalled: %d request(s) re-queued elsewhere, %d migrated "
		"mid-stream", g->id, g->name, requeued, migrated);
	return requeued + migrated;
}

void coord_group_lost(coord *c, coord_group *g, const char *why)
{
	int requeued, migrated;
	move_requests(c, g, 0, &requeued, &migrated);
	for (int i = 0; i < c->n_groups; i++)
		if (c->groups[i] == g) {
			c->groups[i] = c->groups[--c->n_groups];
			break;
		}
	if (g->draining && !requeued && !migrated)
		SL_INFO("coord", "group %u (%s) left after draining; longest silence %.0f ms "
			"(heartbeat %d ms)", g->id, g->name, g->max_gap * 1e3, c->o.heartbeat_ms);
	else
		SL_WARN("coord", "group %u (%s) lost: %s; %d request(s) re-queued elsewhere, %d migrated "
			"mid-stream%s; longest silence %.0f ms (heartbeat %d ms)", g->id, g->name, why,
			requeued, migrated,
			coord_model_live(c, g->model) ? "" : "; no live group serves the model now",
			g->max_gap * 1e3, c->o.heartbeat_ms);
	coord_group_free(g);
}

void coord_group_free(coord_group *g)
{
	if (!g)
		return;
	coord_prefix_destroy(g->cached);
	free(g);
}
