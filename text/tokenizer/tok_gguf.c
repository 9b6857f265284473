/*
 * tok_gguf.c -- a GGUF file's tokenizer as the equivalent Hugging Face
 * tokenizer.json, so the coordinator serves a .gguf through the same
 * loader (and `shardline-tok FILE.gguf export` can hand it to HF).
 *
 * Owner: the tokenizer (text/tokenizer/).  Callers: text_tok_load (tokenizer.c),
 * tools/tok.c (export), coordinator/model_meta.c (is it a GGUF?).
 *
 * The mapping follows what llama.cpp means by each key, laid out the way
 * the models' own tokenizer.json files are:
 *
 *   tokenizer.ggml.model "gpt2": byte-level BPE.  vocab = .tokens by id,
 *     merges = .merges ("a b", split at the first space after the first
 *     byte, as llama.cpp does); ByteLevel decoder.  .pre picks the
 *     pre-tokenizer as llama.cpp names them:
 *       default        llama.cpp's default list of four regexes, as Splits
 *       llama-bpe (llama3, llama-v3)  Llama 3's regex; ignore_merges
 *       gpt-2          ByteLevel(use_regex=true), GPT-2's own regex
 *       smollm         Digits(individual_digits) + ByteLevel(use_regex) --
 *                      what SmolLM2's tokenizer.json holds; llama.cpp's
 *                      "\p{N}" then GPT-2 regex is the same split
 *       qwen2 (deepseek-r1-qwen)  NFC + Qwen2's regex (Qwen2's file has
 *                      the NFC normalizer; llama.cpp skips it)
 *       deepseek-llm   llama.cpp's six regexes, as Splits
 *     anything else is refused with the list.
 *   tokenizer.ggml.model "llama": SentencePiece BPE, Llama 2's layout:
 *     Prepend("\u2581") + Replace(" ", "\u2581") when add_space_prefix
 *     (default true), byte fallback, fused unk, Replace/ByteFallback/
 *     Fuse/Strip decoder.  GGUF stores scores, not merges: merges are
 *     derived from the scores exactly as transformers' converter derives
 *     them from a tokenizer.model (every split of a piece into two
 *     vocabulary pieces, by the piece's score, high first).
 * Token types: control (3) and unknown (2) become special added tokens,
 * user-defined (4) plain added tokens, all matched in the raw text.
 * add_bos_token / add_eos_token (llama default: BOS yes; gpt2: BOS only
 * for llama-bpe) become a TemplateProcessing post-processor.
 */
#include "text/tokenizer/tok_int.h"
#include "common/checks.h"
#include "formats/gguf.h"
#include "common/sl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The patterns, as the tokenizer.json files (and llama.cpp) spell them. */
#define LLAMA3_PATTERN \
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| " \
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_PATTERN \
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| " \
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char *const k_default_re[] = {
	"[\\p{P}\\$\\+<=>\\^~\\|]+",
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	"\\p{N}+",
	"[0-9][0-9][0-9]",
	NULL,
};

static const char *const k_llama3_re[] = {LLAMA3_PATTERN, NULL};
static const char *const k_qwen2_re[] = {QWEN2_PATTERN, NULL};

/* llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM; escapes keep the
 * compatibility characters (U+2126 OHM, U+212A KELVIN) from normalizing. */
static const char *const k_deepseek_re[] = {
	"[\r\n]",
	"\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF"
	"\u01C4-\u0293\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F"
	"\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-"
	"\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
	"\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-"
	"\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-"
	"\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-"
	"\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107"
	"\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-"
	"\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B"
	"\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-"
	"\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17"
	"\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3"
	"\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2"
	"\U000118A0-\U000118DF\U0001E900-\U0001E943]+",
	"\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+",
	"\\s+$",
	"[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
	"\\p{N}+",
	NULL,
};

