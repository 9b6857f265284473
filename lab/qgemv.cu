/*
 * lab/qgemv.cu — the quantized linear layer (kernels/quant.cu) on the
 * Llama-2-7B projections (qkv 4096 -> 12288, o 4096 -> 4096, gate_up
 * 4096 -> 22016, down 11008 -> 4096), against fp16 (kernels/matmul.cu) and
 * the device's copy bandwidth, on the local GPU. Until issue 36 this was
 * bench/qgemv.cu, built as shardline-qbench.
 *
 *   make CUDA=1 lab-qgemv           -> build/bin/lab-qgemv
 *   build/bin/lab-qgemv [--out FILE.json] [--only 1-11] [--lt-n 2048,...]
 *                       [--check | --no-check] [--meta]
 *
 * --meta: int4 weights with fp16 group scales carry their meta words
 * (kern_qweight_meta_pack), as the engine's do; the timed copies' words
 * are the pool's bytes (timing only), the check's are packed from its
 * weights. GB/s counts codes, scales and zero points either way.
 *
 * First, as in llm.c's dev/cuda, the check (table 0; --check: it alone,
 * --no-check: skip it): every quantized format's library paths and every
 * table-4 block shape (numbered, as they print) against the CPU reference
 * of kernels/quant.c (kern_qmatmul_cpu, kern_qmatmul_w8a8_cpu for fp8's
 * W8A8) on random weights and activations; a failure stops the run
 * (exit 1) before anything is timed.
 *
 * Reports, after the device name and copy bandwidth (bytes read + written
 * per second by a 1 GiB device-to-device cudaMemcpy, as shardline-bench-decode):
 *   1. decode, n = 1, 8, 32, 64 tokens: GB/s of weight bytes read (codes,
 *      scales and zero points) and % of copy bandwidth, per format and
 *      path (the GEMV; at 32 and 64 also dequantize + cuBLAS, fp8's
 *      W8A8 cuBLASLt GEMM and the tiled GEMM, to place
 *      kern_qblas_set_gemv_max and kern_qblas_set_gemm_range);
 *   2. the 7B decode step's projections at n = 1 (32 layers + the fp16 LM
 *      head): ms per token and the tokens/s they allow;
 *   3. prefill, n = 2048: TFLOP/s per format and path (the GEMM too);
 *   4. the GEMV's block shapes at n = 1 (KSPLIT warps x UNROLL chunks,
 *      and resident blocks an SM), the library's marked; "w..." the wide
 *      GEMV's (qgemv_wide_kernel), "rN" N row tiles a block, "p..." the
 *      wide GEMV refilling each chunk's registers as it is used;
 *   5. fp8 W8A8 at n = 32, 64, 128: every algorithm cuBLASLt's heuristic
 *      offers (#0 is the one the library takes), us and weight GB/s, with
 *      the heuristic's own waves estimate;
 *   6. fp8 W8A8 at prefill sizes (--lt-n, default 2048) on random codes:
 *      every algorithm the heuristic offers, then cuBLASLt's fast
 *      accumulation, per-tensor scales, and per-row scales on one operand
 *      only (what the library's choices cost), then every (algorithm id,
 *      tile, stages, cluster) it accepts, fastest first: TFLOP/s and us;
 *   7. batched decode, n = 16, 32, 64, 128, 192, 256: us per call of every
 *      path (GEMV to 64, GEMM, DEQUANT, fp8's W8A8, int8's split path,
 *      AUTO) against fp16,
 *      and a 7B layer's four projections as a multiple of fp16's speed;
 *   8. the GEMM's block shapes (kernels/quant_gemm.cu's variants) at the
 *      same batches: us per call, the fastest marked;
 *   9. fp8's W8A8 on cuBLASLt at 33..256 tokens with K in 1, 2, 4 and 8
 *      slices run at once, and the library's rule (kern_qblas_set_lt_splits):
 *      us per call, the fastest marked with its share of copy bandwidth;
 *  10. the tiled GEMM at 16-128 tokens with its columns split 1 .. 12
 *      ways (SL_QGEMM_SPLITS) against the library's rule: us per call;
 *  11. the int8 split path's GEMM alone at 32-256 tokens: cublasGemmEx's
 *      choice against every cuBLASLt heuristic algorithm, us per call.
 * Each timed call reads a different copy of W (copies rotate through more
 * than 2 GiB, so nothing is served from L2); every timing is the median of
 * CUDA-graph replays, as the engine's decode steps run. Runs in well under
 * two minutes on an H100. --out FILE writes everything as JSON.
 *
 * It includes quant.cu itself to sweep the GEMV's template parameters,
 * which the library fixes (as lab/gemv.cu does with matmul.cu).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant.cu"

#define CK(call)                                                                            \
	do {                                                                                \
		cudaError_t e_ = (call);                                                    \
		if (e_ != cudaSuccess) {                                                    \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
				cudaGetErrorString(e_));                                    \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

typedef struct fmt {
	const char *name;
	int format; /* KERN_Q_NONE: fp16 through kernels/matmul.cu */
	int group, scale_dt, zeros;
} fmt;

static const fmt k_fmts[] = {
	{"fp16", KERN_Q_NONE, 0, 0, 0},
	{"int8/row", KERN_Q_INT8, 0, SL_DT_F32, 0},
	{"int8/g128", KERN_Q_INT8, 128, SL_DT_F16, 0},
	{"int8/g32", KERN_Q_INT8, 32, SL_DT_F16, 0},
	{"fp8/row", KERN_Q_FP8, 0, SL_DT_F32, 0},
	{"int4/g128", KERN_Q_INT4, 128, SL_DT_F16, 1},
	{"int4/g128s", KERN_Q_INT4, 128, SL_DT_F16, 0},
	{"int4/g32", KERN_Q_INT4, 32, SL_DT_F16, 0}, /* GGUF Q4_1's d * u + m */
};
#define N_FMTS (int)(sizeof k_fmts / sizeof *k_fmts)

typedef struct shp {
	const char *name;
	int rows, cols; /* out_dim, in_dim */
} shp;

static const shp k_shapes[] = {
	{"qkv", 12288, 4096}, {"o", 4096, 4096}, {"gate_up", 22016, 4096}, {"down", 4096, 11008}};
#define N_SHAPES 4

static cudaStream_t g_st;
static kern_blas *g_blas;
static kern_qblas *g_qb;
static char *g_pool; /* weight copies */
static bool g_meta;  /* --meta */
static size_t g_pool_bytes;
static __half *g_x;   /* [2048, 11008] */
static void *g_out;   /* [2048, 32000] fp32-sized */
static cJSON *g_rows; /* one object per measurement */
static double g_copy_bw;
static int g_sm_count;

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* One copy of a weight: its codes, scales and zero points, 256-aligned. */
static size_t copy_bytes(const fmt &f, const shp &s, size_t *data, size_t *scales)
{
	if (f.format == KERN_Q_NONE) {
		*data = (size_t)s.rows * s.cols * 2;
		*scales = 0;
		return align256(*data);
	}
	kern_qweight w = {f.format, s.rows, s.cols, f.group, f.scale_dt, NULL, NULL, NULL};
	*data = kern_qweight_data_bytes(&w);
	*scales = kern_qweight_scale_bytes(&w);
	size_t z = f.zeros ? kern_qweight_zero_bytes(&w) : 0;
	size_t m = g_meta ? kern_qweight_meta_bytes(&w) : 0;
	return align256(*data) + align256(*scales) + align256(z) + align256(m);
}

/* The bytes a call must read from memory: codes, scales, zero points. */
static double weight_bytes(const fmt &f, const shp &s)
{
	size_t d, sc;
	copy_bytes(f, s, &d, &sc);
	kern_qweight w = {f.format, s.rows, s.cols, f.group, f.scale_dt, NULL, NULL, NULL};
	return (double)d + (double)sc + (f.zeros ? (double)kern_qweight_zero_bytes(&w) : 0.0);
}

static kern_qweight copy_at(const fmt &f, const shp &s, int i)
{
	size_t d, sc, per = copy_bytes(f, s, &d, &sc);
	char *base = g_pool + (size_t)i * per;
	kern_qweight w = {f.format, s.rows, s.cols, f.group, f.scale_dt, base, NULL, NULL};
	w.scales = base + align256(d);
	w.zeros = f.zeros ? base + align256(d) + align256(sc) : NULL;
	const size_t z = f.zeros ? kern_qweight_zero_bytes(&w) : 0;
	if (g_meta && kern_qweight_meta_bytes(&w))
		w.meta = base + align256(d) + align256(sc) + align256(z);
	return w;
}

/* Median over `reps` replays of a graph of `calls` calls, ms per call. */
static double time_calls(const std::function<int(int)> &call, int calls, int reps)
{
	if (call(0)) /* warm: plans, cuBLAS kernels, module loading */
		return -1;
	CK(cudaStreamSynchronize(g_st));
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(g_st, cudaStreamCaptureModeThreadLocal));
	int rc = 0;
	for (int i = 0; i < calls && !rc; i++)
		rc = call(i);
	CK(cudaStreamEndCapture(g_st, &g));
	if (rc) {
		cudaGraphDestroy(g);
		return -1;
	}
	CK(cudaGraphInstantiate(&ge, g, 0));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaGraphLaunch(ge, g_st));
	std::vector<float> ms(reps);
	for (int r = 0; r < reps; r++) {
		CK(cudaEventRecord(e0, g_st));
		CK(cudaGraphLaunch(ge, g_st));
		CK(cudaEventRecord(e1, g_st));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms[r], e0, e1));
	}
	std::sort(ms.begin(), ms.end());
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	return ms[reps / 2] / calls;
}

