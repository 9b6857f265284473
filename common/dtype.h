/*
 * dtype.h — storage dtypes and scalar conversions to and from fp32.
 * Used by the checkpoint reader (convert on load), the CPU backend and the
 * kernel tests (compare fp16/bf16 device results with fp32 references).
 */
#ifndef SL_DTYPE_H
#define SL_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SL_DT_F32 = 0, SL_DT_F16 = 1, SL_DT_BF16 = 2 } sl_dtype;

size_t sl_dtype_size(sl_dtype t);
const char *sl_dtype_name(sl_dtype t);
/* Parses "F32"/"F16"/"BF16" (safetensors) and "float32"/"float16"/"bfloat16"
 * (config.json); returns -1 when unknown. */
int sl_dtype_parse(const char *s);

float sl_f16_to_f32(uint16_t h);
uint16_t sl_f32_to_f16(float f);   /* round to nearest even */
float sl_bf16_to_f32(uint16_t b);
uint16_t sl_f32_to_bf16(float f);  /* round to nearest even */

/* Convert n elements between any two dtypes (src and dst must not overlap). */
void sl_convert(void *dst, sl_dtype dt, const void *src, sl_dtype st, size_t n);

#ifdef __cplusplus
}
#endif
#endif
