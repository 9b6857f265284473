/*
 * coord_fuzz.h — the coordinator's message handlers under a fuzzer, for
 * fuzz_coord_client.c and fuzz_coord_node.c. Per input, a coordinator is
 * created in-process (tests/unit/coord_inproc.h: inproc sockets, one
 * client DEALER, one node-group DEALER registered as a group of the
 * model), the input is played as a script of operations, and the
 * coordinator is destroyed, so every input starts from the same state and
 * LeakSanitizer sees what a request left behind.
 *
 * Script: a sequence of operations, each a byte then its operands;
 * lengths are cut to what the input has left.
 *   0 LEN BYTES       a client frame of LEN (one byte) bytes
 *   1 LEN BYTES       a node frame (Register, heartbeat Load, TokenBatch, ...)
 *   2 K N IDS FIN LP  tokens for the K-th Enqueue the node got: N (0..15)
 *                     ids of two bytes each, FIN the finish code, LP how
 *                     log-probs go with them (0: as asked, 1: none, 2: one
 *                     short, 3: out of range)
 *   3 LEN2 BYTES      a client frame of LEN2 (two bytes, little endian) bytes
 * After each operation the coordinator runs one loop turn (ci_pump) and
 * every reply the client got is checked against docs/protocol.md: chunk
 * and Done text is UTF-8, and the text of a request never holds one of
 * its stop strings where a character begins.
 *
 * The model's tokenizer is the cut-down Llama 2 one of the tok_load seeds
 * (300 ids, <0x00>..<0xFF> byte tokens): small enough to load per input.
 */
#ifndef TESTS_FUZZ_COORD_H
#define TESTS_FUZZ_COORD_H

#include "fuzz_util.h"
#include "unit/coord_inproc.h"

#define CF_MAX_ENQ 32
#define CF_MAX_TAGS 64

typedef struct cf_enq {
	uint64_t req_id;
	int logprobs, top_n;
} cf_enq;

/* What the client asked under a tag, and the text it got so far. */
typedef struct cf_tag {
	uint64_t tag;
	int live;
	char **stop;
	size_t *stop_len;
	int n_stop;
	char *text;
	size_t n, cap;
} cf_tag;

typedef struct cf_state {
	ci_env e;
	cf_enq enq[CF_MAX_ENQ];
	int n_enq;
	cf_tag tags[CF_MAX_TAGS];
	uint64_t step;
} cf_state;

static inline void cf_tag_clear(cf_tag *t)
{
	for (int i = 0; i < t->n_stop; i++)
		free(t->stop[i]);
	free(t->stop);
	free(t->stop_len);
	free(t->text);
	memset(t, 0, sizeof *t);
}

static inline cf_tag *cf_tag_find(cf_state *s, uint64_t tag)
{
	for (int i = 0; i < CF_MAX_TAGS; i++)
		if (s->tags[i].live && s->tags[i].tag == tag)
			return &s->tags[i];
	return NULL;
}

/* A frame the client sends: when it is a Submit under a tag not in use,
 * remember its stop strings (the coordinator refuses a tag in use). */
static inline void cf_note_submit(cf_state *s, const uint8_t *p, size_t n)
{
	Shardline__Client__Request *q = shardline__client__request__unpack(NULL, n, p);
	if (!q)
		return;
	if (q->msg_case == SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT && !cf_tag_find(s, q->submit->tag)) {
		const Shardline__Client__Submit *sub = q->submit;
		for (int i = 0; i < CF_MAX_TAGS; i++) {
			cf_tag *t = &s->tags[i];
			if (t->live)
				continue;
			t->live = 1;
			t->tag = sub->tag;
			t->n_stop = (int)sub->n_stop;
			t->stop = calloc(sub->n_stop + 1, sizeof *t->stop);
			t->stop_len = calloc(sub->n_stop + 1, sizeof *t->stop_len);
			for (size_t k = 0; k < sub->n_stop; k++) {
				t->stop[k] = malloc(sub->stop[k].len + 1);
				if (sub->stop[k].len)
					memcpy(t->stop[k], sub->stop[k].data, sub->stop[k].len);
				t->stop_len[k] = sub->stop[k].len;
			}
			break;
		}
	}
	shardline__client__request__free_unpacked(q, NULL);
}

static inline void cf_text_add(cf_tag *t, const uint8_t *p, size_t n)
{
	if (t->n + n + 1 > t->cap) {
		t->cap = (t->n + n + 1) * 2;
		t->text = realloc(t->text, t->cap);
	}
	if (n)
		memcpy(t->text + t->n, p, n);
	t->n += n;
}

