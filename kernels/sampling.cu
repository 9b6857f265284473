/*
 * sampling.cu — CUDA next-token sampling with per-row parameters, the same
 * algorithm as kernels/sampling.c so both backends pick the same tokens:
 *
 *   0. logit bias (one block per biased row, launched only when a row of
 *      the batch has one): the row's logits copied to scratch, then each
 *      listed token's logit plus its bias (ids are distinct: one writer
 *      each). Then penalties (one block per penalised row): the row's
 *      logits copied to scratch (unless the bias did), then each token of
 *      its history (kern_token_hist) rewritten by kern_penalise, the
 *      function the CPU uses. Other rows read the logits as they are, so
 *      a batch without bias pays for neither.
 *   1. prep (one block per row): argmax, lowest index on ties. Greedy rows
 *      (temperature <= 0) are done here and get an empty sort segment.
 *      Other rows: p_i = (float)(expf((l_i - max) / T) / sum), sum in double.
 *   2. cub::DeviceSegmentedRadixSort, descending by p, one segment per row.
 *      Values are token ids written in ascending order and LSD radix sort is
 *      stable, so equal probabilities stay in ascending id order: the
 *      reference's total order (prob desc, index asc).
 *   3. pick (one block per row): keep = min(top_k, the leading p >= min_p *
 *      p_0 (binary search: p is sorted), first k with P[k] >= top_p, + 1),
 *      P the inclusive prefix sums in double; total = P[keep - 1];
 *      u = philox(seed, position) * total; the token is the first kept k
 *      with P[k] > u (the last kept one if none).
 *   4. log-probs (one block per row, rows that want them): log_softmax of
 *      the raw logits, (l - max) - log(sum expf(l - max)) with the sum in
 *      double, for the chosen token and the top_logprobs largest logits,
 *      found by repeated block argmax below the previous pick in the order
 *      (logit desc, id asc): the same ids as the CPU, values within float
 *      rounding of the sum.
 *
 * kern_argmax_rows_cuda is step 1's argmax alone, for a batch whose rows
 * are all greedy with no penalties and no log-probs (what the CUDA backend
 * checks on the host): one kernel where the full path launches the sort's
 * kernels and the pick too, and needs no parameters on the device.
 *
 * Philox4x32-10 is shared with sampling.c (philox.h) so u is bit-identical.
 * Expect the same tokens as the CPU except when a prefix sum lies within
 * float rounding of u or top_p (expf differs by an ulp between libm and
 * CUDA).
 *
 * Scratch (kern_sampler) is sized once for SAMPLE_CHUNK_ROWS rows x vocab;
 * larger batches are processed in chunks of rows, so kern_sample_cuda never
 * allocates. TODO(perf): the full-vocabulary sort dominates (tens of us per
 * chunk at 128k vocab); a threshold pre-filter (keep only candidates above
 * the k-th largest / a p-mass bound, then sort those) is the next step.
 */
#include <cub/cub.cuh>
#include <float.h>
#include <limits.h>
#include <stdlib.h>

#include "kernels/cuda_util.cuh"
#include "kernels/sampling.h"
#include "kernels/philox.h"

#define SAMPLE_CHUNK_ROWS 32 /* rows sorted per pass: bounds the scratch */
#define PREP_THREADS 512
#define ARGMAX_THREADS 1024 /* one row a block: a decode step of one waits on it */
#define PICK_THREADS 256
#define PICK_ITEMS 4 /* per thread per tile of the prefix scan */
#define PEN_THREADS 256
#define LP_THREADS 512

struct kern_sampler {
	int max_seqs, vocab, chunk_rows;
	float *keys[2];      /* [chunk_rows, vocab] probabilities, sort double buffer */
	int32_t *vals[2];    /* [chunk_rows, vocab] token ids, sort double buffer */
	int *seg_begin;      /* [chunk_rows] sort segments (empty for greedy rows) */
	int *seg_end;        /* [chunk_rows] */
	float *pen;          /* [chunk_rows, vocab] penalised logits of penalised rows */
	void *sort_tmp;      /* CUB temporary storage */
	size_t sort_tmp_bytes;
};

