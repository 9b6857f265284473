#!/bin/sh
# Serving integration tests over loopback (127.0.0.1, ports chosen by the
# coordinator): shardline-coordinator, node groups (one process, and
# `mpirun -np 2` with tp 2, CPU backend), and clients (itest.c, the
# shardline CLI) on a tiny random model whose vocabulary is the test
# tokenizer's. In order:
#   64 concurrent greedy clients == local single-sequence runs;
#   cancel mid-stream frees the slot and KV blocks; stop strings,
#   stream=false, EOS; hostile clients get clear errors while others are
#   served; penalties, min_p and log-probs equal the local run; drain; the CLI through the mpirun group; a node rank SIGKILLed
#   mid-request (errors within 3 heartbeats, re-queued work done by the
#   other group); a coordinator killed and restarted is found again; past
#   the queue bound requests get "overloaded"; a clean stop; then, on a
#   fresh coordinator with two prefix-caching groups (pp 2 and tp 2), the
#   turns of a conversation stay on the group that caches it, reuse
#   exactly its blocks and equal the local run, and move when it is busy.
# Every process started here is killed on exit. Prints "N passed, N failed".
# VALGRIND=1 runs the coordinator under valgrind (slow; memcheck errors fail).
# VERBOSE=1 shows what each client scenario saw; KEEP=DIR keeps the logs.
bin=${BIN:-build/bin}
itest=${ITEST:-build/tests/integration/itest}
tok=tests/data/llama2-small/tokenizer.json
HB=200
HARNESS_GRACE=0.3 # seconds between SIGTERM and SIGKILL on exit
. tests/harness.sh
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	OMPI_MCA_rmaps_base_oversubscribe=1

# itest NAME ARGS...: run a client scenario, add its counts
itest() {
	out=$(timeout 180 "$itest" "$@" 2>&1); rc=$?
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	if [ "${VERBOSE:-0}" = 1 ]; then printf '%s\n' "$out" | grep -E '^(FAIL|itest)' | head -60
	else printf '%s\n' "$out" | grep -E '^FAIL' | head -20; fi
	if [ -z "$line" ]; then
		printf '%s\n' "$out" | tail -20
		bad "itest $1: no result (exit $rc)"; logs coord.log; return
	fi
	echo "itest $1: $line"
	p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
	pass=$((pass + p)); fail=$((fail + f))
	[ "$f" -eq 0 ] || logs coord.log
}

start_coord() { # [client endpoint] [node endpoint] [more flags]
	rm -f "$tmp/ports"
	wrap=""
	[ "${VALGRIND:-0}" = 1 ] && wrap="valgrind -q --error-exitcode=9 --leak-check=full --log-file=$tmp/valgrind.log"
	$wrap "$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --heartbeat-ms $HB \
		--client-bind "${1:-tcp://127.0.0.1:*}" --node-bind "${2:-tcp://127.0.0.1:*}" \
		--http-bind 127.0.0.1:0 --ports-file "$tmp/ports" --request-timeout-ms 60000 $3 \
		>>"$tmp/coord.log" 2>&1 &
	coord_pid=$!; pids="$pids $coord_pid"
	i=0; while [ ! -s "$tmp/ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	CL=$(awk '/^client/{print $2}' "$tmp/ports" 2>/dev/null)
	NODE=$(awk '/^node/{print $2}' "$tmp/ports" 2>/dev/null)
}

node_group() { # LOG ARGS...: one single-process group in the background
	log=$1; shift
	"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny \
		--heartbeat-ms $HB "$@" >"$tmp/$log" 2>&1 &
	pids="$pids $!"
}

# rank R's pid of the mpirun with pid P
rank_pid() {
	for c in $(ps -o pid= --ppid "$1"); do
		tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$c"
	done
}

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 256 --dtype f32 --seed 7 2>/dev/null && ok || bad "mkckpt"

start_coord
[ -n "$CL" ] && [ -n "$NODE" ] && ok || { bad "coordinator did not start"; logs coord.log; }
node_group s1.log --min-step-ms 5 --max-running 64 --max-waiting 64
timeout 30 "$itest" wait-groups "$CL" 1 20000 && ok || { bad "group 1 did not register"; logs coord.log s1.log; }

# --- 64 concurrent clients against local single-sequence runs ---
: >"$tmp/prompts"; : >"$tmp/expected"
i=0
while [ $i -lt 64 ]; do
	case $((i % 4)) in
	0) p="Request $i: the quick brown fox jumps over the lazy dog" ;;
	1) p="Résumé $i — naïve café, 日本語のテキスト, emoji 🙂 ok" ;;
	2) p="$i" ;;
	3) p="Once upon a time, number $i said: \"hello, world\"" ;;
	esac
	printf '%s\n' "$p" >>"$tmp/prompts"
	ids=$("$bin/shardline-tok" "$tok" encode --split-special "$p" | tr ' ' ',')
	"$bin/shardline-node" --model "$tmp/m" --prompt-ids "$ids" --max-tokens 16 2>/dev/null >>"$tmp/expected"
	i=$((i + 1))
