/*
 * test_fused.c — the decode GEMVs' fused epilogues (kernels/epilogue.h):
 * SwiGLU over [gate | up] rows, the residual add + RMSNorm finished by the
 * grid's last block, and RoPE + KV write after the QKV projection (cache
 * in the run dtype and fp8, a padding token with slot -1 among them),
 * through kern_matmul_epi_cuda (fp16 and bf16
 * weights) and kern_qmatmul_epi_cuda (int8 per row, groups of 32 and 128, fp8,
 * int4 groups of 128 and 64), 1 to 8 tokens fused (2 for the add + norm),
 * up to 64 refused.
 *
 * Each fused call is checked three ways, on fresh random inputs with
 * poisoned outputs (the seed is printed; SL_TEST_SEED replays it):
 * - against the CPU reference: the product (kern_matmul_cpu, or the
 *   quantized reference kern_qmatmul_cpu) rounded to the dtype, then
 *   kern_silu_mul_cpu / kern_add_rmsnorm_cpu / kern_rope_kv_write_cpu
 *   (its qkv);
 * - against the unfused pair on the GPU (the same GEMV storing its
 *   product, then kern_silu_mul_cuda / kern_add_rmsnorm_cuda /
 *   kern_rope_kv_write_cuda): SwiGLU, the residual, and RoPE's qkv and
 *   both whole caches must be equal bit for bit, the norm output within
 *   the elementwise tolerance (its sum of squares runs in another order);
 * - a call the GEMV cannot fuse (columns split across blocks, too many
 *   tokens) must say so and leave every output untouched.
 * The add + norm runs three times in a row: the block counter it keeps
 * must be back at zero after each call. The add alone (KERN_EPI_ADD,
 * with the parts of the sums of squares and the residual times the next
 * norm's weight) runs up to 8 tokens. SwiGLU and RoPE run again with
 * their input not yet divided by its rms, the GEMV dividing its sums
 * (run_pre), on every format (qgemv_kernel's epilogue: its unfused pair
 * with the wide GEMV off; so for the add alone, which only qgemv_kernel
 * has). int8 and fp8 up to 8 tokens (int4 on wide projections) otherwise
 * run on the wide GEMV (kernels/quant.cu) where the tiles fill the SMs,
 * fused and unfused alike.
 * Runs on a GPU host only (make test-gpu).
 */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/epilogue.h"
#include "gpu_test.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "qw_test.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "common/sl.h"
#include "kernels/swiglu.h"

/*
 * Tolerances, as worst |gpu - ref| / max |ref|. Against the CPU: the
 * product's bound of the GEMM tests (tests/gpu/test_kernels.c: 5e-3 f16,
 * 2e-2 bf16, from fp32 order and one rounding to the dtype), doubled for
 * what follows it: silu(g) * u and the norm each carry an error in two
 * operands of that size. Against the unfused GPU pair: 0 for SwiGLU and
 * the residual (the same rounded product, the same formula), and the
 * elementwise bound (test_kernels.c: 4x the dtype's rounding) for the
 * norm output, whose 1/rms may differ in its last bit.
 */
#define TOL_F16 1e-2
#define TOL_BF16 4e-2
#define TOL_NORM_F16 2e-3
#define TOL_NORM_BF16 1.6e-2

static uint64_t g_seed;
static const sl_dtype k_dts[] = {SL_DT_F16, SL_DT_BF16};

static const qcfg k_cfgs[] = {
	{"plain", KERN_Q_NONE, 0, 0, 0},
	{"int8/row", KERN_Q_INT8, 0, SL_DT_F32, 0},
	{"int8/g32", KERN_Q_INT8, 32, SL_DT_F16, 0},
	{"int8/g128", KERN_Q_INT8, 128, SL_DT_F16, 0}, /* the wide GEMV's group path */
	{"fp8/row", KERN_Q_FP8, 0, SL_DT_F32, 0},
	{"int4/g128", KERN_Q_INT4, 128, SL_DT_F16, 1},
	{"int4/g64", KERN_Q_INT4, 64, SL_DT_F16, 1},
	{"int4/g32", KERN_Q_INT4, 32, SL_DT_F16, 0}, /* GGUF Q4_1's (d, m) */
};
#define N_CFGS (int)(sizeof k_cfgs / sizeof *k_cfgs)

/* in x rows of W; SwiGLU's rows are 2 x hidden, RoPE's (hq + 2 hkv) x hd
 * (GQA: 32 query heads over 8 KV heads of 64 and of 128; SmolLM2's 9 over
 * 3, too few tiles: unfused). 576 x 2 x 1536 is
 * SmolLM2's gate/up; 4096 x 4096 the 7B wo (256 row tiles: one split on
 * GPUs of up to 256 SMs); 4096 x 2 x 1004 a hidden not a multiple of 8;
 * the 1024-column shapes have too few tiles, so their columns split
 * across blocks (or, unquantized, are too small for the GEMV): unfused;
 * 8192 and 11008 columns are long rows; 2 x 4352 and 2 x 6400 SwiGLU
 * rows are tiles for 4 to 6 and for more blocks an SM on 132 SMs (int4
 * with groups of 128: 4 warps a block, too few for a PRE epilogue:
 * unfused there).
 * Fused: up to 8 tokens (SwiGLU) and 2 (add + norm, whose norm is serial
 * work of one block, kernels/epilogue.cuh); the larger counts must come
 * back unfused with nothing written. */
