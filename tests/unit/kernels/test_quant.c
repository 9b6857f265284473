/*
 * test_quant.c — quantized weights on the CPU (kernels/quant.c): fp8 E4M3
 * decode against a bit-level construction of every code and encode
 * against a brute-force nearest search; round-to-nearest bounds of every
 * format (error at most half a step); the int4 bit layout and the GGUF
 * Q8_0 copy against hand-built bytes, the Q4_1 / Q4_0 copies against the
 * GGUF decoder bit for bit; the reference matmuls against a
 * naive double-precision loop; hostile input (NaN, infinities, zero rows,
 * scales fp16 cannot hold, bad shapes); tensor-parallel slices equal to
 * the slices of the whole; the GEMV's meta words against the scales and
 * zero points they pack; four threads' bytes and first error equal to
 * one thread's. Also prints each format's RMS error on three
 * weight distributions (the numbers quoted in kernels/quant.h).
 */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "kernels/quant.h"
#include "common/rng.h"
#include "common/sl.h"

/* ---- helpers ---- */

static uint64_t g_rng = 12345;

static float urand(void) { return sl_rng_unit(&g_rng) * 2 - 1; }

static float gauss(void)
{
	float u = sl_rng_unit(&g_rng), v = sl_rng_unit(&g_rng);
	return sqrtf(-2 * logf(u + 1e-12f)) * cosf(6.2831853f * v);
}

static float laplace(void)
{
	float u = sl_rng_unit(&g_rng) - 0.5f;
	return (u < 0 ? 1 : -1) * logf(1 - 2 * fabsf(u) + 1e-12f);
}

static float student3(void)
{
	float c = 0;
	for (int i = 0; i < 3; i++) {
		float z = gauss();
		c += z * z;
	}
	return gauss() / sqrtf(c / 3 + 1e-12f);
}

typedef struct qbuf {
	kern_qweight w;
	void *data, *scales, *zeros;
} qbuf;

/* A weight with host buffers for its shape; zeros only when asked. */
static void qbuf_make(qbuf *b, int format, int rows, int cols, int group, int scale_dt,
		      int with_zeros)
{
	memset(b, 0, sizeof *b);
	b->w = (kern_qweight){.format = format, .rows = rows, .cols = cols, .group = group,
			      .scale_dt = scale_dt};
	b->data = calloc(kern_qweight_data_bytes(&b->w) + 1, 1);
	b->scales = calloc(kern_qweight_scale_bytes(&b->w) + 1, 1);
	b->zeros = with_zeros ? calloc(kern_qweight_zero_bytes(&b->w) + 1, 1) : NULL;
	ck_assert(b->data && b->scales && (!with_zeros || b->zeros));
	b->w.data = b->data;
	b->w.scales = b->scales;
	b->w.zeros = b->zeros;
}

static void qbuf_free(qbuf *b)
{
	free(b->data);
	free(b->scales);
	free(b->zeros);
}

static float scale_at(const kern_qweight *w, size_t i)
{
	return w->scale_dt == SL_DT_F32 ? ((float *)w->scales)[i]
					: sl_f16_to_f32(((uint16_t *)w->scales)[i]);
}

static void quantize_ok(qbuf *b, const float *src)
{
	char err[SL_ERRLEN] = "";
	int rc = kern_quantize_rows(&b->w, 0, b->w.rows, src, NULL, err, sizeof err);
	ck_assert_msg(rc == 0, "quantize %s: %s", kern_qformat_name(b->w.format), err);
}

/* ---- fp8 E4M3 ---- */

/* Built from the bit fields alone, independently of quant.c's ldexp. */
static float e4m3_by_bits(int c, int *is_nan)
{
	int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
	*is_nan = e == 15 && m == 7;
	if (e == 0) {
		float v = (float)m / 512.0f;
		return s ? -v : v;
	}
	uint32_t bits = ((uint32_t)s << 31) | ((uint32_t)(e - 7 + 127) << 23) | ((uint32_t)m << 20);
	float v;
	memcpy(&v, &bits, 4);
	return v;
}

START_TEST(fp8_all_codes)
{
	for (int c = 0; c < 256; c++) {
		int is_nan;
		float want = e4m3_by_bits(c, &is_nan), got = kern_fp8_e4m3_to_f32((uint8_t)c);
		if (is_nan) {
			ck_assert_msg(isnan(got), "code 0x%02x: got %g, want NaN", c, got);
			continue;
		}
		ck_assert_msg(memcmp(&got, &want, 4) == 0 && signbit(got) == signbit(want),
			      "code 0x%02x: got %.9g want %.9g", c, got, want);
		ck_assert_msg(kern_f32_to_fp8_e4m3(got) == c, "code 0x%02x: re-encodes to 0x%02x", c,
			      kern_f32_to_fp8_e4m3(got));
	}
	ck_assert_float_eq(kern_fp8_e4m3_to_f32(0x7E), 448.0f);
	ck_assert_float_eq(kern_fp8_e4m3_to_f32(0x01), 1.0f / 512);
	ck_assert_float_eq(kern_fp8_e4m3_to_f32(0x08), 1.0f / 64);
}
END_TEST

/* The code nearest v by brute force: ties to the even code (even
 * mantissa), beyond 448 the largest finite. */
static int e4m3_nearest(float v)
{
	const int sign = signbit(v) ? 0x80 : 0;
	if (fabsf(v) >= 448.0f)
		return sign | 0x7E;
	int best = -1;
	double bd = INFINITY;
	for (int c = sign; c < sign + 0x7F; c++) { /* this sign's finite codes */
		int is_nan;
		double d = fabs((double)e4m3_by_bits(c, &is_nan) - v);
		if (d < bd || (d == bd && (c & 1) == 0)) {
			bd = d;
			best = c;
		}
	}
	return best;
}

