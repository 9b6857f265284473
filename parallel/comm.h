/*
 * comm.h — the communicator of one node group: one interface, two
 * backends. MPI moves host buffers (CPU backend); NCCL moves device
 * buffers on the step's stream (CUDA backend). Both bootstrap over MPI,
 * which also carries the host-side traffic that is never on the GPU: the
 * leader's step plan and the sampled tokens coming back.
 *
 * Groups: `tp` ranks of one pipeline stage share all-reduce / all-gather;
 * stage neighbours exchange activations with send_next / recv_prev.
 * The rank layout is parallel/grid.h's (par_grid_rank); the communicator
 * keeps only what it derives from the grid: its tp sub-communicator and its
 * pipeline neighbours.
 */
#ifndef PAR_COMM_H
#define PAR_COMM_H

#include <stddef.h>

#include "common/dtype.h"
#include "kernels/epilogue.h"
#include "parallel/grid.h"

typedef struct par_comm par_comm;

/* The custom all-reduce of a tp group within one host (allreduce.h,
 * docs/parallel.md): AUTO uses it where the group can, ON requires it,
 * OFF keeps NCCL for every all-reduce. SL_CUSTOM_AR overrides it. */
typedef enum { PAR_CAR_AUTO = 0, PAR_CAR_ON, PAR_CAR_OFF } par_car_mode;

/* Collective over MPI_COMM_WORLD (MPI must be initialised); g is this
 * rank's place (par_grid_place over the world). */
int par_comm_create_mpi(const par_grid *g, par_comm **out, char *err, size_t errlen);
#ifdef SL_HAVE_CUDA
/* NCCL communicators for the tp group and the pipeline neighbours, ids
 * made by each group's first rank and broadcast over MPI, and the custom
 * all-reduce per `custom_ar`. `stream` is the cudaStream_t every
 * operation is enqueued on. When the ranks of a tp group share a GPU
 * (NCCL refuses that) and pp is 1, the custom kernels do the tp
 * all-reduce and all-gather alone; that is how one GPU runs tp 2 tests. */
int par_comm_create_nccl(const par_grid *g, void *stream, par_car_mode custom_ar, par_comm **out,
			 char *err, size_t errlen);
#endif
void par_comm_destroy(par_comm *c);

int par_world_rank(const par_comm *c);
int par_world_size(const par_comm *c);

/* Sum `count` elements of buf across the tp group, in place. */
int par_tp_allreduce(par_comm *c, void *buf, size_t count, sl_dtype dt);
/* The tp all-reduce fused with the residual add after it, the norm left
 * pending for the next projection (node/backend.h's node_prenorm; the
 * tp 1 GEMV's KERN_EPI_ADD, kernels/epilogue.h): x [n, dim] fp32 += the
 * group's sum of part [n, dim] (dt; part is only read, its sum rounded to
 * dt as par_tp_allreduce rounds it), out [n, dim] (dt) = x * w rounded,
 * not divided by the rms, and sumsq [*parts, n] (sumsq_cap floats) the
 * parts of each row's sum of squares of the new x. SL_ENOTSUP, nothing
 * done, where the communicator has no such kernel for the call (tp 1,
 * MPI, sizes that go to NCCL or two-shot, SL_FUSED_AR=0, more tokens or
 * parts than kern_pre_fits takes or sumsq holds, a dtype it does not
 * take): the caller then runs par_tp_allreduce and the add + norm. Every
 * rank of the group gets the same answer and the same bits. */
int par_tp_allreduce_add_prenorm(par_comm *c, const void *part, float *x, const void *w,
				 void *out, float *sumsq, size_t sumsq_cap, int n, int dim,
				 sl_dtype dt, int *parts);
/* The tp all-reduce fused with the residual add and the whole RMSNorm
 * after it, for the steps whose next projection cannot finish a pending
 * norm (more than KERN_PRE_MAX_TOKENS tokens): x [n, dim] fp32 += the
 * group's sum of part [n, dim] (dt, only read; the sum rounded to dt as
 * par_tp_allreduce rounds it), then out [n, dim] (dt) = RMSNorm(x) * w as
 * the backend's add_rmsnorm computes it (its sum of squares in another
 * order: within fp32 rounding of it). SL_ENOTSUP, nothing done, where the
 * communicator has no such kernel for the call (tp 1, MPI, SL_FUSED_AR=0,
 * sizes beyond the push one-shot's, dtypes other than f16 / bf16, widths
 * not a multiple of 8, unaligned buffers): the caller then runs
 * par_tp_allreduce and the add + norm. Every rank of the group gets the
 * same answer and the same bits. */
int par_tp_allreduce_add_norm(par_comm *c, const void *part, float *x, const void *w, void *out,
			      int n, int dim, float eps, sl_dtype dt);
/* The exchange through which a row-parallel GEMV does the tp all-reduce
 * and the residual add itself (the KERN_EPI_ALLREDUCE_ADD epilogue,
 * kernels/epilogue.h): *x filled and SL_OK where the group has one (the
 * custom all-reduce's ranks, fused and GEMV fusion on: SL_FUSED_AR,
 * SL_GEMV_AR), SL_ENOTSUP otherwise (tp 1, MPI, NCCL only). Every rank of
 * the group gets the same answer. */
int par_tp_gemv_xchg(par_comm *c, kern_xchg *x);
/* Gather `count` elements from each tp rank: recv is [tp][count], rank order. */
int par_tp_allgather(par_comm *c, const void *send, void *recv, size_t count, sl_dtype dt);
/* Activations to the same tp rank of the next stage / from the previous one. */
int par_send_next(par_comm *c, const void *buf, size_t count, sl_dtype dt);
int par_recv_prev(par_comm *c, void *buf, size_t count, sl_dtype dt);

/* Host-side messages over MPI, whatever the backend. */
/* Leader -> every other rank: one message each. */
int par_host_bcast_msg(par_comm *c, const void *buf, size_t bytes);
/* Non-leader: receive the leader's next message; *buf grows as needed. */
int par_host_recv_msg(par_comm *c, void **buf, size_t *cap, size_t *bytes);
/* *ready = 1 when a message of par_host_bcast_msg waits (never blocks). */
int par_host_msg_ready(par_comm *c, int *ready);
/* Point to point host bytes (e.g. tokens back to the leader). */
int par_host_send(par_comm *c, int to, const void *buf, size_t bytes);
int par_host_recv(par_comm *c, int from, void *buf, size_t bytes);

/* Host sends that do not wait for the receiver (pipeline parallel keeps
 * several steps in flight: the leader sends the next plan while a later
 * stage still works on the last one, and the last stage hands its tokens
 * back without waiting for the leader to ask). A par_sends holds up to
 * `max` posted sends; their buffers must stay untouched until
 * par_sends_wait returns. Destroy after a wait (a send still pending is
 * left to MPI to finish). */
typedef struct par_sends par_sends;
int par_sends_create(int max, par_sends **out);
void par_sends_destroy(par_sends *s);
int par_sends_wait(par_sends *s);
/* Wait for the first n sends posted into s only (the rest stay pending
 * for par_sends_wait): par_host_ibcast_msg posts to ranks 1, 2, ... in
 * order, so n = tp - 1 covers the leader's own stage. */
int par_sends_wait_first(par_sends *s, int n);
/* par_host_bcast_msg / par_host_send, posted into s. */
int par_host_ibcast_msg(par_comm *c, par_sends *s, const void *buf, size_t bytes);
int par_host_isend(par_comm *c, par_sends *s, int to, const void *buf, size_t bytes);

#endif
