/*
 * fuzz_util.h — what the libFuzzer harnesses of tests/fuzz/ share: a
 * private scratch folder per process (parsers that read paths get the
 * input as a file there), an independent UTF-8 check for the promises the
 * tokenizer makes, a check macro that reports and aborts (libFuzzer then
 * saves the input), and the self-test switch that proves `make fuzz`
 * fails on a finding. Header-only; docs/fuzzing.md describes the targets.
 */
#ifndef TESTS_FUZZ_UTIL_H
#define TESTS_FUZZ_UTIL_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A broken promise: print it and abort, so libFuzzer records the input
 * as a crash (a plain return would hide it). */
#define FUZZ_CHECK(cond, ...)                                                      \
	do {                                                                       \
		if (!(cond)) {                                                     \
			fprintf(stderr, "fuzz check failed at %s:%d: %s: ", __FILE__, \
				__LINE__, #cond);                                  \
			fprintf(stderr, __VA_ARGS__);                              \
			fputc('\n', stderr);                                       \
			abort();                                                   \
		}                                                                  \
	} while (0)

/* SL_FUZZ_SELFTEST=1: every harness crashes on an input that starts with
 * "BOOM" (libFuzzer's comparison tracing finds it in seconds). Only for
 * showing that `make fuzz` fails and names the reproducer. */
static inline void fuzz_selftest(const uint8_t *data, size_t size)
{
	static int on = -1;
	if (on < 0)
		on = getenv("SL_FUZZ_SELFTEST") && !strcmp(getenv("SL_FUZZ_SELFTEST"), "1");
	if (on && size >= 4 && !memcmp(data, "BOOM", 4)) {
		fprintf(stderr, "fuzz self-test: planted crash on input \"BOOM...\"\n");
		abort();
	}
}

static char fuzz_dir_name[256];

/* At exit: the scratch folder and the files in it (it holds no folders). */
static inline void fuzz_dir_remove(void)
{
	DIR *d = opendir(fuzz_dir_name);
	struct dirent *e;
	char path[512];
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(path, sizeof path, "%s/%s", fuzz_dir_name, e->d_name);
			unlink(path);
		}
	if (d)
		closedir(d);
	rmdir(fuzz_dir_name);
}

/* This process's scratch folder (made on first use under $TMPDIR, or
 * /dev/shm when it exists: files written per input stay in memory). */
static inline const char *fuzz_dir(void)
{
	char *dir = fuzz_dir_name;
	if (!dir[0]) {
		const char *base = getenv("TMPDIR");
		if (!base || !*base)
			base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
		snprintf(dir, sizeof fuzz_dir_name, "%s/sl_fuzz_XXXXXX", base);
		if (!mkdtemp(dir)) {
			perror("fuzz: mkdtemp");
			abort();
		}
		atexit(fuzz_dir_remove);
	}
	return dir;
}

/* dir/name, in a static buffer of 4 rotating slots. */
static inline const char *fuzz_path(const char *name)
{
	static char buf[4][512];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", fuzz_dir(), name);
	return buf[k];
}

/* Writes bytes to dir/name; returns its path. */
static inline const char *fuzz_write(const char *name, const void *data, size_t n)
{
	const char *path = fuzz_path(name);
	FILE *f = fopen(path, "wb");
	if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) {
		perror(path);
		abort();
	}
	return path;
}

/* A NUL-terminated copy of the input (parsers of text want one). */
static inline char *fuzz_strdup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = 0;
	return s;
}

/* The checkout's root, for test data the harnesses load once
 * (tests/data, tests/golden): $SL_FUZZ_REPO, else the checkout the
 * Makefile compiled us in (FUZZ_REPO_DIR), else the current folder. */
static inline const char *fuzz_repo_dir(void)
{
	const char *d = getenv("SL_FUZZ_REPO");
#ifdef FUZZ_REPO_DIR
	if (!d || !*d)
		d = FUZZ_REPO_DIR;
#endif
	return d && *d ? d : ".";
}

/* Copies repository file `rel` into the scratch folder as `name`. */
static inline void fuzz_copy_repo_file(const char *rel, const char *name)
{
	char src[1024];
	snprintf(src, sizeof src, "%s/%s", fuzz_repo_dir(), rel);
	FILE *f = fopen(src, "rb");
	if (!f) {
		fprintf(stderr, "fuzz: %s: cannot open (set SL_FUZZ_REPO to the checkout)\n", src);
		exit(1);
	}
	static char buf[1 << 20];
	size_t n = fread(buf, 1, sizeof buf, f);
	fclose(f);
	fuzz_write(name, buf, n);
}

/* Well-formed UTF-8 (RFC 3629: no overlongs, surrogates, or code points
 * past U+10FFFF, nothing truncated), written here rather than borrowed
 * from the code under test. Returns the offset of the first bad byte, or
 * n when all is well. */
static inline size_t fuzz_utf8_bad_at(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < n) {
		unsigned c = p[i];
		size_t len;
		unsigned lo = 0x80, hi = 0xBF;
		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xC2 && c <= 0xDF) {
			len = 2;
		} else if (c >= 0xE0 && c <= 0xEF) {
			len = 3;
			if (c == 0xE0)
				lo = 0xA0;
			if (c == 0xED)
				hi = 0x9F;
		} else if (c >= 0xF0 && c <= 0xF4) {
			len = 4;
			if (c == 0xF0)
				lo = 0x90;
			if (c == 0xF4)
				hi = 0x8F;
		} else {
			return i;
		}
		if (i + len > n || p[i + 1] < lo || p[i + 1] > hi)
			return i;
		for (size_t k = 2; k < len; k++)
			if (p[i + k] < 0x80 || p[i + k] > 0xBF)
				return i;
		i += len;
	}
	return n;
}

#endif