static const char *path_label(int format, int path)
{
	if (format == KERN_Q_NONE)
		return "matmul";
	return path == KERN_QPATH_AUTO     ? "auto"
	       : path == KERN_QPATH_GEMV   ? "gemv"
	       : path == KERN_QPATH_FP8_LT ? "w8a8-lt"
	       : path == KERN_QPATH_GEMM   ? "gemm"
	       : path == KERN_QPATH_INT8_SPLIT ? "i8split"
					   : "dequant";
}

/* One measurement: ms per call of format f, shape s, n tokens on `path`
 * (KERN_QPATH_AUTO: the library's choice), over rotating copies. */
static double measure(const fmt &f, const shp &s, int n, int path, int *taken)
{
	size_t d, sc, per = copy_bytes(f, s, &d, &sc);
	int copies = (int)(g_pool_bytes / per);
	/* cold weights: > 2 GiB per graph when decoding, a few calls when compute bound */
	int calls = n > 64 ? 4 : (int)(((size_t)2 << 30) / per) + 1;
	if (f.format == KERN_Q_NONE) {
		*taken = 0;
		return time_calls([&](int i) {
			return kern_matmul_cuda(g_blas, g_out, g_x, g_pool + (size_t)(i % copies) * per, n,
						s.cols, s.rows, SL_DT_F16);
		}, calls, 7);
	}
	kern_qweight w0 = copy_at(f, s, 0);
	*taken = path == KERN_QPATH_AUTO ? kern_qmatmul_path(g_qb, &w0, n, SL_DT_F16, SL_DT_F16)
					 : path;
	double ms = time_calls([&](int i) {
		kern_qweight w = copy_at(f, s, i % copies);
		return kern_qmatmul_cuda(g_qb, path, g_out, SL_DT_F16, g_x, SL_DT_F16, &w, n);
	}, calls, 7);
	if (path == KERN_QPATH_AUTO) /* a refused cuBLASLt call went to DEQUANT */
		*taken = kern_qmatmul_path(g_qb, &w0, n, SL_DT_F16, SL_DT_F16);
	return ms;
}

static void record(const fmt &f, const shp &s, int n, int path, double ms, const char *table)
{
	cJSON *r = cJSON_CreateObject();
	double gbs = weight_bytes(f, s) / (ms * 1e6);
	cJSON_AddStringToObject(r, "table", table);
	cJSON_AddStringToObject(r, "format", f.name);
	cJSON_AddStringToObject(r, "path", path_label(f.format, path));
	cJSON_AddStringToObject(r, "shape", s.name);
	cJSON_AddNumberToObject(r, "rows", s.rows);
	cJSON_AddNumberToObject(r, "cols", s.cols);
	cJSON_AddNumberToObject(r, "n", n);
	cJSON_AddNumberToObject(r, "us", ms * 1e3);
	cJSON_AddNumberToObject(r, "weight_bytes", weight_bytes(f, s));
	cJSON_AddNumberToObject(r, "weight_GBps", gbs);
	cJSON_AddNumberToObject(r, "pct_copy_bandwidth", 100 * gbs * 1e9 / g_copy_bw);
	cJSON_AddNumberToObject(r, "TFLOPs", 2.0 * n * s.rows * s.cols / (ms * 1e9));
	cJSON_AddItemToArray(g_rows, r);
}

/* Bytes read + written per second by a device-to-device copy of 1 GiB. */
static double copy_bandwidth(void)
{
	size_t n = (size_t)1 << 30;
	void *a, *b;
	cudaEvent_t e0, e1;
	float ms = 0;
	CK(cudaMalloc(&a, n));
	CK(cudaMalloc(&b, n));
	CK(cudaMemset(a, 1, n));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
	CK(cudaEventRecord(e0, 0));
	for (int i = 0; i < 20; i++)
		CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
	CK(cudaEventRecord(e1, 0));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	cudaFree(a);
	cudaFree(b);
	return 2.0 * n * 20 / (ms * 1e-3);
}

/* ---- 1. decode ---- */

static void table_decode(void)
{
	static const int ns[] = {1, 8, 32, 64};
	printf("\n1. decode: GB/s of weights read (%% of copy bandwidth); cold W, fp16 x\n");
	printf("%-11s %-8s %-8s", "format", "path", "shape");
	for (int n : ns) {
		char h[16];
		snprintf(h, sizeof h, "n=%d", n);
		printf(" %13s", h);
	}
	printf("\n");
	for (int fi = 0; fi < N_FMTS; fi++) {
		const fmt &f = k_fmts[fi];
		/* the library's choice, then the large-n paths at 32 and 64 */
		int paths[3] = {KERN_QPATH_AUTO,
				f.format == KERN_Q_FP8 ? KERN_QPATH_FP8_LT : KERN_QPATH_DEQUANT,
				KERN_QPATH_GEMM};
		int n_paths = f.format == KERN_Q_NONE ? 1 : 3;
		for (int pi = 0; pi < n_paths; pi++)
			for (int si = 0; si < N_SHAPES; si++) {
				const shp &s = k_shapes[si];
				int label = -1;
				char line[256];
				int len = 0;
				for (int n : ns) {
					if (pi >= 1 && n < 32) {
						len += snprintf(line + len, sizeof line - len, " %13s", "-");
						continue;
					}
					int taken;
					double ms = measure(f, s, n, paths[pi], &taken);
					if (label < 0 || taken != KERN_QPATH_GEMV)
						label = taken;
					if (ms < 0) {
						len += snprintf(line + len, sizeof line - len, " %13s", "n/a");
						continue;
					}
					double gbs = weight_bytes(f, s) / (ms * 1e6);
					record(f, s, n, taken, ms, "decode");
					len += snprintf(line + len, sizeof line - len, " %6.0f (%3.0f%%)", gbs,
							100 * gbs * 1e9 / g_copy_bw);
				}
				printf("%-11s %-8s %-8s%s\n", f.name, path_label(f.format, label), s.name,
				       line);
				fflush(stdout);
			}
	}
}

/* ---- 2. the 7B decode step's projections ---- */

static void step_estimate(cJSON *j)
{
	/* the LM head stays fp16: 4096 -> 32000, fp32 logits */
	const shp lm = {"lm_head", 32000, 4096};
	const fmt &f16 = k_fmts[0];
	size_t d, sc, per = copy_bytes(f16, lm, &d, &sc);
	int copies = (int)(g_pool_bytes / per);
	double lm_ms = time_calls([&](int i) {
		return kern_matmul_f32out_cuda(g_blas, (float *)g_out, g_x,
					       g_pool + (size_t)(i % copies) * per, 1, lm.cols, lm.rows,
					       SL_DT_F16);
	}, (int)(((size_t)2 << 30) / per) + 1, 7);
	printf("\n2. 7B decode step at n=1: 32 x (qkv + o + gate_up + down) + fp16 LM head (%.1f us)\n",
	       lm_ms * 1e3);
	printf("%-11s %10s %10s %12s %14s\n", "format", "GB/token", "ms/token", "tokens/s",
	       "GB/s overall");
	cJSON *arr = cJSON_AddArrayToObject(j, "decode_step_n1");
	for (int fi = 0; fi < N_FMTS; fi++) {
		const fmt &f = k_fmts[fi];
		double ms = lm_ms, bytes = (double)lm.rows * lm.cols * 2;
		for (int si = 0; si < N_SHAPES; si++) {
			int taken;
			double t = measure(f, k_shapes[si], 1, KERN_QPATH_AUTO, &taken);
			ms += 32 * t;
			bytes += 32 * weight_bytes(f, k_shapes[si]);
		}
		printf("%-11s %10.2f %10.3f %12.0f %9.0f (%2.0f%%)\n", f.name, bytes / 1e9, ms,
		       1e3 / ms, bytes / (ms * 1e6), 100 * bytes / (ms * 1e-3) / g_copy_bw);
		cJSON *r = cJSON_CreateObject();
		cJSON_AddStringToObject(r, "format", f.name);
		cJSON_AddNumberToObject(r, "bytes_per_token", bytes);
		cJSON_AddNumberToObject(r, "ms_per_token", ms);
		cJSON_AddNumberToObject(r, "tokens_per_s", 1e3 / ms);
		cJSON_AddItemToArray(arr, r);
		fflush(stdout);
	}
	printf("(projections and LM head only, back to back: no attention, norms or launch gaps)\n");
}

/* ---- 3. prefill ---- */

static void table_prefill(void)
{
	const int n = 2048;
	printf("\n3. prefill, n=%d: TFLOP/s (us per call)\n%-11s %-8s", n, "format", "path");
	for (int si = 0; si < N_SHAPES; si++)
		printf(" %17s", k_shapes[si].name);
	printf("\n");
	for (int fi = 0; fi < N_FMTS; fi++) {
		const fmt &f = k_fmts[fi];
		/* fp8: W8A8 and its fallback; every format: the GEMM too */
		int paths[3] = {KERN_QPATH_AUTO, KERN_QPATH_DEQUANT, KERN_QPATH_GEMM};
		int n_paths = f.format == KERN_Q_NONE ? 1 : 3;
		for (int pi = 0; pi < n_paths; pi++) {
			if (pi == 1 && f.format != KERN_Q_FP8)
				continue;
			int label = paths[pi];
			char line[256];
			int len = 0;
			for (int si = 0; si < N_SHAPES; si++) {
				const shp &s = k_shapes[si];
				int taken;
				double ms = measure(f, s, n, paths[pi], &taken);
				label = taken;
				if (ms < 0) {
					len += snprintf(line + len, sizeof line - len, " %17s", "n/a");
					continue;
				}
				record(f, s, n, taken, ms, "prefill");
				len += snprintf(line + len, sizeof line - len, " %7.0f (%7.0f)",
						2.0 * n * s.rows * s.cols / (ms * 1e9), ms * 1e3);
			}
			printf("%-11s %-8s%s\n", f.name, path_label(f.format, label), line);
			fflush(stdout);
		}
	}
}

