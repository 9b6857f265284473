/*
 * tok_int.h -- what the tokenizer's files share: the loaded tokenizer
 * (struct text_tok), per-call encode scratch, growable buffers, hash maps
 * and UTF-8 helpers.  Not for use outside text/tokenizer/tok*.c.
 *
 * The files, in pipeline order; tokenizer.c calls each stage in turn, and
 * no stage calls a later one (tok_util.c is under them all):
 *   tokenizer.c    loading tokenizer.json (top level, added tokens,
 *                  post-processor), the encode pipeline and its scratch,
 *                  lookups
 *   tok_norm.c     normalizers (utf8proc for NFC/NFD/NFKC/NFKD)
 *   tok_pretok.c   pre-tokenizers (Oniguruma for every regex and class)
 *   tok_bpe.c      the BPE model: vocabulary, merges, one word at a time
 *   tok_decode.c   decoders and the streaming detokenizer
 *   tok_gguf.c     a GGUF file's tokenizer as an equivalent tokenizer.json
 *   tok_util.c     buffers, UTF-8, the GPT-2 byte alphabet, hash maps
 */
#ifndef COORD_TOK_INT_H
#define COORD_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "text/tokenizer/tokenizer.h"
#include "text/utf8.h"
#include "common/buf.h"

#define MAX_TOKEN_ID (1 << 24) /* refuse files that would make us allocate more */

/* ---- growable buffers ---- */

typedef struct {
	int32_t *p;
	size_t len, cap;
} tk_ids;

int tk_grow(void **p, size_t *cap, size_t need, size_t elem);
int tk_ids_push(tk_ids *v, int32_t id);

/* ---- UTF-8 ---- */

/* Exactly one UTF-8 character: copies it to out (8 bytes) and sets *len. */
int tk_one_char(const char *s, char *out, size_t *len);
int tk_starts_with(const char *s, size_t n, const char *p, size_t pn);
/* out = s with every non-overlapping pat (left to right) replaced by to. */
int tk_replace_all(const char *s, size_t n, const char *pat, size_t pn, const char *to,
		   size_t tn, sl_buf *out);
/* Unicode White_Space, what Rust's char::is_whitespace tests. */
int tk_is_white_space(uint32_t cp);

/* ---- GPT-2 byte-level alphabet ---- */

/* Byte-level BPE spells every byte as a printable character: bytes that
 * are printable Latin-1 stand for themselves, the other 68 are moved to
 * U+0100.. in byte order (so ' ' is 'G with dot').  Inverse table:
 * char_byte[cp] for cp < BYTE_CHARS, -1 where no byte maps. */
#define BYTE_CHARS 324
uint32_t tk_byte_to_char(unsigned b);
void tk_build_char_bytes(int16_t *char_byte);

/* ---- hash maps ---- */

/* String -> id.  Keys are (offset, length) into the tokenizer's arena, so
 * the arena may keep growing while maps are built. */
typedef struct {
	uint32_t off, len;
	int32_t val; /* -1: empty slot */
} sm_slot;

typedef struct {
	sm_slot *slots;
	size_t mask;
} strmap;

int sm_init(strmap *m, size_t n); /* sized for n keys, never grows */
void sm_put(strmap *m, const char *arena, uint32_t off, uint32_t len, int32_t val);
int32_t sm_get(const strmap *m, const char *arena, const char *key, size_t len);

/* (left id, right id) -> (rank, merged id). */
typedef struct {
	uint64_t key; /* UINT64_MAX: empty */
	int32_t rank, result;
} pm_slot;

typedef struct {
	pm_slot *slots;
	size_t mask;
} pairmap;

int pm_init(pairmap *m, size_t n);
pm_slot *pm_find(const pairmap *m, uint64_t key); /* its slot, or the empty one */
const pm_slot *pm_get(const pairmap *m, int32_t a, int32_t b);
uint64_t pm_key(int32_t a, int32_t b);

/* ---- the tokenizer ---- */

