/*
 * backend_cuda.c — the CUDA backend: fp16/bf16 weights and activations, an
 * fp32 residual stream, every op enqueued on one stream. Step inputs go up
 * through pinned staging in one copy; block tables are re-laid with a
 * fixed stride (blocks of a full-context sequence) so a decode step of a
 * given batch size always has the same launch shapes and device addresses,
 * which is what lets run_cached replay it as a CUDA graph.
 *
 * Every op runs inside an NVTX range named after it ("matmul",
 * "attention", ...; model.c adds one per layer through range_push), so an
 * Nsight Systems timeline reads by name. NVTX (header-only, v3, from the
 * CUDA toolkit) calls are host-side markers: a few nanoseconds when no
 * profiler is attached, and nothing is recorded into a captured graph.
 *
 * reserve first checks what the kernels need of the model and the KV
 * layout (node_backend_cuda_check), so a node refuses a shape they cannot
 * run at start, naming the flag or config field, not at its first step.
 */
#include "kernels/attention.h"
#include "node/backend.h"
#include "common/sl.h"

int node_backend_cuda_check(const node_backend_limits *lim, char *err, size_t errlen)
{
	int bt = lim->block_tokens, hd = lim->head_dim;
	if (bt <= 0 || (bt & (bt - 1)))
		return sl_errf(err, errlen, SL_EINVAL,
			       "--block-tokens %d: the CUDA attention kernels need a power of two", bt);
	/* rope.cu rotates element i with i + head_dim / 2 */
	if (hd <= 0 || hd % 2)
		return sl_errf(err, errlen, SL_ENOTSUP,
			       "head_dim %d (config head_dim, or hidden_size / num_attention_heads): "
			       "the CUDA RoPE kernel needs an even head_dim", hd);
	if (hd > KERN_ATTN_MAX_HEAD_DIM)
		return sl_errf(err, errlen, SL_ENOTSUP,
			       "head_dim %d (config head_dim, or hidden_size / num_attention_heads): "
			       "the CUDA attention kernels take at most %d", hd, KERN_ATTN_MAX_HEAD_DIM);
	if (lim->n_heads <= 0 || lim->n_kv_heads <= 0 || lim->n_heads % lim->n_kv_heads)
		return sl_errf(err, errlen, SL_EINVAL,
			       "%d query heads over %d KV heads on this rank (config "
			       "num_attention_heads and num_key_value_heads, split by --tp): the CUDA "
			       "attention kernels need a whole number of query heads per KV head",
			       lim->n_heads, lim->n_kv_heads);
	return SL_OK;
}

#ifdef SL_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "common/checks.h"
#include "kernels/embedding.h"
#include "kernels/logits_mask.h"
#include "kernels/matmul.h"
#include "kernels/pdl.h"
#include "kernels/quant.h"
#include "kernels/random.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "kernels/timeline.h"

#define MAX_GRAPHS 1024

/* c->fuse's bit for a norm split between the GEMV before it (the add
 * alone, KERN_EPI_ADD, which also multiplies by the norm's weight) and the
 * end of the projection that reads it (node_prenorm, kernels/epilogue.h) */
#define FUSE_PRENORM (1 << KERN_EPI_ADD)
/* Parts of a deferred norm's sums of squares: one per 16 rows and token
 * (KERN_PRE_MAX_PARTS of them at most, kernels/epilogue.h). */
#define SUMSQ_PARTS 8192

typedef struct staged {        /* pinned host buffer + device twin + copy fence */
	void *h, *d;
	size_t cap;
	cudaEvent_t done;
} staged;

typedef struct cuda_impl {
	int device;
	char name[256];
	cudaStream_t stream;
	kern_blas *blas;
	kern_qblas *qblas;         /* quantized projections (NULL when none is quantized) */
	int pdl;                   /* SL_PDL=1: GEMVs launch as programmatic dependents */
	int fuse;                  /* GEMV epilogues fused: bit 1 << KERN_EPI_*, FUSE_PRENORM (SL_FUSE) */
	float *sumsq;              /* device [SUMSQ_PARTS]: a deferred norm's parts (add_defer) */
	int prefer_l1;             /* the decode GEMVs ask for the most L1 (kernels/pdl.h) */
	int fp8_fast;              /* SL_FP8_FAST_ACCUM=1: W8A8's fast fp8 accumulation */
	int attn_fp8_smem;         /* SL_ATTN_FP8=smem: decode converts fp8 K/V in shared memory */
	int attn_prefill_mma;      /* SL_ATTN_PREFILL=mma: prefill on mma.sync on Hopper too */
	int attn_wgmma;            /* the workspace chose Hopper's wgmma prefill kernel */
	int act_codes;             /* the norm and SiLU * up kernels may write only the next
				    * projection's fp8 activations (SL_ACT_CODES) */
	int gemv_parts;            /* SL_GEMV_PARTS: the o and down GEMVs split K into up to
				    * this many slices, the norm sums them (parts_add_rmsnorm;
				    * 0: off) */
	int gemm_add;              /* run-dtype o / down GEMMs add into the fp32 residual
				    * (SL_GEMM_ADD) */
	kern_attn_ws *attn;
	kern_sampler *sampler;
	node_backend_limits lim;
	int table_stride;          /* device block-table row length */
	staged batch, rows, params, pos;
	staged hist;               /* penalty history: off [max_seqs + 1] | ids | n_gen | in_prompt */
	staged bias;               /* logit bias: off [max_seqs + 1] | ids | bias (fp32) */
	staged mask;               /* constrained rows: rows [max_seqs] | masks [max_seqs, words] */
	int32_t *d_tokens, *h_tokens; /* sampled ids */
	void *d_lp, *h_lp;         /* log-probs of n rows: chosen [n] | top_ids [n, 20] | top [n, 20] */
	float *d_sel;              /* [max_seqs, vocab] rows picked for sampling */
	cudaGraphExec_t graphs[MAX_GRAPHS];
	int open_ranges;           /* range_push depth, so a failed step's ranges can be closed */
	int no_graphs;             /* SL_NO_GRAPHS: run_cached runs fn directly */
	char *timeline;            /* SL_TIMELINE's prefix: dumped at destroy */
	int greedy_fast;           /* all-greedy batches take the argmax alone (SL_SAMPLE_FULL) */
	int qmeta;                 /* quantized weights get their meta words (SL_QGEMV_META) */
} cuda_impl;

static cuda_impl *I(node_backend *be) { return be->impl; }
static cudaStream_t S(node_backend *be) { return I(be)->stream; }

/* Returns call's result from inside an NVTX range called name. */
#define RANGED(name, call)            \
	do {                          \
		nvtxRangePushA(name); \
		int rc_ = (call);     \
		nvtxRangePop();       \
		return rc_;           \
	} while (0)

static void cu_range_push(node_backend *be, const char *name, int index)
{
	char label[64];
	if (index >= 0) {
		snprintf(label, sizeof label, "%s %d", name, index);
		name = label;
	}
	nvtxRangePushA(name);
	I(be)->open_ranges++;
}

static void cu_range_pop(node_backend *be)
{
	if (I(be)->open_ranges > 0) {
		nvtxRangePop();
		I(be)->open_ranges--;
	}
}

static int staged_init(staged *s, size_t bytes)
{
	s->cap = bytes;
	CUDA_TRY(cudaMallocHost(&s->h, bytes ? bytes : 16));
	CUDA_TRY(cudaMalloc(&s->d, bytes ? bytes : 16));
	CUDA_TRY(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
	CUDA_TRY(cudaEventRecord(s->done, 0));
	return SL_OK;
}

static void staged_free(staged *s)
{
	if (s->h) cudaFreeHost(s->h);
	if (s->d) cudaFree(s->d);
	if (s->done) cudaEventDestroy(s->done);
	memset(s, 0, sizeof *s);
}

/* Host writes may start once the previous upload from this buffer is done. */
static int staged_wait(staged *s) { CUDA_TRY(cudaEventSynchronize(s->done)); return SL_OK; }

/* bytes at offset off of the host buffer to the same offset on the device. */
static int staged_up_at(node_backend *be, staged *s, size_t off, size_t bytes)
{
	CUDA_TRY(cudaMemcpyAsync((char *)s->d + off, (char *)s->h + off, bytes,
				 cudaMemcpyHostToDevice, S(be)));
	CUDA_TRY(cudaEventRecord(s->done, S(be)));
	return SL_OK;
}

static int staged_up(node_backend *be, staged *s, size_t bytes)
{
	CUDA_TRY(cudaMemcpyAsync(s->d, s->h, bytes, cudaMemcpyHostToDevice, S(be)));
	CUDA_TRY(cudaEventRecord(s->done, S(be)));
	return SL_OK;
}

static int cu_alloc(node_backend *be, size_t bytes, void **out)
{
	if (cudaMalloc(out, bytes ? bytes : 16) != cudaSuccess) {
		cudaGetLastError(); /* clear the sticky-free error so later calls work */
		return SL_ENOMEM;
	}
	return SL_OK;
}

static void cu_free(node_backend *be, void *p)
{
	if (p)
		cudaFree(p);
}

static int cu_upload(node_backend *be, void *dst, const void *src, size_t bytes)
{
	CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
	return SL_OK;
}

/* The decode GEMV's meta words of a weight that has them
 * (kern_qweight_meta_bytes): packed from the host copy, uploaded. */
static int cu_qweight_prepare(node_backend *be, const kern_qweight *h, kern_qweight *d,
			      size_t *bytes)
{
	*bytes = 0;
	const size_t mb = kern_qweight_meta_bytes(h);
	if (!mb || !I(be)->qmeta)
		return SL_OK;
	uint32_t *m = malloc(mb);
	if (!m)
		return SL_ENOMEM;
	kern_qweight_meta_pack(h, m);
	int rc = cu_alloc(be, mb, &d->meta);
	if (rc == SL_OK && (rc = cu_upload(be, d->meta, m, mb)) == SL_OK)
		*bytes = mb;
	free(m);
	return rc;
}

static int cu_download(node_backend *be, void *dst, const void *src, size_t bytes)
{
	CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S(be)));
	CUDA_TRY(cudaStreamSynchronize(S(be)));
	return SL_OK;
}

