/*
 * quant.h — the linear layer with quantized weights:
 *     out[n, rows] = x[n, cols] @ W^T,   W = dequant(stored codes, scales)
 * W is [rows = out_dim, cols = in_dim], nn.Linear's layout, stored as small
 * integers or fp8 codes with scales. One op family: kernels/quant.c is the
 * CPU reference (fp32 math on exactly the stored values) and load-time
 * quantization; kernels/quant.cu the CUDA kernels. The node's loader (a
 * later change) fills kern_qweight per layer and rank; nothing here knows
 * about models.
 *
 * ## Formats (kern_qweight.format)
 *
 * KERN_Q_INT8: data int8 [rows, cols] row-major; weight = s * q.
 *   group 0: one scale per row (output channel); group 32, 64 or 128: one
 *   scale per (row, group of `group` consecutive columns), scales
 *   [rows, cols / group]. Scales fp32 or fp16 (scale_dt). Quantization is
 *   symmetric round-to-nearest with s = max|w| / 127 (q in -127..127; -128
 *   is accepted on input). GGUF Q8_0 (blocks of an fp16 d and 32 int8,
 *   value d * q) is this format with group 32 and fp16 scales, values and
 *   scales unchanged: kern_qweight_load_q8_0_rows copies them in.
 *   Per row or per group: RMS error relative to RMS weight over 4M
 *   random weights (tests/unit/kernels/test_quant.c prints them), one scale per
 *   row / per 128 / per 32: Gaussian 0.0086 / 0.0065 / 0.0053, Laplace
 *   0.0145 / 0.0089 / 0.0067, Student-t with 3 dof 0.0418 / 0.0137 /
 *   0.0084 (fp8 per row: 0.026 on all three). One outlier sets a whole
 *   row's step, a group's only its own. Groups of 128 cost 2 bytes per
 *   128 weights (1.6%) and a multiply-add per chunk; they also split along
 *   in_dim across tensor-parallel ranks with no full-row pass. docs/cuda.md
 *   has the choice.
 *
 * KERN_Q_FP8: data OCP fp8 E4M3 codes (CUDA's __nv_fp8_e4m3: bias 7, no
 *   infinities, S.1111.111 is NaN, largest finite 448) [rows, cols];
 *   weight = s * e4m3(code), s fp32 per row (group 0, scale_dt F32).
 *   s = max|w| / 448, codes by round-to-nearest-even, saturating.
 *
 * KERN_Q_INT4: 4-bit codes u in 0..15, groups of 128 columns (or 64, for
 *   an in_dim that is not a multiple of 128: SmolLM2's 576), scales d
 *   [rows, cols / group] (fp16 or fp32), optional zero points z [rows,
 *   cols / group] (uint8, 0..15): weight = d * (u - z), or d * (u - 8) when
 *   zeros is NULL (symmetric). The GEMV reads 128 columns per chunk: with
 *   groups of 64 each chunk holds two, handled as int8's groups of 32 are
 *   (each MMA once per group, the other group's lanes giving zeros).
 *   Default (what kern_quantize_rows makes when zeros is given):
 *   asymmetric with an integer zero point (as GPTQ and AWQ store it):
 *   d = (max(w, 0) - min(w, 0)) / 15, z = round(-min / d). Why: on
 *   heavy-tailed groups the two extremes differ and a symmetric grid
 *   spends codes on a side nobody uses. RMS error relative to RMS weight,
 *   4M random weights (tests/unit/kernels/test_quant.c prints them): Gaussian
 *   0.1005 against 0.1030 symmetric (llama.cpp's Q4_0 rule), Laplace
 *   0.1305 / 0.1410, Student-t with 3 dof 0.165 / 0.200. The zero point
 *   is an integer, so u - z is an exact integer the kernels feed to the
 *   tensor cores unchanged, at the same cost as the symmetric u - 8; it
 *   costs one byte per 128 weights (67 bytes per group against 66).
 *   Symmetric (zeros NULL) uses Q4_0's rule: the group's largest-magnitude
 *   value maps to -8 exactly, d = -that / 8, so all 16 codes are used.
 *
 *   Groups of 32 (KERN_Q_INT4_GROUP_AFFINE) are GGUF Q4_1's form: a float
 *   minimum instead of a zero point, weight = d * u + m, with scales
 *   holding (d, m) pairs of fp16 ([rows, cols / 32, 2]; scale_dt F16,
 *   zeros NULL). GGUF Q4_1 blocks (d, m, 16 bytes of nibbles) and Q4_0
 *   blocks (d * (u - 8): m = -8 d, exact) load into it unchanged
 *   (kern_qweight_load_q4_rows). Why: re-quantizing a 4-bit checkpoint
 *   onto another grid rounds every weight twice. On SmolLM2's Q4_1 file,
 *   groups of 128 gave +45.9% perplexity and groups of 32 with an integer
 *   zero point +16.2% (the grid shifted by up to half a step); the
 *   blocks as they are reproduce the checkpoint (docs/cuda.md). From fp32
 *   (kern_quantize_rows) the rule is Q4_1's: m = the group's minimum
 *   (rounded to fp16), d = (max - m) / 15 rounded up. The GPU makes each
 *   weight d * u + m in one fused multiply-add, rounded once to the run
 *   dtype, and feeds it to the tensor cores: each lane's 32 codes of a
 *   chunk are one group, so a (d, m) pair is one 4-byte load per lane.
 *
 *   Bit layout: a row is cols / 2 bytes; its 32-bit little-endian word i
 *   holds columns 8i .. 8i+7, column 8i + j in bits [4p, 4p + 4) with
 *   p = j / 2 for even j and p = 4 + j / 2 for odd j:
 *       bits  0- 3: k0   4- 7: k2   8-11: k4  12-15: k6
 *       bits 16-19: k1  20-23: k3  24-27: k5  28-31: k7
 *   Why: a 16-byte load is 32 consecutive columns of one row, and
 *   (word >> 4j) & 0x000F000F holds the pair (k_2j, k_2j+1) in its two
 *   16-bit halves; OR-ing in 0x6400 (fp16 1024.0) or 0x4300 (bf16 128.0)
 *   makes each half exactly 1024 + u or 128 + u, and one packed subtract
 *   gives u - z: three instructions per two weights, no shuffles, already
 *   in the order an mma.sync fragment register wants.
 *
 * Shapes: INT8 and FP8 need cols % 16 == 0 (16-byte loads); a group must
 * divide cols (INT4: cols % 32, 64 or 128 == 0). Pointers: data 16-byte aligned
 * on the GPU. Tensor parallelism: a column-parallel shard (rows split)
 * takes its rows of data, scales and zeros; a row-parallel shard (cols
 * split) must split at group boundaries and, for per-row scales (INT8
 * group 0, FP8), pass the full row's max |w| to kern_quantize_rows
 * (row_amax) so every rank uses the scale tp 1 would: then the shards are
 * exactly the slices of the tp 1 weight.
 */
