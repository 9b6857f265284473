/*
 * model_meta.h -- what the coordinator needs to know about a model besides
 * its weights: the tokenizer, every token id that ends a generation, the
 * BOS/EOS token strings and the chat template's source text.
 *
 * Owner: coordinator.  Callers: coord.c (model loading); the chat/HTTP
 * front end reads chat_template.
 *
 * From `--tokenizer PATH`:
 *   a tokenizer.json   its folder's generation_config.json and config.json
 *                      (eos_token_id: an int or a list) and
 *                      tokenizer_config.json (eos_token / bos_token: a string
 *                      or {"content": ...}; chat_template: a string, or a
 *                      list of {"name", "template"} where "default" wins)
 *   a GGUF file        tokenizer.ggml.eos_token_id, .eot_token_id,
 *                      .eom_token_id, .bos_token_id, tokenizer.chat_template
 * EOS ids are the union of every source, in that order; only when none
 * names one does the tokenizer's own guess (text_tok_eos_id) stand.  So a
 * chat model stops at its turn end (Llama 3's <|eot_id|>, SmolLM2's
 * <|im_end|>) without flags.
 */
#ifndef COORD_MODEL_META_H
#define COORD_MODEL_META_H

#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer/tokenizer.h"

#define COORD_META_MAX_EOS 8

typedef struct coord_model_meta {
	text_tok *tok;                   /* owned */
	int32_t eos[COORD_META_MAX_EOS];  /* distinct, each < vocab */
	int n_eos;
	char eos_from[96];                /* which files/keys named them */
	char *bos_token, *eos_token;      /* NULL when unknown */
	char *chat_template;              /* NULL when the model has none */
	char template_from[64];
} coord_model_meta;

int coord_model_meta_load(const char *tokenizer_path, coord_model_meta **out, char *err,
			  size_t errlen);
void coord_model_meta_destroy(coord_model_meta *m);

#endif
