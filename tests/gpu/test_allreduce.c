/*
 * test_allreduce.c — the custom all-reduce (parallel/allreduce.{c,cu}) on
 * the GPU host, as an MPI program: tests/gpu_allreduce.sh runs it with
 * mpirun -np 2 (and 4, 8), one GPU per local rank, or every rank on GPU 0
 * when the host has fewer GPUs than ranks (CUDA IPC works between
 * processes on one GPU; their contexts then take turns, so it is slow).
 *
 * Every input element is a function of (rank, seed, index), so every
 * rank computes the exact expected sum on the host: fp32 adds in rank
 * order, one rounding to the dtype, as the kernels promise. Results must
 * match it bit for bit (so all ranks agree bit for bit too), with the
 * bytes around each buffer untouched (guards). Covered: f32, f16, bf16;
 * 1 element to 16 MiB, odd counts, misaligned buffers; one-shot, two-shot,
 * the push one-shot (forced, and by the size rule; beyond its area in pieces)
 * and the size rule; a small-slot group (chunking, 3 blocks) alive
 * beside the default one; a burst of calls with rank skew and no host
 * synchronisation between them (the double-buffered slots and flags); a
 * CUDA graph of several all-reduces replayed with new inputs, eager calls
 * in between (epochs advanced by the kernels); the all-gather. When every
 * rank has its own GPU, the results are also compared with NCCL's
 * (within its rounding: NCCL rounds partial sums to the dtype on the way).
 *
 * The all-reduce fused with the residual add of a pending norm
 * (par_car_allreduce_add_prenorm), f16 and bf16, 1 and 2 tokens of widths
 * 1 to 8192 (odd and unaligned ones on the scalar loads), both groups
 * (the small one: 3 blocks, so 3 parts): the residual and out = x * w
 * bit-exact against the host (x + the rank-order sum rounded to the
 * dtype, then x * w rounded), the parts of the sums of squares summed
 * within SUMSQ_REL_TOL of the host's double sum, every rank's parts the
 * same bits; outputs poisoned before (the parts with NaN), the partial
 * sums untouched; calls it refuses refused by every rank with nothing
 * written; a graph replaying it with eager calls between.
 *
 * The push one-shot fused with the residual add and the whole RMSNorm
 * (par_car_allreduce_add_norm), f16 and bf16, 3 to 300 rows (more rows
 * than blocks) of widths 64 to 8192: x bit-exact against the host, out
 * (poisoned before) within 2 ulps of a double-precision norm and the
 * same bits on every rank, part untouched; refusals agreed by every rank.
 *
 * The all-reduce inside the row-parallel GEMV (KERN_EPI_ALLREDUCE_ADD):
 * 13B and 70B o/down slices at tp 2 and 4 and smaller ones, f16 and bf16,
 * 1 and 2 tokens, three calls back to back, against the GEMV followed by
 * the fused all-reduce above (bit for bit) or the host; 3 tokens refused.
 *
 * On sm_90 and later the burst, the graphs and the fused add run a second
 * time with programmatic dependent launch on (as the CUDA backend runs
 * them), and one more group puts a dependent writer before each call: a
 * kernel that lets the all-reduce launch at once and writes its input
 * 20 us later (kern_pdl_probe_copy), another copying the output after it;
 * a call that read its input or published its output without waiting
 * for its neighbours reads poison.
 *
 * Rank 0 prints one line per group and "N passed, N failed".
 * --quick: fewer sizes (for 4 and 8 ranks sharing one GPU).
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/matmul.h"
#include "kernels/pdl.h"
#include "parallel/allreduce.h"
#include "common/dtype.h"
#include "common/rng.h"
#include "common/sl.h"

#define GUARD 64        /* bytes before and after every buffer */
#define GUARD_BYTE 0xA5

static int g_rank, g_tp, g_quick, g_distinct;
static int g_pass, g_fail;
static cudaStream_t g_stream;
static ncclComm_t g_nccl;
static par_car *g_car, *g_small; /* default limits (GEMV all-reduce on); 64 KiB slots, 3 blocks */

static const sl_dtype k_dts[] = {SL_DT_F32, SL_DT_F16, SL_DT_BF16};
static const char *dt_name(sl_dtype dt)
{
	return dt == SL_DT_F32 ? "f32" : dt == SL_DT_F16 ? "f16" : "bf16";
}
static const char *algo_name(par_ar_algo a)
{
	return a == PAR_AR_ONESHOT ? "one-shot" : a == PAR_AR_TWOSHOT ? "two-shot"
		 : a == PAR_AR_PUSH		? "push"
						: "auto";
}

/* A CUDA or library failure in the test itself: nothing after it can be
 * trusted (a trapped kernel kills the context), so the job stops. */
static void fatal(const char *what, const char *why)
{
	char diag[SL_ERRLEN] = "";
	if (g_car && par_car_check(g_car, diag, sizeof diag))
		printf("rank %d: %s\n", g_rank, diag);
	if (g_small && par_car_check(g_small, diag, sizeof diag))
		printf("rank %d: %s\n", g_rank, diag);
	printf("rank %d: FATAL %s: %s\n", g_rank, what, why);
	fflush(stdout);
	MPI_Abort(MPI_COMM_WORLD, 2);
}

#define CK(call)                                                                  \
	do {                                                                      \
		cudaError_t e_ = (call);                                          \
		if (e_ != cudaSuccess)                                            \
			fatal(#call, cudaGetErrorString(e_));                     \
	} while (0)
#define CK_SL(call)                                                               \
	do {                                                                      \
		int rc_ = (call);                                                 \
		if (rc_) {                                                        \
			char m_[32];                                              \
			snprintf(m_, sizeof m_, "returned %d", rc_);              \
			fatal(#call, m_);                                         \
		}                                                                 \
	} while (0)

/* ---- deterministic inputs and exact expectations ---- */

/* Rank r's element i of case `seed`, in [-1, 1) and not near 0, as the
 * dtype stores it (returned in fp32, exactly representable in dt). */
static float input_value(int r, uint64_t seed, size_t i, sl_dtype dt)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)(r + 1) * 0xD1B54A32D192ED03ull ^
		     (uint64_t)i * 0x8CB92BA72F3D8DD7ull;
	float v = 2.0f * sl_rng_unit(&s) - 1.0f;
	if (fabsf(v) < 1e-3f)
		v = v < 0 ? -0.5f : 0.5f;
	if (dt == SL_DT_F16)
		return sl_f16_to_f32(sl_f32_to_f16(v));
	if (dt == SL_DT_BF16)
		return sl_bf16_to_f32(sl_f32_to_bf16(v));
	return v;
}

static void store_elem(void *dst, size_t i, float v, sl_dtype dt)
{
	if (dt == SL_DT_F32)
		((float *)dst)[i] = v;
	else if (dt == SL_DT_F16)
		((uint16_t *)dst)[i] = sl_f32_to_f16(v);
	else
		((uint16_t *)dst)[i] = sl_f32_to_bf16(v);
}

static float load_elem(const void *src, size_t i, sl_dtype dt)
{
	if (dt == SL_DT_F32)
		return ((const float *)src)[i];
	uint16_t h = ((const uint16_t *)src)[i];
	return dt == SL_DT_F16 ? sl_f16_to_f32(h) : sl_bf16_to_f32(h);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		fatal("malloc", "out of memory");
	return p;
}

/* Rank r's inputs, stored in dt. */
static void make_input(void *dst, int r, uint64_t seed, size_t count, sl_dtype dt)
{
	for (size_t i = 0; i < count; i++)
		store_elem(dst, i, input_value(r, seed, i, dt), dt);
}

/* The promised result: fp32 sum in rank order, rounded once to dt. */
static void make_expected(void *dst, uint64_t seed, size_t count, sl_dtype dt)
{
	for (size_t i = 0; i < count; i++) {
		volatile float acc = input_value(0, seed, i, dt);
		for (int p = 1; p < g_tp; p++)
			acc += input_value(p, seed, i, dt);
		store_elem(dst, i, acc, dt);
	}
}

/* Bit-exact comparison; prints the first difference. 1 when equal. */
static int same_bits(const char *what, const void *got, const void *want, size_t count,
		     sl_dtype dt)
{
	size_t es = sl_dtype_size(dt);
	for (size_t i = 0; i < count; i++) {
		if (memcmp((const char *)got + i * es, (const char *)want + i * es, es)) {
			unsigned g = 0, w = 0;
			memcpy(&g, (const char *)got + i * es, es);
			memcpy(&w, (const char *)want + i * es, es);
			printf("rank %d: FAIL %s: element %zu of %zu got %.9g (0x%x) want %.9g (0x%x), "
			       "bit-exact expected\n", g_rank, what, i, count, load_elem(got, i, dt), g,
			       load_elem(want, i, dt), w);
			return 0;
		}
	}
	return 1;
}