static int cu_sync(node_backend *be)
{
	CUDA_TRY(cudaStreamSynchronize(S(be)));
	return SL_OK;
}

/* Lay the batch out in the staging buffer: tokens | positions | slots |
 * q_start | q_len | kv_len | tables[n_seqs][table_stride]. */
static int stage_batch(node_backend *be, const kern_paged_batch *h, kern_paged_batch *d)
{
	cuda_impl *c = I(be);
	int n = h->n_tokens, s = h->n_seqs, stride = c->table_stride;
	size_t ints = 3 * (size_t)n + 3 * (size_t)s + (size_t)s * stride;
	if (n > c->lim.step_tokens || s > c->lim.max_seqs || h->max_blocks > stride ||
	    ints * 4 > c->batch.cap) {
		SL_ERROR("cuda", "step of %d tokens, %d sequences, %d blocks exceeds the reserved %d/%d/%d",
			 n, s, h->max_blocks, c->lim.step_tokens, c->lim.max_seqs, stride);
		return SL_EINVAL;
	}
	int rc = staged_wait(&c->batch);
	if (rc)
		return rc;
	int32_t *o = c->batch.h, *dv = c->batch.d;
	const int32_t *src[6] = {h->tokens, h->positions, h->slots, h->q_start, h->q_len, h->kv_len};
	int len[6] = {n, n, n, s, s, s};
	const int32_t **dst[6] = {&d->tokens, &d->positions, &d->slots, &d->q_start, &d->q_len, &d->kv_len};
	*d = *h;
	size_t off = 0;
	for (int i = 0; i < 6; i++) {
		memcpy(o + off, src[i], 4 * (size_t)len[i]);
		*dst[i] = dv + off;
		off += len[i];
	}
	for (int k = 0; k < s; k++) {
		memcpy(o + off + (size_t)k * stride, h->block_tables + (size_t)k * h->max_blocks,
		       4 * (size_t)h->max_blocks);
		memset(o + off + (size_t)k * stride + h->max_blocks, 0,
		       4 * (size_t)(stride - h->max_blocks));
	}
	d->block_tables = dv + off;
	d->max_blocks = stride;
	d->min_q_len = s ? h->q_len[0] : 0;
	for (int k = 1; k < s; k++)
		d->min_q_len = h->q_len[k] < d->min_q_len ? h->q_len[k] : d->min_q_len;
	/* decode steps are graph candidates: no launch shape may follow the
	 * step's longest context, so kernels size for the reserved maximum */
	if (h->max_q_len == 1)
		d->max_kv_len = c->lim.max_ctx;
	return staged_up(be, &c->batch, 4 * ints);
}

/* A new step. Ranges a failed step left open (an op failed mid-layer, so
 * model.c never reached its range_pop) are closed first, or every later
 * range would nest under them. */
static int cu_set_batch(node_backend *be, const kern_paged_batch *h, kern_paged_batch *d)
{
	while (I(be)->open_ranges > 0)
		cu_range_pop(be);
	RANGED("set_batch", stage_batch(be, h, d));
}

static int cu_embed(node_backend *be, float *x, const void *table, const int32_t *tokens, int n,
		    int dim, int row0, int rows)
{
	RANGED("embed", kern_embedding_cuda(x, table, tokens, n, dim, row0, rows, be->dtype, S(be)));
}

/* fp8 projections above the GEMV read their input through W8A8, which
 * quantizes it per token first. The norm and SiLU * up kernels that write
 * those inputs make the activations themselves while the row is in their
 * registers, into the kern_qblas's slot, and mark them for the next
 * projection (quant.h, kern_qblas_act_mark). Every call of these writers
 * marks: the activations, or nothing. The slot, or {NULL} when this step
 * does not qualify. */
static kern_act_fp8 act_slot(cuda_impl *c, int n, int cols)
{
	kern_act_fp8 none = {NULL, NULL};
	return c->lim.quant_fp8 && c->qblas ? kern_qblas_act_slot(c->qblas, n, cols) : none;
}

/* Marks out's activations, just made: as out's only copy (codes), or as
 * the values stored beside them. */
static void act_mark(cuda_impl *c, void *out, sl_dtype dt, int n, int cols, int codes)
{
	if (codes)
		kern_qblas_act_mark_codes(c->qblas, out, dt, n, cols);
	else
		kern_qblas_act_mark(c->qblas, out, n, cols);
}

/* The norm into out, with out's fp8 activations where they qualify.
 * for_proj: only a projection reads out next (through the kern_qblas), so
 * the activations alone may stand for it (silu_mul). */
static int norm(node_backend *be, float *x, const void *delta, const void *w, void *out, int n,
		int dim, float eps, int for_proj)
{
	cuda_impl *c = I(be);
	kern_act_fp8 a = w ? act_slot(c, n, dim) : (kern_act_fp8){NULL, NULL};
	const int codes = for_proj && c->act_codes;
	kern_qblas_act_mark(c->qblas, NULL, 0, 0);
	if (a.q) {
		int rc = kern_rmsnorm_fp8_cuda(x, delta, w, codes ? NULL : out, a.q, a.s, n, dim, eps,
					       be->dtype, S(be));
		if (rc == SL_OK)
			act_mark(c, out, be->dtype, n, dim, codes);
		if (rc != SL_ENOTSUP)
			return rc;
	}
	if (delta)
		return kern_add_rmsnorm_cuda(x, delta, w, out, n, dim, eps, be->dtype, S(be));
	return kern_rmsnorm_cuda(out, x, w, n, dim, eps, be->dtype, S(be));
}

static int cu_rmsnorm(node_backend *be, void *out, const float *x, const void *w, int n, int dim,
		      float eps)
{
	RANGED("rmsnorm", norm(be, (float *)x, NULL, w, out, n, dim, eps, 0));
}

static int cu_add_rmsnorm(node_backend *be, float *x, const void *delta, const void *w, void *out,
			  int n, int dim, float eps)
{
	RANGED("add_rmsnorm", norm(be, x, delta, w, out, n, dim, eps, 0));
}

/* cu_add_rmsnorm whose out only the next projection reads */
static int add_rmsnorm_for_proj(node_backend *be, float *x, const void *delta, const void *w,
				void *out, int n, int dim, float eps)
{
	RANGED("add_rmsnorm", norm(be, x, delta, w, out, n, dim, eps, 1));
}

/* Run-dtype weights: matmul.cu (GEMV up to 8 tokens, else cuBLAS);
 * quantized: quant.cu picks its path per call (GEMV, W8A8 on cuBLASLt,
 * dequantize + cuBLAS; docs/cuda.md). */
/* out_dt: the run dtype (projections) or fp32 (the LM head). */
static int matmul(node_backend *be, void *out, sl_dtype out_dt, const void *x,
		  const kern_qweight *w, int n)
{
	cuda_impl *c = I(be);
	if (w->format == KERN_Q_NONE && out_dt == SL_DT_F32)
		return kern_matmul_f32out_cuda(c->blas, out, x, w->data, n, w->cols, w->rows,
					       be->dtype);
	if (w->format == KERN_Q_NONE)
		return kern_matmul_cuda(c->blas, out, x, w->data, n, w->cols, w->rows, be->dtype);
	if (!c->qblas) {
		SL_ERROR("cuda", "a quantized weight, but reserve saw none (quant_max_cols 0)");
		return SL_EINVAL;
	}
	return kern_qmatmul_cuda(c->qblas, KERN_QPATH_AUTO, out, out_dt, x, be->dtype, w, n);
}

