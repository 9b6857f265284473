/*
 * matmul.cu — the linear layer on cuBLAS: out[n, out_dim] = x[n, in_dim] @ W^T
 * with W row-major [out_dim, in_dim] (nn.Linear's layout), fp16/bf16
 * storage, fp32 accumulation (CUBLAS_COMPUTE_32F). kern_blas owns one
 * cuBLAS handle bound to the caller's stream and a workspace allocated once,
 * so no call here allocates device memory. Semantics: kernels/matmul.c.
 *
 * Row-major to cuBLAS's column-major: a row-major [r, c] matrix is a
 * column-major [c, r] one. So out^T [out_dim, n] = W [out_dim, in_dim] (W's
 * buffer read column-major is [in_dim, out_dim]: op T) times x^T [in_dim, n]
 * (x's buffer as is: op N), m = out_dim, n = n, k = in_dim.
 */
#include <cublas_v2.h>
#include <stdlib.h>

#include "cuda_util.cuh"
#include "matmul.h"

/* Hopper wants 32 MiB for its best kernels (cuBLAS docs, cublasSetWorkspace). */
#define BLAS_WORKSPACE_BYTES (32u << 20)

struct kern_blas {
	cublasHandle_t handle;
	void *workspace; /* device, BLAS_WORKSPACE_BYTES */
	cudaStream_t stream;
};

extern "C" void kern_blas_destroy(kern_blas *b)
{
	if (!b)
		return;
	if (b->handle)
		cublasDestroy(b->handle);
	if (b->workspace)
		cudaFree(b->workspace);
	free(b);
}

static int blas_init(kern_blas *b, void *stream)
{
	b->stream = kern_stream(stream);
	CUBLAS_TRY(cublasCreate(&b->handle));
	CUBLAS_TRY(cublasSetStream(b->handle, b->stream));
	CUDA_TRY(cudaMalloc(&b->workspace, BLAS_WORKSPACE_BYTES));
	CUBLAS_TRY(cublasSetWorkspace(b->handle, b->workspace, BLAS_WORKSPACE_BYTES));
	/* results must not depend on what else runs: no atomics-based split-K */
	CUBLAS_TRY(cublasSetAtomicsMode(b->handle, CUBLAS_ATOMICS_NOT_ALLOWED));
	return SL_OK;
}

extern "C" int kern_blas_create(void *stream, kern_blas **out)
{
	kern_blas *b = (kern_blas *)calloc(1, sizeof *b);
	if (!b)
		return SL_ENOMEM;
	int rc = blas_init(b, stream);
	if (rc) {
		kern_blas_destroy(b);
		return rc;
	}
	*out = b;
	return SL_OK;
}

/* f32_out: out is fp32, else dtype dt like x and w. */
static int gemm(kern_blas *b, void *out, bool f32_out, const void *x, const void *w, int n,
		int in_dim, int out_dim, sl_dtype dt)
{
	if (n <= 0 || out_dim <= 0)
		return SL_OK;
	cudaDataType in_type;
	switch (dt) {
	case SL_DT_F16: in_type = CUDA_R_16F; break;
	case SL_DT_BF16: in_type = CUDA_R_16BF; break;
	default:
		sl_log(SL_LOG_ERROR, "cublas", "matmul: unsupported dtype %s", sl_dtype_name(dt));
		return SL_ENOTSUP;
	}
	cudaDataType out_type = f32_out ? CUDA_R_32F : in_type;
	/*
	 * TODO(perf): batch-1 decode (n == 1, small n in general) is a GEMV and
	 * is bound by reading W once: the 7B target is >= 75% of HBM bandwidth.
	 * cuBLAS picks GEMV-like kernels for n == 1 that get close for large
	 * out_dim but not for every shape; a custom split-K GEMV goes here:
	 * one warp per output row (or 2-4 rows), 16-byte loads of W streaming
	 * along in_dim, x staged once in shared memory, fp32 accumulation and a
	 * warp reduction, split over in_dim with a second-pass reduction when
	 * out_dim alone cannot fill the SMs. Dispatch: if (n <= 4) gemv(...).
	 */
	const float alpha = 1.0f, beta = 0.0f;
	CUBLAS_TRY(cublasGemmEx(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, out_dim, n, in_dim, &alpha, w,
				in_type, in_dim, x, in_type, in_dim, &beta, out, out_type, out_dim,
				CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	return SL_OK;
}

extern "C" int kern_matmul_cuda(kern_blas *b, void *out, const void *x, const void *w, int n,
				int in_dim, int out_dim, sl_dtype dt)
{
	return gemm(b, out, false, x, w, n, in_dim, out_dim, dt);
}

/* As kern_matmul_cuda with an fp32 output: the LM head, whose logits feed
 * the fp32 softmax of the sampler without a round trip through fp16/bf16. */
extern "C" int kern_matmul_f32out_cuda(kern_blas *b, float *out, const void *x, const void *w,
				       int n, int in_dim, int out_dim, sl_dtype dt)
{
	return gemm(b, out, true, x, w, n, in_dim, out_dim, dt);
}
