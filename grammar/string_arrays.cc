/*
 * string_arrays.cc — an array of strings written as one copy of the
 * string's body per item position, each ending in what may follow that
 * item.
 *
 * xgrammar 0.2.9's converter writes an array of strings as
 *
 *   A ::= "[" I R{a, b} "]"      R ::= ", " I      I ::= "\"" B
 *
 * with B the string's body (basic_string_sub, or a bounded string's chain,
 * bounded_strings.cc), shared by every item. Inside an item the parser's
 * state is in B, whose mask the compile builds not knowing which item it
 * is in: a piece that closes the string and goes on (`",`, `"]`, `.",`,
 * `", "`) is valid or not by the repetition's count below it on the stack
 * (`,` only while fewer than maxItems, `]` only once minItems are there),
 * so it is "uncertain" and run through the parser at every mask. The
 * follow-set lookahead (value_lookahead.cc) cannot decide them: it is one
 * set for every position, and xgrammar never takes a chain's lookahead as
 * exact (a chain rule is used last), so a piece ending inside it is left
 * to the parser too. 11_str_array (maxItems 3, maxLength 12) left 49 such
 * pieces of Llama 3's 128k at every position inside an item, 33-57 us a
 * mask at p99 (bench/results/2026-11-29-devbox-grammar-masks-6).
 *
 * Written as
 *
 *   A ::= "[" "\"" B_1
 *   B_k: B with its closing quote "\"" written "\"" T_k
 *   T_k ::= "]"                     once k >= 1 + a (minItems)
 *         | ", " "\"" B_(k+1)       while k < 1 + b (maxItems)
 *
 * (unbounded: the last position, k = 1 + a, goes on with B_k itself;
 * minItems = maxItems = 2, which the converter writes "[" I ", " I "]",
 * is read as a = b = 1), a
 * piece that closes item k and goes on is inside B_k's own rules, decided
 * at compile time; only pieces that run past the array's closing bracket
 * leave B_k, and those meet the lookahead of what follows the array. Each
 * B_k derives exactly B's strings followed by T_k's (every derivation of
 * B ends with its lone closing quote), so A's language is unchanged: "["
 * then 1 + a to 1 + b items, ", " between them, then "]". An array that
 * may be empty keeps its ("[" "]") choice as it was.
 *
 * An item that is an anyOf with a string among its cases (48_mixed_any_of:
 * integer, boolean, null, string maxLength 8; the converter writes I ::=
 * C_0 | basic_boolean | basic_null | C_3, with C_3 ::= "\"" B) left the
 * same pieces undecided in its string (49 of Llama 3's, 52-67 us at p99
 * on the H200 host). There each position gets a copy of I as well:
 *
 *   I_k ::= C_0 T_k | basic_boolean T_k | basic_null T_k | "\"" B_k
 *
 * every case not a string followed by T_k (its own rules shared, as
 * before: what runs past them meets their follow-set lookahead, ", ]"),
 * each string case going on in its own copy B_k; A ::= "[" I_1 and T_k's
 * next item is I_(k+1) (unbounded: I_k itself at the last). Each I_k
 * derives exactly I's texts followed by T_k's, so the language is again
 * unchanged. An item with no string case is left as it is (nothing to
 * decide), and so is one with a case that cannot be printed back (a
 * quantified element: its bounds are not kept by the scan).
 *
 * The cost is in the compile: each copy is a parser state whose masks are
 * built over the vocabulary, hence max_rules (48_mixed_any_of adds 44:
 * four positions of nine chain rules, I_k and T_k). The grammar is read as
 * follow_sets.cc reads it (no regular expressions: linear in the text).
 */
#include "grammar/string_arrays.h"

#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/follow_sets.h"

