/*
 * auth.c — CURVE server sockets and the ZAP handler (see auth.h).
 */
#include "coordinator/auth.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "proto/curve.h"
#include "common/sl.h"

#define AUTH_ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define AUTH_MAX_KEYS 4096
#define AUTH_LOG_EVERY_S 10.0   /* a refused peer retries every 100 ms: log it once per this */

typedef struct key_set {
	uint8_t (*k)[32];
	int n;
} key_set;

struct coord_auth {
	void *zap;
	char secret[SL_CURVE_Z85_LEN + 1], public_[SL_CURVE_Z85_LEN + 1];
	key_set clients, nodes;
	uint8_t last_refused[32];    /* log throttle: the last key refused ... */
	char last_domain[16];        /* ... on this socket ... */
	double last_log;             /* ... when it was logged */
	long refused_quiet;          /* refusals not logged since */
};

static int add_key(key_set *s, const char *z85, const char *where, char *err, size_t errlen)
{
	uint8_t bin[32];
	if (strlen(z85) != SL_CURVE_Z85_LEN || !zmq_z85_decode(bin, z85))
		return sl_errf(err, errlen, SL_EINVAL, "%s: '%.48s' is not a Z85 public key of %d "
			       "characters", where, z85, SL_CURVE_Z85_LEN);
	if (s->n == AUTH_MAX_KEYS)
		return sl_errf(err, errlen, SL_EINVAL, "%s: more than %d keys", where, AUTH_MAX_KEYS);
	if (!s->k && !(s->k = malloc(sizeof *s->k * AUTH_MAX_KEYS)))
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	memcpy(s->k[s->n++], bin, 32);
	return SL_OK;
}

/* One key per line; blank lines and '#' comments skipped. */
static int load_key_file(key_set *s, const char *path, char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0;
	int rc = sl_read_file(path, &text, &len, err, errlen), line = 0;
	for (char *p = text, *nl; !rc && p && *p; p = nl ? nl + 1 : NULL) {
		nl = strchr(p, '\n');
		if (nl)
			*nl = 0;
		line++;
		while (*p == ' ' || *p == '\t')
			p++;
		char *e = p + strlen(p);
		while (e > p && strchr(" \t\r", e[-1]))
			*--e = 0;
		if (*p && *p != '#') {
			char where[4200];
			snprintf(where, sizeof where, "%s line %d", path, line);
			rc = add_key(s, p, where, err, errlen);
		}
	}
	free(text);
	return rc;
}

/* Every *.pub file of a directory. */
static int load_key_dir(key_set *s, const char *dir, char *err, size_t errlen)
{
	DIR *d = opendir(dir);
	if (!d)
		return sl_errf(err, errlen, SL_ENOTFOUND, "%s: %s", dir, strerror(errno));
	int rc = SL_OK;
	struct dirent *e;
	while (!rc && (e = readdir(d))) {
		size_t n = strlen(e->d_name);
		char path[4096];
		if (n < 5 || strcmp(e->d_name + n - 4, ".pub"))
			continue;
		rc = sl_path_join(path, sizeof path, dir, e->d_name);
		if (!rc)
			rc = load_key_file(s, path, err, errlen);
	}
	closedir(d);
	return rc;
}

/* flag's value: PATH[,PATH...], each a directory of .pub files or a file
 * of keys. At least one key in all. */
static int load_keys(key_set *s, const char *flag, const char *list, char *err, size_t errlen)
{
	if (!list)
		return sl_errf(err, errlen, SL_EINVAL, "--curve-key needs %s (the public keys allowed "
			       "to connect: a directory of .pub files or files of keys)", flag);
	char *copy = strdup(list), *save = NULL;
	if (!copy)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	int rc = SL_OK;
	for (char *p = strtok_r(copy, ",", &save); !rc && p; p = strtok_r(NULL, ",", &save)) {
		struct stat st;
		if (stat(p, &st))
			rc = sl_errf(err, errlen, SL_ENOTFOUND, "%s %s: %s", flag, p, strerror(errno));
		else
			rc = S_ISDIR(st.st_mode) ? load_key_dir(s, p, err, errlen)
						 : load_key_file(s, p, err, errlen);
	}
	free(copy);
	if (!rc && s->n == 0)
		rc = sl_errf(err, errlen, SL_EINVAL, "%s %s: no public key found", flag, list);
	return rc;
}

