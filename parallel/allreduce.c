/*
 * allreduce.c — host side of the custom all-reduce (allreduce.h): size
 * rules and their parsing (plain C, every build), and with CUDA the
 * group's set-up over MPI (capability checks, one exchange buffer per
 * rank exported and mapped with CUDA IPC), the calls that enqueue the
 * kernels of allreduce.cu, and the bounded tear-down.
 *
 * Owns, per rank: the exchange buffer (flags + two slots), the per-block
 * call counters, the mapped diagnostic record, the peers' mappings, and a
 * duplicate of the tp communicator. Called by comm_nccl.c, by
 * tests/gpu/test_allreduce.c and by bench/allreduce.c.
 */
#include "parallel/allreduce.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "kernels/epilogue.h"
#include "common/sl.h"

/* ---- size rules (host only) ---- */

/*
 * The size rule per tp size (issue 35, bench/allreduce.c on two and four
 * H200s joined by NVLink, µs per call in CUDA graphs, slowest rank):
 *  - tp 2: one-shot wins over two-shot at every size (two-shot reads as
 *    much from the one peer and synchronises twice); NCCL beats it at 8
 *    MiB, so the custom kernels stop at 4 MiB, the largest size measured
 *    where they won.
 *  - tp 4 (4 H200, 2026-11-28, bench/results/2026-11-28-nvidia-h200-x4-
 *    sharding/allreduce-tp4.log): one-shot best up to 512 KiB (9.5 µs,
 *    two-shot 13.1, NCCL 13.8), two-shot at 1 and 2 MiB (22.6 against
 *    NCCL's 26.1), NCCL from 4 MiB (39.2 against two-shot's 39.8); the
 *    issue's first reading (one-shot to 256 KiB, two-shot to 4 MiB) left 4
 *    MiB 1.5% slower than NCCL.
 *  - tp 8: not measured; one-shot reads 7 peers' whole messages, so it
 *    stops earlier (128 KiB), and two-shot at tp 4's 4 MiB.
 *  - The push one-shot (2026-11-30, two H200, bench/results/2026-11-30-
 *    nvidia-h200-x2-push-allreduce/call3): 2.8-3.6 us from 4 to 256 KiB,
 *    5.0 at 512 KiB, 7.0 at 1 MiB, 21.5 at 4 MiB, against the one-shot's
 *    4.2-4.9, 6.3, 9.1 and 26.2 (and NCCL's 31.9 at 4 MiB): push up to
 *    the custom kernels' 4 MiB at tp 2. At tp 4 and 8 it writes 3 and 7
 *    copies of the message and has not been measured (no four-GPU
 *    machine since): off there until bench/allreduce.c says where it wins
 *    (SL_CUSTOM_AR_PUSH_MAX turns it on).
 * These are bytes of one all-reduce; decode messages are n_tokens x dim
 * x 2 (13B batch 1: 10 KiB, batch 8: 80 KiB, batch 32: 320 KiB).
 */
static const struct {
	int tp;
	size_t push_max, oneshot_max, custom_max;
} k_car_table[] = {
	{2, (size_t)4 << 20, (size_t)4 << 20, (size_t)4 << 20},
	{4, 0, (size_t)512 << 10, (size_t)2 << 20},
	{8, 0, (size_t)128 << 10, (size_t)4 << 20},
};

void par_car_default_limits(int tp, par_car_limits *l)
{
	size_t n = sizeof k_car_table / sizeof k_car_table[0], i = 0;
	while (i + 1 < n && k_car_table[i].tp < tp)
		i++;
	l->push_max = k_car_table[i].push_max;
	l->oneshot_max = k_car_table[i].oneshot_max;
	l->custom_max = k_car_table[i].custom_max;
	l->blocks = PAR_CAR_BLOCKS_DEFAULT;
	l->block_bytes = PAR_CAR_BLOCK_BYTES_DEFAULT;
	l->fused = 1;
	/* two H200: 13B tp 2 batch 1 229-231 -> 238-240 tokens/s, 70B 52.7 ->
	 * 53.1-53.2 (bench/results/2026-11-29-nvidia-h200-x2-gemv-ll) */
	l->gemv = 1;
}