namespace {

/* One choice of the item rule I: a string ("\"" B, or a rule holding
 * only that) or anything else, printed as it stands. */
struct item_choice {
	int body;	  /* B, or -1: not a string */
	std::string text; /* the choice's elements, as printed, for another */
};

/* One array as the converter writes it: A's first choice is "[" I, then
 * items written out (SEP I), then R{m, n}, R optional, or no R, then
 * "]"; its others "[" "]" (may be empty). */
struct array_form {
	std::string rest;	   /* A's other choices, as printed (" | (...)"), or empty */
	int item;		   /* I */
	bool lone_string;	   /* I ::= "\"" B: I itself needs no copy */
	std::vector<item_choice> choices; /* I's */
	std::string separator;	   /* R's literal before the item, as printed: "\", \"" */
	long min_items, max_items; /* max -1: unbounded */
};

bool plain(const follow_elem &e)
{
	return !e.quantified && !e.optional;
}

bool literal(const follow_elem &e, const char *text)
{
	return e.kind == 'l' && e.text == text && plain(e);
}

bool close_quote(const follow_sequence &s)
{
	return s.size() == 1 && literal(s[0], "\\\"");
}

/* "NAME{M, N}" in A's line: R's bounds (N -1: unbounded). */
bool rep_bounds(const std::string &line, const std::string &name, long *m, long *n)
{
	size_t at = line.find(" " + name + "{", line.find(" ::= ") + 4);
	if (at == std::string::npos)
		return false;
	const char *p = line.c_str() + at + name.size() + 2;
	char *q;
	*m = strtol(p, &q, 10);
	if (q == p || q[0] != ',' || q[1] != ' ')
		return false;
	p = q + 2;
	*n = strtol(p, &q, 10);
	/* past 2^20 items no array is unrolled: no sum below overflows */
	return q != p && *q == '}' && *m >= 0 && *m <= 1 << 20 && *n >= -1 && *n <= 1 << 20 &&
	       (*n < 0 || *n >= *m);
}

/* R's choice (SEP I): its separator, as printed. */
bool separator_item(const follow_sequence &s, int item, std::string *sep)
{
	if (s.size() != 2 || s[0].kind != 'l' || s[0].text.empty() || !plain(s[0]) ||
	    s[1].kind != 'r' || s[1].ref != item || !plain(s[1]))
		return false;
	*sep = "\"" + s[0].text + "\"";
	return true;
}

std::string elem_text(const follow_elem &e, const std::string &ref_name)
{
	if (e.kind == 'l')
		return "\"" + e.text + "\"";
	if (e.kind == 'c')
		return "[" + e.text + "]";
	return ref_name;
}

/* "\"" B: B, else -1. */
int string_body(const follow_sequence &s)
{
	if (s.size() == 2 && literal(s[0], "\\\"") && s[1].kind == 'r' && plain(s[1]))
		return s[1].ref;
	return -1;
}

/* I's choices: each a string ("\"" B, or a rule whose one choice is
 * that: an anyOf's string case) or plain elements printed as they stand;
 * false when none is a string (nothing to decide) or one cannot be
 * printed (a quantified element: its bounds are not kept). */
bool read_item(const follow_grammar &g, int item, array_form *a)
{
	const follow_rule &ir = g.rules[item];
	if (ir.opaque || ir.choices.empty())
		return false;
	a->item = item;
	a->lone_string = ir.choices.size() == 1 && string_body(ir.choices[0]) >= 0;
	bool any_string = false;
	for (const follow_sequence &s : ir.choices) {
		item_choice c{string_body(s), ""};
		if (c.body < 0 && s.size() == 1 && s[0].kind == 'r' && plain(s[0])) {
			const follow_rule &cr = g.rules[s[0].ref];
			if (!cr.opaque && cr.choices.size() == 1)
				c.body = string_body(cr.choices[0]);
		}
		for (size_t e = 0; c.body < 0 && e < s.size(); e++) {
			if (!plain(s[e]))
				return false;
			c.text += (e ? " " : "") +
				  elem_text(s[e], s[e].kind == 'r' ? g.rules[s[e].ref].name : "");
		}
		if (c.body < 0 && c.text.empty())
			return false;
		any_string = any_string || c.body >= 0;
		a->choices.push_back(c);
	}
	return any_string;
}

/* Whether rule r is an array in the converter's form whose items may be
 * strings. */
bool read_array(const follow_grammar &g, int r, array_form *a)
{
	const follow_rule &ru = g.rules[r];
	if (ru.opaque || ru.choices.empty())
		return false;
	const follow_sequence &s = ru.choices[0];
	if (s.size() < 3 || !literal(s[0], "[") || !literal(s.back(), "]") || s[1].kind != 'r' ||
	    !plain(s[1]))
		return false;
	for (size_t c = 1; c < ru.choices.size(); c++) {
		const follow_sequence &e = ru.choices[c];
		if (e.size() != 2 || !literal(e[0], "[") || !literal(e[1], "]"))
			return false;
		a->rest += " | (\"[\" \"]\")";
	}
	const int item = s[1].ref;
	if (!read_item(g, item, a))
		return false;
	a->min_items = a->max_items = 1;
	/* items written out in the sequence (a fixed count: "[" I SEP I "]") */
	size_t k = 2;
	for (; k + 2 < s.size() && s[k].kind == 'l'; k += 2) {
		std::string sep;
		follow_sequence pair(s.begin() + (long)k, s.begin() + (long)k + 2);
		if (!separator_item(pair, item, &sep) || (!a->separator.empty() && sep != a->separator))
			return false;
		a->separator = sep;
		a->min_items++, a->max_items++;
	}
	if (k + 1 == s.size())
		return true;
	if (k + 2 != s.size())
		return false;
	const follow_elem &rep = s[k];
	if (rep.kind != 'r')
		return false;
	const follow_rule &rr = g.rules[rep.ref];
	std::string sep;
	if (rep.quantified) { /* R{m, n}, R ::= SEP I */
		long m, n;
		if (rr.opaque || !rep_bounds(g.lines[ru.line], rep.text, &m, &n) ||
		    rr.choices.size() != 1 || !separator_item(rr.choices[0], item, &sep))
			return false;
		a->min_items += m;
		a->max_items = n < 0 ? -1 : a->max_items + n;
	} else { /* R ::= "" | SEP I: one more item at most */
		if (rr.opaque || rr.choices.size() != 2 || rr.choices[0].size() != 1 ||
		    !literal(rr.choices[0][0], "") || !separator_item(rr.choices[1], item, &sep))
			return false;
		a->max_items++;
	}
	if (!a->separator.empty() && sep != a->separator)
		return false;
	a->separator = sep;
	return true;
}

/* The rules the item's string bodies B reach through their choices' last
 * elements, each B among them; false when one of them is not a string
 * body: each choice the lone closing quote, or plain elements ending in a
 * rule of the body (the only place a body rule is used), so that every
 * string B derives ends with that quote. */
bool body_rules(const follow_grammar &g, const array_form &a, int max_rules,
		std::vector<int> *out)
{
	std::unordered_map<int, int> in;
	out->clear();
	for (const item_choice &c : a.choices)
		if (c.body >= 0 && !in.count(c.body)) {
			in[c.body] = (int)out->size();
			out->push_back(c.body);
		}
	for (size_t i = 0; i < out->size(); i++) {
		const follow_rule &ru = g.rules[(*out)[i]];
		if (ru.opaque || ru.choices.empty())
			return false;
		for (const follow_sequence &s : ru.choices) {
			if (close_quote(s))
				continue;
			const follow_elem &last = s.back();
			if (last.kind != 'r')
				return false;
			if (!in.count(last.ref)) {
				if ((int)out->size() >= max_rules)
					return false;
				in[last.ref] = (int)out->size();
				out->push_back(last.ref);
			}
		}
	}
	for (int r : *out)
		for (const follow_sequence &s : g.rules[r].choices)
			for (size_t k = 0; k < s.size(); k++)
				if (s[k].quantified ||
				    (s[k].kind == 'r' && k + 1 < s.size() && in.count(s[k].ref)))
					return false;
	return true;
}

struct namer {
	std::string prefix;
	std::string body(int array, long k, size_t i) const
	{
		return prefix + "_" + std::to_string(array) + "_" + std::to_string(k) + "_" +
		       std::to_string(i);
	}
	std::string item(int array, long k) const
	{
		return prefix + "_" + std::to_string(array) + "_" + std::to_string(k) + "_item";
	}
	std::string tail(int array, long k) const
	{
		return prefix + "_" + std::to_string(array) + "_" + std::to_string(k) + "_end";
	}
};

/* Where item k starts, after "[" or the separator: its string's opening
 * quote and B_k where I is that string alone, else I_k. */
std::string item_start(const array_form &a, const std::vector<int> &body, const namer &nm,
		       int array, long k)
{
	if (!a.lone_string)
		return nm.item(array, k);
	size_t i = 0;
	while (body[i] != a.choices[0].body)
		i++;
	return "\"\\\"\" " + nm.body(array, k, i);
}

/* The rules each position adds: B_k's, T_k and (unless I is a lone
 * string) I_k. */
long rules_per_position(const array_form &a, const std::vector<int> &body)
{
	return (long)body.size() + 1 + (a.lone_string ? 0 : 1);
}

/* I_k (I's choices, a string's body B_k, every other choice followed by
 * T_k), B_k's rules (a copy of each body rule, renamed, the closing quote
 * going on with T_k) and T_k. */
void write_position(const follow_grammar &g, const array_form &a, const std::vector<int> &body,
		    const namer &nm, int array, long k, long positions, const std::string &lookahead,
		    std::string *out)
{
	std::unordered_map<int, size_t> index;
	for (size_t i = 0; i < body.size(); i++)
		index[body[i]] = i;
	if (!a.lone_string) {
		std::string line = nm.item(array, k) + " ::= (";
		for (size_t c = 0; c < a.choices.size(); c++) {
			const item_choice &ch = a.choices[c];
			line += c ? " | (" : "(";
			line += ch.body >= 0 ? "\"\\\"\" " + nm.body(array, k, index[ch.body])
					     : ch.text + " " + nm.tail(array, k);
			line += ")";
		}
		*out += line + ")" + lookahead + "\n";
	}
	for (size_t i = 0; i < body.size(); i++) {
		std::string line = nm.body(array, k, i) + " ::= (";
		const follow_rule &ru = g.rules[body[i]];
		for (size_t c = 0; c < ru.choices.size(); c++) {
			const follow_sequence &s = ru.choices[c];
			line += c ? " | (" : "(";
			if (close_quote(s)) {
				line += "\"\\\"\" " + nm.tail(array, k);
			} else {
				for (size_t e = 0; e < s.size(); e++) {
					bool copy = s[e].kind == 'r' && index.count(s[e].ref);
					line += (e ? " " : "") +
						elem_text(s[e], copy ? nm.body(array, k, index[s[e].ref])
								     : g.rules[s[e].ref < 0 ? 0 : s[e].ref].name);
				}
			}
			line += ")";
		}
		*out += line + ")" + lookahead + "\n";
	}
	bool close = k >= a.min_items;
	bool more = a.max_items < 0 || k < a.max_items;
	long next = a.max_items < 0 && k == positions ? k : k + 1;
	std::string t = nm.tail(array, k) + " ::= (";
	if (close)
		t += "(\"]\")";
	if (more)
		t += std::string(close ? " | " : "") + "(" + a.separator + " " +
		     item_start(a, body, nm, array, next) + ")";
	*out += t + ")" + lookahead + "\n";
}

/* What may follow A, as a lookahead for the copies (all used as a
 * sequence's last element: xgrammar never takes it as exact, so two
 * characters are safe); empty where the trace cannot tell. */
std::string array_lookahead(follow_grammar &g, int a)
{
	int follow = follow_set(g, a);
	if (follow & FOLLOW_OTHER)
		return "";
	std::string two = follow_lookahead_strings(follow_strings_of(g, a));
	return two.empty() ? follow_lookahead(follow) : two;
}

} // namespace

