/*
 * rmsnorm.cu — CUDA RMSNorm and residual-add + RMSNorm. One block per row:
 * a first pass accumulates the sum of squares (and, fused, writes the
 * updated fp32 residual), a block reduction gives 1/rms, a second pass
 * writes out = x * inv * w in the storage dtype. Rows of up to 4 vectors
 * of 8 per thread (8192 wide at 256 threads) stay in registers
 * (norm_reg_kernel): x, delta and w are loaded in one round trip, which
 * is what a decode step's single row waits for. Wider or unaligned rows
 * take norm_kernel, whose second pass re-reads the row from L1/L2, so any
 * width works. kern_rmsnorm_fp8_cuda also quantizes out, still in
 * registers, for fp8's W8A8 projection that reads it (act_fp8.cuh).
 * kern_add_rmsnorm_parts_cuda takes its delta as a split GEMV's fp32
 * partials (kern_qmatmul_parts_cuda), summed in order in the same loads.
 * Semantics: kernels/rmsnorm.c.
 */
#include "kernels/act_fp8.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/rmsnorm.h"

#define NORM_THREADS 256

/* residual: fp32 [n, dim]. ADD: residual += delta first (delta may be NULL
 * otherwise). w == NULL: only the add (out untouched). */
template <typename T, bool VEC, bool ADD>
__global__ void __launch_bounds__(NORM_THREADS)
	norm_kernel(float *__restrict__ x, const T *__restrict__ delta, const T *__restrict__ w,
		    T *__restrict__ out, int dim, float eps)
{
	kern_pdl_start();
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

/* The register kernel's delta: a row of the storage dtype ... */
template <typename T> struct delta_rows {
	const T *p;
	__device__ __forceinline__ void load(size_t i, float (&d)[8]) const { kern_load8(p + i, d); }
};

/* ... or the sum of a split GEMV's fp32 partials, [parts][n, dim] stride
 * apart, added in order 0, 1, ...: every part's load issued first. */
struct delta_parts {
	const float *p;
	size_t stride;
	int parts;
	__device__ __forceinline__ void load(size_t i, float (&d)[8]) const
	{
		float e[KERN_NORM_MAX_PARTS][8];
#pragma unroll
		for (int q = 0; q < KERN_NORM_MAX_PARTS; q++)
			if (q < parts)
				kern_load8f(p + q * stride + i, e[q]);
#pragma unroll
		for (int k = 0; k < 8; k++)
			d[k] = e[0][k];
#pragma unroll
		for (int q = 1; q < KERN_NORM_MAX_PARTS; q++)
			if (q < parts)
#pragma unroll
				for (int k = 0; k < 8; k++)
					d[k] += e[q][k];
	}
};

/* As norm_kernel (VEC), the row held in registers: R vectors of 8 per
 * thread, vector r at element 8 * (threadIdx.x + r * blockDim.x); the
 * delta from D (delta_rows, delta_parts). Q8: out also as the W8A8
 * path's fp8 activations, q8 [n, dim] codes and s8 [n] scales, from the
 * values stored (act_fp8.cuh); out NULL: those alone. */
template <typename T, bool ADD, int R, bool Q8 = false, typename D = delta_rows<T>>
__global__ void __launch_bounds__(NORM_THREADS)
	norm_reg_kernel(float *__restrict__ x, D delta, const T *__restrict__ w,
			T *__restrict__ out, int dim, float eps, uint8_t *__restrict__ q8,
			float *__restrict__ s8)
{
	kern_pdl_start();
	size_t base = (size_t)blockIdx.x * dim;
	float *xr = x + base;
	float v[R][8], g[R][8], ss = 0;
#pragma unroll
	for (int r = 0; r < R; r++) {
		int j = (threadIdx.x + r * blockDim.x) * KERN_VEC;
		if (j >= dim)
			continue;
		kern_load8f(xr + j, v[r]);
		if (w)
			kern_load8(w + j, g[r]);
		if (ADD) {
			float d[8];
			delta.load(base + j, d);
#pragma unroll
			for (int k = 0; k < 8; k++)
				v[r][k] += d[k];
			kern_store8f(xr + j, v[r]);
		}
#pragma unroll
		for (int k = 0; k < 8; k++)
			ss += v[r][k] * v[r][k];
	}
	if (w == nullptr) /* uniform over the block */
		return;
	ss = kern_block_sum(ss);
	float inv = 1.0f / sqrtf(ss / (float)dim + eps);
#pragma unroll
	for (int r = 0; r < R; r++) {
		int j = (threadIdx.x + r * blockDim.x) * KERN_VEC;
		if (j >= dim)
			continue;
#pragma unroll
		for (int k = 0; k < 8; k++)
			v[r][k] = v[r][k] * inv * g[r][k];
		if (!Q8 || out)
			kern_store8(out + base + j, v[r]);
		if (Q8) /* the activations are those of the stored, rounded values */
			kern_round8<T>(v[r]);
	}
	if (Q8)
		act_fp8_row<R>(q8 + base, s8 + blockIdx.x, v, dim);
}

template <typename T, bool ADD, int R, bool Q8, typename D = delta_rows<T>>
static int norm_reg_launch(float *x, D delta, const void *w, void *out, uint8_t *q8, float *s8,
			   int n, int dim, float eps, int threads, cudaStream_t st)
{
	return kern_launch_small("rmsnorm", st, norm_reg_kernel<T, ADD, R, Q8, D>, dim3(n),
				 dim3(threads), 0, x, delta, (const T *)w, (T *)out, dim, eps, q8,
				 s8);
}

/* The register kernel's threads and vectors a thread for a row of dim
 * (norm_launch's rule); 0 vectors where it cannot hold the row. */
static int norm_reg_shape(int dim, bool vec, int *threads)
{
	int work = vec ? dim / KERN_VEC : dim;
	*threads = work >= NORM_THREADS ? NORM_THREADS : (work + 31) / 32 * 32;
	int per = vec ? (work + *threads - 1) / *threads : 0;
	return per >= 1 && per <= 4 ? per : 0;
}

template <typename T, bool ADD, bool Q8, typename D>
static int norm_reg_any(int per, float *x, D delta, const void *w, void *out, uint8_t *q8,
			float *s8, int n, int dim, float eps, int threads, cudaStream_t st)
{
	if (per == 1)
		return norm_reg_launch<T, ADD, 1, Q8>(x, delta, w, out, q8, s8, n, dim, eps, threads,
						      st);
	if (per == 2)
		return norm_reg_launch<T, ADD, 2, Q8>(x, delta, w, out, q8, s8, n, dim, eps, threads,
						      st);
	return norm_reg_launch<T, ADD, 4, Q8>(x, delta, w, out, q8, s8, n, dim, eps, threads, st);
}

/* Q8: with out's fp8 activations (q8, s8), which only the register kernel
 * makes: SL_ENOTSUP, nothing launched, for any other row. */
template <typename T, bool ADD, bool Q8 = false>
static int norm_launch(float *x, const void *delta, const void *w, void *out, int n, int dim,
		       float eps, cudaStream_t st, uint8_t *q8 = nullptr, float *s8 = nullptr)
{
	bool vec = dim % KERN_VEC == 0 && kern_aligned16(x) && kern_aligned16(delta) &&
		   kern_aligned16(w) && kern_aligned16(out);
	int threads;
	const int per = norm_reg_shape(dim, vec, &threads); /* vectors per thread */
	if (Q8 && (!w || ((uintptr_t)q8 & 7) || !per))
		return SL_ENOTSUP;
	if (per)
		return norm_reg_any<T, ADD, Q8>(per, x, delta_rows<T>{(const T *)delta}, w, out, q8,
						s8, n, dim, eps, threads, st);
	auto kernel = vec ? norm_kernel<T, true, ADD> : norm_kernel<T, false, ADD>;
	return kern_launch_small("rmsnorm", st, kernel, dim3(n), dim3(threads), 0, x,
				 (const T *)delta, (const T *)w, (T *)out, dim, eps);
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

template <typename T>
static int norm_fp8_launch(float *x, const void *delta, const void *w, void *out, uint8_t *q8,
			   float *s8, int n, int dim, float eps, cudaStream_t st)
{
	if (delta)
		return norm_launch<T, true, true>(x, delta, w, out, n, dim, eps, st, q8, s8);
	return norm_launch<T, false, true>(x, delta, w, out, n, dim, eps, st, q8, s8);
}

extern "C" int kern_rmsnorm_fp8_cuda(float *x, const void *delta, const void *w, void *out,
				     uint8_t *q8, float *s8, int n, int dim, float eps,
				     sl_dtype dt, void *stream)
{
	if (n <= 0 || dim <= 0)
		return SL_OK;
	KERN_DISPATCH_DT(dt, norm_fp8_launch, x, delta, w, out, q8, s8, n, dim, eps,
			 kern_stream(stream));
}

template <typename T>
static int norm_parts_launch(float *x, const float *parts, int n_parts, const void *w, void *out,
			     uint8_t *q8, float *s8, int n, int dim, float eps, cudaStream_t st)
{
	int threads;
	const int per = norm_reg_shape(dim, true, &threads);
	const delta_parts d = {parts, (size_t)n * dim, n_parts};
	if (q8)
		return norm_reg_any<T, true, true>(per, x, d, w, out, q8, s8, n, dim, eps, threads,
						   st);
	return norm_reg_any<T, true, false>(per, x, d, w, out, q8, s8, n, dim, eps, threads, st);
}

extern "C" int kern_add_rmsnorm_parts_fits(int dim, int n_parts)
{
	int threads;
	return dim > 0 && dim % KERN_VEC == 0 && n_parts >= 1 && n_parts <= KERN_NORM_MAX_PARTS &&
	       norm_reg_shape(dim, true, &threads) > 0;
}

extern "C" int kern_add_rmsnorm_parts_cuda(float *residual, const float *parts, int n_parts,
					   const void *w, void *out, uint8_t *q8, float *s8, int n,
					   int dim, float eps, sl_dtype dt, void *stream)
{
	if (n <= 0)
		return SL_OK;
	if (!kern_add_rmsnorm_parts_fits(dim, n_parts) || !w || ((uintptr_t)q8 & 7) ||
	    !kern_aligned16(residual) || !kern_aligned16(parts) || !kern_aligned16(w) ||
	    !kern_aligned16(out))
		return SL_ENOTSUP;
	KERN_DISPATCH_DT(dt, norm_parts_launch, residual, parts, n_parts, w, out, q8, s8, n, dim,
			 eps, kern_stream(stream));
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
