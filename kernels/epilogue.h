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
 * SWIGLU and ROPE may also take their input not yet divided by its rms
 * (pre_ss set), in place of the norm kernel that would run between the
 * residual add and the projection: x [n, cols] then holds residual *
 * norm weight, rounded once to the run dtype, and the GEMV multiplies
 * each token's sums by 1 / rms before the epilogue's work, 1 / rms =
 * 1 / sqrtf(sum / cols + pre_eps) from the row's sum of squares in
 * parts: pre_ss [pre_parts, n]. The add before it (KERN_EPI_ADD:
 * residual += the product, rounded to the run dtype as ADD_NORM's add)
 * leaves both: with sumsq set, block t's rows' squares of the updated
 * residual at sumsq[t * n + tok]; with norm_out set, norm_out [n, rows] =
 * the updated residual * norm_w rounded to the run dtype. Against the
 * unfused chain (rmsnorm.cu's x = v * inv * w rounded, then the GEMV)
 * the rounding moves: x is rounded before the 1 / rms, and the parts sum
 * in another order, so results differ in the last bits. For fp16 runs
 * the product residual * weight must stay below 65504, as an fp16
 * residual stream would (a larger one saturates there).
 *
 *   KERN_EPI_ALLREDUCE_ADD: ADD at tp > 1, the row-parallel projection's
 *     all-reduce folded in (xchg below): each block rounds its tile of
 *     this rank's partial product to the run dtype, stores it into every
 *     peer's exchange area over peer memory, waits for every peer's
 *     partial of the same tile to arrive in its own, sums the ranks'
 *     partials in rank order in fp32, rounds once, and does ADD's work
 *     with that sum: bit for bit the one-shot all-reduce followed by the
 *     add (parallel/allreduce.h's par_car_allreduce_add_prenorm), with
 *     the sums of squares in parts of 16 rows as ADD leaves them. The
 *     blocks of one rank wait on the other ranks' blocks, so the grid must
 *     be resident at once: a call whose grid is not says so (below).
 *
 * A call that cannot fuse (too many tokens for the GEMV, a shape that
 * splits the columns across blocks) says so and launches nothing; the
 * caller then runs the unfused pair (node/backend_cuda.c).
 */
#ifndef KERN_EPILOGUE_H
#define KERN_EPILOGUE_H

#include <stddef.h>
#include <stdint.h>

/* A GEMV takes its input not yet divided by its rms for up to
 * KERN_PRE_MAX_TOKENS tokens whose parts of the sums of squares number
 * KERN_PRE_MAX_PARTS in all (n * pre_parts): each of its threads holds
 * at most four of them (the GEMVs run 4 warps or more), so the input
 * takes no shared memory and two registers. One or two tokens of a
 * 4096-wide model (256 parts each), one of an 8192-wide one. */
#define KERN_PRE_MAX_TOKENS 2
#define KERN_PRE_MAX_PARTS 512

/*
 * The exchange a KERN_EPI_ALLREDUCE_ADD GEMV talks through: every rank of
 * the tp group owns one area of KERN_XCHG_BYTES in device memory, mapped
 * into every peer (parallel/allreduce.c makes them with CUDA IPC):
 *
 *   [2 slots][KERN_XCHG_MAX_RANKS senders][KERN_XCHG_MAX_TILES][2 tokens][8]
 *   64-bit words: word g of tile t, token k, from rank p holds p's rounded
 *   partial of the tile's rows g (low 16 bits) and g + 8 (next 16), and
 *   in its high 32 bits the call's number. The data carries its own flag
 *   (NCCL's "LL" protocol): a reader polls the word until the number is
 *   the call's, and an aligned 64-bit store is seen whole or not at all,
 *   so no fence orders data before a flag.
 *
 * Call e of tile t writes slot e & 1; epoch[t] counts this rank's calls of
 * tile t (advanced by the kernel, so a replayed CUDA graph counts too).
 * The reasoning that two slots need no barrier at the end of a call is the
 * custom all-reduce's (parallel/allreduce.cu), per tile.
 */
#define KERN_XCHG_MAX_RANKS 8
#define KERN_XCHG_MAX_TILES 1024 /* projections of up to 16384 rows */
#define KERN_XCHG_BYTES ((size_t)2 * KERN_XCHG_MAX_RANKS * KERN_XCHG_MAX_TILES * 2 * 8 * 8)

/* A block that waits this long for a peer gives up: it records who it was
 * waiting for (kern_xchg_diag) and traps, so a broken group fails with a
 * reason instead of hanging. No correct run waits anywhere near this:
 * every rank enqueues the same calls within a step. */
#define KERN_XCHG_TIMEOUT_NS 20000000000ull

/* What a wait that timed out leaves (in mapped host memory, readable once
 * the trap has killed the context): who waited for whom, for what. */
typedef struct kern_xchg_diag {
	volatile uint32_t fired, rank, block, peer, seen, want;
} kern_xchg_diag;

typedef struct kern_xchg {
	char *area[KERN_XCHG_MAX_RANKS]; /* rank p's area as mapped in this process */
	uint32_t *epoch;                 /* [KERN_XCHG_MAX_TILES] this rank's calls, per tile */
	kern_xchg_diag *diag;            /* device view of the timeout record, or NULL */
	int rank, tp;                    /* tp 2..KERN_XCHG_MAX_RANKS */
} kern_xchg;

typedef enum {
	KERN_EPI_STORE = 0,    /* out = the product (no fusion) */
	KERN_EPI_SWIGLU = 1,
	KERN_EPI_ADD_NORM = 2,
	KERN_EPI_ROPE = 3,
	KERN_EPI_ADD = 4, /* residual += the product; sumsq: its parts (below) */
	KERN_EPI_ALLREDUCE_ADD = 5, /* ADD of the tp group's sum (xchg) */
} kern_epi_kind;

typedef struct kern_epi {
	int kind;           /* kern_epi_kind */
	float *residual;    /* ADD_NORM, ADD: [n, rows] fp32, updated in place */
	float *sumsq;       /* ADD: [tiles, n] parts of the sums of squares, or NULL */
	const void *norm_w; /* ADD_NORM, ADD: [rows] in the run dtype, or NULL: the add only */
	void *norm_out;     /* ADD_NORM, ADD: [n, rows] in the run dtype (ADD: not divided) */
	float eps;          /* ADD_NORM: RMSNorm's epsilon */
	/* ROPE (kernels/rope.h, device pointers): rows = (n_heads + 2 *
	 * n_kv_heads) * head_dim, head_dim a multiple of 16 */
	const int32_t *positions, *slots; /* [n] */
	void *k_cache, *v_cache;          /* the layer's paged K and V, run dtype or E4M3 */
	const float *inv_freq;            /* [head_dim / 2] */
	int n_heads, n_kv_heads, head_dim, block_tokens, kv_fp8;
	/* SWIGLU, ROPE (device pointer): the input not yet divided by its rms */
	const float *pre_ss; /* [pre_parts, n]: parts of each row's sum of squares, or NULL */
	int pre_parts;
	float pre_eps;
	kern_xchg xchg; /* ALLREDUCE_ADD: the group's exchange */
} kern_epi;

/* Whether n tokens of `parts` parts each fit the GEMV's input not yet
 * divided by its rms (the rule above): the caller that leaves the norm
 * and the GEMV that takes it ask the same question. */
static inline int kern_pre_fits(int n, int parts)
{
	return n >= 1 && n <= KERN_PRE_MAX_TOKENS && parts >= 1 && n * parts <= KERN_PRE_MAX_PARTS;
}

#endif
