/* grid.c — the Megatron-style split of one model over a tp x pp grid. */
#include "grid.h"

#include "sl.h"

int par_shard_init(int tp, int tp_rank, int pp, int pp_rank, int n_layers, int n_heads,
		   int n_kv_heads, int hidden, int vocab, par_shard *s, char *err, size_t errlen)
{
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
	s->tp = tp, s->tp_rank = tp_rank, s->pp = pp, s->pp_rank = pp_rank;
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
	int per = (vocab + tp - 1) / tp;
	s->vocab0 = tp_rank * per < vocab ? tp_rank * per : vocab;
	s->vocab = (s->vocab0 + per <= vocab ? per : vocab - s->vocab0);
	s->vocab_padded = per * tp;
	return SL_OK;
}
