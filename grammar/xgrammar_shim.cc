/*
 * xgrammar_shim.cc — grammar.h over xgrammar's C++ core. The only C++ in
 * the tree: each entry point catches everything xgrammar throws and turns
 * it into an SL_E* code and a message (grammar.h).
 */
#include "grammar/grammar.h"
#include "grammar/bounded_strings.h"
#include "grammar/number_lookahead.h"
#include "grammar/string_arrays.h"
#include "grammar/value_lookahead.h"

#include <dlpack/dlpack.h>
#include <picojson.h>
#include <xgrammar/xgrammar.h>

/* xgrammar's internal view of a compiled grammar (its sdist's cpp/): the
 * per-state token-mask cache the slow-grammar guard reads. Pinned to
 * 0.2.9 by tools/third_party.sh, so the names below hold. */
#include "compiled_grammar_impl.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "common/checks.h"
#include "common/sl.h"

using namespace xgrammar;

struct grammar_vocab {
	TokenizerInfo info;
	std::vector<int32_t> stop;
};
struct grammar_compiler {
	GrammarCompiler c;
	int vocab_size;
	std::vector<int32_t> stop;
	int max_uncertain_pct; /* grammar_compiler_set_max_uncertain; 0: no limit */
	bool string_chains;    /* grammar_compiler_set_string_chains */
	bool number_lookahead; /* grammar_compiler_set_number_lookahead */
	bool value_lookahead;  /* grammar_compiler_set_value_lookahead */
	bool time_patterns;    /* grammar_compiler_set_time_patterns */
	bool string_arrays;    /* grammar_compiler_set_string_arrays */
};
struct grammar_compiled {
	CompiledGrammar g;
	int vocab_size;
	std::vector<int32_t> stop;
	long worst_uncertain;
};
struct grammar_matcher {
	GrammarMatcher m;
	int vocab_size;
	std::vector<int32_t> stop;
};

/* xgrammar's messages carry a file:line prefix and sometimes a stack:
 * the client gets the first line, from the part after the location. */
static int fail(char *err, size_t errlen, int code, const char *what, const char *msg)
{
	std::string s(msg ? msg : "unknown error");
	size_t nl = s.find('\n');
	if (nl != std::string::npos)
		s.resize(nl);
	size_t cut = s.find(": ");
	if (s.rfind("[", 0) == 0 && cut != std::string::npos) /* "[time] file:line: msg" */
		s = s.substr(cut + 2);
	return sl_errf(err, errlen, code, "%s: %s", what, s.c_str());
}

/* Every entry point runs its body through this: no exception escapes. */
template <class F> static int guarded(const char *what, char *err, size_t errlen, F body)
{
	try {
		return body();
	} catch (const std::bad_alloc &) {
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", what);
	} catch (const std::exception &ex) {
		return fail(err, errlen, SL_EINVAL, what, ex.what());
	} catch (...) {
		return fail(err, errlen, SL_EINVAL, what, NULL);
	}
}

extern "C" int grammar_vocab_create(const char *const *tokens, const size_t *lens, int n_tokens,
				    int vocab_size, grammar_vocab_type type, const int32_t *stop_ids,
				    int n_stop, grammar_vocab **out, char *err, size_t errlen)
{
	*out = NULL;
	if (n_tokens <= 0 || vocab_size < n_tokens || n_stop < 0 ||
	    (type != GRAMMAR_VOCAB_RAW && type != GRAMMAR_VOCAB_BYTE_FALLBACK &&
	     type != GRAMMAR_VOCAB_BYTE_LEVEL))
		return sl_errf(err, errlen, SL_EINVAL, "grammar vocabulary: %d tokens, size %d, type %d",
			       n_tokens, vocab_size, (int)type);
	return guarded("grammar vocabulary", err, errlen, [&]() -> int {
		std::vector<std::string> v((size_t)n_tokens);
		for (int i = 0; i < n_tokens; i++)
			if (tokens[i] && lens[i])
				v[i].assign(tokens[i], lens[i]);
		std::vector<int32_t> stop;
		for (int i = 0; i < n_stop; i++)
			if (stop_ids[i] >= 0 && stop_ids[i] < vocab_size)
				stop.push_back(stop_ids[i]);
		if (stop.empty())
			return sl_errf(err, errlen, SL_EINVAL,
				       "grammar vocabulary: no stop token inside the vocabulary");
		*out = new grammar_vocab{TokenizerInfo(v, (VocabType)type, vocab_size, stop), stop};
		return SL_OK;
	});
}

