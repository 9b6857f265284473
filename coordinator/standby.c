/*
 * standby.c — Binary Star between a primary and a backup coordinator
 * (see standby.h). The state machine follows the ZeroMQ guide's bstar:
 *
 *   state    peer says PRIMARY  BACKUP   ACTIVE         PASSIVE        a client asks
 *   PRIMARY            -        ACTIVE   PASSIVE        ACTIVE         ACTIVE
 *   BACKUP             -        -        PASSIVE        -              (drop)
 *   ACTIVE             -        -        see below      -              serve
 *   PASSIVE            ACTIVE   ACTIVE   -              see below      ACTIVE if the peer
 *                                                                      is silent 3 heartbeats
 *
 * A peer that (re)starts as PRIMARY or BACKUP while we are passive means
 * it lost its state: we take over and it will go passive. Two active
 * (split brain after a partition) or two passive: the primary serves,
 * the backup yields, and both log it.
 */
#include "coordinator/standby.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "proto/curve.h"
#include "common/sl.h"

#define STANDBY_DEAD_INTERVALS 3

typedef enum { BS_PRIMARY = 1, BS_BACKUP, BS_ACTIVE, BS_PASSIVE } bs_state;

struct coord_standby {
	void *pub, *sub;
	bs_state state;
	int is_primary;
	int hb_ms;
	double peer_expiry;        /* the peer counts as alive until then */
	double last_pub;
	double asked_at;           /* a client message dropped while passive */
};

static const char *state_name(bs_state s)
{
	static const char *n[] = {"?", "primary (waiting)", "backup (waiting)", "active", "passive"};
	return s >= BS_PRIMARY && s <= BS_PASSIVE ? n[s] : n[0];
}

static void set_state(coord_standby *s, bs_state to, const char *why)
{
	if (s->state == to)
		return;
	SL_INFO("coord", "standby: %s -> %s: %s", state_name(s->state), state_name(to), why);
	s->state = to;
}

int coord_standby_create(void *ctx, const coord_opts *o, coord_standby **out, char *err,
			 size_t errlen)
{
	*out = NULL;
	if (!o->standby_role && !o->peer_bind && !o->peer_endpoint)
		return SL_OK;
	if (!o->standby_role || !o->peer_bind || !o->peer_endpoint)
		return sl_errf(err, errlen, SL_EINVAL, "a standby pair needs --standby primary|backup, "
			       "--peer-bind EP (our state out) and --peer EP (the other's --peer-bind)");
	if (!o->insecure && !sl_endpoint_is_local(o->peer_bind))
		return sl_errf(err, errlen, SL_EINVAL, "--peer-bind %s is reachable from other hosts and "
			       "the state link has no CURVE: bind it on loopback/ipc, or give --insecure",
			       o->peer_bind);
	coord_standby *s = calloc(1, sizeof *s);
	if (!s)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	s->is_primary = !strcmp(o->standby_role, "primary");
	s->state = s->is_primary ? BS_PRIMARY : BS_BACKUP;
	s->hb_ms = o->heartbeat_ms;
	int linger = 0, rc = SL_OK;
	s->pub = zmq_socket(ctx, ZMQ_PUB);
	s->sub = zmq_socket(ctx, ZMQ_SUB);
	if (!s->pub || !s->sub)
		rc = sl_errf(err, errlen, SL_ECOMM, "zmq_socket: %s", zmq_strerror(errno));
	if (!rc) {
		zmq_setsockopt(s->pub, ZMQ_LINGER, &linger, sizeof linger);
		zmq_setsockopt(s->sub, ZMQ_LINGER, &linger, sizeof linger);
		zmq_setsockopt(s->sub, ZMQ_SUBSCRIBE, "", 0);
		if (zmq_bind(s->pub, o->peer_bind))
			rc = sl_errf(err, errlen, SL_ECOMM, "cannot bind --peer-bind %s: %s", o->peer_bind,
				     zmq_strerror(errno));
		else if (zmq_connect(s->sub, o->peer_endpoint))
			rc = sl_errf(err, errlen, SL_ECOMM, "cannot connect --peer %s: %s", o->peer_endpoint,
				     zmq_strerror(errno));
	}
	if (rc) {
		coord_standby_destroy(s);
		return rc;
	}
	SL_INFO("coord", "standby: %s; state out on %s, the peer's from %s", s->is_primary ? "primary"
		: "backup", o->peer_bind, o->peer_endpoint);
	*out = s;
	return SL_OK;
}

