/*
 * leader.c — the node group leader's serving loop (see leader.h).
 * Handlers by message type: on_ack, on_enqueue, on_cancel, on_drain,
 * on_reregister; timers for heartbeats, registration and coordinator loss.
 * Every Load it sends (heartbeats, and the one in each TokenBatch) carries
 * the prefix cache's counters and the block hashes cached and evicted
 * since the previous one, so the coordinator's picture of the cache
 * (coordinator/route.c) is at most one message old.
 */
#include "leader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/curve.h"
#include "engine.h"
#include "proto/node.pb-c.h"
#include "rng.h"
#include "scheduler.h"
#include "sl.h"
#include "step.h"
#include "wire.h"

#define LEADER_MAX_MSG (64 << 20)   /* largest message taken from the coordinator */
#define LEADER_DEAD_INTERVALS 3
#define LEADER_MAX_ENDPOINTS 4
/* Hashes per Load, at most: bounds a snapshot of a huge cache (8 MiB) far
 * below the coordinator's message limit; a router missing some of a
 * snapshot only routes worse. Per-step events are far fewer. */
#define LEADER_MAX_CACHE_EVENTS (1 << 20)

typedef struct leader {
	const node_leader_opts *o;
	node_group *g;
	node_engine *e;
	node_sched *s;
	void *ctx, *sock;
	uint64_t session;          /* random per socket: a repeated Register is idempotent */
	int registered, refused, draining, drain_exit;
	double stop_by;            /* signalled: leave by then whatever runs (0: not) */
	int hb_ms;
	double last_heard;         /* any message from the coordinator (or the socket's birth) */
	double last_hb, next_register, next_step;
	int reg_tries;             /* registrations sent since the coordinator last spoke */
	uint64_t rng;              /* jitter */
	long preemptions_logged;   /* node_stats.preemptions at the last log line */
	double last_preempt_log;
	uint64_t step;
	char name[160];
	/* --coordinator EP or EP1,EP2 (a standby pair): the one in use is
	 * eps[cur]; a silent one makes the leader try the next */
	char eps_buf[1024];
	char *eps[LEADER_MAX_ENDPOINTS];
	int n_eps, cur;
} leader;

/* Registration retries back off exponentially, from one heartbeat to
 * LEADER_BACKOFF_MAX heartbeats, each delay drawn from [d/2, d) so that
 * groups reconnecting to a restarted coordinator do not all arrive at once.
 * Any message from the coordinator resets the backoff. */
#define LEADER_BACKOFF_MAX 10

static double register_delay(leader *l)
{
	double hb = l->hb_ms * 1e-3, d = hb;
	for (int k = 0; k < l->reg_tries && d < LEADER_BACKOFF_MAX * hb; k++)
		d *= 2;
	d = d < LEADER_BACKOFF_MAX * hb ? d : LEADER_BACKOFF_MAX * hb;
	return d * (0.5 + 0.5 * sl_rng_unit(&l->rng));
}

static int send_msg(leader *l, Shardline__Node__NodeMsg *m)
{
	int e = 0;
	if (sl_wire_send(l->sock, NULL, 0, &m->base, &e)) {
		SL_WARN("leader", "send to the coordinator failed: %s", zmq_strerror(e));
		node_engine_cache_events_resync(l->e); /* hash events may be lost: start over */
		return SL_ECOMM;
	}
	return SL_OK;
}

/* A fresh socket: whatever the old one still queued (for a coordinator
 * that is gone) is dropped with it. */
