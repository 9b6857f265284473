/*
 * engine.h — sequences on one node group: their tokens, their KV block
 * tables, and the step loop that feeds them through the forward pass and
 * samples their next tokens.
 *
 * A step packs work from the running sequences under a token budget
 * (step_tokens), a logits-row budget, a sequence limit (max_seqs) and a
 * penalty-history budget (max_hist, docs/sampling.md): first
 * one decode token (its last sampled one) for every sequence whose cache
 * is otherwise complete, then chunks of the tokens not yet cached (prompts,
 * or a preempted sequence's whole history) in arrival order. Each sequence
 * whose known tokens are all cached after the step gets one new token.
 *
 * KV blocks go to sequences in arrival order. When the pool runs short,
 * the newest sequence holding blocks is preempted: its blocks are freed
 * and its tokens recomputed later, with identical results (sampling is
 * keyed by seed and position). The oldest sequence is never preempted and
 * always fits (node_engine_add refuses one that alone exceeds the pool),
 * so every step makes progress. A finished sequence frees its blocks at
 * once; which requests enter the engine, and when, is node/scheduler.c's
 * business.
 *
 * Prefix caching (on unless node_engine_set_prefix_cache turns it off;
 * node/kv.h, docs/scheduling.md): after each step the full blocks it
 * completed are published; a sequence starting without blocks (new, or
 * preempted) takes the longest cached run of its leading full blocks,
 * never its last token, and prefills only the rest. Freed published
 * blocks stay cached until the pool needs them and count as free. The
 * plan needs nothing new: reused blocks are in the block tables and the
 * chunk starts at the first uncached position. Requests that want prompt
 * logits bypass the cache (every prompt row must be computed).
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
	kern_sample_params sampling;  /* also asks for log-probs (kernels/sampling.h) */
	int ignore_eos;          /* keep going past EOS (benchmarks, golden tests) */
	float *prompt_logits;    /* optional out: [n_prompt, vocab] logits at every prompt position */
} node_request;

typedef enum { SEQ_RUNNING = 0, SEQ_DONE_LENGTH, SEQ_DONE_EOS } node_seq_state;

/* Per generated token, when the request asked (sampling.logprobs or
 * top_logprobs): its log-prob and top_n alternatives (row i at
 * [i * top_n, (i + 1) * top_n), most likely first). */
typedef struct node_logprobs {
	const float *logprobs;       /* [n] NULL: not asked */
	const int32_t *top_ids;      /* [n, top_n] */
	const float *top_logprobs;   /* [n, top_n] */
	int top_n;
} node_logprobs;

typedef struct node_result {
	int32_t *tokens;         /* generated ids */
	int n_tokens;
	node_seq_state finish;
	/* as node_logprobs, for the n_tokens (NULL: not asked) */
	float *logprobs;
	int32_t *top_ids;
	float *top_logprobs;
	int top_n;
} node_result;             /* malloc'd lists: node_result_free */

void node_result_free(node_result *r);

typedef struct node_stats {
	int steps, decode_steps;
	long prefill_tokens, decode_tokens;
	double prefill_s, decode_s;     /* wall time of steps that held prefill / only decode */
	long preemptions;               /* sequences whose KV blocks were taken back */
	long prefix_queried_tokens;     /* tokens of sequences that started (or restarted
					 * after preemption) with the prefix cache on */
	long prefix_hit_tokens;         /* of those, taken from the cache */
} node_stats;

/* The prefix cache's state (node/kv.h counts blocks). */
typedef struct node_cache_stats {
	int enabled;
	long queried_tokens, hit_tokens;  /* as node_stats */
	long evictions;                   /* cached blocks evicted (reused for others) */
	int cached_blocks;                /* published blocks held, referenced or idle */
	int idle_blocks;                  /* of those, unreferenced (evictable, counted free) */
} node_cache_stats;

int node_engine_create(model *m, node_engine **out, char *err, size_t errlen);
void node_engine_destroy(node_engine *e);

/* Whether r could ever run here: a non-empty prompt of in-vocabulary ids,
 * new tokens > 0, prompt + new tokens within the context and the whole KV
 * pool, sampling parameters in range. The one validation of a request on
 * the node; node_engine_add and the scheduler's submit both call it. */
int node_engine_check_request(const node_engine *e, const node_request *r, char *err,
			      size_t errlen);
/* Queue a sequence; *id identifies it. Fails (node_engine_check_request)
 * if it could never run. */
int node_engine_add(node_engine *e, const node_request *r, int *id, char *err, size_t errlen);
/* Run one step. *n_active receives the number of sequences still running. */
int node_engine_step(node_engine *e, int *n_active, char *err, size_t errlen);
/* Take a finished (or running) sequence's result and forget it (freeing
 * any KV blocks it still holds). */
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
/* Its log-probs so far, one row per generated token (pointers into the
 * engine, valid as peek's); all NULL when it did not ask for them. */
int node_engine_peek_logprobs(const node_engine *e, int id, node_logprobs *out);
int node_engine_total_blocks(const node_engine *e);
/* Blocks the running sequences still need to cache every token they know
 * (prompts not yet prefilled, preempted sequences, the next decode token):
 * what an admission check must leave free. */
int node_engine_blocks_wanted(const node_engine *e);
/* KV blocks a sequence of n_tokens holds at most. */
int node_engine_blocks_for(const node_engine *e, int n_tokens);
const model_config *node_engine_config(const node_engine *e);

/* Prefix caching on (default) or off; before the first request. */
void node_engine_set_prefix_cache(node_engine *e, int on);
void node_engine_cache_stats(const node_engine *e, node_cache_stats *out);
/* Evict every idle cached block: the pool is then as if fresh (tests). */
void node_engine_flush_cache(node_engine *e);
/* The KV pool's invariants (kv_pool_check): no block lost, none freed twice. */
int node_engine_check_pool(const node_engine *e, char *err, size_t errlen);
/* Hash events for a router (kv_cache_events_* in node/kv.h): enable once
 * (the first take is then a snapshot), resync to make the next take a
 * snapshot (a new coordinator session), take after each step. */
int node_engine_cache_events_enable(node_engine *e);
void node_engine_cache_events_resync(node_engine *e);
int node_engine_cache_events_pending(const node_engine *e);
void node_engine_cache_events_take(node_engine *e, const uint64_t **stored, int *n_stored,
				   const uint64_t **evicted, int *n_evicted, int *reset);

#endif
