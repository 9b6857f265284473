/*
 * submit.c — the request core both front doors share: a Submit (a
 * client's own, or one that openai.c built from JSON) has every field
 * checked, its prompt tokenized, and becomes a request for the sink its
 * front door gave, queued and routed at once. Both transports are thus
 * validated by the same code; coord_sampling_check is the one range check
 * of the sampling fields.
 *
 * Callers: on_client.c (ZeroMQ Submit) and openai.c (one call per
 * choice). It calls down only: the tokenizer, requests.c (the table),
 * route.c (context, dispatch); the front door learns of its request
 * through its sink's attach, not by a call back up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord_int.h"
#include "common/sl.h"

typedef Shardline__Client__Submit pb_submit;
#define E_BAD SHARDLINE__CLIENT__ERROR_CODE__BAD_REQUEST
#define E_MODEL SHARDLINE__CLIENT__ERROR_CODE__UNKNOWN_MODEL
#define E_OVERLOADED SHARDLINE__CLIENT__ERROR_CODE__OVERLOADED
#define E_INTERNAL SHARDLINE__CLIENT__ERROR_CODE__INTERNAL
#define E_UNAVAILABLE SHARDLINE__CLIENT__ERROR_CODE__UNAVAILABLE

void coord_sampling_default(coord_sampling *s)
{
	*s = (coord_sampling){.top_p = 1, .repetition_penalty = 1};
}

int coord_sampling_check(const coord_sampling *s, int vocab, char *err, size_t n)
{
	/* written so that NaN fails every test */
	if (!(s->temperature >= 0 && s->temperature <= 100))
		return snprintf(err, n, "temperature must be in [0, 100], got %g", s->temperature), 1;
	if (s->top_k < 0 || s->top_k > vocab)
		return snprintf(err, n, "top_k must be in [0, %d], got %d", vocab, s->top_k), 1;
	if (!(s->top_p > 0 && s->top_p <= 1))
		return snprintf(err, n, "top_p must be in (0, 1], got %g", s->top_p), 1;
	if (!(s->min_p >= 0 && s->min_p <= 1))
		return snprintf(err, n, "min_p must be in [0, 1], got %g", s->min_p), 1;
	if (!(s->presence_penalty >= -COORD_MAX_PENALTY && s->presence_penalty <= COORD_MAX_PENALTY))
		return snprintf(err, n, "presence_penalty must be in [-%g, %g], got %g", COORD_MAX_PENALTY,
				COORD_MAX_PENALTY, s->presence_penalty), 1;
	if (!(s->frequency_penalty >= -COORD_MAX_PENALTY && s->frequency_penalty <= COORD_MAX_PENALTY))
		return snprintf(err, n, "frequency_penalty must be in [-%g, %g], got %g",
				COORD_MAX_PENALTY, COORD_MAX_PENALTY, s->frequency_penalty), 1;
	if (!(s->repetition_penalty > 0 && s->repetition_penalty <= COORD_MAX_REP_PENALTY))
		return snprintf(err, n, "repetition_penalty must be in (0, %g], got %g",
				COORD_MAX_REP_PENALTY, s->repetition_penalty), 1;
	if (s->top_logprobs < 0 || s->top_logprobs > COORD_MAX_TOP_LOGPROBS)
		return snprintf(err, n, "top_logprobs must be in [0, %d], got %d", COORD_MAX_TOP_LOGPROBS,
				s->top_logprobs), 1;
	return 0;
}

/* A Submit's sampling and log-prob fields; absent ones are off. */
static void sampling_of(const pb_submit *s, coord_sampling *o)
{
	const Shardline__Client__Sampling *sp = s->sampling;
	coord_sampling_default(o);
	if (sp) {
		o->temperature = sp->has_temperature ? sp->temperature : o->temperature;
		o->top_k = sp->has_top_k ? sp->top_k : o->top_k;
		o->top_p = sp->has_top_p ? sp->top_p : o->top_p;
		o->min_p = sp->has_min_p ? sp->min_p : o->min_p;
		o->seed = sp->has_seed ? sp->seed : o->seed;
		o->presence_penalty = sp->has_presence_penalty ? sp->presence_penalty : o->presence_penalty;
		o->frequency_penalty = sp->has_frequency_penalty ? sp->frequency_penalty : o->frequency_penalty;
		o->repetition_penalty = sp->has_repetition_penalty ? sp->repetition_penalty : o->repetition_penalty;
	}
	o->top_logprobs = s->has_top_logprobs ? s->top_logprobs : 0;
	o->logprobs = (s->has_logprobs && s->logprobs) || o->top_logprobs > 0;
}

