/*
 * comm.c — the MPI side shared by both backends: group bootstrap (a tp
 * sub-communicator per stage), host messages, and the MPI implementations
 * of the collectives for host buffers. comm_nccl.c swaps in NCCL for the
 * device-buffer operations.
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/comm_impl.h"
#include "common/checks.h"
#include "common/sl.h"

#define TAG_PLAN 11
#define TAG_ACT 12
#define TAG_HOST 13

static MPI_Datatype mpi_type(sl_dtype dt) { return dt == SL_DT_F32 ? MPI_FLOAT : MPI_DATATYPE_NULL; }

static int mpi_allreduce(par_comm *c, void *buf, size_t count, sl_dtype dt)
{
	if (dt != SL_DT_F32)
		return SL_ENOTSUP;
	MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, c->tp_comm));
	return SL_OK;
}

static int mpi_allgather(par_comm *c, const void *send, void *recv, size_t count, sl_dtype dt)
{
	if (dt != SL_DT_F32)
		return SL_ENOTSUP;
	MPI_TRY(MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, c->tp_comm));
	return SL_OK;
}

static int mpi_send_next(par_comm *c, const void *buf, size_t count, sl_dtype dt)
{
	MPI_TRY(MPI_Send(buf, (int)count, mpi_type(dt), c->next, TAG_ACT, MPI_COMM_WORLD));
	return SL_OK;
}

static int mpi_recv_prev(par_comm *c, void *buf, size_t count, sl_dtype dt)
{
	MPI_TRY(MPI_Recv(buf, (int)count, mpi_type(dt), c->prev, TAG_ACT, MPI_COMM_WORLD,
			 MPI_STATUS_IGNORE));
	return SL_OK;
}

static void mpi_destroy(par_comm *c) { (void)c; }

static const par_comm_ops mpi_ops = {
	.allreduce = mpi_allreduce,
	.allgather = mpi_allgather,
	.send_next = mpi_send_next,
	.recv_prev = mpi_recv_prev,
	.destroy = mpi_destroy,
};

int par_comm_init_common(par_comm *c, const par_grid *g, char *err, size_t errlen)
{
	MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &c->size);
	if ((long)g->tp * g->pp != c->size || par_grid_rank(g, g->tp_rank, g->pp_rank) != c->rank)
		return sl_errf(err, errlen, SL_EINVAL,
			       "--tp %d x --pp %d does not place MPI rank %d of %d", g->tp, g->pp,
			       c->rank, c->size);
	c->tp_size = g->tp;
	c->next = g->pp_rank + 1 < g->pp ? par_grid_rank(g, g->tp_rank, g->pp_rank + 1) : -1;
	c->prev = g->pp_rank > 0 ? par_grid_rank(g, g->tp_rank, g->pp_rank - 1) : -1;
	if (MPI_Comm_split(MPI_COMM_WORLD, g->pp_rank, g->tp_rank, &c->tp_comm) != MPI_SUCCESS)
		return sl_errf(err, errlen, SL_ECOMM, "MPI_Comm_split failed");
	return SL_OK;
}

int par_comm_create_mpi(const par_grid *g, par_comm **out, char *err, size_t errlen)
{
	par_comm *c = calloc(1, sizeof *c);
	if (!c)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	c->ops = &mpi_ops;
	c->tp_comm = MPI_COMM_NULL;
	int rc = par_comm_init_common(c, g, err, errlen);
	if (rc) {
		par_comm_destroy(c);
		return rc;
	}
	*out = c;
	return SL_OK;
}

void par_comm_destroy(par_comm *c)
{
	if (!c)
		return;
	c->ops->destroy(c);
	if (c->tp_comm != MPI_COMM_NULL)
		MPI_Comm_free(&c->tp_comm);
	free(c);
}

int par_world_rank(const par_comm *c) { return c->rank; }
int par_world_size(const par_comm *c) { return c->size; }
int par_tp_allreduce(par_comm *c, void *buf, size_t count, sl_dtype dt)
{
	return c->tp_size == 1 ? SL_OK : c->ops->allreduce(c, buf, count, dt);
}

int par_tp_allreduce_add_prenorm(par_comm *c, const void *part, float *x, const void *w,
				 void *out, float *sumsq, size_t sumsq_cap, int n, int dim,
				 sl_dtype dt, int *parts)
{
	if (c->tp_size == 1 || !c->ops->allreduce_add_prenorm)
		return SL_ENOTSUP;
	return c->ops->allreduce_add_prenorm(c, part, x, w, out, sumsq, sumsq_cap, n, dim, dt,
					     parts);
}

int par_tp_allreduce_add_norm(par_comm *c, const void *part, float *x, const void *w, void *out,
			      int n, int dim, float eps, sl_dtype dt)
{
	if (c->tp_size == 1 || !c->ops->allreduce_add_norm)
		return SL_ENOTSUP;
	return c->ops->allreduce_add_norm(c, part, x, w, out, n, dim, eps, dt);
}

int par_tp_gemv_xchg(par_comm *c, kern_xchg *x)
{
	if (c->tp_size == 1 || !c->ops->gemv_xchg)
		return SL_ENOTSUP;
	return c->ops->gemv_xchg(c, x);
}

int par_tp_allgather(par_comm *c, const void *send, void *recv, size_t count, sl_dtype dt)
{
	return c->ops->allgather(c, send, recv, count, dt);
}

int par_send_next(par_comm *c, const void *buf, size_t count, sl_dtype dt)
{
	return c->next < 0 ? SL_EINVAL : c->ops->send_next(c, buf, count, dt);
}

int par_recv_prev(par_comm *c, void *buf, size_t count, sl_dtype dt)
{
	return c->prev < 0 ? SL_EINVAL : c->ops->recv_prev(c, buf, count, dt);
}

int par_host_bcast_msg(par_comm *c, const void *buf, size_t bytes)
{
	if (bytes > (size_t)1 << 30)
		return SL_EINVAL;
	for (int r = 1; r < c->size; r++)
		MPI_TRY(MPI_Send(buf, (int)bytes, MPI_BYTE, r, TAG_PLAN, MPI_COMM_WORLD));
	return SL_OK;
}

int par_host_msg_ready(par_comm *c, int *ready)
{
	MPI_TRY(MPI_Iprobe(0, TAG_PLAN, MPI_COMM_WORLD, ready, MPI_STATUS_IGNORE));
	return SL_OK;
}

int par_host_recv_msg(par_comm *c, void **buf, size_t *cap, size_t *bytes)
{
	MPI_Status st;
	int n;
	MPI_TRY(MPI_Probe(0, TAG_PLAN, MPI_COMM_WORLD, &st));
	MPI_Get_count(&st, MPI_BYTE, &n);
	if ((size_t)n > *cap) {
		void *nb = realloc(*buf, n);
		if (!nb)
			return SL_ENOMEM;
		*buf = nb;
		*cap = n;
	}
	MPI_TRY(MPI_Recv(*buf, n, MPI_BYTE, 0, TAG_PLAN, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	*bytes = n;
	return SL_OK;
}

int par_host_send(par_comm *c, int to, const void *buf, size_t bytes)
{
	MPI_TRY(MPI_Send(buf, (int)bytes, MPI_BYTE, to, TAG_HOST, MPI_COMM_WORLD));
	return SL_OK;
}

int par_host_recv(par_comm *c, int from, void *buf, size_t bytes)
{
	MPI_TRY(MPI_Recv(buf, (int)bytes, MPI_BYTE, from, TAG_HOST, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	return SL_OK;
}

struct par_sends {
	int n, max;
	MPI_Request *req;  /* [max] posted, [0, n) pending */
};

