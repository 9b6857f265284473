#!/bin/sh
# Liveness apart from compute and the per-rank watchdog (docs/operations.md,
# "A step that runs long or hangs"), over loopback, CPU backend, a small
# random model, `mpirun -np 2` tp 2 groups:
#   1. A 4,000-token prompt in one step (--max-step-tokens 4096) while
#      rank 1 also sleeps SL_TEST_STALL_STEP_MS=3500 in every step (so
#      the step outlasts 3 heartbeats however fast the machine is, with
#      the leader blocked in an all-reduce meanwhile): the request
#      completes; the coordinator logs the group "busy on one step"
#      (only the leader's heartbeat thread can send a Load during a
#      step) and never "lost"; SIGUSR1 to mpirun during that step drains
#      the group: the request finishes, mpirun exits 0, and the coordinator
#      logs the longest silence between the group's messages, which must stay
#      under 2 heartbeats (1 s heartbeats: far above a loaded box's
#      scheduling delays).
#   2. A step that never ends (SL_TEST_STALL_STEP_MS on both ranks) with
#      --step-watchdog-ms 1500: every rank logs "watchdog: ... over
#      --step-watchdog-ms", mpirun exits non-zero, no rank is left, and
#      the request moves to a single-process group that joined meanwhile
#      and completes there.
#   3. Rank 1 stalls (a partition as rank 0 sees it: its all-reduce never
#      completes) with --stall-ms 1500: both ranks log "made no progress",
#      the job ends, the request completes on the other group.
#   4. An idle group (--stall-ms 1500) stays up past the bound (the
#      leader's keepalive plans), then its leader is frozen (SIGSTOP: a
#      host cut off, as the worker sees it): rank 1 logs "no step plan or
#      keepalive from the leader" and the job ends, leader included.
# The bounds on ending are hang bounds (30 s), not benchmarks. Prints
# "N passed, N failed". KEEP=DIR keeps the logs.
bin=${BIN:-build/bin}
itest=${ITEST:-build/tests/integration/itest}
tok=tests/data/llama2-small/tokenizer.json
HB=1000
HARNESS_GRACE=0.3
. tests/harness.sh
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	OMPI_MCA_rmaps_base_oversubscribe=1

