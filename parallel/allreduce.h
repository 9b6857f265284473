/*
 * allreduce.h — the custom all-reduce of a tensor-parallel group whose
 * ranks share one host: one-shot and two-shot kernels over each other's
 * exchange buffers, mapped with CUDA IPC and synchronised by flags in
 * GPU memory, so a decode step's all-reduces run inside its CUDA graph
 * in a few microseconds where NCCL's ring needs tens (docs/parallel.md).
 *
 * comm_nccl.c owns one par_car per tp group and routes to it every
 * all-reduce small enough (par_car_choose); NCCL keeps the large ones and
 * everything across hosts. The tests and the micro-benchmark drive a
 * par_car directly. The size rules, limits and their parsing are plain
 * functions, tested on the CPU (tests/unit/parallel/test_car_plan.c).
 */
#ifndef PAR_ALLREDUCE_H
#define PAR_ALLREDUCE_H

#include <stddef.h>

#include "parallel/comm.h"
#include "common/dtype.h"
#include "kernels/epilogue.h"

typedef enum {
	PAR_AR_AUTO = 0,   /* par_car_allreduce: one-shot or two-shot by size */
	PAR_AR_ONESHOT,
	PAR_AR_TWOSHOT,
	PAR_AR_NCCL,       /* par_car_choose: too large for the custom kernels */
	PAR_AR_PUSH,       /* one-shot pushing its data, which is its own flag (below) */
} par_ar_algo;

/* Size rules of one group; every rank of it uses rank 0's. */
typedef struct par_car_limits {
	size_t push_max;    /* bytes: the push one-shot up to here (0: never), then: */
	size_t oneshot_max; /* bytes: one-shot up to here */
	size_t custom_max;  /* bytes: two-shot up to here, NCCL above; also sizes the buffers */
	int blocks;         /* grid of every kernel, 1..64 (0: default) */
	size_t block_bytes; /* a call of B bytes moves them with ceil(B / block_bytes)
			     * of the blocks, at least PAR_CAR_MIN_ACTIVE; the other
			     * blocks only count the call (0: every block, always) */
	int fused;          /* 1: the communicator fuses the all-reduce with the residual add
			     * after it where it can (par_tp_allreduce_add_prenorm) */
	int gemv;           /* 1 (and fused): the row-parallel GEMV itself sums the group's
			     * products and adds them where it can (par_tp_gemv_xchg);
			     * default 1 (docs/parallel.md) */
} par_car_limits;

/* Defaults per tp size, from the table in allreduce.c (measured on H200s
 * joined by NVLink; bench/allreduce.c prints the crossovers of the host it
 * runs on, to check them): one-shot, then two-shot, then NCCL, and 32
 * blocks of 512 threads. A tp size the table lacks takes the next larger
 * row's. */
#define PAR_CAR_BLOCKS_DEFAULT 32
/* Fewer blocks for small messages: a decode step's 10-16 KiB all-reduce
 * at tp 4 ran 5.6% faster a step with 4 blocks than with 32, while batch
 * 32's 320 KiB lost 14% with 4 and 2.4% with 8 (13B, H200 x4,
 * bench/results/2026-11-28-nvidia-h200-x4-sharding-round3). */
#define PAR_CAR_BLOCK_BYTES_DEFAULT ((size_t)8 << 10)
#define PAR_CAR_MIN_ACTIVE 4
void par_car_default_limits(int tp, par_car_limits *l);
/* The push one-shot (PAR_AR_PUSH): every rank stores its message straight
 * into each peer's push area, which holds an "empty" word wherever nothing
 * has arrived, and polls its own area until every peer's words of its
 * elements are there, then empties them again (the Lamport scheme of
 * TensorRT-LLM's low-latency all-reduce). No flag and no barrier: one trip
 * across NVLink, where the one-shot copies in, then needs a release /
 * acquire flag round before it reads the peers. Its area holds messages of
 * up to max(push_max, PAR_CAR_PUSH_MIN_CAP) bytes; larger forced calls run
 * in pieces. The one input it alters: a 32-bit word of two -0.0 (fp16,
 * bf16) is summed as two +0.0, and the fp32 denormal 0x80008000 as -0.0,
 * on every rank alike. */
#define PAR_CAR_PUSH_MIN_CAP ((size_t)64 << 10)
/* Defaults overridden by SL_CUSTOM_AR_PUSH_MAX, SL_CUSTOM_AR_ONESHOT_MAX, SL_CUSTOM_AR_MAX,
 * SL_CUSTOM_AR_BLOCK_BYTES (bytes, K/M/G suffixes), SL_CUSTOM_AR_BLOCKS,
 * SL_FUSED_AR and SL_GEMV_AR (0 or 1); errors name the variable. */
int par_car_limits_from_env(int tp, par_car_limits *l, char *err, size_t errlen);
/* Push, one-shot, two-shot (custom), or NCCL for a message of `bytes`. */
par_ar_algo par_car_choose(const par_car_limits *l, size_t bytes);
/* Bytes of one exchange slot: custom_max rounded up to 16, at least 64 KiB. */
size_t par_car_slot_bytes(const par_car_limits *l);
/* The largest message one push call moves: push_max rounded up to 16, at least
 * PAR_CAR_PUSH_MIN_CAP, at most 64 MiB. */
size_t par_car_push_cap(const par_car_limits *l);
/* The grid the kernels will use: l->blocks, or the default, within 1..64. */
int par_car_blocks(const par_car_limits *l);
/* The blocks of that grid that move a call of `bytes` (block_bytes). */
int par_car_active_blocks(const par_car_limits *l, size_t bytes);
/* "0"/"off", "1"/"on", "auto" -> *mode; anything else is an error naming
 * `what` (a flag or variable). */
