#!/bin/sh
# Request deadlines fire on time: a coordinator and one single-process
# group of a tiny random model that cannot answer in time (--min-step-ms
# 1500: its first step comes after every deadline below). Requests with
# --timeout-ms 50, 120 and 250 each get the timeout error; the coordinator
# says after how long ("timed out after N ms", measured from the accepted
# Submit), and the lateness N - timeout is printed for every request.
# The coordinator sleeps until its nearest deadline (coord.c,
# poll_timeout_ms), so lateness is a few ms; the check is behavioural with
# a generous bound (LATE_MS, 50 ms: the old 100 ms tick gave up to ~100),
# not a benchmark. Prints "N passed, N failed".
bin=${BIN:-build/bin}
tok=tests/data/llama2-small/tokenizer.json
LATE_MS=${LATE_MS:-50}
HARNESS_GRACE=0.2 # seconds between SIGTERM and SIGKILL on exit
. tests/harness.sh

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 256 --dtype f32 --seed 7 2>/dev/null && ok || bad "mkckpt"
"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --heartbeat-ms 1000 \
	--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' --http-bind none \
	--ports-file "$tmp/ports" >"$tmp/coord.log" 2>&1 &
pids="$pids $!"
i=0; while [ ! -s "$tmp/ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
CL=$(awk '/^client/{print $2}' "$tmp/ports" 2>/dev/null)
NODE=$(awk '/^node/{print $2}' "$tmp/ports" 2>/dev/null)
"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny \
	--heartbeat-ms 1000 --min-step-ms 1500 >"$tmp/node.log" 2>&1 &
pids="$pids $!"
i=0
until "$bin/shardline" --coordinator "$CL" status 2>/dev/null | grep -q tiny || [ $i -ge 100 ]; do
	sleep 0.1; i=$((i + 1))
done
[ $i -lt 100 ] && ok || { bad "group did not register"; tail "$tmp/coord.log" "$tmp/node.log"; }

worst=0
for t in 50 120 250 50 120 250 50 120 250; do
	out=$("$bin/shardline" --coordinator "$CL" generate --prompt-ids 1,5,9 --max-tokens 4 \
		--timeout-ms $t 2>&1 >/dev/null)
	took=$(printf '%s\n' "$out" | sed -nE 's/.*timed out after ([0-9]+) ms.*/\1/p' | head -1)
	if [ -z "$took" ]; then
		bad "timeout $t ms: no timeout error: $out"
		continue
	fi
	late=$((took - t))
	echo "deadlines: timeout $t ms fired after $took ms (late $late ms)"
	[ $late -gt $worst ] && worst=$late
	[ $late -ge 0 ] && [ $late -lt "$LATE_MS" ] && ok ||
		bad "timeout $t ms fired after $took ms: $late ms late (bound $LATE_MS ms)"
done
echo "deadlines: worst lateness $worst ms (bound $LATE_MS ms)"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
