#!/bin/sh
# The HTTP API over loopback (127.0.0.1, ports the coordinator picks):
# shardline-coordinator with --http-bind, a node group on a tiny random
# model (CPU backend) whose vocabulary is the test tokenizer's, and
# clients: the official `openai` package (openai_client.py), raw sockets
# (hostile.py), curl and promtool. In order:
#   curl -N shows server-sent events; the openai package: completions and
#   chat, streamed and not, stop strings, seeds, n, logprobs, penalties,
#   errors, 64 concurrent streaming chat clients == each alone;
#   hostile clients (bad JSON and fields, 10 MB bodies, invalid UTF-8,
#   junk, stalled requests, 1,000 idle connections, hang-ups cancel);
#   promtool check metrics; /health turns 503 within 3 heartbeats of the
#   group's SIGKILL and 200 again when a group registers; a second
#   coordinator without groups: API key (401), queue full (429 with
#   Retry-After), deadline (408); SIGTERM exits 0.
# When build/models/SmolLM2-135M-Instruct.Q4_1.gguf (or $SL_SMOLLM2_GGUF)
# exists and the node can load it, chat is also checked against it (the
# GGUF's own chat template, stop tokens; transformers' greedy answer), tool
# calling through the SDK (smol_tools.py), and the strict fields,
# logit_bias, min_tokens, stop_token_ids and echo (smol_api.py); else that
# part says it is skipped.
# Every process started here is killed on exit. Prints "N passed, N failed".
# VALGRIND=1 runs the coordinators under valgrind (memcheck errors fail).
# KEEP=DIR keeps the logs.
bin=${BIN:-build/bin}
py=${PYTHON:-python3}
tok=tests/data/llama2-small/tokenizer.json
here=tests/http
smol=${SL_SMOLLM2_GGUF:-build/models/SmolLM2-135M-Instruct.Q4_1.gguf}
HB=200
IDLE=2
HARNESS_GRACE=0.3 # seconds between SIGTERM and SIGKILL on exit
. tests/harness.sh
export OMP_NUM_THREADS=1

# pyrun NAME ARGS...: a Python client script; its counts are added
pyrun() {
	name=$1; shift
	out=$(timeout 600 "$py" "$@" 2>&1); rc=$?
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	printf '%s\n' "$out" | grep -E '^(FAIL|note)' | head -30
	if [ -z "$line" ]; then
		printf '%s\n' "$out" | tail -20
		bad "$name: no result (exit $rc)"; logs coord.log; return
	fi
	echo "http $name: $line"
	p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
	pass=$((pass + p)); fail=$((fail + f))
}

for m in openai tokenizers; do
	"$py" -c "import $m" 2>/dev/null || { bad "python module $m missing (make deps installs it)"; }
done
command -v promtool >/dev/null || bad "promtool missing (make deps installs Debian's prometheus)"
command -v curl >/dev/null || bad "curl missing (make deps installs it)"

wrap=""
[ "${VALGRIND:-0}" = 1 ] && wrap="valgrind -q --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite"
# start_coord LOG PORTS FLAGS...: a coordinator in the background
start_coord() {
	log=$1; ports=$2; shift 2
	rm -f "$ports"
	vg=""; [ -n "$wrap" ] && vg="$wrap --log-file=$tmp/valgrind-$log"
	# shellcheck disable=SC2086 # MODEL_ARGS is a flag list
	$vg "$bin/shardline-coordinator" ${MODEL_ARGS:---model-name tiny --tokenizer $tok} --heartbeat-ms $HB \
		--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' --http-bind 127.0.0.1:0 \
		--ports-file "$ports" "$@" >"$tmp/$log" 2>&1 &
	last_pid=$!; pids="$pids $last_pid"
	i=0; while [ ! -s "$ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
}
node_group() { # LOG: one single-process group in the background
	"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny \
		--heartbeat-ms $HB --min-step-ms 5 --max-running 64 --max-waiting 64 >"$tmp/$1" 2>&1 &
	node_pid=$!; pids="$pids $node_pid"
}
# health_is CODE SECONDS: poll /health until it answers CODE
health_is() {
	t_end=$(( $(date +%s) + $2 ))
	while [ "$(date +%s)" -le $t_end ]; do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$H/health")" = "$1" ] && return 0
		sleep 0.02
	done
	return 1
}

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 256 --dtype f32 --seed 7 2>/dev/null && ok || bad "mkckpt"