/* ---- 4. GEMV block shapes at n = 1 ---- */

/* KS warps x U chunks, MB blocks an SM (0: the library's qg_min_blocks) */
template <int FMT, int GM, int KS, int U, int MB = 0>
static int call_variant(const kern_qweight &w)
{
	qgemv_args a = qgemv_args_of(&w, g_out, false, 1);
	return qgemv_run<__half, FMT, GM, 1, KS, U, MB>(g_qb, a, g_x);
}

/* The wide GEMV (qgemv_wide_kernel): KS warps x U chunks, MB blocks an
 * SM, RT row tiles a block. */
template <int FMT, int GM, int KS, int U, int MB, int RT, bool ROLL = false>
static int call_wide(const kern_qweight &w)
{
	qgemv_args a = qgemv_args_of(&w, g_out, false, 1);
	return qgemv_wide_run<__half, FMT, GM, KS, U, MB, RT, ROLL>(g_qb, a, g_x);
}

/* The block shapes table 4 times and the check checks, numbered in that
 * order: each for int8/row, fp8/row and int4/g128. */
typedef int (*vfn)(const kern_qweight &);
struct qvariant {
	const char *name;
	vfn fn[3]; /* int8/row, fp8, int4 */
};
#define QW(name, KS, U, MB, RT)                                                               \
	{                                                                                     \
		name, {                                                                       \
			call_wide<KERN_Q_INT8, QG_ROW, KS, U, MB, RT>,                        \
				call_wide<KERN_Q_FP8, QG_ROW, KS, U, MB, RT>,                 \
				call_wide<KERN_Q_INT4, QG_CHUNK, KS, U, MB, RT>               \
		}                                                                             \
	}
#define QP(name, KS, U, MB)                                                                   \
	{                                                                                     \
		name, {                                                                       \
			call_wide<KERN_Q_INT8, QG_ROW, KS, U, MB, 1, true>,                   \
				call_wide<KERN_Q_FP8, QG_ROW, KS, U, MB, 1, true>,            \
				call_wide<KERN_Q_INT4, QG_CHUNK, KS, U, MB, 1, true>          \
		}                                                                             \
	}
#define QV(name, KS, U, MB)                                                                   \
	{                                                                                     \
		name, {                                                                       \
			call_variant<KERN_Q_INT8, QG_ROW, KS, U, MB>,                         \
				call_variant<KERN_Q_FP8, QG_ROW, KS, U, MB>,                  \
				call_variant<KERN_Q_INT4, QG_CHUNK, KS, U, MB>                \
		}                                                                             \
	}
static const qvariant k_qvariants[] = {
	QV("8x2", 8, 2, 0),   QV("8x2/2", 8, 2, 2), QV("8x3/2", 8, 3, 2),
	QV("4x4/4", 4, 4, 4), QV("4x2/6", 4, 2, 6), QV("4x4/5", 4, 4, 5),
	QV("4x2/8", 4, 2, 8), QV("4x3/6", 4, 3, 6), QV("8x1/4", 8, 1, 4), QV("16x2", 16, 2, 0),
	/* the wide GEMV: "w", then "rN" for N row tiles a block */
	QW("w16x2/2", 16, 2, 2, 1), QW("w8x2/2", 8, 2, 2, 1), QW("w4x2/6", 4, 2, 6, 1),
	QW("w4x4/4", 4, 4, 4, 1), QW("w4x2/4r2", 4, 2, 4, 2), QW("w4x4/3r2", 4, 4, 3, 2),
	QW("w8x2/2r2", 8, 2, 2, 2), QW("w8x1/3r2", 8, 1, 3, 2), QW("w16x1/2r2", 16, 1, 2, 2),
	QW("w4x2/3r4", 4, 2, 3, 4), QW("w4x1/4r4", 4, 1, 4, 4),
	/* the wide GEMV refilling each chunk's registers as it is used (ROLL) */
	QP("p16x2/2", 16, 2, 2), QP("p8x2/2", 8, 2, 2), QP("p4x2/6", 4, 2, 6), QP("p4x4/4", 4, 4, 4),
	QP("p8x3/2", 8, 3, 2), QP("p8x4/2", 8, 4, 2), QP("p4x3/5", 4, 3, 5),
};
#undef QV
#undef QW
#undef QP
#define N_QVARIANTS (int)(sizeof k_qvariants / sizeof *k_qvariants)
static const int k_qvariant_fmt[3] = {1, 4, 5}; /* k_fmts: int8/row, fp8/row, int4/g128 */

static void table_variants(void)
{
	const int fmt_of[3] = {k_qvariant_fmt[0], k_qvariant_fmt[1], k_qvariant_fmt[2]};
	const int lib[3] = {qg_unroll<KERN_Q_INT8, QG_ROW, 1>(), qg_unroll<KERN_Q_FP8, QG_ROW, 1>(),
			    qg_unroll<KERN_Q_INT4, QG_CHUNK, 1>()};
	const int lib_ks[3] = {qg_ksplit<KERN_Q_INT8, QG_ROW, 1>(), qg_ksplit<KERN_Q_FP8, QG_ROW, 1>(),
			       qg_ksplit<KERN_Q_INT4, QG_CHUNK, 1>()};
	printf("\n4. GEMV block shapes at n=1 (KSPLIT warps x UNROLL chunks / blocks an SM, else "
	       "qg_min_blocks), GB/s; * = library\n");
	printf("%-11s %-8s", "format", "shape");
	for (const qvariant &v : k_qvariants)
		printf(" %8s", v.name);
	printf("\n");
	for (int k = 0; k < 3; k++) {
		const fmt &f = k_fmts[fmt_of[k]];
		for (int si = 0; si < N_SHAPES; si++) {
			const shp &s = k_shapes[si];
			size_t d, sc, per = copy_bytes(f, s, &d, &sc);
			int copies = (int)(g_pool_bytes / per);
			printf("%-11s %-8s", f.name, s.name);
			for (const qvariant &v : k_qvariants) {
				double ms = time_calls([&](int i) {
					return v.fn[k](copy_at(f, s, i % copies));
				}, (int)(((size_t)2 << 30) / per) + 1, 7);
				double gbs = weight_bytes(f, s) / (ms * 1e6);
				char lib_name[16];
				snprintf(lib_name, sizeof lib_name, "%dx%d", lib_ks[k], lib[k]);
				const int tiles = s.rows / QG_ROWS;
				/* qgemv_wide_tiles' choice, else qgemv_tiles' (int4) */
				if (tiles >= QG_MID_BLOCKS * g_sm_count)
					snprintf(lib_name, sizeof lib_name, "p4x2/6");
				else if (f.format != KERN_Q_INT4 && tiles >= g_sm_count)
					snprintf(lib_name, sizeof lib_name, "p8x3/2");
				else if (f.format == KERN_Q_INT4)
					snprintf(lib_name, sizeof lib_name, "%s",
						 g_meta && tiles >= g_sm_count ? "p8x2/2" : "8x2/2");
				bool is_lib = !strcmp(v.name, lib_name);
				printf(" %7.0f%s", gbs, is_lib ? "*" : " ");
				cJSON *r = cJSON_CreateObject();
				cJSON_AddStringToObject(r, "table", "variants");
				cJSON_AddStringToObject(r, "format", f.name);
				cJSON_AddStringToObject(r, "shape", s.name);
				cJSON_AddStringToObject(r, "variant", v.name);
				cJSON_AddNumberToObject(r, "weight_GBps", gbs);
				cJSON_AddItemToArray(g_rows, r);
			}
			printf("\n");
			fflush(stdout);
		}
	}
}

/* ---- 5. cuBLASLt's fp8 algorithms at decode sizes ---- */

/* Layouts as lt_plan_get makes them: W as [k, m] (op T), xq as [k, n],
 * fp16 out as [m, n]; 0 on success. */
static int lt_layouts(const shp &s, int n, cublasLtMatrixLayout_t l[3])
{
	return cublasLtMatrixLayoutCreate(&l[0], CUDA_R_8F_E4M3, s.cols, s.rows, s.cols) ||
	       cublasLtMatrixLayoutCreate(&l[1], CUDA_R_8F_E4M3, s.cols, n, s.cols) ||
	       cublasLtMatrixLayoutCreate(&l[2], CUDA_R_16F, s.rows, n, s.rows);
}

/* One W8A8 call with a given algorithm on weight copy w; 0 on success. */
static int lt_call(const kern_qweight &w, int n, const cublasLtMatrixLayout_t l[3],
		   const cublasLtMatmulAlgo_t *algo)
{
	const void *sa = w.scales, *sb = g_qb->xs;
	const float one = 1.0f, zero = 0.0f;
	if (cublasLtMatmulDescSetAttribute(g_qb->lt_op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa,
					   sizeof sa) ||
	    cublasLtMatmulDescSetAttribute(g_qb->lt_op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb,
					   sizeof sb))
		return 1;
	return cublasLtMatmul(g_qb->lt, g_qb->lt_op, &one, w.data, l[0], g_qb->xq, l[1], &zero, g_out,
			      l[2], g_out, l[2], algo, g_qb->workspace, QB_WORKSPACE_BYTES,
			      g_st) != CUBLAS_STATUS_SUCCESS;
}

