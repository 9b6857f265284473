#!/bin/sh
# Tensor/pipeline parallel tests on the CPU backend over MPI (loopback):
# -np 2 with tp=2, -np 2 with pp=2, -np 4 with tp=4 and with tp=2 x pp=2,
# each against the Hugging Face golden data (safetensors and GGUF
# checkpoints); then the real SmolLM2-135M-Instruct GGUF ($SL_SMOLLM2_GGUF,
# default build/models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by
# `make deps`) at tp 1, tp 3 and pp 2, and constrained decoding on it
# (test_constrained_par: JSON schema and regex) at tp 3 and pp 2 against
# one rank; then penalties, min-p and log-probs
# (test_sampling_par) with tp=2, pp=2 and tp=2 x pp=2 against tp=1; then
# quantized weights and the fp8 KV cache: every golden model on one rank
# per format against transformers' unquantized logits within the format's
# stated tolerance (QUANT_TOLS below), and test_quant_par's tp=2 and pp=2
# groups against tp=1, quantized the same way; then
# tests/integration/migrate.sh (a tp 2 group's rank SIGKILLed mid-stream:
# every stream goes on on another group, identical to the undisturbed run)
# and tests/integration/graceful.sh (SIGUSR1/SIGTERM to mpirun, SIGTERM to a
# leader and to the coordinator under load: no request fails).
# Sums the runs' counts into one "N passed, N failed" line.
bin=${1:-build/tests/mpi/test_parallel}
sbin=${2:-$(dirname "$bin")/test_sampling_par}
qbin=${3:-$(dirname "$bin")/test_quant_par}
cbin=${4:-$(dirname "$bin")/test_constrained_par}
# Logits of the tiny random golden models against transformers' fp32 ones,
# max abs error relative to the largest logit. Measured on the CPU (worst
# over the 7 models): int8 (one scale per row) 3.5e-2, int8 groups of 128
# (64 where in_dim is 64) 3.3e-2, fp8 1.4e-1, int4 (groups of 64) 4.2e-1,
# fp8 KV cache alone 9.4e-2. Random weights of std 0.02 on 64-wide layers
# are far more sensitive than real ones (SmolLM2's perplexity moves by
# +0.8% / +1.6% / +32% / +0.4%, tests/quant_ppl.sh), and K and V of a few
# hundredths sit in E4M3's subnormal range at scale 1: these bounds check
# that every model runs and nothing is broken, the perplexity test and
# test_quant_par check accuracy and parallelism. Greedy tokens are reported.
QUANT_TOLS="int8:5e-2 int8/128:5e-2 fp8:2e-1 int4:6e-1 none+kv8:1.5e-1"
smollm2=${SL_SMOLLM2_GGUF:-build/models/SmolLM2-135M-Instruct.Q4_1.gguf}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
pass=0; fail=0
run() { # run EXE NP ARGS...: one mpirun, its counts added
	exe=$1 n=$2; shift 2
	out=$(timeout 600 mpirun --oversubscribe -np "$n" "$exe" "$@" 2>&1); rc=$?
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	printf '%s\n' "$out" | grep -E '^(FAIL|rank)' | head -20
	if [ -z "$line" ]; then
		printf '%s\n' "$out" | tail -20
		echo "mpirun -np $n $(basename "$exe") $*: no result (exit $rc)"; fail=$((fail + 1)); return
	fi
	echo "mpirun -np $n $(basename "$exe") $*: $line"
	p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
	pass=$((pass + p)); fail=$((fail + f))
	[ "$f" -eq 0 ] && [ $rc -ne 0 ] && fail=$((fail + 1))
}
for grid in "2 --tp 2 --pp 1" "2 --tp 1 --pp 2" "4 --tp 4 --pp 1" "4 --tp 2 --pp 2"; do
	run "$bin" $grid
done
if [ -f "$smollm2" ]; then
	# more ranks than cores here: one OpenMP thread each, or they fight
	for grid in "1 --tp 1 --pp 1" "3 --tp 3 --pp 1" "2 --tp 1 --pp 2"; do
		set -- $grid
		[ "$1" -gt 1 ] && export OMP_NUM_THREADS=1
		run "$bin" $grid --smollm2 "$smollm2"
	done
	# constrained decoding: a JSON schema (greedy and sampled) and a regex
	# beside a free request, the same tokens at tp 3 and pp 2 as on one rank
	for grid in "3 --tp 3 --pp 1" "2 --tp 1 --pp 2"; do
		set -- $grid
		export OMP_NUM_THREADS=1
		run "$cbin" $grid --smollm2 "$smollm2"
	done
	unset OMP_NUM_THREADS
else
	echo "FAIL: SmolLM2 GGUF not found at $smollm2: run \`make deps\` (tools/fetch-model.sh fetches it)"
	fail=$((fail + 1))
fi
for grid in "2 --tp 2 --pp 1" "2 --tp 1 --pp 2" "4 --tp 2 --pp 2"; do
	run "$sbin" $grid
done
for qt in $QUANT_TOLS; do
	run "$bin" 1 --tp 1 --pp 1 --quant "${qt%%:*}" --logit-tol "${qt#*:}" --greedy-report-only
done
for grid in "2 --tp 2 --pp 1" "2 --tp 1 --pp 2"; do
	run "$qbin" $grid
done
script() { # run SCRIPT: a serving test script, its counts added
	out=$(timeout 600 sh "$1" 2>&1); rc=$?
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	printf '%s\n' "$out" | grep -E '^(FAIL|itest)' | head -40
	if [ -z "$line" ]; then
		printf '%s\n' "$out" | tail -20
		echo "$1: no result (exit $rc)"; fail=$((fail + 1)); return
	fi
	echo "$1: $line"
	p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
	pass=$((pass + p)); fail=$((fail + f))
	[ "$f" -eq 0 ] && [ $rc -ne 0 ] && fail=$((fail + 1))
}
script tests/integration/migrate.sh
script tests/integration/graceful.sh
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
