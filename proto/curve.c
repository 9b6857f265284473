/*
 * curve.c — CURVE key files and client socket setup (see curve.h).
 */
#include "proto/curve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/sl.h"

int sl_curve_read_key(const char *path, int secret, char out[SL_CURVE_Z85_LEN + 1], char *err,
			 size_t errlen)
{
	struct stat st;
	if (stat(path, &st))
		return sl_errf(err, errlen, SL_ENOTFOUND, "key file %s: %s", path, strerror(errno));
	if (secret && (st.st_mode & 077))
		return sl_errf(err, errlen, SL_EINVAL, "secret key file %s is readable by others (mode "
			       "%04o): chmod 600 it", path, (unsigned)(st.st_mode & 07777));
	char *text = NULL;
	size_t len = 0;
	int rc = sl_read_file(path, &text, &len, err, errlen);
	if (rc)
		return rc;
	const char *p = text, *e = text + len;
	while (p < e && strchr(" \t\r\n", *p))
		p++;
	while (e > p && strchr(" \t\r\n", e[-1]))
		e--;
	uint8_t bin[32];
	if (e - p == SL_CURVE_Z85_LEN) {
		memcpy(out, p, SL_CURVE_Z85_LEN);
		out[SL_CURVE_Z85_LEN] = 0;
	}
	free(text);
	if (e - p != SL_CURVE_Z85_LEN || !zmq_z85_decode(bin, out))
		return sl_errf(err, errlen, SL_EINVAL, "key file %s: expected one key of %d Z85 "
			       "characters (shardline keygen writes them)", path, SL_CURVE_Z85_LEN);
	return SL_OK;
}

int sl_curve_public_of(const char secret[SL_CURVE_Z85_LEN + 1], char out[SL_CURVE_Z85_LEN + 1],
			  char *err, size_t errlen)
{
	if (zmq_curve_public(out, secret))
		return sl_errf(err, errlen, SL_ENOTSUP, "cannot derive a public key: %s (libzmq "
			       "without CURVE?)", zmq_strerror(errno));
	return SL_OK;
}

int sl_curve_client_load(sl_curve_client *k, const char *secret_path, const char *server_path,
			    const char *flag_key, const char *flag_server, char *err, size_t errlen)
{
	memset(k, 0, sizeof *k);
	if (!secret_path && !server_path)
		return SL_OK;
	if (!secret_path || !server_path)
		return sl_errf(err, errlen, SL_EINVAL, "CURVE needs both %s (this side's secret key) "
			       "and %s (the coordinator's public key)", flag_key, flag_server);
	if (!zmq_has("curve"))
		return sl_errf(err, errlen, SL_ENOTSUP, "this libzmq was built without CURVE");
	int rc = sl_curve_read_key(secret_path, 1, k->secret, err, errlen);
	if (!rc)
		rc = sl_curve_read_key(server_path, 0, k->server, err, errlen);
	if (!rc)
		rc = sl_curve_public_of(k->secret, k->public_, err, errlen);
	k->on = rc == SL_OK;
	return rc;
}

int sl_curve_client_apply(const sl_curve_client *k, void *sock, char *err, size_t errlen)
{
	if (!k || !k->on)
		return SL_OK;
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, k->server, SL_CURVE_Z85_LEN + 1) ||
	    zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, k->public_, SL_CURVE_Z85_LEN + 1) ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->secret, SL_CURVE_Z85_LEN + 1))
		return sl_errf(err, errlen, SL_ECOMM, "CURVE socket options: %s", zmq_strerror(errno));
	return SL_OK;
}

/* path with the key and a newline, created with mode; never replaces a file. */
static int write_key(const char *path, const char *key, int mode, char *err, size_t errlen)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
	if (fd < 0)
		return sl_errf(err, errlen, SL_EIO, "cannot create %s: %s%s", path, strerror(errno),
			       errno == EEXIST ? " (keygen never overwrites a key)" : "");
	char line[SL_CURVE_Z85_LEN + 2];
	snprintf(line, sizeof line, "%s\n", key);
	ssize_t n = write(fd, line, strlen(line));
	if (close(fd) || n != (ssize_t)strlen(line))
		return sl_errf(err, errlen, SL_EIO, "cannot write %s", path);
	return SL_OK;
}

int sl_curve_keygen(const char *dir, const char *name, char *err, size_t errlen)
{
	char pub[SL_CURVE_Z85_LEN + 1], sec[SL_CURVE_Z85_LEN + 1], path[4096], file[300];
	if (!zmq_has("curve"))
		return sl_errf(err, errlen, SL_ENOTSUP, "this libzmq was built without CURVE");
	if (!name[0] || strchr(name, '/'))
		return sl_errf(err, errlen, SL_EINVAL, "--name '%s': give a file name, no '/'", name);
	if (mkdir(dir, 0700) && errno != EEXIST)
		return sl_errf(err, errlen, SL_EIO, "cannot create %s: %s", dir, strerror(errno));
	if (zmq_curve_keypair(pub, sec))
		return sl_errf(err, errlen, SL_ECOMM, "zmq_curve_keypair: %s", zmq_strerror(errno));
	snprintf(file, sizeof file, "%s.key", name);
	int rc = sl_path_join(path, sizeof path, dir, file);
	if (!rc)
		rc = write_key(path, sec, 0600, err, errlen);
	snprintf(file, sizeof file, "%s.pub", name);
	if (!rc && !(rc = sl_path_join(path, sizeof path, dir, file)))
		rc = write_key(path, pub, 0644, err, errlen);
	memset(sec, 0, sizeof sec);
	return rc == SL_EINVAL ? sl_errf(err, errlen, rc, "path too long under %s", dir) : rc;
}

int sl_endpoint_is_local(const char *ep)
{
	if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9))
		return 1;
	if (strncmp(ep, "tcp://", 6))
		return 0;
	const char *h = ep + 6;
	return !strncmp(h, "127.", 4) || !strncmp(h, "localhost:", 10) || !strncmp(h, "[::1]:", 6);
}
