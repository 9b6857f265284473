/*
 * follow_sets.h — what may follow each rule of a grammar as xgrammar
 * prints it, traced in the text (follow_sets.cc): what the lookahead
 * rewrites (number_lookahead.cc, value_lookahead.cc) share. C++ only: for
 * the grammar/ rewrites, never included from C.
 */
#ifndef SL_GRAMMAR_FOLLOW_SETS_H
#define SL_GRAMMAR_FOLLOW_SETS_H

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

/* Whether xgrammar derives a lookahead of its own for rule r (used once,
 * not last: the rest of that sequence, a finer one than a follow set). */
bool follow_xgrammar_derives(const follow_grammar &g, int r);

/* The lookahead for a follow set of , } ] and the end, as it is printed
 * after a rule's body: " (=([...]))". */
std::string follow_lookahead(int follow);

/* The grammar's lines, each ended by a newline. */
std::string follow_grammar_text(const follow_grammar &g);

#endif