typedef struct fshape {
	int kind, in, rows;
	int ns[4], n_ns;
	int hq, hkv, hd; /* ROPE's heads */
} fshape;

static const fshape k_shapes[] = {
	{KERN_EPI_SWIGLU, 576, 2 * 1536, {1, 3, 8, 13}, 4, 0, 0, 0},
	{KERN_EPI_SWIGLU, 4096, 2 * 1004, {1, 5, 64}, 3, 0, 0, 0},
	{KERN_EPI_ADD_NORM, 4096, 4096, {1, 2, 3, 33}, 4, 0, 0, 0},
	{KERN_EPI_ADD_NORM, 4104, 5120, {1, 2}, 2, 0, 0, 0},
	{KERN_EPI_ADD_NORM, 4096, 8200, {1}, 1, 0, 0, 0},
	{KERN_EPI_ADD_NORM, 1024, 512, {1}, 1, 0, 0, 0},
	{KERN_EPI_SWIGLU, 1024, 2 * 256, {2}, 1, 0, 0, 0},
	{KERN_EPI_ROPE, 2048, 48 * 64, {1, 3, 8, 9}, 4, 32, 8, 64},
	{KERN_EPI_ROPE, 4096, 48 * 128, {2}, 1, 32, 8, 128},
	{KERN_EPI_ROPE, 576, 15 * 64, {1}, 1, 9, 3, 64},
	/* long rows */
	{KERN_EPI_ADD_NORM, 11008, 4096, {1, 2}, 2, 0, 0, 0},
	{KERN_EPI_SWIGLU, 8192, 2 * 1536, {1, 8}, 2, 0, 0, 0},
	{KERN_EPI_ROPE, 8192, 48 * 64, {1, 8}, 2, 32, 8, 64},
	/* many row tiles */
	{KERN_EPI_SWIGLU, 1024, 2 * 4352, {1, 8}, 2, 0, 0, 0},
	{KERN_EPI_SWIGLU, 512, 2 * 6400, {1, 3}, 2, 0, 0, 0},
};
#define N_SHAPES (int)(sizeof k_shapes / sizeof *k_shapes)

/* One weight on both sides (qw_test.h; unquantized: only q.d, its data
 * in the run dtype) and the fp32 values the CPU multiplies with: the
 * dtype-rounded weights, or the codes dequantized exactly. */
typedef struct fw {
	qw q;
	float *deq; /* [rows, in] */
} fw;

static void fw_make(fw *f, const qcfg *c, sl_dtype dt, int rows, int in)
{
	size_t nw = (size_t)rows * in;
	float *w = gt_malloc(sizeof(float) * nw);
	gt_fill(w, nw, -1, 1);
	memset(f, 0, sizeof *f);
	f->deq = gt_malloc(sizeof(float) * nw);
	if (c->format == KERN_Q_NONE) {
		gt_round(w, nw, dt);
		memcpy(f->deq, w, sizeof(float) * nw);
		f->q.d = (kern_qweight){.format = KERN_Q_NONE, .rows = rows, .cols = in};
		f->q.d.data = gt_upload(w, nw, dt);
	} else {
		qw_quantize(&f->q, c, rows, in, w);
		for (int r = 0; r < rows; r++)
			kern_qweight_dequant_row_cpu(&f->q.h, r, f->deq + (size_t)r * in);
	}
	free(w);
}

static void fw_free(fw *f)
{
	qw_free(&f->q);
	free(f->deq);
}

typedef struct ctx {
	kern_blas *blas;
	kern_qblas *qb;
	sl_dtype dt;
	double worst_cpu, worst_gpu, worst_norm;
	int fused, unfused;
	/* run_pre: the fused call's input not yet divided by its rms
	 * (kern_epi's pre_* fields, copied into the call's epilogue), with
	 * d_xpre as its x; the unfused pair reads d_x as ever */
	const kern_epi *pre;
	void *d_xpre;
	int pre_fused;
} ctx;

/* The fused call's epilogue e with run_pre's input fields, and its x. */
static const void *with_pre(const ctx *k, kern_epi *e, const void *d_x)
{
	if (!k->pre)
		return d_x;
	e->pre_ss = k->pre->pre_ss, e->pre_parts = k->pre->pre_parts, e->pre_eps = k->pre->pre_eps;
	return k->d_xpre;
}

