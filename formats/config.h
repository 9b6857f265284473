/*
 * config.h — the model's shape and hyper-parameters, read from a Hugging
 * Face Llama folder (`config.json`, plus the EOS ids of
 * `generation_config.json`) or from a GGUF file's `llama.*` and
 * `tokenizer.ggml.*` keys. Anything the engine cannot run (another
 * architecture, biases, an unknown rope scaling type, inconsistent head
 * counts) is refused with an error naming the file and the field.
 */
#ifndef NODE_CONFIG_H
#define NODE_CONFIG_H

#include <stddef.h>

#include "common/dtype.h"
#include "formats/gguf.h"

#define MODEL_MAX_EOS 8

/* ROPE_LINEAR (GGUF rope.scaling.type "linear"): every frequency divided
 * by rope_factor, i.e. positions compressed by it. */
typedef enum { ROPE_DEFAULT = 0, ROPE_LLAMA3 = 1, ROPE_LINEAR = 2 } rope_kind;

typedef struct model_config {
	int dim;              /* hidden_size */
	int hidden_dim;       /* intermediate_size (FFN width) */
	int n_layers;         /* num_hidden_layers */
	int n_heads;          /* num_attention_heads */
	int n_kv_heads;       /* num_key_value_heads (default n_heads) */
	int head_dim;         /* head_dim (default dim / n_heads) */
	int vocab_size;
	int max_pos;          /* max_position_embeddings */
	float norm_eps;       /* rms_norm_eps */
	float rope_theta;     /* default 10000 */
	rope_kind rope;
	float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
	int rope_orig_max_pos; /* original_max_position_embeddings */
	int tie_embeddings;   /* tie_word_embeddings (default 0) */
	int bos_id;           /* -1 when absent */
	int eos_ids[MODEL_MAX_EOS]; /* eos_token_id: an int or a list; every id that ends a
				     * generation (config.json's and generation_config.json's,
				     * or GGUF's eos, eot and eom ids) */
	int n_eos;
	sl_dtype dtype;       /* torch_dtype (default F32); GGUF: its matrices' storage
			       * (F32, BF16, else F16) */
	int rope_freqs;       /* GGUF: a rope_freqs.weight tensor divides each frequency
			       * (how llama.cpp stores Llama 3 rope scaling) */
} model_config;

/* Parse a config.json file. */
int model_config_load(const char *path, model_config *out, char *err, size_t errlen);
/* Parse config.json text; `name` is used in error messages. */
int model_config_parse(const char *json, const char *name, model_config *out,
		       char *err, size_t errlen);

/* A Hugging Face folder: config.json, then the eos_token_id of
 * generation_config.json when that file exists (its ids are added to
 * config.json's: chat models list their end-of-turn token there). */
int model_config_load_dir(const char *dir, model_config *out, char *err, size_t errlen);
/* Add the eos_token_id (an int or a list) of generation_config.json text
 * to m's EOS ids, skipping ids already there. */
int model_config_parse_generation(const char *json, const char *name, model_config *m,
				  char *err, size_t errlen);

/* From an open GGUF file (general.architecture "llama"): sizes from the
 * llama.* keys, vocabulary from the token list, tied embeddings when
 * output.weight is absent, BOS/EOS from tokenizer.ggml.*. */
int model_config_from_gguf(const sl_gguf *g, model_config *out, char *err, size_t errlen);

/* The config of a checkpoint path: a GGUF file or a Hugging Face folder. */
int model_config_load_path(const char *path, model_config *out, char *err, size_t errlen);

/* 1 when `path` names a file (a GGUF model), 0 for a folder or nothing. */
int model_path_is_file(const char *path);

#endif
