#!/bin/sh
# logit_bias, min_tokens and stop_token_ids end to end on the CUDA backend
# (make test-gpu; GPU host only): `shardline serve` SmolLM2
# ($SL_SMOLLM2_GGUF) on the GPU, tp 1, then pp 2 when the host has 2+ GPUs
# (9 heads: no tp 2), and `shardline generate` through the native
# protocol:
#   - +100 on a token makes every token that one, greedy and at T = 1;
#   - -100 on the greedy first token changes the first token;
#   - a stop id that a +100 bias makes certain, held back by min_tokens 3,
#     ends the output as its 4th token, finish stop;
#   - an unbiased greedy request gives the same ids alone and batched with
#     a biased one (the bias rows touch only their own row; the batch
#     leaves the all-greedy argmax path for the full sampler);
#   - every grid gives the same ids as tp 1 for these requests.
# The kernel itself is checked against the CPU by test_kernels'
# sampling_bias case. Prints "N passed, N failed"; skips without SmolLM2
# or a GPU.
set -u
bin=${BIN:-build/bin}
model=${SL_SMOLLM2_GGUF:-build/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "skipped: no SmolLM2 at $model"; echo "0 passed, 0 failed"; exit 0; }
# SL_TEST_DEVICE=cpu runs the same checks on the CPU backend (one grid)
device=${SL_TEST_DEVICE:-cuda}
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$device" = cpu ] && gpus=1
[ "$gpus" -ge 1 ] || { echo "skipped: no GPU"; echo "0 passed, 0 failed"; exit 0; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
tmp=$(mktemp -d)
pass=0; fail=0; serve_pid=""
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
cleanup() {
	[ -n "$serve_pid" ] && kill -TERM "$serve_pid" 2>/dev/null && sleep 3 && kill -KILL "$serve_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# start PP: serve on the GPU with pp PP, ephemeral loopback ports
start() {
	rm -f "$tmp/ports" "$tmp/out"
	"$bin/shardline" serve "$model" --model-name smol --device "$device" --tp 1 --pp "$1" \
		--http-bind 127.0.0.1:0 --client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' \
		--ports-file "$tmp/ports" >"$tmp/out" 2>"$tmp/log" &
	serve_pid=$!
	i=0; until grep -q 'ready' "$tmp/out" 2>/dev/null; do
		i=$((i + 1)); { [ $i -gt 1500 ] || ! kill -0 $serve_pid 2>/dev/null; } && return 1; sleep 0.2
	done
	CL=$(awk '/^client/{print $2}' "$tmp/ports")
}
stop() { kill -TERM "$serve_pid"; wait "$serve_pid"; serve_pid=""; }
# gen NAME ARGS...: the ids line and the summary of one request, in $tmp/NAME
gen() {
	name=$1; shift
	timeout 120 "$bin/shardline" --coordinator "$CL" generate --prompt "The capital of France is" \
		--print-ids "$@" >/dev/null 2>"$tmp/$name.err"
	echo "$(grep '^ids:' "$tmp/$name.err") $(grep -o '^\[[a-z]*' "$tmp/$name.err")" >"$tmp/$name"
}
ids() { sed 's/^ids: //; s/ \[.*//' "$tmp/$1"; }

run_grid() { # PP: the requests on one grid; results under $tmp/PP-*
	pp=$1
	if ! start "$pp"; then bad "pp $pp: serve was not ready: $(tail -3 "$tmp/log")"; return; fi
	gen "$pp-plain" --max-tokens 8 --ignore-eos
	first=$(ids "$pp-plain" | cut -d' ' -f1)
	gen "$pp-force" --max-tokens 4 --ignore-eos --logit-bias 4649=100
	gen "$pp-force-t1" --max-tokens 4 --ignore-eos --logit-bias 4649=100 --temperature 1 --seed 5
	gen "$pp-ban" --max-tokens 4 --ignore-eos --logit-bias "$first=-100"
	gen "$pp-stop" --max-tokens 10 --logit-bias 4649=100 --min-tokens 3 --stop-token-id 4649
	# the plain request batched with biased ones
	gen "$pp-mixed-a" --max-tokens 8 --ignore-eos --logit-bias 4649=100 --temperature 0.8 --seed 9 &
	a=$!
	gen "$pp-mixed" --max-tokens 8 --ignore-eos
	wait $a
	stop
	[ "$(cat "$tmp/$pp-force")" = "ids: 4649 4649 4649 4649 [length" ] && ok || bad "pp $pp +100: $(cat "$tmp/$pp-force")"
	[ "$(cat "$tmp/$pp-force-t1")" = "ids: 4649 4649 4649 4649 [length" ] && ok || bad "pp $pp +100 at T 1: $(cat "$tmp/$pp-force-t1")"
	[ -n "$first" ] && [ "$(ids "$pp-ban" | cut -d' ' -f1)" != "$first" ] && ok ||
		bad "pp $pp -100 on $first: $(cat "$tmp/$pp-ban") (plain: $(cat "$tmp/$pp-plain"))"
	echo "$(cat "$tmp/$pp-stop")" | grep -Eqx 'ids: [0-9]+ [0-9]+ [0-9]+ 4649 \[stop' &&
		! ids "$pp-stop" | cut -d' ' -f1-3 | grep -qw 4649 && ok || bad "pp $pp min_tokens 3 + stop id: $(cat "$tmp/$pp-stop")"
	[ "$(cat "$tmp/$pp-mixed")" = "$(cat "$tmp/$pp-plain")" ] && ok ||
		bad "pp $pp: plain batched with a biased request $(cat "$tmp/$pp-mixed"), alone $(cat "$tmp/$pp-plain")"
	echo "$device pp $pp: plain $(cat "$tmp/$pp-plain"); -100 on $first: $(cat "$tmp/$pp-ban"); stop: $(cat "$tmp/$pp-stop")"
}

run_grid 1
if [ "$gpus" -ge 2 ] && [ "$device" = cuda ]; then
	run_grid 2
	for r in plain force force-t1 ban stop mixed; do
		[ "$(cat "$tmp/2-$r")" = "$(cat "$tmp/1-$r")" ] && ok || bad "pp 2 $r: $(cat "$tmp/2-$r"), pp 1: $(cat "$tmp/1-$r")"
	done
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