/* Every (algorithm id, tile, split-K of 1, 2, 4 or 8) cuBLASLt accepts for
 * this problem, beyond what its heuristic offers: the fastest of each id
 * printed, every one recorded. */
static void lt_enumerate(const fmt &f, const shp &s, int n, const cublasLtMatrixLayout_t l[3],
			 int copies, int calls)
{
	int ids[64], nid = 0;
	if (cublasLtMatmulAlgoGetIds(g_qb->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3,
				     CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, 64, ids, &nid))
		nid = 0;
	printf("  all ids (%d):", nid);
	for (int k = 0; k < nid; k++) {
		cublasLtMatmulAlgo_t algo;
		int tiles[64];
		size_t got = 0;
		if (cublasLtMatmulAlgoInit(g_qb->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3,
					   CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, ids[k], &algo) ||
		    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles,
						      sizeof tiles, &got))
			continue;
		int nt = (int)(got / sizeof(int));
		if (nt == 0)
			tiles[0] = CUBLASLT_MATMUL_TILE_UNDEFINED, nt = 1;
		double best = -1;
		int best_tile = 0, best_split = 0, tried = 0;
		for (int t = 0; t < nt && t < 64; t++)
			for (int sk : {1, 2, 4, 8}) {
				const int32_t red = sk > 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
							   : CUBLASLT_REDUCTION_SCHEME_NONE;
				cublasLtMatmulHeuristicResult_t chk;
				if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID,
									 &tiles[t], sizeof tiles[t]) ||
				    cublasLtMatmulAlgoConfigSetAttribute(
					    &algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof sk) ||
				    cublasLtMatmulAlgoConfigSetAttribute(
					    &algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
					    sizeof red) ||
				    cublasLtMatmulAlgoCheck(g_qb->lt, g_qb->lt_op, l[0], l[1], l[2], l[2],
							    &algo, &chk) ||
				    chk.workspaceSize > QB_WORKSPACE_BYTES)
					continue;
				double ms = time_calls([&](int i) {
					return lt_call(copy_at(f, s, i % copies), n, l, &algo);
				}, calls, 5);
				if (ms < 0) {
					cudaGetLastError();
					continue;
				}
				tried++;
				record(f, s, n, KERN_QPATH_FP8_LT, ms, "lt_enumerated");
				cJSON *r = cJSON_GetArrayItem(g_rows, cJSON_GetArraySize(g_rows) - 1);
				cJSON_AddNumberToObject(r, "algo_id", ids[k]);
				cJSON_AddNumberToObject(r, "tile", tiles[t]);
				cJSON_AddNumberToObject(r, "splitk", sk);
				if (best < 0 || ms < best)
					best = ms, best_tile = tiles[t], best_split = sk;
			}
		if (tried)
			printf(" id %d: %d ok, best %.1f (tile %d, split %d);", ids[k], tried,
			       best * 1e3, best_tile, best_split);
	}
	printf("\n");
}

static void table_lt_algos(void)
{
	static const int ns[] = {32, 64, 128};
	const fmt &f = k_fmts[4]; /* fp8/row */
	printf("\n5. fp8 W8A8 (cuBLASLt) at decode sizes: every algorithm of the heuristic, "
	       "us (GB/s of weights; the heuristic's waves); #0 = library\n");
	for (int si = 0; si < N_SHAPES; si++)
		for (int n : ns) {
			const shp &s = k_shapes[si];
			size_t d, sc, per = copy_bytes(f, s, &d, &sc);
			const int copies = (int)(g_pool_bytes / per);
			const int calls = (int)(((size_t)2 << 30) / per) + 1;
			cublasLtMatrixLayout_t l[3] = {NULL, NULL, NULL};
			cublasLtMatmulHeuristicResult_t res[16];
			int found = 0;
			if (kern_quantize_act_fp8_cuda(g_qb->xq, g_qb->xs, g_x, SL_DT_F16, n, s.cols, g_st) ||
			    lt_layouts(s, n, l) ||
			    cublasLtMatmulAlgoGetHeuristic(g_qb->lt, g_qb->lt_op, l[0], l[1], l[2], l[2],
							   g_qb->lt_pref, 16, res, &found))
				found = 0;
			printf("%-8s n %3d:", s.name, n);
			for (int a = 0; a < found; a++) {
				double ms = time_calls([&](int i) {
					return lt_call(copy_at(f, s, i % copies), n, l, &res[a].algo);
				}, calls, 7);
				if (ms < 0) {
					cudaGetLastError();
					printf(" #%d refused", a);
					continue;
				}
				const double gbs = weight_bytes(f, s) / (ms * 1e6);
				printf(" #%d %.1f (%.0f, %.2f)", a, ms * 1e3, gbs, res[a].wavesCount);
				record(f, s, n, KERN_QPATH_FP8_LT, ms, "lt_algos");
				cJSON *r = cJSON_GetArrayItem(g_rows, cJSON_GetArraySize(g_rows) - 1);
				cJSON_AddNumberToObject(r, "algo", a);
				cJSON_AddNumberToObject(r, "waves", res[a].wavesCount);
			}
			printf("%s\n", found ? "" : " no algorithm");
			if (n == 64)
				lt_enumerate(f, s, n, l, copies, calls);
			fflush(stdout);
			for (int k = 0; k < 3; k++)
				if (l[k])
					cublasLtMatrixLayoutDestroy(l[k]);
		}
}


/* ---- 11. the int8 split path's GEMM: cuBLAS's int8 algorithms ---- */

/* cuBLASLt layouts of the split path's product: W int8 [cols, rows] (op
 * T), the slices int8 [cols, 2n], D int32 [rows, 2n]. */
static int i8_layouts(const shp &s, int n, cublasLtMatrixLayout_t l[3])
{
	return cublasLtMatrixLayoutCreate(&l[0], CUDA_R_8I, s.cols, s.rows, s.cols) ||
	       cublasLtMatrixLayoutCreate(&l[1], CUDA_R_8I, s.cols, 2 * n, s.cols) ||
	       cublasLtMatrixLayoutCreate(&l[2], CUDA_R_32I, s.rows, 2 * n, s.rows);
}

/* One line of table 11: the int8 product of shape s at n tokens through
 * cublasGemmEx, then through each algorithm cuBLASLt's heuristic offers. */
static void i8_algos_row(cublasLtMatmulDesc_t op, const shp &s, int n)
{
	const fmt &f = k_fmts[1]; /* int8/row */
	const int32_t one = 1, zero = 0;
	size_t d, sc, per = copy_bytes(f, s, &d, &sc);
	const int copies = (int)(g_pool_bytes / per);
	const int calls = n > 64 ? 8 : (int)(((size_t)2 << 30) / per) + 1;
	const double wb = (double)s.rows * s.cols;
	printf("%-8s n %3d:", s.name, n);
	double ms = time_calls([&](int i) {
		kern_qweight w = copy_at(f, s, i % copies);
		return (int)cublasGemmEx(g_qb->blas, CUBLAS_OP_T, CUBLAS_OP_N, s.rows, 2 * n, s.cols,
					 &one, w.data, CUDA_R_8I, s.cols, g_qb->sq, CUDA_R_8I, s.cols,
					 &zero, g_out, CUDA_R_32I, s.rows, CUBLAS_COMPUTE_32I,
					 CUBLAS_GEMM_DEFAULT);
	}, calls, 7);
	printf(" G %.1f (%.0f)", ms * 1e3, wb / (ms * 1e6));
	if (ms > 0)
		record(f, s, n, KERN_QPATH_INT8_SPLIT, ms, "i8_gemmex");
	cublasLtMatrixLayout_t l[3] = {NULL, NULL, NULL};
	cublasLtMatmulHeuristicResult_t res[16];
	int found = 0;
	if (i8_layouts(s, n, l) || cublasLtMatmulAlgoGetHeuristic(g_qb->lt, op, l[0], l[1], l[2], l[2],
								   g_qb->lt_pref, 16, res, &found))
		found = 0;
	for (int a = 0; a < found; a++) {
		ms = time_calls([&](int i) {
			kern_qweight w = copy_at(f, s, i % copies);
			return (int)cublasLtMatmul(g_qb->lt, op, &one, w.data, l[0], g_qb->sq, l[1], &zero,
						   g_out, l[2], g_out, l[2], &res[a].algo,
						   g_qb->workspace, QB_WORKSPACE_BYTES, g_st);
		}, calls, 7);
		if (ms < 0) {
			cudaGetLastError();
			printf(" #%d refused", a);
			continue;
		}
		printf(" #%d %.1f (%.0f)", a, ms * 1e3, wb / (ms * 1e6));
		record(f, s, n, KERN_QPATH_INT8_SPLIT, ms, "i8_lt_algos");
		cJSON *r = cJSON_GetArrayItem(g_rows, cJSON_GetArraySize(g_rows) - 1);
		cJSON_AddNumberToObject(r, "algo", a);
	}
	printf("%s\n", found ? "" : " no cuBLASLt algorithm");
	fflush(stdout);
	for (int k = 0; k < 3; k++)
		if (l[k])
			cublasLtMatrixLayoutDestroy(l[k]);
}

