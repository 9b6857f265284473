/*
 * tok.c -- shardline-tok: run the coordinator's tokenizer from a shell.
 *
 * Owner: coordinator tokenizer.  Callers: people poking at a tokenizer.json,
 * and tests/tokenizer_conformance.py, which drives the batch mode.
 *
 *   shardline-tok TOKENIZER.json encode [--no-special] [--split-special] TEXT
 *   shardline-tok TOKENIZER.json decode [--keep-special] ID...
 *   shardline-tok TOKENIZER.json info
 *   shardline-tok TOKENIZER.json batch   < requests
 *   shardline-tok MODEL.gguf export      > tokenizer.json
 *
 * TOKENIZER.json may also be a GGUF file (its tokenizer.ggml.* keys);
 * export prints the equivalent tokenizer.json that Hugging Face
 * `tokenizers` loads (text/tokenizer/tok_gguf.c says how it maps).
 *
 * Batch mode reads one request per line and answers each with exactly one
 * line, so a script can pipe thousands of cases through one process.  Text
 * travels hex-encoded, so any bytes (newlines, invalid UTF-8) survive:
 *   E <flags> <hex text>   ->  ids separated by spaces (flags: 1 add special,
 *                              2 split special, as COORD_TOK_*)
 *   D <skip> <id>...       ->  hex of text_tok_decode's text
 *   S <skip> <id>...       ->  hex of the text_detok chunks joined; the line
 *                              starts "BADCHUNK " if a chunk was not whole
 *                              UTF-8
 *   I                      ->  "<vocab size> <bos id> <eos id>"
 * A failed request answers "ERR <message>".
 */
#include "common/sl.h"
#include "common/version.h"
#include "text/tokenizer/tokenizer.h"
#include "text/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
	fprintf(stderr,
		"usage: shardline-tok TOKENIZER.json encode [--no-special] [--split-special] TEXT\n"
		"       shardline-tok TOKENIZER.json decode [--keep-special] ID...\n"
		"       shardline-tok TOKENIZER.json info\n"
		"       shardline-tok TOKENIZER.json batch < requests  (see tools/tok.c)\n"
		"       shardline-tok MODEL.gguf export > tokenizer.json\n"
		"TOKENIZER.json may also be a .gguf file.\n");
}

static void print_ids(const int32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%s%d", i ? " " : "", ids[i]);
	putchar('\n');
}

