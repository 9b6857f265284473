/*
 * dtype.c — IEEE half and bfloat16 conversions done bit by bit so results
 * are the same on every host compiler (no reliance on _Float16).
 */
#include "common/dtype.h"

#include <string.h>

size_t sl_dtype_size(sl_dtype t) { return t == SL_DT_F32 ? 4 : 2; }

const char *sl_dtype_name(sl_dtype t)
{
	switch (t) {
	case SL_DT_F32: return "F32";
	case SL_DT_F16: return "F16";
	case SL_DT_BF16: return "BF16";
	}
	return "?";
}

int sl_dtype_parse(const char *s)
{
	if (!strcmp(s, "F32") || !strcmp(s, "float32")) return SL_DT_F32;
	if (!strcmp(s, "F16") || !strcmp(s, "float16")) return SL_DT_F16;
	if (!strcmp(s, "BF16") || !strcmp(s, "bfloat16")) return SL_DT_BF16;
	return -1;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float sl_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	if (exp == 0) {
		/* zero or subnormal: value = man * 2^-24 */
		float v = (float)man * (1.0f / 16777216.0f);
		return (h & 0x8000) ? -v : v;
	}
	if (exp == 31)
		return u2f(sign | 0x7f800000u | (man << 13));
	return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t sl_f32_to_f16(float f)
{
	uint32_t u = f2u(f);
	uint16_t sign = (u >> 16) & 0x8000;
	uint32_t a = u & 0x7fffffffu;
	if (a >= 0x7f800000u) /* inf or nan */
		return sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0);
	if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
		return sign | 0x7c00;
	if (a < 0x38800000u) { /* below smallest normal half: subnormal or zero */
		float v = u2f(a) * 16777216.0f; /* in units of 2^-24 */
		uint32_t m = (uint32_t)v;
		float rem = v - (float)m;
		if (rem > 0.5f || (rem == 0.5f && (m & 1)))
			m++;
		return sign | (uint16_t)m;
	}
	uint32_t mant = a & 0x7fffff, exp = (a >> 23) - 112;
	uint32_t h = (exp << 10) | (mant >> 13);
	uint32_t rest = mant & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++; /* may carry into the exponent: still correct */
	return sign | (uint16_t)h;
}

float sl_bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

uint16_t sl_f32_to_bf16(float f)
{
	uint32_t u = f2u(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static float load(const void *p, sl_dtype t, size_t i)
{
	if (t == SL_DT_F32) return ((const float *)p)[i];
	uint16_t h = ((const uint16_t *)p)[i];
	return t == SL_DT_F16 ? sl_f16_to_f32(h) : sl_bf16_to_f32(h);
}

void sl_convert(void *dst, sl_dtype dt, const void *src, sl_dtype st, size_t n)
{
	if (dt == st) {
		memcpy(dst, src, n * sl_dtype_size(dt));
		return;
	}
	for (size_t i = 0; i < n; i++) {
		float v = load(src, st, i);
		if (dt == SL_DT_F32) ((float *)dst)[i] = v;
		else if (dt == SL_DT_F16) ((uint16_t *)dst)[i] = sl_f32_to_f16(v);
		else ((uint16_t *)dst)[i] = sl_f32_to_bf16(v);
	}
}