enum { PRE_DEFAULT, PRE_LLAMA3, PRE_GPT2, PRE_SMOLLM, PRE_QWEN2, PRE_DEEPSEEK };
static const struct {
	const char *name;
	int kind;
} k_pre_names[] = {
	{"default", PRE_DEFAULT},   {"llama-bpe", PRE_LLAMA3},  {"llama3", PRE_LLAMA3},
	{"llama-v3", PRE_LLAMA3},   {"gpt-2", PRE_GPT2},        {"smollm", PRE_SMOLLM},
	{"qwen2", PRE_QWEN2},       {"deepseek-r1-qwen", PRE_QWEN2},
	{"deepseek-llm", PRE_DEEPSEEK},
};

enum { TYPE_NORMAL = 1, TYPE_UNKNOWN = 2, TYPE_CONTROL = 3, TYPE_USER = 4 };

int text_tok_is_gguf(const char *path)
{
	char magic[4];
	FILE *f = path ? fopen(path, "rb") : NULL;
	int yes = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
	if (f)
		fclose(f);
	return yes;
}

/* What the builder reads once from the file. */
typedef struct {
	sl_gguf *g;
	const char *path;
	uint64_t n;            /* tokens */
	char **tok;            /* [n] NUL-terminated copies */
	int *type;             /* [n] */
	int64_t bos, eos, unk; /* -1: absent */
	int add_bos, add_eos, add_space;
	char pre[64];
	text_tok map;         /* only its arena and text_map: spelling -> first id */
} gg_vocab;

static void vocab_free(gg_vocab *v)
{
	for (uint64_t i = 0; v->tok && i < v->n; i++)
		free(v->tok[i]);
	free(v->tok);
	free(v->type);
	free(v->map.arena);
	free(v->map.text_map.slots);
}

static char *str_dup(sl_gguf_str s)
{
	char *p = malloc(s.n + 1);
	if (p) {
		memcpy(p, s.p, s.n);
		p[s.n] = 0;
	}
	return p;
}

/* An optional integer key; -1 when absent or out of [0, n). */
static int64_t opt_id(const gg_vocab *v, const char *key)
{
	int64_t x;
	char e[SL_ERRLEN];
	if (sl_gguf_get_i64(v->g, key, &x, e, sizeof e) || x < 0 || (uint64_t)x >= v->n)
		return -1;
	return x;
}

static int opt_bool(const gg_vocab *v, const char *key, int dflt)
{
	int x;
	char e[SL_ERRLEN];
	return sl_gguf_get_bool(v->g, key, &x, e, sizeof e) ? dflt : x;
}

