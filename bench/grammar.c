/*
 * grammar.c — shardline-bench-grammar: what constrained decoding costs the
 * host per token (issue 37): the time to fill one sequence's token mask
 * (grammar_matcher_fill_mask) and to take the token, over a walk through
 * each constraint, on a real vocabulary (a tokenizer file: SmolLM2's 49k)
 * or Llama 3's 128k vocabulary from its tiktoken file (--tiktoken
 * tokenizer.model: base64 piece and rank a line, as Meta's llama-models
 * wheel ships it; docs/benchmarks.md says how to get it), or a synthetic
 * one of --vocab N tokens (random pieces of 1 to 8 characters, harder on
 * the mask cache than a real vocabulary), or a real one grown to --vocab N
 * by joining pairs of its tokens (--tokenizer SmolLM2 --vocab 128256: the
 * old stand-in for Llama 3, far harder than the real one: a joined pair
 * often holds a quote or brace mid-piece, which inside a JSON string the
 * mask cache cannot decide ahead). Also each constraint's compile time
 * and its worst uncertain count (grammar_compiled_worst_uncertain: what
 * the node's slow-grammar guard refuses over 90% of the vocabulary; the
 * bench compiles without that limit, and marks what the node would refuse).
 * Prints numbers; asserts nothing.
 *
 *   shardline-bench-grammar [--tokenizer FILE | --tiktoken FILE] [--vocab N]
 *                           [--tokens N] [--seed S] [--slow K]
 *                           SCHEMA.json... [--ebnf FILE]...
 *
 * The walk takes a random allowed token each step for 24 steps, as a
 * sampler would, then heads for the end: a stop token when allowed, else
 * a closing quote, brace or bracket, else the lowest allowed id; a walk
 * that ends starts over. --slow K prints each constraint's K slowest
 * positions with the text before them (what kind of position is slow).
 * Without constraint files: a JSON schema and an EBNF grammar of its own.
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

/* The vocabulary as the bench built it: its pieces (the walk's closing
 * pieces, the slow positions' text) and its stop ids. */
struct bench_vocab {
	char **toks;
	size_t *lens;
	int n;
	int32_t stop[3];
	int n_stop;
	grammar_vocab_type type;
	int grown_from; /* the tokenizer's own size, when grown by joined pairs */
};

static void bench_vocab_free(struct bench_vocab *bv)
{
	for (int i = 0; bv->toks && i < bv->n; i++)
		free(bv->toks[i]);
	free(bv->toks);
	free(bv->lens);
}

static int bench_vocab_alloc(struct bench_vocab *bv, int n)
{
	bv->n = n;
	bv->toks = calloc((size_t)n, sizeof *bv->toks);
	bv->lens = calloc((size_t)n, sizeof *bv->lens);
	return bv->toks && bv->lens ? SL_OK : SL_ENOMEM;
}