/* Field checks of a Submit that need no tokenizer; *sampling gets its
 * sampling fields. */
static int check_fields(coord *c, const pb_submit *s, int *model, coord_sampling *sampling,
			char *err, size_t n)
{
	*model = 0;
	if (s->model && s->model[0]) {
		size_t len = strnlen(s->model, COORD_MAX_NAME + 1);
		*model = -1;
		for (int i = 0; i < c->n_models && len <= COORD_MAX_NAME; i++)
			if (!strcmp(c->models[i].name, s->model))
				*model = i;
		if (*model < 0) {
			snprintf(err, n, "unknown model '%.64s' (this coordinator serves '%s'%s)", s->model,
				 c->models[0].name, c->n_models > 1 ? " and others" : "");
			return E_MODEL;
		}
	}
	int vocab = c->models[*model].vocab;
	sampling_of(s, sampling);
	int text = s->has_prompt && s->prompt.len > 0, ids = s->n_prompt_ids > 0;
	if (!text && !ids)
		return snprintf(err, n, "empty prompt: give prompt text or prompt_ids"), E_BAD;
	if (text && ids)
		return snprintf(err, n, "give prompt or prompt_ids, not both"), E_BAD;
	if (s->prompt.len > COORD_MAX_PROMPT_BYTES)
		return snprintf(err, n, "prompt of %zu bytes exceeds the limit of %d", s->prompt.len,
				COORD_MAX_PROMPT_BYTES), E_BAD;
	if (s->n_prompt_ids > COORD_MAX_PROMPT_IDS)
		return snprintf(err, n, "%zu prompt_ids exceed the limit of %d", s->n_prompt_ids,
				COORD_MAX_PROMPT_IDS), E_BAD;
	for (size_t i = 0; i < s->n_prompt_ids; i++)
		if (s->prompt_ids[i] < 0 || s->prompt_ids[i] >= vocab)
			return snprintf(err, n, "prompt_ids[%zu] = %d is outside the vocabulary [0, %d)",
					i, s->prompt_ids[i], vocab), E_BAD;
	if (s->has_max_tokens && (s->max_tokens < 1 || s->max_tokens > COORD_MAX_NEW_TOKENS))
		return snprintf(err, n, "max_tokens must be in [1, %d], got %d", COORD_MAX_NEW_TOKENS,
				s->max_tokens), E_BAD;
	if (coord_sampling_check(sampling, vocab, err, n))
		return E_BAD;
	if (s->n_stop > COORD_MAX_STOPS)
		return snprintf(err, n, "%zu stop strings exceed the limit of %d", s->n_stop,
				COORD_MAX_STOPS), E_BAD;
	for (size_t i = 0; i < s->n_stop; i++)
		if (s->stop[i].len == 0 || s->stop[i].len > COORD_MAX_STOP_BYTES)
			return snprintf(err, n, "stop[%zu] must be 1 to %d bytes, got %zu", i,
					COORD_MAX_STOP_BYTES, s->stop[i].len), E_BAD;
	if (s->has_timeout_ms && s->timeout_ms > COORD_MAX_TIMEOUT_MS)
		return snprintf(err, n, "timeout_ms must be at most %d", COORD_MAX_TIMEOUT_MS), E_BAD;
	return 0;
}

/* The prompt as ids: given, or encoded (client text never makes special
 * tokens: COORD_TOK_SPLIT_SPECIAL). */
static int encode_prompt(coord *c, const pb_submit *s, int model, int32_t **ids, int *n_ids, char *err,
		      size_t n)
{
	size_t cnt = s->n_prompt_ids;
	if (cnt) {
		if (!(*ids = malloc(sizeof(int32_t) * cnt)))
			return snprintf(err, n, "out of memory"), E_INTERNAL;
		memcpy(*ids, s->prompt_ids, sizeof(int32_t) * cnt);
	} else {
		int flags = COORD_TOK_SPLIT_SPECIAL |
			    (!s->has_add_special || s->add_special ? COORD_TOK_ADD_SPECIAL : 0);
		char terr[SL_ERRLEN];
		if (text_tok_encode(c->models[model].tok, (const char *)s->prompt.data, s->prompt.len,
				     flags, ids, &cnt, terr, sizeof terr))
			return snprintf(err, n, "cannot tokenize the prompt: %.400s", terr), E_BAD;
		if (cnt == 0)
			return snprintf(err, n, "empty prompt: the text encodes to no tokens"), E_BAD;
		if (cnt > COORD_MAX_PROMPT_IDS)
			return snprintf(err, n, "prompt of %zu tokens exceeds the limit of %d", cnt,
					COORD_MAX_PROMPT_IDS), E_BAD;
	}
	*n_ids = (int)cnt;
	return 0;
}