static int open_socket(leader *l, char *err, size_t errlen)
{
	if (l->sock)
		zmq_close(l->sock);
	l->sock = sl_wire_socket(l->ctx, ZMQ_DEALER, LEADER_MAX_MSG);
	int rc = l->sock ? sl_curve_client_apply(l->o->curve, l->sock, err, errlen) : SL_OK;
	if (rc)
		return rc;
	if (!l->n_eps) {
		char *save = NULL;
		snprintf(l->eps_buf, sizeof l->eps_buf, "%s", l->o->coordinator);
		for (char *e = strtok_r(l->eps_buf, ",", &save); e && l->n_eps < LEADER_MAX_ENDPOINTS;
		     e = strtok_r(NULL, ",", &save))
			l->eps[l->n_eps++] = e;
		if (!l->n_eps)
			return sl_errf(err, errlen, SL_EINVAL, "--coordinator: no endpoint in '%s'",
				       l->o->coordinator);
	}
	if (!l->sock || zmq_connect(l->sock, l->eps[l->cur]))
		return sl_errf(err, errlen, SL_ECOMM, "cannot connect to %s: %s", l->eps[l->cur],
			       zmq_strerror(errno));
	l->session = sl_splitmix64(&l->rng);
	l->registered = 0;
	l->last_heard = sl_now();
	l->next_register = 0;
	return SL_OK;
}

/* The load, the cache's counters and its events since the last Load
 * (taken: the caller sends ld before the next engine step). */
static void fill_load(leader *l, Shardline__Node__Load *ld)
{
	int running, waiting, kv_free;
	node_sched_load(l->s, &running, &waiting, &kv_free);
	ld->has_running = ld->has_waiting = ld->has_kv_free = ld->has_draining = 1;
	ld->running = running;
	ld->waiting = waiting;
	ld->kv_free = kv_free;
	ld->draining = l->draining;
	node_cache_stats cs;
	node_engine_cache_stats(l->e, &cs);
	if (!cs.enabled)
		return;
	ld->has_cache_queried_tokens = ld->has_cache_hit_tokens = ld->has_cache_evictions = 1;
	ld->has_cache_blocks = 1;
	ld->cache_queried_tokens = cs.queried_tokens;
	ld->cache_hit_tokens = cs.hit_tokens;
	ld->cache_evictions = cs.evictions;
	ld->cache_blocks = cs.cached_blocks;
	const uint64_t *stored, *evicted;
	int n_stored, n_evicted, reset;
	node_engine_cache_events_take(l->e, &stored, &n_stored, &evicted, &n_evicted, &reset);
	ld->has_cache_reset = reset;
	ld->cache_reset = reset != 0;
	ld->n_cache_stored = n_stored < LEADER_MAX_CACHE_EVENTS ? n_stored : LEADER_MAX_CACHE_EVENTS;
	ld->cache_stored = (uint64_t *)stored;
	ld->n_cache_evicted = n_evicted < LEADER_MAX_CACHE_EVENTS ? n_evicted : LEADER_MAX_CACHE_EVENTS;
	ld->cache_evicted = (uint64_t *)evicted;
}

static void send_register(leader *l)
{
	const model *m = l->g->m;
	Shardline__Node__Register r = SHARDLINE__NODE__REGISTER__INIT;
	r.has_protocol = r.has_session = r.has_tp = r.has_pp = r.has_kv_blocks = 1;
	r.has_block_tokens = r.has_max_pos = r.has_vocab_size = r.has_max_running = 1;
	r.has_max_waiting = 1;
	r.protocol = 1;
	r.model = (char *)l->o->model_name;
	r.name = l->name;
	r.session = l->session;
	r.tp = m->shard.grid.tp;
	r.pp = m->shard.grid.pp;
	r.kv_blocks = node_engine_total_blocks(l->e);
	r.block_tokens = m->opts.block_tokens;
	r.max_pos = m->cfg.max_pos;
	r.vocab_size = m->cfg.vocab_size;
	r.max_running = l->o->max_running;
	r.max_waiting = l->o->max_waiting;
	r.has_prefix_cache = 1;
	r.prefix_cache = !l->o->no_prefix_cache;
	Shardline__Node__NodeMsg msg = SHARDLINE__NODE__NODE_MSG__INIT;
	msg.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_REGISTER;
	msg.register_ = &r;
	send_msg(l, &msg);
	l->next_register = sl_now() + register_delay(l);
	l->reg_tries++;
}

