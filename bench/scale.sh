#!/bin/sh
# Scale-out benchmark: decode tokens/s of 13B- and 70B-shaped random fp16
# models for each tp x pp grid that fits on the GPUs of this host, batch 1
# and batch 32, plus each tensor-parallel grid again with its all-reduces
# skipped (the difference is the time they take) and again with NCCL
# alone instead of the custom all-reduce (SL_CUSTOM_AR=0). One JSON per run
# in OUT, the NCCL-only runs in OUT/nccl; bench/plot_scale.py turns a folder
# of them into a table and a plot, bench/plot_allreduce.py --decode OUT
# compares custom and NCCL all-reduce runs.
# Usage: bench/scale.sh BENCH_BINARY OUT_DIR [max_gpus]
# Environment: CONFIGS="13b:1:1 13b:2:1" (shape:tp:pp) to run only those;
# ALLREDUCE="custom unfused nccl off" (default) picks the variants of tp > 1
# grids: custom = the custom all-reduce fused with the residual add + RMSNorm
# after it where it runs one-shot (SL_FUSED_AR=1), unfused = the same kernels
# as separate launches (SL_FUSED_AR=0, runs in OUT/unfused), nccl = NCCL
# alone, off = all-reduces skipped.
bin=$1; out=$2; max=${3:-$(nvidia-smi -L | wc -l)}
mkdir -p "$out" "$out/nccl" "$out/unfused"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shape tp pp: 70B (138 GB of fp16 weights) needs at least two 141 GB GPUs
configs=${CONFIGS:-"13b:1:1 13b:2:1 13b:1:2 13b:4:1 13b:2:2 13b:8:1 70b:2:1 70b:1:2 70b:4:1 70b:8:1 70b:4:2"}
for c in $configs; do
	shape=${c%%:*}; rest=${c#*:}; tp=${rest%%:*}; pp=${rest#*:}; n=$((tp * pp))
	[ "$n" -le "$max" ] || continue
	for ar in ${ALLREDUCE:-custom unfused nccl off}; do
		[ "$tp" -eq 1 ] && [ "$ar" != custom ] && continue
		flag=""; dir=$out; car=1; fused=1; name="$shape-tp$tp-pp$pp-allreduce-on"
		case $ar in
		unfused) dir=$out/unfused; fused=0 ;;
		nccl) dir=$out/nccl; car=0 ;;
		off) flag="--comm-off"; name="$shape-tp$tp-pp$pp-allreduce-off" ;;
		esac
		# tp 1 has no all-reduce: the custom all-reduce is simply not made
		[ "$tp" -eq 1 ] && car=auto
		echo "== $name ($ar)"
		SL_CUSTOM_AR=$car SL_FUSED_AR=$fused timeout 300 mpirun -np "$n" "$bin" --shape "$shape" --tp "$tp" \
			--pp "$pp" --batches 1,32 --prompt 128 --new 64 --prefill 0 $flag \
			--out "$dir/$name.json" >"$dir/$name.log" 2>&1 || echo "failed: $name (see $dir/$name.log)"
		grep -E "^batch|copy bandwidth|device|tp all-reduce" "$dir/$name.log"
	done
done
