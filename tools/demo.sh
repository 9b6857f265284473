#!/bin/sh
# make demo: the main job on the embedded default. Makes a small random
# Llama checkpoint (once, under build/demo-model) and generates from two
# prompts batched together on the CPU backend.
set -eu
bin=${BIN:-build/bin}
model=${DEMO_MODEL:-build/demo-model}
if [ ! -f "$model/model.safetensors" ]; then
	"$bin/shardline-mkckpt" --out "$model" --dim 256 --hidden 688 --layers 4 --heads 8 \
		--kv-heads 4 --vocab 1024 --dtype bf16 --seed 1
fi
echo "demo: $bin/shardline-node --model $model --prompt-ids 1,15,27,300 --prompt-ids 1,99 --max-tokens 24" >&2
"$bin/shardline-node" --model "$model" --prompt-ids 1,15,27,300 --prompt-ids 1,99 --max-tokens 24