static void send_heartbeat_ex(leader *l, int leaving)
{
	Shardline__Node__Load ld = SHARDLINE__NODE__LOAD__INIT;
	fill_load(l, &ld);
	ld.has_leaving = leaving;
	ld.leaving = leaving != 0;
	Shardline__Node__NodeMsg msg = SHARDLINE__NODE__NODE_MSG__INIT;
	msg.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_HEARTBEAT;
	msg.heartbeat = &ld;
	send_msg(l, &msg);
	l->last_hb = sl_now();
}

static void send_heartbeat(leader *l) { send_heartbeat_ex(l, 0); }

static const Shardline__Node__Finish finish_wire[] = {
	[NODE_SCHED_RUNNING] = SHARDLINE__NODE__FINISH__RUNNING,
	[NODE_SCHED_LENGTH] = SHARDLINE__NODE__FINISH__LENGTH,
	[NODE_SCHED_EOS] = SHARDLINE__NODE__FINISH__EOS,
	[NODE_SCHED_ERROR] = SHARDLINE__NODE__FINISH__ERROR,
};

/* One TokenBatch for n events; the load rides along as a heartbeat. */
static void send_events(leader *l, const node_sched_event *ev, int n)
{
	Shardline__Node__SeqTokens seq[n > 0 ? n : 1], *ptrs[n > 0 ? n : 1];
	for (int i = 0; i < n; i++) {
		seq[i] = (Shardline__Node__SeqTokens)SHARDLINE__NODE__SEQ_TOKENS__INIT;
		seq[i].has_req_id = seq[i].has_finish = 1;
		seq[i].req_id = ev[i].req_id;
		seq[i].n_tokens = ev[i].n_tokens;
		seq[i].tokens = (int32_t *)ev[i].tokens;
		seq[i].finish = finish_wire[ev[i].finish];
		seq[i].error = (char *)ev[i].error;
		if (ev[i].logprobs) {
			seq[i].has_top_n = 1;
			seq[i].top_n = ev[i].top_n;
			seq[i].n_logprobs = ev[i].n_tokens;
			seq[i].logprobs = (float *)ev[i].logprobs;
			seq[i].n_top_ids = seq[i].n_top_logprobs = (size_t)ev[i].n_tokens * ev[i].top_n;
			seq[i].top_ids = (int32_t *)ev[i].top_ids;
			seq[i].top_logprobs = (float *)ev[i].top_logprobs;
		}
		ptrs[i] = &seq[i];
	}
	Shardline__Node__Load ld = SHARDLINE__NODE__LOAD__INIT;
	fill_load(l, &ld);
	Shardline__Node__TokenBatch tb = SHARDLINE__NODE__TOKEN_BATCH__INIT;
	tb.has_step = 1;
	tb.step = l->step;
	tb.n_seqs = n;
	tb.seqs = ptrs;
	tb.load = &ld;
	Shardline__Node__NodeMsg msg = SHARDLINE__NODE__NODE_MSG__INIT;
	msg.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_TOKENS;
	msg.tokens = &tb;
	send_msg(l, &msg);
	l->last_hb = sl_now();
}

static void send_error(leader *l, uint64_t req_id, const char *why)
{
	node_sched_event ev = {.req_id = req_id, .finish = NODE_SCHED_ERROR, .error = why};
	send_events(l, &ev, 1);
}

static void on_ack(leader *l, const Shardline__Node__RegisterAck *a)
{
	if (!a->has_ok || !a->ok) {
		SL_ERROR("leader", "coordinator refused registration: %s",
			 a->error ? a->error : "(no reason)");
		l->refused = 1;
		return;
	}
	if (a->has_heartbeat_ms && a->heartbeat_ms >= 10 && a->heartbeat_ms <= 60000)
		l->hb_ms = (int)a->heartbeat_ms;
	if (!l->registered) {
		SL_INFO("leader", "registered with %s as group %u (model %s, heartbeat %d ms)",
			l->eps[l->cur], a->group_id, l->o->model_name, l->hb_ms);
		/* a new session knows none of our cache: the next Load tells all */
		node_engine_cache_events_resync(l->e);
	}
	l->registered = 1;
	l->refused = 0;
	l->reg_tries = 0;
}

