/*
 * swiglu.cu — CUDA out = silu(gate) * up over the fused gate/up projection
 * output ([n, 2 * hidden] per token as [gate | up]). Flat grid-stride loop
 * over 8-element vectors (or single elements when hidden is not a multiple
 * of 8). Semantics and formula: kernels/swiglu.c.
 */
#include "cuda_util.cuh"
#include "epilogue.cuh" /* kern_silu_mul: the GEMVs' fused SwiGLU uses it too */
#include "swiglu.h"

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

extern "C" int kern_silu_mul_cuda(void *out, const void *gate_up, int n, int hidden, sl_dtype dt,
				  void *stream)
{
	if (n <= 0 || hidden <= 0)
		return SL_OK;
	KERN_DISPATCH_DT(dt, silu_mul_launch, out, gate_up, n, hidden, kern_stream(stream));
}
