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
 *    grid, same number of moving blocks, same grid-stride mapping), so
 *    block b only ever waits for block b of its peers: there is no barrier
 *    across the blocks of one GPU. A small call moves its data with only
 *    the first d.active blocks (par_car_active_blocks: one per 8 KiB, at
 *    least 4); the others advance their counters and leave.
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
 *    overwritten, without a barrier at the end of each call. Which block
 *    read which part of the slot in call e does not matter (calls may
 *    move their data with different numbers of blocks): every moving
 *    block of call e + 1 waits for every peer, and every call has one.
 *  - Programmatic dependent launch (PDL, sm_90; on with the backend's
 *    small kernels, kern_pdl_enabled, unless SL_CAR_PDL=0) keeps that
 *    order: a call may be scheduled while the kernel before it drains,
 *    but its first act is griddepcontrol.wait, which returns only once
 *    that kernel has completed; every kernel of the step launched as a
 *    dependent waits so before it touches memory, so "completed in
 *    stream order" still holds from one call to the next, through any
 *    kernels between. What PDL buys: the call's launch hides behind the
 *    projection before it, and it lets the next kernel launch at once, so
 *    the projection after it fetches its first weights while the ranks
 *    exchange (tests/gpu/test_allreduce.c runs every case both ways, and
 *    one where the kernel before writes the input late).
 *
 * The push one-shot (car_oneshot_push) is the exception to "write
 * locally": it stores its data into the peers' push areas, whose empty
 * words say what has not come yet, so the data is its own flag (below).
 *
 * Sums: fp32, in rank order 0..tp-1 on every rank, then one rounding to
 * the storage dtype, so every rank's output is bit-identical and equals
 * a host reference computed the same way (tests/gpu/test_allreduce.c).
 *
 * car_add_prenorm fuses the one-shot all-reduce with the residual add
 * after a row-parallel projection (node/model.c) and leaves the norm
 * pending for the next projection, as the GEMV's KERN_EPI_ADD epilogue
 * does at tp 1 (kernels/epilogue.h): a layer boundary is one launch
 * instead of two, and the norm kernel goes.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/allreduce_dev.h"
#include "kernels/cuda_util.cuh"
#include "kernels/epilogue.cuh"
#include "kernels/pdl.h"
#include "kernels/xchg.cuh"

/* ---- flags: the only cross-GPU synchronisation (kernels/xchg.cuh) ---- */

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
		kern_flag_store(d.flags[p] + blockIdx.x * CAR_FLAG_STRIDE + d.rank, v);
		kern_flag_wait(d.flags[d.rank] + blockIdx.x * CAR_FLAG_STRIDE + p, v, d.diag, d.rank, p);
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

