/*
 * lab/stream.cu — how fast can one GPU stream a weight matrix by tiles,
 * with no arithmetic on the bytes? A probe of the hardware, not of a
 * kernel: the ceiling a decode-size GEMM's memory side can reach for a
 * given tile shape and way of loading (bench/results/2026-11-29-nvidia-
 * h200-w8a8-tma/, where it told a slow GEMM's loads from its other work).
 *
 *   make CUDA=1 lab-stream -> build/bin/lab-stream [ROWS COLS ...]
 *
 * Default shapes: the 7B's qkv (12288 x 4096 bytes, fp8 codes) and o
 * (4096 x 4096). Each row of output is one way of reading the matrix:
 *   ld  TR x TB    256-thread blocks, each step of a block reads a tile of
 *                  TR rows x TB contiguous bytes a row with 16-byte
 *                  ld.global (streaming), every load of a step in flight
 *                  at once, then folds them into an XOR;
 *   tma BR x B x ST  one thread a block streams 128-byte x BR-row boxes
 *                  (cp.async.bulk.tensor, 128-byte swizzle) into ST
 *                  stages of B bytes a row, each stage refilled as soon as
 *                  it has landed (an mbarrier per stage), nothing read;
 * with the columns cut into `splits` ranges (gridDim.y) and rows into
 * tiles (gridDim.x). Timing: the median of 40 launches, each on another
 * copy of the matrix (copies rotate through 2 GiB, so L2 holds none),
 * timed with events: launch overhead included, so compare rows with each
 * other, not with a graph-replayed kernel's figure.
 *
 * Check: every ld row's XOR of all the matrix's words must equal the
 * CPU's (the data are random); a mismatch ends the run with status 1.
 * The TMA rows read into shared memory only and are not checked.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>


#define LCK(x)                                                                               \
	do {                                                                                 \
		cudaError_t e_ = (x);                                                        \
		if (e_ != cudaSuccess) {                                                     \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                   \
				cudaGetErrorString(e_));                                     \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

/* ---- ld.global tiles ---- */

template <int TR, int TB>
__global__ void __launch_bounds__(256)
	ld_kernel(const uint8_t *m, int cols, int per_split, unsigned *xor_out)
{
	constexpr int V = TR * TB / 16 / 256; /* 16-byte loads a thread a step */
	static_assert(V >= 1 && TB % 16 == 0, "tile");
	const int r0 = blockIdx.x * TR, k0 = blockIdx.y * per_split;
	uint4 acc = make_uint4(0, 0, 0, 0);
	for (int k = k0; k < k0 + per_split; k += TB) {
		uint4 v[V];
#pragma unroll
		for (int i = 0; i < V; i++) {
			const int u = threadIdx.x + i * 256, r = u / (TB / 16), c = u % (TB / 16);
			v[i] = __ldcs(reinterpret_cast<const uint4 *>(m + (size_t)(r0 + r) * cols + k +
								       c * 16));
		}
#pragma unroll
		for (int i = 0; i < V; i++) {
			acc.x ^= v[i].x;
			acc.y ^= v[i].y;
			acc.z ^= v[i].z;
			acc.w ^= v[i].w;
		}
	}
	atomicXor(xor_out, acc.x ^ acc.y ^ acc.z ^ acc.w);
}

/* ---- TMA boxes ---- */

__device__ __forceinline__ void st_mb_init(uint32_t bar)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void st_mb_expect(uint32_t bar, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
		     "r"(bytes)
		     : "memory");
}
__device__ __forceinline__ void st_mb_wait(uint32_t bar, uint32_t parity)
{
	uint32_t done = 0;
	while (!done)
		asm volatile("{\n.reg .pred p;\n"
			     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
			     "selp.u32 %0, 1, 0, p;\n}\n"
			     : "=r"(done)
			     : "r"(bar), "r"(parity)
			     : "memory");
}
__device__ __forceinline__ void st_tma(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0,
				       int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
		     "[%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
		     "l"(map), "r"(bar), "r"(c0), "r"(c1)
		     : "memory");
}

