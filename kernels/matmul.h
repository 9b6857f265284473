/*
 * matmul.h — the linear layer: out[n, out_dim] = x[n, in_dim] @ W^T with W
 * stored [out_dim, in_dim] row-major, as Hugging Face stores nn.Linear.
 */
#ifndef KERN_MATMUL_H
#define KERN_MATMUL_H
#ifdef __cplusplus
extern "C" {
#endif

/* The reference: one plain fp32 dot product per output. */
void kern_matmul_cpu(float *out, const float *x, const float *w, int n, int in_dim, int out_dim);
/* The same, vectorized and tiled (what the CPU backend runs): equal to the
 * reference but for fp32 summation order; each output depends only on its
 * x and W rows (bit-identical whatever n, thread count or CPU). */
void kern_matmul_cpu_fast(float *out, const float *x, const float *w, int n, int in_dim,
			  int out_dim);

#ifdef SL_HAVE_CUDA
#include "common/dtype.h"
#include "kernels/epilogue.h"
typedef struct kern_blas kern_blas;    /* cuBLAS handle + workspace */
int kern_blas_create(void *stream, kern_blas **out);
void kern_blas_destroy(kern_blas *b);
/* Launch the decode GEMV as a programmatic dependent (PDL) from now on, or
 * not (the default). Taken only on sm_90 and later; the CUDA backend sets
 * it once from SL_PDL. */
void kern_blas_set_pdl(kern_blas *b, int on);
/* The GEMV's warps a 16-row tile: 4 (the default) or 8; SL_GEMV_WARPS=4
 * or 8 in the environment overrides the caller. */
void kern_blas_set_gemv_warps(kern_blas *b, int warps);
int kern_blas_gemv_warps(const kern_blas *b);
/* out, x, w in dtype dt; fp32 accumulation. */
int kern_matmul_cuda(kern_blas *b, void *out, const void *x, const void *w, int n, int in_dim,
		     int out_dim, sl_dtype dt);
/* Same with fp32 output (the LM head: logits go to the fp32 sampler). */
int kern_matmul_f32out_cuda(kern_blas *b, float *out, const void *x, const void *w, int n,
			    int in_dim, int out_dim, sl_dtype dt);
/* acc [n, out_dim] fp32 += x @ W^T in one cuBLAS GEMM with beta 1 (x, w
 * in dt): a projection adding into the fp32 residual without a run-dtype
 * product in between. *done = 1 when it ran; 0 for a call the GEMV would
 * take (up to 8 tokens), with nothing launched. */
int kern_matmul_add_f32_cuda(kern_blas *b, float *acc, const void *x, const void *w, int n,
			     int in_dim, int out_dim, sl_dtype dt, int *done);
/* The decode GEMV with the next small kernel folded in (kernels/epilogue.h:
 * SwiGLU, residual add + RMSNorm). *fused = 1 when it ran; 0 when the call
 * is not one for the GEMV (more than 8 tokens, a small or unaligned
 * layer, columns split across blocks) or ADD_NORM has more than 2 tokens:
 * nothing was launched and the caller runs kern_matmul_cuda and the
 * unfused kernel. */
int kern_matmul_epi_cuda(kern_blas *b, void *out, const void *x, const void *w, int n,
			 int in_dim, int out_dim, sl_dtype dt, const kern_epi *epi, int *fused);
/* The GEMV of x by w (dt: F16 or BF16) with K cut into at most max_splits
 * slices, each slice's fp32 product kept apart: *parts [*splits][n]
 * [out_dim] in the kern_blas's workspace, valid until its next call, for
 * a consumer that sums them in order (kern_add_rmsnorm_parts_cuda). Each
 * slice whole rounds of the GEMV block's chunks. *splits 0, nothing
 * launched, where the GEMV would not take the call (more than 8 tokens, a
 * small or unaligned layer) or fewer than 2 slices fit the row. */
int kern_matmul_parts_cuda(kern_blas *b, const void *x, const void *w, int n, int in_dim,
			   int out_dim, sl_dtype dt, int max_splits, const float **parts,
			   int *splits);
#endif

#ifdef __cplusplus
}
#endif
#endif
