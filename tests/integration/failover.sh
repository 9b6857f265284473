#!/bin/sh
# The coordinator SIGKILLed with clients waiting (docs/protocol.md,
# "Heartbeats"), over loopback on a tiny random model, CPU backend:
#   two `shardline generate` clients streaming, two more queued behind a
#   full group; the coordinator is SIGKILLed; the streaming ones must end
#   with "coordinator unavailable" (the time from the kill to their exit
#   is printed, in heartbeat intervals; the bound asserted is a hang
#   bound, 10 intervals, not the 3 the library aims at); the coordinator
#   is restarted on the same ports and the queued ones, which had not
#   started, must be re-submitted and complete.
# Every process started here is killed on exit. Prints "N passed, N failed".
bin=${BIN:-build/bin}
itest=${ITEST:-build/tests/integration/itest}
tok=tests/data/llama2-small/tokenizer.json
HB=200
. tests/harness.sh
export OMP_NUM_THREADS=1

start_coord() { # [client endpoint] [node endpoint]
	rm -f "$tmp/ports"
	"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --heartbeat-ms $HB \
		--client-bind "${1:-tcp://127.0.0.1:*}" --node-bind "${2:-tcp://127.0.0.1:*}" \
		--http-bind none --ports-file "$tmp/ports" --request-timeout-ms 60000 \
		>>"$tmp/coord.log" 2>&1 &
	coord_pid=$!; pids="$pids $coord_pid"
	i=0; while [ ! -s "$tmp/ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	CL=$(awk '/^client/{print $2}' "$tmp/ports" 2>/dev/null)
	NODE=$(awk '/^node/{print $2}' "$tmp/ports" 2>/dev/null)
}

# gen NAME ARGS...: one CLI generate in the background; NAME.rc gets
# "EXIT_STATUS END_MS" when it ends
gen() {
	name=$1; shift
	( "$bin/shardline" --coordinator "$CL" --heartbeat-ms $HB --reconnect-ms 30000 generate \
		--prompt "$name: once upon a time" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
	  echo "$? $(now_ms)" >"$tmp/$name.rc" ) &
	pids="$pids $!"
}

wait_rc() { # NAME SECONDS
	i=0; while [ ! -s "$tmp/$1.rc" ] && [ $i -lt $(($2 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
	[ -s "$tmp/$1.rc" ]
}

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 512 --dtype f32 --seed 7 2>/dev/null && ok || bad "mkckpt"
start_coord
[ -n "$CL" ] && [ -n "$NODE" ] && ok || { bad "coordinator did not start"; logs coord.log; }
# two running, none waiting in the group: further requests queue in the coordinator
"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny --heartbeat-ms $HB \
	--min-step-ms 50 --max-running 2 --max-waiting 0 >"$tmp/node.log" 2>&1 &
pids="$pids $!"
timeout 30 "$itest" wait-groups "$CL" 1 20000 && ok || { bad "group did not register"; logs coord.log node.log; }

# --- two streaming, two queued; SIGKILL the coordinator ---
gen long1 --max-tokens 400 --ignore-eos
gen long2 --max-tokens 400 --ignore-eos
i=0; while { [ ! -s "$tmp/long1.out" ] || [ ! -s "$tmp/long2.out" ]; } && [ $i -lt 100 ]; do
	sleep 0.1; i=$((i + 1)); done
[ -s "$tmp/long1.out" ] && [ -s "$tmp/long2.out" ] && ok || bad "the long requests did not stream"
gen short1 --max-tokens 6 --ignore-eos
gen short2 --max-tokens 6 --ignore-eos
sleep 0.5
[ ! -s "$tmp/short1.out" ] && [ ! -s "$tmp/short2.out" ] && ok || bad "the short requests were not queued"
t_kill=$(now_ms)
kill -KILL "$coord_pid"; wait "$coord_pid" 2>/dev/null

for n in long1 long2; do
	if wait_rc $n 20; then
		read rc t_end <"$tmp/$n.rc"
		ms=$((t_end - t_kill))
		echo "failover: $n ended $ms ms after the coordinator's SIGKILL" \
			"($(awk "BEGIN{printf \"%.2f\", $ms / $HB}") heartbeats of $HB ms)"
		[ "$rc" -ne 0 ] && grep -q "coordinator unavailable" "$tmp/$n.err" &&
			! grep -q "had not started" "$tmp/$n.err" && ok ||
			bad "$n: exit $rc, $(cat "$tmp/$n.err")"
		[ $ms -lt $((10 * HB)) ] && ok || bad "$n took $ms ms (hang bound $((10 * HB)) ms)"
	else
		bad "$n still waiting 20 s after the coordinator died"
	fi
done
sleep 0.3
[ !  -s "$tmp/short1.rc" ] && [ ! -s "$tmp/short2.rc" ] && ok || bad "a short request ended early"

# --- the coordinator back on the same ports: the queued requests are re-submitted ---
sleep 1
old_cl=$CL
start_coord "$CL" "$NODE"
[ "$CL" = "$old_cl" ] && ok || bad "restarted coordinator on $CL, not $old_cl"
t_back=$(now_ms)
for n in short1 short2; do
	if wait_rc $n 30; then
		read rc t_end <"$tmp/$n.rc"
		echo "failover: $n completed $((t_end - t_back)) ms after the restart"
		[ "$rc" -eq 0 ] && [ -s "$tmp/$n.out" ] && ok || bad "$n: exit $rc, $(cat "$tmp/$n.err")"
		grep -q "unavailable; the request had not started" "$tmp/$n.err" && ok ||
			bad "$n did not say it waited: $(cat "$tmp/$n.err")"
	else
		bad "$n not done 30 s after the restart"; logs coord.log node.log
	fi
done

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
