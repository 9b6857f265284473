/*
 * pdl.cu — the launch switches of pdl.h: programmatic dependent launch
 * (the kernels that honour it start with kern_pdl_start(), cuda_util.cuh,
 * and launch through kern_launch_pdl) and the decode GEMVs' preference
 * for L1 over shared memory (kern_gemv_l1).
 */
#include <pthread.h>

#include "kernels/cuda_util.cuh"
#include "kernels/pdl.h"

bool kern_pdl_small = false;

/* Touches no CUDA state (the kernel tests set it before Check forks). */
extern "C" void kern_pdl_enable(int on) { kern_pdl_small = on != 0; }

extern "C" int kern_pdl_enabled(void) { return kern_pdl_small; }

/* The GEMV kernels told so far (a few dozen instantiations are launched). */
#define L1_KERNELS_MAX 256
static const void *g_l1_done[L1_KERNELS_MAX];
static int g_l1_n;
static pthread_mutex_t g_l1_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_l1_on = true;

extern "C" void kern_gemv_l1_enable(int on) { g_l1_on = on != 0; }

/* The carveout, in percent of the SM's most shared memory, that holds
 * `blocks` blocks of kernel with `dyn` bytes of dynamic shared memory each;
 * -1 when it cannot be worked out. */
static int carveout_for(const void *kernel, int blocks, size_t dyn)
{
	int dev, smem_sm, reserved;
	cudaFuncAttributes fa;
	if (cudaGetDevice(&dev) != cudaSuccess || cudaFuncGetAttributes(&fa, kernel) != cudaSuccess ||
	    cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) !=
		    cudaSuccess ||
	    cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) !=
		    cudaSuccess ||
	    smem_sm <= 0)
		return -1;
	const long need = (long)blocks * ((long)fa.sharedSizeBytes + (long)dyn + reserved);
	const int pct = (int)((100 * need + smem_sm - 1) / smem_sm);
	return pct < 1 ? 1 : pct > 100 ? 100 : pct;
}

/* The carveout that still holds as many blocks of kernel (threads each,
 * no dynamic shared memory) as its registers allow. */
static int carveout_pct(const void *kernel, int threads)
{
	int blocks;
	if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0) != cudaSuccess)
		return -1;
	return carveout_for(kernel, blocks, 0);
}

/* Once per kernel; a refusal is only a lost hint. */
void kern_gemv_l1(const void *kernel, int threads)
{
	if (!g_l1_on)
		return;
	pthread_mutex_lock(&g_l1_mu);
	bool seen = false;
	for (int i = 0; i < g_l1_n && !seen; i++)
		seen = g_l1_done[i] == kernel;
	if (!seen && g_l1_n < L1_KERNELS_MAX) {
		g_l1_done[g_l1_n++] = kernel;
		const int pct = carveout_pct(kernel, threads);
		if (pct < 0 || cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
						    pct) != cudaSuccess)
			cudaGetLastError();
	}
	pthread_mutex_unlock(&g_l1_mu);
}

/* ---- the probe of pdl.h ---- */

__global__ void pdl_probe_copy(uint4 *dst, const uint4 *src, size_t n, unsigned delay_ns)
{
	kern_pdl_start();
	uint64_t t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while (t - t0 < delay_ns);
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = src[i];
}

extern "C" int kern_pdl_probe_copy(void *dst, const void *src, size_t bytes, unsigned delay_ns,
				   void *stream)
{
	if (bytes % 16 || !kern_aligned16(dst) || !kern_aligned16(src))
		return SL_EINVAL;
	const size_t n = bytes / 16;
	const int blocks = n ? (int)((n + 255) / 256 < 64 ? (n + 255) / 256 : 64) : 1;
	return kern_launch_small("pdl probe", kern_stream(stream), pdl_probe_copy, dim3(blocks),
				 dim3(256), 0, (uint4 *)dst, (const uint4 *)src, n, delay_ns);
}