/* Without CURVE, only endpoints other hosts cannot reach, unless asked. */
static int check_open(const coord_opts *o, char *err, size_t errlen)
{
	const char *eps[2] = {o->client_endpoint, o->node_endpoint};
	const char *flags[2] = {"--client-bind", "--node-bind"};
	for (int i = 0; i < 2; i++)
		if (!o->insecure && !sl_endpoint_is_local(eps[i]))
			return sl_errf(err, errlen, SL_EINVAL, "%s %s is reachable from other hosts and "
				       "CURVE is off: give --curve-key with --client-keys and --node-keys "
				       "(docs/security.md), or --insecure to serve it unauthenticated",
				       flags[i], eps[i]);
	if (o->insecure)
		SL_WARN("coord", "--insecure: anyone who reaches %s or %s is served", eps[0], eps[1]);
	return SL_OK;
}

int coord_auth_create(void *ctx, const coord_opts *o, coord_auth **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!o->curve_key) {
		if (o->client_keys || o->node_keys)
			return sl_errf(err, errlen, SL_EINVAL, "--client-keys and --node-keys need "
				       "--curve-key (the coordinator's secret key)");
		return check_open(o, err, errlen);
	}
	if (!zmq_has("curve"))
		return sl_errf(err, errlen, SL_ENOTSUP, "--curve-key: this libzmq was built without CURVE");
	coord_auth *a = calloc(1, sizeof *a);
	if (!a)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	int rc = sl_curve_read_key(o->curve_key, 1, a->secret, err, errlen);
	if (!rc)
		rc = sl_curve_public_of(a->secret, a->public_, err, errlen);
	if (!rc)
		rc = load_keys(&a->clients, "--client-keys", o->client_keys, err, errlen);
	if (!rc)
		rc = load_keys(&a->nodes, "--node-keys", o->node_keys, err, errlen);
	if (!rc && !(a->zap = zmq_socket(ctx, ZMQ_REP)))
		rc = sl_errf(err, errlen, SL_ECOMM, "zmq_socket: %s", zmq_strerror(errno));
	int linger = 0;
	if (!rc)
		zmq_setsockopt(a->zap, ZMQ_LINGER, &linger, sizeof linger);
	if (!rc && zmq_bind(a->zap, AUTH_ZAP_ENDPOINT))
		rc = sl_errf(err, errlen, SL_ECOMM, "cannot bind the ZAP handler on %s: %s",
			     AUTH_ZAP_ENDPOINT, zmq_strerror(errno));
	if (rc) {
		coord_auth_destroy(a);
		return rc;
	}
	SL_INFO("coord", "CURVE on: server key %s; %d client key(s), %d node key(s) allowed",
		a->public_, a->clients.n, a->nodes.n);
	*out = a;
	return SL_OK;
}

void coord_auth_destroy(coord_auth *a)
{
	if (!a)
		return;
	if (a->zap)
		zmq_close(a->zap);
	free(a->clients.k);
	free(a->nodes.k);
	memset(a, 0, sizeof *a); /* the secret key */
	free(a);
}

int coord_auth_server(coord_auth *a, void *sock, const char *domain, char *err, size_t errlen)
{
	int one = 1;
	if (!a)
		return SL_OK;
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, a->secret, SL_CURVE_Z85_LEN + 1) ||
	    zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, domain, strlen(domain)))
		return sl_errf(err, errlen, SL_ECOMM, "CURVE server options: %s", zmq_strerror(errno));
	return SL_OK;
}