par_ar_algo par_car_choose(const par_car_limits *l, size_t bytes)
{
	if (bytes > l->custom_max)
		return PAR_AR_NCCL;
	if (bytes && bytes <= l->push_max)
		return PAR_AR_PUSH;
	return bytes <= l->oneshot_max ? PAR_AR_ONESHOT : PAR_AR_TWOSHOT;
}

size_t par_car_push_cap(const par_car_limits *l)
{
	size_t m = l->push_max < ((size_t)64 << 20) ? l->push_max : (size_t)64 << 20;
	m = (m + 15) & ~(size_t)15;
	return m < PAR_CAR_PUSH_MIN_CAP ? PAR_CAR_PUSH_MIN_CAP : m;
}

size_t par_car_slot_bytes(const par_car_limits *l)
{
	size_t s = (l->custom_max + 15) & ~(size_t)15;
	return s < ((size_t)64 << 10) ? (size_t)64 << 10 : s;
}

int par_car_blocks(const par_car_limits *l)
{
	return l->blocks >= 1 && l->blocks <= 64 ? l->blocks : PAR_CAR_BLOCKS_DEFAULT;
}

int par_car_active_blocks(const par_car_limits *l, size_t bytes)
{
	const int all = par_car_blocks(l);
	if (!l->block_bytes)
		return all;
	size_t n = (bytes + l->block_bytes - 1) / l->block_bytes;
	if (n < PAR_CAR_MIN_ACTIVE)
		n = PAR_CAR_MIN_ACTIVE;
	return n < (size_t)all ? (int)n : all;
}

int par_car_parse_mode(const char *what, const char *s, par_car_mode *mode, char *err,
		       size_t errlen)
{
	if (!strcmp(s, "0") || !strcmp(s, "off"))
		*mode = PAR_CAR_OFF;
	else if (!strcmp(s, "1") || !strcmp(s, "on"))
		*mode = PAR_CAR_ON;
	else if (!strcmp(s, "auto"))
		*mode = PAR_CAR_AUTO;
	else
		return sl_errf(err, errlen, SL_EINVAL, "%s: '%s' is not on, off or auto (or 1, 0)",
			       what, s);
	return SL_OK;
}

int par_car_parse_bytes(const char *what, const char *s, size_t *out, char *err, size_t errlen)
{
	char *end;
	errno = 0;
	if (!isdigit((unsigned char)s[0]))
		return sl_errf(err, errlen, SL_EINVAL, "%s: '%s' is not a byte count", what, s);
	unsigned long long v = strtoull(s, &end, 10);
	int shift = 0;
	switch (toupper((unsigned char)*end)) {
	case 'K': shift = 10, end++; break;
	case 'M': shift = 20, end++; break;
	case 'G': shift = 30, end++; break;
	}
	if (errno || *end || v > (1ull << 30) >> shift)
		return sl_errf(err, errlen, SL_EINVAL,
			       "%s: '%s' is not a byte count up to 1G (digits, optional K/M/G)", what,
			       s);
	*out = (size_t)(v << shift);
	return SL_OK;
}

int par_car_mode_from_env(par_car_mode flag, par_car_mode *mode, char *err, size_t errlen)
{
	const char *s = getenv("SL_CUSTOM_AR");
	*mode = flag;
	return s && *s ? par_car_parse_mode("SL_CUSTOM_AR", s, mode, err, errlen) : SL_OK;
}