static int guards_intact(const char *what, const unsigned char *p, size_t n, const char *where)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != GUARD_BYTE) {
			printf("rank %d: FAIL %s: guard byte %zu %s the buffer overwritten (0x%02x)\n",
			       g_rank, what, i, where, p[i]);
			return 0;
		}
	return 1;
}

/* ---- bookkeeping: a case passes when it passed on every rank ---- */

typedef struct group {
	char name[96];
	int cases, failed;
	double t0;
} group;

static void group_begin(group *g, const char *fmt, const char *a, const char *b)
{
	snprintf(g->name, sizeof g->name, fmt, a, b);
	g->cases = g->failed = 0;
	g->t0 = MPI_Wtime();
}

static void group_case(group *g, int ok)
{
	int all = 0;
	MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	g->cases++;
	g->failed += !all;
	all ? g_pass++ : g_fail++;
}

static void group_end(group *g)
{
	if (g_rank == 0)
		printf("%s: %d cases, %d failed (%.1f s)\n", g->name, g->cases, g->failed,
		       MPI_Wtime() - g->t0);
	fflush(stdout);
}

/* ---- one all-reduce, checked ---- */

/* Device buffer with guards: [GUARD][pad * es][count * es][GUARD]. */
typedef struct dbuf {
	unsigned char *base;  /* device */
	void *data;           /* device, base + GUARD + pad */
	size_t bytes, pre;    /* whole allocation; bytes before data */
} dbuf;

static void dbuf_make(dbuf *b, size_t count, size_t pad, sl_dtype dt)
{
	size_t es = sl_dtype_size(dt);
	b->pre = GUARD + pad * es;
	b->bytes = b->pre + count * es + GUARD;
	CK(cudaMalloc((void **)&b->base, b->bytes));
	CK(cudaMemset(b->base, GUARD_BYTE, b->bytes));
	CK(cudaDeviceSynchronize()); /* the memset is not ordered with g_stream */
	b->data = b->base + b->pre;
}

static void dbuf_free(dbuf *b) { CK(cudaFree(b->base)); }

/* Download the whole allocation and check guards and data. */
static int dbuf_check(const char *what, const dbuf *b, const void *want, size_t count,
		      sl_dtype dt)
{
	unsigned char *h = xmalloc(b->bytes);
	CK(cudaMemcpy(h, b->base, b->bytes, cudaMemcpyDeviceToHost));
	size_t data_bytes = count * sl_dtype_size(dt);
	int ok = guards_intact(what, h, b->pre, "before") &&
		 guards_intact(what, h + b->pre + data_bytes, GUARD, "after") &&
		 same_bits(what, h + b->pre, want, count, dt);
	free(h);
	return ok;
}

/* Upload `in` (count elements at pad past a 16-byte boundary), all-reduce
 * it with algo on every rank at once and check the result against `want`
 * and the guards around it; 1 when all hold. */
static int reduce_and_check(par_car *car, const char *what, const void *in, const void *want,
			    size_t count, size_t pad, sl_dtype dt, par_ar_algo algo)
{
	dbuf b;
	dbuf_make(&b, count, pad, dt);
	CK(cudaMemcpy(b.data, in, count * sl_dtype_size(dt), cudaMemcpyHostToDevice));
	/* a pageable host-to-device cudaMemcpy may return before its DMA lands,
	 * and g_stream does not wait for the legacy stream: wait here */
	CK(cudaDeviceSynchronize());
	/* launch together: the kernel spins on the GPU until its peers'
	 * arrive (and gives up after 20 s); the host work before it takes
	 * up to a second for the largest cases */
	MPI_Barrier(MPI_COMM_WORLD);
	CK_SL(par_car_allreduce(car, b.data, count, dt, algo));
	CK(cudaStreamSynchronize(g_stream));
	int ok = dbuf_check(what, &b, want, count, dt);
	dbuf_free(&b);
	return ok;
}

/* All-reduce `count` elements at `pad` elements past a 16-byte boundary;
 * 1 when the result is the exact expected sum and nothing else changed. */
static int check_allreduce(par_car *car, const char *cname, sl_dtype dt, size_t count,
			   par_ar_algo algo, size_t pad, uint64_t seed)
{
	size_t es = sl_dtype_size(dt);
	char what[160];
	snprintf(what, sizeof what, "%s %s %s count %zu pad %zu seed %llu", cname, dt_name(dt),
		 algo_name(algo), count, pad, (unsigned long long)seed);
	void *in = xmalloc(count * es), *want = xmalloc(count * es);
	make_input(in, g_rank, seed, count, dt);
	make_expected(want, seed, count, dt);
	int ok = reduce_and_check(car, what, in, want, count, pad, dt, algo);
	free(in), free(want);
	return ok;
}

/* Byte sizes of the sweep, as element counts of dt, odd ones included. */
static int sweep_counts(sl_dtype dt, int big, size_t *out)
{
	static const size_t elems[] = {1, 2, 3, 7, 8, 9, 15, 17, 31, 33, 127, 255, 1000, 4097, 65537};
	static const size_t quick_elems[] = {1, 3, 9, 33, 1000, 4097};
	static const size_t bytes[] = {8 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20,
				       8 << 20};
	size_t es = sl_dtype_size(dt);
	int n = 0;
	if (g_quick) {
		for (int i = 0; i < 6; i++)
			out[n++] = quick_elems[i];
		out[n++] = (16 << 10) / es;
		out[n++] = (256 << 10) / es + 1;
		out[n++] = (1 << 20) / es;
		return n;
	}
	for (int i = 0; i < 15; i++)
		out[n++] = elems[i];
	for (int i = 0; i < 7; i++) {
		if (!big && bytes[i] > (1 << 20))
			break;
		out[n++] = bytes[i] / es;
		out[n++] = bytes[i] / es - 3;
	}
	if (big)
		out[n++] = (16 << 20) / es + 5; /* beyond one slot: two calls and a tail */
	return n;
}

static void test_sweep(par_car *car, const char *cname, int big)
{
	static const par_ar_algo algos[] = {PAR_AR_ONESHOT, PAR_AR_TWOSHOT, PAR_AR_AUTO, PAR_AR_PUSH};
	size_t counts[40];
	for (int d = 0; d < 3; d++) {
		sl_dtype dt = k_dts[d];
		int n = sweep_counts(dt, big, counts);
		for (int a = 0; a < 4; a++) {
			group g;
			char label[64];
			snprintf(label, sizeof label, "%s %s", dt_name(dt), algo_name(algos[a]));
			group_begin(&g, "allreduce %s, %s group", label, cname);
			for (int i = 0; i < n; i++) {
				uint64_t seed = 1000 * d + 100 * a + i;
				group_case(&g, check_allreduce(car, cname, dt, counts[i], algos[a], 0, seed));
				/* misaligned: small odd counts and one large */
				if (counts[i] % 2 && (counts[i] < 100000 || i == n - 1))
					group_case(&g, check_allreduce(car, cname, dt, counts[i], algos[a],
								       1, seed + 7));
			}
			group_end(&g);
		}
	}
}

/* ---- the push one-shot's empty word as an input ---- */

/* Every rank sends the 32-bit pattern the push area uses for "empty"
 * (two -0.0 halves; an fp32 denormal): it is summed as +0.0, +0.0 (2-byte
 * types) or -0.0 (fp32) on every rank alike, and the call completes. */
static int check_push_empty(sl_dtype dt)
{
	const size_t count = 4099, es = sl_dtype_size(dt), words = count * es / 4;
	char what[64];
	snprintf(what, sizeof what, "push one-shot, %s inputs of the empty word", dt_name(dt));
	uint32_t *in = xmalloc(count * es), *want = xmalloc(count * es);
	for (size_t i = 0; i < words; i++) {
		in[i] = 0x80008000u;
		want[i] = es == 2 ? 0u : 0x80000000u;
	}
	/* the odd tail half (2-byte types): -0.0 with a +0.0 beside it in its
	 * word's padding, so it goes as it is and sums to -0.0 */
	if (es == 2) {
		((uint16_t *)in)[count - 1] = 0x8000;
		((uint16_t *)want)[count - 1] = 0x8000;
	}
	int ok = reduce_and_check(g_car, what, in, want, count, 0, dt, PAR_AR_PUSH);
	free(in), free(want);
	return ok;
}

