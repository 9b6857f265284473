/*
 * make_seeds.c — the seeds of the binary-message fuzz targets, packed by
 * the real packers so they get past the first checks: step plans
 * (node_plan_pack) into tests/fuzz/corpus/plan/. `make fuzz-seeds` builds
 * and runs it from the repository root; tests/fuzz/make_seeds.py makes
 * the seeds that come from test data files.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plan.h"
#include "sl.h"

static void put(const char *target, const char *name, const void *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof path, "tests/fuzz/corpus/%s", target);
	if (mkdir(path, 0755) && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof path, "tests/fuzz/corpus/%s/%s", target, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
		perror(path);
		exit(1);
	}
}

static void put_plan(const char *name, const node_plan *p)
{
	void *buf = NULL;
	size_t cap = 0, bytes = 0;
	if (node_plan_pack(p, &buf, &cap, &bytes)) {
		fprintf(stderr, "make_seeds: packing plan %s failed\n", name);
		exit(1);
	}
	put("plan", name, buf, bytes);
	free(buf);
}

/* Two sequences: a prefill of 3 tokens and a decode of 1, both sampled;
 * with penalty history when `hist`. */
static void plan_seeds(void)
{
	static const int32_t tokens[] = {1, 15, 27, 9}, positions[] = {0, 1, 2, 7};
	static const int32_t slots[] = {0, 1, 2, 23}, q_start[] = {0, 3}, q_len[] = {3, 1};
	static const int32_t kv_len[] = {3, 8}, blocks[] = {0, -1, 5, 6}, rows[] = {2, 3};
	static const int32_t sample_rows[] = {0, 1}, micro1[] = {0, 2}, micro2[] = {0, 1, 2};
	static const int64_t sample_pos[] = {3, 8};
	static const int32_t off[] = {0, 2, 3}, ids[] = {15, 27, 9}, n_gen[] = {0, 1, 2};
	static const int32_t in_prompt[] = {1, 1, 0};
	kern_sample_params sp[2] = {
		{.temperature = 0.7f, .top_k = 40, .top_p = 0.9f, .seed = 42, .logprobs = 1,
		 .top_logprobs = 2},
		{.temperature = 0, .top_p = 1, .repetition_penalty = 1.1f,
		 .presence_penalty = 0.5f},
	};
	node_plan p = {
		.cmd = NODE_PLAN_STEP,
		.b = {.tokens = tokens, .positions = positions, .slots = slots, .n_tokens = 4,
		      .q_start = q_start, .q_len = q_len, .kv_len = kv_len, .n_seqs = 2,
		      .block_tables = blocks, .max_blocks = 2, .block_tokens = 4, .max_q_len = 3,
		      .max_kv_len = 8},
		.n_rows = 2, .rows = rows, .n_sample = 2, .sample_rows = sample_rows,
		.sampling = sp, .sample_pos = sample_pos, .n_micro = 1, .micro_seq0 = micro1,
	};
	put_plan("step", &p);
	p.n_micro = 2;
	p.micro_seq0 = micro2;
	p.want_logits = 1;
	put_plan("step_two_micro", &p);
	p.hist = (kern_token_hist){off, ids, n_gen, in_prompt};
	p.n_hist = 3;
	put_plan("step_history", &p);
	node_plan stop = {.cmd = NODE_PLAN_STOP};
	put_plan("stop", &stop);
}

int main(void)
{
	plan_seeds();
	printf("seeds: plan written under tests/fuzz/corpus/\n");
	return 0;
}
