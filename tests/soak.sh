#!/bin/sh
# Soak: a few thousand requests through a coordinator, a `mpirun -np 2`
# tp 2 group and a single-process group (CPU backend, a tiny random
# model): shardline-bench-serve keeps 16 streams busy, cancels every 7th
# request after its first chunk and drops the connection of every 11th
# mid-stream (no Cancel: the coordinator finds the client unreachable),
# while CLI clients are SIGKILLed mid-stream beside it. Asserts:
#   - no lost request: each of loadgen's REQUESTS finished, or was
#     cancelled (its Done says so) or vanished by design; none failed,
#     none unanswered;
#   - the coordinator is idle afterwards (0 active, 0 queued) and every
#     group's KV pool is free again (`shardline status`: kv free == blocks,
#     0 running, 0 waiting, 0 assigned);
#   - resident memory (VmRSS) of the coordinator and of every rank grows
#     by less than RSS_BOUND_KB (16 MiB) from after the warm-up to the end.
# About 1 to 2 minutes on 2 cores. Prints figures and "N passed, N failed".
# Environment: BIN, REQUESTS (3000), KILLED (50 CLI clients),
# RSS_BOUND_KB (16384), KEEP=DIR keeps the logs.
bin=${BIN:-build/bin}
tok=tests/data/llama2-small/tokenizer.json
REQUESTS=${REQUESTS:-3000}
KILLED=${KILLED:-50}
RSS_BOUND_KB=${RSS_BOUND_KB:-16384}
# heartbeats: a group counts as lost after 3 silent intervals; generous,
# since the soak tests load, not loss detection, on a box that may be busy
HB=1000
HARNESS_GRACE=0.5 # seconds between SIGTERM and SIGKILL on exit
. tests/harness.sh
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	OMPI_MCA_rmaps_base_oversubscribe=1
rss() { awk '/^VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null; }
cli() { "$bin/shardline" --coordinator "$CL" "$@"; }

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 256 --dtype f32 --seed 7 2>/dev/null && ok || bad "mkckpt"
"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --heartbeat-ms $HB \
	--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' --http-bind none \
	--ports-file "$tmp/ports" --request-timeout-ms 120000 >"$tmp/coord.log" 2>&1 &
coord=$!; pids="$pids $coord"
i=0; while [ ! -s "$tmp/ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
CL=$(awk '/^client/{print $2}' "$tmp/ports")
NODE=$(awk '/^node/{print $2}' "$tmp/ports")
[ -n "$CL" ] && ok || { bad "coordinator did not start"; logs coord.log; exit 1; }
mpirun -np 2 "$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny \
	--tp 2 --heartbeat-ms $HB --max-running 32 --max-waiting 64 >"$tmp/mpi.log" 2>&1 &
mpi=$!; pids="$pids $mpi"
"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny \
	--heartbeat-ms $HB --max-running 32 --max-waiting 64 >"$tmp/single.log" 2>&1 &
single=$!; pids="$pids $single"
i=0
until [ "$(cli status 2>/dev/null | grep -c ' tiny ')" -ge 2 ] || [ $i -ge 600 ]; do
	sleep 0.1; i=$((i + 1))
done
[ $i -lt 600 ] && ok || { bad "groups did not register"; logs coord.log mpi.log single.log; exit 1; }
ranks=$(ps -o pid= --ppid "$mpi")

# warm-up, then the baseline of resident memory
"$bin/shardline-bench-serve" --coordinator "$CL" --model tiny --streams 16 --requests 200 \
	--mix uniform --prompt-len 24 --output-len 12 --vocab 2000 --seed 99 >"$tmp/warm.log" 2>&1 ||
	bad "warm-up: $(tail -3 "$tmp/warm.log")"
sleep 0.5
for p in $coord $single $ranks; do eval "rss0_$p=$(rss "$p")"; done

# the load: loadgen's closed loop, cancelling every 7th request after its
# first chunk and dropping the connection of every 11th (no Cancel: the
# coordinator must find the client gone); beside it, CLI clients SIGKILLed
# mid-stream (a process that dies)
t0=$(date +%s)
"$bin/shardline-bench-serve" --coordinator "$CL" --model tiny --streams 16 --requests "$REQUESTS" \
	--mix uniform --prompt-len 24 --output-len 24 --vocab 2000 --seed 1 --timeout-s 300 \
	--cancel-every 7 --vanish-every 11 >"$tmp/load.log" 2>&1 &
lg=$!
k=0
while [ $k -lt "$KILLED" ]; do
	timeout -s KILL "0.0$((2 + k % 7))" "$bin/shardline" --coordinator "$CL" generate \
		--prompt-ids "1,$((5 + k % 900)),9" --max-tokens 200 --ignore-eos >/dev/null 2>&1
	k=$((k + 1))
done
wait $lg; lgrc=$?
t1=$(date +%s)
echo "soak: $REQUESTS loadgen requests (exit $lgrc) and $KILLED SIGKILLed CLI clients in $((t1 - t0)) s"
grep -E '^(requests|  +[0-9]+ cancelled|output tokens/s|e2e)' "$tmp/load.log" | sed 's/^/soak: /'
[ $lgrc -eq 0 ] && ok || {
	bad "loadgen: not every request finished (exit $lgrc)"; tail -20 "$tmp/load.log"
	grep -E "lost|silent|WARN|ERROR" "$tmp/coord.log" | grep -v unreachable | tail -10
}
n_ok=$(sed -nE 's/^requests +([0-9]+) ok, ([0-9]+) failed, ([0-9]+) unanswered.*/\1 \2 \3/p' "$tmp/load.log")
n_cv=$(sed -nE 's/^ +([0-9]+) cancelled by their client, ([0-9]+) clients vanished.*/\1 \2/p' "$tmp/load.log")
set -- $n_ok $n_cv
# every request answered: finished, or cancelled or vanished by design
[ $# -eq 5 ] && [ "$2" -eq 0 ] && [ "$3" -eq 0 ] && [ $(($1 + $4 + $5)) -eq "$REQUESTS" ] && ok ||
	bad "requests: ok/failed/unanswered '$n_ok', cancelled/vanished '$n_cv' do not add up to $REQUESTS"
[ $# -eq 5 ] && [ "$4" -gt 0 ] && [ "$5" -gt 0 ] && ok || bad "no request was cancelled or vanished"

# idle again: nothing active or queued, every KV block free
i=0
while :; do
	st=$(cli status 2>&1)
	busy=$(printf '%s\n' "$st" | awk '
		/^coordinator/ { if ($3 != "0" || $5 != "0") b++ }
		$3 == "tiny" { split($10, kv, "/"); if ($7 || $8 || $9 || kv[1] != kv[2]) b++ }
		END { print b + 0 }')
	[ "$busy" -eq 0 ] && break
	[ $i -ge 100 ] && break
	sleep 0.1; i=$((i + 1))
done
printf '%s\n' "$st" | sed 's/^/soak: /'
[ "$busy" -eq 0 ] && ok || bad "not idle 10 s after the load: requests or KV blocks still held"
grep -c "client unreachable" "$tmp/coord.log" | sed 's/^/soak: vanished clients the coordinator cancelled: /'

for p in $coord $single $ranks; do
	eval "a=\$rss0_$p"; b=$(rss "$p")
	case $p in $coord) who=coordinator ;; $single) who="single-process group" ;; *) who="tp 2 rank pid $p" ;; esac
	echo "soak: $who RSS $a -> $b kB ($((b - a)) kB)"
	[ -n "$b" ] && [ $((b - a)) -lt "$RSS_BOUND_KB" ] && ok ||
		bad "$who: RSS grew $((b - a)) kB (bound $RSS_BOUND_KB kB)"
done
kill -0 $coord 2>/dev/null && kill -0 $mpi 2>/dev/null && kill -0 $single 2>/dev/null && ok ||
	{ bad "a process died"; logs coord.log mpi.log single.log; }
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
