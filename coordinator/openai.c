/*
 * openai.c — the OpenAI API (see openai.h): request JSON to native
 * Submits, Chunk/Done replies to OpenAI JSON and server-sent events.
 *
 * An exchange (one HTTP request) holds one choice per prompt x n. Each
 * choice is a coordinator request whose sink (oai_sink) is this exchange;
 * replies arrive in sink_reply. While the choices are being submitted the
 * exchange only records Dones (a request can end inside coord_submit when
 * no group could ever hold it), so that an early failure still gets a
 * proper status code instead of a broken stream.
 *
 * Replies never end another request directly: a reply arrives while the
 * coordinator walks its request list, so sibling choices that must stop
 * (one failed, or the client left) are detached and marked client_gone,
 * and the next tick cancels them (slot and KV blocks freed).
 *
 * Seeds: a request's `seed` S gives the j-th choice of every prompt the
 * seed S + j, so a choice's text depends only on its prompt, S and j; with
 * no seed each choice draws a random one.
 *
 * The HTTP front door: called by http.c (the server above it); calls down
 * into submit.c (coord_submit), route.c (context) and http_call.c (the
 * answer); stream.c and requests.c reach it only through the sink.
 */
#include "coordinator/openai.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja/chat_template.h"
#include "text/json.h"
#include "text/utf8.h"
#include "coordinator/coord_int.h"
#include "coordinator/metrics.h"
#include "common/rng.h"
#include "common/sl.h"


/* --- JSON output: common/buf.h buffers, strings through text/json.h ---- */

static void jcstr(sl_buf *j, const char *s) { text_json_str(j, s, strlen(s)); }

/* --- exchange state ----------------------------------------------------- */

typedef struct oai_choice {
	coord_req *req;            /* running; NULL once it ended or left */
	int prompt;                /* index of its prompt */
	int done;
	Shardline__Client__FinishReason finish;
	int timed_out;
	char *error;               /* ERROR's message (malloc'd) */
	int prompt_tokens, completion_tokens;
	sl_buf text;          /* stream = false: the whole text */
	coord_ids ids;             /* stream = false: every token id */
	float *lp, *top_lp;        /* stream = false: Done's log-probs ([n_lp], [n_lp * top_n]) */
	int32_t *top_ids;
	size_t n_lp;
	int top_n;
	size_t text_off;           /* completions' text_offset of the next token */
} oai_choice;

typedef struct oai_call {
	coord *c;
	coord_http_call *x;
	int chat, stream, include_usage, return_token_ids;
	int logprobs;              /* -1: none; else alternatives per token */
	const text_tok *tok;
	int32_t anchor;            /* a plain token decoded before another (token_text); -1: none */
	int submitting;            /* Dones are only recorded, nothing is sent */
	int answered;              /* a response (or the stream's end) went out */
	int n_choices, n_done;
	oai_choice *ch;
	char id[48];
	long long created;
	char model[COORD_MAX_NAME + 1];
	sl_buf head;                   /* {"id":...,"object":...,"created":...,"model":... of every event */
	sl_buf ev;                     /* scratch for one event */
} oai_call;

static void choice_release(oai_choice *ch)
{
	free(ch->lp);
	free(ch->top_lp);
	free(ch->top_ids);
	free(ch->error);
	free(ch->text.p);
	free(ch->ids.p);
}

/* Every running choice leaves the exchange; the tick cancels it. */
static void detach_all(oai_call *o)
{
	for (int i = 0; i < o->n_choices; i++) {
		coord_req *r = o->ch[i].req;
		if (!r)
			continue;
		r->sink.ops = NULL;
		r->sink.ctx = NULL;
		r->client_gone = 1;
		o->ch[i].req = NULL;
	}
}

void coord_oai_call_free(coord *c, void *app)
{
	oai_call *o = app;
	if (!o)
		return;
	detach_all(o);
	for (int i = 0; i < o->n_choices; i++)
		choice_release(&o->ch[i]);
	free(o->ch);
	free(o->head.p);
	free(o->ev.p);
	free(o);
}

/* --- the sink of the exchange's requests ------------------------------- */

/* A request made for choice r->sink.choice joins the exchange. */
static void sink_attach(coord_req *r)
{
	oai_call *o = r->sink.ctx;
	if (o && r->sink.choice >= 0 && r->sink.choice < o->n_choices)
		o->ch[r->sink.choice].req = r;
}

/* A request leaves before its Done (freed on an error path). */
static void sink_detach(coord_req *r)
{
	oai_call *o = r->sink.ctx;
	int i = r->sink.choice;
	if (o && i >= 0 && i < o->n_choices && o->ch[i].req == r)
		o->ch[i].req = NULL;
	r->sink.ops = NULL;
	r->sink.ctx = NULL;
}

static void sink_reply(coord *c, coord_req *r, const coord_event *ev);

static const coord_sink_ops oai_sink = {
	.attach = sink_attach, .reply = sink_reply, .detach = sink_detach};

/* --- errors ------------------------------------------------------------- */

