/*
 * grid.h — shard arithmetic: which heads, FFN columns, vocabulary rows and
 * layers a rank owns in a tp x pp grid. Pure functions, no communication,
 * so every rank computes every other rank's share identically.
 *
 * Rank layout: world rank r = pp_rank * tp + tp_rank, so the tp ranks of
 * one pipeline stage are consecutive (and usually share a host and NVLink).
 */
#ifndef PAR_GRID_H
#define PAR_GRID_H

#include <stddef.h>

/* A rank's place in the tp x pp grid of one node group. Computed once, by
 * par_grid_place, from the world rank; the model's shard holds it. */
typedef struct par_grid {
	int tp, pp;             /* grid size: tp * pp ranks */
	int tp_rank, pp_rank;   /* this rank's column (tensor) and row (stage) */
} par_grid;

/* Place world rank `rank` of `world` in a tp x pp grid (tp 0: world / pp;
 * pp 0: 1). Errors name the flags when tp x pp is not the world size. */
int par_grid_place(int tp, int pp, int rank, int world, par_grid *g, char *err, size_t errlen);
/* World rank of grid position (tp_rank, pp_rank). */
int par_grid_rank(const par_grid *g, int tp_rank, int pp_rank);

typedef struct par_shard {
	par_grid grid;
	int layer0, n_layers;        /* this stage's layers [layer0, layer0 + n_layers) */
	int head0, n_heads;          /* query heads owned */
	int kv_head0, n_kv_heads;    /* KV heads owned (replicated when tp > kv heads) */
	int hidden0, hidden;         /* FFN columns owned */
	int vocab0, vocab;           /* vocabulary rows owned (embedding and LM head) */
	int vocab_padded;            /* vocab rows per rank x tp: the all-gathered width */
} par_shard;

/* Fill *s for grid position *g. Errors name the dimension that tp or pp
 * does not divide. */
int par_shard_init(const par_grid *g, int n_layers, int n_heads, int n_kv_heads, int hidden,
		   int vocab, par_shard *s, char *err, size_t errlen);

#endif