static void test_push_empty(void)
{
	group g;
	group_begin(&g, "push one-shot: %s%s", "the empty word as every rank's input", "");
	for (int d = 0; d < 3; d++)
		group_case(&g, check_push_empty(k_dts[d]));
	group_end(&g);
}

/* ---- burst: many calls in flight, ranks skewed, one sync at the end ---- */

static void test_burst(void)
{
	enum { K = 40 };
	static const size_t counts[] = {5120, 3, 65536, 40961, 1, 163840, 777};
	group g;
	group_begin(&g, "burst: %s calls in flight, rank skew%s", "40", "");
	dbuf b[K];
	void *want[K];
	size_t cnt[K];
	sl_dtype dts[K];
	par_car *cars[K];
	par_ar_algo al[K];
	for (int k = 0; k < K; k++) {
		dts[k] = k_dts[k % 3];
		cnt[k] = counts[k % 7];
		cars[k] = k % 5 == 4 ? g_small : g_car;
		static const par_ar_algo rot[] = {PAR_AR_ONESHOT, PAR_AR_TWOSHOT, PAR_AR_AUTO,
						  PAR_AR_PUSH};
		al[k] = rot[k % 4];
		size_t es = sl_dtype_size(dts[k]);
		void *in = xmalloc(cnt[k] * es);
		want[k] = xmalloc(cnt[k] * es);
		make_input(in, g_rank, 50000 + k, cnt[k], dts[k]);
		make_expected(want[k], 50000 + k, cnt[k], dts[k]);
		dbuf_make(&b[k], cnt[k], k % 3 == 2, dts[k]);
		CK(cudaMemcpy(b[k].data, in, cnt[k] * es, cudaMemcpyHostToDevice));
		free(in);
	}
	CK(cudaDeviceSynchronize());
	MPI_Barrier(MPI_COMM_WORLD);
	for (int k = 0; k < K; k++) {
		if (k % 8 == g_rank % 8) /* a different rank falls behind now and then */
			usleep(3000);
		CK_SL(par_car_allreduce(cars[k], b[k].data, cnt[k], dts[k], al[k]));
	}
	CK(cudaStreamSynchronize(g_stream));
	for (int k = 0; k < K; k++) {
		char what[96];
		snprintf(what, sizeof what, "burst call %d (%s %s, count %zu)", k, dt_name(dts[k]),
			 algo_name(al[k]), cnt[k]);
		group_case(&g, dbuf_check(what, &b[k], want[k], cnt[k], dts[k]));
		dbuf_free(&b[k]);
		free(want[k]);
	}
	group_end(&g);
}

/* ---- a captured graph replayed with new inputs ---- */

typedef struct graph_buf {
	sl_dtype dt;
	size_t count;
	par_ar_algo algo;
	par_car *car;
	void *host;  /* pinned: the graph copies it up */
	dbuf dev;
} graph_buf;

static void graph_fill(graph_buf *gb, uint64_t seed)
{
	make_input(gb->host, g_rank, seed, gb->count, gb->dt);
}

static int graph_check(graph_buf *gb, uint64_t seed, int rep, int j)
{
	void *want = xmalloc(gb->count * sl_dtype_size(gb->dt));
	char what[96];
	make_expected(want, seed, gb->count, gb->dt);
	snprintf(what, sizeof what, "graph replay %d, all-reduce %d (%s %s)", rep, j,
		 dt_name(gb->dt), algo_name(gb->algo));
	int ok = dbuf_check(what, &gb->dev, want, gb->count, gb->dt);
	free(want);
	return ok;
}

static void test_graph(void)
{
	enum { NG = 4 };
	graph_buf gb[NG] = {{SL_DT_F16, 5120, PAR_AR_ONESHOT, NULL, NULL, {0}},
			    {SL_DT_BF16, 70001, PAR_AR_TWOSHOT, NULL, NULL, {0}},
			    {SL_DT_F32, 5121, PAR_AR_AUTO, NULL, NULL, {0}},
			    {SL_DT_F16, 40961, PAR_AR_PUSH, NULL, NULL, {0}}};
	gb[0].car = g_car, gb[1].car = g_car, gb[2].car = g_small, gb[3].car = g_car;
	int reps = g_quick ? 4 : 12;
	group g;
	group_begin(&g, "graph: 4 all-reduces captured, %s replays%s", reps == 4 ? "4" : "12",
		    ", eager calls between");
	for (int j = 0; j < NG; j++) {
		CK(cudaMallocHost(&gb[j].host, gb[j].count * sl_dtype_size(gb[j].dt)));
		dbuf_make(&gb[j].dev, gb[j].count, 0, gb[j].dt);
	}
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
	for (int j = 0; j < NG; j++) {
		size_t bytes = gb[j].count * sl_dtype_size(gb[j].dt);
		CK(cudaMemcpyAsync(gb[j].dev.data, gb[j].host, bytes, cudaMemcpyHostToDevice,
				   g_stream));
		CK_SL(par_car_allreduce(gb[j].car, gb[j].dev.data, gb[j].count, gb[j].dt,
					gb[j].algo));
	}
	CK(cudaStreamEndCapture(g_stream, &graph));
	CK(cudaGraphInstantiate(&exec, graph, 0));
	for (int rep = 0; rep < reps; rep++) {
		uint64_t seed = 90000 + 10 * rep;
		for (int j = 0; j < NG; j++)
			graph_fill(&gb[j], seed + j);
		MPI_Barrier(MPI_COMM_WORLD);
		CK(cudaGraphLaunch(exec, g_stream));
		CK(cudaStreamSynchronize(g_stream));
		for (int j = 0; j < NG; j++)
			group_case(&g, graph_check(&gb[j], seed + j, rep, j));
		if (rep % 2) /* eager calls move the counters between replays */
			group_case(&g, check_allreduce(rep % 4 == 1 ? g_car : g_small, "eager",
						       SL_DT_F16, 999 + rep, PAR_AR_AUTO, 0, seed + 5));
	}
	CK(cudaGraphExecDestroy(exec));
	CK(cudaGraphDestroy(graph));
	for (int j = 0; j < NG; j++) {
		CK(cudaFreeHost(gb[j].host));
		dbuf_free(&gb[j].dev);
	}
	group_end(&g);
}

/* ---- dependents on both sides: a late writer before, a reader after ---- */

static int check_pdl_order(par_car *car, sl_dtype dt, size_t count, par_ar_algo algo,
			   uint64_t seed)
{
	size_t es = sl_dtype_size(dt), bytes = (count * es + 15) / 16 * 16;
	char what[160];
	snprintf(what, sizeof what, "dependents around %s %s count %zu", dt_name(dt),
		 algo_name(algo), count);
	void *in = xmalloc(bytes), *want = xmalloc(count * es);
	memset(in, 0, bytes);
	make_input(in, g_rank, seed, count, dt);
	make_expected(want, seed, count, dt);
	void *src, *buf;
	dbuf out;
	CK(cudaMalloc(&src, bytes));
	CK(cudaMalloc(&buf, bytes));
	dbuf_make(&out, bytes / es, 0, dt);
	CK(cudaMemcpy(src, in, bytes, cudaMemcpyHostToDevice));
	CK(cudaMemset(buf, GUARD_BYTE, bytes));
	CK(cudaDeviceSynchronize());
	MPI_Barrier(MPI_COMM_WORLD);
	CK_SL(kern_pdl_probe_copy(buf, src, bytes, 20000, g_stream));
	CK_SL(par_car_allreduce(car, buf, count, dt, algo));
	CK_SL(kern_pdl_probe_copy(out.data, buf, bytes, 0, g_stream));
	CK(cudaStreamSynchronize(g_stream));
	int ok = dbuf_check(what, &out, want, count, dt);
	dbuf_free(&out);
	CK(cudaFree(src));
	CK(cudaFree(buf));
	free(in), free(want);
	return ok;
}

static void test_pdl_order(void)
{
	static const size_t counts[] = {8, 5120, 40960, 163840};
	group g;
	static const par_ar_algo algos[] = {PAR_AR_ONESHOT, PAR_AR_TWOSHOT, PAR_AR_PUSH};
	group_begin(&g, "PDL: %s all-reduces between dependent kernels%s", "36", "");
	for (int d = 0; d < 3; d++)
		for (int i = 0; i < 4; i++)
			for (int a = 0; a < 3; a++)
				group_case(&g, check_pdl_order(i % 2 ? g_small : g_car, k_dts[d],
							       counts[i], algos[a],
							       70000 + 10 * d + i));
	group_end(&g);
}

