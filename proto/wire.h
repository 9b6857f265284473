/*
 * wire.h — one protobuf message per ZeroMQ frame: packing and sending
 * (with the routing identity frame of a ROUTER socket first), receiving a
 * whole multipart message without blocking and without trusting its
 * shape. Shared by the coordinator, its client library and the node
 * leader (node/leader.c), which all speak the proto/ messages this way.
 */
#ifndef SL_WIRE_H
#define SL_WIRE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <zmq.h>

#define SL_WIRE_MAX_FRAMES 4    /* frames kept of one message; the rest are counted, dropped */
#define SL_WIRE_MAX_IDENT 255   /* ZeroMQ routing ids are at most 255 bytes */

typedef struct sl_wire_msg {
	zmq_msg_t frames[SL_WIRE_MAX_FRAMES];
	int n;        /* frames kept */
	int n_total;  /* frames the message had */
} sl_wire_msg;

/* Pack m and send it as one frame, after an identity frame when ident is
 * not NULL (ROUTER). Never blocks. SL_ECOMM when ZeroMQ refuses: *zerrno
 * (when not NULL) gets errno, EHOSTUNREACH meaning the peer is gone and
 * EAGAIN its queue full. */
int sl_wire_send(void *sock, const void *ident, size_t ident_len, const ProtobufCMessage *m,
		    int *zerrno);
/* Receive one message if one is waiting: 1 got one (close it with
 * sl_wire_msg_close), 0 none waiting, SL_ECOMM on a socket error. */
int sl_wire_recv(void *sock, sl_wire_msg *m);
void sl_wire_msg_close(sl_wire_msg *m);
/* Frame i's bytes and size. */
const void *sl_wire_data(sl_wire_msg *m, int i);
size_t sl_wire_size(sl_wire_msg *m, int i);

/* A socket with the options every shardline socket gets: linger 0 (closing
 * never waits on a dead peer), high water marks large enough that a
 * streaming burst is queued rather than dropped, a size cap on incoming
 * messages. NULL on failure (errno from ZeroMQ). */
void *sl_wire_socket(void *ctx, int type, long max_msg_bytes);

#endif
