/*
 * quant_split.cu — int8 weights (per-row scales) on the int8 tensor cores
 * with x kept to 15 bits (KERN_QPATH_INT8_SPLIT; semantics in quant.h,
 * kern_qmatmul_int8_split_cpu).
 *
 * Why: at 64 to 256 tokens the dequantizing GEMMs (quant_gemm.cu,
 * quant_gemm_wgmma.cu) run at 250-420 TFLOP/s where cuBLAS's fp16 GEMM
 * runs near 700, so int8 weights decoded slower than fp16 from batch 64
 * up (bench/results/2026-11-30-nvidia-h200-x2-test-gpu/quant-b256). The
 * int8 tensor cores run at twice fp16's rate, but x in int8 alone costs
 * SmolLM2 about 1.3% more perplexity than the weight-only int8 (CPU,
 * 1024 tokens: +1.60% against +0.35%), past int8's +1% bound. So x keeps
 * 15 bits: per token q = round(x / s), s = max|x| / 16383, cut into two
 * int8 slices q = 256 h + l (h in [-64, 64], l in [-128, 127]) that
 * stand as 2n columns of one int8 GEMM (cuBLAS, int32 sums, exact): W is
 * read once and the tensor work is fp16's. A pass makes out = (256 D_h +
 * D_l) s_w s_x. x's rounding (at most s / 2 a value) is finer than fp16's
 * own for values above max|x| / 8; the int32 sums are exact where the
 * GEMMs sum in fp32. The idea is the Ozaki scheme's (wide products from
 * int8 slices on integer tensor cores).
 *
 * Buffers (the kern_qblas's): the slices [2n, cols] and scales [n], and
 * the int32 product [2n, rows of a slab] in the dequantization scratch:
 * W's rows go in slabs that fit it.
 *
 * The GEMM is cuBLASLt's, its algorithm per product shape cached (host
 * calls only, so a graph capture may make a plan). At 128-256 tokens the
 * heuristic's first algorithm was up to 45% slower than the best of the
 * others it offers (lab-qgemv table 11), so kern_qsplit_tune times the
 * first eight on each weight shape at 64, 96, ..., 256 tokens, once at
 * start-up (the engine's reserve, before any capture), and keeps one
 * only where it beats the first by 10%: a near tie measured once as a
 * win ran 1.5% slower end to end. Every algorithm gives the same bits
 * (int32 sums are exact), so tuning moves speed only.
 *
 * Measured on an H200 (bench/results/2026-11-30-nvidia-h200-int8-split/):
 * the 7B int8 decode against the GEMM it replaces, tuned: +5.1% / +13.3% /
 * +5.8% / +12.6% at batch 64 / 128 / 192 / 256, -0.1% at 32; untuned
 * (the heuristic's first) +2.8% / +5.9% / +3.2% / -1.3%. At 64 tokens
 * cuBLAS's int8 kernels still read W at only 1.6-2.8 TB/s.
 */
#include <cublasLt.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_util.cuh"
#include "kernels/quant_dequant.cuh"

