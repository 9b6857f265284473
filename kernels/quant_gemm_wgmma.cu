/*
 * quant_gemm_wgmma.cu — the quantized GEMM (KERN_QPATH_GEMM) on Hopper's
 * warpgroup MMA (wgmma, sm_90a): W4A16 / W8A16 with the codes dequantized
 * into the A operand's registers, as quant_gemm.cu does for mma.sync, and
 * x read by the tensor cores from shared memory. quant_gemm.cu's kernel
 * tops out near 250 TFLOP/s on an H200 (mma.sync). This one reaches about
 * 400 (int8 at 2048 tokens) and is AUTO's choice above 224 tokens, where
 * it measured faster (qm_auto); at 64-192 it ties or loses to the
 * mma.sync kernel, both far from fp16's cuBLAS (bench/results/2026-11-29-nvidia-h200-
 * qgemm-wgmma/ says what was measured and what is left).
 *
 * Numerics: quant_gemm.cu's contract (exact codes in fp16/bf16, fp32
 * accumulation, group scales on each chunk's fp32 partial sums, per-row
 * scales at the end). It takes per-row scales (QG_ROW: int8, fp8) and
 * groups of whole chunks (QG_CHUNK: int8 groups of 64 and 128, int4
 * groups of 128); the others stay on quant_gemm.cu.
 *
 * A block: two warpgroups, 128 rows of W (64 each, warp w of a warpgroup
 * rows 16w .. 16w + 15 in wgmma's A layout: wgmma.cuh), BN tokens (64 or
 * 128: one m64nBNk16 per 16 columns). The k step is quant_gemm.cu's
 * chunk (64 bytes of a W row), staged STAGES deep with cp.async: W as
 * 128 rows of 64 bytes, x as BN rows of the chunk's CK columns in the
 * 128-byte swizzle.
 *
 * The k order: lane (g, c) dequantizes the 16 code bytes at 16c of its
 * rows, as quant_gemm.cu does (pair p: columns c KL + 2p, +1). wgmma's A
 * layout wants lane c to hold columns 16i + 2c, +1 (a0, a1) and
 * 16i + 8 + 2c, +1 (a2, a3) of step i, in column order, because x is
 * staged in column order (16-byte cp.async, as the tensor cores read it).
 * So the four lanes of a quad transpose their pairs in 4 x 4 blocks
 * (gw_quad_transpose: four shuffles per four words): afterwards pair
 * 4q + s of lane c is lane s's pair 4q + c, columns s KL + 8q + 2c.
 * A first version permuted x's columns instead, in 4-byte cp.async
 * pieces: int8 at 2048 tokens ran at 210 TFLOP/s against 330 with this
 * (lab-qgemv table 3, before the overlap below).
 *
 * Per chunk a warp dequantizes its two rows' 16 bytes each into one of
 * two register buffers, waits for the previous chunk's MMAs (QG_CHUNK:
 * adds their partial sums times the rows' scales into the accumulators),
 * then issues this chunk's CK / 16 MMAs (QG_CHUNK: into a partial sum
 * that starts at zero) without waiting for them. Waiting for each chunk's
 * MMAs at once instead ran int8 at 2048 tokens at 330 TFLOP/s against
 * 400.
 *
 * ptxas serializes the MMAs within a chunk (its C7513 note at build
 * time): it builds every step's A quad in one set of registers, so each
 * MMA waits for the one before, and only a chunk's last MMA overlaps what
 * follows. A version it did not serialize (each step's quad its own
 * registers, kept alive past the wait by a real read) was measured and
 * was slower: 92 registers instead of 77, two blocks an SM instead of
 * three, int8 at 2048 tokens 358-375 TFLOP/s, the four int8 projections
 * at 256 tokens 344 us against 323 (bench/results/2026-11-29-nvidia-
 * h200-qgemm-wgmma/unserialized/). What holds this kernel back is not
 * its tensor work.
 *
 * The SS shapes (gw_shape's SS, variants 14 and 15) take neither the
 * transpose nor the serialization: each warp stores its dequantized
 * units into its warpgroup's A tile in shared memory (gw_dequant_ss),
 * two tiles a warpgroup by chunk parity, and the MMAs read A from there
 * (gw_issue_ss). The four projections of the 7B ran 1-4% faster than on
 * the register-A shapes on an H200, but they too lose to the mma.sync
 * kernel at 64 tokens; the start-up tuning (quant_tune.cu) takes them
 * where they win (bench/results/2026-12-01-nvidia-h200-qgemm-tune/).
 */
