/*
 * backend.h — the operations a forward pass needs, behind one table so
 * node/model.c reads the same for the CPU reference and the CUDA backend.
 *
 * Buffer kinds (all owned by the model, allocated once through be->alloc):
 *   residual: fp32 [n, dim]                  the residual stream
 *   act:      be->dtype (fp32 on CPU, fp16/bf16 on CUDA) activations
 *   weight:   be->dtype, uploaded once at load; the projections are
 *             kern_qweight descriptors (kernels/quant.h): the run dtype
 *             (KERN_Q_NONE) or int8 / fp8 / int4 codes with scales
 *   KV cache: be->dtype, or fp8 E4M3 codes when lim.kv_fp8 (1 byte each on
 *             CUDA; the CPU keeps fp32 values rounded through E4M3)
 *   logits:   fp32
 * Every op is enqueued on the backend's stream; the CPU backend runs it
 * at once. `sync` waits for all queued work.
 */
#ifndef NODE_BACKEND_H
#define NODE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "kernels/paged.h"
#include "kernels/quant.h"
#include "kernels/sampling.h"

typedef struct node_backend node_backend;
struct node_backend_limits;

/* An RMSNorm a fused op left for the projection that reads its output to
 * finish (matmul_add_rmsnorm's defer, kernels/epilogue.h): that output
 * holds x * w, not yet divided by the rms. */
typedef struct node_prenorm {
	const float *x;  /* [n, dim] fp32 residual rows, or NULL: none pending */
	const void *w;   /* [dim] norm weight in the run dtype */
	float eps;
	const float *ss; /* the backend's: parts of the rows' sums of squares */
	int parts;
} node_prenorm;

