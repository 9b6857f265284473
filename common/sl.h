/*
 * sl.h — shared utilities for every shardline process: error values,
 * logging with role and rank, monotonic time.
 *
 * Errors are values: fallible functions return 0 or a negative SL_E* code
 * and write a one-line reason into a caller-provided buffer (err, errlen).
 * sl_errf() formats that buffer and returns the code so callers can write
 * `return sl_errf(err, errlen, SL_EINVAL, "...")`.
 */
#ifndef SL_H
#define SL_H

#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

enum {
	SL_OK = 0,
	SL_EINVAL = -1,   /* bad input: file, message, flag */
	SL_ENOMEM = -2,   /* allocation failed */
	SL_EIO = -3,      /* read/write/mmap failed */
	SL_ENOTSUP = -4,  /* valid but unsupported (config field, dtype) */
	SL_ENOTFOUND = -5,/* missing file or tensor */
	SL_EDEVICE = -6,  /* CUDA, cuBLAS, NCCL failure */
	SL_ECOMM = -7,    /* MPI / ZeroMQ failure */
};

#define SL_ERRLEN 512

int sl_errf(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * The calling thread's last failure, in the spirit of NCCL's
 * ncclGetLastError: code that holds no err buffer (the kernels' entry
 * points, the check macros of checks.h) records its reason with sl_fail
 * and returns the code; the caller that does hold one moves the reason
 * into it with sl_take_error. Nothing is logged here: the reason travels
 * up with the code, and the daemon decides where it is written.
 */
int sl_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last reason sl_fail recorded on this thread ("" if none since the
 * last take). */
const char *sl_last_error(void);
/* Moves the last reason into err when err holds none yet (a caller's own
 * message wins), clears it, and returns code: `return sl_take_error(err,
 * errlen, rc)`. */
int sl_take_error(char *err, size_t errlen, int code);

/* Logging: "YYYY-MM-DD HH:MM:SS.mmm role rR/N subsys: message" on stderr
 * (local time), e.g. "2026-11-28 12:00:01.042 node r3/8 kv: ...". */
typedef enum { SL_LOG_DEBUG, SL_LOG_INFO, SL_LOG_WARN, SL_LOG_ERROR } sl_log_level;
void sl_log_set_role(const char *role, int rank, int world);
void sl_log_set_level(sl_log_level level);
void sl_log(sl_log_level level, const char *subsys, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#define SL_INFO(sub, ...) sl_log(SL_LOG_INFO, sub, __VA_ARGS__)
#define SL_WARN(sub, ...) sl_log(SL_LOG_WARN, sub, __VA_ARGS__)
#define SL_ERROR(sub, ...) sl_log(SL_LOG_ERROR, sub, __VA_ARGS__)
#define SL_DEBUG(sub, ...) sl_log(SL_LOG_DEBUG, sub, __VA_ARGS__)

/* Monotonic clock in seconds. */
double sl_now(void);

/* Read a whole file into a NUL-terminated malloc'd buffer. */
int sl_read_file(const char *path, char **out, size_t *len, char *err, size_t errlen);

/* Join dir and name into out (size n); returns SL_EINVAL when it does not fit. */
int sl_path_join(char *out, size_t n, const char *dir, const char *name);

#ifdef __cplusplus
}
#endif
#endif
