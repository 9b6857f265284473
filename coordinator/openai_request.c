/*
 * openai_request.c — the OpenAI API's request bodies read into the core's
 * request (see openai_int.h): the fields every endpoint shares, with the
 * sampling ones the table of common/sampling.h names; the prompts of
 * /v1/completions; the messages of /v1/chat/completions rendered by the
 * model's chat template and encoded. Each refusal is a 400-class oai_err
 * naming the field. Ranges the core also checks (max_tokens, sampling)
 * are left to it, so both front doors refuse alike (coord_submit).
 *
 * Caller: openai.c (the exchange).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/openai_int.h"
#include "common/sampling.h"
#include "common/sl.h"
#include "grammar/grammar.h"
#include "text/jinja/chat_template.h"

int coord_oai_fail(oai_err *e, int status, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int coord_oai_fail(oai_err *e, int status, const char *param, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	e->status = status;
	e->type = status == 404 ? "not_found_error" : "invalid_request_error";
	e->param = param;
	e->code = NULL;
	return -1;
}

/* --- reading fields ------------------------------------------------------- */

static int is_null(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* A number field; absent or null: *has = 0. */
static int get_num(const cJSON *o, const char *key, double *v, int *has, oai_err *e)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, key);
	*has = 0;
	if (is_null(f))
		return 0;
	if (!cJSON_IsNumber(f))
		return coord_oai_fail(e, 400, key, "%s must be a number", key);
	*v = f->valuedouble;
	*has = 1;
	return 0;
}

/* An integer field in [lo, hi]. */
static int get_int(const cJSON *o, const char *key, double lo, double hi, long long *v, int *has,
		   oai_err *e)
{
	double d;
	if (get_num(o, key, &d, has, e))
		return -1;
	if (!*has)
		return 0;
	if (d != floor(d) || !(d >= lo && d <= hi))
		return coord_oai_fail(e, 400, key, "%s must be an integer in [%.0f, %.0f], got %.17g", key, lo, hi, d);
	*v = (long long)d;
	return 0;
}

static int get_bool(const cJSON *o, const char *key, int *v, oai_err *e)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, key);
	if (is_null(f))
		return 0;
	if (!cJSON_IsBool(f))
		return coord_oai_fail(e, 400, key, "%s must be true or false", key);
	*v = cJSON_IsTrue(f);
	return 0;
}

static int get_model(coord *c, const cJSON *root, oai_req *q, oai_err *e)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
	q->model = 0;
	if (is_null(m))
		return 0;
	if (!cJSON_IsString(m))
		return coord_oai_fail(e, 400, "model", "model must be a string");
	for (int i = 0; i < c->n_models; i++)
		if (!strcmp(c->models[i].name, m->valuestring)) {
			q->model = i;
			return 0;
		}
	coord_oai_fail(e, 404, "model", "the model '%.64s' does not exist (this server has '%s'%s)", m->valuestring,
	     c->models[0].name, c->n_models > 1 ? " and others; GET /v1/models lists them" : "");
	e->code = "model_not_found";
	return -1;
}

static int get_stop(const cJSON *root, oai_req *q, oai_err *e)
{
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stop");
	if (is_null(st))
		return 0;
	if (cJSON_IsString(st)) {
		q->stops[0] = (coord_str){st->valuestring, strlen(st->valuestring)};
		q->s.n_stop = 1;
	} else if (cJSON_IsArray(st)) {
		int k = 0;
		const cJSON *it;
		cJSON_ArrayForEach(it, st) {
			if (!cJSON_IsString(it))
				return coord_oai_fail(e, 400, "stop", "stop must be a string or an array of strings");
			if (k == COORD_MAX_STOPS)
				return coord_oai_fail(e, 400, "stop", "at most %d stop strings", COORD_MAX_STOPS);
			q->stops[k++] = (coord_str){it->valuestring, strlen(it->valuestring)};
		}
		q->s.n_stop = (size_t)k;
	} else {
		return coord_oai_fail(e, 400, "stop", "stop must be a string or an array of strings");
	}
	q->s.stop = q->stops;
	return 0;
}

/* Every top-level field a request body may carry, one row each: its name
 * and the endpoints that take it. Any other field gets a 400 naming it,
 * as OpenAI answers (a misspelt option must not pass unnoticed); the
 * sampling table's JSON fields (common/sampling.h) are known without a
 * row. A field listed here is read by the code below, or accepted and
 * ignored ("ignored"), or refused by its own reader with a reason
 * (refuse_unsupported): a new field is one row here and its reader.
 * docs/http.md lists them. */
