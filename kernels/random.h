/*
 * random.h — reproducible random fills for weights that have no
 * checkpoint (benchmarks of 7B/13B/70B shapes): uniform values with a
 * given mean and standard deviation. The CPU version draws from the same
 * Philox as sampling; the GPU version uses cuRAND's Philox generator and
 * writes fp16/bf16 directly, so 70B of weights never cross PCIe.
 */
#ifndef KERN_RANDOM_H
#define KERN_RANDOM_H
#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#ifdef __cplusplus
extern "C" {
#endif

void kern_fill_uniform_cpu(float *dst, size_t n, float mean, float std, uint64_t seed);

#ifdef SL_HAVE_CUDA
/* dst: device memory of n elements of dt (F32, F16 or BF16). */
int kern_fill_uniform_cuda(void *dst, size_t n, float mean, float std, uint64_t seed, sl_dtype dt,
			   void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
