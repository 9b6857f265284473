/*
 * on_client.c — the ZeroMQ front door: messages from clients, Submit
 * (decoded into a coord_request and handed to submit.c's coord_submit
 * with this client as the sink),
 * Cancel (by the client's tag), Status, Drain. Anything else — a frame
 * that is not a Request, truncated, oversized, of an unknown type, with a
 * field out of range — gets an Error reply that says what was wrong, and
 * the loop goes on.
 *
 * The sink of its requests encodes their events (coord_event) as Chunk
 * and Done replies and sends them to the client by routing id; a client that cannot be reached marks its request for the
 * tick to cancel. Called by coord.c's loop; calls down into submit.c,
 * stream.c, requests.c and send.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord_int.h"
#include "common/sl.h"
#include "proto/sampling_pb.h"

typedef Shardline__Client__Submit pb_submit;
#define E_MALFORMED SHARDLINE__CLIENT__ERROR_CODE__MALFORMED
#define E_BAD SHARDLINE__CLIENT__ERROR_CODE__BAD_REQUEST
#define E_NOT_FOUND SHARDLINE__CLIENT__ERROR_CODE__NOT_FOUND
#define E_INTERNAL SHARDLINE__CLIENT__ERROR_CODE__INTERNAL

/* The log-prob fields of a Chunk or Done, from b (nothing when NULL). */
static void set_logprobs(const coord_logprobs *b, size_t *n_lp, float **lp,
			 protobuf_c_boolean *has_top_n, int32_t *top_n, size_t *n_ids, int32_t **ids,
			 size_t *n_top, float **top)
{
	if (!b)
		return;
	*has_top_n = 1;
	*top_n = b->top_n;
	*n_lp = b->n;
	*lp = b->lp;
	*n_ids = *n_top = b->n * (size_t)*top_n;
	*ids = b->top_ids;
	*top = b->top;
}

static void chunk_of(const coord_event *ev, Shardline__Client__Chunk *ch)
{
	ch->has_tag = ch->has_text = 1;
	ch->tag = ev->tag;
	ch->text.data = (uint8_t *)ev->text.p;
	ch->text.len = ev->text.n;
	ch->n_token_ids = ev->n_ids;
	ch->token_ids = (int32_t *)ev->ids;
	set_logprobs(ev->lps, &ch->n_logprobs, &ch->logprobs, &ch->has_top_n, &ch->top_n,
		     &ch->n_top_ids, &ch->top_ids, &ch->n_top_logprobs, &ch->top_logprobs);
}

static void done_of(const coord_event *ev, Shardline__Client__Done *d)
{
	d->has_tag = d->has_finish = d->has_prompt_tokens = d->has_completion_tokens = 1;
	d->has_queue_ms = d->has_ttft_ms = d->has_total_ms = 1;
	d->tag = ev->tag;
	d->finish = ev->finish;
	d->error = (char *)ev->error;
	d->prompt_tokens = ev->prompt_tokens;
	d->completion_tokens = ev->completion_tokens;
	d->queue_ms = ev->queue_ms;
	d->ttft_ms = ev->ttft_ms;
	d->total_ms = ev->total_ms;
	if (!ev->has_text)
		return;
	d->has_text = 1;
	d->text.data = (uint8_t *)ev->text.p;
	d->text.len = ev->text.n;
	d->n_token_ids = ev->n_ids;
	d->token_ids = (int32_t *)ev->ids;
	set_logprobs(ev->lps, &d->n_logprobs, &d->logprobs, &d->has_top_n, &d->top_n,
		     &d->n_top_ids, &d->top_ids, &d->n_top_logprobs, &d->top_logprobs);
}

