/*
 * serve.c — `shardline serve MODEL`: starts shardline-coordinator and one
 * node group (`mpirun ... shardline-node`), both found beside the running
 * binary, waits until /health says the group is live, prints the URL, and
 * on SIGINT/SIGTERM stops them in order: the group drains (SIGUSR1 to
 * mpirun, which passes it to every rank), then the coordinator gets
 * SIGTERM; whatever outlives its bound gets SIGTERM, then SIGKILL.
 *
 * Each child runs in its own process group, so a Ctrl-C at the terminal
 * reaches only this process, which decides the order; each also has
 * PR_SET_PDEATHSIG, so nothing outlives a `shardline serve` killed with
 * SIGKILL (mpirun, on SIGTERM, ends its ranks on every host).
 *
 * The model decides the defaults: its tokenizer and chat template go to
 * the coordinator (a GGUF file carries both; a Hugging Face folder has
 * tokenizer.json and tokenizer_config.json), and the grid is one that
 * divides its heads: on GPUs tp = the most GPUs that divide the heads,
 * on the CPU pp 2 (two ranks, one per core; tp must divide the heads,
 * which SmolLM2's 9 make awkward).
 */
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/args.h"
#include "common/sl.h"
#include "formats/config.h"
#include "proto/curve.h"
#include "tools/serve.h"

#define SERVE_MAX_ARGS 256

typedef struct serve_opts {
	const char *model, *model_name, *hosts, *device, *chat_template, *api_key_file;
	const char *http_bind, *client_bind, *node_bind, *advertise, *keys_dir, *ports_file;
	const char *mpirun_opts, *node_opts, *coord_opts;
	long tp, pp, ready_timeout_s, grace_s;
	int insecure;
} serve_opts;

/* A NULL-terminated argv under construction; strings it owns are in own[]. */
typedef struct serve_argv {
	char *v[SERVE_MAX_ARGS + 1];
	int n, overflow;
	char *own[8];
	int n_own;
} serve_argv;

/* What runs: the children, their files and the state of the stop. */
typedef struct serve_state {
	pid_t coord, group;
	int coord_status, group_status;
	char dir[64], ports[PATH_MAX], bindir[PATH_MAX];
	char http[256], node_ep[256], url[300];
	int stop_asked, ready;
	sigset_t sigs; /* SIGINT, SIGTERM, SIGCHLD: blocked, taken by sigtimedwait */
} serve_state;

static void serve_usage(FILE *f)
{
	fprintf(f,
		"usage: shardline serve MODEL [--tp N] [--pp N] [--hosts FILE] [--model-name NAME]\n"
		"           [--device cpu|cuda] [--http-bind 127.0.0.1:8000]\n"
		"           [--client-bind tcp://127.0.0.1:5555] [--node-bind tcp://127.0.0.1:5556]\n"
		"           [--advertise HOST] [--keys DIR | --insecure] [--api-key-file FILE]\n"
		"           [--chat-template FILE] [--ports-file PATH] [--ready-timeout-s 600]\n"
		"           [--grace-s 30] [--mpirun-opts 'OPTS'] [--node-opts 'OPTS']\n"
		"           [--coord-opts 'OPTS']\n"
		"Starts shardline-coordinator and one node group (mpirun -np TP*PP\n"
		"shardline-node) from beside this binary, serving MODEL (a GGUF file or a\n"
		"Hugging Face folder) with its own tokenizer and chat template; prints the\n"
		"OpenAI API's URL once /health answers 200. Ctrl-C or SIGTERM: the group\n"
		"drains (running requests finish, at most --grace-s), then everything stops;\n"
		"a second Ctrl-C stops at once. Exit 0 after a clean stop.\n"
		"Defaults: on GPUs tp = the most GPUs that divide the heads, pp 1; on the\n"
		"CPU tp 1, pp 2 (--kv-blocks 256 unless --node-opts sets it), one OpenMP\n"
		"thread per core per rank. --model-name: the file or folder name.\n"
		"--hosts FILE: an Open MPI hostfile; rank 0 (the leader) runs on its first\n"
		"host and connects to --node-bind, advertised as --advertise HOST (default\n"
		"this host's name when the bind is 0.0.0.0). A bind other hosts can reach\n"
		"needs CURVE: --keys DIR uses (and makes, when missing) DIR/coordinator.*,\n"
		"DIR/node.* and DIR/client.* key pairs (`shardline keygen`); the leader's\n"
		"host must hold DIR/node.key and DIR/coordinator.pub at the same path.\n"
		"With --hosts, mpirun gets --mca oob_tcp_keepalive_time 2, _intvl 1, _probes 3\n"
		"(a cut link ends the job within seconds) unless --mpirun-opts sets them.\n"
		"--insecure serves without CURVE (docs/security.md). --mpirun-opts, --node-opts\n"
		"and --coord-opts add flags (split on blanks) to mpirun, shardline-node and\n"
		"shardline-coordinator; $MPIRUN names the mpirun to use.\n");
}

