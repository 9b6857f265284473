#!/bin/sh
# `shardline serve MODEL` (tools/serve.c), on SmolLM2 ($SL_SMOLLM2_GGUF):
#   - a model path that does not exist, and a --tp that does not divide the
#     heads, are refused with messages naming them;
#   - with its defaults (CPU: pp 2) it prints a ready URL, /health is 200,
#     a chat request (the GGUF's chat template) answers, SIGTERM drains and
#     stops everything: exit 0 and no process of its tree left;
#   - killed with SIGKILL, its coordinator, mpirun and ranks still go
#     (PR_SET_PDEATHSIG), within 20 s.
# Ends with "N passed, N failed"; skips (exit 0, says why) without SmolLM2.
set -u
bin=${BIN:-build/bin}
model=${SL_SMOLLM2_GGUF:-build/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "skipped: no SmolLM2 at $model (make deps fetches it)"; exit 0; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
passed=0; failed=0; serve_pid=""
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
cleanup() {
	[ -n "$serve_pid" ] && kill -TERM "$serve_pid" 2>/dev/null && sleep 2 && kill -KILL "$serve_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

out=$("$bin/shardline" serve "$tmp/nothing.gguf" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "$tmp/nothing.gguf: No such file" && ok "a missing model is named" ||
	bad "missing model: exit $rc: $out"
out=$("$bin/shardline" serve "$model" --tp 2 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q -- "--tp 2 does not divide .* 9 heads" && ok "--tp 2 refused: 9 heads" ||
	bad "--tp 2: exit $rc: $out"

# Every process below pid (children, theirs...), one per line.
tree() {
	for c in $(ps -o pid= --ppid "$1"); do echo "$c"; tree "$c"; done
}
# Starts serve on ephemeral loopback ports; waits for its ready line. The
# last start's output goes first: the background job truncates it only once
# it runs, and a stale ready line would end the wait before serve has forked.
start() {
	rm -f "$tmp/out" "$tmp/log" "$tmp/ports"
	"$bin/shardline" serve "$model" --model-name smol --http-bind 127.0.0.1:0 \
		--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' \
		--ports-file "$tmp/ports" >"$tmp/out" 2>"$tmp/log" &
	serve_pid=$!
	i=0; until grep -q 'ready: http://' "$tmp/out" 2>/dev/null; do
		i=$((i + 1)); [ $i -gt 600 ] || ! kill -0 $serve_pid 2>/dev/null && return 1; sleep 0.2
	done
}
# "PID ARGS" of those of PIDS still running, or a line saying there were none.
running() { [ -n "$*" ] && ps -o pid=,args= -p "$(echo $* | tr ' ' ,)" | head -3 || echo "none: no process of its tree was found"; }
gone() { # PIDS: wait at most 20 s for all of them to end
	i=0; for p in "$@"; do while kill -0 "$p" 2>/dev/null && [ $i -lt 200 ]; do i=$((i + 1)); sleep 0.1; done; done
	for p in "$@"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0
}

if start; then
	url=$(sed -n 's/.*ready: \(http[^ ]*\) .*/\1/p' "$tmp/out")
	ok "ready: $url ($(grep -o 'tp 1 x pp 2 (CPU)' "$tmp/log"))"
	base=${url%/v1}
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] && ok "/health 200" || bad "/health not 200"
	ans=$(curl -s "$url/chat/completions" -H 'Content-Type: application/json' \
		-d '{"model":"smol","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16}')
	echo "$ans" | grep -q '"content":"[^"]*Paris' && ok "a chat answer through the GGUF's template mentions Paris" ||
		bad "chat: $ans"
	kids=$(tree $serve_pid | tr '\n' ' ')
	kill -TERM $serve_pid
	wait $serve_pid; rc=$?; serve_pid=""
	[ $rc -eq 0 ] && grep -q "left after draining" "$tmp/log" && ok "SIGTERM: drained, exit 0" ||
		{ bad "SIGTERM: exit $rc"; tail -5 "$tmp/log"; }
	[ -n "$kids" ] && gone $kids && ok "no process left (${kids% })" || bad "left running: $(running $kids)"
else
	bad "serve was not ready"; tail -10 "$tmp/log"
fi

if start; then
	kids=$(tree $serve_pid | tr '\n' ' ')
	kill -KILL $serve_pid
	wait $serve_pid 2>/dev/null; serve_pid=""
	[ -n "$kids" ] && gone $kids && ok "SIGKILL to serve: its $(echo $kids | wc -w) processes went too" ||
		bad "after SIGKILL, left running: $(running $kids)"
else
	bad "serve was not ready (second start)"; tail -10 "$tmp/log"
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
