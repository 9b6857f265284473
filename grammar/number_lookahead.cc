/*
 * number_lookahead.cc — a lookahead for the number rules of a JSON
 * schema's grammar, from where each rule is used.
 *
 * xgrammar 0.2.9's JSON-schema converter writes an integer with bounds as
 * a rule of digit pieces, 0..99 as `root_1 ::= (("0") | ([1-9]) | ([1-9]
 * [0-9]))`, with no lookahead: at its start every piece that runs past a
 * number (`037`, `00`, `5000`...: ~1,100 of Llama 3's 128k) is left
 * undecided by the compile and run through the parser at every mask
 * (48_mixed_any_of's array items: 42 us a token there on a quiet core,
 * bench/results/2026-11-29-devbox-grammar-masks-2). With a lookahead that
 * says which character may follow the rule, the compile rejects those
 * ahead (3 us at that position).
 *
 * What a lookahead does in xgrammar (grammar_compiler.cc,
 * AdaptCacheWithLookahead): at compile time only, a token that the rule
 * cannot take whole but that completes the rule inside it is rejected when,
 * at every point where the rule may complete inside the token, the rest of
 * the token does not start with the lookahead; the run-time parser never
 * reads a lookahead. So a lookahead of the characters that can follow the
 * rule in the grammar (its follow set) rejects no token the grammar would
 * take: a token taken completes the rule at some point and goes on with a
 * character of the follow set. The end of the text needs no character
 * (the stop token is not a piece of text), so a rule that only ends the
 * text may have any lookahead.
 *
 * The follow set is not assumed from JSON but traced in the grammar
 * (follow_sets.cc). A rule gets a lookahead only where that set is made
 * of , } ] alone (no character of a string or a key: a number inside
 * either would be followed by something else, and keeps xgrammar's form),
 * and the lookahead is that set: one character class, so whether xgrammar
 * takes it as "exact" does not matter (a one-character lookahead is
 * complete after one character). Everything the trace cannot tell counts
 * as "any character": the error is always towards no lookahead. A grammar
 * line the scan cannot read leaves the whole grammar unchanged.
 *
 * Cost: linear in the text (follow_sets.cc). No parser state is added,
 * so the compile costs about the same. The other rules of a schema's
 * grammar get theirs in value_lookahead.cc.
 */
#include "grammar/number_lookahead.h"

#include <cstring>
#include <string>

#include "grammar/follow_sets.h"

/* Number chains traced deeper than this are not numbers. */
enum { MAX_DEPTH = 128 };

static bool only_chars(const std::string &s, const char *allowed)
{
	for (char c : s)
		if (!strchr(allowed, c))
			return false;
	return true;
}

/* Every element a number piece: a literal of digits, signs, '.' and
 * exponent letters, a class of those (as printed: [0-9], [1-9], [+\-],
 * [eE]), or another number rule. state: per rule, 0 not seen, 1 being
 * looked at (a cycle: not a number), 2 a number, 3 not. */
static bool is_number(const follow_grammar &g, int r, std::vector<char> &state, int depth)
{
	if (state[r] >= 2)
		return state[r] == 2;
	if (state[r] == 1 || depth > MAX_DEPTH || g.rules[r].opaque)
		return false;
	state[r] = 1;
	bool ok = true;
	for (const follow_sequence &s : g.rules[r].choices)
		for (const follow_elem &e : s)
			ok = ok && (e.kind == 'l' ? only_chars(e.text, "0123456789+-.eE")
				    : e.kind == 'c' ? !e.text.empty() && e.text[0] != '^' &&
							  only_chars(e.text, "0123456789+-eE\\")
						    : is_number(g, e.ref, state, depth + 1));
	state[r] = ok ? 2 : 3;
	return ok;
}

bool number_rule(const follow_grammar &g, int r, std::vector<char> &state)
{
	if (state.size() != g.rules.size())
		state.assign(g.rules.size(), 0);
	return is_number(g, r, state, 0);
}

std::string numbers_with_lookahead(const std::string &ebnf, const std::string &root,
				   int max_rules, int *n_rewritten)
{
	*n_rewritten = 0;
	follow_grammar g;
	if (!follow_grammar_read(ebnf, root, &g))
		return ebnf;
	std::vector<char> number;
	for (int r = 0; r < (int)g.rules.size() && *n_rewritten < max_rules; r++) {
		follow_rule &ru = g.rules[r];
		/* Where xgrammar derives a lookahead of its own, a finer one:
		 * leave it that. The root's undecided tokens are all rejected
		 * anyway. */
		if (!ru.reachable || r == g.root || !ru.lookahead.empty() ||
		    follow_xgrammar_derives(g, r) || !number_rule(g, r, number))
			continue;
		int follow = follow_set(g, r);
		if (follow & FOLLOW_OTHER)
			continue;
		g.lines[ru.line] += follow_lookahead(follow);
		++*n_rewritten;
	}
	return *n_rewritten ? follow_grammar_text(g) : ebnf;
}
