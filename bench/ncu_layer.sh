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
# Environment: FORMATS [none int8 fp8 int4], SHAPE [7b], LAYER [5],
#              NCU [ncu, else Nsight Compute's default install path]
set -u
bin=${1:?usage: bench/ncu_layer.sh BIN_DIR OUT_DIR}
out=${2:?usage: bench/ncu_layer.sh BIN_DIR OUT_DIR}
ncu=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)}
[ -x "$ncu" ] || { echo "ncu_layer.sh: no ncu (set NCU)" >&2; exit 1; }
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > "$out/device.txt" 2>&1
status=0
for f in ${FORMATS:-none int8 fp8 int4}; do
	echo "ncu_layer.sh: $f" >&2
	if ! SL_NO_GRAPHS=1 "$ncu" --clock-control none --nvtx --nvtx-include "layer ${LAYER:-5}/" \
		--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
		"$bin/shardline-bench-decode" --shape "${SHAPE:-7b}" --quant "$f" --batches 1 \
		--prompt 16 --new 3 --prefill 0 > "$out/ncu-$f.csv" 2> "$out/ncu-$f.log"; then
		echo "ncu_layer.sh: $f failed (tail of $out/ncu-$f.log):" >&2
		tail -5 "$out/ncu-$f.log" >&2
		status=1
	fi
done
"${PYTHON:-python3}" bench/ncu_table.py "$out" || status=1
exit $status
