/* grid.c — the Megatron-style split of one model over a tp x pp grid. */
#include "parallel/grid.h"

#include "common/sl.h"

#include <limits.h>

int par_grid_place(int tp, int pp, int rank, int world, par_grid *g, char *err, size_t errlen)
{
	pp = pp ? pp : 1;
	tp = tp ? tp : world / pp;
	if (tp < 1 || pp < 1 || (long)tp * pp != world)
		return sl_errf(err, errlen, SL_EINVAL,
			       "--tp %d x --pp %d must equal the number of ranks (%d)", tp, pp, world);
	if (rank < 0 || rank >= world)
		return sl_errf(err, errlen, SL_EINVAL, "rank %d outside a group of %d", rank, world);
	*g = (par_grid){.tp = tp, .pp = pp, .tp_rank = rank % tp, .pp_rank = rank / tp};
	return SL_OK;
}

int par_grid_rank(const par_grid *g, int tp_rank, int pp_rank) { return pp_rank * g->tp + tp_rank; }

int par_shard_init(const par_grid *g, int n_layers, int n_heads, int n_kv_heads, int hidden,
		   int vocab, par_shard *s, char *err, size_t errlen)
{
	int tp = g->tp, tp_rank = g->tp_rank, pp = g->pp, pp_rank = g->pp_rank;
	if (tp < 1 || pp < 1 || tp_rank < 0 || tp_rank >= tp || pp_rank < 0 || pp_rank >= pp)
		return sl_errf(err, errlen, SL_EINVAL, "bad grid position (tp %d/%d, pp %d/%d)",
			       tp_rank, tp, pp_rank, pp);
	if (n_heads % tp)
		return sl_errf(err, errlen, SL_EINVAL,
			       "--tp %d does not divide num_attention_heads %d", tp, n_heads);
	if (hidden % tp)
		return sl_errf(err, errlen, SL_EINVAL,
			       "--tp %d does not divide intermediate_size %d", tp, hidden);
	if (tp > n_kv_heads ? tp % n_kv_heads : n_kv_heads % tp)
		return sl_errf(err, errlen, SL_EINVAL,
			       "--tp %d and num_key_value_heads %d: one must divide the other",
			       tp, n_kv_heads);
	if (pp > n_layers)
		return sl_errf(err, errlen, SL_EINVAL, "--pp %d exceeds num_hidden_layers %d", pp,
			       n_layers);
	/* vocabulary rows per rank, in 64 bits: vocab + tp - 1 and per * tp
	 * overflow an int for a vocabulary near INT_MAX (a fuzzed config.json
	 * found it) */
	long long per = ((long long)vocab + tp - 1) / tp, v0 = tp_rank * per;
	if (vocab < 1 || per * tp > INT_MAX)
		return sl_errf(err, errlen, SL_EINVAL, "a vocabulary of %d rows cannot be split "
			       "over --tp %d", vocab, tp);
	s->grid = *g;
	/* layers: the first (n_layers % pp) stages take one extra */
	int base = n_layers / pp, extra = n_layers % pp;
	s->n_layers = base + (pp_rank < extra);
	s->layer0 = pp_rank * base + (pp_rank < extra ? pp_rank : extra);
	s->n_heads = n_heads / tp;
	s->head0 = tp_rank * s->n_heads;
	if (tp <= n_kv_heads) {
		s->n_kv_heads = n_kv_heads / tp;
		s->kv_head0 = tp_rank * s->n_kv_heads;
	} else { /* replicate: the KV head that this rank's query heads read */
		s->n_kv_heads = 1;
		s->kv_head0 = s->head0 / (n_heads / n_kv_heads);
	}
	s->hidden = hidden / tp;
	s->hidden0 = tp_rank * s->hidden;
	s->vocab0 = (int)(v0 < vocab ? v0 : vocab);
	s->vocab = (int)(s->vocab0 + per <= vocab ? per : vocab - s->vocab0);
	s->vocab_padded = (int)(per * tp);
	return SL_OK;
}
