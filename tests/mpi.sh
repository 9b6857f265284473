#!/bin/sh
# Tensor/pipeline parallel tests on the CPU backend over MPI (loopback):
# -np 2 with tp=2, -np 2 with pp=2, -np 4 with tp=4 and with tp=2 x pp=2,
# each against the Hugging Face golden data. Sums the runs' counts into
# one "N passed, N failed" line.
bin=${1:-build/tests/mpi/test_parallel}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
pass=0; fail=0
for grid in "2 --tp 2 --pp 1" "2 --tp 1 --pp 2" "4 --tp 4 --pp 1" "4 --tp 2 --pp 2"; do
	set -- $grid
	n=$1; shift
	out=$(timeout 300 mpirun --oversubscribe -np "$n" "$bin" "$@" 2>&1); rc=$?
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	printf '%s\n' "$out" | grep -E '^(FAIL|rank)' | head -20
	if [ -z "$line" ]; then
		printf '%s\n' "$out" | tail -20
		echo "mpirun -np $n $*: no result (exit $rc)"; fail=$((fail + 1)); continue
	fi
	echo "mpirun -np $n $*: $line"
	p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
	pass=$((pass + p)); fail=$((fail + f))
	[ "$f" -eq 0 ] && [ $rc -ne 0 ] && fail=$((fail + 1))
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
