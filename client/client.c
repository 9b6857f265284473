/*
 * client.c — the coordinator's C client library (see client.h): the
 * requests, the replies, and the liveness of the coordinator — pings,
 * the silence check, re-submission of requests that had not started.
 */
#include "client/client.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/curve.h"
#include "proto/client.pb-c.h"
#include "common/sl.h"
#include "proto/wire.h"

#define CLIENT_PING_LIMIT 2   /* intervals a ping may stay unanswered */
#define CLIENT_DEFAULT_HB_MS 1000
#define CLIENT_DEFAULT_RECONNECT_MS 10000
#define CLIENT_DEFAULT_RESUBMITS 3
#define CLIENT_MAX_ENDPOINTS 4     /* a primary and its standby, and room */

/* A request sent and not yet answered to the end. */
typedef enum { P_SUBMIT, P_STATUS } pending_kind;
typedef struct pending {
	uint64_t tag;
	pending_kind kind;         /* P_STATUS: a Status or Drain, answered by one Status */
	uint8_t *packed;           /* Submit, Status: the Request as sent, for a re-submission */
	size_t len;
	long tokens;               /* received: > 0 means started (never re-submitted) */
	int held;                  /* waiting for the coordinator to come back */
	int resubmits;
	double held_until;         /* held: then it ends with SL_ERR_UNAVAILABLE */
	unsigned timeout_ms;
} pending;

/* An event this library made (a request ended by the coordinator's loss,
 * a held request cancelled): handed out before anything from the socket. */
typedef struct made_event {
	sl_event_kind kind;
	uint64_t tag;
	int code;                  /* ERROR: SL_ERR_*; DONE: SL_FINISH_* */
	char *message;
} made_event;

struct sl_client {
	void *ctx, *sock;
	int own_ctx;
	uint64_t next_tag;
	char *endpoint;            /* as given: EP or EP1,EP2 (a standby pair) */
	char *eps[CLIENT_MAX_ENDPOINTS]; /* into a copy of it */
	char *eps_buf;
	int n_eps, cur;            /* eps[cur] is the one connected */
	sl_curve_client curve;
	int hb_ms, reconnect_ms, max_resubmits;
	pending *p;
	int n, cap;
	made_event *made;
	int n_made, cap_made;
	double last_heard;         /* any message, or when requests started waiting */
	double last_ping, ping_since; /* the first unanswered ping since last_heard; 0: none */
	uint64_t instance;         /* the coordinator's, from its last Pong; 0: not known */
	uint64_t ping_nonce;
	double down_since;         /* taken as gone at; 0: up */
	/* CURVE: a monitor of the socket's handshakes, so that a refused key
	 * is an error that says so rather than silence */
	void *monitor;
	unsigned n_monitors;
	char handshake_note[160];  /* the last failed handshake, for the silence error */
};

/* Handshake failures of c->sock reported on c->monitor (ZeroMQ's socket
 * monitor: a PAIR fed by libzmq over inproc). */
static int watch_handshakes(sl_client *c, char *err, size_t errlen)
{
	char addr[96];
	snprintf(addr, sizeof addr, "inproc://sl-client-monitor-%p-%u", (void *)c, c->n_monitors++);
	int linger = 0;
	if (zmq_socket_monitor(c->sock, addr, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
			       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) ||
	    !(c->monitor = zmq_socket(c->ctx, ZMQ_PAIR)) ||
	    zmq_setsockopt(c->monitor, ZMQ_LINGER, &linger, sizeof linger) ||
	    zmq_connect(c->monitor, addr))
		return sl_errf(err, errlen, SL_ECOMM, "socket monitor: %s", zmq_strerror(errno));
	return SL_OK;
}

/* A fresh DEALER: whatever the old one still queued (Submits for a dead
 * coordinator) must not reach the next one, and a new routing id makes
 * the replies of stale copies bounce instead of arriving here. */
static int client_connect(sl_client *c, char *err, size_t errlen)
{
	if (c->sock)
		zmq_close(c->sock);
	if (c->monitor)
		zmq_close(c->monitor);
	c->monitor = NULL;
	c->sock = sl_wire_socket(c->ctx, ZMQ_DEALER, 0);
	if (!c->sock)
		return sl_errf(err, errlen, SL_ECOMM, "zmq_socket: %s", zmq_strerror(errno));
	int rc = sl_curve_client_apply(&c->curve, c->sock, err, errlen);
	if (!rc && c->curve.on)
		rc = watch_handshakes(c, err, errlen);
	if (!rc && zmq_connect(c->sock, c->eps[c->cur]))
		rc = sl_errf(err, errlen, SL_ECOMM, "cannot connect to %s: %s", c->eps[c->cur],
			     zmq_strerror(errno));
	return rc;
}