done
itest concurrent "$CL" "$tmp/prompts" "$tmp/expected" 16

# --- cancel, stop strings, stream=false, EOS ---
itest features "$CL"

# --- hostile clients ---
itest hostile "$CL"

# --- penalties, min_p and log-probs through the coordinator == the local run ---
lp_ids=$("$bin/shardline-tok" "$tok" encode --split-special "Once upon a time" | tr ' ' ',')
"$bin/shardline-node" --model "$tmp/m" --prompt-ids "$lp_ids" --max-tokens 24 --ignore-eos \
	--temperature 0.8 --seed 5 --min-p 0.05 --presence-penalty 0.5 --frequency-penalty 0.3 \
	--repetition-penalty 1.3 --logprobs 5 2>/dev/null >"$tmp/lp_expected"
itest logprobs "$CL" "$lp_ids" "$tmp/lp_expected"

# --- drain: group 1 leaves cleanly; two paced groups for what follows ---
s1_pid=$(echo $pids | awk '{print $NF}')
mpirun --oversubscribe -np 2 "$bin/shardline-node" --model "$tmp/m" --tp 2 --coordinator "$NODE" \
	--model-name tiny --heartbeat-ms $HB --min-step-ms 20 --max-running 2 --max-waiting 8 \
	>"$tmp/m1.log" 2>&1 &
m1_pid=$!; pids="$pids $m1_pid"
node_group s2.log --min-step-ms 20 --max-running 2 --max-waiting 8
timeout 60 "$itest" wait-groups "$CL" 3 50000 && ok || { bad "groups 2, 3 did not register"; logs m1.log s2.log; }
timeout 10 "$bin/shardline" --coordinator "$CL" drain --group 1 --exit >/dev/null && ok || bad "drain"
i=0; while kill -0 "$s1_pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
wait "$s1_pid"; rc=$?
[ $rc -eq 0 ] && grep -q "drained; leaving" "$tmp/s1.log" && ok || { bad "drained group exit $rc"; logs s1.log; }

# --- the CLI, and the mpirun group in the status ---
timeout 10 "$bin/shardline" --coordinator "$CL" status >"$tmp/status" 2>&1
grep -q "2 x 1" "$tmp/status" && grep -q "1 x 1" "$tmp/status" && ok || { bad "status: $(cat "$tmp/status")"; }
timeout 60 "$bin/shardline" --coordinator "$CL" generate --prompt "Hello, world" --max-tokens 12 \
	--print-ids >"$tmp/gen.out" 2>"$tmp/gen.err"
rc=$?
[ $rc -eq 0 ] && grep -q '^\[length' "$tmp/gen.err" && [ "$(grep '^ids:' "$tmp/gen.err" | wc -w)" -eq 13 ] && ok ||
	bad "shardline generate (exit $rc): $(cat "$tmp/gen.err")"
