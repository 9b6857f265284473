/*
 * leader.h — the serving loop of a node group's leader (rank 0): one
 * ZeroMQ DEALER socket to the coordinator, the scheduler (scheduler.h) in
 * front of the engine, one TokenBatch upstream per engine step.
 *
 * The loop polls its sockets with a short timeout between engine steps,
 * so heartbeats, cancels and new requests are handled while it generates.
 * While a step runs (a long prefill can outlast many heartbeat intervals)
 * a heartbeat thread takes the sockets over and goes on sending Loads
 * with the step's progress (Load.in_step_ms, progress); the loop takes
 * them back when the step ends and handles what came meanwhile (cancels,
 * drains: ZeroMQ queued them). A signal's drain shows in those Loads at
 * once. While idle the leader sends the workers a keepalive plan every
 * stall_ms / 5, which their watchdogs wait for (node/watchdog.h). The other ranks sit in node_worker_loop and follow the
 * step plans node_engine_step sends them.
 *
 * Liveness: the leader registers, then sends a heartbeat every interval;
 * a coordinator silent for three intervals is taken as gone: the leader
 * drops its requests (nobody is left to stream them to), opens a fresh
 * socket and registers again until a coordinator (the same one restarted)
 * answers. With a standby pair (--coordinator EP1,EP2) the leader holds a
 * socket to each and registers with both at once, so the backup knows
 * every group before it takes over; only the active one sends work, and
 * losing one coordinator drops only the requests it sent. Called by
 * node/main.c in --coordinator mode.
 */
#ifndef NODE_LEADER_H
#define NODE_LEADER_H

#include <signal.h>
#include <stddef.h>

#include "node/group.h"
#include "node/scheduler.h"

typedef struct node_leader_opts {
	const char *coordinator;   /* tcp://host:port, or EP1,EP2: a standby pair (both used) */
	const char *model_name;    /* the name the coordinator routes by */
	const char *tokenizer;     /* the model's tokenizer file or folder, for constrained
				    * decoding (NULL: constrained requests are refused) */
	int grammar_max_uncertain; /* --grammar-max-uncertain: percent (constrain.h); 0: no limit */
	int heartbeat_ms;          /* until the coordinator's RegisterAck sets it */
	int max_running;           /* sequences at once (0: the model's max_seqs) */
	int max_waiting;           /* requests held beyond those */
	int min_step_ms;           /* pace engine steps (tests, demos); 0: off */
	node_sched_policy batching; /* continuous (default) or simple */
	int no_prefix_cache;       /* --no-prefix-cache: recompute every prompt whole */
	int grace_s;               /* after *stop: drain at most this long, then leave */
	int stall_ms;              /* the workers' --stall-ms: keepalives while idle; 0: none */
	volatile sig_atomic_t *stop; /* set by a signal handler: drain, then leave */
	const struct sl_curve_client *curve; /* CURVE keys (proto/curve.h); NULL or off: none */
} node_leader_opts;

/* Serve until drained after *stop (or grace_s past it), a Drain with
 * exit, or an engine failure; on the way out the coordinator is told the
 * group leaves (Load.leaving: what still runs moves to another group at
 * once). The caller's node_group_close then releases the worker ranks. */
int node_leader_run(node_group *g, const node_leader_opts *o, char *err, size_t errlen);

#endif