/* Philox4x32-10: kernels/philox.h, shared with the CPU sampler. */

/* ---- 0. penalties ---- */

/* Whether row r reads penalised logits: the same test in every kernel. */
__device__ __forceinline__ bool row_penalised(const kern_sample_params &p,
					      const kern_token_hist &h, int r)
{
	return h.off && kern_has_penalty(&p) && h.off[r + 1] > h.off[r];
}

/* Whether row r has logit bias entries: the same test in every kernel. */
__device__ __forceinline__ bool row_biased(const kern_logit_bias &b, int r)
{
	return b.off && b.off[r + 1] > b.off[r];
}

/* The row's logits into pen, each listed token's plus its bias: the CPU's
 * kern_logit_bias_row_cpu, the same single float addition. */
__global__ void __launch_bounds__(PEN_THREADS)
	sample_bias_kernel(const float *__restrict__ logits, int vocab, kern_logit_bias b,
			   float *__restrict__ pen)
{
	int r = blockIdx.x;
	if (!row_biased(b, r))
		return;
	const float *l = logits + (size_t)r * vocab;
	float *o = pen + (size_t)r * vocab;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x)
		o[i] = l[i];
	__syncthreads(); /* bias ids are distinct: one writer per element after this */
	for (int e = b.off[r] + threadIdx.x; e < b.off[r + 1]; e += blockDim.x) {
		int id = b.ids[e];
		o[id] = __fadd_rn(l[id], b.bias[e]);
	}
}

__global__ void __launch_bounds__(PEN_THREADS)
	sample_penalty_kernel(const float *__restrict__ logits, int vocab,
			      const kern_sample_params *__restrict__ params, kern_token_hist h,
			      kern_logit_bias b, float *pen)
{
	int r = blockIdx.x;
	kern_sample_params p = params[r];
	if (!row_penalised(p, h, r))
		return;
	float *o = pen + (size_t)r * vocab;
	/* a biased row already has its (biased) copy in pen */
	const float *l = row_biased(b, r) ? o : logits + (size_t)r * vocab;
	if (l != o)
		for (int i = threadIdx.x; i < vocab; i += blockDim.x)
			o[i] = l[i];
	__syncthreads(); /* history ids are distinct: one writer per element after this */
	for (int e = h.off[r] + threadIdx.x; e < h.off[r + 1]; e += blockDim.x) {
		int id = h.ids[e];
		o[id] = kern_penalise(l[id], h.n_gen[e], h.in_prompt[e], &p);
	}
}

/* ---- 1. prep ---- */

/* Block-wide argmax, lowest index on ties; every thread gets the winner. */
__device__ void block_argmax(float *v, int *i)
{
	__shared__ float sv[32];
	__shared__ int si[32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	kern_warp_argmax(v, i);
	if (lane == 0) {
		sv[warp] = *v;
		si[warp] = *i;
	}
	__syncthreads();
	*v = lane < nwarps ? sv[lane] : -INFINITY;
	*i = lane < nwarps ? si[lane] : INT_MAX;
	kern_warp_argmax(v, i);
}

/* The row's maximum and its lowest index (kern_argmax_cpu's answer, NaN
 * rows aside), in every thread of the block: each thread scans ascending
 * indices and keeps its first maximum, then block_argmax breaks ties by
 * index. */
__device__ void row_argmax(const float *__restrict__ l, int vocab, float *v, int *i)
{
	float bv = -INFINITY;
	int bi = INT_MAX;
#pragma unroll 4
	for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
		float x = l[j];
		if (bi == INT_MAX || x > bv) {
			bv = x;
			bi = j;
		}
	}
	block_argmax(&bv, &bi);
	*v = bv;
	*i = bi;
}

