/*
 * lab/gemv.cu — the decode GEMV of kernels/matmul.cu, variant by variant,
 * in the llm.c dev/cuda style: each numbered variant is first checked
 * against the CPU reference (kern_matmul_cpu, kernels/matmul.c) on random
 * inputs, then timed. It includes matmul.cu itself so it can sweep the
 * kernel's block shapes (KSPLIT warps per 16-row tile, UNROLL chunks in
 * flight), which the library fixes (GEMV_KSPLIT x GEMV_UNROLL, 8 x 8).
 *
 *   make CUDA=1 lab-gemv            -> build/bin/lab-gemv
 *   build/bin/lab-gemv              check every variant, then the whole sweep
 *   build/bin/lab-gemv V            variant V alone: check it, then time it per shape
 *   build/bin/lab-gemv [V] --check  the checks only (exit 1 on a failure)
 *   build/bin/lab-gemv --list       the variants
 *   build/bin/lab-gemv [V] --shapes SET[,SET...]  time these shapes instead
 *                                   of the 7B ones (and no decode step):
 *                                   13b-tp1, 13b-tp2, 13b-tp4, 70b-tp1, ...
 *                                   (one rank's qkv, o, gate_up, down at
 *                                   that tensor-parallel size), 13b or 70b
 *                                   (tp 1, 2 and 4), tp (both), 7b
 *
 * The check: x (n tokens) and W of each 7B projection, plus two
 * tensor-parallel shards (fewer 16-row tiles than SMs: the split-K path
 * and its reduce kernel), random values of magnitude 0.05..1 (never zero,
 * either sign), rounded to fp16; the reference sums the same rounded values
 * in fp32. n = 1, 3 and 8. The largest |gpu - cpu| over every output must
 * stay within the tolerance (fp16 outputs: their rounding, 2^-11 relative,
 * and the summation order; fp32 outputs, the LM head: the order alone).
 *
 * The timing reports, per shape and token count: microseconds per call and
 * W bytes read per second, each call on a different copy of W so that
 * nothing is served from L2 (copies rotate through >= 2 GiB); then one
 * decode step's worth of projections (32 layers x wqkv, wo, w13, w2, plus
 * the LM head) with a small dependent kernel between them, as the model
 * runs them, with and without programmatic dependent launch (of the GEMV
 * only, and of every kernel: what the other kernels would gain from
 * adopting it). All timings are CUDA graph replays timed with events, as
 * the engine's decode steps run.
 *
 * The tensor-parallel shapes are the slices one rank multiplies (qkv and
 * gate_up split by rows, o and down by columns: docs/parallel.md): at tp 2
 * and 4 they are short, and whether another block shape or split reads
 * them faster is what --shapes tp shows, variant by variant.
 *
 * On an H100 (2026-11) the library's 8 x 8 was best or within 1% on every
 * 7B shape: 2.65-3.04 TB/s of W read at n = 1 against 3.01 TB/s of copy
 * bandwidth (kernels/matmul.cu, GEMV_KSPLIT). PDL on the GEMV alone gained
 * nothing on the decode step; on every kernel 4-8% (docs/benchmarks.md).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/matmul.cu"
#include "kernels/matmul.h"

#define CK(call)                                                                            \
	do {                                                                                \
		cudaError_t e_ = (call);                                                    \
		if (e_ != cudaSuccess) {                                                    \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
				cudaGetErrorString(e_));                                    \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

typedef __half T;

struct shape {
	const char *name;
	int in_dim, out_dim;
	bool f32;
};

static const shape k_shapes[] = {
	{"wqkv", 4096, 12288, false}, {"wo", 4096, 4096, false},     {"w13", 4096, 22016, false},
	{"w2", 11008, 4096, false},   {"lm_head", 4096, 32000, true},
};

/* A Llama-shaped model's sizes, for its per-rank projections. */
struct model_dims {
	const char *name;
	int dim, hidden, heads, kv_heads, head_dim;
};
static const model_dims k_models[] = {
	{"13b", 5120, 13824, 40, 40, 128}, /* MHA */
	{"70b", 8192, 28672, 64, 8, 128},  /* GQA */
};

