/*
 * allreduce.c — shardline-bench-allreduce: microseconds per tensor-parallel
 * all-reduce call, custom one-shot, two-shot and push one-shot
 * (parallel/allreduce.h) against NCCL, for every power-of-two message from --min to --max bytes
 * (default 8 KiB to 8 MiB), under mpirun -np N on one host.
 *
 * Each measurement is a CUDA graph of --iters calls on one buffer (how a
 * decode step runs them), replayed --reps times after a warm-up replay and
 * timed with events on every rank; the slowest rank's time is reported.
 * The buffer holds zeros, so repeated in-place sums stay finite.
 *
 * With one GPU per rank: all four, and which one the node's size rule
 * (default limits for this tp) would pick. When ranks share a GPU (a host
 * with fewer GPUs than ranks), NCCL cannot run there and the custom
 * numbers measure how the GPU time-slices between the ranks' contexts,
 * not the kernels: they are reported only to show the path works, and
 * labelled so (fewer iterations by default).
 *
 * Writes a table on stdout and, with --out, JSON for bench/plot_allreduce.py.
 */
#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parallel/allreduce.h"
#include "common/args.h"
#include "common/version.h"
#include "common/sl.h"

#define MAX_SIZES 32

typedef struct bench_args {
	size_t min_bytes, max_bytes;
	long iters, reps;
	int iters_given, reps_given;
	sl_dtype dtype;
	const char *out;
} bench_args;

typedef struct row {
	size_t bytes;
	double us[4]; /* one-shot, two-shot, push, NCCL; < 0: not measured */
	par_ar_algo choice;
} row;

static int g_rank, g_tp, g_distinct;
static cudaStream_t g_stream;
static ncclComm_t g_nccl;
static par_car *g_car;

static void die(const char *what, const char *why)
{
	fprintf(stderr, "shardline-bench-allreduce: rank %d: %s: %s\n", g_rank, what, why);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

#define CK(call)                                                                  \
	do {                                                                      \
		cudaError_t e_ = (call);                                          \
		if (e_ != cudaSuccess)                                            \
			die(#call, cudaGetErrorString(e_));                       \
	} while (0)

static ncclDataType_t nccl_type(sl_dtype dt)
{
	return dt == SL_DT_F32 ? ncclFloat32 : dt == SL_DT_F16 ? ncclFloat16 : ncclBfloat16;
}

enum { A_ONESHOT, A_TWOSHOT, A_PUSH, A_NCCL, N_ALGOS };
static const par_ar_algo k_algos[N_ALGOS] = {PAR_AR_ONESHOT, PAR_AR_TWOSHOT, PAR_AR_PUSH,
					     PAR_AR_NCCL};

/* The column of the node's pick. */
static int pick_col(par_ar_algo a)
{
	return a == PAR_AR_ONESHOT ? A_ONESHOT : a == PAR_AR_TWOSHOT ? A_TWOSHOT
					     : a == PAR_AR_PUSH	   ? A_PUSH
								   : A_NCCL;
}

/* One call of algorithm a (A_*), enqueued. */
static void one_call(int a, void *buf, size_t count, sl_dtype dt)
{
	if (a == A_NCCL) {
		if (ncclAllReduce(buf, buf, count, nccl_type(dt), ncclSum, g_nccl, g_stream) !=
		    ncclSuccess)
			die("ncclAllReduce", "failed");
		return;
	}
	if (par_car_allreduce(g_car, buf, count, dt, k_algos[a]))
		die("par_car_allreduce", "failed");
}

/* Microseconds per call, slowest rank, of `iters` calls in a graph. */
static double time_calls(int a, void *buf, size_t count, sl_dtype dt, long iters, long reps)
{
	cudaGraph_t g;
	cudaGraphExec_t x;
	cudaEvent_t e0, e1;
	CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
	for (long i = 0; i < iters; i++)
		one_call(a, buf, count, dt);
	CK(cudaStreamEndCapture(g_stream, &g));
	CK(cudaGraphInstantiate(&x, g, 0));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	MPI_Barrier(MPI_COMM_WORLD);
	CK(cudaGraphLaunch(x, g_stream)); /* warm-up */
	CK(cudaStreamSynchronize(g_stream));
	MPI_Barrier(MPI_COMM_WORLD);
	CK(cudaEventRecord(e0, g_stream));
	for (long r = 0; r < reps; r++)
		CK(cudaGraphLaunch(x, g_stream));
	CK(cudaEventRecord(e1, g_stream));
	CK(cudaEventSynchronize(e1));
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, e0, e1));
	double us = 1e3 * ms / (double)(iters * reps), worst = 0;
	MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	cudaEventDestroy(e0), cudaEventDestroy(e1);
	cudaGraphExecDestroy(x), cudaGraphDestroy(g);
	return worst;
}