extern "C" void grammar_vocab_destroy(grammar_vocab *v) { delete v; }

extern "C" int grammar_vocab_size(const grammar_vocab *v) { return v->info.GetVocabSize(); }

extern "C" int grammar_compiler_create(const grammar_vocab *v, int threads, long cache_bytes,
				       grammar_compiler **out, char *err, size_t errlen)
{
	*out = NULL;
	return guarded("grammar compiler", err, errlen, [&]() -> int {
		*out = new grammar_compiler{
			GrammarCompiler(v->info, threads > 0 ? threads : 1, cache_bytes > 0,
					cache_bytes > 0 ? (int64_t)cache_bytes : -1),
			v->info.GetVocabSize(), v->stop, GRAMMAR_MAX_UNCERTAIN_PCT, true, true, true,
			true, true};
		return SL_OK;
	});
}

extern "C" void grammar_compiler_destroy(grammar_compiler *c) { delete c; }

extern "C" void grammar_compiler_set_max_uncertain(grammar_compiler *c, int pct)
{
	c->max_uncertain_pct = pct > 0 ? std::min(pct, 100) : 0;
}

extern "C" void grammar_compiler_set_string_chains(grammar_compiler *c, int on)
{
	c->string_chains = on != 0;
}

extern "C" void grammar_compiler_set_number_lookahead(grammar_compiler *c, int on)
{
	c->number_lookahead = on != 0;
}

extern "C" void grammar_compiler_set_value_lookahead(grammar_compiler *c, int on)
{
	c->value_lookahead = on != 0;
}

extern "C" void grammar_compiler_set_time_patterns(grammar_compiler *c, int on)
{
	c->time_patterns = on != 0;
}

extern "C" void grammar_compiler_set_string_arrays(grammar_compiler *c, int on)
{
	c->string_arrays = on != 0;
}

/* The most tokens a mask fill may run through the parser one by one: at
 * each parser state the compile's mask cache leaves some tokens
 * "uncertain" (their fate depends on the states below on the stack) and
 * the matcher checks those at every step the state is live; the rest are
 * a bitset copy. What each check costs depends on those states below (a
 * prefix they reject skips every token sharing it), so this bounds the
 * work rather than measuring it (GRAMMAR_MAX_UNCERTAIN_PCT says how the
 * limit was set). The cache is complete after a compile (no dynamic
 * compilation: grammar_compiler_create). */
static long worst_uncertain(const CompiledGrammar &g)
{
	const CompiledGrammar::Impl *impl = g.ImplPtr();
	std::lock_guard<std::mutex> lock(impl->adaptive_token_mask_cache_mutex);
	size_t worst = 0;
	for (const auto &entry : impl->adaptive_token_mask_cache)
		worst = std::max(worst, entry.second.uncertain_indices.size());
	return (long)worst;
}

extern "C" long grammar_compiled_worst_uncertain(const grammar_compiled *g)
{
	return g->worst_uncertain;
}

/* "Any JSON object" as a schema: not strict, so any properties. */
static const char ANY_OBJECT[] = "{\"type\": \"object\"}";

/* How each kind becomes a Grammar; compact JSON (no free whitespace: a
 * small model given the choice loops on blank space), strict schemas
 * (no properties beyond those named unless the schema allows them). */
static Grammar parse(sl_constraint_kind kind, const std::string &s)
{
	switch (kind) {
	case SL_CONSTRAINT_JSON:
		return Grammar::FromJSONSchema(ANY_OBJECT, false, std::nullopt, std::nullopt, false);
	case SL_CONSTRAINT_JSON_SCHEMA:
		return Grammar::FromJSONSchema(s, false, std::nullopt, std::nullopt, true);
	case SL_CONSTRAINT_REGEX:
		return Grammar::FromRegex(s);
	case SL_CONSTRAINT_EBNF:
		return Grammar::FromEBNF(s, "root");
	case SL_CONSTRAINT_STRUCTURAL_TAG: {
		auto r = Grammar::FromStructuralTag(s);
		if (std::holds_alternative<Grammar>(r))
			return std::get<Grammar>(r);
		std::string msg = std::visit([](const auto &e) { return std::string(e.what()); },
					     std::get<StructuralTagError>(r));
		throw std::invalid_argument(msg);
	}
	default:
		throw std::invalid_argument("unsupported kind");
	}
}

