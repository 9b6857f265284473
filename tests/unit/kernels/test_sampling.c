/*
 * test_sampling.c — the CPU reference sampler's penalties, min-p and
 * log-probs (kernels/sampling.c) against naive formulations written here
 * from their definitions:
 *   - penalties: counts taken from plain prompt and generated token lists
 *     (not the compact history the node builds), each logit rewritten by
 *     HF's repetition rule then OpenAI's frequency and presence rules; the
 *     reference with that history must pick what the plain sampler picks
 *     on the naively penalised logits, greedy and sampled, for every mix
 *     of the three penalties;
 *   - min-p: every draw lies in {i : p_i >= min_p * p_max} (p in double at
 *     the temperature), and draw frequencies follow the renormalised kept
 *     distribution; with top-k and top-p, in the intersection;
 *   - log-probs: log_softmax of the raw logits in double, for the chosen
 *     token and the top N (sorted, ties to the lower id), whatever the
 *     temperature or penalties; unused slots hold (-1, 0);
 *   - logit bias: a batch of rows with random bias rows (some banned with
 *     -inf, some rows with none) and penalties must pick, row by row, what
 *     the plain sampler picks on logits biased then penalised naively;
 *     -100 on the argmax moves greedy off it, +100 forces a token, and
 *     the log-probs stay the raw distribution's.
 * Failures print the first differing row with both values.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sampling.h"

#define LP_TOL 1e-5 /* float log-probs against double: the sum's rounding */

static float frand(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (float)((*s >> 8) & 0xFFFF) / 65536.0f - 0.5f;
}

static void random_logits(float *l, int n, unsigned seed, float scale)
{
	for (int i = 0; i < n; i++)
		l[i] = frand(&seed) * scale;
}

/* A token list of n ids drawn (with repeats) from the `range` largest
 * logits of l, so the penalties hit the tokens sampling would choose. */
static void random_tokens(int32_t *t, int n, const float *l, int vocab, int range, unsigned seed)
{
	for (int i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		int want = (int)((seed >> 8) % (unsigned)range), id = 0;
		for (int v = 0; v < vocab; v++) { /* the id of rank `want` */
			int rank = 0;
			for (int u = 0; u < vocab && rank <= want; u++)
				rank += l[u] > l[v] || (l[u] == l[v] && u < v);
			if (rank == want)
				id = v;
		}
		t[i] = id;
	}
}

/* The definitions, over plain token lists. */
static void naive_penalise(float *out, const float *l, int vocab, const int32_t *prompt, int np,
			   const int32_t *gen, int ng, const kern_sample_params *p)
{
	for (int v = 0; v < vocab; v++) {
		int count = 0, in_prompt = 0;
		for (int i = 0; i < ng; i++)
			count += gen[i] == v;
		for (int i = 0; i < np; i++)
			in_prompt |= prompt[i] == v;
		float x = l[v];
		if (p->repetition_penalty > 0 && (in_prompt || count > 0))
			x = x > 0 ? x / p->repetition_penalty : x * p->repetition_penalty;
		float f = p->frequency_penalty * (float)count;
		x = x - f;
		if (count > 0)
			x = x - p->presence_penalty;
		out[v] = x;
	}
}

/* The compact history of one row, as the node's engine lays it out. */
typedef struct hist_buf {
	int32_t off[2], ids[4096], n_gen[4096], in_prompt[4096];
	kern_token_hist h;
} hist_buf;

static void build_hist(hist_buf *b, const int32_t *prompt, int np, const int32_t *gen, int ng)
{
	int n = 0;
	for (int i = 0; i < np + ng; i++) {
		int32_t id = i < np ? prompt[i] : gen[i - np];
		int at = -1;
		for (int e = 0; e < n; e++)
			if (b->ids[e] == id)
				at = e;
		if (at < 0) {
			at = n++;
			b->ids[at] = id, b->n_gen[at] = 0, b->in_prompt[at] = 0;
		}
		if (i < np)
			b->in_prompt[at] = 1;
		else
			b->n_gen[at]++;
	}
	b->off[0] = 0, b->off[1] = n;
	b->h = (kern_token_hist){b->off, b->ids, b->n_gen, b->in_prompt};
}

