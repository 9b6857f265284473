/*
 * engine.h — sequences on one node group: their tokens, their KV block
 * tables, and the step loop that feeds them through model_forward and
 * samples their next tokens.
 *
 * A step packs work from the active sequences in arrival order under a
 * token budget: a sequence with tokens not yet in the KV cache (its
 * prompt, in chunks when long) contributes them; one whose cache is
 * complete contributes its last sampled token (decode). Each sequence
 * whose known tokens are all cached after the step gets one new token.
 * The policy sits behind node_engine_step so a smarter scheduler can
 * replace how sequences are picked without touching the mechanics.
 */
#ifndef NODE_ENGINE_H
#define NODE_ENGINE_H

#include <stdint.h>

#include "model.h"
#include "sampling.h"

typedef struct node_engine node_engine;

typedef struct node_request {
	const int32_t *prompt;
	int n_prompt;
	int max_new_tokens;
	kern_sample_params sampling;
	int ignore_eos;          /* keep going past EOS (benchmarks, golden tests) */
	float *prompt_logits;    /* optional out: [n_prompt, vocab] logits at every prompt position */
} node_request;

typedef enum { SEQ_RUNNING = 0, SEQ_DONE_LENGTH, SEQ_DONE_EOS } node_seq_state;

typedef struct node_result {
	int32_t *tokens;         /* generated ids (malloc'd, caller frees) */
	int n_tokens;
	node_seq_state finish;
} node_result;

typedef struct node_stats {
	int steps, decode_steps;
	long prefill_tokens, decode_tokens;
	double prefill_s, decode_s;     /* wall time of steps that held prefill / only decode */
} node_stats;

int node_engine_create(model *m, node_engine **out, char *err, size_t errlen);
void node_engine_destroy(node_engine *e);

/* Queue a sequence; *id identifies it. Fails if the prompt cannot fit the
 * model's context or the whole KV pool. */
int node_engine_add(node_engine *e, const node_request *r, int *id, char *err, size_t errlen);
/* Run one step. *n_active receives the number of sequences still running. */
int node_engine_step(node_engine *e, int *n_active, char *err, size_t errlen);
/* Take a finished (or running) sequence's result and free its KV blocks. */
int node_engine_take(node_engine *e, int id, node_result *out);

/* Convenience: run n requests together to completion. results[i] gets
 * request i's tokens. */
int node_generate(node_engine *e, int n, const node_request *reqs, node_result *results,
		  char *err, size_t errlen);

const node_stats *node_engine_stats(const node_engine *e);
int node_engine_free_blocks(const node_engine *e);

/* For a serving leader (node/scheduler.c), appended to the API above. */
/* Drop a sequence, finished or not, and free its KV blocks (cancel). */
int node_engine_drop(node_engine *e, int id);
/* A sequence's generated tokens so far (*gen points into the engine, valid
 * until the next step, take or drop) and its state. */
int node_engine_peek(const node_engine *e, int id, const int32_t **gen, int *n_gen,
		     node_seq_state *state);
int node_engine_total_blocks(const node_engine *e);
/* KV blocks a sequence of n_tokens holds at most. */
int node_engine_blocks_for(const node_engine *e, int n_tokens);
const model_config *node_engine_config(const node_engine *e);

#endif
