/*
 * client.c — the coordinator's C client library (see client.h).
 */
#include "client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto/client.pb-c.h"
#include "sl.h"
#include "wire.h"

struct sl_client {
	void *ctx, *sock;
	int own_ctx;
	uint64_t next_tag;
};

int sl_client_create(void *ctx, const char *endpoint, sl_client **out, char *err,
			size_t errlen)
{
	sl_client *c = calloc(1, sizeof *c);
	if (!c)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	c->next_tag = 1;
	c->ctx = ctx;
	if (!c->ctx) {
		c->ctx = zmq_ctx_new();
		c->own_ctx = 1;
	}
	if (c->ctx)
		c->sock = sl_wire_socket(c->ctx, ZMQ_DEALER, 0);
	if (!c->sock || zmq_connect(c->sock, endpoint)) {
		int e = errno;
		sl_client_destroy(c);
		return sl_errf(err, errlen, SL_ECOMM, "cannot connect to %s: %s", endpoint, zmq_strerror(e));
	}
	*out = c;
	return SL_OK;
}

void sl_client_destroy(sl_client *c)
{
	if (!c)
		return;
	if (c->sock)
		zmq_close(c->sock);
	if (c->own_ctx && c->ctx)
		zmq_ctx_term(c->ctx);
	free(c);
}

void *sl_client_socket(sl_client *c) { return c->sock; }

static int send_request(sl_client *c, Shardline__Client__Request *q, char *err, size_t errlen)
{
	int e = 0;
	if (sl_wire_send(c->sock, NULL, 0, &q->base, &e))
		return sl_errf(err, errlen, SL_ECOMM, "send: %s", zmq_strerror(e));
	return SL_OK;
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
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT;
	q.submit = &s;
	*tag = s.tag;
	return send_request(c, &q, err, errlen);
}

int sl_client_cancel(sl_client *c, uint64_t tag, char *err, size_t errlen)
{
	Shardline__Client__Cancel m = SHARDLINE__CLIENT__CANCEL__INIT;
	m.has_tag = 1;
	m.tag = tag;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_CANCEL;
	q.cancel = &m;
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
	return send_request(c, &q, err, errlen);
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
	return send_request(c, &q, err, errlen);
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

int sl_client_next(sl_client *c, int timeout_ms, sl_event *ev, char *err, size_t errlen)
{
	memset(ev, 0, sizeof *ev);
	zmq_pollitem_t it = {c->sock, 0, ZMQ_POLLIN, 0};
	int n = zmq_poll(&it, 1, timeout_ms);
	if (n < 0)
		return sl_errf(err, errlen, SL_ECOMM, "poll: %s", zmq_strerror(errno));
	if (n == 0)
		return 0;
	sl_wire_msg m;
	int got = sl_wire_recv(c->sock, &m);
	if (got <= 0)
		return got < 0 ? sl_errf(err, errlen, SL_ECOMM, "receive: %s", zmq_strerror(errno)) : 0;
	size_t len = m.n_total == 1 ? sl_wire_size(&m, 0) : 0;
	Shardline__Client__Reply *r =
		len ? shardline__client__reply__unpack(NULL, len, sl_wire_data(&m, 0)) : NULL;
	sl_wire_msg_close(&m);
	if (!r)
		return sl_errf(err, errlen, SL_EINVAL, "not a Reply (%zu bytes)", len);
	if (fill_event(ev, r)) {
		shardline__client__reply__free_unpacked(r, NULL);
		memset(ev, 0, sizeof *ev);
		return sl_errf(err, errlen, SL_EINVAL, "a Reply of unknown type, or log-probs that do "
			       "not match its token ids");
	}
	return 1;
}

void sl_event_release(sl_event *ev)
{
	if (ev->priv)
		shardline__client__reply__free_unpacked(ev->priv, NULL);
	free(ev->groups);
	memset(ev, 0, sizeof *ev);
}

const char *sl_finish_name(int f)
{
	static const char *n[] = {"none", "length", "stop", "eos", "cancelled", "error"};
	return f >= 0 && f <= 5 ? n[f] : "unknown";
}

const char *sl_error_name(int code)
{
	static const char *n[] = {"none", "malformed", "bad request", "unknown model", "overloaded",
				  "not found", "internal"};
	return code >= 0 && code <= 6 ? n[code] : "unknown";
}
