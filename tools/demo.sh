#!/bin/sh
# make demo: the main job, end to end on the CPU backend, started the way an
# operator starts it: `shardline serve MODEL` (tools/serve.c) runs the
# coordinator and one node group, prints the URL when ready, and stops both
# cleanly on SIGTERM.
#
# DEMO=smollm2 (the default): SmolLM2-135M-Instruct, the Q4_1 GGUF that
# `make deps` fetches ($SMOLLM2), answers a chat question in English:
#   shardline serve THE.gguf --pp 2     (the GGUF's tokenizer and chat template,
#                                        EOS <|im_end|>; mpirun -np 2 shardline-node)
#   tools/chat.py QUESTION              (OpenAI chat API, streamed, greedy)
# pp 2 because tp must divide SmolLM2's 9 heads (so tp 3, three ranks on two
# cores).  DEMO_TP/DEMO_PP choose another grid.
#
# DEMO=tiny: offline, no download. Makes (once) a small random Llama under
# $TINY_MODEL whose vocabulary is the bundled test tokenizer's, serves it
# at tp 2 and streams a completion through the `shardline` CLI (ZeroMQ).
# Random weights: the text is gibberish.
#
# Both then show `shardline status` and stop everything with SIGTERM to
# `shardline serve`: the group drains and leaves, then the coordinator stops.
# Exit 0 when all of that worked. Overrides: DEMO_QUESTION, DEMO_MAX_TOKENS,
# DEMO_TP and DEMO_PP (the grid; mpirun -np TP*PP), DEMO_DEVICE (cpu),
# BIN (build/bin).
set -eu
bin=${BIN:-build/bin}
demo=${DEMO:-smollm2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} # one thread per rank: ranks = cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
serve_pid=""

say() { echo "demo: $*" >&2; }
cleanup() { # serve drains, then stops its children; they die with it at worst
	if [ -n "$serve_pid" ]; then
		kill -TERM "$serve_pid" 2>/dev/null || true
		i=0; while kill -0 "$serve_pid" 2>/dev/null && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.2; done
		kill -KILL "$serve_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
	say "$*"
	[ -f "$tmp/serve.log" ] && { echo "--- serve.log" >&2; tail -20 "$tmp/serve.log" >&2; }
	exit 1
}

case $demo in
smollm2)
	model=${SMOLLM2:-build/models/SmolLM2-135M-Instruct.Q4_1.gguf}
	if [ ! -f "$model" ]; then
		say "$model is missing: run \`make deps\` (it fetches SmolLM2, 98 MB),"
		say "or, offline: \`make demo DEMO=tiny\` (a small random model: gibberish)"
		exit 1
	fi
	name=smollm2; tp=${DEMO_TP:-1}; pp=${DEMO_PP:-2}
	# 1024 KV blocks would zero 720 MB for one short chat; 4096 tokens do
	node_extra="--kv-blocks 256"
	what="SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to fp32 at load)"
	;;
tiny)
	model=${TINY_MODEL:-build/demo-model}
	tok=tests/data/llama2-small/tokenizer.json
	# the model and its tokenizer, once (an older demo model without one is replaced)
	if [ ! -f "$model/model.safetensors" ] || [ ! -f "$model/tokenizer.json" ]; then
		say "making a small random Llama under $model"
		vocab=$("$bin/shardline-tok" "$tok" info | awk '/^vocab_size/{print $2}')
		"$bin/shardline-mkckpt" --out "$model" --dim 256 --hidden 688 --layers 4 --heads 8 \
			--kv-heads 4 --vocab "$vocab" --max-pos 2048 --dtype bf16 --seed 1
		cp "$tok" "$model/tokenizer.json"
	fi
	name=demo; tp=${DEMO_TP:-2}; pp=${DEMO_PP:-1}; node_extra=""
	what="a small random Llama (4 layers, random weights: the text is gibberish)"
	;;
