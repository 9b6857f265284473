/*
 * scheduler.c — continuous and simple batching behind the scheduler
 * interface (see scheduler.h).
 * Requests live in one array: the running ones (engine_id >= 0) and the
 * waiting ones in arrival order. Counts are small (hundreds), so linear
 * scans keep it obvious.
 */
#include "node/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "common/sl.h"

typedef struct sched_req {
	uint64_t req_id;
	node_request r;      /* r.prompt points at prompt */
	int32_t *prompt;     /* owned copy */
	void *lists;         /* owned copy of r.lists' arrays (one block), r.lists points in */
	int engine_id;       /* -1 while waiting */
	int blocks;          /* KV blocks it needs to be admitted (policy's measure) */
	int n_reported;      /* generated tokens already reported */
	uint64_t arrival;
} sched_req;

struct node_sched {
	node_engine *e;
	node_sched_opts o;
	sched_req *reqs;          /* [cap] running and waiting */
	int n, cap, n_running;
	int blocks_reserved;      /* sum of blocks over running requests (simple's measure) */
	uint64_t arrivals;
	node_sched_event *events; /* [cap] */
	int32_t *tokens;          /* event tokens */
	size_t n_tok, cap_tok;
	float *lp;                /* [cap_lp] their log-probs, where asked */
	int32_t *top_ids;         /* [cap_top_ids] alternatives of all the events' tokens */
	float *top;               /* [cap_top] their log-probs */
	size_t n_lp, n_top, cap_lp, cap_top_ids, cap_top;
};

int node_sched_create(node_engine *e, const node_sched_opts *o, node_sched **out, char *err,
		      size_t errlen)
{
	if (o->max_running < 1 || o->max_waiting < 0 ||
	    (o->policy != NODE_SCHED_CONTINUOUS && o->policy != NODE_SCHED_SIMPLE))
		return sl_errf(err, errlen, SL_EINVAL,
			       "scheduler: max_running >= 1, max_waiting >= 0, a known policy");
	node_sched *s = calloc(1, sizeof *s);
	if (!s)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	s->e = e;
	s->o = *o;
	s->cap = o->max_running + o->max_waiting;
	s->reqs = calloc(s->cap, sizeof *s->reqs);
	s->events = calloc(s->cap, sizeof *s->events);
	if (!s->reqs || !s->events) {
		node_sched_destroy(s);
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	}
	*out = s;
	return SL_OK;
}

void node_sched_destroy(node_sched *s)
{
	if (!s)
		return;
	node_sched_cancel_all(s);
	free(s->reqs);
	free(s->events);
	free(s->tokens);
	free(s->lp);
	free(s->top_ids);
	free(s->top);
	free(s);
}

static sched_req *find(node_sched *s, uint64_t req_id)
{
	for (int i = 0; i < s->n; i++)
		if (s->reqs[i].req_id == req_id)
			return &s->reqs[i];
	return NULL;
}

/* q's own copy of t's arrays, which point into the message being handled:
 * bias ids, bias values, stop ids in one block. */
static int copy_lists(sched_req *q, const sl_token_lists *t)
{
	size_t nb = (size_t)t->n_bias, ns = (size_t)t->n_stop_ids;
	int32_t *m = malloc(4 * (2 * nb + ns) + 4);
	if (!m)
		return SL_ENOMEM;
	if (nb) {
		memcpy(m, t->bias_ids, 4 * nb);
		memcpy(m + nb, t->bias, 4 * nb);
	}
	if (ns)
		memcpy(m + 2 * nb, t->stop_ids, 4 * ns);
	q->lists = m;
	q->r.lists = (sl_token_lists){m, (const float *)(m + nb), (int)nb, m + 2 * nb, (int)ns};
	return SL_OK;
}

static int refuse(const node_request *r, int rc)
{
	grammar_matcher_destroy(r->matcher);
	return rc;
}

int node_sched_submit(node_sched *s, uint64_t req_id, const node_request *r, char *err,
		      size_t errlen)
{
	int rc = node_engine_check_request(s->e, r, err, errlen);
	if (rc)
		return refuse(r, rc);
	if (find(s, req_id))
		return refuse(r, sl_errf(err, errlen, SL_EINVAL, "request %llu is already here",
					 (unsigned long long)req_id));
	if (s->n == s->cap)
		return refuse(r, sl_errf(err, errlen, SL_ENOMEM, "node group full (%d requests)",
					 s->cap));
	sched_req *q = &s->reqs[s->n];
	*q = (sched_req){.req_id = req_id, .r = *r, .engine_id = -1, .arrival = s->arrivals++};
	if (!(q->prompt = malloc(sizeof(int32_t) * r->n_prompt)))
		return refuse(r, sl_errf(err, errlen, SL_ENOMEM, "out of memory"));
	memcpy(q->prompt, r->prompt, sizeof(int32_t) * r->n_prompt);
	q->r.prompt = q->prompt;
	if (copy_lists(q, &r->lists)) {
		free(q->prompt);
		return refuse(r, sl_errf(err, errlen, SL_ENOMEM, "out of memory"));
	}
	q->r.prompt_logits = NULL;
	q->blocks = node_engine_blocks_for(s->e, r->n_prompt + (s->o.policy == NODE_SCHED_SIMPLE
								  ? r->max_new_tokens : 0));
	s->n++;
	return SL_OK;
}