static int cu_matmul(node_backend *be, void *out, const void *x, const kern_qweight *w, int n)
{
	RANGED("matmul", matmul(be, out, be->dtype, x, w, n));
}

static int cu_matmul_f32out(node_backend *be, float *out, const void *x, const kern_qweight *w,
			    int n)
{
	RANGED("matmul_f32out", matmul(be, out, SL_DT_F32, x, w, n));
}

static int cu_rope_kv_write(node_backend *be, void *qkv, void *k_cache, void *v_cache,
			    const kern_paged_batch *b, int n_heads, int n_kv_heads, int head_dim,
			    const float *inv_freq)
{
	RANGED("rope_kv_write", kern_rope_kv_write_cuda(qkv, k_cache, v_cache, b, n_heads, n_kv_heads,
							head_dim, inv_freq, be->dtype,
							I(be)->lim.kv_fp8, S(be)));
}

static int cu_attention(node_backend *be, void *out, const void *qkv, int q_stride,
			const void *k_cache, const void *v_cache, const kern_paged_batch *b,
			int n_heads, int n_kv_heads, int head_dim, float scale)
{
	RANGED("attention", kern_attention_cuda(I(be)->attn, out, qkv, q_stride, k_cache, v_cache, b,
						n_heads, n_kv_heads, head_dim, scale, be->dtype,
						I(be)->lim.kv_fp8, S(be)));
}

/* SiLU * up into out, with out's fp8 activations where they qualify (norm).
 * Only the down projection reads out (model.c), through the kern_qblas: so
 * the activations alone are written, and the kern_qblas writes out's values
 * from them should anything else come first (kern_qblas_act_mark_codes),
 * unless SL_ACT_CODES=0. */
static int silu_mul(node_backend *be, void *out, const void *gate_up, int n, int hidden)
{
	cuda_impl *c = I(be);
	kern_act_fp8 a = act_slot(c, n, hidden);
	kern_qblas_act_mark(c->qblas, NULL, 0, 0);
	if (a.q) {
		int rc = kern_silu_mul_fp8_cuda(c->act_codes ? NULL : out, gate_up, a.q, a.s, n,
						hidden, be->dtype, S(be));
		if (rc == SL_OK)
			act_mark(c, out, be->dtype, n, hidden, c->act_codes);
		if (rc != SL_ENOTSUP)
			return rc;
	}
	return kern_silu_mul_cuda(out, gate_up, n, hidden, be->dtype, S(be));
}

static int cu_silu_mul(node_backend *be, void *out, const void *gate_up, int n, int hidden)
{
	RANGED("silu_mul", silu_mul(be, out, gate_up, n, hidden));
}

/* The decode GEMV with epilogue e (kernels/epilogue.h): *fused 0 when the
 * call is not one for the GEMV (or SL_FUSE=0) and nothing ran. */
static int matmul_epi(node_backend *be, void *out, const void *x, const kern_qweight *w, int n,
		      const kern_epi *e, int *fused)
{
	cuda_impl *c = I(be);
	*fused = 0;
	if (!(c->fuse & (1 << e->kind)))
		return SL_OK;
	if (w->format == KERN_Q_NONE)
		return kern_matmul_epi_cuda(c->blas, out, x, w->data, n, w->cols, w->rows, be->dtype,
					    e, fused);
	if (!c->qblas)
		return SL_OK; /* matmul logs it */
	return kern_qmatmul_epi_cuda(c->qblas, out, be->dtype, x, w, n, e, fused);
}

/* The GEMV with epilogue e on input x whose norm may still be pending
 * (pre): folded into the GEMV's loads if it takes them, else written into
 * x by its own kernel first. *fused as matmul_epi's, for the epilogue. */
static int matmul_epi_pre(node_backend *be, void *out, void *x, const node_prenorm *pre,
			  const kern_qweight *w, int n, kern_epi e, int *fused)
{
	if (pre && pre->x) {
		e.pre_ss = pre->ss, e.pre_parts = pre->parts, e.pre_eps = pre->eps;
		TRY(matmul_epi(be, out, x, w, n, &e, fused));
		if (*fused)
			return SL_OK;
		TRY(cu_rmsnorm(be, x, pre->x, pre->w, n, w->cols, pre->eps));
		e.pre_ss = NULL, e.pre_parts = 0;
	}
	return matmul_epi(be, out, x, w, n, &e, fused);
}

static int matmul_swiglu(node_backend *be, void *out, void *gate_up, void *x,
			 const node_prenorm *pre, const kern_qweight *w, int n, int hidden)
{
	const kern_epi e = {.kind = KERN_EPI_SWIGLU};
	int fused;
	TRY(matmul_epi_pre(be, out, x, pre, w, n, e, &fused));
	if (fused)
		return SL_OK;
	TRY(cu_matmul(be, gate_up, x, w, n));
	return cu_silu_mul(be, out, gate_up, n, hidden);
}

static int cu_matmul_swiglu(node_backend *be, void *out, void *gate_up, void *x,
			    const node_prenorm *pre, const kern_qweight *w, int n, int hidden)
{
	RANGED("matmul_swiglu", matmul_swiglu(be, out, gate_up, x, pre, w, n, hidden));
}

/* Whether the norm after a projection of w may be left to the next one
 * (add_defer, and at tp > 1 cu_prenorm_sumsq): run-dtype weights only.
 * With quantized weights the deferred norm costs the GEMVs more than the
 * norm's own kernel saves (measured, not profiled). int4: on an H100 the
 * 7B decode fell from 418 to 404 tokens/s at batch 1 with it
 * (bench/results/2026-11-24-nvidia-h100-rms-at-end/), and from 460.1 to
 * 452.1 again once the GEMV fetched its scales without waiting
 * (2026-11-25-nvidia-h100-q4-2/h3). int8 and fp8
 * had gained 1.2% there, but on an H200 (2026-11-30, one binary with and
 * without it, three runs a side: bench/results/2026-11-30-nvidia-h200-
 * x2-quant-norm/) they lose: 7B batch 1 int8 +1.8%, int8 groups of 128
 * +6.0%, fp8 +0.9% without it (batch 4-8 within 0.4%); at 13B tp 2 on
 * two H200, the build without it against the one with it, int8 batch 1
 * +5.2%, batch 2 +6.6%, fp8 batch 1 +4.9%. fp16 keeps it (7B +0.6%
 * without, 13B -0.3%: no clear side). */
static int defers_norm(const kern_qweight *w) { return w->format == KERN_Q_NONE; }

/* The add alone in the GEMV's epilogue, leaving the parts of the sums of
 * squares in c->sumsq and out = x * norm_w, not yet divided by its rms,
 * which the next projection does at its end (*defer), where it can
 * (kernels/epilogue.h: up to KERN_PRE_MAX_TOKENS tokens and
 * KERN_PRE_MAX_PARTS parts; defers_norm): one kernel fewer. *done 1
 * when deferred, 0 when nothing ran. */
static int add_defer(node_backend *be, float *x, void *out, void *proj, const void *in,
		     const kern_qweight *w, const void *norm_w, int n, float eps,
		     node_prenorm *defer, int *done)
{
	cuda_impl *c = I(be);
	const int parts = (w->rows + 15) / 16; /* the GEMV's 16-row tiles */
	const kern_epi e = {.kind = KERN_EPI_ADD, .residual = x, .sumsq = c->sumsq,
			    .norm_w = norm_w, .norm_out = out};
	*done = 0;
	if (!defer || !norm_w || !c->sumsq || !defers_norm(w) || !kern_pre_fits(n, parts) ||
	    parts * n > SUMSQ_PARTS)
		return SL_OK;
	TRY(matmul_epi(be, proj, in, w, n, &e, done)); /* its switch: FUSE_PRENORM */
	if (*done)
		*defer = (node_prenorm){x, norm_w, eps, c->sumsq, parts};
	return SL_OK;
}

/* The tp all-reduce does add_defer's add (model.c): the same rules,
 * and the marks of the last norm dropped as norm() drops them. */
static int cu_prenorm_sumsq(node_backend *be, const kern_qweight *w, int n, float **ss,
			    size_t *cap)
{
	cuda_impl *c = I(be);
	if (!(c->fuse & FUSE_PRENORM) || !c->sumsq || !defers_norm(w) || n < 1 ||
	    n > KERN_PRE_MAX_TOKENS)
		return SL_ENOTSUP;
	kern_qblas_act_mark(c->qblas, NULL, 0, 0);
	*ss = c->sumsq;
	*cap = SUMSQ_PARTS;
	return SL_OK;
}

