/* embedding.h — token embedding lookup: out[i] = table[tokens[i]]. */
#ifndef KERN_EMBEDDING_H
#define KERN_EMBEDDING_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* out: [n, dim] fp32; table: [vocab_rows, dim] fp32 rows for token ids
 * [row0, row0 + vocab_rows) (a vocab-parallel shard); ids outside the shard
 * give zero rows so an all-reduce across shards completes the lookup. */
void kern_embedding_cpu(float *out, const float *table, const int32_t *tokens, int n,
			int dim, int row0, int vocab_rows);

#ifdef SL_HAVE_CUDA
#include "common/dtype.h"
/* Same on the GPU: table in dtype `dt` (F16 or BF16); out is the fp32
 * residual stream [n, dim]. */
/* out[i, :] = x[rows_dev[i], :], rows of dim elements of dt; rows_dev on the device. */
int kern_gather_rows_cuda(void *out, const void *x, const int32_t *rows_dev, int n, int dim,
			  sl_dtype dt, void *stream);
int kern_embedding_cuda(float *out, const void *table, const int32_t *tokens, int n, int dim,
			int row0, int vocab_rows, sl_dtype dt, void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
