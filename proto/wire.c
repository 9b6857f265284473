/*
 * wire.c — protobuf frames over ZeroMQ (see wire.h).
 */
#include "proto/wire.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/sl.h"

int sl_wire_send(void *sock, const void *ident, size_t ident_len, const ProtobufCMessage *m,
		    int *zerrno)
{
	uint8_t small[4096], *buf = small;
	size_t n = protobuf_c_message_get_packed_size(m);
	if (n > sizeof small && !(buf = malloc(n))) {
		if (zerrno)
			*zerrno = ENOMEM;
		return SL_ENOMEM;
	}
	protobuf_c_message_pack(m, buf);
	int rc = 0;
	if (ident)
		rc = zmq_send(sock, ident, ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	if (rc >= 0)
		rc = zmq_send(sock, buf, n, ZMQ_DONTWAIT);
	int e = errno;
	if (buf != small)
		free(buf);
	if (rc < 0) {
		if (zerrno)
			*zerrno = e;
		return SL_ECOMM;
	}
	return SL_OK;
}

int sl_wire_recv(void *sock, sl_wire_msg *m)
{
	m->n = m->n_total = 0;
	for (;;) {
		zmq_msg_t scratch, *f = m->n < SL_WIRE_MAX_FRAMES ? &m->frames[m->n] : &scratch;
		zmq_msg_init(f);
		int flags = m->n_total == 0 ? ZMQ_DONTWAIT : 0; /* the rest of a message is there */
		if (zmq_msg_recv(f, sock, flags) < 0) {
			int e = errno;
			zmq_msg_close(f);
			if (m->n_total == 0 && (e == EAGAIN || e == EINTR))
				return 0;
			sl_wire_msg_close(m);
			return SL_ECOMM;
		}
		int more = zmq_msg_more(f);
		m->n_total++;
		if (f == &scratch)
			zmq_msg_close(f);
		else
			m->n++;
		if (!more)
			return 1;
	}
}

void sl_wire_msg_close(sl_wire_msg *m)
{
	for (int i = 0; i < m->n; i++)
		zmq_msg_close(&m->frames[i]);
	m->n = m->n_total = 0;
}

const void *sl_wire_data(sl_wire_msg *m, int i) { return zmq_msg_data(&m->frames[i]); }
size_t sl_wire_size(sl_wire_msg *m, int i) { return zmq_msg_size(&m->frames[i]); }

void *sl_wire_socket(void *ctx, int type, long max_msg_bytes)
{
	void *s = zmq_socket(ctx, type);
	if (!s)
		return NULL;
	int linger = 0, hwm = 1000000;
	int64_t maxmsg = max_msg_bytes;
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
	zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
	if (max_msg_bytes > 0)
		zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
	return s;
}