static int read_vocab(gg_vocab *v, int is_llama, char *err, size_t errlen)
{
	sl_gguf_vtype elem;
	uint64_t nt;
	sl_gguf_str s;
	char e[SL_ERRLEN];

	TRY(sl_gguf_get_arr(v->g, "tokenizer.ggml.tokens", &elem, &v->n, err, errlen));
	if (elem != SL_GGUF_STRING || v->n == 0 || v->n > MAX_TOKEN_ID)
		return sl_errf(err, errlen, SL_EINVAL, "%s: tokenizer.ggml.tokens must be 1 to %d "
			       "strings", v->path, MAX_TOKEN_ID);
	v->tok = calloc(v->n, sizeof *v->tok);
	v->type = malloc(v->n * sizeof *v->type);
	if (!v->tok || !v->type)
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", v->path);
	int have_types = sl_gguf_get_arr(v->g, "tokenizer.ggml.token_type", &elem, &nt, e,
					 sizeof e) == 0;
	if (have_types && (elem == SL_GGUF_STRING || elem == SL_GGUF_ARRAY || nt != v->n))
		return sl_errf(err, errlen, SL_EINVAL, "%s: tokenizer.ggml.token_type must hold "
			       "%llu integers", v->path, (unsigned long long)v->n);
	for (uint64_t i = 0; i < v->n; i++) {
		int64_t ty = TYPE_NORMAL;
		if (sl_gguf_arr_str(v->g, "tokenizer.ggml.tokens", i, &s) || !(v->tok[i] = str_dup(s)))
			return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", v->path);
		if (strlen(v->tok[i]) != s.n)
			return sl_errf(err, errlen, SL_EINVAL, "%s: tokenizer.ggml.tokens[%llu] "
				       "holds a NUL byte", v->path, (unsigned long long)i);
		if (have_types && sl_gguf_arr_i64(v->g, "tokenizer.ggml.token_type", i, &ty))
			ty = TYPE_NORMAL;
		v->type[i] = (int)ty;
	}
	TRY(sm_init(&v->map.text_map, v->n));
	for (uint64_t i = 0; i < v->n; i++) {
		uint32_t off;
		size_t len = strlen(v->tok[i]);
		if (sm_get(&v->map.text_map, v->map.arena, v->tok[i], len) >= 0)
			continue;
		TRY(tk_arena_put(&v->map, v->tok[i], len, &off));
		sm_put(&v->map.text_map, v->map.arena, off, (uint32_t)len, (int32_t)i);
	}
	v->bos = opt_id(v, "tokenizer.ggml.bos_token_id");
	v->eos = opt_id(v, "tokenizer.ggml.eos_token_id");
	v->unk = opt_id(v, "tokenizer.ggml.unknown_token_id");
	if (is_llama && v->unk < 0)
		v->unk = 0; /* llama.cpp's SentencePiece default */
	v->add_space = opt_bool(v, "tokenizer.ggml.add_space_prefix", 1);
	v->add_eos = opt_bool(v, "tokenizer.ggml.add_eos_token", 0);
	snprintf(v->pre, sizeof v->pre, "default");
	if (sl_gguf_get_str(v->g, "tokenizer.ggml.pre", &s, e, sizeof e) == 0)
		snprintf(v->pre, sizeof v->pre, "%.*s", (int)(s.n < 63 ? s.n : 63), s.p);
	v->add_bos = opt_bool(v, "tokenizer.ggml.add_bos_token",
			      is_llama || strcmp(v->pre, "llama-bpe") == 0 ||
				      strcmp(v->pre, "llama3") == 0);
	return 0;
}

/* ---- JSON pieces ---- */

static cJSON *obj_type(const char *type)
{
	cJSON *o = cJSON_CreateObject();
	if (o)
		cJSON_AddStringToObject(o, "type", type);
	return o;
}

static cJSON *split_step(const char *regex)
{
	cJSON *o = obj_type("Split"), *p = cJSON_CreateObject();
	if (!o || !p) {
		cJSON_Delete(o);
		cJSON_Delete(p);
		return NULL;
	}
	cJSON_AddStringToObject(p, "Regex", regex);
	cJSON_AddItemToObject(o, "pattern", p);
	cJSON_AddStringToObject(o, "behavior", "Isolated");
	cJSON_AddBoolToObject(o, "invert", 0);
	return o;
}

static cJSON *byte_level_step(int use_regex)
{
	cJSON *o = obj_type("ByteLevel");
	if (o) {
		cJSON_AddBoolToObject(o, "add_prefix_space", 0);
		cJSON_AddBoolToObject(o, "trim_offsets", 1);
		cJSON_AddBoolToObject(o, "use_regex", use_regex);
	}
	return o;
}

static cJSON *pre_tokenizer(int kind)
{
	cJSON *seq = obj_type("Sequence"), *arr = cJSON_CreateArray();
	const char *const *re = kind == PRE_DEFAULT ? k_default_re : kind == PRE_LLAMA3 ? k_llama3_re
			      : kind == PRE_QWEN2 ? k_qwen2_re : kind == PRE_DEEPSEEK ? k_deepseek_re
									: NULL;
	if (!seq || !arr) {
		cJSON_Delete(seq);
		cJSON_Delete(arr);
		return NULL;
	}
	cJSON_AddItemToObject(seq, "pretokenizers", arr);
	if (kind == PRE_SMOLLM) {
		cJSON *d = obj_type("Digits");
		if (d)
			cJSON_AddBoolToObject(d, "individual_digits", 1);
		cJSON_AddItemToArray(arr, d);
	}
	for (; re && *re; re++)
		cJSON_AddItemToArray(arr, split_step(*re));
	cJSON_AddItemToArray(arr, byte_level_step(kind == PRE_GPT2 || kind == PRE_SMOLLM));
	return seq;
}

