/*
 * gpu_test.h — helpers for the CUDA kernel tests: a seeded random source
 * (the seed is printed so a failure can be replayed with SL_TEST_SEED),
 * inputs rounded to the storage dtype so the fp32 CPU reference sees exactly
 * what the GPU sees, device buffers poisoned with 0xFF bytes (NaN in f16,
 * bf16 and f32) before a kernel writes them, and a comparison that reports
 * the worst error relative to max |ref| and the first element beyond the
 * tolerance with both values.
 * Header-only (static functions): included by tests/gpu/test_*.c.
 */
#ifndef TESTS_GPU_TEST_H
#define TESTS_GPU_TEST_H

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/dtype.h"
#include "kernels/pdl.h"
#include "common/rng.h"

/* A CUDA runtime call that must succeed (test setup, not the code under test). */
#define GT_CUDA(call)                                                                   \
	do {                                                                            \
		cudaError_t e_ = (call);                                                \
		ck_assert_msg(e_ == cudaSuccess, "%s:%d: %s: %s", __FILE__, __LINE__,   \
			      #call, cudaGetErrorString(e_));                           \
	} while (0)

/* A kernel entry point returning 0 / SL_E*, then a sync that surfaces
 * asynchronous faults (bad addresses) at the kernel that caused them. */
#define GT_KERNEL(call)                                                                 \
	do {                                                                            \
		int rc_ = (call);                                                       \
		ck_assert_msg(rc_ == 0, "%s:%d: %s returned %d", __FILE__, __LINE__,    \
			      #call, rc_);                                              \
		GT_CUDA(cudaDeviceSynchronize());                                       \
	} while (0)

/* ---- random source: splitmix64 ---- */

static uint64_t gt_state;

/* Programmatic dependent launch, as the backend decides it: on unless SL_PDL=0. */
static inline int gt_pdl_on(void)
{
	const char *pdl = getenv("SL_PDL");
	return !(pdl && !strcmp(pdl, "0"));
}

/* Seed from SL_TEST_SEED when set (replay), else time(NULL); printed. */
static inline uint64_t gt_seed_from_env(void)
{
	const char *s = getenv("SL_TEST_SEED");
	uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
	/* the step's small kernels launch as programmatic dependents as the
	 * backend launches them: unless SL_PDL=0 (kernels/pdl.h) */
	kern_pdl_enable(gt_pdl_on());
	printf("gpu kernel tests: seed %llu (replay with SL_TEST_SEED=%llu)\n",
	       (unsigned long long)seed, (unsigned long long)seed);
	fflush(stdout);
	gt_state = seed;
	return seed;
}

/* Re-seed per test so each test's inputs do not depend on which ran first. */
static inline void gt_reseed(uint64_t seed, uint64_t salt)
{
	gt_state = seed ^ (salt * 0x9E3779B97F4A7C15ull);
}

static inline uint64_t gt_next(void)
{
	return sl_splitmix64(&gt_state);
}

/* Uniform in [0, 1). */
static inline double gt_unit(void)
{
	return (double)(gt_next() >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [lo, hi]. */
static inline int gt_int(int lo, int hi)
{
	return lo + (int)(gt_next() % (uint64_t)(hi - lo + 1));
}

/* Uniform in [lo, hi], never (near) zero: values within 1e-3 of the range
 * of zero are drawn again, so no element is trivially right. */
static inline void gt_fill(float *x, size_t n, float lo, float hi)
{
	float eps = 1e-3f * (fabsf(lo) > fabsf(hi) ? fabsf(lo) : fabsf(hi));
	for (size_t i = 0; i < n; i++) {
		float v;
		do
			v = lo + (float)gt_unit() * (hi - lo);
		while (fabsf(v) < eps);
		x[i] = v;
	}
}

static inline void gt_shuffle(int32_t *a, int n)
{
	for (int i = n - 1; i > 0; i--) {
		int j = gt_int(0, i);
		int32_t t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
}

/* ---- host <-> device in a storage dtype ---- */

static inline const char *gt_dt_name(sl_dtype dt)
{
	return dt == SL_DT_F16 ? "f16" : dt == SL_DT_BF16 ? "bf16" : "f32";
}

/* Round x in place to dtype dt and back: the values both sides will see. */
static inline void gt_round(float *x, size_t n, sl_dtype dt)
{
	if (dt == SL_DT_F32)
		return;
	uint16_t *tmp = malloc(n * 2 + 2);
	ck_assert_ptr_nonnull(tmp);
	sl_convert(tmp, dt, x, SL_DT_F32, n);
	sl_convert(x, SL_DT_F32, tmp, dt, n);
	free(tmp);
}

static inline void *gt_malloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	ck_assert_ptr_nonnull(p);
	return p;
}

static inline void *gt_dev_alloc(size_t bytes)
{
	void *d = NULL;
	GT_CUDA(cudaMalloc(&d, bytes ? bytes : 16));
	return d;
}

/* Device buffer filled with 0xFF bytes: NaN in every float dtype, so an
 * element the kernel forgot to write fails the comparison. */
static inline void *gt_dev_poison(size_t bytes)
{
	void *d = gt_dev_alloc(bytes);
	GT_CUDA(cudaMemset(d, 0xFF, bytes ? bytes : 16));
	return d;
}

/* Whether two device buffers hold the same bytes (synchronizes). */
static inline int gt_dev_equal(const void *a, const void *b, size_t bytes)
{
	unsigned char *ha = gt_malloc(bytes ? bytes : 1), *hb = gt_malloc(bytes ? bytes : 1);
	GT_CUDA(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
	int eq = !memcmp(ha, hb, bytes);
	free(ha);
	free(hb);
	return eq;
}

static inline void *gt_upload_raw(const void *h, size_t bytes)
{
	void *d = gt_dev_alloc(bytes);
	GT_CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	return d;
}

/* fp32 host values -> new device buffer in dtype dt. */
static inline void *gt_upload(const float *h, size_t n, sl_dtype dt)
{
	size_t bytes = n * sl_dtype_size(dt);
	void *tmp = gt_malloc(bytes);
	sl_convert(tmp, dt, h, SL_DT_F32, n);
	void *d = gt_upload_raw(tmp, bytes);
	free(tmp);
	return d;
}

/* Overwrite an existing device buffer with fp32 host values in dtype dt. */
static inline void gt_upload_to(void *d, const float *h, size_t n, sl_dtype dt)
{
	size_t bytes = n * sl_dtype_size(dt);
	void *tmp = gt_malloc(bytes);
	sl_convert(tmp, dt, h, SL_DT_F32, n);
	GT_CUDA(cudaMemcpy(d, tmp, bytes, cudaMemcpyHostToDevice));
	free(tmp);
}

/* Device buffer in dtype dt -> fp32 host values. */
static inline void gt_download(float *h, const void *d, size_t n, sl_dtype dt)
{
	size_t bytes = n * sl_dtype_size(dt);
	void *tmp = gt_malloc(bytes);
	GT_CUDA(cudaMemcpy(tmp, d, bytes, cudaMemcpyDeviceToHost));
	sl_convert(h, SL_DT_F32, tmp, dt, n);
	free(tmp);
}

static inline void gt_dev_free(void *d)
{
	if (d)
		GT_CUDA(cudaFree(d));
}

/* ---- comparison ---- */

/*
 * Worst |got - ref| / max|ref| over n elements (NaN or inf in got: +inf).
 * When it exceeds tol, prints the case and the first element beyond tol
 * with both values. Relative to the tensor's max |ref| rather than to each
 * element: the dtype's rounding of an output is relative to its own
 * magnitude, so a per-element ratio would blow up near zero crossings.
 */
static inline double gt_compare(const char *what, const float *got, const float *ref, size_t n,
			 double tol)
{
	double scale = 0, worst = 0;
	for (size_t i = 0; i < n; i++)
		if (fabs(ref[i]) > scale)
			scale = fabs(ref[i]);
	if (scale == 0)
		scale = 1;
	size_t first_bad = n;
	for (size_t i = 0; i < n; i++) {
		double e = isfinite(got[i]) ? fabs((double)got[i] - ref[i]) / scale : INFINITY;
		if (e > worst)
			worst = e;
		if (e > tol && first_bad == n)
			first_bad = i;
	}
	if (first_bad < n) {
		printf("  FAIL %s: element %zu got %.8g want %.8g (|diff|/max|ref| %.2e > tol %.1e, "
		       "max|ref| %.4g)\n",
		       what, first_bad, got[first_bad], ref[first_bad],
		       isfinite(got[first_bad]) ? fabs((double)got[first_bad] - ref[first_bad]) / scale
						: INFINITY,
		       tol, scale);
		fflush(stdout);
	}
	return worst;
}

/* One summary line per kernel and dtype. */
static inline void gt_report(const char *kernel, sl_dtype dt, double worst, double tol)
{
	printf("kernel %s %s: worst rel err %.1e (tol %.1e)\n", kernel, gt_dt_name(dt), worst,
	       tol);
	fflush(stdout);
}

#endif