static int sample_one(const float *l, int vocab, const kern_sample_params *p, int64_t pos,
		      const kern_token_hist *h, kern_logprobs *lp, void *w)
{
	int32_t tok;
	kern_sample_rows_cpu(&tok, lp, l, NULL, 1, vocab, p, &pos, NULL, h, w);
	return tok;
}

START_TEST(penalties_match_definition)
{
	enum { V = 300, NP = 40, NG = 60 };
	static const kern_sample_params mixes[] = {
		{.temperature = 0, .top_p = 1, .repetition_penalty = 1.8f},
		{.temperature = 0, .top_p = 1, .frequency_penalty = 0.7f},
		{.temperature = 0, .top_p = 1, .presence_penalty = 1.5f},
		{.temperature = 0, .top_p = 1, .repetition_penalty = 0.6f, .presence_penalty = -1,
		 .frequency_penalty = -0.4f},
		{.temperature = 0.8f, .top_p = 0.9f, .top_k = 50, .repetition_penalty = 1.3f,
		 .presence_penalty = 0.5f, .frequency_penalty = 0.3f},
		{.temperature = 1.5f, .top_p = 1, .min_p = 0.05f, .frequency_penalty = 2,
		 .presence_penalty = 2, .repetition_penalty = 10},
		{.temperature = 0.5f, .top_p = 1, .presence_penalty = 0.8f},
		{.temperature = 0.7f, .top_p = 1, .frequency_penalty = 0.3f},
	};
	float l[V], pen[V];
	int32_t prompt[NP], gen[NG];
	void *w = malloc(kern_sample_work_bytes(V));
	static hist_buf hb;
	int changed = 0, rows = 0;
	for (int m = 0; m < (int)(sizeof mixes / sizeof *mixes); m++)
		for (unsigned trial = 0; trial < 30; trial++) {
			kern_sample_params p = mixes[m];
			p.seed = 1000 + trial;
			random_logits(l, V, 17 + trial * 31 + m, 8);
			int np = 1 + (int)(trial % NP), ng = (int)(trial * 3 % (NG + 1));
			random_tokens(prompt, np, l, V, 12, 5 + trial);
			random_tokens(gen, ng, l, V, 12, 9 + trial * 7);
			build_hist(&hb, prompt, np, gen, ng);
			naive_penalise(pen, l, V, prompt, np, gen, ng, &p);
			int64_t pos = np + ng;
			int got = sample_one(l, V, &p, pos, &hb.h, NULL, w);
			int want = kern_sample_cpu(pen, V, &p, (uint64_t)pos, w);
			ck_assert_msg(got == want, "mix %d trial %u: sampled %d with the history, %d on "
				      "the naively penalised logits", m, trial, got, want);
			changed += got != kern_sample_cpu(l, V, &p, (uint64_t)pos, w);
			rows++;
		}
	ck_assert_msg(changed > rows / 4, "penalties changed only %d of %d choices", changed, rows);
	free(w);
}
END_TEST

/* Greedy takes the argmax after the penalties: the raw winner, in the
 * prompt, loses to the runner-up once its logit is divided by 2. */
