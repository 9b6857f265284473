#!/bin/sh
# Scale-out benchmark: decode tokens/s of 13B- and 70B-shaped random fp16
# models for each tp x pp grid that fits on the GPUs of this host, at
# BATCHES (1,32,128), plus variants of the same grid: its all-reduces
# skipped (the difference is the time they take), NCCL alone instead of
# the custom all-reduce (SL_CUSTOM_AR=0), the custom all-reduce unfused
# (SL_FUSED_AR=0: the all-reduce, then the residual add + RMSNorm kernel,
# where the default one-shot does the add and leaves the norm to the next
# projection, as the tp 1 GEMV does), the all-reduce outside the GEMV
# (pair: SL_GEMV_AR=0, the row-parallel GEMV followed by the all-reduce +
# add kernel, where by default the GEMV exchanges its tiles and adds the
# sum itself at 1-2 tokens), and for pipeline grids the older micro-batch
# schedule (SL_PP_INFLIGHT=0: every step cut into pp micro-batches and
# drained, where the default keeps pp groups of the batch in flight), and
# the GEMV's block shape forced (gemv4, gemv8: SL_GEMV_WARPS=4 or 8
# warps a tile, where the default picks by the model's width), and the
# custom all-reduce launched in plain stream order (nopdl: SL_CAR_PDL=0,
# where by default it runs as a programmatic dependent of the kernel
# before it, as the step's other kernels do). The
# main run of each grid and its micro-batch variant also prefill
# PREFILL_BATCH (8) prompts of PREFILL (2048) tokens.
# One JSON per run in OUT, each variant in its folder (OUT/nccl,
# OUT/unfused, OUT/pair, OUT/micro); bench/plot_scale.py turns a folder of them into
# a table and a plot, bench/plot_allreduce.py --decode OUT compares custom
# and NCCL all-reduce runs.
# Usage: bench/scale.sh BENCH_BINARY OUT_DIR [max_gpus]
# Environment: CONFIGS="13b:1:1 13b:2:1" (shape:tp:pp) to run only those;
# VARIANTS="custom unfused pair nccl off micro gemv4 gemv8 nopdl"
# (default: all but gemv4, gemv8 and nopdl)
# the variants to run
# (custom is the default path: fused where it runs one-shot, groups in
# flight); BATCHES="1,32,128"; PREFILL=0 skips the prefill rows;
# RUN_TIMEOUT (s, default 300) bounds each run.
bin=$1; out=$2; max=${3:-$(nvidia-smi -L | wc -l)}
mkdir -p "$out" "$out/nccl" "$out/unfused" "$out/micro" "$out/gemv4" "$out/gemv8" "$out/nopdl" \
	"$out/pair"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
prefill_args="--prefill ${PREFILL:-2048} --prefill-batch ${PREFILL_BATCH:-8} --prefill-runs 3"
[ "${PREFILL:-2048}" -eq 0 ] && prefill_args="--prefill 0"
# shape tp pp: 70B (138 GB of fp16 weights) needs at least two 141 GB GPUs
configs=${CONFIGS:-"13b:1:1 13b:2:1 13b:1:2 13b:4:1 13b:2:2 13b:8:1 70b:2:1 70b:1:2 70b:4:1 70b:8:1 70b:4:2"}
for c in $configs; do
	shape=${c%%:*}; rest=${c#*:}; tp=${rest%%:*}; pp=${rest#*:}; n=$((tp * pp))
	[ "$n" -le "$max" ] || continue
	for v in ${VARIANTS:-custom unfused pair nccl off micro}; do
		# tp 1 has no all-reduce to vary; pp 1 has one schedule
		[ "$tp" -eq 1 ] && [ "$v" != custom ] && [ "$v" != micro ] && [ "${v#gemv}" = "$v" ] && continue
		[ "$pp" -eq 1 ] && [ "$v" = micro ] && continue
		dir=$out/$v; car=1; fused=1; gemvar=; inflight=1; warps=; carpdl=1; flag=""; prefill="--prefill 0"
		name="$shape-tp$tp-pp$pp-allreduce-on"
		case $v in
		custom) dir=$out; prefill=$prefill_args ;;
		unfused) fused=0 ;;
		pair) gemvar=0 ;;
		nccl) car=0 ;;
		off) dir=$out; flag="--comm-off"; name="$shape-tp$tp-pp$pp-allreduce-off" ;;
		micro) inflight=0; prefill=$prefill_args ;;
		gemv4) warps=4 ;;
		gemv8) warps=8 ;;
		nopdl) carpdl=0 ;;
		esac
		# tp 1 has no all-reduce: the custom all-reduce is simply not made
		[ "$tp" -eq 1 ] && car=auto
		echo "== $name ($v)"
		SL_PP_INFLIGHT=$inflight SL_CUSTOM_AR=$car SL_FUSED_AR=$fused SL_GEMV_AR=$gemvar SL_GEMV_WARPS=$warps \
			SL_CAR_PDL=$carpdl timeout "${RUN_TIMEOUT:-300}" mpirun -np "$n" -x LD_LIBRARY_PATH -x SL_PP_INFLIGHT \
			-x SL_CUSTOM_AR -x SL_FUSED_AR -x SL_GEMV_AR -x SL_GEMV_WARPS -x SL_CAR_PDL -x NCCL_NVLS_ENABLE \
			"$bin" --shape "$shape" --tp "$tp" --pp "$pp" --batches "${BATCHES:-1,32,128}" \
			--prompt 128 --new 64 $prefill $flag \
			--out "$dir/$name.json" >"$dir/$name.log" 2>&1 || echo "failed: $name (see $dir/$name.log)"
		grep -E "^batch|^prefill|^pipeline|copy bandwidth|device|tp all-reduce|fused" "$dir/$name.log"
	done
done