/* One rank's qkv, o, gate_up and down of m at tensor-parallel size tp, as
 * node/model_load.c shards them: qkv and gate_up by rows (heads, hidden),
 * o and down by columns. */
static void add_tp_shapes(std::vector<shape> &out, const model_dims &m, int tp)
{
	const int hd = m.head_dim;
	const struct {
		const char *proj;
		int in, out;
	} ps[] = {
		{"qkv", m.dim, (m.heads + 2 * m.kv_heads) / tp * hd},
		{"o", m.heads / tp * hd, m.dim},
		{"gate_up", m.dim, 2 * m.hidden / tp},
		{"down", m.hidden / tp, m.dim},
	};
	for (const auto &p : ps) {
		char name[64];
		snprintf(name, sizeof name, "%s-tp%d/%s", m.name, tp, p.proj);
		out.push_back({strdup(name), p.in, p.out, false});
	}
}

/* --shapes: a comma-separated list of 7b, tp, 13b, 70b, 13b-tpN, 70b-tpN
 * (N 1, 2 or 4); false on a name it does not know. */
static bool parse_shapes(const char *list, std::vector<shape> &out)
{
	const int tps[] = {1, 2, 4};
	char buf[256];
	snprintf(buf, sizeof buf, "%s", list);
	for (char *save = nullptr, *t = strtok_r(buf, ",", &save); t;
	     t = strtok_r(nullptr, ",", &save)) {
		bool known = false;
		if (!strcmp(t, "7b")) {
			out.insert(out.end(), std::begin(k_shapes), std::end(k_shapes));
			known = true;
		}
		for (const model_dims &m : k_models)
			for (int tp : tps) {
				char one[32];
				snprintf(one, sizeof one, "%s-tp%d", m.name, tp);
				if (!strcmp(t, "tp") || !strcmp(t, m.name) || !strcmp(t, one)) {
					add_tp_shapes(out, m, tp);
					known = true;
				}
			}
		if (!known) {
			fprintf(stderr, "--shapes: unknown set '%s' (7b, tp, 13b, 70b, 13b-tp1, "
				"13b-tp2, 13b-tp4, 70b-tp1, 70b-tp2, 70b-tp4)\n", t);
			return false;
		}
	}
	return !out.empty();
}

/* one call: out = x @ W^T for the W at w */
typedef std::function<int(const T *w, int n, const shape &s)> call_fn;

static kern_blas *g_b;
static void *g_out; /* [16, the widest out_dim] fp32-sized */
static T *g_x;      /* [16, the widest in_dim] */

static int call_cublas(const T *w, int n, const shape &s)
{
	const float one = 1, zero = 0;
	CUBLAS_TRY(cublasGemmEx(g_b->handle, CUBLAS_OP_T, CUBLAS_OP_N, s.out_dim, n, s.in_dim, &one,
				w, CUDA_R_16F, s.in_dim, g_x, CUDA_R_16F, s.in_dim, &zero, g_out,
				s.f32 ? CUDA_R_32F : CUDA_R_16F, s.out_dim, CUBLAS_COMPUTE_32F,
				CUBLAS_GEMM_DEFAULT));
	return 0;
}

template <int KS, int U> static int call_gemv(const T *w, int n, const shape &s)
{
	const kern_epi_dev e = kern_epi_of(nullptr, s.out_dim, nullptr); /* plain stores */
	if (s.f32)
		return gemv_run<T, float, KS, U>(g_b, (float *)g_out, g_x, w, n, s.in_dim, s.out_dim,
						 e);
	return gemv_run<T, T, KS, U>(g_b, (T *)g_out, g_x, w, n, s.in_dim, s.out_dim, e);
}

__global__ void empty_kernel() {}

/* Stands in for rmsnorm / rope / attention / silu between projections:
 * one block reading and rewriting the activations the next GEMV reads. */