start_coord coord.log "$tmp/ports" --http-idle-timeout-s $IDLE --chat-template "$here/llama2-chat.jinja"
coord_pid=$last_pid
H=$(awk '/^http/{print $2}' "$tmp/ports" 2>/dev/null)
NODE=$(awk '/^node/{print $2}' "$tmp/ports" 2>/dev/null)
[ -n "$H" ] && [ -n "$NODE" ] && ok || { bad "coordinator did not start"; logs coord.log; }
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$H/health")" = 503 ] && ok || bad "/health 503 without a group"
node_group n1.log
health_is 200 60 && ok || { bad "/health 200 once a group registered"; logs coord.log n1.log; }

# --- curl -N: server-sent events as they come ---
curl -sN "http://$H/v1/completions" -H 'Content-Type: application/json' \
	-d '{"model":"tiny","prompt":"Hello","max_tokens":5,"stream":true}' >"$tmp/sse" 2>&1
n=$(grep -c '^data: {' "$tmp/sse")
[ "$n" -ge 2 ] && [ "$(grep -v '^$' "$tmp/sse" | tail -1)" = "data: [DONE]" ] && ok ||
	{ bad "curl -N: $n events"; head -5 "$tmp/sse"; }
grep -q '"finish_reason":"length"' "$tmp/sse" && ok || bad "curl -N: no finish_reason"

# --- the openai package ---
pyrun openai "$here/openai_client.py" "http://$H/v1" tiny "$tok" --chat llama2 --concurrent 64

# --- hostile clients ---
CL=$(awk '/^client/{print $2}' "$tmp/ports" 2>/dev/null)
pyrun hostile "$here/hostile.py" "$H" $IDLE 4194304 "$bin/shardline" "$CL"

# --- /metrics ---
curl -s "http://$H/metrics" >"$tmp/metrics"
if promtool check metrics <"$tmp/metrics" >"$tmp/promtool" 2>&1; then ok; else bad "promtool:"; head "$tmp/promtool"; fi
for m in 'shardline_requests_total{model="tiny",finish_reason="length"}' \
	'shardline_time_to_first_token_seconds_count{model="tiny"}' \
	'shardline_inter_token_latency_seconds_count{model="tiny"}' \
	'shardline_e2e_request_latency_seconds_count{model="tiny"}' \
	'shardline_generation_tokens_total{model="tiny"}' \
	'shardline_http_responses_total{endpoint="/v1/completions",code="400"}'; do
	v=$(grep -F "$m " "$tmp/metrics" | awk '{print $2}')
	[ -n "$v" ] && [ "${v%%.*}" -gt 0 ] && ok || bad "metric $m = '$v'"
done

# --- /health tells the truth: SIGKILL the group, then a new one ---
t0=$(date +%s%N)
kill -KILL "$node_pid"
health_is 503 10; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "http: /health said 503 $ms ms after the SIGKILL (heartbeat $HB ms)"
[ $rc -eq 0 ] && [ $ms -le $((3 * HB + 500)) ] && ok ||
	bad "/health 503 within 3 heartbeats (+0.5 s slack) of the SIGKILL: $ms ms"
curl -s "http://$H/health" | grep -q '"reason":"model tiny has no live node group"' && ok || bad "/health reason"
node_group n2.log
health_is 200 60 && ok || { bad "/health 200 again after a group registered"; logs n2.log; }