/*
 * The int8 GEMM of the split path alone (quant_split.cu), cold W: what
 * cublasGemmEx takes (the product's call) against every algorithm
 * cuBLASLt's heuristic offers for the same problem, at 32-256 tokens:
 * whether a better int8 kernel exists at decode sizes.
 */
static void table_i8_algos(void)
{
	static const int ns[] = {32, 64, 128, 256};
	printf("\n11. the int8 split path's GEMM alone (int8 W x 2n int8 columns -> int32): "
	       "G = cublasGemmEx's choice, #i = cuBLASLt's heuristic algorithms; us (GB/s of W)\n");
	cublasLtMatmulDesc_t op = NULL;
	const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
	if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32I, CUDA_R_32I) ||
	    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT) ||
	    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN)) {
		printf("no cuBLASLt int8 descriptor\n");
		return;
	}
	for (int si = 0; si < N_SHAPES; si++)
		for (int n : ns)
			i8_algos_row(op, k_shapes[si], n);
	cublasLtMatmulDescDestroy(op);
}

/* ---- 6. cuBLASLt's fp8 algorithms at prefill sizes ---- */

/* E4M3 codes with random signs, mantissas and exponents 0, 2, 4 or 6
 * (finite, |x| < 1): tensor cores draw the power real data makes them. */
__global__ void fill_codes(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t h = ((uint32_t)i ^ seed) * 2654435761u;
		h ^= h >> 15;
		h *= 2246822519u;
		h ^= h >> 13;
		p[i] = (uint8_t)(h & 0xB7);
	}
}

/* A W8A8 descriptor like lt_init's: per-row (outer) or per-tensor scales
 * on W (a_outer) and on x (b_outer), fast accumulation on or off; the
 * scale pointers set to valid ones, as lt_init does for the heuristic.
 * NULL on failure. */
static cublasLtMatmulDesc_t lt_desc(bool a_outer, bool b_outer, bool fast)
{
	cublasLtMatmulDesc_t d;
	const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
	const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
		      scalar = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
	const int32_t ma = a_outer ? outer : scalar, mb = b_outer ? outer : scalar;
	const void *sp = g_qb->xs;
	const int8_t f = fast;
	if (cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F))
		return NULL;
	if (cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT) ||
	    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN) ||
	    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma) ||
	    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb) ||
	    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sp, sizeof sp) ||
	    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sp, sizeof sp) ||
	    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &f, sizeof f)) {
		cublasLtMatmulDescDestroy(d);
		return NULL;
	}
	return d;
}

typedef struct lt_case {
	cublasLtMatmulDesc_t desc;
	const kern_qweight *w;
	int n;
	cublasLtMatrixLayout_t *l;
} lt_case;

static int lt_call_desc(const lt_case &c, const cublasLtMatmulAlgo_t *algo)
{
	const void *sa = c.w->scales, *sb = g_qb->xs;
	const float one = 1.0f, zero = 0.0f;
	if (cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa,
					   sizeof sa) ||
	    cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb,
					   sizeof sb))
		return 1;
	return cublasLtMatmul(g_qb->lt, c.desc, &one, c.w->data, c.l[0], g_qb->xq, c.l[1], &zero,
			      g_out, c.l[2], g_out, c.l[2], algo, g_qb->workspace,
			      QB_WORKSPACE_BYTES, g_st) != CUBLAS_STATUS_SUCCESS;
}

/* us of one call with algo (the heuristic's first when NULL); < 0 refused */
static double lt_time(const lt_case &c, const cublasLtMatmulAlgo_t *algo)
{
	cublasLtMatmulHeuristicResult_t res;
	int found = 0;
	if (!algo) {
		if (cublasLtMatmulAlgoGetHeuristic(g_qb->lt, c.desc, c.l[0], c.l[1], c.l[2], c.l[2],
						   g_qb->lt_pref, 1, &res, &found) || !found)
			return -1;
		algo = &res.algo;
	}
	double ms = time_calls([&](int) { return lt_call_desc(c, algo); }, 10, 5);
	if (ms < 0)
		cudaGetLastError();
	return ms * 1e3;
}

static void lt_print(const char *what, const shp &s, int n, double us, const char *table)
{
	if (us < 0) {
		printf("  %-34s refused\n", what);
		return;
	}
	printf("  %-34s %6.0f TFLOP/s %8.1f us\n", what, 2.0 * n * s.rows * s.cols / (us * 1e6), us);
	record(k_fmts[4], s, n, KERN_QPATH_FP8_LT, us * 1e-3, table);
	cJSON *r = cJSON_GetArrayItem(g_rows, cJSON_GetArraySize(g_rows) - 1);
	cJSON_AddStringToObject(r, "variant", what);
}

typedef struct lt_found {
	double us;
	int id, tile, stages, cluster;
} lt_found;

/* One algorithm id: every tile x stages x cluster shape (split-K 1) that
 * cublasLtMatmulAlgoCheck accepts, timed into out (at most cap). */
static void lt_sweep_id(const lt_case &c, int id, std::vector<lt_found> &out, size_t cap)
{
	cublasLtMatmulAlgo_t algo;
	uint32_t tiles[128], stages[128];
	size_t nt = 0, ns = 0;
	if (cublasLtMatmulAlgoInit(g_qb->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3,
				   CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, id, &algo) ||
	    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sizeof tiles,
					      &nt) ||
	    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages,
					      sizeof stages, &ns))
		return;
	nt /= sizeof(uint32_t), ns /= sizeof(uint32_t);
	if (!nt)
		tiles[0] = CUBLASLT_MATMUL_TILE_UNDEFINED, nt = 1;
	if (!ns)
		stages[0] = CUBLASLT_MATMUL_STAGES_UNDEFINED, ns = 1;
	static const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1,
					    CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1};
	for (size_t t = 0; t < nt; t++)
		for (size_t st = 0; st < ns; st++)
			for (uint16_t cl : clusters) {
				cublasLtMatmulHeuristicResult_t chk;
				if (out.size() >= cap ||
				    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID,
									 &tiles[t], sizeof tiles[t]) ||
				    cublasLtMatmulAlgoConfigSetAttribute(
					    &algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[st],
					    sizeof stages[st]) ||
				    cublasLtMatmulAlgoConfigSetAttribute(
					    &algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl) ||
				    cublasLtMatmulAlgoCheck(g_qb->lt, c.desc, c.l[0], c.l[1], c.l[2], c.l[2],
							    &algo, &chk) ||
				    chk.workspaceSize > QB_WORKSPACE_BYTES)
					continue;
				double us = lt_time(c, &algo);
				if (us > 0)
					out.push_back({us, id, (int)tiles[t], (int)stages[st], cl});
			}
}

/* The heuristic's offers, the two other descriptors, then the sweep. */
static void lt_prefill_shape(const shp &s, int n, cublasLtMatmulDesc_t d[5])
{
	const fmt &f = k_fmts[4];
	kern_qweight w = copy_at(f, s, 0);
	cublasLtMatrixLayout_t l[3] = {NULL, NULL, NULL};
	cublasLtMatmulHeuristicResult_t res[16];
	int found = 0;
	char what[64];
	printf("%s (%d x %d), n %d:\n", s.name, s.rows, s.cols, n);
	if (lt_layouts(s, n, l) ||
	    cublasLtMatmulAlgoGetHeuristic(g_qb->lt, d[0], l[0], l[1], l[2], l[2], g_qb->lt_pref, 16,
					   res, &found))
		found = 0;
	lt_case c = {d[0], &w, n, l};
	for (int a = 0; a < found; a++) {
		snprintf(what, sizeof what, "heuristic #%d (waves %.2f)", a, res[a].wavesCount);
		lt_print(what, s, n, lt_time(c, &res[a].algo), "lt_prefill");
	}
	c.desc = d[1];
	lt_print("fast accumulation, #0", s, n, lt_time(c, NULL), "lt_prefill");
	c.desc = d[2];
	lt_print("per-tensor scales, #0", s, n, lt_time(c, NULL), "lt_prefill");
	c.desc = d[3];
	lt_print("W per-row, x per-tensor, #0", s, n, lt_time(c, NULL), "lt_prefill");
	c.desc = d[4];
	lt_print("W per-tensor, x per-token, #0", s, n, lt_time(c, NULL), "lt_prefill");
	c.desc = d[0];
	int ids[64], nid = 0;
	if (cublasLtMatmulAlgoGetIds(g_qb->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3,
				     CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, 64, ids, &nid))
		nid = 0;
	std::vector<lt_found> all;
	for (int k = 0; k < nid; k++)
		lt_sweep_id(c, ids[k], all, 96);
	std::sort(all.begin(), all.end(),
		  [](const lt_found &a, const lt_found &b) { return a.us < b.us; });
	printf("  sweep: %d ids, %zu configurations accepted\n", nid, all.size());
	for (size_t i = 0; i < all.size() && i < 4; i++) {
		snprintf(what, sizeof what, "id %d tile %d stages %d cluster %d", all[i].id,
			 all[i].tile, all[i].stages, all[i].cluster);
		lt_print(what, s, n, all[i].us, "lt_prefill_sweep");
	}
	fflush(stdout);
	for (int k = 0; k < 3; k++)
		if (l[k])
			cublasLtMatrixLayoutDestroy(l[k]);
}

