/*
 * gguf_quant.c — GGUF storage types: the one table of the types shardline
 * reads (their names and block sizes: sl_ggml_block, sl_ggml_type_name)
 * and sl_ggml_dequant_row, every one of them decoded to fp32. This is the
 * CPU reference the loader uses to turn quantized checkpoints into the run
 * dtype, and the spec any faster decoder is tested against; it is meant to
 * be read next to the format description and is kept plain on purpose.
 * It knows nothing of files: gguf.c (the reader) calls down into it to
 * check tensor types at open and to decode slices; the node loader and the
 * tests call it through gguf.h.
 *
 * The block layouts (all little-endian, fp16 scales):
 *   Q8_0  32 values:  d, int8 q[32]                     x = d * q
 *   Q4_0  32 values:  d, 16 bytes of nibbles            x = d * (q - 8)
 *   Q4_1  32 values:  d, m, 16 bytes of nibbles         x = d * q + m
 *   Q5_0  32 values:  d, 32 high bits, 16 bytes         x = d * (q - 16)
 *   Q5_1  32 values:  d, m, 32 high bits, 16 bytes      x = d * q + m
 * In the 32-value types byte j holds value j in its low nibble and value
 * j + 16 in its high one; the high bit of a 5-bit value j is bit j of the
 * 32-bit word.
 *   Q4_K  256 values: d, dmin, 12 bytes of 6-bit scales and mins for eight
 *         sub-blocks of 32, 128 bytes of nibbles        x = d*sc * q - dmin*m
 *   Q5_K  as Q4_K plus 32 bytes of high bits before the nibbles
 *   Q6_K  256 values: 128 bytes of low nibbles, 64 bytes of 2-bit highs,
 *         sixteen int8 scales (one per 16 values), d    x = d*sc * (q - 32)
 * In the K types the nibble bytes come in runs of 32: a run holds sub-block
 * 2i in its low nibbles and sub-block 2i + 1 in its high ones.
 *
 * The arithmetic is done in the order the reference decoders use (scale
 * products first), so results match them bit for bit.
 */
#include "formats/gguf.h"
#include "common/sl.h"

#include <string.h>

#define QK 32    /* values per block of the simple types */
#define QKK 256  /* values per super-block of the K types */

