/*
 * openai.c — the OpenAI API's exchange (see openai.h): a request read by
 * openai_request.c becomes one core request per choice (coord_submit);
 * their events come back through the sink and leave through
 * openai_response.c as OpenAI JSON or server-sent events.
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
 * into submit.c (coord_submit), route.c (context) and, through
 * openai_response.c, http_call.c (the answer); stream.c and requests.c
 * reach it only through the sink.
 */
#include "coordinator/openai.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/openai_int.h"
#include "common/rng.h"
#include "common/sl.h"
#include "text/jinja/chat_template.h"
#include "text/utf8.h"

/* --- exchange state ----------------------------------------------------- */

static void choice_release(oai_choice *ch)
{
	free(ch->lp);
	free(ch->top_lp);
	free(ch->top_ids);
	free(ch->error);
	free(ch->text.p);
	free(ch->ids.p);
	text_tool_stream_destroy(ch->tp);
	free(ch->echo.p);
}

void coord_oai_call_free(coord *c, void *app)
{
	oai_call *o = app;
	if (!o)
		return;
	coord_oai_detach_all(o);
	for (int i = 0; i < o->n_choices; i++)
		choice_release(&o->ch[i]);
	for (int i = 0; i < o->n_tool_names; i++)
		free(o->tool_names[i]);
	free(o->tool_names);
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

/* The request field a coord_submit message is about: its first word when
 * that is one (the core's messages start with the field they check). */
static const char *param_of(const char *msg)
{
	static const char *fields[] = {"prompt", "prompt_ids", "max_tokens", "stop", "timeout_ms",
				       "logit_bias", "stop_token_ids", NULL};
	size_t n = strcspn(msg, " [:");
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
	o->rng = sl_splitmix64(&rng);
	o->constraint_param = q->constraint_param;
	o->tools_on = chat && q->tools.json != NULL;
	o->family = q->tools.family;
	if (o->tools_on && coord_oai_keep_tool_names(o, &q->tools)) {
		coord_oai_call_free(c, o);
		return NULL;
	}
	for (int i = 0; o->tools_on && o->stream && i < n_choices; i++)
		if (text_tool_stream_create(o->family, &o->ch[i].tp) ||
		    text_tool_stream_names(o->ch[i].tp, (const char *const *)o->tool_names, o->n_tool_names)) {
			coord_oai_call_free(c, o);
			return NULL;
		}
	snprintf(o->id, sizeof o->id, "%s-%016llx%08llx", chat ? "chatcmpl" : "cmpl",
		 (unsigned long long)sl_splitmix64(&rng), (unsigned long long)(sl_splitmix64(&rng) >> 32));
	o->created = (long long)time(NULL);
	snprintf(o->model, sizeof o->model, "%s", c->models[q->model].name);
	if (coord_oai_write_head(o, chat)) {
		coord_oai_call_free(c, o);
		return NULL;
	}
	return o;
}

/* echo: choice i's text starts with its prompt's, the text as given or
 * the ids decoded (the BOS the server adds is not part of it): the whole
 * text's start, or the stream's first event. */
static int echo_prompt(oai_call *o, const oai_prompt *p, int i, oai_err *e)
{
	oai_choice *ch = &o->ch[i];
	sl_buf *to = o->stream ? &ch->echo : &ch->text;
	if (p->text)
		return sl_buf_put(to, p->text, strlen(p->text)) ? coord_oai_fail(e, 500, NULL, "out of memory") : 0;
	char *t = NULL, err[SL_ERRLEN];
	size_t n = 0;
	if (text_tok_decode(o->tok, p->ids, p->n_ids, 0, &t, &n, err, sizeof err))
		return coord_oai_fail(e, 400, "prompt", "echo: cannot decode the prompt: %s", err);
	int rc = sl_buf_put(to, t, n) ? coord_oai_fail(e, 500, NULL, "out of memory") : 0;
	free(t);
	return rc;
}

/* Submits choice i; 0, or the error to answer with. */
static int submit_choice(oai_call *o, const oai_req *q, const oai_prompt *p, int i, int j,
			 uint64_t *rng, oai_err *e)
{
	if (q->echo && echo_prompt(o, p, i, e))
		return -1;
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
		coord_oai_fail(e, 429, NULL, "%s", err);
		e->type = "server_overloaded";
		e->code = "overloaded";
		break;
	case SHARDLINE__CLIENT__ERROR_CODE__UNKNOWN_MODEL: coord_oai_fail(e, 404, "model", "%s", err); break;
	case SHARDLINE__CLIENT__ERROR_CODE__UNAVAILABLE:
		coord_oai_fail(e, 503, NULL, "%s", err);
		e->type = "server_error";
		break;
	case SHARDLINE__CLIENT__ERROR_CODE__BAD_REQUEST: coord_oai_fail(e, 400, param_of(err), "%s", err); break;
	default: coord_oai_fail(e, 500, NULL, "%s", err); e->type = "server_error";
	}
	return -1;
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

/* A choice ended with an error: the whole exchange fails (the other
 * choices are cancelled). */
static void fail_exchange(oai_call *o, const oai_choice *ch)
{
	oai_err e;
	coord_oai_error_status(o, ch, &e);
	coord_oai_detach_all(o);
	if (o->stream && !o->streaming) { /* nothing sent yet: a real status */
		coord_oai_send_err(o->x, &e);
	} else if (o->stream) {
		coord_oai_stream_error(o, &e);
		if (!o->answered) {
			coord_http_sse_write(o->x, "data: [DONE]\n\n", 14);
			coord_http_sse_end(o->x);
		}
	} else {
		coord_oai_send_err(o->x, &e);
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
		coord_oai_choice_event(o, i, NULL, coord_oai_finish_name(ch->finish));
	if (o->n_done < o->n_choices)
		return;
	if (o->stream)
		coord_oai_stream_end(o);
	else
		coord_oai_respond_whole(o);
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
		coord_oai_choice_event(o, i, ev, NULL);
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
			coord_oai_error_status(o, ch, &e);
			coord_oai_detach_all(o);
			coord_oai_send_err(o->x, &e);
			o->answered = 1;
			return;
		}
	}
	if (!o->stream) {
		if (o->n_done == o->n_choices) {
			coord_oai_respond_whole(o);
			o->answered = 1;
		} else {
			coord_http_wait(o->x);
		}
		return;
	}
	/* the stream starts with its first event (coord_oai_stream_start) */
	coord_http_wait(o->x);
	for (int i = 0; i < o->n_choices; i++)
		if (o->ch[i].done)
			coord_oai_choice_event(o, i, NULL, coord_oai_finish_name(o->ch[i].finish));
	if (o->n_done == o->n_choices)
		coord_oai_stream_end(o);
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
				coord_oai_detach_all(o);
				coord_oai_send_err(x, &e);
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
	if (coord_oai_read_common(c, root, 0, &q, &e) || coord_oai_read_prompts(root, &ps, &n_prompts, &e))
		coord_oai_send_err(x, &e);
	else
		run_choices(c, x, 0, &q, ps, n_prompts);
	coord_oai_free_prompts(ps, n_prompts);
	coord_oai_req_free(&q);
}

static void chat(coord *c, coord_http_call *x, const cJSON *root)
{
	oai_req q;
	oai_err e;
	oai_prompt p = {0};
	if (coord_oai_read_common(c, root, 1, &q, &e)) {
		coord_oai_send_err(x, &e);
		coord_oai_req_free(&q);
		return;
	}
	if (!c->models[q.model].tmpl) {
		coord_oai_req_free(&q);
		coord_oai_error(x, 400, "invalid_request_error", "model", NULL,
				"the model '%s' has no chat template (give the coordinator --chat-template "
				"FILE); /v1/completions takes plain prompts", c->models[q.model].name);
		return;
	}
	if (coord_oai_read_tools(c, root, &q, &e) || coord_oai_chat_prompt(c, q.model, root, &q.tools, &p, &e)) {
		coord_oai_send_err(x, &e);
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
	coord_oai_free_tools(&q.tools);
	coord_oai_req_free(&q);
}

void coord_oai_handle(coord *c, coord_http_call *x, int endpoint, const char *arg, const char *body,
		      size_t len)
{
	if (endpoint == COORD_OAI_MODELS || endpoint == COORD_OAI_MODEL) {
		coord_oai_list_models(c, x, endpoint == COORD_OAI_MODEL ? arg : NULL);
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

