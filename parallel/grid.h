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

typedef struct par_shard {
	int tp, tp_rank, pp, pp_rank;
	int layer0, n_layers;        /* this stage's layers [layer0, layer0 + n_layers) */
	int head0, n_heads;          /* query heads owned */
	int kv_head0, n_kv_heads;    /* KV heads owned (replicated when tp > kv heads) */
	int hidden0, hidden;         /* FFN columns owned */
	int vocab0, vocab;           /* vocabulary rows owned (embedding and LM head) */
	int vocab_padded;            /* vocab rows per rank x tp: the all-gathered width */
} par_shard;

/* Fill *s for rank (tp_rank, pp_rank). Errors name the dimension that tp or
 * pp does not divide. */
int par_shard_init(int tp, int tp_rank, int pp, int pp_rank, int n_layers, int n_heads,
		   int n_kv_heads, int hidden, int vocab, par_shard *s, char *err, size_t errlen);

#endif
