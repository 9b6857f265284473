/*
 * auth.h — CURVE on the coordinator's two ZeroMQ sockets and the ZAP
 * handler that decides who may connect (docs/security.md).
 *
 * With --curve-key the client and node sockets are CURVE servers; libzmq
 * asks a ZAP handler (RFC 27, bound on inproc://zeromq.zap.01 in the same
 * context) about every handshake, and this one answers from the
 * coordinator's own loop: 200 for a public key listed in --client-keys
 * (client socket) or --node-keys (node socket), 400 for any other, with
 * a log line naming the key and the peer's address. Without keys the
 * sockets are open, which is allowed only on loopback endpoints or with
 * --insecure. Owned by coord.c (create, poll, destroy).
 */
#ifndef COORD_AUTH_H
#define COORD_AUTH_H

#include <stddef.h>

#include "coordinator/coord.h"

typedef struct coord_auth coord_auth;

/* Checks the options (keys, or loopback, or --insecure), loads the keys
 * and binds the ZAP handler when CURVE is on; *out is NULL when it is
 * off. Call before the sockets bind. */
int coord_auth_create(void *ctx, const coord_opts *o, coord_auth **out, char *err, size_t errlen);
void coord_auth_destroy(coord_auth *a);
/* Make sock a CURVE server whose handshakes ZAP sees under domain
 * ("clients" or "nodes"). No-op when a is NULL (CURVE off). */
int coord_auth_server(coord_auth *a, void *sock, const char *domain, char *err, size_t errlen);
/* The ZAP socket, to poll; NULL when off. */
void *coord_auth_socket(coord_auth *a);
/* Answer the ZAP requests waiting (never blocks). */
void coord_auth_handle(coord_auth *a);

#endif
