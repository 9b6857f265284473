/*
 * model.h — one rank's share of a Llama model: its config, its weight
 * shard, its KV pools and the step arena, plus the forward pass.
 *
 * Everything is allocated once in model_create (weights, KV blocks for the
 * whole pool, activations for step_tokens); the forward pass never allocates.
 */
#ifndef NODE_MODEL_H
#define NODE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "node/backend.h"
#include "formats/config.h"
#include "parallel/grid.h"
#include "kernels/paged.h"
#include "kernels/quant.h"

/* The four projections are kern_qweight descriptors (kernels/quant.h):
 * format KERN_Q_NONE holds the run dtype's [rows, cols] matrix in data;
 * int8 / fp8 / int4 (--quant) hold codes, scales and zero points, all in
 * backend memory. rows x cols are this rank's shard. */
typedef struct layer_weights {
	void *attn_norm;  /* [dim] */
	kern_qweight wqkv; /* [(n_heads + 2 n_kv_heads) * head_dim, dim], local heads: q | k | v */
	kern_qweight wo;   /* [dim, n_heads * head_dim], local input columns */
	void *ffn_norm;   /* [dim] */
	kern_qweight w13;  /* [2 * hidden, dim], local FFN rows: gate then up */
	kern_qweight w2;   /* [dim, hidden], local input columns */
} layer_weights;

typedef struct model_weights {
	void *tok_emb;    /* [vocab_local, dim] on the first stage */
	void *final_norm; /* [dim] on the last stage */
	kern_qweight lm_head; /* [vocab_local, dim] on the last stage: the run dtype (its data
			       * == tok_emb when tied) or int8 (--quant-lm-head) */
	layer_weights *layers; /* [shard.n_layers] */
} model_weights;

typedef struct model_arena {
	float *x;      /* [step_tokens, dim] fp32 residual stream */
	void *xb;      /* [step_tokens, dim] act: normed input of each block */
	void *qkv;     /* [step_tokens, (hq + 2 hkv) * head_dim] act */
	void *att;     /* [step_tokens, hq * head_dim] act */
	void *proj;    /* [step_tokens, dim] act: wo / w2 output */
	void *gate_up; /* [step_tokens, 2 * hidden] act */
	void *hb;      /* [step_tokens, hidden] act */
	void *lm_in;   /* [max_rows, dim] act: rows whose logits are wanted */
	float *logits; /* [max_rows, vocab] fp32, full vocabulary */
	float *logits_local;  /* [max_rows, vocab_padded / tp] fp32 (tp > 1) */
	float *logits_gather; /* [tp, max_rows, vocab_padded / tp] fp32 (tp > 1) */
	float *inv_freq; /* [head_dim / 2] fp32, backend memory */
} model_arena;

typedef struct model_opts {
	par_grid grid;      /* this rank's place (zero: a group of one); input to the
			     * shard, which is what the model reads afterwards */
	int step_tokens;    /* tokens per forward step (the step budget): the arena is sized for it */
	int max_rows;       /* logits rows per step (0: step_tokens) */
	int max_seqs;       /* sequences per step (0: min(256, step_tokens)) */
	int max_hist;       /* penalty history entries per step (0: a default; never fewer
			     * than one sequence can need, min(context, vocab)) */
	int n_kv_blocks;    /* KV pool size (blocks); 0: from free device memory */
	float mem_fraction; /* with n_kv_blocks 0: fraction of device memory to fill (default 0.9) */
	int skip_tp_comm;   /* benchmarks only: skip tensor-parallel collectives (wrong
			     * results) to measure what they cost */
	int block_tokens;   /* tokens per KV block */
	int quant;          /* kern_qformat of the four projections (--quant); KERN_Q_NONE:
			     * the run dtype. Embedding and norms stay in it */
	int quant_lm_head;  /* the LM head (--quant-lm-head): MODEL_LMQ_AUTO (0: int8 with
			     * any --quant, else the run dtype), MODEL_LMQ_NONE, MODEL_LMQ_INT8 */
	int quant_group;    /* int8 / int4 columns per scale (--quant-group): MODEL_QGROUP_AUTO
			     * (0: int8 MODEL_INT8_GROUP, int4 128), MODEL_QGROUP_ROW (int8:
			     * one scale per row), 32, 64, 128; smaller where a rank's in_dim
			     * needs it (model_load.c) */
	int kv_fp8;         /* KV cache in fp8 E4M3 (--kv-dtype fp8) */
} model_opts;