static void remove_at(node_sched *s, int i)
{
	sched_req *q = &s->reqs[i];
	if (q->engine_id >= 0) {
		node_engine_drop(s->e, q->engine_id);
		s->n_running--;
		s->blocks_reserved -= q->blocks;
	}
	free(q->prompt);
	free(q->lists);
	grammar_matcher_destroy(q->r.matcher); /* never admitted: still ours */
	memmove(q, q + 1, sizeof *q * (s->n - i - 1));
	s->n--;
}

int node_sched_cancel(node_sched *s, uint64_t req_id)
{
	sched_req *q = find(s, req_id);
	if (!q)
		return SL_ENOTFOUND;
	remove_at(s, (int)(q - s->reqs));
	return SL_OK;
}

void node_sched_cancel_all(node_sched *s)
{
	while (s->n > 0)
		remove_at(s, s->n - 1);
}

void node_sched_cancel_if(node_sched *s, int (*match)(uint64_t req_id, void *arg), void *arg)
{
	for (int i = s->n - 1; i >= 0; i--)
		if (match(s->reqs[i].req_id, arg))
			remove_at(s, i);
}

/* Grow *p (elements of size) to hold need; *cap tracks its size. */
static int grow(void **p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return SL_OK;
	size_t n = need * 2 + 64;
	void *np = realloc(*p, n * size);
	if (!np)
		return SL_ENOMEM;
	*p = np;
	*cap = n;
	return SL_OK;
}

/* Copy n tokens (and their log-probs: lp rows from gen index g0, when lp
 * has them) into the event buffers; pointers are offsets until
 * node_sched_step fixes them up, once the buffers stop moving. */
static int push_event(node_sched *s, int *n_ev, uint64_t id, const int32_t *t, int n,
		      const node_logprobs *lp, int g0, node_sched_finish f, const char *error)
{
	int with_lp = lp && lp->logprobs && n > 0;
	size_t nt = with_lp ? (size_t)n * lp->top_n : 0;
	if (grow((void **)&s->tokens, &s->cap_tok, s->n_tok + n, sizeof(int32_t)) ||
	    (with_lp && grow((void **)&s->lp, &s->cap_lp, s->n_lp + n, sizeof(float))) ||
	    (with_lp && grow((void **)&s->top_ids, &s->cap_top_ids, s->n_top + nt, sizeof(int32_t))) ||
	    (with_lp && grow((void **)&s->top, &s->cap_top, s->n_top + nt, sizeof(float))))
		return SL_ENOMEM;
	if (n > 0)
		memcpy(s->tokens + s->n_tok, t, sizeof(int32_t) * n);
	node_sched_event *ev = &s->events[(*n_ev)++];
	*ev = (node_sched_event){.req_id = id, .tokens = (const int32_t *)(uintptr_t)s->n_tok,
				 .n_tokens = n, .finish = f, .error = error};
	s->n_tok += n;
	if (with_lp) {
		memcpy(s->lp + s->n_lp, lp->logprobs + g0, sizeof(float) * n);
		if (nt) {
			memcpy(s->top_ids + s->n_top, lp->top_ids + (size_t)g0 * lp->top_n,
			       sizeof(int32_t) * nt);
			memcpy(s->top + s->n_top, lp->top_logprobs + (size_t)g0 * lp->top_n,
			       sizeof(float) * nt);
		}
		ev->logprobs = (const float *)(uintptr_t)(s->n_lp + 1); /* + 1: 0 means none */
		ev->top_ids = (const int32_t *)(uintptr_t)s->n_top;
		ev->top_logprobs = (const float *)(uintptr_t)s->n_top;
		ev->top_n = lp->top_n;
		s->n_lp += n;
		s->n_top += nt;
	}
	return SL_OK;
}

/* Whether the KV pool has room for q under the policy: simple counts full
 * lengths against the whole pool; continuous counts q's prompt against the
 * free blocks less those the running sequences still want (prompts not yet
 * prefilled, preempted sequences), so a new request never pushes out one
 * that is waiting to be recomputed. */
