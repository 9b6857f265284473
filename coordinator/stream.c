/*
 * stream.c — from a group's token ids to a client's text: incremental
 * detokenization (whole UTF-8 characters only, text/tokenizer/tokenizer.h),
 * EOS, stop strings, max_tokens, and the final Done with usage and
 * timings.
 *
 * Stop strings: text is held back until no stop string can still begin
 * in it — the last (longest stop - 1) bytes stay, cut down to a character
 * boundary — so a match spanning chunks is found before any of it was
 * sent, and the text sent never contains a stop string. A stop string
 * matches where a character begins, never inside one.
 *
 * Log-probs follow the ids, not the text: every id sent (in a Chunk, or
 * in Done when not streaming) comes with its entry, including ids whose
 * text is still held back and the id that completed a stop string (its
 * text is cut, its id and log-prob are not). Ids past the end (after EOS,
 * a stop string or max_tokens in the same batch) are dropped with theirs.
 *
 * Callers: on_node.c (token batches), route.c, on_client.c and coord.c
 * (ends). Events (coord_event) leave through the request's sink, set by
 * the front door that made it: this file knows neither ZeroMQ clients nor
 * HTTP, nor their wire formats.
 */
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord_int.h"
#include "coordinator/metrics.h"
#include "common/sl.h"

/* An event of r to its front door, through the sink that made r (nothing
 * once its client is gone or it was detached). */
static void deliver(coord *c, coord_req *r, const coord_event *ev)
{
	if (!r->client_gone && r->sink.ops)
		r->sink.ops->reply(c, r, ev);
}

static int is_eos(const coord *c, const coord_req *r, int32_t id)
{
	const coord_model *m = &c->models[r->model];
	for (int i = 0; i < m->n_eos && !r->ignore_eos; i++)
		if (id == m->eos[i])
			return 1;
	return 0;
}

/* stop_token_ids: they end r like EOS, with finish STOP. */
static int is_stop_id(const coord_req *r, int32_t id)
{
	for (int i = 0; i < r->n_stop_ids; i++)
		if (id == r->stop_ids[i])
			return 1;
	return 0;
}

/* Largest character boundary <= cut in p[0..n). */
static size_t utf8_floor(const char *p, size_t n, size_t cut)
{
	while (cut > 0 && cut < n && ((unsigned char)p[cut] & 0xC0) == 0x80)
		cut--;
	return cut;
}

/* Offset of the earliest stop string in the held text, or -1. A stop
 * string matches only where a character begins: one that starts with a
 * continuation byte would otherwise match inside a character and cut it
 * in half (the held text is whole characters, and so must be what is
 * sent). Nothing held yet (held.p may be NULL) is no match: memmem must
 * not be given a NULL buffer, even an empty one. */
static long find_stop(const coord_req *r)
{
	long best = -1;
	if (!r->held.n)
		return -1;
	const char *end = r->held.p + r->held.n;
	for (int i = 0; i < r->n_stop; i++) {
		const char *p = r->held.p, *hit = NULL;
		while (r->stop_len[i] && p < end &&
		       (hit = memmem(p, (size_t)(end - p), r->stop[i], r->stop_len[i])) &&
		       ((unsigned char)*hit & 0xC0) == 0x80)
			p = hit + 1, hit = NULL;
		if (hit && (best < 0 || hit - r->held.p < best))
			best = hit - r->held.p;
	}
	return best;
}

/* Send (stream) or keep (not stream) the releasable part of the held text
 * with the ids that came since the last chunk; final releases all. */
static void release(coord *c, coord_req *r, int final)
{
	size_t keep = final || !r->n_stop ? 0 : r->max_stop_len - 1;
	size_t cut = r->held.n > keep ? utf8_floor(r->held.p, r->held.n, r->held.n - keep) : 0;
	if (r->stream) {
		if (cut == 0 && r->ids.n == 0)
			return;
		coord_event ev = {.kind = COORD_EV_CHUNK, .tag = r->tag, .has_text = 1,
				  .text = {r->held.p, cut}, .ids = r->ids.p, .n_ids = r->ids.n,
				  .lps = r->sampling.logprobs ? &r->lps : NULL};
		deliver(c, r, &ev);
		r->ids.n = 0;
		r->lps.n = 0;
		r->sent_chunk = 1;
	} else if (sl_buf_put(&r->text, r->held.p, cut)) {
		SL_WARN("coord", "request %llu: out of memory for its text", (unsigned long long)r->id);
	}
	if (cut) {
		memmove(r->held.p, r->held.p + cut, r->held.n - cut);
		r->held.n -= cut;
	}
}

