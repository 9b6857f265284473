/*
 * random.cu — GPU random fill: cuRAND's Philox4x32-10 generates fp32
 * uniforms in chunks of a scratch buffer, a small kernel maps them to
 * mean + a * (2u - 1) in the target dtype. Runs at load time only.
 */
#include <curand.h>

#include "kernels/cuda_util.cuh"
#include "kernels/random.h"

template <typename T>
__global__ void scale_kernel(T *dst, const float *u, size_t n, float mean, float a)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = kern_from_f32<T>(mean + a * (2.0f * u[i] - 1.0f));
}

template <typename T>
static int scale_launch(void *dst, const float *u, size_t n, float mean, float a, cudaStream_t st)
{
	int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
	scale_kernel<<<blocks, 256, 0, st>>>((T *)dst, u, n, mean, a);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

static int scale(void *dst, const float *u, size_t n, float mean, float a, sl_dtype dt,
		 cudaStream_t st)
{
	KERN_DISPATCH_DT_F32(dt, scale_launch, dst, u, n, mean, a, st);
}

extern "C" int kern_fill_uniform_cuda(void *dst, size_t n, float mean, float std, uint64_t seed,
				      sl_dtype dt, void *stream)
{
	const size_t chunk = (size_t)1 << 24; /* 64 MiB of fp32 scratch */
	cudaStream_t st = (cudaStream_t)stream;
	float *u = NULL;
	curandGenerator_t gen = NULL;
	int rc = SL_OK;
	size_t es = sl_dtype_size(dt);
	CUDA_TRY(cudaMalloc(&u, sizeof(float) * (n < chunk ? n : chunk)));
	if (curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10) != CURAND_STATUS_SUCCESS ||
	    curandSetPseudoRandomGeneratorSeed(gen, seed) != CURAND_STATUS_SUCCESS ||
	    curandSetStream(gen, st) != CURAND_STATUS_SUCCESS)
		rc = SL_EDEVICE;
	for (size_t i = 0; !rc && i < n; i += chunk) {
		size_t m = n - i < chunk ? n - i : chunk;
		if (curandGenerateUniform(gen, u, m) != CURAND_STATUS_SUCCESS)
			rc = SL_EDEVICE;
		else
			rc = scale((char *)dst + i * es, u, m, mean, std * 1.7320508f, dt, st);
	}
	if (gen)
		curandDestroyGenerator(gen);
	cudaStreamSynchronize(st);
	cudaFree(u);
	if (rc)
		SL_ERROR("random", "cuRAND fill of %zu elements failed", n);
	return rc;
}