enum { OAI_COMPL = 1, OAI_CHAT = 2, OAI_BOTH = 3 };
static const struct oai_field {
	const char *name;
	int where;
} oai_fields[] = {
	{"model", OAI_BOTH},
	{"prompt", OAI_COMPL},
	{"messages", OAI_CHAT},
	{"add_generation_prompt", OAI_CHAT},
	{"max_tokens", OAI_BOTH},
	{"max_completion_tokens", OAI_CHAT},
	{"top_k", OAI_BOTH},
	{"seed", OAI_BOTH},
	{"n", OAI_BOTH},
	{"best_of", OAI_COMPL},
	{"stop", OAI_BOTH},
	{"stop_token_ids", OAI_BOTH},
	{"logit_bias", OAI_BOTH},
	{"stream", OAI_BOTH},
	{"stream_options", OAI_BOTH},
	{"logprobs", OAI_BOTH},
	{"top_logprobs", OAI_CHAT},
	{"echo", OAI_COMPL},
	{"suffix", OAI_COMPL},
	{"ignore_eos", OAI_BOTH},
	{"return_token_ids", OAI_BOTH},
	{"user", OAI_BOTH},                 /* ignored (a string) */
	{"metadata", OAI_BOTH},             /* ignored */
	{"store", OAI_BOTH},                /* ignored */
	{"service_tier", OAI_BOTH},         /* ignored */
	/* structured output (get_constraint) and tools (openai_tools.c); structured_outputs,
	 * functions and function_call are refused (refuse_unsupported) */
	{"response_format", OAI_BOTH},
	{"guided_json", OAI_BOTH},
	{"guided_regex", OAI_BOTH},
	{"guided_grammar", OAI_BOTH},
	{"guided_choice", OAI_BOTH},
	{"structured_outputs", OAI_BOTH},
	{"tools", OAI_CHAT},
	{"tool_choice", OAI_CHAT},
	{"parallel_tool_calls", OAI_CHAT},
	{"functions", OAI_CHAT},
	{"function_call", OAI_CHAT},
};

static int known_field(const char *name, int chat)
{
	int where = chat ? OAI_CHAT : OAI_COMPL;
	for (size_t i = 0; i < sizeof oai_fields / sizeof oai_fields[0]; i++)
		if (!strcmp(oai_fields[i].name, name))
			return (oai_fields[i].where & where) != 0;
	for (int i = 0; i < sl_sampling_n_fields; i++)
		if (sl_sampling_fields[i].json && !strcmp(sl_sampling_fields[i].name, name))
			return 1;
	return 0;
}

/* The first field of the body that is not known: a 400 naming it. */
static int refuse_unknown(const cJSON *root, int chat, oai_err *e)
{
	const cJSON *f;
	cJSON_ArrayForEach(f, root) {
		if (!known_field(f->string, chat))
			return coord_oai_fail(e, 400, f->string, "Unrecognized request argument supplied: %.128s",
					      f->string);
	}
	return 0;
}

/* Known fields this server does not implement (yet): refused unless given
 * their neutral value. */
static int refuse_unsupported(const cJSON *root, oai_err *e)
{
	const cJSON *f;
	if (!is_null(f = cJSON_GetObjectItemCaseSensitive(root, "suffix")))
		return coord_oai_fail(e, 400, "suffix", "suffix is not supported");
	if (!is_null(f = cJSON_GetObjectItemCaseSensitive(root, "functions")))
		return coord_oai_fail(e, 400, "functions", "function calling is not supported");
	/* response_format and guided_*: get_constraint */
	static const char *later[] = {"structured_outputs", "function_call"};
	for (size_t i = 0; i < sizeof later / sizeof later[0]; i++)
		if (!is_null(cJSON_GetObjectItemCaseSensitive(root, later[i])))
			return coord_oai_fail(e, 400, later[i], "%s is not supported", later[i]);
	return 0;
}

/* logit_bias: {"token id": bias, ...}, as OpenAI: at most 300 entries,
 * each bias a number (its range, like the ids', checked by the core:
 * sl_token_lists_check). */
static int get_logit_bias(const cJSON *root, oai_req *q, oai_err *e)
{
	const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias"), *it;
	if (is_null(lb))
		return 0;
	if (!cJSON_IsObject(lb))
		return coord_oai_fail(e, 400, "logit_bias", "logit_bias must be an object of token id -> bias");
	int n = 0;
	cJSON_ArrayForEach(it, lb) {
		char *end = NULL;
		long id = strtol(it->string, &end, 10);
		if (n == SL_SAMPLING_MAX_LOGIT_BIAS)
			return coord_oai_fail(e, 400, "logit_bias", "logit_bias: at most %d entries",
					      SL_SAMPLING_MAX_LOGIT_BIAS);
		if (!it->string[0] || *end || id < 0 || id > INT32_MAX)
			return coord_oai_fail(e, 400, "logit_bias", "logit_bias: the key '%.32s' is not a token id",
					      it->string);
		if (!cJSON_IsNumber(it))
			return coord_oai_fail(e, 400, "logit_bias", "logit_bias: the bias of token %ld must be a number", id);
		q->bias_ids[n] = (int32_t)id;
		q->bias[n++] = (float)it->valuedouble;
	}
	q->s.lists.bias_ids = q->bias_ids;
	q->s.lists.bias = q->bias;
	q->s.lists.n_bias = n;
	return 0;
}

