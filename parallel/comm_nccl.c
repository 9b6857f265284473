/*
 * comm_nccl.c — NCCL backend: device buffers, every operation enqueued on
 * the step's stream so it orders with the kernels around it and can be
 * captured in a CUDA graph. Two communicators: the tp group (all-reduce,
 * all-gather) and the whole world (pipeline send/recv). Unique ids are
 * made by each group's first rank and broadcast over MPI.
 */
#ifdef SL_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>

#include "comm_impl.h"
#include "checks.h"
#include "sl.h"

typedef struct nccl_state {
	ncclComm_t tp, world;
	cudaStream_t stream;
} nccl_state;

static ncclDataType_t nccl_type(sl_dtype dt)
{
	return dt == SL_DT_F32 ? ncclFloat32 : dt == SL_DT_F16 ? ncclFloat16 : ncclBfloat16;
}

static nccl_state *S(par_comm *c) { return c->impl; }

static int n_allreduce(par_comm *c, void *buf, size_t count, sl_dtype dt)
{
	NCCL_TRY(ncclAllReduce(buf, buf, count, nccl_type(dt), ncclSum, S(c)->tp, S(c)->stream));
	return SL_OK;
}

static int n_allgather(par_comm *c, const void *send, void *recv, size_t count, sl_dtype dt)
{
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
	if (s->tp)
		ncclCommDestroy(s->tp);
	if (s->world)
		ncclCommDestroy(s->world);
	free(s);
	c->impl = NULL;
}

static const par_comm_ops nccl_ops = {
	.allreduce = n_allreduce,
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

int par_comm_create_nccl(const par_grid *g, void *stream, par_comm **out, char *err,
			 size_t errlen)
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
	if (!rc && (nccl_over(c->tp_comm, &s->tp) ||
		    (g->pp > 1 && nccl_over(MPI_COMM_WORLD, &s->world))))
		rc = sl_errf(err, errlen, SL_ECOMM, "NCCL initialisation failed (see the log above)");
	if (rc) {
		par_comm_destroy(c);
		return rc;
	}
	*out = c;
	return SL_OK;
}
#endif
