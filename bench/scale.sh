#!/bin/sh
# Scale-out benchmark: decode tokens/s of 13B- and 70B-shaped random fp16
# models for each tp x pp grid that fits on the GPUs of this host, batch 1
# and batch 32, plus each tensor-parallel grid again with its all-reduces
# skipped (the difference is the time they take). One JSON per run in OUT;
# bench/plot_scale.py turns a folder of them into a table and a plot.
# Usage: bench/scale.sh BENCH_BINARY OUT_DIR [max_gpus]
bin=$1; out=$2; max=${3:-$(nvidia-smi -L | wc -l)}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shape tp pp: 70B (138 GB of fp16 weights) needs at least two 141 GB GPUs
configs="13b:1:1 13b:2:1 13b:1:2 13b:4:1 13b:2:2 13b:8:1 70b:2:1 70b:1:2 70b:4:1 70b:8:1 70b:4:2"
for c in $configs; do
	shape=${c%%:*}; rest=${c#*:}; tp=${rest%%:*}; pp=${rest#*:}; n=$((tp * pp))
	[ "$n" -le "$max" ] || continue
	for comm in on off; do
		[ "$comm" = off ] && [ "$tp" -eq 1 ] && continue
		flag=""; [ "$comm" = off ] && flag="--comm-off"
		name="$shape-tp$tp-pp$pp-allreduce-$comm"
		echo "== $name"
		timeout 300 mpirun -np "$n" "$bin" --shape "$shape" --tp "$tp" --pp "$pp" \
			--batches 1,32 --prompt 128 --new 64 --prefill 0 $flag \
			--out "$out/$name.json" >"$out/$name.log" 2>&1 || echo "failed: $name (see $name.log)"
		grep -E "^batch|copy bandwidth|device" "$out/$name.log"
	done
done
