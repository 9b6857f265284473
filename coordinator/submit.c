/*
 * submit.c — the request core both front doors share: a coord_request
 * (decoded from a client's Submit by on_client.c, or from JSON by
 * openai_request.c) has every field checked, its prompt tokenized, and
 * becomes a request for the sink its front door gave, queued and routed
 * at once. Both transports are thus validated by the same code;
 * sl_sampling_check (common/sampling.h) is the one range check of the
 * sampling fields.
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
#include "grammar/grammar.h"

#define E_BAD SHARDLINE__CLIENT__ERROR_CODE__BAD_REQUEST
#define E_MODEL SHARDLINE__CLIENT__ERROR_CODE__UNKNOWN_MODEL
#define E_OVERLOADED SHARDLINE__CLIENT__ERROR_CODE__OVERLOADED
#define E_INTERNAL SHARDLINE__CLIENT__ERROR_CODE__INTERNAL
#define E_UNAVAILABLE SHARDLINE__CLIENT__ERROR_CODE__UNAVAILABLE

void coord_request_init(coord_request *q)
{
	*q = (coord_request){.stream = 1, .add_special = 1, .sampling = SL_SAMPLING_DEFAULTS};
}

/* Field checks of a request that need no tokenizer. */
static int check_fields(coord *c, const coord_request *s, int *model, char *err, size_t n)
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
	int text = s->prompt.n > 0, ids = s->n_prompt_ids > 0;
	if (!text && !ids)
		return snprintf(err, n, "empty prompt: give prompt text or prompt_ids"), E_BAD;
	if (text && ids)
		return snprintf(err, n, "give prompt or prompt_ids, not both"), E_BAD;
	if (s->prompt.n > COORD_MAX_PROMPT_BYTES)
		return snprintf(err, n, "prompt of %zu bytes exceeds the limit of %d", s->prompt.n,
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
	if (sl_sampling_check(&s->sampling, vocab, err, n) ||
	    sl_token_lists_check(&s->lists, vocab, SL_SAMPLING_MAX_STOP_TOKEN_IDS, err, n))
		return E_BAD;
	int max_tokens = s->has_max_tokens ? s->max_tokens : c->o.default_max_tokens;
	if (s->sampling.min_tokens > max_tokens)
		return snprintf(err, n, "min_tokens (%d) must not exceed max_tokens (%d)",
				s->sampling.min_tokens, max_tokens), E_BAD;
	if (s->n_stop > COORD_MAX_STOPS)
		return snprintf(err, n, "%zu stop strings exceed the limit of %d", s->n_stop,
				COORD_MAX_STOPS), E_BAD;
	for (size_t i = 0; i < s->n_stop; i++)
		if (s->stop[i].n == 0 || s->stop[i].n > COORD_MAX_STOP_BYTES)
			return snprintf(err, n, "stop[%zu] must be 1 to %d bytes, got %zu", i,
					COORD_MAX_STOP_BYTES, s->stop[i].n), E_BAD;
	if (s->timeout_ms > COORD_MAX_TIMEOUT_MS)
		return snprintf(err, n, "timeout_ms must be at most %d", COORD_MAX_TIMEOUT_MS), E_BAD;
	/* a bad constraint gets its answer here, before any group sees it
	 * (the leader compiles it again, against the vocabulary) */
	if (s->constraint_kind != SL_CONSTRAINT_NONE &&
	    grammar_check(s->constraint_kind, s->constraint.p, s->constraint.n, err, n))
		return E_BAD;
	return 0;
}

/* The prompt as ids: given, or encoded (client text never makes special
 * tokens: COORD_TOK_SPLIT_SPECIAL). */
