/*
 * epilogue.h — what a decode GEMV may do with its product besides storing
 * it (kernels/matmul.cu, kernels/quant.cu): the small kernel that would
 * read the product next, folded into the projection that makes it, so a
 * decode step launches two kernels fewer per layer. Each kind's result is
 * the unfused pair's, from the product rounded to the run dtype:
 *
 *   KERN_EPI_SWIGLU: W's rows are [gate (hidden) | up (hidden)]; out
 *     [n, hidden] = silu(gate) * up, bit for bit what kern_silu_mul gives
 *     over the stored [n, 2 * hidden] product.
 *   KERN_EPI_ADD_NORM: residual [n, rows] (fp32) += the product, bit for bit
 *     as kern_add_rmsnorm's add; then, when norm_w is set, norm_out [n,
 *     rows] = RMSNorm(residual) * norm_w, computed by the grid's last block
 *     (its sum of squares runs in another order than rmsnorm.cu's, so it
 *     may differ from the unfused kernel in the last bit of 1/rms).
 *   KERN_EPI_ROPE: W's rows are the QKV projection's [q | k | v] heads;
 *     out [n, rows] = the product with q and k turned by RoPE, and k and v
 *     written at each token's cache slot (slot < 0: not written), bit for
 *     bit what kern_rope_kv_write_cuda does after the stored product.
 *
 * A call that cannot fuse (too many tokens for the GEMV, a shape that
 * splits the columns across blocks) says so and launches nothing; the
 * caller then runs the unfused pair (node/backend_cuda.c).
 */
#ifndef KERN_EPILOGUE_H
#define KERN_EPILOGUE_H

#include <stdint.h>

typedef enum {
	KERN_EPI_STORE = 0,    /* out = the product (no fusion) */
	KERN_EPI_SWIGLU = 1,
	KERN_EPI_ADD_NORM = 2,
	KERN_EPI_ROPE = 3,
} kern_epi_kind;

typedef struct kern_epi {
	int kind;           /* kern_epi_kind */
	float *residual;    /* ADD_NORM: [n, rows] fp32, updated in place */
	const void *norm_w; /* ADD_NORM: [rows] in the run dtype, or NULL: the add only */
	void *norm_out;     /* ADD_NORM: [n, rows] in the run dtype */
	float eps;          /* ADD_NORM: RMSNorm's epsilon */
	/* ROPE (kernels/rope.h, device pointers): rows = (n_heads + 2 *
	 * n_kv_heads) * head_dim, head_dim a multiple of 16 */
	const int32_t *positions, *slots; /* [n] */
	void *k_cache, *v_cache;          /* the layer's paged K and V, run dtype or E4M3 */
	const float *inv_freq;            /* [head_dim / 2] */
	int n_heads, n_kv_heads, head_dim, block_tokens, kv_fp8;
} kern_epi;

#endif
