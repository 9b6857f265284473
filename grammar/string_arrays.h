/*
 * string_arrays.h — arrays of strings of a JSON schema's grammar written
 * so that what follows each item's closing quote is part of the item's
 * own rules (string_arrays.cc). C++ only: for xgrammar_shim.cc, never
 * included from C.
 */
#ifndef SL_GRAMMAR_STRING_ARRAYS_H
#define SL_GRAMMAR_STRING_ARRAYS_H

#include <string>

/* At most this many rules are added for one schema: each is a parser
 * state whose token masks the compile builds over the whole vocabulary
 * (about 4 ms each on Llama 3's 128k on one core: 11_str_array's 42 take
 * its compile from 84 to 252 ms), so an array past it keeps the
 * converter's form. */
#define GRAMMAR_MAX_ARRAY_RULES 64

/* ebnf: a grammar as xgrammar's Grammar::ToString prints it (from its
 * JSON-schema converter, possibly after bounded_strings_as_chains), root
 * its root rule's name. Returns the same grammar where each array whose
 * items may be strings (`"[" I R{a, b} "]"`, `"[" I R "]"` with R
 * optional, `"[" I "]"`, or the items written out, `"[" I ", " I "]"`; I
 * `"\"" B` with B a string body, basic_string_sub or a chain, or an anyOf
 * with such a case among others) is written as one copy of the string
 * body (and of I's choices, the others followed by what may follow the
 * item) per item position
 * whose closing quote goes on with what may follow that item there (", "
 * and the next item's body while fewer than maxItems, "]" once minItems
 * are there), while at most max_rules rules are added. The copies carry
 * the lookahead of what follows the array. A grammar the scan cannot read
 * whole comes back unchanged. *n_rewritten says how many arrays were
 * rewritten (0: the text comes back as it was). Throws nothing but
 * std::bad_alloc. */
std::string string_arrays_unrolled(const std::string &ebnf, const std::string &root,
				   int max_rules, int *n_rewritten);

#endif
