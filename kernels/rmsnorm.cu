/*
 * rmsnorm.cu — CUDA RMSNorm and residual-add + RMSNorm. One block per row:
 * a first pass accumulates the sum of squares (and, fused, writes the
 * updated fp32 residual), a block reduction gives 1/rms, a second pass
 * writes out = x * inv * w in the storage dtype. The second pass re-reads
 * the row from L1/L2 rather than holding it in registers, so any width
 * works with one kernel. Semantics: kernels/rmsnorm.c.
 */
#include "cuda_util.cuh"
#include "rmsnorm.h"

#define NORM_THREADS 256

/* residual: fp32 [n, dim]. ADD: residual += delta first (delta may be NULL
 * otherwise). w == NULL: only the add (out untouched). */
template <typename T, bool VEC, bool ADD>
__global__ void __launch_bounds__(NORM_THREADS)
	norm_kernel(float *__restrict__ x, const T *__restrict__ delta, const T *__restrict__ w,
		    T *__restrict__ out, int dim, float eps)
{
	size_t base = (size_t)blockIdx.x * dim;
	float *xr = x + base;
	float ss = 0;
	if (VEC) {
		for (int j = threadIdx.x * KERN_VEC; j < dim; j += blockDim.x * KERN_VEC) {
			float v[8];
			kern_load8f(xr + j, v);
			if (ADD) {
				float d[8];
				kern_load8(delta + base + j, d);
#pragma unroll
				for (int k = 0; k < 8; k++)
					v[k] += d[k];
				kern_store8f(xr + j, v);
			}
#pragma unroll
			for (int k = 0; k < 8; k++)
				ss += v[k] * v[k];
		}
	} else {
		for (int j = threadIdx.x; j < dim; j += blockDim.x) {
			float v = xr[j];
			if (ADD) {
				v += kern_to_f32(delta[base + j]);
				xr[j] = v;
			}
			ss += v * v;
		}
	}
	if (w == nullptr) /* uniform over the block */
		return;
	ss = kern_block_sum(ss);
	float inv = 1.0f / sqrtf(ss / (float)dim + eps);
	/* Each thread re-reads only elements it wrote itself above: no barrier
	 * needed between the residual store and this load. */
	T *orow = out + base;
	if (VEC) {
		for (int j = threadIdx.x * KERN_VEC; j < dim; j += blockDim.x * KERN_VEC) {
			float v[8], g[8];
			kern_load8f(xr + j, v);
			kern_load8(w + j, g);
#pragma unroll
			for (int k = 0; k < 8; k++)
				v[k] = v[k] * inv * g[k];
			kern_store8(orow + j, v);
		}
	} else {
		for (int j = threadIdx.x; j < dim; j += blockDim.x)
			orow[j] = kern_from_f32<T>(xr[j] * inv * kern_to_f32(w[j]));
	}
}

template <typename T, bool ADD>
static int norm_launch(float *x, const void *delta, const void *w, void *out, int n, int dim,
		       float eps, cudaStream_t st)
{
	bool vec = dim % KERN_VEC == 0 && kern_aligned16(x) && kern_aligned16(delta) &&
		   kern_aligned16(w) && kern_aligned16(out);
	int work = vec ? dim / KERN_VEC : dim;
	int threads = work >= NORM_THREADS ? NORM_THREADS : (work + 31) / 32 * 32;
	if (vec)
		norm_kernel<T, true, ADD><<<n, threads, 0, st>>>(x, (const T *)delta, (const T *)w,
								  (T *)out, dim, eps);
	else
		norm_kernel<T, false, ADD><<<n, threads, 0, st>>>(x, (const T *)delta, (const T *)w,
								   (T *)out, dim, eps);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

template <typename T>
static int rmsnorm_launch(void *out, const float *x, const void *w, int n, int dim, float eps,
			  cudaStream_t st)
{
	/* x is only read when ADD is false */
	return norm_launch<T, false>((float *)x, nullptr, w, out, n, dim, eps, st);
}

template <typename T>
static int add_rmsnorm_launch(float *residual, const void *delta, const void *w, void *out,
			      int n, int dim, float eps, cudaStream_t st)
{
	return norm_launch<T, true>(residual, delta, w, out, n, dim, eps, st);
}

extern "C" int kern_rmsnorm_cuda(void *out, const float *x, const void *w, int n, int dim,
				 float eps, sl_dtype dt, void *stream)
{
	if (n <= 0 || dim <= 0)
		return SL_OK;
	KERN_DISPATCH_DT(dt, rmsnorm_launch, out, x, w, n, dim, eps, kern_stream(stream));
}

extern "C" int kern_add_rmsnorm_cuda(float *residual, const void *delta, const void *w, void *out,
				     int n, int dim, float eps, sl_dtype dt, void *stream)
{
	if (n <= 0 || dim <= 0)
		return SL_OK;
	KERN_DISPATCH_DT(dt, add_rmsnorm_launch, residual, delta, w, out, n, dim, eps,
			 kern_stream(stream));
}