__global__ void touch_kernel(T *x, int count)
{
	kern_pdl_wait(); /* no-op unless launched as a dependent */
	for (int i = threadIdx.x; i < count; i += blockDim.x)
		x[i] = __float2half(__half2float(x[i]) * 0.5f + 0.25f);
}

/* The small kernel, plain or as a programmatic dependent: what every
 * kernel of the step would gain from PDL, not only the GEMV. */
static bool g_touch_pdl;
static void launch_touch(cudaStream_t st, int count)
{
	if (!g_touch_pdl) {
		touch_kernel<<<1, 256, 0, st>>>(g_x, count);
		return;
	}
	cudaLaunchAttribute attr[1];
	attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[0].val.programmaticStreamSerializationAllowed = 1;
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = dim3(1);
	cfg.blockDim = dim3(256);
	cfg.stream = st;
	cfg.attrs = attr;
	cfg.numAttrs = 1;
	CK(cudaLaunchKernelEx(&cfg, touch_kernel, g_x, count));
}

/* Median over `reps` replays of a graph made of `body`, in ms. */
static double time_graph(cudaStream_t st, const std::function<void()> &body, int reps)
{
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	body();
	CK(cudaStreamEndCapture(st, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaGraphLaunch(ge, st)); /* warm-up */
	std::vector<float> ms(reps);
	for (int r = 0; r < reps; r++) {
		CK(cudaEventRecord(e0, st));
		CK(cudaGraphLaunch(ge, st));
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms[r], e0, e1));
	}
	std::sort(ms.begin(), ms.end());
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	return ms[reps / 2];
}

/* ---- the variants, numbered as on the command line ---- */

struct variant {
	const char *name;
	call_fn fn;
	int max_tokens; /* the GEMV takes up to GEMV_MAX_TOKENS */
};

static const variant k_variants[] = {
	{"cublas", call_cublas, 16},
	{"gemv4x4", call_gemv<4, 4>, GEMV_MAX_TOKENS},
	{"gemv4x8", call_gemv<4, 8>, GEMV_MAX_TOKENS},
	{"gemv8x2", call_gemv<8, 2>, GEMV_MAX_TOKENS},
	{"gemv8x4", call_gemv<8, 4>, GEMV_MAX_TOKENS},
	{"gemv8x8(lib)", call_gemv<GEMV_KSPLIT, GEMV_UNROLL>, GEMV_MAX_TOKENS},
	{"gemv16x2", call_gemv<16, 2>, GEMV_MAX_TOKENS},
	{"gemv16x4", call_gemv<16, 4>, GEMV_MAX_TOKENS},
};
#define N_VARIANTS (int)(sizeof k_variants / sizeof *k_variants)

/* ---- the check against kernels/matmul.c ---- */

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

/* h[i] = v[i] rounded to fp16, and v[i] replaced by that rounded value */
static void fill_half(std::vector<float> &v, std::vector<T> &h, float scale)
{
	for (size_t i = 0; i < v.size(); i++) {
		h[i] = __float2half(rand_val(scale));
		v[i] = __half2float(h[i]);
	}
}

/* The check's shapes: the 7B projections and two tp-8 shards (wqkv split
 * by rows: 96 tiles, fewer than the SMs, so in_dim splits across blocks;
 * w2 split by columns: a short row). */
static const shape k_check_shapes[] = {
	{"wqkv", 4096, 12288, false},     {"wo", 4096, 4096, false},
	{"w13", 4096, 22016, false},      {"w2", 11008, 4096, false},
	{"lm_head", 4096, 32000, true},   {"wqkv/tp8", 4096, 1536, false},
	{"w2/tp8", 1376, 4096, false},
};

/* Every variant in `which` (all when -1) against kern_matmul_cpu on every
 * check shape at n = 1, 3, 8; 0 when all are within tolerance. */