static const char *kind_name(sl_constraint_kind kind)
{
	switch (kind) {
	case SL_CONSTRAINT_JSON: return "json";
	case SL_CONSTRAINT_JSON_SCHEMA: return "json schema";
	case SL_CONSTRAINT_REGEX: return "regex";
	case SL_CONSTRAINT_EBNF: return "grammar";
	case SL_CONSTRAINT_STRUCTURAL_TAG: return "structural tag";
	default: return "constraint";
	}
}

/* A schema's nesting and enum sizes, before xgrammar sees it: a deeply
 * nested or enum-heavy schema is refused in microseconds instead of
 * compiling for seconds (or recursing off the stack). */
struct schema_counts {
	long n_enum, n_nodes, n_branches;
};

static int walk_schema(const picojson::value &v, int depth, schema_counts *n, char *err,
		       size_t errlen)
{
	if (depth > GRAMMAR_MAX_SCHEMA_DEPTH)
		return sl_errf(err, errlen, SL_EINVAL, "json schema: nested deeper than %d levels",
			       GRAMMAR_MAX_SCHEMA_DEPTH);
	if (v.is<picojson::array>()) {
		for (const picojson::value &e : v.get<picojson::array>())
			TRY(walk_schema(e, depth + 1, n, err, errlen));
	} else if (v.is<picojson::object>()) {
		if (++n->n_nodes > GRAMMAR_MAX_SCHEMA_NODES)
			return sl_errf(err, errlen, SL_EINVAL, "json schema: more than %d sub-schemas",
				       GRAMMAR_MAX_SCHEMA_NODES);
		for (const auto &kv : v.get<picojson::object>()) {
			bool arr = kv.second.is<picojson::array>();
			long size = arr ? (long)kv.second.get<picojson::array>().size() : 0;
			if (kv.first == "enum")
				n->n_enum += size;
			if (kv.first == "anyOf" || kv.first == "oneOf")
				n->n_branches += size;
			if (n->n_enum > GRAMMAR_MAX_ENUM_VALUES)
				return sl_errf(err, errlen, SL_EINVAL,
					       "json schema: more than %d enum values",
					       GRAMMAR_MAX_ENUM_VALUES);
			if (n->n_branches > GRAMMAR_MAX_SCHEMA_BRANCHES)
				return sl_errf(err, errlen, SL_EINVAL,
					       "json schema: more than %d anyOf/oneOf branches",
					       GRAMMAR_MAX_SCHEMA_BRANCHES);
			TRY(walk_schema(kv.second, depth + 1, n, err, errlen));
		}
	}
	return SL_OK;
}

/* Top-level '|' of a regex outside classes and escapes, and '::=' of a
 * grammar: the sizes that make a compile long. */
static long count_regex_alternatives(const char *s, size_t len)
{
	long n = 0;
	int in_class = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '\\')
			i++;
		else if (s[i] == '[')
			in_class = 1;
		else if (s[i] == ']')
			in_class = 0;
		else if (s[i] == '|' && !in_class)
			n++;
	}
	return n;
}

static long count_rules(const char *s, size_t len)
{
	long n = 0;
	for (size_t i = 0; i + 3 <= len; i++)
		n += !memcmp(s + i, "::=", 3);
	return n;
}