START_TEST(fp8_encode_nearest)
{
	/* every midpoint between neighbours rounds to the even one */
	for (int c = 0; c < 0x7E; c++) {
		int nan_a, nan_b;
		float a = e4m3_by_bits(c, &nan_a), b = e4m3_by_bits(c + 1, &nan_b);
		float mid = (a + b) / 2; /* exact in fp32 */
		int want = (c & 1) ? c + 1 : c;
		ck_assert_msg(kern_f32_to_fp8_e4m3(mid) == want, "midpoint %.9g of 0x%02x/0x%02x: got 0x%02x",
			      mid, c, c + 1, kern_f32_to_fp8_e4m3(mid));
		ck_assert_msg(kern_f32_to_fp8_e4m3(-mid) == (want | 0x80), "midpoint %.9g negated", mid);
		/* just beside the midpoint: the nearer neighbour */
		ck_assert_int_eq(kern_f32_to_fp8_e4m3(nextafterf(mid, 0)), c);
		ck_assert_int_eq(kern_f32_to_fp8_e4m3(nextafterf(mid, 1000)), c + 1);
	}
	/* random magnitudes over the whole range and beyond */
	for (int i = 0; i < 200000; i++) {
		float v = ldexpf(urand(), (int)(sl_rng_unit(&g_rng) * 24) - 13);
		int want = e4m3_nearest(v), got = kern_f32_to_fp8_e4m3(v);
		ck_assert_msg(got == want, "%.9g: got 0x%02x want 0x%02x", v, got, want);
	}
	ck_assert_int_eq(kern_f32_to_fp8_e4m3(448.0f), 0x7E);
	ck_assert_int_eq(kern_f32_to_fp8_e4m3(464.0f), 0x7E); /* saturates, never NaN */
	ck_assert_int_eq(kern_f32_to_fp8_e4m3(1e30f), 0x7E);
	ck_assert_int_eq(kern_f32_to_fp8_e4m3(INFINITY), 0x7E);
	ck_assert_int_eq(kern_f32_to_fp8_e4m3(-INFINITY), 0xFE);
	ck_assert_int_eq(kern_f32_to_fp8_e4m3(NAN), 0x7F);
	ck_assert_int_eq(kern_f32_to_fp8_e4m3(0.0f), 0x00);
	ck_assert_int_eq(kern_f32_to_fp8_e4m3(-0.0f), 0x80);
	ck_assert_int_eq(kern_f32_to_fp8_e4m3(1.0f / 1024), 0x00); /* half of 2^-9: even */
}
END_TEST

/* ---- round trips ---- */

/* rows of varied magnitude, one of them all zero, one with a single spike */
static float *make_weights(int rows, int cols, float (*draw)(void))
{
	float *w = malloc(sizeof(float) * rows * cols);
	ck_assert_ptr_nonnull(w);
	for (int r = 0; r < rows; r++) {
		float mag = ldexpf(1.0f, (r % 7) - 5);
		for (int k = 0; k < cols; k++)
			w[(size_t)r * cols + k] = r == 1 ? 0.0f : mag * draw();
		if (r == 2)
			w[(size_t)r * cols + cols / 3] = 40 * mag;
	}
	return w;
}

START_TEST(int8_round_trip)
{
	const int rows = 19, cols = 256;
	static const int groups[] = {0, 32, 64, 128};
	static const int sdts[] = {SL_DT_F32, SL_DT_F16};
	float *w = make_weights(rows, cols, gauss), *row = malloc(sizeof(float) * cols);
	for (int gi = 0; gi < 4; gi++)
		for (int si = 0; si < 2; si++) {
			qbuf b;
			qbuf_make(&b, KERN_Q_INT8, rows, cols, groups[gi], sdts[si], 0);
			quantize_ok(&b, w);
			const int8_t *q = b.data;
			for (int r = 0; r < rows; r++) {
				kern_qweight_dequant_row_cpu(&b.w, r, row);
				for (int k = 0; k < cols; k++) {
					size_t si_ = (size_t)r * kern_qweight_groups(&b.w) +
						     (groups[gi] ? k / groups[gi] : 0);
					float s = scale_at(&b.w, si_), v = w[(size_t)r * cols + k];
					ck_assert_msg(q[(size_t)r * cols + k] >= -127,
						      "int8 g%d: code -128 made", groups[gi]);
					ck_assert_msg(fabsf(row[k] - v) <= 0.5f * s * (1 + 1e-6f) + 1e-30f,
						      "int8 g%d %s row %d col %d: w %.9g deq %.9g, step %.9g",
						      groups[gi], sl_dtype_name(sdts[si]), r, k, v, row[k], s);
					ck_assert_float_eq(row[k], s * (float)q[(size_t)r * cols + k]);
					if (r == 1)
						ck_assert_float_eq(row[k], 0.0f);
				}
			}
			/* the row's (group's) largest |w| takes the full code range */
			ck_assert_int_eq(abs(q[2 * cols + cols / 3]), 127);
			qbuf_free(&b);
		}
	free(w);
	free(row);
}
END_TEST

START_TEST(fp8_round_trip)
{
	const int rows = 13, cols = 160;
	float *w = make_weights(rows, cols, laplace), *row = malloc(sizeof(float) * cols);
	qbuf b;
	qbuf_make(&b, KERN_Q_FP8, rows, cols, 0, SL_DT_F32, 0);
	quantize_ok(&b, w);
	for (int r = 0; r < rows; r++) {
		float s = ((float *)b.scales)[r], amax = 0;
		kern_qweight_dequant_row_cpu(&b.w, r, row);
		for (int k = 0; k < cols; k++) {
			float v = w[(size_t)r * cols + k];
			amax = fmaxf(amax, fabsf(v));
			/* half an ulp: 2^-4 relative for normal codes, 2^-10 s below 2^-6 s */
			float bound = fmaxf(fabsf(v) * 0.0625f, s * 0x1p-10f) * (1 + 1e-5f) + 1e-30f;
			ck_assert_msg(fabsf(row[k] - v) <= bound,
				      "fp8 row %d col %d: w %.9g deq %.9g (bound %.3g)", r, k, v, row[k],
				      bound);
		}
		ck_assert_float_eq(s, amax / 448.0f);
	}
	ck_assert_int_eq(((uint8_t *)b.data)[2 * cols + cols / 3], 0x7E);
	qbuf_free(&b);
	free(w);
	free(row);
}
END_TEST

static int int4_code(const kern_qweight *w, int r, int k)
{
	static const int nib[8] = {0, 4, 1, 5, 2, 6, 3, 7}; /* column j -> nibble position */
	const uint8_t *b = (const uint8_t *)w->data + (size_t)r * (w->cols / 2) + (k / 8) * 4;
	uint32_t word = b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
	return (word >> (4 * nib[k % 8])) & 0xF;
}

