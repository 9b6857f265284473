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
 * SWIGLU and ROPE may also take their input unnormalized (pre_res set),
 * in place of the norm kernel that would run between the residual add and
 * the projection: x [n, cols] is then RMSNorm(pre_res) * pre_w, which each
 * warp of the GEMV computes for its own columns into shared memory as it
 * starts (rmsnorm.cu's formula, v * inv * w rounded once), 1 / rms from
 * the row's sum of squares in parts: pre_ss [part, n], pre_parts of them,
 * summed in order. x itself is not read. The add before it
 * (KERN_EPI_ADD: residual += the product, rounded to the run dtype as
 * ADD_NORM's add) leaves those parts when sumsq is set: block t's rows'
 * squares of the updated residual at sumsq[t * n + tok]. The parts sum in
 * another order than rmsnorm.cu's, so an element may differ in its last
 * bit from the unfused chain. Both are for the run-dtype GEMV
 * (matmul.cu); the quantized one refuses them (quant.cu says why).
 *
 * A call that cannot fuse (too many tokens for the GEMV, a shape that
 * splits the columns across blocks) says so and launches nothing; the
 * caller then runs the unfused pair (node/backend_cuda.c).
 */
#ifndef KERN_EPILOGUE_H
#define KERN_EPILOGUE_H

#include <stddef.h>
#include <stdint.h>

/* A GEMV takes its input unnormalized for up to KERN_PRE_MAX_TOKENS
 * tokens and KERN_PRE_SMEM bytes of shared memory, 6 a column and token
 * at fp16 (x, and the fp32 residual staged): one token of a 4096-wide
 * model, two of a 2048-wide one. The GEMV's carveout is sized for it
 * (kern_gemv_l1). */
#define KERN_PRE_MAX_TOKENS 2
#define KERN_PRE_SMEM (24 * 1024)

typedef enum {
	KERN_EPI_STORE = 0,    /* out = the product (no fusion) */
	KERN_EPI_SWIGLU = 1,
	KERN_EPI_ADD_NORM = 2,
	KERN_EPI_ROPE = 3,
	KERN_EPI_ADD = 4, /* residual += the product; sumsq: its parts (below) */
} kern_epi_kind;

typedef struct kern_epi {
	int kind;           /* kern_epi_kind */
	float *residual;    /* ADD_NORM, ADD: [n, rows] fp32, updated in place */
	float *sumsq;       /* ADD: [tiles, n] parts of the sums of squares, or NULL */
	const void *norm_w; /* ADD_NORM: [rows] in the run dtype, or NULL: the add only */
	void *norm_out;     /* ADD_NORM: [n, rows] in the run dtype */
	float eps;          /* ADD_NORM: RMSNorm's epsilon */
	/* ROPE (kernels/rope.h, device pointers): rows = (n_heads + 2 *
	 * n_kv_heads) * head_dim, head_dim a multiple of 16 */
	const int32_t *positions, *slots; /* [n] */
	void *k_cache, *v_cache;          /* the layer's paged K and V, run dtype or E4M3 */
	const float *inv_freq;            /* [head_dim / 2] */
	int n_heads, n_kv_heads, head_dim, block_tokens, kv_fp8;
	/* SWIGLU, ROPE (device pointers): the input normalized as it starts */
	const float *pre_res; /* [n, cols] fp32, or NULL: x is the input */
	const void *pre_w;    /* [cols] in the run dtype */
	const float *pre_ss;  /* [pre_parts, n]: parts of each row's sum of squares */
	int pre_parts;
	float pre_eps;
} kern_epi;

/* Whether n tokens of cols columns in a dtype of es bytes fit the GEMV's
 * normalized input (the rule above): the caller that leaves the norm and
 * the GEMV that takes it ask the same question. */
static inline int kern_pre_fits(int n, int cols, size_t es)
{
	return n <= KERN_PRE_MAX_TOKENS && (size_t)n * cols * (es + 4) <= KERN_PRE_SMEM;
}

#endif