static int serve_parse(int argc, char **argv, serve_opts *o, char *err, size_t errlen)
{
	static const struct option opts[] = {
		{"tp", 1, 0, 't'}, {"pp", 1, 0, 'p'}, {"hosts", 1, 0, 'H'}, {"model-name", 1, 0, 'm'},
		{"device", 1, 0, 'd'}, {"http-bind", 1, 0, 'B'}, {"client-bind", 1, 0, 'c'},
		{"node-bind", 1, 0, 'n'}, {"advertise", 1, 0, 'a'}, {"keys", 1, 0, 'k'},
		{"insecure", 0, 0, 'i'}, {"api-key-file", 1, 0, 'K'}, {"chat-template", 1, 0, 'J'},
		{"ports-file", 1, 0, 'P'}, {"ready-timeout-s", 1, 0, 'r'}, {"grace-s", 1, 0, 'g'},
		{"mpirun-opts", 1, 0, 'M'}, {"node-opts", 1, 0, 'N'}, {"coord-opts", 1, 0, 'C'},
		{"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	o->http_bind = "127.0.0.1:8000";
	o->client_bind = "tcp://127.0.0.1:5555";
	o->node_bind = "tcp://127.0.0.1:5556";
	o->ready_timeout_s = 600;
	o->grace_s = 30;
	int c, rc = 0;
	optind = 1;
	while (!rc && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 't': rc = sl_parse_int("--tp", optarg, 1, 1024, &o->tp, err, errlen); break;
		case 'p': rc = sl_parse_int("--pp", optarg, 1, 1024, &o->pp, err, errlen); break;
		case 'H': o->hosts = optarg; break;
		case 'm': o->model_name = optarg; break;
		case 'd': o->device = optarg; break;
		case 'B': o->http_bind = optarg; break;
		case 'c': o->client_bind = optarg; break;
		case 'n': o->node_bind = optarg; break;
		case 'a': o->advertise = optarg; break;
		case 'k': o->keys_dir = optarg; break;
		case 'i': o->insecure = 1; break;
		case 'K': o->api_key_file = optarg; break;
		case 'J': o->chat_template = optarg; break;
		case 'P': o->ports_file = optarg; break;
		case 'r': rc = sl_parse_int("--ready-timeout-s", optarg, 1, 86400, &o->ready_timeout_s, err, errlen); break;
		case 'g': rc = sl_parse_int("--grace-s", optarg, 0, 86400, &o->grace_s, err, errlen); break;
		case 'M': o->mpirun_opts = optarg; break;
		case 'N': o->node_opts = optarg; break;
		case 'C': o->coord_opts = optarg; break;
		case 'h': serve_usage(stdout); exit(0);
		default: return sl_errf(err, errlen, SL_EINVAL, "unknown option (see shardline serve --help)");
		}
	}
	if (rc)
		return rc;
	if (optind != argc - 1)
		return sl_errf(err, errlen, SL_EINVAL, "give one MODEL: a GGUF file or a Hugging Face folder");
	o->model = argv[optind];
	if (!strcmp(o->http_bind, "none"))
		return sl_errf(err, errlen, SL_EINVAL, "--http-bind none: serve answers on HTTP; "
			       "start shardline-coordinator by hand for a ZeroMQ-only setup");
	if (o->device && strcmp(o->device, "cpu") && strcmp(o->device, "cuda"))
		return sl_errf(err, errlen, SL_EINVAL, "--device: cpu or cuda, not '%s'", o->device);
	return SL_OK;
}

/* --- argv building ------------------------------------------------------------ */

static void av_push(serve_argv *a, const char *s)
{
	if (a->n < SERVE_MAX_ARGS)
		a->v[a->n++] = (char *)s;
	else
		a->overflow = 1;
	a->v[a->n] = NULL;
}

/* The blank-separated words of s (no quoting: flags and paths without blanks). */
static void av_push_words(serve_argv *a, const char *s)
{
	if (!s || a->n_own == (int)(sizeof a->own / sizeof a->own[0]))
		return;
	char *copy = strdup(s), *save = NULL;
	if (!copy) {
		a->overflow = 1;
		return;
	}
	a->own[a->n_own++] = copy;
	for (char *w = strtok_r(copy, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save))
		av_push(a, w);
}

static void av_free(serve_argv *a)
{
	for (int i = 0; i < a->n_own; i++)
		free(a->own[i]);
	a->n_own = 0;
}

static int has_word(const char *s, const char *word)
{
	size_t k = strlen(word);
	for (const char *p = s ? strstr(s, word) : NULL; p; p = strstr(p + 1, word))
		if ((p == s || p[-1] == ' ' || p[-1] == '\t') && (!p[k] || p[k] == ' ' || p[k] == '=' || p[k] == '\t'))
			return 1;
	return 0;
}

/* --- the plan: tokenizer, name, grid ---------------------------------------- */

typedef struct serve_plan {
	model_config cfg;
	char tokenizer[PATH_MAX], name[128];
	int tp, pp, n_gpus, cpu;
	char node_ep[256]; /* where the leader connects */
} serve_plan;

/* GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else the
 * /dev/nvidiaN device files (no CUDA call: the CLI is built without it). */
static int count_gpus(void)
{
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	if (vis) {
		int n = 0;
		for (const char *p = vis; *p; p++)
			n += (p == vis || p[-1] == ',') && *p != ',' && *p != '-';
		return n;
	}
	glob_t g;
	int n = 0;
	if (!glob("/dev/nvidia[0-9]*", 0, NULL, &g))
		n = (int)g.gl_pathc;
	globfree(&g);
	return n;
}

static int plan_tokenizer(const serve_opts *o, serve_plan *p, char *err, size_t errlen)
{
	struct stat st;
	if (stat(o->model, &st))
		return sl_errf(err, errlen, SL_ENOTFOUND, "%s: %s", o->model, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		/* the coordinator reads tokenizer_config.json (its chat_template) beside it */
		snprintf(p->tokenizer, sizeof p->tokenizer, "%s/tokenizer.json", o->model);
		if (access(p->tokenizer, R_OK))
			return sl_errf(err, errlen, SL_ENOTFOUND, "%s: %s (the model folder needs its "
				       "tokenizer)", p->tokenizer, strerror(errno));
	} else {
		snprintf(p->tokenizer, sizeof p->tokenizer, "%s", o->model); /* GGUF: both inside */
	}
	return SL_OK;
}

static void plan_name(const serve_opts *o, serve_plan *p)
{
	if (o->model_name) {
		snprintf(p->name, sizeof p->name, "%s", o->model_name);
		return;
	}
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s", o->model);
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		path[--n] = 0;
	snprintf(p->name, sizeof p->name, "%s", basename(path));
	n = strlen(p->name);
	if (n > 5 && !strcmp(p->name + n - 5, ".gguf"))
		p->name[n - 5] = 0;
}

static int divides_heads(const model_config *c, int tp)
{
	return c->n_heads % tp == 0 && c->n_kv_heads % tp == 0;
}

static int plan_grid(const serve_opts *o, serve_plan *p, char *err, size_t errlen)
{
	p->n_gpus = count_gpus();
	p->cpu = o->device ? !strcmp(o->device, "cpu") : p->n_gpus == 0;
	if (p->cpu) {
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		p->tp = o->tp ? (int)o->tp : 1;
		p->pp = o->pp ? (int)o->pp : (!o->tp && cores >= 2 && p->cfg.n_layers >= 2 ? 2 : 1);
	} else {
		p->pp = o->pp ? (int)o->pp : 1;
		p->tp = (int)o->tp;
		for (int t = p->n_gpus > 0 ? p->n_gpus : 1; !p->tp && t >= 1; t--)
			if (divides_heads(&p->cfg, t))
				p->tp = t;
	}
	if (!divides_heads(&p->cfg, p->tp))
		return sl_errf(err, errlen, SL_EINVAL, "--tp %d does not divide %s's %d heads and %d KV "
			       "heads", p->tp, o->model, p->cfg.n_heads, p->cfg.n_kv_heads);
	if (p->pp > p->cfg.n_layers)
		return sl_errf(err, errlen, SL_EINVAL, "--pp %d: %s has only %d layers", p->pp, o->model,
			       p->cfg.n_layers);
	return SL_OK;
}

static int serve_plan_make(const serve_opts *o, serve_plan *p, char *err, size_t errlen)
{
	int rc = plan_tokenizer(o, p, err, errlen);
	if (!rc)
		rc = model_config_load_path(o->model, &p->cfg, err, errlen);
	if (rc)
		return rc;
	plan_name(o, p);
	return plan_grid(o, p, err, errlen);
}

/* --- CURVE keys ------------------------------------------------------------- */

static int ensure_pair(const char *dir, const char *name, char *err, size_t errlen)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s.key", dir, name);
	if (!access(path, F_OK))
		return SL_OK;
	int rc = sl_curve_keygen(dir, name, err, errlen);
	if (!rc)
		fprintf(stderr, "shardline serve: made %s/%s.key and .pub\n", dir, name);
	return rc;
}

