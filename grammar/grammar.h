/*
 * grammar.h — constrained decoding's grammar engine (issue 37): a request's
 * constraint (common/constraint.h) compiled against the model's vocabulary
 * into a matcher that says, before each sampling step, which tokens may
 * come next (a bitmask over the vocabulary), and takes the sampled token.
 *
 * The engine is xgrammar's C++ core (Apache-2.0), built from its pinned
 * PyPI sdist by tools/third_party.sh (nothing of it is committed); this
 * is its `extern "C"` face. Every call catches what xgrammar throws:
 * errors are SL_E* codes with a message in err, never an exception.
 *
 * Masks are int32 words, bit (id % 32) of word (id / 32) set when token id
 * is allowed: grammar_mask_words(vocab) words per row, the layout
 * kernels/logits_mask.h applies to logits rows.
 *
 * Objects: a vocabulary (the tokenizer's token strings, as stored in the
 * tokenizer, and the stop ids), a compiler over it (compiles, with a cache
 * keyed by the constraint text), a compiled constraint (shared, read-only:
 * any number of matchers), a matcher (one per sequence, not thread-safe).
 */
#ifndef GRAMMAR_GRAMMAR_H
#define GRAMMAR_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "common/constraint.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct grammar_vocab grammar_vocab;
typedef struct grammar_compiler grammar_compiler;
typedef struct grammar_compiled grammar_compiled;
typedef struct grammar_matcher grammar_matcher;

/* How a token's stored string maps to its bytes (xgrammar's VocabType):
 * RAW: the string is the bytes; BYTE_FALLBACK: SentencePiece (▁ for space,
 * <0xNN> byte tokens; Llama 2); BYTE_LEVEL: GPT-2's byte-to-character map
 * (Ġ for space; Llama 3, SmolLM2, Qwen). */
typedef enum grammar_vocab_type {
	GRAMMAR_VOCAB_RAW = 0,
	GRAMMAR_VOCAB_BYTE_FALLBACK = 1,
	GRAMMAR_VOCAB_BYTE_LEVEL = 2,
} grammar_vocab_type;

/* Limits on what a client may hand the compiler (hostile input gets a
 * quick refusal, not a long compile that stalls the leader's loop): the
 * text size (common/constraint.h); a JSON schema's nesting depth, enum
 * values, sub-schemas (objects) and anyOf/oneOf branches; a regex's
 * alternatives; a grammar's rules. Measured on SmolLM2's vocabulary (the
 * leader compiles before it goes on): 50,000 regex alternatives 4 s,
 * 20,000 EBNF rules 4.8 s, a schema of 5,000 properties 0.8 s, 3,000 anyOf
 * branches 1 s (and 1.5 ms per token's mask after). At these limits each
 * is well under a second (bench/grammar.c measures). */
#define GRAMMAR_MAX_SCHEMA_DEPTH 32
#define GRAMMAR_MAX_ENUM_VALUES 1024
#define GRAMMAR_MAX_SCHEMA_NODES 2048
#define GRAMMAR_MAX_SCHEMA_BRANCHES 256
#define GRAMMAR_MAX_ALTERNATIVES 1024
#define GRAMMAR_MAX_RULES 1024
/* The slow-grammar guard: a compiled constraint that leaves more than
 * this share (percent) of the vocabulary "uncertain" at some parser state
 * (tokens its mask cache could not decide ahead, which a mask fill then
 * runs through the parser one by one) is refused by grammar_compile. A
 * share, not a count, because what a fill costs per uncertain token
 * depends on the grammar around the state: json.ebnf's blank-space rule
 * leaves every token that starts with a blank uncertain (32,073 of
 * SmolLM2's 49,152, 57,907 of Llama 3's 128,256) yet the next byte
 * rejects most of them and a fill costs microseconds, while
 * json_charstar.ebnf's `char` rule leaves 98% and 94% uncertain, nearly
 * all of which go on through the parser (38-115 ms a token). Measured
 * over the 50 test schemas and bench/data/grammars (docs/benchmarks.md,
 * "grammar masks"): the most any of them leaves is 65%; a counted
 * repetition of a class (tests/mpi's regex "(yes|no), because [a-z
 * ]{1,40}\.") leaves 88.8% of SmolLM2's, costs ~2.5 ms a token and must
 * pass (a common way to write a bound): hence 90, between it and
 * json_charstar's 94.4% on Llama 3. */
#define GRAMMAR_MAX_UNCERTAIN_PCT 90

/* Mask words for a vocabulary of n tokens. */
static inline int grammar_mask_words(int n) { return (n + 31) / 32; }

/* tokens[i] (lens[i] bytes; NULL or length 0: a special token, never
 * allowed by a grammar) for ids [0, n_tokens); vocab_size >= n_tokens is
 * the model's (the logits' width; ids past the tokenizer are never
 * allowed). stop_ids: the ids that end a sequence (EOS and the like),
 * the only ones allowed once a constraint is complete. */
int grammar_vocab_create(const char *const *tokens, const size_t *lens, int n_tokens,
			 int vocab_size, grammar_vocab_type type, const int32_t *stop_ids, int n_stop,
			 grammar_vocab **out, char *err, size_t errlen);
