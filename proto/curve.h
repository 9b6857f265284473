/*
 * curve.h — CURVE key files and socket setup (docs/security.md), shared
 * by every shardline process that speaks ZeroMQ: the client library and
 * CLI, the node leader (client side of CURVE) and the coordinator (server
 * side; its ZAP handler is coordinator/auth.c).
 *
 * A key file holds one key as 40 Z85 characters and a newline, the form
 * `shardline keygen` writes: NAME.key the secret (mode 0600), NAME.pub
 * the public key. A process given its secret key derives its public key
 * from it, so only the .key file travels with a process.
 */
#ifndef SL_CURVE_H
#define SL_CURVE_H

#include <stddef.h>

#define SL_CURVE_Z85_LEN 40   /* a 32-byte key in Z85 */

/* The key in path (one Z85 key, surrounding blanks ignored) into out
 * (41 bytes, NUL-terminated). A secret key file readable by group or
 * others is refused: a copied key authenticates as its owner. */
int sl_curve_read_key(const char *path, int secret, char out[SL_CURVE_Z85_LEN + 1], char *err,
			 size_t errlen);
/* The public key of a secret one (both Z85). */
int sl_curve_public_of(const char secret[SL_CURVE_Z85_LEN + 1], char out[SL_CURVE_Z85_LEN + 1],
			  char *err, size_t errlen);

/* Key material of a CURVE client: its own pair and the server's public
 * key, loaded once and applied to every socket it opens (reconnects). */
typedef struct sl_curve_client {
	int on;
	char secret[SL_CURVE_Z85_LEN + 1], public_[SL_CURVE_Z85_LEN + 1];
	char server[SL_CURVE_Z85_LEN + 1];
} sl_curve_client;

/* Both paths or neither (off): a half-configured client is an error that
 * names the missing flag (flag_key, flag_server: the caller's flag names). */
int sl_curve_client_load(sl_curve_client *k, const char *secret_path, const char *server_path,
			    const char *flag_key, const char *flag_server, char *err, size_t errlen);
/* Set the CURVE client options on sock (before zmq_connect); no-op when off. */
int sl_curve_client_apply(const sl_curve_client *k, void *sock, char *err, size_t errlen);

/* A fresh key pair as dir/name.key (0600, never overwritten) and
 * dir/name.pub. */
int sl_curve_keygen(const char *dir, const char *name, char *err, size_t errlen);

/* 1 when a ZeroMQ endpoint can only be reached from this host: tcp on
 * 127.0.0.0/8, ::1 or localhost, ipc://, inproc://. */
int sl_endpoint_is_local(const char *endpoint);

#endif