/* One thread: NB boxes of 128 bytes x BR rows a stage, ST stages. */
template <int BR, int NB, int ST>
__global__ void tma_kernel(const __grid_constant__ CUtensorMap map, int per_split)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	extern __shared__ unsigned char raw[];
	__shared__ __align__(8) uint64_t bars[ST];
	if (threadIdx.x)
		return;
	uint8_t *sm = (uint8_t *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
	const uint32_t base = (uint32_t)__cvta_generic_to_shared(sm);
	const uint32_t b0 = (uint32_t)__cvta_generic_to_shared(bars);
	constexpr uint32_t SB = NB * BR * 128;
	for (int s = 0; s < ST; s++)
		st_mb_init(b0 + 8 * s);
	asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	const int r0 = blockIdx.x * BR, k0 = blockIdx.y * per_split;
	const int steps = per_split / (128 * NB);
	for (int k = 0; k < steps; k++) {
		const int s = k % ST;
		if (k >= ST)
			st_mb_wait(b0 + 8 * s, ((k / ST) - 1) & 1);
		st_mb_expect(b0 + 8 * s, SB);
		for (int b = 0; b < NB; b++)
			st_tma(base + s * SB + b * BR * 128, &map, b0 + 8 * s,
			       k0 + (k * NB + b) * 128, r0);
	}
	for (int k = steps > ST ? steps - ST : 0; k < steps; k++)
		st_mb_wait(b0 + 8 * (k % ST), (k / ST) & 1);
#endif
}

/* ---- host ---- */

static PFN_cuTensorMapEncodeTiled_v12000 g_encode;
static uint8_t *g_buf;
static size_t g_copies, g_bytes;
static int g_rows, g_cols;
static unsigned g_xor; /* the CPU's */
static unsigned *g_xor_dev;
static bool g_failed;

/* Median us of 40 timed launches of launch(copy). */
template <class F> static double median_us(F launch)
{
	cudaEvent_t a, b;
	LCK(cudaEventCreate(&a));
	LCK(cudaEventCreate(&b));
	for (int i = 0; i < 3; i++)
		launch(i % g_copies);
	LCK(cudaDeviceSynchronize());
	std::vector<float> t(40);
	for (size_t i = 0; i < t.size(); i++) {
		LCK(cudaEventRecord(a));
		launch((i + 3) % g_copies);
		LCK(cudaEventRecord(b));
		LCK(cudaEventSynchronize(b));
		LCK(cudaEventElapsedTime(&t[i], a, b));
	}
	LCK(cudaEventDestroy(a));
	LCK(cudaEventDestroy(b));
	std::sort(t.begin(), t.end());
	return t[t.size() / 2] * 1e3;
}

template <int TR, int TB> static void row_ld(int splits)
{
	if (g_rows % TR || g_cols % (TB * splits))
		return;
	const int per = g_cols / splits;
	const dim3 grid(g_rows / TR, splits);
	/* the check, on copy 0 */
	LCK(cudaMemset(g_xor_dev, 0, sizeof(unsigned)));
	ld_kernel<TR, TB><<<grid, 256>>>(g_buf, g_cols, per, g_xor_dev);
	unsigned got = 0;
	LCK(cudaMemcpy(&got, g_xor_dev, sizeof got, cudaMemcpyDeviceToHost));
	const double us = median_us([&](size_t c) {
		ld_kernel<TR, TB><<<grid, 256>>>(g_buf + c * g_bytes, g_cols, per, g_xor_dev);
	});
	printf("ld  %4d rows x %5d B           splits %d  blocks %5u: %7.1f us %6.0f GB/s  %s\n", TR,
	       TB, splits, grid.x * grid.y, us, g_bytes / us * 1e-3,
	       got == g_xor ? "ok" : "XOR MISMATCH");
	g_failed |= got != g_xor;
}