/* TemplateProcessing with BOS / EOS around $A (and $B), or NULL. */
static cJSON *template(const gg_vocab *v)
{
	int bos = v->add_bos && v->bos >= 0, eos = v->add_eos && v->eos >= 0;
	if (!bos && !eos)
		return cJSON_CreateNull();
	cJSON *o = obj_type("TemplateProcessing"), *specials = cJSON_CreateObject();
	const char *seqs[2] = {"A", "B"};
	for (int pair = 0; pair < 2; pair++) {
		cJSON *arr = cJSON_CreateArray();
		for (int s = 0; s <= pair; s++) {
			for (int k = 0; k < 3; k++) {
				cJSON *it = cJSON_CreateObject(), *in = cJSON_CreateObject();
				if (k == 1) {
					cJSON_AddStringToObject(in, "id", seqs[s]);
					cJSON_AddNumberToObject(in, "type_id", s);
					cJSON_AddItemToObject(it, "Sequence", in);
				} else if ((k == 0 && bos) || (k == 2 && eos)) {
					cJSON_AddStringToObject(in, "id", v->tok[k == 0 ? v->bos : v->eos]);
					cJSON_AddNumberToObject(in, "type_id", s);
					cJSON_AddItemToObject(it, "SpecialToken", in);
				} else {
					cJSON_Delete(it);
					cJSON_Delete(in);
					continue;
				}
				cJSON_AddItemToArray(arr, it);
			}
		}
		cJSON_AddItemToObject(o, pair ? "pair" : "single", arr);
	}
	for (int k = 0; k < 2; k++) {
		int64_t id = k ? v->eos : v->bos;
		if (!(k ? eos : bos) || cJSON_GetObjectItemCaseSensitive(specials, v->tok[id]))
			continue;
		cJSON *e = cJSON_CreateObject(), *ids = cJSON_CreateArray(), *toks = cJSON_CreateArray();
		cJSON_AddStringToObject(e, "id", v->tok[id]);
		cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)id));
		cJSON_AddItemToArray(toks, cJSON_CreateString(v->tok[id]));
		cJSON_AddItemToObject(e, "ids", ids);
		cJSON_AddItemToObject(e, "tokens", toks);
		cJSON_AddItemToObject(specials, v->tok[id], e);
	}
	cJSON_AddItemToObject(o, "special_tokens", specials);
	return o;
}

static cJSON *added_tokens(const gg_vocab *v)
{
	cJSON *arr = cJSON_CreateArray();
	for (uint64_t i = 0; arr && i < v->n; i++) {
		int ty = v->type[i];
		if (ty != TYPE_CONTROL && ty != TYPE_UNKNOWN && ty != TYPE_USER)
			continue;
		cJSON *a = cJSON_CreateObject();
		cJSON_AddNumberToObject(a, "id", (double)i);
		cJSON_AddStringToObject(a, "content", v->tok[i]);
		cJSON_AddBoolToObject(a, "single_word", 0);
		cJSON_AddBoolToObject(a, "lstrip", 0);
		cJSON_AddBoolToObject(a, "rstrip", 0);
		cJSON_AddBoolToObject(a, "normalized", 0);
		cJSON_AddBoolToObject(a, "special", ty != TYPE_USER);
		cJSON_AddItemToArray(arr, a);
	}
	return arr;
}

/* vocab: every token by id; a repeated spelling keeps its first id (a JSON
 * object cannot hold it twice, and HF would keep only one). */
static cJSON *vocab_object(const gg_vocab *v)
{
	cJSON *o = cJSON_CreateObject();
	for (uint64_t i = 0; o && i < v->n; i++)
		if (sm_get(&v->map.text_map, v->map.arena, v->tok[i], strlen(v->tok[i])) == (int32_t)i)
			cJSON_AddNumberToObject(o, v->tok[i], (double)i);
	return o;
}