static int parse(int argc, char **argv, bench_args *a, char *err, size_t errlen)
{
	static const struct option o[] = {{"min", 1, 0, 'm'}, {"max", 1, 0, 'M'},
					  {"iters", 1, 0, 'i'}, {"reps", 1, 0, 'r'},
					  {"dtype", 1, 0, 'd'}, {"out", 1, 0, 'o'}, {0, 0, 0, 0}};
	*a = (bench_args){.min_bytes = 8 << 10, .max_bytes = 8 << 20, .iters = 100, .reps = 5,
			  .dtype = SL_DT_F16};
	int c, rc = 0;
	while (!rc && (c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'm': rc = par_car_parse_bytes("--min", optarg, &a->min_bytes, err, errlen); break;
		case 'M': rc = par_car_parse_bytes("--max", optarg, &a->max_bytes, err, errlen); break;
		case 'i': rc = sl_parse_int("--iters", optarg, 1, 10000, &a->iters, err, errlen);
			a->iters_given = 1; break;
		case 'r': rc = sl_parse_int("--reps", optarg, 1, 1000, &a->reps, err, errlen);
			a->reps_given = 1; break;
		case 'd':
			if (!strcmp(optarg, "f16")) a->dtype = SL_DT_F16;
			else if (!strcmp(optarg, "bf16")) a->dtype = SL_DT_BF16;
			else if (!strcmp(optarg, "f32")) a->dtype = SL_DT_F32;
			else rc = sl_errf(err, errlen, SL_EINVAL, "--dtype: '%s' is not f16, bf16 or f32", optarg);
			break;
		case 'o': a->out = optarg; break;
		default:
			return sl_errf(err, errlen, SL_EINVAL,
				       "usage: mpirun -np N shardline-bench-allreduce [--min 8K] [--max 8M] "
				       "[--iters 100] [--reps 5] [--dtype f16|bf16|f32] [--out FILE.json]");
		}
	}
	if (!rc && (a->min_bytes < 16 || a->max_bytes < a->min_bytes))
		rc = sl_errf(err, errlen, SL_EINVAL, "--min must be at least 16 and at most --max");
	return rc;
}

static const char *algo_label(par_ar_algo a)
{
	return a == PAR_AR_ONESHOT ? "one-shot" : a == PAR_AR_TWOSHOT ? "two-shot"
		 : a == PAR_AR_PUSH		? "push"
						: "NCCL";
}

static void print_table(const bench_args *a, const row *rows, int n, const char *device)
{
	printf("all-reduce %s, %d ranks on %s (%s), graph of %ld calls x %ld replays, "
	       "slowest rank, microseconds per call\n", sl_dtype_name(a->dtype), g_tp,
	       g_distinct ? "one GPU each" : "SHARED GPUs", device, a->iters, a->reps);
	if (!g_distinct)
		printf("ranks share GPUs: NCCL cannot run; the custom times below measure the GPU's "
		       "time slicing between contexts, not the kernels\n");
	printf("| bytes | one-shot | two-shot | push | NCCL | node picks | picked vs NCCL |\n");
	printf("|---|---|---|---|---|---|---|\n");
	for (int i = 0; i < n; i++) {
		const row *r = &rows[i];
		char nccl[32] = "-", vs[32] = "-";
		if (r->us[A_NCCL] >= 0) {
			snprintf(nccl, sizeof nccl, "%.1f", r->us[A_NCCL]);
			snprintf(vs, sizeof vs, "%.2fx", r->us[A_NCCL] / r->us[pick_col(r->choice)]);
		}
		printf("| %zu | %.1f | %.1f | %.1f | %s | %s | %s |\n", r->bytes, r->us[A_ONESHOT],
		       r->us[A_TWOSHOT], r->us[A_PUSH], nccl, algo_label(r->choice), vs);
	}
}