void coord_oai_error(coord_http_call *x, int status, const char *type, const char *param,
		     const char *code, const char *fmt, ...)
{
	char msg[SL_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	sl_buf j = {0};
	sl_buf_puts(&j, "{\"error\":{\"message\":");
	jcstr(&j, msg);
	sl_buf_puts(&j, ",\"type\":");
	jcstr(&j, type);
	sl_buf_puts(&j, ",\"param\":");
	if (param)
		jcstr(&j, param);
	else
		sl_buf_puts(&j, "null");
	sl_buf_puts(&j, ",\"code\":");
	if (code)
		jcstr(&j, code);
	else
		sl_buf_puts(&j, "null");
	sl_buf_puts(&j, "}}\n");
	const char *extra = status == 429 || status == 503 ? "Retry-After: 1" : NULL;
	if (status == 401)
		extra = "WWW-Authenticate: Bearer";
	if (j.failed)
		coord_http_respond(x, 500, "text/plain", "out of memory\n", 14, NULL);
	else
		coord_http_respond(x, status, "application/json", j.p, j.n, extra);
	free(j.p);
	SL_DEBUG("http", "%d: %s", status, msg);
}

/* A 400-class problem found while reading the request. */
typedef struct oai_err {
	int status;
	const char *type, *param, *code;
	char msg[SL_ERRLEN];
} oai_err;

static int fail(oai_err *e, int status, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(oai_err *e, int status, const char *param, const char *fmt, ...)
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

static void send_err(coord_http_call *x, const oai_err *e)
{
	coord_oai_error(x, e->status, e->type, e->param, e->code, "%s", e->msg);
}

/* The request field a coord_submit message is about: its first word when
 * that is one (the core's messages start with the field they check). */
static const char *param_of(const char *msg)
{
	static const char *fields[] = {"prompt", "prompt_ids", "max_tokens", "stop", "timeout_ms", NULL};
	size_t n = strcspn(msg, " [");
	for (int i = 0; fields[i]; i++)
		if (strlen(fields[i]) == n && !strncmp(msg, fields[i], n))
			return !strcmp(fields[i], "prompt_ids") ? "prompt" : fields[i];
	for (int i = 0; i < sl_sampling_n_fields; i++)
		if (strlen(sl_sampling_fields[i].name) == n && !strncmp(msg, sl_sampling_fields[i].name, n))
			return sl_sampling_fields[i].name;
	if (!strncmp(msg, "empty prompt", 12))
		return "prompt";
	return NULL;
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
		return fail(e, 400, key, "%s must be a number", key);
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
		return fail(e, 400, key, "%s must be an integer in [%.0f, %.0f], got %.17g", key, lo, hi, d);
	*v = (long long)d;
	return 0;
}

static int get_bool(const cJSON *o, const char *key, int *v, oai_err *e)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, key);
	if (is_null(f))
		return 0;
	if (!cJSON_IsBool(f))
		return fail(e, 400, key, "%s must be true or false", key);
	*v = cJSON_IsTrue(f);
	return 0;
}

/* The request's fields every endpoint shares, as one core request to copy
 * per choice. Its strings point into the parsed JSON. */
typedef struct oai_req {
	coord_request s;
	coord_str stops[COORD_MAX_STOPS];
	int n, stream, include_usage, return_token_ids;
	int logprobs;              /* -1: none; else the alternatives per token */
	int has_seed;
	uint64_t seed;
	int model;
} oai_req;

static int get_model(coord *c, const cJSON *root, oai_req *q, oai_err *e)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
	q->model = 0;
	if (is_null(m))
		return 0;
	if (!cJSON_IsString(m))
		return fail(e, 400, "model", "model must be a string");
	for (int i = 0; i < c->n_models; i++)
		if (!strcmp(c->models[i].name, m->valuestring)) {
			q->model = i;
			return 0;
		}
	fail(e, 404, "model", "the model '%.64s' does not exist (this server has '%s'%s)", m->valuestring,
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
				return fail(e, 400, "stop", "stop must be a string or an array of strings");
			if (k == COORD_MAX_STOPS)
				return fail(e, 400, "stop", "at most %d stop strings", COORD_MAX_STOPS);
			q->stops[k++] = (coord_str){it->valuestring, strlen(it->valuestring)};
		}
		q->s.n_stop = (size_t)k;
	} else {
		return fail(e, 400, "stop", "stop must be a string or an array of strings");
	}
	q->s.stop = q->stops;
	return 0;
}

/* Fields that exist in the OpenAI API but that this server does not
 * implement: refused unless given their neutral value. */
static int refuse_unsupported(const cJSON *root, oai_err *e)
{
	const cJSON *f;
	if ((f = cJSON_GetObjectItemCaseSensitive(root, "echo")) && cJSON_IsTrue(f))
		return fail(e, 400, "echo", "echo is not supported");
	if (!is_null(f = cJSON_GetObjectItemCaseSensitive(root, "suffix")))
		return fail(e, 400, "suffix", "suffix is not supported");
	if (!is_null(f = cJSON_GetObjectItemCaseSensitive(root, "logit_bias")) &&
	    !(cJSON_IsObject(f) && !f->child))
		return fail(e, 400, "logit_bias", "logit_bias is not supported");
	if (!is_null(f = cJSON_GetObjectItemCaseSensitive(root, "tools")) &&
	    !(cJSON_IsArray(f) && !f->child))
		return fail(e, 400, "tools", "tool calling is not supported");
	if (!is_null(f = cJSON_GetObjectItemCaseSensitive(root, "functions")))
		return fail(e, 400, "functions", "function calling is not supported");
	f = cJSON_GetObjectItemCaseSensitive(root, "response_format");
	if (!is_null(f)) {
		const cJSON *t = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "type") : NULL;
		if (!cJSON_IsString(t) || strcmp(t->valuestring, "text"))
			return fail(e, 400, "response_format", "only response_format {\"type\": \"text\"} is supported");
	}
	return 0;
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
			return fail(e, 400, "top_logprobs", "top_logprobs needs logprobs: true");
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
static int get_common(coord *c, const cJSON *root, int chat, oai_req *q, oai_err *e)
{
	double d;
	long long v;
	int has;
	memset(q, 0, sizeof *q);
	q->logprobs = -1;
	coord_request_init(&q->s);
	q->n = 1;
	if (get_model(c, root, q, e) || refuse_unsupported(root, e) || get_sampling(root, chat, q, e))
		return -1;
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
		return fail(e, 400, "seed", "seed must be an integer in [-2^63, 2^64), got %.17g", d);
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
		return fail(e, 400, "best_of", "best_of greater than n is not supported");
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
			return fail(e, 400, "stream_options", "stream_options must be an object");
		if (get_bool(so, "include_usage", &q->include_usage, e))
			return e->param = "stream_options.include_usage", -1;
	}
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "user");
	if (!is_null(u) && !cJSON_IsString(u))
		return fail(e, 400, "user", "user must be a string");
	return 0;
}

/* --- prompts -------------------------------------------------------------- */

