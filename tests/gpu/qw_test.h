/*
 * qw_test.h — a quantized weight on both sides for the GPU tests of the
 * quantized layer (test_quant.c, test_fused.c, test_parts.c): a format
 * description (qcfg), the host copy kern_quantize_rows fills and its
 * device twin (qw), quantized on the CPU as the loader does and uploaded
 * (qw_random: random weights of row- and block-varying magnitude).
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

/* The formats the tests run, by name (qw_cfg); test_quant goes through
 * them all. */
static const qcfg qw_cfgs[] = {
	{"int8/row", KERN_Q_INT8, 0, SL_DT_F32, 0},
	{"int8/row-f16s", KERN_Q_INT8, 0, SL_DT_F16, 0},
	{"int8/g32", KERN_Q_INT8, 32, SL_DT_F16, 0},
	{"int8/g64", KERN_Q_INT8, 64, SL_DT_F32, 0},
	{"int8/g128", KERN_Q_INT8, 128, SL_DT_F16, 0},
	{"fp8/row", KERN_Q_FP8, 0, SL_DT_F32, 0},
	{"int4/g128", KERN_Q_INT4, 128, SL_DT_F16, 1},
	{"int4/g128-sym", KERN_Q_INT4, 128, SL_DT_F16, 0},
	{"int4/g128-f32s", KERN_Q_INT4, 128, SL_DT_F32, 1},
	/* in_dims that are not a multiple of 128 (SmolLM2's 576): two groups per chunk */
	{"int4/g64", KERN_Q_INT4, 64, SL_DT_F16, 1},
	{"int4/g64-sym", KERN_Q_INT4, 64, SL_DT_F16, 0},
	/* GGUF Q4_1's form: (d, m) pairs, each weight d * u + m rounded to the
	 * dtype once before the tensor cores (as dequantize + cuBLAS does) */
	{"int4/g32", KERN_Q_INT4, 32, SL_DT_F16, 0},
};
#define QW_N_CFGS (int)(sizeof qw_cfgs / sizeof *qw_cfgs)

static inline const qcfg *qw_cfg(const char *name)
{
	for (int i = 0; i < QW_N_CFGS; i++)
		if (!strcmp(qw_cfgs[i].name, name))
			return &qw_cfgs[i];
	ck_abort_msg("no format %s in qw_cfgs", name);
	return NULL;
}

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

/* Random weights whose magnitude changes by row and by 32-column block, so
 * a scale read for the wrong row or group shows; quantized on the CPU as
 * the loader will, then uploaded. */
static inline void qw_random(qw *q, const qcfg *c, int rows, int cols)
{
	float *w = gt_malloc(sizeof(float) * rows * cols);
	gt_fill(w, (size_t)rows * cols, -1, 1);
	for (int r = 0; r < rows; r++)
		for (int k = 0; k < cols; k++)
			w[(size_t)r * cols + k] *= (float)(1 + (r * 7 + k / 32) % 5) * 0.25f;
	qw_quantize(q, c, rows, cols, w);
	free(w);
}

#endif