/* ---- all-gather ---- */

static int check_allgather(par_car *car, const char *cname, sl_dtype dt, size_t count,
			   uint64_t seed)
{
	size_t es = sl_dtype_size(dt), total = count * g_tp;
	char what[128];
	snprintf(what, sizeof what, "allgather %s %s count %zu", cname, dt_name(dt), count);
	void *in = xmalloc(count * es), *want = xmalloc(total * es);
	make_input(in, g_rank, seed, count, dt);
	for (int p = 0; p < g_tp; p++)
		make_input((char *)want + p * count * es, p, seed, count, dt);
	dbuf s, r;
	dbuf_make(&s, count, 0, dt);
	dbuf_make(&r, total, 0, dt);
	CK(cudaMemcpy(s.data, in, count * es, cudaMemcpyHostToDevice));
	CK(cudaDeviceSynchronize()); /* see check_allreduce: the copy may still be in flight */
	MPI_Barrier(MPI_COMM_WORLD);
	CK_SL(par_car_allgather(car, s.data, r.data, count, dt));
	CK(cudaStreamSynchronize(g_stream));
	int ok = dbuf_check(what, &r, want, total, dt) && dbuf_check(what, &s, in, count, dt);
	dbuf_free(&s), dbuf_free(&r);
	free(in), free(want);
	return ok;
}

static void test_allgather(void)
{
	static const size_t counts[] = {1, 7, 4097, 65539, 200000};
	static const sl_dtype dts[] = {SL_DT_F32, SL_DT_F16};
	group g;
	group_begin(&g, "allgather f32/f16%s%s", "", ", both groups");
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < (g_quick ? 3 : 5); i++)
			for (int c = 0; c < 2; c++)
				group_case(&g, check_allgather(c ? g_small : g_car, c ? "small" : "default",
							       dts[d], counts[i], 70000 + 10 * i + d));
	group_end(&g);
}

/* ---- NCCL, when every rank has its own GPU ---- */

static ncclDataType_t nccl_type(sl_dtype dt)
{
	return dt == SL_DT_F32 ? ncclFloat32 : dt == SL_DT_F16 ? ncclFloat16 : ncclBfloat16;
}

/* NCCL rounds each partial sum to the dtype as it travels the ring, so it
 * may differ from the custom result by about tp roundings of the
 * partial sums: tolerance tp * 2^-(mantissa bits) of sum_p |x_p| per
 * element (f32: 2^-22, f16: 2^-10, bf16: 2^-7). */
static void test_nccl(void)
{
	size_t counts[40];
	for (int d = 0; d < 3; d++) {
		sl_dtype dt = k_dts[d];
		double unit = dt == SL_DT_F32 ? 0x1p-22 : dt == SL_DT_F16 ? 0x1p-10 : 0x1p-7;
		double worst = 0;
		group g;
		group_begin(&g, "custom vs NCCL %s%s", dt_name(dt), "");
		int n = sweep_counts(dt, 1, counts);
		size_t es = sl_dtype_size(dt);
		for (int i = 0; i < n; i++) {
			size_t count = counts[i];
			uint64_t seed = 30000 + 100 * d + i;
			void *in = xmalloc(count * es), *a = xmalloc(count * es), *b = xmalloc(count * es);
			make_input(in, g_rank, seed, count, dt);
			void *d1, *d2;
			CK(cudaMalloc(&d1, count * es));
			CK(cudaMalloc(&d2, count * es));
			CK(cudaMemcpy(d1, in, count * es, cudaMemcpyHostToDevice));
			CK(cudaMemcpy(d2, in, count * es, cudaMemcpyHostToDevice));
			CK(cudaDeviceSynchronize()); /* see check_allreduce */
			MPI_Barrier(MPI_COMM_WORLD);
			CK_SL(par_car_allreduce(g_car, d1, count, dt, PAR_AR_AUTO));
			if (ncclAllReduce(d2, d2, count, nccl_type(dt), ncclSum, g_nccl, g_stream) !=
			    ncclSuccess)
				fatal("ncclAllReduce", "failed");
			CK(cudaStreamSynchronize(g_stream));
			CK(cudaMemcpy(a, d1, count * es, cudaMemcpyDeviceToHost));
			CK(cudaMemcpy(b, d2, count * es, cudaMemcpyDeviceToHost));
			int ok = 1;
			for (size_t k = 0; k < count && ok; k++) {
				double mag = 0;
				for (int p = 0; p < g_tp; p++)
					mag += fabs(input_value(p, seed, k, dt));
				double diff = fabs((double)load_elem(a, k, dt) - load_elem(b, k, dt));
				double rel = diff / mag, tol = g_tp * unit;
				worst = rel > worst ? rel : worst;
				if (!(rel <= tol)) {
					printf("rank %d: FAIL custom vs NCCL %s count %zu: element %zu custom "
					       "%.9g NCCL %.9g (|diff| / sum|x| %.2e > tol %.1e)\n", g_rank,
					       dt_name(dt), count, k, load_elem(a, k, dt),
					       load_elem(b, k, dt), rel, tol);
					ok = 0;
				}
			}
			group_case(&g, ok);
			CK(cudaFree(d1));
			CK(cudaFree(d2));
			free(in), free(a), free(b);
		}
		MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		if (g_rank == 0)
			printf("custom vs NCCL %s: worst |diff| / sum|x| %.2e (tol %.1e)\n", dt_name(dt),
			       worst, g_tp * unit);
		group_end(&g);
	}
}

/* ---- all-reduce fused with the residual add of a pending norm ---- */

#define CAR_TEST_RESIDUAL_RANK 100 /* input_value's "rank" of the residual */
#define CAR_TEST_WEIGHT_RANK 101   /* and of the norm weight */
/* The parts of a row's sum of squares, summed, against the host's double
 * sum: fp32 sums of positive terms, a few hundred adds deep at most
 * (8 per thread, a warp tree, 16 warps, 64 blocks), so relative 1e-5. */
#define SUMSQ_REL_TOL 1e-5

/* The residual before the call: fp32, the same on every rank (it is
 * replicated across the tp group), in [-2, 2) and not near 0. */
static float residual_value(uint64_t seed, size_t i)
{
	return 2.0f * input_value(CAR_TEST_RESIDUAL_RANK, seed, i, SL_DT_F32);
}

/* The norm weight, in dt: [-1, 1), not near 0. */
static float weight_value(uint64_t seed, size_t j, sl_dtype dt)
{
	return input_value(CAR_TEST_WEIGHT_RANK, seed, j, dt);
}