/* stop_token_ids: an array of token ids (vLLM's extension). */
static int get_stop_token_ids(const cJSON *root, oai_req *q, oai_err *e)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "stop_token_ids"), *it;
	if (is_null(a))
		return 0;
	if (!cJSON_IsArray(a))
		return coord_oai_fail(e, 400, "stop_token_ids", "stop_token_ids must be an array of token ids");
	int n = 0;
	cJSON_ArrayForEach(it, a) {
		if (n == SL_SAMPLING_MAX_STOP_TOKEN_IDS)
			return coord_oai_fail(e, 400, "stop_token_ids", "stop_token_ids: at most %d ids",
					      SL_SAMPLING_MAX_STOP_TOKEN_IDS);
		double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
		if (d != floor(d) || d < 0 || d > INT32_MAX)
			return coord_oai_fail(e, 400, "stop_token_ids", "stop_token_ids[%d] must be a token id", n);
		q->stop_ids[n++] = (int32_t)d;
	}
	q->s.lists.stop_ids = q->stop_ids;
	q->s.lists.n_stop_ids = n;
	return 0;
}

/* --- constrained decoding (docs/http.md, "Structured output") --------------- */

/* A schema as text: a JSON string is taken as it is (vLLM's guided_json
 * takes both), an object or boolean is printed compactly. */
static int schema_text(const cJSON *v, const char *param, oai_req *q, oai_err *e)
{
	if (cJSON_IsString(v)) {
		q->s.constraint = (coord_str){v->valuestring, strlen(v->valuestring)};
		return 0;
	}
	if (!cJSON_IsObject(v) && !cJSON_IsBool(v))
		return coord_oai_fail(e, 400, param, "%s must be a JSON schema (an object)", param);
	if (!(q->constraint = cJSON_PrintUnformatted(v)))
		return coord_oai_fail(e, 400, param, "%s: cannot print the schema (too deep?)", param);
	q->s.constraint = (coord_str){q->constraint, strlen(q->constraint)};
	return 0;
}

/* response_format: text, json_object, or json_schema {name, schema, strict};
 * *param: the field a bad schema is reported against. */
static int get_response_format(const cJSON *f, oai_req *q, const char **param, oai_err *e)
{
	const cJSON *t = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "type") : NULL;
	if (!cJSON_IsString(t))
		return coord_oai_fail(e, 400, "response_format", "response_format must be an object with a "
				      "type: text, json_object or json_schema");
	if (!strcmp(t->valuestring, "text"))
		return 0;
	if (!strcmp(t->valuestring, "json_object")) {
		q->s.constraint_kind = SL_CONSTRAINT_JSON;
		return 0;
	}
	if (strcmp(t->valuestring, "json_schema"))
		return coord_oai_fail(e, 400, "response_format", "response_format type '%.32s' is not one "
				      "of text, json_object, json_schema", t->valuestring);
	const cJSON *js = cJSON_GetObjectItemCaseSensitive(f, "json_schema");
	if (!cJSON_IsObject(js))
		return coord_oai_fail(e, 400, "response_format.json_schema",
				      "response_format json_schema needs a json_schema object");
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
	const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
	if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) > 64)
		return coord_oai_fail(e, 400, "response_format.json_schema.name",
				      "json_schema.name must be a string of 1 to 64 characters");
	if (!is_null(strict) && !cJSON_IsBool(strict))
		return coord_oai_fail(e, 400, "response_format.json_schema.strict",
				      "json_schema.strict must be a boolean");
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
	if (is_null(schema)) { /* no schema: any JSON object */
		q->s.constraint_kind = SL_CONSTRAINT_JSON;
		return 0;
	}
	q->s.constraint_kind = SL_CONSTRAINT_JSON_SCHEMA;
	*param = "response_format.json_schema.schema";
	return schema_text(schema, *param, q, e);
}

/* vLLM's guided_choice: one of the strings, exactly, as an EBNF grammar
 * of literal alternatives (quote, backslash and control bytes escaped). */