START_TEST(int4_round_trip)
{
	const int rows = 17, cols = 384;
	static const int sdts[] = {SL_DT_F16, SL_DT_F32};
	float *w = make_weights(rows, cols, student3), *row = malloc(sizeof(float) * cols);
	for (int asym = 0; asym < 2; asym++)
		for (int si = 0; si < 2; si++) {
			qbuf b;
			qbuf_make(&b, KERN_Q_INT4, rows, cols, 128, sdts[si], asym);
			quantize_ok(&b, w);
			for (int r = 0; r < rows; r++) {
				kern_qweight_dequant_row_cpu(&b.w, r, row);
				for (int k = 0; k < cols; k++) {
					size_t gi = (size_t)r * (cols / 128) + k / 128;
					float d = scale_at(&b.w, gi), v = w[(size_t)r * cols + k];
					int u = int4_code(&b.w, r, k), z = asym ? ((uint8_t *)b.zeros)[gi] : 8;
					ck_assert(z >= 0 && z <= 15);
					ck_assert_float_eq(row[k], d * (float)(u - z));
					/* symmetric: the top code may clamp the side opposite the
					 * extreme (one step); otherwise half a step */
					float steps = !asym && u == 15 ? 1.0f : 0.5f;
					ck_assert_msg(fabsf(row[k] - v) <= steps * fabsf(d) * (1 + 1e-5f) + 1e-30f,
						      "int4 %s %s row %d col %d: w %.9g deq %.9g step %.9g",
						      asym ? "asym" : "sym", sl_dtype_name(sdts[si]), r, k, v,
						      row[k], d);
				}
			}
			if (!asym) /* the spike is its group's extreme: code 0 (-8) exactly */
				ck_assert_int_eq(int4_code(&b.w, 2, cols / 3), 0);
			qbuf_free(&b);
		}
	free(w);
	free(row);
}
END_TEST

/* The meta words (kern_qweight_meta_pack): word (g, r) of [groups, rows]
 * holds row r's group-g fp16 scale bits and zero point (8 when
 * symmetric), checked against the weight's own scales and zeros on a
 * quantized int4 weight; formats without the form ask for 0 bytes. */
START_TEST(meta_words)
{
	static const struct {
		int format, group, zeros;
	} k[] = {{KERN_Q_INT4, 128, 1}, {KERN_Q_INT4, 128, 0}};
	const int rows = 19, cols = 512;
	float *w = make_weights(rows, cols, gauss);
	for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
		qbuf b;
		qbuf_make(&b, k[i].format, rows, cols, k[i].group, SL_DT_F16, k[i].zeros);
		quantize_ok(&b, w);
		const int groups = cols / k[i].group;
		ck_assert_uint_eq(kern_qweight_meta_bytes(&b.w), 4 * (size_t)rows * groups);
		uint32_t *m = malloc(kern_qweight_meta_bytes(&b.w));
		kern_qweight_meta_pack(&b.w, m);
		int zero_seen = 0;
		for (int r = 0; r < rows; r++)
			for (int g = 0; g < groups; g++) {
				const size_t gi = (size_t)r * groups + g;
				const uint32_t word = m[(size_t)g * rows + r];
				ck_assert_uint_eq(word & 0xFFFFu, ((uint16_t *)b.scales)[gi]);
				const uint32_t z = k[i].zeros ? ((uint8_t *)b.zeros)[gi] : 8;
				ck_assert_uint_eq(word >> 16, z);
				zero_seen |= k[i].zeros && z != 8;
			}
		ck_assert(!k[i].zeros || zero_seen); /* the points differ by group */
		free(m);
		qbuf_free(&b);
	}
	static const struct {
		int format, group, sdt;
	} none[] = {{KERN_Q_INT8, 0, SL_DT_F32}, {KERN_Q_INT8, 32, SL_DT_F16},
		    {KERN_Q_INT8, 64, SL_DT_F16}, {KERN_Q_INT8, 128, SL_DT_F16},
		    {KERN_Q_FP8, 0, SL_DT_F32},
		    {KERN_Q_INT4, 64, SL_DT_F16}, {KERN_Q_INT4, 32, SL_DT_F16},
		    {KERN_Q_INT4, 128, SL_DT_F32}};
	for (size_t i = 0; i < sizeof none / sizeof *none; i++) {
		const kern_qweight q = {.format = none[i].format, .rows = rows, .cols = cols,
					.group = none[i].group, .scale_dt = none[i].sdt};
		ck_assert_uint_eq(kern_qweight_meta_bytes(&q), 0);
	}
	free(w);
}
END_TEST

/* int4 groups of 32, Q4_1's rule: (d, m) pairs of fp16, values exactly
 * d * u + m, within half a step of w plus m's own fp16 rounding. */
START_TEST(int4_affine_round_trip)
{
	const int rows = 17, cols = 352; /* 11 groups: not a multiple of 64 or 128 */
	float *w = make_weights(rows, cols, student3), *row = malloc(sizeof(float) * cols);
	qbuf b;
	qbuf_make(&b, KERN_Q_INT4, rows, cols, 32, SL_DT_F16, 0);
	ck_assert_int_eq(kern_qweight_zero_bytes(&b.w), 0);
	ck_assert_int_eq(kern_qweight_scale_bytes(&b.w), (size_t)rows * (cols / 32) * 4);
	quantize_ok(&b, w);
	const uint16_t *pairs = b.scales;
	for (int r = 0; r < rows; r++) {
		kern_qweight_dequant_row_cpu(&b.w, r, row);
		for (int k = 0; k < cols; k++) {
			size_t gi = (size_t)r * (cols / 32) + k / 32;
			float d = sl_f16_to_f32(pairs[2 * gi]), m = sl_f16_to_f32(pairs[2 * gi + 1]);
			float v = w[(size_t)r * cols + k];
			int u = int4_code(&b.w, r, k);
			ck_assert_float_eq(row[k], d * (float)u + m);
			float bound = 0.5f * d * (1 + 1e-5f) + fabsf(m) * 0x1p-11f + 1e-30f;
			ck_assert_msg(fabsf(row[k] - v) <= bound,
				      "int4 g32 row %d col %d: w %.9g deq %.9g d %.9g m %.9g", r, k, v,
				      row[k], d, m);
		}
	}
	/* the spike is its group's maximum: the top code */
	ck_assert_int_eq(int4_code(&b.w, 2, cols / 3), 15);
	qbuf_free(&b);
	free(w);
	free(row);
}
END_TEST

/* Hand-built: codes 1..8 in columns 0..7 must sit in the documented
 * nibbles (word 0x86427531, little-endian bytes 31 75 42 86). */
