/* embedding.c — CPU reference for the embedding lookup. */
#include "kernels/embedding.h"

#include <string.h>

void kern_embedding_cpu(float *out, const float *table, const int32_t *tokens, int n,
			int dim, int row0, int vocab_rows)
{
	for (int i = 0; i < n; i++) {
		int r = tokens[i] - row0;
		if (r >= 0 && r < vocab_rows)
			memcpy(out + (size_t)i * dim, table + (size_t)r * dim, sizeof(float) * dim);
		else
			memset(out + (size_t)i * dim, 0, sizeof(float) * dim);
	}
}
