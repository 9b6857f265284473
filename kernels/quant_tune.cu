/*
 * quant_tune.cu — the quantized GEMM's block shape chosen per weight and
 * token count by timing them (kern_qblas_tune_gemm, quant.h), at start-up.
 *
 * Why: qm_auto's rule (quant_gemm.cu) is one rule for every shape, from
 * the 7B's four projections, and lab-qgemv table 8 on an H200 showed it
 * leaving time on some of them (2026-12-01,
 * bench/results/2026-12-01-nvidia-h200-qgemm-tune/): int4 groups of 128
 * at 256 tokens, qkv 109.7 us on AUTO's wgmma tiles against 84.6 on
 * mma.sync 64-token tiles, the four projections 384.9 against 348.7 us
 * with each one's fastest shape; int8 groups of 128 at 256 tokens 426.8
 * against 376.9. Which shape wins moves with rows, columns, format and
 * tokens (the wave the tiles make on 132 SMs, split-K, registers per
 * format), and a tensor-parallel shard or another model has shapes the
 * rule was never measured on.
 *
 * How: for each token count of k_tune_ns the path AUTO gives the weight
 * is the GEMM at, every block shape (1 .. KERN_QGEMM_VARIANTS, those the
 * weight and GPU take) runs on the weight itself with an x and an out
 * the caller lends (kern_qblas_tune_gemm allocates them for the tuning),
 * each the median of QT_REPS calls with L2 written over before each (W
 * cold, as in a decode step). A shape is kept where it beats AUTO's by QT_GAIN; a call of n
 * tokens then takes what was kept at the smallest tuned count >= n.
 * Where AUTO gives the weight another path (int8 per row: the split
 * path, quant_split.cu), the caller times that path (kern_qgemm_other)
 * and the GEMM's fastest shape is kept where it beats the path by
 * QT_GAIN, marked so that AUTO takes the GEMM there (choose_path,
 * quant.cu): in table 8 the GEMM's best shapes tied or beat the tuned
 * split path on the 7B's o, gate_up and down at 128-256 tokens.
 *
 * Numerics: shapes differ in their fp32 summation order (tiles, split-K),
 * never in the products: every shape meets the GEMM's contract
 * (quant_gemm.cu) and test_quant checks each against the CPU reference.
 * Two processes may choose differently where two shapes time within
 * noise of QT_GAIN; SL_QGEMM_TUNE=0 keeps AUTO's rule for runs that must
 * repeat bit for bit across processes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_util.cuh"
#include "kernels/quant_dequant.cuh"

#define QT_ENTRIES 128 /* (weight, tokens) kept */
#define QT_REPS 5      /* timed calls of each shape (the median counts) */
#define QT_GAIN 0.95   /* a shape replaces AUTO's when at most this fraction of its time */

/* Token counts tuned; a call of n tokens takes the choice at the smallest
 * of them >= n (n <= 64 the first). Above the last, AUTO. */
static const int k_tune_ns[] = {64, 96, 128, 160, 192, 224, 256};
#define QT_NS (int)(sizeof k_tune_ns / sizeof *k_tune_ns)

typedef struct qt_entry {
	int rows, cols, format, group, n, variant;
	sl_dtype dt;
	bool over; /* the GEMM timed faster than the other path AUTO gives w */
} qt_entry;

struct kern_qgemm_tuned {
	qt_entry e[QT_ENTRIES];
	int count;
};

int kern_qgemm_tuned_create(kern_qgemm_tuned **out)
{
	*out = (kern_qgemm_tuned *)calloc(1, sizeof **out);
	return *out ? SL_OK : SL_ENOMEM;
}

void kern_qgemm_tuned_destroy(kern_qgemm_tuned *t)
{
	free(t);
}

static bool same_weight(const qt_entry *e, const kern_qweight *w, sl_dtype dt)
{
	return e->rows == w->rows && e->cols == w->cols && e->format == w->format &&
	       e->group == w->group && e->dt == dt;
}

/* The tuned count a call of n tokens takes: the smallest >= n, 0 above. */
static int tuned_n(int n)
{
	for (int i = 0; i < QT_NS; i++)
		if (k_tune_ns[i] >= n)
			return k_tune_ns[i];
	return 0;
}

static const qt_entry *find(const kern_qgemm_tuned *t, const kern_qweight *w, sl_dtype dt, int n)
{
	const int at = t ? tuned_n(n) : 0;
	for (int i = 0; at && i < t->count; i++)
		if (t->e[i].n == at && same_weight(&t->e[i], w, dt))
			return &t->e[i];
	return NULL;
}

int kern_qgemm_tuned_variant(const kern_qgemm_tuned *t, const kern_qweight *w, sl_dtype dt, int n)
{
	const qt_entry *e = find(t, w, dt, n);
	return e ? e->variant : 0;
}