START_TEST(greedy_after_penalties)
{
	float l[5] = {1.0f, 4.0f, 3.0f, -2.0f, 0.5f};
	int32_t prompt[] = {1};
	static hist_buf hb;
	void *w = malloc(kern_sample_work_bytes(5));
	kern_sample_params p = {.temperature = 0, .top_p = 1, .repetition_penalty = 2};
	build_hist(&hb, prompt, 1, NULL, 0);
	ck_assert_int_eq(sample_one(l, 5, &p, 1, &hb.h, NULL, w), 2);
	p.repetition_penalty = 1; /* off */
	ck_assert_int_eq(sample_one(l, 5, &p, 1, &hb.h, NULL, w), 1);
	/* frequency counts generated tokens only: a prompt token is untouched */
	p = (kern_sample_params){.temperature = 0, .top_p = 1, .frequency_penalty = 2};
	ck_assert_int_eq(sample_one(l, 5, &p, 1, &hb.h, NULL, w), 1);
	int32_t gen[] = {1};
	build_hist(&hb, prompt, 1, gen, 1); /* 4 - 2 * 1 = 2 < 3 */
	ck_assert_int_eq(sample_one(l, 5, &p, 2, &hb.h, NULL, w), 2);
	/* a negative logit is multiplied: with r = 0.5, -2 becomes -1 and beats -1.5 */
	float neg[2] = {-2.0f, -1.5f};
	int32_t pr0[] = {0};
	build_hist(&hb, pr0, 1, NULL, 0);
	p = (kern_sample_params){.temperature = 0, .top_p = 1, .repetition_penalty = 0.5f};
	ck_assert_int_eq(sample_one(neg, 2, &p, 1, &hb.h, NULL, w), 0);
	free(w);
}
END_TEST

/* p_i in double at temperature T, and the min-p kept set. */
static void min_p_set(const float *l, int n, float T, float min_p, int *kept)
{
	double mx = l[0], sum = 0;
	for (int i = 1; i < n; i++)
		mx = l[i] > mx ? l[i] : mx;
	for (int i = 0; i < n; i++)
		sum += exp((l[i] - mx) / T);
	double pmax = 1 / sum;
	for (int i = 0; i < n; i++)
		kept[i] = exp((l[i] - mx) / T) / sum >= min_p * pmax * (1 - 1e-6);
}

START_TEST(min_p_keeps_the_definition)
{
	enum { V = 400 };
	float l[V];
	int kept[V];
	void *w = malloc(kern_sample_work_bytes(V));
	static const float mins[] = {0.01f, 0.1f, 0.3f, 0.7f};
	for (int k = 0; k < 4; k++) {
		random_logits(l, V, 41 + k, 10);
		kern_sample_params p = {.temperature = 1.2f, .top_p = 1, .min_p = mins[k], .seed = 3};
		min_p_set(l, V, p.temperature, p.min_p, kept);
		int n_kept = 0, seen = 0;
		for (int i = 0; i < V; i++)
			n_kept += kept[i];
		char hit[V] = {0};
		for (uint64_t pos = 0; pos < 3000; pos++) {
			int t = kern_sample_cpu(l, V, &p, pos, w);
			ck_assert_msg(kept[t], "min_p %g drew %d (p below min_p * p_max)", p.min_p, t);
			seen += !hit[t];
			hit[t] = 1;
		}
		ck_assert_msg(n_kept < V && seen > 1 && seen <= n_kept,
			      "min_p %g: %d kept, %d seen", p.min_p, n_kept, seen);
	}
	/* min_p 1 keeps only the maximum */
	random_logits(l, V, 99, 10);
	kern_sample_params one = {.temperature = 3, .top_p = 1, .min_p = 1, .seed = 5};
	for (uint64_t pos = 0; pos < 200; pos++)
		ck_assert_int_eq(kern_sample_cpu(l, V, &one, pos, w), kern_argmax_cpu(l, V));
	/* with top-k and top-p: inside all three sets */
	kern_sample_params all = {.temperature = 1, .top_k = 30, .top_p = 0.8f, .min_p = 0.05f,
				  .seed = 8};
	min_p_set(l, V, all.temperature, all.min_p, kept);
	for (uint64_t pos = 0; pos < 2000; pos++) {
		int t = kern_sample_cpu(l, V, &all, pos, w), rank = 0;
		for (int i = 0; i < V; i++)
			rank += l[i] > l[t];
		ck_assert_msg(kept[t] && rank < 30, "drew %d: rank %d, min-p kept %d", t, rank, kept[t]);
	}
	free(w);
}
END_TEST

