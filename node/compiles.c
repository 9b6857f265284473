/*
 * compiles.c — the leader's constraint compiles on a worker thread
 * (compiles.h). Three lists under one mutex: waiting, the one compiling,
 * finished. The pipe holds a byte while the finished list is non-empty:
 * both change together under the mutex, so the leader never sleeps on a
 * finished compile it has not seen.
 */
#include "node/compiles.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/checks.h"
#include "common/sl.h"

typedef struct job {
	struct job *next;
	node_compile_done d;
	sl_constraint_kind kind;
	char *text;
	size_t len;
	int dropped; /* cancelled while compiling */
} job;

struct node_compiles {
	node_engine *e;
	pthread_t th;
	int started, quit;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	job *wait_head, *wait_tail, *cur, *done_head, *done_tail;
	int n; /* waiting + compiling + finished */
	int fd[2];
};

static void job_free(job *j)
{
	if (!j)
		return;
	node_compile_done_free(&j->d);
	free(j->text);
	free(j);
}

void node_compile_done_free(node_compile_done *d)
{
	grammar_matcher_destroy(d->r.matcher);
	d->r.matcher = NULL;
	free(d->own);
	d->own = NULL;
}

/* Call with mu held: the finished list and the pipe change together. */
static void done_push(node_compiles *q, job *j)
{
	j->next = NULL;
	if (q->done_tail)
		q->done_tail->next = j;
	else
		q->done_head = j;
	q->done_tail = j;
	if (q->done_head == j) {
		ssize_t w = write(q->fd[1], "c", 1);
		(void)w; /* a full pipe is readable already */
	}
}

static void pipe_drain(node_compiles *q)
{
	char buf[64];
	while (read(q->fd[0], buf, sizeof buf) > 0)
		;
}

static void *worker(void *arg)
{
	node_compiles *q = arg;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		while (!q->wait_head && !q->quit)
			pthread_cond_wait(&q->cv, &q->mu);
		if (q->quit)
			break;
		job *j = q->wait_head;
		q->wait_head = j->next;
		if (!q->wait_head)
			q->wait_tail = NULL;
		q->cur = j;
		pthread_mutex_unlock(&q->mu);
		j->d.rc = node_engine_constrain(q->e, j->kind, j->text, j->len, &j->d.r.matcher,
						j->d.err, sizeof j->d.err);
		pthread_mutex_lock(&q->mu);
		q->cur = NULL;
		if (j->dropped) {
			q->n--;
			job_free(j);
		} else {
			done_push(q, j);
		}
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

int node_compiles_create(node_engine *e, node_compiles **out, char *err, size_t errlen)
{
	*out = NULL;
	node_compiles *q = calloc(1, sizeof *q);
	if (!q)
		return sl_errf(err, errlen, SL_ENOMEM, "constraint compiles: out of memory");
	q->e = e;
	q->fd[0] = q->fd[1] = -1;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cv, NULL);
	if (pipe2(q->fd, O_NONBLOCK | O_CLOEXEC)) {
		int rc = sl_errf(err, errlen, SL_EIO, "constraint compiles: pipe: %s", strerror(errno));
		node_compiles_destroy(q);
		return rc;
	}
	if (pthread_create(&q->th, NULL, worker, q)) {
		node_compiles_destroy(q);
		return sl_errf(err, errlen, SL_ENOMEM, "constraint compiles: no thread");
	}
	q->started = 1;
	*out = q;
	return SL_OK;
}

static void list_free(job *j)
{
	while (j) {
		job *next = j->next;
		job_free(j);
		j = next;
	}
}

void node_compiles_destroy(node_compiles *q)
{
	if (!q)
		return;
	if (q->started) {
		pthread_mutex_lock(&q->mu);
		q->quit = 1;
		pthread_cond_signal(&q->cv);
		pthread_mutex_unlock(&q->mu);
		pthread_join(q->th, NULL);
	}
	list_free(q->wait_head);
	list_free(q->done_head);
	for (int i = 0; i < 2; i++)
		if (q->fd[i] >= 0)
			close(q->fd[i]);
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->mu);
	free(q);
}

int node_compiles_fd(const node_compiles *q) { return q->fd[0]; }