static int choice_grammar(const cJSON *a, oai_req *q, oai_err *e)
{
	int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
	if (n < 1 || n > 1024)
		return coord_oai_fail(e, 400, "guided_choice", "guided_choice must be an array of 1 to "
				      "1024 strings");
	size_t cap = 16;
	for (const cJSON *s = a->child; s; s = s->next) {
		if (!cJSON_IsString(s) || !s->valuestring[0])
			return coord_oai_fail(e, 400, "guided_choice", "guided_choice must hold "
					      "non-empty strings");
		cap += 4 * strlen(s->valuestring) + 8;
	}
	if (cap > SL_CONSTRAINT_MAX_TEXT || !(q->constraint = malloc(cap)))
		return coord_oai_fail(e, 400, "guided_choice", "guided_choice is too large");
	size_t o = (size_t)sprintf(q->constraint, "root ::= ");
	for (const cJSON *s = a->child; s; s = s->next) {
		o += (size_t)sprintf(q->constraint + o, "%s\"", s == a->child ? "" : " | ");
		for (const unsigned char *c = (const unsigned char *)s->valuestring; *c; c++)
			o += *c == '"' || *c == '\\' ? (size_t)sprintf(q->constraint + o, "\\%c", *c)
			     : *c < 0x20	  ? (size_t)sprintf(q->constraint + o, "\\x%02x", *c)
						  : (size_t)sprintf(q->constraint + o, "%c", *c);
		q->constraint[o++] = '"';
	}
	q->constraint[o] = 0;
	q->s.constraint_kind = SL_CONSTRAINT_EBNF;
	q->s.constraint = (coord_str){q->constraint, o};
	return 0;
}

/* response_format, or one of vLLM's guided_json / guided_regex /
 * guided_grammar (EBNF) / guided_choice; at most one. Checked here (grammar_check), so
 * the 400 names the field; the leader compiles it against the vocabulary. */
static int get_constraint(const cJSON *root, oai_req *q, oai_err *e)
{
	static const char *keys[] = {"response_format", "guided_json", "guided_regex", "guided_grammar",
				     "guided_choice"};
	const cJSON *v[5];
	const char *param = NULL;
	int n = 0;
	for (int i = 0; i < 5; i++) {
		v[i] = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
		if (is_null(v[i]) || (i == 0 && cJSON_IsObject(v[i]) &&
				      cJSON_IsString(cJSON_GetObjectItemCaseSensitive(v[i], "type")) &&
				      !strcmp(cJSON_GetObjectItemCaseSensitive(v[i], "type")->valuestring,
					      "text")))
			continue;
		if (n++)
			return coord_oai_fail(e, 400, keys[i], "%s and %s cannot be given together", param,
					      keys[i]);
		param = keys[i];
	}
	if (!param)
		return 0;
	if (v[0] && !strcmp(param, "response_format")) {
		if (get_response_format(v[0], q, &param, e))
			return -1;
	} else if (!strcmp(param, "guided_choice")) {
		if (choice_grammar(v[4], q, e))
			return -1;
	} else if (!strcmp(param, "guided_json")) {
		q->s.constraint_kind = SL_CONSTRAINT_JSON_SCHEMA;
		if (schema_text(v[1], param, q, e))
			return -1;
	} else {
		const cJSON *s = !strcmp(param, "guided_regex") ? v[2] : v[3];
		if (!cJSON_IsString(s) || !s->valuestring[0])
			return coord_oai_fail(e, 400, param, "%s must be a non-empty string", param);
		q->s.constraint_kind = s == v[2] ? SL_CONSTRAINT_REGEX : SL_CONSTRAINT_EBNF;
		q->s.constraint = (coord_str){s->valuestring, strlen(s->valuestring)};
	}
	char err[SL_ERRLEN];
	if (grammar_check(q->s.constraint_kind, q->s.constraint.p, q->s.constraint.n, err, sizeof err))
		return coord_oai_fail(e, 400, param, "%s", err);
	q->constraint_param = param;
	return 0;
}

void coord_oai_req_free(oai_req *q)
{
	free(q->constraint);
	q->constraint = NULL;
}

/* The sampling fields the OpenAI API takes as plain numbers of their own
 * name (common/sampling.h marks them; ranges are checked by the core,
 * sl_sampling_check), and log-probs. Completions: logprobs N (0..20) is
 * the chosen token's log-prob plus N alternatives; chat: logprobs true and
 * top_logprobs N. */