static void count_fused(ctx *k, int fused)
{
	if (fused)
		k->fused++, k->pre_fused += k->pre != NULL;
	else
		k->unfused++;
}

/* The fused call, or (e == NULL) the unfused product into out. */
static int call(ctx *k, const fw *w, void *out, const void *x, int n, const kern_epi *e,
		int *fused)
{
	const kern_qweight *d = &w->q.d;
	if (!e) {
		*fused = 0;
		if (d->format == KERN_Q_NONE)
			return kern_matmul_cuda(k->blas, out, x, d->data, n, d->cols, d->rows, k->dt);
		return kern_qmatmul_cuda(k->qb, KERN_QPATH_AUTO, out, k->dt, x, k->dt, d, n);
	}
	if (d->format == KERN_Q_NONE)
		return kern_matmul_epi_cuda(k->blas, out, x, d->data, n, d->cols, d->rows, k->dt, e,
					    fused);
	return kern_qmatmul_epi_cuda(k->qb, out, k->dt, x, d, n, e, fused);
}

/* The CPU product rounded to the dtype: what the unfused pair stores. */
static float *cpu_product(ctx *k, const fw *w, const float *x, int n)
{
	float *p = gt_malloc(sizeof(float) * n * w->q.d.rows);
	kern_matmul_cpu(p, x, w->deq, n, w->q.d.cols, w->q.d.rows);
	gt_round(p, (size_t)n * w->q.d.rows, k->dt);
	return p;
}

static double tol_cpu(sl_dtype dt) { return dt == SL_DT_F16 ? TOL_F16 : TOL_BF16; }
static double tol_norm(sl_dtype dt) { return dt == SL_DT_F16 ? TOL_NORM_F16 : TOL_NORM_BF16; }
static double dmax(double a, double b) { return a > b ? a : b; }

/* Not fused: every output must still hold its poison / old value. */
static void check_untouched(const char *what, const void *d, size_t bytes, const void *before)
{
	void *now = gt_malloc(bytes);
	GT_CUDA(cudaMemcpy(now, d, bytes, cudaMemcpyDeviceToHost));
	ck_assert_msg(!memcmp(now, before, bytes), "%s: not fused, yet an output changed", what);
	free(now);
}

/* Not fused: an output allocated by gt_dev_poison still holds 0xFF bytes. */
static void check_poison(const char *what, const void *d, size_t bytes)
{
	void *poison = gt_malloc(bytes);
	memset(poison, 0xFF, bytes);
	check_untouched(what, d, bytes, poison);
	free(poison);
}

static void run_swiglu(ctx *k, const fw *w, const float *x, const void *d_x, int n,
		       const char *what)
{
	const int hidden = w->q.d.rows / 2;
	const size_t no = (size_t)n * hidden, es = sl_dtype_size(k->dt);
	kern_epi e = {.kind = KERN_EPI_SWIGLU};
	const void *d_xf = with_pre(k, &e, d_x);
	void *d_out = gt_dev_poison(es * no);
	int fused = 0;
	GT_KERNEL(call(k, w, d_out, d_xf, n, &e, &fused));
	count_fused(k, fused);
	if (!fused) {
		check_poison(what, d_out, es * no);
		gt_dev_free(d_out);
		return;
	}
	float *got = gt_malloc(sizeof(float) * no), *ref = gt_malloc(sizeof(float) * no);
	gt_download(got, d_out, no, k->dt);
	float *prod = cpu_product(k, w, x, n);
	kern_silu_mul_cpu(ref, prod, n, hidden);
	k->worst_cpu = dmax(k->worst_cpu, gt_compare(what, got, ref, no, tol_cpu(k->dt)));
	/* the unfused pair on the GPU */
	void *d_prod = gt_dev_poison(es * 2 * no), *d_ref = gt_dev_poison(es * no);
	int f;
	GT_KERNEL(call(k, w, d_prod, d_x, n, NULL, &f));
	GT_KERNEL(kern_silu_mul_cuda(d_ref, d_prod, n, hidden, k->dt, NULL));
	gt_download(ref, d_ref, no, k->dt);
	k->worst_gpu = dmax(k->worst_gpu, gt_compare(what, got, ref, no, 0.0));
	gt_dev_free(d_out);
	gt_dev_free(d_prod);
	gt_dev_free(d_ref);
	free(got);
	free(ref);
	free(prod);
}

/* One fused add + norm from residual res0 (host, fp32); compares both
 * outputs with the CPU and with the unfused GPU pair. */