*)
	echo "demo: DEMO=$demo: expected smollm2 (the default) or tiny" >&2
	exit 1
	;;
esac
device=${DEMO_DEVICE:-cpu}
np=$((tp * pp)); grid="--tp $tp --pp $pp"

say "$bin/shardline serve $model --model-name $name --tp $tp --pp $pp --device $device${node_extra:+ --node-opts '$node_extra'}"
say "loading $what; its log follows"
"$bin/shardline" serve "$model" --model-name "$name" --tp "$tp" --pp "$pp" --device "$device" \
	--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' --http-bind 127.0.0.1:0 \
	--ports-file "$tmp/ports" --node-opts "$node_extra" >"$tmp/serve.out" 2>"$tmp/serve.log" &
serve_pid=$!
# Until it says ready (the group registered, /health 200): its log as it
# comes, and a word every 5 s.
shown=0; i=0
until grep -q 'ready: ' "$tmp/serve.out"; do
	n=$(wc -l <"$tmp/serve.log")
	if [ "$n" -gt "$shown" ]; then
		sed -n "$((shown + 1)),${n}p" "$tmp/serve.log" | sed 's/^/  | /' >&2
		shown=$n
	fi
	i=$((i + 1))
	[ $((i % 10)) -eq 0 ] && say "still starting ($((i / 2)) s)"
	[ $i -gt 240 ] && fail "shardline serve was not ready within 120 s"
	kill -0 "$serve_pid" 2>/dev/null || fail "shardline serve exited"
	sleep 0.5
done
sed -n "$((shown + 1)),\$p" "$tmp/serve.log" | sed 's/^/  | /' >&2
cat "$tmp/serve.out" >&2
client=$(awk '/^client/{print $2}' "$tmp/ports"); http=$(awk '/^http/{print $2}' "$tmp/ports")
"$bin/shardline" --coordinator "$client" status

if [ "$demo" = smollm2 ]; then
	question=${DEMO_QUESTION:-What is machine learning? Answer in two sentences.}
	max_tokens=${DEMO_MAX_TOKENS:-128}
	say "tools/chat.py --url http://$http --max-tokens $max_tokens '$question'   (greedy)"
	echo
	echo "> $question"
	timeout 600 python3 tools/chat.py --url "http://$http" --model "$name" \
		--max-tokens "$max_tokens" "$question" 2>"$tmp/chat.err" ||
		{ cat "$tmp/chat.err" >&2; fail "the chat request failed"; }
	echo
	cat "$tmp/chat.err" >&2
	rate=$(sed -n 's/.*decode \([0-9.]*\) tokens\/s.*/\1/p' "$tmp/chat.err")
	say "CPU backend, mpirun -np $np ($grid), $OMP_NUM_THREADS OpenMP thread per rank:" \
		"decode ${rate:-?} tokens/s (load average $(cut -d' ' -f1 /proc/loadavg))"
else
	prompt=${DEMO_QUESTION:-Once upon a time, in a land far away,}
	max_tokens=${DEMO_MAX_TOKENS:-48}
	say "$bin/shardline --coordinator $client generate --prompt '$prompt' --max-tokens $max_tokens --temperature 0.8 --top-p 0.95 --seed 1"
	"$bin/shardline" --coordinator "$client" generate --prompt "$prompt" --max-tokens "$max_tokens" \
		--temperature 0.8 --top-p 0.95 --seed 1 || fail "generation failed"
fi
"$bin/shardline" --coordinator "$client" status

say "stopping: SIGTERM to shardline serve (the group drains and leaves, then the coordinator stops)"
shown=$(wc -l <"$tmp/serve.log")
kill -TERM "$serve_pid"
wait "$serve_pid" || { serve_pid=""; fail "shardline serve did not stop cleanly"; }
serve_pid=""
sed -n "$((shown + 1)),\$p" "$tmp/serve.log" | sed 's/^/  | /' >&2
say "done"
