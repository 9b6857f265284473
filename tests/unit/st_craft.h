/*
 * st_craft.h — test helpers that write safetensors files byte by byte, so
 * tests can produce the malformed inputs the real writer refuses to make
 * (lying header lengths, overlapping offsets, unknown dtypes), plus a
 * throw-away temp folder per test. Header-only: included by unit tests.
 */
#ifndef TESTS_ST_CRAFT_H
#define TESTS_ST_CRAFT_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes n raw bytes to path; 0 on success. */
static inline int craft_raw(const char *path, const void *bytes, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	int bad = n && fwrite(bytes, 1, n, f) != n;
	return (fclose(f) != 0 || bad) ? -1 : 0;
}

static inline int craft_text(const char *path, const char *text)
{
	return craft_raw(path, text, strlen(text));
}

/* A safetensors file whose length field says `hlen` (which may lie),
 * followed by `header` and ndata bytes of data (zeros when data is NULL). */
static inline int craft_st_len(const char *path, uint64_t hlen, const char *header,
			       const void *data, size_t ndata)
{
	size_t hn = strlen(header), n = 8 + hn + ndata;
	unsigned char *buf = calloc(1, n);
	if (!buf)
		return -1;
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)(hlen >> (8 * i));
	memcpy(buf + 8, header, hn);
	if (data)
		memcpy(buf + 8 + hn, data, ndata);
	int rc = craft_raw(path, buf, n);
	free(buf);
	return rc;
}

/* A well-framed file: the length field is the header's true length. */
static inline int craft_st(const char *path, const char *header, const void *data,
			   size_t ndata)
{
	return craft_st_len(path, strlen(header), header, data, ndata);
}

/* mkdtemp under /tmp into dir (at least 32 bytes); 0 on success. */
static inline int craft_tmpdir(char *dir, size_t n, const char *tag)
{
	if (snprintf(dir, n, "/tmp/sl_%s_XXXXXX", tag) >= (int)n)
		return -1;
	return mkdtemp(dir) ? 0 : -1;
}

/* Removes the plain files in dir, then dir (tests make no subfolders). */
static inline void craft_rmdir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	char path[4096];
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

#endif
