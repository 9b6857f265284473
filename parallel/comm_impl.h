/*
 * comm_impl.h — the communicator's private layout, shared by comm.c (MPI)
 * and comm_nccl.c. Not for use outside parallel/.
 */
#ifndef PAR_COMM_IMPL_H
#define PAR_COMM_IMPL_H

#include <mpi.h>

#include "comm.h"

typedef struct par_comm_ops {
	int (*allreduce)(par_comm *c, void *buf, size_t count, sl_dtype dt);
	int (*allgather)(par_comm *c, const void *send, void *recv, size_t count, sl_dtype dt);
	int (*send_next)(par_comm *c, const void *buf, size_t count, sl_dtype dt);
	int (*recv_prev)(par_comm *c, void *buf, size_t count, sl_dtype dt);
	void (*destroy)(par_comm *c);
} par_comm_ops;

struct par_comm {
	const par_comm_ops *ops;
	int rank, size, tp, pp, tp_rank, pp_rank;
	MPI_Comm tp_comm;      /* the tp ranks of this stage */
	double seconds;        /* time inside collectives */
	void *impl;            /* NCCL state */
};

/* Rank, size, grid position and the tp sub-communicator. */
int par_comm_init_common(par_comm *c, int tp, int pp, char *err, size_t errlen);

#endif