static int ensure_keys(const serve_opts *o, char *err, size_t errlen)
{
	if (!o->keys_dir)
		return SL_OK;
	if (mkdir(o->keys_dir, 0700) && errno != EEXIST)
		return sl_errf(err, errlen, SL_EIO, "--keys %s: %s", o->keys_dir, strerror(errno));
	int rc = ensure_pair(o->keys_dir, "coordinator", err, errlen);
	if (!rc)
		rc = ensure_pair(o->keys_dir, "node", err, errlen);
	if (!rc)
		rc = ensure_pair(o->keys_dir, "client", err, errlen);
	return rc;
}

/* --- children ----------------------------------------------------------------- */

/* fork + exec in its own process group; it gets SIGTERM if this process
 * dies first (PR_SET_PDEATHSIG), so no child outlives `shardline serve`. */
static int spawn(serve_state *s, char *const *argv, pid_t *out, char *err, size_t errlen)
{
	pid_t parent = getpid(), pid = fork();
	if (pid < 0)
		return sl_errf(err, errlen, SL_EIO, "fork: %s", strerror(errno));
	if (pid == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent) /* died between fork and prctl */
			_exit(1);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		sigprocmask(SIG_UNBLOCK, &s->sigs, NULL);
		execvp(argv[0], argv);
		fprintf(stderr, "shardline serve: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid); /* also here: no race with a signal sent right away */
	*out = pid;
	return SL_OK;
}

/* Reap whichever children have exited (non-blocking). */
static void reap(serve_state *s)
{
	int st;
	pid_t pid;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		if (pid == s->coord)
			s->coord = 0, s->coord_status = st;
		else if (pid == s->group)
			s->group = 0, s->group_status = st;
	}
}

