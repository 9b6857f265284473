/*
 * allreduce.cu — the kernels of the custom all-reduce (host side:
 * allreduce.c; memory layout: allreduce_dev.h). Every rank of a tensor-
 * parallel group on one host runs the same kernel with the same grid on
 * its own stream; the kernels talk through each other's exchange buffers
 * (CUDA IPC) and flags, never through the host, so they can be captured
 * in a CUDA graph and replayed.
 *
 * Protocol ("write locally, flag remotely, read remotely"):
 *  - Data is only ever written into the writer's own exchange buffer;
 *    peers read it over NVLink (or, ranks sharing a GPU, from the same
 *    memory). Flags are the only remote writes: block b of rank r stores
 *    the barrier value into flags[b][r] of every peer, and polls its own
 *    flags[b][p] for every peer p.
 *  - Block b of every rank handles the same elements (same count, same
 *    grid, same grid-stride mapping), so block b only ever waits for block
 *    b of its peers: there is no barrier across the blocks of one GPU.
 *  - Call counting: every block keeps its own count of calls in local
 *    memory (d.epoch[b], advanced by the kernel itself, so graph replays
 *    count too). Every call runs all d.blocks blocks, so all counters of
 *    all ranks agree: e is the call's number on every rank.
 *    Barrier values are 2e (after copy-in) and 2e + 1 (two-shot, after the
 *    reduce): strictly increasing, compared wrap-safely.
 *  - Two slots: call e writes slot e & 1. Rank r can start call e + 2 (the
 *    next writer of that slot) only after its call e + 1 finished, which
 *    needed every peer's call e + 1 flag, which every peer sets only after
 *    its whole call e kernel (all its reads of slot e & 1) completed, in
 *    stream order. So no peer can still be reading a slot when it is
 *    overwritten, without a barrier at the end of each call. This requires
 *    that these kernels are never launched with programmatic dependent
 *    launch (they are not).
 *
 * Sums: fp32, in rank order 0..tp-1 on every rank, then one rounding to
 * the storage dtype, so every rank's output is bit-identical and equals
 * a host reference computed the same way (tests/gpu/test_allreduce.c).
 *
 * car_add_rmsnorm_* fuse the one-shot all-reduce with the residual add
 * and RMSNorm that follow every row-parallel projection (node/model.c),
 * so a layer boundary is one launch instead of two. They do the add and
 * norm in kernels/rmsnorm.cu's order, so their x and out are the bits the
 * unfused all-reduce + kern_add_rmsnorm_cuda would give.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "parallel/allreduce_dev.h"
#include "kernels/cuda_util.cuh"

/* ---- flags: the only cross-GPU synchronisation ---- */

/* Release store at system scope: peers are other processes, possibly on
 * other GPUs, so gpu-scope ordering would not be enough (on one GPU it
 * would, but the same code serves both). */
__device__ __forceinline__ void car_flag_store(uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Acquire load at system scope: once it returns the peer's value, the
 * peer's writes before its release are visible to this thread (and,
 * through the __syncthreads after the wait, to the whole block). */
