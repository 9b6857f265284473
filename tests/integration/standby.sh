#!/bin/sh
# A standby coordinator pair (Binary Star; docs/protocol.md, "Standby
# coordinator") over loopback on a tiny random model, CPU backend: a
# primary and a backup exchange state over PUB/SUB (ipc), one node group
# and the clients know both (--coordinator EP1,EP2); the group registers
# with both at once, so the backup knows it before it takes over (it must
# not register again after the kill). Under load — two
# streaming clients, two queued behind the full group — the primary is
# SIGKILLed: the backup must take over (the time from the kill to its
# "taking over" line and to each queued request's completion is printed),
# the streaming clients end with "coordinator unavailable", the queued
# ones complete on the backup, and new clients (generate, status) that
# list the dead primary first are served by it.
# Every process started here is killed on exit. Prints "N passed, N failed".
bin=${BIN:-build/bin}
tok=tests/data/llama2-small/tokenizer.json
HB=200
. tests/harness.sh
export OMP_NUM_THREADS=1

start_coord() { # NAME ROLE PEER_NAME
	"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --heartbeat-ms $HB \
		--client-bind "tcp://127.0.0.1:*" --node-bind "tcp://127.0.0.1:*" --http-bind 127.0.0.1:0 \
		--ports-file "$tmp/$1.ports" --request-timeout-ms 60000 --standby $2 \
		--peer-bind "ipc://$tmp/$1.peer" --peer "ipc://$tmp/$3.peer" >"$tmp/$1.log" 2>&1 &
	echo $!
}

wait_ports() { i=0; while [ ! -s "$tmp/$1.ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done; }

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 512 --dtype f32 --seed 7 2>/dev/null && ok || bad "mkckpt"
p_pid=$(start_coord p primary b)
b_pid=$(start_coord b backup p)
pids="$pids $p_pid $b_pid" # start_coord ran in a subshell: its pids did not come back
wait_ports p; wait_ports b
CL="$(awk '/^client/{print $2}' "$tmp/p.ports"),$(awk '/^client/{print $2}' "$tmp/b.ports")"
NODE="$(awk '/^node/{print $2}' "$tmp/p.ports"),$(awk '/^node/{print $2}' "$tmp/b.ports")"
i=0; while ! grep -q "standby: backup (waiting) -> passive" "$tmp/b.log" && [ $i -lt 50 ]; do
	sleep 0.1; i=$((i + 1)); done
grep -q "primary (waiting) -> active" "$tmp/p.log" && grep -q "backup (waiting) -> passive" "$tmp/b.log" &&
	ok || { bad "the pair did not settle"; logs p.log b.log; }
BH=$(awk '/^http/{print $2}' "$tmp/b.ports")
http() { # PATH [BODY]: prints the status code
	if [ -n "${2:-}" ]; then curl -s -o "$tmp/http.out" -w '%{http_code}' -m 10 \
		-H 'Content-Type: application/json' -d "$2" "http://$BH$1"
	else curl -s -o "$tmp/http.out" -w '%{http_code}' -m 10 "http://$BH$1"; fi
}

"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny --heartbeat-ms $HB \
	--min-step-ms 50 --max-running 2 --max-waiting 0 >"$tmp/node.log" 2>&1 &
pids="$pids $!"
i=0; while ! "$bin/shardline" --coordinator "$CL" --heartbeat-ms $HB status 2>/dev/null | grep -q "1 group$" &&
	[ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
i=0; while ! grep -q ") registered" "$tmp/b.log" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
[ "$(grep -c ") registered" "$tmp/p.log")" -eq 1 ] && [ "$(grep -c ") registered" "$tmp/b.log")" -eq 1 ] &&
	[ "$(grep -c "registered with" "$tmp/node.log")" -eq 2 ] && ok ||
	{ bad "the group did not register with both, once each"; logs p.log b.log node.log; }

# the passive backup answers HTTP completions and /health with 503 standby
[ "$(http /health)" = 503 ] && grep -q '"standby"' "$tmp/http.out" && ok ||
	bad "backup /health: $(cat "$tmp/http.out")"
[ "$(http /v1/completions '{"model":"tiny","prompt":"hi","max_tokens":2}')" = 503 ] &&
	grep -q '"standby"' "$tmp/http.out" && ok || bad "backup completion: $(cat "$tmp/http.out")"

gen() { # NAME ARGS...
	name=$1; shift
	( "$bin/shardline" --coordinator "$CL" --heartbeat-ms $HB --reconnect-ms 30000 generate \
		--prompt "$name: once upon a time" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
	  echo "$? $(now_ms)" >"$tmp/$name.rc" ) &
	pids="$pids $!"
}
wait_rc() { i=0; while [ ! -s "$tmp/$1.rc" ] && [ $i -lt $(($2 * 10)) ]; do sleep 0.1; i=$((i + 1)); done; [ -s "$tmp/$1.rc" ]; }

# --- under load: two streaming, two queued; SIGKILL the primary ---
gen long1 --max-tokens 400 --ignore-eos
gen long2 --max-tokens 400 --ignore-eos
i=0; while { [ ! -s "$tmp/long1.out" ] || [ ! -s "$tmp/long2.out" ]; } && [ $i -lt 100 ]; do
	sleep 0.1; i=$((i + 1)); done
gen short1 --max-tokens 6 --ignore-eos
gen short2 --max-tokens 6 --ignore-eos
sleep 0.5
[ -s "$tmp/long1.out" ] && [ -s "$tmp/long2.out" ] && [ ! -s "$tmp/short1.out" ] && [ ! -s "$tmp/short2.out" ] &&
	ok || bad "not two streaming and two queued"
t_kill=$(now_ms)
kill -KILL "$p_pid"; wait "$p_pid" 2>/dev/null
i=0; while ! grep -q "taking over" "$tmp/b.log" && [ $i -lt 400 ]; do sleep 0.02; i=$((i + 1)); done
t_over=$(now_ms)
if grep -q "passive -> active" "$tmp/b.log"; then
	ok
	echo "standby: the backup took over $((t_over - t_kill)) ms after the primary's SIGKILL" \
		"($(awk "BEGIN{printf \"%.2f\", $((t_over - t_kill)) / $HB}") heartbeats of $HB ms): $(grep "taking over" "$tmp/b.log" | head -1 | sed 's/.*standby: //')"
