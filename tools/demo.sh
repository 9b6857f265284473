#!/bin/sh
# make demo: the main job, end to end on the CPU backend. Makes (once) a
# small random Llama under build/demo-model whose vocabulary is the bundled
# test tokenizer's (tests/data/llama2-small), then starts
#   shardline-coordinator            (loopback, ports it picks)
#   mpirun -np 2 shardline-node      (one node group: tp 2 x pp 1)
# streams one generation through the `shardline` CLI, shows the status,
# and stops everything cleanly: drain (the group finishes and exits), then
# SIGTERM to the coordinator. Random weights: the text is gibberish.
set -eu
bin=${BIN:-build/bin}
model=${DEMO_MODEL:-build/demo-model}
tok=tests/data/llama2-small/tokenizer.json
prompt=${DEMO_PROMPT:-Once upon a time, in a land far away,}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
coord_pid=""; group_pid=""

cleanup() {
	for p in $group_pid $coord_pid; do kill -TERM "$p" 2>/dev/null || true; done
	sleep 0.2
	for p in $group_pid $coord_pid; do kill -KILL "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
	echo "demo: $*" >&2
	for f in coord.log group.log; do [ -f "$tmp/$f" ] && { echo "--- $f" >&2; tail -20 "$tmp/$f" >&2; }; done
	exit 1
}

# the model and its tokenizer, once (an older demo model without one is replaced)
if [ ! -f "$model/model.safetensors" ] || [ ! -f "$model/tokenizer.json" ]; then
	vocab=$("$bin/shardline-tok" "$tok" info | awk '/^vocab_size/{print $2}')
	"$bin/shardline-mkckpt" --out "$model" --dim 256 --hidden 688 --layers 4 --heads 8 \
		--kv-heads 4 --vocab "$vocab" --max-pos 2048 --dtype bf16 --seed 1
	cp "$tok" "$model/tokenizer.json"
fi

echo "demo: $bin/shardline-coordinator --model-name demo --tokenizer $model/tokenizer.json" >&2
"$bin/shardline-coordinator" --model-name demo --tokenizer "$model/tokenizer.json" \
	--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' \
	--http-bind 127.0.0.1:0 --ports-file "$tmp/ports" >"$tmp/coord.log" 2>&1 &
coord_pid=$!
i=0; while [ ! -s "$tmp/ports" ]; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "the coordinator did not start"; sleep 0.1
done
client=$(awk '/^client/{print $2}' "$tmp/ports"); node=$(awk '/^node/{print $2}' "$tmp/ports")

echo "demo: mpirun -np 2 $bin/shardline-node --model $model --tp 2 --coordinator $node --model-name demo" >&2
mpirun --oversubscribe -np 2 "$bin/shardline-node" --model "$model" --tp 2 \
	--coordinator "$node" --model-name demo >"$tmp/group.log" 2>&1 &
group_pid=$!
i=0; until "$bin/shardline" --coordinator "$client" status 2>/dev/null | grep -q " 2 x 1 "; do
	i=$((i + 1)); [ $i -gt 120 ] && fail "the node group did not register"
	kill -0 "$group_pid" 2>/dev/null || fail "the node group exited"
	sleep 0.5
done
"$bin/shardline" --coordinator "$client" status

echo "demo: $bin/shardline --coordinator $client generate --prompt '$prompt' --max-tokens 48 --temperature 0.8 --top-p 0.95 --seed 1" >&2
"$bin/shardline" --coordinator "$client" generate --prompt "$prompt" --max-tokens 48 \
	--temperature 0.8 --top-p 0.95 --seed 1 || fail "generation failed"

echo "demo: stopping: drain --exit, then SIGTERM to the coordinator" >&2
"$bin/shardline" --coordinator "$client" drain --exit >/dev/null
i=0; while kill -0 "$group_pid" 2>/dev/null; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "the node group did not leave after draining"; sleep 0.1
done
wait "$group_pid" || fail "the node group exited with an error"
group_pid=""
kill -TERM "$coord_pid"
wait "$coord_pid" || fail "the coordinator exited with an error"
coord_pid=""
echo "demo: done" >&2