/* One prompt: text, or token ids (owned). */
typedef struct oai_prompt {
	const char *text;
	int32_t *ids;
	size_t n_ids;
} oai_prompt;

static int ids_of(const cJSON *a, const char *what, oai_prompt *p, oai_err *e)
{
	int n = cJSON_GetArraySize(a);
	if (n > COORD_MAX_PROMPT_IDS)
		return fail(e, 400, "prompt", "%s has %d token ids; the limit is %d", what, n, COORD_MAX_PROMPT_IDS);
	if (!(p->ids = malloc(sizeof(int32_t) * (n ? n : 1))))
		return fail(e, 500, NULL, "out of memory");
	const cJSON *it;
	cJSON_ArrayForEach(it, a) {
		double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
		if (!cJSON_IsNumber(it) || d != floor(d) || d < 0 || d > INT32_MAX)
			return fail(e, 400, "prompt", "%s[%zu] must be a token id (an integer >= 0)", what, p->n_ids);
		p->ids[p->n_ids++] = (int32_t)d;
	}
	return 0;
}

/* prompt: a string, an array of strings, an array of token ids, or an
 * array of such arrays. */
static int get_prompts(const cJSON *root, oai_prompt **out, int *n_out, oai_err *e)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
	*out = NULL;
	*n_out = 0;
	if (is_null(p))
		return fail(e, 400, "prompt", "prompt is required");
	int n = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 1;
	if (cJSON_IsArray(p) && n == 0)
		return fail(e, 400, "prompt", "prompt must not be an empty array");
	const cJSON *first = cJSON_IsArray(p) ? p->child : NULL;
	int ids_one = first && cJSON_IsNumber(first); /* [1, 2, 3]: one prompt of ids */
	if (ids_one)
		n = 1;
	if (n > COORD_OAI_MAX_CHOICES)
		return fail(e, 400, "prompt", "at most %d prompts", COORD_OAI_MAX_CHOICES);
	oai_prompt *ps = calloc((size_t)n, sizeof *ps);
	if (!ps)
		return fail(e, 500, NULL, "out of memory");
	*out = ps;
	*n_out = n;
	if (cJSON_IsString(p)) {
		ps[0].text = p->valuestring;
		return 0;
	}
	if (!cJSON_IsArray(p))
		return fail(e, 400, "prompt", "prompt must be a string, an array of strings, an array of "
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
			return fail(e, 400, "prompt", "%s must be a string or an array of token ids", what);
		i++;
	}
	return 0;
}

static void free_prompts(oai_prompt *ps, int n)
{
	for (int i = 0; ps && i < n; i++)
		free(ps[i].ids);
	free(ps);
}

/* --- the exchange ----------------------------------------------------------- */

static oai_call *call_new(coord *c, coord_http_call *x, int chat, const oai_req *q, int n_choices)
{
	oai_call *o = calloc(1, sizeof *o);
	if (!o || !(o->ch = calloc((size_t)n_choices, sizeof *o->ch))) {
		free(o);
		return NULL;
	}
	o->c = c;
	o->x = x;
	o->chat = chat;
	o->stream = q->stream;
	o->include_usage = q->stream && q->include_usage;
	o->return_token_ids = q->return_token_ids;
	o->logprobs = q->logprobs;
	o->tok = c->models[q->model].tok;
	o->anchor = text_tok_token_to_id(o->tok, "a");
	o->n_choices = n_choices;
	uint64_t rng = sl_random_seed() ^ (uint64_t)(uintptr_t)o;
	snprintf(o->id, sizeof o->id, "%s-%016llx%08llx", chat ? "chatcmpl" : "cmpl",
		 (unsigned long long)sl_splitmix64(&rng), (unsigned long long)(sl_splitmix64(&rng) >> 32));
	o->created = (long long)time(NULL);
	snprintf(o->model, sizeof o->model, "%s", c->models[q->model].name);
	sl_buf_puts(&o->head, "{\"id\":\"");
	sl_buf_puts(&o->head, o->id);
	sl_buf_printf(&o->head, "\",\"object\":\"%s\",\"created\":%lld,\"model\":",
	     chat ? (q->stream ? "chat.completion.chunk" : "chat.completion") : "text_completion",
	     o->created);
	jcstr(&o->head, o->model);
	if (o->head.failed) {
		coord_oai_call_free(c, o);
		return NULL;
	}
	return o;
}

/* Submits choice i; 0, or the error to answer with. */
static int submit_choice(oai_call *o, const oai_req *q, const oai_prompt *p, int i, int j,
			 uint64_t *rng, oai_err *e)
{
	coord_request s = q->s;
	s.sampling.seed = q->has_seed ? q->seed + (uint64_t)j : sl_splitmix64(rng);
	if (p->text) {
		s.prompt = (coord_str){p->text, strlen(p->text)};
	} else {
		s.n_prompt_ids = p->n_ids;
		s.prompt_ids = p->ids;
	}
	s.stream = o->stream;
	coord_sink to = {.ops = &oai_sink, .ctx = o, .choice = i};
	char err[SL_ERRLEN];
	int code = coord_submit(o->c, &s, &to, err, sizeof err);
	if (!code)
		return 0;
	switch (code) {
	case SHARDLINE__CLIENT__ERROR_CODE__OVERLOADED:
		fail(e, 429, NULL, "%s", err);
		e->type = "server_overloaded";
		e->code = "overloaded";
		break;
	case SHARDLINE__CLIENT__ERROR_CODE__UNKNOWN_MODEL: fail(e, 404, "model", "%s", err); break;
	case SHARDLINE__CLIENT__ERROR_CODE__UNAVAILABLE:
		fail(e, 503, NULL, "%s", err);
		e->type = "server_error";
		break;
	case SHARDLINE__CLIENT__ERROR_CODE__BAD_REQUEST: fail(e, 400, param_of(err), "%s", err); break;
	default: fail(e, 500, NULL, "%s", err); e->type = "server_error";
	}
	return -1;
}

static const char *finish_name(Shardline__Client__FinishReason f)
{
	return f == SHARDLINE__CLIENT__FINISH_REASON__LENGTH ? "length" : "stop";
}