/* add_defer at tp > 1 with the group's all-reduce in the GEMV itself
 * (KERN_EPI_ALLREDUCE_ADD): the projection, the exchange and the add in
 * one kernel, where the model would otherwise run the GEMV and then the
 * communicator's all-reduce + add. Its switch is FUSE_PRENORM's, and
 * cu_prenorm_sumsq's rules, so every rank decides alike. */
static int matmul_allreduce_add(node_backend *be, const kern_xchg *xg, float *x, void *out,
				const void *in, const kern_qweight *w, const void *norm_w, int n,
				float eps, node_prenorm *defer, int *done)
{
	cuda_impl *c = I(be);
	const int parts = (w->rows + 15) / 16; /* the GEMV's 16-row tiles */
	kern_epi e = {.kind = KERN_EPI_ALLREDUCE_ADD, .residual = x, .sumsq = c->sumsq,
		      .norm_w = norm_w, .norm_out = out, .xchg = *xg};
	*done = 0;
	if (!(c->fuse & FUSE_PRENORM) || !c->sumsq || !norm_w || !defer ||
	    w->format != KERN_Q_NONE || !kern_pre_fits(n, parts) || parts * n > SUMSQ_PARTS)
		return SL_OK;
	kern_qblas_act_mark(c->qblas, NULL, 0, 0);
	TRY(kern_matmul_epi_cuda(c->blas, NULL, in, w->data, n, w->cols, w->rows, be->dtype, &e,
				 done));
	if (*done)
		*defer = (node_prenorm){x, norm_w, eps, c->sumsq, parts};
	return SL_OK;
}

static int cu_matmul_allreduce_add(node_backend *be, const kern_xchg *xg, float *x, void *out,
				   const void *in, const kern_qweight *w, const void *norm_w,
				   int n, float eps, node_prenorm *defer, int *done)
{
	RANGED("matmul_allreduce_add",
	       matmul_allreduce_add(be, xg, x, out, in, w, norm_w, n, eps, defer, done));
}

/* Run-dtype weights above the GEMV: the cuBLAS GEMM adds its product into
 * the fp32 residual x itself (beta 1), and the norm reads x alone, so the
 * product's run-dtype copy is neither written nor read back (the add +
 * RMSNorm after o and down: 18 instead of 32 us each on a 7B prefill of
 * 2048 tokens, H100; the GEMMs 11-17 us longer; prefill +0.7-1.4%, batch-64
 * decode +2.4%). fp8's W8A8 GEMM with an fp32 sum was measured too: 12-16
 * us longer, the prefill 1.5% slower, so it writes its product as before
 * (bench/results/2026-11-28-nvidia-h100-fp8-prefill/h3). *done 0 when it
 * did not run (quantized weights, or the GEMV's sizes), nothing written. */
static int add_in_place(node_backend *be, float *x, void *out, const void *in,
			const kern_qweight *w, const void *norm_w, int n, float eps, int for_proj,
			int *done)
{
	cuda_impl *c = I(be);
	*done = 0;
	if (!c->gemm_add || w->format != KERN_Q_NONE)
		return SL_OK;
	TRY(kern_matmul_add_f32_cuda(c->blas, x, in, w->data, n, w->cols, w->rows, be->dtype, done));
	if (!*done || !norm_w)
		return SL_OK;
	return norm(be, x, NULL, norm_w, out, n, w->rows, eps, for_proj);
}

/* norm() with its delta the sum of a sliced GEMV's fp32 products. */
static int parts_add_norm(node_backend *be, float *x, const float *parts, int splits,
			  const void *w, void *out, int n, int dim, float eps, int for_proj)
{
	cuda_impl *c = I(be);
	kern_act_fp8 a = act_slot(c, n, dim);
	const int codes = for_proj && c->act_codes && a.q;
	kern_qblas_act_mark(c->qblas, NULL, 0, 0);
	TRY(kern_add_rmsnorm_parts_cuda(x, parts, splits, w, codes ? NULL : out, a.q, a.s, n, dim,
					eps, be->dtype, S(be)));
	if (a.q)
		act_mark(c, out, be->dtype, n, dim, codes);
	return SL_OK;
}

static int parts_norm(node_backend *be, float *x, const float *parts, int splits, const void *w,
		      void *out, int n, int dim, float eps, int for_proj)
{
	RANGED("add_rmsnorm", parts_add_norm(be, x, parts, splits, w, out, n, dim, eps, for_proj));
}

/* int8 and fp8 weights with one scale a row, up to 8 tokens
 * (SL_GEMV_PARTS slices at most, 0: off): the o or down GEMV with K in
 * slices, each slice's fp32 product apart (kern_qmatmul_parts_cuda), and
 * the add + RMSNorm summing them in order as it adds them into x
 * (norm()'s fp8 activations too), so the 7B's 256 row tiles fill 6
 * blocks an SM instead of 2. Same binary with SL_GEMV_PARTS=0 against
 * 3 slices, 7B, three runs a side on one H200: int8 +0.9% at batch 1,
 * +1.2% at 8; fp8 +2.9% / +2.5%; 4 slices lost
 * (bench/results/2026-12-01-nvidia-h200-gemv-parts/). At most what one
 * wave of blocks holds (kernels/quant.cu): 13B int8 +4.9% / +6.7%, fp8
 * +6.7% / +8.2% in 2 slices, where 3 had given int8 +2.2%.
 * Group-scaled int8 and int4 only where the unsplit GEMV's tiles spill
 * past one wave of its shape (kern_qblas_gemv_narrow_wave): 13B int8
 * groups of 128 +4.6% / +6.7% at batch 1 / 8, int4 +7.0% / +10.1%, where
 * the 7B's 256 tiles (one wave unsplit) lose: int8 groups of 128 -0.4% /
 * -0.4%, int4 -1.4% / -1.5% (two runs a side; three the stop before:
 * -0.2% / -0.5%, -1.6% / -1.0%; bench/results/2026-12-01-nvidia-h200-
 * gemv-parts16/call5-groups/).
 * fp16 and bf16 weights the same way (kern_matmul_parts_cuda: as many
 * slices as one wave of the GEMV's blocks holds), first, in place of the
 * add left for the next projection's end (add_defer): five runs a side
 * on one H200, 7B fp16 +1.1% at batch 1, +2.4% at 8, bf16 +1.0% /
 * +2.5%, 8B +0.9% / +2.2%; 13B's 320 tiles take no slices (3 slices had
 * lost 1%) (bench/results/2026-12-01-nvidia-h200-gemv-parts16/).
 * *done 0 when it did not run (another format, the switch off, a row
 * the norm's register kernel cannot hold, a call the sliced GEMV does
 * not take): nothing written. */
static int parts_add_rmsnorm(node_backend *be, float *x, void *out, const void *in,
			     const kern_qweight *w, const void *norm_w, int n, float eps,
			     int for_proj, int *done)
{
	cuda_impl *c = I(be);
	const int plain = w->format == KERN_Q_NONE;
	const int per_row = (w->format == KERN_Q_INT8 || w->format == KERN_Q_FP8) && !w->group;
	*done = 0;
	if (!c->gemv_parts || !norm_w || n > 8 ||
	    !kern_add_rmsnorm_parts_fits(w->rows, c->gemv_parts))
		return SL_OK;
	if (!plain && (!c->qblas || (!per_row && (w->rows + 15) / 16 <=
						  kern_qblas_gemv_narrow_wave(c->qblas))))
		return SL_OK;
	const float *parts;
	int splits;
	if (plain)
		TRY(kern_matmul_parts_cuda(c->blas, in, w->data, n, w->cols, w->rows, be->dtype,
					   c->gemv_parts, &parts, &splits));
	else
		TRY(kern_qmatmul_parts_cuda(c->qblas, in, be->dtype, w, n, c->gemv_parts, &parts,
					    &splits));
	if (!splits)
		return SL_OK;
	*done = 1;
	return parts_norm(be, x, parts, splits, norm_w, out, n, w->rows, eps, for_proj);
}

static int matmul_add_rmsnorm(node_backend *be, float *x, void *out, void *proj, const void *in,
			      const kern_qweight *w, const void *norm_w, int n, float eps,
			      node_prenorm *defer)
{
	const kern_epi e = {.kind = KERN_EPI_ADD_NORM, .residual = x, .norm_w = norm_w,
			    .norm_out = out, .eps = eps};
	int fused;
	if (defer)
		defer->x = NULL;
	TRY(parts_add_rmsnorm(be, x, out, in, w, norm_w, n, eps, defer != NULL, &fused));
	if (fused)
		return SL_OK;
	TRY(add_defer(be, x, out, proj, in, w, norm_w, n, eps, defer, &fused));
	if (fused)
		return SL_OK;
	TRY(matmul_epi(be, proj, in, w, n, &e, &fused));
	if (fused)
		return SL_OK;
	TRY(add_in_place(be, x, out, in, w, norm_w, n, eps, defer != NULL, &fused));
	if (fused)
		return SL_OK;
	TRY(cu_matmul(be, proj, in, w, n));
	/* defer given: the projection after reads out next (model.c) */
	if (defer)
		return add_rmsnorm_for_proj(be, x, proj, norm_w, out, n, w->rows, eps);
	return cu_add_rmsnorm(be, x, proj, norm_w, out, n, w->rows, eps);
}

