/*
 * lab/xchg.cu — how long does a word take from one GPU to another, the
 * way the row-parallel GEMVs exchange their tiles (kernels/xchg.cuh)?
 * A probe of the hardware, not of a kernel: no numerical result, the
 * "check" is that every round's word arrives with its number.
 *
 *   make CUDA=1 lab-xchg -> build/bin/lab-xchg [ROUNDS, default 2000]
 *
 * Two "ranks" run the same kernel at once, each on its own stream: GPU 0
 * and GPU 1 with peer access (one process), or both on GPU 0 (loopback,
 * the floor of the polling itself). Each block is a GEMV tile: lanes 0-7
 * of its warp store one 64-bit word each into the other rank's memory,
 * the round's number in the high half (kern_ll_store), then poll their
 * own memory until the other rank's word of the round is there
 * (kern_ll_load), as kern_xchg_sum does at n = 1. Both ranks store
 * before they wait, so one round lasts one one-way latency (plus the
 * polling): the table gives ns a round, the median and the slowest block
 * over the launch, for 1 tile and for as many as the 13B tp 2 o / down
 * (320) and gate/up-sized (864) launches hold at once. Variant 1 stores
 * and polls with release / acquire (the all-reduce's flags,
 * kern_flag_store / kern_flag_load) instead of relaxed. "under load"
 * (two GPUs only): the same with a kernel streaming a 1 GiB buffer over
 * and over on each GPU meanwhile (half of every SM's threads, started
 * after the exchange's blocks are resident), as the next GEMV's blocks
 * load their first weights while a row-parallel GEMV exchanges its tiles
 * (a loopback pair would need both exchange kernels resident beside it,
 * which the streaming blocks' registers do not leave room for).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "kernels/xchg.cuh"

/* A failed CUDA call ends the probe, naming the call. */
static void ck(cudaError_t e, const char *call, int line)
{
	if (e == cudaSuccess)
		return;
	fprintf(stderr, "lab/xchg.cu:%d %s: %s\n", line, call, cudaGetErrorString(e));
	exit(1);
}
#define CK(x) ck((x), #x, __LINE__)

#define WORDS 8            /* lanes 0-7: a tile's words at n = 1 */
#define MAX_TILES 1024
#define SPIN_LIMIT (1u << 24) /* a word that never comes (seconds): stop, report */

/* Rounds base .. base + rounds - 1 of tile blockIdx.x; ns[b]: the block's
 * time over them; bad: a wait that gave up. */
template <int V>
__global__ void pingpong(uint64_t *peer, const uint64_t *mine, uint32_t base, int rounds,
			 unsigned long long *ns, unsigned *bad)
{
	const int lane = threadIdx.x;
	const size_t i = (size_t)blockIdx.x * WORDS + lane;
	const uint64_t t0 = kern_now_ns();
	for (int r = 0; r < rounds && lane < WORDS; r++) {
		const uint32_t e = base + (uint32_t)r;
		if constexpr (V == 0)
			kern_ll_store(peer + i, (uint64_t)e << 32 | (uint32_t)r);
		else
			kern_flag_store(reinterpret_cast<uint32_t *>(peer + i) + 1, e);
		uint32_t spins = 0, got;
		do {
			got = V == 0 ? (uint32_t)(kern_ll_load(mine + i) >> 32)
				     : kern_flag_load(reinterpret_cast<const uint32_t *>(mine + i) + 1);
		} while ((int32_t)(got - e) < 0 && ++spins < SPIN_LIMIT);
		if (spins >= SPIN_LIMIT) {
			atomicAdd(bad, 1u);
			break;
		}
	}
	__syncwarp();
	if (lane == 0)
		ns[blockIdx.x] = kern_now_ns() - t0;
}

/* Streams buf (n uint4) until *stop, over and over: the traffic
 * of a GEMV's weights. The sum keeps the loads. */
__global__ void stream_until(const uint4 *buf, size_t n, const volatile unsigned *stop,
			     unsigned *sink)
{
	unsigned acc = 0;
	while (!*stop)
		for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
		     i += (size_t)gridDim.x * blockDim.x) {
			const uint4 v = __ldcs(buf + i);
			acc ^= v.x ^ v.y ^ v.z ^ v.w;
		}
	if (acc == 0x9e3779b9u)
		*sink = acc;
}

struct side {
	int dev;
	cudaStream_t st;
	uint64_t *words;         /* this rank's area: the other rank writes here */
	unsigned long long *ns;  /* [MAX_TILES] */
	unsigned *bad;
	cudaStream_t st2;        /* the streaming kernel's */
	uint4 *buf;              /* what it streams */
	unsigned *stop;          /* set by the host once the exchange is done */
	unsigned *sink;
};

#define STREAM_BYTES ((size_t)1 << 30)

static void side_init(side &s, int dev)
{
	s.dev = dev;
	CK(cudaSetDevice(dev));
	CK(cudaStreamCreateWithFlags(&s.st, cudaStreamNonBlocking));
	CK(cudaMalloc(&s.words, sizeof(uint64_t) * WORDS * MAX_TILES));
	CK(cudaMemset(s.words, 0, sizeof(uint64_t) * WORDS * MAX_TILES));
	CK(cudaMalloc(&s.ns, sizeof(unsigned long long) * MAX_TILES));
	CK(cudaMalloc(&s.bad, sizeof(unsigned)));
	CK(cudaMemset(s.bad, 0, sizeof(unsigned)));
	CK(cudaStreamCreateWithFlags(&s.st2, cudaStreamNonBlocking));
	CK(cudaMalloc(&s.buf, STREAM_BYTES));
	CK(cudaMemset(s.buf, 1, STREAM_BYTES));
	CK(cudaHostAlloc(&s.stop, sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable));
	CK(cudaMalloc(&s.sink, sizeof(unsigned)));
}