void coord_standby_destroy(coord_standby *s)
{
	if (!s)
		return;
	if (s->pub)
		zmq_close(s->pub);
	if (s->sub)
		zmq_close(s->sub);
	free(s);
}

void *coord_standby_socket(coord_standby *s) { return s ? s->sub : NULL; }

/* The peer said it is in state `peer`. */
static void on_peer(coord_standby *s, bs_state peer)
{
	s->peer_expiry = sl_now() + STANDBY_DEAD_INTERVALS * s->hb_ms * 1e-3;
	switch (s->state) {
	case BS_PRIMARY:
		if (peer == BS_BACKUP)
			set_state(s, BS_ACTIVE, "the backup is waiting: serving");
		else if (peer == BS_ACTIVE)
			set_state(s, BS_PASSIVE, "the backup serves (it took over): standing by");
		else if (peer == BS_PASSIVE)
			set_state(s, BS_ACTIVE, "the backup stands by: serving");
		break;
	case BS_BACKUP:
		if (peer == BS_ACTIVE)
			set_state(s, BS_PASSIVE, "the primary serves: standing by");
		break;
	case BS_ACTIVE:
		if (peer == BS_ACTIVE) {
			SL_WARN("coord", "standby: both coordinators active (a partition healed?); %s",
				s->is_primary ? "the primary keeps serving" : "the backup yields");
			if (!s->is_primary)
				set_state(s, BS_PASSIVE, "the primary is active too");
		}
		break;
	case BS_PASSIVE:
		if (peer == BS_PRIMARY || peer == BS_BACKUP)
			set_state(s, BS_ACTIVE, "the peer restarted and lost its state: taking over");
		else if (peer == BS_PASSIVE && s->is_primary)
			set_state(s, BS_ACTIVE, "both passive: the primary serves");
		break;
	}
}

void coord_standby_run(coord_standby *s)
{
	if (!s)
		return;
	for (int budget = 64; budget > 0; budget--) {
		uint8_t b[8];
		int n = zmq_recv(s->sub, b, sizeof b, ZMQ_DONTWAIT);
		if (n < 0)
			break;
		if (n == 1 && b[0] >= BS_PRIMARY && b[0] <= BS_PASSIVE)
			on_peer(s, (bs_state)b[0]);
	}
	double now = sl_now();
	/* a client asked while the peer still counted as alive: take over the
	 * moment it expires rather than at the client's next ping */
	if (s->state == BS_PASSIVE && now >= s->peer_expiry &&
	    now - s->asked_at < STANDBY_DEAD_INTERVALS * s->hb_ms * 1e-3)
		coord_standby_admit(s);
	if (now - s->last_pub >= s->hb_ms * 1e-3) {
		uint8_t b = (uint8_t)s->state;
		zmq_send(s->pub, &b, 1, ZMQ_DONTWAIT);
		s->last_pub = now;
	}
}

int coord_standby_admit(coord_standby *s)
{
	if (!s || s->state == BS_ACTIVE)
		return 1;
	double now = sl_now();
	if (s->state == BS_PRIMARY) {
		set_state(s, BS_ACTIVE, "a client asked and no active peer is heard: serving");
		return 1;
	}
	if (s->state == BS_PASSIVE && now >= s->peer_expiry) {
		char why[128];
		snprintf(why, sizeof why, "the peer has been silent for %.0f ms and a client asked: "
			 "taking over", (now - s->peer_expiry) * 1e3 +
			 STANDBY_DEAD_INTERVALS * s->hb_ms);
		set_state(s, BS_ACTIVE, why);
		return 1;
	}
	s->asked_at = now;
	return 0;
}

int coord_standby_timeout_ms(const coord_standby *s)
{
	if (!s)
		return -1;
	double now = sl_now(), t = s->last_pub + s->hb_ms * 1e-3;
	/* only a future expiry: a past one with no recent ask has nothing to wake for */
	if (s->state == BS_PASSIVE && s->asked_at && s->peer_expiry > now && s->peer_expiry < t)
		t = s->peer_expiry;
	double ms = (t - now) * 1e3;
	return ms <= 0 ? 0 : (int)ms + 1;
}
