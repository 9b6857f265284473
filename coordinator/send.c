/*
 * send.c — every ZeroMQ message the coordinator sends goes out here:
 * replies to clients by routing id (on_client.c's sink sends a request's
 * Chunks and Done through coord_send_client) and messages to node group
 * leaders (a failed send marks the group lost for the tick to reap).
 *
 * Callers: on_client.c, on_node.c, route.c, requests.c (cancel on a
 * group), coord.c (pings). It calls nothing of the coordinator: keeping
 * the sending apart from the handlers is what lets every layer above
 * send without a cycle.
 */
#include <stdarg.h>
#include <stdio.h>

#include "coordinator/coord_int.h"
#include "common/sl.h"

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