static int kv_room(const node_sched *s, const sched_req *q)
{
	if (s->o.policy == NODE_SCHED_SIMPLE)
		return s->blocks_reserved + q->blocks <= node_engine_total_blocks(s->e);
	return q->blocks <= node_engine_free_blocks(s->e) - node_engine_blocks_wanted(s->e);
}

/* FIFO admission under the running and KV limits. A request the engine
 * refuses (it should not: check_request ran) becomes an error event. */
static int admit(node_sched *s, int *n_ev, char *err, size_t errlen)
{
	for (int i = 0; i < s->n && s->n_running < s->o.max_running; i++) {
		sched_req *q = &s->reqs[i];
		if (q->engine_id >= 0)
			continue;
		if (!kv_room(s, q))
			break; /* FIFO: no overtaking by smaller requests */
		int rc = node_engine_add(s->e, &q->r, &q->engine_id, err, errlen);
		q->r.matcher = NULL; /* the engine's now, added or not */
		if (rc) {
			q->engine_id = -1;
			if (push_event(s, n_ev, q->req_id, NULL, 0, NULL, 0, NODE_SCHED_ERROR,
				       "engine refused the request"))
				return SL_ENOMEM;
			remove_at(s, i--);
			continue;
		}
		s->n_running++;
		s->blocks_reserved += q->blocks;
	}
	return SL_OK;
}

/* New tokens and finish states of the running requests; finished ones leave. */
static int collect(node_sched *s, int *n_ev)
{
	for (int i = 0; i < s->n; i++) {
		sched_req *q = &s->reqs[i];
		const int32_t *gen;
		int n_gen;
		node_seq_state st;
		node_logprobs lp;
		if (q->engine_id < 0 || node_engine_peek(s->e, q->engine_id, &gen, &n_gen, &st) ||
		    node_engine_peek_logprobs(s->e, q->engine_id, &lp))
			continue;
		node_sched_finish f = st == SEQ_DONE_EOS ? NODE_SCHED_EOS
				    : st == SEQ_DONE_LENGTH ? NODE_SCHED_LENGTH : NODE_SCHED_RUNNING;
		if (n_gen == q->n_reported && f == NODE_SCHED_RUNNING)
			continue;
		if (push_event(s, n_ev, q->req_id, gen + q->n_reported, n_gen - q->n_reported, &lp,
			       q->n_reported, f, NULL))
			return SL_ENOMEM;
		q->n_reported = n_gen;
		if (f != NODE_SCHED_RUNNING)
			remove_at(s, i--);
	}
	return SL_OK;
}

int node_sched_step(node_sched *s, const node_sched_event **events, int *n_events, char *err,
		    size_t errlen)
{
	int n_ev = 0, active = 0, rc;
	s->n_tok = s->n_lp = s->n_top = 0;
	*n_events = 0;
	*events = s->events;
	if ((rc = admit(s, &n_ev, err, errlen)))
		return sl_errf(err, errlen, rc, "out of memory");
	if (s->n_running > 0 && (rc = node_engine_step(s->e, &active, err, errlen)))
		return rc;
	if ((rc = collect(s, &n_ev)))
		return sl_errf(err, errlen, rc, "out of memory");
	for (int i = 0; i < n_ev; i++) {
		node_sched_event *ev = &s->events[i];
		ev->tokens = s->tokens ? s->tokens + (uintptr_t)ev->tokens : NULL;
		if (ev->logprobs) {
			ev->logprobs = s->lp + ((uintptr_t)ev->logprobs - 1);
			ev->top_ids = s->top_ids + (uintptr_t)ev->top_ids;
			ev->top_logprobs = s->top + (uintptr_t)ev->top_logprobs;
		}
	}
	*n_events = n_ev;
	return SL_OK;
}

void node_sched_fail_all(node_sched *s, const char *why, const node_sched_event **events,
			 int *n_events)
{
	int n = 0;
	for (int i = 0; i < s->n; i++)
		s->events[n++] = (node_sched_event){.req_id = s->reqs[i].req_id,
						    .finish = NODE_SCHED_ERROR, .error = why};
	node_sched_cancel_all(s);
	*events = s->events;
	*n_events = n;
}

int node_sched_busy(const node_sched *s) { return s->n > 0; }

void node_sched_load(const node_sched *s, int *running, int *waiting, int *kv_free)
{
	*running = s->n_running;
	*waiting = s->n - s->n_running;
	*kv_free = node_engine_free_blocks(s->e);
}

const char *node_sched_policy_name(node_sched_policy p)
{
	return p == NODE_SCHED_SIMPLE ? "simple" : "continuous";
}