int sl_client_open(void *ctx, const sl_client_opts *o, sl_client **out, char *err,
			size_t errlen)
{
	sl_client *c = calloc(1, sizeof *c);
	if (!c)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	c->next_tag = 1;
	c->hb_ms = o->heartbeat_ms ? o->heartbeat_ms : CLIENT_DEFAULT_HB_MS;
	c->reconnect_ms = o->reconnect_ms > 0 ? o->reconnect_ms : CLIENT_DEFAULT_RECONNECT_MS;
	c->max_resubmits = o->max_resubmits ? o->max_resubmits : CLIENT_DEFAULT_RESUBMITS;
	c->endpoint = strdup(o->endpoint ? o->endpoint : "tcp://127.0.0.1:5555");
	c->eps_buf = c->endpoint ? strdup(c->endpoint) : NULL;
	int rc = c->eps_buf ? SL_OK : sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	char *save = NULL;
	for (char *e = rc ? NULL : strtok_r(c->eps_buf, ",", &save); e; e = strtok_r(NULL, ",", &save))
		if (c->n_eps < CLIENT_MAX_ENDPOINTS)
			c->eps[c->n_eps++] = e;
	if (!rc && c->n_eps == 0)
		rc = sl_errf(err, errlen, SL_EINVAL, "no coordinator endpoint in '%s'", c->endpoint);
	if (!rc)
		rc = sl_curve_client_load(&c->curve, o->curve_key, o->curve_server_key, "--curve-key",
					  "--server-key", err, errlen);
	c->ctx = ctx;
	if (!rc && !c->ctx) {
		c->ctx = zmq_ctx_new();
		c->own_ctx = 1;
		if (!c->ctx)
			rc = sl_errf(err, errlen, SL_ECOMM, "zmq_ctx_new: %s", zmq_strerror(errno));
	}
	if (!rc)
		rc = client_connect(c, err, errlen);
	if (rc) {
		sl_client_destroy(c);
		return rc;
	}
	*out = c;
	return SL_OK;
}

int sl_client_create(void *ctx, const char *endpoint, sl_client **out, char *err,
			size_t errlen)
{
	sl_client_opts o = {.endpoint = endpoint};
	return sl_client_open(ctx, &o, out, err, errlen);
}

void sl_client_destroy(sl_client *c)
{
	if (!c)
		return;
	if (c->sock)
		zmq_close(c->sock);
	if (c->monitor)
		zmq_close(c->monitor);
	if (c->own_ctx && c->ctx)
		zmq_ctx_term(c->ctx);
	for (int i = 0; i < c->n; i++)
		free(c->p[i].packed);
	for (int i = 0; i < c->n_made; i++)
		free(c->made[i].message);
	free(c->p);
	free(c->made);
	free(c->endpoint);
	free(c->eps_buf);
	memset(&c->curve, 0, sizeof c->curve);
	free(c);
}

void *sl_client_socket(sl_client *c) { return c->sock; }

double sl_client_down_ms(const sl_client *c)
{
	return c->down_since ? (sl_now() - c->down_since) * 1e3 : 0;
}

static pending *find_pending(sl_client *c, uint64_t tag)
{
	for (int i = 0; i < c->n; i++)
		if (c->p[i].tag == tag)
			return &c->p[i];
	return NULL;
}

static void drop_pending(sl_client *c, pending *p)
{
	free(p->packed);
	*p = c->p[--c->n];
}

/* A new request waits: the first one starts the silence clock now (an
 * idle client pings nobody, so it has heard nothing lately). */
static int add_pending(sl_client *c, const pending *p)
{
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 8;
		pending *np = realloc(c->p, sizeof *np * (size_t)cap);
		if (!np)
			return SL_ENOMEM;
		c->p = np, c->cap = cap;
	}
	if (c->n == 0 && !c->down_since) {
		c->last_heard = c->last_ping = sl_now();
		c->ping_since = 0;
	}
	c->p[c->n++] = *p;
	return SL_OK;
}