static int cu_matmul_add_rmsnorm(node_backend *be, float *x, void *out, void *proj,
				 const void *in, const kern_qweight *w, const void *norm_w, int n,
				 float eps, node_prenorm *defer)
{
	RANGED("matmul_add_rmsnorm",
	       matmul_add_rmsnorm(be, x, out, proj, in, w, norm_w, n, eps, defer));
}

static int matmul_rope(node_backend *be, void *qkv, void *x, const node_prenorm *pre,
		       const kern_qweight *w, int n, void *k_cache, void *v_cache,
		       const kern_paged_batch *b, int n_heads, int n_kv_heads, int head_dim,
		       const float *inv_freq)
{
	const kern_epi e = {.kind = KERN_EPI_ROPE, .positions = b->positions, .slots = b->slots,
			    .k_cache = k_cache, .v_cache = v_cache, .inv_freq = inv_freq,
			    .n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = head_dim,
			    .block_tokens = b->block_tokens, .kv_fp8 = I(be)->lim.kv_fp8};
	int fused;
	TRY(matmul_epi_pre(be, qkv, x, pre, w, n, e, &fused));
	if (fused)
		return SL_OK;
	TRY(cu_matmul(be, qkv, x, w, n));
	return cu_rope_kv_write(be, qkv, k_cache, v_cache, b, n_heads, n_kv_heads, head_dim,
				inv_freq);
}

static int cu_matmul_rope(node_backend *be, void *qkv, void *x, const node_prenorm *pre,
			  const kern_qweight *w, int n, void *k_cache, void *v_cache,
			  const kern_paged_batch *b, int n_heads, int n_kv_heads, int head_dim,
			  const float *inv_freq)
{
	RANGED("matmul_rope", matmul_rope(be, qkv, x, pre, w, n, k_cache, v_cache, b, n_heads,
					  n_kv_heads, head_dim, inv_freq));
}

/* out[i] = x[rows[i]] (rows on the host) for rows of dim elements of dt. */
static int gather_rows(node_backend *be, void *out, const void *x, const int32_t *rows, int n,
		       int dim, sl_dtype dt)
{
	cuda_impl *c = I(be);
	if ((size_t)n * 4 > c->rows.cap)
		return SL_EINVAL;
	int rc = staged_wait(&c->rows);
	if (rc)
		return rc;
	memcpy(c->rows.h, rows, 4 * (size_t)n);
	if ((rc = staged_up(be, &c->rows, 4 * (size_t)n)))
		return rc;
	return kern_gather_rows_cuda(out, x, c->rows.d, n, dim, dt, S(be));
}

static int cu_gather_rows(node_backend *be, void *out, const void *x, const int32_t *rows, int n,
			  int dim)
{
	RANGED("gather_rows", gather_rows(be, out, x, rows, n, dim, be->dtype));
}

static int copy2d(node_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
		  size_t width_bytes, size_t rows)
{
	CUDA_TRY(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width_bytes, rows,
				   cudaMemcpyDeviceToDevice, S(be)));
	return SL_OK;
}

static int cu_copy2d(node_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
		     size_t width_bytes, size_t rows)
{
	RANGED("copy2d", copy2d(be, dst, dpitch, src, spitch, width_bytes, rows));
}

/* The history's arrays, one after another in hist staging; *d gets
 * their device addresses. */
static int stage_hist(node_backend *be, const kern_token_hist *h, int n, kern_token_hist *d)
{
	cuda_impl *c = I(be);
	*d = (kern_token_hist){0};
	if (!h || !h->off)
		return SL_OK;
	size_t e = (size_t)h->off[n], ints = (size_t)n + 1 + 3 * e;
	if (ints * 4 > c->hist.cap)
		return SL_EINVAL;
	int rc = staged_wait(&c->hist);
	if (rc)
		return rc;
	int32_t *o = c->hist.h, *dev = c->hist.d;
	memcpy(o, h->off, 4 * ((size_t)n + 1));
	memcpy(o + n + 1, h->ids, 4 * e);
	memcpy(o + n + 1 + e, h->n_gen, 4 * e);
	memcpy(o + n + 1 + 2 * e, h->in_prompt, 4 * e);
	*d = (kern_token_hist){dev, dev + n + 1, dev + n + 1 + e, dev + n + 1 + 2 * e};
	return staged_up(be, &c->hist, 4 * ints);
}

/* The bias arrays, one after another in bias staging (as stage_hist). */
static int stage_bias(node_backend *be, const kern_logit_bias *b, int n, kern_logit_bias *d)
{
	cuda_impl *c = I(be);
	*d = (kern_logit_bias){0};
	if (!b || !b->off)
		return SL_OK;
	size_t e = (size_t)b->off[n], words = (size_t)n + 1 + 2 * e;
	if (words * 4 > c->bias.cap)
		return SL_EINVAL;
	int rc = staged_wait(&c->bias);
	if (rc)
		return rc;
	int32_t *o = c->bias.h, *dev = c->bias.d;
	memcpy(o, b->off, 4 * ((size_t)n + 1));
	memcpy(o + n + 1, b->ids, 4 * e);
	memcpy(o + n + 1 + e, b->bias, 4 * e);
	*d = (kern_logit_bias){dev, dev + n + 1, (const float *)(dev + n + 1 + e)};
	return staged_up(be, &c->bias, 4 * words);
}

/* Log-prob rows for n laid out contiguously from base (device or host). */
static kern_logprobs lp_layout(void *base, int n)
{
	float *f = base;
	return (kern_logprobs){f, (int32_t *)(f + n), f + n + (size_t)n * KERN_MAX_TOP_LOGPROBS};
}

/* Whether every row is greedy with nothing that changes its logits, so
 * its token is the argmax alone (kern_argmax_rows_cuda). */
static int greedy_only(const kern_sample_params *params, int n, const kern_logit_bias *bias,
		       const kern_logprobs *lp)
{
	if (lp || (bias && bias->off))
		return 0;
	for (int i = 0; i < n; i++)
		if (params[i].temperature > 0 || kern_has_penalty(&params[i]))
			return 0;
	return 1;
}

static int identity_rows(const int32_t *rows, int n)
{
	for (int i = 0; i < n; i++)
		if (rows[i] != i)
			return 0;
	return 1;
}

/* The tokens from the device to tokens_out, once the stream gets there. */
static int tokens_back(node_backend *be, int32_t *tokens_out, int n)
{
	cuda_impl *c = I(be);
	CUDA_TRY(cudaMemcpyAsync(c->h_tokens, c->d_tokens, 4 * (size_t)n, cudaMemcpyDeviceToHost, S(be)));
	CUDA_TRY(cudaStreamSynchronize(S(be)));
	memcpy(tokens_out, c->h_tokens, 4 * (size_t)n);
	return SL_OK;
}

/* Greedy rows: the argmax of each row where it lies (a decode step's rows
 * are the logits' own rows; others are gathered first). Nothing else goes
 * up, and one kernel runs where the full sampler runs the sort's and the
 * pick's: these are the step's tail, which the next step waits for. */
static int sample_greedy(node_backend *be, int32_t *tokens_out, const float *logits,
			 const int32_t *rows, int n, int vocab)
{
	cuda_impl *c = I(be);
	const float *l = logits;
	int rc = SL_OK;
	if (!identity_rows(rows, n)) {
		if ((rc = gather_rows(be, c->d_sel, logits, rows, n, vocab, SL_DT_F32)))
			return rc;
		l = c->d_sel;
	}
	rc = kern_argmax_rows_cuda(c->d_tokens, l, n, vocab, S(be));
	return rc ? rc : tokens_back(be, tokens_out, n);
}

/* Sampled rows are picked out of the logits (a row copy in fp32), their
 * parameters, positions and history go up with them, the ids (and
 * log-probs) come back. All-greedy batches take sample_greedy. */