/* The size rule these times call for, beside the one the node uses
 * (parallel/allreduce.c's table), so each host can check the table:
 * one-shot while it beats two-shot at that size and every smaller one,
 * the custom kernels while the faster of them beats NCCL likewise. */
static void print_crossover(const row *rows, int n, const par_car_limits *node)
{
	size_t push = 0, one = 0, custom = 0;
	int ll_run = 1, one_run = 1, custom_run = g_distinct;
	for (int i = 0; i < n; i++) {
		const row *r = &rows[i];
		double best = r->us[A_ONESHOT] < r->us[A_TWOSHOT] ? r->us[A_ONESHOT]
								  : r->us[A_TWOSHOT];
		ll_run = ll_run && r->us[A_PUSH] <= best;
		if (ll_run)
			push = r->bytes;
		one_run = one_run && r->us[A_ONESHOT] <= r->us[A_TWOSHOT];
		if (one_run)
			one = r->bytes;
		best = best < r->us[A_PUSH] ? best : r->us[A_PUSH];
		custom_run = custom_run && best <= r->us[A_NCCL];
		if (custom_run)
			custom = r->bytes;
	}
	printf("measured rule: push up to %zu KiB (node: %zu KiB), one-shot up to %zu KiB (node: "
	       "%zu KiB)", push >> 10, node->push_max >> 10, one >> 10, node->oneshot_max >> 10);
	if (g_distinct)
		printf(", custom up to %zu KiB, NCCL above (node: %zu KiB)", custom >> 10,
		       node->custom_max >> 10);
	printf("\n");
	for (int i = 0; i < n && g_distinct; i++) {
		const row *r = &rows[i];
		int pick = pick_col(r->choice);
		if (r->us[pick] > r->us[A_NCCL])
			printf("node's pick slower than NCCL at %zu bytes: %s %.1f us, NCCL %.1f us\n",
			       r->bytes, algo_label(r->choice), r->us[pick], r->us[A_NCCL]);
	}
}

static int write_json(const char *path, const bench_args *a, const row *rows, int n,
		      const char *device)
{
	cJSON *j = cJSON_CreateObject(), *arr = cJSON_CreateArray();
	char date[32];
	time_t now = time(NULL);
	strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
	cJSON_AddStringToObject(j, "date", date);
	cJSON_AddStringToObject(j, "device", device);
	cJSON_AddNumberToObject(j, "tp", g_tp);
	cJSON_AddBoolToObject(j, "gpu_per_rank", g_distinct);
	if (!g_distinct)
		cJSON_AddStringToObject(j, "note", "ranks share GPUs: custom times measure context "
					"time slicing, not the kernels; no NCCL");
	cJSON_AddStringToObject(j, "dtype", sl_dtype_name(a->dtype));
	cJSON_AddNumberToObject(j, "iters", a->iters);
	cJSON_AddNumberToObject(j, "reps", a->reps);
	const par_car_limits *l = par_car_get_limits(g_car);
	cJSON_AddNumberToObject(j, "blocks", l->blocks);
	for (int i = 0; i < n; i++) {
		cJSON *r = cJSON_CreateObject();
		cJSON_AddNumberToObject(r, "bytes", (double)rows[i].bytes);
		cJSON_AddNumberToObject(r, "oneshot_us", rows[i].us[A_ONESHOT]);
		cJSON_AddNumberToObject(r, "twoshot_us", rows[i].us[A_TWOSHOT]);
		cJSON_AddNumberToObject(r, "push_us", rows[i].us[A_PUSH]);
		if (rows[i].us[A_NCCL] >= 0)
			cJSON_AddNumberToObject(r, "nccl_us", rows[i].us[A_NCCL]);
		else
			cJSON_AddNullToObject(r, "nccl_us");
		cJSON_AddStringToObject(r, "node_picks", algo_label(rows[i].choice));
		cJSON_AddItemToArray(arr, r);
	}
	cJSON_AddItemToObject(j, "sizes", arr);
	char *txt = cJSON_Print(j);
	cJSON_Delete(j);
	FILE *f = fopen(path, "w");
	int ok = f && txt && fputs(txt, f) >= 0;
	if (f)
		ok &= fclose(f) == 0;
	free(txt);
	return ok ? SL_OK : SL_EIO;
}