/* A Chunk or Done of r, to its client. */
static void client_reply(coord *c, coord_req *r, const coord_event *ev)
{
	Shardline__Client__Chunk ch = SHARDLINE__CLIENT__CHUNK__INIT;
	Shardline__Client__Done d = SHARDLINE__CLIENT__DONE__INIT;
	Shardline__Client__Reply rep = SHARDLINE__CLIENT__REPLY__INIT;
	if (ev->kind == COORD_EV_CHUNK) {
		chunk_of(ev, &ch);
		rep.msg_case = SHARDLINE__CLIENT__REPLY__MSG_CHUNK;
		rep.chunk = &ch;
	} else {
		done_of(ev, &d);
		rep.msg_case = SHARDLINE__CLIENT__REPLY__MSG_DONE;
		rep.done = &d;
	}
	int zerr = 0;
	coord_send_client(c, r->sink.client, r->sink.client_len, &rep, &zerr);
	if (zerr) { /* gone or not reading: the tick cancels the request */
		SL_WARN("coord", "request %llu: client unreachable (%s); cancelling",
			(unsigned long long)r->id, zmq_strerror(zerr));
		r->client_gone = 1;
	}
}

static const coord_sink_ops client_sink = {.reply = client_reply};

/* The running request of this client with this tag, or NULL. */
static coord_req *find_tag(coord *c, const void *client, size_t client_len, uint64_t tag)
{
	for (coord_req *r = c->all; r; r = r->anext)
		if (r->sink.ops == &client_sink && r->tag == tag && r->sink.client_len == client_len &&
		    !memcmp(r->sink.client, client, client_len))
			return r;
	return NULL;
}

/* A Submit as the core's request; stop (n_stop entries) holds its stop
 * strings. Absent fields get their defaults (coord_request_init). Fails
 * (err) only on a logit_bias whose two lists differ in length. */
static int request_of(const pb_submit *s, coord_str *stop, coord_request *q, char *err,
		      size_t errlen)
{
	coord_request_init(q);
	q->tag = s->tag;
	q->model = s->model;
	if (s->has_prompt)
		q->prompt = (coord_str){(const char *)s->prompt.data, s->prompt.len};
	q->prompt_ids = s->prompt_ids;
	q->n_prompt_ids = s->n_prompt_ids;
	sl_sampling_from_pb(&q->sampling, s->sampling ? &s->sampling->base : NULL, &s->base);
	q->has_max_tokens = s->has_max_tokens;
	q->max_tokens = s->max_tokens;
	for (size_t i = 0; i < s->n_stop; i++)
		stop[i] = (coord_str){(const char *)s->stop[i].data, s->stop[i].len};
	q->stop = stop;
	q->n_stop = s->n_stop;
	q->stream = !s->has_stream || s->stream;
	q->ignore_eos = s->has_ignore_eos && s->ignore_eos;
	q->add_special = !s->has_add_special || s->add_special;
	q->timeout_ms = s->has_timeout_ms ? s->timeout_ms : 0;
	if (s->has_constraint_kind && !sl_constraint_kind_known((int)s->constraint_kind))
		return sl_errf(err, errlen, SL_EINVAL,
			       "constraint_kind %d is not a known kind (0 none, 1 json, 2 json_schema, "
			       "3 regex, 4 ebnf, 5 structural_tag)", (int)s->constraint_kind);
	if (s->has_constraint_kind)
		q->constraint_kind = (sl_constraint_kind)s->constraint_kind;
	if (s->has_constraint)
		q->constraint = (coord_str){(const char *)s->constraint.data, s->constraint.len};
	return sl_token_lists_from_pb(&q->lists, s->sampling, err, errlen);
}

static void on_submit(coord *c, const void *client, size_t client_len, const pb_submit *s)
{
	char err[SL_ERRLEN];
	uint64_t tag = s->tag;
	if (find_tag(c, client, client_len, tag)) {
		coord_reply_error(c, client, client_len, tag, E_BAD,
				  "tag %llu is in use by a running request", (unsigned long long)tag);
		return;
	}
	coord_sink to = {.ops = &client_sink};
	if (client_len <= sizeof to.client) {
		memcpy(to.client, client, client_len);
		to.client_len = client_len;
	}
	/* a frame holds at most COORD_MAX_FRAME bytes, so this is bounded;
	 * coord_submit refuses more than COORD_MAX_STOPS */
	coord_str *stop = malloc(sizeof *stop * (s->n_stop ? s->n_stop : 1));
	if (!stop) {
		coord_reply_error(c, client, client_len, tag, E_INTERNAL, "out of memory");
		return;
	}
	coord_request q;
	int code = request_of(s, stop, &q, err, sizeof err) ? E_BAD
							     : coord_submit(c, &q, &to, err, sizeof err);
	free(stop);
	if (code)
		coord_reply_error(c, client, client_len, tag, code, "%s", err);
}