static int sample(node_backend *be, int32_t *tokens_out, const float *logits, const int32_t *rows,
		  int n, int vocab, const kern_sample_params *params, const int64_t *positions,
		  const kern_logit_bias *bias, const kern_token_hist *hist, const kern_logprobs *lp)
{
	cuda_impl *c = I(be);
	if (n > c->lim.max_seqs)
		return SL_EINVAL;
	if (c->greedy_fast && greedy_only(params, n, bias, lp))
		return sample_greedy(be, tokens_out, logits, rows, n, vocab);
	int rc = staged_wait(&c->params);
	if (!rc)
		rc = staged_wait(&c->pos);
	if (!rc)
		rc = staged_wait(&c->rows);
	if (rc)
		return rc;
	memcpy(c->params.h, params, sizeof *params * n);
	memcpy(c->pos.h, positions, sizeof *positions * n);
	memcpy(c->rows.h, rows, 4 * (size_t)n);
	kern_token_hist d_hist;
	kern_logit_bias d_bias;
	kern_logprobs d_lp = lp_layout(c->d_lp, n), h_lp = lp_layout(c->h_lp, n);
	size_t lp_bytes = (size_t)n * (1 + 2 * KERN_MAX_TOP_LOGPROBS) * 4;
	if ((rc = staged_up(be, &c->params, sizeof *params * n)) ||
	    (rc = staged_up(be, &c->pos, sizeof *positions * n)) ||
	    (rc = staged_up(be, &c->rows, 4 * (size_t)n)) ||
	    (rc = stage_hist(be, hist, n, &d_hist)) ||
	    (rc = stage_bias(be, bias, n, &d_bias)) ||
	    (rc = kern_gather_rows_cuda(c->d_sel, logits, c->rows.d, n, vocab, SL_DT_F32, S(be))) ||
	    (rc = kern_sample_cuda(c->sampler, c->d_tokens, c->d_sel, n, vocab, c->params.d, c->pos.d,
				   &d_bias, &d_hist, lp ? &d_lp : NULL, S(be))))
		return rc;
	if (lp)
		CUDA_TRY(cudaMemcpyAsync(c->h_lp, c->d_lp, lp_bytes, cudaMemcpyDeviceToHost, S(be)));
	if ((rc = tokens_back(be, tokens_out, n)))
		return rc;
	if (lp) {
		memcpy(lp->chosen, h_lp.chosen, sizeof(float) * n);
		memcpy(lp->top_ids, h_lp.top_ids, sizeof(int32_t) * n * KERN_MAX_TOP_LOGPROBS);
		memcpy(lp->top, h_lp.top, sizeof(float) * n * KERN_MAX_TOP_LOGPROBS);
	}
	return SL_OK;
}

/* Constrained rows' masks up (rows then masks, one copy), one kernel
 * over those rows only. */
static int mask_logits(node_backend *be, float *logits, const int32_t *rows, const uint32_t *masks,
		       int n, int vocab)
{
	cuda_impl *c = I(be);
	size_t words = (size_t)kern_mask_words(vocab);
	if (n > c->lim.max_seqs || vocab > c->lim.vocab)
		return SL_EINVAL;
	int rc = staged_wait(&c->mask);
	if (rc)
		return rc;
	size_t row_bytes = 4 * (size_t)c->lim.max_seqs;
	memcpy(c->mask.h, rows, 4 * (size_t)n);
	memcpy((char *)c->mask.h + row_bytes, masks, 4 * words * n);
	CUDA_TRY(cudaMemcpyAsync(c->mask.d, c->mask.h, 4 * (size_t)n, cudaMemcpyHostToDevice, S(be)));
	if ((rc = staged_up_at(be, &c->mask, row_bytes, 4 * words * n)))
		return rc;
	return kern_logits_mask_cuda(logits, c->mask.d, (const uint32_t *)((char *)c->mask.d + row_bytes),
				     n, vocab, S(be));
}

static int cu_mask_logits(node_backend *be, float *logits, const int32_t *rows,
			  const uint32_t *masks, int n, int vocab)
{
	RANGED("mask_logits", mask_logits(be, logits, rows, masks, n, vocab));
}

static int cu_sample(node_backend *be, int32_t *tokens_out, const float *logits, const int32_t *rows,
		     int n, int vocab, const kern_sample_params *params, const int64_t *positions,
		     const kern_logit_bias *bias, const kern_token_hist *hist,
		     const kern_logprobs *lp)
{
	RANGED("sample", sample(be, tokens_out, logits, rows, n, vocab, params, positions, bias,
				hist, lp));
}

/* The quantized kernels tuned for the model's projections at reserve,
 * before any step is captured: the int8 split path's cuBLASLt algorithm
 * for int8 with per-row scales (kern_qblas_tune_split), the GEMM's block
 * shape for what AUTO gives the GEMM (kern_qblas_tune_gemm). */
static int tune_quant(cuda_impl *c, const node_backend_limits *lim, sl_dtype dt)
{
	const double t0 = sl_now();
	int split = 0, gemm = 0, kept = 0;
	for (int i = 0; i < lim->n_quant_weights; i++) {
		const kern_qweight *w = lim->quant_weights[i];
		int k = 0, rc = SL_OK;
		if (w->format == KERN_Q_INT8 && w->group == 0) {
			rc = kern_qblas_tune_split(c->qblas, w->rows, w->cols);
			split++;
		}
		if (rc || (rc = kern_qblas_tune_gemm(c->qblas, w, dt, &k)))
			return rc;
		gemm++;
		kept += k;
	}
	if (lim->n_quant_weights > 0)
		SL_INFO("cuda", "quantized projections tuned in %.2f s: the int8 GEMM for %d weights, "
			"the GEMM's block shape for %d weights (%d token counts changed)",
			sl_now() - t0, split, gemm, kept);
	return SL_OK;
}

static int reserve_scratch(node_backend *be, const node_backend_limits *lim)
{
	cuda_impl *c = I(be);
	c->lim = *lim;
	/* every sequence's table row is as long as a full-context sequence's */
	c->table_stride = lim->max_table_entries / (lim->max_seqs > 0 ? lim->max_seqs : 1);
	if (c->table_stride < 1)
		c->table_stride = 1;
	size_t batch_ints = 3 * (size_t)lim->step_tokens + 3 * (size_t)lim->max_seqs +
			    (size_t)lim->max_seqs * c->table_stride;
	int rc;
	if ((rc = staged_init(&c->batch, 4 * batch_ints)) ||
	    (rc = staged_init(&c->rows, 4 * (size_t)lim->max_rows)) ||
	    (rc = staged_init(&c->params, sizeof(kern_sample_params) * lim->max_seqs)) ||
	    (rc = staged_init(&c->pos, sizeof(int64_t) * lim->max_seqs)) ||
	    (rc = staged_init(&c->hist, 4 * ((size_t)lim->max_seqs + 1 + 3 * (size_t)lim->max_hist))) ||
	    (rc = staged_init(&c->bias, 4 * ((size_t)lim->max_seqs + 1 + 2 * (size_t)lim->max_bias))) ||
	    (rc = staged_init(&c->mask, 4 * (size_t)lim->max_seqs * (1 + (size_t)kern_mask_words(lim->vocab)))))
		return rc;
	size_t lp_bytes = (size_t)lim->max_seqs * (1 + 2 * KERN_MAX_TOP_LOGPROBS) * 4;
	CUDA_TRY(cudaMalloc((void **)&c->d_tokens, 4 * (size_t)lim->max_seqs));
	CUDA_TRY(cudaMallocHost((void **)&c->h_tokens, 4 * (size_t)lim->max_seqs));
	CUDA_TRY(cudaMalloc(&c->d_lp, lp_bytes));
	CUDA_TRY(cudaMallocHost(&c->h_lp, lp_bytes));
	CUDA_TRY(cudaMalloc((void **)&c->d_sel, sizeof(float) * lim->max_seqs * (size_t)lim->vocab));
	CUDA_TRY(cudaMalloc((void **)&c->sumsq, sizeof(float) * SUMSQ_PARTS));
	if ((rc = kern_attn_ws_create(lim->step_tokens, lim->n_heads, lim->head_dim, lim->max_ctx,
				      &c->attn)))
		return rc;
	kern_attn_ws_set_fp8_smem(c->attn, c->attn_fp8_smem);
	c->attn_wgmma = kern_attn_ws_set_prefill_wgmma(c->attn, !c->attn_prefill_mma);
	if (lim->quant_max_cols > 0) {
		kern_qblas_config qc = {.max_tokens = lim->step_tokens, .max_cols = lim->quant_max_cols,
					.fp8_fast_accum = c->fp8_fast};
		if ((rc = kern_qblas_create(c->stream, &qc, &c->qblas)))
			return rc;
		kern_qblas_set_pdl(c->qblas, c->pdl);
		SL_INFO("cuda", "quantized projections: %.0f MiB of scratch (workspace, dequantize, "
			"fp8 activations, int8 slices)", kern_qblas_device_bytes(&qc) / 1048576.0);
		if ((rc = tune_quant(c, lim, be->dtype)))
			return rc;
	}
	return kern_sampler_create(lim->max_seqs, lim->vocab, &c->sampler);
}