static cJSON *pair(const char *a, size_t an, const char *b)
{
	cJSON *p = cJSON_CreateArray();
	char *l = malloc(an + 1);
	if (!p || !l) {
		cJSON_Delete(p);
		free(l);
		return NULL;
	}
	memcpy(l, a, an);
	l[an] = 0;
	cJSON_AddItemToArray(p, cJSON_CreateString(l));
	cJSON_AddItemToArray(p, cJSON_CreateString(b));
	free(l);
	return p;
}

static int gpt2_merges(const gg_vocab *v, cJSON *model, char *err, size_t errlen)
{
	sl_gguf_vtype elem;
	uint64_t n;
	sl_gguf_str s;
	cJSON *arr = cJSON_CreateArray();

	if (!arr)
		return SL_ENOMEM;
	cJSON_AddItemToObject(model, "merges", arr);
	TRY(sl_gguf_get_arr(v->g, "tokenizer.ggml.merges", &elem, &n, err, errlen));
	if (elem != SL_GGUF_STRING)
		return sl_errf(err, errlen, SL_EINVAL, "%s: tokenizer.ggml.merges must be strings",
			       v->path);
	for (uint64_t i = 0; i < n; i++) {
		if (sl_gguf_arr_str(v->g, "tokenizer.ggml.merges", i, &s))
			return SL_EINVAL;
		char *m = str_dup(s);
		if (!m)
			return SL_ENOMEM;
		char *sp = s.n > 1 ? strchr(m + 1, ' ') : NULL;
		if (!sp || strlen(m) != s.n) {
			free(m);
			return sl_errf(err, errlen, SL_EINVAL, "%s: tokenizer.ggml.merges[%llu] is not "
				       "\"a b\"", v->path, (unsigned long long)i);
		}
		cJSON *p = pair(m, (size_t)(sp - m), sp + 1);
		free(m);
		if (!p)
			return SL_ENOMEM;
		cJSON_AddItemToArray(arr, p);
	}
	return 0;
}

/* ---- SentencePiece: merges from scores ---- */

typedef struct {
	float score;
	int32_t piece, l, r;
	uint32_t split;          /* byte offset of the split in the piece */
	uint32_t l_chars, r_chars;
} spm_merge;

static int spm_cmp(const void *pa, const void *pb)
{
	const spm_merge *a = pa, *b = pb;
	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	if (a->l_chars != b->l_chars)
		return a->l_chars > b->l_chars ? -1 : 1;
	if (a->r_chars != b->r_chars)
		return a->r_chars > b->r_chars ? -1 : 1;
	if (a->piece != b->piece)
		return a->piece < b->piece ? -1 : 1;
	if (a->l != b->l)
		return a->l < b->l ? -1 : 1;
	return (a->r > b->r) - (a->r < b->r);
}

/*
 * transformers' generate_merges, which made Llama 2's tokenizer.json: for
 * every piece (by id), every split into a left and a right piece both in
 * the vocabulary, ordered by (left id, right id); then all of them by
 * (score, left length, right length in characters), high first, stable.
 */