int par_car_limits_from_env(int tp, par_car_limits *l, char *err, size_t errlen)
{
	par_car_default_limits(tp, l);
	const char *s;
	if ((s = getenv("SL_CUSTOM_AR_PUSH_MAX")) && *s) {
		int rc = par_car_parse_bytes("SL_CUSTOM_AR_PUSH_MAX", s, &l->push_max, err, errlen);
		if (rc)
			return rc;
	}
	if ((s = getenv("SL_CUSTOM_AR_ONESHOT_MAX")) && *s) {
		int rc = par_car_parse_bytes("SL_CUSTOM_AR_ONESHOT_MAX", s, &l->oneshot_max, err,
					     errlen);
		if (rc)
			return rc;
	}
	if ((s = getenv("SL_CUSTOM_AR_MAX")) && *s) {
		int rc = par_car_parse_bytes("SL_CUSTOM_AR_MAX", s, &l->custom_max, err, errlen);
		if (rc)
			return rc;
	}
	if ((s = getenv("SL_CUSTOM_AR_BLOCK_BYTES")) && *s) {
		int rc = par_car_parse_bytes("SL_CUSTOM_AR_BLOCK_BYTES", s, &l->block_bytes, err,
					     errlen);
		if (rc)
			return rc;
	}
	if ((s = getenv("SL_CUSTOM_AR_BLOCKS")) && *s) {
		long b;
		int rc = sl_parse_int("SL_CUSTOM_AR_BLOCKS", s, 1, 64, &b, err, errlen);
		if (rc)
			return rc;
		l->blocks = (int)b;
	}
	if ((s = getenv("SL_FUSED_AR")) && *s) {
		long f;
		int rc = sl_parse_int("SL_FUSED_AR", s, 0, 1, &f, err, errlen);
		if (rc)
			return rc;
		l->fused = (int)f;
	}
	if ((s = getenv("SL_GEMV_AR")) && *s) {
		long f;
		int rc = sl_parse_int("SL_GEMV_AR", s, 0, 1, &f, err, errlen);
		if (rc)
			return rc;
		l->gemv = (int)f;
	}
	return SL_OK;
}

#ifdef SL_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <time.h>

#include "parallel/allreduce_dev.h"
#include "common/checks.h"

#define BUS_ID_LEN 32

struct par_car {
	MPI_Comm comm;            /* duplicate of the tp communicator (tear-down barrier) */
	cudaStream_t stream;      /* not owned */
	int device;
	int shared_gpu;           /* some ranks share a GPU */
	par_car_limits lim;       /* rank 0's, as agreed */
	par_car_dev dev;          /* what the kernels see */
	void *base;               /* this rank's exchange buffer: flags | slot 0 | slot 1 |
				   * the GEMVs' area (kern_xchg, KERN_XCHG_BYTES) |
				   * the push area (allreduce_dev.h) */
	void *peer_base[CAR_MAX_RANKS]; /* peers' buffers mapped here; NULL for this rank */
	uint32_t *epoch;          /* [CAR_MAX_BLOCKS + KERN_XCHG_MAX_TILES + CAR_PUSH_BLOCKS]
				   * call counters: the kernels' blocks, the GEMV tiles'
				   * (kern_xchg), the push one-shot's blocks */
	par_car_diag *diag;       /* mapped host record of a timed-out wait */
};

/* Every rank's GPU as a PCI bus id, rank order: ids[tp][BUS_ID_LEN].
 * Collective: a rank that cannot read its id still takes part (with an
 * empty id) so no peer is left in the Allgather; every rank then fails. */
static int gather_bus_ids(MPI_Comm comm, char *ids, char *err, size_t errlen)
{
	int dev, n;
	char mine[BUS_ID_LEN] = "";
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetPCIBusId(mine, BUS_ID_LEN, dev) != cudaSuccess) {
		cudaGetLastError();
		mine[0] = 0;
	}
	if (MPI_Allgather(mine, BUS_ID_LEN, MPI_CHAR, ids, BUS_ID_LEN, MPI_CHAR, comm) !=
	    MPI_SUCCESS)
		return sl_errf(err, errlen, SL_ECOMM, "MPI_Allgather of GPU bus ids failed");
	MPI_Comm_size(comm, &n);
	for (int p = 0; p < n; p++)
		if (!ids[p * BUS_ID_LEN])
			return sl_errf(err, errlen, SL_EDEVICE, "rank %d cannot read its GPU's bus id",
				       p);
	return SL_OK;
}

int par_gpus_distinct(MPI_Comm comm, int *distinct, char *err, size_t errlen)
{
	int n;
	MPI_Comm_size(comm, &n);
	char *ids = calloc((size_t)n, BUS_ID_LEN);
	if (!ids)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	int rc = gather_bus_ids(comm, ids, err, errlen);
	*distinct = 1;
	for (int a = 0; !rc && a < n; a++)
		for (int b = a + 1; b < n; b++)
			if (!strcasecmp(ids + a * BUS_ID_LEN, ids + b * BUS_ID_LEN))
				*distinct = 0;
	free(ids);
	return rc;
}

/* Every rank learns whether all are ok; if not, the reason of the lowest
 * failing rank (each rank's `why` buffer is `n` bytes). Collective. */
