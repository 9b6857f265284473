/*
 * follow_sets.cc — first and follow sets of the rules of a grammar as
 * xgrammar's Grammar::ToString prints it, for the lookahead rewrites
 * (number_lookahead.cc, value_lookahead.cc).
 *
 * A rule's follow set is the first characters of what follows each use of
 * it, and where that may be empty, the follow set of the rule using it; a
 * rule repeated is followed by its own first characters too. Only uses in
 * rules the root reaches count (no parse holds the others), and a rule's
 * use of itself at its own end adds nothing (its follow set is what is
 * being computed). Everything the trace cannot tell (a cycle through
 * other rules, a chain deeper than MAX_DEPTH, a character class, an
 * escape) counts as "any character": the error is always towards a larger
 * set, which only ever takes a lookahead away. A grammar line the scan
 * cannot read leaves the whole grammar unread.
 *
 * Cost: one pass to read the grammar, then each rule's first set and
 * follow set computed once (memoized), each use looked at once: linear in
 * the text.
 */
#include "grammar/follow_sets.h"

#include <cctype>
#include <cstdlib>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

/* Rule chains traced deeper than this count as "any character". */
enum { MAX_DEPTH = 128 };

typedef follow_elem elem;
typedef follow_sequence sequence;
typedef follow_rule rule;
typedef follow_use use;
typedef follow_grammar grammar_text;

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
	/* A regular expression's rule (a pattern's string body): a leaf, read
	 * as "anything, or nothing" (its first set FOLLOW_OTHER, nullable).
	 * Its end is not looked for: a line that holds " (=" anywhere is not
	 * read. */
	if (l.compare(r.i, 6, "Regex(") == 0) {
		out->opaque = true;
		return l.find(" (=") == std::string::npos;
	}
	if (!read_choices(r, &out->choices))
		return false;
	out->lookahead.clear();
	if (l.compare(r.i, 3, " (=") == 0) {
		size_t at = r.i;
		r.i += 3;
		sequence s;
		if (!read_sequence(r, &s) || r.i >= l.size() || l[r.i] != ')')
			return false;
		r.i++;
		for (const elem &e : s)
			if (e.kind == 'r')
				in_lookahead->push_back(e.text);
		out->lookahead = l.substr(at);
	}
	return r.i == l.size();
}