static int check_limits(sl_constraint_kind kind, const char *text, size_t len, char *err,
			size_t errlen)
{
	if (kind <= SL_CONSTRAINT_NONE || kind > SL_CONSTRAINT_STRUCTURAL_TAG)
		return sl_errf(err, errlen, SL_EINVAL, "constraint kind %d unknown", (int)kind);
	if (len > SL_CONSTRAINT_MAX_TEXT)
		return sl_errf(err, errlen, SL_EINVAL, "%s: %zu bytes, more than the limit of %u",
			       kind_name(kind), len, SL_CONSTRAINT_MAX_TEXT);
	if (kind != SL_CONSTRAINT_JSON && len == 0)
		return sl_errf(err, errlen, SL_EINVAL, "%s: empty", kind_name(kind));
	if (kind == SL_CONSTRAINT_REGEX && count_regex_alternatives(text, len) > GRAMMAR_MAX_ALTERNATIVES)
		return sl_errf(err, errlen, SL_EINVAL, "regex: more than %d alternatives",
			       GRAMMAR_MAX_ALTERNATIVES);
	if (kind == SL_CONSTRAINT_EBNF && count_rules(text, len) > GRAMMAR_MAX_RULES)
		return sl_errf(err, errlen, SL_EINVAL, "grammar: more than %d rules", GRAMMAR_MAX_RULES);
	if (kind == SL_CONSTRAINT_EBNF && count_regex_alternatives(text, len) > GRAMMAR_MAX_ALTERNATIVES)
		return sl_errf(err, errlen, SL_EINVAL, "grammar: more than %d alternatives",
			       GRAMMAR_MAX_ALTERNATIVES);
	if (kind != SL_CONSTRAINT_JSON_SCHEMA && kind != SL_CONSTRAINT_STRUCTURAL_TAG)
		return SL_OK;
	/* picojson recurses per level: bound the depth before it parses (a
	 * structural tag is JSON holding schemas: the same limits) */
	int depth = 0, max = 0;
	for (size_t i = 0; i < len; i++) {
		char ch = text[i];
		if (ch == '"') { /* skip strings: brackets inside do not nest */
			for (i++; i < len && text[i] != '"'; i++)
				if (text[i] == '\\')
					i++;
		} else if (ch == '{' || ch == '[') {
			max = ++depth > max ? depth : max;
		} else if (ch == '}' || ch == ']') {
			depth--;
		}
	}
	if (max > 2 * GRAMMAR_MAX_SCHEMA_DEPTH + 2)
		return sl_errf(err, errlen, SL_EINVAL, "json schema: nested deeper than %d levels",
			       GRAMMAR_MAX_SCHEMA_DEPTH);
	picojson::value v;
	std::string perr = picojson::parse(v, text, text + len);
	if (!perr.empty())
		return fail(err, errlen, SL_EINVAL, kind == SL_CONSTRAINT_JSON_SCHEMA
			    ? "json schema: not JSON" : "structural tag: not JSON", perr.c_str());
	if (!v.is<picojson::object>() && !(kind == SL_CONSTRAINT_JSON_SCHEMA && v.is<bool>()))
		return sl_errf(err, errlen, SL_EINVAL, "%s: not an object", kind_name(kind));
	schema_counts n = {0, 0, 0};
	return walk_schema(v, 0, &n, err, errlen);
}

/* String formats that xgrammar 0.2.9 expands into a context-free grammar
 * of several rules, each rule's mask cache leaving the pieces that cross
 * into the next undecided: on Llama 3's 128k vocabulary "hostname" cost
 * 0.46-0.77 ms a token at p99, "uuid" 77 us, "ipv4" 60 us. The same
 * language as a "pattern" compiles to one automaton whose masks are
 * decided ahead (10, 3.4 and 2.3 us). The patterns are the formats' plain
 * definitions (RFC 1123 labels as xgrammar has them: lowercase; RFC 4122;
 * dotted-quad bytes without leading zeros, as validators take them; RFC
 * 3339 full-date). A label is written [a-z0-9]+(-+[a-z0-9]+)*, not
 * [a-z0-9]([a-z0-9-]*[a-z0-9])?: xgrammar's regex automaton takes "ab-"
 * for the latter (an optional group holding a star: it takes ^a(b*c)?$
 * for "ab").
 *
 * "time" and "date-time" (exact: grammar_compiler_set_time_patterns) are
 * xgrammar's own regexes for them (json_schema_converter.cc, RFC 3339's
 * partial-time and zone, upper-case T and Z only, second 60 allowed), \d
 * written [0-9]. Expanded, the seconds ([0-5]\d|60) are a rule of their
 * own followed by an optional fraction, for which xgrammar derives no
 * lookahead: right after the minutes every digit piece that completes the
 * seconds and runs on ("035", "0360") is left to the parser at every mask,
 * ~1,100 of Llama 3's pieces, 64 us a token at p99 on the GPU host's CPU
 * (bench/results/2026-11-29-nvidia-h200-grammar-masks). As one automaton
 * those are decided at compile time. Digits, + - : . T and Z are all
 * plain JSON string characters, so the pattern's
 * string-character restriction (no quote, backslash or control character)
 * takes nothing away. The fraction is written distributed over the zone,
 * (Z|zone|\.[0-9]+(Z|zone)), not (\.[0-9]+)?(Z|zone): the automaton's
 * trouble above, an optional group holding a repetition (written as the
 * converter has it, it takes a digit right after the seconds, "04:47:030Z":
 * tests/unit/grammar/test_time_patterns.c fails on it). */