START_TEST(int4_bit_layout)
{
	qbuf b;
	qbuf_make(&b, KERN_Q_INT4, 1, 128, 128, SL_DT_F32, 1);
	float src[128] = {0};
	for (int k = 0; k < 8; k++)
		src[k] = (float)(k + 1);
	src[127] = 15.0f; /* min 0, max 15: d = 1, z = 0, codes = values */
	quantize_ok(&b, src);
	ck_assert_int_eq(((uint8_t *)b.zeros)[0], 0);
	ck_assert_float_eq(((float *)b.scales)[0], 1.0f);
	for (int k = 0; k < 8; k++)
		ck_assert_int_eq(int4_code(&b.w, 0, k), k + 1);
	const uint8_t *d = b.data;
	ck_assert_int_eq(d[0], 0x31);
	ck_assert_int_eq(d[1], 0x75);
	ck_assert_int_eq(d[2], 0x42);
	ck_assert_int_eq(d[3], 0x86);
	qbuf_free(&b);

	/* and the other way: bytes written by hand decode per the layout */
	qbuf_make(&b, KERN_Q_INT4, 1, 128, 128, SL_DT_F32, 0);
	memset(b.data, 0x88, 64); /* every code 8: zero */
	uint8_t *p = b.data;
	p[0] = 0x31, p[1] = 0x75, p[2] = 0x42, p[3] = 0x86; /* columns 0..7: codes 1..8 */
	((float *)b.scales)[0] = 0.25f;
	float row[128];
	kern_qweight_dequant_row_cpu(&b.w, 0, row);
	for (int k = 0; k < 8; k++)
		ck_assert_float_eq(row[k], 0.25f * (float)(k + 1 - 8));
	for (int k = 8; k < 128; k++)
		ck_assert_float_eq(row[k], 0.0f);
	qbuf_free(&b);
}
END_TEST

/* GGUF Q8_0: an fp16 d then 32 int8, value d * q; a column slice of a
 * wider source (3 blocks per source row, the shard takes blocks 1..2). */
START_TEST(q8_0_blocks)
{
	uint8_t src[2][3][34];
	for (int r = 0; r < 2; r++)
		for (int bl = 0; bl < 3; bl++) {
			uint16_t d = sl_f32_to_f16(0.5f * (float)(r + 1) + (float)bl); /* exact */
			src[r][bl][0] = d & 0xFF;
			src[r][bl][1] = d >> 8;
			for (int j = 0; j < 32; j++)
				src[r][bl][2 + j] = (uint8_t)(int8_t)(j * 8 - 128 + bl + r);
		}
	qbuf b;
	qbuf_make(&b, KERN_Q_INT8, 2, 64, 32, SL_DT_F16, 0);
	char err[SL_ERRLEN] = "";
	ck_assert_int_eq(kern_qweight_load_q8_0_rows(&b.w, 0, 2, &src[0][1][0], 3 * 34, err,
						     sizeof err), 0);
	float row[64];
	for (int r = 0; r < 2; r++) {
		kern_qweight_dequant_row_cpu(&b.w, r, row);
		for (int k = 0; k < 64; k++) {
			int bl = 1 + k / 32, j = k % 32;
			float d = 0.5f * (float)(r + 1) + (float)bl;
			int8_t q = (int8_t)(j * 8 - 128 + bl + r);
			ck_assert_msg(row[k] == d * (float)q, "Q8_0 row %d col %d: %g want %g", r, k,
				      row[k], d * q);
		}
	}
	/* -128, which quantization never makes, comes through unchanged */
	src[0][1][2] = 0x80;
	ck_assert_int_eq(kern_qweight_load_q8_0_rows(&b.w, 0, 1, &src[0][1][0], 3 * 34, err,
						     sizeof err), 0);
	ck_assert_int_eq(((int8_t *)b.data)[0], -128);
	/* a non-finite d is refused, naming the row and block */
	src[1][2][1] = 0x7C, src[1][2][0] = 0x00;
	ck_assert_int_eq(kern_qweight_load_q8_0_rows(&b.w, 0, 2, &src[0][1][0], 3 * 34, err,
						     sizeof err), SL_EINVAL);
	ck_assert_msg(strstr(err, "row 1 block 1"), "%s", err);
	qbuf_free(&b);
	/* only int8 / group 32 / fp16 scales */
	qbuf_make(&b, KERN_Q_INT8, 2, 64, 64, SL_DT_F16, 0);
	ck_assert_int_eq(kern_qweight_load_q8_0_rows(&b.w, 0, 2, &src[0][1][0], 3 * 34, err,
						     sizeof err), SL_EINVAL);
	qbuf_free(&b);
}
END_TEST

/* One GGUF Q4_1 (q4_1) or Q4_0 block: d, [m], nibbles from seed. */
static void q4_block(uint8_t *blk, int q4_1, float d, float m, int seed)
{
	uint16_t dh = sl_f32_to_f16(d), mh = sl_f32_to_f16(m);
	blk[0] = dh & 0xFF, blk[1] = dh >> 8;
	if (q4_1)
		blk[2] = mh & 0xFF, blk[3] = mh >> 8;
	uint8_t *qs = blk + (q4_1 ? 4 : 2);
	for (int j = 0; j < 16; j++)
		qs[j] = (uint8_t)((j * 7 + seed * 3) & 15) | (uint8_t)(((j * 5 + seed) & 15) << 4);
}

/* GGUF Q4_1 and Q4_0 (blocks of 32: d, [m], 16 bytes; byte j holds value j
 * low and j + 16 high), a column slice of a wider source as for Q8_0: the
 * stored weight must decode to exactly what formats/gguf_quant.c's decoder
 * gives for the same blocks, and hostile blocks are refused by name. */