static int get_sampling(const cJSON *root, int chat, oai_req *q, oai_err *e)
{
	double d;
	long long v;
	int has;
	for (int i = 0; i < sl_sampling_n_fields; i++) {
		const sl_sampling_field *f = &sl_sampling_fields[i];
		if (!f->json)
			continue;
		if (get_num(root, f->name, &d, &has, e))
			return -1;
		if (has)
			sl_sampling_set(&q->s.sampling, f, d);
	}
	if (get_int(root, "top_k", -1, 1 << 30, &v, &has, e)) /* -1: off, as vLLM takes it */
		return -1;
	if (has && v != -1)
		q->s.sampling.top_k = (int32_t)v;
	if (chat) {
		int lp = 0;
		if (get_bool(root, "logprobs", &lp, e) ||
		    get_int(root, "top_logprobs", 0, SL_SAMPLING_MAX_TOP_LOGPROBS, &v, &has, e))
			return -1;
		if (has && v > 0 && !lp)
			return coord_oai_fail(e, 400, "top_logprobs", "top_logprobs needs logprobs: true");
		q->logprobs = lp ? (has ? (int)v : 0) : -1;
	} else {
		if (get_int(root, "logprobs", 0, SL_SAMPLING_MAX_TOP_LOGPROBS, &v, &has, e))
			return -1;
		q->logprobs = has ? (int)v : -1;
	}
	if (q->logprobs >= 0) {
		q->s.sampling.logprobs = 1;
		q->s.sampling.top_logprobs = q->logprobs;
	}
	return 0;
}

/* Every field but the prompt / messages. */
int coord_oai_read_common(coord *c, const cJSON *root, int chat, oai_req *q, oai_err *e)
{
	double d;
	long long v;
	int has;
	memset(q, 0, sizeof *q);
	q->logprobs = -1;
	coord_request_init(&q->s);
	q->n = 1;
	if (refuse_unknown(root, chat, e) || get_model(c, root, q, e) || refuse_unsupported(root, e) ||
	    get_sampling(root, chat, q, e) || get_logit_bias(root, q, e) ||
	    get_stop_token_ids(root, q, e) || get_constraint(root, q, e))
		return -1;
	if (!chat && get_bool(root, "echo", &q->echo, e))
		return -1;
	if (q->echo && q->logprobs >= 0) /* prompt log-probs are not computed by the node groups */
		return coord_oai_fail(e, 400, "echo", "echo with logprobs is not supported (the prompt's "
				      "log-probs are not computed); drop one of them");
	q->s.model = c->models[q->model].name;
	const char *mt = chat && !is_null(cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens"))
				 ? "max_completion_tokens" : "max_tokens";
	if (get_int(root, mt, 1, COORD_MAX_NEW_TOKENS, &v, &has, e))
		return -1;
	if (has)
		q->s.has_max_tokens = 1, q->s.max_tokens = (int32_t)v;
	if (get_num(root, "seed", &d, &has, e))
		return -1;
	/* any integer a 64-bit seed can hold, negative ones as two's complement */
	if (has && (d != floor(d) || !(d >= -9223372036854775808.0 && d < 18446744073709551616.0)))
		return coord_oai_fail(e, 400, "seed", "seed must be an integer in [-2^63, 2^64), got %.17g", d);
	if (has) {
		q->has_seed = 1;
		q->seed = d < 0 ? (uint64_t)(long long)d : (uint64_t)d;
	}
	if (get_int(root, "n", 1, COORD_OAI_MAX_CHOICES, &v, &has, e))
		return -1;
	if (has)
		q->n = (int)v;
	if (get_int(root, "best_of", 1, COORD_OAI_MAX_CHOICES, &v, &has, e))
		return -1;
	if (has && v > q->n)
		return coord_oai_fail(e, 400, "best_of", "best_of greater than n is not supported");
	if (get_stop(root, q, e) || get_bool(root, "stream", &q->stream, e))
		return -1;
	int ignore_eos = 0;
	if (get_bool(root, "ignore_eos", &ignore_eos, e) ||
	    get_bool(root, "return_token_ids", &q->return_token_ids, e))
		return -1;
	q->s.ignore_eos = ignore_eos;
	const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
	if (!is_null(so)) {
		if (!cJSON_IsObject(so))
			return coord_oai_fail(e, 400, "stream_options", "stream_options must be an object");
		if (get_bool(so, "include_usage", &q->include_usage, e))
			return e->param = "stream_options.include_usage", -1;
	}
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "user");
	if (!is_null(u) && !cJSON_IsString(u))
		return coord_oai_fail(e, 400, "user", "user must be a string");
	return 0;
}

/* --- prompts -------------------------------------------------------------- */