static void on_enqueue(leader *l, const Shardline__Node__Enqueue *q)
{
	char err[SL_ERRLEN];
	if (!q->has_req_id) {
		SL_WARN("leader", "enqueue without req_id ignored");
		return;
	}
	if (l->draining) {
		send_error(l, q->req_id, "node group is draining");
		return;
	}
	const Shardline__Node__Sampling *sp = q->sampling;
	node_request r = {.prompt = q->prompt, .n_prompt = (int)q->n_prompt,
			  .max_new_tokens = q->has_max_tokens ? q->max_tokens : 0,
			  .ignore_eos = q->has_ignore_eos && q->ignore_eos,
			  .n_resumed = q->has_resume_generated ? q->resume_generated : 0,
			  .sampling = {.top_p = 1.0f}};
	if (q->n_prompt > (size_t)l->g->m->cfg.max_pos) {
		send_error(l, q->req_id, "prompt longer than the context");
		return;
	}
	if (sp) {
		r.sampling.temperature = sp->has_temperature ? sp->temperature : 0;
		r.sampling.top_k = sp->has_top_k ? sp->top_k : 0;
		r.sampling.top_p = sp->has_top_p ? sp->top_p : 1.0f;
		r.sampling.seed = sp->has_seed ? sp->seed : 0;
		r.sampling.min_p = sp->has_min_p ? sp->min_p : 0;
		r.sampling.presence_penalty = sp->has_presence_penalty ? sp->presence_penalty : 0;
		r.sampling.frequency_penalty = sp->has_frequency_penalty ? sp->frequency_penalty : 0;
		r.sampling.repetition_penalty = sp->has_repetition_penalty ? sp->repetition_penalty : 1;
	}
	r.sampling.logprobs = q->has_logprobs && q->logprobs;
	r.sampling.top_logprobs = q->has_top_logprobs ? q->top_logprobs : 0;
	if (node_sched_submit(l->s, q->req_id, &r, err, sizeof err))
		send_error(l, q->req_id, err);
}

static void on_drain(leader *l, const Shardline__Node__Drain *d)
{
	l->draining = 1;
	l->drain_exit |= d->has_exit && d->exit;
	SL_INFO("leader", "draining%s", l->drain_exit ? "; leaving when idle" : "");
	send_heartbeat(l);
}

static void on_message(leader *l, sl_wire_msg *w)
{
	if (w->n_total != 1) {
		SL_WARN("leader", "dropped a %d-frame message", w->n_total);
		return;
	}
	Shardline__Node__CoordMsg *m = shardline__node__coord_msg__unpack(
		NULL, sl_wire_size(w, 0), sl_wire_data(w, 0));
	if (!m) {
		SL_WARN("leader", "dropped a malformed message (%zu bytes)", sl_wire_size(w, 0));
		return;
	}
	l->last_heard = sl_now();
	switch (m->msg_case) {
	case SHARDLINE__NODE__COORD_MSG__MSG_ACK: on_ack(l, m->ack); break;
	case SHARDLINE__NODE__COORD_MSG__MSG_PING: break;
	case SHARDLINE__NODE__COORD_MSG__MSG_ENQUEUE: on_enqueue(l, m->enqueue); break;
	case SHARDLINE__NODE__COORD_MSG__MSG_CANCEL:
		if (m->cancel->has_req_id)
			node_sched_cancel(l->s, m->cancel->req_id);
		break;
	case SHARDLINE__NODE__COORD_MSG__MSG_DRAIN: on_drain(l, m->drain); break;
	case SHARDLINE__NODE__COORD_MSG__MSG_REREGISTER:
		/* a coordinator that does not know us cannot want our requests */
		SL_INFO("leader", "coordinator asks to register again");
		node_sched_cancel_all(l->s);
		l->registered = 0;
		send_register(l);
		break;
	default: SL_WARN("leader", "unknown message type %d ignored", (int)m->msg_case);
	}
	shardline__node__coord_msg__free_unpacked(m, NULL);
}

