/*
 * comm_nccl.c — NCCL backend: device buffers, every operation enqueued on
 * the step's stream so it orders with the kernels around it and can be
 * captured in a CUDA graph. Two communicators: the tp group (all-reduce,
 * all-gather) and the whole world (pipeline send/recv). Unique ids are
 * made by each group's first rank and broadcast over MPI.
 *
 * The tp all-reduce goes to the custom kernels (allreduce.h) when the tp
 * group is on one host and the message is small enough, to NCCL
 * otherwise. When the tp ranks share a GPU, NCCL cannot run at all; with
 * pp 1 the custom kernels then carry the tp all-reduce and all-gather
 * alone (correct, and slow: the ranks' contexts take turns on the GPU).
 */
#ifdef SL_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>

#include "parallel/allreduce.h"
#include "parallel/comm_impl.h"
#include "common/checks.h"
#include "common/sl.h"

typedef struct nccl_state {
	ncclComm_t tp, world;
	cudaStream_t stream;
	par_car *car;      /* custom all-reduce; NULL when off or unusable */
	int car_only;      /* the tp ranks share a GPU: no NCCL tp communicator */
} nccl_state;

static ncclDataType_t nccl_type(sl_dtype dt)
{
	return dt == SL_DT_F32 ? ncclFloat32 : dt == SL_DT_F16 ? ncclFloat16 : ncclBfloat16;
}

static nccl_state *S(par_comm *c) { return c->impl; }

/* Every rank of the group makes the same choice: the same count and
 * dtype, and the limits the group agreed on at creation. */
static int n_allreduce(par_comm *c, void *buf, size_t count, sl_dtype dt)
{
	nccl_state *s = S(c);
	size_t bytes = count * sl_dtype_size(dt);
	if (s->car && (s->car_only ||
		       par_car_choose(par_car_get_limits(s->car), bytes) != PAR_AR_NCCL))
		return par_car_allreduce(s->car, buf, count, dt, PAR_AR_AUTO);
	NCCL_TRY(ncclAllReduce(buf, buf, count, nccl_type(dt), ncclSum, s->tp, s->stream));
	return SL_OK;
}

/* Fused where the plain all-reduce would run one-shot or push (or the
 * custom kernels carry everything): two-shot and NCCL sizes keep the pair. */
static int n_allreduce_add_prenorm(par_comm *c, const void *part, float *x, const void *w,
				   void *out, float *sumsq, size_t sumsq_cap, int n, int dim,
				   sl_dtype dt, int *parts)
{
	nccl_state *s = S(c);
	if (!s->car || !par_car_get_limits(s->car)->fused)
		return SL_ENOTSUP;
	size_t bytes = (size_t)n * dim * sl_dtype_size(dt);
	par_ar_algo a = par_car_choose(par_car_get_limits(s->car), bytes);
	if (!s->car_only && a != PAR_AR_ONESHOT && a != PAR_AR_PUSH)
		return SL_ENOTSUP;
	int p = par_car_prenorm_parts(s->car);
	if (n < 1 || (size_t)p * n > sumsq_cap)
		return SL_ENOTSUP;
	TRY(par_car_allreduce_add_prenorm(s->car, part, x, w, out, sumsq, n, dim, dt));
	*parts = p;
	return SL_OK;
}

/* Where the plain all-reduce would run the push one-shot (or the custom
 * kernels carry everything). */
static int n_allreduce_add_norm(par_comm *c, const void *part, float *x, const void *w,
				void *out, int n, int dim, float eps, sl_dtype dt)
{
	nccl_state *s = S(c);
	if (!s->car || !par_car_get_limits(s->car)->fused || n < 1 || dim < 1)
		return SL_ENOTSUP;
	size_t bytes = (size_t)n * dim * sl_dtype_size(dt);
	if (!s->car_only && par_car_choose(par_car_get_limits(s->car), bytes) != PAR_AR_PUSH)
		return SL_ENOTSUP;
	return par_car_allreduce_add_norm(s->car, part, x, w, out, n, dim, eps, dt);
}

static int n_gemv_xchg(par_comm *c, kern_xchg *x)
{
	nccl_state *s = S(c);
	return s->car ? par_car_gemv_xchg(s->car, x) : SL_ENOTSUP;
}

