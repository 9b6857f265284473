/*
 * coord.c — the coordinator's life: create (tokenizers, sockets, the HTTP
 * server), the zmq_poll loop, the timers (heartbeats both ways, dead
 * groups, request deadlines, unreachable clients), destroy. Message
 * handling is in on_client.c and on_node.c, HTTP in http.c; see
 * coord_int.h for the map.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/auth.h"
#include "text/jinja/chat_template.h"
#include "text/tool_calls.h"
#include "coordinator/coord_int.h"
#include "coordinator/http.h"
#include "coordinator/metrics.h"
#include "common/rng.h"
#include "common/sl.h"
#include "coordinator/standby.h"

void coord_opts_default(coord_opts *o)
{
	*o = (coord_opts){.client_endpoint = "tcp://127.0.0.1:5555",
			  .node_endpoint = "tcp://127.0.0.1:5556",
			  .heartbeat_ms = 1000,
			  .max_queue = 1024,
			  .request_timeout_ms = 600000, .admission_timeout_ms = 5000,
			  .stall_ms = 120000,
			  .default_max_tokens = 16,
			  .http_bind = "127.0.0.1:8000",
			  .http_max_connections = 2048,
			  .http_idle_timeout_s = 30,
			  .http_max_body_bytes = 4 << 20,
			  .http_body_timeout_s = 60};
}

static uint64_t random_epoch(void)
{
	/* low 32 bits count requests; ids stay below 2^62, the protocol's bound
	 * (docs/protocol.md: a leader keeps two bits for the coordinator) */
	return (sl_random_seed() & 0x3fffffffull) << 32;
}

/* One line per model: where its stop tokens and chat template came from. */
static void log_model(const coord_model *m, const char *path, int eos_from_flag)
{
	char ids[128] = "";
	for (int k = 0, n = 0; k < m->n_eos && n < (int)sizeof ids; k++) {
		const char *t = text_tok_id_to_token(m->tok, m->eos[k]);
		n += snprintf(ids + n, sizeof ids - (size_t)n, "%s%d%s%.24s%s", k ? " " : "",
			      m->eos[k], t ? " (" : "", t ? t : "", t ? ")" : "");
	}
	SL_INFO("coord", "model %s: tokenizer %s (vocab %d); EOS %s from %s; chat template %s%s",
		m->name, path, m->vocab, m->n_eos ? ids : "none",
		eos_from_flag ? "--eos-ids" : m->meta->n_eos ? m->meta->eos_from : "nowhere",
		m->meta->chat_template ? "from " : "none",
		m->meta->chat_template ? m->meta->template_from : "");
}

/* The chat template of a model — --chat-template FILE, else the model's
 * own (model_meta: tokenizer_config.json or the GGUF) — compiled now, so
 * that a construct the renderer does not support stops the start with the
 * template's line and column rather than failing chat requests later.
 * None: chat requests to this model get a 400 that says so. */
static int load_chat_template(coord_model *m, const char *path, char *err, size_t errlen)
{
	char *file = NULL;
	const char *src = m->meta->chat_template, *name = m->meta->template_from;
	size_t len = src ? strlen(src) : 0;
	int rc = SL_OK;
	if (path) {
		rc = sl_read_file(path, &file, &len, err, errlen);
		src = file, name = path;
	}
	if (!rc && !src) {
		SL_INFO("coord", "model %s: no chat template (--chat-template FILE gives one); "
			"/v1/chat/completions refuses it", m->name);
		return SL_OK;
	}
	if (!rc && (rc = text_tmpl_compile(src, len, name, &m->tmpl, err, errlen)) == SL_EINVAL) {
		size_t k = strlen(err);
		snprintf(err + k, errlen > k ? errlen - k : 0,
			 " (model %s; --chat-template FILE replaces the template)", m->name);
	}
	if (!rc) { /* how its tool calls read (docs/http.md, Tool calling) */
		m->tool_family = (int)text_tool_family_of(src, len, &m->tmpl_knows_tools);
		SL_INFO("coord", "model %s: tool calls in %s style%s", m->name,
			text_tool_family_name((text_tool_family)m->tool_family),
			m->tmpl_knows_tools ? "" : " (the template knows no tools: the server describes them)");
	}
	free(file);
	if (!rc && path)
		SL_INFO("coord", "model %s: chat template %s (%zu bytes) replaces the model's", m->name,
			path, len);
	return rc;
}