static void table_lt_prefill(const std::vector<int> &ns)
{
	cublasLtMatmulDesc_t d[5] = {g_qb->lt_op, lt_desc(true, true, true),
				     lt_desc(false, false, false), lt_desc(true, false, false),
				     lt_desc(false, true, false)};
	printf("\n6. fp8 W8A8 (cuBLASLt) at prefill sizes, random codes: the library's descriptor "
	       "(per-row scales, fp32 promotion), then fast accumulation, per-tensor scales, "
	       "per-row scales on one side, and the sweep's fastest\n");
	for (int k = 1; k < 5; k++)
		if (!d[k]) {
			printf("  cannot make the descriptors\n");
			return;
		}
	for (int si = 0; si < N_SHAPES; si++) {
		const shp &s = k_shapes[si];
		size_t dbytes, sc;
		copy_bytes(k_fmts[4], s, &dbytes, &sc);
		fill_codes<<<1024, 256, 0, g_st>>>((uint8_t *)copy_at(k_fmts[4], s, 0).data, dbytes, 17);
		for (int n : ns) {
			if (kern_quantize_act_fp8_cuda(g_qb->xq, g_qb->xs, g_x, SL_DT_F16, n, s.cols, g_st))
				continue;
			fill_codes<<<1024, 256, 0, g_st>>>(g_qb->xq, (size_t)n * s.cols, 29);
			CK(cudaGetLastError());
			lt_prefill_shape(s, n, d);
		}
	}
	for (int k = 1; k < 5; k++)
		cublasLtMatmulDescDestroy(d[k]);
}

/* ---- 0. the check against kernels/quant.c ---- */

/* Deterministic random values in +-[0.05, 1) * scale, never zero. */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float rand_val(float scale)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	const float u = (float)(g_rng >> 40) / (float)(1 << 24); /* [0, 1) */
	const float m = 0.05f + 0.95f * u;
	return (g_rng & 1 ? m : -m) * scale;
}

/* A random weight of format f quantized on the host (h) by
 * kern_quantize_rows, and its copy on the device (d); 0 on success. */
