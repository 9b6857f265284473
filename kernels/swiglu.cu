/*
 * swiglu.cu — CUDA out = silu(gate) * up over the fused gate/up projection
 * output ([n, 2 * hidden] per token as [gate | up]). Flat grid-stride loop
 * over 8-element vectors (or single elements when hidden is not a multiple
 * of 8). kern_silu_mul_fp8_cuda: one block a row instead, which also
 * quantizes the row for fp8's W8A8 down projection (act_fp8.cuh).
 * Semantics and formula: kernels/swiglu.c.
 */
#include "kernels/act_fp8.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/epilogue.cuh" /* kern_silu_mul: the GEMVs' fused SwiGLU uses it too */
#include "kernels/swiglu.h"

template <typename T, bool VEC>
__global__ void silu_mul_kernel(T *__restrict__ out, const T *__restrict__ gate_up, long n,
				int hidden)
{
	kern_pdl_start();
	int width = VEC ? hidden / KERN_VEC : hidden; /* units per row */
	long total = n * width;
	for (long u = (long)blockIdx.x * blockDim.x + threadIdx.x; u < total;
	     u += (long)gridDim.x * blockDim.x) {
		long row = u / width;
		int col = (int)(u - row * width) * (VEC ? KERN_VEC : 1);
		const T *g = gate_up + row * 2 * hidden + col;
		T *o = out + row * hidden + col;
		if (VEC) {
			float gv[8], uv[8];
			kern_load8(g, gv);
			kern_load8(g + hidden, uv);
#pragma unroll
			for (int k = 0; k < 8; k++)
				gv[k] = kern_silu_mul(gv[k], uv[k]);
			kern_store8(o, gv);
		} else {
			*o = kern_from_f32<T>(kern_silu_mul(kern_to_f32(g[0]), kern_to_f32(g[hidden])));
		}
	}
}

template <typename T>
static int silu_mul_launch(void *out, const void *gate_up, int n, int hidden, cudaStream_t st)
{
	bool vec = hidden % KERN_VEC == 0 && kern_aligned16(out) && kern_aligned16(gate_up);
	long units = (long)n * (vec ? hidden / KERN_VEC : hidden);
	int threads = 256;
	long blocks = (units + threads - 1) / threads;
	if (blocks > 65535L * 8) /* grid-stride beyond this: enough to fill any GPU */
		blocks = 65535L * 8;
	auto kernel = vec ? silu_mul_kernel<T, true> : silu_mul_kernel<T, false>;
	return kern_launch_small("silu_mul", st, kernel, dim3((unsigned)blocks), dim3(threads), 0,
				 (T *)out, (const T *)gate_up, (long)n, hidden);
}

constexpr int kSiluRowThreads = 256;

/* One block per token: out as silu_mul_kernel (VEC), the row then still in
 * registers (V vectors of 8 a thread) quantized to the W8A8 path's fp8
 * activations, q8 [n, hidden] codes and s8 [n] scales (act_fp8.cuh). out
 * NULL: the activations alone, a third less traffic. Every load of the
 * row is issued before the first is used, and the products wait packed
 * in T (the values out holds, which are the ones quantized): at 4
 * registers a vector, three blocks fit an SM. Loading and computing vector
 * by vector instead kept about one load a thread in flight: 72 us for the
 * 7B's 2048 x 11008 on an H100, 1.6 TB/s
 * (bench/results/2026-11-28-nvidia-h100-fp8-prefill/). */
template <typename T, int V>
__global__ void __launch_bounds__(kSiluRowThreads)
	silu_mul_fp8_kernel(T *__restrict__ out, const T *__restrict__ gate_up,
			    uint8_t *__restrict__ q8, float *__restrict__ s8, int hidden)
{
	kern_pdl_start();
	const size_t row = blockIdx.x;
	const T *g = gate_up + row * 2 * hidden;
	uint4 gr[V], ur[V];
#pragma unroll
	for (int r = 0; r < V; r++) {
		const int j = (threadIdx.x + r * kSiluRowThreads) * KERN_VEC;
		if (j < hidden) {
			gr[r] = *reinterpret_cast<const uint4 *>(g + j);
			ur[r] = *reinterpret_cast<const uint4 *>(g + hidden + j);
		}
	}
	float m = 0.f;
#pragma unroll
	for (int r = 0; r < V; r++) {
		const int j = (threadIdx.x + r * kSiluRowThreads) * KERN_VEC;
		if (j >= hidden)
			continue;
		float f[8], uv[8];
		kern_unpack8<T>(gr[r], f);
		kern_unpack8<T>(ur[r], uv);
#pragma unroll
		for (int k = 0; k < 8; k++)
			f[k] = kern_silu_mul(f[k], uv[k]);
		gr[r] = kern_pack8<T>(f); /* from here on the product, rounded to T */
		if (out)
			*reinterpret_cast<uint4 *>(out + row * hidden + j) = gr[r];
		kern_unpack8<T>(gr[r], f);
#pragma unroll
		for (int k = 0; k < 8; k++)
			m = fmaxf(m, fabsf(f[k]));
	}
	const float inv = act_fp8_scale(s8 + row, m);
#pragma unroll
	for (int r = 0; r < V; r++) {
		const int j = (threadIdx.x + r * kSiluRowThreads) * KERN_VEC;
		if (j < hidden) {
			float f[8];
			kern_unpack8<T>(gr[r], f);
			act_fp8x8(q8 + row * hidden + j, f, inv);
		}
	}
}

template <typename T, int V>
static int silu_fp8_rows(void *out, const void *gate_up, uint8_t *q8, float *s8, int n,
			 int hidden, cudaStream_t st)
{
	return kern_launch_small("silu_mul", st, silu_mul_fp8_kernel<T, V>, dim3(n),
				 dim3(kSiluRowThreads), 0, (T *)out, (const T *)gate_up, q8, s8, hidden);
}

/* rows of up to 8 vectors a thread (hidden <= 16384), V exactly what the
 * row needs: every register a V too many holds is occupancy lost */
template <typename T>
static int silu_fp8_launch(void *out, const void *gate_up, uint8_t *q8, float *s8, int n,
			   int hidden, cudaStream_t st)
{
	if (hidden % KERN_VEC || (out && !kern_aligned16(out)) || !kern_aligned16(gate_up) ||
	    ((uintptr_t)q8 & 7))
		return SL_ENOTSUP;
	switch ((hidden / KERN_VEC + kSiluRowThreads - 1) / kSiluRowThreads) {
#define SILU_V(V) case V: return silu_fp8_rows<T, V>(out, gate_up, q8, s8, n, hidden, st);
	SILU_V(1) SILU_V(2) SILU_V(3) SILU_V(4) SILU_V(5) SILU_V(6) SILU_V(7) SILU_V(8)
#undef SILU_V
	}
	return SL_ENOTSUP;
}

extern "C" int kern_silu_mul_fp8_cuda(void *out, const void *gate_up, uint8_t *q8, float *s8,
				      int n, int hidden, sl_dtype dt, void *stream)
{
	if (n <= 0 || hidden <= 0)
		return SL_OK;
	KERN_DISPATCH_DT(dt, silu_fp8_launch, out, gate_up, q8, s8, n, hidden, kern_stream(stream));
}

extern "C" int kern_silu_mul_cuda(void *out, const void *gate_up, int n, int hidden, sl_dtype dt,
				  void *stream)
{
	if (n <= 0 || hidden <= 0)
		return SL_OK;
	KERN_DISPATCH_DT(dt, silu_mul_launch, out, gate_up, n, hidden, kern_stream(stream));
}
