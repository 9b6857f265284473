/*
 * group.h — joining a node group: MPI start-up when launched by mpirun
 * (none otherwise), the communicator, this rank's backend and model shard.
 * Setup succeeds or fails on every rank together, so a rank that cannot
 * load its shard never leaves the others waiting for plans.
 */
#ifndef NODE_GROUP_H
#define NODE_GROUP_H

#include <stddef.h>

#include "node/model.h"

typedef struct node_group_opts {
	const char *model_dir;
	const char *device;      /* "cpu", "cuda" or NULL: cuda when a GPU is present */
	int dtype;               /* CUDA storage: SL_DT_F16/BF16, -1: the checkpoint's (F16 for F32) */
	int tp, pp;              /* 0: tp = world size / pp, pp = 1 */
	int step_tokens;         /* tokens per forward step (--max-step-tokens) */
	int max_rows, max_seqs, block_tokens, n_kv_blocks;
	float mem_fraction;      /* CUDA, with n_kv_blocks 0 */
	const model_config *random_cfg; /* non-NULL: random weights of this shape, no checkpoint */
	int skip_tp_comm;        /* benchmarks: see model_opts */
	int custom_ar;           /* par_car_mode (comm.h): 0 auto, 1 on, 2 off */
	int quant;               /* --quant: kern_qformat (0: none) */
	int quant_group;         /* --quant-group: model_opts.quant_group (0: auto) */
	int quant_lm_head;       /* --quant-lm-head: model_opts.quant_lm_head (0: auto) */
	int kv_fp8;              /* --kv-dtype fp8 */
	uint64_t seed;
} node_group_opts;

typedef struct node_group {
	int rank, world;
	int mpi, own_mpi;        /* running under MPI; MPI_Init was called here */
	int ready;               /* node_group_open succeeded on every rank */
	struct par_comm *comm;
	node_backend *be;
	model *m;
} node_group;

/* Launched under mpirun when its environment says so. */
int node_group_under_mpi(void);
/* 1 when this build has CUDA and a device is visible. */
int node_group_have_gpu(void);
int node_group_open(int *argc, char ***argv, const node_group_opts *o, node_group *g, char *err,
		    size_t errlen);
/* On the leader of a ready group, first releases the workers from
 * node_worker_loop (node_step_stop), whatever happened before. failed:
 * this rank is leaving on an error (MPI then aborts the group rather than
 * finalise, because the others may be blocked on it). */
void node_group_close(node_group *g, int failed);

#endif