/* 1 when every rank's bytes are rank 0's. */
static int same_on_every_rank(const char *what, const void *host, size_t bytes)
{
	unsigned char *r0 = xmalloc(bytes);
	memcpy(r0, host, bytes);
	MPI_Bcast(r0, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
	int ok = !memcmp(r0, host, bytes);
	if (!ok)
		printf("rank %d: FAIL %s: output differs from rank 0's\n", g_rank, what);
	free(r0);
	return ok;
}

/* The host's x += the rank-order sum rounded to dt (KERN_EPI_ADD's add,
 * one fp32 add), then out = x * w rounded to dt, fp16 saturating. */
static void prenorm_expect(uint64_t seed, int n, int dim, sl_dtype dt, float *x,
			   const float *wf, void *out)
{
	size_t cnt = (size_t)n * dim;
	void *sum = xmalloc(cnt * 2);
	make_expected(sum, seed, cnt, dt);
	for (size_t i = 0; i < cnt; i++) {
		volatile float v = x[i] + load_elem(sum, i, dt);
		x[i] = v;
		volatile float o = v * wf[i % dim];
		float s = o;
		if (dt == SL_DT_F16)
			s = s > 65504.0f ? 65504.0f : s < -65504.0f ? -65504.0f : s;
		store_elem(out, i, s, dt);
	}
	free(sum);
}

/* The parts ([parts, n], every one written: poisoned with NaN before)
 * summed per row against the host's sum of squares of x. */
static int sumsq_ok(const char *what, const float *ss, int parts, int n, int dim,
		    const float *x)
{
	for (int r = 0; r < n; r++) {
		double want = 0, got = 0;
		for (int j = 0; j < dim; j++)
			want += (double)x[(size_t)r * dim + j] * x[(size_t)r * dim + j];
		for (int p = 0; p < parts; p++)
			got += ss[(size_t)p * n + r];
		if (!(fabs(got - want) <= SUMSQ_REL_TOL * want)) {
			printf("rank %d: FAIL %s: row %d sum of squares %.9g (%d parts), host %.9g\n",
			       g_rank, what, r, got, parts, want);
			return 0;
		}
	}
	return 1;
}

typedef struct prenorm_case {
	par_car *car;
	const char *cname;
	sl_dtype dt;
	int n, dim, pad; /* pad: elements past 16-byte alignment (the scalar loads) */
	uint64_t seed;
} prenorm_case;

/* Device buffers of one call: out poisoned by dbuf_make, sumsq with NaN. */
typedef struct prenorm_bufs {
	dbuf part, x, w, out, ss;
} prenorm_bufs;

static void prenorm_upload(prenorm_bufs *b, const prenorm_case *pc, int parts, const void *part,
			   const float *x0, const void *w)
{
	size_t cnt = (size_t)pc->n * pc->dim;
	dbuf_make(&b->part, cnt, pc->pad, pc->dt);
	dbuf_make(&b->x, cnt, pc->pad, SL_DT_F32);
	dbuf_make(&b->w, pc->dim, pc->pad, pc->dt);
	dbuf_make(&b->out, cnt, pc->pad, pc->dt);
	dbuf_make(&b->ss, (size_t)parts * pc->n, 0, SL_DT_F32);
	CK(cudaMemset(b->ss.data, 0xFF, (size_t)parts * pc->n * 4));
	CK(cudaMemcpy(b->part.data, part, cnt * 2, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(b->x.data, x0, cnt * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(b->w.data, w, pc->dim * 2, cudaMemcpyHostToDevice));
	CK(cudaDeviceSynchronize()); /* see check_allreduce */
}

static void prenorm_free(prenorm_bufs *b)
{
	dbuf *all[] = {&b->part, &b->x, &b->w, &b->out, &b->ss};
	for (int i = 0; i < 5; i++)
		dbuf_free(all[i]);
}

/* x, out and the parts of one call, from the device (with guards), checked
 * against the host's x_want, out_want; and the same on every rank. */
static int prenorm_check(const char *what, const prenorm_bufs *b, int parts, int n, int dim,
			 sl_dtype dt, const float *x_want, const void *out_want)
{
	size_t cnt = (size_t)n * dim;
	int ok = dbuf_check(what, &b->x, x_want, cnt, SL_DT_F32) &&
		 dbuf_check(what, &b->out, out_want, cnt, dt);
	size_t ss_bytes = (size_t)parts * n * 4;
	unsigned char *h = xmalloc(b->ss.bytes);
	CK(cudaMemcpy(h, b->ss.base, b->ss.bytes, cudaMemcpyDeviceToHost));
	float *ss = xmalloc(ss_bytes);
	memcpy(ss, h + b->ss.pre, ss_bytes);
	ok = ok && guards_intact(what, h, b->ss.pre, "before the parts") &&
	     guards_intact(what, h + b->ss.pre + ss_bytes, GUARD, "after the parts") &&
	     sumsq_ok(what, ss, parts, n, dim, x_want);
	/* x and out equal the host's on every rank; the parts' bits too
	 * (collective: every rank calls it, whatever failed before) */
	int same = same_on_every_rank(what, ss, ss_bytes);
	ok = ok && same;
	free(ss), free(h);
	return ok;
}

/* One fused call against the host. */
static int check_prenorm(const prenorm_case *pc)
{
	size_t cnt = (size_t)pc->n * pc->dim;
	int parts = par_car_prenorm_parts(pc->car);
	char what[160];
	snprintf(what, sizeof what, "add+prenorm %s %s n %d dim %d pad %d seed %llu", pc->cname,
		 dt_name(pc->dt), pc->n, pc->dim, pc->pad, (unsigned long long)pc->seed);
	void *part = xmalloc(cnt * 2), *w = xmalloc(pc->dim * 2), *out_want = xmalloc(cnt * 2);
	float *x0 = xmalloc(cnt * 4), *x_want = xmalloc(cnt * 4), *wf = xmalloc(pc->dim * 4);
	make_input(part, g_rank, pc->seed, cnt, pc->dt);
	for (size_t i = 0; i < cnt; i++)
		x0[i] = x_want[i] = residual_value(pc->seed, i);
	for (int j = 0; j < pc->dim; j++) {
		store_elem(w, j, weight_value(pc->seed, j, pc->dt), pc->dt);
		wf[j] = load_elem(w, j, pc->dt);
	}
	prenorm_expect(pc->seed, pc->n, pc->dim, pc->dt, x_want, wf, out_want);
	prenorm_bufs b;
	prenorm_upload(&b, pc, parts, part, x0, w);
	MPI_Barrier(MPI_COMM_WORLD);
	CK_SL(par_car_allreduce_add_prenorm(pc->car, b.part.data, b.x.data, b.w.data, b.out.data,
					    b.ss.data, pc->n, pc->dim, pc->dt));
	CK(cudaStreamSynchronize(g_stream));
	int ok = prenorm_check(what, &b, parts, pc->n, pc->dim, pc->dt, x_want, out_want) &&
		 dbuf_check(what, &b.part, part, cnt, pc->dt); /* only read */
	prenorm_free(&b);
	free(part), free(w), free(out_want), free(x0), free(x_want), free(wf);
	return ok;
}

static void test_prenorm(par_car *car, const char *cname)
{
	static const int dims[] = {4096, 5120, 8192, 1000, 2048, 8, 5121, 4100, 17, 6000, 1};
	static const sl_dtype dts[] = {SL_DT_F16, SL_DT_BF16};
	for (int d = 0; d < 2; d++) {
		group g;
		group_begin(&g, "all-reduce + add, norm pending %s, %s group", dt_name(dts[d]),
			    cname);
		for (int n = 1; n <= 2; n++)
			for (int di = 0; di < 11; di++) {
				if (g_quick && di % 2)
					continue;
				prenorm_case pc = {car, cname, dts[d], n, dims[di], 0,
						   400000 + 1000 * d + 100 * n + di};
				group_case(&g, check_prenorm(&pc));
				if (di < 4 || di == 6) { /* unaligned: the scalar loads */
					pc.pad = 1 + di % 3, pc.seed += 500000;
					group_case(&g, check_prenorm(&pc));
				}
			}
		group_end(&g);
	}
}

/* Calls it does not take are refused, by every rank alike, with nothing
 * enqueued: a later call still pairs up with its peers. */
static void test_prenorm_refusals(void)
{
	group g;
	group_begin(&g, "add+prenorm: refusals (3 tokens, f32, no weight)%s%s", "", "");
	dbuf p, x, o, w, s;
	dbuf_make(&p, 3 * 64, 0, SL_DT_F32);
	dbuf_make(&x, 3 * 64, 0, SL_DT_F32);
	dbuf_make(&o, 3 * 64, 0, SL_DT_F32);
	dbuf_make(&w, 64, 0, SL_DT_F32);
	dbuf_make(&s, 3 * (size_t)par_car_prenorm_parts(g_car), 0, SL_DT_F32);
	int rc[3] = {
		par_car_allreduce_add_prenorm(g_car, p.data, x.data, w.data, o.data, s.data, 3, 64,
					      SL_DT_F16),
		par_car_allreduce_add_prenorm(g_car, p.data, x.data, w.data, o.data, s.data, 1, 64,
					      SL_DT_F32),
		par_car_allreduce_add_prenorm(g_car, p.data, x.data, NULL, o.data, s.data, 1, 64,
					      SL_DT_BF16),
	};
	for (int i = 0; i < 3; i++) {
		if (rc[i] != SL_ENOTSUP)
			printf("rank %d: FAIL add+prenorm refusal %d: returned %d, want SL_ENOTSUP\n",
			       g_rank, i, rc[i]);
		group_case(&g, rc[i] == SL_ENOTSUP);
	}
	CK(cudaStreamSynchronize(g_stream));
	/* nothing written */
	unsigned char *poison = xmalloc(3 * 64 * 4);
	memset(poison, GUARD_BYTE, 3 * 64 * 4);
	group_case(&g, dbuf_check("refused add+prenorm", &o, poison, 3 * 64, SL_DT_F32) &&
			       dbuf_check("refused add+prenorm", &x, poison, 3 * 64, SL_DT_F32));
	free(poison);
	dbuf_free(&p), dbuf_free(&x), dbuf_free(&o), dbuf_free(&w), dbuf_free(&s);
	/* the calls refused left the counters alone: later ones still pair */
	group_case(&g, check_allreduce(g_car, "after refusals", SL_DT_F16, 5120, PAR_AR_AUTO, 0, 77));
	prenorm_case pc = {g_car, "after refusals", SL_DT_BF16, 2, 5120, 0, 78};
	group_case(&g, check_prenorm(&pc));
	group_end(&g);
}

/* ---- the push one-shot fused with the add and the whole norm ---- */

#define ADD_NORM_EPS 1e-5f

/* out against the host's RMSNorm of x_want in double: within 2 ulps of
 * the dtype (the kernel's sum of squares runs in another order). */
static int add_norm_out_ok(const char *what, const dbuf *out, int n, int dim, sl_dtype dt,
			   const float *x, const float *wf)
{
	size_t cnt = (size_t)n * dim;
	unsigned char *h = xmalloc(out->bytes);
	CK(cudaMemcpy(h, out->base, out->bytes, cudaMemcpyDeviceToHost));
	const void *got = h + out->pre;
	const double ulp = dt == SL_DT_F16 ? 1.0 / 1024 : 1.0 / 128;
	int ok = guards_intact(what, h, out->pre, "before out") &&
		 guards_intact(what, h + out->pre + cnt * 2, GUARD, "after out");
	for (int r = 0; ok && r < n; r++) {
		double ss = 0;
		for (int j = 0; j < dim; j++)
			ss += (double)x[(size_t)r * dim + j] * x[(size_t)r * dim + j];
		const double inv = 1.0 / sqrt(ss / dim + ADD_NORM_EPS);
		for (int j = 0; ok && j < dim; j++) {
			const size_t i = (size_t)r * dim + j;
			const double want = x[i] * inv * wf[j], g = load_elem(got, i, dt);
			if (!(fabs(g - want) <= 2 * ulp * fabs(want) + 1e-6)) {
				printf("rank %d: FAIL %s: out[%d][%d] %.7g, host %.7g\n", g_rank, what, r,
				       j, g, want);
				ok = 0;
			}
		}
	}
	int same = same_on_every_rank(what, got, cnt * 2); /* collective */
	free(h);
	return ok && same;
}

/* One par_car_allreduce_add_norm call: x bit-exact against the host (x +
 * the rank-order sum rounded to dt), out within add_norm_out_ok's bound
 * and the same bits on every rank, part untouched. */
static int check_add_norm(sl_dtype dt, int n, int dim, uint64_t seed)
{
	size_t cnt = (size_t)n * dim;
	char what[96];
	snprintf(what, sizeof what, "push + add + norm %s n %d dim %d seed %llu", dt_name(dt), n,
		 dim, (unsigned long long)seed);
	void *part = xmalloc(cnt * 2), *w = xmalloc(dim * 2), *sum = xmalloc(cnt * 2);
	float *x0 = xmalloc(cnt * 4), *x_want = xmalloc(cnt * 4), *wf = xmalloc(dim * 4);
	make_input(part, g_rank, seed, cnt, dt);
	make_expected(sum, seed, cnt, dt);
	for (size_t i = 0; i < cnt; i++) {
		x0[i] = residual_value(seed, i);
		volatile float v = x0[i] + load_elem(sum, i, dt);
		x_want[i] = v;
	}
	for (int j = 0; j < dim; j++) {
		store_elem(w, j, weight_value(seed, j, dt), dt);
		wf[j] = load_elem(w, j, dt);
	}
	dbuf bp, bx, bw, bo;
	dbuf_make(&bp, cnt, 0, dt);
	dbuf_make(&bx, cnt, 0, SL_DT_F32);
	dbuf_make(&bw, dim, 0, dt);
	dbuf_make(&bo, cnt, 0, dt); /* poisoned */
	CK(cudaMemcpy(bp.data, part, cnt * 2, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(bx.data, x0, cnt * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(bw.data, w, dim * 2, cudaMemcpyHostToDevice));
	CK(cudaDeviceSynchronize()); /* see check_allreduce */
	MPI_Barrier(MPI_COMM_WORLD);
	CK_SL(par_car_allreduce_add_norm(g_car, bp.data, bx.data, bw.data, bo.data, n, dim,
					 ADD_NORM_EPS, dt));
	CK(cudaStreamSynchronize(g_stream));
	int ok = dbuf_check(what, &bx, x_want, cnt, SL_DT_F32);
	ok = add_norm_out_ok(what, &bo, n, dim, dt, x_want, wf) && ok;
	ok = dbuf_check(what, &bp, part, cnt, dt) && ok; /* only read */
	dbuf_free(&bp), dbuf_free(&bx), dbuf_free(&bw), dbuf_free(&bo);
	free(part), free(w), free(sum), free(x0), free(x_want), free(wf);
	return ok;
}

static void test_add_norm(void)
{
	static const int rows[] = {3, 8, 33, 130, 300};
	static const int dims[] = {5120, 8192, 64, 1000};
	static const sl_dtype dts[] = {SL_DT_F16, SL_DT_BF16};
	for (int d = 0; d < 2; d++) {
		group g;
		group_begin(&g, "push + add + norm %s%s", dt_name(dts[d]), "");
		for (int ri = 0; ri < 5; ri++)
			for (int di = 0; di < 4; di++) {
				if (g_quick && (ri + di) % 2)
					continue;
				if ((size_t)rows[ri] * dims[di] * 2 > par_car_push_cap(
									par_car_get_limits(g_car)))
					continue; /* beyond the push area: refused (below) */
				group_case(&g, check_add_norm(dts[d], rows[ri], dims[di],
							      600000 + 1000 * d + 10 * ri + di));
			}
		/* refused alike by every rank, nothing enqueued: f32, a width not
		 * a multiple of 8, more rows than the push area holds */
		dbuf t;
		dbuf_make(&t, 16 << 20, 0, SL_DT_F32);
		int rc[3] = {
			par_car_allreduce_add_norm(g_car, t.data, t.data, t.data, t.data, 2, 64, 1e-5f,
						   SL_DT_F32),
			par_car_allreduce_add_norm(g_car, t.data, t.data, t.data, t.data, 2, 100, 1e-5f,
						   dts[d]),
			par_car_allreduce_add_norm(g_car, t.data, t.data, t.data, t.data, 1 << 20, 8,
						   1e-5f, dts[d]),
		};
		for (int i = 0; i < 3; i++)
			group_case(&g, rc[i] == SL_ENOTSUP);
		dbuf_free(&t);
		/* later calls still pair up */
		group_case(&g, check_add_norm(dts[d], 5, 5120, 610000 + d));
		group_end(&g);
	}
}

/* A graph of a copy-up and the fused call, replayed with new partial sums
 * (the residual accumulating across replays), eager calls between. */
static void test_prenorm_graph(void)
{
	enum { N = 2, DIM = 5120 };
	const sl_dtype dt = SL_DT_F16;
	size_t cnt = (size_t)N * DIM;
	int reps = g_quick ? 4 : 10, parts = par_car_prenorm_parts(g_car);
	group g;
	group_begin(&g, "add+prenorm in a graph: %s replays%s", reps == 4 ? "4" : "10",
		    ", eager calls between");
	void *host_part, *w = xmalloc(DIM * 2), *out_want = xmalloc(cnt * 2);
	float *x_want = xmalloc(cnt * 4), *wf = xmalloc(DIM * 4);
	CK(cudaMallocHost(&host_part, cnt * 2));
	for (size_t i = 0; i < cnt; i++)
		x_want[i] = residual_value(4242, i);
	for (int j = 0; j < DIM; j++) {
		store_elem(w, j, weight_value(4242, j, dt), dt);
		wf[j] = load_elem(w, j, dt);
	}
	make_input(host_part, g_rank, 1, cnt, dt);
	prenorm_case pc = {g_car, "graph", dt, N, DIM, 0, 0};
	prenorm_bufs b;
	prenorm_upload(&b, &pc, parts, host_part, x_want, w);
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
	CK(cudaMemcpyAsync(b.part.data, host_part, cnt * 2, cudaMemcpyHostToDevice, g_stream));
	CK_SL(par_car_allreduce_add_prenorm(g_car, b.part.data, b.x.data, b.w.data, b.out.data,
					    b.ss.data, N, DIM, dt));
	CK(cudaStreamEndCapture(g_stream, &graph));
	CK(cudaGraphInstantiate(&exec, graph, 0));
	for (int rep = 0; rep < reps; rep++) {
		uint64_t seed = 96000 + rep;
		make_input(host_part, g_rank, seed, cnt, dt);
		prenorm_expect(seed, N, DIM, dt, x_want, wf, out_want);
		CK(cudaMemset(b.ss.data, 0xFF, (size_t)parts * N * 4));
		CK(cudaDeviceSynchronize());
		MPI_Barrier(MPI_COMM_WORLD);
		CK(cudaGraphLaunch(exec, g_stream));
		CK(cudaStreamSynchronize(g_stream));
		char what[64];
		snprintf(what, sizeof what, "add+prenorm graph replay %d", rep);
		group_case(&g, prenorm_check(what, &b, parts, N, DIM, dt, x_want, out_want));
		if (rep % 2) /* eager calls move the counters between replays */
			group_case(&g, check_allreduce(g_car, "eager", SL_DT_BF16, 3000 + rep,
						       PAR_AR_AUTO, 0, seed + 5));
	}
	CK(cudaGraphExecDestroy(exec));
	CK(cudaGraphDestroy(graph));
	CK(cudaFreeHost(host_part));
	prenorm_free(&b);
	free(w), free(out_want), free(x_want), free(wf);
	group_end(&g);
}

/* ---- the all-reduce inside the row-parallel GEMV ---- */

/* A GEMV whose epilogue sums the group's products and adds them
 * (KERN_EPI_ALLREDUCE_ADD through par_car_gemv_xchg) against the pair it
 * replaces: this rank's plain GEMV (the same kernel, so the same product
 * bits where neither splits the columns: rows >= 16 x the SMs), then
 * par_car_allreduce_add_prenorm. Residual and x * w bit for bit where the
 * GEMVs agree, else within GEMV_HOST_TOL of the host's double sums;
 * the parts of the sums of squares (one per 16-row tile) against the
 * host; the same bits on every rank; K calls back to back (the slots and
 * per-tile counters), the residual growing from call to call. */
#define GEMV_CALLS 3

typedef struct gemv_case {
	sl_dtype dt;
	int n, rows, cols;
	uint64_t seed;
} gemv_case;

static kern_blas *g_blas;

/* Rank r's weight slice and input, in dt, [-1, 1) not near 0. */
static float gemv_w(int r, uint64_t seed, size_t i, sl_dtype dt)
{
	return input_value(200 + r, seed, i, dt);
}

static float gemv_x(int r, uint64_t seed, size_t i, sl_dtype dt)
{
	return input_value(300 + r, seed, i, dt);
}

static void *gemv_upload(size_t count, sl_dtype dt, float (*f)(int, uint64_t, size_t, sl_dtype),
			 int r, uint64_t seed)
{
	void *h = xmalloc(count * 2), *d;
	for (size_t i = 0; i < count; i++)
		store_elem(h, i, f(r, seed, i, dt), dt);
	CK(cudaMalloc(&d, count * 2));
	CK(cudaMemcpy(d, h, count * 2, cudaMemcpyHostToDevice));
	free(h);
	return d;
}

/* The host's residual after k calls: x0 + k x (the group's sum of
 * products, in double). A GEMV rounds its product to dt and the sum is
 * rounded again, so each call is within a few units of dt's last place of
 * the largest product: GEMV_HOST_TOL of them. */
#define GEMV_HOST_TOL 4.0
static double gemv_host_sum(const gemv_case *gc, int tok, int row, double *mag)
{
	double s = 0;
	*mag = 0;
	for (int r = 0; r < g_tp; r++) {
		double p = 0;
		for (int k = 0; k < gc->cols; k++)
			p += (double)gemv_w(r, gc->seed, (size_t)row * gc->cols + k, gc->dt) *
			     gemv_x(r, gc->seed + 1, (size_t)tok * gc->cols + k, gc->dt);
		s += p;
		*mag = fmax(*mag, fmax(fabs(p), fabs(s)));
	}
	return s;
}

static int gemv_host_ok(const char *what, const gemv_case *gc, const float *x0, const float *x,
			int calls)
{
	const double ulp = gc->dt == SL_DT_F16 ? 1.0 / 1024 : 1.0 / 128;
	for (int t = 0; t < gc->n; t++)
		for (int row = 0; row < gc->rows; row += 1 + row % 7) { /* a spread of rows */
			double mag, s = gemv_host_sum(gc, t, row, &mag);
			size_t i = (size_t)t * gc->rows + row;
			double want = x0[i] + calls * s, tol = calls * GEMV_HOST_TOL * ulp * (mag + 1);
			if (!(fabs(x[i] - want) <= tol)) {
				printf("rank %d: FAIL %s: token %d row %d residual %.9g, host %.9g "
				       "(tolerance %.3g)\n", g_rank, what, t, row, x[i], want, tol);
				return 0;
			}
		}
	return 1;
}

/* Device state of one case: the weights and input, and for each path
 * (0: GEMV then par_car_allreduce_add_prenorm; 1: the fused GEMV) the
 * residual, x * w and the parts. */
typedef struct gemv_bufs {
	void *w, *x, *nw, *part;
	float *res[2], *ss[2];
	void *out[2];
} gemv_bufs;

static void gemv_setup(gemv_bufs *b, const gemv_case *gc, const float *x0, int tiles)
{
	size_t cnt = (size_t)gc->n * gc->rows, ssn = (size_t)(tiles > 64 ? tiles : 64) * gc->n;
	b->w = gemv_upload((size_t)gc->rows * gc->cols, gc->dt, gemv_w, g_rank, gc->seed);
	b->x = gemv_upload((size_t)gc->n * gc->cols, gc->dt, gemv_x, g_rank, gc->seed + 1);
	b->nw = gemv_upload(gc->rows, gc->dt, gemv_w, CAR_TEST_WEIGHT_RANK, gc->seed + 2);
	CK(cudaMalloc(&b->part, cnt * 2));
	for (int p = 0; p < 2; p++) {
		CK(cudaMalloc((void **)&b->res[p], cnt * 4));
		CK(cudaMemcpy(b->res[p], x0, cnt * 4, cudaMemcpyHostToDevice));
		CK(cudaMalloc(&b->out[p], cnt * 2));
		CK(cudaMemset(b->out[p], 0xFF, cnt * 2)); /* NaN in f16 and bf16 */
		CK(cudaMalloc((void **)&b->ss[p], ssn * 4));
		CK(cudaMemset(b->ss[p], 0xFF, ssn * 4));
	}
	CK(cudaDeviceSynchronize());
}

static void gemv_free(gemv_bufs *b)
{
	void *all[] = {b->w, b->x, b->nw, b->part, b->res[0], b->res[1], b->out[0], b->out[1],
		       b->ss[0], b->ss[1]};
	for (int i = 0; i < 10; i++)
		CK(cudaFree(all[i]));
}

/* GEMV_CALLS fused calls; 1 when every one ran fused. */
static int gemv_run_fused(const gemv_case *gc, gemv_bufs *b)
{
	kern_epi e = {.kind = KERN_EPI_ALLREDUCE_ADD, .residual = b->res[1], .sumsq = b->ss[1],
		      .norm_w = b->nw, .norm_out = b->out[1]};
	CK_SL(par_car_gemv_xchg(g_car, &e.xchg));
	int all = 1;
	for (int k = 0; k < GEMV_CALLS; k++) {
		int fused = 0;
		CK_SL(kern_matmul_epi_cuda(g_blas, NULL, b->x, b->w, gc->n, gc->cols, gc->rows, gc->dt,
					   &e, &fused));
		all &= fused;
	}
	return all;
}

static void gemv_run_pair(const gemv_case *gc, gemv_bufs *b)
{
	for (int k = 0; k < GEMV_CALLS; k++) {
		CK_SL(kern_matmul_cuda(g_blas, b->part, b->x, b->w, gc->n, gc->cols, gc->rows, gc->dt));
		CK_SL(par_car_allreduce_add_prenorm(g_car, b->part, b->res[0], b->nw, b->out[0],
						    b->ss[0], gc->n, gc->rows, gc->dt));
	}
}

static void *gemv_down(const void *d, size_t bytes)
{
	void *h = xmalloc(bytes);
	CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
	return h;
}

/* The fused path's results against the pair's (exact: 1) or the host's. */
static int gemv_compare(const char *what, const gemv_case *gc, const gemv_bufs *b,
			const float *x0, int tiles, int exact)
{
	size_t cnt = (size_t)gc->n * gc->rows;
	float *x[2], *ss = gemv_down(b->ss[1], (size_t)tiles * gc->n * 4);
	void *o[2];
	for (int p = 0; p < 2; p++)
		x[p] = gemv_down(b->res[p], cnt * 4), o[p] = gemv_down(b->out[p], cnt * 2);
	int ok = exact ? same_bits(what, x[1], x[0], cnt, SL_DT_F32) &&
				 same_bits(what, o[1], o[0], cnt, gc->dt)
		       : gemv_host_ok(what, gc, x0, x[1], GEMV_CALLS);
	ok = ok && sumsq_ok(what, ss, tiles, gc->n, gc->rows, x[1]);
	/* collective: every rank calls them, whatever failed before */
	int same = same_on_every_rank(what, x[1], cnt * 4);
	same &= same_on_every_rank(what, o[1], cnt * 2);
	same &= same_on_every_rank(what, ss, (size_t)tiles * gc->n * 4);
	for (int p = 0; p < 2; p++)
		free(x[p]), free(o[p]);
	free(ss);
	return ok && same;
}

static int check_gemv(const gemv_case *gc, int exact)
{
	size_t cnt = (size_t)gc->n * gc->rows;
	int tiles = (gc->rows + 15) / 16;
	char what[160];
	snprintf(what, sizeof what, "gemv+all-reduce+add %s n %d rows %d cols %d seed %llu",
		 dt_name(gc->dt), gc->n, gc->rows, gc->cols, (unsigned long long)gc->seed);
	float *x0 = xmalloc(cnt * 4);
	for (size_t i = 0; i < cnt; i++)
		x0[i] = residual_value(gc->seed, i);
	gemv_bufs b;
	gemv_setup(&b, gc, x0, tiles);
	MPI_Barrier(MPI_COMM_WORLD);
	int fused = gemv_run_fused(gc, &b);
	if (exact)
		gemv_run_pair(gc, &b);
	CK(cudaStreamSynchronize(g_stream));
	if (!fused)
		printf("rank %d: FAIL %s: the GEMV did not take the all-reduce\n", g_rank, what);
	int ok = gemv_compare(what, gc, &b, x0, tiles, exact) && fused;
	gemv_free(&b);
	free(x0);
	return ok;
}

/* 3 tokens: refused by every rank, nothing enqueued, later calls pair. */
static int check_gemv_refusal(void)
{
	gemv_case gc = {SL_DT_F16, 3, 4096, 2560, 7100};
	float *x0 = xmalloc((size_t)3 * 4096 * 4);
	for (size_t i = 0; i < (size_t)3 * 4096; i++)
		x0[i] = residual_value(gc.seed, i);
	gemv_bufs b;
	gemv_setup(&b, &gc, x0, 256);
	int fused = gemv_run_fused(&gc, &b);
	CK(cudaStreamSynchronize(g_stream));
	float *x = gemv_down(b.res[1], (size_t)3 * 4096 * 4);
	int ok = !fused && !memcmp(x, x0, (size_t)3 * 4096 * 4);
	if (!ok)
		printf("rank %d: FAIL gemv+all-reduce: 3 tokens %s\n", g_rank,
		       fused ? "taken" : "left the residual changed");
	gemv_free(&b);
	free(x), free(x0);
	return ok;
}

static void test_gemv_allreduce(void)
{
	/* rows x cols: 13B's o and down at tp 2 and 4, 70B's at tp 2, and
	 * shapes whose plain GEMV splits the columns (host comparison) */
	static const int shapes[][3] = {{5120, 2560, 1}, {5120, 6912, 1}, {8192, 14336, 1},
					{5120, 1280, 1}, {4096, 2048, 1}, {1000, 2048, 0},
					{2056, 1024, 0}};
	static const sl_dtype dts[] = {SL_DT_F16, SL_DT_BF16};
	group g;
	group_begin(&g, "all-reduce inside the GEMV, then the add%s%s", kern_pdl_enabled() ? ", PDL" : "",
		    "");
	for (int d = 0; d < 2; d++)
		for (int s = 0; s < 7; s++)
			for (int n = 1; n <= 2; n++) {
				if (g_quick && (s % 2 || n == 2))
					continue;
				gemv_case gc = {dts[d], n, shapes[s][0], shapes[s][1],
						700000 + 1000 * d + 10 * s + n};
				group_case(&g, check_gemv(&gc, shapes[s][2]));
			}
	group_case(&g, check_gemv_refusal());
	kern_xchg off; /* a group whose limits leave it off (gemv 0) has none */
	group_case(&g, par_car_gemv_xchg(g_small, &off) == SL_ENOTSUP);
	gemv_case after = {SL_DT_BF16, 1, 5120, 2560, 7200};
	group_case(&g, check_gemv(&after, 1));
	group_end(&g);
}

/* ---- set-up ---- */

static int local_rank(void)
{
	MPI_Comm local;
	int r = 0;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &local);
	MPI_Comm_rank(local, &r);
	MPI_Comm_free(&local);
	return r;
}

static void open_nccl(void)
{
	ncclUniqueId id;
	if (g_rank == 0 && ncclGetUniqueId(&id) != ncclSuccess)
		fatal("ncclGetUniqueId", "failed");
	MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
	if (ncclCommInitRank(&g_nccl, g_tp, id, g_rank) != ncclSuccess)
		fatal("ncclCommInitRank", "failed");
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_tp);
	for (int i = 1; i < argc; i++)
		g_quick |= !strcmp(argv[i], "--quick");
	sl_log_set_role("test", g_rank, g_tp);
	if (g_tp < 2) {
		printf("test_allreduce: needs mpirun -np 2 or more (tests/gpu_allreduce.sh); "
		       "nothing run\n");
		MPI_Finalize();
		return 0;
	}
	int n_dev = 0;
	CK(cudaGetDeviceCount(&n_dev));
	if (n_dev < 1)
		fatal("cudaGetDeviceCount", "no GPU");
	int dev = local_rank() % n_dev;
	CK(cudaSetDevice(dev));
	CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
	char err[SL_ERRLEN] = "";
	CK_SL(par_gpus_distinct(MPI_COMM_WORLD, &g_distinct, err, sizeof err));
	struct cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, dev));
	if (g_rank == 0)
		printf("test_allreduce: %d ranks on %d GPU(s) of this host (%s)%s\n", g_tp,
		       n_dev < g_tp ? n_dev : g_tp, prop.name,
		       g_distinct ? "" : "; ranks share GPUs: results are checked bit-exact against "
					 "host sums, NCCL comparison skipped (NCCL needs one GPU "
					 "per rank)");
	if (g_distinct)
		open_nccl();
	par_car_limits small = {.oneshot_max = 8 << 10, .custom_max = 64 << 10, .blocks = 3};
	par_car_limits dflt; /* the defaults, the all-reduce in the GEMV (opt-in) on */
	par_car_default_limits(g_tp, &dflt);
	dflt.gemv = 1;
	if (par_car_create(MPI_COMM_WORLD, g_stream, PAR_CAR_ON, &dflt, &g_car, err, sizeof err) ||
	    par_car_create(MPI_COMM_WORLD, g_stream, PAR_CAR_ON, &small, &g_small, err, sizeof err))
		fatal("par_car_create", err);
	CK_SL(kern_blas_create(g_stream, &g_blas));

	test_sweep(g_car, "default", !g_quick);
	test_sweep(g_small, "small", 0);
	test_push_empty();
	test_burst();
	test_graph();
	test_allgather();
	test_prenorm(g_car, "default");
	test_prenorm(g_small, "small");
	test_prenorm_refusals();
	test_prenorm_graph();
	test_add_norm();
	test_gemv_allreduce();
	if (g_distinct)
		test_nccl();
	if (prop.major >= 9) { /* again as the backend launches them */
		kern_pdl_enable(1);
		if (g_rank == 0)
			printf("programmatic dependent launch on:\n");
		test_burst();
		test_graph();
		test_prenorm(g_car, "default");
		test_prenorm_graph();
		test_add_norm();
		kern_blas_set_pdl(g_blas, 1);
		test_gemv_allreduce();
		kern_blas_set_pdl(g_blas, 0);
		test_pdl_order();
		kern_pdl_enable(0);
	}

	if (par_car_check(g_car, err, sizeof err) || par_car_check(g_small, err, sizeof err))
		fatal("par_car_check", err);
	kern_blas_destroy(g_blas);
	par_car_destroy(g_small);
	par_car_destroy(g_car);
	g_car = g_small = NULL;
	if (g_distinct)
		ncclCommDestroy(g_nccl);
	cudaStreamDestroy(g_stream);
	if (g_rank == 0)
		printf("%d passed, %d failed\n", g_pass, g_fail);
	MPI_Finalize();
	return g_fail ? 1 : 0;
}