__device__ __forceinline__ uint32_t car_flag_load(const uint32_t *p)
{
	uint32_t v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ uint64_t car_now_ns(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Spin until flag >= want (wrap-safe: values of live calls are never 2^31
 * apart). After CAR_TIMEOUT_NS, record the wait and trap. Scalars, not
 * the kernel's parameter struct: taking that struct's address in a
 * non-inlined call would copy it to local memory for the whole kernel. */
__device__ __noinline__ void car_wait(const uint32_t *flag, uint32_t want, par_car_diag *diag,
				      int rank, int peer)
{
	uint64_t t0 = 0;
	for (uint32_t spins = 1;; spins++) {
		uint32_t v = car_flag_load(flag);
		if ((int32_t)(v - want) >= 0)
			return;
		if ((spins & 4095) == 0) {
			uint64_t t = car_now_ns();
			if (!t0) {
				t0 = t;
			} else if (t - t0 > CAR_TIMEOUT_NS) {
				if (diag) {
					diag->rank = rank, diag->block = blockIdx.x;
					diag->peer = peer, diag->seen = v, diag->want = want;
					__threadfence_system();
					diag->fired = 1;
					__threadfence_system();
				}
				__trap();
			}
		}
	}
}

/*
 * Block b tells every peer that its writes so far (this call's data in
 * its own buffer) are complete, then waits until every peer has said the
 * same for value v. Thread p < tp handles peer p.
 */
__device__ __forceinline__ void car_barrier(const par_car_dev &d, uint32_t v)
{
	/* every thread's buffer writes precede thread p's fence and flag store
	 * (bar.sync orders them within the block) */
	__syncthreads();
	int p = threadIdx.x;
	if (p < d.tp && p != d.rank) {
		/* a release is cumulative: the block's writes, ordered before it
		 * by the bar.sync above, become visible to the peer before the
		 * flag does, at system scope */
		car_flag_store(d.flags[p] + blockIdx.x * CAR_FLAG_STRIDE + d.rank, v);
		car_wait(d.flags[d.rank] + blockIdx.x * CAR_FLAG_STRIDE + p, v, d.diag, d.rank, p);
	}
	/* the acquiring threads' view passes to every thread of the block */
	__syncthreads();
}

/* This block's number for the call: its counter, advanced once. */
__device__ __forceinline__ uint32_t car_next_epoch(const par_car_dev &d)
{
	__shared__ uint32_t e;
	if (threadIdx.x == 0) {
		e = d.epoch[blockIdx.x] + 1;
		d.epoch[blockIdx.x] = e;
	}
	__syncthreads();
	return e;
}

/* ---- 16-byte packs ---- */

/* Pack i of src (16 / sizeof(T) elements); elements at or beyond count
 * read as zero bits (+0.0). The vector load needs src 16-byte aligned. */
template <typename T, bool ALIGNED>
__device__ __forceinline__ uint4 car_load_pack(const T *src, size_t i, size_t count)
{
	constexpr int E = 16 / sizeof(T);
	size_t e0 = i * E;
	if (ALIGNED && e0 + E <= count)
		return *reinterpret_cast<const uint4 *>(src + e0);
	uint4 v = make_uint4(0, 0, 0, 0);
	T *t = reinterpret_cast<T *>(&v);
#pragma unroll
	for (int k = 0; k < E; k++)
		if (e0 + k < count)
			t[k] = src[e0 + k];
	return v;
}

template <typename T, bool ALIGNED>
__device__ __forceinline__ void car_store_pack(T *dst, size_t i, size_t count, uint4 v)
{
	constexpr int E = 16 / sizeof(T);
	size_t e0 = i * E;
	if (ALIGNED && e0 + E <= count) {
		*reinterpret_cast<uint4 *>(dst + e0) = v;
		return;
	}
	const T *t = reinterpret_cast<const T *>(&v);
#pragma unroll
	for (int k = 0; k < E; k++)
		if (e0 + k < count)
			dst[e0 + k] = t[k];
}

/* Peer data is read at L2 (ld.global.cg), never from this SM's L1, which
 * could hold a line of the same slot from two calls ago. */
__device__ __forceinline__ uint4 car_peer_pack(const char *slot_base, size_t i)
{
	return __ldcg(reinterpret_cast<const uint4 *>(slot_base) + i);
}

/* Pack i of the sum over ranks 0..tp-1 of slot s, in rank order, fp32.
 * NP: a bound on tp known at compile time (registers for the loads). */
template <typename T, int NP = CAR_MAX_RANKS>
__device__ __forceinline__ uint4 car_sum_pack(const par_car_dev &d, size_t slot, size_t i)
{
	constexpr int E = 16 / sizeof(T);
	uint4 v[NP];
#pragma unroll
	for (int p = 0; p < NP; p++) /* every load in flight before any add */
		if (p < d.tp)
			v[p] = car_peer_pack(d.data[p] + slot, i);
	float acc[E];
	const T *t0 = reinterpret_cast<const T *>(&v[0]);
#pragma unroll
	for (int k = 0; k < E; k++)
		acc[k] = kern_to_f32(t0[k]);
#pragma unroll
	for (int p = 1; p < NP; p++) {
		if (p < d.tp) {
			const T *t = reinterpret_cast<const T *>(&v[p]);
#pragma unroll
			for (int k = 0; k < E; k++)
				acc[k] += kern_to_f32(t[k]);
		}
	}
	uint4 out;
	T *o = reinterpret_cast<T *>(&out);
#pragma unroll
	for (int k = 0; k < E; k++)
		o[k] = kern_from_f32<T>(acc[k]);
	return out;
}

/* ---- kernels ---- */

/*
 * One-shot: copy buf into this rank's slot, barrier, then every rank sums
 * every element from all tp slots. Reads (tp - 1) x the message from
 * peers; one barrier: the latency choice for small messages.
 */
template <typename T, bool ALIGNED>
__global__ void __launch_bounds__(CAR_THREADS) car_oneshot(par_car_dev d, T *buf, size_t count)
{
	constexpr int E = 16 / sizeof(T);
	uint32_t e = car_next_epoch(d);
	size_t slot = (e & 1) ? d.slot_bytes : 0;
	size_t n = (count + E - 1) / E;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint4 *mine = reinterpret_cast<uint4 *>(d.data[d.rank] + slot);
	for (size_t i = first; i < n; i += stride)
		mine[i] = car_load_pack<T, ALIGNED>(buf, i, count);
	car_barrier(d, 2 * e);
	/* in place is safe: peers read our slot, never buf */
	for (size_t i = first; i < n; i += stride)
		car_store_pack<T, ALIGNED>(buf, i, count, car_sum_pack<T>(d, slot, i));
}

/* Chunk c of n packs split over tp ranks: [*c0, *c0 + *len). */
__device__ __forceinline__ void car_chunk(size_t n, int tp, int c, size_t *c0, size_t *len)
{
	size_t per = (n + tp - 1) / tp;
	size_t a = per * c;
	*c0 = a < n ? a : n;
	*len = a < n ? (n - a < per ? n - a : per) : 0;
}

/*
 * Two-shot: copy buf into this rank's slot, barrier; rank r sums chunk r
 * from all slots (reduce-scatter) and writes the sum over its own slot's
 * chunk r and into buf; barrier; every rank copies chunk c from rank c's
 * slot (all-gather). Reads 2 (tp - 1) / tp x the message from peers; the
 * bandwidth choice for larger messages on tp > 2.
 *
 * Overwriting our own chunk r in phase 2 is safe: in this call peers read
 * our chunk r only in phase 3, after the second barrier; in phase 2 they
 * read only their own chunks from us.
 */
template <typename T, bool ALIGNED>
__global__ void __launch_bounds__(CAR_THREADS) car_twoshot(par_car_dev d, T *buf, size_t count)
{
	constexpr int E = 16 / sizeof(T);
	uint32_t e = car_next_epoch(d);
	size_t slot = (e & 1) ? d.slot_bytes : 0;
	size_t n = (count + E - 1) / E;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint4 *mine = reinterpret_cast<uint4 *>(d.data[d.rank] + slot);
	size_t c0, len;
	/* block b copies, of every chunk, the packs block b of that chunk's
	 * owner will reduce: the same offsets within the chunk */
	for (int c = 0; c < d.tp; c++) {
		car_chunk(n, d.tp, c, &c0, &len);
		for (size_t j = first; j < len; j += stride)
			mine[c0 + j] = car_load_pack<T, ALIGNED>(buf, c0 + j, count);
	}
	car_barrier(d, 2 * e);
	car_chunk(n, d.tp, d.rank, &c0, &len);
	for (size_t j = first; j < len; j += stride) {
		uint4 s = car_sum_pack<T>(d, slot, c0 + j);
		mine[c0 + j] = s;
		car_store_pack<T, ALIGNED>(buf, c0 + j, count, s);
	}
	car_barrier(d, 2 * e + 1);
	for (int c = 0; c < d.tp; c++) {
		if (c == d.rank)
			continue;
		car_chunk(n, d.tp, c, &c0, &len);
		for (size_t j = first; j < len; j += stride)
			car_store_pack<T, ALIGNED>(buf, c0 + j, count,
						   car_peer_pack(d.data[c] + slot, c0 + j));
	}
}

/*
 * All-gather (the tp group's logits when its ranks share a GPU and NCCL
 * cannot run): copy send into this rank's slot, barrier, copy every rank's
 * slot to recv + p * recv_stride. T only gives the element size.
 */
template <typename T, bool ALIGNED>
__global__ void __launch_bounds__(CAR_THREADS)
	car_allgather(par_car_dev d, const T *send, T *recv, size_t count, size_t recv_stride)
{
	constexpr int E = 16 / sizeof(T);
	uint32_t e = car_next_epoch(d);
	size_t slot = (e & 1) ? d.slot_bytes : 0;
	size_t n = (count + E - 1) / E;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint4 *mine = reinterpret_cast<uint4 *>(d.data[d.rank] + slot);
	for (size_t i = first; i < n; i += stride)
		mine[i] = car_load_pack<T, ALIGNED>(send, i, count);
	car_barrier(d, 2 * e);
	for (int p = 0; p < d.tp; p++)
		for (size_t i = first; i < n; i += stride)
			car_store_pack<T, ALIGNED>(recv + p * recv_stride, i, count,
						   car_peer_pack(d.data[p] + slot, i));
}

/* ---- all-reduce fused with residual add + RMSNorm ---- */

/*
 * The norm needs whole rows, and a row must not need a second barrier:
 * each half of a block (CAR_HALF threads) takes one row at a time. Row r
 * goes to unit r mod (2 * blocks), unit u = 2 * block + half, the same on
 * every rank, and block b copies in exactly the rows it later reads from
 * its peers, so block b's barrier is all the row needs (the protocol
 * above, unchanged). A decode step's one row is one half's work: 5120
 * wide, 3 packs of 8 per thread, every peer load in flight at once.
 * CAR_HALF is kernels/rmsnorm.cu's NORM_THREADS: thread t of a half takes
 * the elements thread t of that kernel takes, in the same order.
 */
#define CAR_HALF 256

/* Named barrier of one half of the block (ids 1, 2; 0 is __syncthreads). */
__device__ __forceinline__ void car_half_sync(int half)
{
	asm volatile("bar.sync %0, %1;" ::"r"(1 + half), "r"(CAR_HALF) : "memory");
}

/* Sum over one half's threads, to every thread of it, in kern_block_sum's
 * order over 256 threads (warp trees, then a tree over the 8 warp sums;
 * rows narrower than that kernel's 256 threads add exact zeros), so 1/rms
 * has the same bits as in kernels/rmsnorm.cu. */
__device__ __forceinline__ float car_half_sum(float v, int half)
{
	__shared__ float part[2][CAR_HALF / 32];
	int lane = threadIdx.x & 31, warp = (threadIdx.x % CAR_HALF) >> 5;
	v = kern_warp_sum(v);
	car_half_sync(half); /* part[half] may still be read for the previous row */
	if (lane == 0)
		part[half][warp] = v;
	car_half_sync(half);
	return kern_warp_sum(lane < CAR_HALF / 32 ? part[half][lane] : 0.0f);
}

/* Element i of a peer's slot (2-byte T), at L2 as car_peer_pack. */
template <typename T> __device__ __forceinline__ float car_peer_elem(const char *slot_base, size_t i)
{
	unsigned short b = __ldcg(reinterpret_cast<const unsigned short *>(slot_base) + i);
	return kern_to_f32(*reinterpret_cast<const T *>(&b));
}

/*
 * Rows 16-byte aligned, dim a multiple of 8: the row in registers, R
 * packs of 8 per thread (pack t + k * CAR_HALF), as norm_reg_kernel; tp
 * at most NP (R 4 and NP 8 spill a little: tp 8 is not measured yet).
 * part: this rank's [n, dim] partial sums; x: fp32 [n, dim] residual;
 * w: [dim] or NULL (add only); out: [n, dim].
 */
template <typename T, int R, int NP>
__global__ void __launch_bounds__(CAR_THREADS)
	car_add_rmsnorm_vec(par_car_dev d, const T *part, float *x, const T *w, T *out, int n,
			    int dim, float eps)
{
	uint32_t e = car_next_epoch(d);
	size_t slot = (e & 1) ? d.slot_bytes : 0;
	int half = threadIdx.x / CAR_HALF, t = threadIdx.x % CAR_HALF;
	int units = 2 * gridDim.x, packs = dim / KERN_VEC;
	uint4 *mine = reinterpret_cast<uint4 *>(d.data[d.rank] + slot);
	for (int r = 2 * blockIdx.x + half; r < n; r += units)
		for (int i = t; i < packs; i += CAR_HALF)
			mine[(size_t)r * packs + i] =
				reinterpret_cast<const uint4 *>(part + (size_t)r * dim)[i];
	car_barrier(d, 2 * e);
	for (int r = 2 * blockIdx.x + half; r < n; r += units) {
		float *xr = x + (size_t)r * dim;
		uint4 sum[R];
		float v[R][8], g[R][8], ss = 0;
		/* every load first (no store between them): one round trip */
#pragma unroll
		for (int k = 0; k < R; k++) {
			int i = t + k * CAR_HALF;
			if (i >= packs)
				continue;
			sum[k] = car_sum_pack<T, NP>(d, slot, (size_t)r * packs + i);
			kern_load8f(xr + i * KERN_VEC, v[k]);
		}
#pragma unroll
		for (int k = 0; k < R; k++) {
			int i = t + k * CAR_HALF;
			if (i >= packs)
				continue;
			float dv[8];
			kern_unpack8<T>(sum[k], dv);
#pragma unroll
			for (int j = 0; j < 8; j++)
				v[k][j] += dv[j];
			kern_store8f(xr + i * KERN_VEC, v[k]);
#pragma unroll
			for (int j = 0; j < 8; j++)
				ss += v[k][j] * v[k][j];
		}
		if (w == nullptr) /* uniform over the grid */
			continue;
		/* w now, not with the sums: the registers are the sums' until here
		 * (R = 4 would spill), and these loads overlap the reduction */
#pragma unroll
		for (int k = 0; k < R; k++) {
			int i = t + k * CAR_HALF;
			if (i < packs)
				kern_load8(w + i * KERN_VEC, g[k]);
		}
		ss = car_half_sum(ss, half);
		float inv = 1.0f / sqrtf(ss / (float)dim + eps);
#pragma unroll
		for (int k = 0; k < R; k++) {
			int i = t + k * CAR_HALF;
			if (i >= packs)
				continue;
#pragma unroll
			for (int j = 0; j < 8; j++)
				v[k][j] = v[k][j] * inv * g[k][j];
			kern_store8(out + (size_t)r * dim + i * KERN_VEC, v[k]);
		}
	}
}

/* Any width and alignment, element by element (norm_kernel's scalar
 * path): the slot holds the rows packed, [n, dim] of T. */
template <typename T>
__global__ void __launch_bounds__(CAR_THREADS)
	car_add_rmsnorm_any(par_car_dev d, const T *part, float *x, const T *w, T *out, int n,
			    int dim, float eps)
{
	uint32_t e = car_next_epoch(d);
	size_t slot = (e & 1) ? d.slot_bytes : 0;
	int half = threadIdx.x / CAR_HALF, t = threadIdx.x % CAR_HALF, units = 2 * gridDim.x;
	T *mine = reinterpret_cast<T *>(d.data[d.rank] + slot);
	for (int r = 2 * blockIdx.x + half; r < n; r += units)
		for (int j = t; j < dim; j += CAR_HALF)
			mine[(size_t)r * dim + j] = part[(size_t)r * dim + j];
	car_barrier(d, 2 * e);
	for (int r = 2 * blockIdx.x + half; r < n; r += units) {
		size_t base = (size_t)r * dim;
		float ss = 0;
		for (int j = t; j < dim; j += CAR_HALF) {
			float acc = car_peer_elem<T>(d.data[0] + slot, base + j);
			for (int p = 1; p < d.tp; p++)
				acc += car_peer_elem<T>(d.data[p] + slot, base + j);
			float v = x[base + j] + kern_to_f32(kern_from_f32<T>(acc));
			x[base + j] = v;
			ss += v * v;
		}
		if (w == nullptr)
			continue;
		ss = car_half_sum(ss, half);
		float inv = 1.0f / sqrtf(ss / (float)dim + eps);
		/* each thread re-reads only the x it wrote */
		for (int j = t; j < dim; j += CAR_HALF)
			out[base + j] = kern_from_f32<T>(x[base + j] * inv * kern_to_f32(w[j]));
	}
}

/* ---- launchers ---- */

template <typename T>
static int car_allreduce_launch(const par_car_dev *d, void *buf, size_t count, int twoshot,
				cudaStream_t st)
{
	bool al = kern_aligned16(buf);
	dim3 grid(d->blocks), block(CAR_THREADS);
	T *b = (T *)buf;
	if (twoshot && al)
		car_twoshot<T, true><<<grid, block, 0, st>>>(*d, b, count);
	else if (twoshot)
		car_twoshot<T, false><<<grid, block, 0, st>>>(*d, b, count);
	else if (al)
		car_oneshot<T, true><<<grid, block, 0, st>>>(*d, b, count);
	else
		car_oneshot<T, false><<<grid, block, 0, st>>>(*d, b, count);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

extern "C" int par_car_launch_allreduce(const par_car_dev *d, void *buf, size_t count, sl_dtype dt,
					int twoshot, void *stream)
{
	if (count == 0)
		return SL_OK;
	if (count * sl_dtype_size(dt) > d->slot_bytes || d->blocks < 1 || d->blocks > CAR_MAX_BLOCKS)
		return SL_EINVAL;
	cudaStream_t st = (cudaStream_t)stream;
	switch (dt) {
	case SL_DT_F32: return car_allreduce_launch<float>(d, buf, count, twoshot, st);
	case SL_DT_F16: return car_allreduce_launch<__half>(d, buf, count, twoshot, st);
	case SL_DT_BF16: return car_allreduce_launch<__nv_bfloat16>(d, buf, count, twoshot, st);
	}
	return SL_ENOTSUP;
}

template <typename T>
static int car_allgather_launch(const par_car_dev *d, const void *send, void *recv, size_t count,
				size_t recv_stride, cudaStream_t st)
{
	bool al = kern_aligned16(send) && kern_aligned16(recv) && (recv_stride * sizeof(T)) % 16 == 0;
	dim3 grid(d->blocks), block(CAR_THREADS);
	if (al)
		car_allgather<T, true><<<grid, block, 0, st>>>(*d, (const T *)send, (T *)recv, count,
							      recv_stride);
	else
		car_allgather<T, false><<<grid, block, 0, st>>>(*d, (const T *)send, (T *)recv, count,
							       recv_stride);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

extern "C" int par_car_launch_allgather(const par_car_dev *d, const void *send, void *recv,
					size_t count, size_t recv_stride, size_t elem_bytes,
					void *stream)
{
	if (count == 0)
		return SL_OK;
	if (count * elem_bytes > d->slot_bytes || d->blocks < 1 || d->blocks > CAR_MAX_BLOCKS)
		return SL_EINVAL;
	cudaStream_t st = (cudaStream_t)stream;
	if (elem_bytes == 4)
		return car_allgather_launch<uint32_t>(d, send, recv, count, recv_stride, st);
	if (elem_bytes == 2)
		return car_allgather_launch<uint16_t>(d, send, recv, count, recv_stride, st);
	return SL_ENOTSUP;
}

template <typename T, int NP>
static int car_add_rmsnorm_vec_np(const par_car_dev *d, const void *part, float *x,
				  const void *w, void *out, int n, int dim, float eps, int per,
				  cudaStream_t st)
{
	dim3 grid(d->blocks), block(CAR_THREADS);
	const T *p = (const T *)part, *g = (const T *)w;
	T *o = (T *)out;
	if (per == 1)
		car_add_rmsnorm_vec<T, 1, NP><<<grid, block, 0, st>>>(*d, p, x, g, o, n, dim, eps);
	else if (per == 2)
		car_add_rmsnorm_vec<T, 2, NP><<<grid, block, 0, st>>>(*d, p, x, g, o, n, dim, eps);
	else
		car_add_rmsnorm_vec<T, 4, NP><<<grid, block, 0, st>>>(*d, p, x, g, o, n, dim, eps);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

template <typename T>
static int car_add_rmsnorm_launch(const par_car_dev *d, const void *part, float *x, const void *w,
				  void *out, int n, int dim, float eps, cudaStream_t st)
{
	/* kernels/rmsnorm.cu's choice between its vector and scalar paths */
	bool vec = dim % KERN_VEC == 0 && kern_aligned16(part) && kern_aligned16(x) &&
		   kern_aligned16(w) && kern_aligned16(out);
	int per = (dim / KERN_VEC + CAR_HALF - 1) / CAR_HALF; /* packs per thread */
	/* refused by width alone, never by alignment: every rank of the group
	 * must make the same choice (an unaligned rank's scalar kernel still
	 * exchanges the same slot layout with its peers' vector kernels) */
	if (dim % KERN_VEC == 0 && per > 4)
		return SL_ENOTSUP;
	if (!vec) {
		car_add_rmsnorm_any<T><<<d->blocks, CAR_THREADS, 0, st>>>(
			*d, (const T *)part, x, (const T *)w, (T *)out, n, dim, eps);
		CUDA_TRY_LAUNCH();
		return SL_OK;
	}
	if (d->tp <= 2)
		return car_add_rmsnorm_vec_np<T, 2>(d, part, x, w, out, n, dim, eps, per, st);
	if (d->tp <= 4)
		return car_add_rmsnorm_vec_np<T, 4>(d, part, x, w, out, n, dim, eps, per, st);
	return car_add_rmsnorm_vec_np<T, CAR_MAX_RANKS>(d, part, x, w, out, n, dim, eps, per, st);
}

extern "C" int par_car_launch_add_rmsnorm(const par_car_dev *d, const void *part, float *x,
					  const void *w, void *out, int n, int dim, float eps,
					  sl_dtype dt, void *stream)
{
	if (n <= 0 || dim <= 0)
		return SL_OK;
	if ((size_t)n * dim * sl_dtype_size(dt) > d->slot_bytes || d->blocks < 1 ||
	    d->blocks > CAR_MAX_BLOCKS)
		return SL_EINVAL;
	cudaStream_t st = (cudaStream_t)stream;
	switch (dt) {
	case SL_DT_F16:
		return car_add_rmsnorm_launch<__half>(d, part, x, w, out, n, dim, eps, st);
	case SL_DT_BF16:
		return car_add_rmsnorm_launch<__nv_bfloat16>(d, part, x, w, out, n, dim, eps, st);
	default: return SL_ENOTSUP;
	}
}