void coord_stream_tokens(coord *c, coord_req *r, const int32_t *ids, size_t n,
			 const coord_lp_view *lp, Shardline__Node__Finish node_finish,
			 const char *node_error)
{
	Shardline__Client__FinishReason reason = SHARDLINE__CLIENT__FINISH_REASON__FINISH_NONE;
	const char *error = NULL;
	int before = r->n_generated;
	for (size_t i = 0; i < n && !reason && r->n_generated < r->max_tokens; i++) {
		int32_t id = ids[i];
		r->n_generated++;
		if (r->t_first == 0)
			r->t_first = sl_now();
		if (coord_ids_add(&r->ids, &id, 1) || coord_ids_add(&r->gen, &id, 1) ||
		    (lp && coord_logprobs_add(&r->lps, lp, i))) {
			coord_finish(c, r, SHARDLINE__CLIENT__FINISH_REASON__ERROR, "out of memory");
			return;
		}
		if (is_stop_id(r, id)) { /* its text is not sent, as EOS's */
			reason = SHARDLINE__CLIENT__FINISH_REASON__STOP;
			break;
		}
		if (is_eos(c, r, id)) {
			reason = SHARDLINE__CLIENT__FINISH_REASON__EOS;
			break;
		}
		const char *t;
		size_t tl;
		if (text_detok_step(r->detok, id, &t, &tl) == 0 && tl &&
		    sl_buf_put(&r->held, t, tl)) {
			coord_finish(c, r, SHARDLINE__CLIENT__FINISH_REASON__ERROR, "out of memory");
			return;
		}
		long at = r->n_stop ? find_stop(r) : -1;
		if (at >= 0) {
			r->held.n = (size_t)at;
			reason = SHARDLINE__CLIENT__FINISH_REASON__STOP;
		} else if (r->n_generated >= r->max_tokens) {
			reason = SHARDLINE__CLIENT__FINISH_REASON__LENGTH;
		}
	}
	if (r->n_generated > before) {
		double now = sl_now();
		coord_metrics_tokens(c->metrics, r, r->n_generated - before, now);
		r->t_last_token = now;
	}
	if (node_finish != SHARDLINE__NODE__FINISH__RUNNING)
		r->node_done = 1;
	if (!reason) {
		switch (node_finish) {
		case SHARDLINE__NODE__FINISH__LENGTH: reason = SHARDLINE__CLIENT__FINISH_REASON__LENGTH; break;
		case SHARDLINE__NODE__FINISH__EOS: reason = SHARDLINE__CLIENT__FINISH_REASON__EOS; break;
		case SHARDLINE__NODE__FINISH__RUNNING: break;
		case SHARDLINE__NODE__FINISH__REFUSED: /* the node's words: they name the cause */
			reason = SHARDLINE__CLIENT__FINISH_REASON__REFUSED;
			error = node_error && node_error[0] ? node_error : "the request was refused";
			break;
		default:
			reason = SHARDLINE__CLIENT__FINISH_REASON__ERROR;
			error = node_error && node_error[0] ? node_error : "the node group failed the request";
		}
	}
	if (reason)
		coord_finish(c, r, reason, error);
	else
		release(c, r, 0);
}

static double ms_since(double t0, double t1) { return t0 > 0 && t1 >= t0 ? (t1 - t0) * 1e3 : 0; }

static int metric_finish(const coord_req *r, Shardline__Client__FinishReason reason)
{
	switch (reason) {
	case SHARDLINE__CLIENT__FINISH_REASON__LENGTH: return COORD_FIN_LENGTH;
	case SHARDLINE__CLIENT__FINISH_REASON__STOP: return COORD_FIN_STOP;
	case SHARDLINE__CLIENT__FINISH_REASON__EOS: return COORD_FIN_EOS;
	case SHARDLINE__CLIENT__FINISH_REASON__CANCELLED: return COORD_FIN_CANCELLED;
	default: return r->timed_out ? COORD_FIN_TIMEOUT : COORD_FIN_ERROR;
	}
}

void coord_finish(coord *c, coord_req *r, Shardline__Client__FinishReason reason,
		  const char *error)
{
	int normal = reason == SHARDLINE__CLIENT__FINISH_REASON__LENGTH ||
		     reason == SHARDLINE__CLIENT__FINISH_REASON__EOS;
	if (normal) { /* bytes of an unfinished character become U+FFFD */
		const char *t;
		size_t tl;
		if (text_detok_finish(r->detok, &t, &tl) == 0 && tl)
			sl_buf_put(&r->held, t, tl);
		long at = r->n_stop ? find_stop(r) : -1;
		if (at >= 0) {
			r->held.n = (size_t)at;
			reason = SHARDLINE__CLIENT__FINISH_REASON__STOP;
		}
	}
	if (normal || reason == SHARDLINE__CLIENT__FINISH_REASON__STOP)
		release(c, r, 1);
	double now = sl_now();
	coord_event d = {.kind = COORD_EV_DONE, .tag = r->tag, .finish = reason, .error = error,
			 .prompt_tokens = r->n_prompt, .completion_tokens = r->n_generated};
	d.queue_ms = ms_since(r->t_submit, r->t_assigned > 0 ? r->t_assigned : now);
	d.ttft_ms = ms_since(r->t_submit, r->t_first);
	d.total_ms = ms_since(r->t_submit, now);
	if (!r->stream) {
		d.has_text = 1;
		d.text = (coord_str){r->text.p, r->text.n};
		d.ids = r->ids.p;
		d.n_ids = r->ids.n;
		d.lps = r->sampling.logprobs ? &r->lps : NULL;
	}
	deliver(c, r, &d);
	coord_metrics_finish(c->metrics, r, metric_finish(r, reason), now);
	coord_req_free(c, r);
}