static int n_allgather(par_comm *c, const void *send, void *recv, size_t count, sl_dtype dt)
{
	if (S(c)->car_only)
		return par_car_allgather(S(c)->car, send, recv, count, dt);
	NCCL_TRY(ncclAllGather(send, recv, count, nccl_type(dt), S(c)->tp, S(c)->stream));
	return SL_OK;
}

static int n_send_next(par_comm *c, const void *buf, size_t count, sl_dtype dt)
{
	NCCL_TRY(ncclSend(buf, count, nccl_type(dt), c->next, S(c)->world, S(c)->stream));
	return SL_OK;
}

static int n_recv_prev(par_comm *c, void *buf, size_t count, sl_dtype dt)
{
	NCCL_TRY(ncclRecv(buf, count, nccl_type(dt), c->prev, S(c)->world, S(c)->stream));
	return SL_OK;
}

static void n_destroy(par_comm *c)
{
	nccl_state *s = S(c);
	if (!s)
		return;
	par_car_destroy(s->car);
	if (s->tp)
		ncclCommDestroy(s->tp);
	if (s->world)
		ncclCommDestroy(s->world);
	free(s);
	c->impl = NULL;
}

static const par_comm_ops nccl_ops = {
	.allreduce = n_allreduce,
	.allreduce_add_prenorm = n_allreduce_add_prenorm,
	.allreduce_add_norm = n_allreduce_add_norm,
	.gemv_xchg = n_gemv_xchg,
	.allgather = n_allgather,
	.send_next = n_send_next,
	.recv_prev = n_recv_prev,
	.destroy = n_destroy,
};

/* One NCCL communicator over an MPI communicator: its rank 0 makes the id. */
static int nccl_over(MPI_Comm mc, ncclComm_t *out)
{
	int r, n;
	ncclUniqueId id;
	MPI_Comm_rank(mc, &r);
	MPI_Comm_size(mc, &n);
	if (r == 0)
		NCCL_TRY(ncclGetUniqueId(&id));
	if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mc) != MPI_SUCCESS)
		return SL_ECOMM;
	NCCL_TRY(ncclCommInitRank(out, n, id, r));
	return SL_OK;
}

/* The pipeline's point-to-point connections, made now with one float
 * each way. NCCL sets a connection up on its first use, on the host, and
 * needs the peer inside its matching call; inside a step that peer may be
 * waiting in MPI for the rest of a plan too large to go eagerly, which
 * only the blocked sender can finish (docs/parallel.md: tp 2 x pp 2 hung
 * so at batch 32, and the first constrained step of a pp 2 group, whose
 * plan carries the masks, hung so on 2 H200). Made at start, the
 * connections are there before any plan travels. */
static int connect_p2p(par_comm *c)
{
	nccl_state *s = S(c);
	float *buf = NULL;
	if (cudaMalloc((void **)&buf, 2 * sizeof(float)) != cudaSuccess)
		return SL_ENOMEM;
	ncclResult_t r = ncclGroupStart();
	if (r == ncclSuccess && c->next >= 0)
		r = ncclSend(buf, 1, ncclFloat32, c->next, s->world, s->stream);
	if (r == ncclSuccess && c->prev >= 0)
		r = ncclRecv(buf + 1, 1, ncclFloat32, c->prev, s->world, s->stream);
	ncclResult_t end = ncclGroupEnd();
	cudaError_t e = cudaStreamSynchronize(s->stream);
	cudaFree(buf);
	return r == ncclSuccess && end == ncclSuccess && e == cudaSuccess ? SL_OK : SL_ECOMM;
}

/* Log, once per tp group, which all-reduce it runs and why. */
static void log_choice(const par_comm *c, const nccl_state *s, const char *why)
{
	int r;
	MPI_Comm_rank(c->tp_comm, &r);
	if (r != 0 || c->tp_size == 1)
		return;
	if (!s->car) {
		SL_INFO("comm", "tp all-reduce: NCCL (%s)", why);
		return;
	}
	const par_car_limits *l = par_car_get_limits(s->car);
	if (s->car_only)
		SL_INFO("comm", "tp all-reduce and all-gather: custom kernels only (the tp ranks "
			"share a GPU; NCCL needs one GPU per rank): correct but not fast");
	else
		SL_INFO("comm", "tp all-reduce: custom push up to %zu KiB, one-shot up to %zu KiB, "
			"two-shot up to %zu KiB, NCCL above (%d blocks, one per %zu KiB moving a "
			"call, at least %d); one-shot fused with the residual add: %s; in the "
			"row-parallel GEMV at 1-2 tokens: %s",
			l->push_max >> 10, l->oneshot_max >> 10, l->custom_max >> 10, l->blocks, l->block_bytes >> 10,
			PAR_CAR_MIN_ACTIVE, l->fused ? "on" : "off (SL_FUSED_AR=0)",
			!l->fused ? "off (SL_FUSED_AR=0)" : l->gemv ? "on" : "off (SL_GEMV_AR=0)");
}