typedef struct {
	uint32_t text_off, text_len; /* the token's text as HF's id_to_token
	                              * gives it (added tokens: content) */
	uint32_t dec_off, dec_len;   /* what the decoder makes of it alone */
	int16_t byte_val;            /* ByteFallback "<0xNN>" value, else -1 */
	uint8_t present;             /* some token has this id */
	uint8_t special;             /* skipped by decode(skip_special) */
} tok_entry;

typedef struct {
	uint32_t off, len;   /* what is matched: content, normalized if flagged */
	uint32_t coff, clen; /* content as in the file */
	int32_t id;
	uint8_t special, normalized;
} added_tok;

enum {
	NORM_PREPEND, NORM_REPLACE, NORM_REPLACE_RE, NORM_NFC, NORM_NFD, NORM_NFKC,
	NORM_NFKD, NORM_LOWERCASE, NORM_STRIP, NORM_STRIP_ACCENTS
};
typedef struct {
	int kind;
	uint32_t a_off, a_len; /* prepend text, or replace pattern */
	uint32_t b_off, b_len; /* replacement */
	int left, right;       /* Strip */
	void *re;              /* Replace with a Regex: an OnigRegex */
} norm_step;

enum { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE };
/* HF's SplitDelimiterBehavior */
enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum { PREPEND_NEVER, PREPEND_FIRST, PREPEND_ALWAYS };
typedef struct {
	int kind;
	void *re;         /* OnigRegex: Split's pattern (also Digits,
	                   * Punctuation, Whitespace...), ByteLevel's GPT-2 one
	                   * when use_regex, NULL otherwise */
	int behavior, invert;
	int prefix_space; /* ByteLevel add_prefix_space */
	char rep[8];      /* Metaspace replacement character */
	size_t rep_len;
	int prepend, split; /* Metaspace prepend_scheme, split */
} pre_step;

enum { DEC_JOIN, DEC_PIPE, DEC_BYTELEVEL };

struct text_tok {
	char *name;        /* file name, for messages */
	char *arena;       /* every string below lives here */
	size_t arena_len, arena_cap;

	tok_entry *tok;    /* [n_vocab] */
	int32_t n_vocab;
	strmap text_map;   /* model vocab: file spelling -> id */
	strmap enc_map;    /* model vocab: what BPE words are made of -> id
	                    * (raw bytes for byte-level models) */
	pairmap merges;
	int32_t unk_id;    /* -1: unknown characters are dropped, as HF does */
	int byte_fallback, fuse_unk, ignore_merges;
	int32_t byte_id[256];  /* "<0xNN>" tokens, -1 when absent */
	int32_t byte_sym[256]; /* byte-level: id of the one-byte token */

	added_tok *added;  /* sorted by first byte, then longest first */
	size_t n_added, n_added_norm;
	uint32_t added_first[257]; /* bucket starts by first byte */

	norm_step *norm;
	size_t n_norm, norm_cap;

	pre_step *pre;
	size_t n_pre, pre_cap;
	int byte_level;    /* a ByteLevel pre-tokenizer: BPE over raw bytes */

	tk_ids prefix, suffix; /* post-processor template around $A */

	int dec_kind;
	int dec_byte_fallback;
	int dec_meta_first;       /* Metaspace decoder drops its char in token 0 */
	char dec_meta_rep[8];
	size_t dec_meta_rep_len;
	int dec_strip;            /* leading strip count (after Fuse) */
	char dec_strip_char[8];
	size_t dec_strip_char_len;

	int32_t bos_id, eos_id;
};

static inline const char *tk_str(const text_tok *t, uint32_t off) { return t->arena + off; }

/* Appends n bytes (and a NUL) to the arena; *off gets their offset. */
int tk_arena_put(text_tok *t, const char *s, size_t n, uint32_t *off);