int kern_qgemm_tuned_over(const kern_qgemm_tuned *t, const kern_qweight *w, sl_dtype dt, int n)
{
	const qt_entry *e = find(t, w, dt, n);
	return e && e->over;
}

/* Median us of QT_REPS calls of shape v (0: AUTO's), W cold; negative
 * when the shape does not take this weight here. */
static double time_variant(const kern_qgemm_ctx *ctx, const kern_cold_bench *b,
			   const kern_qweight *w, const kern_qgemm_bufs *buf, int n, int v)
{
	auto run = [&] {
		return kern_qgemm_run(ctx, w, buf->out, false, buf->x, buf->dt, n, v) == SL_OK;
	};
	if (!run()) {
		cudaGetLastError(); /* a refused shape leaves nothing behind */
		return -1;
	}
	return kern_cold_time(ctx->stream, b, QT_REPS, run);
}

/* Every shape at n tokens; the fastest kept in t where it beats AUTO's by
 * QT_GAIN, or with `other`, where it beats the other path by QT_GAIN.
 * *kept 1 when one was. */
static int tune_one(const kern_qgemm_ctx *ctx, const kern_cold_bench *b, kern_qgemm_tuned *t,
		    const kern_qweight *w, const kern_qgemm_bufs *buf, int n,
		    const kern_qgemm_other *other, int *kept)
{
	const double auto_us = time_variant(ctx, b, w, buf, n, 0);
	if (auto_us <= 0)
		return sl_fail(SL_EDEVICE, "quant: GEMM tuning: AUTO's shape failed on a %d x %d "
			       "weight at %d tokens", w->rows, w->cols, n);
	int best = 0;
	double best_us = auto_us;
	for (int v = 1; v <= KERN_QGEMM_VARIANTS; v++) {
		const double us = time_variant(ctx, b, w, buf, n, v);
		if (us > 0 && us < best_us)
			best = v, best_us = us;
	}
	const double base = other ? other->us(other->arg, b, n) : auto_us;
	*kept = base > 0 && best_us < QT_GAIN * base && (other || best > 0);
	sl_log(SL_LOG_DEBUG, "cuda", "quant: GEMM %d x %d (format %d, group %d) at %d tokens: %s "
	       "%d (%s), %.1f us against %s %.1f", w->rows, w->cols, w->format, w->group, n,
	       *kept ? "shape" : "not kept; fastest", best, kern_qgemm_variant_name(best), best_us,
	       other ? "the other path's" : "AUTO's", base);
	if (!*kept)
		return SL_OK;
	if (t->count == QT_ENTRIES)
		return sl_fail(SL_ENOTSUP, "quant: GEMM tuning table full");
	t->e[t->count++] =
		(qt_entry){w->rows, w->cols, w->format, w->group, n, best, buf->dt, other != NULL};
	return SL_OK;
}

/* One line a weight: the shape each tuned count takes (0: AUTO's rule;
 * the numbers are kern_qgemm_variant_name's; "g": the GEMM instead of
 * the other path AUTO gives the weight). */
static void log_choice(const kern_qgemm_tuned *t, const kern_qweight *w, sl_dtype dt,
		       const int *ns, int n_ns)
{
	char line[256];
	int off = 0;
	for (int i = 0; i < n_ns && off < (int)sizeof line; i++)
		off += snprintf(line + off, sizeof line - off, " %d:%d%s", ns[i],
				kern_qgemm_tuned_variant(t, w, dt, ns[i]),
				kern_qgemm_tuned_over(t, w, dt, ns[i]) ? "g" : "");
	sl_log(SL_LOG_INFO, "cuda", "quant: GEMM %d x %d (format %d, group %d), block shape at "
	       "tokens:shape%s", w->rows, w->cols, w->format, w->group, line);
}

int kern_qgemm_tune(const kern_qgemm_ctx *ctx, kern_qgemm_tuned *t, const kern_qweight *w,
		    const kern_qgemm_bufs *buf, const int *ns, int n_ns,
		    const kern_qgemm_other *other, int *kept)
{
	*kept = 0;
	kern_cold_bench b;
	int rc = kern_cold_bench_init(&b);
	if (rc)
		rc = sl_fail(SL_EDEVICE, "quant: GEMM tuning: %s",
			     cudaGetErrorString(cudaGetLastError()));
	for (int i = 0; i < n_ns && rc == SL_OK; i++) {
		int k = 0;
		if (!find(t, w, buf->dt, ns[i]) && tuned_n(ns[i]) == ns[i])
			rc = tune_one(ctx, &b, t, w, buf, ns[i], other, &k);
		*kept += k;
	}
	cudaStreamSynchronize(ctx->stream);
	if (rc == SL_OK)
		log_choice(t, w, buf->dt, ns, n_ns);
	kern_cold_bench_free(&b);
	return rc;
}

const int *kern_qgemm_tune_ns(int *count)
{
	*count = QT_NS;
	return k_tune_ns;
}