#define TIME_ZONE "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define PARTIAL_TIME "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)"
#define TIME_PATTERN PARTIAL_TIME "(" TIME_ZONE "|\\\\.[0-9]+" TIME_ZONE ")"
#define FULL_DATE "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
static const struct {
	const char *format, *pattern; /* pattern as JSON string text */
	bool time;		      /* only under grammar_compiler_set_time_patterns */
} FORMAT_PATTERNS[] = {
	{"hostname", "^[a-z0-9]+(-+[a-z0-9]+)*(\\\\.[a-z0-9]+(-+[a-z0-9]+)*)*$", false},
	{"uuid", "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$",
	 false},
	{"ipv4", "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\\\.){3}"
		 "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$", false},
	{"date", "^" FULL_DATE "$", false},
	{"time", "^" TIME_PATTERN "$", true},
	{"date-time", "^" FULL_DATE "T" TIME_PATTERN "$", true},
};

/* A scan over JSON text that check_limits has already parsed, so it can
 * trust the syntax: it only finds spans, and the rewrite below edits the
 * text in place (no reserialisation: numbers and key order stay as the
 * client wrote them, and key order is the output's property order). */
struct json_scan {
	const char *s;
	size_t n, i;
};
struct json_edit {
	size_t at, len;
	std::string with;
};

static void scan_ws(json_scan &j)
{
	while (j.i < j.n && j.s[j.i] && strchr(" \t\r\n", j.s[j.i]))
		j.i++;
}

static void scan_string(json_scan &j)
{
	for (j.i++; j.i < j.n && j.s[j.i] != '"'; j.i++)
		if (j.s[j.i] == '\\')
			j.i++;
	j.i = j.i < j.n ? j.i + 1 : j.n;
}

/* Text the scan cannot read ends it (never an endless loop; check_limits
 * has refused invalid JSON before, so this is only a guard). */
static bool scan_stuck(json_scan &j, size_t at)
{
	if (j.i > at)
		return false;
	j.i = j.n;
	return true;
}

/* Keywords whose value is data, not a schema: nothing under them is
 * rewritten. */
static bool is_data_keyword(const std::string &k)
{
	return k == "\"const\"" || k == "\"enum\"" || k == "\"default\"" || k == "\"examples\"";
}

static void scan_value(json_scan &j, bool data, std::vector<json_edit> *edits, int depth,
		       bool time);

static void scan_object(json_scan &j, bool data, std::vector<json_edit> *edits, int depth,
			bool time)
{
	size_t format_at = 0, format_end = 0;
	const char *pattern = NULL;
	bool has_pattern = false, is_string = false;
	j.i++; /* { */
	for (scan_ws(j); j.i < j.n && j.s[j.i] != '}'; scan_ws(j)) {
		size_t key_at = j.i;
		if (j.s[j.i] != '"') {
			j.i = j.n;
			return;
		}
		scan_string(j);
		std::string key(j.s + key_at, j.i - key_at);
		scan_ws(j);
		if (j.i < j.n)
			j.i++; /* : */
		scan_ws(j);
		size_t value_at = j.i;
		scan_value(j, data || is_data_keyword(key), edits, depth + 1, time);
		std::string value(j.s + value_at, j.i - value_at);
		if (key == "\"pattern\"")
			has_pattern = true;
		if (key == "\"type\"")
			is_string = value == "\"string\"";
		if (key == "\"format\"")
			for (const auto &f : FORMAT_PATTERNS)
				if ((time || !f.time) && value == std::string("\"") + f.format + "\"")
					format_at = key_at, format_end = j.i, pattern = f.pattern;
		scan_ws(j);
		if (j.i < j.n && j.s[j.i] == ',')
			j.i++;
		scan_ws(j);
	}
	j.i = j.i < j.n ? j.i + 1 : j.n; /* } */
	if (!data && pattern && !has_pattern && is_string)
		edits->push_back({format_at, format_end - format_at,
				  std::string("\"pattern\": \"") + pattern + "\""});
}

