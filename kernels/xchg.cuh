/*
 * xchg.cuh — waiting on the other GPUs of a tensor-parallel group: the
 * custom all-reduce's flags (parallel/allreduce.cu: a release store at
 * system scope into a peer's memory after the data, an acquire load of
 * one's own), and the words a GEMV with the KERN_EPI_ALLREDUCE_ADD
 * epilogue exchanges (kernels/epilogue.h's kern_xchg), which carry their
 * own call number instead. Peers are other processes, possibly on other
 * GPUs, so gpu scope would not be enough (on one GPU it would, but the
 * same code serves both).
 */
#ifndef KERN_XCHG_CUH
#define KERN_XCHG_CUH

#include <stdint.h>

#include "kernels/cuda_util.cuh"
#include "kernels/epilogue.h"

__device__ __forceinline__ void kern_flag_store(uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Once it returns the peer's value, the peer's writes before its release
 * are visible to this thread (and, through a barrier after the wait, to
 * the others that take part in it). */
__device__ __forceinline__ uint32_t kern_flag_load(const uint32_t *p)
{
	uint32_t v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ uint64_t kern_now_ns(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* A spinning wait's clock, checked every 4096 spins: the first check
 * starts it; one past KERN_XCHG_TIMEOUT_NS records the wait (seen:
 * what the flag held) and traps. */
__device__ __forceinline__ void kern_wait_tick(uint32_t spins, uint64_t *t0,
					       kern_xchg_diag *diag, int rank, int peer,
					       uint32_t seen, uint32_t want)
{
	if (spins & 4095)
		return;
	const uint64_t t = kern_now_ns();
	if (!*t0) {
		*t0 = t;
		return;
	}
	if (t - *t0 <= KERN_XCHG_TIMEOUT_NS)
		return;
	if (diag) {
		diag->rank = rank, diag->block = blockIdx.x;
		diag->peer = peer, diag->seen = seen, diag->want = want;
		__threadfence_system();
		diag->fired = 1;
		__threadfence_system();
	}
	__trap();
}

/* Spin until flag >= want (wrap-safe: values of live calls are never 2^31
 * apart); kern_wait_tick gives up after KERN_XCHG_TIMEOUT_NS. Scalars,
 * not a parameter struct: taking that struct's address in a non-inlined
 * call would copy it to local memory for the whole kernel. */
static __device__ __noinline__ void kern_flag_wait(const uint32_t *flag, uint32_t want,
						   kern_xchg_diag *diag, int rank, int peer)
{
	uint64_t t0 = 0;
	for (uint32_t spins = 1;; spins++) {
		const uint32_t v = kern_flag_load(flag);
		if ((int32_t)(v - want) >= 0)
			return;
		kern_wait_tick(spins, &t0, diag, rank, peer, v, want);
	}
}

/* Word g of tile t, token k, from rank `from`, slot s, in rank p's area
 * as mapped here (the layout in kernels/epilogue.h). */
__device__ __forceinline__ uint64_t *kern_xchg_word(const kern_xchg &x, int p, int s, int from,
						    int t, int k, int g)
{
	const size_t i = (((size_t)s * KERN_XCHG_MAX_RANKS + from) * KERN_XCHG_MAX_TILES + t) * 16;
	return reinterpret_cast<uint64_t *>(x.area[p]) + i + k * 8 + g;
}

/* An aligned 64-bit store and load at system scope, relaxed: single-copy
 * atomic, so a reader sees a word whole, and morally strong, so the
 * polling load cannot be served a stale copy. */
__device__ __forceinline__ void kern_ll_store(uint64_t *p, uint64_t v)
{
	asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t kern_ll_load(const uint64_t *p)
{
	uint64_t v;
	asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

/* The word at p once its high half is call e's (see kern_flag_wait for
 * the timeout). */
static __device__ __noinline__ uint64_t kern_ll_wait(const uint64_t *p, uint32_t e,
						    kern_xchg_diag *diag, int rank, int peer)
{
	uint64_t t0 = 0;
	for (uint32_t spins = 1;; spins++) {
		const uint64_t v = kern_ll_load(p);
		if ((uint32_t)(v >> 32) == e)
			return v;
		kern_wait_tick(spins, &t0, diag, rank, peer, (uint32_t)(v >> 32), e);
	}
}

template <typename T> __device__ __forceinline__ uint16_t kern_bits16(T v)
{
	return *reinterpret_cast<const uint16_t *>(&v);
}

template <typename T> __device__ __forceinline__ float kern_f32_of_bits(uint32_t b)
{
	const uint16_t h = (uint16_t)b;
	return kern_to_f32(*reinterpret_cast<const T *>(&h));
}

/*
 * The group's sum of a GEMV tile, from warp 0 of block t (the tile), in
 * place of its four values v: lane (g, c) holds rows g (i < 2) and g + 8
 * of the tile for tokens 2c + (i & 1); with n <= 2 only the lanes of c = 0
 * hold any. Each lane rounds its values to T as a stored partial would
 * be, stores one word per token (rows g and g + 8, the call's number)
 * into every peer's area, polls its own area for every peer's word of
 * the same rows, and sums rank 0..tp-1's partials in fp32, starting from
 * rank 0's, as the one-shot all-reduce does. Rows past the projection's
 * end travel as zeros (the reader cannot tell they are missing).
 */
template <typename T>
__device__ __forceinline__ void kern_xchg_sum(const kern_xchg &x, int n, int tok0, float v[4])
{
	const int lane = threadIdx.x & 31, g = lane >> 2, t = blockIdx.x;
	uint32_t e = 0;
	if (lane == 0) {
		e = x.epoch[t] + 1;
		x.epoch[t] = e;
	}
	e = __shfl_sync(0xffffffffu, e, 0);
	if (tok0 != 0) /* n <= 2: lanes of c > 0 hold no token */
		return;
	const int s = e & 1;
	uint32_t mine[2];
	for (int k = 0; k < n; k++) {
		mine[k] = (uint32_t)kern_bits16(kern_from_f32<T>(v[k])) |
			  (uint32_t)kern_bits16(kern_from_f32<T>(v[2 + k])) << 16;
		const uint64_t w = (uint64_t)e << 32 | mine[k];
		for (int q = 0; q < x.tp; q++)
			if (q != x.rank)
				kern_ll_store(kern_xchg_word(x, q, s, x.rank, t, k, g), w);
	}
	for (int k = 0; k < n; k++) {
		float a = 0, b = 0;
		for (int q = 0; q < x.tp; q++) {
			const uint32_t w =
				q == x.rank ? mine[k]
					    : (uint32_t)kern_ll_wait(kern_xchg_word(x, x.rank, s, q, t, k, g),
								     e, x.diag, x.rank, q);
			const float fa = kern_f32_of_bits<T>(w), fb = kern_f32_of_bits<T>(w >> 16);
			a = q == 0 ? fa : a + fa;
			b = q == 0 ? fb : b + fb;
		}
		v[k] = a, v[2 + k] = b;
	}
}

#endif