static int load_models(coord *c, char *err, size_t errlen)
{
	const coord_opts *o = &c->o;
	if (o->n_models < 1 || o->n_models > COORD_MAX_MODELS)
		return sl_errf(err, errlen, SL_EINVAL, "give 1 to %d models (--model-name with --tokenizer)",
			       COORD_MAX_MODELS);
	for (int i = 0; i < o->n_models; i++) {
		coord_model *m = &c->models[i];
		if (!o->model_names[i] || !o->model_names[i][0] || strlen(o->model_names[i]) > COORD_MAX_NAME)
			return sl_errf(err, errlen, SL_EINVAL, "model name must be 1 to %d bytes", COORD_MAX_NAME);
		snprintf(m->name, sizeof m->name, "%s", o->model_names[i]);
		int rc = coord_model_meta_load(o->tokenizers[i], &m->meta, err, errlen);
		if (rc)
			return rc;
		c->n_models = i + 1; /* destroy frees what loaded */
		m->tok = m->meta->tok;
		m->vocab = text_tok_vocab_size(m->tok);
		for (int k = 0; k < o->n_eos && k < COORD_MAX_EOS; k++)
			m->eos[m->n_eos++] = o->eos_ids[k];
		for (int k = 0; !o->eos_ids && k < m->meta->n_eos && k < COORD_MAX_EOS; k++)
			m->eos[m->n_eos++] = m->meta->eos[k];
		log_model(m, o->tokenizers[i], o->eos_ids != NULL);
		if ((rc = load_chat_template(m, o->chat_templates[i], err, errlen)))
			return rc;
	}
	c->n_models = o->n_models;
	return SL_OK;
}

