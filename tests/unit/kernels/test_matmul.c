/*
 * test_matmul.c — kern_matmul_cpu_fast (what the CPU backend runs) against
 * kern_matmul_cpu (the reference) on random shapes around and off its
 * tile sizes, and the fast path's promise that an output depends only on
 * its x and W rows: bit-identical alone, in any batch, at any thread count.
 */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"

static float frand(unsigned *s) { return (float)rand_r(s) / RAND_MAX * 2 - 1; }

static float *random_floats(size_t n, unsigned *seed)
{
	float *p = malloc(sizeof(float) * (n ? n : 1));
	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < n; i++)
		p[i] = frand(seed);
	return p;
}

static float *nans(size_t n)
{
	float *p = malloc(sizeof(float) * (n ? n : 1));
	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < n; i++)
		p[i] = NAN; /* an output the kernel forgets stays NaN and fails */
	return p;
}

/*
 * Compares one shape. Tolerance: the worst-case rounding bound of the two
 * fp32 sums, (K + K/8 + 12) u sum_k |x_k w_k| with u = 2^-24: the
 * reference is one chain of K adds, the fast path chains of K/8 adds,
 * a 3-level tree and at most 7 tail adds. Returns the worst error as a
 * fraction of that tolerance.
 */
static double check_shape(int n, int in_dim, int out_dim, unsigned seed)
{
	float *x = random_floats((size_t)n * in_dim, &seed);
	float *w = random_floats((size_t)out_dim * in_dim, &seed);
	float *ref = nans((size_t)n * out_dim), *fast = nans((size_t)n * out_dim);
	kern_matmul_cpu(ref, x, w, n, in_dim, out_dim);
	kern_matmul_cpu_fast(fast, x, w, n, in_dim, out_dim);
	double worst = 0;
	for (int i = 0; i < n; i++)
		for (int o = 0; o < out_dim; o++) {
			double mag = 0;
			for (int k = 0; k < in_dim; k++)
				mag += fabs((double)x[(size_t)i * in_dim + k] * w[(size_t)o * in_dim + k]);
			double tol = (in_dim + in_dim / 8 + 12) * ldexp(1, -24) * mag;
			float r = ref[(size_t)i * out_dim + o], f = fast[(size_t)i * out_dim + o];
			double err = fabs((double)f - r);
			ck_assert_msg(err <= tol,
				      "n %d in %d out %d: out[%d][%d] fast %.9g reference %.9g, "
				      "|diff| %.3g > tolerance %.3g",
				      n, in_dim, out_dim, i, o, f, r, err, tol);
			if (tol > 0 && err / tol > worst)
				worst = err / tol;
		}
	free(x), free(w), free(ref), free(fast);
	return worst;
}

START_TEST(fast_matches_reference)
{
	/* off the 8-lane width, the 4 x 2 register tile and the 32 x 16 cache
	 * tile; then SmolLM2's decode and prefill shapes (576, 1536, 3072) */
	static const int shapes[][3] = {
		{1, 1, 1},      {1, 7, 3},      {2, 8, 4},       {3, 9, 5},      {1, 15, 17},
		{5, 16, 16},    {33, 63, 33},   {31, 64, 15},    {65, 65, 66},   {4, 577, 1},
		{1, 1000, 101}, {7, 1, 9},      {1, 576, 1536},  {1, 1536, 576}, {40, 576, 3072},
		{37, 1536, 577},
	};
	double worst = 0;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		double e = check_shape(shapes[s][0], shapes[s][1], shapes[s][2], 100 + (unsigned)s);
		worst = e > worst ? e : worst;
	}
	/* and random ones */
	unsigned seed = 7;
	for (int r = 0; r < 40; r++) {
		int n = 1 + rand_r(&seed) % 70, in_dim = 1 + rand_r(&seed) % 700;
		int out_dim = 1 + rand_r(&seed) % 90;
		double e = check_shape(n, in_dim, out_dim, 1000 + r);
		worst = e > worst ? e : worst;
	}
	printf("matmul fast vs reference: worst rel err %.3g of the rounding bound\n", worst);
}
END_TEST

/* Row i of a batch is bit-identical to row i computed alone, in a chunk
 * that starts elsewhere, and on one thread: what keeps batched, chunked
 * and single-sequence generations of one prompt token for token equal. */
START_TEST(fast_rows_independent_of_batch)
{
	enum { N = 37, IN = 577, OUT = 45 }; /* N * IN * OUT crosses the OpenMP threshold */
	unsigned seed = 42;
	float *x = random_floats((size_t)N * IN, &seed), *w = random_floats((size_t)OUT * IN, &seed);
	float *all = nans((size_t)N * OUT), *one = nans(OUT), *chunk = nans((size_t)N * OUT);
	float *serial = nans((size_t)N * OUT);
	kern_matmul_cpu_fast(all, x, w, N, IN, OUT);
	for (int i = 0; i < N; i++) {
		kern_matmul_cpu_fast(one, x + (size_t)i * IN, w, 1, IN, OUT);
		for (int o = 0; o < OUT; o++)
			ck_assert_msg(memcmp(&one[o], &all[(size_t)i * OUT + o], sizeof(float)) == 0,
				      "out[%d][%d]: alone %.9g, in a batch of %d %.9g", i, o, one[o],
				      N, all[(size_t)i * OUT + o]);
	}
	kern_matmul_cpu_fast(chunk, x + 5 * IN, w, 7, IN, OUT);
	for (int i = 0; i < 7 * OUT; i++)
		ck_assert_msg(memcmp(&chunk[i], &all[5 * OUT + i], sizeof(float)) == 0,
			      "out[%d][%d]: in rows 5..11 %.9g, in the batch %.9g", 5 + i / OUT,
			      i % OUT, chunk[i], all[5 * OUT + i]);
	int threads = omp_get_max_threads();
	omp_set_num_threads(1);
	kern_matmul_cpu_fast(serial, x, w, N, IN, OUT);
	omp_set_num_threads(threads);
	for (int i = 0; i < N * OUT; i++)
		ck_assert_msg(memcmp(&serial[i], &all[i], sizeof(float)) == 0,
			      "out[%d][%d]: 1 thread %.9g, %d threads %.9g", i / OUT, i % OUT,
			      serial[i], threads, all[i]);
	free(x), free(w), free(all), free(one), free(chunk), free(serial);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("matmul");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, fast_matches_reference);
	tcase_add_test(tc, fast_rows_independent_of_batch);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
