/*
 * leader.c — the node group leader's serving loop (see leader.h).
 * Handlers by message type: on_ack, on_enqueue, on_cancel, on_drain,
 * on_reregister; timers for heartbeats, registration and coordinator loss.
 * One link per coordinator endpoint (two for a standby pair, registered
 * with both): a request's id in the scheduler carries the link it came
 * from in its low bits, so its tokens go back there and a lost link drops
 * only its own requests.
 * Every Load it sends (heartbeats, and the one in each TokenBatch) carries
 * the prefix cache's counters and the block hashes cached and evicted
 * since the previous one, so the coordinator's picture of the cache
 * (coordinator/route.c) is at most one message old.
 */
#include "node/leader.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/checks.h"
#include "proto/curve.h"
#include "node/compiles.h"
#include "node/engine.h"
#include "proto/node.pb-c.h"
#include "proto/sampling_pb.h"
#include "common/rng.h"
#include "node/scheduler.h"
#include "common/sl.h"
#include "node/step.h"
#include "proto/wire.h"
#include "node/watchdog.h"

#define LEADER_MAX_MSG (64 << 20)   /* largest message taken from the coordinator */
#define LEADER_DEAD_INTERVALS 3
#define LINK_BITS 2                 /* low bits of a scheduler id: the link */
#define LEADER_MAX_ENDPOINTS (1 << LINK_BITS)
/* Hashes per Load, at most: bounds a snapshot of a huge cache (8 MiB) far
 * below the coordinator's message limit; a router missing some of a
 * snapshot only routes worse. Per-step events are far fewer. */
#define LEADER_MAX_CACHE_EVENTS (1 << 20)

/* One coordinator of --coordinator EP[,EP2]: its socket and registration. */
typedef struct coord_link {
	const char *ep;
	void *sock;
	uint64_t session;          /* random per socket: a repeated Register is idempotent */
	int registered, refused;
	int reg_tries;             /* registrations sent since it last spoke */
	double last_heard;         /* any message from it (or the socket's birth) */
	double next_register;
	double wait_since;         /* unanswered since (0: registered, or not yet tried) */
	double next_wait_log, wait_log_gap;
} coord_link;

typedef struct leader {
	const node_leader_opts *o;
	node_group *g;
	node_engine *e;
	node_sched *s;
	node_compiles *cq;         /* constrained requests until their constraint compiled */
	void *ctx;
	coord_link links[LEADER_MAX_ENDPOINTS];
	int n_links;
	char eps_buf[1024];        /* --coordinator, cut at the commas */
	int draining, drain_exit;
	double stop_by;            /* signalled: leave by then whatever runs (0: not) */
	int hb_ms;
	double last_hb, next_step; /* heartbeats go to every registered link at once */
	uint64_t rng;              /* jitter */
	long preemptions_logged;   /* node_stats.preemptions at the last log line */
	double last_preempt_log;
	uint64_t step;
	char name[160];
	double last_keepalive;     /* the workers' last plan or keepalive */
	/* The heartbeat thread (beat_main): it owns the sockets while in_step
	 * is set, the loop the rest of the time; in_step changes under mu,
	 * and the thread works on the sockets only holding mu. */
	pthread_t beat;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int beat_started, beat_quit, in_step;
	int beat_failed;           /* a send from the thread failed: resync the cache events */
	int snap_running, snap_waiting, snap_kv_free; /* the load when the step began */
} leader;

/* A coordinator's request id and the scheduler's id for it. */
static uint64_t local_id(int k, uint64_t req_id) { return req_id << LINK_BITS | (uint64_t)k; }
static int id_link(uint64_t id) { return (int)(id & (LEADER_MAX_ENDPOINTS - 1)); }
static uint64_t id_remote(uint64_t id) { return id >> LINK_BITS; }

static int any_registered(const leader *l)
{
	for (int k = 0; k < l->n_links; k++)
		if (l->links[k].registered)
			return 1;
	return 0;
}

static int match_link(uint64_t id, void *arg) { return id_link(id) == *(int *)arg; }

static int match_id(uint64_t id, void *arg) { return id == *(uint64_t *)arg; }

