/*
 * group.c — node group start-up and shutdown (see group.h).
 */
#include "node/group.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/comm.h"
#ifdef SL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#include "common/sl.h"
#include "node/step.h"

int node_group_under_mpi(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
}

int node_group_have_gpu(void)
{
#ifdef SL_HAVE_CUDA
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n > 0;
#else
	return 0;
#endif
}

#ifdef SL_HAVE_CUDA
/* The GPU of this rank: its index among the ranks of its host. */
static int local_rank(void)
{
	const char *v = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
	if (!v)
		v = getenv("MPI_LOCALRANKID");
	return v ? atoi(v) : 0;
}

/* Storage dtype on the GPU: as asked, else the checkpoint's when it is
 * half precision, else fp16 (fp32 checkpoints are cast). */
static sl_dtype cuda_dtype(const node_group_opts *o)
{
	if (o->dtype == SL_DT_F16 || o->dtype == SL_DT_BF16)
		return (sl_dtype)o->dtype;
	model_config c;
	char err[SL_ERRLEN];
	sl_dtype d = SL_DT_F32;
	if (o->random_cfg)
		d = o->random_cfg->dtype;
	else if (!model_config_load_path(o->model_dir, &c, err, sizeof err))
		d = c.dtype;
	return d == SL_DT_BF16 ? SL_DT_BF16 : SL_DT_F16;
}
#endif

static int open_backend(const node_group_opts *o, node_group *g, const par_grid *grid, char *err,
			size_t errlen)
{
	int cuda = o->device ? !strcmp(o->device, "cuda") : node_group_have_gpu();
	if (o->device && !cuda && strcmp(o->device, "cpu"))
		return sl_errf(err, errlen, SL_EINVAL, "--device %s: expected cpu or cuda", o->device);
	if (!cuda) {
		int rc = g->mpi ? par_comm_create_mpi(grid, &g->comm, err, errlen) : SL_OK;
		return rc ? rc : node_backend_cpu_create(&g->be);
	}
#ifdef SL_HAVE_CUDA
	int rc = node_backend_cuda_create(local_rank(), cuda_dtype(o), &g->be, err, errlen);
	if (!rc && g->mpi)
		rc = par_comm_create_nccl(grid, g->be->stream, (par_car_mode)o->custom_ar, &g->comm,
					  err, errlen);
	return rc;
#else
	return sl_errf(err, errlen, SL_ENOTSUP, "--device cuda: this build has no CUDA (make CUDA=1)");
#endif
}

static int open_shard(const node_group_opts *o, node_group *g, const par_grid *grid, char *err,
		      size_t errlen)
{
	int rc = open_backend(o, g, grid, err, errlen);
	if (rc)
		return rc;
	model_opts mo = {.grid = *grid,
			 .step_tokens = o->step_tokens, .max_rows = o->max_rows, .max_seqs = o->max_seqs,
			 .block_tokens = o->block_tokens, .n_kv_blocks = o->n_kv_blocks,
			 .mem_fraction = o->mem_fraction, .skip_tp_comm = o->skip_tp_comm,
			 .quant = o->quant,
			 .quant_group = o->quant_group, .quant_lm_head = o->quant_lm_head,
			 .kv_fp8 = o->kv_fp8};
	if (o->random_cfg)
		rc = model_create_random(o->random_cfg, g->be, &mo, o->seed, &g->m, err, errlen);
	else
		rc = model_create(o->model_dir, g->be, &mo, &g->m, err, errlen);
	if (!rc)
		g->m->comm = g->comm;
	return rc;
}

/* On the CPU backend every rank computes on cores the others (and often
 * the coordinator) share, and Open MPI busy-polls in every wait, the
 * tp all-reduces of a step included: a rank waiting on a slower one
 * takes the core that one needs. Open MPI's yield_when_idle makes those
 * waits yield (docs/operations.md: 2 to 3 times the requests/s of a tp 2
 * group on 2 cores). Set before MPI_Init, unless the operator set it; not
 * on the GPU, where MPI carries little and latency matters more. The
 * wait for the next plan sleeps either way (step.c, wait_for_plan). */
static void mpi_yield_on_cpu(const node_group_opts *o)
{
	int cuda = o->device ? !strcmp(o->device, "cuda") : node_group_have_gpu();
	if (!cuda)
		setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
}

int node_group_open(int *argc, char ***argv, const node_group_opts *o, node_group *g, char *err,
		    size_t errlen)
{
	g->world = 1;
	int inited = 0;
	MPI_Initialized(&inited);
	if (inited || node_group_under_mpi()) {
		if (!inited)
			mpi_yield_on_cpu(o);
		if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS)
			return sl_errf(err, errlen, SL_ECOMM, "MPI_Init failed");
		g->mpi = 1;
		g->own_mpi = !inited;
		MPI_Comm_rank(MPI_COMM_WORLD, &g->rank);
		MPI_Comm_size(MPI_COMM_WORLD, &g->world);
	}
	sl_log_set_role("node", g->rank, g->world);
	par_grid grid;
	int rc = par_grid_place(o->tp, o->pp, g->rank, g->world, &grid, err, errlen);
	if (!rc)
		rc = open_shard(o, g, &grid, err, errlen);
	if (g->mpi) { /* every rank learns whether all of them are ready */
		int mine = rc ? 1 : 0, any = 0;
		MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
		if (any && !rc)
			rc = sl_errf(err, errlen, SL_EINVAL, "another rank failed to start");
		if (rc && g->rank != 0 && !strstr(err, "another rank"))
			SL_ERROR("start", "%s", err); /* rank 0 reports the common case */
	}
	g->ready = rc == SL_OK;
	return rc;
}

void node_group_close(node_group *g, int failed)
{
	if (g->ready && g->rank == 0)
		node_step_stop(g->m);
	g->ready = 0;
	model_destroy(g->m);
	node_backend_destroy(g->be);
	par_comm_destroy(g->comm);
	if (g->mpi && failed && g->rank != 0)
		MPI_Abort(MPI_COMM_WORLD, 1);
	if (g->own_mpi)
		MPI_Finalize();
	g->m = NULL, g->be = NULL, g->comm = NULL;
}