static int bind_socket(coord *c, void **s, const char *endpoint, const char *domain, char *err,
		       size_t errlen)
{
	int one = 1;
	*s = sl_wire_socket(c->ctx, ZMQ_ROUTER, COORD_SOCKET_MAX_MSG);
	if (!*s)
		return sl_errf(err, errlen, SL_ECOMM, "zmq_socket: %s", zmq_strerror(errno));
	/* a reply to a peer that is gone fails instead of vanishing */
	zmq_setsockopt(*s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
	int rc = coord_auth_server(c->auth, *s, domain, err, errlen);
	if (rc)
		return rc;
	if (zmq_bind(*s, endpoint))
		return sl_errf(err, errlen, SL_ECOMM, "cannot bind %s: %s", endpoint, zmq_strerror(errno));
	return SL_OK;
}

static int write_ports(coord *c, char *err, size_t errlen)
{
	char a[256] = "", b[256] = "";
	size_t la = sizeof a, lb = sizeof b;
	zmq_getsockopt(c->clients, ZMQ_LAST_ENDPOINT, a, &la);
	zmq_getsockopt(c->nodes, ZMQ_LAST_ENDPOINT, b, &lb);
	SL_INFO("coord", "clients on %s, node groups on %s", a, b);
	if (!c->o.ports_file)
		return SL_OK;
	const char *http = c->http ? coord_http_address(c->http) : NULL;
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", c->o.ports_file);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return sl_errf(err, errlen, SL_EIO, "cannot write %s", tmp);
	fprintf(f, "client %s\nnode %s\n", a, b);
	if (http)
		fprintf(f, "http %s\n", http);
	if (fclose(f) || rename(tmp, c->o.ports_file)) /* readers never see half a file */
		return sl_errf(err, errlen, SL_EIO, "cannot write %s", c->o.ports_file);
	return SL_OK;
}

int coord_create(const coord_opts *o, coord **out, char *err, size_t errlen)
{
	coord *c = calloc(1, sizeof *c);
	if (!c)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	c->o = *o;
	coord_mem_setup();
	c->next_req_id = random_epoch() | 1;
	int rc = coord_metrics_create(&c->metrics);
	if (rc)
		rc = sl_errf(err, errlen, rc, "out of memory");
	if (!rc)
		rc = load_models(c, err, errlen);
	if (!rc && !(c->ctx = zmq_ctx_new()))
		rc = sl_errf(err, errlen, SL_ECOMM, "zmq_ctx_new failed");
	if (!rc) /* before the sockets: the ZAP handler must be there at their first handshake */
		rc = coord_auth_create(c->ctx, o, &c->auth, err, errlen);
	if (!rc)
		rc = coord_standby_create(c->ctx, o, &c->standby, err, errlen);
	if (!rc)
		rc = bind_socket(c, &c->clients, o->client_endpoint, "clients", err, errlen);
	if (!rc)
		rc = bind_socket(c, &c->nodes, o->node_endpoint, "nodes", err, errlen);
	if (!rc && o->http_bind && o->http_bind[0] && strcmp(o->http_bind, "none"))
		rc = coord_http_create(c, o, &c->http, err, errlen);
	if (!rc)
		rc = write_ports(c, err, errlen);
	if (rc) {
		coord_destroy(c);
		return rc;
	}
	*out = c;
	return SL_OK;
}

void coord_destroy(coord *c)
{
	if (!c)
		return;
	while (c->all) /* clients hear why; groups free the slots */
		coord_finish(c, c->all, SHARDLINE__CLIENT__FINISH_REASON__ERROR, "coordinator shutting down");
	coord_http_destroy(c->http); /* after the requests: their answers go out first */
	for (int i = 0; i < c->n_groups; i++)
		coord_group_free(c->groups[i]);
	if (c->clients)
		zmq_close(c->clients);
	if (c->nodes)
		zmq_close(c->nodes);
	coord_auth_destroy(c->auth);
	coord_standby_destroy(c->standby);
	if (c->ctx)
		zmq_ctx_term(c->ctx);
	for (int i = 0; i < c->n_models; i++) {
		coord_model_meta_destroy(c->models[i].meta);
		text_tmpl_destroy(c->models[i].tmpl);
	}
	coord_metrics_destroy(c->metrics);
	free(c);
}

/* Heartbeats out, silent or unreachable groups reaped, deadlines. Also
 * notes the earliest time something here falls due (c->next_due), so that
 * the loop sleeps until then rather than a whole tick. */
static void tick(coord *c)
{
	double now = sl_now(), hb = c->o.heartbeat_ms * 1e-3, due = now + 3600;
	for (int i = c->n_groups - 1; i >= 0; i--) {
		coord_group *g = c->groups[i];
		if (g->lost) {
			coord_group_lost(c, g, "its leader is unreachable");
		} else if (now - g->last_seen > COORD_DEAD_INTERVALS * hb) {
			char why[96];
			snprintf(why, sizeof why, "silent for %.0f ms", (now - g->last_seen) * 1e3);
			coord_group_lost(c, g, why);
		} else {
			if (g->stalled) /* its requests move once another group can take them */
				coord_group_unload_stalled(c, g);
			if (now - g->last_ping >= hb)
				coord_send_ping(c, g);
			due = fmin(due, fmin(g->last_ping + hb, g->last_seen + COORD_DEAD_INTERVALS * hb));
		}
	}
	coord_req *next;
	for (coord_req *r = c->all; r; r = next) {
		next = r->anext;
		if (r->client_gone) {
			coord_finish(c, r, SHARDLINE__CLIENT__FINISH_REASON__CANCELLED, "client unreachable");
		} else if (now > r->deadline) {
			char msg[96];
			r->timed_out = 1;
			snprintf(msg, sizeof msg, "timed out after %.0f ms", (now - r->t_submit) * 1e3);
			SL_INFO("coord", "request %llu %s", (unsigned long long)r->id, msg);
			coord_finish(c, r, SHARDLINE__CLIENT__FINISH_REASON__ERROR, msg);
		} else {
			due = fmin(due, r->deadline);
		}
	}
	coord_http_tick(c->http);
	coord_mem_release(now, &c->mem_checked);
	c->last_tick = now;
	c->next_due = due;
	c->due_scan_id = c->next_req_id;
}

/* Milliseconds until the next timer falls due, at most cap: the nearest
 * of the tick, the last tick's earliest deadline and those of requests
 * made since (Redis' ae.c sleeps until its nearest timer the same way).
 * Requests are pushed at the head of c->all with rising ids, so the new
 * ones are a prefix of that list: no walk over every request per turn.
 * Rounded up: waking a fraction of a millisecond early would spin. */
static int poll_timeout_ms(coord *c, int cap)
{
	for (coord_req *r = c->all; r && r->id >= c->due_scan_id; r = r->anext)
		c->next_due = fmin(c->next_due, r->deadline);
	c->due_scan_id = c->next_req_id;
	double ms = ceil((fmin(c->next_due, c->last_tick + cap * 1e-3) - sl_now()) * 1e3);
	return ms < 0 ? 0 : ms > cap ? cap : (int)ms;
}

/* Up to `budget` messages from one socket: a flood on one side cannot
 * starve the other or the timers. */
static int drain(coord *c, void *sock, void (*handle)(coord *, sl_wire_msg *), int budget)
{
	sl_wire_msg m;
	int got = 0;
	while (budget-- > 0 && (got = sl_wire_recv(sock, &m)) == 1) {
		handle(c, &m);
		sl_wire_msg_close(&m);
	}
	return got < 0 ? SL_ECOMM : SL_OK;
}

/* In a standby pair, a coordinator that does not serve drops what clients
 * send, unanswered: they see silence and go to the other. Leaders are
 * registered with both and always answered (the standby keeps its picture
 * of the groups current); they get work only from the one that serves. */
static void on_client_gated(coord *c, sl_wire_msg *m)
{
	if (coord_standby_admit(c->standby))
		coord_on_client(c, m);
}

int coord_run(coord *c, char *err, size_t errlen)
{
	int tick_ms = c->o.heartbeat_ms / 8;
	tick_ms = tick_ms < 5 ? 5 : tick_ms > 100 ? 100 : tick_ms;
	while (!*c->o.stop) {
		/* the HTTP server's epoll descriptor is polled like the sockets */
		zmq_pollitem_t it[5] = {{c->nodes, 0, ZMQ_POLLIN, 0}, {c->clients, 0, ZMQ_POLLIN, 0}};
		int n_it = 2;
		if (c->http)
			it[n_it++] = (zmq_pollitem_t){NULL, coord_http_fd(c->http), ZMQ_POLLIN, 0};
		if (c->auth) /* the ZAP handler (CURVE on) */
			it[n_it++] = (zmq_pollitem_t){coord_auth_socket(c->auth), 0, ZMQ_POLLIN, 0};
		if (c->standby) /* the peer's state */
			it[n_it++] = (zmq_pollitem_t){coord_standby_socket(c->standby), 0, ZMQ_POLLIN, 0};
		int timeout = poll_timeout_ms(c, tick_ms);
		if (c->http)
			timeout = coord_http_timeout_ms(c->http, timeout);
		int standby_ms = coord_standby_timeout_ms(c->standby);
		timeout = standby_ms >= 0 && standby_ms < timeout ? standby_ms : timeout;
		if (zmq_poll(it, n_it, timeout) < 0) {
			if (errno == EINTR)
				continue;
			return sl_errf(err, errlen, SL_ECOMM, "zmq_poll: %s", zmq_strerror(errno));
		}
		coord_auth_handle(c->auth); /* handshakes wait for it: first */
		coord_standby_run(c->standby);
		if (drain(c, c->nodes, coord_on_node, 1000) || drain(c, c->clients, on_client_gated, 1000))
			return sl_errf(err, errlen, SL_ECOMM, "receive: %s", zmq_strerror(errno));
		double now = sl_now();
		if (now - c->last_tick >= tick_ms * 1e-3 || now >= c->next_due)
			tick(c);
		if (c->qhead)
			coord_dispatch(c);
		/* last, so that what the node messages and the tick wrote (tokens,
		 * ends) leaves in this turn */
		if (c->http)
			coord_http_run(c->http);
	}
	SL_INFO("coord", "stopping: %d request(s) active", c->n_active);
	/* coord_destroy ends each with a Done naming the shutdown: let those
	 * leave before the sockets close (their linger is 0), 2 s at most */
	int linger = 2000;
	zmq_setsockopt(c->clients, ZMQ_LINGER, &linger, sizeof linger);
	return SL_OK;
}
