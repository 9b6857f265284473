/*
 * quant.c — quantized weights on the CPU: the descriptor's arithmetic and
 * checks, fp8 E4M3 encode/decode bit by bit, load-time quantization (round
 * to nearest, from fp32 rows), the GGUF Q8_0 copy, and the reference
 * linear layer in fp32 on exactly the stored values. kernels/quant.cu is
 * tested against these; formats and layouts are in kernels/quant.h.
 */
#include "kernels/quant.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/checks.h"
#include "common/sl.h"

int kern_qformat_parse(const char *s)
{
	if (!strcmp(s, "none")) return KERN_Q_NONE;
	if (!strcmp(s, "int8")) return KERN_Q_INT8;
	if (!strcmp(s, "fp8")) return KERN_Q_FP8;
	if (!strcmp(s, "int4")) return KERN_Q_INT4;
	return -1;
}

const char *kern_qformat_name(int format)
{
	switch (format) {
	case KERN_Q_NONE: return "none";
	case KERN_Q_INT8: return "int8";
	case KERN_Q_FP8: return "fp8";
	case KERN_Q_INT4: return "int4";
	}
	return "?";
}

int kern_qweight_groups(const kern_qweight *w)
{
	return w->group > 0 ? w->cols / w->group : 1;
}

size_t kern_qweight_data_bytes(const kern_qweight *w)
{
	size_t n = (size_t)w->rows * w->cols;
	return w->format == KERN_Q_INT4 ? n / 2 : n;
}

/* INT4 with groups of 32: scales are (d, m) pairs. */
static int is_affine(const kern_qweight *w)
{
	return w->format == KERN_Q_INT4 && w->group == KERN_Q_INT4_GROUP_AFFINE;
}

size_t kern_qweight_scale_bytes(const kern_qweight *w)
{
	return (size_t)w->rows * kern_qweight_groups(w) * sl_dtype_size(w->scale_dt) *
	       (is_affine(w) ? 2 : 1);
}

size_t kern_qweight_zero_bytes(const kern_qweight *w)
{
	return w->format == KERN_Q_INT4 && !is_affine(w) ? (size_t)w->rows * kern_qweight_groups(w)
							 : 0;
}

size_t kern_qweight_meta_bytes(const kern_qweight *w)
{
	if (w->format != KERN_Q_INT4 || w->group <= 0 || w->group % 128 ||
	    w->scale_dt != SL_DT_F16)
		return 0;
	return 4 * (size_t)w->rows * kern_qweight_groups(w);
}

void kern_qweight_meta_pack(const kern_qweight *w, uint32_t *meta)
{
	const int groups = kern_qweight_groups(w);
	const uint16_t *s = w->scales;
	const uint8_t *z = w->zeros;
	for (int r = 0; r < w->rows; r++)
		for (int g = 0; g < groups; g++) {
			const size_t i = (size_t)r * groups + g;
			const uint32_t zp = z ? z[i] : 8;
			meta[(size_t)g * w->rows + r] = s[i] | zp << 16;
		}
}

