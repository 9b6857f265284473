/*
 * grammar.c — shardline-bench-grammar: what constrained decoding costs the
 * host per token (issue 37): the time to fill one sequence's token mask
 * (grammar_matcher_fill_mask) and to take the token, over a walk through
 * each constraint, on a real vocabulary (a tokenizer file: SmolLM2's 49k)
 * or a synthetic one of --vocab N tokens (random pieces of 1 to 8
 * characters, harder on the mask cache than a real vocabulary), or a real
 * one grown to --vocab N by joining pairs of its tokens (--tokenizer
 * SmolLM2 --vocab 128256: Llama 3's size with real-looking pieces). Also each constraint's compile time.
 * Prints numbers; asserts nothing.
 *
 *   shardline-bench-grammar [--tokenizer FILE] [--vocab N] [--tokens N]
 *                           [--seed S] SCHEMA.json... [--ebnf FILE]...
 *
 * The walk takes a random allowed token each step (closing tokens first
 * after a while, so objects end), as a sampler would; a walk that ends
 * starts over. Without constraint files: a JSON schema and an EBNF
 * grammar of its own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checks.h"
#include "common/rng.h"
#include "common/sl.h"
#include "common/version.h"
#include "grammar/grammar.h"
#include "text/tokenizer/tokenizer.h"

static const char DEFAULT_SCHEMA[] =
	"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":30},"
	"\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
	"\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":4},"
	"\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
	"\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\"]}},"
	"\"required\":[\"name\",\"age\",\"tags\",\"address\"]}";
static const char DEFAULT_EBNF[] =
	"root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= factor ((\"*\" | \"/\") factor)*\n"
	"factor ::= [0-9]+ | \"(\" expr \")\"\n";

/* Synthetic byte-level vocabulary: every byte, then random pieces. */
static int synth_vocab(int n, uint64_t seed, grammar_vocab **out, char *err, size_t errlen)
{
	static const char alpha[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
				    " {}[]\":,.-_";
	char **toks = calloc((size_t)n, sizeof *toks);
	size_t *lens = calloc((size_t)n, sizeof *lens);
	if (!toks || !lens)
		return SL_ENOMEM;
	for (int i = 0; i < n - 1; i++) {
		int len = i < 256 ? 1 : 1 + (int)(sl_splitmix64(&seed) % 8);
		toks[i] = malloc((size_t)len + 1);
		for (int k = 0; k < len; k++)
			toks[i][k] = i < 256 ? (char)i : alpha[sl_splitmix64(&seed) % (sizeof alpha - 1)];
		lens[i] = (size_t)len;
	}
	int32_t stop = n - 1; /* the last id: EOS, never a piece */
	toks[stop] = strdup("<eos>");
	lens[stop] = 5;
	int rc = grammar_vocab_create((const char *const *)toks, lens, n, n, GRAMMAR_VOCAB_RAW, &stop,
				      1, out, err, errlen);
	for (int i = 0; i < n; i++)
		free(toks[i]);
	free(toks);
	free(lens);
	return rc;
}

/* A tokenizer's vocabulary (its special tokens never allowed, its EOS and
 * chat turn ends the stop ids); with want > its size, grown to want by
 * pieces that join two of its tokens: a vocabulary of that size whose
 * pieces look like a real one's (Llama 3's 128k from SmolLM2's 49k). */
static int real_vocab(const char *path, int want, uint64_t seed, grammar_vocab **out, char *err,
		      size_t errlen)
{
	text_tok *t = NULL;
	TRY(text_tok_load(path, &t, err, errlen));
	int n = text_tok_vocab_size(t), total = want > n ? want : n;
	char **toks = calloc((size_t)total, sizeof *toks);
	size_t *lens = calloc((size_t)total, sizeof *lens);
	int rc = toks && lens ? SL_OK : SL_ENOMEM;
	for (int i = 0; !rc && i < n; i++) {
		const char *s = text_tok_id_to_token(t, i);
		if (s && !text_tok_is_special(t, i))
			toks[i] = strdup(s), lens[i] = strlen(s);
	}
	for (int i = n; !rc && i < total; i++) {
		const char *a = NULL, *b = NULL;
		while (!a || !b) {
			a = toks[sl_splitmix64(&seed) % (uint64_t)n];
			b = toks[sl_splitmix64(&seed) % (uint64_t)n];
		}
		lens[i] = strlen(a) + strlen(b);
		if ((toks[i] = malloc(lens[i] + 1)))
			snprintf(toks[i], lens[i] + 1, "%s%s", a, b);
	}
	int32_t stop[3] = {text_tok_eos_id(t), text_tok_token_to_id(t, "<|im_end|>"),
			   text_tok_token_to_id(t, "<|eot_id|>")};
	grammar_vocab_type type = text_tok_token_to_id(t, "<0x0A>") >= 0 ? GRAMMAR_VOCAB_BYTE_FALLBACK
				  : text_tok_token_to_id(t, "\xc4\x8a") >= 0 ? GRAMMAR_VOCAB_BYTE_LEVEL
									     : GRAMMAR_VOCAB_RAW;
	if (!rc)
		rc = grammar_vocab_create((const char *const *)toks, lens, total, total, type, stop, 3,
					  out, err, errlen);
	for (int i = 0; toks && i < total; i++)
		free(toks[i]);
	free(toks);
	free(lens);
	text_tok_destroy(t);
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int allowed(const uint32_t *m, int id) { return (m[id / 32] >> (id % 32)) & 1; }

/* Walk n_tokens through constraint; per-token fill and accept times. */
static void bench_one(grammar_compiler *c, int vocab, sl_constraint_kind kind, const char *name,
		      const char *text, size_t len, int n_tokens, uint64_t seed)
{
	char err[SL_ERRLEN];
	grammar_compiled *g = NULL;
	double t0 = sl_now();
	if (grammar_compile(c, kind, text, len, &g, err, sizeof err)) {
		printf("%-28s compile failed: %s\n", name, err);
		return;
	}
	double compile_ms = 1e3 * (sl_now() - t0);
	int words = grammar_mask_words(vocab);
	uint32_t *mask = malloc(sizeof(uint32_t) * words);
	int32_t *cand = malloc(sizeof(int32_t) * vocab);
	double *fill = malloc(sizeof(double) * n_tokens), accept_s = 0;
	grammar_matcher *m = NULL;
	int walks = 0, step = 0;
	for (int t = 0; t < n_tokens; t++) {
		if (!m || grammar_matcher_is_terminated(m)) {
			grammar_matcher_destroy(m);
			if (grammar_matcher_create(g, &m, err, sizeof err))
				break;
			walks++, step = 0;
		}
		double a = sl_now();
		grammar_matcher_fill_mask(m, mask, words);
		fill[t] = sl_now() - a;
		int nc = 0, pick = -1;
		for (int id = 0; id < vocab; id++)
			if (allowed(mask, id))
				cand[nc++] = id;
		for (int i = 0; i < nc && step > 24; i++) /* prefer ending what is open */
			if (cand[i] == vocab - 1 || pick < 0)
				pick = cand[i];
		if (pick < 0 || step <= 24)
			pick = nc ? cand[sl_splitmix64(&seed) % (uint64_t)nc] : 0;
		a = sl_now();
		grammar_matcher_accept(m, pick);
		accept_s += sl_now() - a;
		step++;
	}
	qsort(fill, (size_t)n_tokens, sizeof *fill, cmp_double);
	double sum = 0;
	for (int t = 0; t < n_tokens; t++)
		sum += fill[t];
	printf("%-28s compile %8.1f ms  mask mean %7.1f us  p50 %7.1f us  p99 %7.1f us  max %8.1f us"
	       "  accept mean %5.1f us  (%d tokens, %d walks)\n",
	       name, compile_ms, 1e6 * sum / n_tokens, 1e6 * fill[n_tokens / 2],
	       1e6 * fill[(int)(0.99 * (n_tokens - 1))], 1e6 * fill[n_tokens - 1],
	       1e6 * accept_s / n_tokens, n_tokens, walks);
	grammar_matcher_destroy(m);
	grammar_compiled_destroy(g);
	free(mask);
	free(cand);
	free(fill);
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline-bench-grammar"))
		return 0;
	const char *tokenizer = NULL;
	int vocab = 0, n_tokens = 2000;
	uint64_t seed = 1;
	char err[SL_ERRLEN];
	int first = argc;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
			tokenizer = argv[++i];
		else if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
			vocab = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
			n_tokens = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 0);
		else if (first == argc)
			first = i;
	}
	if ((!tokenizer && vocab <= 256) || n_tokens < 1) {
		fprintf(stderr, "usage: %s [--tokenizer FILE] [--vocab N>256] [--tokens N] [--seed S] "
			"[SCHEMA.json | --ebnf FILE]...\n", argv[0]);
		return 2;
	}
	grammar_vocab *v = NULL;
	int rc;
	double t0 = sl_now();
	if (tokenizer)
		rc = real_vocab(tokenizer, vocab, seed, &v, err, sizeof err);
	else
		rc = synth_vocab(vocab, seed, &v, err, sizeof err);
	if (rc) {
		fprintf(stderr, "vocabulary: %s\n", err);
		return 1;
	}
	vocab = grammar_vocab_size(v);
	grammar_compiler *c = NULL;
	if (grammar_compiler_create(v, 4, 0, &c, err, sizeof err)) { /* no cache: compile times */
		fprintf(stderr, "compiler: %s\n", err);
		return 1;
	}
	printf("vocabulary: %d tokens (%s), ready in %.0f ms\n", vocab, tokenizer ? tokenizer : "synthetic",
	       1e3 * (sl_now() - t0));
	if (first == argc) {
		bench_one(c, vocab, SL_CONSTRAINT_JSON_SCHEMA, "json schema (built in)", DEFAULT_SCHEMA,
			  strlen(DEFAULT_SCHEMA), n_tokens, seed);
		bench_one(c, vocab, SL_CONSTRAINT_EBNF, "ebnf arithmetic (built in)", DEFAULT_EBNF,
			  strlen(DEFAULT_EBNF), n_tokens, seed);
		bench_one(c, vocab, SL_CONSTRAINT_JSON, "any json object", NULL, 0, n_tokens, seed);
	}
	for (int i = first; i < argc; i++) {
		if (argv[i][0] == '-' && strcmp(argv[i], "--ebnf")) {
			i++; /* an option and its value */
			continue;
		}
		int ebnf = !strcmp(argv[i], "--ebnf");
		if (ebnf && ++i >= argc)
			break;
		char *text = NULL;
		size_t len = 0;
		if (sl_read_file(argv[i], &text, &len, err, sizeof err)) {
			printf("%s: %s\n", argv[i], err);
			continue;
		}
		const char *base = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
		bench_one(c, vocab, ebnf ? SL_CONSTRAINT_EBNF : SL_CONSTRAINT_JSON_SCHEMA, base, text, len,
			  n_tokens, seed);
		free(text);
	}
	grammar_compiler_destroy(c);
	grammar_vocab_destroy(v);
	return 0;
}