START_TEST(q4_blocks)
{
	for (int q4_1 = 0; q4_1 < 2; q4_1++) {
		const int bb = q4_1 ? 20 : 18;
		uint8_t src[2][3][20];
		for (int r = 0; r < 2; r++)
			for (int bl = 0; bl < 3; bl++)
				q4_block(src[r][bl], q4_1, 0.013f * (float)(r + bl + 1),
					 -0.11f * (float)(bl + 1) + 0.03f * (float)r, 3 * r + bl);
		uint8_t flat[2][3 * 20];
		for (int r = 0; r < 2; r++)
			for (int bl = 0; bl < 3; bl++)
				memcpy(flat[r] + bl * bb, src[r][bl], (size_t)bb);
		qbuf b;
		qbuf_make(&b, KERN_Q_INT4, 2, 64, 32, SL_DT_F16, 0);
		char err[SL_ERRLEN] = "";
		ck_assert_int_eq(kern_qweight_load_q4_rows(&b.w, q4_1, 0, 2, flat[0] + bb,
							   sizeof flat[0], err, sizeof err), 0);
		float row[64], want[96];
		for (int r = 0; r < 2; r++) {
			kern_qweight_dequant_row_cpu(&b.w, r, row);
			ck_assert_int_eq(sl_ggml_dequant_row(q4_1 ? SL_GGML_Q4_1 : SL_GGML_Q4_0,
							     flat[r], want, 96), 0);
			for (int k = 0; k < 64; k++)
				ck_assert_msg(row[k] == want[32 + k],
					      "%s row %d col %d: %.9g, the GGUF decoder %.9g",
					      q4_1 ? "Q4_1" : "Q4_0", r, k, row[k], want[32 + k]);
		}
		/* a non-finite d, and a block whose top value overflows fp16 */
		uint8_t *bad = flat[1] + 2 * bb;
		uint8_t keep[20];
		memcpy(keep, bad, (size_t)bb);
		bad[0] = 0x00, bad[1] = 0x7E; /* NaN */
		ck_assert_int_eq(kern_qweight_load_q4_rows(&b.w, q4_1, 0, 2, flat[0] + bb,
							   sizeof flat[0], err, sizeof err), SL_EINVAL);
		ck_assert_msg(strstr(err, "row 1 block 1"), "%s", err);
		memcpy(bad, keep, (size_t)bb);
		q4_block(bad, q4_1, 30000.0f, 0.0f, 1); /* Q4_0: m = -240000; Q4_1: 15 d */
		ck_assert_int_eq(kern_qweight_load_q4_rows(&b.w, q4_1, 0, 2, flat[0] + bb,
							   sizeof flat[0], err, sizeof err), SL_EINVAL);
		ck_assert_msg(strstr(err, "row 1 block 1") && strstr(err, "fp16"), "%s", err);
		qbuf_free(&b);
		/* only int4 with groups of 32 */
		qbuf_make(&b, KERN_Q_INT4, 2, 64, 64, SL_DT_F16, 1);
		ck_assert_int_eq(kern_qweight_load_q4_rows(&b.w, q4_1, 0, 2, flat[0], sizeof flat[0],
							   err, sizeof err), SL_EINVAL);
		qbuf_free(&b);
	}
}
END_TEST

/* ---- the reference matmuls ---- */

typedef struct fmt_case {
	int format, group, scale_dt, zeros;
} fmt_case;

static const fmt_case k_cases[] = {
	{KERN_Q_INT8, 0, SL_DT_F32, 0},	  {KERN_Q_INT8, 0, SL_DT_F16, 0},
	{KERN_Q_INT8, 32, SL_DT_F16, 0},  {KERN_Q_INT8, 64, SL_DT_F32, 0},
	{KERN_Q_INT8, 128, SL_DT_F16, 0}, {KERN_Q_FP8, 0, SL_DT_F32, 0},
	{KERN_Q_INT4, 128, SL_DT_F16, 1}, {KERN_Q_INT4, 128, SL_DT_F16, 0},
	{KERN_Q_INT4, 128, SL_DT_F32, 1}, {KERN_Q_INT4, 64, SL_DT_F16, 1},
	{KERN_Q_INT4, 64, SL_DT_F16, 0},  {KERN_Q_INT4, 32, SL_DT_F16, 0},
};
#define N_CASES (int)(sizeof k_cases / sizeof *k_cases)

START_TEST(qmatmul_matches_naive)
{
	const int rows = 37, cols = 384, n = 5;
	float *w = make_weights(rows, cols, gauss), *x = malloc(sizeof(float) * n * cols);
	float *got = malloc(sizeof(float) * n * rows), *row = malloc(sizeof(float) * cols);
	for (int i = 0; i < n * cols; i++)
		x[i] = urand();
	for (int ci = 0; ci < N_CASES; ci++) {
		const fmt_case *fc = &k_cases[ci];
		qbuf b;
		qbuf_make(&b, fc->format, rows, cols, fc->group, fc->scale_dt, fc->zeros);
		quantize_ok(&b, w);
		kern_qmatmul_cpu(got, x, &b.w, n);
		for (int r = 0; r < rows; r++) {
			kern_qweight_dequant_row_cpu(&b.w, r, row);
			for (int t = 0; t < n; t++) {
				double want = 0, mag = 0;
				for (int k = 0; k < cols; k++) {
					want += (double)x[t * cols + k] * row[k];
					mag += fabs((double)x[t * cols + k] * row[k]);
				}
				double e = fabs(got[t * rows + r] - want);
				ck_assert_msg(e <= 1e-5 * mag + 1e-30,
					      "%s g%d: out[%d][%d] %.9g want %.9g", kern_qformat_name(fc->format),
					      fc->group, t, r, got[t * rows + r], want);
			}
		}
		if (fc->format == KERN_Q_FP8) {
			/* W8A8: x quantized per token, then the same sum */
			uint8_t *xq = malloc((size_t)n * cols);
			float xs[5];
			kern_quantize_act_fp8_cpu(xq, xs, x, n, cols);
			kern_qmatmul_w8a8_cpu(got, x, &b.w, n);
			for (int t = 0; t < n; t++) {
				float amax = 0;
				for (int k = 0; k < cols; k++)
					amax = fmaxf(amax, fabsf(x[t * cols + k]));
				ck_assert_float_eq(xs[t], amax / 448.0f);
				for (int r = 0; r < rows; r++) {
					kern_qweight_dequant_row_cpu(&b.w, r, row);
					double want = 0, mag = 0;
					for (int k = 0; k < cols; k++) {
						double xv = (double)xs[t] *
							    kern_fp8_e4m3_to_f32(xq[t * cols + k]);
						want += xv * row[k];
						mag += fabs(xv * row[k]);
					}
					ck_assert_msg(fabs(got[t * rows + r] - want) <= 1e-5 * mag + 1e-30,
						      "w8a8 out[%d][%d] %.9g want %.9g", t, r,
						      got[t * rows + r], want);
				}
			}
			free(xq);
		}
		qbuf_free(&b);
	}
	free(w);
	free(x);
	free(got);
	free(row);
}
END_TEST

/* ---- hostile input ---- */

/*
 * The int8 split path's activations: each value's slices h, l in their
 * ranges and 256 h + l its 15-bit code round(x / s), s = max|x| / 16383
 * (the largest value at +-16383); a zero row gives zero codes and scale.
 * Then the product: within x's rounding (sum |w| s / 2) of the exact sum,
 * and its integer part exact: one-hot rows of x pick single weights.
 */