int kern_qweight_check(const kern_qweight *w, char *err, size_t errlen)
{
	const char *f = kern_qformat_name(w->format);
	if (w->format != KERN_Q_INT8 && w->format != KERN_Q_FP8 && w->format != KERN_Q_INT4)
		return sl_errf(err, errlen, SL_EINVAL, "quantized weight: format %d is not int8, fp8 or int4",
			       w->format);
	if (w->rows < 0 || w->cols <= 0)
		return sl_errf(err, errlen, SL_EINVAL, "%s weight: shape %d x %d", f, w->rows, w->cols);
	if (w->scale_dt != SL_DT_F32 && w->scale_dt != SL_DT_F16)
		return sl_errf(err, errlen, SL_EINVAL, "%s weight: scales must be F32 or F16, not %s", f,
			       sl_dtype_name(w->scale_dt));
	if (w->zeros && w->format != KERN_Q_INT4)
		return sl_errf(err, errlen, SL_EINVAL, "%s weight: only int4 has zero points", f);
	switch (w->format) {
	case KERN_Q_INT8:
		if (w->group != 0 && w->group != 32 && w->group != 64 && w->group != 128)
			return sl_errf(err, errlen, SL_EINVAL,
				       "int8 weight: group %d (0 per row, or 32, 64, 128)", w->group);
		break;
	case KERN_Q_FP8:
		if (w->group != 0 || w->scale_dt != SL_DT_F32)
			return sl_errf(err, errlen, SL_EINVAL,
				       "fp8 weight: one F32 scale per row (group %d, scales %s)", w->group,
				       sl_dtype_name(w->scale_dt));
		break;
	case KERN_Q_INT4:
		if (w->group != KERN_Q_INT4_GROUP && w->group != KERN_Q_INT4_GROUP_SMALL &&
		    w->group != KERN_Q_INT4_GROUP_AFFINE)
			return sl_errf(err, errlen, SL_EINVAL,
				       "int4 weight: group %d (must be %d, %d or %d)", w->group,
				       KERN_Q_INT4_GROUP, KERN_Q_INT4_GROUP_SMALL,
				       KERN_Q_INT4_GROUP_AFFINE);
		if (is_affine(w) && (w->zeros || w->scale_dt != SL_DT_F16))
			return sl_errf(err, errlen, SL_EINVAL,
				       "int4 weight with groups of %d: (d, m) pairs of F16 and no zero "
				       "points (scales %s%s)", w->group, sl_dtype_name(w->scale_dt),
				       w->zeros ? ", zero points given" : "");
		break;
	}
	if (w->cols % 16)
		return sl_errf(err, errlen, SL_EINVAL,
			       "%s weight: %d columns (in_dim) is not a multiple of 16", f, w->cols);
	if (w->group && w->cols % w->group)
		return sl_errf(err, errlen, SL_EINVAL,
			       "%s weight: %d columns (in_dim) is not a multiple of the group %d", f,
			       w->cols, w->group);
	return SL_OK;
}

/* ---- fp8 E4M3 ---- */

float kern_fp8_e4m3_to_f32(uint8_t code)
{
	int e = (code >> 3) & 15, m = code & 7;
	float v;
	if (e == 15 && m == 7)
		return NAN;
	if (e == 0)
		v = ldexpf((float)m, -9); /* subnormal: m / 8 * 2^-6 */
	else
		v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
	return (code & 0x80) ? -v : v;
}

uint8_t kern_f32_to_fp8_e4m3(float v)
{
	if (isnan(v))
		return 0x7F;
	uint8_t sign = signbit(v) ? 0x80 : 0;
	float a = fabsf(v);
	if (a >= KERN_FP8_E4M3_MAX)
		return sign | 0x7E;
	if (a < 0x1p-6f) /* subnormal codes count 2^-9; 8 of them is the smallest normal, 0x08 */
		return sign | (uint8_t)nearbyintf(a * 512.0f);
	int e;
	frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1) */
	e -= 1;
	/* exact: the mantissa's top bits, scaled to 3 bits, rounded half to even;
	 * a carry to 8 moves into the exponent field by the addition */
	int m = (int)nearbyintf((ldexpf(a, -e) - 1.0f) * 8.0f);
	int code = ((e + 7) << 3) + m;
	return sign | (uint8_t)(code > 0x7E ? 0x7E : code);
}

/* ---- scales ---- */

/* s rounded up in magnitude to the scale dtype (never down: the largest
 * code then always covers the largest weight). Returns the stored value in
 * *stored, or -1 when fp16 cannot hold it. */
static int put_scale(const kern_qweight *w, size_t idx, float s, float *stored)
{
	if (w->scale_dt == SL_DT_F32) {
		((float *)w->scales)[idx] = s;
		*stored = s;
		return 0;
	}
	uint16_t h = sl_f32_to_f16(s);
	if (fabsf(sl_f16_to_f32(h)) < fabsf(s))
		h++; /* sign-magnitude: one more unit of the magnitude */
	if ((h & 0x7fff) >= 0x7c00)
		return -1;
	((uint16_t *)w->scales)[idx] = h;
	*stored = sl_f16_to_f32(h);
	return 0;
}

