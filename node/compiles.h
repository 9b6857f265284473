/*
 * compiles.h — constraints compiled off the leader's loop (issue 37). A
 * new JSON schema or grammar takes tens to hundreds of milliseconds to
 * compile (xgrammar builds its token-mask cache then); done on arrival in
 * the loop it held every running stream's next step that long. The
 * leader hands a constrained request here instead: one worker thread
 * compiles, in arrival order, and the leader takes the finished ones
 * (with their matcher, or the constraint's error) when the descriptor
 * turns readable, then submits them to the scheduler as before. Until
 * then a request is only here: cancelling it or losing its link drops it.
 */
#ifndef NODE_COMPILES_H
#define NODE_COMPILES_H

#include <stddef.h>
#include <stdint.h>

#include "common/constraint.h"
#include "common/sl.h"
#include "node/engine.h"

typedef struct node_compiles node_compiles;

/* A finished compile: the request as submitted, its prompt and token
 * lists in copies it owns, r.matcher set when rc is 0; else err says why
 * the constraint was refused. */
typedef struct node_compile_done {
	uint64_t id;
	node_request r;
	int rc;
	char err[SL_ERRLEN];
	void *own; /* the copies: node_compile_done_free */
} node_compile_done;

/* Compiles through node_engine_constrain(e, ...), which only the worker
 * calls from now on. */
int node_compiles_create(node_engine *e, node_compiles **out, char *err, size_t errlen);
/* Stops the worker after its current compile; what is left is freed. */
void node_compiles_destroy(node_compiles *q);
/* Readable while finished compiles wait to be taken (for poll). */
int node_compiles_fd(const node_compiles *q);
/* Queue request id (r's prompt and lists are copied; r->matcher must be
 * NULL) under constraint (kind, text[len], copied). SL_ENOMEM when out
 * of memory or NODE_COMPILES_MAX are queued. */
#define NODE_COMPILES_MAX 4096
int node_compiles_submit(node_compiles *q, uint64_t id, const node_request *r,
			 sl_constraint_kind kind, const char *text, size_t len, char *err,
			 size_t errlen);
/* 1 and *out filled when a finished compile was waiting, else 0. */
int node_compiles_take(node_compiles *q, node_compile_done *out);
void node_compile_done_free(node_compile_done *d);
/* Drop every request, queued or finished and not yet taken, whose id
 * match() accepts; a compile under way is dropped when it ends. */
void node_compiles_cancel_if(node_compiles *q, int (*match)(uint64_t id, void *arg), void *arg);
/* Requests queued, compiling or finished and not yet taken. */
int node_compiles_pending(node_compiles *q);

#endif