#ifndef KERN_QUANT_H
#define KERN_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "kernels/epilogue.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	KERN_Q_NONE = 0, /* not quantized: the run dtype, kernels/matmul.h */
	KERN_Q_INT8 = 1,
	KERN_Q_FP8 = 2,
	KERN_Q_INT4 = 3,
} kern_qformat;

#define KERN_Q_INT4_GROUP 128
#define KERN_Q_INT4_GROUP_SMALL 64
#define KERN_Q_INT4_GROUP_AFFINE 32 /* (d, m) pairs: GGUF Q4_1's form */
#define KERN_FP8_E4M3_MAX 448.0f

/* One quantized weight. Host pointers for the CPU functions, device
 * pointers for the CUDA ones; the struct itself always lives on the host.
 * The caller owns the buffers (kern_qweight_*_bytes say their sizes). */
typedef struct kern_qweight {
	int format;   /* kern_qformat */
	int rows;     /* out_dim of this rank's shard */
	int cols;     /* in_dim of this rank's shard */
	int group;    /* 0: one scale per row; else columns per scale */
	int scale_dt; /* SL_DT_F32 or SL_DT_F16 */
	void *data;   /* codes, see the formats above */
	void *scales; /* [rows, groups] of scale_dt; INT4 group 32: [rows, groups, 2] (d, m) */
	void *zeros;  /* INT4 only: uint8 [rows, groups], or NULL (symmetric) */
	/* NULL, or the same scales and zero points as one 32-bit word a
	 * (group, row), [groups, rows] (kern_qweight_meta_pack): a decode
	 * GEMV warp's 8 rows of a group in one 32-byte sector. Derived,
	 * optional: the kernels that read it give the same bits without it. */
	void *meta;
} kern_qweight;

