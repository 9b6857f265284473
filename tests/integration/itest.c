/*
 * itest.c — client side of the serving integration tests (serve.sh starts
 * the coordinator and the node groups). Each subcommand talks to a live
 * coordinator over loopback, checks what comes back, prints "FAIL: ..."
 * per failed check and ends with "N passed, N failed":
 *
 *   itest wait-groups EP N MS        until status shows N groups (exit 1 after MS)
 *   itest concurrent EP PROMPTS EXPECTED MAX_TOKENS
 *         one client per line of PROMPTS, all at once, greedy; each output's
 *         ids must equal the same line of EXPECTED (the local single-sequence
 *         run of shardline-node); every chunk whole UTF-8
 *   itest features EP                timeout, a vanished client, cancel
 *                                    mid-stream (slot and KV freed each time),
 *                                    stop strings, stream=false, EOS
 *   itest hostile EP                 malformed frames and bad fields get clear
 *                                    errors while a good client is served
 *   itest logprobs EP IDS EXPECTED   penalties, min_p and log-probs through the
 *                                    coordinator equal the local run in EXPECTED
 *                                    (shardline-node --logprobs output); per-chunk
 *                                    alignment, stream=false, stop strings
 *   itest kill EP VICTIM_PID HB_MS   SIGKILL a node rank mid-request: every
 *                                    request finishes on the other group
 *   itest streams EP OUT N MAX       the migration set (greedy and sampled
 *                                    with penalties, some with log-probs)
 *                                    undisturbed: ids and text to OUT
 *   itest migrate EP VICTIM REF N MAX GROUPS
 *                                    the same set; SIGKILL VICTIM mid-stream
 *                                    once GROUPS groups are up: ids and text
 *                                    equal REF (migration, docs/protocol.md)
 *   itest load EP N MAX READY        N streams; READY created once they
 *                                    stream (the shell signals a group); all
 *                                    must finish with MAX ids
 *   itest shutdown EP COORD_PID N    SIGTERM the coordinator under N streams:
 *                                    each gets a Done naming the shutdown
 *   itest unserved EP N MAX ADMISSION_MS VICTIM
 *                                    SIGKILL the only group mid-stream: errors
 *                                    naming no live group; a new request too
 *   itest overload EP N MAX_TOKENS   N at once past a small --max-queue
 *   itest prefix EP PROMPTS EXPECTED LONG BLOCK_TOKENS
 *         two groups with prefix caching and --max-running 2: the turns of
 *         one conversation (PROMPTS, one comma-separated line per turn, each
 *         the last one's prompt, answer and a new question; EXPECTED the
 *         local run's answers) stick to the group that served turn 1 and
 *         reuse exactly the blocks it cached (the router expects as much);
 *         with that group busy (LONG, a request sharing the conversation,
 *         running in one of its two slots) turn 5 goes to the other, and
 *         turn 6 follows it there (it holds the longer prefix then)
 * Every wait is bounded.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <zmq.h>

#include "client/client.h"
#include "proto/client.pb-c.h"
#include "common/sl.h"

static int g_pass, g_fail;
static char g_err[SL_ERRLEN];

#define CHECK(cond, ...)                                            \
	do {                                                        \
		if (cond) {                                         \
			g_pass++;                                   \
		} else {                                            \
			g_fail++;                                   \
			printf("FAIL: %s:%d: ", __func__, __LINE__); \
			printf(__VA_ARGS__);                        \
			printf("\n");                               \
			fflush(stdout);                             \
		}                                                   \
	} while (0)

static int finish(void)
{
	printf("%d passed, %d failed\n", g_pass, g_fail);
	return g_fail ? 1 : 0;
}

static int utf8_valid(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		if (!len || i + len > n)
			return 0;
		for (int k = 1; k < len; k++)
			if (((unsigned char)s[i + k] & 0xC0) != 0x80)
				return 0;
		i += len;
	}
	return 1;
}

/* One tracked generation. */
typedef struct gen {
	sl_client *c;
	uint64_t tag;
	int n_chunks, done, finish, bad_utf8, error_code;
	int32_t ids[4096];
	int n_ids;
	/* log-probs, when asked: one per id; lp_misaligned counts replies whose
	 * log-probs did not match their ids */
	float lp[4096], top[4096 * 20];
	int32_t top_ids[4096 * 20];
	int n_lp, top_n, lp_misaligned, want_lp;
	char text[1 << 16];
	size_t text_len;
	char message[256];
	double t_done, t_first_after;  /* sl_now() of the Done; of the first message after a mark */
	double mark;
	int completion_tokens;
} gen;

static void gen_event(gen *g, const sl_event *ev)
{
	if (ev->tag != g->tag)
		return;
	if (g->mark > 0 && g->t_first_after == 0)
		g->t_first_after = sl_now();
	if (ev->kind == SL_EV_CHUNK || ev->kind == SL_EV_DONE) {
		if (ev->kind == SL_EV_CHUNK) {
			g->n_chunks++;
			g->bad_utf8 |= !utf8_valid(ev->text, ev->text_len);
		}
		if ((g->want_lp && ev->n_token_ids && !ev->logprobs) || (!g->want_lp && ev->logprobs) ||
		    (ev->logprobs && (ev->n_logprobs != ev->n_token_ids ||
				      (g->n_lp > 0 && ev->top_n != g->top_n))))
			g->lp_misaligned++;
		for (size_t i = 0; ev->logprobs && i < ev->n_logprobs && g->n_lp < 4096; i++) {
			g->top_n = ev->top_n;
			g->lp[g->n_lp] = ev->logprobs[i];
			for (int k = 0; k < ev->top_n && k < 20; k++) {
				g->top_ids[g->n_lp * 20 + k] = ev->top_ids[i * ev->top_n + k];
				g->top[g->n_lp * 20 + k] = ev->top_logprobs[i * ev->top_n + k];
			}
			g->n_lp++;
		}
		for (size_t i = 0; i < ev->n_token_ids && g->n_ids < 4096; i++)
			g->ids[g->n_ids++] = ev->token_ids[i];
		size_t room = sizeof g->text - 1 - g->text_len;
		size_t n = ev->text_len < room ? ev->text_len : room;
		memcpy(g->text + g->text_len, ev->text, n);
		g->text_len += n;
		g->text[g->text_len] = 0;
	}
	if (ev->kind == SL_EV_DONE || ev->kind == SL_EV_ERROR) {
		g->done = 1;
		g->t_done = sl_now();
		g->finish = ev->kind == SL_EV_DONE ? ev->finish : -1;
		g->error_code = ev->error_code;
		g->completion_tokens = ev->completion_tokens;
		snprintf(g->message, sizeof g->message, "%s", ev->message);
	}
}

/* Poll every unfinished generation until all are done or ms pass. */
static int pump(gen *gs, int n, int ms, int (*until)(gen *, int))
{
	double deadline = sl_now() + ms * 1e-3;
	zmq_pollitem_t items[256];
	int map[256];
	while (sl_now() < deadline) {
		if (until && until(gs, n))
			return 1;
		int k = 0;
		for (int i = 0; i < n && k < 256; i++)
			if (!gs[i].done)
				items[k] = (zmq_pollitem_t){sl_client_socket(gs[i].c), 0, ZMQ_POLLIN, 0},
				map[k++] = i;
		if (k == 0)
			return 1;
		if (zmq_poll(items, k, 50) < 0)
			return 0;
		for (int j = 0; j < k; j++) {
			if (!(items[j].revents & ZMQ_POLLIN))
				continue;
			sl_event ev;
			while (sl_client_next(gs[map[j]].c, 0, &ev, g_err, sizeof g_err) == 1) {
				gen_event(&gs[map[j]], &ev);
				sl_event_release(&ev);
			}
		}
	}
	return until ? until(gs, n) : 0;
}

static int all_done(gen *gs, int n)
{
	for (int i = 0; i < n; i++)
		if (!gs[i].done)
			return 0;
	return 1;
}

/* Status through a fresh client; 1 when it answered. */
static int get_status(const char *ep, sl_event *st)
{
	sl_client *c;
	uint64_t tag;
	int got = 0;
	if (sl_client_create(NULL, ep, &c, g_err, sizeof g_err))
		return 0;
	if (!sl_client_status(c, &tag, g_err, sizeof g_err)) {
		double deadline = sl_now() + 3;
		while (!got && sl_now() < deadline) {
			if (sl_client_next(c, 100, st, g_err, sizeof g_err) != 1)
				continue;
			if (st->kind == SL_EV_STATUS)
				got = 1;
			else
				sl_event_release(st);
		}
	}
	sl_client_destroy(c);
	return got;
}