static int agree(MPI_Comm comm, int rank, int ok, char *why, int n)
{
	struct {
		int ok, rank;
	} in = {ok ? 1 : 0, rank}, lo;
	if (MPI_Allreduce(&in, &lo, 1, MPI_2INT, MPI_MINLOC, comm) != MPI_SUCCESS) {
		snprintf(why, n, "MPI_Allreduce failed");
		return 0;
	}
	if (lo.ok)
		return 1;
	MPI_Bcast(why, n, MPI_CHAR, lo.rank, comm);
	why[n - 1] = 0;
	return 0;
}

/* Can this rank map every peer's memory? Peers on another GPU need peer
 * access to it (NVLink or PCIe); peers on this GPU need nothing. */
static int check_peers(const char *ids, int tp, int rank, int *shared, char *why, size_t n)
{
	int dev;
	if (cudaGetDevice(&dev) != cudaSuccess)
		return snprintf(why, n, "rank %d: no current CUDA device", rank), 0;
	*shared = 0;
	for (int p = 0; p < tp; p++) {
		const char *id = ids + p * BUS_ID_LEN;
		if (p == rank)
			continue;
		if (!strcasecmp(id, ids + rank * BUS_ID_LEN)) {
			*shared = 1;
			continue;
		}
		int pd, can = 0;
		if (cudaDeviceGetByPCIBusId(&pd, id) != cudaSuccess) {
			cudaGetLastError();
			snprintf(why, n, "rank %d: the GPU of rank %d (%s) is not visible here "
				 "(CUDA_VISIBLE_DEVICES?)", rank, p, id);
			return 0;
		}
		if (cudaDeviceCanAccessPeer(&can, dev, pd) != cudaSuccess || !can) {
			cudaGetLastError();
			snprintf(why, n, "rank %d: GPU %s has no peer access to GPU %s (rank %d)", rank,
				 ids + rank * BUS_ID_LEN, id, p);
			return 0;
		}
	}
	return 1;
}

/* Where the GEMVs' exchange area starts in a rank's buffer. */
static size_t car_xchg_offset(const par_car *c)
{
	return CAR_FLAGS_BYTES + 2 * c->dev.slot_bytes;
}

/* Where the push area starts; its size. */
static size_t car_push_offset(const par_car *c) { return car_xchg_offset(c) + KERN_XCHG_BYTES; }
static size_t car_push_bytes(const par_car *c)
{
	return 2 * (size_t)c->dev.tp * c->dev.push_region;
}

/* This rank's exchange buffer (flags zeroed, the push area empty),
 * counters and diagnostic record, and its IPC handle. Synchronises the
 * device so both are in place before any peer can learn the handle. */
static int alloc_local(par_car *c, cudaIpcMemHandle_t *h, char *why, size_t n)
{
	size_t bytes = car_push_offset(c) + car_push_bytes(c);
	size_t counters = (CAR_MAX_BLOCKS + KERN_XCHG_MAX_TILES + CAR_PUSH_BLOCKS) * 4;
	const char *step = NULL;
	cudaError_t e;
	if ((e = cudaMalloc(&c->base, bytes)))
		step = "cudaMalloc";
	else if ((e = cudaMemset(c->base, 0, bytes)))
		step = "cudaMemset";
	else if ((e = (cudaError_t)par_car_push_empty((char *)c->base + car_push_offset(c),
							   car_push_bytes(c) / 4)))
		step = "emptying the push area";
	else if ((e = cudaMalloc((void **)&c->epoch, counters)))
		step = "cudaMalloc (call counters)";
	else if ((e = cudaMemset(c->epoch, 0, counters)))
		step = "cudaMemset (call counters)";
	else if ((e = cudaHostAlloc((void **)&c->diag, sizeof *c->diag, cudaHostAllocMapped)))
		step = "cudaHostAlloc (diagnostics)";
	else if ((e = cudaHostGetDevicePointer((void **)&c->dev.diag, (void *)c->diag, 0)))
		step = "cudaHostGetDevicePointer";
	else if ((e = cudaIpcGetMemHandle(h, c->base)))
		step = "cudaIpcGetMemHandle";
	else if ((e = cudaDeviceSynchronize()))
		step = "cudaDeviceSynchronize";
	if (step) {
		cudaGetLastError();
		snprintf(why, n, "rank %d: exchange buffer of %zu bytes: %s: %s", c->dev.rank, bytes,
			 step, cudaGetErrorString(e));
		return 0;
	}
	memset((void *)c->diag, 0, sizeof *c->diag);
	return 1;
}

