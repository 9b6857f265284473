/*
 * step.h — running one step plan across the node group.
 *
 * Every rank runs node_step_run on its shard: per micro-batch, the first
 * stage embeds and the others receive the residual stream from the stage
 * before; each stage runs its layers and passes x on; the last stage
 * computes logits and its first tp rank samples and sends the tokens (and,
 * when asked, their log-probs and the logits) back to the leader. Because a
 * stage moves to the next plan (or micro-batch) as soon as it has sent the
 * last one on, the stages work on different steps at once: the leader
 * keeps up to pp plans of disjoint sequences in flight (node/engine.c).
 *
 * The leader (world rank 0) calls node_step_lead, which sends the plan to
 * every rank first; the other ranks sit in node_worker_loop.
 */
#ifndef NODE_STEP_H
#define NODE_STEP_H

#include "node/model.h"
#include "node/plan.h"

/* The scratch steps need, sized once from m's limits; created by whoever
 * runs steps (the engine on the leader; node_worker_loop on the others). */
typedef struct node_stepper node_stepper;
int node_stepper_create(model *m, node_stepper **out, char *err, size_t errlen);
void node_stepper_destroy(node_stepper *st);

/* Leader: tokens_out gets n_sample ids; lp_out (when a sampled row wants
 * log-probs and it is not NULL) their log-probs, rows of n_sample;
 * logits_out (when the plan wants logits and it is not NULL) gets
 * [n_rows, vocab]. */
int node_step_lead(node_stepper *st, const node_plan *p, int32_t *tokens_out,
		   const kern_logprobs *lp_out, float *logits_out, char *err, size_t errlen);
/* The same in two halves, for a leader that keeps several steps in
 * flight (pipeline parallel, docs/parallel.md): issue sends the plan from
 * pipeline slot `slot` (in [0, node_step_slots): a slot's buffers are
 * reused only once its step was collected) and runs this rank's share;
 * with pp 1 the results are then in tokens_out etc. already. collect
 * receives a step's results from the last stage; steps are collected in
 * the order they were issued. */
int node_step_slots(const node_stepper *st);
int node_step_issue(node_stepper *st, int slot, const node_plan *p, int32_t *tokens_out,
		    const kern_logprobs *lp_out, float *logits_out, char *err, size_t errlen);
int node_step_collect(node_stepper *st, const node_plan *p, int32_t *tokens_out,
		      const kern_logprobs *lp_out, float *logits_out, char *err, size_t errlen);
/* Non-leader ranks: run plans until the leader sends NODE_PLAN_STOP. */
int node_worker_loop(model *m, char *err, size_t errlen);
/* Leader: tell every worker to leave its loop. Called once, by
 * node_group_close on the leader, whatever happened before. */
int node_step_stop(model *m);
/* Leader, idle: tell every worker it is alive (a NODE_PLAN_PING), so
 * their watchdogs can tell an idle group from a lost leader. */
int node_step_ping(model *m);

#endif