__global__ void __launch_bounds__(PREP_THREADS)
	sample_prep_kernel(const float *__restrict__ logits, const float *__restrict__ pen,
			   kern_token_hist h, kern_logit_bias b, int vocab,
			   const kern_sample_params *__restrict__ params,
			   int32_t *__restrict__ tokens_out, float *__restrict__ probs,
			   int32_t *__restrict__ ids, int *__restrict__ seg_begin,
			   int *__restrict__ seg_end)
{
	int r = blockIdx.x;
	size_t base = (size_t)r * vocab;
	kern_sample_params p = params[r];
	const float *l = (row_penalised(p, h, r) || row_biased(b, r) ? pen : logits) + base;
	float bv;
	int bi;
	row_argmax(l, vocab, &bv, &bi);

	if (p.temperature <= 0) { /* greedy; uniform over the block */
		if (threadIdx.x == 0) {
			tokens_out[r] = bi;
			seg_begin[r] = seg_end[r] = (int)base;
		}
		return;
	}
	double sum = 0;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
		float e = expf((l[i] - bv) / p.temperature);
		probs[base + i] = e;
		sum += e;
	}
	sum = kern_block_sum(sum);
	/* each thread rewrites only what it wrote: no barrier needed */
	for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
		probs[base + i] = (float)((double)probs[base + i] / sum);
		ids[base + i] = i;
	}
	if (threadIdx.x == 0) {
		seg_begin[r] = (int)base;
		seg_end[r] = (int)(base + vocab);
	}
}

/* Greedy rows alone (kern_argmax_rows_cuda): the argmax, nothing else. */
__global__ void __launch_bounds__(ARGMAX_THREADS)
	argmax_rows_kernel(const float *__restrict__ logits, int vocab, int32_t *__restrict__ tokens_out)
{
	float bv;
	int bi;
	row_argmax(logits + (size_t)blockIdx.x * vocab, vocab, &bv, &bi);
	if (threadIdx.x == 0)
		tokens_out[blockIdx.x] = bi;
}

/* ---- 3. pick ---- */

typedef cub::BlockScan<double, PICK_THREADS> pick_scan;

struct pick_smem {
	typename pick_scan::TempStorage scan;
	int hit;
	double value;
};

/* The first j in [0, limit) whose inclusive prefix sum P[j] of the sorted
 * probabilities passes thr (P > thr when strict, else P >= thr), or
 * limit - 1 when none does; also returns P at that j. Scans tiles of
 * PICK_THREADS * PICK_ITEMS and stops at the first tile with a hit. */
__device__ void scan_find(const float *__restrict__ pr, int limit, double thr, bool strict,
			  pick_smem &sm, int *j_out, double *p_out)
{
	const int tile = PICK_THREADS * PICK_ITEMS;
	double carry = 0;
	for (int base = 0; base < limit; base += tile) {
		int j0 = base + threadIdx.x * PICK_ITEMS;
		double incl[PICK_ITEMS], local = 0;
#pragma unroll
		for (int k = 0; k < PICK_ITEMS; k++) {
			local += j0 + k < limit ? (double)pr[j0 + k] : 0.0;
			incl[k] = local;
		}
		double excl, tile_sum;
		pick_scan(sm.scan).ExclusiveSum(local, excl, tile_sum);
		if (threadIdx.x == 0)
			sm.hit = INT_MAX;
		__syncthreads();
		for (int k = 0; k < PICK_ITEMS; k++) {
			double P = carry + excl + incl[k];
			if (j0 + k < limit && (strict ? P > thr : P >= thr)) {
				atomicMin(&sm.hit, j0 + k);
				break;
			}
		}
		__syncthreads();
		int stop = sm.hit;
		if (stop == INT_MAX && base + tile >= limit)
			stop = limit - 1;
		if (stop != INT_MAX) { /* uniform */
			if (stop >= j0 && stop < j0 + PICK_ITEMS)
				sm.value = carry + excl + incl[stop - j0];
			__syncthreads();
			*j_out = stop;
			*p_out = sm.value;
			return;
		}
		carry += tile_sum;
		__syncthreads(); /* sm.scan and sm.hit are reused by the next tile */
	}
	*j_out = limit - 1; /* not reached for limit >= 1 */
	*p_out = carry;
}