static int add_made(sl_client *c, sl_event_kind kind, uint64_t tag, int code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int add_made(sl_client *c, sl_event_kind kind, uint64_t tag, int code, const char *fmt, ...)
{
	if (c->n_made == c->cap_made) {
		int cap = c->cap_made ? 2 * c->cap_made : 8;
		made_event *nm = realloc(c->made, sizeof *nm * (size_t)cap);
		if (!nm)
			return SL_ENOMEM;
		c->made = nm, c->cap_made = cap;
	}
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	c->made[c->n_made++] = (made_event){kind, tag, code, strdup(msg)};
	return SL_OK;
}

static int send_packed(sl_client *c, const uint8_t *buf, size_t len, char *err, size_t errlen)
{
	if (zmq_send(c->sock, buf, len, ZMQ_DONTWAIT) < 0)
		return sl_errf(err, errlen, SL_ECOMM, "send: %s", zmq_strerror(errno));
	return SL_OK;
}

static int send_request(sl_client *c, Shardline__Client__Request *q, char *err, size_t errlen)
{
	int e = 0;
	if (sl_wire_send(c->sock, NULL, 0, &q->base, &e))
		return sl_errf(err, errlen, SL_ECOMM, "send: %s", zmq_strerror(e));
	return SL_OK;
}

/* How long a held request waits for the coordinator: reconnect_ms, or
 * its own timeout when shorter. */
static int hold_ms(const sl_client *c, const pending *p)
{
	return p->timeout_ms && (int)p->timeout_ms < c->reconnect_ms ? (int)p->timeout_ms
								      : c->reconnect_ms;
}

/* A Drain: answered by one Status, never re-sent (an operator's drain
 * must not repeat behind their back); while the coordinator is gone it
 * fails at once. */
static int send_once(sl_client *c, uint64_t tag, Shardline__Client__Request *q, char *err,
		     size_t errlen)
{
	if (c->down_since)
		return sl_errf(err, errlen, SL_ECOMM, "the coordinator at %s has been unavailable for "
			       "%.0f ms", c->endpoint, sl_client_down_ms(c));
	pending pe = {.tag = tag, .kind = P_STATUS};
	int rc = send_request(c, q, err, errlen);
	if (!rc && add_pending(c, &pe))
		rc = sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	return rc;
}

/* A Submit or Status: kept packed for a re-submission, sent now or, while
 * the coordinator is gone, held like the requests it had not started. */
static int send_resendable(sl_client *c, pending *pe, Shardline__Client__Request *q, char *err,
			   size_t errlen)
{
	pe->len = protobuf_c_message_get_packed_size(&q->base);
	if (!(pe->packed = malloc(pe->len ? pe->len : 1)))
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	protobuf_c_message_pack(&q->base, pe->packed);
	if (c->down_since) {
		pe->held = 1;
		pe->held_until = sl_now() + hold_ms(c, pe) * 1e-3;
	}
	int rc = pe->held ? SL_OK : send_packed(c, pe->packed, pe->len, err, errlen);
	if (!rc && add_pending(c, pe))
		rc = sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	if (rc)
		free(pe->packed);
	return rc;
}

int sl_client_submit(sl_client *c, const sl_gen_params *p, uint64_t *tag, char *err,
			size_t errlen)
{
	Shardline__Client__Sampling sp = SHARDLINE__CLIENT__SAMPLING__INIT;
	sp.has_temperature = sp.has_seed = 1;
	sp.temperature = p->temperature;
	sp.seed = p->seed;
	sp.has_top_k = p->top_k != 0, sp.top_k = p->top_k;
	sp.has_top_p = p->top_p != 0, sp.top_p = p->top_p;
	sp.has_min_p = p->min_p != 0, sp.min_p = p->min_p;
	sp.has_presence_penalty = p->presence_penalty != 0, sp.presence_penalty = p->presence_penalty;
	sp.has_frequency_penalty = p->frequency_penalty != 0;
	sp.frequency_penalty = p->frequency_penalty;
	sp.has_repetition_penalty = p->repetition_penalty != 0;
	sp.repetition_penalty = p->repetition_penalty;
	sp.has_min_tokens = p->min_tokens != 0, sp.min_tokens = p->min_tokens;
	sp.n_logit_bias_ids = sp.n_logit_bias = p->n_logit_bias > 0 ? (size_t)p->n_logit_bias : 0;
	sp.logit_bias_ids = (int32_t *)p->logit_bias_ids;
	sp.logit_bias = (float *)p->logit_bias;
	sp.n_stop_token_ids = p->n_stop_token_ids > 0 ? (size_t)p->n_stop_token_ids : 0;
	sp.stop_token_ids = (int32_t *)p->stop_token_ids;
	Shardline__Client__Submit s = SHARDLINE__CLIENT__SUBMIT__INIT;
	ProtobufCBinaryData stops[p->n_stop > 0 ? p->n_stop : 1];
	for (int i = 0; i < p->n_stop; i++)
		stops[i] = (ProtobufCBinaryData){strlen(p->stop[i]), (uint8_t *)p->stop[i]};
	s.has_tag = 1;
	s.tag = c->next_tag++;
	s.model = (char *)p->model;
	if (p->prompt) {
		s.has_prompt = 1;
		s.prompt.data = (uint8_t *)p->prompt;
		s.prompt.len = p->prompt_len ? p->prompt_len : strlen(p->prompt);
	}
	s.n_prompt_ids = p->n_prompt_ids > 0 ? p->n_prompt_ids : 0;
	s.prompt_ids = (int32_t *)p->prompt_ids;
	s.sampling = &sp;
	s.has_max_tokens = p->max_tokens != 0, s.max_tokens = p->max_tokens;
	s.n_stop = p->n_stop > 0 ? p->n_stop : 0;
	s.stop = stops;
	s.has_stream = 1, s.stream = !p->no_stream;
	s.has_ignore_eos = 1, s.ignore_eos = p->ignore_eos != 0;
	s.has_timeout_ms = p->timeout_ms != 0, s.timeout_ms = p->timeout_ms;
	s.has_logprobs = p->logprobs != 0, s.logprobs = p->logprobs != 0;
	s.has_top_logprobs = p->top_logprobs != 0, s.top_logprobs = p->top_logprobs;
	if (p->constraint_kind != SL_CONSTRAINT_NONE) {
		s.has_constraint_kind = 1;
		s.constraint_kind = (Shardline__Client__ConstraintKind)p->constraint_kind;
		if (p->constraint) {
			s.has_constraint = 1;
			s.constraint.data = (uint8_t *)p->constraint;
			s.constraint.len = p->constraint_len ? p->constraint_len : strlen(p->constraint);
		}
	}
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT;
	q.submit = &s;
	*tag = s.tag;
	pending pe = {.tag = s.tag, .kind = P_SUBMIT, .timeout_ms = p->timeout_ms};
	return send_resendable(c, &pe, &q, err, errlen);
}

int sl_client_cancel(sl_client *c, uint64_t tag, char *err, size_t errlen)
{
	Shardline__Client__Cancel m = SHARDLINE__CLIENT__CANCEL__INIT;
	m.has_tag = 1;
	m.tag = tag;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_CANCEL;
	q.cancel = &m;
	pending *p = find_pending(c, tag);
	if (p && p->held) { /* never reached the coordinator: end it here */
		drop_pending(c, p);
		return add_made(c, SL_EV_DONE, tag, SL_FINISH_CANCELLED, "cancelled while the "
				"coordinator was unavailable") ? sl_errf(err, errlen, SL_ENOMEM, "out of memory") : SL_OK;
	}
	return send_request(c, &q, err, errlen);
}

int sl_client_status(sl_client *c, uint64_t *tag, char *err, size_t errlen)
{
	Shardline__Client__StatusRequest m = SHARDLINE__CLIENT__STATUS_REQUEST__INIT;
	m.has_tag = 1;
	m.tag = *tag = c->next_tag++;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_STATUS;
	q.status = &m;
	pending pe = {.tag = m.tag, .kind = P_STATUS};
	return send_resendable(c, &pe, &q, err, errlen);
}

int sl_client_drain(sl_client *c, unsigned group_id, int exit, char *err, size_t errlen)
{
	Shardline__Client__Drain m = SHARDLINE__CLIENT__DRAIN__INIT;
	m.has_tag = m.has_group_id = m.has_exit = 1;
	m.tag = c->next_tag++;
	m.group_id = group_id;
	m.exit = exit != 0;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_DRAIN;
	q.drain = &m;
	return send_once(c, m.tag, &q, err, errlen);
}

static int fill_status(sl_event *ev, const Shardline__Client__Status *st)
{
	ev->kind = SL_EV_STATUS;
	ev->tag = st->tag;
	ev->queued = st->queued, ev->max_queue = st->max_queue, ev->active = st->active;
	ev->requeued = (long)st->requeued;
	ev->n_groups = (int)st->n_groups;
	ev->groups = calloc(st->n_groups ? st->n_groups : 1, sizeof *ev->groups);
	if (!ev->groups)
		return SL_ENOMEM;
	for (size_t i = 0; i < st->n_groups; i++) {
		const Shardline__Client__GroupStatus *g = st->groups[i];
		ev->groups[i] = (sl_group_info){
			.id = g->id, .name = g->name ? g->name : "", .model = g->model ? g->model : "",
			.tp = g->tp, .pp = g->pp, .kv_blocks = g->kv_blocks, .kv_free = g->kv_free,
			.block_tokens = g->block_tokens, .running = g->running, .waiting = g->waiting,
			.assigned = g->assigned, .max_pos = g->max_pos, .draining = g->draining,
			.last_seen_ms = g->last_seen_ms, .prefix_cache = g->prefix_cache,
			.cache_blocks = g->cache_blocks, .cache_queried_tokens = (long)g->cache_queried_tokens,
			.cache_hit_tokens = (long)g->cache_hit_tokens,
			.cache_evictions = (long)g->cache_evictions,
			.routed_prefix_tokens = (long)g->routed_prefix_tokens};
	}
	return SL_OK;
}

/* The log-prob fields of a Chunk or Done; a reply whose counts do not
 * line up with its ids is refused (as a reply of unknown type). */
static int fill_logprobs(sl_event *ev, size_t n_lp, float *lp, int top_n, size_t n_ids,
			 int32_t *ids, size_t n_top, float *top)
{
	if (n_lp == 0 && n_ids == 0 && n_top == 0)
		return SL_OK;
	if (n_lp != ev->n_token_ids || top_n < 0 || n_ids != n_lp * (size_t)top_n || n_top != n_ids)
		return SL_EINVAL;
	ev->logprobs = lp, ev->n_logprobs = n_lp, ev->top_n = top_n;
	ev->top_ids = ids, ev->top_logprobs = top;
	return SL_OK;
}

static int fill_event(sl_event *ev, Shardline__Client__Reply *r)
{
	ev->priv = r;
	ev->message = "";
	switch (r->msg_case) {
	case SHARDLINE__CLIENT__REPLY__MSG_CHUNK:
		ev->kind = SL_EV_CHUNK;
		ev->tag = r->chunk->tag;
		ev->text = (const char *)r->chunk->text.data;
		ev->text_len = r->chunk->text.len;
		ev->token_ids = r->chunk->token_ids;
		ev->n_token_ids = r->chunk->n_token_ids;
		return fill_logprobs(ev, r->chunk->n_logprobs, r->chunk->logprobs, r->chunk->top_n,
				     r->chunk->n_top_ids, r->chunk->top_ids, r->chunk->n_top_logprobs,
				     r->chunk->top_logprobs);
	case SHARDLINE__CLIENT__REPLY__MSG_DONE: {
		const Shardline__Client__Done *d = r->done;
		ev->kind = SL_EV_DONE;
		ev->tag = d->tag;
		ev->finish = d->finish;
		ev->message = d->error ? d->error : "";
		ev->text = (const char *)d->text.data;
		ev->text_len = d->text.len;
		ev->token_ids = d->token_ids;
		ev->n_token_ids = d->n_token_ids;
		ev->prompt_tokens = d->prompt_tokens, ev->completion_tokens = d->completion_tokens;
		ev->queue_ms = d->queue_ms, ev->ttft_ms = d->ttft_ms, ev->total_ms = d->total_ms;
		return fill_logprobs(ev, d->n_logprobs, d->logprobs, d->top_n, d->n_top_ids, d->top_ids,
				     d->n_top_logprobs, d->top_logprobs);
	}
	case SHARDLINE__CLIENT__REPLY__MSG_ERROR:
		ev->kind = SL_EV_ERROR;
		ev->tag = r->error->tag;
		ev->error_code = r->error->code;
		ev->message = r->error->message ? r->error->message : "";
		return SL_OK;
	case SHARDLINE__CLIENT__REPLY__MSG_STATUS:
		return fill_status(ev, r->status);
	default:
		return SL_EINVAL;
	}
}

/* The coordinator is taken as gone: started requests and Status asks end
 * now (their state died with it), the others are held for re-submission,
 * and a fresh socket waits for the next Pong. */
static int coordinator_lost(sl_client *c, const char *why, char *err, size_t errlen)
{
	double now = sl_now();
	for (int i = c->n - 1; i >= 0; i--) {
		pending *p = &c->p[i];
		if (p->held)
			continue;
		if (p->packed && p->tokens == 0 && p->resubmits < c->max_resubmits) {
			p->held = 1;
			p->held_until = now + hold_ms(c, p) * 1e-3;
			continue;
		}
		int rc = p->kind == P_STATUS
			? add_made(c, SL_EV_ERROR, p->tag, SL_ERR_UNAVAILABLE, "%s: no answer", why)
			: p->tokens ? add_made(c, SL_EV_ERROR, p->tag, SL_ERR_UNAVAILABLE,
					       "%s: the request had started (%ld tokens received) and is lost",
					       why, p->tokens)
				    : add_made(c, SL_EV_ERROR, p->tag, SL_ERR_UNAVAILABLE,
					       "%s; not re-submitted (%d re-submissions allowed)", why,
					       c->max_resubmits > 0 ? c->max_resubmits : 0);
		if (rc)
			return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
		drop_pending(c, p);
	}
	c->down_since = now;
	c->ping_since = c->last_ping = 0; /* probe the fresh socket at once */
	c->cur = (c->cur + 1) % c->n_eps; /* a standby pair: try the other */
	return client_connect(c, err, errlen);
}

/* A Pong: the coordinator's loop runs. Back after a loss: held requests
 * go out again. A new instance without a loss seen: it restarted between
 * two pings and forgot what we sent, which is a loss too. */
static int on_pong(sl_client *c, const Shardline__Client__Pong *pg, char *err, size_t errlen)
{
	uint64_t inst = pg->has_instance ? pg->instance : 0;
	if (!c->down_since && c->instance && inst != c->instance) {
		char why[300];
		snprintf(why, sizeof why, "the coordinator at %s restarted", c->eps[c->cur]);
		c->instance = 0;
		return coordinator_lost(c, why, err, errlen);
	}
	c->instance = inst;
	if (!c->down_since)
		return SL_OK;
	c->down_since = 0;
	for (int i = 0; i < c->n; i++) {
		pending *p = &c->p[i];
		if (!p->held)
			continue;
		p->held = 0;
		p->resubmits++;
		int rc = send_packed(c, p->packed, p->len, err, errlen);
		if (rc)
			return rc;
	}
	return SL_OK;
}

static int send_ping(sl_client *c)
{
	Shardline__Client__Ping m = SHARDLINE__CLIENT__PING__INIT;
	m.has_nonce = 1;
	m.nonce = ++c->ping_nonce;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_PING;
	q.ping = &m;
	return sl_wire_send(c->sock, NULL, 0, &q.base, NULL);
}

/* The timers while requests wait: a ping every interval (even while
 * tokens stream: a Pong is how a restart is noticed), the silence check,
 * held requests past their bound. */
static int heartbeat(sl_client *c, char *err, size_t errlen)
{
	if (c->hb_ms < 0 || c->n == 0)
		return SL_OK;
	double now = sl_now(), hb = c->hb_ms * 1e-3;
	for (int i = c->n - 1; i >= 0; i--) {
		pending *p = &c->p[i];
		if (!p->held || now < p->held_until)
			continue;
		if (add_made(c, SL_EV_ERROR, p->tag, SL_ERR_UNAVAILABLE, "the coordinator at %s did not "
			     "come back within %d ms", c->eps[c->cur], hold_ms(c, p)))
			return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
		drop_pending(c, p);
	}
	/* gone: a ping unanswered for 2 intervals. Pings go out every interval
	 * and any message answers them, so this fires within 3 intervals of
	 * the last message; a caller that did not call us for long has sent
	 * no ping meanwhile, and gets the 2 intervals from its next call. */
	if (!c->down_since && c->ping_since && now - c->ping_since >= CLIENT_PING_LIMIT * hb) {
		char why[300];
		snprintf(why, sizeof why, "the coordinator at %s was silent for %.0f ms (a ping "
			 "unanswered for %.0f ms, heartbeat %d ms)%s", c->eps[c->cur],
			 (now - c->last_heard) * 1e3, (now - c->ping_since) * 1e3, c->hb_ms,
			 c->handshake_note[0] ? c->handshake_note
			 : c->curve.on ? "; with CURVE, check that it knows this client's key" : "");
		int rc = coordinator_lost(c, why, err, errlen);
		if (rc)
			return rc;
	}
	/* gone, and the one tried since is silent too: with a standby pair,
	 * try the next (a passive backup says nothing until it takes over) */
	if (c->down_since && c->n_eps > 1 && c->ping_since &&
	    now - c->ping_since >= CLIENT_PING_LIMIT * hb) {
		c->cur = (c->cur + 1) % c->n_eps;
		c->ping_since = c->last_ping = 0;
		int rc = client_connect(c, err, errlen);
		if (rc)
			return rc;
	}
	if (c->n && now - c->last_ping >= hb) {
		send_ping(c); /* a full queue is silence too: the check above sees it */
		c->last_ping = now;
		if (!c->ping_since)
			c->ping_since = now;
	}
	return SL_OK;
}

/* Milliseconds until heartbeat() has work; -1: none. */
static int next_timer_ms(const sl_client *c)
{
	if (c->hb_ms < 0 || c->n == 0)
		return -1;
	double hb = c->hb_ms * 1e-3, t = c->last_ping + hb;
	if (c->ping_since && c->ping_since + CLIENT_PING_LIMIT * hb < t)
		t = c->ping_since + CLIENT_PING_LIMIT * hb;
	for (int i = 0; i < c->n; i++)
		if (c->p[i].held && c->p[i].held_until < t)
			t = c->p[i].held_until;
	double ms = (t - sl_now()) * 1e3;
	return ms <= 0 ? 0 : (int)ms + 1;
}

/* What a reply from the coordinator means for the requests that wait. */
static void track(sl_client *c, const sl_event *ev)
{
	pending *p = find_pending(c, ev->tag);
	if (!p)
		return;
	if (ev->kind == SL_EV_CHUNK)
		p->tokens += (long)ev->n_token_ids + (ev->text_len > 0);
	else if (ev->kind == SL_EV_DONE || ev->kind == SL_EV_ERROR ||
		 (ev->kind == SL_EV_STATUS && p->kind == P_STATUS))
		drop_pending(c, p);
}

static void pop_made(sl_client *c, sl_event *ev)
{
	made_event m = c->made[0];
	memmove(c->made, c->made + 1, sizeof *c->made * (size_t)--c->n_made);
	ev->kind = m.kind;
	ev->tag = m.tag;
	ev->owned = m.message;
	ev->message = m.message ? m.message : "";
	if (m.kind == SL_EV_ERROR)
		ev->error_code = m.code;
	else
		ev->finish = m.code;
}

/* One monitor event. A refused key (ZAP said 400) is final for every
 * request waiting: no retry can succeed until the coordinator's operator
 * lists the key. Other handshake failures are remembered for the
 * silence error (a wrong --server-key looks like silence otherwise). */
static int on_monitor(sl_client *c, char *err, size_t errlen)
{
	zmq_msg_t head, addr;
	zmq_msg_init(&head);
	zmq_msg_init(&addr);
	int got = zmq_msg_recv(&head, c->monitor, ZMQ_DONTWAIT);
	if (got >= 0 && zmq_msg_more(&head))
		zmq_msg_recv(&addr, c->monitor, 0);
	uint16_t event = 0;
	uint32_t value = 0;
	if (got >= 6) {
		memcpy(&event, zmq_msg_data(&head), 2);
		memcpy(&value, (char *)zmq_msg_data(&head) + 2, 4);
	}
	zmq_msg_close(&head);
	zmq_msg_close(&addr);
	if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
		snprintf(c->handshake_note, sizeof c->handshake_note, "; it refused this client's "
			 "CURVE key %s (ZAP status %u)", c->curve.public_, value);
		for (int i = c->n - 1; i >= 0; i--) {
			if (add_made(c, SL_EV_ERROR, c->p[i].tag, SL_ERR_UNAVAILABLE, "the coordinator at %s "
				     "refused this client's CURVE key %s (ZAP status %u): its operator must "
				     "list it in --client-keys", c->eps[c->cur], c->curve.public_, value))
				return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
			drop_pending(c, &c->p[i]);
		}
	} else if (event) {
		snprintf(c->handshake_note, sizeof c->handshake_note, "; the CURVE handshake failed "
			 "(%s %u): is --server-key the coordinator's public key?",
			 event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol error" : "error", value);
	}
	return SL_OK;
}

/* One message from the socket: 1 an event for the caller, 0 none (a
 * Pong, or nothing there), < 0 an error. */
static int receive(sl_client *c, sl_event *ev, char *err, size_t errlen)
{
	sl_wire_msg m;
	int got = sl_wire_recv(c->sock, &m);
	if (got <= 0)
		return got < 0 ? sl_errf(err, errlen, SL_ECOMM, "receive: %s", zmq_strerror(errno)) : 0;
	c->last_heard = sl_now();
	c->ping_since = 0;
	size_t len = m.n_total == 1 ? sl_wire_size(&m, 0) : 0;
	Shardline__Client__Reply *r =
		len ? shardline__client__reply__unpack(NULL, len, sl_wire_data(&m, 0)) : NULL;
	sl_wire_msg_close(&m);
	if (!r)
		return sl_errf(err, errlen, SL_EINVAL, "not a Reply (%zu bytes)", len);
	if (r->msg_case == SHARDLINE__CLIENT__REPLY__MSG_PONG) {
		int rc = on_pong(c, r->pong, err, errlen);
		shardline__client__reply__free_unpacked(r, NULL);
		return rc;
	}
	if (fill_event(ev, r)) {
		shardline__client__reply__free_unpacked(r, NULL);
		memset(ev, 0, sizeof *ev);
		return sl_errf(err, errlen, SL_EINVAL, "a Reply of unknown type, or log-probs that do "
			       "not match its token ids");
	}
	track(c, ev);
	return 1;
}

int sl_client_next(sl_client *c, int timeout_ms, sl_event *ev, char *err, size_t errlen)
{
	memset(ev, 0, sizeof *ev);
	double deadline = timeout_ms < 0 ? -1 : sl_now() + timeout_ms * 1e-3;
	for (;;) {
		int rc = c->n_made ? SL_OK : heartbeat(c, err, errlen);
		if (rc)
			return rc;
		if (c->n_made) {
			pop_made(c, ev);
			return 1;
		}
		int wait = -1, timer = next_timer_ms(c);
		if (deadline >= 0) {
			double left = (deadline - sl_now()) * 1e3;
			wait = left <= 0 ? 0 : (int)left + (left > (int)left);
		}
		if (timer >= 0 && (wait < 0 || timer < wait))
			wait = timer;
		zmq_pollitem_t it[2] = {{c->sock, 0, ZMQ_POLLIN, 0}, {c->monitor, 0, ZMQ_POLLIN, 0}};
		int n = zmq_poll(it, c->monitor ? 2 : 1, wait);
		if (n < 0 && errno != EINTR)
			return sl_errf(err, errlen, SL_ECOMM, "poll: %s", zmq_strerror(errno));
		if (n < 0) /* a signal: let the caller look at its flags */
			return 0;
		if (c->monitor && (it[1].revents & ZMQ_POLLIN) && (rc = on_monitor(c, err, errlen)))
			return rc;
		if ((it[0].revents & ZMQ_POLLIN) && (rc = receive(c, ev, err, errlen)) != 0)
			return rc;
		if (deadline >= 0 && sl_now() >= deadline)
			return 0;
	}
}

void sl_event_release(sl_event *ev)
{
	if (ev->priv)
		shardline__client__reply__free_unpacked(ev->priv, NULL);
	free(ev->groups);
	free(ev->owned);
	memset(ev, 0, sizeof *ev);
}

const char *sl_finish_name(int f)
{
	static const char *n[] = {"none", "length", "stop", "eos", "cancelled", "error", "refused"};
	return f >= 0 && f <= 6 ? n[f] : "unknown";
}

const char *sl_error_name(int code)
{
	static const char *n[] = {"none", "malformed", "bad request", "unknown model", "overloaded",
				  "not found", "internal"};
	if (code == SL_ERR_UNAVAILABLE)
		return "coordinator unavailable";
	return code >= 0 && code <= 6 ? n[code] : "unknown";
}