template <int BR, int NB, int ST> static void row_tma(int splits)
{
	if (g_rows % BR || g_cols % (128 * NB * splits))
		return;
	const int per = g_cols / splits;
	const dim3 grid(g_rows / BR, splits);
	const size_t smem = 1024 + (size_t)ST * NB * BR * 128;
	LCK(cudaFuncSetAttribute(tma_kernel<BR, NB, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize,
				 (int)smem));
	int per_sm = 0;
	LCK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tma_kernel<BR, NB, ST>, 32, smem));
	std::vector<CUtensorMap> maps(g_copies);
	for (size_t c = 0; c < g_copies; c++) {
		const cuuint64_t dims[2] = {(cuuint64_t)g_cols, (cuuint64_t)g_rows};
		const cuuint64_t strides[1] = {(cuuint64_t)g_cols};
		const cuuint32_t box[2] = {128, BR}, es[2] = {1, 1};
		if (g_encode(&maps[c], CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, g_buf + c * g_bytes, dims,
			     strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
			     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
			     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
			fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
			exit(1);
		}
	}
	const double us = median_us([&](size_t c) {
		tma_kernel<BR, NB, ST><<<grid, 32, smem>>>(maps[c], per);
	});
	printf("tma %4d rows x %4d B x %d stages splits %d  blocks %5u: %7.1f us %6.0f GB/s  (%d/SM)\n",
	       BR, NB * 128, ST, splits, grid.x * grid.y, us, g_bytes / us * 1e-3, per_sm);
}

static void shape(int rows, int cols)
{
	g_rows = rows;
	g_cols = cols;
	g_bytes = (size_t)rows * cols;
	g_copies = std::min<size_t>(64, std::max<size_t>(2, (2048ull << 20) / g_bytes));
	LCK(cudaMalloc(&g_buf, g_copies * g_bytes));
	std::vector<uint32_t> h(g_bytes / 4);
	uint64_t s = 0x9E3779B97F4A7C15ull ^ g_bytes;
	g_xor = 0;
	for (auto &w : h) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		w = (uint32_t)(s >> 32);
		g_xor ^= w;
	}
	for (size_t c = 0; c < g_copies; c++)
		LCK(cudaMemcpy(g_buf + c * g_bytes, h.data(), g_bytes, cudaMemcpyHostToDevice));
	printf("\nmatrix %d x %d bytes (%.1f MB), %zu copies\n", rows, cols, g_bytes / 1e6, g_copies);
	row_ld<16, 2048>(1);
	row_ld<16, 1024>(1);
	row_ld<32, 512>(1);
	row_ld<64, 256>(1);
	row_ld<128, 128>(1);
	row_ld<128, 128>(2);
	row_ld<128, 512>(1);
	row_ld<128, 512>(2);
	row_tma<128, 1, 4>(1);
	row_tma<128, 1, 4>(2);
	row_tma<128, 1, 4>(4);
	row_tma<128, 1, 8>(1);
	row_tma<128, 2, 4>(1);
	row_tma<128, 4, 3>(1);
	row_tma<64, 1, 8>(1);
	row_tma<64, 4, 4>(1);
	row_tma<32, 8, 4>(1);
	row_tma<32, 8, 4>(2);
	row_tma<16, 8, 4>(1);
	row_tma<16, 16, 4>(1);
	LCK(cudaFree(g_buf));
}

int main(int argc, char **argv)
{
	int dev;
	cudaDeviceProp p;
	LCK(cudaGetDevice(&dev));
	LCK(cudaGetDeviceProperties(&p, dev));
	if (p.major < 9) {
		printf("lab-stream: TMA needs sm_90 or later (this is sm_%d%d)\n", p.major, p.minor);
		return 0;
	}
	void *fn = NULL;
	cudaDriverEntryPointQueryResult q;
	LCK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
					     &q));
	if (q != cudaDriverEntryPointSuccess || !fn) {
		fprintf(stderr, "lab-stream: no cuTensorMapEncodeTiled\n");
		return 1;
	}
	g_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
	LCK(cudaMalloc(&g_xor_dev, sizeof(unsigned)));
	printf("device: %s, %d SMs, L2 %d MiB\n", p.name, p.multiProcessorCount, p.l2CacheSize >> 20);
	if (argc >= 3)
		for (int i = 1; i + 1 < argc; i += 2)
			shape(atoi(argv[i]), atoi(argv[i + 1]));
	else {
		shape(12288, 4096);
		shape(4096, 4096);
	}
	return g_failed ? 1 : 0;
}