else
	bad "the backup did not take over"; logs b.log
fi
for n in long1 long2; do
	if wait_rc $n 20; then
		read rc t_end <"$tmp/$n.rc"
		echo "standby: $n (streaming) ended $((t_end - t_kill)) ms after the kill"
		[ "$rc" -ne 0 ] && grep -q "coordinator unavailable" "$tmp/$n.err" && ok ||
			bad "$n: exit $rc, $(cat "$tmp/$n.err")"
	else
		bad "$n still waiting 20 s after the kill"
	fi
done
for n in short1 short2; do
	if wait_rc $n 30; then
		read rc t_end <"$tmp/$n.rc"
		echo "standby: $n (queued) completed on the backup $((t_end - t_kill)) ms after the kill"
		[ "$rc" -eq 0 ] && [ -s "$tmp/$n.out" ] && ok || bad "$n: exit $rc, $(cat "$tmp/$n.err")"
	else
		bad "$n not done 30 s after the kill"; logs b.log node.log
	fi
done
[ "$(grep -c ") registered" "$tmp/b.log")" -eq 1 ] && ! grep -q "lost" "$tmp/b.log" && ok ||
	{ bad "the backup lost the group or it registered again"; logs b.log node.log; }

# --- new clients (the dead primary first in their list) are served by the backup ---
[ "$(http /health)" = 200 ] && ok || bad "backup /health after take-over: $(cat "$tmp/http.out")"
[ "$(http /v1/completions '{"model":"tiny","prompt":"hi","max_tokens":2}')" = 200 ] && ok ||
	bad "backup completion after take-over: $(cat "$tmp/http.out")"
timeout 30 "$bin/shardline" --coordinator "$CL" --heartbeat-ms $HB generate --prompt "After" \
	--max-tokens 4 >/dev/null 2>"$tmp/after.err" && ok || bad "new client: $(cat "$tmp/after.err")"
timeout 30 "$bin/shardline" --coordinator "$CL" --heartbeat-ms $HB status --wait-ms 10000 \
	>"$tmp/status" 2>&1 && grep -q "1 group$" "$tmp/status" && ok || bad "status: $(cat "$tmp/status")"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