static int cmd_wait_groups(const char *ep, int n, int ms)
{
	double deadline = sl_now() + ms * 1e-3;
	while (sl_now() < deadline) {
		sl_event st;
		if (get_status(ep, &st)) {
			int ok = st.n_groups >= n;
			sl_event_release(&st);
			if (ok)
				return 0;
		}
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "itest: fewer than %d groups after %d ms\n", n, ms);
	return 1;
}

static int read_lines(const char *path, char ***out)
{
	char *buf;
	size_t len;
	if (sl_read_file(path, &buf, &len, g_err, sizeof g_err))
		return -1;
	int n = 0;
	char **lines = malloc(sizeof(char *) * 1024);
	for (char *p = buf, *nl; *p && n < 1024; p = nl + 1) {
		nl = strchr(p, '\n');
		if (!nl)
			nl = p + strlen(p) - 1;
		else
			*nl = 0;
		lines[n++] = p;
	}
	*out = lines;
	return n;
}

static int parse_ids(const char *s, int32_t *ids, int max)
{
	int n = 0;
	char *end;
	while (n < max) {
		long v = strtol(s, &end, 10);
		if (end == s)
			break;
		ids[n++] = (int32_t)v;
		s = end;
	}
	return n;
}

/* "1,2,3" -> ids. */
static int parse_ids_csv(const char *s, int32_t *ids, int max)
{
	int n = 0;
	char *end;
	while (n < max && *s) {
		long v = strtol(s, &end, 10);
		if (end == s)
			break;
		ids[n++] = (int32_t)v;
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}

static int cmd_concurrent(const char *ep, const char *prompts_path, const char *expected_path,
			  int max_tokens)
{
	char **prompts, **expected;
	int n = read_lines(prompts_path, &prompts), ne = read_lines(expected_path, &expected);
	if (n <= 0 || ne != n || n > 256)
		return printf("FAIL: cannot read %d prompts / %d expected lines\n", n, ne), 1;
	void *ctx = zmq_ctx_new();
	gen *gs = calloc(n, sizeof *gs);
	for (int i = 0; i < n; i++) {
		sl_gen_params p = {.prompt = prompts[i], .max_tokens = max_tokens};
		if (sl_client_create(ctx, ep, &gs[i].c, g_err, sizeof g_err) ||
		    sl_client_submit(gs[i].c, &p, &gs[i].tag, g_err, sizeof g_err))
			return printf("FAIL: client %d: %s\n", i, g_err), 1;
	}
	double t0 = sl_now();
	int ok = pump(gs, n, 90000, all_done);
	CHECK(ok, "not every client finished within 90 s");
	int concurrent_chunks = 0;
	for (int i = 0; i < n; i++) {
		int32_t want[4096];
		int nw = parse_ids(expected[i], want, 4096);
		gen *g = &gs[i];
		int same = g->n_ids == nw && !memcmp(g->ids, want, sizeof(int32_t) * nw);
		int first_diff = 0;
		while (first_diff < nw && first_diff < g->n_ids && g->ids[first_diff] == want[first_diff])
			first_diff++;
		CHECK(g->done && (g->finish == SL_FINISH_LENGTH || g->finish == SL_FINISH_EOS),
		      "client %d: finish %d (%s)", i, g->finish, g->message);
		CHECK(same, "client %d: %d ids, want %d; first difference at %d: got %d, want %d", i,
		      g->n_ids, nw, first_diff, first_diff < g->n_ids ? g->ids[first_diff] : -1,
		      first_diff < nw ? want[first_diff] : -1);
		CHECK(!g->bad_utf8, "client %d: a chunk split a UTF-8 character", i);
		concurrent_chunks += g->n_chunks;
		sl_client_destroy(g->c);
	}
	printf("itest concurrent: %d clients, %d chunks in %.2f s\n", n, concurrent_chunks, sl_now() - t0);
	free(gs);
	zmq_ctx_term(ctx);
	return finish();
}

static int start(gen *g, void *ctx, const char *ep, const sl_gen_params *p)
{
	memset(g, 0, sizeof *g);
	g->want_lp = p->logprobs || p->top_logprobs;
	if (sl_client_create(ctx, ep, &g->c, g_err, sizeof g_err) ||
	    sl_client_submit(g->c, p, &g->tag, g_err, sizeof g_err)) {
		printf("FAIL: start: %s\n", g_err);
		return -1;
	}
	return 0;
}

static int has_chunks3(gen *g, int n) { return g->n_chunks >= 3 || g->done; }

/* Status until the group(s) are idle with every KV block free. */
static int wait_idle(const char *ep, int ms, char *why, size_t n)
{
	double deadline = sl_now() + ms * 1e-3;
	while (sl_now() < deadline) {
		sl_event st;
		if (get_status(ep, &st)) {
			int idle = st.n_groups > 0 && st.active == 0;
			for (int i = 0; i < st.n_groups; i++) {
				sl_group_info *g = &st.groups[i];
				idle &= g->running == 0 && g->waiting == 0 && g->assigned == 0 &&
					g->kv_free == g->kv_blocks;
				snprintf(why, n, "group %u: running %d waiting %d assigned %d kv %d/%d; active %d",
					 g->id, g->running, g->waiting, g->assigned, g->kv_free, g->kv_blocks,
					 st.active);
			}
			sl_event_release(&st);
			if (idle)
				return 1;
		}
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void test_cancel(void *ctx, const char *ep)
{
	gen g;
	sl_gen_params p = {.prompt = "Tell me a long story", .max_tokens = 200, .ignore_eos = 1};
	if (start(&g, ctx, ep, &p))
		return;
	pump(&g, 1, 10000, has_chunks3);
	CHECK(g.n_chunks >= 3 && !g.done, "no stream to cancel (%d chunks, done %d)", g.n_chunks, g.done);
	sl_client_cancel(g.c, g.tag, g_err, sizeof g_err);
	double t0 = sl_now();
	pump(&g, 1, 3000, all_done);
	CHECK(g.done && g.finish == SL_FINISH_CANCELLED, "cancel: finish %d (%s)", g.finish, g.message);
	CHECK(g.done && g.t_done - t0 < 1.0, "cancel took %.0f ms", (g.t_done - t0) * 1e3);
	CHECK(g.n_ids < 200, "cancelled request still produced all %d tokens", g.n_ids);
	char why[256] = "";
	CHECK(wait_idle(ep, 5000, why, sizeof why), "slot or KV blocks not freed: %s", why);
	/* cancel of a tag that is not running */
	gen u = {.c = g.c, .tag = 999999};
	sl_client_cancel(g.c, u.tag, g_err, sizeof g_err);
	pump(&u, 1, 3000, all_done);
	CHECK(u.done && u.finish == -1 && u.error_code == SL_ERR_NOT_FOUND,
	      "cancel of an unknown tag: done %d code %d", u.done, u.error_code);
	sl_client_destroy(g.c);
}

/* Greedy text once; then the same with a stop string taken from its
 * middle: STOP, and the text ends right before the stop string's first
 * occurrence. Also stream=false gives the same text and ids in one Done. */
static void test_stop_and_nostream(void *ctx, const char *ep)
{
	gen a, b, s;
	sl_gen_params p = {.prompt = "Once upon a time", .max_tokens = 40, .ignore_eos = 1};
	if (start(&a, ctx, ep, &p))
		return;
	pump(&a, 1, 20000, all_done);
	CHECK(a.done && a.finish == SL_FINISH_LENGTH && a.n_ids == 40, "reference run: finish %d, %d ids",
	      a.finish, a.n_ids);
	sl_gen_params q = p;
	q.no_stream = 1;
	if (start(&b, ctx, ep, &q))
		return;
	pump(&b, 1, 20000, all_done);
	CHECK(b.done && b.n_chunks == 0 && b.n_ids == a.n_ids && !memcmp(a.ids, b.ids, 4 * a.n_ids) &&
	      b.text_len == a.text_len && !memcmp(a.text, b.text, a.text_len),
	      "stream=false differs from the stream (chunks %d, %d ids, %zu bytes)", b.n_chunks, b.n_ids,
	      b.text_len);
	/* a stop string of 1 to 2 whole characters from the middle of the text */
	size_t at = a.text_len / 2, len = 0;
	while (at > 0 && ((unsigned char)a.text[at] & 0xC0) == 0x80)
		at--;
	for (int ch = 0; ch < 2 && at + len < a.text_len; ch++) {
		len++;
		while (at + len < a.text_len && ((unsigned char)a.text[at + len] & 0xC0) == 0x80)
			len++;
	}
	char stop[16] = "";
	if (len == 0 || len >= sizeof stop) {
		CHECK(0, "reference text too short for a stop string (%zu bytes)", a.text_len);
		return;
	}
	memcpy(stop, a.text + at, len);
	const char *first = strstr(a.text, stop);
	const char *stops[] = {"\x01never", stop};
	q = p;
	q.stop = stops;
	q.n_stop = 2;
	if (start(&s, ctx, ep, &q))
		return;
	pump(&s, 1, 20000, all_done);
	size_t want = first ? (size_t)(first - a.text) : 0;
	CHECK(s.done && s.finish == SL_FINISH_STOP, "stop string: finish %d (%s)", s.finish, s.message);
	CHECK(s.text_len == want && !memcmp(s.text, a.text, want),
	      "stop string '%s': text of %zu bytes, want the %zu before it", stop, s.text_len, want);
	CHECK(!s.bad_utf8 && !a.bad_utf8, "a chunk split a UTF-8 character");
	sl_client_destroy(a.c);
	sl_client_destroy(b.c);
	sl_client_destroy(s.c);
}

/* The model's greedy output for [1, 2]: EOS (id 2) given as a prompt
 * token never matters; ask for ignore_eos=false on ids that are the EOS
 * itself to check the coordinator ends on it when the model emits it —
 * random weights rarely do, so this checks only that EOS ends cleanly
 * when it happens and that max_tokens bounds otherwise. */
static void test_eos_or_length(void *ctx, const char *ep)
{
	gen g;
	int32_t ids[] = {1, 2, 2, 2};
	sl_gen_params p = {.prompt_ids = ids, .n_prompt_ids = 4, .max_tokens = 30};
	if (start(&g, ctx, ep, &p))
		return;
	pump(&g, 1, 20000, all_done);
	int eos_at = -1;
	for (int i = 0; i < g.n_ids; i++)
		if (g.ids[i] == 2 && eos_at < 0)
			eos_at = i;
	CHECK(g.done && ((g.finish == SL_FINISH_EOS && eos_at == g.n_ids - 1) ||
			 (g.finish == SL_FINISH_LENGTH && eos_at < 0 && g.n_ids == 30)),
	      "finish %d with %d ids, EOS at %d", g.finish, g.n_ids, eos_at);
	sl_client_destroy(g.c);
}

/* A per-request deadline ends a long generation with an error, and the
 * group frees it. */
static void test_timeout(void *ctx, const char *ep)
{
	gen g;
	sl_gen_params p = {.prompt = "Slowly", .max_tokens = 200, .ignore_eos = 1, .timeout_ms = 300};
	if (start(&g, ctx, ep, &p))
		return;
	pump(&g, 1, 5000, all_done);
	CHECK(g.done && g.finish == SL_FINISH_ERROR && strstr(g.message, "timed out"),
	      "timeout: finish %d (%s)", g.finish, g.message);
	CHECK(g.n_ids < 200, "timed-out request produced all its tokens");
	char why[256] = "";
	CHECK(wait_idle(ep, 5000, why, sizeof why), "after a timeout: %s", why);
	sl_client_destroy(g.c);
}

/* A client that disconnects mid-stream: its request is cancelled (the
 * coordinator cannot deliver), the group frees it. */
static void test_vanish(void *ctx, const char *ep)
{
	gen g;
	sl_gen_params p = {.prompt = "Nobody listens", .max_tokens = 200, .ignore_eos = 1};
	if (start(&g, ctx, ep, &p))
		return;
	pump(&g, 1, 10000, has_chunks3);
	sl_client_destroy(g.c);
	char why[256] = "";
	CHECK(wait_idle(ep, 5000, why, sizeof why), "after a client vanished: %s", why);
}

static int cmd_features(const char *ep)
{
	void *ctx = zmq_ctx_new();
	test_timeout(ctx, ep);
	test_vanish(ctx, ep);
	test_cancel(ctx, ep);
	test_stop_and_nostream(ctx, ep);
	test_eos_or_length(ctx, ep);
	zmq_ctx_term(ctx);
	return finish();
}

/* ---- penalties, min_p and log-probs ---- */

/* EXPECTED: the ids line of `shardline-node --logprobs N`, then one line
 * per token: "lp INDEX ID LOGPROB ID:LOGPROB..." (node/main.c). */
typedef struct lp_expect {
	int32_t ids[512];
	float lp[512], top[512 * 20];
	int32_t top_ids[512 * 20];
	int n, n_lp, top_n;
} lp_expect;

static int read_expected(const char *path, lp_expect *x)
{
	char **lines;
	int n = read_lines(path, &lines);
	memset(x, 0, sizeof *x);
	if (n < 1)
		return -1;
	x->n = parse_ids(lines[0], x->ids, 512);
	for (int i = 1; i < n && x->n_lp < 512; i++) {
		int idx, id, used;
		float v;
		const char *p = lines[i];
		if (sscanf(p, "lp %d %d %g%n", &idx, &id, &v, &used) != 3 || idx != x->n_lp)
			continue;
		x->lp[x->n_lp] = v;
		int k = 0;
		for (p += used; k < 20 && sscanf(p, " %d:%g%n", &id, &v, &used) == 2; p += used, k++)
			x->top_ids[x->n_lp * 20 + k] = id, x->top[x->n_lp * 20 + k] = v;
		x->top_n = k;
		x->n_lp++;
	}
	free(lines);
	return 0;
}

/* g's log-probs against x: ids, chosen and every alternative. */
static void check_against(const gen *g, const lp_expect *x, const char *what)
{
	CHECK(g->done && g->finish == SL_FINISH_LENGTH, "%s: finish %d (%s)", what, g->finish, g->message);
	CHECK(g->lp_misaligned == 0, "%s: %d replies' log-probs did not match their ids", what,
	      g->lp_misaligned);
	CHECK(g->n_ids == x->n && !memcmp(g->ids, x->ids, sizeof(int32_t) * x->n),
	      "%s: %d ids differ from the local run's %d", what, g->n_ids, x->n);
	CHECK(g->n_lp == x->n_lp && x->n_lp == x->n && g->top_n == x->top_n,
	      "%s: %d log-probs (top %d), the local run %d (top %d)", what, g->n_lp, g->top_n, x->n_lp,
	      x->top_n);
	int bad = -1;
	for (int i = 0; i < g->n_lp && i < x->n_lp && bad < 0; i++) {
		if (fabsf(g->lp[i] - x->lp[i]) > 1e-6f)
			bad = i;
		for (int k = 0; k < x->top_n && bad < 0; k++)
			if (g->top_ids[i * 20 + k] != x->top_ids[i * 20 + k] ||
			    fabsf(g->top[i * 20 + k] - x->top[i * 20 + k]) > 1e-6f)
				bad = i;
	}
	CHECK(bad < 0, "%s: token %d: log-prob %.8g (top %d:%.8g), the local run %.8g (top %d:%.8g)",
	      what, bad, bad >= 0 ? g->lp[bad] : 0, bad >= 0 ? g->top_ids[bad * 20] : 0,
	      bad >= 0 ? g->top[bad * 20] : 0, bad >= 0 ? x->lp[bad] : 0,
	      bad >= 0 ? x->top_ids[bad * 20] : 0, bad >= 0 ? x->top[bad * 20] : 0);
}

static int cmd_logprobs(const char *ep, const char *ids_csv, const char *expected_path)
{
	lp_expect *x = calloc(1, sizeof *x);
	int32_t ids[512];
	int n_ids = parse_ids_csv(ids_csv, ids, 512);
	if (read_expected(expected_path, x) || x->n == 0 || n_ids == 0)
		return printf("FAIL: cannot read %s or the prompt ids\n", expected_path), 1;
	void *ctx = zmq_ctx_new();
	gen *g = calloc(4, sizeof *g);
	/* the local run's flags (serve.sh) */
	sl_gen_params p = {.prompt_ids = ids, .n_prompt_ids = n_ids, .max_tokens = x->n,
			   .ignore_eos = 1, .temperature = 0.8f, .seed = 5, .min_p = 0.05f,
			   .presence_penalty = 0.5f, .frequency_penalty = 0.3f,
			   .repetition_penalty = 1.3f, .logprobs = 1, .top_logprobs = x->top_n};
	if (!start(&g[0], ctx, ep, &p)) {
		pump(&g[0], 1, 30000, all_done);
		check_against(&g[0], x, "streamed");
		printf("itest logprobs: streamed %d tokens in %d chunks, top %d\n", g[0].n_ids,
		       g[0].n_chunks, g[0].top_n);
	}
	sl_gen_params q = p;
	q.no_stream = 1;
	if (!start(&g[1], ctx, ep, &q)) {
		pump(&g[1], 1, 30000, all_done);
		CHECK(g[1].n_chunks == 0, "stream=false sent %d chunks", g[1].n_chunks);
		check_against(&g[1], x, "stream=false");
	}
	/* a stop string from the middle of the text: every id still has its entry */
	char stop[8] = "";
	size_t half = g[0].text_len / 2;
	if (g[0].text_len >= 4 && !(g[0].text[half] & 0x80))
		stop[0] = g[0].text[half];
	q = p;
	q.stop = (const char *const[]){stop};
	q.n_stop = stop[0] ? 1 : 0;
	if (!start(&g[2], ctx, ep, &q)) {
		pump(&g[2], 1, 30000, all_done);
		CHECK(g[2].done && g[2].lp_misaligned == 0 && g[2].n_lp == g[2].n_ids &&
		      (!stop[0] || g[2].finish == SL_FINISH_STOP),
		      "stop '%s': finish %d, %d ids, %d log-probs, %d misaligned", stop, g[2].finish,
		      g[2].n_ids, g[2].n_lp, g[2].lp_misaligned);
		CHECK(g[2].n_lp <= x->n && !memcmp(g[2].lp, x->lp, sizeof(float) * g[2].n_lp),
		      "stop: its log-probs are not a prefix of the full run's");
	}
	/* greedy, no penalties: the chosen token is the most likely, first alternative */
	sl_gen_params gr = {.prompt_ids = ids, .n_prompt_ids = n_ids, .max_tokens = 10,
			    .ignore_eos = 1, .top_logprobs = 3};
	if (!start(&g[3], ctx, ep, &gr)) {
		pump(&g[3], 1, 30000, all_done);
		int bad = g[3].n_lp == g[3].n_ids && g[3].n_ids == 10 && g[3].top_n == 3 ? -1 : 0;
		for (int i = 0; i < g[3].n_lp && bad < 0; i++) {
			const float *t = g[3].top + i * 20;
			if (g[3].top_ids[i * 20] != g[3].ids[i] || t[0] != g[3].lp[i] || t[0] < t[1] ||
			    t[1] < t[2] || !(t[0] <= 0) || expf(t[0]) + expf(t[1]) + expf(t[2]) > 1.0001f)
				bad = i;
		}
		CHECK(bad < 0, "greedy top_logprobs 3: token %d of %d (%d log-probs, top %d): id %d, "
		      "log-prob %g, first alternative %d:%g", bad, g[3].n_ids, g[3].n_lp, g[3].top_n,
		      bad >= 0 ? g[3].ids[bad] : 0, bad >= 0 ? g[3].lp[bad] : 0,
		      bad >= 0 ? g[3].top_ids[bad * 20] : 0, bad >= 0 ? g[3].top[bad * 20] : 0);
	}
	for (int i = 0; i < 4; i++)
		sl_client_destroy(g[i].c);
	free(g);
	free(x);
	zmq_ctx_term(ctx);
	return finish();
}

/* ---- hostile clients ---- */

static void *raw_socket(void *ctx, const char *ep)
{
	void *s = zmq_socket(ctx, ZMQ_DEALER);
	int linger = 0;
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
	zmq_connect(s, ep);
	return s;
}

/* The next Reply on s within ms, or NULL. */
static Shardline__Client__Reply *raw_reply(void *s, int ms)
{
	zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
	if (zmq_poll(&it, 1, ms) <= 0)
		return NULL;
	zmq_msg_t m;
	zmq_msg_init(&m);
	if (zmq_msg_recv(&m, s, 0) < 0)
		return NULL;
	Shardline__Client__Reply *r =
		shardline__client__reply__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
	zmq_msg_close(&m);
	return r;
}

/* Send raw frames; expect an Error with code and a message containing want. */
static void expect_error(void *s, const char *what, const void *const *frames, const size_t *lens,
			 int n, int code, const char *want)
{
	for (int i = 0; i < n; i++)
		zmq_send(s, frames[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0);
	Shardline__Client__Reply *r = raw_reply(s, 3000);
	int ok = r && r->msg_case == SHARDLINE__CLIENT__REPLY__MSG_ERROR && (int)r->error->code == code &&
		 r->error->message && strstr(r->error->message, want);
	CHECK(ok, "%s: want error %d containing '%s', got %s (code %d, '%s')", what, code, want,
	      !r ? "no reply" : r->msg_case == SHARDLINE__CLIENT__REPLY__MSG_ERROR ? "an error" : "another reply",
	      r && r->msg_case == SHARDLINE__CLIENT__REPLY__MSG_ERROR ? (int)r->error->code : -1,
	      r && r->msg_case == SHARDLINE__CLIENT__REPLY__MSG_ERROR && r->error->message ? r->error->message : "");
	if (ok)
		printf("itest hostile: %s -> %s\n", what, r->error->message);
	if (r)
		shardline__client__reply__free_unpacked(r, NULL);
}

static void expect_error1(void *s, const char *what, const void *buf, size_t len, int code,
			  const char *want)
{
	const void *f[] = {buf};
	size_t l[] = {len};
	expect_error(s, what, f, l, 1, code, want);
}

/* A Submit with the given tweaks, packed as a Request into *buf. */
typedef void (*tweak_fn)(Shardline__Client__Submit *, Shardline__Client__Sampling *);

static size_t pack_submit(tweak_fn tweak, uint8_t **buf)
{
	static int32_t ids[] = {1, 100, 200};
	Shardline__Client__Sampling sp = SHARDLINE__CLIENT__SAMPLING__INIT;
	Shardline__Client__Submit s = SHARDLINE__CLIENT__SUBMIT__INIT;
	s.has_tag = 1;
	s.tag = 5;
	s.has_prompt = 1;
	s.prompt.data = (uint8_t *)"Hello there";
	s.prompt.len = 11;
	s.has_max_tokens = 1;
	s.max_tokens = 8;
	s.sampling = &sp;
	(void)ids;
	if (tweak)
		tweak(&s, &sp);
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_SUBMIT;
	q.submit = &s;
	size_t n = shardline__client__request__get_packed_size(&q);
	*buf = malloc(n);
	shardline__client__request__pack(&q, *buf);
	return n;
}

static void t_max0(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { s->max_tokens = 0; }
static void t_maxneg(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { s->max_tokens = -5; }
static void t_topp(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_top_p = 1, p->top_p = 1.5f; }
static void t_topp0(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_top_p = 1, p->top_p = 0; }
static void t_temp(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_temperature = 1, p->temperature = -1; }
static void t_tempnan(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_temperature = 1, p->temperature = NAN; }
static void t_topk(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_top_k = 1, p->top_k = -3; }
static void t_minp(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_min_p = 1, p->min_p = 1.5f; }
static void t_minpnan(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_min_p = 1, p->min_p = NAN; }
static void t_presence(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_presence_penalty = 1, p->presence_penalty = 2.5f; }
static void t_frequency(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_frequency_penalty = 1, p->frequency_penalty = -3; }
static void t_rep0(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_repetition_penalty = 1, p->repetition_penalty = 0; }
static void t_rep11(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { p->has_repetition_penalty = 1, p->repetition_penalty = 11; }
static void t_toplp(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { s->has_top_logprobs = 1, s->top_logprobs = 21; }
static void t_toplpneg(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { s->has_top_logprobs = 1, s->top_logprobs = -1; }
static void t_noprompt(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { s->has_prompt = 0; }
static void t_emptyprompt(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { s->prompt.len = 0; }
static void t_model(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { s->model = "gpt-9"; }
static void t_vocab(Shardline__Client__Submit *s, Shardline__Client__Sampling *p)
{
	static int32_t ids[] = {1, 99999};
	s->has_prompt = 0, s->n_prompt_ids = 2, s->prompt_ids = ids;
}
static void t_both(Shardline__Client__Submit *s, Shardline__Client__Sampling *p)
{
	static int32_t ids[] = {1, 5};
	s->n_prompt_ids = 2, s->prompt_ids = ids;
}
static void t_longctx(Shardline__Client__Submit *s, Shardline__Client__Sampling *p)
{
	static char text[8192];
	for (int i = 0; i < 400; i++)
		memcpy(text + 10 * i, "word more ", 10);
	s->prompt.data = (uint8_t *)text, s->prompt.len = 4000;
}
static void t_ctxsum(Shardline__Client__Submit *s, Shardline__Client__Sampling *p) { s->max_tokens = 100000; }
static void t_stops(Shardline__Client__Submit *s, Shardline__Client__Sampling *p)
{
	static ProtobufCBinaryData st[17];
	for (int i = 0; i < 17; i++)
		st[i] = (ProtobufCBinaryData){1, (uint8_t *)"x"};
	s->n_stop = 17, s->stop = st;
}
static void t_emptystop(Shardline__Client__Submit *s, Shardline__Client__Sampling *p)
{
	static ProtobufCBinaryData st[1] = {{0, (uint8_t *)""}};
	s->n_stop = 1, s->stop = st;
}
static void t_dup(Shardline__Client__Submit *s, Shardline__Client__Sampling *p)
{
	s->tag = 77, s->max_tokens = 200, s->has_ignore_eos = 1, s->ignore_eos = 1;
}

static void bad_params(void *s)
{
	static const struct { const char *what; tweak_fn f; int code; const char *want; } cases[] = {
		{"max_tokens 0", t_max0, SL_ERR_BAD_REQUEST, "max_tokens"},
		{"max_tokens -5", t_maxneg, SL_ERR_BAD_REQUEST, "max_tokens"},
		{"top_p 1.5", t_topp, SL_ERR_BAD_REQUEST, "top_p"},
		{"top_p 0", t_topp0, SL_ERR_BAD_REQUEST, "top_p"},
		{"temperature -1", t_temp, SL_ERR_BAD_REQUEST, "temperature"},
		{"temperature NaN", t_tempnan, SL_ERR_BAD_REQUEST, "temperature"},
		{"top_k -3", t_topk, SL_ERR_BAD_REQUEST, "top_k"},
		{"min_p 1.5", t_minp, SL_ERR_BAD_REQUEST, "min_p must be in [0, 1]"},
		{"min_p NaN", t_minpnan, SL_ERR_BAD_REQUEST, "min_p"},
		{"presence_penalty 2.5", t_presence, SL_ERR_BAD_REQUEST, "presence_penalty must be in [-2, 2]"},
		{"frequency_penalty -3", t_frequency, SL_ERR_BAD_REQUEST, "frequency_penalty must be in [-2, 2]"},
		{"repetition_penalty 0", t_rep0, SL_ERR_BAD_REQUEST, "repetition_penalty must be in (0, 10]"},
		{"repetition_penalty 11", t_rep11, SL_ERR_BAD_REQUEST, "repetition_penalty"},
		{"top_logprobs 21", t_toplp, SL_ERR_BAD_REQUEST, "top_logprobs must be in [0, 20]"},
		{"top_logprobs -1", t_toplpneg, SL_ERR_BAD_REQUEST, "top_logprobs"},
		{"no prompt", t_noprompt, SL_ERR_BAD_REQUEST, "empty prompt"},
		{"empty prompt", t_emptyprompt, SL_ERR_BAD_REQUEST, "empty prompt"},
		{"unknown model", t_model, SL_ERR_UNKNOWN_MODEL, "unknown model 'gpt-9'"},
		{"id outside vocab", t_vocab, SL_ERR_BAD_REQUEST, "outside the vocabulary"},
		{"prompt and ids", t_both, SL_ERR_BAD_REQUEST, "not both"},
		{"prompt longer than the context", t_longctx, SL_ERR_BAD_REQUEST, "longer than the context"},
		{"prompt + max_tokens over the context", t_ctxsum, SL_ERR_BAD_REQUEST, "exceeds the context"},
		{"17 stop strings", t_stops, SL_ERR_BAD_REQUEST, "stop strings"},
		{"empty stop string", t_emptystop, SL_ERR_BAD_REQUEST, "stop[0]"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint8_t *buf;
		size_t n = pack_submit(cases[i].f, &buf);
		expect_error1(s, cases[i].what, buf, n, cases[i].code, cases[i].want);
		free(buf);
	}
}

static void bad_frames(void *s)
{
	static const char garbage[] = "\xff\xfe\xfd garbage \x00\x01\x02";
	expect_error1(s, "garbage", garbage, sizeof garbage - 1, SL_ERR_MALFORMED, "cannot parse");
	uint8_t *buf;
	size_t n = pack_submit(t_longctx, &buf);
	expect_error1(s, "truncated", buf, n / 2, SL_ERR_MALFORMED, "cannot parse");
	free(buf);
	size_t big = 2u << 20;
	char *huge = calloc(1, big);
	expect_error1(s, "oversized (2 MiB)", huge, big, SL_ERR_MALFORMED, "exceeds the limit");
	free(huge);
	static const uint8_t unknown[] = {0x4A, 0x00}; /* field 9, length 0 */
	expect_error1(s, "unknown message type", unknown, sizeof unknown, SL_ERR_MALFORMED, "unknown");
	expect_error1(s, "empty frame", "", 0, SL_ERR_MALFORMED, "empty");
	const void *two[] = {"a", "b"};
	size_t two_len[] = {1, 1};
	expect_error(s, "two frames", two, two_len, 2, SL_ERR_MALFORMED, "one frame");
	static const uint8_t empty_req[] = {0x0A, 0x00}; /* Submit with no fields */
	expect_error1(s, "empty submit", empty_req, sizeof empty_req, SL_ERR_BAD_REQUEST, "empty prompt");
}

static void dup_tag(void *s)
{
	uint8_t *buf;
	size_t n = pack_submit(t_dup, &buf);
	zmq_send(s, buf, n, 0);
	expect_error1(s, "duplicate tag", buf, n, SL_ERR_BAD_REQUEST, "in use");
	free(buf);
	Shardline__Client__Cancel cn = SHARDLINE__CLIENT__CANCEL__INIT;
	cn.has_tag = 1, cn.tag = 77;
	Shardline__Client__Request q = SHARDLINE__CLIENT__REQUEST__INIT;
	q.msg_case = SHARDLINE__CLIENT__REQUEST__MSG_CANCEL, q.cancel = &cn;
	uint8_t cb[64];
	size_t cl = shardline__client__request__pack(&q, cb);
	zmq_send(s, cb, cl, 0);
	/* chunks of tag 77, then its Done: cancelled */
	int finish = -1;
	double deadline = sl_now() + 5;
	while (finish < 0 && sl_now() < deadline) {
		Shardline__Client__Reply *r = raw_reply(s, 500);
		if (r && r->msg_case == SHARDLINE__CLIENT__REPLY__MSG_DONE && r->done->tag == 77)
			finish = r->done->finish;
		if (r)
			shardline__client__reply__free_unpacked(r, NULL);
	}
	CHECK(finish == SL_FINISH_CANCELLED, "duplicate-tag request: finish %d after cancel", finish);
}

static int cmd_hostile(const char *ep)
{
	void *ctx = zmq_ctx_new();
	gen good;
	sl_gen_params p = {.prompt = "A good client", .max_tokens = 60, .ignore_eos = 1};
	if (start(&good, ctx, ep, &p))
		return finish();
	void *s = raw_socket(ctx, ep);
	bad_frames(s);
	bad_params(s);
	dup_tag(s);
	zmq_close(s);
	pump(&good, 1, 30000, all_done);
	CHECK(good.done && good.finish == SL_FINISH_LENGTH && good.n_ids == 60,
	      "the good client during the barrage: finish %d, %d ids (%s)", good.finish, good.n_ids,
	      good.message);
	sl_client_destroy(good.c);
	gen after;
	if (!start(&after, ctx, ep, &p)) {
		pump(&after, 1, 30000, all_done);
		CHECK(after.done && after.finish == SL_FINISH_LENGTH, "a client after the barrage: finish %d",
		      after.finish);
		sl_client_destroy(after.c);
	}
	zmq_ctx_term(ctx);
	return finish();
}

/* ---- a node rank killed mid-request ---- */

static int two_streaming(gen *gs, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		k += gs[i].n_chunks >= 2;
	return k >= 4;
}

static int cmd_kill(const char *ep, pid_t victim, int hb_ms)
{
	enum { N = 8, MAX_TOKENS = 30 };
	void *ctx = zmq_ctx_new();
	gen *gs = calloc(N, sizeof *gs);
	int32_t ids[] = {1, 300, 400, 500};
	for (int i = 0; i < N; i++) {
		ids[3] = 500 + i;
		sl_gen_params p = {.prompt_ids = ids, .n_prompt_ids = 4, .max_tokens = MAX_TOKENS,
				      .ignore_eos = 1};
		if (start(&gs[i], ctx, ep, &p))
			return finish();
	}
	CHECK(pump(gs, N, 20000, two_streaming), "fewer than 4 requests streaming");
	int streamed[N];
	for (int i = 0; i < N; i++)
		streamed[i] = gs[i].n_ids, gs[i].mark = 1;
	double t_kill = sl_now();
	CHECK(kill(victim, SIGKILL) == 0, "kill %d: %s", (int)victim, strerror(errno));
	pump(gs, N, 60000, all_done);
	int completed = 0, moved = 0;
	for (int i = 0; i < N; i++) {
		gen *g = &gs[i];
		CHECK(g->done, "request %d never finished", i);
		/* another group is live: every request goes on there, mid-stream or not */
		CHECK(g->finish == SL_FINISH_LENGTH && g->n_ids == MAX_TOKENS,
		      "request %d: finish %d with %d ids (%s)", i, g->finish, g->n_ids, g->message);
		completed += g->finish == SL_FINISH_LENGTH;
		moved += streamed[i] > 0 && streamed[i] < MAX_TOKENS;
		printf("itest kill: request %d: %s after %.0f ms, %d ids before the kill%s%s\n", i,
		       sl_finish_name(g->finish), (g->t_done - t_kill) * 1e3, streamed[i],
		       g->message[0] ? ": " : "", g->message);
	}
	sl_event st;
	if (get_status(ep, &st)) {
		CHECK(st.requeued >= 1, "no request was re-queued (requeued %ld)", st.requeued);
		CHECK(st.n_groups == 1, "%d groups left, want 1", st.n_groups);
		sl_event_release(&st);
	} else {
		CHECK(0, "no status after the kill");
	}
	for (int i = 0; i < N; i++)
		sl_client_destroy(gs[i].c);
	free(gs);
	zmq_ctx_term(ctx);
	printf("itest kill: %d completed, %d of them moved mid-stream (heartbeat %d ms)\n", completed,
	       moved, hb_ms);
	return finish();
}

/* ---- migration: a group lost mid-stream, every stream goes on exactly ---- */

/* Request i of the migration set: even ones greedy, odd ones sampled with
 * every penalty (and log-probs on every third), all past EOS. */
static sl_gen_params mig_params(int i, int32_t *ids, int max_tokens)
{
	ids[0] = 1, ids[1] = 300 + 7 * i, ids[2] = 411, ids[3] = 500 + 13 * i, ids[4] = 300 + 7 * i;
	sl_gen_params p = {.prompt_ids = ids, .n_prompt_ids = 5, .max_tokens = max_tokens,
			      .ignore_eos = 1, .logprobs = i % 3 == 0, .top_logprobs = i % 3 == 0 ? 2 : 0};
	if (i % 2) {
		p.temperature = 0.9f, p.top_p = 0.9f, p.seed = 1000 + (uint64_t)i;
		p.presence_penalty = 0.5f, p.frequency_penalty = 0.4f, p.repetition_penalty = 1.3f;
	}
	return p;
}

static int start_set(gen *gs, int32_t (*ids)[5], void *ctx, const char *ep, int n, int max_tokens)
{
	for (int i = 0; i < n; i++) {
		sl_gen_params p = mig_params(i, ids[i], max_tokens);
		if (start(&gs[i], ctx, ep, &p))
			return -1;
	}
	return 0;
}

static void put_hex(FILE *f, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%02x", (unsigned char)p[i]);
}

/* itest streams EP OUT N MAX_TOKENS: the undisturbed run, one line per
 * request: its ids (comma-separated) and its text in hex. */
static int cmd_streams(const char *ep, const char *out, int n, int max_tokens)
{
	void *ctx = zmq_ctx_new();
	gen *gs = calloc(n, sizeof *gs);
	int32_t(*ids)[5] = calloc(n, sizeof *ids);
	FILE *f = fopen(out, "w");
	CHECK(f != NULL, "cannot write %s", out);
	if (!f || start_set(gs, ids, ctx, ep, n, max_tokens))
		return finish();
	CHECK(pump(gs, n, 120000, all_done), "the undisturbed run did not finish");
	for (int i = 0; i < n; i++) {
		gen *g = &gs[i];
		CHECK(g->finish == SL_FINISH_LENGTH && g->n_ids == max_tokens,
		      "undisturbed request %d: finish %d with %d ids (%s)", i, g->finish, g->n_ids,
		      g->message);
		for (int k = 0; k < g->n_ids; k++)
			fprintf(f, "%s%d", k ? "," : "", g->ids[k]);
		fprintf(f, " ");
		put_hex(f, g->text, g->text_len);
		fprintf(f, "\n");
		sl_client_destroy(g->c);
	}
	fclose(f);
	free(gs), free(ids);
	zmq_ctx_term(ctx);
	return finish();
}

static int min_chunks(gen *gs, int n, int k)
{
	for (int i = 0; i < n; i++)
		if (gs[i].n_chunks < k && !gs[i].done)
			return 0;
	return 1;
}

static int chunks3(gen *gs, int n) { return min_chunks(gs, n, 3); }

/* itest migrate EP VICTIM REF N MAX_TOKENS GROUPS: the same requests as
 * `streams` wrote to REF; once each has streamed 3 chunks and GROUPS
 * groups are registered, SIGKILL VICTIM (a rank of the group serving
 * them); every request must end with the ids and text of REF, log-probs
 * one per id (none re-sent). */
static int cmd_migrate(const char *ep, pid_t victim, const char *ref, int n, int max_tokens,
		       int groups)
{
	char **lines = NULL;
	int n_lines = read_lines(ref, &lines);
	CHECK(n_lines == n, "%s has %d lines, want %d", ref, n_lines, n);
	if (n_lines != n)
		return finish();
	void *ctx = zmq_ctx_new();
	gen *gs = calloc(n, sizeof *gs);
	int32_t(*ids)[5] = calloc(n, sizeof *ids), *want = malloc(sizeof(int32_t) * 4096);
	int *before = calloc(n, sizeof *before);
	if (start_set(gs, ids, ctx, ep, n, max_tokens))
		return finish();
	CHECK(pump(gs, n, 30000, chunks3), "not every request streamed 3 chunks");
	double deadline = sl_now() + 30;
	int have = 0;
	while (have < groups && sl_now() < deadline) { /* the group that takes them over */
		sl_event st;
		if (get_status(ep, &st))
			have = st.n_groups, sl_event_release(&st);
		pump(gs, n, 50, NULL);
	}
	CHECK(have >= groups, "%d groups registered, want %d", have, groups);
	int running = 0, sum_before = 0;
	for (int i = 0; i < n; i++) {
		before[i] = gs[i].n_ids;
		gs[i].mark = sl_now();
		running += !gs[i].done;
		sum_before += before[i];
	}
	CHECK(running == n, "only %d of %d requests still running at the kill", running, n);
	double t_kill = sl_now();
	CHECK(kill(victim, SIGKILL) == 0, "kill %d: %s", (int)victim, strerror(errno));
	pump(gs, n, 120000, all_done);
	int same_all = 0;
	double resume_max = 0;
	for (int i = 0; i < n; i++) {
		gen *g = &gs[i];
		char *sp = strchr(lines[i], ' ');
		const char *hex = sp ? sp + 1 : "";
		if (sp)
			*sp = 0; /* the ids end there */
		int nw = parse_ids_csv(lines[i], want, 4096);
		char got_hex[2 * sizeof g->text + 1];
		for (size_t k = 0; k < g->text_len; k++)
			sprintf(got_hex + 2 * k, "%02x", (unsigned char)g->text[k]);
		got_hex[2 * g->text_len] = 0;
		int first_diff = 0;
		while (first_diff < nw && first_diff < g->n_ids && g->ids[first_diff] == want[first_diff])
			first_diff++;
		int same = g->n_ids == nw && first_diff == nw && !strcmp(got_hex, hex);
		same_all += same;
		CHECK(g->done && g->finish == SL_FINISH_LENGTH, "request %d: finish %d (%s)", i, g->finish,
		      g->message);
		CHECK(g->n_ids == nw && first_diff == nw, "request %d (%s): %d ids, want %d; first "
		      "difference at %d: got %d, want %d (%d ids before the kill)", i,
		      i % 2 ? "sampled" : "greedy", g->n_ids, nw, first_diff,
		      first_diff < g->n_ids ? g->ids[first_diff] : -1,
		      first_diff < nw ? want[first_diff] : -1, before[i]);
		CHECK(!strcmp(got_hex, hex), "request %d: text differs from the undisturbed run: got "
		      "'%s', want hex %s", i, g->text, hex);
		CHECK(!g->lp_misaligned && (!g->want_lp || g->n_lp == g->n_ids),
		      "request %d: %d log-probs for %d ids (%d replies misaligned)", i, g->n_lp,
		      g->n_ids, g->lp_misaligned);
		CHECK(!g->bad_utf8, "request %d: a chunk split a UTF-8 character", i);
		double resume = g->t_first_after > 0 ? g->t_first_after - t_kill : -1;
		resume_max = resume > resume_max ? resume : resume_max;
		printf("itest migrate: request %d (%s): %d ids before the kill, next chunk %.0f ms "
		       "after it, %s\n", i, i % 2 ? "sampled" : "greedy", before[i], resume * 1e3,
		       same ? "identical" : "DIFFERENT");
	}
	sl_event st;
	if (get_status(ep, &st)) {
		CHECK(st.requeued >= n, "requeued %ld, want >= %d", st.requeued, n);
		sl_event_release(&st);
	}
	for (int i = 0; i < n; i++)
		sl_client_destroy(gs[i].c);
	printf("itest migrate: %d streams, %d tokens before the kill (%.1f each), all resumed within "
	       "%.0f ms, %d of %d identical to the undisturbed run\n", n, sum_before,
	       (double)sum_before / n, resume_max * 1e3, same_all, n);
	free(gs), free(ids), free(want), free(before);
	zmq_ctx_term(ctx);
	return finish();
}

/* itest unserved EP N MAX_TOKENS ADMISSION_MS: N streams on the only
 * group; once they stream, the caller's group dies (the shell kills it
 * after this prints "streaming"): each must end with an error naming no
 * live group, one admission timeout later; then a new request waits the
 * same and gets the same error. */
static int unserved_error(const gen *g)
{
	return g->finish == SL_FINISH_ERROR && strstr(g->message, "no live node group");
}

static int cmd_unserved(const char *ep, int n, int max_tokens, int admission_ms, pid_t victim)
{
	void *ctx = zmq_ctx_new();
	gen *gs = calloc(n + 1, sizeof *gs);
	int32_t(*ids)[5] = calloc(n + 1, sizeof *ids);
	if (start_set(gs, ids, ctx, ep, n, max_tokens))
		return finish();
	CHECK(pump(gs, n, 30000, chunks3), "not every request streamed 3 chunks");
	double t_kill = sl_now();
	CHECK(kill(victim, SIGKILL) == 0, "kill %d: %s", (int)victim, strerror(errno));
	pump(gs, n, 60000, all_done);
	for (int i = 0; i < n; i++) {
		CHECK(gs[i].done && unserved_error(&gs[i]), "request %d: finish %d (%s)", i,
		      gs[i].finish, gs[i].message);
		printf("itest unserved: request %d ended %.0f ms after the kill: %s\n", i,
		       (gs[i].t_done - t_kill) * 1e3, gs[i].message);
	}
	double t0 = sl_now();
	sl_gen_params p = mig_params(0, ids[n], max_tokens);
	if (start(&gs[n], ctx, ep, &p))
		return finish();
	pump(gs + n, 1, 30000, all_done);
	CHECK(gs[n].done && unserved_error(&gs[n]), "new request: finish %d (%s)", gs[n].finish,
	      gs[n].message);
	printf("itest unserved: a new request ended after %.0f ms (admission timeout %d ms): %s\n",
	       (gs[n].t_done - t0) * 1e3, admission_ms, gs[n].message);
	for (int i = 0; i <= n; i++)
		sl_client_destroy(gs[i].c);
	free(gs), free(ids);
	zmq_ctx_term(ctx);
	return finish();
}

/* The group whose cache_queried_tokens grew between two Status replies
 * (the one that started the request), with its hit and routed deltas;
 * -1 unless exactly one grew. */
static int served_by(const sl_event *a, const sl_event *b, long *hit, long *routed)
{
	int who = -1, n = 0;
	for (int i = 0; i < b->n_groups; i++)
		for (int k = 0; k < a->n_groups; k++) {
			const sl_group_info *x = &a->groups[k], *y = &b->groups[i];
			if (x->id != y->id || y->cache_queried_tokens == x->cache_queried_tokens)
				continue;
			who = (int)y->id, n++;
			*hit = y->cache_hit_tokens - x->cache_hit_tokens;
			*routed = y->routed_prefix_tokens - x->routed_prefix_tokens;
		}
	return n == 1 ? who : -1;
}

static const sl_group_info *group_of(const sl_event *st, int id)
{
	for (int i = 0; i < st->n_groups; i++)
		if ((int)st->groups[i].id == id)
			return &st->groups[i];
	return NULL;
}

/* One greedy turn, to the end; 1 when it finished with its max_tokens. */
static int run_turn(void *ctx, const char *ep, const int32_t *ids, int n, int max_tokens, gen *g)
{
	sl_gen_params p = {.prompt_ids = ids, .n_prompt_ids = n, .max_tokens = max_tokens,
			      .ignore_eos = 1};
	if (start(g, ctx, ep, &p))
		return 0;
	pump(g, 1, 60000, all_done);
	sl_client_destroy(g->c);
	return g->done && g->finish == SL_FINISH_LENGTH && g->n_ids == max_tokens;
}

static int cmd_prefix(const char *ep, const char *prompts_path, const char *expected_path,
		      const char *long_csv, int bt)
{
	enum { TURNS = 6, MAX_IDS = 1024 };
	char **prompts, **expected;
	int n = read_lines(prompts_path, &prompts), ne = read_lines(expected_path, &expected);
	if (n != TURNS || ne != TURNS)
		return printf("FAIL: %d prompts and %d answers, want %d\n", n, ne, TURNS), 1;
	static int32_t ids[TURNS][MAX_IDS], want[TURNS][MAX_IDS], long_ids[MAX_IDS];
	int n_ids[TURNS], n_want[TURNS], n_long = parse_ids_csv(long_csv, long_ids, MAX_IDS);
	for (int k = 0; k < TURNS; k++) {
		n_ids[k] = parse_ids_csv(prompts[k], ids[k], MAX_IDS);
		n_want[k] = parse_ids(expected[k], want[k], MAX_IDS);
	}
	void *ctx = zmq_ctx_new();
	sl_event before, after;
	if (!get_status(ep, &before) || before.n_groups != 2)
		return printf("FAIL: want 2 groups\n"), 1;
	for (int i = 0; i < 2; i++)
		CHECK(before.groups[i].prefix_cache, "group %u: prefix cache off", before.groups[i].id);
	int home = -1, other = -1, prev = -1; /* prev: the group of the previous turn */
	gen g, lg;
	for (int k = 0; k < TURNS; k++) {
		if (k == 4) { /* the long request: shares the conversation, so it goes home */
			sl_gen_params p = {.prompt_ids = long_ids, .n_prompt_ids = n_long,
					      .max_tokens = 100, .ignore_eos = 1};
			if (start(&lg, ctx, ep, &p))
				return finish();
			pump(&lg, 1, 30000, has_chunks3);
			sl_event st;
			if (get_status(ep, &st)) {
				const sl_group_info *h = group_of(&st, home);
				CHECK(h && h->assigned == 1 && !lg.done, "the long request is not running at "
				      "home (group %d assigned %d, done %d)", home, h ? h->assigned : -1, lg.done);
				sl_event_release(&st);
			}
		}
		if (k == 5) { /* home idle again: prefix alone decides */
			sl_client_cancel(lg.c, lg.tag, g_err, sizeof g_err);
			pump(&lg, 1, 30000, all_done);
			CHECK(lg.done && lg.finish == SL_FINISH_CANCELLED, "long request: finish %d", lg.finish);
			sl_client_destroy(lg.c);
			char why[256];
			CHECK(wait_idle(ep, 10000, why, sizeof why), "not idle after the cancel: %s", why);
		}
		sl_event_release(&before);
		if (!get_status(ep, &before))
			return printf("FAIL: no status\n"), 1;
		int ok = run_turn(ctx, ep, ids[k], n_ids[k], n_want[k], &g);
		CHECK(ok, "turn %d: finish %d, %d of %d ids (%s)", k + 1, g.finish, g.n_ids, n_want[k],
		      g.message);
		int diff = 0;
		while (diff < g.n_ids && diff < n_want[k] && g.ids[diff] == want[k][diff])
			diff++;
		CHECK(ok && diff == n_want[k], "turn %d: id %d differs from the local run: %d, want %d",
		      k + 1, diff, diff < g.n_ids ? g.ids[diff] : -1, want[k][diff]);
		long hit = -1, routed = -1;
		if (!get_status(ep, &after))
			return printf("FAIL: no status\n"), 1;
		int who = served_by(&before, &after, &hit, &routed);
		CHECK(who >= 0, "turn %d: no one group started it", k + 1);
		if (k == 0) {
			home = who;
			for (int i = 0; i < 2; i++)
				if ((int)after.groups[i].id != home)
					other = (int)after.groups[i].id;
		}
		int where = k < 4 ? home : other;
		/* what the group serving the previous turn holds: its prompt and
		 * answer but the last token, in whole blocks; never this prompt's
		 * last token */
		long want_hit = 0;
		if (k > 0 && who == prev) {
			long held = (n_ids[k - 1] + n_want[k - 1] - 1) / bt, can = (n_ids[k] - 1) / bt;
			want_hit = bt * (held < can ? held : can);
		}
		CHECK(who == where, "turn %d went to group %d, want %d (%s)", k + 1, who, where,
		      k < 4 ? "the conversation's group" : k == 4 ? "the other: home is busy"
		      : "the other: it holds the longer prefix");
		CHECK(hit == want_hit, "turn %d on group %d: %ld prompt tokens reused, want %ld", k + 1,
		      who, hit, want_hit);
		CHECK(routed == hit, "turn %d: the router expected %ld cached tokens, the group "
		      "reused %ld", k + 1, routed, hit);
		printf("itest prefix: turn %d (%d prompt tokens) on group %d, %ld reused\n", k + 1,
		       n_ids[k], who, hit);
		prev = who;
		sl_event_release(&after);
	}
	sl_event_release(&before);
	zmq_ctx_term(ctx);
	return finish();
}

/* N requests at once at a coordinator with a small --max-queue: those
 * past the groups' room and the queue get OVERLOADED; the rest finish. */
static int cmd_overload(const char *ep, int n, int max_tokens)
{
	void *ctx = zmq_ctx_new();
	gen *gs = calloc(n, sizeof *gs);
	for (int i = 0; i < n; i++) {
		sl_gen_params p = {.prompt = "Busy", .max_tokens = max_tokens, .ignore_eos = 1};
		if (start(&gs[i], ctx, ep, &p))
			return finish();
	}
	pump(gs, n, 60000, all_done);
	int over = 0, done = 0;
	for (int i = 0; i < n; i++) {
		if (gs[i].finish == -1 && gs[i].error_code == SL_ERR_OVERLOADED &&
		    strstr(gs[i].message, "overloaded"))
			over++;
		else if (gs[i].finish == SL_FINISH_LENGTH && gs[i].n_ids == max_tokens)
			done++;
		else
			CHECK(0, "request %d: finish %d code %d (%s)", i, gs[i].finish, gs[i].error_code,
			      gs[i].message);
		sl_client_destroy(gs[i].c);
	}
	CHECK(over >= 1 && done >= 1, "%d overloaded, %d finished of %d", over, done, n);
	printf("itest overload: %d overloaded, %d finished\n", over, done);
	free(gs);
	zmq_ctx_term(ctx);
	return finish();
}

/* ---- graceful stops ---- */

/* itest load EP N MAX_TOKENS READY_FILE: N streams (the migration set);
 * once each has streamed 3 chunks READY_FILE is created (the shell then
 * signals a group); every stream must finish normally with MAX_TOKENS
 * ids: a group's graceful stop costs no request. */
static int cmd_load(const char *ep, int n, int max_tokens, const char *ready)
{
	void *ctx = zmq_ctx_new();
	gen *gs = calloc(n, sizeof *gs);
	int32_t(*ids)[5] = calloc(n, sizeof *ids);
	if (start_set(gs, ids, ctx, ep, n, max_tokens))
		return finish();
	CHECK(pump(gs, n, 30000, chunks3), "not every request streamed 3 chunks");
	FILE *f = fopen(ready, "w");
	if (f)
		fclose(f);
	double t0 = sl_now();
	pump(gs, n, 120000, all_done);
	int errors = 0;
	for (int i = 0; i < n; i++) {
		gen *g = &gs[i];
		errors += g->finish != SL_FINISH_LENGTH;
		CHECK(g->done && g->finish == SL_FINISH_LENGTH && g->n_ids == max_tokens,
		      "request %d: finish %d with %d ids (%s)", i, g->finish, g->n_ids, g->message);
		sl_client_destroy(g->c);
	}
	printf("itest load: %d streams, %d request errors, the last done %.0f ms after the signal\n",
	       n, errors, (sl_now() - t0) * 1e3);
	free(gs), free(ids);
	zmq_ctx_term(ctx);
	return finish();
}

/* itest shutdown EP COORD_PID N: N streams; SIGTERM the coordinator once
 * they stream: each ends with a Done naming the shutdown (no hang). */
static int cmd_shutdown(const char *ep, pid_t coord, int n)
{
	void *ctx = zmq_ctx_new();
	gen *gs = calloc(n, sizeof *gs);
	int32_t(*ids)[5] = calloc(n, sizeof *ids);
	if (start_set(gs, ids, ctx, ep, n, 200))
		return finish();
	CHECK(pump(gs, n, 30000, chunks3), "not every request streamed 3 chunks");
	double t0 = sl_now();
	CHECK(kill(coord, SIGTERM) == 0, "kill %d: %s", (int)coord, strerror(errno));
	pump(gs, n, 10000, all_done);
	for (int i = 0; i < n; i++) {
		gen *g = &gs[i];
		CHECK(g->done && g->finish == SL_FINISH_ERROR && strstr(g->message, "shutting down"),
		      "request %d: done %d, finish %d (%s)", i, g->done, g->finish, g->message);
		sl_client_destroy(g->c);
	}
	printf("itest shutdown: %d streams ended within %.0f ms of the SIGTERM\n", n,
	       (sl_now() - t0) * 1e3);
	free(gs), free(ids);
	zmq_ctx_term(ctx);
	return finish();
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 5 && !strcmp(argv[1], "wait-groups"))
		return cmd_wait_groups(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc >= 6 && !strcmp(argv[1], "concurrent"))
		return cmd_concurrent(argv[2], argv[3], argv[4], atoi(argv[5]));
	if (argc >= 3 && !strcmp(argv[1], "features"))
		return cmd_features(argv[2]);
	if (argc >= 3 && !strcmp(argv[1], "hostile"))
		return cmd_hostile(argv[2]);
	if (argc >= 5 && !strcmp(argv[1], "logprobs"))
		return cmd_logprobs(argv[2], argv[3], argv[4]);
	if (argc >= 5 && !strcmp(argv[1], "overload"))
		return cmd_overload(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc >= 5 && !strcmp(argv[1], "kill"))
		return cmd_kill(argv[2], (pid_t)atoi(argv[3]), atoi(argv[4]));
	if (argc >= 6 && !strcmp(argv[1], "streams"))
		return cmd_streams(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	if (argc >= 8 && !strcmp(argv[1], "migrate"))
		return cmd_migrate(argv[2], (pid_t)atoi(argv[3]), argv[4], atoi(argv[5]), atoi(argv[6]),
				   atoi(argv[7]));
	if (argc >= 7 && !strcmp(argv[1], "unserved"))
		return cmd_unserved(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
				    (pid_t)atoi(argv[6]));
	if (argc >= 6 && !strcmp(argv[1], "load"))
		return cmd_load(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]);
	if (argc >= 5 && !strcmp(argv[1], "shutdown"))
		return cmd_shutdown(argv[2], (pid_t)atoi(argv[3]), atoi(argv[4]));
	if (argc >= 7 && !strcmp(argv[1], "prefix"))
		return cmd_prefix(argv[2], argv[3], argv[4], argv[5], atoi(argv[6]));
	fprintf(stderr, "usage: itest wait-groups|concurrent|features|hostile|logprobs|kill|streams|migrate|"
		"unserved|load|shutdown|prefix ... "
		"(see itest.c)\n");
	return 2;
}