/* Link k is gone or starts over: nobody is left to stream its requests to. */
static void drop_link_requests(leader *l, int k)
{
	node_sched_cancel_if(l->s, match_link, &k);
	node_compiles_cancel_if(l->cq, match_link, &k);
}

/* Requests here: in the scheduler, or waiting for their constraint. */
static int busy(leader *l) { return node_sched_busy(l->s) || node_compiles_pending(l->cq) > 0; }

/* Registration retries back off exponentially, from one heartbeat to
 * LEADER_BACKOFF_MAX heartbeats, each delay drawn from [d/2, d) so that
 * groups reconnecting to a restarted coordinator do not all arrive at once.
 * Any message from the coordinator resets the backoff. */
#define LEADER_BACKOFF_MAX 10

/* A coordinator that never answers is said so in the log after
 * LEADER_WAIT_LOG_FIRST heartbeats, then after twice as long each time, up
 * to every LEADER_WAIT_LOG_MAX heartbeats: an operator sees why the group
 * is idle without the log filling up. */
#define LEADER_WAIT_LOG_FIRST 5
#define LEADER_WAIT_LOG_MAX 300

static double register_delay(leader *l, const coord_link *lk)
{
	double hb = l->hb_ms * 1e-3, d = hb;
	for (int k = 0; k < lk->reg_tries && d < LEADER_BACKOFF_MAX * hb; k++)
		d *= 2;
	d = d < LEADER_BACKOFF_MAX * hb ? d : LEADER_BACKOFF_MAX * hb;
	return d * (0.5 + 0.5 * sl_rng_unit(&l->rng));
}

static int send_msg(leader *l, int k, Shardline__Node__NodeMsg *m)
{
	int e = 0;
	if (sl_wire_send(l->links[k].sock, NULL, 0, &m->base, &e)) {
		SL_WARN("leader", "send to the coordinator at %s failed: %s", l->links[k].ep,
			zmq_strerror(e));
		node_engine_cache_events_resync(l->e); /* hash events may be lost: start over */
		return SL_ECOMM;
	}
	return SL_OK;
}

/* A fresh socket to link k: whatever the old one still queued (for a
 * coordinator that is gone) is dropped with it. */
static int open_link(leader *l, int k, char *err, size_t errlen)
{
	coord_link *lk = &l->links[k];
	if (lk->sock)
		zmq_close(lk->sock);
	lk->sock = sl_wire_socket(l->ctx, ZMQ_DEALER, LEADER_MAX_MSG);
	int rc = lk->sock ? sl_curve_client_apply(l->o->curve, lk->sock, err, errlen) : SL_OK;
	if (rc)
		return rc;
	if (!lk->sock || zmq_connect(lk->sock, lk->ep))
		return sl_errf(err, errlen, SL_ECOMM, "cannot connect to %s: %s", lk->ep,
			       zmq_strerror(errno));
	lk->session = sl_splitmix64(&l->rng);
	lk->registered = 0;
	lk->last_heard = sl_now();
	lk->next_register = 0;
	return SL_OK;
}