#include "kernels/quant_gemm.cuh"
#include "kernels/wgmma.cuh"

namespace {

constexpr int kGwThreads = 256; /* two warpgroups */
constexpr int kGwRows = 128;    /* rows of W a block */

/* Bytes of a stage: x (BN token rows of CK columns, 64-column slabs of
 * 128-byte rows, BN x 128 bytes a slab) then W (128 rows x 64 bytes);
 * both multiples of 1024, so every slab stays 1024-aligned. */
template <int FMT, int BN> struct gw_geom {
	static constexpr int CK = qm_geom<FMT>::CK, KL = qm_geom<FMT>::KL;
	static constexpr int STEPS = CK / 16; /* MMAs a chunk */
	static constexpr int UNITS = CK / 8;  /* 16-byte x units a token row */
	static constexpr int X_BYTES = BN * CK * 2;
	static constexpr int STAGE = X_BYTES + kGwRows * QM_CHUNK_BYTES;
};

/* Bytes of one warpgroup's dequantized chunk (SS shapes): 64 rows x CK
 * columns of T, 64-column slabs of 128-byte rows in the 128-byte swizzle. */
template <int FMT> constexpr int gw_a_bytes()
{
	return 64 * qm_geom<FMT>::CK * 2;
}

/* The block shapes by variant (KERN_QGW_FIRST + i). SS: the codes
 * dequantized into shared memory, two buffers a warpgroup after the
 * stages, and A read from there (qgw_ss_kernel). */
template <int BN_, int STAGES_, int MINB_, bool SS_ = false> struct gw_shape {
	static constexpr int BN = BN_, STAGES = STAGES_, MINB = MINB_;
	static constexpr bool SS = SS_;
};
typedef gw_shape<64, 4, 1> gw_v0;
typedef gw_shape<128, 4, 1> gw_v1;
typedef gw_shape<64, 6, 1> gw_v2;
typedef gw_shape<64, 4, 1, true> gw_v3;
typedef gw_shape<128, 3, 1, true> gw_v4;

template <int FMT, typename S> constexpr int gw_smem()
{
	return 1024 + S::STAGES * gw_geom<FMT, S::BN>::STAGE + (S::SS ? 4 * gw_a_bytes<FMT>() : 0);
}

/* Chunk cu of W (W_PART) and / or x (X_PART) into stage st; zeros past
 * the ends (products with them are 0). */
template <typename T, int FMT, int BN, bool W_PART, bool X_PART>
__device__ __forceinline__ void gw_load(const qgemm_args &a, const T *x, uint8_t *st, int cu,
					int row0, int tok0)
{
	using G = gw_geom<FMT, BN>;
	if constexpr (W_PART) {
#pragma unroll
		for (int k = 0; k < kGwRows * 4 / kGwThreads; k++) {
			const int i = threadIdx.x + k * kGwThreads;
			const int r = i >> 2, u = i & 3, row = row0 + r;
			const int byte = cu * QM_CHUNK_BYTES + 16 * u;
			const bool ok = row < a.rows && byte < a.row_bytes;
			const uint8_t *src = ok ? a.w + (size_t)row * a.row_bytes + byte : a.w;
			cp_async16(st + G::X_BYTES + r * QM_CHUNK_BYTES + 16 * u, src, ok);
		}
	}
	if constexpr (X_PART) {
		static_assert(BN * G::UNITS % kGwThreads == 0, "whole x rounds");
#pragma unroll
		for (int k = 0; k < BN * G::UNITS / kGwThreads; k++) {
			const int i = threadIdx.x + k * kGwThreads;
			const int t = i / G::UNITS, u = i % G::UNITS, tok = tok0 + t;
			const int col = cu * G::CK + 8 * u;
			const bool ok = tok < a.n && col < a.cols;
			const T *src = ok ? x + (size_t)tok * a.cols + col : x;
			uint8_t *dst = st + (u >> 3) * BN * 128 + t * 128 + (((u & 7) ^ (t & 7)) << 4);
			cp_async16(dst, src, ok);
		}
	}
}

/* Four words of each lane of a quad (c = lane % 4) transposed: lane c's
 * v[s] becomes lane s's v[c]. Two rounds of exchanges across lane bits 1
 * and 0, half of the words each. */
__device__ __forceinline__ void gw_quad_transpose(uint32_t &v0, uint32_t &v1, uint32_t &v2,
						  uint32_t &v3, int c)
{
	const bool b1 = c & 2, b0 = c & 1;
	uint32_t s0 = b1 ? v0 : v2, s1 = b1 ? v1 : v3;
	uint32_t r0 = __shfl_xor_sync(0xffffffffu, s0, 2), r1 = __shfl_xor_sync(0xffffffffu, s1, 2);
	if (b1) {
		v0 = r0;
		v1 = r1;
	} else {
		v2 = r0;
		v3 = r1;
	}
	s0 = b0 ? v0 : v1;
	s1 = b0 ? v2 : v3;
	r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
	r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
	if (b0) {
		v0 = r0;
		v2 = r1;
	} else {
		v1 = r0;
		v3 = r1;
	}
}

template <typename T, int BN>
__device__ __forceinline__ void gw_mma(float (&d)[BN / 2], const uint32_t (&af)[4], uint64_t db,
				       int accumulate)
{
	if constexpr (BN == 64)
		kern_wgmma_rs_n64<T>(d, af, db, accumulate);
	else
		kern_wgmma_rs_n128<T>(d, af, db, accumulate);
}

/* The lane's accumulators (rows r_lo = row_w + g and r_lo + 8; n8 tile j:
 * d[4j + e], tokens 8j + 2c + (e & 1), row r_lo + 8 (e >> 1)) to out or
 * the split's partials; per-row scales first (QG_ROW). */
template <typename T, int GM, int BN>
__device__ __forceinline__ void gw_store(const qgemm_args &a, const float (&acc)[BN / 2],
					 int row_w, int tok0, int g, int c)
{
#pragma unroll
	for (int h2 = 0; h2 < 2; h2++) {
		const int row = row_w + 8 * h2 + g;
		if (row >= a.rows)
			continue;
		const float s = GM == QG_ROW ? q_scale(a.scales, row, a.scale_f16) : 1.0f;
#pragma unroll
		for (int j = 0; j < BN / 8; j++)
#pragma unroll
			for (int e = 0; e < 2; e++)
				qm_put<T>(a, tok0 + 8 * j + 2 * c + e, row, s * acc[4 * j + 2 * h2 + e]);
	}
}

/* A warp's rows' codes of one chunk, dequantized into A registers:
 * f[h2][4q + s] holds columns s KL + 8q + 2c, +1 of row wrow + 8 h2 + g. */
template <typename T, int FMT, int GM, int NP>
__device__ __forceinline__ void gw_dequant(const uint8_t *sw, const qm_meta<FMT, GM, 1> &m,
					   int wrow, int g, int c, uint32_t (&f)[2][NP])
{
#pragma unroll
	for (int h2 = 0; h2 < 2; h2++) {
		const uint4 raw =
			*reinterpret_cast<const uint4 *>(sw + (wrow + 8 * h2 + g) * QM_CHUNK_BYTES + 16 * c);
		if constexpr (FMT == KERN_Q_INT4)
			q_dequant16<T, FMT>(raw, f[h2], q_zsub<T>(m.z[0][h2]));
		else
			q_dequant16<T, FMT>(raw, f[h2], 0);
#pragma unroll
		for (int q = 0; q < NP / 4; q++)
			gw_quad_transpose(f[h2][4 * q], f[h2][4 * q + 1], f[h2][4 * q + 2],
					  f[h2][4 * q + 3], c);
	}
}

/* The chunk's MMAs, issued and committed, not waited for: QG_CHUNK into
 * tmp (from zero), else into acc. Step i takes columns 16i + 2c (a0, a1)
 * and 16i + 8 + 2c (a2, a3). */
template <typename T, int FMT, int GM, int BN, int NP>
__device__ __forceinline__ void gw_issue(uint32_t x_addr, const uint32_t (&f)[2][NP],
					 float (&acc)[BN / 2], float (&tmp)[BN / 2])
{
	using G = gw_geom<FMT, BN>;
	constexpr int SPL = G::KL / 16; /* steps a lane's 16 bytes span */
	kern_wgmma_fence();
#pragma unroll
	for (int i = 0; i < G::STEPS; i++) {
		const int sl = i / SPL, q = 2 * (i % SPL);
		const uint32_t af[4] = {f[0][4 * q + sl], f[1][4 * q + sl], f[0][4 * q + 4 + sl],
					f[1][4 * q + 4 + sl]};
		const uint64_t db =
			kern_wgmma_desc(x_addr + (i >> 2) * BN * 128 + (i & 3) * 32, 16, 1024);
		if constexpr (GM == QG_CHUNK)
			gw_mma<T, BN>(tmp, af, db, i > 0);
		else
			gw_mma<T, BN>(acc, af, db, 1);
	}
	kern_wgmma_commit();
}

/* Until the MMAs in flight are done (their A registers `busy` stay
 * untouched until then); QG_CHUNK: their partial sums, times the rows'
 * scales sc, into acc. */
template <int GM, int BN>
__device__ __forceinline__ void gw_retire_acc(float (&acc)[BN / 2], float (&tmp)[BN / 2],
					      const float (&sc)[2])
{
	kern_wgmma_wait<0>();
	kern_wgmma_pin(acc);
	if constexpr (GM == QG_CHUNK) {
		kern_wgmma_pin(tmp);
#pragma unroll
		for (int j = 0; j < BN / 8; j++) {
			acc[4 * j] += sc[0] * tmp[4 * j];
			acc[4 * j + 1] += sc[0] * tmp[4 * j + 1];
			acc[4 * j + 2] += sc[1] * tmp[4 * j + 2];
			acc[4 * j + 3] += sc[1] * tmp[4 * j + 3];
		}
	}
}

template <int GM, int BN, int NP>
__device__ __forceinline__ void gw_retire(float (&acc)[BN / 2], float (&tmp)[BN / 2],
					  uint32_t (&busy)[2][NP], const float (&sc)[2])
{
	gw_retire_acc<GM, BN>(acc, tmp, sc);
#pragma unroll
	for (int h2 = 0; h2 < 2; h2++)
		kern_wgmma_pin(busy[h2]);
}

/* ---- SS shapes: A dequantized into shared memory ---- */

template <typename T, int BN>
__device__ __forceinline__ void gw_mma_ss(float (&d)[BN / 2], uint64_t da, uint64_t db,
					  int accumulate)
{
	if constexpr (BN == 64)
		kern_wgmma_ss_n64<T>(d, da, db, accumulate);
	else
		kern_wgmma_ss_n128<T>(d, da, db, accumulate);
}

/* A warp's rows' codes of one chunk, dequantized into the warpgroup's A
 * tile sa (rows lrow, lrow + 8 of it): lane c's pairs are columns c KL ..
 * c KL + KL - 1 in order, so each 8 of them is one 16-byte unit of the
 * K-major tile, stored as it is. No exchange between lanes (the RS
 * shapes' gw_quad_transpose). Units 4c + j of int4 (two slabs of 64
 * columns) put lanes c and c + 2 on the same banks: two-way conflicts
 * on its stores; int8's are free of them. */
template <typename T, int FMT, int GM, int NP>
__device__ __forceinline__ void gw_dequant_ss(const uint8_t *sw, const qm_meta<FMT, GM, 1> &m,
					      int wrow, int lrow, int g, int c, uint8_t *sa)
{
	constexpr int NU = qm_geom<FMT>::NU;
#pragma unroll
	for (int h2 = 0; h2 < 2; h2++) {
		const uint4 raw =
			*reinterpret_cast<const uint4 *>(sw + (wrow + 8 * h2 + g) * QM_CHUNK_BYTES + 16 * c);
		uint32_t f[NP];
		if constexpr (FMT == KERN_Q_INT4)
			q_dequant16<T, FMT>(raw, f, q_zsub<T>(m.z[0][h2]));
		else
			q_dequant16<T, FMT>(raw, f, 0);
#pragma unroll
		for (int j = 0; j < NU; j++)
			*reinterpret_cast<uint4 *>(sa + kern_sw128_off(lrow + 8 * h2, c * NU + j, 64)) =
				make_uint4(f[4 * j], f[4 * j + 1], f[4 * j + 2], f[4 * j + 3]);
	}
}

/* The chunk's MMAs on the warpgroup's A tile at a_addr and x at x_addr,
 * issued and committed, not waited for (gw_issue's contract). */
template <typename T, int FMT, int GM, int BN>
__device__ __forceinline__ void gw_issue_ss(uint32_t x_addr, uint32_t a_addr,
					    float (&acc)[BN / 2], float (&tmp)[BN / 2])
{
	using G = gw_geom<FMT, BN>;
	kern_wgmma_fence();
#pragma unroll
	for (int i = 0; i < G::STEPS; i++) {
		const uint64_t da = kern_wgmma_desc(a_addr + (i >> 2) * 64 * 128 + (i & 3) * 32, 16, 1024);
		const uint64_t db =
			kern_wgmma_desc(x_addr + (i >> 2) * BN * 128 + (i & 3) * 32, 16, 1024);
		if constexpr (GM == QG_CHUNK)
			gw_mma_ss<T, BN>(tmp, da, db, i > 0);
		else
			gw_mma_ss<T, BN>(acc, da, db, 1);
	}
	kern_wgmma_commit();
}

/* The 128 threads of warpgroup wg (named barrier 1 + wg; 0 is
 * __syncthreads'). */
__device__ __forceinline__ void gw_bar_wg(int wg)
{
	/* immediate ids: a register id makes ptxas reserve all 16 */
	if (wg == 0)
		asm volatile("bar.sync 1, 128;\n" ::: "memory");
	else
		asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

/*
 * One block: rows [128 blockIdx.y, +128), tokens [BN blockIdx.x, +BN),
 * chunks [chunks_per_split blockIdx.z, +chunks_per_split). STAGES - 2
 * chunks' copies in flight (W's first ones before the PDL wait); each
 * thread fences its copies into the async proxy before the barrier that
 * publishes them. Chunk k's MMAs run while the block waits for chunk
 * k + 1, copies chunk k + STAGES - 1 into the stage chunk k - 1 used
 * (retired before this barrier) and dequantizes chunk k + 1 into the
 * other register buffer; then they are retired and k + 1's issued.
 */
template <typename T, int FMT, int GM, typename S>
__global__ void __launch_bounds__(kGwThreads, S::MINB) qgw_kernel(const T *x, qgemm_args a)
{
#ifdef KERN_HAVE_WGMMA
	using G = gw_geom<FMT, S::BN>;
	constexpr int BN = S::BN, STAGES = S::STAGES, NP = G::KL / 2;
	static_assert(STAGES >= 3, "a stage for the MMAs in flight");
	extern __shared__ uint4 gw_smem_raw[];
	uint8_t *base = (uint8_t *)(((uintptr_t)gw_smem_raw + 1023) & ~(uintptr_t)1023);
	const uint32_t base_a = (uint32_t)__cvta_generic_to_shared(base);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int g = lane >> 2, c = lane & 3, wrow = 16 * warp;
	const int row0 = blockIdx.y * kGwRows, tok0 = blockIdx.x * BN;
	const int ch_begin = blockIdx.z * a.chunks_per_split;
	const int ch_end = min(a.n_chunk, ch_begin + a.chunks_per_split);
	const int nk = ch_end - ch_begin;
	const unsigned lg = GM == QG_CHUNK ? __ffs(a.group / G::CK) - 1 : 0;
	int rr[1][2]; /* the lane's rows, clamped: rows past the end read row 0 */
#pragma unroll
	for (int h2 = 0; h2 < 2; h2++) {
		const int row = row0 + wrow + 8 * h2 + g;
		rr[0][h2] = row < a.rows ? row : 0;
	}
	auto stage = [&](int s) { return base + s * G::STAGE; };
	/* SS: the warpgroup's two A tiles after the stages, and the lane's
	 * first row in them */
	constexpr int AB = gw_a_bytes<FMT>();
	const int a_off = STAGES * G::STAGE + 2 * (warp >> 2) * AB, lrow = 16 * (warp & 3) + g;
	uint8_t *a_tile = base + a_off;
	const uint32_t a_tile_a = base_a + a_off;

#pragma unroll
	for (int s = 0; s < STAGES - 2; s++)
		if (s < nk)
			gw_load<T, FMT, BN, true, false>(a, x, stage(s), ch_begin + s, row0, tok0);
	qm_meta<FMT, GM, 1> next;
	qm_fetch_meta<FMT, GM, 1>(a, next, ch_begin, ch_end, rr, c, lg);
	kern_pdl_wait();
#pragma unroll
	for (int s = 0; s < STAGES - 2; s++) {
		if (s < nk)
			gw_load<T, FMT, BN, false, true>(a, x, stage(s), ch_begin + s, row0, tok0);
		cp_async_commit();
	}
	float acc[BN / 2], tmp[BN / 2], sc[2] = {0.f, 0.f};
#pragma unroll
	for (int j = 0; j < BN / 2; j++)
		acc[j] = tmp[j] = 0;
	uint32_t f[2][2][NP]; /* [register buffer][row g, g + 8][pair] */
	/* chunk k with register buffer B (k's parity, a constant) */
	auto chunk = [&](auto B, int k) {
		[[maybe_unused]] constexpr int b = decltype(B)::value; /* RS shapes */
		cp_async_wait<STAGES - 3>();
		kern_fence_proxy_async();
		__syncthreads();
		const int ld = k + STAGES - 2;
		if (ld < nk)
			gw_load<T, FMT, BN, true, true>(a, x, stage(ld % STAGES), ch_begin + ld, row0,
							tok0);
		cp_async_commit();
		const qm_meta<FMT, GM, 1> cur = next;
		if (k + 1 < nk)
			qm_fetch_meta<FMT, GM, 1>(a, next, ch_begin + k + 1, ch_end, rr, c, lg);
		const int s = k % STAGES;
		if constexpr (S::SS) {
			gw_dequant_ss<T, FMT, GM, NP>(stage(s) + G::X_BYTES, cur, wrow, lrow, g, c,
						      a_tile + (k & 1) * AB);
			kern_fence_proxy_async();
			gw_bar_wg(warp >> 2);
			gw_retire_acc<GM, BN>(acc, tmp, sc);
		} else {
			gw_dequant<T, FMT, GM, NP>(stage(s) + G::X_BYTES, cur, wrow, g, c, f[b]);
			gw_retire<GM, BN, NP>(acc, tmp, f[b ^ 1], sc);
		}
		if constexpr (GM == QG_CHUNK) {
			sc[0] = q_scale_of(cur.s[0][0][0], a.scale_f16);
			sc[1] = q_scale_of(cur.s[0][1][0], a.scale_f16);
		}
		if constexpr (S::SS)
			gw_issue_ss<T, FMT, GM, BN>(base_a + s * G::STAGE,
						    a_tile_a + (k & 1) * AB, acc, tmp);
		else
			gw_issue<T, FMT, GM, BN, NP>(base_a + s * G::STAGE, f[b], acc, tmp);
	};
	if constexpr (S::SS) {
		/* A tiles by k's parity at run time: one body. Every split has
		 * a chunk (qm_launch_grid), and a loop that could run no times
		 * left ptxas a path where zeroed accumulators meet MMAs in
		 * flight, and it serialized every MMA (its C7515) */
		int k = 0;
		do
			chunk(std::integral_constant<int, 0>(), k);
		while (++k < nk);
	} else {
		for (int k = 0; k < nk; k += 2) {
			chunk(std::integral_constant<int, 0>(), k);
			if (k + 1 < nk)
				chunk(std::integral_constant<int, 1>(), k + 1);
		}
	}
	if constexpr (S::SS) {
		gw_retire_acc<GM, BN>(acc, tmp, sc);
	} else {
		gw_retire<GM, BN, NP>(acc, tmp, f[0], sc); /* both buffers idle after it */
#pragma unroll
		for (int h2 = 0; h2 < 2; h2++)
			kern_wgmma_pin(f[1][h2]);
	}
	cp_async_wait<0>();
	kern_pdl_launch_next();
	gw_store<T, GM, BN>(a, acc, row0 + wrow, tok0, g, c);
#endif
}

template <typename T, int FMT, int GM, typename S> struct gw_resident {
	static int per_sm;
};
template <typename T, int FMT, int GM, typename S> int gw_resident<T, FMT, GM, S>::per_sm;

template <typename T, int FMT, int GM, typename S> int gw_init_one()
{
	auto kernel = qgw_kernel<T, FMT, GM, S>;
	CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
				      gw_smem<FMT, S>()));
	CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&gw_resident<T, FMT, GM, S>::per_sm,
							       kernel, kGwThreads, gw_smem<FMT, S>()));
	return SL_OK;
}