/* Map every peer's buffer; lazily enabled peer access for other GPUs. */
static int map_peers(par_car *c, const cudaIpcMemHandle_t *h, char *why, size_t n)
{
	for (int p = 0; p < c->dev.tp; p++) {
		if (p == c->dev.rank)
			continue;
		cudaError_t e = cudaIpcOpenMemHandle(&c->peer_base[p], h[p],
						     cudaIpcMemLazyEnablePeerAccess);
		if (e != cudaSuccess) {
			cudaGetLastError();
			c->peer_base[p] = NULL;
			snprintf(why, n, "rank %d: cannot map rank %d's buffer with CUDA IPC: %s",
				 c->dev.rank, p, cudaGetErrorString(e));
			return 0;
		}
	}
	for (int p = 0; p < c->dev.tp; p++) {
		char *b = p == c->dev.rank ? c->base : c->peer_base[p];
		c->dev.flags[p] = (uint32_t *)b;
		c->dev.data[p] = b + CAR_FLAGS_BYTES;
		c->dev.push[p] = b + car_push_offset(c);
	}
	c->dev.epoch = c->epoch;
	c->dev.push_epoch = c->epoch + CAR_MAX_BLOCKS + KERN_XCHG_MAX_TILES;
	return 1;
}

/* Frees what this rank holds; no tear-down barrier (see par_car_destroy). */
static void release(par_car *c)
{
	for (int p = 0; p < CAR_MAX_RANKS; p++)
		if (c->peer_base[p])
			cudaIpcCloseMemHandle(c->peer_base[p]);
	if (c->base)
		cudaFree(c->base);
	if (c->epoch)
		cudaFree(c->epoch);
	if (c->diag)
		cudaFreeHost((void *)c->diag);
	cudaGetLastError();
	if (c->comm != MPI_COMM_NULL)
		MPI_Comm_free(&c->comm);
	free(c);
}

/* The group's agreed mode and limits: rank 0's. */
typedef struct car_cfg {
	int mode;
	par_car_limits lim;
} car_cfg;

/* The checks and set-up every rank runs in step; 1 when the group is ready. */
static int setup(par_car *c, MPI_Comm comm, char *why, int n)
{
	int rank = c->dev.rank, tp = c->dev.tp, ok, shared = 0, host_size = 0;
	if (tp < 2 || tp > CAR_MAX_RANKS) {
		snprintf(why, n, "tp %d: the custom all-reduce serves 2 to %d ranks", tp,
			 CAR_MAX_RANKS);
		return 0;
	}
	MPI_Comm host = MPI_COMM_NULL;
	ok = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host) ==
	     MPI_SUCCESS;
	if (ok)
		MPI_Comm_size(host, &host_size);
	if (host != MPI_COMM_NULL)
		MPI_Comm_free(&host);
	if (!ok || host_size != tp)
		snprintf(why, n, "rank %d: the tp group spans hosts (%d of %d ranks here)", rank,
			 host_size, tp), ok = 0;
	if (!agree(comm, rank, ok, why, n))
		return 0;
	char ids[CAR_MAX_RANKS * BUS_ID_LEN];
	if (gather_bus_ids(comm, ids, why, n))
		ok = 0;
	else
		ok = check_peers(ids, tp, rank, &shared, why, n);
	if (!agree(comm, rank, ok, why, n))
		return 0;
	MPI_Allreduce(MPI_IN_PLACE, &shared, 1, MPI_INT, MPI_MAX, comm);
	c->shared_gpu = shared;
	cudaIpcMemHandle_t h[CAR_MAX_RANKS];
	ok = alloc_local(c, &h[rank], why, n);
	if (!agree(comm, rank, ok, why, n))
		return 0;
	if (MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, sizeof h[0], MPI_BYTE, comm) !=
	    MPI_SUCCESS)
		ok = 0, snprintf(why, n, "rank %d: MPI_Allgather of IPC handles failed", rank);
	if (ok)
		ok = map_peers(c, h, why, n);
	return agree(comm, rank, ok, why, n);
}

