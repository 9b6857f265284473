/*
 * constrain.h — constrained decoding on the leader (issue 37): the group's
 * grammar compiler over the model's vocabulary, made on the first
 * constrained request (a group that never sees one loads nothing), and a
 * matcher per constrained sequence (grammar/grammar.h). The engine asks
 * for the masks of a step's constrained rows and hands each sampled token
 * back; node/step.c applies the masks before sampling.
 */
#ifndef NODE_CONSTRAIN_H
#define NODE_CONSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "common/constraint.h"
#include "formats/config.h"
#include "grammar/grammar.h"

typedef struct node_constrain node_constrain;

/* tokenizer: the model's tokenizer file or folder (grammar_vocab_load);
 * NULL: constrained requests are refused (a model with random weights). */
int node_constrain_create(const char *tokenizer, const model_config *cfg, node_constrain **out);
void node_constrain_destroy(node_constrain *c);
/* The slow-grammar guard (grammar_compiler_set_max_uncertain): a
 * constraint leaving more than pct percent of the vocabulary to be checked
 * token by token at some position is refused (SL_EINVAL); 0: no limit.
 * Default GRAMMAR_MAX_UNCERTAIN_PCT. */
void node_constrain_set_max_uncertain(node_constrain *c, int pct);
/* A matcher for one sequence's constraint (kind NONE: *out NULL); a bad
 * constraint's message in err: SL_EINVAL when the constraint itself is
 * unusable (a client's error: too slow to enforce, over a limit), another
 * code when this node cannot compile any (no tokenizer, out of memory).
 * The first call loads the vocabulary. */
int node_constrain_matcher(node_constrain *c, sl_constraint_kind kind, const char *text,
			   size_t len, grammar_matcher **out, char *err, size_t errlen);

#endif