static void on_cancel(coord *c, const void *client, size_t client_len,
		      const Shardline__Client__Cancel *m)
{
	coord_req *r = find_tag(c, client, client_len, m->tag);
	if (!r) {
		coord_reply_error(c, client, client_len, m->tag, E_NOT_FOUND,
				  "no running request with tag %llu", (unsigned long long)m->tag);
		return;
	}
	SL_INFO("coord", "request %llu cancelled by its client after %d tokens",
		(unsigned long long)r->id, r->n_generated);
	coord_finish(c, r, SHARDLINE__CLIENT__FINISH_REASON__CANCELLED, NULL);
}

static void send_status(coord *c, const void *client, size_t client_len, uint64_t tag)
{
	Shardline__Client__GroupStatus gs[COORD_MAX_GROUPS], *gp[COORD_MAX_GROUPS];
	const char *models[COORD_MAX_MODELS];
	double now = sl_now();
	for (int i = 0; i < c->n_groups; i++) {
		const coord_group *g = c->groups[i];
		Shardline__Client__GroupStatus *s = &gs[i];
		*s = (Shardline__Client__GroupStatus)SHARDLINE__CLIENT__GROUP_STATUS__INIT;
		s->has_id = s->has_tp = s->has_pp = s->has_kv_blocks = s->has_kv_free = 1;
		s->has_block_tokens = s->has_running = s->has_waiting = s->has_assigned = 1;
		s->has_max_pos = s->has_last_seen_ms = s->has_draining = 1;
		s->has_prefix_cache = s->has_cache_blocks = s->has_cache_queried_tokens = 1;
		s->has_cache_hit_tokens = s->has_cache_evictions = s->has_routed_prefix_tokens = 1;
		s->id = g->id;
		s->name = (char *)g->name;
		s->model = c->models[g->model].name;
		s->tp = g->tp, s->pp = g->pp, s->kv_blocks = g->kv_blocks, s->kv_free = g->kv_free;
		s->block_tokens = g->block_tokens, s->running = g->running, s->waiting = g->waiting;
		s->assigned = g->assigned, s->max_pos = g->max_pos, s->draining = g->draining;
		s->last_seen_ms = (now - g->last_seen) * 1e3;
		s->prefix_cache = g->prefix_cache;
		s->cache_blocks = g->cache_blocks;
		s->cache_queried_tokens = g->cache_queried;
		s->cache_hit_tokens = g->cache_hit;
		s->cache_evictions = g->cache_evictions;
		s->routed_prefix_tokens = g->routed_prefix_tokens;
		gp[i] = s;
	}
	for (int i = 0; i < c->n_models; i++)
		models[i] = c->models[i].name;
	Shardline__Client__Status st = SHARDLINE__CLIENT__STATUS__INIT;
	st.has_tag = st.has_queued = st.has_max_queue = st.has_active = st.has_requeued = 1;
	st.tag = tag;
	st.n_groups = c->n_groups;
	st.groups = gp;
	st.queued = c->n_queued;
	st.max_queue = c->o.max_queue;
	st.active = c->n_active;
	st.n_models = c->n_models;
	st.models = (char **)models;
	st.requeued = c->n_requeued;
	Shardline__Client__Reply rep = SHARDLINE__CLIENT__REPLY__INIT;
	rep.msg_case = SHARDLINE__CLIENT__REPLY__MSG_STATUS;
	rep.status = &st;
	int zerr = 0;
	coord_send_client(c, client, client_len, &rep, &zerr);
}

