/*
 * quant_split.cu — int8 weights (per-row scales) on the int8 tensor cores
 * with x kept to 15 bits (KERN_QPATH_INT8_SPLIT; semantics in quant.h,
 * kern_qmatmul_int8_split_cpu).
 *
 * Why: at 64 to 256 tokens the dequantizing GEMMs (quant_gemm.cu,
 * quant_gemm_wgmma.cu) run at 250-420 TFLOP/s where cuBLAS's fp16 GEMM
 * runs near 700, so int8 weights decoded slower than fp16 from batch 64
 * up (bench/results/2026-11-30-nvidia-h200-x2-test-gpu/quant-b256). The
 * int8 tensor cores run at twice fp16's rate, but x in int8 alone costs
 * SmolLM2 about 1.3% more perplexity than the weight-only int8 (CPU,
 * 1024 tokens: +1.60% against +0.35%), past int8's +1% bound. So x keeps
 * 15 bits: per token q = round(x / s), s = max|x| / 16383, cut into two
 * int8 slices q = 256 h + l (h in [-64, 64], l in [-128, 127]) that
 * stand as 2n columns of one int8 GEMM (cuBLAS, int32 sums, exact): W is
 * read once and the tensor work is fp16's. A pass makes out = (256 D_h +
 * D_l) s_w s_x. x's rounding (at most s / 2 a value) is finer than fp16's
 * own for values above max|x| / 8; the int32 sums are exact where the
 * GEMMs sum in fp32. The idea is the Ozaki scheme's (wide products from
 * int8 slices on integer tensor cores).
 *
 * Buffers (the kern_qblas's): the slices [2n, cols] and scales [n], and
 * the int32 product [2n, rows of a slab] in the dequantization scratch:
 * W's rows go in slabs that fit it.
 *
 * Measured on an H200 (bench/results/2026-11-30-nvidia-h200-int8-split/):
 * the 7B int8 decode against the GEMM it replaces +2.8% / +5.9% / +3.2%
 * at batch 64 / 128 / 192, +0.3% at 32, -1.3% and -0.4% at 256 (two
 * calls): AUTO's range is 33-224 tokens (quant.h). What holds it back is
 * cuBLAS's int8 kernel: at 64 tokens it reads W at 1.6-2.8 TB/s, and at
 * 128-256 tokens the heuristic's first algorithm, the one cublasGemmEx
 * runs, is up to 45% slower than the best of the others it offers
 * (lab-qgemv table 11). Choosing among them needs timing each on the
 * shapes, outside the CUDA graph captures that make a decode step's first
 * calls; not done yet.
 */
#include <cublas_v2.h>
#include <float.h>

#include "kernels/cuda_util.cuh"
#include "kernels/quant_dequant.cuh"

namespace {

constexpr int kSplitThreads = 256;

/* x's 15-bit code v / s rounded to nearest even, in [-max, max]; h, l
 * its slices (arithmetic shift: h = floor((q + 128) / 256)). */
__device__ __forceinline__ void split_code(float v, float inv, int8_t *h, int8_t *l)
{
	int q = __float2int_rn(__fmul_rn(v, inv));
	q = max(-KERN_QSPLIT_MAX, min(KERN_QSPLIT_MAX, q));
	const int hi = (q + 128) >> 8;
	*h = (int8_t)hi;
	*l = (int8_t)(q - hi * 256);
}

/* One block per token: s[t] = max|x[t]| / KERN_QSPLIT_MAX, h slices to
 * xq[t], l slices to xq[n + t]. Reads x twice (the max, then the codes);
 * cols % 8 == 0. */
template <typename T>
__global__ void __launch_bounds__(kSplitThreads) split_kernel(int8_t *__restrict__ xq,
							      float *__restrict__ xs,
							      const T *__restrict__ x, int n,
							      int cols)
{
	const T *xr = x + (size_t)blockIdx.x * cols;
	int8_t *hq = xq + (size_t)blockIdx.x * cols, *lq = xq + (size_t)(n + blockIdx.x) * cols;
	constexpr int step = kSplitThreads * 8;
	float m = 0;
	for (int i = threadIdx.x * 8; i < cols; i += step) {
		float f[8];
		kern_load8(xr + i, f);
#pragma unroll
		for (int j = 0; j < 8; j++)
			m = fmaxf(m, fabsf(f[j]));
	}
	m = kern_block_max(m);
	const float sc = __fdiv_rn(m, (float)KERN_QSPLIT_MAX);
	if (threadIdx.x == 0)
		xs[blockIdx.x] = sc;
	const float inv = sc >= FLT_MIN ? __frcp_rn(sc) : 0.0f;
	for (int i = threadIdx.x * 8; i < cols; i += step) {
		float f[8];
		kern_load8(xr + i, f);
		int8_t h[8], l[8];
#pragma unroll
		for (int j = 0; j < 8; j++)
			split_code(f[j], inv, &h[j], &l[j]);
		*reinterpret_cast<uint2 *>(hq + i) = *reinterpret_cast<const uint2 *>(h);
		*reinterpret_cast<uint2 *>(lq + i) = *reinterpret_cast<const uint2 *>(l);
	}
}

/* A slab's product d ([2n][sr] int32: token t's h sums at t, its l sums
 * at n + t) to out[t, r0 + r] = (256 d_h + d_l) s_w[r0 + r] s_x[t], fp32
 * or T; the same operations, in the same order, as the CPU reference. */
template <typename T>
__global__ void combine_kernel(void *out, bool out_f32, const int32_t *__restrict__ d, int n,
			       int sr, int r0, int rows, const void *sw, bool sw_f16,
			       const float *__restrict__ xs)
{
	const size_t count = (size_t)n * sr, half = count;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x) {
		const int t = (int)(i / sr), r = (int)(i - (size_t)t * sr);
		const float sum = __fmaf_rn(256.0f, (float)d[i], (float)d[half + i]);
		const float v = __fmul_rn(__fmul_rn(sum, q_scale(sw, r0 + r, sw_f16)), xs[t]);
		const size_t o = (size_t)t * rows + r0 + r;
		if (out_f32)
			reinterpret_cast<float *>(out)[o] = v;
		else
			reinterpret_cast<T *>(out)[o] = kern_from_f32<T>(v);
	}
}