void *coord_auth_socket(coord_auth *a) { return a ? a->zap : NULL; }

static int known(const key_set *s, const uint8_t *key)
{
	for (int i = 0; i < s->n; i++)
		if (!memcmp(s->k[i], key, 32))
			return 1;
	return 0;
}

/* A refusal, logged once per key change or AUTH_LOG_EVERY_S. */
static void log_refusal(coord_auth *a, const char *domain, const char *address, const uint8_t *key,
			int has_key, const char *mechanism)
{
	double now = sl_now();
	if (has_key && !memcmp(a->last_refused, key, 32) && !strcmp(a->last_domain, domain) &&
	    now - a->last_log < AUTH_LOG_EVERY_S) {
		a->refused_quiet++;
		return;
	}
	char z85[SL_CURVE_Z85_LEN + 1] = "none";
	if (has_key) {
		zmq_z85_encode(z85, key, 32);
		memcpy(a->last_refused, key, 32);
		snprintf(a->last_domain, sizeof a->last_domain, "%s", domain);
	}
	SL_WARN("coord", "auth: refused a %s connection from %s: %s key %s is not in %s%s", domain,
		address, mechanism, z85, !strcmp(domain, "nodes") ? "--node-keys" : "--client-keys",
		a->refused_quiet ? " (earlier refusals not logged)" : "");
	a->refused_quiet = 0;
	a->last_log = now;
}

#define ZAP_FRAMES 7 /* version, request id, domain, address, routing id, mechanism, key */

/* One ZAP request (RFC 27) answered. */
static int handle_one(coord_auth *a)
{
	zmq_msg_t f[ZAP_FRAMES];
	int n = 0, more = 1;
	while (more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, a->zap, n ? 0 : ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			for (int i = 0; i < n && i < ZAP_FRAMES; i++)
				zmq_msg_close(&f[i]);
			return 0;
		}
		more = zmq_msg_more(&m);
		if (n < ZAP_FRAMES)
			f[n] = m;
		else
			zmq_msg_close(&m);
		n++;
	}
	char domain[64] = "", address[128] = "", mech[16] = "";
#define FRAME_STR(buf, i) snprintf(buf, sizeof buf, "%.*s", (int)zmq_msg_size(&f[i]), (char *)zmq_msg_data(&f[i]))
	if (n >= 6) {
		FRAME_STR(domain, 2);
		FRAME_STR(address, 3);
		FRAME_STR(mech, 5);
	}
	int has_key = n >= ZAP_FRAMES && zmq_msg_size(&f[6]) == 32;
	const uint8_t *key = has_key ? zmq_msg_data(&f[6]) : NULL;
	const key_set *s = !strcmp(domain, "clients") ? &a->clients : !strcmp(domain, "nodes") ? &a->nodes : NULL;
	int allow = s && !strcmp(mech, "CURVE") && has_key && known(s, key);
	if (!allow)
		log_refusal(a, domain, address, key, has_key, mech);
	/* reply: version, request id, status, text, user id, metadata */
	const char *status = allow ? "200" : "400", *text = allow ? "OK" : "unknown key";
	zmq_send(a->zap, "1.0", 3, ZMQ_SNDMORE);
	zmq_send(a->zap, n >= 2 ? zmq_msg_data(&f[1]) : "", n >= 2 ? zmq_msg_size(&f[1]) : 0, ZMQ_SNDMORE);
	zmq_send(a->zap, status, 3, ZMQ_SNDMORE);
	zmq_send(a->zap, text, strlen(text), ZMQ_SNDMORE);
	zmq_send(a->zap, "", 0, ZMQ_SNDMORE);
	zmq_send(a->zap, "", 0, 0);
	for (int i = 0; i < n && i < ZAP_FRAMES; i++)
		zmq_msg_close(&f[i]);
	return 1;
}

void coord_auth_handle(coord_auth *a)
{
	for (int budget = 256; a && budget > 0 && handle_one(a); budget--)
		;
}