/* The number of leading entries of the descending pr[0, limit) that are
 * >= thr, at least 1: a binary search by thread 0, broadcast. */
__device__ int min_p_keep(const float *__restrict__ pr, int limit, float thr, pick_smem &sm)
{
	if (threadIdx.x == 0) {
		int lo = 1, hi = limit; /* pr[lo - 1] >= thr; answer in [lo, hi] */
		while (lo < hi) {
			int mid = lo + (hi - lo) / 2;
			if (pr[mid] >= thr)
				lo = mid + 1;
			else
				hi = mid;
		}
		sm.hit = lo;
	}
	__syncthreads();
	int keep = sm.hit;
	__syncthreads(); /* sm.hit is reused by scan_find */
	return keep;
}

__global__ void __launch_bounds__(PICK_THREADS)
	sample_pick_kernel(const float *__restrict__ probs, const int32_t *__restrict__ ids,
			   int vocab, const kern_sample_params *__restrict__ params,
			   const int64_t *__restrict__ positions, int32_t *__restrict__ tokens_out)
{
	__shared__ pick_smem sm;
	int r = blockIdx.x;
	kern_sample_params p = params[r];
	if (p.temperature <= 0)
		return; /* greedy: prep wrote it */
	const float *pr = probs + (size_t)r * vocab;

	int keep = (p.top_k > 0 && p.top_k < vocab) ? p.top_k : vocab;
	if (p.min_p > 0) /* keep the leading p >= min_p * p_0 (at least p_0) */
		keep = min_p_keep(pr, keep, p.min_p * pr[0], sm);
	/* top-p: the smallest prefix whose mass reaches top_p (none: all of keep) */
	double thr = p.top_p >= 1.0f ? INFINITY : (double)p.top_p;
	int last;
	double total;
	scan_find(pr, keep, thr, false, sm, &last, &total);
	keep = last + 1;

	double u = (double)philox_uniform(p.seed, (uint64_t)positions[r]) * total;
	int pick;
	double unused;
	scan_find(pr, keep, u, true, sm, &pick, &unused);
	if (threadIdx.x == 0)
		tokens_out[r] = ids[(size_t)r * vocab + pick];
}

/* ---- 4. log-probs ---- */

/* (v, i) comes after (pv, pi) in the order logit desc, id asc. */
__device__ __forceinline__ bool after(float v, int i, float pv, int pi)
{
	return v < pv || (v == pv && i > pi);
}

__global__ void __launch_bounds__(LP_THREADS)
	sample_logprobs_kernel(const float *__restrict__ logits, int vocab,
			       const kern_sample_params *__restrict__ params,
			       const int32_t *__restrict__ tokens, kern_logprobs lp)
{
	int r = blockIdx.x;
	kern_sample_params p = params[r];
	int32_t *top_ids = lp.top_ids + (size_t)r * KERN_MAX_TOP_LOGPROBS;
	float *top = lp.top + (size_t)r * KERN_MAX_TOP_LOGPROBS;
	int n_top = kern_wants_logprobs(&p) ? kern_top_logprobs(&p, vocab) : 0;
	if (threadIdx.x >= n_top && threadIdx.x < KERN_MAX_TOP_LOGPROBS) {
		top_ids[threadIdx.x] = -1;
		top[threadIdx.x] = 0;
	}
	if (!kern_wants_logprobs(&p)) {
		if (threadIdx.x == 0)
			lp.chosen[r] = 0;
		return; /* uniform over the block */
	}
	const float *l = logits + (size_t)r * vocab;
	float mx = -INFINITY;
	int mi = INT_MAX;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x)
		if (mi == INT_MAX || l[i] > mx)
			mx = l[i], mi = i;
	block_argmax(&mx, &mi);
	double sum = 0;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x)
		sum += expf(l[i] - mx);
	double lse = log(kern_block_sum(sum));
	if (threadIdx.x == 0)
		lp.chosen[r] = (float)((double)(l[tokens[r]] - mx) - lse);
	/* pick k: the best entry after pick k - 1 (pick 0: the maximum) */
	float pv = mx;
	int pi = mi;
	for (int k = 0; k < n_top; k++) {
		if (k > 0) {
			float bv = -INFINITY;
			int bi = INT_MAX;
			for (int i = threadIdx.x; i < vocab; i += blockDim.x)
				if (after(l[i], i, pv, pi) && (bi == INT_MAX || l[i] > bv))
					bv = l[i], bi = i;
			__syncthreads(); /* block_argmax's shared words are still being read */
			block_argmax(&bv, &bi);
			pv = bv, pi = bi;
		}
		if (threadIdx.x == 0) {
			top_ids[k] = pi;
			top[k] = (float)((double)(pv - mx) - lse);
		}
	}
}