/* "none", "int8", "fp8", "int4" -> kern_qformat; -1 when unknown. */
int kern_qformat_parse(const char *s);
const char *kern_qformat_name(int format);

/* Scales per row: 1 for group 0, else cols / group. */
int kern_qweight_groups(const kern_qweight *w);
size_t kern_qweight_data_bytes(const kern_qweight *w);
size_t kern_qweight_scale_bytes(const kern_qweight *w);
/* Bytes of the zero points when the weight has them (INT4), else 0. */
size_t kern_qweight_zero_bytes(const kern_qweight *w);
/*
 * The meta words' bytes (4 a group of a row) where the weight has that
 * form, else 0: int4 with fp16 group scales of 128 columns (one group a
 * GEMV chunk). int8 with groups of 128 read them 0.6% slower at batch 1
 * and 8 on an H200 (two loads a chunk either way, and a group spans two
 * chunks), so it has none.
 */
size_t kern_qweight_meta_bytes(const kern_qweight *w);
/* meta [groups, rows] from w's host scales and zero points: word (g, r)
 * = fp16 scale bits | zero point << 16 (8 when symmetric). For weights
 * with kern_qweight_meta_bytes > 0. */
void kern_qweight_meta_pack(const kern_qweight *w, uint32_t *meta);
/* 0, or SL_EINVAL with the reason (format, group, shape, scale dtype). */
int kern_qweight_check(const kern_qweight *w, char *err, size_t errlen);

/* ---- fp8 E4M3 (OCP; CUDA's __nv_fp8_e4m3) ---- */

float kern_fp8_e4m3_to_f32(uint8_t code);
/* Round to nearest even; finite values beyond 448 saturate to +-448
 * (cvt.rn.satfinite); NaN -> 0x7F. */
uint8_t kern_f32_to_fp8_e4m3(float v);

/* ---- CPU: load-time quantization and the reference ---- */

/*
 * Quantize rows [row0, row0 + nrows) of w from src (fp32 [nrows, cols]),
 * round to nearest. w's format, shape, group, scale_dt and buffers are set
 * by the caller; for INT4, zeros != NULL asks for the asymmetric form.
 * Scales are rounded up to scale_dt (never down), so no code needs
 * clamping for lack of range. row_amax (NULL, or [nrows]) gives per-row
 * scales of INT8 group 0 and FP8 the full row's max |w| when src is a
 * column slice of it (see the header comment); ignored for group scales.
 * A NaN or infinite weight, a row_amax below the slice's own max |w|, or a
 * scale fp16 cannot hold is SL_EINVAL naming the row and column (the
 * first such row). Rows are shared among OpenMP threads; the bytes and the
 * error are the same for any number of threads.
 */
int kern_quantize_rows(kern_qweight *w, int row0, int nrows, const float *src,
		       const float *row_amax, char *err, size_t errlen);

/*
 * Copy rows [row0, row0 + nrows) of a GGUF Q8_0 tensor into an INT8
 * weight with group 32 and fp16 scales, values and scales unchanged.
 * src is the first 34-byte block of this shard's slice in the first row
 * (fp16 d little-endian, then 32 int8); src_row_bytes the source's row
 * stride in bytes; each row takes w->cols / 32 blocks.
 */