static float get_scale(const kern_qweight *w, size_t idx)
{
	return w->scale_dt == SL_DT_F32 ? ((const float *)w->scales)[idx]
					: sl_f16_to_f32(((const uint16_t *)w->scales)[idx]);
}

/* ---- quantization ---- */

static int check_finite(const float *src, int nrows, int cols, int row0, char *err, size_t errlen)
{
	for (int r = 0; r < nrows; r++)
		for (int k = 0; k < cols; k++) {
			float v = src[(size_t)r * cols + k];
			if (!isfinite(v))
				return sl_errf(err, errlen, SL_EINVAL,
					       "row %d column %d is %s: quantized weights must be finite",
					       row0 + r, k, isnan(v) ? "NaN" : "infinite");
		}
	return SL_OK;
}

static float amax_of(const float *v, int n)
{
	float m = 0;
	for (int i = 0; i < n; i++)
		m = fmaxf(m, fabsf(v[i]));
	return m;
}

static int scale_error(int row, int k, float amax, char *err, size_t errlen)
{
	return sl_errf(err, errlen, SL_EINVAL,
		       "row %d column %d: max |w| %g needs a scale beyond fp16 (use F32 scales)",
		       row, k, amax);
}

/* INT8: one span of `len` weights sharing scale idx, symmetric. */
static int quant_int8_span(kern_qweight *w, size_t idx, int8_t *q, const float *v, int len,
			   float amax)
{
	float s;
	if (put_scale(w, idx, amax / 127.0f, &s))
		return -1;
	for (int i = 0; i < len; i++) {
		float r = s > 0 ? nearbyintf(v[i] / s) : 0.0f;
		q[i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
	}
	return 0;
}

/* Code u (0..15) of column col into a row's bytes (quant.h's layout). */
static void put_int4(uint8_t *row_bytes, int col, int u)
{
	int j = col & 7, p = (j & 1) ? 4 + j / 2 : j / 2;
	uint8_t *b = row_bytes + (col >> 3) * 4 + p / 2; /* nibble p of the LE word */
	int shift = (p & 1) * 4;
	*b = (uint8_t)((*b & ~(0xF << shift)) | (u << shift));
}

static int get_int4(const uint8_t *row_bytes, int col)
{
	int j = col & 7, p = (j & 1) ? 4 + j / 2 : j / 2;
	return (row_bytes[(col >> 3) * 4 + p / 2] >> ((p & 1) * 4)) & 0xF;
}

/* fp16 d, m of an affine group whose values d * u + m all lie in fp16. */
static int affine_fits(uint16_t d, uint16_t m)
{
	float fd = sl_f16_to_f32(d), fm = sl_f16_to_f32(m);
	return isfinite(fd) && isfinite(fm) && fabsf(fm) <= 65504.0f &&
	       fabsf(fm + 15.0f * fd) <= 65504.0f;
}

/* INT4 groups of 32, Q4_1's rule: m = min (fp16, nearest), d = (max - m)
 * / 15 rounded up, u = round((v - m) / d) in 0..15. */
static int quant_int4_affine(kern_qweight *w, int row, int k, const float *v)
{
	const int G = w->group;
	float mn = v[0], mx = v[0], d;
	for (int i = 1; i < G; i++) {
		mn = fminf(mn, v[i]);
		mx = fmaxf(mx, v[i]);
	}
	uint16_t *pair = (uint16_t *)w->scales + 2 * ((size_t)row * kern_qweight_groups(w) + k / G);
	uint16_t mh = sl_f32_to_f16(mn);
	float m = sl_f16_to_f32(mh);
	kern_qweight one = {.scale_dt = SL_DT_F16, .scales = pair};
	if (put_scale(&one, 0, (mx - m) / 15.0f, &d) || !affine_fits(pair[0], mh))
		return -1;
	pair[1] = mh;
	uint8_t *row_bytes = (uint8_t *)w->data + (size_t)row * (w->cols / 2);
	for (int i = 0; i < G; i++) {
		float u = d > 0 ? nearbyintf((v[i] - m) / d) : 0;
		put_int4(row_bytes, k + i, u < 0 ? 0 : u > 15 ? 15 : (int)u);
	}
	return 0;
}

/* INT4, one group at column k of row `row` (absolute), into its bytes. */
static int quant_int4_group(kern_qweight *w, int row, int k, const float *v)
{
	const int G = w->group;
	if (is_affine(w))
		return quant_int4_affine(w, row, k, v);
	size_t idx = (size_t)row * kern_qweight_groups(w) + k / G;
	float d, z = 8;
	if (w->zeros) {
		float mn = 0, mx = 0;
		for (int i = 0; i < G; i++) {
			mn = fminf(mn, v[i]);
			mx = fmaxf(mx, v[i]);
		}
		if (put_scale(w, idx, (mx - mn) / 15.0f, &d))
			return -1;
		z = d > 0 ? nearbyintf(-mn / d) : 0;
		z = z > 15 ? 15 : z;
		((uint8_t *)w->zeros)[idx] = (uint8_t)z;
	} else {
		int at = 0; /* the first largest magnitude maps to -8 exactly */
		for (int i = 1; i < G; i++)
			if (fabsf(v[i]) > fabsf(v[at]))
				at = i;
		if (put_scale(w, idx, v[at] / -8.0f, &d))
			return -1;
	}
	uint8_t *row_bytes = (uint8_t *)w->data + (size_t)row * (w->cols / 2);
	for (int i = 0; i < G; i++) {
		float u = d != 0 ? nearbyintf(v[i] / d) + z : z;
		put_int4(row_bytes, k + i, u < 0 ? 0 : u > 15 ? 15 : (int)u);
	}
	return 0;
}

/* One row (absolute index row, values v) into w; its finiteness, its
 * row_amax (NULL: none) and its scales checked. */
static int quantize_row(kern_qweight *w, int row, const float *v, const float *row_amax,
			char *err, size_t errlen)
{
	const int cols = w->cols, groups = kern_qweight_groups(w);
	TRY(check_finite(v, 1, cols, row, err, errlen));
	float amax = amax_of(v, cols);
	if (w->group == 0 && row_amax) {
		if (!isfinite(*row_amax) || *row_amax < amax)
			return sl_errf(err, errlen, SL_EINVAL,
				       "row %d: row_amax %g is below the row's max |w| %g", row,
				       *row_amax, amax);
		amax = *row_amax;
	}
	switch (w->format) {
	case KERN_Q_INT8: {
		int8_t *q = (int8_t *)w->data + (size_t)row * cols;
		int span = w->group ? w->group : cols;
		for (int gi = 0; gi < groups; gi++) {
			const float *g = v + (size_t)gi * span;
			float m = w->group ? amax_of(g, span) : amax;
			if (quant_int8_span(w, (size_t)row * groups + gi, q + gi * span, g, span, m))
				return scale_error(row, gi * span, m, err, errlen);
		}
		break;
	}
	case KERN_Q_FP8: {
		uint8_t *q = (uint8_t *)w->data + (size_t)row * cols;
		float s = amax / KERN_FP8_E4M3_MAX;
		((float *)w->scales)[row] = s;
		for (int k = 0; k < cols; k++)
			q[k] = s > 0 ? kern_f32_to_fp8_e4m3(v[k] / s) : 0;
		break;
	}
	case KERN_Q_INT4:
		for (int k = 0; k < cols; k += w->group)
			if (quant_int4_group(w, row, k, v + k))
				return scale_error(row, k, amax_of(v + k, w->group), err, errlen);
		break;
	}
	return SL_OK;
}

/* Rows are independent, so threads take them in any order and the codes
 * are the same bits as one thread's. On a failure the first failing row
 * is done again on this thread for its message, so the error is the one
 * a single thread would give. */
int kern_quantize_rows(kern_qweight *w, int row0, int nrows, const float *src,
		       const float *row_amax, char *err, size_t errlen)
{
	int rc = kern_qweight_check(w, err, errlen);
	if (rc)
		return rc;
	if (row0 < 0 || nrows < 0 || row0 + nrows > w->rows)
		return sl_errf(err, errlen, SL_EINVAL, "quantize: rows %d..%d outside 0..%d", row0,
			       row0 + nrows, w->rows);
	const int cols = w->cols;
	int bad = nrows;
#pragma omp parallel for schedule(dynamic, 8) reduction(min : bad) if ((long)nrows * cols > 1 << 16)
	for (int r = 0; r < nrows; r++) {
		char quiet[8];
		if (quantize_row(w, row0 + r, src + (size_t)r * cols, row_amax ? row_amax + r : NULL,
				 quiet, sizeof quiet) && r < bad)
			bad = r;
	}
	if (bad == nrows)
		return SL_OK;
	return quantize_row(w, row0 + bad, src + (size_t)bad * cols, row_amax ? row_amax + bad : NULL,
			    err, errlen);
}

int kern_qweight_load_q8_0_rows(kern_qweight *w, int row0, int nrows, const void *src,
				size_t src_row_bytes, char *err, size_t errlen)
{
	if (w->format != KERN_Q_INT8 || w->group != 32 || w->scale_dt != SL_DT_F16)
		return sl_errf(err, errlen, SL_EINVAL,
			       "Q8_0 loads as int8 with group 32 and F16 scales (got %s, group %d, %s)",
			       kern_qformat_name(w->format), w->group, sl_dtype_name(w->scale_dt));
	TRY(kern_qweight_check(w, err, errlen));
	if (row0 < 0 || nrows < 0 || row0 + nrows > w->rows)
		return sl_errf(err, errlen, SL_EINVAL, "Q8_0: rows %d..%d outside 0..%d", row0,
			       row0 + nrows, w->rows);
	const int blocks = w->cols / 32;
	for (int r = 0; r < nrows; r++) {
		const uint8_t *s = (const uint8_t *)src + (size_t)r * src_row_bytes;
		int row = row0 + r;
		for (int b = 0; b < blocks; b++, s += 34) {
			uint16_t d = (uint16_t)(s[0] | s[1] << 8);
			if ((d & 0x7c00) == 0x7c00)
				return sl_errf(err, errlen, SL_EINVAL,
					       "Q8_0 row %d block %d: scale is not finite (0x%04x)", row,
					       b, d);
			((uint16_t *)w->scales)[(size_t)row * blocks + b] = d;
			memcpy((int8_t *)w->data + (size_t)row * w->cols + b * 32, s + 2, 32);
		}
	}
	return SL_OK;
}

int kern_qweight_load_q4_rows(kern_qweight *w, int q4_1, int row0, int nrows, const void *src,
			      size_t src_row_bytes, char *err, size_t errlen)
{
	const char *t = q4_1 ? "Q4_1" : "Q4_0";
	if (!is_affine(w))
		return sl_errf(err, errlen, SL_EINVAL,
			       "%s loads as int4 with groups of %d (got %s, group %d)", t,
			       KERN_Q_INT4_GROUP_AFFINE, kern_qformat_name(w->format), w->group);
	TRY(kern_qweight_check(w, err, errlen));
	if (row0 < 0 || nrows < 0 || row0 + nrows > w->rows)
		return sl_errf(err, errlen, SL_EINVAL, "%s: rows %d..%d outside 0..%d", t, row0,
			       row0 + nrows, w->rows);
	const int blocks = w->cols / 32, block_bytes = q4_1 ? 20 : 18;
	for (int r = 0; r < nrows; r++) {
		const uint8_t *s = (const uint8_t *)src + (size_t)r * src_row_bytes;
		const int row = row0 + r;
		uint8_t *codes = (uint8_t *)w->data + (size_t)row * (w->cols / 2);
		uint16_t *pair = (uint16_t *)w->scales + 2 * (size_t)row * blocks;
		for (int b = 0; b < blocks; b++, s += block_bytes, pair += 2) {
			uint16_t d = (uint16_t)(s[0] | s[1] << 8);
			/* Q4_0: d * (u - 8) = d * u + (-8 d); -8 d is exact in fp16
			 * (a power of two) unless it overflows, which the check catches */
			uint16_t m = q4_1 ? (uint16_t)(s[2] | s[3] << 8)
					  : sl_f32_to_f16(-8.0f * sl_f16_to_f32(d));
			if (!affine_fits(d, m))
				return sl_errf(err, errlen, SL_EINVAL,
					       "%s row %d block %d: d 0x%04x, m 0x%04x: values not "
					       "finite in fp16", t, row, b, d, m);
			pair[0] = d;
			pair[1] = m;
			const uint8_t *qs = s + block_bytes - 16;
			for (int j = 0; j < 32; j++) /* byte j: value j low, j + 16 high */
				put_int4(codes, 32 * b + j, j < 16 ? qs[j] & 15 : qs[j - 16] >> 4);
		}
	}
	return SL_OK;
}

/* ---- the reference ---- */

static void fp8_table(float dec[256])
{
	for (int c = 0; c < 256; c++)
		dec[c] = kern_fp8_e4m3_to_f32((uint8_t)c);
}

void kern_qweight_dequant_row_cpu(const kern_qweight *w, int row, float *out)
{
	const int cols = w->cols, groups = kern_qweight_groups(w);
	const size_t sbase = (size_t)row * groups;
	switch (w->format) {
	case KERN_Q_INT8: {
		const int8_t *q = (const int8_t *)w->data + (size_t)row * cols;
		for (int k = 0; k < cols; k++)
			out[k] = get_scale(w, sbase + (w->group ? k / w->group : 0)) * (float)q[k];
		break;
	}
	case KERN_Q_FP8: {
		const uint8_t *q = (const uint8_t *)w->data + (size_t)row * cols;
		float s = ((const float *)w->scales)[row], dec[256];
		fp8_table(dec);
		for (int k = 0; k < cols; k++)
			out[k] = s * dec[q[k]];
		break;
	}
	case KERN_Q_INT4: {
		const uint8_t *b = (const uint8_t *)w->data + (size_t)row * (cols / 2);
		const uint16_t *pairs = (const uint16_t *)w->scales;
		const int affine = is_affine(w);
		for (int k = 0; k < cols; k++) {
			int u = get_int4(b, k);
			size_t gi = sbase + k / w->group;
			if (affine) {
				out[k] = sl_f16_to_f32(pairs[2 * gi]) * (float)u +
					 sl_f16_to_f32(pairs[2 * gi + 1]);
				continue;
			}
			int z = w->zeros ? ((const uint8_t *)w->zeros)[gi] : 8;
			out[k] = get_scale(w, gi) * (float)(u - z);
		}
		break;
	}
	}
}

/* Rows per panel: dequantized once, then the dot products of 2 tokens with
 * the panel's 4 rows run together (8 accumulators, so the loop over k
 * vectorises and each x and W value loaded feeds 4 or 2 products). Built
 * for AVX2 + FMA as well where the CPU has them (picked at load time). */
#define QM_ROWS 4

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define QM_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define QM_CLONES
#endif

QM_CLONES
static void qmatmul_tokens(float *out, const float *x, const float *wp, int n, int rows,
			   int cols, int r0, int nr)
{
	const float *w0 = wp, *w1 = wp + cols, *w2 = wp + 2 * (size_t)cols,
		    *w3 = wp + 3 * (size_t)cols;
	int t = 0;
	for (; t + 1 < n; t += 2) {
		const float *x0 = x + (size_t)t * cols, *x1 = x0 + cols;
		float a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3, b0, b1, b2, b3)
		for (int k = 0; k < cols; k++) {
			a0 += x0[k] * w0[k];
			a1 += x0[k] * w1[k];
			a2 += x0[k] * w2[k];
			a3 += x0[k] * w3[k];
			b0 += x1[k] * w0[k];
			b1 += x1[k] * w1[k];
			b2 += x1[k] * w2[k];
			b3 += x1[k] * w3[k];
		}
		const float acc[2][QM_ROWS] = {{a0, a1, a2, a3}, {b0, b1, b2, b3}};
		for (int i = 0; i < nr; i++) {
			out[(size_t)t * rows + r0 + i] = acc[0][i];
			out[(size_t)(t + 1) * rows + r0 + i] = acc[1][i];
		}
	}
	for (; t < n; t++) {
		const float *xr = x + (size_t)t * cols;
		float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
		for (int k = 0; k < cols; k++) {
			a0 += xr[k] * w0[k];
			a1 += xr[k] * w1[k];
			a2 += xr[k] * w2[k];
			a3 += xr[k] * w3[k];
		}
		const float acc[QM_ROWS] = {a0, a1, a2, a3};
		for (int i = 0; i < nr; i++)
			out[(size_t)t * rows + r0 + i] = acc[i];
	}
}

