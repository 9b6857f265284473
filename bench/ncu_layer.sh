#!/bin/sh
# One decode layer under Nsight Compute, per weight format (issue 38, the
# per-op table of docs/benchmarks.md "Where the time goes"): for each
# format in FORMATS, `ncu --clock-control none --nvtx --nvtx-include
# "layer L/"` on shardline-bench-decode (batch 1, a 16-token prompt, 3
# new tokens, no prefill) with SL_NO_GRAPHS=1, so every kernel of layer L
# is replayed alone with its caches flushed; the GPU's clocks are left as
# they are. Writes OUT_DIR/ncu-FORMAT.csv (ncu's raw export) and
# OUT_DIR/ncu-FORMAT.log, then bench/ncu_table.py OUT_DIR writes
# OUT_DIR/layer.md: per op, microseconds, MB read from DRAM and GB/s, and
# the layer's projections against the copy bandwidth the bench measured.
#
# Usage: bench/ncu_layer.sh BIN_DIR OUT_DIR      (from the repository root)
# Environment: FORMATS [none int8 fp8 int4] (FORMAT+kv8: an fp8 KV cache),
#              SHAPE [7b], LAYER [5],
#              BATCH [1], PROMPT [16], NEW [3]: with BATCH > 1 only the
#              steps where all BATCH sequences decode are profiled (the
#              engine's "decode N" range, node/step.c); the prompts are
#              prefilled in steps of 2048 tokens first, so NEW must
#              outlast them (64 x 640 tokens: NEW 32 leaves about 10),
#              NCU [ncu, else Nsight Compute's default install path]
set -u
bin=${1:?usage: bench/ncu_layer.sh BIN_DIR OUT_DIR}
out=${2:?usage: bench/ncu_layer.sh BIN_DIR OUT_DIR}
ncu=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)}
[ -x "$ncu" ] || { echo "ncu_layer.sh: no ncu (set NCU)" >&2; exit 1; }
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > "$out/device.txt" 2>&1
status=0
batch=${BATCH:-1}
range="layer ${LAYER:-5}/"
[ "$batch" -gt 1 ] && range="decode $batch/$range"
for c in ${FORMATS:-none int8 fp8 int4}; do
	f=${c%%+*}; kv=auto
	case $c in *+kv8) kv=fp8 ;; esac
	echo "ncu_layer.sh: $c" >&2
	if ! SL_NO_GRAPHS=1 "$ncu" --clock-control none --nvtx --nvtx-include "$range" \
		--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
		"$bin/shardline-bench-decode" --shape "${SHAPE:-7b}" --quant "$f" --kv-dtype "$kv" \
		--batches "$batch" --prompt "${PROMPT:-16}" --new "${NEW:-3}" --prefill 0 \
		> "$out/ncu-$c.csv" 2> "$out/ncu-$c.log"; then
		echo "ncu_layer.sh: $c failed (tail of $out/ncu-$c.log):" >&2
		tail -5 "$out/ncu-$c.log" >&2
		status=1
	fi
done
"${PYTHON:-python3}" bench/ncu_table.py "$out" || status=1
exit $status