static int ids_of(const cJSON *a, const char *what, oai_prompt *p, oai_err *e)
{
	int n = cJSON_GetArraySize(a);
	if (n > COORD_MAX_PROMPT_IDS)
		return coord_oai_fail(e, 400, "prompt", "%s has %d token ids; the limit is %d", what, n, COORD_MAX_PROMPT_IDS);
	if (!(p->ids = malloc(sizeof(int32_t) * (n ? n : 1))))
		return coord_oai_fail(e, 500, NULL, "out of memory");
	const cJSON *it;
	cJSON_ArrayForEach(it, a) {
		double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
		if (!cJSON_IsNumber(it) || d != floor(d) || d < 0 || d > INT32_MAX)
			return coord_oai_fail(e, 400, "prompt", "%s[%zu] must be a token id (an integer >= 0)", what, p->n_ids);
		p->ids[p->n_ids++] = (int32_t)d;
	}
	return 0;
}

/* prompt: a string, an array of strings, an array of token ids, or an
 * array of such arrays. */
int coord_oai_read_prompts(const cJSON *root, oai_prompt **out, int *n_out, oai_err *e)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
	*out = NULL;
	*n_out = 0;
	if (is_null(p))
		return coord_oai_fail(e, 400, "prompt", "prompt is required");
	int n = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 1;
	if (cJSON_IsArray(p) && n == 0)
		return coord_oai_fail(e, 400, "prompt", "prompt must not be an empty array");
	const cJSON *first = cJSON_IsArray(p) ? p->child : NULL;
	int ids_one = first && cJSON_IsNumber(first); /* [1, 2, 3]: one prompt of ids */
	if (ids_one)
		n = 1;
	if (n > COORD_OAI_MAX_CHOICES)
		return coord_oai_fail(e, 400, "prompt", "at most %d prompts", COORD_OAI_MAX_CHOICES);
	oai_prompt *ps = calloc((size_t)n, sizeof *ps);
	if (!ps)
		return coord_oai_fail(e, 500, NULL, "out of memory");
	*out = ps;
	*n_out = n;
	if (cJSON_IsString(p)) {
		ps[0].text = p->valuestring;
		return 0;
	}
	if (!cJSON_IsArray(p))
		return coord_oai_fail(e, 400, "prompt", "prompt must be a string, an array of strings, an array of "
			    "token ids or an array of token-id arrays");
	if (ids_one)
		return ids_of(p, "prompt", &ps[0], e);
	int i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, p) {
		char what[32];
		snprintf(what, sizeof what, "prompt[%d]", i);
		if (cJSON_IsString(it))
			ps[i].text = it->valuestring;
		else if (cJSON_IsArray(it) && (!it->child || cJSON_IsNumber(it->child))) {
			if (ids_of(it, what, &ps[i], e))
				return -1;
		} else
			return coord_oai_fail(e, 400, "prompt", "%s must be a string or an array of token ids", what);
		i++;
	}
	return 0;
}

void coord_oai_free_prompts(oai_prompt *ps, int n)
{
	for (int i = 0; ps && i < n; i++)
		free(ps[i].ids);
	free(ps);
}

/* messages[] as the renderer takes them; strings point into the JSON,
 * joined text parts into *joined and tool fields into *extra (one malloc'd
 * block per message). With tools the template does not know, m[0] may be
 * a system message the server added (then first is 1). */
typedef struct oai_msgs {
	text_chat_msg *m;
	text_chat_part *parts;
	char **joined, **extra;
	int n, n_parts;
} oai_msgs;

static void free_msgs(oai_msgs *ms)
{
	for (int i = 0; ms->joined && i < ms->n; i++) {
		free(ms->joined[i]);
		free(ms->extra[i]);
	}
	free(ms->extra);
	free(ms->joined);
	free(ms->m);
	free(ms->parts);
}

/* Text parts joined with newlines, for templates that print content as a
 * string (most: a list would come out as its Python repr). */
static int join_parts(const cJSON *content, char **out, size_t *len)
{
	size_t n = 0, k = 0;
	const cJSON *p;
	cJSON_ArrayForEach(p, content)
		n += strlen(cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring) + 1;
	if (!(*out = malloc(n + 1)))
		return -1;
	cJSON_ArrayForEach(p, content) {
		const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
		if (k)
			(*out)[k++] = '\n';
		memcpy(*out + k, t, strlen(t));
		k += strlen(t);
	}
	(*out)[k] = 0;
	*len = k;
	return 0;
}

/* A template that knows no tools: an assistant's calls become Hermes text
 * after its content (text/tool_calls.c reads them back), so the model sees
 * its earlier calls. */
static int calls_into_content(const cJSON *tc, text_chat_msg *cm, char **joined, oai_err *e)
{
	sl_buf b = {0};
	if (cm->content && cm->content_len) {
		sl_buf_put(&b, cm->content, cm->content_len);
		sl_buf_putc(&b, '\n');
	}
	sl_buf tail = {0};
	if (coord_oai_calls_as_text(tc, &tail) || sl_buf_put(&b, tail.p, tail.n)) {
		sl_buf_free(&tail);
		sl_buf_free(&b);
		return coord_oai_fail(e, 500, NULL, "out of memory");
	}
	sl_buf_free(&tail);
	free(*joined);
	*joined = b.p;
	cm->content = b.p;
	cm->content_len = b.n;
	cm->parts = NULL;
	return 0;
}

