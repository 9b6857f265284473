/* shapes.c — the named model shapes of shapes.h. */
#include "node/shapes.h"

#include <string.h>

#include "common/sl.h"

typedef struct shape {
	const char *name;
	int dim, hidden, layers, heads, kv_heads;
} shape;

static const shape k_shapes[] = {
	{"7b", 4096, 11008, 32, 32, 32},
	/* Llama 3 8B's layers (grouped-query attention, 8 KV heads); the
	 * vocabulary stays 32000 like every shape here */
	{"8b", 4096, 14336, 32, 32, 8},
	{"13b", 5120, 13824, 40, 40, 40},
	{"70b", 8192, 28672, 80, 64, 8},
	{"tiny", 512, 1376, 4, 8, 8},
};

int model_config_shape(const char *name, sl_dtype dtype, model_config *c)
{
	for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++) {
		const shape *s = &k_shapes[i];
		if (strcmp(name, s->name))
			continue;
		*c = (model_config){.dim = s->dim, .hidden_dim = s->hidden, .n_layers = s->layers,
				    .n_heads = s->heads, .n_kv_heads = s->kv_heads,
				    .head_dim = s->dim / s->heads, .vocab_size = 32000,
				    .max_pos = 4096, .norm_eps = 1e-5f, .rope_theta = 10000,
				    .bos_id = 1, .dtype = dtype};
		return SL_OK;
	}
	return SL_EINVAL;
}