/* j->d.r as r, its prompt and token lists in one block of copies. */
static int copy_request(job *j, const node_request *r)
{
	const sl_token_lists *t = &r->lists;
	size_t np = (size_t)(r->n_prompt > 0 ? r->n_prompt : 0);
	size_t nb = (size_t)(t->n_bias > 0 ? t->n_bias : 0);
	size_t ns = (size_t)(t->n_stop_ids > 0 ? t->n_stop_ids : 0);
	char *own = malloc(sizeof(int32_t) * (np + nb + ns) + sizeof(float) * nb + 1);
	if (!own)
		return SL_ENOMEM;
	int32_t *prompt = (int32_t *)own, *bias_ids = prompt + np, *stop_ids = bias_ids + nb;
	float *bias = (float *)(stop_ids + ns);
	if (np)
		memcpy(prompt, r->prompt, sizeof(int32_t) * np);
	if (nb) {
		memcpy(bias_ids, t->bias_ids, sizeof(int32_t) * nb);
		memcpy(bias, t->bias, sizeof(float) * nb);
	}
	if (ns)
		memcpy(stop_ids, t->stop_ids, sizeof(int32_t) * ns);
	j->d.r = *r;
	j->d.r.prompt = prompt;
	j->d.r.lists = (sl_token_lists){.bias_ids = bias_ids, .bias = bias, .n_bias = (int)nb,
					.stop_ids = stop_ids, .n_stop_ids = (int)ns};
	j->d.r.matcher = NULL;
	j->d.r.prompt_logits = NULL;
	j->d.own = own;
	return SL_OK;
}

int node_compiles_submit(node_compiles *q, uint64_t id, const node_request *r,
			 sl_constraint_kind kind, const char *text, size_t len, char *err,
			 size_t errlen)
{
	job *j = calloc(1, sizeof *j);
	if (j)
		j->text = malloc(len + 1);
	if (!j || !j->text || copy_request(j, r)) {
		job_free(j);
		return sl_errf(err, errlen, SL_ENOMEM, "constraint compiles: out of memory");
	}
	memcpy(j->text, text ? text : "", len);
	j->text[len] = 0;
	j->len = len;
	j->kind = kind;
	j->d.id = id;
	pthread_mutex_lock(&q->mu);
	if (q->n >= NODE_COMPILES_MAX) {
		pthread_mutex_unlock(&q->mu);
		job_free(j);
		return sl_errf(err, errlen, SL_ENOMEM, "%d constraints already wait to compile",
			       NODE_COMPILES_MAX);
	}
	if (q->wait_tail)
		q->wait_tail->next = j;
	else
		q->wait_head = j;
	q->wait_tail = j;
	q->n++;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
	return SL_OK;
}

int node_compiles_take(node_compiles *q, node_compile_done *out)
{
	pthread_mutex_lock(&q->mu);
	job *j = q->done_head;
	if (j) {
		q->done_head = j->next;
		if (!q->done_head) {
			q->done_tail = NULL;
			pipe_drain(q);
		}
		q->n--;
	}
	pthread_mutex_unlock(&q->mu);
	if (!j)
		return 0;
	*out = j->d; /* the copies and the matcher move to out */
	free(j->text);
	free(j);
	return 1;
}

/* Remove the matching jobs of *head..*tail, freeing them; the count. */
static int list_cancel(job **head, job **tail, int (*match)(uint64_t, void *), void *arg)
{
	int n = 0;
	job *prev = NULL;
	for (job *j = *head; j;) {
		job *next = j->next;
		if (match(j->d.id, arg)) {
			if (prev)
				prev->next = next;
			else
				*head = next;
			if (*tail == j)
				*tail = prev;
			job_free(j);
			n++;
		} else {
			prev = j;
		}
		j = next;
	}
	return n;
}

void node_compiles_cancel_if(node_compiles *q, int (*match)(uint64_t id, void *arg), void *arg)
{
	pthread_mutex_lock(&q->mu);
	q->n -= list_cancel(&q->wait_head, &q->wait_tail, match, arg);
	q->n -= list_cancel(&q->done_head, &q->done_tail, match, arg);
	if (!q->done_head)
		pipe_drain(q);
	if (q->cur && match(q->cur->d.id, arg))
		q->cur->dropped = 1;
	pthread_mutex_unlock(&q->mu);
}

int node_compiles_pending(node_compiles *q)
{
	pthread_mutex_lock(&q->mu);
	int n = q->n;
	pthread_mutex_unlock(&q->mu);
	return n;
}
