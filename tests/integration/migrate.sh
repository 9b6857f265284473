#!/bin/sh
# Migration and "no waiting without hope" over loopback, CPU backend, on the
# tiny random model of serve.sh (docs/protocol.md, "Group loss"):
#   1. an undisturbed run of 8 streams (greedy, and sampled with seed,
#      top_p, presence, frequency and repetition penalties, some with
#      log-probs; all past EOS) on a `mpirun -np 2` tp 2 group (a group
#      lost here too would still migrate, but the reference must be whole:
#      the rest is skipped without it);
#   2. the same 8 streams again; once each has streamed, a single-process
#      group joins and rank 1 of the tp 2 group is SIGKILLed: every stream
#      must go on on the other group and end with exactly the ids and the
#      text of the undisturbed run;
#   3. that group SIGKILLed mid-stream in turn (no live group left): every
#      stream ends with an error naming it after --admission-timeout-ms
#      (1000 here), and so does a new request; over HTTP a 503;
#   4. a coordinator with --admission-timeout-ms 0 and no group: a new
#      request is refused at once (ZeroMQ: UNAVAILABLE; HTTP: 503).
# Run by tests/mpi.sh. Every process started here is killed on exit.
# Prints "N passed, N failed". KEEP=DIR keeps the logs.
bin=${BIN:-build/bin}
itest=${ITEST:-build/tests/integration/itest}
tok=tests/data/llama2-small/tokenizer.json
HB=500 # a loaded 2-core box can stall a paced tp 2 group past 3 x 200 ms
N=8
MAX=96
HARNESS_GRACE=0.3 # seconds between SIGTERM and SIGKILL on exit
. tests/harness.sh
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	OMPI_MCA_rmaps_base_oversubscribe=1

# counts OUT NAME: add an itest run's counts (its output in OUT)
counts() {
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
	grep -E '^FAIL' "$1" | head -20
	grep -E '^itest (migrate|unserved):' "$1" | tail -12
	if [ -z "$line" ]; then
		tail -20 "$1"; bad "itest $2: no result"; logs coord.log; return
	fi
	echo "itest $2: $line"
	p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
	pass=$((pass + p)); fail=$((fail + f))
	[ "$f" -eq 0 ] || logs coord.log
}

start_coord() { # PORTS_FILE FLAGS...
	pf=$1; shift
	"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --heartbeat-ms $HB \
		--client-bind "tcp://127.0.0.1:*" --node-bind "tcp://127.0.0.1:*" \
		--http-bind 127.0.0.1:0 --ports-file "$pf" --request-timeout-ms 120000 "$@" \
		>>"$tmp/coord.log" 2>&1 &
	coord_pid=$!; pids="$pids $coord_pid"
	i=0; while [ ! -s "$pf" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	CL=$(awk '/^client/{print $2}' "$pf" 2>/dev/null)
	NODE=$(awk '/^node/{print $2}' "$pf" 2>/dev/null)
	H=$(awk '/^http/{print $2}' "$pf" 2>/dev/null)
}

rank_pid() { # rank R's pid of the mpirun with pid P
	for c in $(ps -o pid= --ppid "$1"); do
		tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$c"
	done
}

# http_code BODY: POST /v1/completions, the status (body in $tmp/http.out)
http_code() {
	curl -s -o "$tmp/http.out" -w '%{http_code}' -m 30 -H 'Content-Type: application/json' \
		-d "$1" "http://$H/v1/completions"
}

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 256 --dtype f32 --seed 7 2>/dev/null && ok || bad "mkckpt"

start_coord "$tmp/ports" --admission-timeout-ms 1000
[ -n "$CL" ] && [ -n "$NODE" ] && [ -n "$H" ] && ok || { bad "coordinator did not start"; logs coord.log; }

# --- 1. the undisturbed run, on the tp 2 group ---
mpirun --oversubscribe -np 2 "$bin/shardline-node" --model "$tmp/m" --tp 2 --coordinator "$NODE" \
	--model-name tiny --heartbeat-ms $HB --min-step-ms 40 --max-running 16 >"$tmp/a.log" 2>&1 &
a_pid=$!; pids="$pids $a_pid"
timeout 60 "$itest" wait-groups "$CL" 1 50000 && ok || { bad "the tp 2 group did not register"; logs a.log; }
timeout 180 "$itest" streams "$CL" "$tmp/ref" $N $MAX >"$tmp/streams.out" 2>&1
counts "$tmp/streams.out" streams

if [ "$(grep -c ' ' "$tmp/ref" 2>/dev/null)" != $N ] || grep -q "lost" "$tmp/coord.log"; then
	bad "the undisturbed run was disturbed (a group lost, see coord.log): no reference"
	logs coord.log a.log
	echo "$pass passed, $fail failed"
	exit 1
fi

# --- 2. the same streams, rank 1 of the tp 2 group killed mid-stream ---
victim=$(rank_pid "$a_pid" 1)
[ -n "$victim" ] && ok || bad "no rank 1 under mpirun $a_pid"
timeout 240 "$itest" migrate "$CL" "${victim:-0}" "$tmp/ref" $N $MAX 2 >"$tmp/migrate.out" 2>&1 &
it_pid=$!
sleep ${MIG_SLEEP:-1} # the streams are on the tp 2 group before the other one registers
"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny --heartbeat-ms $HB \
	--min-step-ms 40 --max-running 16 >"$tmp/b.log" 2>&1 &
b_pid=$!; pids="$pids $b_pid"
wait $it_pid
counts "$tmp/migrate.out" migrate
grep -q "migrated mid-stream" "$tmp/coord.log" && ok || bad "the coordinator logged no migration"
wait "$a_pid" 2>/dev/null
curl -s "http://$H/metrics" | grep -qE '^shardline_migrated_total [1-9]' && ok ||
	bad "shardline_migrated_total: $(curl -s "http://$H/metrics" | grep migrated)"

# --- 3. the last group killed mid-stream: errors after the admission timeout ---
timeout 120 "$itest" unserved "$CL" 4 200 1000 "$b_pid" >"$tmp/unserved.out" 2>&1
counts "$tmp/unserved.out" unserved
code=$(http_code '{"model":"tiny","prompt":"Hello","max_tokens":4}')
[ "$code" = 503 ] && grep -q "no live node group" "$tmp/http.out" && ok ||
	bad "HTTP with no live group: status $code: $(cat "$tmp/http.out")"
kill -TERM "$coord_pid"; wait "$coord_pid"

# --- 4. --admission-timeout-ms 0: refused at once ---
start_coord "$tmp/ports0" --admission-timeout-ms 0
timeout 10 "$bin/shardline" --coordinator "$CL" generate --prompt "Hello" --max-tokens 4 \
	>/dev/null 2>"$tmp/gen.err"
rc=$?
[ $rc -ne 0 ] && grep -q "no live node group serves model tiny" "$tmp/gen.err" && ok ||
	bad "ZeroMQ with no live group (exit $rc): $(cat "$tmp/gen.err")"
code=$(http_code '{"model":"tiny","prompt":"Hello","max_tokens":4,"stream":true}')
[ "$code" = 503 ] && grep -q "no live node group" "$tmp/http.out" && ok ||
	bad "HTTP stream with no live group: status $code: $(cat "$tmp/http.out")"
kill -TERM "$coord_pid"; wait "$coord_pid"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
