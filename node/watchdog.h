/*
 * watchdog.h — how far this rank's compute has got, and a thread that
 * ends the whole MPI job when it stops getting anywhere.
 *
 * The compute side marks the span of a step (node_progress_begin/end)
 * and ticks inside it (per layer, per micro-batch, per result received);
 * a worker also ticks on every plan, the leader's keepalive plans
 * included. Those are atomics: the leader's heartbeat thread reads them
 * for its Loads (node/leader.c) and the watchdog thread for its checks.
 *
 * The watchdog (one thread per rank, node_watch_start) fires when
 *   - a step has run longer than step_ms (--step-watchdog-ms), or
 *   - inside a step, no tick came for stall_ms (--stall-ms), scaled up for
 *     steps of many tokens (node_progress_work): a peer rank or its host
 *     stopped answering (a partition, a lost host) and this rank waits in
 *     an MPI call that will never return; or
 *   - a worker that has had plans got none, not even a keepalive, for
 *     stall_ms: its leader is gone.
 * Firing logs one line naming the cause ("watchdog: ...") and, after a
 * short grace for the other ranks' watchdogs to log theirs, calls
 * MPI_Abort, so that mpirun ends every rank on every host it can still
 * reach (without MPI: _exit). docs/operations.md has the bounds.
 */
#ifndef NODE_WATCHDOG_H
#define NODE_WATCHDOG_H

#include <stddef.h>
#include <stdint.h>

/* Progress of this rank (one per process). */
void node_progress_begin(void);   /* a step (or a keepalive plan) starts */
void node_progress_tick(void);    /* it got somewhere */
void node_progress_end(void);     /* it is over */
/* The step's work, in tokens (summed over the plans it holds), and
 * whether the rank waits for other pipeline stages: a wait for a tp peer
 * lasts about one layer's compute, which grows with the tokens; a wait
 * for the stage before lasts its whole compute of the micro-batch, which
 * on a long prefill grows with their square (attention). The stall bound
 * grows the same way (watchdog.c, WATCH_STALL_TOKENS). */
void node_progress_work(long tokens, int pipelined);

typedef struct node_progress_view {
	uint64_t steps;     /* steps ended */
	uint64_t ticks;     /* ticks since start */
	int64_t in_step_ms; /* how long the current step has run; 0: none runs */
} node_progress_view;
void node_progress_get(node_progress_view *v);

typedef struct node_watch_opts {
	int step_ms;        /* a step longer than this ends the group; 0: no bound */
	int stall_ms;       /* no tick inside a step this long ends it; 0: no bound */
	int worker;         /* also watch the plans' arrival (non-leader ranks) */
} node_watch_opts;

/* Start the thread (nothing to start when both bounds are 0). */
int node_watch_start(const node_watch_opts *o, char *err, size_t errlen);
void node_watch_stop(void);

/* Test hook (docs/operations.md): with SL_TEST_HOOKS=1,
 * SL_TEST_STALL_STEP_MS=N makes every step of a rank sleep N ms before it
 * starts computing, without ticking (SL_TEST_STALL_RANK=R: only world
 * rank R). Returns at once when either is unset. */
void node_test_stall(int rank);

#endif