/* Heartbeats, registration retries, and the coordinator-lost check. */
static int timers(leader *l, char *err, size_t errlen)
{
	double now = sl_now(), hb = l->hb_ms * 1e-3;
	/* a coordinator that refused us stays connected: it answers the
	 * retries, and a fresh socket would not change its mind */
	if (!l->refused && now - l->last_heard > LEADER_DEAD_INTERVALS * hb) {
		if (l->registered || node_sched_busy(l->s))
			SL_WARN("leader", "coordinator silent for %d ms: dropping %s requests, reconnecting",
				(int)((now - l->last_heard) * 1e3), node_sched_busy(l->s) ? "its" : "no");
		node_sched_cancel_all(l->s);
		if (l->n_eps > 1) { /* a standby pair: the other may have taken over */
			l->cur = (l->cur + 1) % l->n_eps;
			SL_INFO("leader", "trying the coordinator at %s", l->eps[l->cur]);
		}
		int rc = open_socket(l, err, errlen);
		if (rc)
			return rc;
	}
	if (!l->registered) {
		if (now >= l->next_register)
			send_register(l);
	} else if (now - l->last_hb >= hb) {
		send_heartbeat(l);
	}
	return SL_OK;
}

static int poll_ms(const leader *l)
{
	double now = sl_now();
	if (node_sched_busy(l->s)) {
		double wait = l->next_step - now;
		return wait > 0 ? (int)(wait * 1e3) + 1 : 0;
	}
	int ms = l->hb_ms / 4;
	return ms < 50 ? ms : 50;
}

/* Preemption means the KV pool is too small for the load: say so, at most
 * every 10 s so a saturated group does not flood its log; force: now. */
static void log_preemptions(leader *l, int force)
{
	long n = node_engine_stats(l->e)->preemptions;
	if (n == l->preemptions_logged || (!force && sl_now() - l->last_preempt_log < 10))
		return;
	SL_WARN("leader", "kv: %ld sequences preempted (%ld in all; %d of %d blocks free); "
		"more --kv-blocks would avoid recomputing them", n - l->preemptions_logged, n,
		node_engine_free_blocks(l->e), node_engine_total_blocks(l->e));
	l->preemptions_logged = n;
	l->last_preempt_log = sl_now();
}

static int step(leader *l, char *err, size_t errlen)
{
	const node_sched_event *ev;
	int n;
	l->next_step = sl_now() + l->o->min_step_ms * 1e-3;
	int rc = node_sched_step(l->s, &ev, &n, err, errlen);
	if (rc)
		return rc;
	l->step++;
	if (n > 0 && l->registered)
		send_events(l, ev, n);
	else if (l->registered && node_engine_cache_events_pending(l->e))
		send_heartbeat(l); /* a prefill-only step cached blocks: tell the router now */
	log_preemptions(l, 0);
	return SL_OK;
}

/* A signal (SIGTERM from an operator, systemd or mpirun): drain as a
 * Drain{exit} would, and leave by grace_s from now whatever still runs. */
static void on_stop(leader *l)
{
	l->stop_by = sl_now() + l->o->grace_s;
	l->draining = l->drain_exit = 1;
	SL_INFO("leader", "signalled: draining, leaving when idle or in %d s", l->o->grace_s);
	if (l->registered)
		send_heartbeat(l); /* the coordinator routes nothing more here */
}

/* Leaving: the coordinator hears it at once (not 3 heartbeats later) and
 * moves what still runs here to another group. The socket's linger is 0
 * (proto/wire.c): give this last message a moment to go out. */
static void say_leaving(leader *l)
{
	if (!l->registered || !l->sock)
		return;
	send_heartbeat_ex(l, 1);
	int linger = 1000;
	zmq_setsockopt(l->sock, ZMQ_LINGER, &linger, sizeof linger);
}