int kern_qweight_load_q8_0_rows(kern_qweight *w, int row0, int nrows, const void *src,
				size_t src_row_bytes, char *err, size_t errlen);

/*
 * Copy rows [row0, row0 + nrows) of a GGUF Q4_1 (q4_1 != 0: blocks of
 * fp16 d, fp16 m, 16 bytes of nibbles, value d * u + m) or Q4_0 tensor
 * (q4_1 == 0: fp16 d, 16 bytes, value d * (u - 8), stored as m = -8 d)
 * into an INT4 weight with group 32, values unchanged. src, src_row_bytes
 * as for Q8_0; each row takes w->cols / 32 blocks. A d or m that is not
 * finite, or a block whose values reach beyond fp16 (the GPU rounds each
 * weight to the run dtype), is SL_EINVAL naming the row and block.
 */
int kern_qweight_load_q4_rows(kern_qweight *w, int q4_1, int row0, int nrows, const void *src,
			      size_t src_row_bytes, char *err, size_t errlen);

/* Row `row` of W as fp32: exactly the stored values (scale * code, or
 * d * u + m). */
void kern_qweight_dequant_row_cpu(const kern_qweight *w, int row, float *out);

/* The reference: out[n, rows] = x[n, cols] @ dequant(W)^T in fp32. */
void kern_qmatmul_cpu(float *out, const float *x, const kern_qweight *w, int n);

/*
 * Dynamic per-token fp8 activations, as the CUDA W8A8 path makes them:
 * s[t] = max|x[t, :]| / 448 (fp32 division), xq[t, k] = e4m3(x[t, k] * r[t])
 * with r[t] = 1 / s[t] in fp32 (a multiply per value on the GPU, not a
 * division); all zero when s[t] is 0 or subnormal.
 */
void kern_quantize_act_fp8_cpu(uint8_t *xq, float *xs, const float *x, int n, int cols);

/* The W8A8 reference (FP8 weights): x quantized as above, then
 * out[t, r] = sum_k (s_w[r] e4m3(w[r, k])) (s_x[t] e4m3(xq[t, k])). */
void kern_qmatmul_w8a8_cpu(float *out, const float *x, const kern_qweight *w, int n);

/*
 * The int8 split path (KERN_QPATH_INT8_SPLIT; INT8 weights with per-row
 * scales on the int8 tensor cores). Per token s[t] = max|x[t, :]| /
 * KERN_QSPLIT_MAX (fp32 division), q = x * (1 / s[t]) rounded to nearest
 * even (0 when s[t] is 0 or subnormal) in [-KERN_QSPLIT_MAX, +], cut into
 * h = floor((q + 128) / 256) in [-64, 64] and l = q - 256 h in [-128, 127]:
 * xq[t, k] = h, xq[n + t, k] = l ([2n, cols]).
 */
#define KERN_QSPLIT_MAX 16383
void kern_split_act_int8_cpu(int8_t *xq, float *xs, const float *x, int n, int cols);

/* Its reference: with H[t, r] = sum_k w[r, k] h[t, k] and L likewise (exact
 * integer sums), out[t, r] = fma(256, (float)H, (float)L) * s_w[r] * s[t],
 * rounded in that order. x's rounding is at most s[t] / 2 a value, so out
 * is within sum_k |s_w w[r, k]| s[t] / 2 of kern_qmatmul_cpu's. */
void kern_qmatmul_int8_split_cpu(float *out, const float *x, const kern_qweight *w, int n);

#ifdef SL_HAVE_CUDA
/*
 * CUDA. A kern_qblas owns what the quantized layers need on one stream,
 * allocated once at create (nothing is allocated or synchronised per
 * call, so every call is CUDA-graph capturable): a cuBLAS and a cuBLASLt
 * handle, a 32 MiB workspace (cuBLAS, cuBLASLt, the GEMV's split-K
 * partials), the dequantization scratch (one slab of W in the run
 * dtype) and the fp8 activation buffer ([max_tokens, max_cols] codes
 * and [max_tokens] scales). kern_qblas_device_bytes says how much.
 */