/* Probabilities 0.1, 0.2, 0.3, 0.4; min_p 0.45 drops 0.1 (< 0.18) and
 * keeps the rest, renormalised to 2/9, 3/9, 4/9. */
START_TEST(min_p_frequencies)
{
	float l[4] = {0, logf(2), logf(3), logf(4)};
	void *w = malloc(kern_sample_work_bytes(4));
	kern_sample_params p = {.temperature = 1, .top_p = 1, .min_p = 0.45f, .seed = 78};
	int count[4] = {0};
	enum { N = 20000 };
	for (uint64_t pos = 0; pos < N; pos++)
		count[kern_sample_cpu(l, 4, &p, pos, w)]++;
	ck_assert_int_eq(count[0], 0);
	for (int i = 1; i < 4; i++)
		ck_assert_msg(fabs(count[i] / (double)N - (i + 1) / 9.0) < 0.015,
			      "token %d drawn %d of %d times, want %.3f", i, count[i], N, (i + 1) / 9.0);
	free(w);
}
END_TEST

/* log_softmax of the raw logits in double. */
static void naive_logprobs(const float *l, int n, double *out)
{
	double mx = l[0], sum = 0;
	for (int i = 1; i < n; i++)
		mx = l[i] > mx ? l[i] : mx;
	for (int i = 0; i < n; i++)
		sum += exp((double)l[i] - mx);
	for (int i = 0; i < n; i++)
		out[i] = (double)l[i] - mx - log(sum);
}

static void check_logprobs(const float *l, int V, const kern_sample_params *p, int tok,
			   const kern_logprobs *lp, int r, const char *what)
{
	double *want = malloc(sizeof(double) * V);
	naive_logprobs(l, V, want);
	const int32_t *ids = lp->top_ids + (size_t)r * KERN_MAX_TOP_LOGPROBS;
	const float *top = lp->top + (size_t)r * KERN_MAX_TOP_LOGPROBS;
	int n = p->top_logprobs < V ? p->top_logprobs : V;
	ck_assert_msg(fabs(lp->chosen[r] - want[tok]) < LP_TOL,
		      "%s: chosen %d log-prob %.8g, want %.8g (tol %g)", what, tok, lp->chosen[r],
		      want[tok], LP_TOL);
	for (int k = 0; k < KERN_MAX_TOP_LOGPROBS; k++) {
		if (k >= n) {
			ck_assert_msg(ids[k] == -1 && top[k] == 0, "%s: slot %d past %d holds (%d, %g)",
				      what, k, n, ids[k], top[k]);
			continue;
		}
		/* the k-th in (logit desc, id asc): count who beats it */
		int id = ids[k], better = 0;
		ck_assert_msg(id >= 0 && id < V, "%s: top %d id %d", what, k, id);
		for (int i = 0; i < V; i++)
			better += l[i] > l[id] || (l[i] == l[id] && i < id);
		ck_assert_msg(better == k, "%s: top %d is id %d, ranked %d", what, k, id, better);
		ck_assert_msg(fabs(top[k] - want[id]) < LP_TOL, "%s: top %d (id %d) log-prob %.8g, want "
			      "%.8g (tol %g)", what, k, id, top[k], want[id], LP_TOL);
	}
	free(want);
}