static void describe_exit(const char *what, int st)
{
	if (WIFEXITED(st))
		fprintf(stderr, "shardline serve: %s exited with status %d\n", what, WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		fprintf(stderr, "shardline serve: %s was killed by signal %d\n", what, WTERMSIG(st));
}

/* Wait up to ms for signals; returns the signal taken (0 on timeout). A
 * SIGINT/SIGTERM sets stop_asked (counted: the second means "now"). */
static int wait_signal(serve_state *s, long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	int sig = sigtimedwait(&s->sigs, NULL, &ts);
	if (sig == SIGINT || sig == SIGTERM)
		s->stop_asked++;
	reap(s);
	return sig > 0 ? sig : 0;
}

/* Until *pid is reaped, at most ms; 0 when gone. Returns early (1) when
 * a further stop signal arrives and hurry is set. */
static int wait_gone(serve_state *s, pid_t *pid, long ms, int hurry)
{
	int asked = s->stop_asked;
	for (double end = sl_now() + ms * 1e-3; *pid && sl_now() < end;) {
		wait_signal(s, 100);
		if (hurry && s->stop_asked > asked)
			return 1;
	}
	return *pid != 0;
}

static void stop_one(serve_state *s, pid_t *pid, const char *what, long term_ms)
{
	if (!*pid)
		return;
	kill(*pid, SIGTERM);
	if (wait_gone(s, pid, term_ms, 0)) {
		fprintf(stderr, "shardline serve: %s outlived SIGTERM by %ld s: SIGKILL\n", what, term_ms / 1000);
		kill(-*pid, SIGKILL); /* its process group: local ranks too */
		wait_gone(s, pid, 5000, 0);
	}
}

/* The order of a stop: drain the group (SIGUSR1 to mpirun reaches every
 * rank; running requests finish within --grace-s), then the coordinator. */
static void stop_all(serve_state *s, const serve_opts *o)
{
	if (s->group && s->ready) {
		fprintf(stderr, "shardline serve: draining the node group (at most %ld s; Ctrl-C again "
			"to stop at once)\n", o->grace_s);
		kill(s->group, SIGUSR1);
		if (wait_gone(s, &s->group, (o->grace_s + 15) * 1000, 1) && s->group)
			fprintf(stderr, "shardline serve: the node group is still running: SIGTERM\n");
	}
	stop_one(s, &s->group, "the node group (mpirun)", 10000);
	stop_one(s, &s->coord, "the coordinator", 10000);
}

/* --- starting ----------------------------------------------------------------- */

static int start_coordinator(serve_state *s, const serve_opts *o, const serve_plan *p, char *err,
			     size_t errlen)
{
	char exe[PATH_MAX + 32], key[PATH_MAX], ckeys[PATH_MAX], nkeys[PATH_MAX];
	serve_argv a = {0};
	snprintf(exe, sizeof exe, "%s/shardline-coordinator", s->bindir);
	av_push(&a, exe);
	av_push(&a, "--model-name"), av_push(&a, p->name);
	av_push(&a, "--tokenizer"), av_push(&a, p->tokenizer);
	if (o->chat_template)
		av_push(&a, "--chat-template"), av_push(&a, o->chat_template);
	av_push(&a, "--client-bind"), av_push(&a, o->client_bind);
	av_push(&a, "--node-bind"), av_push(&a, o->node_bind);
	av_push(&a, "--http-bind"), av_push(&a, o->http_bind);
	av_push(&a, "--ports-file"), av_push(&a, s->ports);
	if (o->api_key_file)
		av_push(&a, "--api-key-file"), av_push(&a, o->api_key_file);
	if (o->insecure)
		av_push(&a, "--insecure");
	if (o->keys_dir) {
		snprintf(key, sizeof key, "%s/coordinator.key", o->keys_dir);
		snprintf(ckeys, sizeof ckeys, "%s/client.pub", o->keys_dir);
		snprintf(nkeys, sizeof nkeys, "%s/node.pub", o->keys_dir);
		av_push(&a, "--curve-key"), av_push(&a, key);
		av_push(&a, "--client-keys"), av_push(&a, ckeys);
		av_push(&a, "--node-keys"), av_push(&a, nkeys);
	}
	av_push_words(&a, o->coord_opts);
	int rc = a.overflow ? sl_errf(err, errlen, SL_EINVAL, "too many coordinator arguments")
			    : spawn(s, a.v, &s->coord, err, errlen);
	av_free(&a);
	return rc;
}

/* The coordinator's ports file: "client EP", "node EP", "http HOST:PORT". */
static int read_ports(serve_state *s)
{
	FILE *f = fopen(s->ports, "r");
	if (!f)
		return 0;
	char line[512], k[16], v[256];
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "%15s %255s", k, v) == 2) {
			if (!strcmp(k, "node"))
				snprintf(s->node_ep, sizeof s->node_ep, "%s", v);
			else if (!strcmp(k, "http"))
				snprintf(s->http, sizeof s->http, "%s", v);
		}
	fclose(f);
	return s->node_ep[0] && s->http[0];
}