static void run_add_norm(ctx *k, const fw *w, const float *x, const void *d_x, int n,
			 const float *res0, const void *d_nw, const float *nw, const char *what)
{
	const int dim = w->q.d.rows;
	const size_t no = (size_t)n * dim, es = sl_dtype_size(k->dt);
	const float eps = 1e-5f;
	float *d_res = gt_upload(res0, no, SL_DT_F32);
	void *d_out = gt_dev_poison(es * no);
	void *d_proj = gt_dev_poison(es * no);
	const kern_epi e = {.kind = KERN_EPI_ADD_NORM, .residual = d_res, .norm_w = d_nw,
			    .norm_out = d_out, .eps = eps};
	int fused = 0;
	GT_KERNEL(call(k, w, d_proj, d_x, n, &e, &fused));
	if (!fused) {
		check_poison(what, d_out, es * no);
		check_poison(what, d_proj, es * no);
		check_untouched(what, d_res, sizeof(float) * no, res0);
		k->unfused++;
		gt_dev_free(d_res), gt_dev_free(d_out), gt_dev_free(d_proj);
		return;
	}
	k->fused++;
	float *got = gt_malloc(sizeof(float) * no), *got_res = gt_malloc(sizeof(float) * no);
	float *ref = gt_malloc(sizeof(float) * no), *ref_res = gt_malloc(sizeof(float) * no);
	gt_download(got, d_out, no, k->dt);
	gt_download(got_res, d_res, no, SL_DT_F32);
	float *prod = cpu_product(k, w, x, n);
	memcpy(ref_res, res0, sizeof(float) * no);
	kern_add_rmsnorm_cpu(ref_res, prod, nw, ref, n, dim, eps);
	k->worst_cpu = dmax(k->worst_cpu, gt_compare(what, got_res, ref_res, no, tol_cpu(k->dt)));
	k->worst_cpu = dmax(k->worst_cpu, gt_compare(what, got, ref, no, tol_cpu(k->dt)));
	/* the unfused pair on the GPU, from the same residual */
	float *d_res2 = gt_upload(res0, no, SL_DT_F32);
	void *d_ref = gt_dev_poison(es * no);
	int f;
	GT_KERNEL(call(k, w, d_proj, d_x, n, NULL, &f));
	GT_KERNEL(kern_add_rmsnorm_cuda(d_res2, d_proj, d_nw, d_ref, n, dim, eps, k->dt, NULL));
	gt_download(ref_res, d_res2, no, SL_DT_F32);
	gt_download(ref, d_ref, no, k->dt);
	k->worst_gpu = dmax(k->worst_gpu, gt_compare(what, got_res, ref_res, no, 0.0));
	k->worst_norm = dmax(k->worst_norm, gt_compare(what, got, ref, no, tol_norm(k->dt)));
	gt_dev_free(d_res), gt_dev_free(d_out), gt_dev_free(d_proj);
	gt_dev_free(d_res2), gt_dev_free(d_ref);
	free(got), free(got_res), free(ref), free(ref_res), free(prod);
}

/* Worst |got - want| / want over block t's part of the sum of squares of
 * rows [16 t, +16) of res [n, dim], for every tile and token. */
static double sumsq_err(const float *got, const float *res, int n, int dim)
{
	double worst = 0;
	for (int t = 0; 16 * t < dim; t++)
		for (int tok = 0; tok < n; tok++) {
			double want = 0;
			for (int r = 16 * t; r < 16 * t + 16 && r < dim; r++)
				want += (double)res[(size_t)tok * dim + r] * res[(size_t)tok * dim + r];
			worst = dmax(worst, fabs(got[(size_t)t * n + tok] - want) / (want > 0 ? want : 1));
		}
	return worst;
}

/* The add alone (what runs before a norm left to the next GEMV), up to 8
 * tokens fused: the residual must equal res0 plus the unfused GEMV's
 * stored product bit for bit (one fp32 add each), and norm_out the new
 * residual times nw rounded to the dtype, bit for bit (one fp32 multiply
 * each); with sumsq (up to 2 tokens), each block's part of the sums of
 * squares of the new residual within 1e-5 of the host's (fp32 in another
 * order). */
