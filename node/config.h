/*
 * config.h — the model's shape and hyper-parameters, read from a Hugging
 * Face Llama `config.json`. Anything the engine cannot run (another
 * architecture, biases, an unknown rope_scaling type, inconsistent head
 * counts) is refused with an error naming the field.
 */
#ifndef NODE_CONFIG_H
#define NODE_CONFIG_H

#include <stddef.h>

#include "dtype.h"

#define MODEL_MAX_EOS 8

typedef enum { ROPE_DEFAULT = 0, ROPE_LLAMA3 = 1 } rope_kind;

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
	int eos_ids[MODEL_MAX_EOS]; /* eos_token_id: an int or a list */
	int n_eos;
	sl_dtype dtype;       /* torch_dtype (default F32) */
} model_config;

/* Parse a config.json file. */
int model_config_load(const char *path, model_config *out, char *err, size_t errlen);
/* Parse config.json text; `name` is used in error messages. */
int model_config_parse(const char *json, const char *name, model_config *out,
		       char *err, size_t errlen);

#endif
