/*
 * bounded_strings.cc — maxLength/minLength strings as chains of rules.
 *
 * xgrammar 0.2.9's JSON-schema converter writes a length-bounded string
 * as `"\"" X{m, n} "\""` with X ::= [^"\\\r\n] (no escapes), a counted
 * repetition. At a position inside it three parser states are live (the
 * repetition, its body, the rule holding the closing quote) and none has
 * a lookahead for what follows the quote, so every piece holding a quote
 * (`",`, `"For`, `")));`...: ~1,350 of Llama 3's 128k) is parsed at run
 * time at every position: 45-80 us a token, where a free string
 * (basic_string_sub, one state with a lookahead) leaves ~260 and costs
 * ~25 us. The same language as a chain of right-recursive rules, one per
 * (characters still needed, characters still allowed),
 *
 *   S(need, room) ::= "\""               when need = 0
 *                   | [^"\\\r\n] S(need - 1, room - 1)   when room > 0
 *
 each with basic_string_sub's lookahead (=[ \n\r\t]* [,}\]:]), has one
 * live state and ~260 quote pieces left to check (~24 us); in a compact
 * grammar (no blank space between a value and what follows it: how the
 * shim compiles schemas) the lookahead is (=[,}\]:]) and ~210 are left
 * (~20 us; quiet machine, one position, bench/results/2026-11-29-devbox-
 * grammar-masks-2). The lookahead only lets the compile reject tokens
 * ahead; it claims what xgrammar already claims for every free string: a
 * string's closing quote is followed by JSON's next separator (or
 * nothing, at the root).
 * Unbounded room (minLength alone) is the rule calling itself. Chains of
 * equal bounds are one chain, and S(0, r) is shared by every bound.
 *
 * The cost moves to the compile: each rule is a state whose masks are
 * built over the whole vocabulary, hence max_rules.
 */
#include "grammar/bounded_strings.h"

#include <cctype>
#include <cstdlib>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

/* As Grammar::ToString prints the converter's rules and expressions. */
static const char CHAR_RULE_BODY[] = " ::= (([^\\\"\\\\\\r\\n]))";
static const char CHAR_CLASS[] = "[^\\\"\\\\\\r\\n]";
static const char OPEN_QUOTE[] = "\"\\\"\" ";
static const char CLOSE_QUOTE[] = " \"\\\"\"";
/* What may follow a string's closing quote: JSON's next separator, after
 * blank space unless the grammar is compact. */
static const char LOOKAHEAD_BLANK[] = " (=([ \\n\\r\\t]* [,}\\]:]))";
static const char LOOKAHEAD_COMPACT[] = " (=([,}\\]:]))";

typedef std::pair<long, long> chain_state; /* (need, room); room -1: unbounded */

static std::vector<std::string> split_lines(const std::string &s)
{
	std::vector<std::string> lines;
	size_t at = 0;
	while (at < s.size()) {
		size_t nl = s.find('\n', at);
		if (nl == std::string::npos)
			nl = s.size();
		lines.push_back(s.substr(at, nl - at));
		at = nl + 1;
	}
	return lines;
}

static bool starts_with(const std::string &s, const std::string &p)
{
	return s.compare(0, p.size(), p) == 0;
}