/* The sum of v[0..tp-1] (rank order), fp32, rounded once to T. */
template <typename T, int NP>
__device__ __forceinline__ uint4 car_sum_packs(const uint4 (&v)[NP], int tp)
{
	constexpr int E = 16 / sizeof(T);
	float acc[E];
	const T *t0 = reinterpret_cast<const T *>(&v[0]);
#pragma unroll
	for (int k = 0; k < E; k++)
		acc[k] = kern_to_f32(t0[k]);
#pragma unroll
	for (int p = 1; p < NP; p++) {
		if (p < tp) {
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

/* Pack i of the sum over ranks 0..tp-1 of slot s, in rank order, fp32.
 * NP: a bound on tp known at compile time (registers for the loads). */
template <typename T, int NP = CAR_MAX_RANKS>
__device__ __forceinline__ uint4 car_sum_pack(const par_car_dev &d, size_t slot, size_t i)
{
	uint4 v[NP];
#pragma unroll
	for (int p = 0; p < NP; p++) /* every load in flight before any add */
		if (p < d.tp)
			v[p] = car_peer_pack(d.data[p] + slot, i);
	return car_sum_packs<T, NP>(v, d.tp);
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
	kern_pdl_start(); /* the input is the previous kernel's output */
	uint32_t e = car_next_epoch(d);
	if (blockIdx.x >= d.active)
		return; /* counted the call; moves nothing */
	size_t slot = (e & 1) ? d.slot_bytes : 0;
	size_t n = (count + E - 1) / E;
	size_t stride = (size_t)d.active * blockDim.x;
	size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint4 *mine = reinterpret_cast<uint4 *>(d.data[d.rank] + slot);
	for (size_t i = first; i < n; i += stride)
		mine[i] = car_load_pack<T, ALIGNED>(buf, i, count);
	car_barrier(d, 2 * e);
	/* in place is safe: peers read our slot, never buf */
	for (size_t i = first; i < n; i += stride)
		car_store_pack<T, ALIGNED>(buf, i, count, car_sum_pack<T>(d, slot, i));
}

/* ---- the push one-shot: the data is its own flag ---- */

/* A 32-bit word no sender stores (two fp16 / bf16 -0.0, or an fp32
 * denormal): the push area holds it wherever nothing has arrived. */
#define CAR_PUSH_EMPTY 0x80008000u

/* Word w as every rank sums it: the one pattern equal to CAR_PUSH_EMPTY
 * becomes +0.0, +0.0 (2-byte types: only the sign of two zeros changes)
 * or -0.0 (fp32: a denormal of 4.6e-41 flushed). */
template <typename T> __device__ __forceinline__ uint32_t car_push_word(uint32_t w)
{
	return w == CAR_PUSH_EMPTY ? (sizeof(T) == 2 ? 0u : 0x80000000u) : w;
}

template <typename T> __device__ __forceinline__ uint4 car_push_pack(uint4 v)
{
	return make_uint4(car_push_word<T>(v.x), car_push_word<T>(v.y), car_push_word<T>(v.z),
			  car_push_word<T>(v.w));
}

/* 16 bytes at system scope, relaxed: each 32-bit word is single-copy
 * atomic (a vector access is one access per element), so a reader that
 * sees a word other than CAR_PUSH_EMPTY sees the word that was sent. */
__device__ __forceinline__ void car_push_store(uint32_t *p, uint4 v)
{
	asm volatile("st.relaxed.sys.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x),
		     "r"(v.y), "r"(v.z), "r"(v.w)
		     : "memory");
}

__device__ __forceinline__ uint4 car_push_load(const uint32_t *p)
{
	uint4 v;
	asm volatile("ld.relaxed.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(p)
		     : "memory");
	return v;
}

__device__ __forceinline__ bool car_push_full(uint4 v)
{
	return v.x != CAR_PUSH_EMPTY && v.y != CAR_PUSH_EMPTY && v.z != CAR_PUSH_EMPTY &&
	       v.w != CAR_PUSH_EMPTY;
}

/* Pack i from sender `from`, slot s, in rank p's push area as mapped here. */
__device__ __forceinline__ uint32_t *car_push_at(const par_car_dev &d, int p, int s, int from,
						 size_t i)
{
	return reinterpret_cast<uint32_t *>(d.push[p] +
					    ((size_t)s * d.tp + from) * d.push_region) +
	       4 * i;
}

/* Spin until the pack at w has come (kern_flag_wait's timeout). */
static __device__ __noinline__ uint4 car_push_wait(const uint32_t *w, kern_xchg_diag *diag,
						   int rank, int peer)
{
	uint64_t t0 = 0;
	for (uint32_t spins = 1;; spins++) {
		const uint4 v = car_push_load(w);
		if (car_push_full(v))
			return v;
		kern_wait_tick(spins, &t0, diag, rank, peer, v.x, CAR_PUSH_EMPTY);
	}
}

/* Pack i (own: this rank's, as car_push_pack sends it) to every peer. */
__device__ __forceinline__ void car_push_out(const par_car_dev &d, int s, size_t i, uint4 own)
{
	for (int q = 0; q < d.tp; q++)
		if (q != d.rank)
			car_push_store(car_push_at(d, q, s, d.rank, i), own);
}

/* v[p] = rank p's pack i: own() for this rank (this rank's pack as
 * car_push_pack sends it), each peer's from this rank's push area once it
 * has come, the empty word stored back behind it. */
template <int NP, typename Own>
__device__ __forceinline__ void car_push_in(const par_car_dev &d, int s, size_t i, Own own,
					    uint4 (&v)[NP])
{
	const uint4 empty = make_uint4(CAR_PUSH_EMPTY, CAR_PUSH_EMPTY, CAR_PUSH_EMPTY,
				       CAR_PUSH_EMPTY);
#pragma unroll
	for (int p = 0; p < NP; p++) {
		if (p >= d.tp)
			continue;
		if (p == d.rank) {
			v[p] = own();
			continue;
		}
		uint32_t *w = car_push_at(d, d.rank, s, p, i);
		v[p] = car_push_load(w);
		if (!car_push_full(v[p]))
			v[p] = car_push_wait(w, d.diag, d.rank, p);
		car_push_store(w, empty); /* for this slot's next call */
	}
}

/*
 * Push one-shot: every rank stores its packs straight into every peer's
 * push area (region e & 1, this rank's), then takes every peer's packs
 * of the same elements from its own area once none of their words is
 * CAR_PUSH_EMPTY, stores CAR_PUSH_EMPTY back, and sums ranks 0..tp-1 in
 * order (car_push_word applied to every rank's own pack too, so every
 * rank sums the same bits). No flag and no barrier; one trip across
 * NVLink, the message's own bytes.
 *
 * The grid is CAR_PUSH_BLOCKS blocks of CAR_PUSH_THREADS (more SMs push
 * more stores across NVLink at once than the other kernels' 32 blocks),
 * with its own call counters (d.push_epoch: push calls only, counted by
 * every block of every call as the other kernels count theirs). A region
 * is used again without a barrier, as the one-shot's slots are: this
 * rank writes region (e & 1, r) of peer q in push call e only after its
 * push call e - 1 completed, which took packs of q's push call e - 1,
 * which q stored only after its whole push call e - 2 kernel (which read
 * that region and emptied it) completed, in stream order.
 */
template <typename T, bool ALIGNED, int NP>
__global__ void __launch_bounds__(CAR_PUSH_THREADS)
	car_oneshot_push(par_car_dev d, T *buf, size_t count)
{
	constexpr int E = 16 / sizeof(T);
	kern_pdl_start(); /* the input is the previous kernel's output */
	__shared__ uint32_t call;
	if (threadIdx.x == 0) {
		call = d.push_epoch[blockIdx.x] + 1;
		d.push_epoch[blockIdx.x] = call;
	}
	__syncthreads();
	if (blockIdx.x >= d.active)
		return; /* counted the call; moves nothing */
	const int s = call & 1;
	const size_t n = (count + E - 1) / E;
	const size_t stride = (size_t)d.active * blockDim.x;
	const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	for (size_t i = first; i < n; i += stride)
		car_push_out(d, s, i, car_push_pack<T>(car_load_pack<T, ALIGNED>(buf, i, count)));
	for (size_t i = first; i < n; i += stride) {
		uint4 v[NP];
		car_push_in(d, s, i,
			    [&] { return car_push_pack<T>(car_load_pack<T, ALIGNED>(buf, i, count)); },
			    v);
		/* in place is safe: peers never read buf */
		car_store_pack<T, ALIGNED>(buf, i, count, car_sum_packs<T, NP>(v, d.tp));
	}
}

/*
 * The push one-shot fused with the residual add and the RMSNorm after it
 * (par_car_allreduce_add_norm), for steps of more tokens than the next
 * projection can finish a pending norm for. Block b owns rows b, b + G,
 * ... (G = CAR_PUSH_BLOCKS): it pushes their packs (pack r * P + j, P =
 * dim / 8) to every peer, then row by row takes the peers' packs, sums
 * ranks 0..tp-1 rounded to T (the plain push's bits), adds that into x and
 * normalizes the row as norm_kernel (kernels/rmsnorm.cu) does: out = x *
 * (1 / sqrt(ss / dim + eps)) * w. The same block of every rank owns the
 * same rows and sums them in the same order, so every rank writes the
 * same bits. Calls, slots and their reuse are the push one-shot's.
 */
template <typename T, int NP>
__global__ void __launch_bounds__(CAR_PUSH_NORM_THREADS)
	car_push_add_norm(par_car_dev d, const T *part, float *x, const T *w, T *out, int n,
			  int dim, float eps)
{
	kern_pdl_start(); /* part is the projection's output */
	__shared__ uint32_t call;
	if (threadIdx.x == 0) {
		call = d.push_epoch[blockIdx.x] + 1;
		d.push_epoch[blockIdx.x] = call;
	}
	__syncthreads();
	const int s = call & 1, P = dim / KERN_VEC;
	for (int r = blockIdx.x; r < n; r += gridDim.x)
		for (int j = threadIdx.x; j < P; j += blockDim.x) {
			const size_t i = (size_t)r * P + j;
			car_push_out(d, s, i,
				     car_push_pack<T>(reinterpret_cast<const uint4 *>(part)[i]));
		}
	for (int r = blockIdx.x; r < n; r += gridDim.x) {
		float *xr = x + (size_t)r * dim;
		float ss = 0;
		for (int j = threadIdx.x; j < P; j += blockDim.x) {
			const size_t i = (size_t)r * P + j;
			uint4 v[NP];
			car_push_in(
				d, s, i,
				[&] { return car_push_pack<T>(reinterpret_cast<const uint4 *>(part)[i]); },
				v);
			const uint4 sum = car_sum_packs<T, NP>(v, d.tp);
			const T *st = reinterpret_cast<const T *>(&sum);
			float xv[KERN_VEC];
			kern_load8f(xr + j * KERN_VEC, xv);
#pragma unroll
			for (int k = 0; k < KERN_VEC; k++) {
				xv[k] += kern_to_f32(st[k]);
				ss += xv[k] * xv[k];
			}
			kern_store8f(xr + j * KERN_VEC, xv);
		}
		ss = kern_block_sum(ss);
		const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
		/* each thread re-reads only the x it wrote above */
		for (int j = threadIdx.x; j < P; j += blockDim.x) {
			float xv[KERN_VEC], g[KERN_VEC];
			kern_load8f(xr + j * KERN_VEC, xv);
			kern_load8(w + j * KERN_VEC, g);
#pragma unroll
			for (int k = 0; k < KERN_VEC; k++)
				xv[k] = xv[k] * inv * g[k];
			kern_store8(out + (size_t)r * dim + j * KERN_VEC, xv);
		}
	}
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
	kern_pdl_start(); /* the input is the previous kernel's output */
	uint32_t e = car_next_epoch(d);
	if (blockIdx.x >= d.active)
		return; /* counted the call; moves nothing */
	size_t slot = (e & 1) ? d.slot_bytes : 0;
	size_t n = (count + E - 1) / E;
	size_t stride = (size_t)d.active * blockDim.x;
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
	kern_pdl_start();
	uint32_t e = car_next_epoch(d);
	if (blockIdx.x >= d.active)
		return; /* counted the call; moves nothing */
	size_t slot = (e & 1) ? d.slot_bytes : 0;
	size_t n = (count + E - 1) / E;
	size_t stride = (size_t)d.active * blockDim.x;
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

/* ---- all-reduce fused with the residual add of a pending norm ---- */

/*
 * The one-shot doing KERN_EPI_ADD's work (kernels/epilogue.h) on the
 * sum: x [n, dim] fp32 += the sum rounded to T; norm_out [n, dim] = x *
 * w rounded to T (fp16 saturating, kern_from_f32_sat); sumsq [blocks, n]
 * = each block's part of each row's sum of squares of the new x, for the
 * next projection to divide by the rms (node_prenorm). The slot holds
 * each row as ceil(dim / 8) packs (zero padded), so odd widths and
 * unaligned ranks exchange the same layout. The n * P packs split into
 * one contiguous chunk per block: a decode row of 5120 is 20 packs for
 * each of 32 blocks, every block's SM reading its own piece from the
 * peers, where the plain one-shot's grid stride would give it all to two.
 * Block b copies in exactly the packs it later reads, so block b's
 * barrier is all it needs (the protocol above, unchanged).
 */
template <typename T, bool ALIGNED, int NP>
__global__ void __launch_bounds__(CAR_THREADS)
	car_add_prenorm(par_car_dev d, const T *part, float *x, const T *w, T *out, float *sumsq,
			int n, int dim)
{
	constexpr int E = 16 / sizeof(T);
	static_assert(E == KERN_VEC, "2-byte types: packs of 8");
	__shared__ float wsum[CAR_THREADS / 32][KERN_PRE_MAX_TOKENS];
	kern_pdl_start();
	uint32_t e = car_next_epoch(d);
	if (blockIdx.x >= d.active) { /* counted the call; its parts are 0 */
		if (threadIdx.x < n)
			sumsq[(size_t)blockIdx.x * n + threadIdx.x] = 0.0f;
		return;
	}
	size_t slot = (e & 1) ? d.slot_bytes : 0;
	const int P = (dim + E - 1) / E, total = n * P;
	const int chunk = (total + d.active - 1) / d.active;
	const int c0 = blockIdx.x * chunk, c1 = min(c0 + chunk, total);
	uint4 *mine = reinterpret_cast<uint4 *>(d.data[d.rank] + slot);
	for (int i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
		const int r = i / P;
		mine[i] = car_load_pack<T, ALIGNED>(part + (size_t)r * dim, i - r * P, dim);
	}
	car_barrier(d, 2 * e);
	float ss0 = 0, ss1 = 0;
	for (int i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
		const int r = i / P, j = i - r * P, e0 = j * E;
		float *xr = x + (size_t)r * dim + e0;
		const uint4 s = car_sum_pack<T, NP>(d, slot, i);
		const T *st = reinterpret_cast<const T *>(&s);
		float v[E], g[E];
		if (ALIGNED) { /* dim % 8 == 0: whole packs */
			kern_load8f(xr, v);
			kern_load8<T>(w + e0, g);
		} else {
#pragma unroll
			for (int k = 0; k < E; k++) {
				v[k] = e0 + k < dim ? xr[k] : 0.0f;
				g[k] = e0 + k < dim ? kern_to_f32(w[e0 + k]) : 0.0f;
			}
		}
		uint4 o;
		T *ot = reinterpret_cast<T *>(&o);
		float sq = 0;
#pragma unroll
		for (int k = 0; k < E; k++) {
			v[k] += kern_to_f32(st[k]); /* padding: 0 + 0 */
			sq += v[k] * v[k];
			ot[k] = kern_from_f32_sat<T>(v[k] * g[k]);
		}
		if (ALIGNED) {
			kern_store8f(xr, v);
		} else {
#pragma unroll
			for (int k = 0; k < E; k++)
				if (e0 + k < dim)
					xr[k] = v[k];
		}
		car_store_pack<T, ALIGNED>(out + (size_t)r * dim, j, dim, o);
		if (r == 0)
			ss0 += sq;
		else
			ss1 += sq;
	}
	/* the block's parts: warp trees, then the warps in order, so every
	 * rank (same grid, same chunks) writes the same bits */
	ss0 = kern_warp_sum(ss0);
	ss1 = kern_warp_sum(ss1);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0)
		wsum[warp][0] = ss0, wsum[warp][1] = ss1;
	__syncthreads();
	if (threadIdx.x < n) {
		float t = 0;
		for (int k = 0; k < CAR_THREADS / 32; k++)
			t += wsum[k][threadIdx.x];
		sumsq[(size_t)blockIdx.x * n + threadIdx.x] = t;
	}
}

/* ---- launchers ---- */

/* PDL for these kernels: with the step's (kern_pdl_enabled) unless
 * SL_CAR_PDL=0 (read once); a refused PDL launch turns it off for good. */
static bool g_car_pdl_ok = true;

static bool car_pdl_on(void)
{
	static int env = -1;
	if (env < 0) {
		const char *v = getenv("SL_CAR_PDL");
		env = !(v && !strcmp(v, "0"));
	}
	return g_car_pdl_ok && env && kern_pdl_enabled();
}

template <typename K, typename... Args>
static int car_launch_t(cudaStream_t st, K kernel, int blocks, int threads, Args... args)
{
	bool pdl = car_pdl_on();
	const bool asked = pdl;
	int rc = kern_launch_pdl_smem(&pdl, "all-reduce", st, kernel, dim3(blocks), dim3(threads), 0,
				      args...);
	if (asked && !pdl)
		g_car_pdl_ok = false;
	return rc;
}

template <typename K, typename... Args>
static int car_launch(cudaStream_t st, K kernel, int blocks, Args... args)
{
	return car_launch_t(st, kernel, blocks, CAR_THREADS, args...);
}

/* Every push call runs all CAR_PUSH_BLOCKS blocks (the counters); one
 * pack a thread moves it, on at least 4 blocks. */
template <typename T, bool ALIGNED>
static int car_push_launch(const par_car_dev *d, T *buf, size_t count, cudaStream_t st)
{
	constexpr size_t E = 16 / sizeof(T);
	const size_t packs = (count + E - 1) / E;
	size_t active = (packs + CAR_PUSH_THREADS - 1) / CAR_PUSH_THREADS;
	par_car_dev c = *d;
	c.active = active < 4 ? 4 : active > CAR_PUSH_BLOCKS ? CAR_PUSH_BLOCKS : (int)active;
	auto k = d->tp <= 2   ? car_oneshot_push<T, ALIGNED, 2>
		 : d->tp <= 4 ? car_oneshot_push<T, ALIGNED, 4>
			      : car_oneshot_push<T, ALIGNED, CAR_MAX_RANKS>;
	return car_launch_t(st, k, CAR_PUSH_BLOCKS, CAR_PUSH_THREADS, c, buf, count);
}

template <typename T>
static int car_allreduce_launch(const par_car_dev *d, void *buf, size_t count, int kind,
				cudaStream_t st)
{
	bool al = kern_aligned16(buf);
	T *b = (T *)buf;
	if (kind == CAR_PUSH)
		return al ? car_push_launch<T, true>(d, b, count, st)
			  : car_push_launch<T, false>(d, b, count, st);
	if (kind == CAR_TWOSHOT)
		return car_launch(st, al ? car_twoshot<T, true> : car_twoshot<T, false>, d->blocks,
				  *d, b, count);
	return car_launch(st, al ? car_oneshot<T, true> : car_oneshot<T, false>, d->blocks, *d, b,
			  count);
}

template <typename T>
static int car_push_add_norm_launch(const par_car_dev *d, const void *part, float *x,
				    const void *w, void *out, int n, int dim, float eps,
				    cudaStream_t st)
{
	auto k = d->tp <= 2   ? car_push_add_norm<T, 2>
		 : d->tp <= 4 ? car_push_add_norm<T, 4>
			      : car_push_add_norm<T, CAR_MAX_RANKS>;
	return car_launch_t(st, k, CAR_PUSH_BLOCKS, CAR_PUSH_NORM_THREADS, *d, (const T *)part, x,
			    (const T *)w, (T *)out, n, dim, eps);
}

extern "C" int par_car_launch_push_add_norm(const par_car_dev *d, const void *part, float *x,
					    const void *w, void *out, int n, int dim, float eps,
					    sl_dtype dt, void *stream)
{
	if (n < 1 || dim < KERN_VEC || dim % KERN_VEC || (size_t)n * dim * 2 > d->push_region ||
	    !kern_aligned16(part) || !kern_aligned16(x) || !kern_aligned16(w) ||
	    !kern_aligned16(out))
		return SL_EINVAL;
	cudaStream_t st = (cudaStream_t)stream;
	switch (dt) {
	case SL_DT_F16:
		return car_push_add_norm_launch<__half>(d, part, x, w, out, n, dim, eps, st);
	case SL_DT_BF16:
		return car_push_add_norm_launch<__nv_bfloat16>(d, part, x, w, out, n, dim, eps, st);
	default: return SL_ENOTSUP;
	}
}

__global__ void car_push_empty_kernel(uint32_t *p, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = CAR_PUSH_EMPTY;
}

extern "C" int par_car_push_empty(void *p, size_t n)
{
	car_push_empty_kernel<<<256, 256>>>((uint32_t *)p, n);
	cudaError_t e = cudaGetLastError();
	return e ? (int)e : (int)cudaDeviceSynchronize();
}

/* d with this call's moving blocks: `active` within 1..blocks */
static par_car_dev car_with_active(const par_car_dev *d, int active)
{
	par_car_dev c = *d;
	c.active = active < 1 ? 1 : active > d->blocks ? d->blocks : active;
	return c;
}

extern "C" int par_car_launch_allreduce(const par_car_dev *d, int active, void *buf, size_t count,
					sl_dtype dt, int kind, void *stream)
{
	if (count == 0)
		return SL_OK;
	const size_t cap = kind == CAR_PUSH ? d->push_region : d->slot_bytes;
	if (count * sl_dtype_size(dt) > cap || d->blocks < 1 || d->blocks > CAR_MAX_BLOCKS ||
	    kind < CAR_ONESHOT || kind > CAR_PUSH)
		return SL_EINVAL;
	cudaStream_t st = (cudaStream_t)stream;
	const par_car_dev c = car_with_active(d, active);
	switch (dt) {
	case SL_DT_F32: return car_allreduce_launch<float>(&c, buf, count, kind, st);
	case SL_DT_F16: return car_allreduce_launch<__half>(&c, buf, count, kind, st);
	case SL_DT_BF16: return car_allreduce_launch<__nv_bfloat16>(&c, buf, count, kind, st);
	}
	return SL_ENOTSUP;
}

template <typename T>
static int car_allgather_launch(const par_car_dev *d, const void *send, void *recv, size_t count,
				size_t recv_stride, cudaStream_t st)
{
	bool al = kern_aligned16(send) && kern_aligned16(recv) && (recv_stride * sizeof(T)) % 16 == 0;
	return car_launch(st, al ? car_allgather<T, true> : car_allgather<T, false>, d->blocks, *d,
			  (const T *)send, (T *)recv, count, recv_stride);
}

extern "C" int par_car_launch_allgather(const par_car_dev *d, int active, const void *send,
					void *recv, size_t count, size_t recv_stride,
					size_t elem_bytes, void *stream)
{
	if (count == 0)
		return SL_OK;
	if (count * elem_bytes > d->slot_bytes || d->blocks < 1 || d->blocks > CAR_MAX_BLOCKS)
		return SL_EINVAL;
	cudaStream_t st = (cudaStream_t)stream;
	const par_car_dev c = car_with_active(d, active);
	if (elem_bytes == 4)
		return car_allgather_launch<uint32_t>(&c, send, recv, count, recv_stride, st);
	if (elem_bytes == 2)
		return car_allgather_launch<uint16_t>(&c, send, recv, count, recv_stride, st);
	return SL_ENOTSUP;
}

template <typename T, bool ALIGNED>
static int car_add_prenorm_np(const par_car_dev *d, const void *part, float *x, const void *w,
			      void *out, float *sumsq, int n, int dim, cudaStream_t st)
{
	const T *p = (const T *)part, *g = (const T *)w;
	T *o = (T *)out;
	auto k = d->tp <= 2   ? car_add_prenorm<T, ALIGNED, 2>
		 : d->tp <= 4 ? car_add_prenorm<T, ALIGNED, 4>
			      : car_add_prenorm<T, ALIGNED, CAR_MAX_RANKS>;
	return car_launch(st, k, d->blocks, *d, p, x, g, o, sumsq, n, dim);
}

template <typename T>
static int car_add_prenorm_launch(const par_car_dev *d, const void *part, float *x, const void *w,
				  void *out, float *sumsq, int n, int dim, cudaStream_t st)
{
	/* a rank's alignment picks only its own loads and stores: the slot
	 * layout is the same either way */
	bool al = dim % KERN_VEC == 0 && kern_aligned16(part) && kern_aligned16(x) &&
		  kern_aligned16(w) && kern_aligned16(out);
	if (al)
		return car_add_prenorm_np<T, true>(d, part, x, w, out, sumsq, n, dim, st);
	return car_add_prenorm_np<T, false>(d, part, x, w, out, sumsq, n, dim, st);
}

extern "C" int par_car_launch_add_prenorm(const par_car_dev *d, int active, const void *part,
					  float *x, const void *w, void *out, float *sumsq, int n,
					  int dim, sl_dtype dt, void *stream)
{
	if (n < 1 || n > KERN_PRE_MAX_TOKENS || dim <= 0 || d->blocks < 1 ||
	    d->blocks > CAR_MAX_BLOCKS ||
	    (size_t)n * ((dim + KERN_VEC - 1) / KERN_VEC) * 16 > d->slot_bytes)
		return SL_EINVAL;
	cudaStream_t st = (cudaStream_t)stream;
	const par_car_dev c = car_with_active(d, active);
	switch (dt) {
	case SL_DT_F16:
		return car_add_prenorm_launch<__half>(&c, part, x, w, out, sumsq, n, dim, st);
	case SL_DT_BF16:
		return car_add_prenorm_launch<__nv_bfloat16>(&c, part, x, w, out, sumsq, n, dim, st);
	default: return SL_ENOTSUP;
	}
}
