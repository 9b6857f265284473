/*
 * standby.h — a primary and a backup coordinator (the ZeroMQ guide's
 * Binary Star; docs/protocol.md, "Standby coordinator").
 *
 * Each publishes its state every heartbeat on a PUB socket (--peer-bind)
 * and subscribes to the other's (--peer). A finite-state machine decides
 * which one serves: the primary starts serving at its first client
 * message when no peer is heard (or its peer is a waiting backup); the
 * backup stays passive while the primary is heard and takes over when the
 * primary has been silent for 3 heartbeats and a client asks it. A
 * coordinator that does not serve drops every client message unanswered
 * (HTTP: 503), so clients, which know both endpoints, see silence and fail
 * over to the other. Node leaders are registered with both all along and
 * do not vote. Owned by coord.c (create, poll, tick, the gate on each
 * client message); http.c asks it too, for each completion and /health.
 */
#ifndef COORD_STANDBY_H
#define COORD_STANDBY_H

#include <stddef.h>

#include "coordinator/coord.h"

typedef struct coord_standby coord_standby;

/* NULL in *out when no --standby role was given (a lone coordinator always
 * serves). */
int coord_standby_create(void *ctx, const coord_opts *o, coord_standby **out, char *err,
			 size_t errlen);
void coord_standby_destroy(coord_standby *s);
/* The SUB socket (the peer's state), to poll; NULL when off. */
void *coord_standby_socket(coord_standby *s);
/* Take the peer's state messages in; publish ours when due. */
void coord_standby_run(coord_standby *s);
/* A client message (or HTTP completion, /health) arrived: 1 serve it, 0
 * drop it. This is the event that lets a passive backup take over (peer
 * silent 3 heartbeats). */
int coord_standby_admit(coord_standby *s);
/* Milliseconds until the next state message is due; -1 when off. */
int coord_standby_timeout_ms(const coord_standby *s);

#endif