static bool ends_with(const std::string &s, const std::string &p)
{
	return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

/* The states S(m, n) needs, first to last. */
static std::vector<chain_state> chain_of(long m, long n)
{
	std::vector<chain_state> states;
	long room = n;
	for (long need = m; need > 0; need--) {
		states.push_back({need, room});
		room = room < 0 ? -1 : room - 1;
	}
	for (; room > 0; room--)
		states.push_back({0, room});
	states.push_back({0, room < 0 ? -1 : 0});
	return states;
}

static std::string state_name(const std::string &prefix, chain_state s)
{
	return prefix + "_" + std::to_string(s.first) + "_" +
	       (s.second < 0 ? std::string("inf") : std::to_string(s.second));
}

static std::string state_rule(const std::string &prefix, chain_state s, bool compact)
{
	long need = s.first, room = s.second;
	chain_state next = {need > 0 ? need - 1 : 0, room < 0 ? -1 : room - 1};
	std::string step = std::string("(") + CHAR_CLASS + " " + state_name(prefix, next) + ")";
	std::string body;
	if (need > 0)
		body = "(" + step + ")";
	else if (room == 0)
		body = "((\"\\\"\"))";
	else
		body = "((\"\\\"\") | " + step + ")";
	return state_name(prefix, s) + " ::= " + body +
	       (compact ? LOOKAHEAD_COMPACT : LOOKAHEAD_BLANK);
}

/* Parses "{M, N}" at s[at]; on success sets *end past the brace. */
static bool parse_bounds(const std::string &s, size_t at, long *m, long *n, size_t *end)
{
	if (at >= s.size() || s[at] != '{')
		return false;
	const char *p = s.c_str() + at + 1;
	char *q;
	*m = strtol(p, &q, 10);
	if (q == p || q[0] != ',' || q[1] != ' ')
		return false;
	p = q + 2;
	*n = strtol(p, &q, 10);
	if (q == p || *q != '}' || *m < 0 || *n < -1 || (*n >= 0 && *n < *m))
		return false;
	*end = (size_t)(q + 1 - s.c_str());
	return true;
}

std::string bounded_strings_as_chains(const std::string &ebnf, bool compact, int max_rules,
				      int *n_rewritten)
{
	*n_rewritten = 0;
	std::vector<std::string> lines = split_lines(ebnf);
	std::vector<std::string> names;
	std::unordered_set<std::string> char_rules;
	for (const std::string &l : lines) {
		size_t def = l.find(" ::= ");
		if (def == std::string::npos)
			continue;
		names.push_back(l.substr(0, def));
		if (ends_with(l, CHAR_RULE_BODY) && l.size() == def + sizeof CHAR_RULE_BODY - 1)
			char_rules.insert(names.back());
	}
	if (char_rules.empty())
		return ebnf;
	/* A prefix no rule of the grammar starts with, so no name collides. */
	std::string prefix = "sl_bounded_string";
	for (bool clash = true; clash;) {
		clash = false;
		for (const std::string &n : names)
			if (starts_with(n, prefix))
				clash = true;
		if (clash)
			prefix += "_";
	}

	/* One pass over each line: a quote, a name, bounds, a quote. The cost
	 * is linear in the text, whatever a hostile schema holds. */
	std::set<chain_state> have;
	std::vector<chain_state> order;
	for (std::string &l : lines) {
		size_t def = l.find(" ::= ");
		if (def == std::string::npos)
			continue;
		for (size_t at = l.find(OPEN_QUOTE, def); at != std::string::npos;
		     at = l.find(OPEN_QUOTE, at + 1)) {
			size_t x_at = at + sizeof OPEN_QUOTE - 1, x_end = x_at, end = 0;
			while (x_end < l.size() && (isalnum((unsigned char)l[x_end]) || l[x_end] == '_'))
				x_end++;
			long m = 0, n = 0;
			if (x_end == x_at || !char_rules.count(l.substr(x_at, x_end - x_at)) ||
			    !parse_bounds(l, x_end, &m, &n, &end) ||
			    l.compare(end, sizeof CLOSE_QUOTE - 1, CLOSE_QUOTE) != 0)
				continue;
			/* the chain has n + 1 states (m + 1 unbounded): past the
			 * limit before any is made */
			if ((n < 0 ? m : n) + 1 > (long)max_rules)
				continue;
			std::vector<chain_state> need;
			for (chain_state st : chain_of(m, n))
				if (!have.count(st))
					need.push_back(st);
			if ((long)(order.size() + need.size()) > (long)max_rules)
				continue;
			for (chain_state st : need) {
				have.insert(st);
				order.push_back(st);
			}
			l.replace(x_at, end + sizeof CLOSE_QUOTE - 1 - x_at, state_name(prefix, {m, n}));
			++*n_rewritten;
		}
	}
	if (*n_rewritten == 0)
		return ebnf;
	std::string out;
	for (const std::string &l : lines)
		out += l + "\n";
	for (chain_state s : order)
		out += state_rule(prefix, s, compact) + "\n";
	return out;
}