int par_car_parse_mode(const char *what, const char *s, par_car_mode *mode, char *err,
		       size_t errlen);
/* A byte count: digits with an optional K, M or G (binary) suffix. */
int par_car_parse_bytes(const char *what, const char *s, size_t *out, char *err, size_t errlen);
/* The mode a node uses: SL_CUSTOM_AR when set, else `flag`. */
int par_car_mode_from_env(par_car_mode flag, par_car_mode *mode, char *err, size_t errlen);

#ifdef SL_HAVE_CUDA
#include <mpi.h>

typedef struct par_car par_car;

/*
 * Collective over `comm` (the tp ranks; the current CUDA device is this
 * rank's): rank 0's mode and limits (NULL: par_car_default_limits) are
 * broadcast so the group agrees; then, unless the mode is OFF, checks that
 * the ranks share a host and can map each other's memory (peer access
 * between different GPUs; ranks may also share one GPU), allocates this
 * rank's exchange buffer, exchanges IPC handles and maps the peers'.
 * `stream` (cudaStream_t) is where every call is enqueued.
 * *out is NULL when the mode is OFF, or AUTO and the group cannot use it
 * (the reason is then in err, and SL_OK is returned); mode ON turns that
 * into an error. Every rank returns the same outcome.
 */
int par_car_create(MPI_Comm comm, void *stream, par_car_mode mode, const par_car_limits *limits,
		   par_car **out, char *err, size_t errlen);
/* Waits (bounded) for the peers to stop using this rank's memory, then
 * frees it; logs the timeout diagnosis if a kernel gave up on a peer. */
void par_car_destroy(par_car *c);

const par_car_limits *par_car_get_limits(const par_car *c);
/* 1 when some ranks of the group share a GPU (NCCL cannot run there). */
int par_car_shared_gpu(const par_car *c);

/* Sum count elements of buf across the group, in place, on the stream:
 * `algo` AUTO picks by size, PUSH/ONESHOT/TWOSHOT force one; messages beyond
 * a slot (PUSH: par_car_push_cap) run as several calls of at most that each. fp32
 * sums in rank order, whatever the algorithm: every rank gets bit-identical
 * results. Graph-capturable. */
int par_car_allreduce(par_car *c, void *buf, size_t count, sl_dtype dt, par_ar_algo algo);
/* The one-shot all-reduce of part fused with the residual add after it,
 * leaving the norm pending for the next projection as the GEMV's
 * KERN_EPI_ADD epilogue does at tp 1 (kernels/epilogue.h, node_prenorm):
 * x [n, dim] fp32 += the group's sum of part [n, dim] (dt F16 or BF16,
 * summed as par_car_allreduce sums, then added as KERN_EPI_ADD adds); out
 * [n, dim] (dt) = x * w rounded (fp16 saturating at 65504), not divided by
 * the rms; sumsq [parts, n] (parts: par_car_prenorm_parts) = each block's
 * part of each row's sum of squares of the new x. part is only read.
 * Every rank gets the same x, out and sumsq bits. SL_ENOTSUP, nothing
 * enqueued, for another dtype, w, out or sumsq NULL, n tokens of parts
 * parts that kern_pre_fits refuses, or rows beyond a slot: the caller
 * then runs the unfused pair. Graph-capturable, as par_car_allreduce. */
int par_car_allreduce_add_prenorm(par_car *c, const void *part, float *x, const void *w,
				  void *out, float *sumsq, int n, int dim, sl_dtype dt);
/* The push one-shot of part fused with the residual add and the RMSNorm
 * after it (par_tp_allreduce_add_norm): x [n, dim] fp32 += the group's sum
 * of part (dt F16 or BF16, summed as par_car_allreduce sums); out [n, dim]
 * (dt) = x / rms(x) * w rounded, rms = sqrt(mean(x^2) + eps). One block
 * a row: every rank gets the same x and out bits. SL_ENOTSUP, nothing
 * enqueued, for another dtype, dim not a multiple of 8, a buffer not
 * 16-byte aligned, w or out NULL, or n rows of packs beyond the push
 * area. Graph-capturable. */
int par_car_allreduce_add_norm(par_car *c, const void *part, float *x, const void *w, void *out,
			       int n, int dim, float eps, sl_dtype dt);
/* Parts of the sums of squares par_car_allreduce_add_prenorm leaves per
 * token: its blocks. */
int par_car_prenorm_parts(const par_car *c);
/* The exchange a GEMV with the KERN_EPI_ALLREDUCE_ADD epilogue runs
 * through (kernels/epilogue.h): every rank's area of this group's buffer,
 * the tiles' call counters, the timeout record. SL_ENOTSUP when the
 * group's limits turn it off (gemv or fused 0). */
int par_car_gemv_xchg(const par_car *c, kern_xchg *x);
/* recv [tp][count] gets every rank's `count` elements of send, rank order. */
int par_car_allgather(par_car *c, const void *send, void *recv, size_t count, sl_dtype dt);
/* SL_EDEVICE with the reason when a kernel of this group timed out
 * waiting for a peer (its CUDA context is then lost), else SL_OK. */
int par_car_check(const par_car *c, char *err, size_t errlen);

/* Collective over comm: *distinct = 1 when every rank uses a different
 * GPU (by PCI bus id), which NCCL requires. */
int par_gpus_distinct(MPI_Comm comm, int *distinct, char *err, size_t errlen);
#endif

#endif
