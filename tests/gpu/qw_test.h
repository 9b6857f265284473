/*
 * qw_test.h — a quantized weight on both sides for the GPU tests of the
 * quantized layer (test_quant.c, test_fused.c): a format description
 * (qcfg), the host copy kern_quantize_rows fills and its device twin
 * (qw), quantized on the CPU as the loader does and uploaded.
 * Header-only (static functions).
 */
#ifndef TESTS_GPU_QW_TEST_H
#define TESTS_GPU_QW_TEST_H

#include "gpu_test.h"
#include "kernels/quant.h"
#include "common/sl.h"

typedef struct qcfg {
	const char *name;
	int format, group, scale_dt, zeros; /* zeros: int4 with zero points */
} qcfg;

typedef struct qw {
	kern_qweight h, d; /* host and device copies of the same weight */
} qw;

static inline void qw_alloc_host(qw *q, const qcfg *c, int rows, int cols)
{
	memset(q, 0, sizeof *q);
	q->h = (kern_qweight){.format = c->format, .rows = rows, .cols = cols, .group = c->group,
			      .scale_dt = c->scale_dt};
	q->h.data = gt_malloc(kern_qweight_data_bytes(&q->h));
	q->h.scales = gt_malloc(kern_qweight_scale_bytes(&q->h));
	q->h.zeros = c->zeros ? gt_malloc(kern_qweight_zero_bytes(&q->h)) : NULL;
}

static inline void qw_upload(qw *q)
{
	q->d = q->h;
	q->d.data = gt_upload_raw(q->h.data, kern_qweight_data_bytes(&q->h));
	q->d.scales = gt_upload_raw(q->h.scales, kern_qweight_scale_bytes(&q->h));
	q->d.zeros = q->h.zeros ? gt_upload_raw(q->h.zeros, kern_qweight_zero_bytes(&q->h)) : NULL;
}

/* w [rows, cols] fp32 quantized into a new q, then uploaded. */
static inline void qw_quantize(qw *q, const qcfg *c, int rows, int cols, const float *w)
{
	qw_alloc_host(q, c, rows, cols);
	char err[SL_ERRLEN] = "";
	int rc = kern_quantize_rows(&q->h, 0, rows, w, NULL, err, sizeof err);
	ck_assert_msg(rc == 0, "quantize %s: %s", c->name, err);
	qw_upload(q);
}

static inline void qw_free(qw *q)
{
	free(q->h.data);
	free(q->h.scales);
	free(q->h.zeros);
	gt_dev_free(q->d.data);
	gt_dev_free(q->d.scales);
	gt_dev_free(q->d.zeros);
}

#endif