/* ---- host ---- */

extern "C" void kern_sampler_destroy(kern_sampler *s)
{
	if (!s)
		return;
	for (int b = 0; b < 2; b++) {
		cudaFree(s->keys[b]);
		cudaFree(s->vals[b]);
	}
	cudaFree(s->seg_begin);
	cudaFree(s->seg_end);
	cudaFree(s->pen);
	cudaFree(s->sort_tmp);
	free(s);
}

static int sort_bytes(size_t *bytes, kern_sampler *s, int rows, cudaStream_t st)
{
	cub::DoubleBuffer<float> dk(s->keys[0], s->keys[1]);
	cub::DoubleBuffer<int32_t> dv(s->vals[0], s->vals[1]);
	CUDA_TRY(cub::DeviceSegmentedRadixSort::SortPairsDescending(
		nullptr, *bytes, dk, dv, rows * s->vocab, rows, s->seg_begin, s->seg_end, 0, 32,
		st));
	return SL_OK;
}

static int sampler_init(kern_sampler *s)
{
	size_t n = (size_t)s->chunk_rows * s->vocab;
	for (int b = 0; b < 2; b++) {
		CUDA_TRY(cudaMalloc((void **)&s->keys[b], n * sizeof(float)));
		CUDA_TRY(cudaMalloc((void **)&s->vals[b], n * sizeof(int32_t)));
	}
	CUDA_TRY(cudaMalloc((void **)&s->seg_begin, s->chunk_rows * sizeof(int)));
	CUDA_TRY(cudaMalloc((void **)&s->seg_end, s->chunk_rows * sizeof(int)));
	CUDA_TRY(cudaMalloc((void **)&s->pen, n * sizeof(float)));
	int rc = sort_bytes(&s->sort_tmp_bytes, s, s->chunk_rows, 0);
	if (rc)
		return rc;
	CUDA_TRY(cudaMalloc(&s->sort_tmp, s->sort_tmp_bytes ? s->sort_tmp_bytes : 16));
	return SL_OK;
}

extern "C" int kern_sampler_create(int max_seqs, int vocab, kern_sampler **out)
{
	if (max_seqs <= 0 || vocab <= 0 || (long)vocab * SAMPLE_CHUNK_ROWS > INT_MAX)
		return sl_fail(SL_EINVAL, "sampler: bad shape %d rows x vocab %d", max_seqs, vocab);
	kern_sampler *s = (kern_sampler *)calloc(1, sizeof *s);
	if (!s)
		return SL_ENOMEM;
	s->max_seqs = max_seqs;
	s->vocab = vocab;
	s->chunk_rows = max_seqs < SAMPLE_CHUNK_ROWS ? max_seqs : SAMPLE_CHUNK_ROWS;
	int rc = sampler_init(s);
	if (rc) {
		kern_sampler_destroy(s);
		return rc;
	}
	*out = s;
	return SL_OK;
}

/* Row r0's view of a history, of a bias and of log-prob outputs. */
static kern_logit_bias bias_from(const kern_logit_bias *b, int r0)
{
	kern_logit_bias v = {};
	if (b && b->off)
		v = *b, v.off = b->off + r0;
	return v;
}

