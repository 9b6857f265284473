/*
 * golden.h — reads a golden record written by tools/make_golden.py:
 * prompts, greedy tokens and the logits transformers computed (float32 at
 * every prompt position, or, with "logits_rows": "last", one int16-scaled
 * row per prompt), and which checkpoint they belong to.
 */
#ifndef TESTS_GOLDEN_H
#define TESTS_GOLDEN_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl.h"

#define GOLDEN_MAX_PROMPTS 8

typedef struct golden {
	char dir[512];
	char model[1024];  /* what model_create opens: dir, or dir/model_file (GGUF) */
	int vocab, n_prompts, steps;
	int32_t *prompts[GOLDEN_MAX_PROMPTS];
	int n_prompt[GOLDEN_MAX_PROMPTS];
	int32_t *greedy[GOLDEN_MAX_PROMPTS];
	long row0[GOLDEN_MAX_PROMPTS];
	int last_only;     /* logits of each prompt's last position only */
	float *logits;     /* [sum of prompt lengths, vocab], or [n_prompts, vocab] */
} golden;

/* The rows of logits.bin: float32, or int16 times a per-row scale. */
static int golden_read_logits(golden *g, const cJSON *j, long rows)
{
	char path[640];
	snprintf(path, sizeof path, "%s/logits.bin", g->dir);
	const cJSON *dt = cJSON_GetObjectItem(j, "logits_dtype");
	int i16 = cJSON_IsString(dt) && !strcmp(dt->valuestring, "int16_scaled");
	const cJSON *sc = cJSON_GetObjectItem(j, "logits_scale");
	if (i16 && cJSON_GetArraySize(sc) != rows)
		return -1;
	size_t n = (size_t)rows * g->vocab, es = i16 ? 2 : 4;
	void *raw = malloc(n * es);
	g->logits = malloc(sizeof(float) * n);
	FILE *f = fopen(path, "rb");
	size_t got = f && raw ? fread(raw, es, n, f) : 0;
	if (f)
		fclose(f);
	for (size_t i = 0; got == n && i < n; i++)
		g->logits[i] = i16 ? (float)(((int16_t *)raw)[i] *
					     cJSON_GetArrayItem(sc, (int)(i / g->vocab))->valuedouble)
				   : ((float *)raw)[i];
	free(raw);
	return got == n ? 0 : -1;
}

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
	const cJSON *mf = cJSON_GetObjectItem(j, "model_file");
	snprintf(g->model, sizeof g->model, "%s%s%s", dir, cJSON_IsString(mf) ? "/" : "",
		 cJSON_IsString(mf) ? mf->valuestring : "");
	const cJSON *lr = cJSON_GetObjectItem(j, "logits_rows");
	g->last_only = cJSON_IsString(lr) && !strcmp(lr->valuestring, "last");
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
		rows += g->last_only ? 1 : g->n_prompt[i];
	}
	int rc = golden_read_logits(g, j, rows);
	cJSON_Delete(j);
	return rc;
}

/* Prompt i's logits as the engine writes them (every prompt position),
 * and the golden rows to compare them with: all rows, or the last. */
static inline void golden_rows(const golden *g, int i, const float *engine, const float **got,
			const float **want, long *n)
{
	long rows = g->last_only ? 1 : g->n_prompt[i];
	*got = engine + (long)(g->n_prompt[i] - rows) * g->vocab;
	*want = g->logits + g->row0[i] * g->vocab;
	*n = rows * g->vocab;
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