static int check_variants(int which)
{
	const int ns[] = {1, 3, 8};
	const int max_n = 8;
	int failed = 0;
	printf("check against kern_matmul_cpu (kernels/matmul.c), random fp16 x and W:\n");
	for (const shape &s : k_check_shapes) {
		const size_t wn = (size_t)s.in_dim * s.out_dim;
		std::vector<float> w(wn), x((size_t)max_n * s.in_dim), ref((size_t)max_n * s.out_dim),
			got((size_t)max_n * s.out_dim);
		std::vector<T> wh(wn), xh(x.size());
		fill_half(w, wh, 0.05f);
		fill_half(x, xh, 1.0f);
		T *dw, *dx;
		void *dout;
		CK(cudaMalloc(&dw, wn * sizeof(T)));
		CK(cudaMalloc(&dx, xh.size() * sizeof(T)));
		CK(cudaMalloc(&dout, got.size() * sizeof(float)));
		CK(cudaMemcpy(dw, wh.data(), wn * sizeof(T), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dx, xh.data(), xh.size() * sizeof(T), cudaMemcpyHostToDevice));
		CK(cudaDeviceSynchronize()); /* the copies ran on the legacy stream */
		T *save_x = g_x;
		void *save_out = g_out;
		g_x = dx, g_out = dout;
		/* fp32 outputs differ from the CPU's by the summation order only;
		 * fp16 ones also by their rounding (|out| stays under about 8 here:
		 * half an fp16 ulp is at most 2^-8) */
		const double tol = s.f32 ? 1e-3 : 1e-2;
		for (int n : ns) {
			kern_matmul_cpu(ref.data(), x.data(), w.data(), n, s.in_dim, s.out_dim);
			for (int vi = 0; vi < N_VARIANTS; vi++) {
				const variant &v = k_variants[vi];
				if ((which >= 0 && vi != which) || n > v.max_tokens)
					continue;
				g_b->pdl = false;
				/* NaN where nothing is written */
				CK(cudaMemsetAsync(dout, 0xff, got.size() * sizeof(float), g_b->stream));
				if (v.fn(dw, n, s)) {
					printf("  %-9s n %d  %d %-13s launch failed\n", s.name, n, vi, v.name);
					failed++;
					continue;
				}
				CK(cudaStreamSynchronize(g_b->stream));
				CK(cudaGetLastError());
				const size_t cnt = (size_t)n * s.out_dim;
				if (s.f32) {
					CK(cudaMemcpy(got.data(), dout, cnt * sizeof(float),
						      cudaMemcpyDeviceToHost));
				} else {
					std::vector<T> gh(cnt);
					CK(cudaMemcpy(gh.data(), dout, cnt * sizeof(T), cudaMemcpyDeviceToHost));
					for (size_t i = 0; i < cnt; i++)
						got[i] = __half2float(gh[i]);
				}
				double worst = 0, max_ref = 0;
				size_t at = 0;
				for (size_t i = 0; i < cnt; i++) {
					const double e = fabs((double)got[i] - ref[i]);
					if (!(e <= worst)) /* NaN counts as the worst */
						worst = std::isnan(e) ? INFINITY : e, at = i;
					max_ref = std::max(max_ref, fabs((double)ref[i]));
				}
				const bool ok = worst <= tol;
				failed += !ok;
				printf("  %-9s n %d  %d %-13s max err %.2e (tol %.0e, max |out| %.2f)%s",
				       s.name, n, vi, v.name, worst, tol, max_ref, ok ? "\n" : "");
				if (!ok)
					printf("  FAIL: token %zu row %zu: gpu %g cpu %g\n", at / s.out_dim,
					       at % s.out_dim, got[at], ref[at]);
			}
		}
		g_x = save_x, g_out = save_out;
		cudaFree(dw);
		cudaFree(dx);
		cudaFree(dout);
		fflush(stdout);
	}
	printf("check: %s\n", failed ? "FAILED" : "all within tolerance");
	return failed ? 1 : 0;
}

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s [VARIANT] [--check] [--list] [--shapes SET[,SET...]]\n",
		argv0);
}