typedef struct kern_qblas kern_qblas;

typedef struct kern_qblas_config {
	int max_tokens;       /* largest n of any call (the step's token budget) */
	int max_cols;         /* largest cols of any quantized weight */
	size_t dequant_bytes; /* dequantize + GEMM scratch; 0: 32 MiB */
	int fp8_fast_accum;   /* W8A8: cuBLASLt's fast fp8 accumulation (no fp32 promotion) */
} kern_qblas_config;

/* The paths a call can take (kern_qmatmul_path says which AUTO picks). */
typedef enum {
	KERN_QPATH_AUTO = 0,
	KERN_QPATH_GEMV = 1,    /* n <= 64: fused dequantizing tensor-core GEMV */
	KERN_QPATH_FP8_LT = 2,  /* FP8: per-token fp8 x + cuBLASLt fp8 GEMM (W8A8) */
	KERN_QPATH_DEQUANT = 3, /* W dequantized to the run dtype slab by slab + cuBLAS */
	KERN_QPATH_GEMM = 4,    /* tiled tensor-core GEMM dequantizing in its main loop
				 * (quant_gemm.cu): every format and group, any n */
	KERN_QPATH_INT8_SPLIT = 5, /* INT8 per row: x in two int8 slices + cuBLAS's int8
				    * GEMM (quant_split.cu), n <= KERN_QSPLIT_MAX_TOKENS */
} kern_qpath;

#define KERN_QGEMV_MAX_TOKENS 64
/* AUTO's default GEMM range for int8 and int4 (kern_qblas_set_gemm_range) */
#define KERN_QGEMM_MIN_TOKENS 16
#define KERN_QGEMM_MAX_TOKENS 256
/* The split path's largest n (its buffers), and AUTO's default range for
 * it: lo < n <= hi (kern_qblas_set_split_range) */
#define KERN_QSPLIT_MAX_TOKENS 256
#define KERN_QSPLIT_MIN_AUTO 32
#define KERN_QSPLIT_MAX_AUTO 256
/* AUTO's default GEMV limit for FP8 weights: above it, W8A8 (quant.cu) */
#define KERN_QGEMV_FP8_MAX_TOKENS 32

size_t kern_qblas_device_bytes(const kern_qblas_config *cfg);
int kern_qblas_create(void *stream, const kern_qblas_config *cfg, kern_qblas **out);
void kern_qblas_destroy(kern_qblas *qb);
/* Launch the GEMV as a programmatic dependent (sm_90+), as kern_blas_set_pdl. */
void kern_qblas_set_pdl(kern_qblas *qb, int on);
/* GEMVs up to 8 tokens on the wide kernel (no predicates on whole rounds,
 * each chunk's registers refilled as used, block shapes by the row
 * tiles) where it runs (int8, fp8; int4 on wide projections): on by
 * default, SL_QGEMV_WIDE=0 at create turns it off; 0 here too (tests). */
void kern_qblas_set_gemv_wide(kern_qblas *qb, int on);
/* 1 when a plain call of n tokens (fp16 in and out) on w runs the wide
 * GEMV (tests: that a case reached it). */
int kern_qblas_gemv_wide_runs(kern_qblas *qb, const kern_qweight *w, int n);
/* Largest n that AUTO gives the GEMV for this format (default 64, fp8 32;
 * at most 64) outside the GEMM range below; above it FP8 takes
 * KERN_QPATH_FP8_LT when cuBLASLt has an algorithm, everything else
 * KERN_QPATH_DEQUANT. */
void kern_qblas_set_gemv_max(kern_qblas *qb, int format, int n);
/* AUTO's GEMM range for this format: lo < n <= hi takes KERN_QPATH_GEMM,
 * checked before the GEMV's limit (so the GEMV keeps n <= lo, up to its
 * own limit). Defaults: int8 and int4 16 < n <= 256 (KERN_QGEMM_*_TOKENS),
 * fp8 none (its W8A8 cuBLASLt path above 32 tokens). hi <= lo: never.
 * The environment sets the int8 and int4 defaults at kern_qblas_create:
 * SL_QGEMM=0 no GEMM for AUTO (the paths before it), SL_QGEMM_MIN=N and
 * SL_QGEMM_MAX=N its bounds. */