/* "<file>: <what>" into err; returns code. */
int tk_load_err(const text_tok *t, char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
#define LERR(code, ...) tk_load_err(t, err, errlen, code, __VA_ARGS__)

/* JSON access that tolerates any shape. */
const cJSON *tk_jget(const cJSON *o, const char *key);
const char *tk_jstr(const cJSON *o, const char *key);
int tk_jbool(const cJSON *o, const char *key, int dflt);
int tk_jabsent(const cJSON *v);
int32_t tk_jid(const cJSON *v); /* an integer in [0, MAX_TOKEN_ID), else -1 */

/* ---- per-call encode scratch ---- */

/* A piece of text on its way through the pre-tokenizers: bytes
 * [off, off + len) of its list's text; origin: starts the input (HF's
 * offsets_original().0 == 0, which Metaspace prepend_scheme "first"
 * looks at). */
typedef struct {
	uint32_t off, len;
	uint8_t origin;
} tk_piece;

typedef struct {
	sl_buf text;
	tk_piece *p;
	size_t n, cap;
} tk_pieces;

/* One segment of a piece during a split: [a, b), m: the pattern matched it. */
typedef struct {
	uint32_t a, b;
	uint8_t m;
} tk_span;

typedef struct bpe_sym bpe_sym;
typedef struct bpe_merge bpe_merge;

/* Encode allocates its own scratch, so a const text_tok can be shared by
 * threads. */
typedef struct {
	const text_tok *t;
	int flags;
	tk_ids out;
	sl_buf norm[2], word, esc, tmp;
	tk_pieces pc[2];
	tk_span *spans;
	size_t n_spans, spans_cap;
	void *region;         /* OnigRegion */
	bpe_sym *sym;
	size_t n_sym, sym_cap;
	bpe_merge *heap;
	size_t n_heap, heap_cap;
	int unk_pending;
	/* invalid UTF-8 in the text: each maximal ill-formed subsequence was
	 * replaced by one private-use character (a stand-in), sorted by code
	 * point; the BPE gets the original bytes back */
	uint32_t *stand_cp;
	uint8_t (*stand_bytes)[4]; /* [0] = length, then the bytes */
	size_t n_stand;
} enc_ctx;

/* tok_norm.c */
int tk_load_normalizer(text_tok *t, const cJSON *j, char *err, size_t errlen);
/* Runs the normalizer over s; results alternate between bufs[0] and
 * bufs[1], *res may be s itself when nothing changed it.  *origin (may be
 * NULL) is cleared when a step removed the first character. */
int tk_normalize(const text_tok *t, const char *s, size_t n, sl_buf bufs[2], void **region,
		 const char **res, size_t *rn, int *origin);
void tk_free_normalizer(text_tok *t);

/* tok_pretok.c */
int tk_regex_compile(text_tok *t, const char *pat, size_t len, void **out, const char *what,
		     char *err, size_t errlen);
void tk_regex_free(void *re);
void *tk_region_new(void);
void tk_region_free(void *region);
/* Leftmost-first matches of re in s[0..n), as the onig crate's find_iter
 * yields them (an empty match right after the previous match skipped);
 * calls fn(arg, start, end) for each.  SL_EINVAL when Oniguruma gives up
 * (its backtracking limit). */
int tk_regex_each(void *re, void *region, const char *s, size_t n,
		  int (*fn)(void *arg, size_t start, size_t end), void *arg);
int tk_load_pretokenizer(text_tok *t, const cJSON *j, char *err, size_t errlen);
/* Splits s into words: *words gets them (in c's scratch, valid until the
 * next call); none for empty s.  The caller BPE-encodes each. */
int tk_pretokenize(enc_ctx *c, const char *s, size_t n, int at_origin, const tk_pieces **words);
void tk_free_pretokenizer(text_tok *t);

/* tok_bpe.c */
int tk_check_model(text_tok *t, const cJSON *model, char *err, size_t errlen);
int tk_load_model(text_tok *t, const cJSON *model, char *err, size_t errlen);
/* One pre-tokenized word: stand-ins back to raw bytes, then BPE. */
int tk_encode_word(enc_ctx *c, const char *w, size_t n);

/* tok_decode.c */
int tk_load_decoder(text_tok *t, const cJSON *j, char *err, size_t errlen);
int16_t tk_parse_byte_token(const char *s, size_t n);
/* Byte-level vocabulary entry -> raw bytes in the arena; 1 when it has a
 * character outside the 256 (then nothing is stored). */
int tk_unmap_bytes(text_tok *t, const int16_t *char_byte, const char *s, uint32_t *off,
		   uint32_t *len);

#endif