/* The host part of "HOST:PORT" / "[V6]:PORT" / "tcp://HOST:PORT", and its
 * port; a wildcard host becomes `wild`. */
static void split_hostport(const char *ep, const char *wild, char *host, size_t hostlen, char *port,
			   size_t portlen)
{
	if (!strncmp(ep, "tcp://", 6))
		ep += 6;
	const char *colon = strrchr(ep, ':');
	int hl = colon ? (int)(colon - ep) : (int)strlen(ep);
	snprintf(host, hostlen, "%.*s", hl, ep);
	snprintf(port, portlen, "%s", colon ? colon + 1 : "");
	if (!strcmp(host, "0.0.0.0") || !strcmp(host, "*") || !strcmp(host, "[::]") || !host[0])
		snprintf(host, hostlen, "%s", wild);
	size_t n = strlen(host);
	if (n > 2 && host[0] == '[' && host[n - 1] == ']') {
		memmove(host, host + 1, n - 2);
		host[n - 2] = 0;
	}
}

/* Where the leader connects: the node endpoint the coordinator bound, its
 * wildcard host replaced by --advertise, else (a hostfile: the leader may
 * be elsewhere) this host's name, else loopback. */
static void leader_endpoint(serve_state *s, const serve_opts *o, char *out, size_t outlen)
{
	char me[256] = "127.0.0.1", host[256], port[32];
	if (o->advertise)
		snprintf(me, sizeof me, "%s", o->advertise);
	else if (o->hosts && gethostname(me, sizeof me))
		snprintf(me, sizeof me, "127.0.0.1");
	split_hostport(s->node_ep, me, host, sizeof host, port, sizeof port);
	snprintf(out, outlen, strchr(host, ':') ? "tcp://[%s]:%s" : "tcp://%s:%s", host, port);
}

