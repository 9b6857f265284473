/*
 * openai_response.c — the OpenAI API's answers (see openai_int.h): error
 * bodies in OpenAI's shape, a whole completion or chat completion, the
 * server-sent events of a stream (chunks, each choice's end, usage, an
 * error mid-stream, [DONE]), log-probs in the completions and chat
 * layouts, and /v1/models. Strings go through text/json.h.
 *
 * Callers: openai.c (the exchange), http.c (coord_oai_error).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/metrics.h"
#include "coordinator/openai_int.h"
#include "common/sl.h"
#include "text/json.h"

/* --- JSON output: common/buf.h buffers, strings through text/json.h ---- */

static void jcstr(sl_buf *j, const char *s) { text_json_str(j, s, strlen(s)); }

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

void coord_oai_send_err(coord_http_call *x, const oai_err *e)
{
	coord_oai_error(x, e->status, e->type, e->param, e->code, "%s", e->msg);
}

const char *coord_oai_finish_name(Shardline__Client__FinishReason f)
{
	return f == SHARDLINE__CLIENT__FINISH_REASON__LENGTH ? "length" : "stop";
}

/* The HTTP status and type of a choice that ended with ERROR. Messages are
 * the coordinator's own (route.c, on_node.c, coord.c). */
void coord_oai_error_status(const oai_call *o, const oai_choice *ch, oai_err *e)
{
	const char *m = ch->error ? ch->error : "the request failed";
	if (ch->finish == SHARDLINE__CLIENT__FINISH_REASON__REFUSED) {
		/* the node found the constraint unusable: the client's error, in
		 * the field it came from */
		coord_oai_fail(e, 400, o->constraint_param, "%s", m);
	} else if (ch->timed_out) {
		coord_oai_fail(e, 408, NULL, "%s", m);
		e->type = "timeout";
	} else if (strstr(m, "no node group of model")) {
		coord_oai_fail(e, 400, "max_tokens", "%s", m);
	} else if (strstr(m, "was lost") || strstr(m, "shutting down") ||
		   strstr(m, "no live node group")) {
		coord_oai_fail(e, 503, NULL, "%s", m);
		e->type = "server_error";
	} else {
		coord_oai_fail(e, 500, NULL, "%s", m);
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

/* stream = false: the whole answer, once every choice is done. */
void coord_oai_respond_whole(oai_call *o)
{
	sl_buf j = {0};
	sl_buf_put(&j, o->head.p, o->head.n);
	sl_buf_puts(&j, ",\"choices\":[");
	for (int i = 0; i < o->n_choices; i++) {
		oai_choice *ch = &o->ch[i];
		sl_buf_printf(&j, "%s{\"index\":%d,", i ? "," : "", i);
		const char *finish = coord_oai_finish_name(ch->finish);
		if (o->chat && o->tools_on) {
			text_tool_parsed tp = {0};
			if (text_tool_parse_names(o->family, (const char *const *)o->tool_names, o->n_tool_names,
						  ch->text.p ? ch->text.p : "", ch->text.n, &tp))
				j.failed = 1;
			sl_buf_puts(&j, "\"message\":{\"role\":\"assistant\",\"content\":");
			if (tp.content)
				jcstr(&j, tp.content);
			else
				sl_buf_puts(&j, tp.n_calls ? "null" : "\"\"");
			if (tp.n_calls) {
				sl_buf_puts(&j, ",");
				coord_oai_tool_calls_json(&j, o, &tp);
				if (ch->finish != SHARDLINE__CLIENT__FINISH_REASON__LENGTH)
					finish = "tool_calls";
			}
			sl_buf_puts(&j, "},");
			text_tool_parsed_free(&tp);
		} else if (o->chat) {
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
		sl_buf_printf(&j, ",\"finish_reason\":\"%s\"}", finish);
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

/* Every running choice leaves the exchange (the tick cancels it): its
 * client went away, or the stream cannot be written to. */
void coord_oai_detach_all(oai_call *o)
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

/* One SSE event from o->ev; the first starts the stream. */
static void send_event(oai_call *o)
{
	if (!o->streaming && coord_oai_stream_start(o)) {
		o->ev.n = 0;
		o->ev.failed = 0;
		return;
	}
	sl_buf_puts(&o->ev, "\n\n");
	if (o->ev.failed || coord_http_sse_write(o->x, o->ev.p, o->ev.n)) {
		SL_DEBUG("http", "%s: the stream ends early (out of memory, or an unread client)", o->id);
		coord_oai_detach_all(o);
		coord_http_sse_end(o->x);
		o->answered = 1;
	}
	o->ev.n = 0;
	o->ev.failed = 0;
}

/* The end of a stream event: k's token ids and log-probs (k NULL: none
 * in this event), the finish reason (NULL: null), and the event sent. */
static void event_tail(oai_call *o, oai_choice *ch, const coord_event *k, const char *finish)
{
	sl_buf *j = &o->ev;
	if (o->return_token_ids) {
		sl_buf_puts(j, "\"token_ids\":");
		ids_json(j, k ? k->ids : NULL, k ? k->n_ids : 0);
		sl_buf_puts(j, ",");
	}
	if (k && k->lps)
		logprobs_json(j, o, ch, k->ids, k->n_ids, k->lps->lp, k->lps->n, k->lps->top_n,
			      k->lps->top_ids, k->lps->n * (size_t)k->lps->top_n, k->lps->top,
			      k->lps->n * (size_t)k->lps->top_n);
	else if (k)
		logprobs_json(j, o, ch, k->ids, k->n_ids, NULL, 0, 0, NULL, 0, NULL, 0);
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

/* --- streams with tools: the parser's reports as chat deltas -------------- */

/* data: {head,"choices":[{"index":i,"delta":{DELTA},<ids and log-probs of
 * k, once per chunk>,"finish_reason":F}]} */
static void tool_event(oai_call *o, int i, const sl_buf *delta, const coord_event *k, const char *finish)
{
	sl_buf *j = &o->ev;
	oai_choice *ch = &o->ch[i];
	const coord_event *ids = k && !ch->lp_sent ? k : NULL;
	if (o->answered) /* an earlier event of this chunk ended the stream */
		return;
	ch->lp_sent = 1;
	sl_buf_puts(j, "data: ");
	sl_buf_put(j, o->head.p, o->head.n);
	sl_buf_printf(j, ",\"choices\":[{\"index\":%d,\"delta\":{", i);
	sl_buf_put(j, delta->p, delta->n);
	sl_buf_puts(j, "},");
	event_tail(o, ch, ids, finish);
}

typedef struct {
	oai_call *o;
	int i;
	const coord_event *k;
} tool_sink_ctx;

static void ts_content(void *u, const char *s, size_t n)
{
	tool_sink_ctx *t = u;
	sl_buf d = {0};
	sl_buf_puts(&d, "\"content\":");
	text_json_str(&d, s, n);
	tool_event(t->o, t->i, &d, t->k, NULL);
	sl_buf_free(&d);
}

/* A call begins: its id, type and name, arguments "" (OpenAI's first
 * delta of a call); its arguments follow in fragments. */
static void ts_begin(void *u, int index, const char *name, size_t n)
{
	tool_sink_ctx *t = u;
	char id[40];
	sl_buf d = {0};
	coord_oai_tool_call_id(t->o, id, sizeof id);
	sl_buf_printf(&d, "\"tool_calls\":[{\"index\":%d,\"id\":\"%s\",\"type\":\"function\",\"function\":"
		      "{\"name\":", index, id);
	text_json_str(&d, name, n);
	sl_buf_puts(&d, ",\"arguments\":\"\"}}]");
	tool_event(t->o, t->i, &d, t->k, NULL);
	sl_buf_free(&d);
}

static void ts_args(void *u, int index, const char *s, size_t n)
{
	tool_sink_ctx *t = u;
	sl_buf d = {0};
	sl_buf_printf(&d, "\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":", index);
	text_json_str(&d, s, n);
	sl_buf_puts(&d, "}}]");
	tool_event(t->o, t->i, &d, t->k, NULL);
	sl_buf_free(&d);
}

static const text_tool_sink tool_sink = {ts_content, ts_begin, ts_args};

/* A chunk through the parser (what it settles goes out), or the end: what
 * was held back, then finish_reason ("tool_calls" when calls were made). */
static void tool_choice_event(oai_call *o, int i, const coord_event *k, const char *finish)
{
	oai_choice *ch = &o->ch[i];
	tool_sink_ctx t = {o, i, k};
	ch->lp_sent = 0;
	if (k) {
		if (text_tool_stream_feed(ch->tp, k->text.p ? k->text.p : "", k->text.n, &tool_sink, &t))
			o->ev.failed = 1;
		if (!ch->lp_sent && (o->return_token_ids || k->lps)) { /* held back, but the ids go out */
			sl_buf none = {0};
			tool_event(o, i, &none, k, NULL);
		}
		return;
	}
	int calls = text_tool_stream_finish(ch->tp, &tool_sink, &t);
	if (calls > 0 && strcmp(finish, "length"))
		finish = "tool_calls";
	sl_buf none = {0};
	tool_event(o, i, &none, NULL, finish);
}

/* data: {head,"choices":[{"index":i, <delta or text> ,"finish_reason":F}]}
 * for a chunk k, or for the end of choice i (k NULL, finish set). */
void coord_oai_choice_event(oai_call *o, int i, const coord_event *k, const char *finish)
{
	oai_choice *ch = &o->ch[i];
	if (ch->echo.n) { /* echo: the prompt's text goes first, as its own event */
		sl_buf echo = ch->echo;
		ch->echo = (sl_buf){0};
		coord_event pe = {.kind = COORD_EV_CHUNK, .has_text = 1, .text = {echo.p, echo.n}};
		coord_oai_choice_event(o, i, &pe, NULL);
		sl_buf_free(&echo);
		if (o->answered)
			return;
	}
	sl_buf *j = &o->ev;
	if (o->chat && o->ch[i].tp) {
		tool_choice_event(o, i, k, finish);
		return;
	}
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
	event_tail(o, &o->ch[i], k, finish);
}

void coord_oai_stream_error(oai_call *o, const oai_err *e)
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
void coord_oai_stream_end(oai_call *o)
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

void coord_oai_list_models(coord *c, coord_http_call *x, const char *id)
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

int coord_oai_write_head(oai_call *o, int chat)
{
	sl_buf_puts(&o->head, "{\"id\":\"");
	sl_buf_puts(&o->head, o->id);
	sl_buf_printf(&o->head, "\",\"object\":\"%s\",\"created\":%lld,\"model\":",
		      chat ? (o->stream ? "chat.completion.chunk" : "chat.completion") : "text_completion",
		      o->created);
	jcstr(&o->head, o->model);
	return o->head.failed ? -1 : 0;
}

/* The stream begins with its first event, not before: a request that
 * fails first (no live group, a deadline, a group lost before any token)
 * still gets its real status and a JSON error instead of a 200. The
 * event waiting in o->ev is kept while the roles go out ahead of it. */
int coord_oai_stream_start(oai_call *o)
{
	o->streaming = 1;
	if (coord_http_sse_begin(o->x)) {
		coord_oai_detach_all(o);
		coord_oai_error(o->x, 500, "server_error", NULL, NULL, "out of memory");
		o->answered = 1;
		return -1;
	}
	sl_buf held = o->ev;
	o->ev = (sl_buf){0};
	for (int i = 0; o->chat && i < o->n_choices; i++) { /* the role comes first */
		sl_buf *j = &o->ev;
		sl_buf_puts(j, "data: ");
		sl_buf_put(j, o->head.p, o->head.n);
		sl_buf_printf(j, ",\"choices\":[{\"index\":%d,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
			      "\"logprobs\":null,\"finish_reason\":null}]%s}", i,
			      o->include_usage ? ",\"usage\":null" : "");
		send_event(o);
	}
	sl_buf_free(&o->ev);
	o->ev = held;
	return o->answered ? -1 : 0;
}
