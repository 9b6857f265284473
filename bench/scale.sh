#!/bin/sh
# Scale-out benchmark: decode tokens/s of 13B- and 70B-shaped random fp16
# models for each tp x pp grid that fits on the GPUs of this host, batch 1
# and batch 32, plus each tensor-parallel grid again with its all-reduces
# skipped (the difference is the time they take) and again with NCCL
# alone instead of the custom all-reduce (SL_CUSTOM_AR=0). The main run of
# each grid also prefills PREFILL_BATCH (8) prompts of PREFILL (2048)
# tokens. Pipeline grids (pp > 1) keep pp groups of the batch in flight;
# each runs once more with SL_PP_INFLIGHT=0 (the older schedule: every
# step cut into pp micro-batches and drained) for an A/B. One JSON per run
# in OUT, the NCCL-only runs in OUT/nccl, the micro-batch runs in
# OUT/micro; bench/plot_scale.py turns a folder of them into a table and a
# plot, bench/plot_allreduce.py --decode OUT compares custom and NCCL
# all-reduce runs.
# Usage: bench/scale.sh BENCH_BINARY OUT_DIR [max_gpus]
# Environment: CONFIGS="13b:1:1 13b:2:1" (shape:tp:pp) to run only those;
# ALLREDUCE="custom nccl off" (default) picks the variants of tp > 1 grids,
# plus "micro" (default for pp > 1) the micro-batch schedule; PREFILL=0
# skips the prefill rows.
bin=$1; out=$2; max=${3:-$(nvidia-smi -L | wc -l)}
mkdir -p "$out" "$out/nccl" "$out/micro"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shape tp pp: 70B (138 GB of fp16 weights) needs at least two 141 GB GPUs
configs=${CONFIGS:-"13b:1:1 13b:2:1 13b:1:2 13b:4:1 13b:2:2 13b:8:1 70b:2:1 70b:1:2 70b:4:1 70b:8:1 70b:4:2"}
for c in $configs; do
	shape=${c%%:*}; rest=${c#*:}; tp=${rest%%:*}; pp=${rest#*:}; n=$((tp * pp))
	[ "$n" -le "$max" ] || continue
	for ar in ${ALLREDUCE:-custom nccl off micro}; do
		[ "$tp" -eq 1 ] && [ "$ar" = nccl -o "$ar" = off ] && continue
		[ "$pp" -eq 1 ] && [ "$ar" = micro ] && continue
		flag=""; dir=$out; car=1; name="$shape-tp$tp-pp$pp-allreduce-on"; inflight=1
		prefill="--prefill 0"
		case $ar in
		custom) prefill="--prefill ${PREFILL:-2048} --prefill-batch ${PREFILL_BATCH:-8} --prefill-runs 3" ;;
		nccl) dir=$out/nccl; car=0 ;;
		off) flag="--comm-off"; name="$shape-tp$tp-pp$pp-allreduce-off" ;;
		micro) dir=$out/micro; inflight=0
			prefill="--prefill ${PREFILL:-2048} --prefill-batch ${PREFILL_BATCH:-8} --prefill-runs 3" ;;
		esac
		[ "${PREFILL:-2048}" -eq 0 ] && prefill="--prefill 0"
		# tp 1 has no all-reduce: the custom all-reduce is simply not made
		[ "$tp" -eq 1 ] && car=auto
		echo "== $name ($ar)"
		SL_PP_INFLIGHT=$inflight SL_CUSTOM_AR=$car timeout 300 mpirun -np "$n" -x SL_PP_INFLIGHT \
			-x SL_CUSTOM_AR -x NCCL_NVLS_ENABLE "$bin" --shape "$shape" --tp "$tp" \
			--pp "$pp" --batches 1,32 --prompt 128 --new 64 $prefill $flag \
			--out "$dir/$name.json" >"$dir/$name.log" 2>&1 || echo "failed: $name (see $dir/$name.log)"
		grep -E "^batch|^prefill|^pipeline|copy bandwidth|device|tp all-reduce" "$dir/$name.log"
	done
done
