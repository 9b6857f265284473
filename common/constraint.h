/*
 * constraint.h — what a request may ask its output to obey (issue 37):
 * nothing, any JSON object, a JSON schema, a regular expression, a
 * grammar (EBNF as xgrammar reads it: GBNF-style `root ::= ...`), or a
 * structural tag (xgrammar's JSON form: free text with tagged regions,
 * e.g. tool calls, whose bodies follow a schema). The text travels as it
 * came from the client through the coordinator and Enqueue to the node,
 * which compiles it once per request and masks the tokens that cannot
 * continue a valid output before each sampling step. docs/http.md and
 * docs/sampling.md say how each front door spells them.
 */
#ifndef SL_CONSTRAINT_H
#define SL_CONSTRAINT_H

#ifdef __cplusplus
extern "C" {
#endif

/* The values are the wire's (proto/client.proto, enum ConstraintKind). */
typedef enum sl_constraint_kind {
	SL_CONSTRAINT_NONE = 0,
	SL_CONSTRAINT_JSON = 1,           /* any JSON object; text empty */
	SL_CONSTRAINT_JSON_SCHEMA = 2,    /* text: the schema, JSON */
	SL_CONSTRAINT_REGEX = 3,          /* text: the expression */
	SL_CONSTRAINT_EBNF = 4,           /* text: the grammar, rule `root` */
	SL_CONSTRAINT_STRUCTURAL_TAG = 5, /* text: xgrammar's structural tag, JSON */
} sl_constraint_kind;

/* Whether a wire value is one of the kinds above: protobuf-c keeps an
 * unknown enum value as it came, and the grammar library's C++ must never
 * load one as sl_constraint_kind. */
static inline int sl_constraint_kind_known(int kind)
{
	return kind >= SL_CONSTRAINT_NONE && kind <= SL_CONSTRAINT_STRUCTURAL_TAG;
}

#define SL_CONSTRAINT_MAX_TEXT (1u << 20) /* 1 MiB: longer gets a 400 */

#ifdef __cplusplus
}
#endif
#endif