/* The promises of a finished request's text (docs/protocol.md). */
static inline void cf_check_text(const cf_tag *t)
{
	size_t bad = fuzz_utf8_bad_at(t->text, t->n);
	FUZZ_CHECK(bad == t->n, "tag %llu: %zu bytes of text, not UTF-8 at byte %zu",
		   (unsigned long long)t->tag, t->n, bad);
	for (int k = 0; k < t->n_stop; k++) {
		if (!t->stop_len[k])
			continue;
		for (size_t at = 0; at + t->stop_len[k] <= t->n; at++)
			FUZZ_CHECK(((unsigned char)t->text[at] & 0xC0) == 0x80 ||
					   memcmp(t->text + at, t->stop[k], t->stop_len[k]),
				   "tag %llu: stop string %d (%zu bytes) is in the text sent, at "
				   "byte %zu of %zu", (unsigned long long)t->tag, k, t->stop_len[k],
				   at, t->n);
	}
}

static inline void cf_read_client(cf_state *s)
{
	Shardline__Client__Reply *rep;
	while ((rep = ci_client_next(&s->e))) {
		if (rep->msg_case == SHARDLINE__CLIENT__REPLY__MSG_CHUNK) {
			const Shardline__Client__Chunk *ch = rep->chunk;
			size_t bad = fuzz_utf8_bad_at((const char *)ch->text.data, ch->text.len);
			FUZZ_CHECK(bad == ch->text.len, "tag %llu: a chunk of %zu bytes, not UTF-8 "
				   "at byte %zu", (unsigned long long)ch->tag, ch->text.len, bad);
			cf_tag *t = cf_tag_find(s, ch->tag);
			if (t)
				cf_text_add(t, ch->text.data, ch->text.len);
		} else if (rep->msg_case == SHARDLINE__CLIENT__REPLY__MSG_DONE) {
			const Shardline__Client__Done *d = rep->done;
			cf_tag *t = cf_tag_find(s, d->tag);
			if (t) {
				cf_text_add(t, d->text.data, d->text.len);
				cf_check_text(t);
				cf_tag_clear(t);
			}
		} else if (rep->msg_case == SHARDLINE__CLIENT__REPLY__MSG_ERROR) {
			cf_tag *t = cf_tag_find(s, rep->error->tag);
			if (t && t->n == 0) /* refused: it never ran */
				cf_tag_clear(t);
		}
		shardline__client__reply__free_unpacked(rep, NULL);
	}
}

/* Enqueues the node got become targets of operation 2. */
static inline void cf_read_node(cf_state *s)
{
	Shardline__Node__CoordMsg *m;
	while ((m = ci_node_next(&s->e))) {
		if (m->msg_case == SHARDLINE__NODE__COORD_MSG__MSG_ENQUEUE && s->n_enq < CF_MAX_ENQ) {
			const Shardline__Node__Enqueue *q = m->enqueue;
			s->enq[s->n_enq++] = (cf_enq){q->req_id, q->logprobs || q->top_logprobs > 0,
						      q->top_logprobs};
		}
		shardline__node__coord_msg__free_unpacked(m, NULL);
	}
}

static inline void cf_turn(cf_state *s)
{
	ci_pump(&s->e);
	cf_read_node(s);
	cf_read_client(s);
}

/* A TokenBatch for the k-th Enqueue from the node: ids, a finish code, and
 * log-probs as the request asked (lpmode 0), none (1), one row short (2)
 * or out of range (3). */