start_coord() {
	rm -f "$tmp/ports"
	"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --heartbeat-ms $HB \
		--client-bind "tcp://127.0.0.1:*" --node-bind "tcp://127.0.0.1:*" --http-bind none \
		--ports-file "$tmp/ports" --request-timeout-ms 300000 >>"$tmp/coord.log" 2>&1 &
	coord_pid=$!; pids="$pids $coord_pid"
	i=0; while [ ! -s "$tmp/ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	CL=$(awk '/^client/{print $2}' "$tmp/ports" 2>/dev/null)
	NODE=$(awk '/^node/{print $2}' "$tmp/ports" 2>/dev/null)
}

mpi_group() { # LOG ENV-FLAGS FLAGS...: a mpirun -np 2 tp 2 group; its pid in $mpi_pid
	log=$1; xs=$2; shift 2
	# shellcheck disable=SC2086
	mpirun --oversubscribe -np 2 -x SL_TEST_HOOKS=1 $xs "$bin/shardline-node" --model "$tmp/m" --tp 2 \
		--coordinator "$NODE" --model-name tiny --heartbeat-ms $HB "$@" >"$tmp/$log" 2>&1 &
	mpi_pid=$!; pids="$pids $mpi_pid"
}

# registered N: the coordinator has logged N registrations in all (60 s at most)
registered() {
	i=0; until [ "$(grep -c "registered:" "$tmp/coord.log")" -ge "$1" ] || [ $i -ge 600 ]; do
		sleep 0.1; i=$((i + 1)); done
	[ $i -lt 600 ]
}

# wait_gone PID SECONDS: the process ended within SECONDS; its status in $rc
wait_gone() {
	i=0; while kill -0 "$1" 2>/dev/null && [ $i -lt $(($2 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
	kill -0 "$1" 2>/dev/null && return 1
	wait "$1"; rc=$?
	return 0
}

# ranks_left LOG: shardline-node processes of this test still running
ranks_left() { pgrep -f "shardline-node --model $tmp/m --tp 2" | wc -l; }

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 256 --hidden 688 --layers 4 --heads 8 --kv-heads 4 \
	--vocab 2000 --max-pos 4608 --dtype f32 --seed 7 2>/dev/null && ok || bad "mkckpt"
start_coord
[ -n "$CL" ] && ok || { bad "coordinator did not start"; logs coord.log; }

# --- 1. a step many heartbeats long: the group stays live ---
mpi_group long.log "-x SL_TEST_STALL_STEP_MS=3500 -x SL_TEST_STALL_RANK=1" \
	--max-step-tokens 4096 --kv-blocks 600
registered 1 && ok || { bad "group did not register"; logs long.log; }
ids=$(awk 'BEGIN { for (i = 0; i < 4000; i++) printf "%s%d", i ? "," : "", (i * 37) % 1990 + 5 }')
t0=$(now_ms)
timeout 300 "$bin/shardline" --coordinator "$CL" generate --prompt-ids "$ids" --max-tokens 2 \
	--ignore-eos >"$tmp/long.out" 2>"$tmp/long.err" &
gen=$!; pids="$pids $gen"
# drain (SIGUSR1 to mpirun) while the long step runs: the heartbeat
# thread says so at once; the request still finishes, then the group leaves
i=0; until grep -q "group 1 busy on one step" "$tmp/coord.log" || [ $i -ge 600 ]; do
	sleep 0.1; i=$((i + 1)); done
[ $i -lt 600 ] && ok || bad "no Load came during the long step (no 'busy on one step' line)"
kill -USR1 "$mpi_pid"
wait_gone "$gen" 300; grc=$rc
echo "liveness: 4000-token prompt answered in $(($(now_ms) - t0)) ms (exit $grc)"
[ $grc -eq 0 ] && grep -q "prompt 4000 + completion 2 tokens" "$tmp/long.err" && ok ||
	{ bad "the long prompt failed: $(cat "$tmp/long.err")"; logs coord.log long.log; }
wait_gone "$mpi_pid" 60 && [ "$rc" -eq 0 ] && ok || { bad "mpirun did not drain and exit 0"; logs long.log; }
grep -q "group 1 (.*) lost:" "$tmp/coord.log" && { bad "the coordinator declared the group lost"; logs coord.log; } || ok
i=0; until grep -q "left after draining" "$tmp/coord.log" || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
gap=$(sed -nE 's/.*group 1 .*left after draining; longest silence ([0-9]+) ms.*/\1/p' "$tmp/coord.log")
echo "liveness: longest silence of the group: ${gap:-?} ms (heartbeat $HB ms, bound $((2 * HB)) ms)"
[ -n "$gap" ] && [ "$gap" -lt $((2 * HB)) ] && ok ||
	{ bad "longest silence ${gap:-unknown} ms, not under 2 heartbeats"; logs coord.log; }

# watchdog_case NAME ENV-FLAGS LINE FLAGS...: a group whose step hangs
# ends with LINE logged on both ranks; the request completes elsewhere
watchdog_case() {
	name=$1; xs=$2; line=$3; shift 3
	n_reg=$(grep -c "registered:" "$tmp/coord.log")
	mpi_group "$name.log" "$xs" "$@"
	registered $((n_reg + 1)) && ok || { bad "$name: group did not register"; logs "$name.log"; }
	t0=$(now_ms)
	timeout 120 "$bin/shardline" --coordinator "$CL" generate --prompt-ids 5,6,7 --max-tokens 3 \
		--ignore-eos >"$tmp/$name.out" 2>"$tmp/$name.err" &
	gen=$!; pids="$pids $gen"
	sleep 1 # the request is on the hanging group: now a healthy one joins
	"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny \
		--heartbeat-ms $HB >"$tmp/$name.single.log" 2>&1 &
	one=$!; pids="$pids $one"
	if wait_gone "$mpi_pid" 30; then
		echo "liveness: $name: mpirun exit $rc $(($(now_ms) - t0)) ms after the request"
		[ "$rc" -ne 0 ] && ok || bad "$name: mpirun exit 0 after a hung step"
	else
		bad "$name: mpirun still running 30 s after the request"
	fi
	for r in 0 1; do
		grep -qE "node r$r/2 watchdog: .*$line" "$tmp/$name.log" && ok ||
			{ bad "$name: rank $r did not log '$line'"; logs "$name.log"; }
	done
	[ "$(ranks_left)" -eq 0 ] && ok || bad "$name: ranks left after mpirun ended"
	wait_gone "$gen" 60 && [ "$rc" -eq 0 ] && grep -q "completion 3 tokens" "$tmp/$name.err" && ok ||
		{ bad "$name: the request did not complete on the other group"; cat "$tmp/$name.err"; logs coord.log; }
	kill -TERM "$one"; wait_gone "$one" 30 || bad "$name: the single group did not leave"
}

# --- 2. a step over --step-watchdog-ms ---
watchdog_case stuck "-x SL_TEST_STALL_STEP_MS=600000" "over --step-watchdog-ms 1500" \
	--step-watchdog-ms 1500
# --- 3. one rank stops answering: the other waits in its all-reduce ---
watchdog_case stall "-x SL_TEST_STALL_STEP_MS=600000 -x SL_TEST_STALL_RANK=1" \
	"made no progress for [0-9]+ ms \(--stall-ms 1500," --stall-ms 1500
grep -E "re-queued elsewhere" "$tmp/coord.log" | head -3

# --- 4. an idle group whose leader freezes (SIGSTOP: a host cut off) ---
# idle for twice --stall-ms first: the leader's keepalives hold the worker
n_reg=$(grep -c "registered:" "$tmp/coord.log")
mpi_group frozen.log "" --stall-ms 1500
registered $((n_reg + 1)) && ok || { bad "frozen: group did not register"; logs frozen.log; }
sleep 3
kill -0 "$mpi_pid" 2>/dev/null && ! grep -q "watchdog" "$tmp/frozen.log" && ok ||
	{ bad "frozen: the idle group ended by itself"; logs frozen.log; }
leader=$(sed -nE 's/.*group [0-9]+ \([^:]*:([0-9]+)\) registered.*/\1/p' "$tmp/coord.log" | tail -1)
t0=$(now_ms)
kill -STOP "$leader"
if wait_gone "$mpi_pid" 30; then
	echo "liveness: frozen: mpirun exit $rc $(($(now_ms) - t0)) ms after the leader stopped"
	[ "$rc" -ne 0 ] && ok || bad "frozen: mpirun exit 0"
else
	bad "frozen: mpirun still running 30 s after the leader stopped"; kill -CONT "$leader"
fi
grep -q "node r1/2 watchdog: .*no step plan or keepalive from the leader" "$tmp/frozen.log" && ok ||
	{ bad "frozen: rank 1 did not log the lost leader"; logs frozen.log; }
# mpirun's teardown sends SIGCONT and SIGTERM: the leader leaves as
# signalled (its linger lets the Load saying so go out: up to 1 s)
i=0; while kill -0 "$leader" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill -0 "$leader" 2>/dev/null && { bad "frozen: the leader outlived mpirun by 10 s"; kill -KILL "$leader"; } || ok

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
