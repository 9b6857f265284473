/*
 * step.h — running one step plan across the node group.
 *
 * Every rank runs node_step_run on its shard: per micro-batch, the first
 * stage embeds and the others receive the residual stream from the stage
 * before; each stage runs its layers and passes x on; the last stage
 * computes logits and its first tp rank samples and sends the tokens (and,
 * when asked, their log-probs and the logits) back to the leader. Because a stage moves to
 * the next micro-batch as soon as it has sent the last one on, the stages
 * work on different micro-batches at once.
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
/* Non-leader ranks: run plans until the leader sends NODE_PLAN_STOP. */
int node_worker_loop(model *m, char *err, size_t errlen);
/* Leader: tell every worker to leave its loop. Called once, by
 * node_group_close on the leader, whatever happened before. */
int node_step_stop(model *m);

#endif