static void run_add_alone(ctx *k, const fw *w, const float *x, const void *d_x, int n,
			  const float *res0, const void *d_nw, const float *nw, const char *what)
{
	const int dim = w->q.d.rows, tiles = (dim + 15) / 16;
	const size_t no = (size_t)n * dim, es = sl_dtype_size(k->dt), nss = (size_t)tiles * n;
	float *d_res = gt_upload(res0, no, SL_DT_F32);
	void *d_out = gt_dev_poison(es * no), *d_proj = gt_dev_poison(es * no);
	float *d_ss = n <= KERN_PRE_MAX_TOKENS ? gt_dev_poison(sizeof(float) * nss) : NULL;
	const kern_epi e = {.kind = KERN_EPI_ADD, .residual = d_res, .norm_w = d_nw,
			    .norm_out = d_out, .sumsq = d_ss};
	int fused = 0;
	GT_KERNEL(call(k, w, d_proj, d_x, n, &e, &fused));
	count_fused(k, fused);
	if (!fused) {
		check_poison(what, d_out, es * no);
		check_poison(what, d_proj, es * no);
		check_untouched(what, d_res, sizeof(float) * no, res0);
		if (d_ss)
			check_poison(what, d_ss, sizeof(float) * nss);
		gt_dev_free(d_res), gt_dev_free(d_out), gt_dev_free(d_proj), gt_dev_free(d_ss);
		return;
	}
	float *got = gt_malloc(sizeof(float) * no), *ref = gt_malloc(sizeof(float) * no);
	gt_download(got, d_res, no, SL_DT_F32);
	if (d_ss) {
		float *ss = gt_malloc(sizeof(float) * nss);
		gt_download(ss, d_ss, nss, SL_DT_F32);
		const double err = sumsq_err(ss, got, n, dim);
		ck_assert_msg(err <= 1e-5, "%s: sums of squares off by %.3g", what, err);
		free(ss);
	}
	float *xw = gt_malloc(sizeof(float) * no);
	gt_download(xw, d_out, no, k->dt);
	for (size_t i = 0; i < no; i++)
		ref[i] = got[i] * nw[i % dim];
	gt_round(ref, no, k->dt);
	k->worst_gpu = dmax(k->worst_gpu, gt_compare(what, xw, ref, no, 0.0));
	float *prod = cpu_product(k, w, x, n);
	for (size_t i = 0; i < no; i++)
		ref[i] = res0[i] + prod[i];
	k->worst_cpu = dmax(k->worst_cpu, gt_compare(what, got, ref, no, tol_cpu(k->dt)));
	int f;
	/* on qgemv_kernel, the add's own kernel (the wide GEMV has no ADD) */
	kern_qblas_set_gemv_wide(k->qb, 0);
	GT_KERNEL(call(k, w, d_proj, d_x, n, NULL, &f));
	kern_qblas_set_gemv_wide(k->qb, 1);
	gt_download(prod, d_proj, no, k->dt);
	for (size_t i = 0; i < no; i++)
		ref[i] = res0[i] + prod[i];
	k->worst_gpu = dmax(k->worst_gpu, gt_compare(what, got, ref, no, 0.0));
	gt_dev_free(d_res), gt_dev_free(d_out), gt_dev_free(d_proj), gt_dev_free(d_ss);
	free(got), free(ref), free(prod), free(xw);
}

/* RoPE's batch: n tokens at random positions and distinct random slots of
 * a cache of ROPE_BLOCKS blocks; token 1 of 3 or more is padding (slot -1). */
#define ROPE_BT 16
#define ROPE_BLOCKS 8

typedef struct rope_io {
	kern_paged_batch hb, db; /* host and device views */
	int32_t pos[16], slot[16]; /* n <= 16 */
	float *inv_freq;         /* host [hd / 2] */
	void *d_inv, *d_pos, *d_slot;
	unsigned char *cache0;   /* initial bytes of K then V */
	size_t cache_bytes;      /* of one of them */
} rope_io;

static void rope_io_make(rope_io *r, const fshape *s, int n, int kv_fp8, sl_dtype dt)
{
	int32_t all[ROPE_BLOCKS * ROPE_BT];
	for (int i = 0; i < ROPE_BLOCKS * ROPE_BT; i++)
		all[i] = i;
	gt_shuffle(all, ROPE_BLOCKS * ROPE_BT);
	for (int t = 0; t < n; t++) {
		r->pos[t] = gt_int(0, 8191);
		r->slot[t] = n >= 3 && t == 1 ? -1 : all[t];
	}
	r->inv_freq = gt_malloc(sizeof(float) * s->hd / 2);
	const kern_rope_params rp = {.theta = 10000.0f};
	kern_rope_inv_freq(r->inv_freq, s->hd, &rp);
	r->d_inv = gt_upload(r->inv_freq, s->hd / 2, SL_DT_F32);
	r->d_pos = gt_upload_raw(r->pos, sizeof(int32_t) * n);
	r->d_slot = gt_upload_raw(r->slot, sizeof(int32_t) * n);
	r->hb = (kern_paged_batch){.n_tokens = n, .positions = r->pos, .slots = r->slot,
				   .block_tokens = ROPE_BT};
	r->db = r->hb;
	r->db.positions = r->d_pos;
	r->db.slots = r->d_slot;
	r->cache_bytes = (size_t)ROPE_BLOCKS * s->hkv * ROPE_BT * s->hd *
			 (kv_fp8 ? 1 : sl_dtype_size(dt));
	r->cache0 = gt_malloc(2 * r->cache_bytes);
	for (size_t i = 0; i < 2 * r->cache_bytes; i++)
		r->cache0[i] = (unsigned char)gt_int(0, 0x77); /* finite in every format */
}

static void rope_io_free(rope_io *r)
{
	free(r->inv_freq), free(r->cache0);
	gt_dev_free(r->d_inv), gt_dev_free(r->d_pos), gt_dev_free(r->d_slot);
}