static int check_context(coord *c, int model, int n_prompt, int max_tokens, char *err, size_t n)
{
	int ctx = coord_model_context(c, model);
	if (ctx <= 0) /* no group yet: it waits in the queue (and times out if none comes) */
		return 0;
	if (n_prompt >= ctx)
		return snprintf(err, n, "prompt of %d tokens is longer than the context of %d", n_prompt,
				ctx), E_BAD;
	if ((long)n_prompt + max_tokens > ctx)
		return snprintf(err, n, "prompt (%d tokens) + max_tokens (%d) exceeds the context of %d",
				n_prompt, max_tokens, ctx), E_BAD;
	return 0;
}

static int copy_stops(coord_req *r, const pb_submit *s)
{
	if (!s->n_stop)
		return 0;
	r->stop = calloc(s->n_stop, sizeof *r->stop);
	r->stop_len = calloc(s->n_stop, sizeof *r->stop_len);
	if (!r->stop || !r->stop_len)
		return -1;
	for (size_t i = 0; i < s->n_stop; i++, r->n_stop++) {
		if (!(r->stop[i] = malloc(s->stop[i].len + 1)))
			return -1;
		memcpy(r->stop[i], s->stop[i].data, s->stop[i].len);
		r->stop[i][s->stop[i].len] = 0;
		r->stop_len[i] = s->stop[i].len;
		if (s->stop[i].len > r->max_stop_len)
			r->max_stop_len = s->stop[i].len;
	}
	return 0;
}

/* A request from a validated Submit; it owns ids from here on. */
static coord_req *make_request(coord *c, const pb_submit *s, int model,
			       const coord_sampling *sampling, int32_t *ids, int n_ids,
			       const coord_sink *to)
{
	coord_req *r = coord_req_new(c);
	if (!r)
		return free(ids), NULL;
	r->tag = s->tag;
	r->sink = *to;
	if (to->ops && to->ops->attach) /* its front door holds r until r's Done */
		to->ops->attach(r);
	r->model = model;
	r->prompt = ids;
	r->n_prompt = n_ids;
	for (int i = 0; i < n_ids; i++)
		r->max_prompt_id = ids[i] > r->max_prompt_id ? ids[i] : r->max_prompt_id;
	r->sampling = *sampling;
	r->max_tokens = s->has_max_tokens ? s->max_tokens : c->o.default_max_tokens;
	r->ignore_eos = s->has_ignore_eos && s->ignore_eos;
	r->stream = !s->has_stream || s->stream;
	r->t_submit = sl_now();
	unsigned tmo = s->has_timeout_ms && s->timeout_ms ? s->timeout_ms : (unsigned)c->o.request_timeout_ms;
	r->deadline = r->t_submit + tmo * 1e-3;
	char err[SL_ERRLEN];
	if (copy_stops(r, s) || text_detok_create(c->models[model].tok, 1, &r->detok, err, sizeof err)) {
		coord_req_free(c, r);
		return NULL;
	}
	coord_req_enqueue(c, r, 0);
	return r;
}

int coord_submit(coord *c, const pb_submit *s, const coord_sink *to, char *err, size_t n)
{
	int model, n_ids = 0, code;
	int32_t *ids = NULL;
	coord_sampling sampling;
	if ((code = check_fields(c, s, &model, &sampling, err, n)))
		return code;
	if (c->o.admission_timeout_ms == 0 && !coord_model_live(c, model))
		return snprintf(err, n, "no live node group serves model %s; retry later",
				c->models[model].name), E_UNAVAILABLE;
	if (c->n_queued >= c->o.max_queue)
		return snprintf(err, n, "overloaded: %d requests are waiting for a node group; retry later",
				c->n_queued), E_OVERLOADED;
	if ((code = encode_prompt(c, s, model, &ids, &n_ids, err, n))) {
		free(ids);
		return code;
	}
	int max_tokens = s->has_max_tokens ? s->max_tokens : c->o.default_max_tokens;
	if ((code = check_context(c, model, n_ids, max_tokens, err, n))) {
		free(ids);
		return code;
	}
	coord_req *r = make_request(c, s, model, &sampling, ids, n_ids, to);
	if (!r)
		return snprintf(err, n, "out of memory"), E_INTERNAL;
	SL_DEBUG("coord", "request %llu: %d prompt tokens, max_tokens %d, queued (%d waiting)",
		 (unsigned long long)r->id, n_ids, r->max_tokens, c->n_queued);
	/* route it now: the queue bound counts requests no group can take,
	 * not a burst that arrived within one poll */
	coord_dispatch(c);
	return 0;
}