typedef struct node_backend_ops {
	/* memory: device (or host) buffers; copies are host <-> backend */
	int (*alloc)(node_backend *be, size_t bytes, void **out);
	void (*free)(node_backend *be, void *p);
	int (*upload)(node_backend *be, void *dst, const void *src, size_t bytes);
	int (*download)(node_backend *be, void *dst, const void *src, size_t bytes);
	/* Optional (NULL: nothing to add): after a quantized weight's upload,
	 * the backend's derived buffers of it from the host copy h into d
	 * (CUDA: the decode GEMV's meta words, kern_qweight_meta_pack), their
	 * bytes into *bytes; freed through free with the weight's others. */
	int (*qweight_prepare)(node_backend *be, const kern_qweight *h, kern_qweight *d,
			       size_t *bytes);
	int (*sync)(node_backend *be);
	/* the step's batch: copies host arrays into backend memory and fills
	 * *dev with pointers the kernels can read */
	int (*set_batch)(node_backend *be, const kern_paged_batch *host, kern_paged_batch *dev);
	/* ops: shapes as in the kernels/ headers */
	int (*embed)(node_backend *be, float *x, const void *table, const int32_t *tokens, int n,
		     int dim, int row0, int rows);
	int (*rmsnorm)(node_backend *be, void *out, const float *x, const void *w, int n, int dim,
		       float eps);
	int (*add_rmsnorm)(node_backend *be, float *x, const void *delta, const void *w, void *out,
			   int n, int dim, float eps);
	/* out [n, w->rows] act = x [n, w->cols] act @ W^T, W in any format */
	int (*matmul)(node_backend *be, void *out, const void *x, const kern_qweight *w, int n);
	/* the LM head: out [n, w->rows] fp32 logits = x [n, w->cols] act @ W^T, W in the
	 * run dtype or int8 (--quant-lm-head) */
	int (*matmul_f32out)(node_backend *be, float *out, const void *x, const kern_qweight *w,
			     int n);
	int (*rope_kv_write)(node_backend *be, void *qkv, void *k_cache, void *v_cache,
			     const kern_paged_batch *b, int n_heads, int n_kv_heads, int head_dim,
			     const float *inv_freq);
	int (*attention)(node_backend *be, void *out, const void *qkv, int q_stride,
			 const void *k_cache, const void *v_cache, const kern_paged_batch *b,
			 int n_heads, int n_kv_heads, int head_dim, float scale);
	int (*silu_mul)(node_backend *be, void *out, const void *gate_up, int n, int hidden);
	/* Fused pairs (kernels/epilogue.h), optional: NULL means the model
	 * runs the pair itself. Each takes the unfused pair's scratch (which
	 * it may leave unwritten) and gives the pair's result.
	 * The two that read a norm's output take pre (node_prenorm): NULL or
	 * pre->x NULL when x holds their input; else x [n, w->cols] holds
	 * pre->x * pre->w, still to be divided by the rows' rms, which the op
	 * does on its sums or, first, by writing RMSNorm(pre->x) * pre->w
	 * into x.
	 * matmul_swiglu: out [n, hidden] = silu_mul of x @ W^T, W [gate | up];
	 * gate_up [n, 2 hidden] scratch. */
	int (*matmul_swiglu)(node_backend *be, void *out, void *gate_up, void *x,
			     const node_prenorm *pre, const kern_qweight *w, int n, int hidden);
	/* matmul_add_rmsnorm: x [n, w->rows] fp32 += in @ W^T (rounded to the
	 * run dtype, or added from its fp32 sum: the CUDA backend's GEMV in
	 * K slices, SL_GEMV_PARTS), then out = RMSNorm(x) * norm_w (norm_w
	 * NULL: the add only); proj [n, w->rows] scratch. With defer non-NULL the op may
	 * leave the norm to the next projection of out: it then fills *defer
	 * and out holds x * norm_w (else defer->x = NULL); the caller passes
	 * defer to that projection and runs nothing else in between, so
	 * that projection is out's next reader (the CUDA backend may then
	 * write only its fp8 activations: quant.h, kern_qblas_act_mark_codes). */
	int (*matmul_add_rmsnorm)(node_backend *be, float *x, void *out, void *proj, const void *in,
				  const kern_qweight *w, const void *norm_w, int n, float eps,
				  node_prenorm *defer);
	/* prenorm_sumsq, optional (NULL: never): the model is about to leave
	 * a norm pending by other means than matmul_add_rmsnorm's defer (the
	 * tp all-reduce fused with the residual add: parallel/comm.h), after
	 * the projection of weight w, for n tokens. SL_OK when the backend
	 * would defer there too: *ss is then its buffer for the parts of the
	 * sums of squares (cap floats; node_prenorm's ss) and it forgets what
	 * it knew of the norm's output. SL_ENOTSUP otherwise (the fusion
	 * switched off, int4 weights, too many tokens). Enqueues nothing. */
	int (*prenorm_sumsq)(node_backend *be, const kern_qweight *w, int n, float **ss,
			     size_t *cap);
	/* matmul_allreduce_add, optional (NULL: never): at tp > 1, x [n,
	 * w->rows] fp32 += the tp group's sum of in @ W^T (each rank's product
	 * rounded to the run dtype, summed in rank order as the all-reduce
	 * sums, rounded again), out = x * norm_w with the norm left in *defer,
	 * all in the projection's own kernel through xg (parallel/comm.h's
	 * par_tp_gemv_xchg). *done 0 when it cannot (the same rules as
	 * prenorm_sumsq, run-dtype weights only, the GEMV's sizes): nothing
	 * enqueued, the caller runs the other paths. Every rank of the group
	 * must decide alike; it does, from the shapes and switches alone. */
	int (*matmul_allreduce_add)(node_backend *be, const kern_xchg *xg, float *x, void *out,
				    const void *in, const kern_qweight *w, const void *norm_w,
				    int n, float eps, node_prenorm *defer, int *done);
	/* matmul_rope: qkv [n, w->rows] = x @ W^T, then rope_kv_write's work
	 * on it (q and k turned, k and v into the caches); pre as above. */
	int (*matmul_rope)(node_backend *be, void *qkv, void *x, const node_prenorm *pre,
			   const kern_qweight *w, int n, void *k_cache, void *v_cache,
			   const kern_paged_batch *b, int n_heads, int n_kv_heads, int head_dim,
			   const float *inv_freq);
	/* out[i] = x[rows[i]] for act rows of width dim; rows is a host array */
	int (*gather_rows)(node_backend *be, void *out, const void *x, const int32_t *rows, int n,
			   int dim);
	/* rows x width_bytes strided copy within backend memory */
	int (*copy2d)(node_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
		      size_t width_bytes, size_t rows);
	/* tokens_out[i] (host) = sample of logits row rows[i] (logits: backend
	 * fp32 [*, vocab]) with params[i] at position positions[i], after the
	 * logit bias of row i of bias and the penalties from row i of hist; lp
	 * (NULL: none) gets row i's log-probs. rows, params, positions, bias,
	 * hist are host arrays of n (bias, hist NULL: none), lp host outputs
	 * (kernels/sampling.h) */
	int (*sample)(node_backend *be, int32_t *tokens_out, const float *logits, const int32_t *rows,
		      int n, int vocab, const kern_sample_params *params, const int64_t *positions,
		      const kern_logit_bias *bias, const kern_token_hist *hist,
		      const kern_logprobs *lp);
	/* Constrained decoding, before sample: logits row rows[i] (backend
	 * fp32 [*, vocab]) keeps only the tokens set in mask row i, -inf
	 * elsewhere (kernels/logits_mask.h). rows [n] and masks [n,
	 * kern_mask_words(vocab)] are host arrays. */
	int (*mask_logits)(node_backend *be, float *logits, const int32_t *rows,
			   const uint32_t *masks, int n, int vocab);
	/* Once, before the first step: checks that the backend's kernels take
	 * the model and KV layout in lim, and sizes the per-step scratch (no
	 * allocation in the step loop): tokens and rows per step, sequences per
	 * step, block table entries per step, penalty history entries per step,
	 * vocabulary, local query heads, head_dim and the longest context, the
	 * widest quantized weight, the KV dtype. A refusal names the flag or
	 * config field to change in err. */
	int (*reserve)(node_backend *be, const struct node_backend_limits *lim, char *err,
		       size_t errlen);
	/* Run fn(ctx) — a run of ops with no host synchronisation — through a
	 * CUDA graph cached under key (key < 0: run directly). The CPU backend
	 * just calls fn. Every launch shape inside must depend only on key. */
	int (*run_cached)(node_backend *be, int key, int (*fn)(void *ctx), void *ctx);
	/* n elements of dtype dt, uniform with mean and standard deviation std,
	 * reproducible from seed (random weights for benchmarks) */
	int (*fill_random)(node_backend *be, void *dst, size_t n, float mean, float std,
			   uint64_t seed);
	/* Named profiler ranges around a stretch of ops (a layer): NVTX on
	 * CUDA, so an Nsight Systems timeline reads by name; nothing on CPU.
	 * push opens "name index" ("name" when index < 0), pop closes the
	 * innermost. Host-side only: cheap without a profiler, allowed inside
	 * run_cached's graph capture. */
	void (*range_push)(node_backend *be, const char *name, int index);
	void (*range_pop)(node_backend *be);
	void (*destroy)(node_backend *be);
} node_backend_ops;