/* The HTTP status and type of a choice that ended with ERROR. Messages are
 * the coordinator's own (route.c, on_node.c, coord.c). */
static void error_status(const oai_choice *ch, oai_err *e)
{
	const char *m = ch->error ? ch->error : "the request failed";
	if (ch->timed_out) {
		fail(e, 408, NULL, "%s", m);
		e->type = "timeout";
	} else if (strstr(m, "no node group of model")) {
		fail(e, 400, "max_tokens", "%s", m);
	} else if (strstr(m, "was lost") || strstr(m, "shutting down") ||
		   strstr(m, "no live node group")) {
		fail(e, 503, NULL, "%s", m);
		e->type = "server_error";
	} else {
		fail(e, 500, NULL, "%s", m);
		e->type = "server_error";
	}
}

static void usage_json(sl_buf *j, const oai_call *o)
{
	long prompt = 0, gen = 0;
	for (int i = 0; i < o->n_choices; i++) {
		const oai_choice *ch = &o->ch[i];
		/* the choices of one prompt share it: count it once */
		if (i == 0 || o->ch[i - 1].prompt != ch->prompt)
			prompt += ch->prompt_tokens;
		gen += ch->completion_tokens;
	}
	sl_buf_printf(j, "\"usage\":{\"prompt_tokens\":%ld,\"completion_tokens\":%ld,\"total_tokens\":%ld}", prompt,
	     gen, prompt + gen);
}

static void ids_json(sl_buf *j, const int32_t *ids, size_t n)
{
	sl_buf_puts(j, "[");
	for (size_t k = 0; k < n; k++)
		sl_buf_printf(j, k ? ",%d" : "%d", ids[k]);
	sl_buf_puts(j, "]");
}

/* --- log-probs -------------------------------------------------------------- */

/* A token's text as it reads inside a sequence: decoded after a plain
 * anchor token, whose text is then cut off (alone, a SentencePiece token
 * would lose its leading space to the decoder's first-token strip).
 * malloc'd; NULL when out of memory. */
static char *token_text(const oai_call *o, int32_t id, size_t *n)
{
	char *both = NULL, *one = NULL, err[SL_ERRLEN];
	size_t nb = 0, n1 = 0;
	if (o->anchor >= 0) {
		int32_t pair[2] = {o->anchor, id};
		if (!text_tok_decode(o->tok, pair, 2, 0, &both, &nb, err, sizeof err) &&
		    !text_tok_decode(o->tok, pair, 1, 0, &one, &n1, err, sizeof err) && n1 <= nb &&
		    !memcmp(both, one, n1)) {
			memmove(both, both + n1, nb - n1 + 1);
			free(one);
			*n = nb - n1;
			return both;
		}
		free(both);
		free(one);
		both = NULL;
	}
	if (text_tok_decode(o->tok, &id, 1, 0, &both, &nb, err, sizeof err))
		return NULL;
	*n = nb;
	return both;
}

/* A log-prob as JSON: -inf (probability 0) is written -9999.0, as vLLM does. */
static void jlogprob(sl_buf *j, float v)
{
	if (isfinite(v))
		sl_buf_printf(j, "%.7g", (double)v);
	else
		sl_buf_puts(j, "-9999.0");
}

static void jbytes(sl_buf *j, const char *t, size_t n)
{
	sl_buf_puts(j, "[");
	for (size_t k = 0; k < n; k++)
		sl_buf_printf(j, k ? ",%u" : "%u", (unsigned char)t[k]);
	sl_buf_puts(j, "]");
}

/* One chat log-prob entry: {"token","logprob","bytes"[,"top_logprobs"]}. */
static void chat_entry(sl_buf *j, const oai_call *o, int32_t id, float lp, int open)
{
	size_t n = 0;
	char *t = token_text(o, id, &n);
	sl_buf_puts(j, "{\"token\":");
	text_json_str(j, t ? t : "", t ? n : 0);
	sl_buf_puts(j, ",\"logprob\":");
	jlogprob(j, lp);
	sl_buf_puts(j, ",\"bytes\":");
	jbytes(j, t ? t : "", t ? n : 0);
	if (!open)
		sl_buf_puts(j, "}");
	free(t);
}

/* "logprobs":{...} for ids[0..n) (OpenAI's completions or chat layout), or
 * "logprobs":null when none were asked for (or the node sent none). */
static void logprobs_json(sl_buf *j, oai_call *o, oai_choice *ch, const int32_t *ids, size_t n,
			  const float *lp, size_t n_lp, int top_n, const int32_t *top_ids,
			  size_t n_top_ids, const float *top_lp, size_t n_top_lp)
{
	if (top_n < 0 || n_top_ids != n_top_lp || n_top_ids != n * (size_t)top_n)
		top_n = 0, top_ids = NULL, top_lp = NULL;
	if (o->logprobs < 0 || n_lp != n || (n && !lp)) {
		sl_buf_puts(j, "\"logprobs\":null");
		return;
	}
	if (o->chat) {
		sl_buf_puts(j, "\"logprobs\":{\"content\":[");
		for (size_t i = 0; i < n; i++) {
			sl_buf_puts(j, i ? "," : "");
			chat_entry(j, o, ids[i], lp[i], 1);
			sl_buf_puts(j, ",\"top_logprobs\":[");
			for (int k = 0; k < top_n; k++) {
				sl_buf_puts(j, k ? "," : "");
				chat_entry(j, o, top_ids[i * top_n + k], top_lp[i * top_n + k], 0);
			}
			sl_buf_puts(j, "]}");
		}
		sl_buf_puts(j, "],\"refusal\":null}");
		return;
	}
	char **texts = calloc(n ? n : 1, sizeof *texts);
	size_t *lens = calloc(n ? n : 1, sizeof *lens);
	if (!texts || !lens) {
		free(texts), free(lens);
		j->failed = 1;
		return;
	}
	for (size_t i = 0; i < n; i++)
		texts[i] = token_text(o, ids[i], &lens[i]);
	sl_buf_puts(j, "\"logprobs\":{\"tokens\":[");
	for (size_t i = 0; i < n; i++) {
		sl_buf_puts(j, i ? "," : "");
		text_json_str(j, texts[i] ? texts[i] : "", texts[i] ? lens[i] : 0);
	}
	sl_buf_puts(j, "],\"token_logprobs\":[");
	for (size_t i = 0; i < n; i++) {
		sl_buf_puts(j, i ? "," : "");
		jlogprob(j, lp[i]);
	}
	sl_buf_puts(j, "],\"top_logprobs\":[");
	for (size_t i = 0; i < n; i++) {
		sl_buf_puts(j, i ? ",{" : "{");
		for (int k = 0; k < top_n; k++) {
			size_t tn = 0;
			char *t = token_text(o, top_ids[i * top_n + k], &tn);
			sl_buf_puts(j, k ? "," : "");
			text_json_str(j, t ? t : "", t ? tn : 0);
			sl_buf_puts(j, ":");
			jlogprob(j, top_lp[i * top_n + k]);
			free(t);
		}
		sl_buf_puts(j, "}");
	}
	sl_buf_puts(j, "],\"text_offset\":[");
	for (size_t i = 0; i < n; i++) {
		sl_buf_printf(j, i ? ",%zu" : "%zu", ch->text_off);
		ch->text_off += lens[i];
		free(texts[i]);
	}
	sl_buf_puts(j, "]}");
	free(texts);
	free(lens);
}

