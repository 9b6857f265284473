/*
 * logits_mask.c — CPU reference of kernels/logits_mask.h.
 */
#include "kernels/logits_mask.h"

#include <math.h>
#include <stddef.h>

void kern_logits_mask_cpu(float *logits, const int32_t *rows, const uint32_t *masks, int n,
			  int vocab)
{
	int words = kern_mask_words(vocab);
	for (int i = 0; i < n; i++) {
		float *l = logits + (size_t)rows[i] * vocab;
		const uint32_t *m = masks + (size_t)i * words;
		for (int w = 0; w < words; w++) {
			if (m[w] == 0xffffffffu)
				continue;
			for (int b = 0; b < 32 && w * 32 + b < vocab; b++)
				if (!((m[w] >> b) & 1))
					l[w * 32 + b] = -INFINITY;
		}
	}
}