START_TEST(logprobs_of_raw_distribution)
{
	enum { V = 3000, ROWS = 6 };
	static float l[ROWS * V];
	static kern_sample_params p[ROWS];
	int64_t pos[ROWS];
	int32_t tok[ROWS];
	float chosen[ROWS];
	int32_t ids[ROWS * KERN_MAX_TOP_LOGPROBS];
	float top[ROWS * KERN_MAX_TOP_LOGPROBS];
	kern_logprobs lp = {chosen, ids, top};
	static hist_buf hb;
	int32_t prompt[] = {5, 6, 7, 8}, gen[] = {5, 9};
	void *w = malloc(kern_sample_work_bytes(V));
	for (int r = 0; r < ROWS; r++) {
		random_logits(l + (size_t)r * V, V, 300 + r, r % 2 ? 4 : 20);
		pos[r] = 10 + r;
	}
	float *t = l + 2 * (size_t)V; /* ties: three copies of the maximum, two of the runner-up */
	float top_v = t[kern_argmax_cpu(t, V)] + 1;
	t[7] = t[2900] = t[1500] = top_v;
	t[8] = t[9] = top_v - 0.25f;
	p[0] = (kern_sample_params){.temperature = 0, .top_p = 1, .logprobs = 1, .top_logprobs = 5};
	p[1] = (kern_sample_params){.temperature = 0.5f, .top_p = 1, .seed = 4, .logprobs = 1,
				    .top_logprobs = 20};
	p[2] = (kern_sample_params){.temperature = 2, .top_p = 0.7f, .seed = 4, .logprobs = 1,
				    .top_logprobs = 7};
	p[3] = (kern_sample_params){.temperature = 0.9f, .top_p = 1, .seed = 5, .logprobs = 1};
	p[4] = (kern_sample_params){.temperature = 1, .top_p = 1, .seed = 6}; /* none */
	p[5] = (kern_sample_params){.temperature = 0.7f, .top_p = 1, .seed = 7, .top_logprobs = 3,
				    .repetition_penalty = 3, .frequency_penalty = 1};
	/* row 5's penalties and temperature must not reach its log-probs */
	int32_t off[ROWS + 1] = {0, 0, 0, 0, 0, 0, 0};
	build_hist(&hb, prompt, 4, gen, 2);
	off[6] = hb.off[1];
	kern_token_hist h = {off, hb.ids, hb.n_gen, hb.in_prompt};
	memset(chosen, 0xFF, sizeof chosen), memset(ids, 0xFF, sizeof ids), memset(top, 0xFF, sizeof top);
	kern_sample_rows_cpu(tok, &lp, l, NULL, ROWS, V, p, pos, NULL, &h, w);
	char what[64];
	for (int r = 0; r < ROWS; r++) {
		snprintf(what, sizeof what, "row %d", r);
		if (r == 4) {
			ck_assert(chosen[r] == 0);
			for (int k = 0; k < KERN_MAX_TOP_LOGPROBS; k++)
				ck_assert(ids[r * KERN_MAX_TOP_LOGPROBS + k] == -1 &&
					  top[r * KERN_MAX_TOP_LOGPROBS + k] == 0);
			continue;
		}
		check_logprobs(l + (size_t)r * V, V, &p[r], tok[r], &lp, r, what);
	}
	/* greedy on the tied row picks the lowest maximum, reported first */
	p[2].temperature = 0;
	kern_sample_rows_cpu(tok, &lp, l, NULL, ROWS, V, p, pos, NULL, &h, w);
	ck_assert_int_eq(tok[2], 7);
	ck_assert_int_eq(ids[2 * KERN_MAX_TOP_LOGPROBS], 7);
	ck_assert(chosen[2] == top[2 * KERN_MAX_TOP_LOGPROBS]);
	free(w);
}
END_TEST

/* A vocabulary smaller than top_logprobs: every id, then empty slots. */
START_TEST(logprobs_small_vocab)
{
	float l[3] = {1, 3, 2}, chosen;
	int32_t ids[KERN_MAX_TOP_LOGPROBS], tok;
	float top[KERN_MAX_TOP_LOGPROBS];
	kern_logprobs lp = {&chosen, ids, top};
	kern_sample_params p = {.temperature = 0, .top_p = 1, .logprobs = 1, .top_logprobs = 20};
	int64_t pos = 0;
	void *w = malloc(kern_sample_work_bytes(3));
	kern_sample_rows_cpu(&tok, &lp, l, NULL, 1, 3, &p, &pos, NULL, NULL, w);
	ck_assert_int_eq(tok, 1);
	ck_assert(ids[0] == 1 && ids[1] == 2 && ids[2] == 0 && ids[3] == -1);
	check_logprobs(l, 3, &p, tok, &lp, 0, "vocab 3");
	double s = exp(top[0]) + exp(top[1]) + exp(top[2]);
	ck_assert_msg(fabs(s - 1) < 1e-6, "probabilities sum to %.9f", s);
	free(w);
}
END_TEST

