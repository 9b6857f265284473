/*
 * follow_sets.h — what may follow each rule of a grammar as xgrammar
 * prints it, traced in the text (follow_sets.cc): what the lookahead
 * rewrites (number_lookahead.cc, value_lookahead.cc) share. C++ only: for
 * the grammar/ rewrites, never included from C.
 */
#ifndef SL_GRAMMAR_FOLLOW_SETS_H
#define SL_GRAMMAR_FOLLOW_SETS_H

#include <set>
#include <string>
#include <vector>

/* What may come next, as flags: the three characters that may follow a
 * compact JSON value, the end of the text, anything else. */
enum {
	FOLLOW_COMMA = 1,
	FOLLOW_RBRACE = 2,
	FOLLOW_RBRACKET = 4,
	FOLLOW_END = 8,
	FOLLOW_OTHER = 16,
};

/* What may come next as strings of at most FOLLOW_K characters: one of
 * fewer, or ending in FOLLOW_TEXT_END, ends the text there. other: the
 * trace cannot tell (then s means nothing). */
#define FOLLOW_K 2
#define FOLLOW_TEXT_END '\0'
struct follow_strings {
	bool other;
	std::set<std::string> s;
};

struct follow_elem {
	char kind;	   /* 'l' string literal, 'c' character class, 'r' rule */
	std::string text;  /* literal or class as printed, without its delimiters; rule name */
	bool optional;	   /* its quantifier allows none */
	bool quantified;   /* it has a quantifier (may repeat) */
	int ref;	   /* the rule, for 'r' */
};
typedef std::vector<follow_elem> follow_sequence;

struct follow_rule {
	std::string name;
	size_t line;
	std::string lookahead; /* as printed after the body (" (=...)"), or empty */
	bool in_lookahead, reachable;
	bool opaque; /* a Regex(...) body, not read: no choices */
	std::vector<follow_sequence> choices;
	/* first characters of each choice from each element on (suffix sets) */
	std::vector<std::vector<int>> suffix_first;
	std::vector<std::vector<char>> suffix_nullable;
	int first_state, first, follow_state, follow;
	int first2_state, follow2_state; /* the same for first2, follow2 */
	follow_strings first2, follow2;	 /* first and follow strings */
	bool nullable;
	int n_last, n_plain_nonlast; /* uses as a sequence's last element, plain uses before it */
};

struct follow_use {
	int rule, choice, pos;
};

struct follow_grammar {
	std::vector<std::string> lines;
	std::vector<follow_rule> rules;
	std::vector<std::vector<follow_use>> uses;
	int root;
};

/* Reads ebnf (a grammar as xgrammar's Grammar::ToString prints it; root
 * its root rule's name) and computes each rule's first set and whether
 * the root reaches it. false: a line the scan cannot read (then nothing
 * may be rewritten). Linear in the text. */
bool follow_grammar_read(const std::string &ebnf, const std::string &root, follow_grammar *g);

/* The characters that may follow rule r where it is used (FOLLOW_*,
 * FOLLOW_OTHER for anything past , } ] and the end, and wherever the trace
 * cannot tell). Memoized: each rule's set is computed once. */
int follow_set(follow_grammar &g, int r);

/* The strings of at most FOLLOW_K characters that may follow rule r where
 * it is used (a shorter one, or one ending in FOLLOW_TEXT_END, ends the
 * text there). Memoized. */
const follow_strings &follow_strings_of(follow_grammar &g, int r);

/* Whether xgrammar can take a lookahead of rule r as "exact" (a token
 * ending inside the lookahead accepted without a check): not where r is
 * the last element, unquantified, of a rule the root reaches other than
 * itself, where xgrammar's RuleInliner cannot remove that use (past the
 * sequence's first element, or r refers to other rules): then xgrammar
 * 0.2.9's LookaheadAssertionAnalyzer never takes r's lookahead as exact
 * (the rule holding the use is never inlined: it refers to r). A
 * lookahead longer than one character is safe only where this is false:
 * exact, a token whose rest is a part of it would be taken unchecked. */
bool follow_may_be_exact(const follow_grammar &g, int r);

/* Whether xgrammar derives a lookahead of its own for rule r (used once,
 * not last: the rest of that sequence, a finer one than a follow set). */
bool follow_xgrammar_derives(const follow_grammar &g, int r);

/* The lookahead for a follow set of , } ] and the end, as it is printed
 * after a rule's body: " (=([...]))". */
std::string follow_lookahead(int follow);

/* The lookahead for follow strings that each start with , } ] (or end
 * the text), as printed after a rule's body: their first characters then
 * their second ones, " (=([,\]] [ }]))" for ", " and "]}" (xgrammar 0.2.9
 * takes no choices in a lookahead: the two classes take more pairs than
 * f holds, ",}" too, which only ever rejects less). A string that ends
 * the text after one character (FOLLOW_TEXT_END) adds no second one: no
 * text goes on past the end. Empty where f cannot be written so (f.other,
 * another first character, no second character). */
std::string follow_lookahead_strings(const follow_strings &f);

/* The grammar's lines, each ended by a newline. */
std::string follow_grammar_text(const follow_grammar &g);

#endif