/* out[t, r0 .. r0 + nr) for every token, W rows r0.. dequantized in wp. */
static void qmatmul_panel(float *out, const float *x, const kern_qweight *w, int n, int r0,
			  int nr, float *wp)
{
	const int cols = w->cols;
	for (int i = 0; i < nr; i++)
		kern_qweight_dequant_row_cpu(w, r0 + i, wp + (size_t)i * cols);
	for (int i = nr; i < QM_ROWS; i++) /* a short last panel repeats its first row */
		memcpy(wp + (size_t)i * cols, wp, sizeof(float) * cols);
	qmatmul_tokens(out, x, wp, n, w->rows, cols, r0, nr);
}

void kern_qmatmul_cpu(float *out, const float *x, const kern_qweight *w, int n)
{
	const int rows = w->rows, cols = w->cols;
	const int panels = (rows + QM_ROWS - 1) / QM_ROWS;
	int failed = 0;
#pragma omp parallel if ((long)n * rows * cols > 1 << 18)
	{
		float *wp = malloc(sizeof(float) * QM_ROWS * (size_t)cols);
		if (!wp) {
#pragma omp atomic write
			failed = 1;
		}
#pragma omp for schedule(static)
		for (int p = 0; p < panels; p++) {
			if (!wp)
				continue;
			int r0 = p * QM_ROWS, nr = rows - r0 < QM_ROWS ? rows - r0 : QM_ROWS;
			qmatmul_panel(out, x, w, n, r0, nr, wp);
		}
		free(wp);
	}
	if (failed) /* a reference that could not run must not look like a result */
		for (size_t i = 0; i < (size_t)n * rows; i++)
			out[i] = NAN;
}