static void scan_value(json_scan &j, bool data, std::vector<json_edit> *edits, int depth,
		       bool time)
{
	scan_ws(j);
	if (j.i >= j.n || depth > 2 * GRAMMAR_MAX_SCHEMA_DEPTH + 2) {
		j.i = j.n;
	} else if (j.s[j.i] == '{') {
		scan_object(j, data, edits, depth, time);
	} else if (j.s[j.i] == '[') {
		for (j.i++, scan_ws(j); j.i < j.n && j.s[j.i] != ']'; scan_ws(j)) {
			size_t at = j.i;
			scan_value(j, data, edits, depth + 1, time);
			scan_ws(j);
			if (j.i < j.n && j.s[j.i] == ',')
				j.i++;
			if (scan_stuck(j, at))
				return;
		}
		j.i = j.i < j.n ? j.i + 1 : j.n;
	} else if (j.s[j.i] == '"') {
		scan_string(j);
	} else {
		size_t at = j.i;
		while (j.i < j.n && j.s[j.i] && !strchr(",}] \t\r\n", j.s[j.i]))
			j.i++;
		scan_stuck(j, at);
	}
}

/* The schema with the formats above written as their patterns (where the
 * sub-schema is a string with no pattern of its own: xgrammar takes the
 * format over a pattern, so one with both keeps its format); time: the
 * time formats too. */
static std::string formats_as_patterns(const std::string &schema, bool time)
{
	json_scan j{schema.data(), schema.size(), 0};
	std::vector<json_edit> edits;
	scan_value(j, false, &edits, 0, time);
	/* last first, so each edit's offset still holds (they never overlap:
	 * each is one string member) */
	std::sort(edits.begin(), edits.end(),
		  [](const json_edit &a, const json_edit &b) { return a.at > b.at; });
	std::string out = schema;
	for (const json_edit &e : edits)
		out.replace(e.at, e.len, e.with);
	return out;
}

/* A schema as xgrammar converts it, with its length-bounded strings as
 * chains of rules (bounded_strings.cc: the same strings, under half the
 * mask cost on Llama 3's vocabulary, compiled compact: no blank space, as
 * parse() has it), and its number rules (number_lookahead.cc) and other
 * value rules (value_lookahead.cc) given the lookahead of what may follow
 * them where they are used (the same language, the pieces that run past a
 * value decided at compile time), and its arrays of strings written with
 * one string body per item position (string_arrays.cc: a piece that
 * closes an item and goes on decided at compile time); one none of them
 * rewrites compiles as before. */
static CompiledGrammar compile_schema(grammar_compiler *c, const std::string &schema)
{
	Grammar g = Grammar::FromJSONSchema(schema, false, std::nullopt, std::nullopt, true);
	if (!c->string_chains && !c->number_lookahead && !c->value_lookahead && !c->string_arrays)
		return c->c.CompileGrammar(g);
	std::string root = g->GetRootRule().name, text = g.ToString();
	int chains = 0, arrays = 0, numbers = 0, values = 0;
	if (c->string_chains)
		text = bounded_strings_as_chains(text, true, GRAMMAR_MAX_CHAIN_RULES, &chains);
	if (c->string_arrays)
		text = string_arrays_unrolled(text, root, GRAMMAR_MAX_ARRAY_RULES, &arrays);
	if (c->number_lookahead)
		text = numbers_with_lookahead(text, root, GRAMMAR_MAX_LOOKAHEAD_RULES, &numbers);
	if (c->value_lookahead)
		text = values_with_lookahead(text, root, GRAMMAR_MAX_LOOKAHEAD_RULES - numbers,
					     &values);
	if (chains == 0 && arrays == 0 && numbers == 0 && values == 0)
		return c->c.CompileGrammar(g);
	return c->c.CompileGrammar(text, root);
}