static int spm_merges(const gg_vocab *v, cJSON *model, char *err, size_t errlen)
{
	sl_gguf_vtype elem;
	uint64_t ns = 0;
	char e[SL_ERRLEN];
	spm_merge *m = NULL;
	size_t nm = 0, cap = 0;
	int rc = 0;

	int have_scores = sl_gguf_get_arr(v->g, "tokenizer.ggml.scores", &elem, &ns, e, sizeof e) == 0;
	if (have_scores && (elem == SL_GGUF_STRING || elem == SL_GGUF_ARRAY || ns != v->n))
		return sl_errf(err, errlen, SL_EINVAL, "%s: tokenizer.ggml.scores must hold %llu "
			       "numbers", v->path, (unsigned long long)v->n);
	for (uint64_t i = 0; i < v->n && !rc; i++) {
		const char *p = v->tok[i];
		size_t len = strlen(p);
		double score = 0;
		if (have_scores)
			sl_gguf_arr_f64(v->g, "tokenizer.ggml.scores", i, &score);
		uint32_t chars = 0, lc = 0;
		for (size_t k = 0; k < len; k++)
			chars += ((unsigned char)p[k] & 0xC0) != 0x80;
		for (size_t k = 1; k < len && !rc; k++) {
			if (((unsigned char)p[k] & 0xC0) == 0x80)
				continue; /* split between characters only */
			lc++;
			int32_t l = sm_get(&v->map.text_map, v->map.arena, p, k);
			int32_t r = sm_get(&v->map.text_map, v->map.arena, p + k, len - k);
			if (l < 0 || r < 0)
				continue;
			if ((rc = tk_grow((void **)&m, &cap, nm + 1, sizeof *m)))
				break;
			m[nm++] = (spm_merge){(float)score, (int32_t)i, l, r, (uint32_t)k, lc, chars - lc};
		}
	}
	cJSON *arr = rc ? NULL : cJSON_CreateArray();
	if (!rc && !arr)
		rc = SL_ENOMEM;
	if (!rc) {
		if (nm) /* qsort must not get m NULL, even for nothing */
			qsort(m, nm, sizeof *m, spm_cmp);
		cJSON_AddItemToObject(model, "merges", arr);
		for (size_t i = 0; i < nm && !rc; i++) {
			cJSON *p = pair(v->tok[m[i].piece], m[i].split, v->tok[m[i].piece] + m[i].split);
			if (!p)
				rc = SL_ENOMEM;
			else
				cJSON_AddItemToArray(arr, p);
		}
	}
	free(m);
	return rc == SL_ENOMEM ? sl_errf(err, errlen, rc, "%s: out of memory", v->path) : rc;
}

/* ---- the whole file ---- */

static cJSON *replace_step(const char *from, const char *to)
{
	cJSON *o = obj_type("Replace"), *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "String", from);
	cJSON_AddItemToObject(o, "pattern", p);
	cJSON_AddStringToObject(o, "content", to);
	return o;
}

static void spm_layout(const gg_vocab *v, cJSON *root, cJSON *model)
{
	cJSON *dec = obj_type("Sequence"), *steps = cJSON_CreateArray();
	cJSON_AddItemToArray(steps, replace_step("\xE2\x96\x81", " "));
	cJSON_AddItemToArray(steps, obj_type("ByteFallback"));
	cJSON_AddItemToArray(steps, obj_type("Fuse"));
	if (v->add_space) {
		cJSON *strip = obj_type("Strip");
		cJSON_AddStringToObject(strip, "content", " ");
		cJSON_AddNumberToObject(strip, "start", 1);
		cJSON_AddNumberToObject(strip, "stop", 0);
		cJSON_AddItemToArray(steps, strip);
	}
	cJSON_AddItemToObject(dec, "decoders", steps);
	cJSON_AddItemToObject(root, "decoder", dec);
	if (v->add_space) {
		cJSON *norm = obj_type("Sequence"), *ns = cJSON_CreateArray();
		cJSON *pre = obj_type("Prepend");
		cJSON_AddStringToObject(pre, "prepend", "\xE2\x96\x81");
		cJSON_AddItemToArray(ns, pre);
		cJSON_AddItemToArray(ns, replace_step(" ", "\xE2\x96\x81"));
		cJSON_AddItemToObject(norm, "normalizers", ns);
		cJSON_AddItemToObject(root, "normalizer", norm);
	} else {
		cJSON_AddItemToObject(root, "normalizer", replace_step(" ", "\xE2\x96\x81"));
	}
	cJSON_AddNullToObject(root, "pre_tokenizer");
	if (v->unk >= 0)
		cJSON_AddStringToObject(model, "unk_token", v->tok[v->unk]);
	else
		cJSON_AddNullToObject(model, "unk_token");
	cJSON_AddBoolToObject(model, "fuse_unk", 1);
	cJSON_AddBoolToObject(model, "byte_fallback", 1);
	cJSON_AddBoolToObject(model, "ignore_merges", 0);
}