template <typename T>
int split_launch(int8_t *xq, float *xs, const void *x, int n, int cols, cudaStream_t st)
{
	split_kernel<T><<<n, kSplitThreads, 0, st>>>(xq, xs, (const T *)x, n, cols);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

template <typename T>
int combine_launch(void *out, bool out_f32, const int32_t *d, int n, int sr, int r0,
		   const kern_qweight *w, const float *xs, cudaStream_t st)
{
	const size_t count = (size_t)n * sr;
	const unsigned blocks = (unsigned)((count + 255) / 256 < 65535 ? (count + 255) / 256 : 65535);
	combine_kernel<T><<<blocks, 256, 0, st>>>(out, out_f32, d, n, sr, r0, w->rows, w->scales,
						  w->scale_dt == SL_DT_F16, xs);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}

/* Rows a slab takes: as many as the scratch holds for 2n int32 columns,
 * a multiple of 128 unless all of W fits. */
int slab_rows(const kern_qsplit_ctx *c, int rows, int n)
{
	const size_t per_row = sizeof(int32_t) * 2 * (size_t)n;
	size_t sr = c->scratch_bytes / per_row;
	if (sr >= (size_t)rows)
		return rows;
	return (int)(sr / 128 * 128);
}

} // namespace

bool kern_qsplit_takes(const kern_qweight *w)
{
	return w->format == KERN_Q_INT8 && w->group == 0 && w->cols % 16 == 0;
}

/* One slab of W's rows [r0, r0 + m): the int8 GEMM into the scratch, then
 * the pass into out. SL_ENOTSUP when cuBLAS refuses the product. */
static int run_slab(const kern_qsplit_ctx *c, const kern_qweight *w, void *out, bool out_f32,
		    sl_dtype x_dt, int n, int r0, int m)
{
	const int32_t one = 1, zero = 0;
	const int8_t *a = (const int8_t *)w->data + (size_t)r0 * w->cols;
	/* D [m, 2n] (column-major, ld m) = W's slab (op T of [cols, m]) x the slices */
	const cublasStatus_t st =
		cublasGemmEx((cublasHandle_t)c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, 2 * n, w->cols,
			     &one, a, CUDA_R_8I, w->cols, c->xq, CUDA_R_8I, w->cols, &zero, c->scratch,
			     CUDA_R_32I, m, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
	if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)
		return SL_ENOTSUP;
	if (st != CUBLAS_STATUS_SUCCESS)
		return sl_fail(SL_EDEVICE, "quant: int8 GEMM: %s", cublasGetStatusString(st));
	KERN_DISPATCH_DT(x_dt, combine_launch, out, out_f32, (const int32_t *)c->scratch, n, m, r0,
			 w, c->xs, c->stream);
}

int kern_qsplit_run(const kern_qsplit_ctx *c, const kern_qweight *w, void *out, bool out_f32,
		    const void *x, sl_dtype x_dt, int n)
{
	if (!kern_qsplit_takes(w) || n > c->max_tokens || w->cols > c->max_cols)
		return SL_ENOTSUP;
	const int sr = slab_rows(c, w->rows, n);
	if (sr < 1)
		return SL_ENOTSUP;
	int rc = SL_OK;
	switch (x_dt) {
	case SL_DT_F16: rc = split_launch<__half>(c->xq, c->xs, x, n, w->cols, c->stream); break;
	case SL_DT_BF16:
		rc = split_launch<__nv_bfloat16>(c->xq, c->xs, x, n, w->cols, c->stream);
		break;
	default: return SL_ENOTSUP;
	}
	for (int r0 = 0; rc == SL_OK && r0 < w->rows; r0 += sr) {
		rc = run_slab(c, w, out, out_f32, x_dt, n, r0, w->rows - r0 < sr ? w->rows - r0 : sr);
		if (rc == SL_ENOTSUP && r0) /* the first slab was taken: a refusal now is a failure */
			rc = sl_fail(SL_EDEVICE, "quant: int8 GEMM refused the slab at row %d", r0);
	}
	return rc;
}
