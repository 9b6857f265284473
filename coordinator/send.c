/*
 * send.c — every ZeroMQ message the coordinator sends goes out here:
 * replies to clients by routing id (on_client.c's sink sends a request's
 * Chunks and Done through coord_send_client) and messages to node group
 * leaders (a failed send marks the group lost for the tick to reap).
 *
 * Requests go to a group as Enqueue (coord_node_enqueue: route.c) and
 * Cancel (coord_node_cancel: requests.c), encoded here so that the core
 * above never builds a protobuf message.
 *
 * Callers: on_client.c, on_node.c, route.c, requests.c (cancel on a
 * group), coord.c (pings). It calls nothing of the coordinator: keeping
 * the sending apart from the handlers is what lets every layer above
 * send without a cycle.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord_int.h"
#include "common/sl.h"
#include "proto/sampling_pb.h"

int coord_send_client(coord *c, const void *client, size_t client_len,
		      const Shardline__Client__Reply *rep, int *zerrno)
{
	return sl_wire_send(c->clients, client, client_len, &rep->base, zerrno);
}

void coord_reply_error(coord *c, const void *client, size_t client_len, uint64_t tag,
		       Shardline__Client__ErrorCode code, const char *fmt, ...)
{
	char msg[SL_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	Shardline__Client__Error e = SHARDLINE__CLIENT__ERROR__INIT;
	e.has_tag = e.has_code = 1;
	e.tag = tag;
	e.code = code;
	e.message = msg;
	Shardline__Client__Reply rep = SHARDLINE__CLIENT__REPLY__INIT;
	rep.msg_case = SHARDLINE__CLIENT__REPLY__MSG_ERROR;
	rep.error = &e;
	int zerr = 0;
	coord_send_client(c, client, client_len, &rep, &zerr);
	SL_DEBUG("coord", "error reply (tag %llu): %s", (unsigned long long)tag, msg);
}

int coord_send_node(coord *c, coord_group *g, Shardline__Node__CoordMsg *m)
{
	int zerr = 0;
	if (g->lost)
		return SL_ECOMM;
	if (sl_wire_send(c->nodes, g->ident, g->ident_len, &m->base, &zerr)) {
		if (!g->draining)
			SL_WARN("coord", "group %u (%s): send failed (%s); dropping it", g->id, g->name,
				zmq_strerror(zerr));
		g->lost = 1; /* reaped by the next tick, not here: callers may be iterating */
		return SL_ECOMM;
	}
	return SL_OK;
}

void coord_send_ident(coord *c, const void *ident, size_t len, Shardline__Node__CoordMsg *m)
{
	sl_wire_send(c->nodes, ident, len, &m->base, NULL);
}

void coord_send_ping(coord *c, coord_group *g)
{
	Shardline__Node__Ping p = SHARDLINE__NODE__PING__INIT;
	Shardline__Node__CoordMsg m = SHARDLINE__NODE__COORD_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__COORD_MSG__MSG_PING;
	m.ping = &p;
	coord_send_node(c, g, &m);
	g->last_ping = sl_now();
}

/* The core's requests to the node groups, as Enqueue and Cancel. */

/* The prompt a group runs r from: its own, or, once r streamed tokens on a
 * group that was lost, its prompt and every id generated since (the
 * node counts those as generated: resume_generated). NULL: out of memory. */
static int32_t *run_prompt(const coord_req *r, size_t *n)
{
	*n = (size_t)r->n_prompt + r->gen.n;
	if (!r->gen.n)
		return r->prompt;
	int32_t *p = malloc(sizeof(int32_t) * *n);
	if (p) {
		memcpy(p, r->prompt, sizeof(int32_t) * r->n_prompt);
		memcpy(p + r->n_prompt, r->gen.p, sizeof(int32_t) * r->gen.n);
	}
	return p;
}

/* The ids the node stops on and, with min_tokens, masks until then: r's
 * stop_token_ids, plus with min_tokens the model's EOS ids as this
 * coordinator knows them (the node's own list may lack some), each once.
 * out: [SL_SAMPLING_MAX_STOP_TOKEN_IDS + COORD_MAX_EOS]. */
static int node_stop_ids(const coord *c, const coord_req *r, int32_t *out)
{
	int n = 0;
	for (int i = 0; i < r->n_stop_ids; i++)
		out[n++] = r->stop_ids[i];
	const coord_model *m = &c->models[r->model];
	for (int k = 0; r->sampling.min_tokens > 0 && !r->ignore_eos && k < m->n_eos; k++) {
		int seen = 0;
		for (int i = 0; i < n; i++)
			seen |= out[i] == m->eos[k];
		if (!seen)
			out[n++] = m->eos[k];
	}
	return n;
}

int coord_node_enqueue(coord *c, coord_group *g, const coord_req *r)
{
	Shardline__Client__Sampling sp = SHARDLINE__CLIENT__SAMPLING__INIT;
	Shardline__Node__Enqueue q = SHARDLINE__NODE__ENQUEUE__INIT;
	int32_t stop_ids[SL_SAMPLING_MAX_STOP_TOKEN_IDS + COORD_MAX_EOS];
	sl_sampling_to_pb(&r->sampling, &sp.base, &q.base);
	sl_token_lists lists = {r->bias_ids, r->bias, r->n_bias, stop_ids,
				node_stop_ids(c, r, stop_ids)};
	sl_token_lists_to_pb(&lists, &sp);
	q.has_req_id = q.has_max_tokens = q.has_ignore_eos = 1;
	q.req_id = r->id;
	if (!(q.prompt = run_prompt(r, &q.n_prompt)))
		return SL_ENOMEM;
	q.sampling = &sp;
	q.max_tokens = r->max_tokens - (int)r->gen.n; /* > 0: r would have finished */
	q.has_resume_generated = r->gen.n > 0;
	q.resume_generated = (int)r->gen.n;
	q.ignore_eos = r->ignore_eos;
	if (r->constraint_kind != SL_CONSTRAINT_NONE) {
		q.has_constraint_kind = q.has_constraint = 1;
		q.constraint_kind = (Shardline__Client__ConstraintKind)r->constraint_kind;
		q.constraint = (ProtobufCBinaryData){r->constraint_len, (uint8_t *)r->constraint};
	}
	Shardline__Node__CoordMsg m = SHARDLINE__NODE__COORD_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__COORD_MSG__MSG_ENQUEUE;
	m.enqueue = &q;
	int rc = coord_send_node(c, g, &m);
	if (q.prompt != r->prompt)
		free(q.prompt);
	return rc;
}

void coord_node_cancel(coord *c, const coord_req *r)
{
	Shardline__Node__Cancel cn = SHARDLINE__NODE__CANCEL__INIT;
	cn.has_req_id = 1;
	cn.req_id = r->id;
	Shardline__Node__CoordMsg m = SHARDLINE__NODE__COORD_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__COORD_MSG__MSG_CANCEL;
	m.cancel = &cn;
	coord_send_node(c, r->group, &m);
}