namespace {

constexpr int kSplitThreads = 256;

/* x's 15-bit code v / s rounded to nearest even, in [-max, max]; h, l
 * its slices (arithmetic shift: h = floor((q + 128) / 256)). */
__device__ __forceinline__ void split_code(float v, float inv, int8_t *h, int8_t *l)
{
	int q = __float2int_rn(__fmul_rn(v, inv));
	q = max(-KERN_QSPLIT_MAX, min(KERN_QSPLIT_MAX, q));
	const int hi = (q + 128) >> 8;
	*h = (int8_t)hi;
	*l = (int8_t)(q - hi * 256);
}

/* One block per token: s[t] = max|x[t]| / KERN_QSPLIT_MAX, h slices to
 * xq[t], l slices to xq[n + t]. Reads x twice (the max, then the codes);
 * cols % 8 == 0. */
template <typename T>
__global__ void __launch_bounds__(kSplitThreads) split_kernel(int8_t *__restrict__ xq,
							      float *__restrict__ xs,
							      const T *__restrict__ x, int n,
							      int cols)
{
	const T *xr = x + (size_t)blockIdx.x * cols;
	int8_t *hq = xq + (size_t)blockIdx.x * cols, *lq = xq + (size_t)(n + blockIdx.x) * cols;
	constexpr int step = kSplitThreads * 8;
	const float m = kern_block_max(kern_row_absmax8(xr, cols));
	const float sc = __fdiv_rn(m, (float)KERN_QSPLIT_MAX);
	if (threadIdx.x == 0)
		xs[blockIdx.x] = sc;
	const float inv = sc >= FLT_MIN ? __frcp_rn(sc) : 0.0f;
	for (int i = threadIdx.x * 8; i < cols; i += step) {
		float f[8];
		kern_load8(xr + i, f);
		int8_t h[8], l[8];
#pragma unroll
		for (int j = 0; j < 8; j++)
			split_code(f[j], inv, &h[j], &l[j]);
		*reinterpret_cast<uint2 *>(hq + i) = *reinterpret_cast<const uint2 *>(h);
		*reinterpret_cast<uint2 *>(lq + i) = *reinterpret_cast<const uint2 *>(l);
	}
}

/* A slab's product d ([2n][sr] int32: token t's h sums at t, its l sums
 * at n + t) to out[t, r0 + r] = (256 d_h + d_l) s_w[r0 + r] s_x[t], fp32
 * or T; the same operations, in the same order, as the CPU reference. */
template <typename T>
__global__ void combine_kernel(void *out, bool out_f32, const int32_t *__restrict__ d, int n,
			       int sr, int r0, int rows, const void *sw, bool sw_f16,
			       const float *__restrict__ xs)
{
	const size_t count = (size_t)n * sr, half = count;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x) {
		const int t = (int)(i / sr), r = (int)(i - (size_t)t * sr);
		const float sum = __fmaf_rn(256.0f, (float)d[i], (float)d[half + i]);
		const float v = __fmul_rn(__fmul_rn(sum, q_scale(sw, r0 + r, sw_f16)), xs[t]);
		const size_t o = (size_t)t * rows + r0 + r;
		if (out_f32)
			reinterpret_cast<float *>(out)[o] = v;
		else
			reinterpret_cast<T *>(out)[o] = kern_from_f32<T>(v);
	}
}

template <typename T>
int split_launch(int8_t *xq, float *xs, const void *x, int n, int cols, cudaStream_t st)
{
	split_kernel<T><<<n, kSplitThreads, 0, st>>>(xq, xs, (const T *)x, n, cols);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

template <typename T>
int combine_launch(void *out, bool out_f32, const int32_t *d, int n, int sr, int r0,
		   const kern_qweight *w, const float *xs, cudaStream_t st)
{
	const size_t count = (size_t)n * sr;
	const unsigned blocks = (unsigned)((count + 255) / 256 < 65535 ? (count + 255) / 256 : 65535);
	combine_kernel<T><<<blocks, 256, 0, st>>>(out, out_f32, d, n, sr, r0, w->rows, w->scales,
						  w->scale_dt == SL_DT_F16, xs);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

/* Rows a slab takes: as many as the scratch holds for 2n int32 columns,
 * a multiple of 128 unless all of W fits. */
int slab_rows(const kern_qsplit_ctx *c, int rows, int n)
{
	const size_t per_row = sizeof(int32_t) * 2 * (size_t)n;
	size_t sr = c->scratch_bytes / per_row;
	if (sr >= (size_t)rows)
		return rows;
	return (int)(sr / 128 * 128);
}

} // namespace

bool kern_qsplit_takes(const kern_qweight *w)
{
	return w->format == KERN_Q_INT8 && w->group == 0 && w->cols % 16 == 0;
}

/* ---- cuBLASLt plans, and the algorithms tuned for them ---- */

#define QS_PLANS 64      /* product shapes kept */
#define QS_TUNED 128     /* (weight shape, tokens) tuned */
#define QS_CANDIDATES 8  /* algorithms of the heuristic timed */
#define QS_TUNE_REPS 5   /* timed calls each (the median counts) */
#define QS_TUNE_GAIN 0.9 /* a candidate replaces the heuristic's first at 90% of its time */

/* Token counts tuned, each for the calls from the one before it (n <= 64
 * for the first): a call takes the algorithm tuned at the smallest of
 * these >= n, checked against its own layouts first, or when none was
 * kept there, the heuristic's first for its own shape. */
static const int k_tune_ns[] = {64, 96, 128, 160, 192, 224, 256};
#define QS_TUNE_NS (int)(sizeof k_tune_ns / sizeof *k_tune_ns)

/* One product: W's slab of m rows (of a weight of w_rows rows) x 2n
 * columns x k, its layouts and algorithm. */
typedef struct qs_plan {
	int m, n, k, w_rows;
	int state; /* 0 empty, 1 ready, -1 no algorithm */
	bool tuned;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulAlgo_t algo;
} qs_plan;

typedef struct qs_tuned {
	int rows, cols, n;
	cublasLtMatmulAlgo_t algo;
} qs_tuned;

struct kern_qsplit_plans {
	cublasLtMatmulDesc_t op; /* int8 x int8 -> int32, W transposed */
	cublasLtMatmulPreference_t pref;
	size_t workspace_bytes;
	qs_plan plans[QS_PLANS];
	int next;
	qs_tuned tuned[QS_TUNED];
	int n_tuned;
	int shapes[QS_TUNED][2]; /* (rows, cols) tuned, whatever was kept */
	int n_shapes;
};

static void plan_release(qs_plan *p)
{
	kern_lt_layouts_destroy(p->la, p->lb, p->ld);
	memset(p, 0, sizeof *p);
}

void kern_qsplit_plans_destroy(kern_qsplit_plans *p)
{
	if (!p)
		return;
	for (int i = 0; i < QS_PLANS; i++)
		plan_release(&p->plans[i]);
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
	if (p->pref)
		cublasLtMatmulPreferenceDestroy(p->pref);
	free(p);
}

int kern_qsplit_plans_create(size_t workspace_bytes, kern_qsplit_plans **out)
{
	kern_qsplit_plans *p = (kern_qsplit_plans *)calloc(1, sizeof *p);
	if (!p)
		return SL_ENOMEM;
	const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
	const uint64_t ws = workspace_bytes;
	p->workspace_bytes = workspace_bytes;
	if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32I, CUDA_R_32I) ||
	    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT) ||
	    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN) ||
	    cublasLtMatmulPreferenceCreate(&p->pref) ||
	    cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
						 &ws, sizeof ws)) {
		kern_qsplit_plans_destroy(p);
		return sl_fail(SL_EDEVICE, "quant: no cuBLASLt int8 GEMM descriptor");
	}
	*out = p;
	return SL_OK;
}

