/*
 * tokenizer.h -- text <-> token ids for the coordinator, from a Hugging Face
 * tokenizer.json.  Nodes only ever see ids; this is the one place that knows
 * about text.
 *
 * Owner: coordinator.  Callers: the coordinator's submit path (encode), its
 * streaming relay (text_detok_*), tools/tok.c and the tests.
 *
 * Supported (everything else is refused at load with SL_ENOTSUP naming the
 * file and the field):
 *   model      BPE (merges as ranks, byte_fallback, fuse_unk, unk_token,
 *              ignore_merges); no dropout, no subword prefix/suffix
 *   normalizer null, Prepend, Replace(String), Sequence of those
 *   pre_tok    null, Metaspace (prepend_scheme first/always/never, split),
 *              Split with the Llama 3 regex (Isolated), ByteLevel with
 *              use_regex=false and no prefix space, Sequence of those
 *   post_proc  null, TemplateProcessing, Sequence(ByteLevel, Template...)
 *   decoder    null, ByteLevel, or Sequence of [Replace(String)... |
 *              Metaspace], ByteFallback, Fuse, Strip(start, stop=0)
 *   added_tokens: matched leftmost-longest in the raw text before
 *              normalization (normalized=false) or in each normalized piece
 *              (normalized=true); lstrip/rstrip/single_word are refused.
 * That covers the Llama 2 (SentencePiece BPE, byte fallback) and Llama 3
 * (byte-level BPE, regex split) families; tests/tokenizer_conformance.py
 * checks both against the `tokenizers` library id for id.
 *
 * Invalid UTF-8 in the text never fails: each maximal invalid subsequence
 * (the unit Python's errors="replace" turns into one U+FFFD) counts as one
 * "other" character for the pre-tokenizer, and its raw bytes are encoded --
 * as byte-level tokens (Llama 3) or <0xNN> byte fallback (Llama 2) -- so
 * no input byte is dropped.  Decoding always yields valid UTF-8, exactly as
 * Hugging Face's decode does.
 *
 * A loaded text_tok is read-only: encode/decode on one tokenizer may run
 * from several threads at once.
 */
#ifndef COORD_TOKENIZER_H
#define COORD_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct text_tok text_tok;
typedef struct text_detok text_detok;

/* Encode flags. */
enum {
	COORD_TOK_ADD_SPECIAL = 1,   /* add the post_processor's BOS/EOS */
	COORD_TOK_SPLIT_SPECIAL = 2, /* treat special tokens in the text as plain
	                              * text (HF encode_special_tokens=True); use
	                              * for untrusted client text */
};

int text_tok_load(const char *tokenizer_json_path, text_tok **out,
		   char *err, size_t errlen);
/* Same from a buffer already in memory; name is used in error messages. */
int text_tok_load_buffer(const char *json, size_t len, const char *name,
			  text_tok **out, char *err, size_t errlen);
void text_tok_destroy(text_tok *t);

/* text need not be NUL-terminated nor valid UTF-8.  On success *ids is a
 * malloc'd array of *n ids (NULL when *n is 0) the caller frees. */
int text_tok_encode(const text_tok *t, const char *text, size_t len, int flags,
		     int32_t **ids, size_t *n, char *err, size_t errlen);

/* ids -> UTF-8 text, as HF Tokenizer.decode(ids, skip_special_tokens).
 * Unknown ids are skipped.  *text is malloc'd, NUL-terminated, *len bytes. */
int text_tok_decode(const text_tok *t, const int32_t *ids, size_t n,
		     int skip_special, char **text, size_t *len,
		     char *err, size_t errlen);

int32_t text_tok_vocab_size(const text_tok *t); /* highest id + 1 */
int32_t text_tok_bos_id(const text_tok *t);     /* -1 when none */
/* First of </s>, <|end_of_text|>, <|endoftext|>, <eos> that exists, or -1.
 * Chat models also stop on others (<|eot_id|>): prefer the model's
 * config/generation_config eos_token_id where it has one. */
int32_t text_tok_eos_id(const text_tok *t);
int32_t text_tok_token_to_id(const text_tok *t, const char *token); /* -1 */
const char *text_tok_id_to_token(const text_tok *t, int32_t id);    /* NULL */
int text_tok_is_special(const text_tok *t, int32_t id);

/*
 * Incremental detokenizer for streaming: feed ids one at a time and get the
 * text they completed.  Chunks are always whole UTF-8 characters: bytes of a
 * character split over byte-fallback / byte-level tokens are held back until
 * it completes.  The concatenated chunks (after text_detok_finish) equal
 * text_tok_decode of the same ids, with one documented exception: a Llama-2
 * style byte-fallback run that is not valid UTF-8 as a whole -- HF decode
 * turns the entire run into U+FFFD, the stream has already sent the valid
 * characters and replaces only the bad bytes (it cannot take text back).
 * The first-token space strip (Llama 2's "▁Hello" -> "Hello") applies once.
 */
int text_detok_create(const text_tok *t, int skip_special, text_detok **out,
		       char *err, size_t errlen);
void text_detok_destroy(text_detok *d);
/* *text points into d (valid until the next call on d); *len may be 0. */
int text_detok_step(text_detok *d, int32_t id, const char **text, size_t *len);
/* Flushes held-back bytes (as U+FFFD) at the end of a sequence. */
int text_detok_finish(text_detok *d, const char **text, size_t *len);
/* Ready for a new sequence, keeping the buffer. */
void text_detok_reset(text_detok *d);

/* 1 when path names a GGUF file (it starts with the GGUF magic). */
int text_tok_is_gguf(const char *path);
/* A GGUF file's tokenizer (tokenizer.ggml.*) as the equivalent Hugging
 * Face tokenizer.json text: malloc'd, NUL-terminated, *len bytes.  What
 * text_tok_load reads for a .gguf, and what `shardline-tok FILE.gguf
 * export` prints.  tok_gguf.c documents the mapping. */
int text_tok_gguf_json(const char *path, char **json, size_t *len, char *err, size_t errlen);

#endif