/* The definition: bias added to the raw logits, then the penalties. */
static void naive_bias(float *out, const float *l, int vocab, const int32_t *ids, const float *b,
		       int n)
{
	memcpy(out, l, sizeof(float) * vocab);
	for (int e = 0; e < n; e++)
		out[ids[e]] = l[ids[e]] + b[e];
}

START_TEST(logit_bias_matches_definition)
{
	enum { V = 400, ROWS = 6, MAXB = 40, NP = 8, NG = 12 };
	static float l[ROWS * V], biased[V], pen[V];
	static int32_t ids[ROWS * MAXB];
	static float bias[ROWS * MAXB];
	static hist_buf hb[ROWS];
	int32_t off[ROWS + 1], hoff[ROWS + 1], prompts[ROWS][NP], gens[ROWS][NG], tok[ROWS];
	static int32_t hids[ROWS * 64], hgen[ROWS * 64], hprompt[ROWS * 64];
	kern_sample_params p[ROWS];
	int64_t pos[ROWS];
	float chosen[ROWS];
	int32_t top_ids[ROWS * KERN_MAX_TOP_LOGPROBS];
	float top[ROWS * KERN_MAX_TOP_LOGPROBS];
	kern_logprobs lp = {chosen, top_ids, top};
	void *w = malloc(kern_sample_work_bytes(V));
	int changed = 0, rows = 0;
	for (unsigned trial = 0; trial < 40; trial++) {
		unsigned seed = 77 + trial * 13;
		int nb = 0, nh = 0;
		off[0] = hoff[0] = 0;
		for (int r = 0; r < ROWS; r++) {
			float *row = l + (size_t)r * V;
			random_logits(row, V, 1000 + trial * ROWS + r, 10);
			/* row r % 3 == 2 has no bias; the others a random distinct set */
			int want = r % 3 == 2 ? 0 : 1 + (int)((trial + r) % MAXB);
			for (int e = 0; e < want; e++) {
				seed = seed * 1664525u + 1013904223u;
				int32_t id = (int32_t)((seed >> 8) % V);
				if (e < 3) /* bias the likely tokens too: that is where it shows */
					id = (int32_t)((kern_argmax_cpu(row, V) + e * 7) % V);
				int dup = 0;
				for (int k = off[r]; k < nb; k++)
					dup |= ids[k] == id;
				if (dup)
					continue;
				seed = seed * 1664525u + 1013904223u;
				float b = (float)((int)((seed >> 8) % 20001) - 10000) / 100.0f; /* [-100, 100] */
				if ((seed >> 4) % 9 == 0)
					b = -INFINITY; /* min_tokens' ban */
				ids[nb] = id, bias[nb++] = b;
			}
			off[r + 1] = nb;
			/* penalties on odd rows, over a history of their own */
			p[r] = (kern_sample_params){.temperature = (trial + r) % 3 == 0 ? 0 : 0.4f + 0.3f * r,
						    .top_p = r == 4 ? 0.9f : 1, .top_k = r == 5 ? 20 : 0,
						    .seed = 9000 + trial * 7 + r, .logprobs = 1,
						    .top_logprobs = 4};
			if (r % 2) {
				p[r].repetition_penalty = 1.5f, p[r].frequency_penalty = 0.5f;
				random_tokens(prompts[r], NP, row, V, 10, 3 + trial + r);
				random_tokens(gens[r], NG, row, V, 10, 5 + trial * 3 + r);
				build_hist(&hb[r], prompts[r], NP, gens[r], NG);
				for (int e = 0; e < hb[r].off[1]; e++, nh++)
					hids[nh] = hb[r].ids[e], hgen[nh] = hb[r].n_gen[e],
					hprompt[nh] = hb[r].in_prompt[e];
			}
			hoff[r + 1] = nh;
			pos[r] = 30 + r;
		}
		kern_logit_bias kb = {off, ids, bias};
		kern_token_hist h = {hoff, hids, hgen, hprompt};
		kern_sample_rows_cpu(tok, &lp, l, NULL, ROWS, V, p, pos, &kb, &h, w);
		for (int r = 0; r < ROWS; r++) {
			const float *row = l + (size_t)r * V;
			naive_bias(biased, row, V, ids + off[r], bias + off[r], off[r + 1] - off[r]);
			if (r % 2) /* the penalties' definition, on the biased logits */
				naive_penalise(pen, biased, V, prompts[r], NP, gens[r], NG, &p[r]);
			else
				memcpy(pen, biased, sizeof pen);
			int want = kern_sample_cpu(pen, V, &p[r], (uint64_t)pos[r], w);
			ck_assert_msg(tok[r] == want, "trial %u row %d: sampled %d with the bias rows, %d "
				      "on the naively biased logits", trial, r, tok[r], want);
			ck_assert_msg(isfinite(pen[tok[r]]), "trial %u row %d: drew banned token %d",
				      trial, r, tok[r]);
			char what[64];
			snprintf(what, sizeof what, "trial %u row %d", trial, r);
			check_logprobs(row, V, &p[r], tok[r], &lp, r, what);
			if (off[r + 1] > off[r]) {
				rows++;
				changed += tok[r] != kern_sample_cpu(row, V, &p[r], (uint64_t)pos[r], w);
			}
		}
	}
	ck_assert_msg(changed > rows / 4, "the bias changed only %d of %d choices", changed, rows);
	free(w);
}
END_TEST

