#!/bin/sh
# One kernel of the decode benchmark under Nsight Compute's full set of
# sections (GPU host): what limits it, where the per-op table of
# bench/ncu_layer.sh says only how long it takes. Runs
# shardline-bench-decode with SL_NO_GRAPHS=1 (ncu sees each launch) and
# profiles one launch of the kernels whose function name matches KERNEL,
# after skipping SKIP of them (a decode step of the 7B launches a
# per-layer kernel 32 times; skip past the prompt's steps to profile a
# decode step), then exports the details page (OUT_DIR/details.csv) and
# the SASS with its stall samples (OUT_DIR/sass.csv.gz) and
# bench/ncu_kernel.py writes OUT_DIR/kernel.md (throughput, occupancy,
# stall reasons, instruction mix, the hottest instructions).
#
# Usage: bench/ncu_kernel.sh BIN_DIR OUT_DIR      (from the repository root)
# Environment (defaults in brackets):
#   KERNEL  a regular expression of the kernel's function name (required),
#           e.g. attn_decode, gemv_kernel, qgemv_kernel
#   SKIP    launches of it to skip [0]
#   NVTX    count and profile only launches inside this NVTX range, as
#           ncu's --nvtx-include takes it, e.g. "layer 5/" (the backend's
#           ranges, bench/ncu_layer.sh): with KERNEL=qgemv_wide_kernel and
#           SKIP=0 the first decode step's layer-5 qkv, where SKIP alone
#           counts every launch of the name (the LM head's too) [none]
#   ARGS    shardline-bench-decode's arguments
#           [--shape 7b --batches 1 --prompt 128 --new 16 --prefill 0]
#   CLOCKS  ncu's --clock-control [base: the SM clock locked at base, so
#           durations are longer than in a run; none: clocks as they are]
#   KEEP_REP  1: keep OUT_DIR/kernel.ncu-rep (several MB) [0]
#   NCU     [ncu, else Nsight Compute's default install path]
#   PYTHON  [python3]
set -u
bin=${1:?usage: bench/ncu_kernel.sh BIN_DIR OUT_DIR}
out=${2:?usage: bench/ncu_kernel.sh BIN_DIR OUT_DIR}
[ -n "${KERNEL:-}" ] || {
	echo "ncu_kernel.sh: set KERNEL to a regular expression of the kernel's name" >&2
	exit 2
}
ncu=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)}
[ -x "$ncu" ] || { echo "ncu_kernel.sh: no ncu (set NCU)" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out/kernel.ncu-rep"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > "$out/device.txt" 2>&1
set --
[ -n "${NVTX:-}" ] && set -- --nvtx --nvtx-include "$NVTX"
# shellcheck disable=SC2086 # ARGS are words
SL_NO_GRAPHS=1 "$ncu" --set full --import-source yes --clock-control "${CLOCKS:-base}" "$@" \
	--kernel-name "regex:$KERNEL" --launch-skip "${SKIP:-0}" --launch-count 1 \
	-o "$out/kernel" "$bin/shardline-bench-decode" \
	${ARGS:---shape 7b --batches 1 --prompt 128 --new 16 --prefill 0} > "$out/run.log" 2>&1
rc=$?
if [ ! -s "$out/kernel.ncu-rep" ]; then
	echo "ncu_kernel.sh: no launch of '$KERNEL' was profiled (exit $rc; SKIP past the last one?);" \
		"tail of $out/run.log:" >&2
	tail -5 "$out/run.log" >&2
	exit 1
fi
"$ncu" --import "$out/kernel.ncu-rep" --page details --csv > "$out/details.csv" &&
	"$ncu" --import "$out/kernel.ncu-rep" --page source --csv --print-source sass |
	gzip -9 > "$out/sass.csv.gz" || { echo "ncu_kernel.sh: export failed" >&2; exit 1; }
[ "${KEEP_REP:-0}" = 1 ] || rm -f "$out/kernel.ncu-rep"
"${PYTHON:-python3}" bench/ncu_kernel.py "$out"