void kern_qblas_set_gemm_range(kern_qblas *qb, int format, int lo, int hi);
/* AUTO's range for the int8 split path (INT8 weights with per-row scales):
 * lo < n <= hi takes KERN_QPATH_INT8_SPLIT, checked before the GEMM's
 * range; hi at most KERN_QSPLIT_MAX_TOKENS, hi <= lo: never. Defaults
 * KERN_QSPLIT_MIN_AUTO / KERN_QSPLIT_MAX_AUTO; at kern_qblas_create the
 * environment may set them: SL_QSPLIT=0 never, SL_QSPLIT_MIN=N,
 * SL_QSPLIT_MAX=N. */
void kern_qblas_set_split_range(kern_qblas *qb, int lo, int hi);
/* The split path's int8 GEMM for a rows x cols weight (a tp shard's
 * shape): cuBLASLt's first eight candidate algorithms timed at 64, 96,
 * ..., 256 tokens on a weight of that shape (cold in L2), the fastest
 * kept where it beats the heuristic's first by 10%; a later call of n
 * tokens takes what was kept at the smallest of these >= n, else the
 * heuristic's first for its own shape, which at 128-256 tokens was up to
 * 45% slower on an H200 (lab-qgemv table 11). Every algorithm
 * gives the same bits (exact int32 sums), so the choice changes speed
 * only. Synchronises the stream and allocates for a moment: call it at
 * start-up, never while a graph is being captured. SL_QSPLIT_TUNE=0, or
 * a split range switched off, makes it do nothing. */
int kern_qblas_tune_split(kern_qblas *qb, int rows, int cols);
/* The GEMM's block shape (KERN_QPATH_GEMM) for w on dt activations, timed
 * at each token count from 64 to 256 (steps of 32) where AUTO gives w the
 * GEMM: every shape the weight and GPU take, W cold, the median of 5
 * calls; the fastest is kept where it takes at most 95% of the time of
 * AUTO's rule, and a later call of n tokens on a weight of w's shape,
 * format and group takes what was kept at the smallest tuned count >= n
 * (quant_tune.cu says why). Where AUTO gives w the int8 split path
 * instead (int8 per row; call kern_qblas_tune_split first), the GEMM's
 * fastest shape against that path, and AUTO takes the GEMM from then on
 * where it took at most 95% of the path's time. *kept: how many counts
 * changed. Allocates for a moment and synchronises the stream: call it
 * at start-up, never while a graph is being captured. SL_QGEMM_TUNE=0
 * makes it do nothing; a shape forced by kern_qblas_set_gemm_variant or
 * SL_QGEMM_VARIANT overrides what was kept. */
int kern_qblas_tune_gemm(kern_qblas *qb, const kern_qweight *w, sl_dtype dt, int *kept);
/* The block shape kern_qblas_tune_gemm kept for a call of n tokens on w
 * with dt activations; 0 where the call takes AUTO's rule. */
int kern_qblas_gemm_tuned(kern_qblas *qb, const kern_qweight *w, sl_dtype dt, int n);
/* The GEMM's block shape for every later call (kern_qgemm_variant_name's
 * numbers; 0, the default: chosen by n). KERN_QGEMM_WGMMA_FIRST and the
 * next KERN_QGEMM_WGMMA_COUNT - 1 are the wgmma GEMM's
 * (quant_gemm_wgmma.cu), which runs only where kern_qblas_gemm_wgmma says
 * so; elsewhere a call forced onto it returns SL_ENOTSUP. */