/* The custom all-reduce as the flag, SL_CUSTOM_AR and the GPUs allow.
 * Collective over the tp group: a rank with a bad variable still takes
 * part in every collective, so the group fails together, and the mode is
 * tp rank 0's, so it decides together. */
static int open_custom(par_comm *c, const par_grid *g, par_car_mode flag, char *err,
		       size_t errlen)
{
	nccl_state *s = S(c);
	par_car_mode mode = PAR_CAR_OFF;
	par_car_limits lim;
	int distinct = 1, bad;
	char why[SL_ERRLEN] = "tp 1";
	if (c->tp_size == 1)
		return log_choice(c, s, why), SL_OK;
	int rc = par_car_mode_from_env(flag, &mode, err, errlen);
	if (!rc)
		rc = par_car_limits_from_env(c->tp_size, &lim, err, errlen);
	int rc2 = par_gpus_distinct(c->tp_comm, &distinct, why, sizeof why);
	bad = rc || rc2;
	MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, c->tp_comm));
	if (bad)
		return rc ? rc : rc2 ? sl_errf(err, errlen, rc2, "%s", why)
				 : sl_errf(err, errlen, SL_EINVAL, "another rank failed to start");
	int m = (int)mode;
	MPI_TRY(MPI_Bcast(&m, 1, MPI_INT, 0, c->tp_comm));
	mode = (par_car_mode)m;
	if (!distinct) {
		if (g->pp > 1)
			return sl_errf(err, errlen, SL_ENOTSUP,
				       "tensor-parallel ranks share a GPU: pipeline parallel needs "
				       "NCCL, which needs one GPU per rank");
		if (mode == PAR_CAR_OFF)
			return sl_errf(err, errlen, SL_ENOTSUP,
				       "tensor-parallel ranks share a GPU: NCCL needs one GPU per "
				       "rank, and the custom all-reduce is off");
		mode = PAR_CAR_ON;
		s->car_only = 1;
	}
	rc = par_car_create(c->tp_comm, s->stream, mode, &lim, &s->car, why, sizeof why);
	if (rc)
		return sl_errf(err, errlen, rc, "%s", why);
	log_choice(c, s, why);
	return SL_OK;
}

int par_comm_create_nccl(const par_grid *g, void *stream, par_car_mode custom_ar, par_comm **out,
			 char *err, size_t errlen)
{
	par_comm *c = calloc(1, sizeof *c);
	nccl_state *s = calloc(1, sizeof *s);
	if (!c || !s) {
		free(c), free(s);
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	}
	c->ops = &nccl_ops;
	c->impl = s;
	c->tp_comm = MPI_COMM_NULL;
	s->stream = (cudaStream_t)stream;
	int rc = par_comm_init_common(c, g, err, errlen);
	if (!rc)
		rc = open_custom(c, g, custom_ar, err, errlen);
	if (!rc && !s->car_only && nccl_over(c->tp_comm, &s->tp))
		rc = sl_errf(err, errlen, SL_ECOMM, "NCCL initialisation failed (see the log above)");
	if (g->pp > 1) { /* no stage may wait in the world's NCCL set-up for one that failed */
		int bad = rc != 0;
		MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
		if (!rc && bad)
			rc = sl_errf(err, errlen, SL_ECOMM, "another rank failed to set up its communicators");
		if (!rc && nccl_over(MPI_COMM_WORLD, &s->world))
			rc = sl_errf(err, errlen, SL_ECOMM, "NCCL initialisation failed (see the log above)");
		if (!rc && connect_p2p(c))
			rc = sl_errf(err, errlen, SL_ECOMM, "NCCL: the pipeline's first send/recv failed");
	}
	if (rc) {
		par_comm_destroy(c);
		return rc;
	}
	*out = c;
	return SL_OK;
}
#endif