static float h2f(const unsigned char *p) { return sl_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static uint32_t u32le(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- storage types: the one table of what shardline can read ---- */

static const struct {
	int type;
	const char *name;
	int block_elems, block_bytes;
} ggml_types[] = {
	{SL_GGML_F32, "F32", 1, 4},       {SL_GGML_F16, "F16", 1, 2},
	{SL_GGML_BF16, "BF16", 1, 2},     {SL_GGML_Q4_0, "Q4_0", 32, 18},
	{SL_GGML_Q4_1, "Q4_1", 32, 20},   {SL_GGML_Q5_0, "Q5_0", 32, 22},
	{SL_GGML_Q5_1, "Q5_1", 32, 24},   {SL_GGML_Q8_0, "Q8_0", 32, 34},
	{SL_GGML_Q4_K, "Q4_K", 256, 144}, {SL_GGML_Q5_K, "Q5_K", 256, 176},
	{SL_GGML_Q6_K, "Q6_K", 256, 210},
};

/* ggml types we know by name but cannot read: named in the refusal. */
static const char *other_type_name(uint32_t t)
{
	static const char *names[] = {
		[9] = "Q8_1", [10] = "Q2_K", [11] = "Q3_K", [15] = "Q8_K", [16] = "IQ2_XXS",
		[17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL",
		[21] = "IQ3_S", [22] = "IQ2_S", [23] = "IQ4_XS", [24] = "I8", [25] = "I16",
		[26] = "I32", [27] = "I64", [28] = "F64", [29] = "IQ1_M", [34] = "TQ1_0",
		[35] = "TQ2_0", [39] = "MXFP4",
	};
	return t < sizeof names / sizeof names[0] && names[t] ? names[t] : "unknown";
}

int sl_ggml_block(int type, int *block_elems, int *block_bytes)
{
	for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
		if (ggml_types[i].type == type) {
			if (block_elems)
				*block_elems = ggml_types[i].block_elems;
			if (block_bytes)
				*block_bytes = ggml_types[i].block_bytes;
			return 1;
		}
	return 0;
}

const char *sl_ggml_type_name(int type)
{
	for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
		if (ggml_types[i].type == type)
			return ggml_types[i].name;
	return type >= 0 ? other_type_name((uint32_t)type) : "unknown";
}

/* ---- 32-value blocks ---- */

static void dq_q8_0(const unsigned char *b, float *y)
{
	float d = h2f(b);
	for (int j = 0; j < QK; j++)
		y[j] = (float)(int8_t)b[2 + j] * d;
}

/* The 4-bit value j of a 16-byte nibble array (j < 32). */
static int nib(const unsigned char *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

static void dq_q4_0(const unsigned char *b, float *y)
{
	float d = h2f(b);
	for (int j = 0; j < QK; j++)
		y[j] = d * (float)(nib(b + 2, j) - 8);
}

static void dq_q4_1(const unsigned char *b, float *y)
{
	float d = h2f(b), m = h2f(b + 2);
	for (int j = 0; j < QK; j++)
		y[j] = d * (float)nib(b + 4, j) + m;
}

static void dq_q5_0(const unsigned char *b, float *y)
{
	float d = h2f(b);
	uint32_t qh = u32le(b + 2);
	for (int j = 0; j < QK; j++)
		y[j] = d * (float)((nib(b + 6, j) | (int)((qh >> j) & 1) << 4) - 16);
}

static void dq_q5_1(const unsigned char *b, float *y)
{
	float d = h2f(b), m = h2f(b + 2);
	uint32_t qh = u32le(b + 4);
	for (int j = 0; j < QK; j++)
		y[j] = d * (float)(nib(b + 8, j) | (int)((qh >> j) & 1) << 4) + m;
}

/* ---- 256-value super-blocks ---- */

/* Scale and min of sub-block j (0..7) from the 12 packed bytes: sub-blocks
 * 0-3 keep theirs in the low 6 bits of bytes j and j + 4; sub-blocks 4-7
 * put their low 4 bits in byte j + 4 (scale low nibble, min high nibble)
 * and their top 2 bits in the spare top bits of bytes j - 4 and j. */
static void k_scale_min(const unsigned char *s, int j, int *sc, int *m)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
		*m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
	}
}

static void dq_q4_k(const unsigned char *b, float *y)
{
	float d = h2f(b), dmin = h2f(b + 2);
	const unsigned char *scales = b + 4, *qs = b + 16;
	for (int sub = 0; sub < 8; sub++) {
		int sc, m;
		k_scale_min(scales, sub, &sc, &m);
		float dl = d * (float)sc, ml = dmin * (float)m;
		const unsigned char *run = qs + 32 * (sub / 2);
		for (int l = 0; l < 32; l++) {
			int q = sub % 2 ? run[l] >> 4 : run[l] & 15;
			y[32 * sub + l] = dl * (float)q - ml;
		}
	}
}

static void dq_q5_k(const unsigned char *b, float *y)
{
	float d = h2f(b), dmin = h2f(b + 2);
	const unsigned char *scales = b + 4, *qh = b + 16, *qs = b + 48;
	for (int sub = 0; sub < 8; sub++) {
		int sc, m;
		k_scale_min(scales, sub, &sc, &m);
		float dl = d * (float)sc, ml = dmin * (float)m;
		const unsigned char *run = qs + 32 * (sub / 2);
		for (int l = 0; l < 32; l++) {
			/* the high bit of sub-block `sub` is bit `sub` of qh[l] */
			int q = (sub % 2 ? run[l] >> 4 : run[l] & 15) | ((qh[l] >> sub) & 1) << 4;
			y[32 * sub + l] = dl * (float)q - ml;
		}
	}
}

/* Q6_K: two halves of 128 values; in half h, value 32 * k + l (k < 4,
 * l < 32) takes its low nibble from ql[64h + l + 32 (k & 1)] (low nibble
 * for k < 2, high for k >= 2) and its top 2 bits from bits 2k, 2k+1 of
 * qh[32h + l]; its scale is scales[8h + 2k + l / 16]. */
static void dq_q6_k(const unsigned char *b, float *y)
{
	const unsigned char *ql = b, *qh = b + 128;
	const int8_t *scales = (const int8_t *)(b + 192);
	float d = h2f(b + 208);
	for (int h = 0; h < 2; h++)
		for (int k = 0; k < 4; k++)
			for (int l = 0; l < 32; l++) {
				int lo = ql[64 * h + l + 32 * (k & 1)];
				lo = k < 2 ? lo & 15 : lo >> 4;
				int hi = (qh[32 * h + l] >> (2 * k)) & 3;
				float dl = d * (float)scales[8 * h + 2 * k + l / 16];
				y[128 * h + 32 * k + l] = dl * (float)((lo | hi << 4) - 32);
			}
}

/* ---- rows ---- */

int sl_ggml_dequant_row(int type, const void *src, float *dst, int64_t n)
{
	const unsigned char *s = src;
	int be, bb;
	if (!sl_ggml_block(type, &be, &bb) || n % be)
		return SL_ENOTSUP;
	void (*block)(const unsigned char *, float *) = NULL;
	switch (type) {
	case SL_GGML_F32:
		memcpy(dst, src, (size_t)n * 4); /* little-endian host, as the file */
		return SL_OK;
	case SL_GGML_F16:
		for (int64_t i = 0; i < n; i++)
			dst[i] = h2f(s + 2 * i);
		return SL_OK;
	case SL_GGML_BF16:
		for (int64_t i = 0; i < n; i++)
			dst[i] = sl_bf16_to_f32((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
		return SL_OK;
	case SL_GGML_Q8_0: block = dq_q8_0; break;
	case SL_GGML_Q4_0: block = dq_q4_0; break;
	case SL_GGML_Q4_1: block = dq_q4_1; break;
	case SL_GGML_Q5_0: block = dq_q5_0; break;
	case SL_GGML_Q5_1: block = dq_q5_1; break;
	case SL_GGML_Q4_K: block = dq_q4_k; break;
	case SL_GGML_Q5_K: block = dq_q5_k; break;
	case SL_GGML_Q6_K: block = dq_q6_k; break;
	default: return SL_ENOTSUP;
	}
	for (int64_t i = 0; i < n / be; i++)
		block(s + i * bb, dst + i * be);
	return SL_OK;
}