/* Bytes of device buffer d equal to host bytes want: 1, else 0. */
static int dev_equal(const void *d, const void *want, size_t bytes)
{
	void *now = gt_malloc(bytes);
	GT_CUDA(cudaMemcpy(now, d, bytes, cudaMemcpyDeviceToHost));
	int eq = !memcmp(now, want, bytes);
	free(now);
	return eq;
}

/* One fused QKV projection + RoPE + KV write against the CPU (qkv) and
 * the unfused GPU pair (qkv and both caches, bit for bit). */
static void run_rope(ctx *k, const fw *w, const float *x, const void *d_x, int n,
		     const fshape *s, int kv_fp8, const char *what)
{
	const size_t no = (size_t)n * s->rows, es = sl_dtype_size(k->dt);
	rope_io r;
	rope_io_make(&r, s, n, kv_fp8, k->dt);
	const size_t cb = r.cache_bytes;
	void *d_qkv = gt_dev_poison(es * no), *d_kc = gt_upload_raw(r.cache0, cb);
	void *d_vc = gt_upload_raw(r.cache0 + cb, cb);
	kern_epi e = {.kind = KERN_EPI_ROPE, .positions = r.db.positions,
		      .slots = r.db.slots, .k_cache = d_kc, .v_cache = d_vc,
		      .inv_freq = r.d_inv, .n_heads = s->hq, .n_kv_heads = s->hkv,
		      .head_dim = s->hd, .block_tokens = ROPE_BT, .kv_fp8 = kv_fp8};
	const void *d_xf = with_pre(k, &e, d_x);
	int fused = 0;
	GT_KERNEL(call(k, w, d_qkv, d_xf, n, &e, &fused));
	count_fused(k, fused);
	if (!fused) {
		check_poison(what, d_qkv, es * no);
		check_untouched(what, d_kc, cb, r.cache0);
		check_untouched(what, d_vc, cb, r.cache0 + cb);
	} else {
		float *got = gt_malloc(sizeof(float) * no), *ref = cpu_product(k, w, x, n);
		size_t nc = cb / (kv_fp8 ? 1 : es);
		float *kc = gt_malloc(sizeof(float) * nc), *vc = gt_malloc(sizeof(float) * nc);
		kern_rope_kv_write_cpu(ref, kc, vc, &r.hb, s->hq, s->hkv, s->hd, r.inv_freq, kv_fp8);
		gt_download(got, d_qkv, no, k->dt);
		k->worst_cpu = dmax(k->worst_cpu, gt_compare(what, got, ref, no, tol_cpu(k->dt)));
		/* the unfused pair on the GPU, from the same caches */
		void *d_q2 = gt_dev_poison(es * no), *d_k2 = gt_upload_raw(r.cache0, cb);
		void *d_v2 = gt_upload_raw(r.cache0 + cb, cb);
		unsigned char *want = gt_malloc(2 * cb + es * no);
		int f;
		GT_KERNEL(call(k, w, d_q2, d_x, n, NULL, &f));
		GT_KERNEL(kern_rope_kv_write_cuda(d_q2, d_k2, d_v2, &r.db, s->hq, s->hkv, s->hd,
						  r.d_inv, k->dt, kv_fp8, NULL));
		GT_CUDA(cudaMemcpy(want, d_k2, cb, cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(want + cb, d_v2, cb, cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(want + 2 * cb, d_q2, es * no, cudaMemcpyDeviceToHost));
		const int k_eq = dev_equal(d_kc, want, cb), v_eq = dev_equal(d_vc, want + cb, cb);
		const int q_eq = dev_equal(d_qkv, want + 2 * cb, es * no);
		const int same = k_eq && v_eq && q_eq;
		if (!same)
			printf("%s kv_fp8 %d: fused RoPE differs from the unfused pair (qkv %s, k "
			       "cache %s, v cache %s)\n", what, kv_fp8, q_eq ? "equal" : "differs",
			       k_eq ? "equal" : "differs", v_eq ? "equal" : "differs");
		k->worst_gpu = dmax(k->worst_gpu, same ? 0.0 : 1.0);
		gt_dev_free(d_q2), gt_dev_free(d_k2), gt_dev_free(d_v2);
		free(got), free(ref), free(kc), free(vc), free(want);
	}
	gt_dev_free(d_qkv), gt_dev_free(d_kc), gt_dev_free(d_vc);
	rope_io_free(&r);
}

static void run_swiglu_rope(ctx *k, const fw *w, const float *x, const void *d_x, int n,
			    const fshape *s, const char *what)
{
	if (s->kind == KERN_EPI_SWIGLU) {
		run_swiglu(k, w, x, d_x, n, what);
		return;
	}
	for (int kv_fp8 = 0; kv_fp8 < 2; kv_fp8++)
		run_rope(k, w, x, d_x, n, s, kv_fp8, what);
}

/*
 * SwiGLU or RoPE with the input not yet divided by its rms (kern_epi's
 * pre_ss): the call gets xw = the residual times the norm's weight and
 * the rows' sums of squares in parts (PRE_PARTS_*), and divides its sums by
 * each token's rms. The test makes that exact: token t's sum of squares
 * is cols * (4^-k - eps) with eps = 2^-10 and k = 1 for token 0, -1 for
 * token 1, in parts that are multiples of 1/64 (exact in any order), so
 * 1 / rms is 2^k exactly and the unfused chain's input x = xw * 2^k is
 * exact too; every sum the GEMV makes then scales by 2^k exactly, and
 * the fused call must equal the unfused chain (the GEMV on x and the
 * epilogue's kernel) bit for bit, as without the norm. xw stays away
 * from fp16's subnormals, where halving would round. The call must not
 * write xw. Calls past KERN_PRE_MAX_TOKENS tokens, and blocks of fewer
 * than 8 warps, must come back unfused with nothing written.
 */
/* Parts per token: an odd count, and the tp all-reduce's (its blocks,
 * PAR_CAR_BLOCKS_DEFAULT: parallel/allreduce.h), alternating by n. */
#define PRE_PARTS_ODD 37
#define PRE_PARTS_AR 32
#define PRE_EPS (1.0f / 1024.0f)

/* ss [parts, n]: token t's parts, multiples of 1/64 summing to
 * cols * (4^-k - PRE_EPS); returns 2^k, its 1 / rms. */
static float pre_parts(float *ss, int parts, int n, int t, int cols)
{
	const int k = t == 0 ? 1 : -1;
	const long units = (long)cols * (k == 1 ? 16 : 256) - cols / 16; /* of 1/64 */
	long left = units;
	for (int p = 0; p < parts - 1; p++) {
		const long u = gt_int(0, (int)(units / parts));
		ss[(size_t)p * n + t] = (float)u / 64.0f;
		left -= u;
	}
	ss[(size_t)(parts - 1) * n + t] = (float)left / 64.0f;
	return k == 1 ? 2.0f : 0.5f;
}

static void run_pre(ctx *k, const fw *w, const fshape *s, int n, int parts, const char *what)
{
	const size_t nx = (size_t)n * s->in, es = sl_dtype_size(k->dt);
	float *xw = gt_malloc(sizeof(float) * nx), *x = gt_malloc(sizeof(float) * nx);
	float *ss = gt_malloc(sizeof(float) * parts * n);
	gt_fill(xw, nx, -1, 1);
	for (size_t i = 0; i < nx; i++) /* |xw| >= 2^-9: no fp16 subnormal halves */
		xw[i] += xw[i] < 0 ? -0.002f : 0.002f;
	gt_round(xw, nx, k->dt);
	for (int t = 0; t < n; t++) {
		const float inv = pre_parts(ss, parts, n, t, s->in);
		for (int j = 0; j < s->in; j++)
			x[(size_t)t * s->in + j] = xw[(size_t)t * s->in + j] * inv;
	}
	void *d_x = gt_upload(x, nx, k->dt);
	float *d_ss = gt_upload(ss, (size_t)parts * n, SL_DT_F32);
	const kern_epi pre = {.pre_ss = d_ss, .pre_parts = parts, .pre_eps = PRE_EPS};
	char what2[192];
	snprintf(what2, sizeof what2, "%s, its rms at the GEMV's end (%d parts)", what, parts);
	k->pre = &pre;
	k->d_xpre = gt_upload(xw, nx, k->dt);
	void *xw_bytes = gt_malloc(es * nx);
	GT_CUDA(cudaMemcpy(xw_bytes, k->d_xpre, es * nx, cudaMemcpyDeviceToHost));
	/* the unfused pair on qgemv_kernel, the fused call's own kernel (the
	 * wide GEMV, which takes no PRE, sums in other block shapes) */
	kern_qblas_set_gemv_wide(k->qb, 0);
	run_swiglu_rope(k, w, x, d_x, n, s, what2);
	kern_qblas_set_gemv_wide(k->qb, 1);
	check_untouched(what2, k->d_xpre, es * nx, xw_bytes);
	gt_dev_free(k->d_xpre);
	k->pre = NULL;
	k->d_xpre = NULL;
	gt_dev_free(d_x), gt_dev_free(d_ss);
	free(xw), free(x), free(ss), free(xw_bytes);
}

static const char *kind_name(int kind)
{
	return kind == KERN_EPI_SWIGLU ? "swiglu" : kind == KERN_EPI_ROPE ? "rope" : "add_norm";
}

/* A weight's format must take the shape's columns: a whole number of
 * groups, and of 16-byte rows of codes (16 int8/fp8 columns). */
static int takes(const qcfg *c, int in)
{
	return (c->group == 0 || in % c->group == 0) && (c->format == KERN_Q_NONE || in % 16 == 0);
}

static void run_shape(ctx *k, const qcfg *c, const fshape *s)
{
	fw w;
	fw_make(&w, c, k->dt, s->rows, s->in);
	for (int i = 0; i < s->n_ns; i++) {
		const int n = s->ns[i];
		const size_t nx = (size_t)n * s->in;
		float *x = gt_malloc(sizeof(float) * nx);
		gt_fill(x, nx, -1, 1);
		gt_round(x, nx, k->dt);
		void *d_x = gt_upload(x, nx, k->dt);
		char what[128];
		snprintf(what, sizeof what, "%s %s %s in %d rows %d n %d", c->name,
			 gt_dt_name(k->dt), kind_name(s->kind), s->in, s->rows, n);
		if (s->kind != KERN_EPI_ADD_NORM) {
			run_swiglu_rope(k, &w, x, d_x, n, s, what);
			run_pre(k, &w, s, n, i % 2 ? PRE_PARTS_AR : PRE_PARTS_ODD, what);
		} else {
			const size_t no = (size_t)n * s->rows;
			float *res = gt_malloc(sizeof(float) * no), *nw = gt_malloc(sizeof(float) * s->rows);
			gt_fill(nw, s->rows, -1.5f, 1.5f);
			gt_round(nw, s->rows, k->dt);
			void *d_nw = gt_upload(nw, s->rows, k->dt);
			for (int rep = 0; rep < 3; rep++) { /* the counter resets */
				gt_fill(res, no, -30, 30);
				run_add_norm(k, &w, x, d_x, n, res, d_nw, nw, what);
			}
			gt_fill(res, no, -30, 30);
			run_add_alone(k, &w, x, d_x, n, res, d_nw, nw, what);
			gt_dev_free(d_nw);
			free(res), free(nw);
		}
		gt_dev_free(d_x);
		free(x);
	}
	fw_free(&w);
}

static void test_cfg(int ci)
{
	const qcfg *c = &k_cfgs[ci];
	ctx k = {0};
	ck_assert_int_eq(kern_blas_create(NULL, &k.blas), 0);
	kern_qblas_config qc = {.max_tokens = 64, .max_cols = 4096};
	ck_assert_int_eq(kern_qblas_create(NULL, &qc, &k.qb), 0);
	kern_blas_set_pdl(k.blas, gt_pdl_on());
	kern_qblas_set_pdl(k.qb, gt_pdl_on());
	/* the plain GEMV in both its block shapes (kern_blas_set_gemv_warps) */
	for (int wd = 0; wd < (ci == 0 ? 4 : 2); wd++) {
		int di = wd % 2, warps = wd < 2 ? 4 : 8;
		kern_blas_set_gemv_warps(k.blas, warps);
		k.dt = k_dts[di];
		k.worst_cpu = k.worst_gpu = k.worst_norm = 0;
		k.fused = k.unfused = k.pre_fused = 0;
		gt_reseed(g_seed, 900 + 10 * ci + di);
		for (int si = 0; si < N_SHAPES; si++)
			if (takes(c, k_shapes[si].in))
				run_shape(&k, c, &k_shapes[si]);
		printf("fused %-10s %s (GEMV %d warps): %d fused (%d with the rms at the end), %d not; "
		       "worst vs CPU %.3g (tol %.3g), vs unfused GPU %.3g (tol 0), norm %.3g (tol %.3g)\n",
		       c->name, gt_dt_name(k.dt), warps, k.fused, k.pre_fused, k.unfused, k.worst_cpu,
		       tol_cpu(k.dt), k.worst_gpu, k.worst_norm, tol_norm(k.dt));
		fflush(stdout);
		ck_assert_msg(k.fused > 0 && k.pre_fused > 0,
			      "%s %s: %d fused, %d with the rms at the end", c->name,
			      gt_dt_name(k.dt), k.fused, k.pre_fused);
		ck_assert_msg(k.worst_cpu <= tol_cpu(k.dt) && k.worst_gpu == 0 &&
				      k.worst_norm <= tol_norm(k.dt),
			      "%s %s: cpu %.3g gpu %.3g norm %.3g", c->name, gt_dt_name(k.dt),
			      k.worst_cpu, k.worst_gpu, k.worst_norm);
	}
	kern_qblas_destroy(k.qb);
	kern_blas_destroy(k.blas);
}

START_TEST(test_plain) { test_cfg(0); }
END_TEST
START_TEST(test_int8) { test_cfg(1); test_cfg(2); test_cfg(3); }
END_TEST
START_TEST(test_fp8) { test_cfg(4); }
END_TEST
START_TEST(test_int4) { test_cfg(5); test_cfg(6); test_cfg(7); }
END_TEST

static void add_case(Suite *s, const char *name, const TTest *test)
{
	TCase *tc = tcase_create(name);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test);
	suite_add_tcase(s, tc);
}

int main(void)
{
	g_seed = gt_seed_from_env();
	Suite *s = suite_create("gpu_fused");
	add_case(s, "plain", test_plain);
	add_case(s, "int8", test_int8);
	add_case(s, "fp8", test_fp8);
	add_case(s, "int4", test_int4);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