extern "C" int grammar_check(sl_constraint_kind kind, const char *text, size_t len, char *err,
			     size_t errlen)
{
	return guarded(kind_name(kind), err, errlen, [&]() -> int {
		TRY(check_limits(kind, text, len, err, errlen));
		(void)parse(kind, std::string(text ? text : "", text ? len : 0));
		return SL_OK;
	});
}

extern "C" int grammar_compile(grammar_compiler *c, sl_constraint_kind kind, const char *text,
			       size_t len, grammar_compiled **out, char *err, size_t errlen)
{
	*out = NULL;
	return guarded(kind_name(kind), err, errlen, [&]() -> int {
		TRY(check_limits(kind, text, len, err, errlen));
		std::string s(text ? text : "", text ? len : 0);
		CompiledGrammar g = kind == SL_CONSTRAINT_JSON
			? c->c.CompileJSONSchema(ANY_OBJECT, false, std::nullopt, std::nullopt, false)
		      : kind == SL_CONSTRAINT_JSON_SCHEMA
			? compile_schema(c, formats_as_patterns(s, c->time_patterns))
		      : kind == SL_CONSTRAINT_REGEX ? c->c.CompileRegex(s)
		      : kind == SL_CONSTRAINT_STRUCTURAL_TAG ? c->c.CompileStructuralTag(s)
							     : c->c.CompileGrammar(s, "root");
		long worst = worst_uncertain(g);
		long limit = (long)c->vocab_size * c->max_uncertain_pct / 100;
		if (c->max_uncertain_pct > 0 && worst > limit)
			return sl_errf(err, errlen, SL_EINVAL,
				       "%s too slow to enforce: at some position %ld of %d tokens "
				       "must be checked one by one (limit %ld, %d%% of the vocabulary); "
				       "write a string as one rule over a character class, e.g. "
				       "string ::= \"\\\"\" [^\"\\\\]* \"\\\"\" (docs/http.md)",
				       kind_name(kind), worst, c->vocab_size, limit,
				       c->max_uncertain_pct);
		*out = new grammar_compiled{g, c->vocab_size, c->stop, worst};
		return SL_OK;
	});
}

extern "C" void grammar_compiled_destroy(grammar_compiled *g) { delete g; }

extern "C" int grammar_matcher_create(const grammar_compiled *g, grammar_matcher **out, char *err,
				      size_t errlen)
{
	*out = NULL;
	return guarded("grammar matcher", err, errlen, [&]() -> int {
		*out = new grammar_matcher{GrammarMatcher(g->g), g->vocab_size, g->stop};
		return SL_OK;
	});
}

extern "C" void grammar_matcher_destroy(grammar_matcher *m) { delete m; }

extern "C" int grammar_matcher_fill_mask(grammar_matcher *m, uint32_t *mask, int words)
{
	if (words != grammar_mask_words(m->vocab_size))
		return SL_EINVAL;
	try {
		if (m->m.IsTerminated()) {
			memset(mask, 0, 4 * (size_t)words);
			for (int32_t id : m->stop)
				mask[id / 32] |= 1u << (id % 32);
			return SL_OK;
		}
		int64_t shape[1] = {words};
		DLTensor t{};
		t.data = mask;
		t.device = DLDevice{kDLCPU, 0};
		t.ndim = 1;
		t.dtype = DLDataType{kDLInt, 32, 1};
		t.shape = shape;
		if (!m->m.FillNextTokenBitmask(&t)) /* everything allowed */
			memset(mask, 0xff, 4 * (size_t)words);
		return SL_OK;
	} catch (const std::bad_alloc &) {
		return SL_ENOMEM;
	} catch (...) {
		return SL_EINVAL;
	}
}

extern "C" int grammar_matcher_accept(grammar_matcher *m, int32_t id)
{
	if (id < 0 || id >= m->vocab_size)
		return SL_EINVAL;
	try {
		return !m->m.IsTerminated() && m->m.AcceptToken(id) ? SL_OK : SL_EINVAL;
	} catch (...) {
		return SL_EINVAL;
	}
}

extern "C" int grammar_matcher_is_terminated(const grammar_matcher *m)
{
	try {
		return m->m.IsTerminated();
	} catch (...) {
		return 1;
	}
}

extern "C" int grammar_matcher_rollback(grammar_matcher *m, int n)
{
	try {
		m->m.Rollback(n);
		return SL_OK;
	} catch (...) {
		return SL_EINVAL;
	}
}