/* W's slab [k, m] (op T), the slices [k, 2n], D int32 [m, 2n]. */
static bool plan_layouts(qs_plan *p, int m, int n, int k)
{
	return cublasLtMatrixLayoutCreate(&p->la, CUDA_R_8I, k, m, k) == CUBLAS_STATUS_SUCCESS &&
	       cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_8I, k, 2 * n, k) == CUBLAS_STATUS_SUCCESS &&
	       cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_32I, m, 2 * n, m) == CUBLAS_STATUS_SUCCESS;
}

/* The algorithm kept for a rows x cols weight at n's tuned token count
 * (the smallest of k_tune_ns >= n); NULL when none was. */
static const qs_tuned *tuned_for(const kern_qsplit_plans *P, int rows, int cols, int n)
{
	int at = 0;
	for (int i = QS_TUNE_NS - 1; i >= 0; i--)
		if (k_tune_ns[i] >= n)
			at = k_tune_ns[i];
	for (int i = 0; i < P->n_tuned; i++) {
		const qs_tuned *t = &P->tuned[i];
		if (t->rows == rows && t->cols == cols && t->n == at)
			return t;
	}
	return NULL;
}

static bool shape_tuned(const kern_qsplit_plans *P, int rows, int cols)
{
	for (int i = 0; i < P->n_shapes; i++)
		if (P->shapes[i][0] == rows && P->shapes[i][1] == cols)
			return true;
	return false;
}

/* The tuned algorithm when it takes these layouts within the workspace,
 * else the heuristic's first. */
static bool plan_algo(cublasLtHandle_t lt, const kern_qsplit_plans *P, qs_plan *p)
{
	const qs_tuned *t = tuned_for(P, p->w_rows, p->k, p->n);
	cublasLtMatmulHeuristicResult_t r;
	if (t && cublasLtMatmulAlgoCheck(lt, P->op, p->la, p->lb, p->ld, p->ld, &t->algo, &r) ==
			 CUBLAS_STATUS_SUCCESS &&
	    r.workspaceSize <= P->workspace_bytes) {
		p->algo = t->algo;
		p->tuned = true;
		return true;
	}
	int found = 0;
	if (cublasLtMatmulAlgoGetHeuristic(lt, P->op, p->la, p->lb, p->ld, p->ld, P->pref, 1, &r,
					   &found) != CUBLAS_STATUS_SUCCESS ||
	    found < 1)
		return false;
	p->algo = r.algo;
	return true;
}

/* The cached plan of one product (host calls only: safe while a graph is
 * being captured); NULL when cuBLASLt has no algorithm for it. */