static void print_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", (unsigned char)s[i]);
	putchar('\n');
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes hex in place; returns the byte count or -1. */
static long unhex(char *s)
{
	size_t n = strlen(s);
	if (n % 2)
		return -1;
	for (size_t i = 0; i < n; i += 2) {
		int hi = hexval(s[i]), lo = hexval(s[i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		s[i / 2] = (char)(hi * 16 + lo);
	}
	return (long)(n / 2);
}

/* Parses space-separated ids; returns the count or -1. */
static long parse_ids(char *s, int32_t **ids)
{
	size_t n = 0, cap = 16;
	int32_t *v = malloc(cap * sizeof *v);
	char *tok, *save = NULL;

	if (!v)
		return -1;
	for (tok = strtok_r(s, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
		char *end;
		long x = strtol(tok, &end, 10);
		if (*end || x < INT32_MIN || x > INT32_MAX) {
			free(v);
			return -1;
		}
		if (n == cap) {
			int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
			if (!nv) {
				free(v);
				return -1;
			}
			v = nv;
		}
		v[n++] = (int32_t)x;
	}
	*ids = v;
	return (long)n;
}

static void batch_encode(const text_tok *t, char *args)
{
	char err[SL_ERRLEN], *sp = strchr(args, ' ');
	int flags = atoi(args);
	int32_t *ids;
	size_t n;
	long len = sp ? unhex(sp + 1) : 0;

	if (len < 0) {
		printf("ERR bad hex\n");
		return;
	}
	if (text_tok_encode(t, sp ? sp + 1 : "", (size_t)len, flags, &ids, &n, err, sizeof err)) {
		printf("ERR %s\n", err);
		return;
	}
	print_ids(ids, n);
	free(ids);
}

static void batch_decode(const text_tok *t, char *args, int stream)
{
	char err[SL_ERRLEN], *sp = strchr(args, ' '), *text = NULL;
	int skip = atoi(args);
	int32_t *ids = NULL;
	long n = parse_ids(sp ? sp + 1 : (char *)"", &ids);
	size_t len = 0;

	if (n < 0) {
		printf("ERR bad ids\n");
		return;
	}
	if (!stream) {
		if (text_tok_decode(t, ids, (size_t)n, skip, &text, &len, err, sizeof err))
			printf("ERR %s\n", err);
		else
			print_hex(text, len);
		free(text);
		free(ids);
		return;
	}
	text_detok *d;
	if (text_detok_create(t, skip, &d, err, sizeof err)) {
		printf("ERR %s\n", err);
		free(ids);
		return;
	}
	char *all = malloc(1);
	size_t all_len = 0;
	int bad = 0;
	for (long i = 0; i <= n && all; i++) {
		const char *chunk;
		size_t cl;
		int rc = i < n ? text_detok_step(d, ids[i], &chunk, &cl)
			       : text_detok_finish(d, &chunk, &cl);
		char *na = realloc(all, all_len + cl + 1);
		if (rc || !na) {
			free(na ? na : all);
			all = NULL;
			break;
		}
		all = na;
		bad |= !text_utf8_valid(chunk, cl);
		memcpy(all + all_len, chunk, cl);
		all_len += cl;
	}
	if (!all) {
		printf("ERR stream decode failed\n");
	} else {
		if (bad)
			printf("BADCHUNK ");
		print_hex(all, all_len);
	}
	free(all);
	text_detok_destroy(d);
	free(ids);
}

static int run_batch(const text_tok *t)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	while ((n = getline(&line, &cap, stdin)) >= 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = 0;
		char *args = n > 2 ? line + 2 : (char *)"";
		switch (line[0]) {
		case 'E':
			batch_encode(t, args);
			break;
		case 'D':
		case 'S':
			batch_decode(t, args, line[0] == 'S');
			break;
		case 'I':
			printf("%d %d %d\n", text_tok_vocab_size(t), text_tok_bos_id(t),
			       text_tok_eos_id(t));
			break;
		default:
			printf("ERR unknown request '%c'\n", line[0]);
		}
		fflush(stdout);
	}
	free(line);
	return 0;
}

static int run_encode(const text_tok *t, int argc, char **argv)
{
	int flags = COORD_TOK_ADD_SPECIAL;
	const char *text = NULL;
	char err[SL_ERRLEN];
	int32_t *ids;
	size_t n;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--no-special") == 0)
			flags &= ~COORD_TOK_ADD_SPECIAL;
		else if (strcmp(argv[i], "--split-special") == 0)
			flags |= COORD_TOK_SPLIT_SPECIAL;
		else
			text = argv[i];
	}
	if (!text) {
		usage();
		return 2;
	}
	if (text_tok_encode(t, text, strlen(text), flags, &ids, &n, err, sizeof err)) {
		fprintf(stderr, "shardline-tok: %s\n", err);
		return 1;
	}
	print_ids(ids, n);
	free(ids);
	return 0;
}

static int run_decode(const text_tok *t, int argc, char **argv)
{
	int32_t *ids = calloc((size_t)argc + 1, sizeof *ids);
	size_t n = 0;
	int skip = 1, rc = 0;
	char err[SL_ERRLEN], *text = NULL;
	size_t len;

	if (!ids)
		return 1;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--keep-special") == 0)
			skip = 0;
		else
			ids[n++] = (int32_t)strtol(argv[i], NULL, 10);
	}
	if (text_tok_decode(t, ids, n, skip, &text, &len, err, sizeof err)) {
		fprintf(stderr, "shardline-tok: %s\n", err);
		rc = 1;
	} else {
		fwrite(text, 1, len, stdout);
		putchar('\n');
	}
	free(text);
	free(ids);
	return rc;
}

static int run_export(const char *path)
{
	char err[SL_ERRLEN], *json;
	size_t len;

	if (!text_tok_is_gguf(path)) {
		fprintf(stderr, "shardline-tok: export reads a GGUF file; %s is not one\n", path);
		return 2;
	}
	if (text_tok_gguf_json(path, &json, &len, err, sizeof err)) {
		fprintf(stderr, "shardline-tok: %s\n", err);
		return 1;
	}
	fwrite(json, 1, len, stdout);
	putchar('\n');
	free(json);
	return 0;
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline-tok"))
		return 0;
	char err[SL_ERRLEN];
	text_tok *t;
	int rc;

	if (argc < 3) {
		usage();
		return 2;
	}
	if (strcmp(argv[2], "export") == 0)
		return run_export(argv[1]);
	if (text_tok_load(argv[1], &t, err, sizeof err)) {
		fprintf(stderr, "shardline-tok: %s\n", err);
		return 1;
	}
	if (strcmp(argv[2], "batch") == 0) {
		rc = run_batch(t);
	} else if (strcmp(argv[2], "encode") == 0) {
		rc = run_encode(t, argc - 3, argv + 3);
	} else if (strcmp(argv[2], "decode") == 0) {
		rc = run_decode(t, argc - 3, argv + 3);
	} else if (strcmp(argv[2], "info") == 0) {
		printf("vocab_size %d\nbos %d\neos %d\n", text_tok_vocab_size(t),
		       text_tok_bos_id(t), text_tok_eos_id(t));
		rc = 0;
	} else {
		usage();
		rc = 2;
	}
	text_tok_destroy(t);
	return rc;
}