static bool read_grammar(const std::string &ebnf, const std::string &root, grammar_text *g)
{
	std::vector<std::string> *lines = &g->lines;
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
	case ',': return FOLLOW_COMMA;
	case '}': return FOLLOW_RBRACE;
	case ']': return FOLLOW_RBRACKET;
	default: return FOLLOW_OTHER; /* an escape too: never one of the three */
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
		f = FOLLOW_OTHER;
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
	if (ru.first_state == 1 || depth > MAX_DEPTH || ru.opaque) {
		*nullable = true;
		return FOLLOW_OTHER;
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
		return FOLLOW_OTHER;
	ru.follow_state = 1;
	int f = (r == g.root ? FOLLOW_END : 0) | (ru.in_lookahead ? FOLLOW_OTHER : 0);
	for (const use &u : g.uses[r]) {
		if (f & FOLLOW_OTHER)
			break; /* no lookahead whatever else follows */
		const rule &p = g.rules[u.rule];
		if (!p.reachable)
			continue; /* no parse holds it */
		if (p.choices[u.choice][u.pos].quantified) {
			bool n;
			f |= first_of_rule(g, r, &n, 0);
		}
		f |= p.suffix_first[u.choice][u.pos + 1];
		/* at the end of a rule of its own: followed by what follows
		 * that rule, which is this very set */
		if (p.suffix_nullable[u.choice][u.pos + 1] && u.rule != r)
			f |= follow_of(g, u.rule, depth + 1);
	}
	ru.follow_state = 2;
	ru.follow = f;
	return f;
}


/* ---- follow strings of up to FOLLOW_K characters ----
 *
 * The same trace as follow_of, with strings for characters: what follows
 * a use is the first strings of the rest of its sequence, each one
 * shorter than FOLLOW_K (not ended) extended by the follow strings of the
 * rule using it. */

typedef follow_strings strings;

static bool ended(const std::string &x)
{
	return x.size() >= FOLLOW_K || (!x.empty() && x.back() == FOLLOW_TEXT_END);
}

/* a then b, cut to FOLLOW_K characters */
static strings concat(const strings &a, const strings &b)
{
	strings r{a.other, {}};
	for (const std::string &x : a.s) {
		if (ended(x)) {
			r.s.insert(x);
			continue;
		}
		r.other = r.other || b.other;
		for (const std::string &y : b.s)
			r.s.insert((x + y).substr(0, FOLLOW_K));
	}
	return r;
}

static void add(strings *to, const strings &from)
{
	to->other = to->other || from.other;
	to->s.insert(from.s.begin(), from.s.end());
}

/* A literal as printed, unescaped: only \" and \\ are read (any other
 * escape: "cannot tell"). */
static strings first2_of_literal(const std::string &text)
{
	std::string out;
	for (size_t i = 0; i < text.size() && out.size() < FOLLOW_K; i++) {
		if (text[i] == '\\') {
			if (i + 1 >= text.size() || (text[i + 1] != '"' && text[i + 1] != '\\'))
				return strings{true, {}};
			i++;
		}
		out += text[i];
	}
	return strings{false, {out}};
}

static const strings &first2_of_rule(grammar_text &g, int r, int depth);

static strings first2_of_elem(grammar_text &g, const elem &e, int depth)
{
	strings f;
	if (e.kind == 'l')
		f = first2_of_literal(e.text);
	else if (e.kind == 'c')
		f = strings{true, {}};
	else
		f = first2_of_rule(g, e.ref, depth + 1);
	if (e.quantified) /* once, or twice and more: FOLLOW_K = 2 needs no more */
		add(&f, concat(f, f));
	if (e.optional)
		f.s.insert("");
	return f;
}

/* first strings of elements k.. of a sequence */
static strings first2_of_rest(grammar_text &g, const sequence &s, size_t k, int depth)
{
	strings f{false, {""}};
	for (; k < s.size(); k++) {
		bool open = false;
		for (const std::string &x : f.s)
			open = open || !ended(x);
		if (!open)
			break;
		f = concat(f, first2_of_elem(g, s[k], depth));
	}
	return f;
}

static const strings &first2_of_rule(grammar_text &g, int r, int depth)
{
	static const strings other{true, {}};
	rule &ru = g.rules[r];
	if (ru.first2_state == 2)
		return ru.first2;
	if (ru.first2_state == 1 || depth > MAX_DEPTH || ru.opaque)
		return other;
	ru.first2_state = 1;
	strings f{false, {}};
	for (const sequence &s : ru.choices)
		add(&f, first2_of_rest(g, s, 0, depth));
	ru.first2 = f;
	ru.first2_state = 2;
	return ru.first2;
}

static const strings &follow2_of(grammar_text &g, int r, int depth)
{
	static const strings other{true, {}};
	rule &ru = g.rules[r];
	if (ru.follow2_state == 2)
		return ru.follow2;
	if (ru.follow2_state == 1 || depth > MAX_DEPTH || ru.in_lookahead)
		return other;
	ru.follow2_state = 1;
	strings f{false, {}};
	if (r == g.root)
		f.s.insert(std::string(1, FOLLOW_TEXT_END));
	for (const use &u : g.uses[r]) {
		if (f.other)
			break;
		const rule &p = g.rules[u.rule];
		if (!p.reachable)
			continue;
		const sequence &seq = p.choices[u.choice];
		strings rest = first2_of_rest(g, seq, u.pos + 1, 0);
		if (seq[u.pos].quantified) {
			strings again = first2_of_elem(g, seq[u.pos], 0);
			again.s.insert("");
			rest = concat(again, rest);
		}
		for (const std::string &x : rest.s) {
			if (ended(x)) {
				f.s.insert(x);
			} else if (u.rule == r) {
				/* at its own end: followed by this very set, which
				 * adds nothing after nothing, and is not known yet
				 * after something */
				f.other = f.other || !x.empty();
			} else {
				strings one{false, {x}};
				add(&f, concat(one, follow2_of(g, u.rule, depth + 1)));
			}
		}
		f.other = f.other || rest.other;
	}
	ru.follow2 = f;
	ru.follow2_state = 2;
	return ru.follow2;
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

bool follow_grammar_read(const std::string &ebnf, const std::string &root, follow_grammar *g)
{
	if (!read_grammar(ebnf, root, g))
		return false;
	for (int r = 0; r < (int)g->rules.size(); r++) {
		bool n;
		first_of_rule(*g, r, &n, 0);
	}
	suffix_sets(*g);
	mark_reachable(*g);
	return true;
}

int follow_set(follow_grammar &g, int r)
{
	return follow_of(g, r, 0);
}

bool follow_xgrammar_derives(const follow_grammar &g, int r)
{
	return g.rules[r].n_last == 0 && g.rules[r].n_plain_nonlast == 1;
}

/* A rule only the end follows may have any lookahead (nothing may come
 * after it), so it gets all three. */
std::string follow_lookahead(int follow)
{
	if (!(follow & (FOLLOW_COMMA | FOLLOW_RBRACE | FOLLOW_RBRACKET)))
		follow |= FOLLOW_COMMA | FOLLOW_RBRACE | FOLLOW_RBRACKET;
	std::string cls;
	if (follow & FOLLOW_COMMA)
		cls += ",";
	if (follow & FOLLOW_RBRACE)
		cls += "}";
	if (follow & FOLLOW_RBRACKET)
		cls += "\\]";
	return " (=([" + cls + "]))";
}

std::string follow_grammar_text(const follow_grammar &g)
{
	std::string out;
	for (const std::string &l : g.lines)
		out += l + "\n";
	return out;
}

const follow_strings &follow_strings_of(follow_grammar &g, int r)
{
	return follow2_of(g, r, 0);
}

/* xgrammar's RuleInliner copies a rule that refers to no other into the
 * sequences it starts, and that use is gone: only a use past the first
 * element, or of a rule that refers to others, is sure to stay. */
static bool refers_to_rules(const follow_rule &ru)
{
	for (const sequence &s : ru.choices)
		for (const elem &e : s)
			if (e.kind == 'r')
				return true;
	return false;
}

bool follow_may_be_exact(const follow_grammar &g, int r)
{
	bool stays_first = refers_to_rules(g.rules[r]);
	for (const use &u : g.uses[r]) {
		const sequence &s = g.rules[u.rule].choices[u.choice];
		if (u.rule != r && g.rules[u.rule].reachable && u.pos + 1 == (int)s.size() &&
		    !s[u.pos].quantified && (u.pos > 0 || stays_first))
			return false;
	}
	return true;
}

/* chars as a character class; empty for a character it does not print */
static std::string char_class(const std::set<char> &chars)
{
	std::string cls = "[";
	for (char c : chars) {
		if (c < 0x20 || c > 0x7e)
			return "";
		if (c == ']' || c == '\\' || c == '^' || c == '-' || c == '"')
			cls += '\\';
		cls += c;
	}
	return cls + "]";
}

std::string follow_lookahead_strings(const follow_strings &f)
{
	if (f.other)
		return "";
	std::set<char> first, second;
	for (const std::string &x : f.s) {
		if (x.empty() || x[0] == FOLLOW_TEXT_END)
			continue; /* the end of the text: nothing goes on past it */
		if (x[0] != ',' && x[0] != '}' && x[0] != ']')
			return "";
		first.insert(x[0]);
		if (x.size() > 1 && x[1] != FOLLOW_TEXT_END)
			second.insert(x[1]);
	}
	if (first.empty() || second.empty())
		return "";
	std::string a = char_class(first), b = char_class(second);
	return a.empty() || b.empty() ? "" : " (=(" + a + " " + b + "))";
}