#define KERN_QGEMM_WGMMA_FIRST 11
#define KERN_QGEMM_WGMMA_COUNT 5
#define KERN_QGEMM_VARIANTS (KERN_QGEMM_WGMMA_FIRST + KERN_QGEMM_WGMMA_COUNT - 1)
void kern_qblas_set_gemm_variant(kern_qblas *qb, int variant);
/* 1 when the wgmma GEMM can take this weight here (an sm_90a image on
 * compute capability 9.0; per-row scales or groups of whole chunks). */
int kern_qblas_gemm_wgmma(kern_qblas *qb, const kern_qweight *w);
/* 1 when the GEMM on x_dt activations rounds each weight (scale x code,
 * or d x u + m) to x's dtype before its tensor cores, as DEQUANT does:
 * int4 groups of 32 always; int8 groups of 32 and int4 groups of 64 on
 * fp16 activations, whose scales it folds into the weights (quant_gemm.cu,
 * "Folded scales"; SL_QGEMM_FOLD=0 at create: never). Otherwise the
 * products are exact and only the fp32 summation order differs from
 * kern_qmatmul_cpu. */
int kern_qblas_gemm_rounds(kern_qblas *qb, const kern_qweight *w, sl_dtype x_dt);
/* W8A8 on cuBLASLt cuts K into slices run at once on side streams (fp32
 * partials in the dequantization scratch, summed in a fixed order:
 * deterministic) when its algorithm fills under a third of a wave,
 * as the 4096-row projections do at decode sizes. kern_qblas_set_lt_splits: 0 that rule
 * (the default; SL_LT_SPLITK=N in the environment at create sets N),
 * 1 never, 2..KERN_LT_MAX_SPLITS that many wherever the columns allow;
 * kern_qmatmul_lt_splits: the slices a W8A8 call of n tokens takes (0:
 * no cuBLASLt algorithm for it). */
#define KERN_LT_MAX_SPLITS 8
void kern_qblas_set_lt_splits(kern_qblas *qb, int splits);
int kern_qmatmul_lt_splits(kern_qblas *qb, const kern_qweight *w, int n, sl_dtype out_dt);
/* Up to max_tokens (default KERN_LT_UNIT_MAX_TOKENS; SL_LT_UNIT=N in the
 * environment at create; 0: never), W8A8 on cuBLASLt runs with unit
 * scalar scales into an fp32 product, then a pass applies the weight's
 * per-row and the token's scale: cuBLASLt has faster kernels for scalar
 * scales at decode sizes. kern_qmatmul_lt_unit: whether a W8A8 call of n
 * tokens does (K slices, above, only apply to calls that do not). */
#define KERN_LT_UNIT_MAX_TOKENS 64
void kern_qblas_set_lt_unit(kern_qblas *qb, int max_tokens);
int kern_qmatmul_lt_unit(kern_qblas *qb, const kern_qweight *w, int n, sl_dtype out_dt);
/* The path AUTO takes for this call (a kern_qpath). */
int kern_qmatmul_path(kern_qblas *qb, const kern_qweight *w, int n, sl_dtype x_dt,
		      sl_dtype out_dt);

/*
 * out[n, w->rows] (out_dt: x_dt or SL_DT_F32) = x[n, w->cols] (x_dt: F16
 * or BF16) @ W^T, W on the device. fp32 accumulation. x and w->data
 * 16-byte aligned. `path` forces a path (tests, benchmarks): SL_ENOTSUP
 * when it cannot take this call; KERN_QPATH_AUTO chooses.
 */
int kern_qmatmul_cuda(kern_qblas *qb, int path, void *out, sl_dtype out_dt, const void *x,
		      sl_dtype x_dt, const kern_qweight *w, int n);

/* The GEMV with a fused epilogue (kernels/epilogue.h): out and x in dt
 * (F16 or BF16). *fused = 1 when it ran; 0 when AUTO would not take the
 * GEMV for this call, n is above 8 (above 2 for ADD_NORM), or the
 * columns split across blocks: nothing was launched, and the caller runs
 * kern_qmatmul_cuda and the unfused kernel. */