template <typename T, int FMT, int GM> int gw_init_shapes()
{
	TRY((gw_init_one<T, FMT, GM, gw_v0>()));
	TRY((gw_init_one<T, FMT, GM, gw_v1>()));
	TRY((gw_init_one<T, FMT, GM, gw_v2>()));
	TRY((gw_init_one<T, FMT, GM, gw_v3>()));
	return gw_init_one<T, FMT, GM, gw_v4>();
}

template <typename T> int gw_init_dt()
{
	TRY((gw_init_shapes<T, KERN_Q_INT8, QG_ROW>()));
	TRY((gw_init_shapes<T, KERN_Q_INT8, QG_CHUNK>()));
	TRY((gw_init_shapes<T, KERN_Q_FP8, QG_ROW>()));
	return gw_init_shapes<T, KERN_Q_INT4, QG_CHUNK>();
}

template <typename T, int FMT, int GM, typename S>
int gw_launch(const kern_qgemm_ctx *ctx, const qgemm_args &a, const T *x)
{
	return qm_launch_grid<T>(ctx, a, x, qgw_kernel<T, FMT, GM, S>, kGwRows, S::BN, kGwThreads,
				 gw_smem<FMT, S>(), gw_resident<T, FMT, GM, S>::per_sm);
}

template <typename T, int FMT, int GM>
int gw_shapes(const kern_qgemm_ctx *ctx, const qgemm_args &a, const T *x, int variant)
{
	switch (variant - KERN_QGW_FIRST) {
	case 0: return gw_launch<T, FMT, GM, gw_v0>(ctx, a, x);
	case 1: return gw_launch<T, FMT, GM, gw_v1>(ctx, a, x);
	case 2: return gw_launch<T, FMT, GM, gw_v2>(ctx, a, x);
	case 3: return gw_launch<T, FMT, GM, gw_v3>(ctx, a, x);
	case 4: return gw_launch<T, FMT, GM, gw_v4>(ctx, a, x);
	}
	return SL_ENOTSUP;
}