/* --quant-lm-head auto|none|int8. auto quantizes it whenever the
 * projections are (--quant int8, fp8 or int4): the run-dtype head is 4%
 * of a 7B int8 / fp8 step's bytes, 7% of int4's (docs/cuda.md). */
#define MODEL_LMQ_AUTO 0
#define MODEL_LMQ_NONE 1
#define MODEL_LMQ_INT8 2

#define MODEL_QGROUP_AUTO 0
#define MODEL_QGROUP_ROW (-1)
/* int8's group when --quant-group is not given: one scale per output row
 * (kern_qweight group 0). docs/cuda.md says why (perplexity and speed). */
#define MODEL_INT8_GROUP 0

typedef struct model {
	model_config cfg;
	par_shard shard;
	model_opts opts;
	node_backend *be;   /* not owned */
	struct par_comm *comm; /* not owned; NULL when this rank is the whole group */
	kern_paged_batch batch; /* the step's batch in backend memory (model_set_batch) */
	model_weights w;
	model_arena a;
	void **k_cache, **v_cache; /* [shard.n_layers] each [blocks][kv_local][block_tokens][head_dim]
				    * of kv_bytes each: the run dtype, or fp8 E4M3 codes */
	size_t kv_bytes;           /* bytes per cached K or V value (1: fp8 on a GPU) */
	float *rope_freqs;         /* [head_dim / 2] host: GGUF rope_freqs.weight, a divisor
				    * per rotary frequency; NULL when the model has none */
	uint64_t weight_bytes;     /* bytes of weights held by this rank (codes, scales and
				    * zero points for quantized projections) */
	uint64_t proj_bytes;       /* of which the four projections of every layer */
	uint64_t derived_bytes;    /* the backend's own forms of them besides
				    * (qweight_prepare: int4's meta words on CUDA) */
	uint64_t bytes_read;       /* checkpoint bytes this rank read */
} model;

/* Load config and this rank's weight shard from a Hugging Face folder or
 * a GGUF file (the first part, for a split model). */
int model_create(const char *path, node_backend *be, const model_opts *opts, model **out,
		 char *err, size_t errlen);
/* Same shapes from a config alone, weights random (benchmarks: fp16/bf16
 * generated on the device, nothing read from disk). */
int model_create_random(const model_config *cfg, node_backend *be, const model_opts *opts,
			uint64_t seed, model **out, char *err, size_t errlen);
void model_destroy(model *m);
/* --quant and --quant-group as model_opts holds them: 0, or SL_EINVAL
 * naming the flag (int8 groups 32/64/128 or per row, int4 64/128). */
int model_check_quant(int quant, int group, char *err, size_t errlen);
/* The flags' values: --quant none|int8|fp8|int4, --quant-group
 * auto|row|32|64|128 (MODEL_QGROUP_AUTO, _ROW, ...), --kv-dtype auto|fp8 (auto:
 * the run dtype). SL_EINVAL naming the flag on anything else. */
int model_parse_quant(const char *s, int *quant, char *err, size_t errlen);
int model_parse_quant_group(const char *s, int *group, char *err, size_t errlen);
int model_parse_kv_dtype(const char *s, int *kv_fp8, char *err, size_t errlen);
int model_parse_quant_lm_head(const char *s, int *lmq, char *err, size_t errlen);
/* Whether o asks for an int8 LM head (--quant-lm-head, auto: with any --quant);
 * it stays in the run dtype where in_dim is not a multiple of 16. */
int model_lm_head_int8(const model_opts *o);

/* The forward pass in stage pieces (see model.c); step.c runs them.
 * model_set_batch copies a host batch into backend memory; model_embed
 * (first stage) fills the residual x; model_layers runs this stage's
 * layers, leaving x (and, on the last stage, xb = final_norm(x));
 * model_lm_head writes full-vocabulary logits of `rows` (host indices into
 * the batch) to rows [row0, row0 + n_rows) of a.logits. */
int model_set_batch(model *m, const kern_paged_batch *host, char *err, size_t errlen);
int model_embed(model *m);
int model_layers(model *m);
int model_lm_head(model *m, const int32_t *rows, int n_rows, int row0);

#endif
