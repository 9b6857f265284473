/*
 * logits_mask.cu — kernels/logits_mask.h on the device: one thread per
 * logit, a warp's 32 threads sharing one mask word (one load for the warp),
 * writing only the forbidden logits. Grid: (vocab / 256, constrained rows).
 */
#include "kernels/cuda_util.cuh"
#include "kernels/logits_mask.h"

__global__ void logits_mask_kernel(float *__restrict__ logits, const int32_t *__restrict__ rows,
				   const uint32_t *__restrict__ masks, int vocab, int words)
{
	kern_pdl_start();
	int i = blockIdx.y;
	int v = blockIdx.x * blockDim.x + threadIdx.x;
	if (v >= vocab)
		return;
	uint32_t m = masks[(size_t)i * words + v / 32];
	if (!((m >> (v % 32)) & 1))
		logits[(size_t)rows[i] * vocab + v] = -INFINITY;
}

extern "C" int kern_logits_mask_cuda(float *logits, const int32_t *rows, const uint32_t *masks,
				     int n, int vocab, void *stream)
{
	if (n <= 0)
		return SL_OK;
	if (n > 65535 || vocab <= 0)
		return SL_EINVAL;
	dim3 grid((vocab + 255) / 256, n);
	return kern_launch_small("logits_mask", (cudaStream_t)stream, logits_mask_kernel, grid,
				 dim3(256), 0, logits, rows, masks, vocab, kern_mask_words(vocab));
}