START_TEST(int8_split)
{
	const int rows = 21, cols = 272, n = 4;
	float *x = malloc(sizeof(float) * n * cols), *got = malloc(sizeof(float) * n * rows);
	float *w = make_weights(rows, cols, gauss), *row = malloc(sizeof(float) * cols);
	int8_t *xq = malloc(2 * (size_t)n * cols);
	float xs[4];
	for (int i = 0; i < n * cols; i++)
		x[i] = urand() * (1 + i % 7);
	for (int k = 0; k < cols; k++)
		x[3 * cols + k] = 0; /* a zero token */
	kern_split_act_int8_cpu(xq, xs, x, n, cols);
	for (int t = 0; t < n; t++) {
		float amax = 0;
		int top = 0;
		for (int k = 0; k < cols; k++)
			amax = fmaxf(amax, fabsf(x[t * cols + k]));
		ck_assert_float_eq(xs[t], amax / 16383.0f);
		for (int k = 0; k < cols; k++) {
			const int h = xq[t * cols + k], l = xq[(n + t) * cols + k], q = 256 * h + l;
			ck_assert(h >= -64 && h <= 64 && l >= -128 && l <= 127);
			const double want = xs[t] > 0 ? nearbyint(x[t * cols + k] / (double)xs[t]) : 0;
			ck_assert_msg(fabs(q - want) <= 1, "t %d k %d: code %d want %.1f", t, k, q, want);
			top = abs(q) > top ? abs(q) : top;
		}
		ck_assert_int_eq(top, t == 3 ? 0 : KERN_QSPLIT_MAX);
	}
	qbuf b;
	qbuf_make(&b, KERN_Q_INT8, rows, cols, 0, SL_DT_F32, 0);
	quantize_ok(&b, w);
	kern_qmatmul_int8_split_cpu(got, x, &b.w, n);
	for (int r = 0; r < rows; r++) {
		kern_qweight_dequant_row_cpu(&b.w, r, row);
		for (int t = 0; t < n; t++) {
			double want = 0, bound = 0;
			for (int k = 0; k < cols; k++) {
				want += (double)x[t * cols + k] * row[k];
				bound += fabs(row[k]) * xs[t] * 0.5 + 1e-6 * fabs(x[t * cols + k] * row[k]);
			}
			ck_assert_msg(fabs(got[t * rows + r] - want) <= bound + 1e-30,
				      "split out[%d][%d] %.9g want %.9g (bound %.3g)", t, r,
				      got[t * rows + r], want, bound);
		}
	}
	/* one-hot x: out[t, r] = s_w w[r, t] 16383 s[t], the weight to fp32 rounding */
	memset(x, 0, sizeof(float) * n * cols);
	for (int t = 0; t < n; t++)
		x[t * cols + t] = 0.75f + t;
	kern_qmatmul_int8_split_cpu(got, x, &b.w, n);
	for (int r = 0; r < rows; r++) {
		kern_qweight_dequant_row_cpu(&b.w, r, row);
		for (int t = 0; t < n; t++)
			ck_assert_msg(fabsf(got[t * rows + r] - row[t] * (0.75f + t)) <=
					      1e-6f * fabsf(row[t] * (0.75f + t)),
				      "one-hot out[%d][%d] %.9g want %.9g", t, r, got[t * rows + r],
				      row[t] * (0.75f + t));
	}
	/* a format it does not take: NaN, never a plausible number */
	qbuf g;
	qbuf_make(&g, KERN_Q_INT8, rows, cols, 32, SL_DT_F16, 0);
	kern_qmatmul_int8_split_cpu(got, x, &g.w, n);
	ck_assert(isnan(got[0]));
	qbuf_free(&g);
	qbuf_free(&b);
	free(x);
	free(got);
	free(w);
	free(row);
	free(xq);
}
END_TEST

START_TEST(hostile_weights)
{
	char err[SL_ERRLEN] = "";
	const int rows = 3, cols = 128;
	float w[3 * 128];
	for (int ci = 0; ci < N_CASES; ci++) {
		const fmt_case *fc = &k_cases[ci];
		for (int bad = 0; bad < 2; bad++) {
			for (int i = 0; i < rows * cols; i++)
				w[i] = 0.01f * (float)(i % 17);
			w[2 * cols + 77] = bad ? INFINITY : NAN;
			qbuf b;
			qbuf_make(&b, fc->format, rows, cols, fc->group, fc->scale_dt, fc->zeros);
			ck_assert_int_eq(kern_quantize_rows(&b.w, 0, rows, w, NULL, err, sizeof err),
					 SL_EINVAL);
			ck_assert_msg(strstr(err, "row 2 column 77") &&
					      strstr(err, bad ? "infinite" : "NaN"),
				      "%s", err);
			/* a later call's row0 shows in the message */
			ck_assert_int_eq(kern_quantize_rows(&b.w, 1, 2, w + cols, NULL, err, sizeof err),
					 SL_EINVAL);
			ck_assert_msg(strstr(err, "row 2 column 77"), "%s", err);
			qbuf_free(&b);
		}
		/* all-zero weights: zero scales, zero values, no division by zero */
		memset(w, 0, sizeof w);
		qbuf b;
		qbuf_make(&b, fc->format, rows, cols, fc->group, fc->scale_dt, fc->zeros);
		quantize_ok(&b, w);
		float row[128];
		for (int r = 0; r < rows; r++) {
			kern_qweight_dequant_row_cpu(&b.w, r, row);
			for (int k = 0; k < cols; k++)
				ck_assert_msg(row[k] == 0.0f, "%s: zero row dequantizes to %g",
					      kern_qformat_name(fc->format), row[k]);
		}
		qbuf_free(&b);
	}
	/* fp16 scales that cannot hold the range */
	for (int i = 0; i < rows * cols; i++)
		w[i] = 1e9f;
	qbuf b;
	qbuf_make(&b, KERN_Q_INT8, rows, cols, 32, SL_DT_F16, 0);
	ck_assert_int_eq(kern_quantize_rows(&b.w, 0, rows, w, NULL, err, sizeof err), SL_EINVAL);
	ck_assert_msg(strstr(err, "fp16"), "%s", err);
	qbuf_free(&b);
	/* a row_amax below the slice's own max */
	for (int i = 0; i < rows * cols; i++)
		w[i] = 1.0f;
	float amax[3] = {1.0f, 0.5f, 1.0f};
	qbuf_make(&b, KERN_Q_FP8, rows, cols, 0, SL_DT_F32, 0);
	ck_assert_int_eq(kern_quantize_rows(&b.w, 0, rows, w, amax, err, sizeof err), SL_EINVAL);
	ck_assert_msg(strstr(err, "row 1"), "%s", err);
	/* rows outside the weight */
	ck_assert_int_eq(kern_quantize_rows(&b.w, 2, 2, w, NULL, err, sizeof err), SL_EINVAL);
	qbuf_free(&b);
}
END_TEST