static void set_default_env(const char *name, const char *value)
{
	if (!getenv(name))
		setenv(name, value, 0);
}

/* Open MPI's daemons (orted on the other hosts, and mpirun) notice a cut
 * link only through their out-of-band TCP connections, by default after
 * minutes; with keepalive every 1 s after 2 s idle, 3 probes, each side
 * learns within about 5 s, and a daemon that lost mpirun kills its ranks
 * (docs/operations.md, "Partitions across hosts"). Only for a hostfile: one
 * host has no link to cut. A parameter --mpirun-opts names, or the
 * environment sets (OMPI_MCA_...), is left to it: a repeated --mca would
 * join the two values, and a command-line one would hide the variable. */
static void push_oob_keepalive(serve_argv *a, const char *mpirun_opts)
{
	static const char *const mca[][2] = {{"oob_tcp_keepalive_time", "2"},
					     {"oob_tcp_keepalive_intvl", "1"},
					     {"oob_tcp_keepalive_probes", "3"}};
	char env[64];
	for (size_t i = 0; i < sizeof mca / sizeof mca[0]; i++) {
		snprintf(env, sizeof env, "OMPI_MCA_%s", mca[i][0]);
		if (!has_word(mpirun_opts, mca[i][0]) && !getenv(env))
			av_push(a, "--mca"), av_push(a, mca[i][0]), av_push(a, mca[i][1]);
	}
}

static int start_group(serve_state *s, const serve_opts *o, const serve_plan *p, char *err, size_t errlen)
{
	char exe[PATH_MAX + 32], np[16], tp[16], pp[16], ep[300], key[PATH_MAX], pub[PATH_MAX];
	const char *mpirun = getenv("MPIRUN") && getenv("MPIRUN")[0] ? getenv("MPIRUN") : "mpirun";
	serve_argv a = {0};
	snprintf(exe, sizeof exe, "%s/shardline-node", s->bindir);
	snprintf(np, sizeof np, "%d", p->tp * p->pp);
	snprintf(tp, sizeof tp, "%d", p->tp);
	snprintf(pp, sizeof pp, "%d", p->pp);
	leader_endpoint(s, o, ep, sizeof ep);
	if (p->cpu) { /* one rank per core: split the cores between the ranks */
		long cores = sysconf(_SC_NPROCESSORS_ONLN), per = cores / (p->tp * p->pp);
		char t[24];
		snprintf(t, sizeof t, "%ld", per > 0 ? per : 1);
		set_default_env("OMP_NUM_THREADS", t);
	}
	set_default_env("NCCL_NVLS_ENABLE", "0"); /* no NVLink multicast (docs/parallel.md) */
	if (geteuid() == 0) /* containers run as root; Open MPI refuses that unless told */
		set_default_env("OMPI_ALLOW_RUN_AS_ROOT", "1"), set_default_env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
	av_push(&a, mpirun);
	if (o->hosts)
		av_push(&a, "--hostfile"), av_push(&a, o->hosts);
	else
		av_push(&a, "--oversubscribe"); /* pp 2 on one core still runs */
	av_push(&a, "-x"), av_push(&a, "OMP_NUM_THREADS");
	av_push(&a, "-x"), av_push(&a, "NCCL_NVLS_ENABLE");
	if (o->hosts)
		push_oob_keepalive(&a, o->mpirun_opts);
	av_push_words(&a, o->mpirun_opts);
	av_push(&a, "-np"), av_push(&a, np);
	av_push(&a, exe);
	av_push(&a, "--model"), av_push(&a, o->model);
	av_push(&a, "--tp"), av_push(&a, tp);
	av_push(&a, "--pp"), av_push(&a, pp);
	if (o->device || p->cpu)
		av_push(&a, "--device"), av_push(&a, p->cpu ? "cpu" : "cuda");
	av_push(&a, "--coordinator"), av_push(&a, ep);
	av_push(&a, "--model-name"), av_push(&a, p->name);
	if (p->cpu && !has_word(o->node_opts, "--kv-blocks")) /* 4096 tokens, not 16384 zeroed */
		av_push(&a, "--kv-blocks"), av_push(&a, "256");
	if (o->keys_dir) {
		snprintf(key, sizeof key, "%s/node.key", o->keys_dir);
		snprintf(pub, sizeof pub, "%s/coordinator.pub", o->keys_dir);
		av_push(&a, "--curve-key"), av_push(&a, key);
		av_push(&a, "--server-key"), av_push(&a, pub);
	}
	av_push_words(&a, o->node_opts);
	fprintf(stderr, "shardline serve:");
	for (int i = 0; i < a.n; i++)
		fprintf(stderr, " %s", a.v[i]);
	fprintf(stderr, "\n");
	int rc = a.overflow ? sl_errf(err, errlen, SL_EINVAL, "too many node group arguments")
			    : spawn(s, a.v, &s->group, err, errlen);
	av_free(&a);
	return rc;
}

