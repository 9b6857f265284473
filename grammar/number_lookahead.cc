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
 * The follow set is not assumed from JSON but traced in the grammar: the
 * first characters of what follows each use of the rule, and where that
 * may be empty, the follow set of the rule using it; a rule repeated is
 * followed by its own first characters too. A rule gets a lookahead only
 * where that set is made of , } ] alone (no character of a string or a
 * key: a number inside either would be followed by something else, and
 * keeps xgrammar's form), and the lookahead is that set: one character
 * class, so whether xgrammar takes it as "exact" does not matter (a
 * one-character lookahead is complete after one character). Everything
 * the trace cannot tell (a cycle, a chain deeper than MAX_DEPTH, a
 * character class, an escape) counts as "any character": the error is
 * always towards no lookahead. A grammar line the scan cannot read leaves
 * the whole grammar unchanged.
 *
 * Cost: one pass to read the grammar, then each rule's first set and
 * follow set computed once (memoized), each use looked at once: linear in
 * the text. No parser state is added, so the compile costs about the same.
 */
#include "grammar/number_lookahead.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

/* What may come next, as flags: the three characters that may follow a
 * compact JSON value, the end of the text, anything else. */
enum { F_COMMA = 1, F_RBRACE = 2, F_RBRACKET = 4, F_END = 8, F_OTHER = 16 };

/* Rule chains traced deeper than this count as "any character". */
enum { MAX_DEPTH = 128 };

struct elem {
	char kind;	   /* 'l' string literal, 'c' character class, 'r' rule */
	std::string text;  /* literal or class as printed, without its delimiters; rule name */
	bool optional;	   /* its quantifier allows none */
	bool quantified;   /* it has a quantifier (may repeat) */
	int ref;	   /* the rule, for 'r' */
};
typedef std::vector<elem> sequence;

struct rule {
	std::string name;
	size_t line;
	bool has_lookahead, in_lookahead, reachable;
	std::vector<sequence> choices;
	/* first characters of each choice from each element on (suffix sets) */
	std::vector<std::vector<int>> suffix_first;
	std::vector<std::vector<char>> suffix_nullable;
	int first_state, first, follow_state, follow, number_state;
	bool nullable, number;
	int n_last, n_plain_nonlast; /* uses as a sequence's last element, plain uses before it */
};

struct use {
	int rule, choice, pos;
};

struct grammar_text {
	std::vector<rule> rules;
	std::vector<std::vector<use>> uses;
	int root;
};

/* ---- reading Grammar::ToString's text ---- */

struct reader {
	const std::string &s;
	size_t i;
};

static bool name_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

static void skip_spaces(reader &r)
{
	while (r.i < r.s.size() && r.s[r.i] == ' ')
		r.i++;
}

/* "*", "+", "?", "{M}" or "{M, N}" (N may be -1), or none. */
static bool read_quantifier(reader &r, elem *e)
{
	e->optional = e->quantified = false;
	if (r.i >= r.s.size())
		return true;
	char c = r.s[r.i];
	if (c == '*' || c == '?' || c == '+') {
		e->optional = c != '+';
		e->quantified = true;
		r.i++;
	} else if (c == '{') {
		const char *p = r.s.c_str() + r.i + 1;
		char *q;
		long m = strtol(p, &q, 10);
		if (q == p || m < 0)
			return false;
		if (q[0] == ',' && q[1] == ' ') {
			p = q + 2;
			strtol(p, &q, 10);
			if (q == p)
				return false;
		}
		if (*q != '}')
			return false;
		e->optional = m == 0;
		e->quantified = true;
		r.i = (size_t)(q + 1 - r.s.c_str());
	}
	return true;
}

static bool read_elem(reader &r, elem *e)
{
	size_t at = r.i, n = r.s.size();
	if (at >= n)
		return false;
	char c = r.s[at];
	e->ref = -1;
	if (c == '"' || c == '[') {
		char close = c == '"' ? '"' : ']';
		for (r.i++; r.i < n && r.s[r.i] != close; r.i++)
			if (r.s[r.i] == '\\')
				r.i++;
		if (r.i >= n)
			return false;
		r.i++;
		e->kind = c == '"' ? 'l' : 'c';
		e->text = r.s.substr(at + 1, r.i - at - 2);
	} else if (name_char(c)) {
		while (r.i < n && name_char(r.s[r.i]))
			r.i++;
		e->kind = 'r';
		e->text = r.s.substr(at, r.i - at);
	} else {
		return false; /* a group inside a sequence: not read */
	}
	return read_quantifier(r, e);
}

/* "(e e ...)" or one element alone. */
static bool read_sequence(reader &r, sequence *out)
{
	if (r.i < r.s.size() && r.s[r.i] != '(') {
		elem e;
		if (!read_elem(r, &e))
			return false;
		out->push_back(e);
		return true;
	}
	for (r.i++;;) {
		skip_spaces(r);
		if (r.i >= r.s.size())
			return false;
		if (r.s[r.i] == ')') {
			r.i++;
			return !out->empty();
		}
		elem e;
		if (!read_elem(r, &e))
			return false;
		out->push_back(e);
	}
}

/* "(S | S | ...)" */
static bool read_choices(reader &r, std::vector<sequence> *out)
{
	if (r.i >= r.s.size() || r.s[r.i] != '(')
		return false;
	for (r.i++;;) {
		skip_spaces(r);
		sequence s;
		if (!read_sequence(r, &s))
			return false;
		out->push_back(s);
		skip_spaces(r);
		if (r.i < r.s.size() && r.s[r.i] == '|') {
			r.i++;
			continue;
		}
		if (r.i < r.s.size() && r.s[r.i] == ')') {
			r.i++;
			return true;
		}
		return false;
	}
}

/* "NAME ::= CHOICES" and optionally " (=SEQUENCE)". The rules a lookahead
 * names go to *in_lookahead. */
static bool read_line(const std::string &l, size_t line, rule *out,
		      std::vector<std::string> *in_lookahead)
{
	size_t def = l.find(" ::= ");
	if (def == std::string::npos || def == 0)
		return false;
	out->name = l.substr(0, def);
	for (char c : out->name)
		if (!name_char(c))
			return false;
	out->line = line;
	reader r{l, def + 5};
	if (!read_choices(r, &out->choices))
		return false;
	out->has_lookahead = false;
	if (l.compare(r.i, 3, " (=") == 0) {
		r.i += 3;
		sequence s;
		if (!read_sequence(r, &s) || r.i >= l.size() || l[r.i] != ')')
			return false;
		r.i++;
		for (const elem &e : s)
			if (e.kind == 'r')
				in_lookahead->push_back(e.text);
		out->has_lookahead = true;
	}
	return r.i == l.size();
}

static bool read_grammar(const std::string &ebnf, const std::string &root,
			 std::vector<std::string> *lines, grammar_text *g)
{
	size_t at = 0;
	while (at < ebnf.size()) {
		size_t nl = ebnf.find('\n', at);
		if (nl == std::string::npos)
			nl = ebnf.size();
		lines->push_back(ebnf.substr(at, nl - at));
		at = nl + 1;
	}
	std::unordered_map<std::string, int> index;
	std::vector<std::string> in_lookahead;
	for (size_t i = 0; i < lines->size(); i++) {
		if ((*lines)[i].empty())
			continue;
		rule ru{};
		if (!read_line((*lines)[i], i, &ru, &in_lookahead) || index.count(ru.name))
			return false;
		index[ru.name] = (int)g->rules.size();
		g->rules.push_back(ru);
	}
	if (!index.count(root))
		return false;
	g->root = index[root];
	for (const std::string &n : in_lookahead) {
		if (!index.count(n))
			return false;
		g->rules[index[n]].in_lookahead = true;
	}
	g->uses.assign(g->rules.size(), {});
	for (int p = 0; p < (int)g->rules.size(); p++) {
		rule &ru = g->rules[p];
		for (int c = 0; c < (int)ru.choices.size(); c++)
			for (int k = 0; k < (int)ru.choices[c].size(); k++) {
				elem &e = ru.choices[c][k];
				if (e.kind != 'r')
					continue;
				auto it = index.find(e.text);
				if (it == index.end())
					return false;
				e.ref = it->second;
				g->uses[e.ref].push_back({p, c, k});
				bool last = k + 1 == (int)ru.choices[c].size();
				if (last && e.ref != p)
					g->rules[e.ref].n_last++;
				else if (!last && !e.quantified)
					g->rules[e.ref].n_plain_nonlast++;
			}
	}
	return true;
}

/* ---- first and follow sets ---- */

static int first_of_char(const std::string &literal)
{
	switch (literal[0]) {
	case ',': return F_COMMA;
	case '}': return F_RBRACE;
	case ']': return F_RBRACKET;
	default: return F_OTHER; /* an escape too: never one of the three */
	}
}

static int first_of_rule(grammar_text &g, int r, bool *nullable, int depth);

static int first_of_elem(grammar_text &g, const elem &e, bool *nullable, int depth)
{
	int f = 0;
	bool n = false;
	if (e.kind == 'l') {
		if (e.text.empty())
			n = true;
		else
			f = first_of_char(e.text);
	} else if (e.kind == 'c') {
		f = F_OTHER;
	} else {
		f = first_of_rule(g, e.ref, &n, depth + 1);
	}
	*nullable = n || e.optional;
	return f;
}

/* A cycle or a chain too deep counts as "anything, or nothing": more than
 * the truth, which only ever takes a lookahead away. */
static int first_of_rule(grammar_text &g, int r, bool *nullable, int depth)
{
	rule &ru = g.rules[r];
	if (ru.first_state == 2) {
		*nullable = ru.nullable;
		return ru.first;
	}
	if (ru.first_state == 1 || depth > MAX_DEPTH) {
		*nullable = true;
		return F_OTHER;
	}
	ru.first_state = 1;
	int f = 0;
	bool any_nullable = false;
	for (const sequence &s : ru.choices) {
		bool all = true;
		for (const elem &e : s) {
			bool n;
			f |= first_of_elem(g, e, &n, depth);
			if (!n) {
				all = false;
				break;
			}
		}
		any_nullable = any_nullable || all;
	}
	ru.first_state = 2;
	ru.first = f;
	ru.nullable = any_nullable;
	*nullable = any_nullable;
	return f;
}

/* Each choice's first characters from each element on, right to left:
 * once per sequence, so tracing a use costs nothing more. */
static void suffix_sets(grammar_text &g)
{
	for (rule &ru : g.rules) {
		ru.suffix_first.resize(ru.choices.size());
		ru.suffix_nullable.resize(ru.choices.size());
		for (size_t c = 0; c < ru.choices.size(); c++) {
			const sequence &s = ru.choices[c];
			std::vector<int> &f = ru.suffix_first[c];
			std::vector<char> &n = ru.suffix_nullable[c];
			f.assign(s.size() + 1, 0);
			n.assign(s.size() + 1, 1);
			for (size_t k = s.size(); k-- > 0;) {
				bool en;
				int ef = first_of_elem(g, s[k], &en, 0);
				f[k] = ef | (en ? f[k + 1] : 0);
				n[k] = en && n[k + 1];
			}
		}
	}
}

static int follow_of(grammar_text &g, int r, int depth)
{
	rule &ru = g.rules[r];
	if (ru.follow_state == 2)
		return ru.follow;
	if (ru.follow_state == 1 || depth > MAX_DEPTH)
		return F_OTHER;
	ru.follow_state = 1;
	int f = (r == g.root ? F_END : 0) | (ru.in_lookahead ? F_OTHER : 0);
	for (const use &u : g.uses[r]) {
		if (f & F_OTHER)
			break; /* no lookahead whatever else follows */
		const rule &p = g.rules[u.rule];
		if (p.choices[u.choice][u.pos].quantified) {
			bool n;
			f |= first_of_rule(g, r, &n, 0);
		}
		f |= p.suffix_first[u.choice][u.pos + 1];
		if (p.suffix_nullable[u.choice][u.pos + 1])
			f |= follow_of(g, u.rule, depth + 1);
	}
	ru.follow_state = 2;
	ru.follow = f;
	return f;
}

/* ---- which rules are numbers ---- */

static bool only_chars(const std::string &s, const char *allowed)
{
	for (char c : s)
		if (!strchr(allowed, c))
			return false;
	return true;
}

/* Every element a number piece: a literal of digits, signs, '.' and
 * exponent letters, a class of those (as printed: [0-9], [1-9], [+\-],
 * [eE]), or another number rule. */
static bool is_number(grammar_text &g, int r, int depth)
{
	rule &ru = g.rules[r];
	if (ru.number_state == 2)
		return ru.number;
	if (ru.number_state == 1 || depth > MAX_DEPTH)
		return false;
	ru.number_state = 1;
	bool ok = true;
	for (const sequence &s : ru.choices)
		for (const elem &e : s)
			ok = ok && (e.kind == 'l' ? only_chars(e.text, "0123456789+-.eE")
				    : e.kind == 'c' ? !e.text.empty() && e.text[0] != '^' &&
							  only_chars(e.text, "0123456789+-eE\\")
						    : is_number(g, e.ref, depth + 1));
	ru.number_state = 2;
	ru.number = ok;
	return ok;
}

static void mark_reachable(grammar_text &g)
{
	std::vector<int> todo{g.root};
	g.rules[g.root].reachable = true;
	while (!todo.empty()) {
		int r = todo.back();
		todo.pop_back();
		for (const sequence &s : g.rules[r].choices)
			for (const elem &e : s)
				if (e.kind == 'r' && !g.rules[e.ref].reachable) {
					g.rules[e.ref].reachable = true;
					todo.push_back(e.ref);
				}
	}
}

/* The lookahead for a follow set of , } ] and the end: those characters;
 * a rule only the end follows may have any (nothing may come after it),
 * so it gets all three. */
static std::string lookahead_of(int follow)
{
	if (!(follow & (F_COMMA | F_RBRACE | F_RBRACKET)))
		follow |= F_COMMA | F_RBRACE | F_RBRACKET;
	std::string cls;
	if (follow & F_COMMA)
		cls += ",";
	if (follow & F_RBRACE)
		cls += "}";
	if (follow & F_RBRACKET)
		cls += "\\]";
	return " (=([" + cls + "]))";
}

std::string numbers_with_lookahead(const std::string &ebnf, const std::string &root,
				   int max_rules, int *n_rewritten)
{
	*n_rewritten = 0;
	std::vector<std::string> lines;
	grammar_text g;
	if (!read_grammar(ebnf, root, &lines, &g))
		return ebnf;
	for (int r = 0; r < (int)g.rules.size(); r++) {
		bool n;
		first_of_rule(g, r, &n, 0);
	}
	suffix_sets(g);
	mark_reachable(g);
	for (int r = 0; r < (int)g.rules.size() && *n_rewritten < max_rules; r++) {
		rule &ru = g.rules[r];
		/* Where a rule is used once, not last, xgrammar derives a
		 * lookahead of its own (the rest of that sequence), a finer
		 * one: leave it that. The root's undecided tokens are all
		 * rejected anyway. */
		bool derived = ru.n_last == 0 && ru.n_plain_nonlast == 1;
		if (!ru.reachable || r == g.root || ru.has_lookahead || derived ||
		    !is_number(g, r, 0))
			continue;
		int follow = follow_of(g, r, 0);
		if (follow & F_OTHER)
			continue;
		lines[ru.line] += lookahead_of(follow);
		++*n_rewritten;
	}
	if (*n_rewritten == 0)
		return ebnf;
	std::string out;
	for (const std::string &l : lines)
		out += l + "\n";
	return out;
}