/* The same from a tokenizer file (tokenizer.json, a GGUF, or a folder
 * holding tokenizer.json): its special tokens are never allowed, its type
 * is told from its byte tokens (<0x0A>: BYTE_FALLBACK, Ċ: BYTE_LEVEL).
 * With no stop_ids (a model config naming no EOS) the tokenizer's EOS
 * is the stop token. */
int grammar_vocab_load(const char *path, int vocab_size, const int32_t *stop_ids, int n_stop,
		       grammar_vocab **out, char *err, size_t errlen);
void grammar_vocab_destroy(grammar_vocab *v);
int grammar_vocab_size(const grammar_vocab *v);

/* Without a vocabulary: whether the constraint parses (schema, regex,
 * grammar syntax, limits above). What the coordinator checks before a
 * request goes anywhere, so a bad constraint gets its 400. */
int grammar_check(sl_constraint_kind kind, const char *text, size_t len, char *err,
		  size_t errlen);

/* threads: compile threads (>= 1); cache_bytes: compiled constraints kept
 * (<= 0: no cache). */
int grammar_compiler_create(const grammar_vocab *v, int threads, long cache_bytes,
			    grammar_compiler **out, char *err, size_t errlen);
void grammar_compiler_destroy(grammar_compiler *c);
/* The slow-grammar guard's limit for this compiler's compiles, in percent
 * of the vocabulary (default GRAMMAR_MAX_UNCERTAIN_PCT; <= 0: no limit). */
void grammar_compiler_set_max_uncertain(grammar_compiler *c, int pct);
/* Whether this compiler writes a schema's maxLength/minLength strings as
 * chains of rules (grammar/bounded_strings.cc: the same strings, under
 * half the mask cost on Llama 3's vocabulary; default on). Off, a schema
 * compiles as xgrammar's converter writes it: the reference the tests
 * compare the chains' masks with. */
void grammar_compiler_set_string_chains(grammar_compiler *c, int on);
/* Whether this compiler gives a schema's number rules (bounded integers
 * and numbers: xgrammar writes 0..99 as "0" | [1-9] | [1-9] [0-9]) a
 * lookahead of the characters that may follow them where they are used
 * (grammar/number_lookahead.cc: the same language, the digit pieces that
 * run past a number rejected at compile time; default on). Off: the
 * reference the tests compare with. */
void grammar_compiler_set_number_lookahead(grammar_compiler *c, int on);
/* Whether this compiler gives a schema's other value rules (literals such
 * as true, false, null and enums, strings, anyOf alternatives, objects,
 * arrays) the lookahead of the characters that may follow them where they
 * are used (grammar/value_lookahead.cc: the same language, the pieces that
 * run past a value rejected at compile time; default on). Off: the
 * reference the tests compare with. */
void grammar_compiler_set_value_lookahead(grammar_compiler *c, int on);
/* Whether this compiler writes a schema's "time" and "date-time" string
 * formats as the "pattern" of the same regex xgrammar expands them from
 * (grammar/xgrammar_shim.cc, FORMAT_PATTERNS: one automaton, the digit
 * pieces that run past the seconds decided at compile time, not checked
 * one by one at every mask; default on). Off: the reference the tests
 * compare with. */
void grammar_compiler_set_time_patterns(grammar_compiler *c, int on);
/* Whether this compiler writes a schema's arrays of strings with one copy
 * of the string's rules per item position, each going on with what may
 * follow that item (grammar/string_arrays.cc: the same language, the
 * pieces that close an item and go on with ", " or "]" decided at compile
 * time, not checked one by one at every mask; default on). Off: the
 * reference the tests compare with. */
void grammar_compiler_set_string_arrays(grammar_compiler *c, int on);
/* kind JSON takes any JSON object (text ignored); NONE is refused. A
 * constraint whose worst position leaves more tokens uncertain than the
 * compiler's limit is refused with SL_EINVAL ("... too slow to enforce":
 * a client's error, the constraint as written is unusable). */
int grammar_compile(grammar_compiler *c, sl_constraint_kind kind, const char *text, size_t len,
		    grammar_compiled **out, char *err, size_t errlen);
void grammar_compiled_destroy(grammar_compiled *g);
/* The most tokens a mask fill of g checks one by one (max over parser
 * states of the tokens its mask cache could not decide ahead): what a
 * fill costs beyond copying bitsets. */
long grammar_compiled_worst_uncertain(const grammar_compiled *g);

int grammar_matcher_create(const grammar_compiled *g, grammar_matcher **out, char *err,
			   size_t errlen);
void grammar_matcher_destroy(grammar_matcher *m);
/* mask[words] (grammar_mask_words of the vocabulary): the tokens that may
 * come next. Once terminated (a stop token taken), only the stop ids. */
int grammar_matcher_fill_mask(grammar_matcher *m, uint32_t *mask, int words);
/* Take token id: SL_EINVAL when the constraint does not allow it (the
 * matcher is then unchanged). */
int grammar_matcher_accept(grammar_matcher *m, int32_t id);
/* A stop token was taken: the output is complete. */
int grammar_matcher_is_terminated(const grammar_matcher *m);
/* Undo the last n accepted tokens. */
int grammar_matcher_rollback(grammar_matcher *m, int n);

#ifdef __cplusplus
}
#endif
#endif