/* --- readiness ----------------------------------------------------------------- */

/* GET /health on the coordinator's HTTP address: the status code, or -1
 * when nothing answers. One request, 2 s at most. */
static int health_status(const serve_state *s)
{
	char host[256], port[32], req[512], resp[64];
	split_hostport(s->http, "127.0.0.1", host, sizeof host, port, sizeof port);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	if (getaddrinfo(host, port, &hints, &ai))
		return -1;
	int fd = socket(ai->ai_family, SOCK_STREAM, 0), code = -1;
	struct timeval tv = {2, 0};
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	}
	int n = snprintf(req, sizeof req, "GET /health HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
			 s->http);
	if (fd >= 0 && !connect(fd, ai->ai_addr, ai->ai_addrlen) && write(fd, req, (size_t)n) == n) {
		ssize_t got = read(fd, resp, sizeof resp - 1);
		resp[got > 0 ? got : 0] = 0;
		if (sscanf(resp, "HTTP/1.%*d %d", &code) != 1)
			code = -1;
	}
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return code;
}

static void make_url(serve_state *s, const serve_opts *o)
{
	char me[256] = "127.0.0.1", host[256], port[32];
	split_hostport(s->http, "", host, sizeof host, port, sizeof port);
	if (!host[0]) /* bound to every address: name this host */
		snprintf(host, sizeof host, "%s", o->advertise ? o->advertise : (gethostname(me, sizeof me) ? "127.0.0.1" : me));
	snprintf(s->url, sizeof s->url, strchr(host, ':') ? "http://[%s]:%s" : "http://%s:%s", host, port);
}

/* Until the coordinator wrote its ports, then until /health is 200; a stop
 * signal or a child's exit ends the wait (returns non-zero). */
static int wait_ready(serve_state *s, const serve_opts *o, const serve_plan *p, char *err, size_t errlen)
{
	double start = sl_now(), said = start;
	int rc = SL_OK;
	while (!rc && !s->stop_asked) {
		if (!s->coord)
			return sl_errf(err, errlen, SL_EIO, "the coordinator exited before it was ready");
		if (!s->group && s->node_ep[0])
			return sl_errf(err, errlen, SL_EIO, "the node group exited before it registered");
		if (!s->node_ep[0] && read_ports(s))
			rc = start_group(s, o, p, err, errlen);
		else if (s->group && health_status(s) == 200)
			return SL_OK;
		if (sl_now() - start > o->ready_timeout_s)
			return sl_errf(err, errlen, SL_EIO, "not ready within --ready-timeout-s %ld",
				       o->ready_timeout_s);
		if (s->group && sl_now() - said >= 15) {
			fprintf(stderr, "shardline serve: the node group is still loading (%.0f s)\n",
				sl_now() - start);
			said = sl_now();
		}
		if (!rc)
			wait_signal(s, 200);
	}
	return rc ? rc : sl_errf(err, errlen, SL_EIO, "stopped before ready");
}

/* --- main ------------------------------------------------------------------------ */