static int local_rank(void)
{
	MPI_Comm local;
	int r = 0;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &local);
	MPI_Comm_rank(local, &r);
	MPI_Comm_free(&local);
	return r;
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline-bench-allreduce"))
		return 0;
	char err[SL_ERRLEN] = "";
	bench_args a;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_tp);
	sl_log_set_role("bench", g_rank, g_tp);
	if (parse(argc, argv, &a, err, sizeof err) || g_tp < 2) {
		if (g_rank == 0)
			fprintf(stderr, "shardline-bench-allreduce: %s\n",
				err[0] ? err : "run under mpirun -np 2 or more");
		MPI_Finalize();
		return 1;
	}
	int n_dev = 0;
	CK(cudaGetDeviceCount(&n_dev));
	if (n_dev < 1)
		die("cudaGetDeviceCount", "no GPU");
	int dev = local_rank() % n_dev;
	CK(cudaSetDevice(dev));
	CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
	struct cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, dev));
	if (par_gpus_distinct(MPI_COMM_WORLD, &g_distinct, err, sizeof err))
		die("par_gpus_distinct", err);
	if (!g_distinct) {
		a.iters = a.iters_given ? a.iters : 10;
		a.reps = a.reps_given ? a.reps : 2;
	} else {
		ncclUniqueId id;
		if (g_rank == 0 && ncclGetUniqueId(&id) != ncclSuccess)
			die("ncclGetUniqueId", "failed");
		MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
		if (ncclCommInitRank(&g_nccl, g_tp, id, g_rank) != ncclSuccess)
			die("ncclCommInitRank", "failed");
	}
	par_car_limits lim, node_lim;
	par_car_default_limits(g_tp, &lim);
	par_car_default_limits(g_tp, &node_lim);
	lim.custom_max = a.max_bytes; /* one slot holds the largest message */
	lim.push_max = a.max_bytes;   /* and one push call */
	if (par_car_create(MPI_COMM_WORLD, g_stream, PAR_CAR_ON, &lim, &g_car, err, sizeof err))
		die("par_car_create", err);
	size_t es = sl_dtype_size(a.dtype);
	void *buf;
	CK(cudaMalloc(&buf, a.max_bytes));
	CK(cudaMemset(buf, 0, a.max_bytes));
	CK(cudaDeviceSynchronize());
	row rows[MAX_SIZES];
	int n = 0;
	for (size_t b = a.min_bytes; b <= a.max_bytes && n < MAX_SIZES; b *= 2, n++) {
		rows[n].bytes = b;
		rows[n].choice = par_car_choose(&node_lim, b);
		for (int al = 0; al < N_ALGOS; al++)
			rows[n].us[al] = al == A_NCCL && !g_distinct
					       ? -1
					       : time_calls(al, buf, b / es, a.dtype, a.iters, a.reps);
		if (g_rank == 0) {
			fprintf(stderr,
				"%zu bytes: one-shot %.1f us, two-shot %.1f us, push %.1f us, NCCL %.1f us\n",
				b, rows[n].us[A_ONESHOT], rows[n].us[A_TWOSHOT], rows[n].us[A_PUSH],
				rows[n].us[A_NCCL]);
		}
	}
	int rc = 0;
	if (g_rank == 0) {
		print_table(&a, rows, n, prop.name);
		print_crossover(rows, n, &node_lim);
		if (a.out && write_json(a.out, &a, rows, n, prop.name)) {
			fprintf(stderr, "shardline-bench-allreduce: cannot write %s\n", a.out);
			rc = 1;
		}
	}
	if (par_car_check(g_car, err, sizeof err))
		fprintf(stderr, "%s\n", err), rc = 1;
	cudaFree(buf);
	par_car_destroy(g_car);
	if (g_distinct)
		ncclCommDestroy(g_nccl);
	cudaStreamDestroy(g_stream);
	MPI_Finalize();
	return rc;
}