/* A template that knows no tools: the server describes them in the system
 * message (appended to the first one when it is a plain string, else a
 * system message of its own at the start, in slot 0 kept free for it). */
static int describe_tools(const oai_tools *t, oai_msgs *ms, oai_err *e)
{
	sl_buf b = {0};
	text_chat_msg *sys = &ms->m[1];
	int append = ms->n > 1 && !strcmp(sys->role, "system") && !sys->parts;
	if (append && sys->content_len) {
		sl_buf_put(&b, sys->content, sys->content_len);
		sl_buf_puts(&b, "\n\n");
	}
	if (coord_oai_tools_prompt(t, &b)) {
		sl_buf_free(&b);
		return coord_oai_fail(e, 500, NULL, "out of memory");
	}
	int slot = append ? 1 : 0;
	free(ms->joined[slot]);
	ms->joined[slot] = b.p;
	ms->m[slot] = (text_chat_msg){.role = "system", .content = b.p, .content_len = b.n};
	return 0;
}

static int get_messages(const cJSON *root, const text_tmpl *t, const oai_tools *tools, oai_msgs *ms,
			oai_err *e)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "messages");
	char param[48];
	memset(ms, 0, sizeof *ms);
	if (!cJSON_IsArray(a) || !a->child)
		return coord_oai_fail(e, 400, "messages", "messages must be a non-empty array of messages");
	int n = cJSON_GetArraySize(a), n_parts = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, a) {
		const cJSON *c = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "content") : NULL;
		n_parts += cJSON_IsArray(c) ? cJSON_GetArraySize(c) : 0;
	}
	/* slot 0: the tools' system message, when the server writes one */
	ms->m = calloc((size_t)n + 1, sizeof *ms->m);
	ms->joined = calloc((size_t)n + 1, sizeof *ms->joined);
	ms->extra = calloc((size_t)n + 1, sizeof *ms->extra);
	ms->parts = calloc((size_t)n_parts + 1, sizeof *ms->parts);
	if (!ms->m || !ms->joined || !ms->extra || !ms->parts)
		return coord_oai_fail(e, 500, NULL, "out of memory");
	ms->n = n + 1;
	int i = 0;
	cJSON_ArrayForEach(m, a) {
		text_chat_msg *cm = &ms->m[i + 1];
		const cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
		const cJSON *content = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "content") : NULL;
		snprintf(param, sizeof param, "messages[%d]", i);
		if (!cJSON_IsObject(m))
			return coord_oai_fail(e, 400, "messages", "%s must be an object with role and content", param);
		if (!cJSON_IsString(role))
			return coord_oai_fail(e, 400, "messages", "%s.role must be a string", param);
		const char *r = role->valuestring;
		if (!strcmp(r, "developer")) /* OpenAI's newer name for the system role */
			r = "system";
		if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
			return coord_oai_fail(e, 400, "messages", "%s.role '%.32s' is not supported (system, user, "
					      "assistant, tool)", param, r);
		cm->role = r;
		const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
		int calls = !is_null(tc) && !(cJSON_IsArray(tc) && !tc->child);
		if (calls && strcmp(r, "assistant"))
			return coord_oai_fail(e, 400, "messages", "%s.tool_calls: only assistant messages make calls",
					      param);
		if (!strcmp(r, "tool") &&
		    !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "tool_call_id")))
			return coord_oai_fail(e, 400, "messages", "%s.tool_call_id must be a string (the id of the "
					      "call this message answers)", param);
		if (coord_oai_message_extra(m, param, &ms->extra[i + 1], e))
			return -1;
		if (ms->extra[i + 1] && tools->knows) {
			cm->extra_json = ms->extra[i + 1];
			cm->extra_len = strlen(ms->extra[i + 1]);
		}
		if (cJSON_IsString(content)) {
			cm->content = content->valuestring;
			cm->content_len = strlen(content->valuestring);
		} else if (cJSON_IsArray(content)) {
			int j = 0;
			const cJSON *p;
			cJSON_ArrayForEach(p, content) {
				const cJSON *ty = cJSON_IsObject(p) ? cJSON_GetObjectItemCaseSensitive(p, "type") : NULL;
				const cJSON *tx = cJSON_IsObject(p) ? cJSON_GetObjectItemCaseSensitive(p, "text") : NULL;
				if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text"))
					return coord_oai_fail(e, 400, "messages", "%s.content[%d].type %s%.32s%s is not supported "
						    "(only text parts)", param, j, cJSON_IsString(ty) ? "'" : "",
						    cJSON_IsString(ty) ? ty->valuestring : "missing",
						    cJSON_IsString(ty) ? "'" : "");
				if (!cJSON_IsString(tx))
					return coord_oai_fail(e, 400, "messages", "%s.content[%d].text must be a string", param, j);
				text_chat_part *cp = &ms->parts[ms->n_parts + j];
				cp->type = "text";
				cp->text = tx->valuestring;
				cp->text_len = strlen(tx->valuestring);
				j++;
			}
			if (text_tmpl_iterates_content(t)) {
				cm->parts = &ms->parts[ms->n_parts];
				cm->n_parts = j;
			} else if (join_parts(content, &ms->joined[i + 1], &cm->content_len)) {
				return coord_oai_fail(e, 500, NULL, "out of memory");
			} else {
				cm->content = ms->joined[i + 1];
			}
			ms->n_parts += j;
		} else if (is_null(content) && !strcmp(r, "assistant")) {
			/* content None: an assistant turn with nothing said (or only calls) */
		} else {
			return coord_oai_fail(e, 400, "messages", "%s.content must be a string or an array of text parts",
				    param);
		}
		if (calls && !tools->knows && calls_into_content(tc, cm, &ms->joined[i + 1], e))
			return -1;
		i++;
	}
	if (tools->json && !tools->knows)
		return describe_tools(tools, ms, e);
	return 0;
}

