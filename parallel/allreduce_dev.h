/*
 * allreduce_dev.h — what the custom all-reduce kernels (allreduce.cu) see
 * of the state that allreduce.c builds: every rank's exchange buffer and
 * flags as mapped into this process, this rank's call counters, and the
 * launchers. Private to parallel/: allreduce.h is the interface.
 *
 * Memory of one rank (one cudaMalloc, exported once with CUDA IPC):
 *
 *   [flags: CAR_MAX_BLOCKS x CAR_FLAG_STRIDE u32 = 8 KiB][slot 0][slot 1]
 *
 * flags[b * CAR_FLAG_STRIDE + p]: the last barrier value block b of rank p
 * announced to this rank (written by rank p over peer memory, polled
 * here). Each block owns one 128-byte line, so blocks never share a line.
 * slot 0 / slot 1: slot_bytes each; call e uses slot e & 1 (see
 * allreduce.cu for why two slots make an end-of-call barrier unnecessary).
 * Then the GEMVs' exchange area (kern_xchg, KERN_XCHG_BYTES), then the push
 * area: [2 slots][tp senders][push_region bytes], where sender q's push
 * call e stores its message into region (e & 1, q) of every peer, and the
 * receiver, having read it, fills it with the empty word again
 * (allreduce.cu, CAR_PUSH_EMPTY; the whole area starts so). push_region is
 * the largest message a push call moves.
 */
#ifndef PAR_ALLREDUCE_DEV_H
#define PAR_ALLREDUCE_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "kernels/epilogue.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAR_MAX_RANKS 8
#define CAR_MAX_BLOCKS 64
#define CAR_FLAG_STRIDE 32 /* u32 per block: one 128-byte line */
#define CAR_FLAGS_BYTES ((size_t)CAR_MAX_BLOCKS * CAR_FLAG_STRIDE * 4)
#define CAR_THREADS 512
/* The push one-shot's own grid: blocks of fewer threads spread a message's
 * stores to the peers over more SMs (each pushes only so much across
 * NVLink at once); its blocks keep their own call counters, since its
 * grid is not the others'. */
#define CAR_PUSH_BLOCKS 128
#define CAR_PUSH_THREADS 128
/* car_push_add_norm's blocks: one owns a whole row (a 13B row is 640
 * packs of 16 bytes, 70B's 1024), so wider blocks keep each thread's
 * chain of polls short. */
#define CAR_PUSH_NORM_THREADS 512
/* A block that waits this long for a peer gives up and traps, leaving a
 * par_car_diag (kernels/xchg.cuh's wait, shared with the GEMVs that
 * exchange their tiles through the same group: kern_xchg). */
#define CAR_TIMEOUT_NS KERN_XCHG_TIMEOUT_NS

/* Written by a block that timed out, in mapped host memory: readable after
 * the trap has killed the CUDA context. */
typedef kern_xchg_diag par_car_diag;

/* Passed by value to every kernel: fixed for the life of the group, so a
 * captured CUDA graph replays with the same arguments. */
typedef struct par_car_dev {
	char *data[CAR_MAX_RANKS];      /* rank p's slot 0 as mapped here (slot 1 follows) */
	uint32_t *flags[CAR_MAX_RANKS]; /* rank p's flag lines as mapped here */
	uint32_t *epoch;                /* [blocks] this rank's calls so far, per block (local) */
	par_car_diag *diag;             /* device view of the mapped diagnostic record */
	size_t slot_bytes;              /* a multiple of 16 */
	char *push[CAR_MAX_RANKS];      /* rank p's push area as mapped here */
	uint32_t *push_epoch;           /* [CAR_PUSH_BLOCKS] this rank's push calls, per block (local) */
	size_t push_region;             /* bytes of one (slot, sender) push region, a multiple of 16 */
	int rank, tp, blocks;
	int active; /* set per call by the launchers: blocks [0, active) move the
		     * data, the others only advance their call counters */
} par_car_dev;

/* Every launcher runs all d->blocks blocks (so every block's counter counts
 * every call, and call e uses slot e & 1 in every block); the first
 * `active` (1..blocks) move the data. */

enum { CAR_ONESHOT = 0, CAR_TWOSHOT = 1, CAR_PUSH = 2 };
/* Sum `count` elements of buf across the group, in place, on `stream`, by
 * `kind` (CAR_*): count * dtype size at most slot_bytes (CAR_PUSH:
 * push_region). CAR_PUSH takes its moving blocks from the size (one pack of
 * 16 bytes a thread) and ignores `active`. */
int par_car_launch_allreduce(const par_car_dev *d, int active, void *buf, size_t count,
			     sl_dtype dt, int kind, void *stream);
/* The one-shot all-reduce of part [n, dim] (dt F16 or BF16) doing the
 * residual add of a pending norm (KERN_EPI_ADD, kernels/epilogue.h): x
 * [n, dim] fp32 += the sum rounded to dt, out [n, dim] (dt) = x * w
 * rounded, sumsq [blocks, n] = each block's part of the rows' sums of
 * squares (0 from the blocks that moved nothing). 1 <= n <= KERN_PRE_MAX_TOKENS, n * ceil(dim / 8) * 16 <=
 * slot_bytes (else SL_EINVAL); another dtype: SL_ENOTSUP. */
int par_car_launch_add_prenorm(const par_car_dev *d, int active, const void *part, float *x,
			       const void *w, void *out, float *sumsq, int n, int dim, sl_dtype dt,
			       void *stream);
/* par_car_allreduce_add_norm's kernel: dt F16 or BF16, dim % 8 == 0,
 * buffers 16-byte aligned, n * dim * 2 <= push_region (else SL_EINVAL). */
int par_car_launch_push_add_norm(const par_car_dev *d, const void *part, float *x, const void *w,
				 void *out, int n, int dim, float eps, sl_dtype dt, void *stream);
/* n 32-bit words at p set to the push area's empty word, on the default
 * stream, synchronously; a cudaError_t. */
int par_car_push_empty(void *p, size_t n);
/* recv + p * recv_stride (elements) gets rank p's `count` elements of send
 * (count * elem_bytes <= slot_bytes; elem_bytes 2 or 4). */
int par_car_launch_allgather(const par_car_dev *d, int active, const void *send, void *recv,
			     size_t count, size_t recv_stride, size_t elem_bytes, void *stream);

#ifdef __cplusplus
}
#endif
#endif
