#!/bin/sh
# The quantized-weight benchmark, one command (GPU host; about 3 minutes on
# an H100): shardline-bench-decode on the 7B shape (random weights) once per
# weight format and KV dtype in CONFIGS, each run decoding at batch 1, 8,
# 32 and 64 and prefilling one 2048-token prompt (once cold, then the
# median of PREFILL_RUNS runs reported), then bench/plot_quant.py's table
# and plot.
#
# Usage: bench/quant.sh OUT_DIR          (from the repository root)
#   OUT_DIR/quant-CONFIG.json and .log per run, OUT_DIR/quant.md (table:
#   tokens/s per batch, ms/step, GB/s of weights, % of copy bandwidth,
#   speed-up over fp16, prefill) and OUT_DIR/quant.png.
# Environment (defaults in brackets):
#   BIN      the binaries [build/bin]
#   SHAPE    [7b]
#   CONFIGS  FORMAT[+kv8] list [none int8 fp8 int4 fp8+kv8 int8/128]
#   BATCHES  [1,8,32,64]   PROMPT [128]   NEW [128]   PREFILL [2048]
#   PREFILL_RUNS [5]
#   PYTHON   for the plot [python3]; the JSON and logs are written anyway
set -u
out=${1:?usage: bench/quant.sh OUT_DIR}
bin=${BIN:-build/bin}
shape=${SHAPE:-7b}
configs=${CONFIGS:-"none int8 fp8 int4 fp8+kv8 int8/128"}
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv \
	> "$out/device.txt" 2>&1
for c in $configs; do
	fmt=${c%%+*}; kv=auto
	case $c in *+kv8) kv=fp8 ;; esac
	q=${fmt%%/*}; grp=auto
	case $fmt in */*) grp=${fmt#*/} ;; esac
	name=$(echo "$c" | tr '/+' '-_')
	echo "quant.sh: $c" >&2
	start=$(date +%s)
	if ! "$bin/shardline-bench-decode" --shape "$shape" --quant "$q" --quant-group "$grp" \
		--kv-dtype "$kv" --batches "${BATCHES:-1,8,32,64}" --prompt "${PROMPT:-128}" \
		--new "${NEW:-128}" --prefill "${PREFILL:-2048}" \
		--prefill-runs "${PREFILL_RUNS:-5}" --out "$out/quant-$name.json" \
		> "$out/quant-$name.log" 2>&1; then
		echo "quant.sh: $c failed (tail of $out/quant-$name.log):" >&2
		tail -5 "$out/quant-$name.log" >&2
		status=1
	fi
	grep -E '^(batch|prefill|device|copy|shape)' "$out/quant-$name.log" | sed "s/^/  /" >&2
	echo "  ($(($(date +%s) - start)) s)" >&2
done
"${PYTHON:-python3}" bench/plot_quant.py "$out" "$out/quant" || status=1
exit $status