std::string string_arrays_unrolled(const std::string &ebnf, const std::string &root,
				   int max_rules, int *n_rewritten)
{
	*n_rewritten = 0;
	follow_grammar g;
	if (!follow_grammar_read(ebnf, root, &g))
		return ebnf;
	/* A prefix no rule of the grammar starts with, so no name collides. */
	namer nm{"sl_string_array"};
	for (bool clash = true; clash;) {
		clash = false;
		for (const follow_rule &ru : g.rules)
			if (ru.name.compare(0, nm.prefix.size(), nm.prefix) == 0)
				clash = true;
		if (clash)
			nm.prefix += "_";
	}

	std::string added;
	int n_added = 0;
	for (int r = 0; r < (int)g.rules.size(); r++) {
		const follow_rule &ru = g.rules[r];
		array_form a{};
		std::vector<int> body;
		if (!ru.reachable || !ru.lookahead.empty() || !read_array(g, r, &a) ||
		    a.min_items > max_rules || !body_rules(g, a, max_rules, &body))
			continue;
		long positions = a.max_items < 0 ? a.min_items : a.max_items;
		long per = rules_per_position(a, body);
		if (positions > max_rules || n_added + positions * per > (long)max_rules)
			continue;
		std::string lookahead = array_lookahead(g, r);
		int array = *n_rewritten;
		for (long k = 1; k <= positions; k++)
			write_position(g, a, body, nm, array, k, positions, lookahead, &added);
		n_added += (int)(positions * per);
		g.lines[ru.line] = ru.name + " ::= ((\"[\" " + item_start(a, body, nm, array, 1) + ")" +
				   a.rest + ")";
		++*n_rewritten;
	}
	return *n_rewritten ? follow_grammar_text(g) + added : ebnf;
}