static inline void cf_answer(cf_state *s, int k, const int32_t *ids, int nids, int fin, int lpmode)
{
	if (!s->n_enq)
		return;
	const cf_enq *q = &s->enq[k % s->n_enq];
	float lp[16], top[16 * 20];
	int32_t top_ids[16 * 20];
	int tn = q->top_n > 20 ? 20 : q->top_n < 0 ? 0 : q->top_n;
	if (nids > 16)
		nids = 16;
	for (int j = 0; j < 16; j++)
		lp[j] = lpmode == 3 ? 1.0f : -0.5f;
	for (int j = 0; j < 16 * 20; j++) {
		top_ids[j] = lpmode == 3 ? s->e.vocab : j % 20;
		top[j] = -1.0f - (float)(j % 20);
	}
	Shardline__Node__SeqTokens st = SHARDLINE__NODE__SEQ_TOKENS__INIT;
	Shardline__Node__SeqTokens *seqs[1] = {&st};
	st.has_req_id = st.has_finish = 1;
	st.req_id = q->req_id;
	st.tokens = (int32_t *)ids;
	st.n_tokens = (size_t)nids;
	st.finish = fin;
	st.error = fin == 4 ? "engine failed" : NULL;
	if (q->logprobs && lpmode != 1) {
		size_t rows = (size_t)nids - (lpmode == 2 && nids > 0);
		st.n_logprobs = rows;
		st.logprobs = lp;
		st.has_top_n = 1;
		st.top_n = tn;
		st.n_top_ids = st.n_top_logprobs = rows * (size_t)tn;
		st.top_ids = top_ids;
		st.top_logprobs = top;
	}
	Shardline__Node__Load load = SHARDLINE__NODE__LOAD__INIT;
	Shardline__Node__TokenBatch tb = SHARDLINE__NODE__TOKEN_BATCH__INIT;
	tb.has_step = 1;
	tb.step = ++s->step;
	tb.n_seqs = 1;
	tb.seqs = seqs;
	tb.load = &load;
	Shardline__Node__NodeMsg m = SHARDLINE__NODE__NODE_MSG__INIT;
	m.msg_case = SHARDLINE__NODE__NODE_MSG__MSG_TOKENS;
	m.tokens = &tb;
	ci_send(s->e.node, &m.base);
}

/* Operation 2: its operands read from p (n bytes left); *used: how many. */
static inline void cf_tokens(cf_state *s, const uint8_t *p, size_t n, size_t *used)
{
	size_t i = 0;
	int k = i < n ? p[i++] : 0, cnt = i < n ? p[i++] % 16 : 0;
	int32_t ids[16];
	int nids = 0;
	for (; nids < cnt && i + 1 < n; i += 2)
		ids[nids++] = (int32_t)((p[i] | p[i + 1] << 8) % (s->e.vocab + 4)) - 2;
	int fin = i < n ? p[i++] % 6 : 0, lpmode = i < n ? p[i++] % 4 : 0;
	*used = i;
	cf_answer(s, k, ids, nids, fin, lpmode);
}

/* Plays the script in p; returns 0, or -1 when the coordinator could not
 * be set up (a harness bug: the caller aborts). */
static inline int cf_play(cf_state *s, const uint8_t *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		int op = p[i++] % 4;
		size_t len = 0, used = 0;
		if (op == 0 || op == 1) {
			len = i < n ? p[i++] : 0;
		} else if (op == 3) {
			len = i + 1 < n ? (size_t)(p[i] | p[i + 1] << 8) : 0;
			i += 2;
		}
		if (i > n)
			break;
		if (len > n - i)
			len = n - i;
		if (op == 0 || op == 3) {
			cf_note_submit(s, p + i, len);
			ci_send_raw(s->e.client, p + i, len);
		} else if (op == 1) {
			ci_send_raw(s->e.node, p + i, len);
		} else {
			cf_tokens(s, p + i, n - i, &used);
			len = used;
		}
		i += len;
		cf_turn(s);
	}
	return 0;
}

static inline const char *cf_tokenizer(void)
{
	static char path[1024];
	snprintf(path, sizeof path, "%s/tests/fuzz/corpus/tok_load/llama2-small.json",
		 fuzz_repo_dir());
	return path;
}

/* The coordinator is made once per process (a new one per input costs
 * its ZeroMQ context's thread, the tokenizer and the template: most of
 * the time) and reset after each input (ci_reset): every input starts
 * from the same state all the same, so a finding replays on its own. */
static ci_env g_cf_env;

static inline void cf_begin(cf_state *s, const char *chat_template)
{
	char err[SL_ERRLEN];
	memset(s, 0, sizeof *s);
	if (!g_cf_env.c) {
		sl_log_set_level((sl_log_level)(SL_LOG_ERROR + 1));
		int rc = ci_create(&g_cf_env, cf_tokenizer(), chat_template, err, sizeof err);
		FUZZ_CHECK(rc == 0, "cannot set the coordinator up: %s", err);
	}
	s->e = g_cf_env;
	FUZZ_CHECK(ci_register(&s->e) == 0, "the node group did not register");
}

static inline void cf_end(cf_state *s)
{
	cf_read_client(s);
	for (int i = 0; i < CF_MAX_TAGS; i++) /* what was sent so far keeps the promises too */
		if (s->tags[i].live && s->tags[i].n)
			cf_check_text(&s->tags[i]);
	ci_reset(&s->e);
	for (int i = 0; i < CF_MAX_TAGS; i++)
		cf_tag_clear(&s->tags[i]);
}

#endif
