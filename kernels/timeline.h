/*
 * timeline.h — a per-block timeline of the kernels a step runs, for
 * finding where a decode step's time goes between and inside kernels
 * (docs/benchmarks.md, "A step's timeline"). Nsight Systems is not
 * installed on the GPU hosts, and its kernel spans would not show what
 * matters here anyway: how long each block waits at its programmatic
 * dependent launch wait, when each block finishes streaming its weights,
 * and how long a grid takes to release the next one after that.
 *
 * Only a build made with `make TIMELINE=1` (objects in build-timeline/)
 * records: every kernel that waits through kern_pdl_wait / kern_pdl_start
 * (kernels/cuda_util.cuh) then has each block's first thread append one
 * record at that wait (the time it got there and the time the wait let it
 * go) and one where the block lets the next kernel launch, with the grid's
 * launch number (%gridid), the block, its SM, and the source line of the
 * call. Records go into a ring on the device; the dump writes the last
 * ones. In a normal build the calls below refuse (kern_timeline_built 0)
 * and the kernels carry no trace of it.
 *
 * The node's CUDA backend starts it when SL_TIMELINE=PREFIX is set and
 * writes PREFIX.gpuN.PID.csv when it closes; bench/timeline.py reads those.
 */
#ifndef KERN_TIMELINE_H
#define KERN_TIMELINE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { KERN_TL_WAIT = 0, KERN_TL_NEXT = 1 };

/* One block's record. WAIT: t_arrive when its first thread reached the
 * wait, t_go when the wait returned. NEXT: both the time it let the next
 * kernel launch. Times are %globaltimer nanoseconds. */
typedef struct kern_tl_rec {
	unsigned long long grid, t_arrive, t_go;
	unsigned block, smid, line, kind, grid_x, grid_y, threads, pad;
} kern_tl_rec;

/* What each .cu file's device-side copy holds (kernels/timeline.cuh). */
typedef struct kern_tl_state {
	kern_tl_rec *buf;          /* the ring; null: not recording */
	unsigned long long *count; /* records ever appended */
	unsigned long long mask;   /* ring size - 1 */
} kern_tl_state;

/* 1 when this build records (make TIMELINE=1). */
int kern_timeline_built(void);

/* Each .cu file's copy of the device-side state registers itself at load
 * (kernels/timeline.cuh); not for other callers. */
int kern_timeline_register(const void *dev_symbol);

/* Start recording into a ring of `records` (rounded up to a power of two)
 * on the current device. SL_ENOTSUP in a build that does not record. */
int kern_timeline_start(size_t records);

/* Write the ring's records (the last `records` when it wrapped) to path
 * as CSV, times relative to the earliest; *written how many (may be NULL).
 * Then stop recording and free the ring. */
int kern_timeline_dump(const char *path, size_t *written);

#ifdef __cplusplus
}
#endif

#endif