START_TEST(bad_shapes)
{
	char err[SL_ERRLEN] = "";
	struct {
		kern_qweight w;
		const char *want;
	} bad[] = {
		{{.format = 7, .rows = 4, .cols = 128, .scale_dt = SL_DT_F32}, "format"},
		{{.format = KERN_Q_INT8, .rows = 4, .cols = 100, .scale_dt = SL_DT_F32}, "multiple of 16"},
		{{.format = KERN_Q_INT8, .rows = 4, .cols = 96, .group = 64, .scale_dt = SL_DT_F32},
		 "multiple of the group"},
		{{.format = KERN_Q_INT8, .rows = 4, .cols = 128, .group = 48, .scale_dt = SL_DT_F32},
		 "group 48"},
		{{.format = KERN_Q_INT8, .rows = 4, .cols = 128, .scale_dt = SL_DT_BF16}, "F32 or F16"},
		{{.format = KERN_Q_FP8, .rows = 4, .cols = 128, .scale_dt = SL_DT_F16}, "F32 scale"},
		{{.format = KERN_Q_FP8, .rows = 4, .cols = 128, .group = 32, .scale_dt = SL_DT_F32},
		 "F32 scale"},
		{{.format = KERN_Q_INT4, .rows = 4, .cols = 128, .group = 16, .scale_dt = SL_DT_F16},
		 "group 16"},
		{{.format = KERN_Q_INT4, .rows = 4, .cols = 128, .group = 32, .scale_dt = SL_DT_F32},
		 "pairs of F16"},
		{{.format = KERN_Q_INT4, .rows = 4, .cols = 128, .group = 32, .scale_dt = SL_DT_F16,
		  .zeros = (void *)1},
		 "no zero points"},
		{{.format = KERN_Q_INT4, .rows = 4, .cols = 96, .group = 64, .scale_dt = SL_DT_F16},
		 "multiple of the group"},
		{{.format = KERN_Q_INT4, .rows = 4, .cols = 192, .group = 128, .scale_dt = SL_DT_F16},
		 "multiple of the group"},
		{{.format = KERN_Q_INT8, .rows = 4, .cols = 128, .scale_dt = SL_DT_F32,
		  .zeros = (void *)1},
		 "zero points"},
		{{.format = KERN_Q_INT8, .rows = -1, .cols = 128, .scale_dt = SL_DT_F32}, "shape"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		ck_assert_int_eq(kern_qweight_check(&bad[i].w, err, sizeof err), SL_EINVAL);
		ck_assert_msg(strstr(err, bad[i].want), "case %zu: '%s' lacks '%s'", i, err,
			      bad[i].want);
	}
	kern_qweight ok = {.format = KERN_Q_INT4, .rows = 0, .cols = 256, .group = 128,
			   .scale_dt = SL_DT_F16};
	ck_assert_int_eq(kern_qweight_check(&ok, err, sizeof err), 0);
	ck_assert_int_eq(kern_qformat_parse("int4"), KERN_Q_INT4);
	ck_assert_int_eq(kern_qformat_parse("fp8"), KERN_Q_FP8);
	ck_assert_int_eq(kern_qformat_parse("none"), KERN_Q_NONE);
	ck_assert_int_eq(kern_qformat_parse("int3"), -1);
	kern_qweight sz = {.format = KERN_Q_INT4, .rows = 10, .cols = 512, .group = 128,
			   .scale_dt = SL_DT_F16};
	ck_assert_uint_eq(kern_qweight_data_bytes(&sz), 2560);
	ck_assert_uint_eq(kern_qweight_scale_bytes(&sz), 80);
	ck_assert_uint_eq(kern_qweight_zero_bytes(&sz), 40);
}
END_TEST

/* ---- threads: the same bits, the same first error ---- */

/* Every format quantized by one thread and by four is the same bytes
 * (poisoned buffers, so an unwritten byte shows), and with two bad rows
 * far apart (a NaN in row 70, a scale fp16 cannot hold in row 190) the
 * error names row 70 however the rows were shared out. */
START_TEST(quantize_threads_equal)
{
	char err[SL_ERRLEN] = "";
	const int rows = 211, cols = 384;
	float *w = make_weights(rows, cols, laplace);
	for (int ci = 0; ci < N_CASES; ci++) {
		const fmt_case *fc = &k_cases[ci];
		qbuf b[2];
		for (int t = 0; t < 2; t++) {
			qbuf_make(&b[t], fc->format, rows, cols, fc->group, fc->scale_dt, fc->zeros);
			memset(b[t].data, 0xA5, kern_qweight_data_bytes(&b[t].w));
			memset(b[t].scales, 0xA5, kern_qweight_scale_bytes(&b[t].w));
			if (fc->zeros)
				memset(b[t].zeros, 0xA5, kern_qweight_zero_bytes(&b[t].w));
			omp_set_num_threads(t ? 4 : 1);
			quantize_ok(&b[t], w);
		}
		ck_assert_msg(!memcmp(b[0].data, b[1].data, kern_qweight_data_bytes(&b[0].w)) &&
				      !memcmp(b[0].scales, b[1].scales, kern_qweight_scale_bytes(&b[0].w)) &&
				      (!fc->zeros || !memcmp(b[0].zeros, b[1].zeros,
							     kern_qweight_zero_bytes(&b[0].w))),
			      "case %d (%s group %d): 4 threads differ from 1", ci,
			      kern_qformat_name(fc->format), fc->group);
		float keep = w[70 * cols + 5];
		w[70 * cols + 5] = NAN;
		for (int k = 0; k < cols; k++)
			w[190 * cols + k] = 1e9f;
		for (int t = 0; t < 2; t++) {
			omp_set_num_threads(t ? 4 : 1);
			ck_assert_int_eq(kern_quantize_rows(&b[t].w, 0, rows, w, NULL, err, sizeof err),
					 SL_EINVAL);
			ck_assert_msg(strstr(err, "row 70 column 5") && strstr(err, "NaN"), "%s", err);
		}
		w[70 * cols + 5] = keep;
		for (int k = 0; k < cols; k++)
			w[190 * cols + k] = laplace() * 0.02f;
		qbuf_free(&b[0]);
		qbuf_free(&b[1]);
	}
	omp_set_num_threads(1);
	free(w);
}
END_TEST

/* ---- tensor parallelism: shards are the slices of the whole ---- */

START_TEST(tp_slices)
{
	const int rows = 24, cols = 512, half = cols / 2;
	float *w = make_weights(rows, cols, laplace), *part = malloc(sizeof(float) * rows * half);
	float amax[24];
	char err[SL_ERRLEN];
	for (int ci = 0; ci < N_CASES; ci++) {
		const fmt_case *fc = &k_cases[ci];
		qbuf whole;
		qbuf_make(&whole, fc->format, rows, cols, fc->group, fc->scale_dt, fc->zeros);
		quantize_ok(&whole, w);
		const size_t rb = kern_qweight_data_bytes(&whole.w) / rows;
		/* esz: scale bytes per group ((d, m) pairs for int4 groups of 32) */
		const int groups = kern_qweight_groups(&whole.w),
			  esz = (int)(kern_qweight_scale_bytes(&whole.w) / ((size_t)rows * groups));
		/* column-parallel: rows 8..23 quantized alone equal those rows */
		qbuf rp;
		qbuf_make(&rp, fc->format, 16, cols, fc->group, fc->scale_dt, fc->zeros);
		ck_assert_int_eq(kern_quantize_rows(&rp.w, 0, 16, w + 8 * cols, NULL, err, sizeof err), 0);
		ck_assert(memcmp(rp.data, (char *)whole.data + 8 * rb, 16 * rb) == 0);
		ck_assert(memcmp(rp.scales, (char *)whole.scales + 8 * groups * esz, 16 * groups * esz) == 0);
		qbuf_free(&rp);
		/* row-parallel: each column half, with the full rows' max for per-row scales */
		for (int r = 0; r < rows; r++) {
			amax[r] = 0;
			for (int k = 0; k < cols; k++)
				amax[r] = fmaxf(amax[r], fabsf(w[r * cols + k]));
		}
		for (int h = 0; h < 2; h++) {
			for (int r = 0; r < rows; r++)
				memcpy(part + r * half, w + r * cols + h * half, sizeof(float) * half);
			qbuf cp;
			qbuf_make(&cp, fc->format, rows, half, fc->group, fc->scale_dt, fc->zeros);
			ck_assert_int_eq(kern_quantize_rows(&cp.w, 0, rows, part, amax, err, sizeof err), 0);
			const int pg = kern_qweight_groups(&cp.w);
			for (int r = 0; r < rows; r++) {
				ck_assert_msg(memcmp((char *)cp.data + r * (rb / 2),
						     (char *)whole.data + r * rb + h * (rb / 2), rb / 2) == 0,
					      "%s g%d: half %d row %d codes differ", kern_qformat_name(fc->format),
					      fc->group, h, r);
				int g0 = fc->group ? h * pg : 0;
				ck_assert(memcmp((char *)cp.scales + r * pg * esz,
						 (char *)whole.scales + (r * groups + g0) * esz, pg * esz) == 0);
				if (fc->zeros)
					ck_assert(memcmp((char *)cp.zeros + r * pg,
							 (char *)whole.zeros + r * groups + g0, pg) == 0);
			}
			qbuf_free(&cp);
		}
		qbuf_free(&whole);
	}
	free(w);
	free(part);
}
END_TEST

/* ---- accuracy on three distributions (printed; the choices in quant.h) ---- */

static double rms_rel_error(const fmt_case *fc, const float *w, int rows, int cols)
{
	qbuf b;
	qbuf_make(&b, fc->format, rows, cols, fc->group, fc->scale_dt, fc->zeros);
	quantize_ok(&b, w);
	float *row = malloc(sizeof(float) * cols);
	double se = 0, sw = 0;
	for (int r = 0; r < rows; r++) {
		kern_qweight_dequant_row_cpu(&b.w, r, row);
		for (int k = 0; k < cols; k++) {
			double d = row[k] - w[(size_t)r * cols + k];
			se += d * d;
			sw += (double)w[(size_t)r * cols + k] * w[(size_t)r * cols + k];
		}
	}
	free(row);
	qbuf_free(&b);
	return sqrt(se / sw);
}

START_TEST(accuracy_report)
{
	const int rows = 1024, cols = 4096;
	static const struct {
		const char *name;
		float (*draw)(void);
	} dists[] = {{"gaussian", gauss}, {"laplace", laplace}, {"student-t3", student3}};
	static const struct {
		const char *name;
		fmt_case fc;
	} fmts[] = {
		{"int8 row", {KERN_Q_INT8, 0, SL_DT_F32, 0}},
		{"int8 g128", {KERN_Q_INT8, 128, SL_DT_F16, 0}},
		{"int8 g32 (Q8_0)", {KERN_Q_INT8, 32, SL_DT_F16, 0}},
		{"fp8 row", {KERN_Q_FP8, 0, SL_DT_F32, 0}},
		{"int4 g128 asym", {KERN_Q_INT4, 128, SL_DT_F16, 1}},
		{"int4 g128 sym", {KERN_Q_INT4, 128, SL_DT_F16, 0}},
		{"int4 g32 (Q4_1)", {KERN_Q_INT4, 32, SL_DT_F16, 0}},
	};
	float *w = malloc(sizeof(float) * rows * cols);
	double err[3][7];
	for (int d = 0; d < 3; d++) {
		g_rng = 777 + d;
		for (size_t i = 0; i < (size_t)rows * cols; i++)
			w[i] = dists[d].draw();
		for (int f = 0; f < 7; f++) {
			err[d][f] = rms_rel_error(&fmts[f].fc, w, rows, cols);
			printf("quant accuracy: %-16s %-11s rms(dequant - w) / rms(w) %.4f\n", fmts[f].name,
			       dists[d].name, err[d][f]);
			fflush(stdout);
		}
	}
	free(w);
	/* what the choices rest on */
	for (int d = 0; d < 3; d++) {
		ck_assert(err[d][4] < err[d][5]);    /* int4: asymmetric beats symmetric */
		ck_assert(err[d][1] < err[d][0]);    /* int8: groups of 128 beat one scale per row */
		ck_assert(err[d][1] < err[d][4] / 4);   /* int8 is far finer than int4 */
		ck_assert(err[d][6] < err[d][4]);    /* int4: groups of 32 finer than of 128 */
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("quant");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, fp8_all_codes);
	tcase_add_test(tc, fp8_encode_nearest);
	tcase_add_test(tc, int8_round_trip);
	tcase_add_test(tc, fp8_round_trip);
	tcase_add_test(tc, int4_round_trip);
	tcase_add_test(tc, int4_bit_layout);
	tcase_add_test(tc, int4_affine_round_trip);
	tcase_add_test(tc, meta_words);
	tcase_add_test(tc, q4_blocks);
	tcase_add_test(tc, q8_0_blocks);
	tcase_add_test(tc, qmatmul_matches_naive);
	tcase_add_test(tc, int8_split);
	tcase_add_test(tc, hostile_weights);
	tcase_add_test(tc, bad_shapes);
	tcase_add_test(tc, tp_slices);
	tcase_add_test(tc, quantize_threads_equal);
	tcase_add_test(tc, accuracy_report);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
