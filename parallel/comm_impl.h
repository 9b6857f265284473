/*
 * comm_impl.h — the communicator's private layout, shared by comm.c (MPI)
 * and comm_nccl.c. Not for use outside parallel/.
 */
#ifndef PAR_COMM_IMPL_H
#define PAR_COMM_IMPL_H

#include <mpi.h>

#include "parallel/comm.h"

typedef struct par_comm_ops {
	int (*allreduce)(par_comm *c, void *buf, size_t count, sl_dtype dt);
	/* optional (NULL: SL_ENOTSUP): par_tp_allreduce_add_prenorm */
	int (*allreduce_add_prenorm)(par_comm *c, const void *part, float *x, const void *w,
				     void *out, float *sumsq, size_t sumsq_cap, int n, int dim,
				     sl_dtype dt, int *parts);
	/* optional (NULL: SL_ENOTSUP): par_tp_allreduce_add_norm */
	int (*allreduce_add_norm)(par_comm *c, const void *part, float *x, const void *w,
				  void *out, int n, int dim, float eps, sl_dtype dt);
	/* optional (NULL: SL_ENOTSUP): par_tp_gemv_xchg */
	int (*gemv_xchg)(par_comm *c, kern_xchg *x);
	int (*allgather)(par_comm *c, const void *send, void *recv, size_t count, sl_dtype dt);
	int (*send_next)(par_comm *c, const void *buf, size_t count, sl_dtype dt);
	int (*recv_prev)(par_comm *c, void *buf, size_t count, sl_dtype dt);
	void (*destroy)(par_comm *c);
} par_comm_ops;

struct par_comm {
	const par_comm_ops *ops;
	int rank, size;        /* world */
	int tp_size;           /* ranks of tp_comm */
	int next, prev;        /* same tp rank in the next / previous stage; -1: none */
	MPI_Comm tp_comm;      /* the tp ranks of this stage */
	void *impl;            /* NCCL state */
};

/* World rank and size, neighbours and the tp sub-communicator for grid g. */
int par_comm_init_common(par_comm *c, const par_grid *g, char *err, size_t errlen);

#endif