static int cu_reserve(node_backend *be, const node_backend_limits *lim, char *err, size_t errlen)
{
	int rc = node_backend_cuda_check(lim, err, errlen);
	if (rc)
		return rc;
	/* 4 warps a GEMV tile measured faster end to end on the H200 for
	 * 13B (hidden 5120) at every grid, 8 for 70B (hidden 8192) at tp 1
	 * and tp 4 (kernels/matmul.cu, docs/benchmarks.md) */
	kern_blas_set_gemv_warps(I(be)->blas, lim->dim >= 8192 ? 8 : 4);
	SL_INFO("cuda", "GEMV: %d warps a tile (hidden size %d)", kern_blas_gemv_warps(I(be)->blas),
		lim->dim);
	int group = lim->n_heads / lim->n_kv_heads;
	if (kern_attn_mma_shape(lim->head_dim, group))
		SL_INFO("cuda", "attention: tensor-core kernels (head_dim %d, %d query heads per KV "
			"head)", lim->head_dim, group);
	else
		SL_INFO("cuda", "attention: head_dim %d with %d query heads per KV head runs on the "
			"CUDA-core kernel (tensor cores take head_dim 64, 80, 96, 128 and groups up "
			"to %d)", lim->head_dim, group, KERN_ATTN_MMA_MAX_GROUP);
	if ((rc = reserve_scratch(be, lim)))
		return sl_errf(err, errlen, rc, "cannot reserve the CUDA step scratch: %s",
			       sl_last_error()[0] ? sl_last_error() : "the log above says why");
	if (I(be)->attn_wgmma && lim->head_dim == 128 && kern_attn_mma_shape(lim->head_dim, group))
		SL_INFO("cuda", "attention: prefill on Hopper's warpgroup MMAs (SL_ATTN_PREFILL=mma "
				"for the mma.sync kernel)");
	return SL_OK;
}

static int capture(node_backend *be, int key, int (*fn)(void *), void *ctx)
{
	cuda_impl *c = I(be);
	cudaGraph_t g = NULL;
	CUDA_TRY(cudaStreamBeginCapture(S(be), cudaStreamCaptureModeThreadLocal));
	int rc = fn(ctx);
	cudaError_t e = cudaStreamEndCapture(S(be), &g);
	if (rc || e != cudaSuccess) {
		if (g)
			cudaGraphDestroy(g);
		if (!rc)
			SL_ERROR("cuda", "graph capture failed: %s", cudaGetErrorString(e));
		cudaGetLastError();
		return rc ? rc : SL_EDEVICE;
	}
	e = cudaGraphInstantiate(&c->graphs[key], g, 0);
	cudaGraphDestroy(g);
	if (e != cudaSuccess) {
		c->graphs[key] = NULL;
		SL_ERROR("cuda", "graph instantiate failed: %s", cudaGetErrorString(e));
		return SL_EDEVICE;
	}
	SL_DEBUG("cuda", "captured decode graph for %d sequences", key);
	return SL_OK;
}

static int cu_run_cached(node_backend *be, int key, int (*fn)(void *), void *ctx)
{
	cuda_impl *c = I(be);
	if (key < 0 || key >= MAX_GRAPHS || c->no_graphs)
		return fn(ctx);
	if (!c->graphs[key]) {
		nvtxRangePushA("graph capture");
		int rc = capture(be, key, fn, ctx);
		nvtxRangePop();
		if (rc)
			return rc;
	}
	CUDA_TRY(cudaGraphLaunch(c->graphs[key], S(be)));
	return SL_OK;
}

static int cu_fill_random(node_backend *be, void *dst, size_t n, float mean, float std,
			  uint64_t seed)
{
	return kern_fill_uniform_cuda(dst, n, mean, std, seed, be->dtype, S(be));
}

/* SL_TIMELINE=PREFIX (a TIMELINE=1 build, kernels/timeline.h): record the
 * kernels' per-block timeline into a ring of SL_TIMELINE_RECORDS (default
 * 2^19, about 3 decode steps of a 13B model at tp 2) from the start. */
static int timeline_start(cuda_impl *c, char *err, size_t errlen)
{
	const char *prefix = getenv("SL_TIMELINE"), *recs = getenv("SL_TIMELINE_RECORDS");
	if (!prefix || !*prefix)
		return SL_OK;
	long n = 1L << 19;
	if (recs && sl_parse_int("SL_TIMELINE_RECORDS", recs, 1024, 1L << 30, &n, err, errlen))
		return SL_EINVAL;
	if (kern_timeline_start((size_t)n))
		return sl_errf(err, errlen, SL_ENOTSUP, "SL_TIMELINE: %s", sl_last_error());
	if (!(c->timeline = strdup(prefix)))
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	SL_INFO("cuda", "SL_TIMELINE: recording the kernels' timeline (%ld records), written to "
			"%s.gpu%d.%ld.csv at exit", n, prefix, c->device, (long)getpid());
	return SL_OK;
}

/* PREFIX.gpuN.PID.csv: ranks sharing a GPU write files of their own. */
static void timeline_dump(cuda_impl *c)
{
	if (!c->timeline)
		return;
	char path[4096];
	size_t n = 0;
	snprintf(path, sizeof path, "%s.gpu%d.%ld.csv", c->timeline, c->device, (long)getpid());
	if (kern_timeline_dump(path, &n))
		SL_WARN("cuda", "SL_TIMELINE: %s", sl_last_error());
	else
		SL_INFO("cuda", "SL_TIMELINE: %zu records in %s", n, path);
	free(c->timeline);
	c->timeline = NULL;
}

static void cu_destroy(node_backend *be)
{
	cuda_impl *c = I(be);
	if (c) {
		cudaSetDevice(c->device);
		timeline_dump(c);
		for (int i = 0; i < MAX_GRAPHS; i++)
			if (c->graphs[i])
				cudaGraphExecDestroy(c->graphs[i]);
		kern_blas_destroy(c->blas);
		kern_qblas_destroy(c->qblas);
		kern_attn_ws_destroy(c->attn);
		kern_sampler_destroy(c->sampler);
		staged_free(&c->batch), staged_free(&c->rows);
		staged_free(&c->params), staged_free(&c->pos), staged_free(&c->hist);
		staged_free(&c->bias);
		staged_free(&c->mask);
		cudaFree(c->d_tokens), cudaFreeHost(c->h_tokens), cudaFree(c->d_sel);
		cudaFree(c->d_lp), cudaFreeHost(c->h_lp), cudaFree(c->sumsq);
		if (c->stream)
			cudaStreamDestroy(c->stream);
		free(c);
	}
	free(be);
}

static const node_backend_ops cuda_ops = {
	.alloc = cu_alloc, .free = cu_free, .upload = cu_upload, .download = cu_download,
	.qweight_prepare = cu_qweight_prepare,
	.sync = cu_sync, .set_batch = cu_set_batch, .embed = cu_embed, .rmsnorm = cu_rmsnorm,
	.add_rmsnorm = cu_add_rmsnorm, .matmul = cu_matmul, .matmul_f32out = cu_matmul_f32out,
	.rope_kv_write = cu_rope_kv_write, .attention = cu_attention, .silu_mul = cu_silu_mul,
	.matmul_swiglu = cu_matmul_swiglu, .matmul_add_rmsnorm = cu_matmul_add_rmsnorm,
	.matmul_rope = cu_matmul_rope, .prenorm_sumsq = cu_prenorm_sumsq,
	.matmul_allreduce_add = cu_matmul_allreduce_add,
	.gather_rows = cu_gather_rows, .copy2d = cu_copy2d, .sample = cu_sample,
	.mask_logits = cu_mask_logits,
	.reserve = cu_reserve, .run_cached = cu_run_cached, .fill_random = cu_fill_random,
	.range_push = cu_range_push, .range_pop = cu_range_pop, .destroy = cu_destroy,
};

/* The environment switches (docs/cuda.md), read once here rather than on
 * every step: SL_NO_GRAPHS (any value) runs decode steps without CUDA
 * graphs, for comparisons and profiles; SL_PDL=0 turns off programmatic
 * dependent launch of the GEMVs and the step's small kernels (on by
 * default on sm_90 and later: kernels/pdl.h); SL_FUSE picks the decode
 * GEMVs' fused epilogues (kernels/epilogue.h, fuse_bits): SwiGLU, RoPE
 * + KV write and the norm split between the projections around it
 * (prenorm) by default.
 * The residual add + RMSNorm in one grid's last block is off by default:
 * on an H100 it made the 7B batch-1 step slower (fp16 187.9 -> 183.6
 * tokens/s, int8 306.8 -> 290.1; docs/cuda.md).
 * SL_PREFER_L1=0 leaves the decode GEMVs' L1 / shared memory split to the
 * driver (kernels/pdl.h). SL_ATTN_FP8=smem: decode attention over an fp8
 * cache takes the older shared-memory conversion (kern_attn_ws_set_fp8_smem),
 * for comparisons. SL_SAMPLE_FULL=1: all-greedy batches run the whole
 * sampler (uploads, sort, pick) instead of the argmax alone, for
 * comparisons. SL_ACT_CODES=0: the norm and SiLU * up kernels store
 * their values as well as the next projection's fp8 activations (norm,
 * silu_mul), for comparisons. SL_GEMM_ADD=0: the run-dtype o and down
 * GEMMs write their product for the add + RMSNorm to add, as before
 * add_in_place, for comparisons. */