timeout 60 "$bin/shardline" --coordinator "$CL" generate --prompt "Hello" --max-tokens 4 \
	--repetition-penalty 1.2 --min-p 0.1 --logprobs 2 --print-ids >/dev/null 2>"$tmp/gen.err"
[ $? -eq 0 ] && [ "$(grep -c '^lp: [0-9]* -[0-9.]* [0-9]*:-[0-9.]* [0-9]*:-[0-9.]*$' "$tmp/gen.err")" -eq 4 ] && ok ||
	bad "shardline generate --logprobs 2: $(cat "$tmp/gen.err")"
# logit_bias, min_tokens and stop_token_ids through the native protocol
timeout 60 "$bin/shardline" --coordinator "$CL" generate --prompt "Hello" --max-tokens 4 --ignore-eos \
	--logit-bias 77=100 --logit-bias 5=-3 --print-ids >/dev/null 2>"$tmp/gen.err"
[ $? -eq 0 ] && grep -qx 'ids: 77 77 77 77' "$tmp/gen.err" && ok ||
	bad "shardline generate --logit-bias 77=100: $(cat "$tmp/gen.err")"
timeout 60 "$bin/shardline" --coordinator "$CL" generate --prompt "Hello" --max-tokens 10 \
	--logit-bias 77=100 --min-tokens 3 --stop-token-id 77 --print-ids >/dev/null 2>"$tmp/gen.err"
[ $? -eq 0 ] && grep -q '^\[stop' "$tmp/gen.err" && grep -Eqx 'ids: [0-9]+ [0-9]+ [0-9]+ 77' "$tmp/gen.err" &&
	! grep -Eq '^ids: .*77 .*77' "$tmp/gen.err" && ok ||
	bad "shardline generate --min-tokens 3 --stop-token-id 77: $(cat "$tmp/gen.err")"
timeout 10 "$bin/shardline" --coordinator "$CL" generate --prompt "x" --logit-bias 999999=1 >/dev/null 2>"$tmp/gen.err"
[ $? -ne 0 ] && grep -q "logit_bias" "$tmp/gen.err" && ok || bad "CLI logit_bias id check: $(cat "$tmp/gen.err")"
timeout 10 "$bin/shardline" --coordinator "$CL" generate --prompt "x" --top-p 1.5 >/dev/null 2>"$tmp/gen.err"
[ $? -ne 0 ] && grep -q "top-p" "$tmp/gen.err" && ok || bad "CLI top-p check: $(cat "$tmp/gen.err")"
timeout 10 "$bin/shardline" --coordinator "$CL" generate --prompt "x" --model nope >/dev/null 2>"$tmp/gen.err"
[ $? -ne 0 ] && grep -q "unknown model" "$tmp/gen.err" && ok || bad "CLI unknown model: $(cat "$tmp/gen.err")"

# --- a node rank SIGKILLed mid-request ---
victim=$(rank_pid "$m1_pid" 1)
if [ -n "$victim" ]; then
	ok
	itest kill "$CL" "$victim" $HB
else
	bad "no rank 1 under mpirun $m1_pid"
fi

# --- the coordinator killed and restarted on the same ports: groups come back ---
kill -KILL "$coord_pid"; wait "$coord_pid" 2>/dev/null
old_cl=$CL; old_node=$NODE
start_coord "$old_cl" "$old_node" "--max-queue 2"
[ "$CL" = "$old_cl" ] && ok || bad "restarted coordinator on $CL, not $old_cl"
t0=$(date +%s)
timeout 30 "$itest" wait-groups "$CL" 1 20000 && ok || { bad "group not found again after a restart"; logs coord.log s2.log; }
echo "serve: group re-registered $(( $(date +%s) - t0 )) s after the restart"
timeout 60 "$bin/shardline" --coordinator "$CL" generate --prompt "After the restart" --max-tokens 8 \
	>/dev/null 2>"$tmp/gen.err" && ok || bad "generate after the restart: $(cat "$tmp/gen.err")"