# --- a second coordinator, no group: API key, queue full, deadline ---
printf 'sk-test-%s\n' "$$" >"$tmp/key"
key=$(cat "$tmp/key")
start_coord coord2.log "$tmp/ports2" --api-key-file "$tmp/key" --max-queue 1 --request-timeout-ms 1500
coord2_pid=$last_pid
H2=$(awk '/^http/{print $2}' "$tmp/ports2" 2>/dev/null)
code() { curl -s -o "$tmp/body" -D "$tmp/hdr" -w '%{http_code}' "$@"; }
[ "$(code "http://$H2/health")" = 503 ] && ok || bad "no key: /health answers (503 without groups)"
[ "$(code "http://$H2/v1/models")" = 401 ] && grep -q invalid_api_key "$tmp/body" && ok || bad "no key: 401"
[ "$(code -H "Authorization: Bearer wrong" "http://$H2/v1/models")" = 401 ] && ok || bad "wrong key: 401"
[ "$(code -H "Authorization: Bearer $key" "http://$H2/v1/models")" = 200 ] && ok || bad "right key: 200"
curl -s -o "$tmp/queued" -w '%{http_code}' -H "Authorization: Bearer $key" "http://$H2/v1/completions" \
	-H 'Content-Type: application/json' -d '{"prompt":"waits","max_tokens":2}' >"$tmp/queued.code" &
qpid=$!
sleep 0.5
c=$(code -H "Authorization: Bearer $key" -H 'Content-Type: application/json' "http://$H2/v1/completions" -d '{"prompt":"one too many"}')
[ "$c" = 429 ] && grep -qi '^retry-after:' "$tmp/hdr" && ok || bad "queue full: want 429 + Retry-After, got $c"
wait $qpid
[ "$(cat "$tmp/queued.code")" = 408 ] && grep -q '"type":"timeout"' "$tmp/queued" && ok ||
	bad "deadline: want 408, got $(cat "$tmp/queued.code") $(cat "$tmp/queued")"

# --- a chat template the renderer refuses stops the start, naming line:col ---
printf 'Hi\n{%% macro m() %%}x{%% endmacro %%}{{ m() }}\n' >"$tmp/bad.jinja"
timeout 30 "$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --chat-template "$tmp/bad.jinja" \
	--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' --http-bind 127.0.0.1:0 \
	>"$tmp/bad.log" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "bad.jinja:2:" "$tmp/bad.log" && ok || bad "refused template (exit $rc): $(tail -2 "$tmp/bad.log")"

# --- SmolLM2: the real model's own chat template, BOS/EOS and stop tokens ---
if [ -f "$smol" ] && [ -n "$wrap" ]; then
	echo "http: SmolLM2 chat skipped under valgrind (the plain run has it)"
elif [ -f "$smol" ] && ! OMP_NUM_THREADS=2 timeout 120 "$bin/shardline-node" --model "$smol" --device cpu \
	--prompt-ids 1 --max-tokens 1 >"$tmp/smol-probe.log" 2>&1; then
	echo "http: SmolLM2 chat skipped: this shardline-node cannot run $smol ($(tail -1 "$tmp/smol-probe.log"))"
elif [ -f "$smol" ]; then
	# a 135M model's CPU steps on a busy 2-core box can outlast 3 x 200 ms
	MODEL_ARGS="--model-name smol --tokenizer $smol" start_coord coord3.log "$tmp/ports3" --heartbeat-ms 5000
	coord3_pid=$last_pid
	H3=$(awk '/^http/{print $2}' "$tmp/ports3" 2>/dev/null)
	"$bin/shardline-node" --model "$smol" --device cpu --coordinator "$(awk '/^node/{print $2}' "$tmp/ports3")" \
		--model-name smol --heartbeat-ms 5000 >"$tmp/smol.log" 2>&1 &
	pids="$pids $!"
	t_end=$(( $(date +%s) + 120 ))
	until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$H3/health")" = 200 ] || [ "$(date +%s)" -gt $t_end ]; do
		sleep 0.2
	done
	text="$(printf '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n.')"
	text=${text%.} # $(...) would drop the final newline
	n=$("$bin/shardline-tok" "$smol" encode --no-special "$text" | wc -w)
	pyrun smollm2 "$here/smol_chat.py" "http://$H3/v1" smol "$n"
	pyrun smollm2-tools "$here/smol_tools.py" "http://$H3/v1" smol
	pyrun smol-api "$here/smol_api.py" "http://$H3/v1" smol
	kill -TERM "$coord3_pid"; wait "$coord3_pid"
else
	echo "http: SmolLM2 chat skipped: $smol is not here (make deps fetches it where the GGUF loader is)"
fi

# --- clean stop: a stream still running hears why it ends ---
curl -sN "http://$H/v1/completions" -H 'Content-Type: application/json' -d '{"prompt":"long","max_tokens":200,"ignore_eos":true,"stream":true}' \
	>"$tmp/cut" 2>&1 &
cpid=$!
i=0; while ! grep -qs '^data: {' "$tmp/cut" && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
for p in $coord_pid $coord2_pid; do
	kill -TERM "$p"
	wait "$p"; rc=$?
	[ $rc -eq 0 ] && ok || { bad "coordinator exit $rc on SIGTERM"; logs coord.log coord2.log; }
done
wait $cpid
grep -q '"error":{"message":"coordinator shutting down"' "$tmp/cut" && tail -2 "$tmp/cut" | grep -q '\[DONE\]' &&
	ok || { bad "a stream cut by SIGTERM: $(tail -c 300 "$tmp/cut")"; }
if [ -n "$wrap" ]; then
	for f in "$tmp"/valgrind-*; do
		[ ! -s "$f" ] && ok || { bad "valgrind ($f):"; head -60 "$f"; }
	done
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