static int make_qweight(const fmt &f, int rows, int cols, kern_qweight *h, kern_qweight *d)
{
	*h = {f.format, rows, cols, f.group, f.scale_dt, NULL, NULL, NULL};
	const size_t db = kern_qweight_data_bytes(h), sb = kern_qweight_scale_bytes(h),
		     zb = f.zeros ? kern_qweight_zero_bytes(h) : 0;
	h->data = malloc(db);
	h->scales = malloc(sb);
	h->zeros = zb ? malloc(zb) : NULL;
	std::vector<float> src((size_t)rows * cols);
	for (float &v : src)
		v = rand_val(0.05f);
	char err[160];
	if (!h->data || !h->scales || (zb && !h->zeros) ||
	    kern_quantize_rows(h, 0, rows, src.data(), NULL, err, sizeof err)) {
		fprintf(stderr, "check: cannot quantize %s %d x %d\n", f.name, rows, cols);
		return 1;
	}
	*d = *h;
	CK(cudaMalloc(&d->data, db));
	CK(cudaMalloc(&d->scales, sb));
	CK(cudaMemcpy(d->data, h->data, db, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(d->scales, h->scales, sb, cudaMemcpyHostToDevice));
	if (zb) {
		CK(cudaMalloc(&d->zeros, zb));
		CK(cudaMemcpy(d->zeros, h->zeros, zb, cudaMemcpyHostToDevice));
	}
	const size_t mb = g_meta ? kern_qweight_meta_bytes(h) : 0;
	if (mb) {
		std::vector<uint32_t> m(mb / 4);
		kern_qweight_meta_pack(h, m.data());
		CK(cudaMalloc(&d->meta, mb));
		CK(cudaMemcpy(d->meta, m.data(), mb, cudaMemcpyHostToDevice));
	}
	return 0;
}

static void free_qweight(kern_qweight *h, kern_qweight *d)
{
	free(h->data), free(h->scales), free(h->zeros);
	cudaFree(d->data), cudaFree(d->scales), cudaFree(d->zeros), cudaFree(d->meta);
}

/* Worst |g_out - ref| / max |ref| over n x rows fp16 outputs, after rc
 * (g_out poisoned with NaN before the call: what it leaves unwritten fails). */
static double out_err(int rc, const float *ref, int n, int rows)
{
	if (rc)
		return INFINITY;
	CK(cudaStreamSynchronize(g_st));
	CK(cudaGetLastError());
	const size_t cnt = (size_t)n * rows;
	std::vector<__half> got(cnt);
	CK(cudaMemcpy(got.data(), g_out, cnt * sizeof(__half), cudaMemcpyDeviceToHost));
	double worst = 0, peak = 0;
	for (size_t i = 0; i < cnt; i++) {
		const double e = fabs((double)__half2float(got[i]) - ref[i]);
		if (!(e <= worst)) /* NaN counts as the worst */
			worst = std::isnan(e) ? INFINITY : e;
		peak = std::max(peak, fabs((double)ref[i]));
	}
	return peak > 0 ? worst / peak : worst;
}

/*
 * Every quantized format's library paths (AUTO at 1, 3, 8, 33 and 100
 * tokens, DEQUANT and GEMM at 33), the GEMM's block shapes (variants 1..
 * KERN_QGEMM_VARIANTS, kernels/quant_gemm.cu) at 100 tokens, and every
 * table-4 block shape (int8/row, fp8/row,
 * int4/g128 at one token) against the CPU reference (kern_qmatmul_cpu;
 * fp8's W8A8 path: kern_qmatmul_w8a8_cpu) on random weights and fp16 x of
 * magnitude 0.05..1, never zero. The measure and the bound are
 * tests/gpu/test_quant.c's: worst |gpu - cpu| / max |cpu| <= 5e-3 for fp16
 * outputs (their rounding, 2^-11, and the fp32 summation order). The
 * shapes: the 7B o and down, and a tensor-parallel qkv shard of fewer
 * 16-row tiles than SMs (the split path and its reduce kernel).
 * Returns the number of failures.
 */
static int check_all(void)
{
	static const shp k_check_shapes[] = {
		{"o", 4096, 4096}, {"down", 4096, 11008}, {"qkv/tp8", 1536, 4096}};
	static const int ns[] = {1, 3, 8, 33, 100}; /* the last: the GEMM's shapes */
	const int max_n = 100;
	const double tol = 5e-3;
	int failed = 0;
	printf("\n0. check against kernels/quant.c (kern_qmatmul_cpu), random W and fp16 x: "
	       "worst |gpu - cpu| / max |cpu| (tol %.0e)\n", tol);
	for (const shp &s : k_check_shapes) {
		std::vector<float> x((size_t)max_n * s.cols), ref((size_t)max_n * s.rows),
			ref8(ref.size());
		std::vector<__half> xh(x.size());
		for (size_t i = 0; i < x.size(); i++) {
			xh[i] = __float2half(rand_val(1.0f));
			x[i] = __half2float(xh[i]);
		}
		CK(cudaMemcpy(g_x, xh.data(), xh.size() * sizeof(__half), cudaMemcpyHostToDevice));
		CK(cudaDeviceSynchronize()); /* the copies run on the legacy stream */
		for (int fi = 0; fi < N_FMTS; fi++) {
			const fmt &f = k_fmts[fi];
			if (f.format == KERN_Q_NONE) /* fp16: lab/gemv.cu checks kernels/matmul.cu */
				continue;
			kern_qweight h, d;
			if (make_qweight(f, s.rows, s.cols, &h, &d)) {
				failed++;
				continue;
			}
			CK(cudaDeviceSynchronize());
			char line[512];
			int len = 0;
			bool bad = false;
			/* the library's paths */
			for (int n : ns) {
				kern_qmatmul_cpu(ref.data(), x.data(), &h, n);
				bool have_w8a8 = false;
				for (int path : {KERN_QPATH_AUTO, KERN_QPATH_DEQUANT, KERN_QPATH_GEMM,
						 KERN_QPATH_INT8_SPLIT}) {
					if (path != KERN_QPATH_AUTO && n != 33)
						continue;
					int taken = path == KERN_QPATH_AUTO
							    ? kern_qmatmul_path(g_qb, &d, n, SL_DT_F16, SL_DT_F16)
							    : path;
					const float *want = ref.data();
					if (taken == KERN_QPATH_FP8_LT) {
						if (!have_w8a8)
							kern_qmatmul_w8a8_cpu(ref8.data(), x.data(), &h, n);
						have_w8a8 = true;
						want = ref8.data();
					}
					CK(cudaMemsetAsync(g_out, 0xff, sizeof(__half) * n * s.rows, g_st));
					int rc = kern_qmatmul_cuda(g_qb, path, g_out, SL_DT_F16, g_x, SL_DT_F16,
								   &d, n);
					if (rc == SL_ENOTSUP && (taken == KERN_QPATH_FP8_LT ||
								 taken == KERN_QPATH_INT8_SPLIT)) {
						len += snprintf(line + len, sizeof line - len, " %s n%d n/a",
								path_label(f.format, taken), n);
						continue;
					}
					double e = out_err(rc, want, n, s.rows);
					bad |= !(e <= tol);
					len += snprintf(line + len, sizeof line - len, " %s n%d %.1e%s",
							path_label(f.format, taken), n, e,
							e <= tol ? "" : "!");
				}
			}
			printf("%-11s %-8s%s%s\n", f.name, s.name, line, bad ? "  FAIL" : "");
			failed += bad;
			/* the GEMM's block shapes on the last n (ref holds its reference) */
			len = 0;
			bad = false;
			for (int v = 1; v <= KERN_QGEMM_VARIANTS; v++) {
				const int n = max_n;
				CK(cudaMemsetAsync(g_out, 0xff, sizeof(__half) * n * s.rows, g_st));
				g_qb->gemm_variant = v;
				int rc = kern_qmatmul_cuda(g_qb, KERN_QPATH_GEMM, g_out, SL_DT_F16, g_x,
							   SL_DT_F16, &d, n);
				g_qb->gemm_variant = 0;
				if (rc == SL_ENOTSUP && v >= KERN_QGEMM_WGMMA_FIRST &&
				    !kern_qblas_gemm_wgmma(g_qb, &d)) {
					len += snprintf(line + len, sizeof line - len, " %d n/a", v);
					continue;
				}
				double e = out_err(rc, ref.data(), n, s.rows);
				bad |= !(e <= tol);
				len += snprintf(line + len, sizeof line - len, " %d %.1e%s", v, e,
						e <= tol ? "" : "!");
			}
			printf("%-11s %-8s n%d gemm shapes%s%s\n", f.name, s.name, max_n, line,
			       bad ? "  FAIL" : "");
			failed += bad;
			/* table 4's block shapes, one token */
			for (int k = 0; k < 3; k++) {
				if (fi != k_qvariant_fmt[k])
					continue;
				kern_qmatmul_cpu(ref.data(), x.data(), &h, 1);
				len = 0;
				bad = false;
				for (int vi = 0; vi < N_QVARIANTS; vi++) {
					CK(cudaMemsetAsync(g_out, 0xff, sizeof(__half) * s.rows, g_st));
					double e = out_err(k_qvariants[vi].fn[k](d), ref.data(), 1, s.rows);
					bad |= !(e <= tol);
					len += snprintf(line + len, sizeof line - len, " %d:%s %.1e%s", vi,
							k_qvariants[vi].name, e, e <= tol ? "" : "!");
				}
				printf("%-11s %-8s n1 table-4 shapes%s%s\n", f.name, s.name, line,
				       bad ? "  FAIL" : "");
				failed += bad;
			}
			free_qweight(&h, &d);
			fflush(stdout);
		}
	}
	printf("check: %s\n", failed ? "FAILED" : "all within tolerance");
	return failed;
}

/* ---- 7. batched decode: every path against fp16 ---- */

static const int k_batch_ns[] = {16, 32, 64, 128, 192, 256};
#define N_BATCH_NS 6

/* us per call of format f on each 7B shape at each batch n on `path`
 * (GEMV only to 64 tokens), and the 7B layer's sum; -1 where refused. */
static void batch_row(const fmt &f, int path, double (*layer)[N_BATCH_NS])
{
	for (int si = 0; si < N_SHAPES; si++) {
		const shp &s = k_shapes[si];
		char line[256];
		int len = 0;
		for (int ni = 0; ni < N_BATCH_NS; ni++) {
			const int n = k_batch_ns[ni];
			int taken = path;
			double ms = -1;
			if (path != KERN_QPATH_GEMV || n <= KERN_QGEMV_MAX_TOKENS)
				ms = measure(f, s, n, path, &taken);
			if (ms < 0 || (*layer)[ni] < 0) {
				(*layer)[ni] = -1;
			} else {
				(*layer)[ni] += ms;
				record(f, s, n, taken, ms, "batch");
			}
			len += ms < 0 ? snprintf(line + len, sizeof line - len, " %9s", "-")
				      : snprintf(line + len, sizeof line - len, " %9.1f", ms * 1e3);
		}
		printf("%-11s %-8s %-8s%s\n", f.name, path_label(f.format, path), s.name, line);
	}
}

/*
 * The 7B projections at batch 16..256 on every path: us per call, and a
 * layer (qkv + o + gate_up + down) against fp16's: where the GEMM must be
 * at least as fast as fp16 (issue 38), and where AUTO should switch
 * (kern_qblas_set_gemm_range, SL_QGEMM_MIN / SL_QGEMM_MAX).
 */
static void table_batch(void)
{
	printf("\n7. batched decode: us per call, cold W, fp16 x; 'layer' = the four shapes, "
	       "x fp16's layer time\n%-11s %-8s %-8s", "format", "path", "shape");
	for (int n : k_batch_ns)
		printf(" %9d", n);
	printf("\n");
	double f16[N_BATCH_NS] = {0};
	batch_row(k_fmts[0], KERN_QPATH_AUTO, &f16);
	/* the split path's int8 GEMM tuned for each shape, as the engine does at start-up */
	const double t0 = sl_now();
	sl_log_set_level(SL_LOG_DEBUG); /* its choices, a line per shape and token count */
	for (int si = 0; si < N_SHAPES; si++)
		if (kern_qblas_tune_split(g_qb, k_shapes[si].rows, k_shapes[si].cols))
			printf("int8 split tuning failed for %s\n", k_shapes[si].name);
	sl_log_set_level(SL_LOG_INFO);
	printf("(int8 split GEMM tuned for the %d shapes in %.2f s)\n", N_SHAPES, sl_now() - t0);
	for (int fi = 1; fi < N_FMTS; fi++) {
		const fmt &f = k_fmts[fi];
		const int paths[] = {KERN_QPATH_GEMV, KERN_QPATH_GEMM, KERN_QPATH_DEQUANT,
				     KERN_QPATH_FP8_LT, KERN_QPATH_INT8_SPLIT, KERN_QPATH_AUTO};
		for (int path : paths) {
			if (path == KERN_QPATH_FP8_LT && f.format != KERN_Q_FP8)
				continue;
			if (path == KERN_QPATH_INT8_SPLIT && (f.format != KERN_Q_INT8 || f.group))
				continue;
			double layer[N_BATCH_NS] = {0};
			batch_row(f, path, &layer);
			printf("%-11s %-8s %-8s", f.name, path_label(f.format, path), "layer");
			for (int ni = 0; ni < N_BATCH_NS; ni++)
				if (layer[ni] < 0 || f16[ni] <= 0)
					printf(" %9s", "-");
				else
					printf(" %8.2fx", f16[ni] / layer[ni]);
			printf("\n");
			fflush(stdout);
		}
	}
	printf("(layer: fp16's time / this path's; >= 1.00x is at least as fast as fp16)\n");
}

/* ---- 8. the GEMM's block shapes ---- */

/* us per call of the GEMM path (negative where refused), recorded under
 * `table` with key = value (the setting timed: block shape, splits). */
static double gemm_us(const fmt &f, const shp &s, int n, const char *table, const char *key,
		      int value)
{
	int taken;
	const double ms = measure(f, s, n, KERN_QPATH_GEMM, &taken);
	if (ms < 0)
		return -1;
	record(f, s, n, taken, ms, table);
	cJSON_AddNumberToObject(cJSON_GetArrayItem(g_rows, cJSON_GetArraySize(g_rows) - 1), key, value);
	return ms * 1e3;
}

/* One row of a sweep: count times in columns `width` wide, the fastest
 * (best) starred, "n/a" where refused. */
static void print_us_row(const fmt &f, const shp &s, int n, const double *us, int count, int best,
			 int width)
{
	printf("%-11s %-8s %5d", f.name, s.name, n);
	for (int i = 0; i < count; i++)
		if (us[i] < 0)
			printf(" %*s", width, "n/a");
		else
			printf(" %*.1f%c", width - 1, us[i], i == best ? '*' : ' ');
	printf("\n");
	fflush(stdout);
}

/* Each variant (kernels/quant_gemm.cu, kern_qgemm_variant_name) at each
 * batch: us per call, the fastest marked '*'; 0 is the library's choice. */
static void table_gemm_variants(void)
{
	static const int fmts[] = {1, 2, 4, 5, 6, 7}; /* every quantized k_fmts entry but g32 int8 */
	printf("\n8. GEMM block shapes: us per call (cold W, fp16 x), '*' the fastest\n");
	for (int v = 0; v <= KERN_QGEMM_VARIANTS; v++)
		printf("   %d: %s\n", v, kern_qgemm_variant_name(v));
	printf("%-11s %-8s %5s", "format", "shape", "n");
	for (int v = 0; v <= KERN_QGEMM_VARIANTS; v++)
		printf(" %9d", v);
	printf("\n");
	for (int fi : fmts) {
		const fmt &f = k_fmts[fi];
		for (int si = 0; si < N_SHAPES; si++)
			for (int n : k_batch_ns) {
				double us[KERN_QGEMM_VARIANTS + 1];
				int best = -1;
				for (int v = 0; v <= KERN_QGEMM_VARIANTS; v++) {
					g_qb->gemm_variant = v;
					us[v] = gemm_us(f, k_shapes[si], n, "gemm_variants", "variant", v);
					g_qb->gemm_variant = 0;
					if (us[v] >= 0 && (best < 0 || us[v] < us[best]))
						best = v;
				}
				print_us_row(f, k_shapes[si], n, us, KERN_QGEMM_VARIANTS + 1, best, 9);
			}
	}
}

/* ---- 9. W8A8 on cuBLASLt with K cut into slices run at once ---- */

/* fp8/row on each 7B shape at decode batches: us per call of the W8A8
 * path (activation quantization included) with per-row scales and K in
 * 1, 2, 4 and 8 slices (kern_qblas_set_lt_splits), then the slicing
 * rule (its choice in brackets), then unit scalar scales with the scales
 * applied after (kern_qblas_set_lt_unit); '*' the fastest, with its share
 * of copy bandwidth. */
static void table_lt_splits(void)
{
	static const int ns[] = {33, 64, 96, 128, 192, 256};
	static const int forced[] = {1, 2, 4, 8, 0, 0};
	const fmt &f = k_fmts[4];
	printf("\n9. W8A8 (cuBLASLt) with K in slices, and with unit scales: us per call (cold W, "
	       "fp16 x, x quantized in the call), '*' the fastest\n%-8s %5s %9s %9s %9s %9s %12s "
	       "%9s %8s\n", "shape", "n", "1", "2", "4", "8", "rule", "unit", "best bw");
	for (int si = 0; si < N_SHAPES; si++)
		for (int n : ns) {
			double us[6];
			int best = -1, taken, rule = 0;
			for (int k = 0; k < 6; k++) {
				kern_qblas_set_lt_splits(g_qb, forced[k]);
				/* the unit column at every n, beyond the library's limit */
				kern_qblas_set_lt_unit(g_qb, k == 5 ? g_qb->max_tokens : 0);
				kern_qweight w0 = copy_at(f, k_shapes[si], 0);
				const int got = kern_qmatmul_lt_splits(g_qb, &w0, n, SL_DT_F16);
				if (k == 4)
					rule = got;
				const bool ran = forced[k] == 0 || got == forced[k];
				const double ms = ran ? measure(f, k_shapes[si], n, KERN_QPATH_FP8_LT, &taken)
						      : -1;
				us[k] = ms * 1e3;
				if (ms >= 0 && (best < 0 || us[k] < us[best]))
					best = k;
				if (ms >= 0) {
					record(f, k_shapes[si], n, taken, ms, "lt_splits");
					cJSON *r = cJSON_GetArrayItem(g_rows, cJSON_GetArraySize(g_rows) - 1);
					cJSON_AddNumberToObject(r, "splits", got);
					cJSON_AddBoolToObject(r, "rule", k == 4);
					cJSON_AddBoolToObject(r, "unit",
							      kern_qmatmul_lt_unit(g_qb, &w0, n, SL_DT_F16));
				}
			}
			kern_qblas_set_lt_splits(g_qb, 0);
			kern_qblas_set_lt_unit(g_qb, KERN_LT_UNIT_MAX_TOKENS);
			printf("%-8s %5d", k_shapes[si].name, n);
			for (int k = 0; k < 6; k++) {
				char cell[16];
				if (us[k] < 0)
					snprintf(cell, sizeof cell, "-");
				else if (k == 4)
					snprintf(cell, sizeof cell, "%.1f [%d]%c", us[k], rule,
						 k == best ? '*' : ' ');
				else
					snprintf(cell, sizeof cell, "%.1f%c", us[k], k == best ? '*' : ' ');
				printf(" %*s", k == 4 ? 12 : 9, cell);
			}
			if (best >= 0)
				printf(" %7.1f%%", 100.0 * weight_bytes(f, k_shapes[si]) /
							   (us[best] * 1e-6) / g_copy_bw);
			printf("\n");
			fflush(stdout);
		}
}

/* ---- 10. the GEMM's split-K count ---- */

/* kernels/quant_gemm.cu's SL_QGEMM_SPLITS, set directly. */
extern int qm_forced_splits;

/* The tiled GEMM (AUTO's block shape) at 16-128 tokens with its columns
 * split in 1 .. 12 parts (at most one a QM_MIN_CHUNKS chunks: a count
 * the shape cannot take runs as the most it can), against the rule's
 * choice ("rule"): us per call, the fastest starred. Whether a wave cut
 * finer than the SMs' count repays its partials (qm_splits). */
static void table_gemm_splits(void)
{
	static const int fmts[] = {1, 2, 4, 5};
	static const int ns[] = {16, 32, 64, 128};
	static const int ks[] = {0, 1, 2, 3, 4, 6, 8, 12};
	const int nk = (int)(sizeof ks / sizeof *ks);
	printf("\n10. GEMM split-K count: us per call (cold W, fp16 x, AUTO's block shape), "
	       "'*' the fastest\n");
	printf("%-11s %-8s %5s", "format", "shape", "n");
	for (int k = 0; k < nk; k++)
		if (ks[k])
			printf(" %7d", ks[k]);
		else
			printf(" %7s", "rule");
	printf("\n");
	for (int fi : fmts) {
		const fmt &f = k_fmts[fi];
		for (int si = 0; si < N_SHAPES; si++)
			for (int n : ns) {
				double us[16];
				int best = -1;
				for (int k = 0; k < nk; k++) {
					qm_forced_splits = ks[k];
					us[k] = gemm_us(f, k_shapes[si], n, "gemm_splits", "splits", ks[k]);
					qm_forced_splits = 0;
					if (us[k] >= 0 && (best < 0 || us[k] < us[best]))
						best = k;
				}
				print_us_row(f, k_shapes[si], n, us, nk, best, 7);
			}
	}
}

/* "2048,512": token counts 33..2048 (W8A8's range here); 1 if valid */
static int parse_ns(const char *arg, std::vector<int> &ns)
{
	ns.clear();
	for (const char *p = arg; *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 33 || v > 2048 || (*end && *end != ','))
			return 0;
		ns.push_back((int)v);
		p = *end ? end + 1 : end;
	}
	return !ns.empty();
}