# --- past the queue bound: group 2 holds 2 running + 8 waiting, the queue 2 ---
itest overload "$CL" 16 8

# --- clean stop: drain --exit, then SIGTERM the coordinator ---
timeout 10 "$bin/shardline" --coordinator "$CL" drain --exit >/dev/null 2>&1
s2_pid=$(echo $pids | awk '{print $(NF-1)}')
kill -TERM "$coord_pid"
wait "$coord_pid"; rc=$?
[ $rc -eq 0 ] && ok || { bad "coordinator exit $rc on SIGTERM"; logs coord.log; }
if [ "${VALGRIND:-0}" = 1 ]; then
	[ ! -s "$tmp/valgrind.log" ] && ok || { bad "valgrind:"; cat "$tmp/valgrind.log"; }
fi

# --- prefix caching and prefix-aware routing: two groups, one conversation ---
# turn k = turn k-1's prompt + its answer (the local run's) + a question
bt=16
sys_ids=$(i=0; while [ $i -lt 40 ]; do printf '%d,' $((3 + (i * 37) % 1990)); i=$((i + 1)); done)
: >"$tmp/turns"; : >"$tmp/answers"
conv=${sys_ids%,}
k=1
while [ $k -le 6 ]; do
	q=$(i=0; while [ $i -lt 6 ]; do printf ',%d' $((5 + (k * 101 + i * 13) % 1990)); i=$((i + 1)); done)
	conv="$conv$q"
	printf '%s\n' "$conv" >>"$tmp/turns"
	ans=$("$bin/shardline-node" --model "$tmp/m" --prompt-ids "$conv" --max-tokens 16 --ignore-eos \
		--block-tokens $bt 2>/dev/null)
	printf '%s\n' "$ans" >>"$tmp/answers"
	[ $k -eq 4 ] && long="$conv,$(echo "$ans" | tr ' ' ','),7,8,9,10,11,12"
	conv="$conv,$(echo "$ans" | tr ' ' ',')"
	k=$((k + 1))
done
# No process is killed here: a slower heartbeat keeps a loaded machine
# (4 ranks on 2 cores) from losing a group in the middle of the conversation.
HB=1000
start_coord
mpirun --oversubscribe -np 2 "$bin/shardline-node" --model "$tmp/m" --pp 2 --coordinator "$NODE" \
	--model-name tiny --heartbeat-ms $HB --min-step-ms 10 --max-running 2 --max-waiting 8 \
	--block-tokens $bt >"$tmp/p1.log" 2>&1 &
pids="$pids $!"
timeout 60 "$itest" wait-groups "$CL" 1 50000 || { bad "the pp 2 group did not register"; logs p1.log; }
mpirun --oversubscribe -np 2 "$bin/shardline-node" --model "$tmp/m" --tp 2 --coordinator "$NODE" \
	--model-name tiny --heartbeat-ms $HB --min-step-ms 10 --max-running 2 --max-waiting 8 \
	--block-tokens $bt >"$tmp/p2.log" 2>&1 &
pids="$pids $!"
timeout 60 "$itest" wait-groups "$CL" 2 50000 && ok || { bad "the tp 2 group did not register"; logs p2.log; }
itest prefix "$CL" "$tmp/turns" "$tmp/answers" "$long" $bt
timeout 10 "$bin/shardline" --coordinator "$CL" status >"$tmp/status" 2>&1
grep -qE ' [0-9]+\.[0-9]%' "$tmp/status" && ok || bad "status shows no prefix cache: $(cat "$tmp/status")"
timeout 10 "$bin/shardline" --coordinator "$CL" drain --exit >/dev/null 2>&1
kill -TERM "$coord_pid"
wait "$coord_pid"; rc=$?
[ $rc -eq 0 ] && ok || { bad "coordinator exit $rc on SIGTERM"; logs coord.log; }

if [ "${VALGRIND:-0}" = 1 ]; then
	[ ! -s "$tmp/valgrind.log" ] && ok || { bad "valgrind:"; cat "$tmp/valgrind.log"; }
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
