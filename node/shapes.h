/*
 * shapes.h — Llama shapes by name (7b, 8b, 13b, 70b, tiny) for random-weight
 * runs: benchmarks and serving tests of models whose checkpoints are not
 * at hand. Llama-2 dimensions (8b: Llama 3 8B's, with grouped-query
 * attention), vocabulary 32000, context 4096.
 */
#ifndef NODE_SHAPES_H
#define NODE_SHAPES_H

#include "formats/config.h"

/* Fill *c for `name`; SL_EINVAL when the name is unknown. */
int model_config_shape(const char *name, sl_dtype dtype, model_config *c);

#endif