#define FUSE_DEFAULT (1 << KERN_EPI_SWIGLU | 1 << KERN_EPI_ROPE | FUSE_PRENORM)
#define GEMV_PARTS_DEFAULT 3 /* parts_add_rmsnorm */

/* SL_FUSE: "0", "all", or a comma-separated list of swiglu, rope, norm,
 * prenorm; an unknown name is logged and ignored. */
static int fuse_bits(const char *list)
{
	static const struct {
		const char *name;
		int bits;
	} k[] = {{"0", 0},
		 {"all", 1 << KERN_EPI_SWIGLU | 1 << KERN_EPI_ROPE | 1 << KERN_EPI_ADD_NORM |
				 FUSE_PRENORM},
		 {"swiglu", 1 << KERN_EPI_SWIGLU},
		 {"rope", 1 << KERN_EPI_ROPE},
		 {"norm", 1 << KERN_EPI_ADD_NORM},
		 {"prenorm", FUSE_PRENORM}};
	int bits = 0;
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		int known = 0;
		for (size_t i = 0; i < sizeof k / sizeof *k; i++)
			if (strlen(k[i].name) == len && !strncmp(p, k[i].name, len)) {
				bits |= k[i].bits;
				known = 1;
			}
		if (!known)
			SL_WARN("cuda",
				"SL_FUSE: unknown epilogue '%.*s' (swiglu, rope, norm, prenorm, all, 0)",
				(int)len, p);
		p += len + (p[len] == ',');
	}
	return bits;
}

static void read_switches(cuda_impl *c, int cc_major)
{
	const char *pdl = getenv("SL_PDL"), *fuse = getenv("SL_FUSE"), *l1 = getenv("SL_PREFER_L1");
	c->no_graphs = getenv("SL_NO_GRAPHS") != NULL;
	c->prefer_l1 = !(l1 && !strcmp(l1, "0"));
	const char *fast = getenv("SL_FP8_FAST_ACCUM");
	c->fp8_fast = fast && !strcmp(fast, "1");
	const char *attn = getenv("SL_ATTN_FP8"), *codes = getenv("SL_ACT_CODES");
	c->attn_fp8_smem = attn && !strcmp(attn, "smem");
	const char *pre = getenv("SL_ATTN_PREFILL");
	c->attn_prefill_mma = pre && !strcmp(pre, "mma");
	c->act_codes = !(codes && !strcmp(codes, "0"));
	const char *add = getenv("SL_GEMM_ADD");
	c->gemm_add = !(add && !strcmp(add, "0"));
	c->fuse = fuse ? fuse_bits(fuse) : FUSE_DEFAULT;
	const char *parts = getenv("SL_GEMV_PARTS");
	c->gemv_parts = parts ? atoi(parts) : GEMV_PARTS_DEFAULT;
	if (c->gemv_parts < 0 || c->gemv_parts > KERN_NORM_MAX_PARTS) {
		SL_WARN("cuda", "SL_GEMV_PARTS=%s: 0 to %d slices; taking %d", parts,
			KERN_NORM_MAX_PARTS, GEMV_PARTS_DEFAULT);
		c->gemv_parts = GEMV_PARTS_DEFAULT;
	}
	const char *full = getenv("SL_SAMPLE_FULL"), *meta = getenv("SL_QGEMV_META");
	c->greedy_fast = !(full && !strcmp(full, "1"));
	c->qmeta = !(meta && !strcmp(meta, "0"));
	c->pdl = !(pdl && !strcmp(pdl, "0"));
	kern_blas_set_pdl(c->blas, c->pdl);
	kern_pdl_enable(c->pdl && cc_major >= 9);
	kern_gemv_l1_enable(c->prefer_l1);
	if (c->no_graphs)
		SL_INFO("cuda", "SL_NO_GRAPHS: decode steps run without CUDA graphs");
	if (!c->pdl)
		SL_INFO("cuda", "SL_PDL=0: no programmatic dependent launches");
	if (!c->prefer_l1)
		SL_INFO("cuda", "SL_PREFER_L1=0: the decode GEMVs take the driver's L1 / shared "
				"memory split");
	if (c->attn_prefill_mma)
		SL_INFO("cuda", "SL_ATTN_PREFILL=mma: prefill attention on mma.sync on Hopper too");
	if (c->attn_fp8_smem)
		SL_INFO("cuda", "SL_ATTN_FP8=smem: decode attention converts fp8 K/V tiles in "
				"shared memory");
	if (c->fp8_fast)
		SL_INFO("cuda", "SL_FP8_FAST_ACCUM=1: the fp8 W8A8 GEMMs accumulate fast");
	if (!c->greedy_fast)
		SL_INFO("cuda", "SL_SAMPLE_FULL=1: greedy batches go through the whole sampler");
	if (!c->act_codes)
		SL_INFO("cuda", "SL_ACT_CODES=0: the norm and SiLU * up kernels store their values "
				"beside the fp8 activations");
	if (!c->gemm_add)
		SL_INFO("cuda", "SL_GEMM_ADD=0: the o and down GEMMs write their product, the norm "
				"adds it");
	if (parts)
		SL_INFO("cuda", "SL_GEMV_PARTS=%d: the o and down GEMVs up to 8 tokens in up to "
				"that many K slices, summed by the add + RMSNorm (0: unsplit)",
			c->gemv_parts);
	if (!c->qmeta)
		SL_INFO("cuda", "SL_QGEMV_META=0: the decode GEMVs read group scales and zero points "
				"apart");
	if (fuse)
		SL_INFO("cuda", "SL_FUSE=%s: fused GEMV epilogues: SwiGLU %s, RoPE + KV write %s, "
				"add + RMSNorm %s, norm split across the GEMVs %s", fuse,
			c->fuse & 1 << KERN_EPI_SWIGLU ? "on" : "off",
			c->fuse & 1 << KERN_EPI_ROPE ? "on" : "off",
			c->fuse & 1 << KERN_EPI_ADD_NORM ? "on" : "off",
			c->fuse & FUSE_PRENORM ? "on" : "off");
}

int node_backend_cuda_create(int device, sl_dtype dtype, node_backend **out, char *err,
			     size_t errlen)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		cudaGetLastError();
		return sl_errf(err, errlen, SL_EDEVICE, "no CUDA device found");
	}
	if (dtype != SL_DT_F16 && dtype != SL_DT_BF16)
		return sl_errf(err, errlen, SL_ENOTSUP, "the CUDA backend stores fp16 or bf16");
	node_backend *be = calloc(1, sizeof *be);
	cuda_impl *c = calloc(1, sizeof *c);
	if (!be || !c) {
		free(be), free(c);
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	}
	be->ops = &cuda_ops, be->name = "cuda", be->dtype = dtype, be->impl = c;
	c->device = device % n;
	struct cudaDeviceProp prop;
	int rc = SL_OK;
	if (cudaSetDevice(c->device) != cudaSuccess ||
	    cudaGetDeviceProperties(&prop, c->device) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess)
		rc = sl_errf(err, errlen, SL_EDEVICE, "cannot open CUDA device %d", c->device);
	if (!rc)
		snprintf(c->name, sizeof c->name, "%s", prop.name);
	be->stream = c->stream;
	if (!rc && kern_blas_create(c->stream, &c->blas))
		rc = sl_errf(err, errlen, SL_EDEVICE, "cuBLAS initialisation failed");
	if (rc) {
		cu_destroy(be);
		return rc;
	}
	SL_INFO("cuda", "device %d: %s, %.1f GiB, %s", c->device, c->name,
		prop.totalGlobalMem / 1073741824.0, sl_dtype_name(dtype));
	read_switches(c, prop.major);
	if ((rc = timeline_start(c, err, errlen))) {
		cu_destroy(be);
		return rc;
	}
	*out = be;
	return SL_OK;
}

int node_backend_cuda_meminfo(node_backend *be, size_t *free_bytes, size_t *total_bytes)
{
	CUDA_TRY(cudaMemGetInfo(free_bytes, total_bytes));
	return SL_OK;
}

const char *node_backend_cuda_device_name(node_backend *be) { return I(be)->name; }
#endif
