/*
 * sampling.h — the one sampling struct of shardline: what a request asks
 * the sampler for, from either front door (protobuf Submit, OpenAI JSON)
 * through the coordinator and the node's Enqueue down to the kernels
 * (kernels/sampling.h samples with it as it is: kern_sample_params).
 *
 * Each field is one row of SL_SAMPLING_FIELDS: its C type, name, default
 * and range. The struct, the defaults, the range check (sampling.c), the
 * protobuf mapping (proto/sampling_pb.c: fields found by name in the
 * Sampling message or the message around it) and the JSON reader of the
 * OpenAI API (coordinator/openai_request.c: plain numbers by name) are all
 * made from the table, so a new sampling option is one row here, its field
 * in proto/client.proto (node.proto uses the same message) and the kernel
 * that implements it. docs/sampling.md has the semantics.
 */
#ifndef SL_SAMPLING_H
#define SL_SAMPLING_H

#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define SL_SAMPLING_MAX_TOP_LOGPROBS 20 /* alternatives per token (OpenAI's bound) */
#define SL_SAMPLING_MAX_PENALTY 2.0     /* |presence|, |frequency| (OpenAI's range) */
#define SL_SAMPLING_MAX_REP_PENALTY 10.0 /* repetition_penalty in (0, this] */
#define SL_SAMPLING_VOCAB (-1.0)        /* as a bound: the model's vocabulary size */
#define SL_SAMPLING_MAX_MIN_TOKENS (1 << 20) /* min_tokens (the coordinator's max_tokens bound) */
#define SL_SAMPLING_MAX_LOGIT_BIAS 300  /* logit_bias entries (OpenAI's bound) */
#define SL_SAMPLING_MAX_BIAS 100.0      /* |logit_bias value| (OpenAI's range) */
#define SL_SAMPLING_MAX_STOP_TOKEN_IDS 32 /* a client's stop_token_ids */
/* On the node: the client's plus the coordinator's EOS ids (min_tokens masks both). */
#define SL_SAMPLING_MAX_STOP_IDS_NODE 64

/* How a field's value is bounded. */
enum {
	SL_RANGE_CLOSED,  /* [lo, hi] */
	SL_RANGE_LO_OPEN, /* (lo, hi] */
	SL_RANGE_NONE,    /* any value (seed) */
};

/* X(ctype, name, default, lo, hi, range, json): in struct order, which is
 * the GPU's layout (the struct is copied to the device as it is). json 1:
 * the OpenAI API takes it as a plain number of the same name; 0: the
 * reader has its own rule (top_k's -1, seed's two's complement, the
 * log-prob fields' per-endpoint shapes). */
#define SL_SAMPLING_FIELDS(X)                                                                \
	X(float, temperature, 0, 0, 100, SL_RANGE_CLOSED, 1)       /* 0: greedy */           \
	X(int32_t, top_k, 0, 0, SL_SAMPLING_VOCAB, SL_RANGE_CLOSED, 0) /* 0: off */         \
	X(float, top_p, 1, 0, 1, SL_RANGE_LO_OPEN, 1)              /* 1: off */              \
	X(uint64_t, seed, 0, 0, 0, SL_RANGE_NONE, 0)               /* same seed, same tokens */ \
	X(float, min_p, 0, 0, 1, SL_RANGE_CLOSED, 1)               /* 0: off */              \
	X(float, repetition_penalty, 1, 0, SL_SAMPLING_MAX_REP_PENALTY, SL_RANGE_LO_OPEN, 1) \
	/* 1: off; over prompt and generated tokens */                                        \
	X(float, presence_penalty, 0, -SL_SAMPLING_MAX_PENALTY, SL_SAMPLING_MAX_PENALTY,      \
	  SL_RANGE_CLOSED, 1) /* 0: off; over generated tokens */                            \
	X(float, frequency_penalty, 0, -SL_SAMPLING_MAX_PENALTY, SL_SAMPLING_MAX_PENALTY,     \
	  SL_RANGE_CLOSED, 1) /* 0: off; over generated tokens */                            \
	X(int32_t, logprobs, 0, 0, 1, SL_RANGE_CLOSED, 0)          /* report the chosen token's */ \
	X(int32_t, top_logprobs, 0, 0, SL_SAMPLING_MAX_TOP_LOGPROBS, SL_RANGE_CLOSED, 0)     \
	/* and this many alternatives (> 0 implies logprobs) */                               \
	X(int32_t, min_tokens, 0, 0, SL_SAMPLING_MAX_MIN_TOKENS, SL_RANGE_CLOSED, 1)          \
	/* EOS and stop token ids masked until this many tokens were generated (the node   \
	 * turns it into logit bans: sl_token_lists; the kernels never read it) */

#define SL_SAMPLING_MEMBER_(t, name, d, lo, hi, range, json) t name;
typedef struct sl_sampling {
	SL_SAMPLING_FIELDS(SL_SAMPLING_MEMBER_)
} sl_sampling;

/* Every field at its default: greedy, no penalties, no log-probs. */
#define SL_SAMPLING_DEFAULT_(t, name, d, lo, hi, range, json) .name = (t)(d),
#define SL_SAMPLING_DEFAULTS {SL_SAMPLING_FIELDS(SL_SAMPLING_DEFAULT_)}

/* The table at run time, for the readers and writers of wire formats. */
typedef enum { SL_SF_FLOAT, SL_SF_INT32, SL_SF_UINT64 } sl_sampling_type;
typedef struct sl_sampling_field {
	const char *name;
	sl_sampling_type type;
	size_t offset;             /* in sl_sampling */
	double dflt, lo, hi;
	int range, json;
} sl_sampling_field;
extern const sl_sampling_field sl_sampling_fields[];
extern const int sl_sampling_n_fields;

void sl_sampling_default(sl_sampling *s);
/* 0, or SL_EINVAL with err naming the first field out of its range and the
 * range ("top_p must be in (0, 1], got 0"); NaN is out of every range.
 * vocab: the model's, top_k's bound. */
int sl_sampling_check(const sl_sampling *s, int vocab, char *err, size_t errlen);

/* The list-valued options that do not fit the table: logit_bias (token
 * id -> bias added to its logit before penalties, temperature and
 * sampling; ids distinct, |bias| <= SL_SAMPLING_MAX_BIAS, at most
 * SL_SAMPLING_MAX_LOGIT_BIAS) and stop_token_ids (ids that end the
 * generation as EOS does; masked with EOS while fewer than min_tokens
 * were generated). Borrowed arrays; they travel beside sl_sampling
 * (proto/client.proto Sampling's repeated fields, node_request). */
typedef struct sl_token_lists {
	const int32_t *bias_ids;  /* [n_bias] */
	const float *bias;        /* [n_bias] */
	int n_bias;
	const int32_t *stop_ids;  /* [n_stop_ids] */
	int n_stop_ids;
} sl_token_lists;

/* 0, or SL_EINVAL with err naming the field ("logit_bias: token 70000 is
 * outside the vocabulary [0, 49152)"). max_stop_ids: the caller's bound
 * (a client's or the node's). */
int sl_token_lists_check(const sl_token_lists *t, int vocab, int max_stop_ids, char *err,
			 size_t errlen);

/* A float or integer field as a double (not seed: its 64 bits do not fit),
 * and back. */
double sl_sampling_get(const sl_sampling *s, const sl_sampling_field *f);
void sl_sampling_set(sl_sampling *s, const sl_sampling_field *f, double v);

#ifdef __cplusplus
}
#endif
#endif
