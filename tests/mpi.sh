#!/bin/sh
# Tensor/pipeline parallel tests on the CPU backend over MPI (loopback):
# -np 2 with tp=2, -np 2 with pp=2, -np 4 with tp=4 and with tp=2 x pp=2,
# each against the Hugging Face golden data; then penalties, min-p and
# log-probs (test_sampling_par) with tp=2, pp=2 and tp=2 x pp=2 against
# tp=1. Sums the runs' counts into one "N passed, N failed" line.
bin=${1:-build/tests/mpi/test_parallel}
sbin=${2:-$(dirname "$bin")/test_sampling_par}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
pass=0; fail=0
for run in "$bin 2 --tp 2 --pp 1" "$bin 2 --tp 1 --pp 2" "$bin 4 --tp 4 --pp 1" \
	"$bin 4 --tp 2 --pp 2" "$sbin 2 --tp 2 --pp 1" "$sbin 2 --tp 1 --pp 2" "$sbin 4 --tp 2 --pp 2"; do
	set -- $run
	exe=$1 n=$2; shift 2
	out=$(timeout 300 mpirun --oversubscribe -np "$n" "$exe" "$@" 2>&1); rc=$?
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	printf '%s\n' "$out" | grep -E '^(FAIL|rank)' | head -20
	if [ -z "$line" ]; then
		printf '%s\n' "$out" | tail -20
		echo "mpirun -np $n $(basename "$exe") $*: no result (exit $rc)"; fail=$((fail + 1)); continue
	fi
	echo "mpirun -np $n $(basename "$exe") $*: $line"
	p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
	pass=$((pass + p)); fail=$((fail + f))
	[ "$f" -eq 0 ] && [ $rc -ne 0 ] && fail=$((fail + 1))
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
