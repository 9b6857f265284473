/*
 * philox.h — Philox4x32-10 (Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3"): one definition compiled for the host and, by nvcc,
 * for the device, so the CPU and GPU samplers draw bit-identical numbers
 * from (seed, position). Included by sampling.c and sampling.cu only.
 */
#ifndef KERN_PHILOX_H
#define KERN_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define PHILOX_FN static __host__ __device__ __forceinline__
#else
#define PHILOX_FN static inline
#endif

PHILOX_FN void philox_round(uint32_t ctr[4], const uint32_t key[2])
{
	uint64_t p0 = (uint64_t)0xD2511F53u * ctr[0];
	uint64_t p1 = (uint64_t)0xCD9E8D57u * ctr[2];
	uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
	uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
	uint32_t n0 = hi1 ^ ctr[1] ^ key[0], n2 = hi0 ^ ctr[3] ^ key[1];
	ctr[0] = n0;
	ctr[1] = lo1;
	ctr[2] = n2;
	ctr[3] = lo0;
}

/* Uniform in [0, 1) from counter = position, key = seed: the top 24 bits
 * of the first output word. */
PHILOX_FN float philox_uniform(uint64_t seed, uint64_t position)
{
	uint32_t ctr[4] = {(uint32_t)position, (uint32_t)(position >> 32), 0, 0};
	uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
	for (int r = 0; r < 10; r++) {
		philox_round(ctr, key);
		key[0] += 0x9E3779B9u;
		key[1] += 0xBB67AE85u;
	}
	return (float)(ctr[0] >> 8) * (1.0f / 16777216.0f);
}

#endif