/* The streaming kernel on s's GPU, started after its exchange kernel (so
 * the exchange's blocks are resident first): 4 blocks of 256 an SM,
 * half the SM's threads, the rest left to the exchange's warps. */
static void stream_start(side &s, int sms)
{
	CK(cudaSetDevice(s.dev));
	*(volatile unsigned *)s.stop = 0;
	unsigned *dstop;
	CK(cudaHostGetDevicePointer(&dstop, s.stop, 0));
	stream_until<<<sms * 4, 256, 0, s.st2>>>(s.buf, STREAM_BYTES / sizeof(uint4), dstop, s.sink);
	CK(cudaGetLastError());
}

static void stream_stop(side &s)
{
	*(volatile unsigned *)s.stop = 1;
	CK(cudaStreamSynchronize(s.st2));
}

/* One launch pair: both ranks' kernels, then rank 0's per-round times. */
template <int V>
static bool run(side &a, side &b, uint32_t &base, int tiles, int rounds, int load_sms, double *med,
		double *worst)
{
	CK(cudaMemset(a.bad, 0, sizeof(unsigned)));
	CK(cudaMemset(b.bad, 0, sizeof(unsigned)));
	CK(cudaSetDevice(a.dev));
	pingpong<V><<<tiles, 32, 0, a.st>>>(b.words, a.words, base, rounds, a.ns, a.bad);
	CK(cudaGetLastError());
	if (load_sms)
		stream_start(a, load_sms);
	CK(cudaSetDevice(b.dev));
	pingpong<V><<<tiles, 32, 0, b.st>>>(a.words, b.words, base, rounds, b.ns, b.bad);
	CK(cudaGetLastError());
	if (load_sms)
		stream_start(b, load_sms);
	CK(cudaStreamSynchronize(a.st));
	CK(cudaStreamSynchronize(b.st));
	if (load_sms) {
		stream_stop(a);
		stream_stop(b);
	}
	base += (uint32_t)rounds;
	std::vector<unsigned long long> ns(tiles);
	unsigned bad_a = 0, bad_b = 0;
	CK(cudaMemcpy(ns.data(), a.ns, sizeof(unsigned long long) * tiles, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(&bad_a, a.bad, sizeof bad_a, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(&bad_b, b.bad, sizeof bad_b, cudaMemcpyDeviceToHost));
	std::sort(ns.begin(), ns.end());
	*med = (double)ns[tiles / 2] / rounds;
	*worst = (double)ns[tiles - 1] / rounds;
	return bad_a == 0 && bad_b == 0;
}

int main(int argc, char **argv)
{
	const int rounds = argc > 1 ? atoi(argv[1]) : 2000;
	if (rounds < 1) {
		fprintf(stderr, "usage: lab-xchg [ROUNDS]\n");
		return 2;
	}
	int n_dev = 0, peer = 0;
	CK(cudaGetDeviceCount(&n_dev));
	cudaDeviceProp p;
	CK(cudaGetDeviceProperties(&p, 0));
	if (n_dev >= 2) {
		CK(cudaDeviceCanAccessPeer(&peer, 0, 1));
		if (peer) {
			CK(cudaSetDevice(0));
			CK(cudaDeviceEnablePeerAccess(1, 0));
			CK(cudaSetDevice(1));
			CK(cudaDeviceEnablePeerAccess(0, 0));
		}
	}
	printf("lab-xchg: %s x %d, peer access %s; %d rounds a launch, ns a round "
	       "(median block / slowest block)\n",
	       p.name, n_dev, peer ? "GPU 0 <-> GPU 1" : "none (loopback only)", rounds);
	side l0, l1, g0, g1;
	side_init(l0, 0);
	side_init(l1, 0);
	if (peer) {
		side_init(g0, 0);
		side_init(g1, 1);
	}
	static const int tiles[] = {1, 320, 864};
	static const char *vname[] = {"relaxed (kern_ll_*)", "release / acquire (kern_flag_*)"};
	printf("| variant | pair | tiles | under load | ns a round | slowest |\n"
	       "|---|---|---|---|---|---|\n");
	int failed = 0;
	uint32_t base_l = 1, base_g = 1; /* round numbers only grow: no stale word passes */
	for (int v = 0; v < 2; v++)
		for (int load = 0; load < 2; load++)
			for (int t : tiles)
				for (int pair = load ? 1 : 0; pair < (peer ? 2 : 1); pair++) {
					double med, worst;
					bool ok;
					side &x = pair ? g0 : l0, &y = pair ? g1 : l1;
					uint32_t &base = pair ? base_g : base_l;
					const int r = t > 1 ? std::max(rounds / 10, 1) : rounds;
					const int sms = load ? p.multiProcessorCount : 0;
					/* a first launch warms up, the second is timed */
					if (v == 0) {
						run<0>(x, y, base, t, r, sms, &med, &worst);
						ok = run<0>(x, y, base, t, r, sms, &med, &worst);
					} else {
						run<1>(x, y, base, t, r, sms, &med, &worst);
						ok = run<1>(x, y, base, t, r, sms, &med, &worst);
					}
					printf("| %d %s | %s | %d | %s | %.0f | %.0f |%s\n", v, vname[v],
					       pair ? "GPU 0 <-> GPU 1" : "loopback on GPU 0", t,
					       load ? "yes" : "no", med, worst, ok ? "" : " WAIT GAVE UP");
					failed += !ok;
				}
	return failed ? 1 : 0;
}