int par_sends_create(int max, par_sends **out)
{
	par_sends *s = calloc(1, sizeof *s);
	if (s && !(s->req = malloc(sizeof(MPI_Request) * (max > 0 ? max : 1)))) {
		free(s);
		s = NULL;
	}
	if (!s)
		return SL_ENOMEM;
	s->max = max;
	*out = s;
	return SL_OK;
}

void par_sends_destroy(par_sends *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n; i++)
		if (s->req[i] != MPI_REQUEST_NULL) /* par_sends_wait_first finished it */
			MPI_Request_free(&s->req[i]);
	free(s->req);
	free(s);
}

int par_sends_wait(par_sends *s)
{
	int n = s->n;
	s->n = 0;
	MPI_TRY(MPI_Waitall(n, s->req, MPI_STATUSES_IGNORE));
	return SL_OK;
}

int par_sends_wait_first(par_sends *s, int n)
{
	if (n > s->n)
		n = s->n;
	/* completed requests become MPI_REQUEST_NULL: a later Waitall over
	 * all s->n skips them */
	MPI_TRY(MPI_Waitall(n, s->req, MPI_STATUSES_IGNORE));
	return SL_OK;
}

static int post(par_sends *s, int to, int tag, const void *buf, size_t bytes)
{
	if (s->n == s->max || bytes > (size_t)1 << 30)
		return SL_EINVAL;
	MPI_TRY(MPI_Isend(buf, (int)bytes, MPI_BYTE, to, tag, MPI_COMM_WORLD, &s->req[s->n]));
	s->n++;
	return SL_OK;
}

int par_host_ibcast_msg(par_comm *c, par_sends *s, const void *buf, size_t bytes)
{
	for (int r = 1; r < c->size; r++)
		TRY(post(s, r, TAG_PLAN, buf, bytes));
	return SL_OK;
}

int par_host_isend(par_comm *c, par_sends *s, int to, const void *buf, size_t bytes)
{
	(void)c;
	return post(s, to, TAG_HOST, buf, bytes);
}