static int find_bindir(serve_state *s, char *err, size_t errlen)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return sl_errf(err, errlen, SL_EIO, "/proc/self/exe: %s", strerror(errno));
	self[n] = 0;
	snprintf(s->bindir, sizeof s->bindir, "%s", dirname(self));
	return SL_OK;
}

static int setup(serve_state *s, const serve_opts *o, char *err, size_t errlen)
{
	int rc = find_bindir(s, err, errlen);
	if (rc)
		return rc;
	snprintf(s->dir, sizeof s->dir, "/tmp/shardline-serve.XXXXXX");
	if (!mkdtemp(s->dir))
		return sl_errf(err, errlen, SL_EIO, "mkdtemp: %s", strerror(errno));
	snprintf(s->ports, sizeof s->ports, "%s/ports", s->dir);
	if (o->ports_file) { /* the caller reads it too; a stale one would be read as ours */
		snprintf(s->ports, sizeof s->ports, "%s", o->ports_file);
		if (unlink(s->ports) && errno != ENOENT)
			return sl_errf(err, errlen, SL_EIO, "--ports-file %s: %s", s->ports, strerror(errno));
	}
	sigemptyset(&s->sigs);
	sigaddset(&s->sigs, SIGINT);
	sigaddset(&s->sigs, SIGTERM);
	sigaddset(&s->sigs, SIGCHLD);
	sigprocmask(SIG_BLOCK, &s->sigs, NULL);
	return SL_OK;
}

static void cleanup_dir(serve_state *s, const serve_opts *o)
{
	char path[PATH_MAX + 16];
	if (!s->dir[0])
		return;
	snprintf(path, sizeof path, "%s/ports", s->dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/ports.tmp", s->dir);
	unlink(path);
	rmdir(s->dir);
}

/* Serving: until a stop signal or a child's exit. */
static int run_until_stopped(serve_state *s)
{
	while (!s->stop_asked && s->coord && s->group)
		wait_signal(s, 1000);
	if (s->stop_asked)
		return SL_OK;
	if (!s->group)
		describe_exit("the node group (mpirun)", s->group_status);
	if (!s->coord)
		describe_exit("the coordinator", s->coord_status);
	return SL_EIO;
}

static int clean_exit(const serve_state *s)
{
	int ok = 1;
	if (WIFEXITED(s->group_status) && WEXITSTATUS(s->group_status)) {
		describe_exit("the node group (mpirun)", s->group_status);
		ok = 0;
	}
	if (!WIFEXITED(s->coord_status) || WEXITSTATUS(s->coord_status)) {
		describe_exit("the coordinator", s->coord_status);
		ok = 0;
	}
	return ok;
}

int serve_main(int argc, char **argv)
{
	char err[SL_ERRLEN] = "";
	serve_opts o = {0};
	serve_plan p = {0};
	serve_state s = {0};
	int rc = serve_parse(argc, argv, &o, err, sizeof err);
	if (rc) {
		fprintf(stderr, "shardline serve: %s\n", err);
		serve_usage(stderr);
		return 2;
	}
	rc = serve_plan_make(&o, &p, err, sizeof err);
	if (!rc)
		rc = ensure_keys(&o, err, sizeof err);
	if (!rc)
		rc = setup(&s, &o, err, sizeof err);
	if (!rc) {
		fprintf(stderr, "shardline serve: %s as '%s' on tp %d x pp %d (%s), tokenizer %s\n",
			o.model, p.name, p.tp, p.pp, p.cpu ? "CPU" : "GPUs", p.tokenizer);
		rc = start_coordinator(&s, &o, &p, err, sizeof err);
	}
	if (!rc)
		rc = wait_ready(&s, &o, &p, err, sizeof err);
	if (!rc) {
		s.ready = 1;
		make_url(&s, &o);
		printf("shardline serve: ready: %s/v1 (model '%s'; Ctrl-C stops)\n", s.url, p.name);
		fflush(stdout);
		rc = run_until_stopped(&s);
	} else if (err[0] && !s.stop_asked) {
		fprintf(stderr, "shardline serve: %s\n", err);
	}
	if (s.dir[0])
		stop_all(&s, &o);
	int ok = !rc && s.ready && clean_exit(&s);
	if (ok)
		fprintf(stderr, "shardline serve: stopped\n");
	cleanup_dir(&s, &o);
	return ok ? 0 : 1;
}
