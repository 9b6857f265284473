/*
 * main.c — shardline-coordinator: flags, signals, the loop (coord.h).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/args.h"
#include "common/version.h"
#include "coordinator/coord.h"
#include "common/sl.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shardline-coordinator --model-name NAME --tokenizer tokenizer.json|model.gguf\n"
		"           [--chat-template FILE] [--model-name NAME2 --tokenizer PATH2 ...]\n"
		"           [--client-bind tcp://127.0.0.1:5555] [--node-bind tcp://127.0.0.1:5556]\n"
		"           [--http-bind 127.0.0.1:8000] [--api-key-file FILE]\n"
		"           [--http-max-connections 2048] [--http-idle-timeout-s 30]\n"
		"           [--http-max-body-bytes 4194304] [--http-body-timeout-s 60]\n"
		"           [--eos-ids 2,3] [--heartbeat-ms 1000] [--max-queue 1024]\n"
		"           [--request-timeout-ms 600000] [--default-max-tokens 16]\n"
		"           [--admission-timeout-ms 5000] [--stall-ms 120000]\n"
		"           [--ports-file PATH] [--log-level debug|info|warn] [--route prefix|load]\n"
		"           [--curve-key FILE --client-keys DIR|FILE[,..] --node-keys DIR|FILE[,..]]\n"
		"           [--insecure] [--standby primary|backup --peer-bind EP --peer EP]\n"
		"Clients connect to --client-bind, node group leaders to --node-bind, HTTP\n"
		"clients (the OpenAI API, /health, /metrics) to --http-bind (all loopback\n"
		"only by default; give tcp://0.0.0.0:PORT or 0.0.0.0:PORT to serve other\n"
		"hosts; PORT * (ZeroMQ) or 0 (HTTP) picks a free port, which --ports-file\n"
		"records; --http-bind none: no HTTP). The chat template is the model's own\n"
		"(tokenizer_config.json beside a tokenizer.json, or the GGUF's);\n"
		"--chat-template FILE after a --model-name replaces it. EOS ids default to\n"
		"each model's own: generation_config.json, config.json and tokenizer_config.json\n"
		"beside a tokenizer.json, or a GGUF's eos/eot/eom ids; --eos-ids replaces them.\n"
		"--route: a request goes to the group holding most of its prompt in its prefix\n"
		"cache, blended with load (prefix, default), or to the least loaded (load;\n"
		"docs/scheduling.md). With no live node group for its model a request waits\n"
		"in the queue at most --admission-timeout-ms (0: refused at once), then ends\n"
		"with an error. A group whose heartbeats go on while one step makes no progress\n"
		"for --stall-ms (0: never) gets no new work until it moves again, and its\n"
		"requests move to another group (docs/operations.md).\n"
		"SIGINT/SIGTERM stop it; running requests end with an error.\n"
		"CURVE (docs/security.md): --curve-key is the coordinator's secret key (from\n"
		"`shardline keygen`); clients and node leaders must then hold a key listed in\n"
		"--client-keys / --node-keys (directories of .pub files or files of keys) and\n"
		"know the coordinator's .pub. A --client-bind or --node-bind other hosts can\n"
		"reach is refused without CURVE unless --insecure is given.\n"
		"Standby pair (docs/protocol.md): --standby primary on one, backup on the other;\n"
		"each publishes its state on --peer-bind and hears the other's at --peer; the\n"
		"backup takes over when the primary is silent 3 heartbeats and a client asks.\n"
		"Clients and node leaders then take both endpoints: --coordinator EP1,EP2.\n");
}

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = 1; }

static int parse(int argc, char **argv, coord_opts *o, int32_t **eos, char *err, size_t errlen)
{
	static const struct option opts[] = {
		{"model-name", 1, 0, 'm'}, {"tokenizer", 1, 0, 't'}, {"client-bind", 1, 0, 'c'},
		{"node-bind", 1, 0, 'n'}, {"eos-ids", 1, 0, 'e'}, {"heartbeat-ms", 1, 0, 'H'},
		{"max-queue", 1, 0, 'q'}, {"request-timeout-ms", 1, 0, 'T'},
		{"default-max-tokens", 1, 0, 'M'}, {"ports-file", 1, 0, 'p'}, {"log-level", 1, 0, 'l'},
		{"http-bind", 1, 0, 'B'}, {"http-max-connections", 1, 0, 'C'},
		{"http-idle-timeout-s", 1, 0, 'I'}, {"http-max-body-bytes", 1, 0, 'Y'},
		{"http-body-timeout-s", 1, 0, 'U'}, {"api-key-file", 1, 0, 'K'},
		{"chat-template", 1, 0, 'J'}, {"route", 1, 0, 'R'}, {"admission-timeout-ms", 1, 0, 'A'},
		{"stall-ms", 1, 0, 'S'},
		{"help", 0, 0, 'h'},
		{"curve-key", 1, 0, 0x100}, {"client-keys", 1, 0, 0x101}, {"node-keys", 1, 0, 0x102},
		{"insecure", 0, 0, 0x103}, {"standby", 1, 0, 0x104}, {"peer-bind", 1, 0, 0x105},
		{"peer", 1, 0, 0x106}, {0, 0, 0, 0}};
	int c, rc = 0, n_tok = 0, n_eos = 0;
	long v;
	while (!rc && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			if (o->n_models == COORD_MAX_MODELS)
				return sl_errf(err, errlen, SL_EINVAL, "at most %d models", COORD_MAX_MODELS);
			o->model_names[o->n_models++] = optarg;
			break;
		case 't':
			if (n_tok == COORD_MAX_MODELS)
				return sl_errf(err, errlen, SL_EINVAL, "at most %d tokenizers", COORD_MAX_MODELS);
			o->tokenizers[n_tok++] = optarg;
			break;
		case 'c': o->client_endpoint = optarg; break;
		case 'n': o->node_endpoint = optarg; break;
		case 'e':
			free(*eos);
			*eos = NULL;
			rc = sl_parse_ids("--eos-ids", optarg, (1L << 24) - 1, eos, &n_eos, err, errlen);
			o->eos_ids = *eos;
			o->n_eos = n_eos;
			break;
		case 'H': rc = sl_parse_int("--heartbeat-ms", optarg, 10, 60000, &v, err, errlen); o->heartbeat_ms = (int)v; break;
		case 'q': rc = sl_parse_int("--max-queue", optarg, 0, 1 << 20, &v, err, errlen); o->max_queue = (int)v; break;
		case 'T': rc = sl_parse_int("--request-timeout-ms", optarg, 1, 86400000, &v, err, errlen); o->request_timeout_ms = (int)v; break;
		case 'A': rc = sl_parse_int("--admission-timeout-ms", optarg, 0, 86400000, &v, err, errlen); o->admission_timeout_ms = (int)v; break;
		case 'S': rc = sl_parse_int("--stall-ms", optarg, 0, 86400000, &v, err, errlen); o->stall_ms = (int)v; break;
		case 'M': rc = sl_parse_int("--default-max-tokens", optarg, 1, 1 << 20, &v, err, errlen); o->default_max_tokens = (int)v; break;
		case 'p': o->ports_file = optarg; break;
		case 'B': o->http_bind = optarg; break;
		case 'C': rc = sl_parse_int("--http-max-connections", optarg, 1, 1 << 16, &v, err, errlen); o->http_max_connections = (int)v; break;
		case 'I': rc = sl_parse_int("--http-idle-timeout-s", optarg, 1, 86400, &v, err, errlen); o->http_idle_timeout_s = (int)v; break;
		case 'Y': rc = sl_parse_int("--http-max-body-bytes", optarg, 1024, 1L << 30, &v, err, errlen); o->http_max_body_bytes = v; break;
		case 'U': rc = sl_parse_int("--http-body-timeout-s", optarg, 1, 86400, &v, err, errlen); o->http_body_timeout_s = (int)v; break;
		case 'K': o->api_key_file = optarg; break;
		case 0x100: o->curve_key = optarg; break;
		case 0x101: o->client_keys = optarg; break;
		case 0x102: o->node_keys = optarg; break;
		case 0x103: o->insecure = 1; break;
		case 0x104:
			if (strcmp(optarg, "primary") && strcmp(optarg, "backup"))
				return sl_errf(err, errlen, SL_EINVAL, "--standby: '%s' is not primary or backup", optarg);
			o->standby_role = optarg;
			break;
		case 0x105: o->peer_bind = optarg; break;
		case 0x106: o->peer_endpoint = optarg; break;
		case 'R':
			if (strcmp(optarg, "prefix") && strcmp(optarg, "load"))
				return sl_errf(err, errlen, SL_EINVAL, "--route: '%s' is not prefix or load", optarg);
			o->route_by_load = !strcmp(optarg, "load");
			break;
		case 'J':
			if (o->n_models == 0 || o->chat_templates[o->n_models - 1])
				return sl_errf(err, errlen, SL_EINVAL, "--chat-template goes after its --model-name (one each)");
			o->chat_templates[o->n_models - 1] = optarg;
			break;
		case 'l':
			if (!strcmp(optarg, "debug"))
				sl_log_set_level(SL_LOG_DEBUG);
			else if (!strcmp(optarg, "info"))
				sl_log_set_level(SL_LOG_INFO);
			else if (!strcmp(optarg, "warn"))
				sl_log_set_level(SL_LOG_WARN);
			else
				return sl_errf(err, errlen, SL_EINVAL, "--log-level: debug, info or warn");
			break;
		case 'h': usage(stdout); exit(0);
		default: return sl_errf(err, errlen, SL_EINVAL, "unknown option (see --help)");
		}
	}
	if (rc)
		return rc;
	if (optind < argc)
		return sl_errf(err, errlen, SL_EINVAL, "unexpected argument '%s'", argv[optind]);
	if (o->n_models == 0 || n_tok != o->n_models)
		return sl_errf(err, errlen, SL_EINVAL, "give one --tokenizer per --model-name (at least one)");
	return SL_OK;
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline-coordinator"))
		return 0;
	char err[SL_ERRLEN] = "";
	coord_opts o;
	int32_t *eos = NULL;
	coord *c = NULL;
	coord_opts_default(&o);
	o.stop = &g_stop;
	sl_log_set_role("coord", 0, 1);
	int rc = parse(argc, argv, &o, &eos, err, sizeof err);
	if (rc) {
		fprintf(stderr, "shardline-coordinator: %s\n", err);
		if (rc == SL_EINVAL)
			usage(stderr);
		free(eos);
		return 2;
	}
	/* every HTTP connection is a descriptor: allow as many as the hard limit */
	struct rlimit nofile;
	if (!getrlimit(RLIMIT_NOFILE, &nofile) && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	rc = coord_create(&o, &c, err, sizeof err);
	if (!rc)
		rc = coord_run(c, err, sizeof err);
	if (rc)
		fprintf(stderr, "shardline-coordinator: %s\n", err);
	coord_destroy(c);
	free(eos);
	return rc ? 1 : 0;
}