#define NODE_QUANT_WEIGHTS 5 /* a layer's four projections and the LM head */

/* What reserve sizes for: per step, tokens, rows (of logits), sequences and
 * block table entries; the model's vocabulary, this rank's query and KV
 * heads, head_dim, the longest context; tokens per KV block; the most
 * columns of any quantized projection (0: none is quantized), and whether
 * they are fp8 (a backend may then make their W8A8 activations in the
 * kernels that write their inputs); whether the KV cache holds fp8 E4M3
 * (rope_kv_write and attention then store and read it so). */
typedef struct node_backend_limits {
	int step_tokens, max_rows, max_seqs, max_table_entries, max_hist, vocab;
	int max_bias;              /* logit bias entries per step (node/plan.h) */
	int n_heads, n_kv_heads, head_dim, max_ctx;
	int block_tokens;
	int quant_max_cols;
	int quant_fp8;
	/* layer 0's quantized projections and the LM head if quantized (every
	 * layer's have layer 0's shapes and formats): a backend may tune its
	 * kernels for them at reserve. Valid during reserve only. */
	const kern_qweight *quant_weights[NODE_QUANT_WEIGHTS];
	int n_quant_weights;
	int kv_fp8;
	int dim;              /* hidden size: picks the GEMV block shape (CUDA) */
} node_backend_limits;

struct node_backend {
	const node_backend_ops *ops;
	const char *name;     /* "cpu" or "cuda" */
	sl_dtype dtype;       /* weights and activations */
	void *impl;           /* backend-private state */
	void *stream;         /* cudaStream_t on CUDA, NULL on CPU */
};

int node_backend_cpu_create(node_backend **out);
/* What the CUDA kernels need of lim (power-of-two KV blocks, an even
 * head_dim up to 256, whole GQA groups): 0, or an error naming the flag or
 * config field. The CUDA backend's reserve runs it; it needs no device, so
 * every build has it (and tests it). */
int node_backend_cuda_check(const node_backend_limits *lim, char *err, size_t errlen);
#ifdef SL_HAVE_CUDA
/* dtype: SL_DT_F16 or SL_DT_BF16; device: CUDA ordinal. */
int node_backend_cuda_create(int device, sl_dtype dtype, node_backend **out, char *err,
			     size_t errlen);
/* Free and total device memory in bytes. */
int node_backend_cuda_meminfo(node_backend *be, size_t *free_bytes, size_t *total_bytes);
/* Name of the device (for logs and benchmark reports). */
const char *node_backend_cuda_device_name(node_backend *be);
#endif
void node_backend_destroy(node_backend *be);

#endif