int main(int argc, char **argv)
{
	int which = -1; /* one variant, or -1: all of them */
	bool check_only = false;
	std::vector<shape> shapes; /* --shapes; empty: the 7B ones and the decode step */
	for (int i = 1; i < argc; i++) {
		char *end;
		long v = strtol(argv[i], &end, 10);
		if (!strcmp(argv[i], "--shapes") && i + 1 < argc) {
			if (!parse_shapes(argv[++i], shapes))
				return 2;
		} else if (!strcmp(argv[i], "--check")) {
			check_only = true;
		} else if (!strcmp(argv[i], "--list")) {
			for (int k = 0; k < N_VARIANTS; k++)
				printf("%d %s\n", k, k_variants[k].name);
			return 0;
		} else if (end != argv[i] && !*end && v >= 0 && v < N_VARIANTS && which < 0) {
			which = (int)v;
		} else {
			usage(argv[0]);
			return 2;
		}
	}

	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	if (kern_blas_create(st, &g_b))
		return 1;
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
	       prop.l2CacheSize >> 20);
	if (which >= 0)
		printf("variant %d: %s\n", which, k_variants[which].name);

	/* ---- correctness first, as llm.c's dev/cuda does ---- */
	const int rc = check_variants(which);
	if (rc || check_only) {
		kern_blas_destroy(g_b);
		return rc;
	}

	/* W copies: a 4 GiB pool, each shape's copies laid end to end */
	const size_t pool_bytes = (size_t)4 << 30;
	char *pool;
	CK(cudaMalloc(&pool, pool_bytes));
	CK(cudaMemset(pool, 0x2c, pool_bytes)); /* fp16 0x2c2c = 0.0645 */
	const bool step_too = shapes.empty();
	if (step_too)
		shapes.assign(std::begin(k_shapes), std::end(k_shapes));
	size_t max_in = 0, max_out = 0;
	for (const shape &s : shapes)
		max_in = std::max(max_in, (size_t)s.in_dim), max_out = std::max(max_out, (size_t)s.out_dim);
	CK(cudaMalloc(&g_out, sizeof(float) * 16 * max_out));
	CK(cudaMalloc(&g_x, sizeof(T) * 16 * max_in));
	CK(cudaMemset(g_x, 0x3c, sizeof(T) * 16 * max_in));

	std::vector<variant> vs;
	for (int k = 0; k < N_VARIANTS; k++)
		if (which < 0 || k == which)
			vs.push_back(k_variants[k]);

	/* ---- isolated calls: one W copy per call, >= 2 GiB per graph ---- */
	printf("\nisolated calls (no PDL), us per call | GB/s of W read\n%-16s %2s", "shape", "n");
	for (auto &v : vs)
		printf(" %17s", v.name);
	printf("\n");
	const int ns[] = {1, 2, 4, 8, 16};
	for (const shape &s : shapes) {
		size_t wbytes = (size_t)s.in_dim * s.out_dim * sizeof(T);
		int copies = (int)(pool_bytes / wbytes);
		int calls = (int)(((size_t)2 << 30) / wbytes) + 1;
		for (int n : ns) {
			printf("%-16s %2d", s.name, n);
			for (auto &v : vs) {
				if (n > v.max_tokens) {
					printf(" %17s", "-");
					continue;
				}
				g_b->pdl = false;
				double ms = time_graph(st, [&] {
					for (int i = 0; i < calls; i++)
						v.fn((const T *)(pool + (size_t)(i % copies) * wbytes),
						     n, s);
				}, 7);
				double us = 1e3 * ms / calls;
				printf(" %8.1f|%8.0f", us, wbytes / (us * 1e3));
			}
			printf("\n");
			fflush(stdout);
		}
	}
	if (which >= 0 || !step_too) { /* the decode step: the full 7B run's */
		kern_blas_destroy(g_b);
		cudaFree(pool);
		return 0;
	}

	/* ---- one decode step's projections, as the model sequences them ---- */
	const shape &qkv = k_shapes[0], &wo = k_shapes[1], &w13 = k_shapes[2], &w2 = k_shapes[3],
		    &lm = k_shapes[4];
	size_t layer_bytes = sizeof(T) * ((size_t)qkv.in_dim * qkv.out_dim +
					  (size_t)wo.in_dim * wo.out_dim +
					  (size_t)w13.in_dim * w13.out_dim + (size_t)w2.in_dim * w2.out_dim);
	size_t lm_bytes = sizeof(T) * (size_t)lm.in_dim * lm.out_dim;
	int n_sets = (int)((pool_bytes - lm_bytes) / layer_bytes); /* distinct layers in the pool */
	double step_bytes = 32.0 * layer_bytes + lm_bytes;
	printf("\ndecode step: 32 layers + LM head (%.2f GB of W; %d distinct layers rotate),\n"
	       "a 1-block dependent kernel before each projection as in the model (5 per layer)\n",
	       step_bytes / 1e9, n_sets);
	for (int n : {1, 8}) {
		auto step = [&](const call_fn &fn, bool touch, bool mm) {
			for (int l = 0; l < 32; l++) {
				const char *base = pool + (size_t)(l % n_sets) * layer_bytes;
				const T *w_qkv = (const T *)base;
				const T *w_o = w_qkv + (size_t)qkv.in_dim * qkv.out_dim;
				const T *w_13 = w_o + (size_t)wo.in_dim * wo.out_dim;
				const T *w_2 = w_13 + (size_t)w13.in_dim * w13.out_dim;
				if (touch) launch_touch(st, n * 4096);
				if (mm) fn(w_qkv, n, qkv);
				if (touch) launch_touch(st, n * 4096);
				if (touch) launch_touch(st, n * 4096);
				if (mm) fn(w_o, n, wo);
				if (touch) launch_touch(st, n * 4096);
				if (mm) fn(w_13, n, w13);
				if (touch) launch_touch(st, n * 4096);
				if (mm) fn(w_2, n, w2);
			}
			if (touch) launch_touch(st, n * 4096);
			if (mm) fn((const T *)(pool + (size_t)n_sets * layer_bytes), n, lm);
		};
		g_touch_pdl = false;
		double t_touch = time_graph(st, [&] { step(call_cublas, true, false); }, 9);
		double t_empty = time_graph(st, [&] {
			for (int i = 0; i < 161; i++)
				empty_kernel<<<1, 32, 0, st>>>();
		}, 9);
		printf("n %d: small kernels alone (161 launches): %.3f ms; 161 empty kernels %.3f ms\n",
		       n, t_touch, t_empty);
		struct {
			const char *name;
			call_fn fn;
			bool pdl, touch_pdl;
		} runs[] = {{"cublas", call_cublas, false, false},
			    {"gemv(lib) no PDL", call_gemv<GEMV_KSPLIT, GEMV_UNROLL>, false, false},
			    {"gemv(lib) PDL", call_gemv<GEMV_KSPLIT, GEMV_UNROLL>, true, false},
			    {"gemv8x4 PDL", call_gemv<8, 4>, true, false},
			    {"all PDL", call_gemv<GEMV_KSPLIT, GEMV_UNROLL>, true, true}};
		for (auto &r : runs) {
			g_b->pdl = r.pdl;
			g_touch_pdl = r.touch_pdl;
			double t_mm = time_graph(st, [&] { step(r.fn, false, true); }, 9);
			double t_all = time_graph(st, [&] { step(r.fn, true, true); }, 9);
			printf("n %d: %-16s projections alone %.3f ms (%.0f GB/s), with small kernels "
			       "%.3f ms (%.0f GB/s of W)\n", n, r.name, t_mm, step_bytes / (t_mm * 1e6),
			       t_all, step_bytes / (t_all * 1e6));
			fflush(stdout);
		}
	}
	kern_blas_destroy(g_b);
	cudaFree(pool);
	return 0;
}
