/*
 * embedding.cu — CUDA token embedding lookup into the fp32 residual stream,
 * and the indexed row copy (gather) used to pick the last position of each
 * sequence before the LM head. Semantics: kernels/embedding.c.
 */
#include "kernels/cuda_util.cuh"
#include "kernels/embedding.h"

/* One block per token: out[i] = table[tokens[i] - row0] widened to fp32, or
 * zeros when the id is outside this vocab shard. */
template <typename T, bool VEC>
__global__ void embedding_kernel(float *__restrict__ out, const T *__restrict__ table,
				 const int32_t *__restrict__ tokens, int dim, int row0,
				 int vocab_rows)
{
	kern_pdl_start();
	int i = blockIdx.x;
	int r = tokens[i] - row0;
	float *o = out + (size_t)i * dim;
	bool in_shard = r >= 0 && r < vocab_rows;
	const T *src = table + (size_t)(in_shard ? r : 0) * dim;
	if (VEC) {
		for (int j = threadIdx.x * KERN_VEC; j < dim; j += blockDim.x * KERN_VEC) {
			float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
			if (in_shard)
				kern_load8(src + j, f);
			kern_store8f(o + j, f);
		}
	} else {
		for (int j = threadIdx.x; j < dim; j += blockDim.x)
			o[j] = in_shard ? kern_to_f32(src[j]) : 0.0f;
	}
}

static int block_for(int work)
{
	/* enough threads to cover a row once, in whole warps, 64..256 */
	int t = (work + 31) / 32 * 32;
	return t < 64 ? 64 : t > 256 ? 256 : t;
}

template <typename T>
static int embedding_launch(float *out, const void *table, const int32_t *tokens, int n, int dim,
			    int row0, int vocab_rows, cudaStream_t st)
{
	bool vec = dim % KERN_VEC == 0 && kern_aligned16(out) && kern_aligned16(table);
	auto kernel = vec ? embedding_kernel<T, true> : embedding_kernel<T, false>;
	return kern_launch_small("embedding", st, kernel, dim3(n), dim3(block_for(vec ? dim / KERN_VEC
										    : dim)),
				 0, out, (const T *)table, tokens, dim, row0, vocab_rows);
}

extern "C" int kern_embedding_cuda(float *out, const void *table, const int32_t *tokens, int n,
				   int dim, int row0, int vocab_rows, sl_dtype dt, void *stream)
{
	if (n <= 0 || dim <= 0)
		return SL_OK;
	KERN_DISPATCH_DT(dt, embedding_launch, out, table, tokens, n, dim, row0, vocab_rows,
			 kern_stream(stream));
}

/* out[i] = x[rows[i]], rows of row_units units of type U (a 16-byte vector
 * when the row size allows, else one element). */
template <typename U>
__global__ void gather_rows_kernel(U *__restrict__ out, const U *__restrict__ x,
				   const int32_t *__restrict__ rows, int row_units)
{
	int i = blockIdx.x;
	const U *src = x + (size_t)rows[i] * row_units;
	U *dst = out + (size_t)i * row_units;
	for (int j = threadIdx.x; j < row_units; j += blockDim.x)
		dst[j] = src[j];
}

/* Indexed row copy: out[i, :] = x[rows_dev[i], :] for rows of dim elements
 * of dtype dt (any dtype: it only moves bytes). rows_dev is a device array. */
extern "C" int kern_gather_rows_cuda(void *out, const void *x, const int32_t *rows_dev, int n,
				     int dim, sl_dtype dt, void *stream)
{
	if (n <= 0 || dim <= 0)
		return SL_OK;
	cudaStream_t st = kern_stream(stream);
	size_t row_bytes = (size_t)dim * sl_dtype_size(dt);
	if (row_bytes % 16 == 0 && kern_aligned16(out) && kern_aligned16(x)) {
		int units = (int)(row_bytes / 16);
		gather_rows_kernel<uint4><<<n, block_for(units), 0, st>>>(
			(uint4 *)out, (const uint4 *)x, rows_dev, units);
	} else if (sl_dtype_size(dt) == 4) {
		gather_rows_kernel<uint32_t><<<n, block_for(dim), 0, st>>>(
			(uint32_t *)out, (const uint32_t *)x, rows_dev, dim);
	} else {
		gather_rows_kernel<uint16_t><<<n, block_for(dim), 0, st>>>(
			(uint16_t *)out, (const uint16_t *)x, rows_dev, dim);
	}
	CUDA_TRY_LAUNCH();
	return SL_OK;
}