/* stream = false: keep Done's log-probs until every choice is done. */
static int keep_logprobs(oai_choice *ch, const coord_event *d)
{
	const coord_logprobs *b = d->lps;
	size_t n = b ? b->n : 0;
	if (!n)
		return 0;
	if (!(ch->lp = malloc(sizeof(float) * n)))
		return -1;
	memcpy(ch->lp, b->lp, sizeof(float) * n);
	ch->n_lp = n;
	size_t nt = n * (size_t)(b->top_n > 0 ? b->top_n : 0);
	if (nt) {
		if (!(ch->top_ids = malloc(sizeof(int32_t) * nt)) || !(ch->top_lp = malloc(sizeof(float) * nt)))
			return -1;
		memcpy(ch->top_ids, b->top_ids, sizeof(int32_t) * nt);
		memcpy(ch->top_lp, b->top, sizeof(float) * nt);
		ch->top_n = b->top_n;
	}
	return 0;
}

/* stream = false: the whole answer, once every choice is done. */
static void respond_whole(oai_call *o)
{
	sl_buf j = {0};
	sl_buf_put(&j, o->head.p, o->head.n);
	sl_buf_puts(&j, ",\"choices\":[");
	for (int i = 0; i < o->n_choices; i++) {
		oai_choice *ch = &o->ch[i];
		sl_buf_printf(&j, "%s{\"index\":%d,", i ? "," : "", i);
		if (o->chat) {
			sl_buf_puts(&j, "\"message\":{\"role\":\"assistant\",\"content\":");
			text_json_str(&j, ch->text.p ? ch->text.p : "", ch->text.n);
			sl_buf_puts(&j, "},");
		} else {
			sl_buf_puts(&j, "\"text\":");
			text_json_str(&j, ch->text.p ? ch->text.p : "", ch->text.n);
			sl_buf_puts(&j, ",");
		}
		if (o->return_token_ids) {
			sl_buf_puts(&j, "\"token_ids\":");
			ids_json(&j, ch->ids.p, ch->ids.n);
			sl_buf_puts(&j, ",");
		}
		logprobs_json(&j, o, ch, ch->ids.p, ch->ids.n, ch->lp, ch->n_lp, ch->top_n, ch->top_ids,
			      ch->n_lp * (size_t)ch->top_n, ch->top_lp, ch->n_lp * (size_t)ch->top_n);
		sl_buf_printf(&j, ",\"finish_reason\":\"%s\"}", finish_name(ch->finish));
	}
	sl_buf_puts(&j, "],");
	usage_json(&j, o);
	sl_buf_puts(&j, "}\n");
	if (j.failed)
		coord_oai_error(o->x, 500, "server_error", NULL, NULL, "out of memory");
	else
		coord_http_respond(o->x, 200, "application/json", j.p, j.n, NULL);
	free(j.p);
}

/* One SSE event from o->ev. */
static void send_event(oai_call *o)
{
	sl_buf_puts(&o->ev, "\n\n");
	if (o->ev.failed || coord_http_sse_write(o->x, o->ev.p, o->ev.n)) {
		SL_DEBUG("http", "%s: the stream ends early (out of memory, or an unread client)", o->id);
		detach_all(o);
		coord_http_sse_end(o->x);
		o->answered = 1;
	}
	o->ev.n = 0;
	o->ev.failed = 0;
}

/* data: {head,"choices":[{"index":i, <delta or text> ,"finish_reason":F}]}
 * for a chunk k, or for the end of choice i (k NULL, finish set). */
static void choice_event(oai_call *o, int i, const coord_event *k, const char *finish)
{
	sl_buf *j = &o->ev;
	const char *text = k ? k->text.p : NULL;
	size_t n = k ? k->text.n : 0;
	sl_buf_puts(j, "data: ");
	sl_buf_put(j, o->head.p, o->head.n);
	sl_buf_printf(j, ",\"choices\":[{\"index\":%d,", i);
	if (o->chat) {
		sl_buf_puts(j, "\"delta\":{");
		if (k) {
			sl_buf_puts(j, "\"content\":");
			text_json_str(j, text ? text : "", n);
		}
		sl_buf_puts(j, "},");
	} else {
		sl_buf_puts(j, "\"text\":");
		text_json_str(j, text ? text : "", n);
		sl_buf_puts(j, ",");
	}
	if (o->return_token_ids) {
		sl_buf_puts(j, "\"token_ids\":");
		ids_json(j, k ? k->ids : NULL, k ? k->n_ids : 0);
		sl_buf_puts(j, ",");
	}
	if (k && k->lps)
		logprobs_json(j, o, &o->ch[i], k->ids, k->n_ids, k->lps->lp, k->lps->n, k->lps->top_n,
			      k->lps->top_ids, k->lps->n * (size_t)k->lps->top_n, k->lps->top,
			      k->lps->n * (size_t)k->lps->top_n);
	else if (k)
		logprobs_json(j, o, &o->ch[i], k->ids, k->n_ids, NULL, 0, 0, NULL, 0, NULL, 0);
	else
		sl_buf_puts(j, "\"logprobs\":null");
	sl_buf_puts(j, ",\"finish_reason\":");
	if (finish)
		sl_buf_printf(j, "\"%s\"", finish);
	else
		sl_buf_puts(j, "null");
	sl_buf_puts(j, o->include_usage ? "}],\"usage\":null}" : "}]}");
	send_event(o);
}