static int serve(leader *l, char *err, size_t errlen)
{
	int rc = open_socket(l, err, errlen);
	while (!rc) {
		if (*l->o->stop && l->stop_by == 0)
			on_stop(l);
		if (l->stop_by > 0 && sl_now() >= l->stop_by) {
			SL_WARN("leader", "grace of %d s over with %s requests: leaving; the coordinator "
				"moves them to another group", l->o->grace_s,
				node_sched_busy(l->s) ? "running" : "no");
			break;
		}
		zmq_pollitem_t it = {l->sock, 0, ZMQ_POLLIN, 0};
		if (zmq_poll(&it, 1, poll_ms(l)) < 0 && errno != EINTR)
			return sl_errf(err, errlen, SL_ECOMM, "zmq_poll: %s", zmq_strerror(errno));
		sl_wire_msg w;
		int got = 0, budget = 1000; /* a flood of messages cannot stop the steps */
		while (budget-- > 0 && (got = sl_wire_recv(l->sock, &w)) == 1) {
			on_message(l, &w);
			sl_wire_msg_close(&w);
		}
		if (got < 0)
			return sl_errf(err, errlen, SL_ECOMM, "receive: %s", zmq_strerror(errno));
		if ((rc = timers(l, err, errlen)))
			break;
		if (node_sched_busy(l->s) && sl_now() >= l->next_step)
			rc = step(l, err, errlen);
		if (l->draining && l->drain_exit && !node_sched_busy(l->s)) {
			SL_INFO("leader", "drained; leaving");
			break;
		}
	}
	if (!rc)
		say_leaving(l);
	return rc;
}

/* The engine failed: every request it held ends with the reason. */
static void fail_all(leader *l, const char *why)
{
	const node_sched_event *ev;
	int n;
	node_sched_fail_all(l->s, why, &ev, &n);
	if (n > 0)
		send_events(l, ev, n);
}

int node_leader_run(node_group *g, const node_leader_opts *o, char *err, size_t errlen)
{
	node_leader_opts eff = *o; /* defaults filled in */
	if (eff.max_running <= 0)
		eff.max_running = g->m->opts.max_seqs > 0 ? g->m->opts.max_seqs : 64;
	if (eff.max_waiting < 0)
		eff.max_waiting = 0;
	leader l = {.o = &eff, .g = g, .hb_ms = o->heartbeat_ms > 0 ? o->heartbeat_ms : 1000,
		    .rng = sl_random_seed()};
	char host[64] = "?";
	gethostname(host, sizeof host - 1);
	snprintf(l.name, sizeof l.name, "%s:%d", host, (int)getpid());
	node_sched_opts so = {.max_running = eff.max_running, .max_waiting = eff.max_waiting,
			      .policy = eff.batching};
	int rc = node_engine_create(g->m, &l.e, err, errlen);
	if (!rc) {
		node_engine_set_prefix_cache(l.e, !o->no_prefix_cache);
		if (!o->no_prefix_cache && node_engine_cache_events_enable(l.e))
			rc = sl_errf(err, errlen, SL_ENOMEM, "prefix cache events: out of memory");
	}
	if (!rc)
		rc = node_sched_create(l.e, &so, &l.s, err, errlen);
	if (!rc && !(l.ctx = zmq_ctx_new()))
		rc = sl_errf(err, errlen, SL_ECOMM, "zmq_ctx_new failed");
	if (!rc) {
		SL_INFO("leader", "serving model %s for %s (tp %d x pp %d, %d KV blocks, up to %d running, "
			"%s batching, %d tokens per step, prefix cache %s)", eff.model_name, eff.coordinator,
			g->m->shard.grid.tp, g->m->shard.grid.pp, node_engine_total_blocks(l.e), eff.max_running,
			node_sched_policy_name(eff.batching), g->m->opts.step_tokens,
			o->no_prefix_cache ? "off" : "on");
		rc = serve(&l, err, errlen);
		log_preemptions(&l, 1);
		node_cache_stats cs;
		node_engine_cache_stats(l.e, &cs);
		if (cs.enabled)
			SL_INFO("leader", "prefix cache: %ld of %ld prompt tokens reused, %ld blocks "
				"evicted, %d cached", cs.hit_tokens, cs.queried_tokens, cs.evictions,
				cs.cached_blocks);
		if (rc && l.sock)
			fail_all(&l, err);
	}
	node_sched_destroy(l.s);
	node_engine_destroy(l.e);
	if (l.sock)
		zmq_close(l.sock);
	if (l.ctx)
		zmq_ctx_term(l.ctx);
	return rc;
}