static int bpe_layout(const gg_vocab *v, cJSON *root, cJSON *model, char *err, size_t errlen)
{
	int kind = -1;
	for (size_t i = 0; i < sizeof k_pre_names / sizeof k_pre_names[0]; i++)
		if (strcmp(v->pre, k_pre_names[i].name) == 0)
			kind = k_pre_names[i].kind;
	if (kind < 0)
		return sl_errf(err, errlen, SL_ENOTSUP, "%s: tokenizer.ggml.pre \"%s\" not supported "
			       "(default, llama-bpe, gpt-2, smollm, qwen2, deepseek-llm are)",
			       v->path, v->pre);
	cJSON_AddItemToObject(root, "normalizer",
			      kind == PRE_QWEN2 ? obj_type("NFC") : cJSON_CreateNull());
	cJSON_AddItemToObject(root, "pre_tokenizer", pre_tokenizer(kind));
	cJSON *dec = byte_level_step(1);
	cJSON_ReplaceItemInObject(dec, "add_prefix_space", cJSON_CreateBool(1));
	cJSON_AddItemToObject(root, "decoder", dec);
	cJSON_AddNullToObject(model, "unk_token");
	cJSON_AddBoolToObject(model, "fuse_unk", 0);
	cJSON_AddBoolToObject(model, "byte_fallback", 0);
	cJSON_AddBoolToObject(model, "ignore_merges", kind == PRE_LLAMA3);
	return 0;
}

static int build(gg_vocab *v, cJSON **out, char *err, size_t errlen)
{
	sl_gguf_str s;
	char e[SL_ERRLEN];
	int rc = sl_gguf_get_str(v->g, "tokenizer.ggml.model", &s, e, sizeof e);

	if (rc)
		return sl_errf(err, errlen, rc == SL_ENOTFOUND ? SL_EINVAL : rc,
			       "%s: no tokenizer in this GGUF file (tokenizer.ggml.model missing)",
			       v->path);
	int is_llama = s.n == 5 && memcmp(s.p, "llama", 5) == 0;
	if (!is_llama && !(s.n == 4 && memcmp(s.p, "gpt2", 4) == 0))
		return sl_errf(err, errlen, SL_ENOTSUP, "%s: tokenizer.ggml.model \"%.*s\" not "
			       "supported (llama, gpt2 are)", v->path, (int)(s.n < 40 ? s.n : 40), s.p);
	TRY(read_vocab(v, is_llama, err, errlen));

	cJSON *root = cJSON_CreateObject(), *model = obj_type("BPE");
	if (!root || !model) {
		cJSON_Delete(root);
		cJSON_Delete(model);
		return SL_ENOMEM;
	}
	cJSON_AddStringToObject(root, "version", "1.0");
	cJSON_AddItemToObject(root, "added_tokens", added_tokens(v));
	cJSON_AddItemToObject(root, "post_processor", template(v));
	cJSON_AddNullToObject(model, "dropout");
	rc = is_llama ? (spm_layout(v, root, model), 0) : bpe_layout(v, root, model, err, errlen);
	cJSON_AddItemToObject(model, "vocab", vocab_object(v));
	if (!rc)
		rc = is_llama ? spm_merges(v, model, err, errlen) : gpt2_merges(v, model, err, errlen);
	cJSON_AddItemToObject(root, "model", model);
	if (rc) {
		cJSON_Delete(root);
		return rc;
	}
	*out = root;
	return 0;
}

int text_tok_gguf_json(const char *path, char **json, size_t *len, char *err, size_t errlen)
{
	gg_vocab v = {.path = path, .bos = -1, .eos = -1, .unk = -1};
	cJSON *root = NULL;

	*json = NULL;
	*len = 0;
	TRY(sl_gguf_open(path, &v.g, err, errlen));
	int rc = build(&v, &root, err, errlen);
	if (!rc) {
		*json = cJSON_PrintUnformatted(root);
		if (!*json)
			rc = sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", path);
		else
			*len = strlen(*json);
	} else if (rc == SL_ENOMEM) {
		sl_errf(err, errlen, rc, "%s: out of memory reading the tokenizer", path);
	}
	cJSON_Delete(root);
	vocab_free(&v);
	sl_gguf_close(v.g);
	return rc;
}