int kern_qmatmul_epi_cuda(kern_qblas *qb, void *out, sl_dtype dt, const void *x,
			  const kern_qweight *w, int n, const kern_epi *epi, int *fused);

/* Row tiles of 16 that the unsplit decode GEMV's shapes for fewer than 4
 * blocks' worth of tiles an SM (8 warps a tile, 2 blocks an SM: the o
 * and down projections) hold in one wave on this GPU; a projection of
 * more tiles (13B's 320 on 132 SMs) starts a second, partial one. */
int kern_qblas_gemv_narrow_wave(const kern_qblas *qb);

/* The GEMV of x (dt: F16 or BF16) by w with K cut into up to max_splits
 * slices, each slice's fp32 product kept apart: *parts [*splits][n][rows]
 * in the kern_qblas's workspace, valid until its next call, for a
 * consumer that sums them in order (kern_add_rmsnorm_parts_cuda). The
 * wide GEMV's 4 x 2 shape at 6 blocks an SM, each slice whole rounds of
 * 8 chunks. *splits 0, nothing launched, where AUTO would not take the
 * GEMV, the wide kernel does not take the format (int8 groups of 32,
 * int4 groups of 32 or 64), n is above 8, or fewer than 2 slices fit. */
int kern_qmatmul_parts_cuda(kern_qblas *qb, const void *x, sl_dtype dt, const kern_qweight *w,
			    int n, int max_splits, const float **parts, int *splits);

/*
 * fp8 activations made by the kernel that writes x (kern_rmsnorm_fp8_cuda,
 * kern_silu_mul_fp8_cuda), so the W8A8 call that reads x skips its own
 * pass over it. kern_qblas_act_slot: where they go ({q [n, cols] codes,
 * s [n] scales}, the kern_qblas's own buffers), or {NULL} when AUTO would
 * not take W8A8 for fp8 weights at n tokens of cols (then make none).
 * kern_qblas_act_mark: the slot now holds x's activations, exactly as
 * kern_quantize_act_fp8_cuda would make them from x (x NULL: holds
 * nothing). The next kern_qmatmul_cuda, or kern_qmatmul_epi_cuda that
 * runs, spends the mark: a W8A8 call with this x, n and cols uses them;
 * any other call makes its own. A kernel that writes x without making its
 * activations must mark NULL first (the CUDA backend's producers do).
 * kern_qblas_act_mark_codes: the same, but x itself was left unwritten
 * (kern_silu_mul_fp8_cuda with out NULL): the codes are its only copy
 * until a W8A8 call on x spends them. Whatever comes first instead (a
 * call on x by another path, or cuBLASLt refusing it; a call on another
 * x; a new mark) first writes x from them, x[t, k] = e4m3(q[t, k]) * s[t]
 * rounded to x's dtype (kern_act_fp8_values_cuda), so x is never read
 * stale through the kern_qblas. A kernel outside it must not read x
 * before then.
 */
typedef struct kern_act_fp8 {
	uint8_t *q;
	float *s;
} kern_act_fp8;
kern_act_fp8 kern_qblas_act_slot(kern_qblas *qb, int n, int cols);
void kern_qblas_act_mark(kern_qblas *qb, const void *x, int n, int cols);
void kern_qblas_act_mark_codes(kern_qblas *qb, void *x, sl_dtype dt, int n, int cols);

/* x [n, cols] of dt from fp8 activations: x[t, k] = e4m3(q[t, k]) * s[t]
 * (an fp32 product, rounded to dt). cols % 8 == 0, x 16-byte and q 8-byte
 * aligned. */
int kern_act_fp8_values_cuda(void *x, sl_dtype dt, const uint8_t *q, const float *s, int n,
			     int cols, void *stream);

/* The W8A8 path's activation quantization on its own: xq [n, cols] codes,
 * xs [n] scales, as kern_quantize_act_fp8_cpu. cols % 8 == 0, x 16-byte
 * aligned. */
int kern_quantize_act_fp8_cuda(uint8_t *xq, float *xs, const void *x, sl_dtype dt, int n,
			       int cols, void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