void kern_quantize_act_fp8_cpu(uint8_t *xq, float *xs, const float *x, int n, int cols)
{
	for (int t = 0; t < n; t++) {
		const float *v = x + (size_t)t * cols;
		float s = amax_of(v, cols) / KERN_FP8_E4M3_MAX;
		/* times the reciprocal (one multiply a value on the GPU); a zero
		 * or subnormal scale gives zero codes */
		float inv = s >= FLT_MIN ? 1.0f / s : 0.0f;
		xs[t] = s;
		for (int k = 0; k < cols; k++)
			xq[(size_t)t * cols + k] = kern_f32_to_fp8_e4m3(v[k] * inv);
	}
}

void kern_qmatmul_w8a8_cpu(float *out, const float *x, const kern_qweight *w, int n)
{
	const int rows = w->rows, cols = w->cols;
	uint8_t *xq = malloc((size_t)n * cols + 1);
	float *xs = malloc(sizeof(float) * (n + 1));
	float *xd = malloc(sizeof(float) * ((size_t)n * cols + 1));
	if (!xq || !xs || !xd) {
		for (size_t i = 0; i < (size_t)n * rows; i++)
			out[i] = NAN;
		goto done;
	}
	float dec[256];
	fp8_table(dec);
	kern_quantize_act_fp8_cpu(xq, xs, x, n, cols);
	for (size_t i = 0; i < (size_t)n * cols; i++)
		xd[i] = dec[xq[i]];
#pragma omp parallel for schedule(static) if ((long)n * rows * cols > 1 << 18)
	for (int r = 0; r < rows; r++) {
		const uint8_t *q = (const uint8_t *)w->data + (size_t)r * cols;
		float sw = ((const float *)w->scales)[r];
		for (int t = 0; t < n; t++) {
			const float *xr = xd + (size_t)t * cols;
			float acc = 0; /* products of two e4m3 values are exact in fp32 */
			for (int k = 0; k < cols; k++)
				acc += dec[q[k]] * xr[k];
			out[(size_t)t * rows + r] = acc * sw * xs[t];
		}
	}
done:
	free(xq);
	free(xs);
	free(xd);
}