static kern_token_hist hist_from(const kern_token_hist *h, int r0)
{
	kern_token_hist v = {};
	if (h && h->off)
		v = *h, v.off = h->off + r0;
	return v;
}

static kern_logprobs lp_from(const kern_logprobs *lp, int r0)
{
	size_t top = (size_t)r0 * KERN_MAX_TOP_LOGPROBS;
	return kern_logprobs{lp->chosen + r0, lp->top_ids + top, lp->top + top};
}

extern "C" int kern_sample_cuda(kern_sampler *s, int32_t *tokens_out, const float *logits, int n,
				int vocab, const kern_sample_params *params,
				const int64_t *positions, const kern_logit_bias *bias,
				const kern_token_hist *hist, const kern_logprobs *lp,
				void *stream)
{
	if (n <= 0)
		return SL_OK;
	if (n > s->max_seqs || vocab <= 0 || vocab > s->vocab)
		return sl_fail(SL_EINVAL, "sample: %d rows x vocab %d, sampler made for %d x %d", n,
			       vocab, s->max_seqs, s->vocab);
	cudaStream_t st = kern_stream(stream);
	for (int r0 = 0; r0 < n; r0 += s->chunk_rows) {
		int rows = n - r0 < s->chunk_rows ? n - r0 : s->chunk_rows;
		const float *l = logits + (size_t)r0 * vocab;
		kern_token_hist h = hist_from(hist, r0);
		kern_logit_bias b = bias_from(bias, r0);
		if (b.off) {
			sample_bias_kernel<<<rows, PEN_THREADS, 0, st>>>(l, vocab, b, s->pen);
			CUDA_TRY_LAUNCH();
		}
		if (h.off) {
			sample_penalty_kernel<<<rows, PEN_THREADS, 0, st>>>(l, vocab, params + r0, h,
									    b, s->pen);
			CUDA_TRY_LAUNCH();
		}
		sample_prep_kernel<<<rows, PREP_THREADS, 0, st>>>(
			l, s->pen, h, b, vocab, params + r0, tokens_out + r0, s->keys[0], s->vals[0],
			s->seg_begin, s->seg_end);
		CUDA_TRY_LAUNCH();
		cub::DoubleBuffer<float> dk(s->keys[0], s->keys[1]);
		cub::DoubleBuffer<int32_t> dv(s->vals[0], s->vals[1]);
		size_t bytes = 0;
		int rc = sort_bytes(&bytes, s, rows, st);
		if (rc)
			return rc;
		if (bytes > s->sort_tmp_bytes) /* cannot happen: sized for chunk_rows */
			return sl_fail(SL_EDEVICE, "sample: sort needs %zu bytes, have %zu", bytes,
				       s->sort_tmp_bytes);
		bytes = s->sort_tmp_bytes;
		CUDA_TRY(cub::DeviceSegmentedRadixSort::SortPairsDescending(
			s->sort_tmp, bytes, dk, dv, rows * vocab, rows, s->seg_begin, s->seg_end, 0,
			32, st));
		sample_pick_kernel<<<rows, PICK_THREADS, 0, st>>>(
			dk.Current(), dv.Current(), vocab, params + r0, positions + r0,
			tokens_out + r0);
		CUDA_TRY_LAUNCH();
		if (lp) {
			sample_logprobs_kernel<<<rows, LP_THREADS, 0, st>>>(
				l, vocab, params + r0, tokens_out + r0, lp_from(lp, r0));
			CUDA_TRY_LAUNCH();
		}
	}
	return SL_OK;
}

extern "C" int kern_argmax_rows_cuda(int32_t *tokens_out, const float *logits, int n, int vocab,
				     void *stream)
{
	if (n <= 0)
		return SL_OK;
	if (vocab <= 0)
		return SL_EINVAL;
	argmax_rows_kernel<<<n, ARGMAX_THREADS, 0, kern_stream(stream)>>>(logits, vocab, tokens_out);
	CUDA_TRY_LAUNCH();
	return SL_OK;
}
