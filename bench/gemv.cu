/*
 * gemv.cu — micro-benchmark of the decode GEMV in kernels/matmul.cu against
 * cuBLAS on the Llama-2-7B projections, on the local GPU. It includes
 * matmul.cu itself so it can sweep the kernel's block shapes (KSPLIT warps
 * per 16-row tile, UNROLL chunks in flight), which the library fixes.
 *
 * Reports, per shape and token count: microseconds per call and W bytes
 * read per second, each call on a different copy of W so that nothing is
 * served from L2 (copies rotate through >= 2 GiB); then one decode step's
 * worth of projections (32 layers x wqkv, wo, w13, w2, plus the LM head)
 * with a small dependent kernel between them, as the model runs them,
 * with and without programmatic dependent launch (of the GEMV only, and of
 * every kernel: what the other kernels would gain from adopting it). All timings are CUDA
 * graph replays timed with events, as the engine's decode steps run.
 *
 * Not built by the Makefile (it needs the kernel's templates, not the
 * library's entry points). Build, next to a CUDA build of the library:
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -I. -Icommon -Ikernels \
 *     -Inode -Iparallel -DSL_HAVE_CUDA bench/gemv.cu build-cuda/libshardline.a \
 *     -o build-cuda/bin/shardline-gemv -lcublas -lcudart
 */
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "matmul.cu"

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

/* one call: out = x @ W^T for the W at w */
typedef std::function<int(const T *w, int n, const shape &s)> call_fn;

static kern_blas *g_b;
static void *g_out; /* [8 or 16, 32000] fp32-sized */
static T *g_x;      /* [16, 11008] */

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

int main(int argc, char **argv)
{
	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	if (kern_blas_create(st, &g_b))
		return 1;
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
	       prop.l2CacheSize >> 20);

	/* W copies: a 4 GiB pool, each shape's copies laid end to end */
	const size_t pool_bytes = (size_t)4 << 30;
	char *pool;
	CK(cudaMalloc(&pool, pool_bytes));
	CK(cudaMemset(pool, 0x2c, pool_bytes)); /* fp16 0x2c2c = 0.0645 */
	CK(cudaMalloc(&g_out, sizeof(float) * 16 * 32000));
	CK(cudaMalloc(&g_x, sizeof(T) * 16 * 11008));
	CK(cudaMemset(g_x, 0x3c, sizeof(T) * 16 * 11008));

	struct variant {
		const char *name;
		call_fn fn;
	};
	std::vector<variant> vs = {
		{"cublas", call_cublas},          {"gemv4x4", call_gemv<4, 4>},
		{"gemv4x8", call_gemv<4, 8>},     {"gemv8x2", call_gemv<8, 2>},
		{"gemv8x4", call_gemv<8, 4>},     {"gemv8x8(lib)", call_gemv<8, 8>},
		{"gemv16x2", call_gemv<16, 2>},   {"gemv16x4", call_gemv<16, 4>},
	};

	/* ---- isolated calls: one W copy per call, >= 2 GiB per graph ---- */
	printf("\nisolated calls (no PDL), us per call | GB/s of W read\n%-8s %2s", "shape", "n");
	for (auto &v : vs)
		printf(" %17s", v.name);
	printf("\n");
	const int ns[] = {1, 2, 4, 8, 16};
	for (const shape &s : k_shapes) {
		size_t wbytes = (size_t)s.in_dim * s.out_dim * sizeof(T);
		int copies = (int)(pool_bytes / wbytes);
		int calls = (int)(((size_t)2 << 30) / wbytes) + 1;
		for (int n : ns) {
			printf("%-8s %2d", s.name, n);
			for (auto &v : vs) {
				if (n > GEMV_MAX_TOKENS && strcmp(v.name, "cublas")) {
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
