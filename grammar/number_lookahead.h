/*
 * number_lookahead.h — bounded integers and numbers of a JSON schema
 * given the follow set of their place in the grammar as a lookahead
 * (number_lookahead.cc; the tracing in follow_sets.cc). C++ only: for
 * xgrammar_shim.cc and value_lookahead.cc, never included from C.
 */
#ifndef SL_GRAMMAR_NUMBER_LOOKAHEAD_H
#define SL_GRAMMAR_NUMBER_LOOKAHEAD_H

#include <string>
#include <vector>

struct follow_grammar;

/* At most this many rules get a lookahead in one grammar, numbers and
 * other values together (past it a rule keeps xgrammar's form). A
 * lookahead adds no parser state, only a check of each state's undecided
 * tokens at compile time. */
#define GRAMMAR_MAX_LOOKAHEAD_RULES 64

/* ebnf: a grammar as xgrammar's Grammar::ToString prints it (from its
 * JSON-schema converter, possibly after bounded_strings_as_chains), root
 * its root rule's name. Returns the same grammar with a lookahead
 * assertion added to each rule made only of number pieces (digits, signs,
 * '.', exponents) that has none and whose every possible next character
 * is one of , } ] (or the end of the text), while at most max_rules are
 * rewritten. A grammar the scan cannot read whole comes back unchanged.
 * *n_rewritten says how many rules got one (0: the text comes back as it
 * was). Throws nothing but std::bad_alloc. */
std::string numbers_with_lookahead(const std::string &ebnf, const std::string &root,
				   int max_rules, int *n_rewritten);

/* Whether rule r of g (follow_sets.h) is made only of number pieces, as
 * numbers_with_lookahead tells them: the rules it rewrites, which
 * value_lookahead.cc leaves to it. state: scratch the calls on one g
 * share (empty at first). */
bool number_rule(const follow_grammar &g, int r, std::vector<char> &state);

#endif
