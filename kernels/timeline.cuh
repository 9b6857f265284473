/*
 * timeline.cuh — the device side of kernels/timeline.h: compiled only with
 * SL_TIMELINE (make TIMELINE=1), included by kernels/cuda_util.cuh, whose
 * kern_pdl_wait / kern_pdl_launch_next call these from each block's first
 * thread. Without relocatable device code every .cu file has its own copy
 * of the state; each registers its copy's host handle at load, and
 * kern_timeline_start sets them all.
 */
#ifndef KERN_TIMELINE_CUH
#define KERN_TIMELINE_CUH

#include "kernels/timeline.h"

static __device__ kern_tl_state kern_tl_dev;
[[maybe_unused]] static const int kern_tl_registered =
	kern_timeline_register((const void *)&kern_tl_dev);

__device__ __forceinline__ unsigned long long kern_tl_now()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__device__ __forceinline__ bool kern_tl_first_thread()
{
	return (threadIdx.x | threadIdx.y | threadIdx.z) == 0;
}

/* Append one record for this block (its first thread only). */
__device__ __forceinline__ void kern_tl_put(unsigned kind, unsigned line, unsigned long long t0,
					    unsigned long long t1)
{
	const kern_tl_state s = kern_tl_dev;
	if (!s.buf)
		return;
	kern_tl_rec r;
	asm volatile("mov.u64 %0, %%gridid;" : "=l"(r.grid));
	asm volatile("mov.u32 %0, %%smid;" : "=r"(r.smid));
	r.t_arrive = t0, r.t_go = t1, r.kind = kind, r.line = line, r.pad = 0;
	r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
	r.grid_x = gridDim.x, r.grid_y = gridDim.y * gridDim.z;
	r.threads = blockDim.x * blockDim.y * blockDim.z;
	s.buf[atomicAdd(s.count, 1ull) & s.mask] = r;
}

#endif
