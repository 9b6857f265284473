/*
 * fuzz_config.c — config.json text into model_config_parse (and the same
 * text as a generation_config.json), then every tp x pp split of what it
 * accepted through par_shard_init, the way the node uses the pair.
 * Promises checked: what is accepted is positive and finite (an eps of
 * 1e-205 once became 0.0f), and every rank's share lies inside the model.
 */
#include <math.h>

#include "formats/config.h"
#include "fuzz_util.h"
#include "parallel/grid.h"
#include "common/sl.h"

static void check_config(const model_config *m)
{
	FUZZ_CHECK(m->dim > 0 && m->hidden_dim > 0 && m->n_layers > 0 && m->n_heads > 0 &&
			   m->n_kv_heads > 0 && m->head_dim > 0 && m->vocab_size > 0 && m->max_pos > 0,
		   "a size is not positive");
	FUZZ_CHECK(m->n_heads % m->n_kv_heads == 0, "heads %d, kv heads %d", m->n_heads,
		   m->n_kv_heads);
	FUZZ_CHECK(m->norm_eps > 0 && isfinite(m->norm_eps), "norm_eps %g", (double)m->norm_eps);
	FUZZ_CHECK(m->rope_theta > 0 && isfinite(m->rope_theta), "rope_theta %g",
		   (double)m->rope_theta);
	if (m->rope == ROPE_LLAMA3)
		FUZZ_CHECK(m->rope_factor > 0 && m->rope_low_freq_factor > 0 &&
				   m->rope_high_freq_factor > m->rope_low_freq_factor &&
				   isfinite(m->rope_high_freq_factor) && m->rope_orig_max_pos > 0,
			   "llama3 rope %g %g %g", (double)m->rope_factor,
			   (double)m->rope_low_freq_factor, (double)m->rope_high_freq_factor);
	FUZZ_CHECK(m->n_eos >= 0 && m->n_eos <= MODEL_MAX_EOS, "n_eos %d", m->n_eos);
}

/* Every rank of a tp x pp grid: the shares tile the model or the split is
 * refused. */
static void check_split(const model_config *m, int tp, int pp)
{
	char err[SL_ERRLEN];
	int layers = 0;
	for (int r = 0; r < tp * pp; r++) {
		par_grid g;
		par_shard s;
		if (par_grid_place(tp, pp, r, tp * pp, &g, err, sizeof err))
			return;
		if (par_shard_init(&g, m->n_layers, m->n_heads, m->n_kv_heads, m->hidden_dim,
				   m->vocab_size, &s, err, sizeof err))
			return;
		FUZZ_CHECK(s.vocab0 >= 0 && s.vocab >= 0 &&
				   (long long)s.vocab0 + s.vocab <= m->vocab_size &&
				   (long long)s.vocab_padded >= m->vocab_size,
			   "tp %d rank %d: vocab rows [%d, +%d) padded %d of %d", tp, r, s.vocab0,
			   s.vocab, s.vocab_padded, m->vocab_size);
		FUZZ_CHECK(s.head0 >= 0 && s.head0 + s.n_heads <= m->n_heads && s.kv_head0 >= 0 &&
				   s.kv_head0 + s.n_kv_heads <= m->n_kv_heads,
			   "tp %d rank %d: heads [%d, +%d), kv [%d, +%d)", tp, r, s.head0, s.n_heads,
			   s.kv_head0, s.n_kv_heads);
		FUZZ_CHECK(s.hidden0 >= 0 && s.hidden0 + s.hidden <= m->hidden_dim,
			   "tp %d rank %d: ffn [%d, +%d)", tp, r, s.hidden0, s.hidden);
		if (g.tp_rank == 0)
			layers += s.n_layers;
	}
	FUZZ_CHECK(layers == m->n_layers, "pp %d: stages hold %d of %d layers", pp, layers,
		   m->n_layers);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_selftest(data, size);
	char *text = fuzz_strdup(data, size), err[SL_ERRLEN];
	model_config m;
	if (model_config_parse(text, "fuzz/config.json", &m, err, sizeof err) == 0) {
		check_config(&m);
		static const int tps[] = {1, 2, 3, 4, 8}, pps[] = {1, 2, 3};
		for (size_t i = 0; i < sizeof tps / sizeof tps[0]; i++)
			for (size_t j = 0; j < sizeof pps / sizeof pps[0]; j++)
				check_split(&m, tps[i], pps[j]);
		model_config_parse_generation(text, "fuzz/generation_config.json", &m, err,
					      sizeof err);
		FUZZ_CHECK(m.n_eos >= 0 && m.n_eos <= MODEL_MAX_EOS, "n_eos %d", m.n_eos);
	}
	free(text);
	return 0;
}