template <typename T>
int gw_dispatch(const kern_qgemm_ctx *ctx, const qgemm_args &a, const void *x, int format, int gm,
		int variant)
{
	const T *xt = (const T *)x;
	if (format == KERN_Q_INT8 && gm == QG_ROW)
		return gw_shapes<T, KERN_Q_INT8, QG_ROW>(ctx, a, xt, variant);
	if (format == KERN_Q_INT8 && gm == QG_CHUNK)
		return gw_shapes<T, KERN_Q_INT8, QG_CHUNK>(ctx, a, xt, variant);
	if (format == KERN_Q_FP8 && gm == QG_ROW)
		return gw_shapes<T, KERN_Q_FP8, QG_ROW>(ctx, a, xt, variant);
	if (format == KERN_Q_INT4 && gm == QG_CHUNK)
		return gw_shapes<T, KERN_Q_INT4, QG_CHUNK>(ctx, a, xt, variant);
	return SL_ENOTSUP;
}

} /* namespace */

int kern_qgw_init(int *usable)
{
	*usable = 0;
	if (!kern_wgmma_usable(qgw_kernel<__half, KERN_Q_INT8, QG_ROW, gw_v0>))
		return SL_OK;
	TRY(gw_init_dt<__half>());
	TRY(gw_init_dt<__nv_bfloat16>());
	*usable = 1;
	return SL_OK;
}

bool kern_qgw_takes(int gm)
{
	return gm == QG_ROW || gm == QG_CHUNK;
}

const char *kern_qgw_variant_name(int variant)
{
	static const char *const names[KERN_QGW_VARIANTS] = {
		"wgmma 64t 4st", "wgmma 128t 4st", "wgmma 64t 6st", "wgmma ss 64t 4st",
		"wgmma ss 128t 3st"};
	const int i = variant - KERN_QGW_FIRST;
	return i >= 0 && i < KERN_QGW_VARIANTS ? names[i] : "?";
}

int kern_qgw_run(const kern_qgemm_ctx *ctx, const qgemm_args &a, const void *x, sl_dtype x_dt,
		 int format, int gm, int variant)
{
	KERN_DISPATCH_DT(x_dt, gw_dispatch, ctx, a, x, format, gm, variant);
}
