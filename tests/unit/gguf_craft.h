/*
 * gguf_craft.h — test helpers that write GGUF files byte by byte (a
 * growable buffer plus appenders for each field), so tests can produce
 * both well-formed files and every malformed one a real writer refuses to
 * make: lying counts and lengths, unknown types, misaligned or overlapping
 * offsets, inconsistent split parts. Header-only: included by unit tests.
 */
#ifndef TESTS_GGUF_CRAFT_H
#define TESTS_GGUF_CRAFT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "st_craft.h"

typedef struct gb {
	unsigned char *p;
	size_t n, cap;
} gb;

static inline void gb_bytes(gb *b, const void *src, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		b->cap = cap;
	}
	memcpy(b->p + b->n, src, n);
	b->n += n;
}

static inline void gb_le(gb *b, uint64_t v, int nbytes)
{
	unsigned char le[8];
	for (int i = 0; i < nbytes; i++)
		le[i] = (unsigned char)(v >> (8 * i));
	gb_bytes(b, le, (size_t)nbytes);
}

static inline void gb_u8(gb *b, uint8_t v) { gb_le(b, v, 1); }
static inline void gb_u16(gb *b, uint16_t v) { gb_le(b, v, 2); }
static inline void gb_u32(gb *b, uint32_t v) { gb_le(b, v, 4); }
static inline void gb_u64(gb *b, uint64_t v) { gb_le(b, v, 8); }

static inline void gb_f32(gb *b, float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	gb_u32(b, u);
}

static inline void gb_str(gb *b, const char *s)
{
	gb_u64(b, strlen(s));
	gb_bytes(b, s, strlen(s));
}

static inline void gb_zeros(gb *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		gb_u8(b, 0);
}

/* "GGUF", version, tensor count, key/value count. */
static inline void gb_header(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	gb_bytes(b, "GGUF", 4);
	gb_u32(b, version);
	gb_u64(b, n_tensors);
	gb_u64(b, n_kv);
}

static inline void gb_key(gb *b, const char *key, sl_gguf_vtype t)
{
	gb_str(b, key);
	gb_u32(b, (uint32_t)t);
}

static inline void gb_kv_u32(gb *b, const char *key, uint32_t v)
{
	gb_key(b, key, SL_GGUF_U32);
	gb_u32(b, v);
}

static inline void gb_kv_u16(gb *b, const char *key, uint16_t v)
{
	gb_key(b, key, SL_GGUF_U16);
	gb_u16(b, v);
}

static inline void gb_kv_i32(gb *b, const char *key, int32_t v)
{
	gb_key(b, key, SL_GGUF_I32);
	gb_u32(b, (uint32_t)v);
}

static inline void gb_kv_f32(gb *b, const char *key, float v)
{
	gb_key(b, key, SL_GGUF_F32);
	gb_f32(b, v);
}

static inline void gb_kv_bool(gb *b, const char *key, int v)
{
	gb_key(b, key, SL_GGUF_BOOL);
	gb_u8(b, (uint8_t)v);
}

static inline void gb_kv_str(gb *b, const char *key, const char *v)
{
	gb_key(b, key, SL_GGUF_STRING);
	gb_str(b, v);
}

/* An array of n strings. */
static inline void gb_kv_strs(gb *b, const char *key, const char *const *v, int n)
{
	gb_key(b, key, SL_GGUF_ARRAY);
	gb_u32(b, SL_GGUF_STRING);
	gb_u64(b, (uint64_t)n);
	for (int i = 0; i < n; i++)
		gb_str(b, v[i]);
}

static inline void gb_kv_i32s(gb *b, const char *key, const int32_t *v, int n)
{
	gb_key(b, key, SL_GGUF_ARRAY);
	gb_u32(b, SL_GGUF_I32);
	gb_u64(b, (uint64_t)n);
	for (int i = 0; i < n; i++)
		gb_u32(b, (uint32_t)v[i]);
}

/* One tensor info: name, ndim, ne[ndim], type, offset. */
static inline void gb_tensor(gb *b, const char *name, int ndim, const int64_t *ne, int type,
			     uint64_t offset)
{
	gb_str(b, name);
	gb_u32(b, (uint32_t)ndim);
	for (int i = 0; i < ndim; i++)
		gb_u64(b, (uint64_t)ne[i]);
	gb_u32(b, (uint32_t)type);
	gb_u64(b, offset);
}

/* Zero padding up to a multiple of `a` (the data section's start). */
static inline void gb_align(gb *b, size_t a)
{
	while (b->n % a)
		gb_u8(b, 0);
}

static inline int gb_write(gb *b, const char *path)
{
	int rc = craft_raw(path, b->p, b->n);
	free(b->p);
	memset(b, 0, sizeof *b);
	return rc;
}

#endif