static void stream_error(oai_call *o, const oai_err *e)
{
	sl_buf *j = &o->ev;
	sl_buf_puts(j, "data: {\"error\":{\"message\":");
	jcstr(j, e->msg);
	sl_buf_puts(j, ",\"type\":");
	jcstr(j, e->type);
	sl_buf_printf(j, ",\"param\":null,\"code\":%d}}", e->status);
	send_event(o);
}

/* The stream's end: the usage event when asked for, then [DONE]. */
static void stream_end(oai_call *o)
{
	if (o->include_usage) {
		sl_buf *j = &o->ev;
		sl_buf_puts(j, "data: ");
		sl_buf_put(j, o->head.p, o->head.n);
		sl_buf_puts(j, ",\"choices\":[],");
		usage_json(j, o);
		sl_buf_puts(j, "}");
		send_event(o);
	}
	if (!o->answered) {
		coord_http_sse_write(o->x, "data: [DONE]\n\n", 14);
		coord_http_sse_end(o->x);
		o->answered = 1;
	}
}

/* A choice ended with an error: the whole exchange fails (the other
 * choices are cancelled). */
static void fail_exchange(oai_call *o, const oai_choice *ch)
{
	oai_err e;
	error_status(ch, &e);
	detach_all(o);
	if (o->stream) {
		stream_error(o, &e);
		if (!o->answered) {
			coord_http_sse_write(o->x, "data: [DONE]\n\n", 14);
			coord_http_sse_end(o->x);
		}
	} else {
		send_err(o->x, &e);
	}
	o->answered = 1;
}

static void on_done(oai_call *o, oai_choice *ch, int i, const coord_event *d,
		    const coord_req *r)
{
	ch->done = 1;
	o->n_done++;
	ch->finish = d->finish;
	ch->timed_out = r->timed_out;
	ch->prompt_tokens = d->prompt_tokens;
	ch->completion_tokens = d->completion_tokens;
	if (d->error && !(ch->error = strdup(d->error)))
		ch->finish = SHARDLINE__CLIENT__FINISH_REASON__ERROR;
	if (!o->stream && d->has_text && sl_buf_put(&ch->text, d->text.p, d->text.n))
		ch->finish = SHARDLINE__CLIENT__FINISH_REASON__ERROR;
	if (!o->stream && (o->return_token_ids || o->logprobs >= 0) &&
	    coord_ids_add(&ch->ids, d->ids, d->n_ids))
		ch->finish = SHARDLINE__CLIENT__FINISH_REASON__ERROR;
	if (!o->stream && o->logprobs >= 0 && keep_logprobs(ch, d))
		ch->finish = SHARDLINE__CLIENT__FINISH_REASON__ERROR;
	if (o->submitting || o->answered)
		return;
	int bad = ch->finish != SHARDLINE__CLIENT__FINISH_REASON__LENGTH &&
		  ch->finish != SHARDLINE__CLIENT__FINISH_REASON__STOP &&
		  ch->finish != SHARDLINE__CLIENT__FINISH_REASON__EOS;
	if (bad) {
		fail_exchange(o, ch);
		return;
	}
	if (o->stream)
		choice_event(o, i, NULL, finish_name(ch->finish));
	if (o->n_done < o->n_choices)
		return;
	if (o->stream)
		stream_end(o);
	else
		respond_whole(o);
	o->answered = 1;
}

/* A chunk or the end of r, to its exchange. */
static void sink_reply(coord *c, coord_req *r, const coord_event *ev)
{
	oai_call *o = r->sink.ctx;
	int i = r->sink.choice;
	if (!o || i < 0 || i >= o->n_choices)
		return;
	oai_choice *ch = &o->ch[i];
	if (ev->kind == COORD_EV_CHUNK) {
		if (!o->stream || o->answered || o->submitting)
			return;
		if (ev->text.n == 0 && !((o->return_token_ids || o->logprobs >= 0) && ev->n_ids))
			return; /* nothing a client can see */
		choice_event(o, i, ev, NULL);
	} else {
		ch->req = NULL;
		r->sink.ops = NULL; /* r is freed right after its Done */
		r->sink.ctx = NULL;
		on_done(o, ch, i, ev, r);
	}
}

/* After every choice was submitted: fail, stream, or wait. */
static void start_answer(oai_call *o)
{
	o->submitting = 0;
	for (int i = 0; i < o->n_choices; i++) {
		const oai_choice *ch = &o->ch[i];
		int bad = ch->done && ch->finish != SHARDLINE__CLIENT__FINISH_REASON__LENGTH &&
			  ch->finish != SHARDLINE__CLIENT__FINISH_REASON__STOP &&
			  ch->finish != SHARDLINE__CLIENT__FINISH_REASON__EOS;
		if (bad) { /* ended inside coord_submit: nothing sent yet, so a real status */
			oai_err e;
			error_status(ch, &e);
			detach_all(o);
			send_err(o->x, &e);
			o->answered = 1;
			return;
		}
	}
	if (!o->stream) {
		if (o->n_done == o->n_choices) {
			respond_whole(o);
			o->answered = 1;
		} else {
			coord_http_wait(o->x);
		}
		return;
	}
	if (coord_http_sse_begin(o->x)) {
		detach_all(o);
		coord_oai_error(o->x, 500, "server_error", NULL, NULL, "out of memory");
		o->answered = 1;
		return;
	}
	for (int i = 0; o->chat && i < o->n_choices; i++) { /* the role comes first */
		sl_buf *j = &o->ev;
		sl_buf_puts(j, "data: ");
		sl_buf_put(j, o->head.p, o->head.n);
		sl_buf_printf(j, ",\"choices\":[{\"index\":%d,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
		     "\"logprobs\":null,\"finish_reason\":null}]%s}", i, o->include_usage ? ",\"usage\":null" : "");
		send_event(o);
	}
	for (int i = 0; i < o->n_choices; i++)
		if (o->ch[i].done)
			choice_event(o, i, NULL, finish_name(o->ch[i].finish));
	if (o->n_done == o->n_choices)
		stream_end(o);
}