/* The prompt's ids: the template's text encoded with its special tokens
 * recognised and no BOS added (the template wrote the one it wants). */
static int render_prompt(coord *c, int model, const cJSON *root, const oai_tools *tools, const oai_msgs *ms,
			 oai_prompt *p, oai_err *e)
{
	const coord_model *cm = &c->models[model];
	int gen = 1;
	if (get_bool(root, "add_generation_prompt", &gen, e))
		return -1;
	/* the model's own strings (tokenizer_config.json, the GGUF), else the
	 * tokenizer's BOS and first EOS tokens */
	int32_t bos = text_tok_bos_id(cm->tok), eos = cm->n_eos ? cm->eos[0] : text_tok_eos_id(cm->tok);
	const char *bos_s = cm->meta->bos_token, *eos_s = cm->meta->eos_token;
	text_tmpl_vars v = {.add_generation_prompt = gen,
			     .bos_token = bos_s ? bos_s : bos >= 0 ? text_tok_id_to_token(cm->tok, bos) : NULL,
			     .eos_token = eos_s ? eos_s : eos >= 0 ? text_tok_id_to_token(cm->tok, eos) : NULL,
			     .max_output_bytes = 4 * (size_t)COORD_MAX_PROMPT_BYTES};
	if (tools->json && tools->knows) {
		v.tools_json = tools->json;
		v.tools_len = strlen(tools->json);
	}
	/* slot 0 holds the server's tools message, or nothing */
	const text_chat_msg *msgs = ms->m[0].role ? ms->m : ms->m + 1;
	int n_msgs = ms->m[0].role ? ms->n : ms->n - 1;
	char *text = NULL, err[SL_ERRLEN];
	size_t len = 0, n = 0;
	if (text_tmpl_render(cm->tmpl, msgs, n_msgs, &v, &text, &len, err, sizeof err))
		return coord_oai_fail(e, 400, "messages", "the chat template refused the messages: %s", err);
	int rc = 0;
	if (len > COORD_MAX_PROMPT_BYTES)
		rc = coord_oai_fail(e, 400, "messages", "the rendered conversation of %zu bytes exceeds the limit of %d",
			  len, COORD_MAX_PROMPT_BYTES);
	else if (text_tok_encode(cm->tok, text, len, 0, &p->ids, &n, err, sizeof err))
		rc = coord_oai_fail(e, 400, "messages", "cannot tokenize the conversation: %s", err);
	else if (n == 0)
		rc = coord_oai_fail(e, 400, "messages", "the conversation renders to no tokens");
	else if (n > COORD_MAX_PROMPT_IDS)
		rc = coord_oai_fail(e, 400, "messages", "the conversation of %zu tokens exceeds the limit of %d", n,
			  COORD_MAX_PROMPT_IDS);
	p->n_ids = n;
	free(text);
	return rc;
}

int coord_oai_chat_prompt(coord *c, int model, const cJSON *root, const oai_tools *tools, oai_prompt *p,
			  oai_err *e)
{
	oai_msgs ms = {0};
	int rc = get_messages(root, c->models[model].tmpl, tools, &ms, e) ||
		 render_prompt(c, model, root, tools, &ms, p, e) ? -1 : 0;
	free_msgs(&ms);
	return rc;
}