static int encode_prompt(coord *c, const coord_request *s, int model, int32_t **ids, int *n_ids, char *err,
		      size_t n)
{
	size_t cnt = s->n_prompt_ids;
	if (cnt) {
		if (!(*ids = malloc(sizeof(int32_t) * cnt)))
			return snprintf(err, n, "out of memory"), E_INTERNAL;
		memcpy(*ids, s->prompt_ids, sizeof(int32_t) * cnt);
	} else {
		int flags = COORD_TOK_SPLIT_SPECIAL | (s->add_special ? COORD_TOK_ADD_SPECIAL : 0);
		char terr[SL_ERRLEN];
		if (text_tok_encode(c->models[model].tok, s->prompt.p, s->prompt.n,
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

/* r's copies of logit_bias and stop_token_ids. */
static int copy_lists(coord_req *r, const sl_token_lists *t)
{
	size_t nb = (size_t)t->n_bias, ns = (size_t)t->n_stop_ids;
	if (nb) {
		if (!(r->bias_ids = malloc(sizeof(int32_t) * nb)) || !(r->bias = malloc(sizeof(float) * nb)))
			return -1;
		memcpy(r->bias_ids, t->bias_ids, sizeof(int32_t) * nb);
		memcpy(r->bias, t->bias, sizeof(float) * nb);
		r->n_bias = (int)nb;
	}
	if (ns) {
		if (!(r->stop_ids = malloc(sizeof(int32_t) * ns)))
			return -1;
		memcpy(r->stop_ids, t->stop_ids, sizeof(int32_t) * ns);
		r->n_stop_ids = (int)ns;
	}
	return 0;
}

static int copy_stops(coord_req *r, const coord_request *s)
{
	if (!s->n_stop)
		return 0;
	r->stop = calloc(s->n_stop, sizeof *r->stop);
	r->stop_len = calloc(s->n_stop, sizeof *r->stop_len);
	if (!r->stop || !r->stop_len)
		return -1;
	for (size_t i = 0; i < s->n_stop; i++, r->n_stop++) {
		if (!(r->stop[i] = malloc(s->stop[i].n + 1)))
			return -1;
		memcpy(r->stop[i], s->stop[i].p, s->stop[i].n);
		r->stop[i][s->stop[i].n] = 0;
		r->stop_len[i] = s->stop[i].n;
		if (s->stop[i].n > r->max_stop_len)
			r->max_stop_len = s->stop[i].n;
	}
	return 0;
}

/* A request from a validated one; it owns ids from here on. */
static coord_req *make_request(coord *c, const coord_request *s, int model, int32_t *ids,
			       int n_ids, const coord_sink *to)
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
	r->sampling = s->sampling;
	r->max_tokens = s->has_max_tokens ? s->max_tokens : c->o.default_max_tokens;
	r->ignore_eos = s->ignore_eos;
	r->stream = s->stream;
	r->constraint_kind = s->constraint_kind;
	if (s->constraint_kind != SL_CONSTRAINT_NONE && s->constraint.n &&
	    (r->constraint = malloc(s->constraint.n))) {
		memcpy(r->constraint, s->constraint.p, s->constraint.n);
		r->constraint_len = s->constraint.n;
	} else if (s->constraint_kind != SL_CONSTRAINT_NONE && s->constraint.n) {
		coord_req_free(c, r);
		return NULL;
	}
	r->t_submit = sl_now();
	unsigned tmo = s->timeout_ms ? s->timeout_ms : (unsigned)c->o.request_timeout_ms;
	r->deadline = r->t_submit + tmo * 1e-3;
	char err[SL_ERRLEN];
	if (copy_stops(r, s) || copy_lists(r, &s->lists) ||
	    text_detok_create(c->models[model].tok, !s->keep_special, &r->detok, err, sizeof err)) {
		coord_req_free(c, r);
		return NULL;
	}
	coord_req_enqueue(c, r, 0);
	return r;
}

int coord_submit(coord *c, const coord_request *s, const coord_sink *to, char *err, size_t n)
{
	int model, n_ids = 0, code;
	int32_t *ids = NULL;
	if ((code = check_fields(c, s, &model, err, n)))
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
	coord_req *r = make_request(c, s, model, ids, n_ids, to);
	if (!r)
		return snprintf(err, n, "out of memory"), E_INTERNAL;
	SL_DEBUG("coord", "request %llu: %d prompt tokens, max_tokens %d, queued (%d waiting)",
		 (unsigned long long)r->id, n_ids, r->max_tokens, c->n_queued);
	/* route it now: the queue bound counts requests no group can take,
	 * not a burst that arrived within one poll */
	coord_dispatch(c);
	return 0;
}