/* Submits every choice of every prompt; answers on the first refusal. */
static void run_choices(coord *c, coord_http_call *x, int chat, const oai_req *q,
			const oai_prompt *ps, int n_prompts)
{
	int n = n_prompts * q->n;
	if (n > COORD_OAI_MAX_CHOICES) {
		coord_oai_error(x, 400, "invalid_request_error", "n", NULL,
				"%d prompts x n = %d choices exceed the limit of %d", n_prompts, q->n,
				COORD_OAI_MAX_CHOICES);
		return;
	}
	oai_call *o = call_new(c, x, chat, q, n);
	if (!o) {
		coord_oai_error(x, 500, "server_error", NULL, NULL, "out of memory");
		return;
	}
	coord_http_set_app(x, o);
	o->submitting = 1;
	uint64_t rng = sl_random_seed() ^ (uint64_t)(uintptr_t)x;
	for (int p = 0, i = 0; p < n_prompts; p++)
		for (int j = 0; j < q->n; j++, i++) {
			oai_err e;
			o->ch[i].prompt = p;
			if (submit_choice(o, q, &ps[p], i, j, &rng, &e)) {
				detach_all(o);
				send_err(x, &e);
				o->answered = 1;
				return;
			}
		}
	start_answer(o);
}

/* --- endpoints -------------------------------------------------------------- */

static void completions(coord *c, coord_http_call *x, const cJSON *root)
{
	oai_req q;
	oai_err e;
	oai_prompt *ps = NULL;
	int n_prompts = 0;
	if (get_common(c, root, 0, &q, &e) || get_prompts(root, &ps, &n_prompts, &e))
		send_err(x, &e);
	else
		run_choices(c, x, 0, &q, ps, n_prompts);
	free_prompts(ps, n_prompts);
}

/* messages[] as the renderer takes them; strings point into the JSON,
 * joined text parts into *joined (one malloc'd block per message). */
typedef struct oai_msgs {
	text_chat_msg *m;
	text_chat_part *parts;
	char **joined;
	int n, n_parts;
} oai_msgs;

static void free_msgs(oai_msgs *ms)
{
	for (int i = 0; ms->joined && i < ms->n; i++)
		free(ms->joined[i]);
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

static int get_messages(const cJSON *root, const text_tmpl *t, oai_msgs *ms, oai_err *e)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "messages");
	char param[48];
	memset(ms, 0, sizeof *ms);
	if (!cJSON_IsArray(a) || !a->child)
		return fail(e, 400, "messages", "messages must be a non-empty array of messages");
	int n = cJSON_GetArraySize(a), n_parts = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, a) {
		const cJSON *c = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "content") : NULL;
		n_parts += cJSON_IsArray(c) ? cJSON_GetArraySize(c) : 0;
	}
	ms->m = calloc((size_t)n, sizeof *ms->m);
	ms->joined = calloc((size_t)n, sizeof *ms->joined);
	ms->parts = calloc((size_t)n_parts + 1, sizeof *ms->parts);
	if (!ms->m || !ms->joined || !ms->parts)
		return fail(e, 500, NULL, "out of memory");
	ms->n = n;
	int i = 0;
	cJSON_ArrayForEach(m, a) {
		text_chat_msg *cm = &ms->m[i];
		const cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
		const cJSON *content = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "content") : NULL;
		snprintf(param, sizeof param, "messages[%d]", i);
		if (!cJSON_IsObject(m))
			return fail(e, 400, "messages", "%s must be an object with role and content", param);
		if (!cJSON_IsString(role))
			return fail(e, 400, "messages", "%s.role must be a string", param);
		const char *r = role->valuestring;
		if (!strcmp(r, "developer")) /* OpenAI's newer name for the system role */
			r = "system";
		if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
			return fail(e, 400, "messages", "%s.role '%.32s' is not supported (system, user, assistant)",
				    param, r);
		cm->role = r;
		const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
		if (!is_null(tc) && !(cJSON_IsArray(tc) && !tc->child))
			return fail(e, 400, "messages", "%s.tool_calls: tool calling is not supported", param);
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
					return fail(e, 400, "messages", "%s.content[%d].type %s%.32s%s is not supported "
						    "(only text parts)", param, j, cJSON_IsString(ty) ? "'" : "",
						    cJSON_IsString(ty) ? ty->valuestring : "missing",
						    cJSON_IsString(ty) ? "'" : "");
				if (!cJSON_IsString(tx))
					return fail(e, 400, "messages", "%s.content[%d].text must be a string", param, j);
				text_chat_part *cp = &ms->parts[ms->n_parts + j];
				cp->type = "text";
				cp->text = tx->valuestring;
				cp->text_len = strlen(tx->valuestring);
				j++;
			}
			if (text_tmpl_iterates_content(t)) {
				cm->parts = &ms->parts[ms->n_parts];
				cm->n_parts = j;
			} else if (join_parts(content, &ms->joined[i], &cm->content_len)) {
				return fail(e, 500, NULL, "out of memory");
			} else {
				cm->content = ms->joined[i];
			}
			ms->n_parts += j;
		} else if (is_null(content) && !strcmp(r, "assistant")) {
			/* content None: an assistant turn with nothing said */
		} else {
			return fail(e, 400, "messages", "%s.content must be a string or an array of text parts",
				    param);
		}
		i++;
	}
	return 0;
}

