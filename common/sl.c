/*
 * sl.c — error formatting, logging and small file helpers shared by the
 * node, the coordinator, the tools and the tests.
 */
#define _POSIX_C_SOURCE 200809L
#include "common/sl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char g_role[32] = "shardline";
static int g_rank = 0, g_world = 1;
static sl_log_level g_level = SL_LOG_INFO;

int sl_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

static _Thread_local char g_last_error[SL_ERRLEN];

int sl_fail(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
	va_end(ap);
	return code;
}

const char *sl_last_error(void) { return g_last_error; }

int sl_take_error(char *err, size_t errlen, int code)
{
	if (err && errlen && !err[0] && g_last_error[0])
		snprintf(err, errlen, "%s", g_last_error);
	g_last_error[0] = 0;
	return code;
}

void sl_log_set_role(const char *role, int rank, int world)
{
	snprintf(g_role, sizeof g_role, "%s", role);
	g_rank = rank;
	g_world = world;
}

void sl_log_set_level(sl_log_level level) { g_level = level; }

void sl_log(sl_log_level level, const char *subsys, const char *fmt, ...)
{
	static const char *tag[] = {"DEBUG ", "", "WARN ", "ERROR "};
	if (level < g_level)
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* date and milliseconds: lines from many hosts and days sort and merge */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	localtime_r(&ts.tv_sec, &tm);
	char when[32];
	strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(stderr, "%s.%03ld %s r%d/%d %s: %s%s\n", when, ts.tv_nsec / 1000000, g_role, g_rank,
		g_world, subsys, tag[level], msg);
}

double sl_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int sl_read_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return sl_errf(err, errlen, SL_ENOTFOUND, "%s: %s", path, strerror(errno));
	char *buf = NULL;
	size_t cap = 0, n = 0;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			size_t ncap = cap ? cap * 2 : 65536;
			char *nb = realloc(buf, ncap);
			if (!nb) {
				free(buf);
				fclose(f);
				return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
			}
			buf = nb;
			cap = ncap;
		}
		size_t r = fread(buf + n, 1, cap - n - 1, f);
		n += r;
		if (r == 0)
			break;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(buf);
		return sl_errf(err, errlen, SL_EIO, "%s: read error", path);
	}
	buf[n] = 0;
	*out = buf;
	if (len)
		*len = n;
	return SL_OK;
}

int sl_path_join(char *out, size_t n, const char *dir, const char *name)
{
	int w = snprintf(out, n, "%s/%s", dir, name);
	return (w < 0 || (size_t)w >= n) ? SL_EINVAL : SL_OK;
}