static const qs_plan *plan_get(const kern_qsplit_ctx *c, int m, int n, int k, int w_rows)
{
	kern_qsplit_plans *P = c->plans;
	for (int i = 0; i < QS_PLANS; i++) {
		const qs_plan *p = &P->plans[i];
		if (p->state && p->m == m && p->n == n && p->k == k && p->w_rows == w_rows)
			return p->state > 0 ? p : NULL;
	}
	qs_plan *p = &P->plans[P->next];
	P->next = (P->next + 1) % QS_PLANS;
	plan_release(p);
	p->m = m, p->n = n, p->k = k, p->w_rows = w_rows;
	const bool ok = plan_layouts(p, m, n, k) && plan_algo((cublasLtHandle_t)c->lt, P, p);
	p->state = ok ? 1 : -1;
	return ok ? p : NULL;
}

static cublasStatus_t plan_matmul(const kern_qsplit_ctx *c, const cublasLtMatrixLayout_t l[3],
				  const cublasLtMatmulAlgo_t *algo, const void *a)
{
	const int32_t one = 1, zero = 0;
	return cublasLtMatmul((cublasLtHandle_t)c->lt, c->plans->op, &one, a, l[0], c->xq, l[1],
			      &zero, c->scratch, l[2], c->scratch, l[2], algo, c->workspace,
			      c->workspace_bytes, c->stream);
}

/* ---- the call ---- */

/* One slab of W's rows [r0, r0 + m): the int8 GEMM into the scratch, then
 * the pass into out. SL_ENOTSUP when cuBLASLt has no algorithm for it or
 * refuses the product. */
static int run_slab(const kern_qsplit_ctx *c, const kern_qweight *w, void *out, bool out_f32,
		    sl_dtype x_dt, int n, int r0, int m)
{
	const qs_plan *p = plan_get(c, m, n, w->cols, w->rows);
	if (!p)
		return SL_ENOTSUP;
	const cublasLtMatrixLayout_t l[3] = {p->la, p->lb, p->ld};
	/* D [m, 2n] (column-major, ld m) = W's slab (op T of [cols, m]) x the slices */
	const cublasStatus_t st =
		plan_matmul(c, l, &p->algo, (const int8_t *)w->data + (size_t)r0 * w->cols);
	if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)
		return SL_ENOTSUP;
	if (st != CUBLAS_STATUS_SUCCESS)
		return sl_fail(SL_EDEVICE, "quant: int8 GEMM: %s", cublasGetStatusString(st));
	KERN_DISPATCH_DT(x_dt, combine_launch, out, out_f32, (const int32_t *)c->scratch, n, m, r0,
			 w, c->xs, c->stream);
}

int kern_qsplit_run(const kern_qsplit_ctx *c, const kern_qweight *w, void *out, bool out_f32,
		    const void *x, sl_dtype x_dt, int n)
{
	if (!kern_qsplit_takes(w) || n > c->max_tokens || w->cols > c->max_cols)
		return SL_ENOTSUP;
	const int sr = slab_rows(c, w->rows, n);
	if (sr < 1 || !plan_get(c, w->rows < sr ? w->rows : sr, n, w->cols, w->rows))
		return SL_ENOTSUP; /* before anything is launched */
	int rc = SL_OK;
	switch (x_dt) {
	case SL_DT_F16: rc = split_launch<__half>(c->xq, c->xs, x, n, w->cols, c->stream); break;
	case SL_DT_BF16:
		rc = split_launch<__nv_bfloat16>(c->xq, c->xs, x, n, w->cols, c->stream);
		break;
	default: return SL_ENOTSUP;
	}
	for (int r0 = 0; rc == SL_OK && r0 < w->rows; r0 += sr) {
		rc = run_slab(c, w, out, out_f32, x_dt, n, r0, w->rows - r0 < sr ? w->rows - r0 : sr);
		if (rc == SL_ENOTSUP && r0) /* the first slab was taken: a refusal now is a failure */
			rc = sl_fail(SL_EDEVICE, "quant: int8 GEMM refused the slab at row %d", r0);
	}
	return rc;
}

/* ---- tuning ---- */

/* What tuning one token count borrows: a weight of the shape, and the
 * cold-W timing's buffer and events. */
typedef struct qs_bench {
	void *w;
	kern_cold_bench cold;
} qs_bench;

/* Median us of QS_TUNE_REPS calls of one algorithm, W cold (L2 written
 * over first); negative when cuBLASLt refuses it. */
static double time_algo(const kern_qsplit_ctx *c, const qs_bench *b,
			const cublasLtMatrixLayout_t l[3], const cublasLtMatmulAlgo_t *algo)
{
	if (plan_matmul(c, l, algo, b->w) != CUBLAS_STATUS_SUCCESS)
		return -1;
	return kern_cold_time(c->stream, &b->cold, QS_TUNE_REPS, [&] {
		return plan_matmul(c, l, algo, b->w) == CUBLAS_STATUS_SUCCESS;
	});
}

