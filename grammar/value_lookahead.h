/*
 * value_lookahead.h — the value rules of a JSON schema's grammar other
 * than numbers (literals, enums, strings, anyOf alternatives, objects,
 * arrays) given the follow set of their place in the grammar as a
 * lookahead (value_lookahead.cc). C++ only: for xgrammar_shim.cc, never
 * included from C.
 */
#ifndef SL_GRAMMAR_VALUE_LOOKAHEAD_H
#define SL_GRAMMAR_VALUE_LOOKAHEAD_H

#include <string>

/* ebnf: a grammar as xgrammar's Grammar::ToString prints it (from its
 * JSON-schema converter, possibly after bounded_strings_as_chains and
 * numbers_with_lookahead), root its root rule's name. Returns the same
 * grammar where each rule that is not a number (number_rule: those are
 * numbers_with_lookahead's) and whose every possible next character is one
 * of , } ] (or the end of the text) has what may follow it as its
 * lookahead (two characters where xgrammar cannot take it as exact, else
 * one): added where it has none, and in place of a string's "JSON
 * separator" lookahead ([ \n\r\t]* [,}\]:] from the converter, [,}\]:]
 * from the chains), which claims more; while at most max_rules are
 * rewritten. A grammar the scan cannot read whole comes back unchanged.
 * *n_rewritten says how many rules got one (0: the text comes back as it
 * was). Throws nothing but std::bad_alloc. */
std::string values_with_lookahead(const std::string &ebnf, const std::string &root,
				  int max_rules, int *n_rewritten);

#endif