int main(int argc, char **argv)
{
	const char *out = NULL;
	int only = 0; /* --only N: table N alone (and 2 needs 1) */
	int check = 1; /* 1: check, then time; 2: check only; 0: time only */
	std::vector<int> lt_ns = {2048};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--out") && i + 1 < argc) {
			out = argv[++i];
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc && atoi(argv[i + 1]) >= 1 &&
			   atoi(argv[i + 1]) <= 11) {
			only = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--lt-n") && i + 1 < argc && parse_ns(argv[++i], lt_ns)) {
		} else if (!strcmp(argv[i], "--check")) {
			check = 2;
		} else if (!strcmp(argv[i], "--no-check")) {
			check = 0;
		} else if (!strcmp(argv[i], "--meta")) {
			g_meta = true;
		} else {
			fprintf(stderr,
				"usage: %s [--out FILE.json] [--only 1-11] [--lt-n 2048,...] "
				"[--check | --no-check] [--meta]\n",
				argv[0]);
			return 2;
		}
	}
	double t0 = sl_now();
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	g_sm_count = prop.multiProcessorCount;
	g_copy_bw = copy_bandwidth();
	printf("device: %s, %d SMs, L2 %d MiB; copy bandwidth %.0f GB/s\n", prop.name,
	       prop.multiProcessorCount, prop.l2CacheSize >> 20, g_copy_bw / 1e9);

	CK(cudaStreamCreateWithFlags(&g_st, cudaStreamNonBlocking));
	kern_qblas_config cfg = {.max_tokens = 2048, .max_cols = 11008, .dequant_bytes = 0};
	if (kern_blas_create(g_st, &g_blas) || kern_qblas_create(g_st, &cfg, &g_qb)) {
		fprintf(stderr, "cannot create the BLAS handles\n");
		return 1;
	}
	/* the pool: 3 GiB of weight copies, every byte 0x11 (int8 17, fp8 code
	 * 0x11, int4 code 1, small finite fp16/fp32 scales: finite outputs) */
	g_pool_bytes = (size_t)3 << 30;
	CK(cudaMalloc(&g_pool, g_pool_bytes));
	CK(cudaMemset(g_pool, 0x11, g_pool_bytes));
	CK(cudaMalloc(&g_x, sizeof(__half) * 2048 * 11008));
	CK(cudaMemset(g_x, 0x3c, sizeof(__half) * 2048 * 11008)); /* fp16 1.06 */
	CK(cudaMalloc(&g_out, sizeof(float) * 2048 * 32000));

	/* correctness first, as llm.c's dev/cuda does: a failed check times nothing */
	if (check) {
		const int failed = check_all();
		if (failed || check == 2) {
			kern_qblas_destroy(g_qb);
			kern_blas_destroy(g_blas);
			return failed ? 1 : 0;
		}
		CK(cudaMemset(g_x, 0x3c, sizeof(__half) * 2048 * 11008)); /* the check's x out */
		CK(cudaDeviceSynchronize());
	}

	cJSON *j = cJSON_CreateObject();
	char date[32];
	time_t now = time(NULL);
	strftime(date, sizeof date, "%Y-%m-%d", localtime(&now));
	cJSON_AddStringToObject(j, "date", date);
	cJSON_AddStringToObject(j, "device", prop.name);
	cJSON_AddNumberToObject(j, "copy_bandwidth_GBps", g_copy_bw / 1e9);
	g_rows = cJSON_AddArrayToObject(j, "measurements");

	if (!only || only <= 2)
		table_decode();
	if (!only || only == 2)
		step_estimate(j);
	if (!only || only == 3)
		table_prefill();
	if (!only || only == 4)
		table_variants();
	if (!only || only == 5)
		table_lt_algos();
	if (!only || only == 6)
		table_lt_prefill(lt_ns);
	if (!only || only == 7)
		table_batch();
	if (!only || only == 8)
		table_gemm_variants();
	if (!only || only == 9)
		table_lt_splits();
	if (!only || only == 10)
		table_gemm_splits();
	if (!only || only == 11)
		table_i8_algos();
	printf("\n%.0f s\n", sl_now() - t0);

	if (out) {
		char *txt = cJSON_Print(j);
		FILE *fp = fopen(out, "w");
		if (!fp || !txt || fputs(txt, fp) < 0) {
			fprintf(stderr, "cannot write %s\n", out);
			return 1;
		}
		fclose(fp);
		free(txt);
		printf("wrote %s\n", out);
	}
	cJSON_Delete(j);
	kern_qblas_destroy(g_qb);
	kern_blas_destroy(g_blas);
	cudaFree(g_pool);
	cudaFree(g_x);
	cudaFree(g_out);
	return 0;
}
