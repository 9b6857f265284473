/*
 * rng.h — the one small, seedable random source for host code that needs
 * reproducible numbers but not Philox's keyed streams (random checkpoints,
 * load mixes, test inputs): splitmix64. Sampling uses kernels/philox.h.
 */
#ifndef SL_RNG_H
#define SL_RNG_H

#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* Next 64 random bits; advances *state. */
static inline uint64_t sl_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 bits of resolution (exact in a float). */
static inline float sl_rng_unit(uint64_t *state)
{
	return (float)(sl_splitmix64(state) >> 40) * (1.0f / 16777216.0f);
}

/* A seed that differs between processes and runs (wall clock, pid):
 * session ids, request-id epochs, retry jitter. Not for anything secret. */
static inline uint64_t sl_random_seed(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
	return sl_splitmix64(&s);
}

#endif
