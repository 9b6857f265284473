/*
 * bounded_strings.h — length-bounded JSON strings (maxLength/minLength)
 * rewritten as a chain of rules xgrammar masks faster (bounded_strings.cc).
 * C++ only: for xgrammar_shim.cc, never included from C.
 */
#ifndef SL_GRAMMAR_BOUNDED_STRINGS_H
#define SL_GRAMMAR_BOUNDED_STRINGS_H

#include <string>

/* At most this many chain rules for one schema: each is one parser state
 * whose token masks the compile builds over the whole vocabulary (about
 * 20 ms each on Llama 3's 128k on one core), so a schema with more bounds
 * keeps xgrammar's form for the strings past it. */
#define GRAMMAR_MAX_CHAIN_RULES 64

/* ebnf: a grammar as xgrammar's Grammar::ToString prints it (from its
 * JSON-schema converter). Returns the same grammar with each bounded
 * string body `"\"" X{m, n} "\""` (X the converter's character rule
 * [^"\\\r\n]) written as a chain of rules that accepts exactly the same
 * strings, while at most max_rules chain rules are needed. compact: the
 * grammar puts no blank space between a string and what follows it
 * (xgrammar's any_whitespace false, no indent). *n_rewritten
 * says how many bodies were rewritten (0: the text comes back as it
 * was). Throws nothing but std::bad_alloc. */
std::string bounded_strings_as_chains(const std::string &ebnf, bool compact, int max_rules,
				      int *n_rewritten);

#endif
