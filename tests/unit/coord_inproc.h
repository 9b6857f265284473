/*
 * coord_inproc.h — a coordinator driven in-process, for tests that need
 * its message handlers without processes or TCP: it binds inproc://
 * endpoints, and two DEALER sockets in its ZeroMQ context play one client
 * and one node-group leader. ci_pump runs what one turn of coord_run
 * does with the waiting messages (coord_on_node, coord_on_client, then
 * coord_dispatch), so a message sent by a DEALER reaches the handler
 * through the real receive path (sl_wire_recv). Timers never run.
 *
 * Header-only; used by tests/fuzz/test_fuzz_regress.c and the coordinator
 * fuzz harnesses (tests/fuzz/coord_fuzz.h). Reads coordinator internals
 * (coord_int.h): a test peek, nothing else outside coordinator/ does.
 */
#ifndef TESTS_COORD_INPROC_H
#define TESTS_COORD_INPROC_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "coordinator/coord_int.h"
#include "common/sl.h"
#include "proto/wire.h"

typedef struct ci_env {
	coord *c;
	void *client;   /* DEALER, routing id "ci-client" */
	void *node;     /* DEALER, routing id "ci-node" */
	int vocab;      /* the model's tokenizer's */
} ci_env;

/* Pack m and send it as one frame from a DEALER. */
static inline int ci_send(void *sock, const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(n ? n : 1);
	protobuf_c_message_pack(m, buf);
	int rc = zmq_send(sock, buf, n, ZMQ_DONTWAIT) == (int)n ? 0 : -1;
	free(buf);
	return rc;
}

static inline int ci_send_raw(void *sock, const void *p, size_t n)
{
	return zmq_send(sock, p, n, ZMQ_DONTWAIT) == (int)n ? 0 : -1;
}

/* The next frame waiting on a DEALER (malloc'd, *n bytes), or NULL. */
static inline void *ci_recv(void *sock, size_t *n)
{
	zmq_msg_t m;
	zmq_msg_init(&m);
	if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
		zmq_msg_close(&m);
		return NULL;
	}
	*n = zmq_msg_size(&m);
	void *p = malloc(*n ? *n : 1);
	memcpy(p, zmq_msg_data(&m), *n);
	zmq_msg_close(&m);
	return p;
}

/* One turn of the coordinator's loop over what is waiting, repeated until
 * nothing is (a handler's reply may not loop back: DEALERs only read). */
static inline void ci_pump(ci_env *e)
{
	sl_wire_msg m;
	int got;
	do {
		got = 0;
		while (sl_wire_recv(e->c->nodes, &m) == 1) {
			coord_on_node(e->c, &m);
			sl_wire_msg_close(&m);
			got = 1;
		}
		while (sl_wire_recv(e->c->clients, &m) == 1) {
			coord_on_client(e->c, &m);
			sl_wire_msg_close(&m);
			got = 1;
		}
		if (e->c->qhead)
			coord_dispatch(e->c);
	} while (got);
}

static inline void *ci_dealer(ci_env *e, const char *id, const char *endpoint)
{
	void *s = zmq_socket(e->c->ctx, ZMQ_DEALER);
	int zero = 0;
	if (!s)
		return NULL;
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(s, ZMQ_ROUTING_ID, id, strlen(id));
	if (zmq_connect(s, endpoint)) {
		zmq_close(s);
		return NULL;
	}
	return s;
}

/* A coordinator serving model "m" with this tokenizer (and chat template
 * file, or NULL), its client and node DEALERs connected. */
static inline int ci_create(ci_env *e, const char *tokenizer, const char *chat_template,
			    char *err, size_t errlen)
{
	coord_opts o;
	memset(e, 0, sizeof *e);
	coord_opts_default(&o);
	o.client_endpoint = "inproc://ci-clients";
	o.node_endpoint = "inproc://ci-nodes";
	o.model_names[0] = "m";
	o.tokenizers[0] = tokenizer;
	o.chat_templates[0] = chat_template;
	o.n_models = 1;
	o.heartbeat_ms = 1000000; /* no timers run here anyway */
	o.http_bind = NULL;
	int rc = coord_create(&o, &e->c, err, errlen);
	if (rc)
		return rc;
	e->vocab = e->c->models[0].vocab;
	e->c->next_req_id = 1; /* not random: a test (or fuzz input) can name requests 1, 2, ... */
	e->client = ci_dealer(e, "ci-client", o.client_endpoint);
	e->node = ci_dealer(e, "ci-node", o.node_endpoint);
	if (!e->client || !e->node)
		return sl_errf(err, errlen, SL_ECOMM, "inproc DEALER: %s", zmq_strerror(errno));
	return SL_OK;
}