/* The prompt's ids: the template's text encoded with its special tokens
 * recognised and no BOS added (the template wrote the one it wants). */
static int render_prompt(coord *c, int model, const cJSON *root, const oai_msgs *ms, oai_prompt *p,
			 oai_err *e)
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
	char *text = NULL, err[SL_ERRLEN];
	size_t len = 0, n = 0;
	if (text_tmpl_render(cm->tmpl, ms->m, ms->n, &v, &text, &len, err, sizeof err))
		return fail(e, 400, "messages", "the chat template refused the messages: %s", err);
	int rc = 0;
	if (len > COORD_MAX_PROMPT_BYTES)
		rc = fail(e, 400, "messages", "the rendered conversation of %zu bytes exceeds the limit of %d",
			  len, COORD_MAX_PROMPT_BYTES);
	else if (text_tok_encode(cm->tok, text, len, 0, &p->ids, &n, err, sizeof err))
		rc = fail(e, 400, "messages", "cannot tokenize the conversation: %s", err);
	else if (n == 0)
		rc = fail(e, 400, "messages", "the conversation renders to no tokens");
	else if (n > COORD_MAX_PROMPT_IDS)
		rc = fail(e, 400, "messages", "the conversation of %zu tokens exceeds the limit of %d", n,
			  COORD_MAX_PROMPT_IDS);
	p->n_ids = n;
	free(text);
	return rc;
}

static void chat(coord *c, coord_http_call *x, const cJSON *root)
{
	oai_req q;
	oai_err e;
	oai_msgs ms = {0};
	oai_prompt p = {0};
	if (get_common(c, root, 1, &q, &e)) {
		send_err(x, &e);
		return;
	}
	if (!c->models[q.model].tmpl) {
		coord_oai_error(x, 400, "invalid_request_error", "model", NULL,
				"the model '%s' has no chat template (give the coordinator --chat-template "
				"FILE); /v1/completions takes plain prompts", c->models[q.model].name);
		return;
	}
	if (get_messages(root, c->models[q.model].tmpl, &ms, &e) ||
	    render_prompt(c, q.model, root, &ms, &p, &e)) {
		send_err(x, &e);
	} else {
		/* no max_tokens: as much as the context leaves, as OpenAI does */
		int ctx = coord_model_context(c, q.model);
		if (!q.s.has_max_tokens && ctx > (long)p.n_ids) {
			long left = ctx - (long)p.n_ids;
			q.s.has_max_tokens = 1;
			q.s.max_tokens = (int32_t)(left < COORD_MAX_NEW_TOKENS ? left : COORD_MAX_NEW_TOKENS);
		}
		run_choices(c, x, 1, &q, &p, 1);
	}
	free(p.ids);
	free_msgs(&ms);
}

static void model_json(sl_buf *j, const coord *c, int i, long long created)
{
	sl_buf_puts(j, "{\"id\":");
	jcstr(j, c->models[i].name);
	sl_buf_printf(j, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"shardline\"", created);
	int ctx = coord_model_context(c, i);
	if (ctx > 0)
		sl_buf_printf(j, ",\"max_model_len\":%d", ctx);
	sl_buf_puts(j, "}");
}

static void list_models(coord *c, coord_http_call *x, const char *id)
{
	sl_buf j = {0};
	long long created = (long long)c->metrics->start_unix;
	if (id) {
		for (int i = 0; i < c->n_models; i++)
			if (!strcmp(c->models[i].name, id))
				model_json(&j, c, i, created);
		if (!j.n) {
			coord_oai_error(x, 404, "not_found_error", "model", "model_not_found",
					"the model '%.64s' does not exist", id);
			return;
		}
	} else {
		sl_buf_puts(&j, "{\"object\":\"list\",\"data\":[");
		for (int i = 0; i < c->n_models; i++) {
			if (i)
				sl_buf_puts(&j, ",");
			model_json(&j, c, i, created);
		}
		sl_buf_puts(&j, "]}");
	}
	sl_buf_puts(&j, "\n");
	if (j.failed)
		coord_oai_error(x, 500, "server_error", NULL, NULL, "out of memory");
	else
		coord_http_respond(x, 200, "application/json", j.p, j.n, NULL);
	free(j.p);
}

void coord_oai_handle(coord *c, coord_http_call *x, int endpoint, const char *arg, const char *body,
		      size_t len)
{
	if (endpoint == COORD_OAI_MODELS || endpoint == COORD_OAI_MODEL) {
		list_models(c, x, endpoint == COORD_OAI_MODEL ? arg : NULL);
		return;
	}
	if (len == 0) {
		coord_oai_error(x, 400, "invalid_request_error", NULL, NULL, "the request has no body");
		return;
	}
	if (!text_utf8_valid(body, len)) {
		coord_oai_error(x, 400, "invalid_request_error", NULL, NULL,
				"the body is not valid UTF-8 (JSON must be)");
		return;
	}
	/* cJSON ends strings at a NUL; a prompt must not be cut short quietly */
	if (memmem(body, len, "\\u0000", 6)) {
		coord_oai_error(x, 400, "invalid_request_error", NULL, NULL,
				"NUL characters (\\u0000) in strings are not supported");
		return;
	}
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
	if (!root) {
		size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
		coord_oai_error(x, 400, "invalid_request_error", NULL, NULL,
				"the body is not valid JSON (at byte %zu)", at);
		return;
	}
	size_t rest = end ? (size_t)(body + len - end) : 0;
	while (rest && strchr(" \t\r\n", body[len - rest]))
		rest--;
	if (rest)
		coord_oai_error(x, 400, "invalid_request_error", NULL, NULL,
				"the body has data after its JSON value (at byte %zu)", len - rest);
	else if (!cJSON_IsObject(root))
		coord_oai_error(x, 400, "invalid_request_error", NULL, NULL, "the body must be a JSON object");
	else if (endpoint == COORD_OAI_COMPLETIONS)
		completions(c, x, root);
	else
		chat(c, x, root);
	cJSON_Delete(root);
}