/* ---- the int8 split path (quant.h, KERN_QPATH_INT8_SPLIT) ---- */

void kern_split_act_int8_cpu(int8_t *xq, float *xs, const float *x, int n, int cols)
{
	for (int t = 0; t < n; t++) {
		const float *v = x + (size_t)t * cols;
		float s = amax_of(v, cols) / (float)KERN_QSPLIT_MAX;
		float inv = s >= FLT_MIN ? 1.0f / s : 0.0f;
		xs[t] = s;
		for (int k = 0; k < cols; k++) {
			float q = rintf(v[k] * inv);
			int qi = q > KERN_QSPLIT_MAX ? KERN_QSPLIT_MAX
				 : q < -KERN_QSPLIT_MAX ? -KERN_QSPLIT_MAX : (int)q;
			/* floor((qi + 128) / 256) with a non-negative dividend */
			int h = (qi + 128 + 256 * 64) / 256 - 64;
			xq[(size_t)t * cols + k] = (int8_t)h;
			xq[(size_t)(n + t) * cols + k] = (int8_t)(qi - 256 * h);
		}
	}
}

/* Row r's exact integer sums over token t's two slices. */
static void split_sums(const int8_t *w, const int8_t *h, const int8_t *l, int cols, int64_t *sh,
		       int64_t *sl)
{
	int64_t a = 0, b = 0;
	for (int k = 0; k < cols; k++) {
		a += (int32_t)w[k] * h[k];
		b += (int32_t)w[k] * l[k];
	}
	*sh = a;
	*sl = b;
}

void kern_qmatmul_int8_split_cpu(float *out, const float *x, const kern_qweight *w, int n)
{
	const int rows = w->rows, cols = w->cols;
	int8_t *xq = malloc(2 * (size_t)n * cols + 1);
	float *xs = malloc(sizeof(float) * (n + 1));
	if (!xq || !xs || w->format != KERN_Q_INT8 || w->group != 0) {
		for (size_t i = 0; i < (size_t)n * rows; i++)
			out[i] = NAN;
		goto done;
	}
	kern_split_act_int8_cpu(xq, xs, x, n, cols);
#pragma omp parallel for schedule(static) if ((long)n * rows * cols > 1 << 18)
	for (int r = 0; r < rows; r++) {
		const int8_t *q = (const int8_t *)w->data + (size_t)r * cols;
		const float sw = get_scale(w, r);
		for (int t = 0; t < n; t++) {
			int64_t sh, sl;
			split_sums(q, xq + (size_t)t * cols, xq + (size_t)(n + t) * cols, cols, &sh, &sl);
			float sum = fmaf(256.0f, (float)(int32_t)sh, (float)(int32_t)sl);
			out[(size_t)t * rows + r] = sum * sw * xs[t];
		}
	}
done:
	free(xq);
	free(xs);
}
