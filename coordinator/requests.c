/*
 * requests.c — the coordinator's request table: a hash by id (token
 * batches name requests by id), a list of every active request (timeouts,
 * cancel by client tag, group loss), and the FIFO queue of requests that
 * wait for a group. A request is in the table from an accepted Submit to
 * its Done.
 *
 * Callers: submit.c (new requests), route.c (the queue), stream.c (a
 * request's end), on_node.c (lookups by id, re-queueing).
 * It calls down only: send.c (a group still running a freed request is
 * told to cancel it) and, through the request's sink, whichever front
 * door made it (detach), never that front door by name.
 */
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord_int.h"
#include "common/sl.h"

static size_t bucket(uint64_t id)
{
	id ^= id >> 33;
	id *= 0xff51afd7ed558ccdull;
	id ^= id >> 33;
	return id & (COORD_REQ_BUCKETS - 1);
}

coord_req *coord_req_new(coord *c)
{
	coord_req *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->id = c->next_req_id++;
	coord_req **b = &c->buckets[bucket(r->id)];
	r->hnext = *b;
	*b = r;
	r->anext = c->all;
	if (c->all)
		c->all->aprev = r;
	c->all = r;
	c->n_active++;
	return r;
}

coord_req *coord_req_find(coord *c, uint64_t id)
{
	for (coord_req *r = c->buckets[bucket(id)]; r; r = r->hnext)
		if (r->id == id)
			return r;
	return NULL;
}

void coord_req_enqueue(coord *c, coord_req *r, int front)
{
	r->state = REQ_QUEUED;
	r->group = NULL;
	r->t_queued = sl_now();
	r->qprev = r->qnext = NULL;
	if (front) {
		r->qnext = c->qhead;
		if (c->qhead)
			c->qhead->qprev = r;
		else
			c->qtail = r;
		c->qhead = r;
	} else {
		r->qprev = c->qtail;
		if (c->qtail)
			c->qtail->qnext = r;
		else
			c->qhead = r;
		c->qtail = r;
	}
	c->n_queued++;
}

void coord_req_dequeue(coord *c, coord_req *r)
{
	if (r->qprev)
		r->qprev->qnext = r->qnext;
	else
		c->qhead = r->qnext;
	if (r->qnext)
		r->qnext->qprev = r->qprev;
	else
		c->qtail = r->qprev;
	r->qprev = r->qnext = NULL;
	c->n_queued--;
}

void coord_req_reset_output(coord_req *r)
{
	text_detok_reset(r->detok);
	r->n_generated = r->sent_chunk = r->node_done = 0;
	r->held.n = r->text.n = r->ids.n = r->lps.n = r->gen.n = 0;
	r->t_first = r->t_last_token = 0;
}

static void unlink_hash(coord *c, coord_req *r)
{
	coord_req **p = &c->buckets[bucket(r->id)];
	while (*p && *p != r)
		p = &(*p)->hnext;
	if (*p)
		*p = r->hnext;
}

void coord_req_free(coord *c, coord_req *r)
{
	if (r->sink.ops && r->sink.ops->detach) /* its front door forgets it */
		r->sink.ops->detach(r);
	if (r->state == REQ_QUEUED) {
		coord_req_dequeue(c, r);
	} else if (r->group) {
		if (!r->node_done)
			coord_node_cancel(c, r);
		r->group->assigned--;
	}
	unlink_hash(c, r);
	if (r->aprev)
		r->aprev->anext = r->anext;
	else
		c->all = r->anext;
	if (r->anext)
		r->anext->aprev = r->aprev;
	c->n_active--;
	for (int i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	free(r->stop);
	free(r->stop_len);
	free(r->bias_ids);
	free(r->bias);
	free(r->stop_ids);
	free(r->constraint);
	free(r->prompt);
	text_detok_destroy(r->detok);
	free(r->held.p);
	free(r->text.p);
	free(r->ids.p);
	free(r->gen.p);
	coord_logprobs_free(&r->lps);
	free(r);
}
