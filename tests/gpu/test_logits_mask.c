/*
 * test_logits_mask.c — kern_logits_mask_cuda against kern_logits_mask_cpu
 * (constrained decoding's token mask, kernels/logits_mask.h) on random
 * logits and masks: vocabularies around word edges and the real ones
 * (SmolLM2's 49152, Llama 3's 128256), some rows constrained and others
 * not. Bit-exact: every logit either kept or -inf, and rows not listed
 * untouched. The mask and row inputs live in buffers whose tails are
 * poisoned (0xFF bytes), so a kernel reading past them goes wrong visibly.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kernels/logits_mask.h"

static uint64_t g_seed;

START_TEST(test_logits_mask)
{
	static const int vocabs[] = {1, 31, 32, 33, 1000, 49152, 128256};
	int bad = 0, cases = 0;
	gt_reseed(g_seed, 41);
	for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
		int vocab = vocabs[vi], words = kern_mask_words(vocab);
		for (int rep = 0; rep < 3; rep++, cases++) {
			int n_rows = gt_int(1, 12), n = gt_int(0, n_rows);
			size_t total = (size_t)n_rows * vocab;
			float *ref = gt_malloc(sizeof(float) * total);
			float *got = gt_malloc(sizeof(float) * total);
			int32_t *rows = gt_malloc(sizeof(int32_t) * (n_rows + 1));
			uint32_t *masks = gt_malloc(sizeof(uint32_t) * ((size_t)n * words + 1));
			gt_fill(ref, total, -20.0f, 20.0f);
			/* n distinct rows, in any order */
			int32_t all[12];
			for (int r = 0; r < n_rows; r++)
				all[r] = r;
			gt_shuffle(all, n_rows);
			memcpy(rows, all, sizeof(int32_t) * n);
			for (size_t w = 0; w < (size_t)n * words; w++) {
				int kind = gt_int(0, 3); /* all allowed, none, sparse, random */
				masks[w] = kind == 0 ? 0xffffffffu : kind == 1 ? 0u
					 : kind == 2 ? (1u << gt_int(0, 31))
						     : (uint32_t)gt_next();
			}
			float *d_logits = gt_upload_raw(ref, sizeof(float) * total);
			/* inputs in poisoned buffers one element longer than needed */
			int32_t *d_rows = gt_dev_poison(sizeof(int32_t) * (n_rows + 1));
			uint32_t *d_masks = gt_dev_poison(sizeof(uint32_t) * ((size_t)n * words + 1));
			if (n) {
				GT_CUDA(cudaMemcpy(d_rows, rows, sizeof(int32_t) * n, cudaMemcpyHostToDevice));
				GT_CUDA(cudaMemcpy(d_masks, masks, sizeof(uint32_t) * (size_t)n * words,
						   cudaMemcpyHostToDevice));
			}
			GT_KERNEL(kern_logits_mask_cuda(d_logits, d_rows, d_masks, n, vocab, NULL));
			kern_logits_mask_cpu(ref, rows, masks, n, vocab);
			GT_CUDA(cudaMemcpy(got, d_logits, sizeof(float) * total, cudaMemcpyDeviceToHost));
			long diff = 0, masked = 0;
			for (size_t i = 0; i < total; i++) {
				diff += memcmp(&ref[i], &got[i], sizeof(float)) != 0;
				masked += isinf(ref[i]) != 0; /* glibc: -1 for -inf */
			}
			if (diff) {
				bad++;
				printf("  FAIL logits_mask vocab %d rows %d constrained %d: %ld logits differ\n",
				       vocab, n_rows, n, diff);
			}
			/* the reference masked exactly the zero bits of the constrained rows
			 * (inputs are finite): a mask all ones may mask nothing */
			long want = 0;
			for (int j = 0; j < n; j++)
				for (int v = 0; v < vocab; v++)
					want += !((masks[(size_t)j * words + v / 32] >> (v % 32)) & 1u);
			ck_assert_msg(masked == want, "vocab %d: %ld logits masked, %ld zero bits", vocab,
				      masked, want);
			cudaFree(d_logits);
			cudaFree(d_rows);
			cudaFree(d_masks);
			free(ref);
			free(got);
			free(rows);
			free(masks);
		}
	}
	printf("kernel logits_mask: %d cases (vocab 1 to 128256), %d mismatches (must be exact)\n",
	       cases, bad);
	fflush(stdout);
	ck_assert_msg(bad == 0, "logits_mask: %d of %d cases differ from kern_logits_mask_cpu", bad,
		      cases);
}
END_TEST

int main(void)
{
	g_seed = gt_seed_from_env();
	Suite *s = suite_create("gpu_logits_mask");
	TCase *tc = tcase_create("logits_mask");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_logits_mask);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
