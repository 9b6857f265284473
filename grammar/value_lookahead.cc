/*
 * value_lookahead.cc — a lookahead for the value rules of a JSON schema's
 * grammar (other than numbers: number_lookahead.cc), from where each rule
 * is used.
 *
 * What xgrammar 0.2.9 leaves to its parser at run time, past numbers: at
 * a state inside a rule, every token that completes the rule inside it
 * and goes on with something the rule cannot take (`true` then `ly`,
 * `"` then `:`...) is "uncertain", checked one by one at every mask,
 * unless the rule's lookahead rejects it at compile time (the mechanism,
 * and why a lookahead of the rule's follow set rejects no token the
 * grammar takes: number_lookahead.cc). Where the remaining slow masks of
 * the 50 test schemas were on Llama 3's 128k vocabulary:
 * - `true`, `false`, `null` and enum or const literals: an anyOf's
 *   alternatives are inlined by xgrammar into the anyOf's own rule (a rule
 *   of literals alone is inlined where it starts a sequence), so the
 *   states after `tru` are the anyOf rule's, which had no lookahead
 *   (48_mixed_any_of: 1,588 tokens undecided there);
 * - strings: the chains of bounded_strings.cc and the converter's
 *   basic_string_sub carry the lookahead "a JSON separator follows"
 *   ([,}\]:], after blank space for the converter's), so every piece that
 *   closes a string and goes on with `:` or `}` is undecided inside a
 *   string that only `,` or `]` may follow (`":`, `"},`, `":"`...).
 * Each rule here gets the follow set traced in the grammar (follow_sets.cc)
 * as its lookahead, where that set is only , } ] and the end: added where
 * the rule has none, and in place of the two separator lookaheads above
 * (the traced set is always narrower: a value is never followed by `:`;
 * both claim only what follows the rule, so the narrower one still rejects
 * no token the grammar takes). A lookahead of any other form is left as
 * it is, as are the rules xgrammar derives a lookahead for (used once,
 * not last: a finer one), and the root (its undecided tokens are all
 * rejected anyway).
 *
 * Two characters where xgrammar cannot take the lookahead as exact: the
 * follow strings' first characters then their second ones, ([,\]] [ }])
 * for an array item (", " or "]}"): a string inside it then leaves
 * undecided only the pieces going on with `, ` or `]}`, not `",\n`,
 * `"]);` or `","` (at the start of 11_str_array's item on Llama 3, 154
 * undecided pieces with one character, 49 with two, counted from the
 * vocabulary). xgrammar takes a rule's lookahead as exact (a token whose
 * rest ends inside it taken unchecked) where the rule is used once, not
 * last; where that may be so after its RuleInliner (follow_may_be_exact),
 * the lookahead is the one character class, complete after one
 * character, for which exactness does not matter. A grammar that allows
 * blank space before , } ] (any_whitespace, never what the shim compiles)
 * traces to "any character" there and keeps xgrammar's form.
 */
#include "grammar/value_lookahead.h"

#include <string>
#include <vector>

#include "grammar/follow_sets.h"
#include "grammar/number_lookahead.h"

/* The lookaheads that say only "a JSON separator follows" (a string's),
 * as printed: the converter's (basic_string_sub, with blank space first)
 * and bounded_strings.cc's (compact). */
static const char *const SEPARATOR_LOOKAHEADS[] = {
	" (=([ \\n\\r\\t]* [,}\\]:]))",
	" (=([,}\\]:]))",
};

static bool separator_lookahead(const std::string &lookahead)
{
	for (const char *s : SEPARATOR_LOOKAHEADS)
		if (lookahead == s)
			return true;
	return false;
}

std::string values_with_lookahead(const std::string &ebnf, const std::string &root,
				  int max_rules, int *n_rewritten)
{
	*n_rewritten = 0;
	follow_grammar g;
	if (!follow_grammar_read(ebnf, root, &g))
		return ebnf;
	std::vector<char> number;
	for (int r = 0; r < (int)g.rules.size() && *n_rewritten < max_rules; r++) {
		follow_rule &ru = g.rules[r];
		bool replace = separator_lookahead(ru.lookahead);
		if (!ru.reachable || r == g.root || ru.opaque ||
		    (!ru.lookahead.empty() && !replace) || follow_xgrammar_derives(g, r) ||
		    number_rule(g, r, number))
			continue;
		int follow = follow_set(g, r);
		if (follow & FOLLOW_OTHER)
			continue;
		/* two characters where xgrammar cannot take them as exact */
		std::string two;
		if (!follow_may_be_exact(g, r))
			two = follow_lookahead_strings(follow_strings_of(g, r));
		std::string &line = g.lines[ru.line];
		line.resize(line.size() - ru.lookahead.size());
		line += two.empty() ? follow_lookahead(follow) : two;
		++*n_rewritten;
	}
	return *n_rewritten ? follow_grammar_text(g) : ebnf;
}
