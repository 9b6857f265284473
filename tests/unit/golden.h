/*
 * golden.h — reads a golden record written by tools/make_golden.py:
 * prompts, greedy tokens and the logits transformers computed.
 */
#ifndef TESTS_GOLDEN_H
#define TESTS_GOLDEN_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl.h"

#define GOLDEN_MAX_PROMPTS 8

typedef struct golden {
	char dir[512];
	int vocab, n_prompts, steps;
	int32_t *prompts[GOLDEN_MAX_PROMPTS];
	int n_prompt[GOLDEN_MAX_PROMPTS];
	int32_t *greedy[GOLDEN_MAX_PROMPTS];
	long row0[GOLDEN_MAX_PROMPTS];
	float *logits;     /* [sum of prompt lengths, vocab] */
} golden;

static int32_t *golden_ids(const cJSON *arr, int *n)
{
	*n = cJSON_GetArraySize(arr);
	int32_t *v = malloc(sizeof(int32_t) * (*n > 0 ? *n : 1));
	for (int i = 0; i < *n; i++)
		v[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
	return v;
}

static int golden_load(const char *dir, golden *g)
{
	char path[640], *txt, err[SL_ERRLEN];
	memset(g, 0, sizeof *g);
	snprintf(g->dir, sizeof g->dir, "%s", dir);
	snprintf(path, sizeof path, "%s/golden.json", dir);
	if (sl_read_file(path, &txt, NULL, err, sizeof err))
		return -1;
	cJSON *j = cJSON_Parse(txt);
	free(txt);
	if (!j)
		return -1;
	g->vocab = cJSON_GetObjectItem(j, "vocab_size")->valueint;
	g->steps = cJSON_GetObjectItem(j, "greedy_steps")->valueint;
	const cJSON *pr = cJSON_GetObjectItem(j, "prompts"), *gr = cJSON_GetObjectItem(j, "greedy");
	const cJSON *off = cJSON_GetObjectItem(j, "logits_row_offsets");
	g->n_prompts = cJSON_GetArraySize(pr);
	long rows = 0;
	for (int i = 0; i < g->n_prompts && i < GOLDEN_MAX_PROMPTS; i++) {
		int n;
		g->prompts[i] = golden_ids(cJSON_GetArrayItem(pr, i), &g->n_prompt[i]);
		g->greedy[i] = golden_ids(cJSON_GetArrayItem(gr, i), &n);
		g->row0[i] = (long)cJSON_GetArrayItem(off, i)->valuedouble;
		rows += g->n_prompt[i];
	}
	cJSON_Delete(j);
	snprintf(path, sizeof path, "%s/logits.bin", dir);
	FILE *f = fopen(path, "rb");
	g->logits = malloc(sizeof(float) * rows * g->vocab);
	size_t got = f ? fread(g->logits, sizeof(float), rows * g->vocab, f) : 0;
	if (f)
		fclose(f);
	return got == (size_t)(rows * g->vocab) ? 0 : -1;
}

static void golden_free(golden *g)
{
	for (int i = 0; i < g->n_prompts; i++)
		free(g->prompts[i]), free(g->greedy[i]);
	free(g->logits);
}

/* max |a - b| / max |b| over n values; *at gets the worst index. */
static double golden_rel_err(const float *a, const float *b, long n, long *at)
{
	double mx = 0, worst = 0;
	for (long i = 0; i < n; i++)
		if (fabs(b[i]) > mx)
			mx = fabs(b[i]);
	*at = 0;
	for (long i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (d > worst)
			worst = d, *at = i;
	}
	return mx > 0 ? worst / mx : worst;
}

#endif