static void on_drain(coord *c, const void *client, size_t client_len,
		     const Shardline__Client__Drain *d)
{
	int n = 0;
	for (int i = 0; i < c->n_groups; i++) {
		coord_group *g = c->groups[i];
		if (d->has_group_id && d->group_id && d->group_id != g->id)
			continue;
		Shardline__Node__Drain dr = SHARDLINE__NODE__DRAIN__INIT;
		dr.has_exit = 1;
		dr.exit = d->has_exit && d->exit;
		Shardline__Node__CoordMsg m = SHARDLINE__NODE__COORD_MSG__INIT;
		m.msg_case = SHARDLINE__NODE__COORD_MSG__MSG_DRAIN;
		m.drain = &dr;
		coord_send_node(c, g, &m);
		g->draining = 1;
		n++;
	}
	if (d->has_group_id && d->group_id && n == 0) {
		coord_reply_error(c, client, client_len, d->tag, E_NOT_FOUND, "no group %u",
				  d->group_id);
		return;
	}
	SL_INFO("coord", "draining %d group(s)%s", n, d->has_exit && d->exit ? "; they will exit" : "");
	send_status(c, client, client_len, d->tag);
}

/* A client's liveness probe: answered from the loop, so a Pong says the
 * loop runs; instance (the random high bits of the request ids) tells a
 * restarted coordinator from the one the client knew. */
static void send_pong(coord *c, const void *client, size_t client_len,
		      const Shardline__Client__Ping *p)
{
	Shardline__Client__Pong pg = SHARDLINE__CLIENT__PONG__INIT;
	pg.has_nonce = pg.has_instance = 1;
	pg.nonce = p->nonce;
	pg.instance = c->next_req_id >> 32;
	Shardline__Client__Reply rep = SHARDLINE__CLIENT__REPLY__INIT;
	rep.msg_case = SHARDLINE__CLIENT__REPLY__MSG_PONG;
	rep.pong = &pg;
	int zerr = 0;
	coord_send_client(c, client, client_len, &rep, &zerr);
}

void coord_on_client(coord *c, sl_wire_msg *m)
{
	if (m->n < 1)
		return;
	const void *client = sl_wire_data(m, 0);
	size_t client_len = sl_wire_size(m, 0);
	if (m->n_total != 2) {
		coord_reply_error(c, client, client_len, 0, E_MALFORMED,
				  "expected one frame (a Request), got %d", m->n_total - 1);
		return;
	}
	size_t len = sl_wire_size(m, 1);
	if (len == 0) {
		coord_reply_error(c, client, client_len, 0, E_MALFORMED, "empty message");
		return;
	}
	if (len > COORD_MAX_FRAME) {
		coord_reply_error(c, client, client_len, 0, E_MALFORMED,
				  "message of %zu bytes exceeds the limit of %d", len, COORD_MAX_FRAME);
		return;
	}
	Shardline__Client__Request *q = shardline__client__request__unpack(NULL, len, sl_wire_data(m, 1));
	if (!q) {
		coord_reply_error(c, client, client_len, 0, E_MALFORMED,
				  "cannot parse a Request from %zu bytes (truncated or not protobuf)", len);
		return;
	}
	switch (q->msg_case) {
	case SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT: on_submit(c, client, client_len, q->submit); break;
	case SHARDLINE__CLIENT__REQUEST__MSG_CANCEL: on_cancel(c, client, client_len, q->cancel); break;
	case SHARDLINE__CLIENT__REQUEST__MSG_STATUS: send_status(c, client, client_len, q->status->tag); break;
	case SHARDLINE__CLIENT__REQUEST__MSG_DRAIN: on_drain(c, client, client_len, q->drain); break;
	case SHARDLINE__CLIENT__REQUEST__MSG_PING: send_pong(c, client, client_len, q->ping); break;
	default:
		coord_reply_error(c, client, client_len, 0, E_MALFORMED,
				  "unknown or missing message type in a %zu-byte Request", len);
	}
	shardline__client__request__free_unpacked(q, NULL);
}