/* Synthetic raw vocabulary: every byte, then random pieces. */
static int synth_vocab(int n, uint64_t seed, struct bench_vocab *bv)
{
	static const char alpha[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
				    " {}[]\":,.-_";
	TRY(bench_vocab_alloc(bv, n));
	for (int i = 0; i < n - 1; i++) {
		int len = i < 256 ? 1 : 1 + (int)(sl_splitmix64(&seed) % 8);
		if (!(bv->toks[i] = malloc((size_t)len + 1)))
			return SL_ENOMEM;
		for (int k = 0; k < len; k++)
			bv->toks[i][k] = i < 256 ? (char)i : alpha[sl_splitmix64(&seed) % (sizeof alpha - 1)];
		bv->toks[i][len] = 0;
		bv->lens[i] = (size_t)len;
	}
	bv->stop[0] = n - 1; /* the last id: EOS, never a piece */
	bv->n_stop = 1;
	bv->toks[n - 1] = strdup("<eos>");
	bv->lens[n - 1] = 5;
	bv->type = GRAMMAR_VOCAB_RAW;
	return SL_OK;
}

/* A tokenizer's vocabulary (its special tokens never allowed, its EOS and
 * chat turn ends the stop ids); with want > its size, grown to want by
 * pieces that join two of its tokens. */
static int real_vocab(const char *path, int want, uint64_t seed, struct bench_vocab *bv,
		      char *err, size_t errlen)
{
	text_tok *t = NULL;
	TRY(text_tok_load(path, &t, err, errlen));
	int n = text_tok_vocab_size(t), total = want > n ? want : n;
	int rc = bench_vocab_alloc(bv, total);
	bv->grown_from = total > n ? n : 0;
	for (int i = 0; !rc && i < n; i++) {
		const char *s = text_tok_id_to_token(t, i);
		if (s && !text_tok_is_special(t, i))
			bv->toks[i] = strdup(s), bv->lens[i] = strlen(s);
	}
	for (int i = n; !rc && i < total; i++) {
		const char *a = NULL, *b = NULL;
		while (!a || !b) {
			a = bv->toks[sl_splitmix64(&seed) % (uint64_t)n];
			b = bv->toks[sl_splitmix64(&seed) % (uint64_t)n];
		}
		bv->lens[i] = strlen(a) + strlen(b);
		if ((bv->toks[i] = malloc(bv->lens[i] + 1)))
			snprintf(bv->toks[i], bv->lens[i] + 1, "%s%s", a, b);
	}
	int32_t stop[3] = {text_tok_eos_id(t), text_tok_token_to_id(t, "<|im_end|>"),
			   text_tok_token_to_id(t, "<|eot_id|>")};
	for (int k = 0; k < 3; k++)
		if (stop[k] >= 0)
			bv->stop[bv->n_stop++] = stop[k];
	bv->type = text_tok_token_to_id(t, "<0x0A>") >= 0 ? GRAMMAR_VOCAB_BYTE_FALLBACK
		   : text_tok_token_to_id(t, "\xc4\x8a") >= 0 ? GRAMMAR_VOCAB_BYTE_LEVEL
								 : GRAMMAR_VOCAB_RAW;
	text_tok_destroy(t);
	return rc;
}

static int b64_value(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Base64 s[0, n) into out (n / 4 * 3 bytes at most); its length, or -1. */
static long b64_decode(const char *s, size_t n, char *out)
{
	long len = 0;
	unsigned bits = 0;
	int have = 0;
	for (size_t i = 0; i < n && s[i] != '='; i++) {
		int v = b64_value((unsigned char)s[i]);
		if (v < 0)
			return -1;
		bits = (bits << 6) | (unsigned)v;
		if ((have += 6) >= 8) {
			have -= 8;
			out[len++] = (char)((bits >> have) & 0xff);
		}
	}
	return len;
}

/* Llama 3's tiktoken ranks file: "BASE64 RANK" a line, the piece's raw
 * bytes (so the vocabulary is RAW: nothing for xgrammar to decode; a Llama
 * 3 GGUF stores the same pieces byte-level encoded, which xgrammar decodes
 * to these bytes). Ranks [0, n), then Llama 3's 256 special ids (never
 * allowed), of which <|end_of_text|> (n + 1), <|eom_id|> (n + 8) and
 * <|eot_id|> (n + 9) end a sequence (llama_models/llama3/tokenizer.py). */
static int tiktoken_vocab(const char *path, struct bench_vocab *bv, char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0;
	TRY(sl_read_file(path, &text, &len, err, errlen));
	int n = 0, rc = SL_OK;
	for (size_t i = 0; i < len; i++)
		n += text[i] == '\n' || (i + 1 == len && text[i] != '\n');
	if ((rc = bench_vocab_alloc(bv, n + 256))) {
		free(text);
		return rc;
	}
	int line = 0;
	for (char *p = text, *end = text + len; !rc && p < end; line++) {
		char *nl = memchr(p, '\n', (size_t)(end - p)), *sp = memchr(p, ' ', (size_t)(end - p));
		if (!nl)
			nl = end;
		long rank = sp && sp < nl ? strtol(sp + 1, NULL, 10) : -1;
		char *piece = malloc((size_t)(nl - p) + 1);
		long plen = piece && rank >= 0 ? b64_decode(p, (size_t)(sp - p), piece) : -1;
		if (rank < 0 || rank >= n || plen <= 0 || bv->toks[rank]) {
			free(piece);
			rc = sl_errf(err, errlen, SL_EINVAL, "%s:%d: not a tiktoken line (base64 rank)",
				     path, line + 1);
			break;
		}
		piece[plen] = 0;
		bv->toks[rank] = piece, bv->lens[rank] = (size_t)plen;
		p = nl + 1;
	}
	free(text);
	bv->stop[0] = n + 1, bv->stop[1] = n + 8, bv->stop[2] = n + 9;
	bv->n_stop = 3;
	bv->type = GRAMMAR_VOCAB_RAW;
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int allowed(const uint32_t *m, int id) { return (m[id / 32] >> (id % 32)) & 1; }

/* Where the walk heads once it has taken enough random steps: a stop
 * token, else a piece that closes a string, object or array. */
static int closing_rank(const struct bench_vocab *bv, int id)
{
	for (int k = 0; k < bv->n_stop; k++)
		if (bv->stop[k] == id)
			return 2;
	const char *s = id < bv->n ? bv->toks[id] : NULL;
	return s && bv->lens[id] == 1 && strchr("\"}])", s[0]) ? 1 : 0;
}

/* The text a position follows: the last bytes the walk took, for --slow. */
#define CTX 40
struct slow_pos {
	double s;
	char ctx[CTX + 1];
};

static int cmp_slow(const void *a, const void *b)
{
	double x = ((const struct slow_pos *)a)->s, y = ((const struct slow_pos *)b)->s;
	return x > y ? -1 : x < y;
}

static void push_ctx(char *ctx, const char *piece, size_t len)
{
	size_t have = strlen(ctx);
	if (len >= CTX) {
		memcpy(ctx, piece + len - CTX, CTX);
		ctx[CTX] = 0;
		return;
	}
	if (have + len > CTX) {
		memmove(ctx, ctx + have + len - CTX, CTX - len);
		have = CTX - len;
	}
	memcpy(ctx + have, piece, len);
	ctx[have + len] = 0;
	for (size_t i = have; i < have + len; i++) /* one line per position */
		if (ctx[i] == '\n' || ctx[i] == '\r' || ctx[i] == '\t')
			ctx[i] = ' ';
}

/* Walk n_tokens through constraint; per-token fill and accept times. */
static void bench_one(grammar_compiler *c, const struct bench_vocab *bv, int vocab,
		      sl_constraint_kind kind, const char *name, const char *text, size_t len,
		      int n_tokens, int n_slow, uint64_t seed)
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
	struct slow_pos *pos = n_slow > 0 ? calloc((size_t)n_tokens, sizeof *pos) : NULL;
	char ctx[CTX + 1] = "";
	grammar_matcher *m = NULL;
	int walks = 0, step = 0;
	for (int t = 0; t < n_tokens; t++) {
		if (!m || grammar_matcher_is_terminated(m)) {
			grammar_matcher_destroy(m);
			if (grammar_matcher_create(g, &m, err, sizeof err))
				break;
			walks++, step = 0;
			ctx[0] = 0;
		}
		double a = sl_now();
		grammar_matcher_fill_mask(m, mask, words);
		fill[t] = sl_now() - a;
		if (pos) {
			pos[t].s = fill[t];
			memcpy(pos[t].ctx, ctx, sizeof ctx);
		}
		int nc = 0, pick = -1, best = -1;
		for (int id = 0; id < vocab; id++)
			if (allowed(mask, id))
				cand[nc++] = id;
		for (int i = 0; i < nc && step > 24; i++) { /* end what is open */
			int r = closing_rank(bv, cand[i]);
			if (r > best)
				best = r, pick = cand[i];
		}
		if (pick < 0)
			pick = nc ? cand[sl_splitmix64(&seed) % (uint64_t)nc] : 0;
		a = sl_now();
		grammar_matcher_accept(m, pick);
		accept_s += sl_now() - a;
		if (pick < bv->n && bv->toks[pick])
			push_ctx(ctx, bv->toks[pick], bv->lens[pick]);
		step++;
	}
	qsort(fill, (size_t)n_tokens, sizeof *fill, cmp_double);
	double sum = 0;
	for (int t = 0; t < n_tokens; t++)
		sum += fill[t];
	long worst = grammar_compiled_worst_uncertain(g);
	printf("%-28s compile %8.1f ms  mask mean %7.1f us  p50 %7.1f us  p99 %7.1f us  max %8.1f us"
	       "  accept mean %5.1f us  (%d tokens, %d walks)  worst uncertain %ld (%.1f%%)%s\n",
	       name, compile_ms, 1e6 * sum / n_tokens, 1e6 * fill[n_tokens / 2],
	       1e6 * fill[(int)(0.99 * (n_tokens - 1))], 1e6 * fill[n_tokens - 1],
	       1e6 * accept_s / n_tokens, n_tokens, walks, worst, 100.0 * worst / vocab,
	       (long)vocab * GRAMMAR_MAX_UNCERTAIN_PCT / 100 < worst
		       ? " (over the node's default limit: refused)" : "");
	if (pos) {
		qsort(pos, (size_t)n_tokens, sizeof *pos, cmp_slow);
		for (int i = 0; i < n_slow && i < n_tokens; i++)
			printf("    slow %8.1f us after ...%s|\n", 1e6 * pos[i].s, pos[i].ctx);
	}
	grammar_matcher_destroy(m);
	grammar_compiled_destroy(g);
	free(mask);
	free(cand);
	free(fill);
	free(pos);
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline-bench-grammar"))
		return 0;
	const char *tokenizer = NULL, *tiktoken = NULL;
	int vocab = 0, n_tokens = 2000, n_slow = 0;
	uint64_t seed = 1;
	char err[SL_ERRLEN];
	int first = argc;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
			tokenizer = argv[++i];
		else if (!strcmp(argv[i], "--tiktoken") && i + 1 < argc)
			tiktoken = argv[++i];
		else if (!strcmp(argv[i], "--slow") && i + 1 < argc)
			n_slow = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
			vocab = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
			n_tokens = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 0);
		else if (first == argc)
			first = i;
	}
	if ((!tokenizer && !tiktoken && vocab <= 256) || (tokenizer && tiktoken) || n_tokens < 1) {
		fprintf(stderr, "usage: %s [--tokenizer FILE [--vocab N] | --tiktoken FILE | --vocab N>256] "
			"[--tokens N] [--seed S] [--slow K] [SCHEMA.json | --ebnf FILE]...\n", argv[0]);
		return 2;
	}
	struct bench_vocab bv = {0};
	grammar_vocab *v = NULL;
	int rc;
	double t0 = sl_now();
	if (tiktoken)
		rc = tiktoken_vocab(tiktoken, &bv, err, sizeof err);
	else if (tokenizer)
		rc = real_vocab(tokenizer, vocab, seed, &bv, err, sizeof err);
	else
		rc = synth_vocab(vocab, seed, &bv) ? sl_errf(err, sizeof err, SL_ENOMEM, "out of memory")
						   : SL_OK;
	if (!rc)
		rc = grammar_vocab_create((const char *const *)bv.toks, bv.lens, bv.n, bv.n, bv.type,
					  bv.stop, bv.n_stop, &v, err, sizeof err);
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
	/* the node refuses what is over its limit; here it is measured */
	grammar_compiler_set_max_uncertain(c, 0);
	printf("vocabulary: %d tokens (%s%s), ready in %.0f ms\n", vocab,
	       tiktoken ? tiktoken : tokenizer ? tokenizer : "synthetic",
	       bv.grown_from ? ", grown by joined pairs" : "", 1e3 * (sl_now() - t0));
	if (first == argc) {
		bench_one(c, &bv, vocab, SL_CONSTRAINT_JSON_SCHEMA, "json schema (built in)",
			  DEFAULT_SCHEMA, strlen(DEFAULT_SCHEMA), n_tokens, n_slow, seed);
		bench_one(c, &bv, vocab, SL_CONSTRAINT_EBNF, "ebnf arithmetic (built in)", DEFAULT_EBNF,
			  strlen(DEFAULT_EBNF), n_tokens, n_slow, seed);
		bench_one(c, &bv, vocab, SL_CONSTRAINT_JSON, "any json object", NULL, 0, n_tokens, n_slow,
			  seed);
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
		bench_one(c, &bv, vocab, ebnf ? SL_CONSTRAINT_EBNF : SL_CONSTRAINT_JSON_SCHEMA, base, text,
			  len, n_tokens, n_slow, seed);
		free(text);
	}
	grammar_compiler_destroy(c);
	grammar_vocab_destroy(v);
	bench_vocab_free(&bv);
	return 0;
}