/* OpenAI's extremes: -100 on the greedy token moves greedy off it; +100
 * on an unlikely token makes it the only one drawn, greedy or at T = 1. */
START_TEST(logit_bias_extremes)
{
	enum { V = 500 };
	static float l[V];
	void *w = malloc(kern_sample_work_bytes(V));
	for (unsigned trial = 0; trial < 20; trial++) {
		random_logits(l, V, 4242 + trial, 12);
		int best = kern_argmax_cpu(l, V), rare = (best + 1 + (int)trial * 37) % V;
		int32_t off[2] = {0, 1}, id = best, tok;
		float b = -100;
		int64_t pos = trial;
		kern_logit_bias kb = {off, &id, &b};
		kern_sample_params g = {.temperature = 0, .top_p = 1};
		kern_sample_rows_cpu(&tok, NULL, l, NULL, 1, V, &g, &pos, &kb, NULL, w);
		ck_assert_msg(tok != best, "trial %u: -100 on %d, greedy still takes it", trial, best);
		id = rare, b = 100;
		kern_sample_rows_cpu(&tok, NULL, l, NULL, 1, V, &g, &pos, &kb, NULL, w);
		ck_assert_int_eq(tok, rare);
		kern_sample_params t1 = {.temperature = 1, .top_p = 1, .seed = trial};
		kern_sample_rows_cpu(&tok, NULL, l, NULL, 1, V, &t1, &pos, &kb, NULL, w);
		ck_assert_int_eq(tok, rare);
	}
	free(w);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sampling");
	TCase *tc = tcase_create("sampling");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, penalties_match_definition);
	tcase_add_test(tc, greedy_after_penalties);
	tcase_add_test(tc, min_p_keeps_the_definition);
	tcase_add_test(tc, min_p_frequencies);
	tcase_add_test(tc, logprobs_of_raw_distribution);
	tcase_add_test(tc, logprobs_small_vocab);
	tcase_add_test(tc, logit_bias_matches_definition);
	tcase_add_test(tc, logit_bias_extremes);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
