/*
 * lab/l2.cu — does an L2 prefetch (kernels/l2.cu) of a weight's first bytes
 * land, what does it cost, and does it overlap a kernel that reads little?
 * No numerical result to check: the "check" is that a read of W after a
 * prefetch sums to the CPU's sum of W.
 *
 *   make CUDA=1 lab-l2 -> build/bin/lab-l2 [MiB of W, default 16]
 *
 * Every row: median of 25 runs, each after a 256 MiB write that flushes
 * L2, timed with events on the GPU:
 *   cold read        a streaming read of W (kern_ld_stream, as the GEMVs)
 *   warm read        the same read right after another read of W
 *   pf G x P alone   kern-l2's kernel shape: G blocks of 32 threads, bulk
 *                    prefetches of P KiB each, alone
 *   pf + read        the prefetch kernel, then the read, back to back
 *   spin + read      a one-block kernel idling `spin` us (decode attention's
 *                    stand-in), then the read
 *   spin||pf + read  the prefetch on a second stream beside the spin, then
 *                    the read
 *   spin(pf) + read  the spin kernel issues the prefetch itself, then idles
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/cuda_util.cuh"

#define CK(x)                                                                             \
	do {                                                                              \
		cudaError_t e_ = (x);                                                     \
		if (e_ != cudaSuccess) {                                                  \
			fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

__device__ __forceinline__ void bulk_pf(const char *p, unsigned n)
{
	asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
}

__device__ void pf_range(const char *p, size_t bytes, size_t piece, int who, int threads)
{
	for (size_t off = (size_t)who * piece; off < bytes; off += (size_t)threads * piece) {
		size_t left = bytes - off;
		bulk_pf(p + off, (unsigned)(left < piece ? left : piece));
	}
}

__global__ void pf_kernel(const char *p, size_t bytes, size_t piece)
{
	pf_range(p, bytes, piece, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}

__global__ void read_kernel(const uint4 *w, size_t n, unsigned *out)
{
	unsigned s = 0;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint4 v = kern_ld_stream(w + i);
		s += v.x + v.y + v.z + v.w;
	}
	atomicAdd(out, s);
}

__global__ void spin_kernel(unsigned ns, const char *p, size_t bytes, size_t piece)
{
	if (p)
		pf_range(p, bytes, piece, blockIdx.x * blockDim.x + threadIdx.x,
			 gridDim.x * blockDim.x);
	uint64_t t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while (t - t0 < ns);
}

static cudaStream_t s1, s2;
static cudaEvent_t e0, e1, ef, ej;
static char *flush;
static const size_t FLUSH = (size_t)256 << 20;

static double timed(const std::function<void()> &body)
{
	std::vector<float> ms;
	for (int r = 0; r < 25; r++) {
		CK(cudaMemsetAsync(flush, r & 0xff, FLUSH, s1));
		CK(cudaEventRecord(e0, s1));
		body();
		CK(cudaEventRecord(e1, s1));
		CK(cudaEventSynchronize(e1));
		float t;
		CK(cudaEventElapsedTime(&t, e0, e1));
		ms.push_back(t);
	}
	std::sort(ms.begin(), ms.end());
	return 1000.0 * ms[ms.size() / 2];
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 16, bytes = mib << 20;
	int sms;
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	sms = prop.multiProcessorCount;
	printf("device: %s, %d SMs, L2 %d MiB; W %zu MiB\n", prop.name, sms, prop.l2CacheSize >> 20,
	       mib);
	CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaEventCreateWithFlags(&ef, cudaEventDisableTiming));
	CK(cudaEventCreateWithFlags(&ej, cudaEventDisableTiming));
	char *w;
	unsigned *sum;
	CK(cudaMalloc(&w, bytes));
	CK(cudaMalloc(&flush, FLUSH));
	CK(cudaMalloc(&sum, 4));
	std::vector<unsigned> h(bytes / 4);
	unsigned want = 0;
	for (size_t i = 0; i < h.size(); i++)
		want += h[i] = (unsigned)(i * 2654435761u + 12345);
	CK(cudaMemcpy(w, h.data(), bytes, cudaMemcpyHostToDevice));
	const size_t n16 = bytes / 16;
	const dim3 rg(4 * sms), rb(256);
	auto rd = [&] { read_kernel<<<rg, rb, 0, s1>>>((const uint4 *)w, n16, sum); };

	/* the check */
	CK(cudaMemset(sum, 0, 4));
	pf_kernel<<<sms, 32, 0, s1>>>(w, bytes, 16 << 10);
	rd();
	unsigned got;
	CK(cudaMemcpy(&got, sum, 4, cudaMemcpyDeviceToHost));
	printf("check: read after prefetch sums to %u, CPU %u: %s\n", got, want,
	       got == want ? "ok" : "WRONG");
	if (got != want)
		return 1;

	printf("cold read            %8.2f us\n", timed(rd));
	printf("warm read            %8.2f us\n", timed([&] { rd(); rd(); }) - timed(rd));
	const int grids[] = {8, sms, 2 * sms, 4 * sms};
	const size_t pieces[] = {16 << 10, 64 << 10, 256 << 10};
	for (int g : grids)
		for (size_t p : pieces) {
			auto pf = [&] { pf_kernel<<<g, 32, 0, s1>>>(w, bytes, p); };
			printf("pf %4d x %3zu KiB: alone %8.2f us, pf + read %8.2f us\n", g, p >> 10,
			       timed(pf), timed([&] { pf(); rd(); }));
		}
	for (unsigned spin : {6000u, 12000u}) {
		auto sp = [&] { spin_kernel<<<1, 32, 0, s1>>>(spin, nullptr, 0, 0); };
		printf("spin %2u us: spin alone %8.2f, spin + read %8.2f\n", spin / 1000, timed(sp),
		       timed([&] { sp(); rd(); }));
		for (int g : {sms, 4 * sms}) {
			auto side = [&] {
				CK(cudaEventRecord(ef, s1));
				CK(cudaStreamWaitEvent(s2, ef, 0));
				pf_kernel<<<g, 32, 0, s2>>>(w, bytes, 64 << 10);
				CK(cudaEventRecord(ej, s2));
				sp();
				CK(cudaStreamWaitEvent(s1, ej, 0));
				rd();
			};
			auto inside = [&] {
				spin_kernel<<<g, 32, 0, s1>>>(spin, w, bytes, 64 << 10);
				rd();
			};
			printf("  grid %3d: spin||pf + read %8.2f, spin(pf) + read %8.2f\n", g,
			       timed(side), timed(inside));
		}
	}
	return 0;
}