/* One link per endpoint of --coordinator (EP, or EP1,EP2 for a pair). */
static int open_links(leader *l, char *err, size_t errlen)
{
	char *save = NULL;
	snprintf(l->eps_buf, sizeof l->eps_buf, "%s", l->o->coordinator);
	for (char *e = strtok_r(l->eps_buf, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		if (l->n_links == LEADER_MAX_ENDPOINTS)
			return sl_errf(err, errlen, SL_EINVAL, "--coordinator: more than %d endpoints",
				       LEADER_MAX_ENDPOINTS);
		l->links[l->n_links].ep = e;
		TRY(open_link(l, l->n_links++, err, errlen));
	}
	if (!l->n_links)
		return sl_errf(err, errlen, SL_EINVAL, "--coordinator: no endpoint in '%s'",
			       l->o->coordinator);
	return SL_OK;
}

/* The step counters (watchdog.h) every Load carries. */
static void fill_progress(Shardline__Node__Load *ld)
{
	node_progress_view v;
	node_progress_get(&v);
	ld->has_steps = ld->has_in_step_ms = ld->has_progress = 1;
	ld->steps = v.steps;
	ld->in_step_ms = v.in_step_ms;
	ld->progress = v.ticks;
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
	fill_progress(ld);
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

static void send_register(leader *l, int k)
{
	coord_link *lk = &l->links[k];
	const model *m = l->g->m;
	Shardline__Node__Register r = SHARDLINE__NODE__REGISTER__INIT;
	r.has_protocol = r.has_session = r.has_tp = r.has_pp = r.has_kv_blocks = 1;
	r.has_block_tokens = r.has_max_pos = r.has_vocab_size = r.has_max_running = 1;
	r.has_max_waiting = 1;
	r.protocol = 1;
	r.model = (char *)l->o->model_name;
	r.name = l->name;
	r.session = lk->session;
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
	send_msg(l, k, &msg);
	lk->next_register = sl_now() + register_delay(l, lk);
	lk->reg_tries++;
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
	for (int k = 0; k < l->n_links; k++)
		if (l->links[k].registered)
			send_msg(l, k, &msg);
	l->last_hb = sl_now();
}

static void send_heartbeat(leader *l) { send_heartbeat_ex(l, 0); }

/* The heartbeat thread's Load, during a step: the load as the step began
 * and the progress now; no cache events (the step is changing them; the
 * loop's next Load carries them). A signal's drain shows at once. Called
 * holding mu, with in_step set. */
static void beat_send(leader *l)
{
	Shardline__Node__Load ld = SHARDLINE__NODE__LOAD__INIT;
	ld.has_running = ld.has_waiting = ld.has_kv_free = ld.has_draining = 1;
	ld.running = l->snap_running;
	ld.waiting = l->snap_waiting;
	ld.kv_free = l->snap_kv_free;
	ld.draining = l->draining || *l->o->stop;
	fill_progress(&ld);
	Shardline__Node__NodeMsg msg = SHARDLINE__NODE__NODE_MSG__INIT;
	msg.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_HEARTBEAT;
	msg.heartbeat = &ld;
	for (int k = 0; k < l->n_links; k++) {
		int e = 0;
		if (l->links[k].registered && sl_wire_send(l->links[k].sock, NULL, 0, &msg.base, &e))
			l->beat_failed = 1;
	}
	l->last_hb = sl_now();
}

/* Heartbeats while a step runs: due every interval, and at once when a
 * signal asks to drain. It looks every BEAT_LOOK_S for the signal. */
#define BEAT_LOOK_S 0.05

static void *beat_main(void *arg)
{
	leader *l = arg;
	int told_stop = 0;
	pthread_mutex_lock(&l->mu);
	while (!l->beat_quit) {
		double wait = 3600, now = sl_now(), hb = l->hb_ms * 1e-3;
		if (l->in_step) {
			int stop_news = *l->o->stop && !told_stop;
			if (now - l->last_hb >= hb || stop_news) {
				beat_send(l);
				told_stop |= *l->o->stop != 0;
			}
			wait = l->last_hb + hb - sl_now();
			wait = wait < BEAT_LOOK_S ? (wait > 0 ? wait : 0) : BEAT_LOOK_S;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		long ns = ts.tv_nsec + (long)((wait - (long)wait) * 1e9);
		ts.tv_sec += (time_t)wait + ns / 1000000000L;
		ts.tv_nsec = ns % 1000000000L;
		pthread_cond_timedwait(&l->cv, &l->mu, &ts);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* The sockets go to the heartbeat thread for a step, with the load as
 * it begins. */
static void beat_enter(leader *l)
{
	pthread_mutex_lock(&l->mu);
	node_sched_load(l->s, &l->snap_running, &l->snap_waiting, &l->snap_kv_free);
	l->in_step = 1;
	pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->mu);
}

/* And come back after it (the thread's send, if any, is over then). */
static void beat_leave(leader *l)
{
	pthread_mutex_lock(&l->mu);
	l->in_step = 0;
	pthread_mutex_unlock(&l->mu);
	if (l->beat_failed) { /* hash events may be lost: start over */
		l->beat_failed = 0;
		node_engine_cache_events_resync(l->e);
	}
}

static int beat_start(leader *l, char *err, size_t errlen)
{
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	if (pthread_create(&l->beat, NULL, beat_main, l))
		return sl_errf(err, errlen, SL_ENOMEM, "cannot start the heartbeat thread");
	l->beat_started = 1;
	return SL_OK;
}

static void beat_stop(leader *l)
{
	if (!l->beat_started)
		return;
	pthread_mutex_lock(&l->mu);
	l->beat_quit = 1;
	pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->mu);
	pthread_join(l->beat, NULL);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->cv);
	l->beat_started = 0;
}

static const Shardline__Node__Finish finish_wire[] = {
	[NODE_SCHED_RUNNING] = SHARDLINE__NODE__FINISH__RUNNING,
	[NODE_SCHED_LENGTH] = SHARDLINE__NODE__FINISH__LENGTH,
	[NODE_SCHED_EOS] = SHARDLINE__NODE__FINISH__EOS,
	[NODE_SCHED_ERROR] = SHARDLINE__NODE__FINISH__ERROR,
	[NODE_SCHED_REFUSED] = SHARDLINE__NODE__FINISH__REFUSED,
};

/* The events of link k's requests (ids as that coordinator gave them)
 * into seq/ptrs; returns how many. */
static int link_events(int k, const node_sched_event *ev, int n, Shardline__Node__SeqTokens *seq,
		       Shardline__Node__SeqTokens **ptrs)
{
	int m = 0;
	for (int j = 0; j < n; j++) {
		if (id_link(ev[j].req_id) != k)
			continue;
		int i = m++;
		seq[i] = (Shardline__Node__SeqTokens)SHARDLINE__NODE__SEQ_TOKENS__INIT;
		seq[i].has_req_id = seq[i].has_finish = 1;
		seq[i].req_id = id_remote(ev[j].req_id);
		seq[i].n_tokens = ev[j].n_tokens;
		seq[i].tokens = (int32_t *)ev[j].tokens;
		seq[i].finish = finish_wire[ev[j].finish];
		seq[i].error = (char *)ev[j].error;
		if (ev[j].logprobs) {
			seq[i].has_top_n = 1;
			seq[i].top_n = ev[j].top_n;
			seq[i].n_logprobs = ev[j].n_tokens;
			seq[i].logprobs = (float *)ev[j].logprobs;
			seq[i].n_top_ids = seq[i].n_top_logprobs = (size_t)ev[j].n_tokens * ev[j].top_n;
			seq[i].top_ids = (int32_t *)ev[j].top_ids;
			seq[i].top_logprobs = (float *)ev[j].top_logprobs;
		}
		ptrs[i] = &seq[i];
	}
	return m;
}

/* One TokenBatch per registered link for n events, each with the events
 * of its own requests; the load rides along to all as a heartbeat. */
static void send_events(leader *l, const node_sched_event *ev, int n)
{
	Shardline__Node__SeqTokens seq[n > 0 ? n : 1], *ptrs[n > 0 ? n : 1];
	Shardline__Node__Load ld = SHARDLINE__NODE__LOAD__INIT;
	fill_load(l, &ld);
	for (int k = 0; k < l->n_links; k++) {
		if (!l->links[k].registered)
			continue;
		Shardline__Node__TokenBatch tb = SHARDLINE__NODE__TOKEN_BATCH__INIT;
		tb.has_step = 1;
		tb.step = l->step;
		tb.n_seqs = link_events(k, ev, n, seq, ptrs);
		tb.seqs = ptrs;
		tb.load = &ld;
		Shardline__Node__NodeMsg msg = SHARDLINE__NODE__NODE_MSG__INIT;
		msg.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_TOKENS;
		msg.tokens = &tb;
		send_msg(l, k, &msg);
	}
	l->last_hb = sl_now();
}

static void send_finish(leader *l, int k, uint64_t req_id, node_sched_finish f, const char *why)
{
	node_sched_event ev = {.req_id = local_id(k, req_id), .finish = f, .error = why};
	send_events(l, &ev, 1);
}

static void send_error(leader *l, int k, uint64_t req_id, const char *why)
{
	send_finish(l, k, req_id, NODE_SCHED_ERROR, why);
}

/* An Enqueue whose id breaks the protocol's bound (2^62: the scheduler's id
 * holds the link in its low bits) is refused under the id as given. */
static void send_bad_id(leader *l, int k, uint64_t req_id)
{
	Shardline__Node__SeqTokens seq = SHARDLINE__NODE__SEQ_TOKENS__INIT, *ptr = &seq;
	seq.has_req_id = seq.has_finish = 1;
	seq.req_id = req_id;
	seq.finish = SHARDLINE__NODE__FINISH__ERROR;
	seq.error = "req_id not below 2^62 (docs/protocol.md)";
	Shardline__Node__TokenBatch tb = SHARDLINE__NODE__TOKEN_BATCH__INIT;
	tb.n_seqs = 1;
	tb.seqs = &ptr;
	Shardline__Node__NodeMsg msg = SHARDLINE__NODE__NODE_MSG__INIT;
	msg.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_TOKENS;
	msg.tokens = &tb;
	send_msg(l, k, &msg);
}

static void on_ack(leader *l, int k, const Shardline__Node__RegisterAck *a)
{
	coord_link *lk = &l->links[k];
	if (!a->has_ok || !a->ok) {
		SL_ERROR("leader", "coordinator at %s refused registration: %s", lk->ep,
			 a->error ? a->error : "(no reason)");
		lk->refused = 1;
		return;
	}
	if (a->has_heartbeat_ms && a->heartbeat_ms >= 10 && a->heartbeat_ms <= 60000)
		l->hb_ms = (int)a->heartbeat_ms;
	if (!lk->registered) {
		SL_INFO("leader", "registered with %s as group %u (model %s, heartbeat %d ms)",
			lk->ep, a->group_id, l->o->model_name, l->hb_ms);
		/* a new session knows none of our cache: the next Load tells all */
		node_engine_cache_events_resync(l->e);
	}
	lk->registered = 1;
	lk->refused = 0;
	lk->reg_tries = 0;
}

static void on_enqueue(leader *l, int k, const Shardline__Node__Enqueue *q)
{
	char err[SL_ERRLEN];
	if (!q->has_req_id) {
		SL_WARN("leader", "enqueue without req_id ignored");
		return;
	}
	if (id_remote(local_id(k, q->req_id)) != q->req_id) {
		send_bad_id(l, k, q->req_id);
		return;
	}
	if (l->draining) {
		send_error(l, k, q->req_id, "node group is draining");
		return;
	}
	node_request r = {.prompt = q->prompt, .n_prompt = (int)q->n_prompt,
			  .max_new_tokens = q->has_max_tokens ? q->max_tokens : 0,
			  .ignore_eos = q->has_ignore_eos && q->ignore_eos,
			  .n_resumed = q->has_resume_generated ? q->resume_generated : 0};
	if (q->n_prompt > (size_t)l->g->m->cfg.max_pos) {
		send_error(l, k, q->req_id, "prompt longer than the context");
		return;
	}
	sl_sampling_from_pb(&r.sampling, q->sampling ? &q->sampling->base : NULL, &q->base);
	if (sl_token_lists_from_pb(&r.lists, q->sampling, err, sizeof err)) {
		send_error(l, k, q->req_id, err);
		return;
	}
	/* compiled off the loop (node/compiles.h): the running streams do not
	 * wait for it; a bad constraint fails this request alone */
	if (q->has_constraint_kind && !sl_constraint_kind_known((int)q->constraint_kind)) {
		snprintf(err, sizeof err, "constraint_kind %d is not a known kind",
			 (int)q->constraint_kind);
		send_error(l, k, q->req_id, err);
		return;
	}
	if (q->has_constraint_kind && (sl_constraint_kind)q->constraint_kind != SL_CONSTRAINT_NONE) {
		if (node_compiles_submit(l->cq, local_id(k, q->req_id), &r,
					 (sl_constraint_kind)q->constraint_kind,
					 (const char *)q->constraint.data, q->constraint.len, err,
					 sizeof err))
			send_error(l, k, q->req_id, err);
		return;
	}
	if (node_sched_submit(l->s, local_id(k, q->req_id), &r, err, sizeof err))
		send_error(l, k, q->req_id, err);
}

/* The constrained requests whose compile finished: to the scheduler, or
 * their constraint's error to their coordinator. */
static void take_compiled(leader *l)
{
	node_compile_done d;
	char err[SL_ERRLEN];
	while (node_compiles_take(l->cq, &d)) {
		int k = id_link(d.id);
		/* a constraint unusable as written (SL_EINVAL: too slow to enforce,
		 * over a limit) is the client's error, not the group's failure */
		if (d.rc)
			send_finish(l, k, id_remote(d.id),
				    d.rc == SL_EINVAL ? NODE_SCHED_REFUSED : NODE_SCHED_ERROR, d.err);
		else if (node_sched_submit(l->s, d.id, &d.r, err, sizeof err))
			send_error(l, k, id_remote(d.id), err);
		d.r.matcher = NULL; /* the scheduler took it, either way */
		node_compile_done_free(&d);
	}
}

static void on_drain(leader *l, const Shardline__Node__Drain *d)
{
	l->draining = 1;
	l->drain_exit |= d->has_exit && d->exit;
	SL_INFO("leader", "draining%s", l->drain_exit ? "; leaving when idle" : "");
	send_heartbeat(l);
}

/* A message from link k's coordinator. */
static void on_message(leader *l, int k, sl_wire_msg *w)
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
	l->links[k].last_heard = sl_now();
	switch (m->msg_case) {
	case SHARDLINE__NODE__COORD_MSG__MSG_ACK: on_ack(l, k, m->ack); break;
	case SHARDLINE__NODE__COORD_MSG__MSG_PING: break;
	case SHARDLINE__NODE__COORD_MSG__MSG_ENQUEUE: on_enqueue(l, k, m->enqueue); break;
	case SHARDLINE__NODE__COORD_MSG__MSG_CANCEL:
		if (m->cancel->has_req_id) {
			uint64_t id = local_id(k, m->cancel->req_id);
			node_sched_cancel(l->s, id);
			node_compiles_cancel_if(l->cq, match_id, &id);
		}
		break;
	case SHARDLINE__NODE__COORD_MSG__MSG_DRAIN: on_drain(l, m->drain); break;
	case SHARDLINE__NODE__COORD_MSG__MSG_REREGISTER:
		/* a coordinator that does not know us cannot want our requests */
		SL_INFO("leader", "coordinator at %s asks to register again", l->links[k].ep);
		drop_link_requests(l, k);
		l->links[k].registered = 0;
		send_register(l, k);
		break;
	default: SL_WARN("leader", "unknown message type %d ignored", (int)m->msg_case);
	}
	shardline__node__coord_msg__free_unpacked(m, NULL);
}

/* Link k's coordinator has been silent for 3 intervals: it is gone (or
 * restarted and knows us no more). Drop what it asked for and start over
 * on a fresh socket; the other link of a pair goes on undisturbed. */
static int link_lost(leader *l, int k, double silent_s, char *err, size_t errlen)
{
	coord_link *lk = &l->links[k];
	if (lk->registered)
		SL_WARN("leader", "coordinator at %s silent for %d ms: dropping its requests, "
			"reconnecting", lk->ep, (int)(silent_s * 1e3));
	drop_link_requests(l, k);
	return open_link(l, k, err, errlen);
}

static void log_waiting(leader *l, coord_link *lk, double now)
{
	double hb = l->hb_ms * 1e-3;
	if (lk->registered || lk->refused) {
		lk->wait_since = 0;
		return;
	}
	if (!lk->wait_since) {
		lk->wait_since = now;
		lk->wait_log_gap = LEADER_WAIT_LOG_FIRST * hb;
		lk->next_wait_log = now + lk->wait_log_gap;
		return;
	}
	if (now < lk->next_wait_log)
		return;
	SL_WARN("leader", "still waiting for the coordinator at %s: no answer for %.1f s (is it "
		"running, is this its --node-bind, do the CURVE keys match?)", lk->ep, now - lk->wait_since);
	lk->wait_log_gap *= 2;
	if (lk->wait_log_gap > LEADER_WAIT_LOG_MAX * hb)
		lk->wait_log_gap = LEADER_WAIT_LOG_MAX * hb;
	lk->next_wait_log = now + lk->wait_log_gap;
}

/* Heartbeats, registration retries, and the coordinator-lost check, per
 * link; heartbeats go to every registered link at once. */
static int timers(leader *l, char *err, size_t errlen)
{
	double now = sl_now(), hb = l->hb_ms * 1e-3;
	for (int k = 0; k < l->n_links; k++) {
		coord_link *lk = &l->links[k];
		/* a coordinator that refused us stays connected: it answers the
		 * retries, and a fresh socket would not change its mind */
		if (!lk->refused && now - lk->last_heard > LEADER_DEAD_INTERVALS * hb)
			TRY(link_lost(l, k, now - lk->last_heard, err, errlen));
		if (!lk->registered && now >= lk->next_register)
			send_register(l, k);
		log_waiting(l, lk, now);
	}
	if (any_registered(l) && now - l->last_hb >= hb)
		send_heartbeat(l);
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
	beat_enter(l);
	node_progress_begin();
	int rc = node_sched_step(l->s, &ev, &n, err, errlen);
	node_progress_end();
	beat_leave(l);
	l->last_keepalive = sl_now(); /* a plan tells the workers as much */
	if (rc)
		return rc;
	l->step++;
	if (n > 0 && any_registered(l))
		send_events(l, ev, n);
	else if (any_registered(l) && node_engine_cache_events_pending(l->e))
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
	if (any_registered(l))
		send_heartbeat(l); /* the coordinators route nothing more here */
}

/* Leaving: the coordinator hears it at once (not 3 heartbeats later) and
 * moves what still runs here to another group. The socket's linger is 0
 * (proto/wire.c): give this last message a moment to go out. */
static void say_leaving(leader *l)
{
	if (!any_registered(l))
		return;
	send_heartbeat_ex(l, 1);
	int linger = 1000;
	for (int k = 0; k < l->n_links; k++)
		zmq_setsockopt(l->links[k].sock, ZMQ_LINGER, &linger, sizeof linger);
}

/* Wait for a message (at most until the next step or timer) and take in
 * what every link has; a flood on one cannot stop the steps. */
static int receive(leader *l, char *err, size_t errlen)
{
	zmq_pollitem_t it[LEADER_MAX_ENDPOINTS + 1];
	for (int k = 0; k < l->n_links; k++)
		it[k] = (zmq_pollitem_t){l->links[k].sock, 0, ZMQ_POLLIN, 0};
	it[l->n_links] = (zmq_pollitem_t){NULL, node_compiles_fd(l->cq), ZMQ_POLLIN, 0};
	if (zmq_poll(it, l->n_links + 1, poll_ms(l)) < 0 && errno != EINTR)
		return sl_errf(err, errlen, SL_ECOMM, "zmq_poll: %s", zmq_strerror(errno));
	take_compiled(l);
	for (int k = 0; k < l->n_links; k++) {
		sl_wire_msg w;
		int got = 0, budget = 1000;
		while (budget-- > 0 && (got = sl_wire_recv(l->links[k].sock, &w)) == 1) {
			on_message(l, k, &w);
			sl_wire_msg_close(&w);
		}
		if (got < 0)
			return sl_errf(err, errlen, SL_ECOMM, "receive from %s: %s", l->links[k].ep,
				       zmq_strerror(errno));
	}
	return SL_OK;
}

/* Idle: the workers hear from the leader every stall_ms / 5 all the same
 * (their watchdogs take silence for a lost leader). */
static int keepalive(leader *l, char *err, size_t errlen)
{
	double now = sl_now();
	if (l->o->stall_ms <= 0 || now - l->last_keepalive < l->o->stall_ms / 5e3)
		return SL_OK;
	l->last_keepalive = now;
	if (node_step_ping(l->g->m))
		return sl_errf(err, errlen, SL_ECOMM, "cannot send the workers a keepalive");
	return SL_OK;
}

static int serve(leader *l, char *err, size_t errlen)
{
	int rc = open_links(l, err, errlen);
	l->last_keepalive = sl_now();
	if (!rc)
		rc = beat_start(l, err, errlen);
	while (!rc) {
		if (*l->o->stop && l->stop_by == 0)
			on_stop(l);
		if (l->stop_by > 0 && sl_now() >= l->stop_by) {
			SL_WARN("leader", "grace of %d s over with %s requests: leaving; the coordinator "
				"moves them to another group", l->o->grace_s,
				busy(l) ? "running" : "no");
			break;
		}
		if ((rc = receive(l, err, errlen)))
			break;
		if ((rc = timers(l, err, errlen)))
			break;
		if (node_sched_busy(l->s) && sl_now() >= l->next_step)
			rc = step(l, err, errlen);
		else if (!rc)
			rc = keepalive(l, err, errlen);
		if (l->draining && l->drain_exit && !busy(l)) {
			SL_INFO("leader", "drained; leaving");
			break;
		}
	}
	if (!rc)
		say_leaving(l);
	return rc;
}

/* The engine failed: every request it held ends with the reason. */
typedef struct failing {
	leader *l;
	const char *why;
} failing;

/* node_compiles_cancel_if's match: every request, told why on its way out
 * (under the compiles' lock: it only sends) */
static int fail_one(uint64_t id, void *arg)
{
	failing *f = arg;
	send_error(f->l, id_link(id), id_remote(id), f->why);
	return 1;
}

static void fail_all(leader *l, const char *why)
{
	const node_sched_event *ev;
	int n;
	node_sched_fail_all(l->s, why, &ev, &n);
	if (n > 0)
		send_events(l, ev, n);
	failing f = {l, why};
	node_compiles_cancel_if(l->cq, fail_one, &f);
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
	if (!rc && o->tokenizer && node_engine_set_tokenizer(l.e, o->tokenizer))
		rc = sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	if (!rc)
		node_engine_set_grammar_limit(l.e, o->grammar_max_uncertain);
	if (!rc) {
		node_engine_set_prefix_cache(l.e, !o->no_prefix_cache);
		if (!o->no_prefix_cache && node_engine_cache_events_enable(l.e))
			rc = sl_errf(err, errlen, SL_ENOMEM, "prefix cache events: out of memory");
	}
	if (!rc)
		rc = node_sched_create(l.e, &so, &l.s, err, errlen);
	if (!rc)
		rc = node_compiles_create(l.e, &l.cq, err, errlen);
	if (!rc && !(l.ctx = zmq_ctx_new()))
		rc = sl_errf(err, errlen, SL_ECOMM, "zmq_ctx_new failed");
	if (!rc) {
		SL_INFO("leader", "serving model %s for %s (tp %d x pp %d, %d KV blocks, up to %d running, "
			"%s batching, %d tokens per step, prefix cache %s)", eff.model_name, eff.coordinator,
			g->m->shard.grid.tp, g->m->shard.grid.pp, node_engine_total_blocks(l.e), eff.max_running,
			node_sched_policy_name(eff.batching), g->m->opts.step_tokens,
			o->no_prefix_cache ? "off" : "on");
		rc = serve(&l, err, errlen);
		beat_stop(&l);
		log_preemptions(&l, 1);
		node_cache_stats cs;
		node_engine_cache_stats(l.e, &cs);
		if (cs.enabled)
			SL_INFO("leader", "prefix cache: %ld of %ld prompt tokens reused, %ld blocks "
				"evicted, %d cached", cs.hit_tokens, cs.queried_tokens, cs.evictions,
				cs.cached_blocks);
		if (rc && any_registered(&l))
			fail_all(&l, err);
	}
	node_compiles_destroy(l.cq); /* before the engine its worker compiles with */
	node_sched_destroy(l.s);
	node_engine_destroy(l.e);
	for (int k = 0; k < l.n_links; k++)
		if (l.links[k].sock)
			zmq_close(l.links[k].sock);
	if (l.ctx)
		zmq_ctx_term(l.ctx);
	return rc;
}