/* Back to the state ci_create left, without the cost of a new coordinator
 * (its ZeroMQ context, tokenizer and template): every request ended, every
 * group gone, ids counting from 1 again, whatever the DEALERs got dropped.
 * Register again before the next test. */
static inline void ci_reset(ci_env *e)
{
	size_t n;
	void *p;
	while (e->c->all)
		coord_finish(e->c, e->c->all, SHARDLINE__CLIENT__FINISH_REASON__ERROR, "reset");
	while (e->c->n_groups)
		coord_group_lost(e->c, e->c->groups[e->c->n_groups - 1], "reset");
	e->c->next_req_id = 1;
	e->c->next_group_id = 0;
	e->c->n_requeued = 0;
	while ((p = ci_recv(e->client, &n)))
		free(p);
	while ((p = ci_recv(e->node, &n)))
		free(p);
}

/* The DEALERs close first: zmq_ctx_term in coord_destroy waits for every
 * socket of its context. Replies sent while destroying go nowhere. */
static inline void ci_destroy(ci_env *e)
{
	if (e->client)
		zmq_close(e->client);
	if (e->node)
		zmq_close(e->node);
	coord_destroy(e->c);
	memset(e, 0, sizeof *e);
}

/* sock (a node DEALER) registers as a group of model "m" named name,
 * session session (tp 1, ample KV) and reads its ack; 0 when the
 * coordinator accepted it. */
static inline int ci_register_as(ci_env *e, void *sock, const char *name, uint64_t session)
{
	Shardline__Node__Register r = SHARDLINE__NODE__REGISTER__INIT;
	r.has_protocol = r.has_session = r.has_tp = r.has_pp = r.has_kv_blocks = 1;
	r.has_block_tokens = r.has_max_pos = r.has_vocab_size = 1;
	r.has_max_running = r.has_max_waiting = 1;
	r.protocol = 1;
	r.model = "m";
	r.name = (char *)name;
	r.session = session;
	r.tp = r.pp = 1;
	r.kv_blocks = 4096;
	r.block_tokens = 16;
	r.max_pos = 4096;
	r.vocab_size = e->vocab;
	r.max_running = r.max_waiting = 64;
	Shardline__Node__NodeMsg m = SHARDLINE__NODE__NODE_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_REGISTER;
	m.register_ = &r;
	if (ci_send(sock, &m.base))
		return -1;
	ci_pump(e);
	size_t n;
	void *p = ci_recv(sock, &n);
	Shardline__Node__CoordMsg *a = p ? shardline__node__coord_msg__unpack(NULL, n, p) : NULL;
	int ok = a && a->msg_case == SHARDLINE__NODE__COORD_MSG__MSG_ACK && a->ack->ok;
	if (a)
		shardline__node__coord_msg__free_unpacked(a, NULL);
	free(p);
	return ok ? 0 : -1;
}

/* The env's own node DEALER as group "ci-node", session 1. */
static inline int ci_register(ci_env *e) { return ci_register_as(e, e->node, "ci-node", 1); }

/* The next CoordMsg the node got (free with ..._free_unpacked), or NULL. */
static inline Shardline__Node__CoordMsg *ci_node_next(ci_env *e)
{
	size_t n;
	void *p;
	while ((p = ci_recv(e->node, &n))) {
		Shardline__Node__CoordMsg *m = shardline__node__coord_msg__unpack(NULL, n, p);
		free(p);
		if (m)
			return m;
	}
	return NULL;
}

/* The next Reply the client got, or NULL. */
static inline Shardline__Client__Reply *ci_client_next(ci_env *e)
{
	size_t n;
	void *p;
	while ((p = ci_recv(e->client, &n))) {
		Shardline__Client__Reply *m = shardline__client__reply__unpack(NULL, n, p);
		free(p);
		if (m)
			return m;
	}
	return NULL;
}

/* A TokenBatch for one request from the node DEALER, then a pump. */
static inline int ci_tokens(ci_env *e, uint64_t req_id, const int32_t *ids, size_t n,
			    Shardline__Node__Finish finish)
{
	Shardline__Node__SeqTokens s = SHARDLINE__NODE__SEQ_TOKENS__INIT;
	Shardline__Node__SeqTokens *seqs[1] = {&s};
	s.has_req_id = s.has_finish = 1;
	s.req_id = req_id;
	s.tokens = (int32_t *)ids;
	s.n_tokens = n;
	s.finish = finish;
	Shardline__Node__TokenBatch tb = SHARDLINE__NODE__TOKEN_BATCH__INIT;
	tb.n_seqs = 1;
	tb.seqs = seqs;
	Shardline__Node__NodeMsg m = SHARDLINE__NODE__NODE_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_TOKENS;
	m.tokens = &tb;
	int rc = ci_send(e->node, &m.base);
	ci_pump(e);
	return rc;
}

#endif