int par_car_create(MPI_Comm comm, void *stream, par_car_mode mode, const par_car_limits *limits,
		   par_car **out, char *err, size_t errlen)
{
	int rank, tp;
	char why[SL_ERRLEN] = "";
	*out = NULL;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &tp);
	car_cfg cfg = {.mode = mode};
	if (limits)
		cfg.lim = *limits;
	else
		par_car_default_limits(tp, &cfg.lim);
	MPI_TRY(MPI_Bcast(&cfg, sizeof cfg, MPI_BYTE, 0, comm));
	if (cfg.mode == PAR_CAR_OFF)
		return sl_errf(err, errlen, SL_OK, "custom all-reduce off");
	par_car *c = calloc(1, sizeof *c);
	int ok = c != NULL;
	if (!ok)
		snprintf(why, sizeof why, "rank %d: out of memory", rank);
	if (!agree(comm, rank, ok, why, sizeof why)) {
		free(c);
		goto refused;
	}
	c->comm = MPI_COMM_NULL;
	c->stream = (cudaStream_t)stream;
	cudaGetDevice(&c->device);
	c->lim = cfg.lim;
	c->lim.blocks = par_car_blocks(&cfg.lim);
	c->dev.rank = rank, c->dev.tp = tp;
	c->dev.blocks = c->lim.blocks;
	c->dev.slot_bytes = par_car_slot_bytes(&cfg.lim);
	c->dev.push_region = par_car_push_cap(&cfg.lim);
	if (!setup(c, comm, why, sizeof why)) {
		release(c);
		goto refused;
	}
	if (MPI_Comm_dup(comm, &c->comm) != MPI_SUCCESS) {
		c->comm = MPI_COMM_NULL;
		release(c);
		return sl_errf(err, errlen, SL_ECOMM, "MPI_Comm_dup failed");
	}
	*out = c;
	return SL_OK;
refused:
	if (cfg.mode == PAR_CAR_ON)
		return sl_errf(err, errlen, SL_ENOTSUP, "custom all-reduce required but unusable: %s",
			       why);
	return sl_errf(err, errlen, SL_OK, "custom all-reduce unusable: %s", why);
}

/* Wait up to 5 s for every rank to arrive: a peer may still be reading
 * this rank's buffer in its last kernel. Bounded because a failing rank
 * may never come, and leaving must not hang on it. */
static int bounded_barrier(MPI_Comm comm)
{
	int fin = 0, done = 0;
	MPI_Finalized(&fin);
	if (fin || comm == MPI_COMM_NULL)
		return 0;
	MPI_Request req;
	if (MPI_Ibarrier(comm, &req) != MPI_SUCCESS)
		return 0;
	struct timespec ms = {0, 1000000};
	for (int i = 0; i < 5000 && !done; i++) {
		MPI_Test(&req, &done, MPI_STATUS_IGNORE);
		if (!done)
			nanosleep(&ms, NULL);
	}
	return done;
}

void par_car_destroy(par_car *c)
{
	if (!c)
		return;
	char why[SL_ERRLEN];
	if (par_car_check(c, why, sizeof why))
		SL_ERROR("comm", "%s", why);
	cudaSetDevice(c->device);
	cudaDeviceSynchronize(); /* our kernels are done (the stream may be gone already) */
	cudaGetLastError();
	if (!bounded_barrier(c->comm)) {
		SL_WARN("comm", "custom all-reduce: peers did not reach tear-down within 5 s");
		c->comm = MPI_COMM_NULL; /* a pending collective: leave the communicator be */
	}
	release(c);
}

const par_car_limits *par_car_get_limits(const par_car *c) { return &c->lim; }
int par_car_shared_gpu(const par_car *c) { return c->shared_gpu; }

/* The algorithm of one piece of n bytes: the forced one, or by size
 * within the custom kernels (the caller routes NCCL sizes elsewhere). */
static par_ar_algo car_piece_algo(const par_car *c, par_ar_algo algo, size_t bytes)
{
	if (algo == PAR_AR_PUSH || algo == PAR_AR_ONESHOT || algo == PAR_AR_TWOSHOT)
		return algo;
	par_car_limits l = c->lim;
	l.custom_max = (size_t)-1;
	return par_car_choose(&l, bytes);
}