/* The fastest of the heuristic's candidates for a rows x cols weight at
 * n tokens (its first slab), kept in c->plans; logs the choice. */
static int tune_one(const kern_qsplit_ctx *c, const qs_bench *b, int rows, int cols, int n)
{
	kern_qsplit_plans *P = c->plans;
	const int sr = slab_rows(c, rows, n), m = rows < sr ? rows : sr;
	qs_plan lay = {};
	cublasLtMatmulHeuristicResult_t res[QS_CANDIDATES];
	int found = 0;
	if (m < 1 || !plan_layouts(&lay, m, n, cols) ||
	    cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, P->op, lay.la, lay.lb, lay.ld,
					   lay.ld, P->pref, QS_CANDIDATES, res, &found) ||
	    found < 1) {
		plan_release(&lay);
		return SL_OK; /* nothing to choose from: calls take the heuristic's, or refuse */
	}
	const cublasLtMatrixLayout_t l[3] = {lay.la, lay.lb, lay.ld};
	int best = -1;
	double best_us = 0, first_us = 0;
	for (int a = 0; a < found; a++) {
		const double us = time_algo(c, b, l, &res[a].algo);
		cudaGetLastError(); /* a refused candidate leaves nothing behind */
		if (a == 0)
			first_us = us;
		if (us > 0 && (best < 0 || us < best_us))
			best = a, best_us = us;
	}
	plan_release(&lay);
	/* the timings carry noise: only a clear win replaces the heuristic's
	 * choice (at 64 tokens a near tie measured once as a win ran 1.5%
	 * slower end to end) */
	const bool keep = best > 0 && first_us > 0 && best_us < QS_TUNE_GAIN * first_us;
	sl_log(SL_LOG_DEBUG, "cuda",
	       "quant: int8 split %d x %d at %d tokens: %s %d of %d, %.1f us (the heuristic's "
	       "first %.1f)", rows, cols, n, keep ? "algorithm" : "kept the first; best", best,
	       found, best_us, first_us);
	if (!keep)
		return SL_OK;
	if (P->n_tuned == QS_TUNED)
		return sl_fail(SL_ENOTSUP, "quant: int8 tuning table full");
	qs_tuned *t = &P->tuned[P->n_tuned++];
	t->rows = rows, t->cols = cols, t->n = n, t->algo = res[best].algo;
	return SL_OK;
}

int kern_qsplit_tune(const kern_qsplit_ctx *c, int rows, int cols)
{
	if (rows < 1 || cols < 16 || cols % 16 || cols > c->max_cols)
		return sl_fail(SL_EINVAL, "quant: int8 tuning: a %d x %d weight", rows, cols);
	if (shape_tuned(c->plans, rows, cols))
		return SL_OK;
	if (c->plans->n_shapes == QS_TUNED)
		return sl_fail(SL_ENOTSUP, "quant: int8 tuning table full");
	qs_bench b = {};
	int rc = SL_EDEVICE;
	if (kern_cold_bench_init(&b.cold) == SL_OK &&
	    cudaMalloc(&b.w, (size_t)rows * cols) == cudaSuccess &&
	    cudaMemsetAsync(b.w, 0x35, (size_t)rows * cols, c->stream) == cudaSuccess &&
	    cudaMemsetAsync(c->xq, 0x1b, 2 * (size_t)c->max_tokens * cols, c->stream) == cudaSuccess) {
		rc = SL_OK;
		for (int n : k_tune_ns)
			if (n <= c->max_tokens && rc == SL_OK)
				rc = tune_one(c, &b, rows, cols, n);
	} else {
		rc = sl_fail(SL_EDEVICE, "quant: int8 tuning: %s", cudaGetErrorString(cudaGetLastError()));
	}
	cudaStreamSynchronize(c->stream);
	cudaFree(b.w);
	kern_cold_bench_free(&b.cold);
	if (rc == SL_OK) {
		c->plans->shapes[c->plans->n_shapes][0] = rows;
		c->plans->shapes[c->plans->n_shapes++][1] = cols;
	}
	/* plans made before with the heuristic's algorithm are remade on use */
	for (int i = 0; i < QS_PLANS; i++)
		if (c->plans->plans[i].w_rows == rows && c->plans->plans[i].k == cols)
			plan_release(&c->plans->plans[i]);
	return rc;
}