int par_car_allreduce(par_car *c, void *buf, size_t count, sl_dtype dt, par_ar_algo algo)
{
	size_t es = sl_dtype_size(dt);
	size_t cap = (algo == PAR_AR_PUSH ? c->dev.push_region : c->dev.slot_bytes) / es;
	for (size_t off = 0; off < count; off += cap) {
		size_t n = count - off < cap ? count - off : cap;
		par_ar_algo a = car_piece_algo(c, algo, n * es);
		int kind = a == PAR_AR_PUSH ? CAR_PUSH : a == PAR_AR_TWOSHOT ? CAR_TWOSHOT : CAR_ONESHOT;
		TRY(par_car_launch_allreduce(&c->dev, par_car_active_blocks(&c->lim, n * es),
					     (char *)buf + off * es, n, dt, kind, c->stream));
	}
	return SL_OK;
}

int par_car_prenorm_parts(const par_car *c) { return c->dev.blocks; }

int par_car_gemv_xchg(const par_car *c, kern_xchg *x)
{
	if (!c->lim.gemv || !c->lim.fused)
		return SL_ENOTSUP;
	memset(x, 0, sizeof *x);
	for (int p = 0; p < c->dev.tp; p++)
		x->area[p] = (char *)(p == c->dev.rank ? c->base : c->peer_base[p]) +
			     car_xchg_offset(c);
	x->epoch = c->epoch + CAR_MAX_BLOCKS;
	x->diag = c->dev.diag;
	x->rank = c->dev.rank, x->tp = c->dev.tp;
	return SL_OK;
}

int par_car_allreduce_add_prenorm(par_car *c, const void *part, float *x, const void *w,
				  void *out, float *sumsq, int n, int dim, sl_dtype dt)
{
	/* the slot holds each row as whole 16-byte packs */
	size_t bytes = (size_t)(n > 0 ? n : 0) * (((size_t)(dim > 0 ? dim : 0) + 7) / 8) * 16;
	if ((dt != SL_DT_F16 && dt != SL_DT_BF16) || dim <= 0 || !w || !out || !sumsq ||
	    !kern_pre_fits(n, c->dev.blocks) || bytes > c->dev.slot_bytes)
		return SL_ENOTSUP;
	return par_car_launch_add_prenorm(&c->dev, par_car_active_blocks(&c->lim, bytes), part, x,
					  w, out, sumsq, n, dim, dt, c->stream);
}

int par_car_allreduce_add_norm(par_car *c, const void *part, float *x, const void *w, void *out,
			       int n, int dim, float eps, sl_dtype dt)
{
	size_t bytes = (size_t)(n > 0 ? n : 0) * (size_t)(dim > 0 ? dim : 0) * 2;
	int aligned = !((uintptr_t)part % 16 || (uintptr_t)x % 16 || (uintptr_t)w % 16 ||
			(uintptr_t)out % 16);
	if ((dt != SL_DT_F16 && dt != SL_DT_BF16) || n < 1 || dim < 8 || dim % 8 || !w || !out ||
	    !aligned || bytes > c->dev.push_region)
		return SL_ENOTSUP;
	return par_car_launch_push_add_norm(&c->dev, part, x, w, out, n, dim, eps, dt, c->stream);
}

int par_car_allgather(par_car *c, const void *send, void *recv, size_t count, sl_dtype dt)
{
	size_t es = sl_dtype_size(dt), cap = c->dev.slot_bytes / es;
	for (size_t off = 0; off < count; off += cap) {
		size_t n = count - off < cap ? count - off : cap;
		int active = par_car_active_blocks(&c->lim, n * es * c->dev.tp);
		TRY(par_car_launch_allgather(&c->dev, active, (const char *)send + off * es,
					     (char *)recv + off * es, n, count, es, c->stream));
	}
	return SL_OK;
}

int par_car_check(const par_car *c, char *err, size_t errlen)
{
	const par_car_diag *d = c->diag;
	if (!d || !d->fired)
		return SL_OK;
	return sl_errf(err, errlen, SL_EDEVICE,
		       "custom all-reduce: rank %u block %u waited %.0f s for rank %u (flag %u, "
		       "wanted %u) and trapped: the ranks did not run the same all-reduces",
		       d->rank, d->block, CAR_TIMEOUT_NS / 1e9, d->peer, d->seen, d->want);
}
#endif
