#!/bin/sh
# The custom all-reduce on the GPU host (make test-gpu, or bundle/test-gpu.sh):
# tests/gpu/test_allreduce under mpirun -np 2, 4 and 8, one GPU per local rank
# while there are enough, otherwise ranks share GPUs (CUDA IPC works between
# processes on one GPU; the contexts take turns, which is slow, and NCCL, which
# needs one GPU per rank, is not compared). 4 and 8 ranks on fewer GPUs run
# --quick. Results must equal host-computed sums bit for bit; the all-reduce
# fused with the residual add of a pending norm must give the host's residual
# and x * w bit for bit and its parts of the sums of squares within 1e-5.
# MAX_NP=2 (or 4) stops there. Prints "N passed, N failed".
bin=${1:-${ALLREDUCE_BIN:-build/tests/gpu/test_allreduce}}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
pass=0; fail=0
for np in 2 4 8; do
	[ "$np" -le "${MAX_NP:-8}" ] || continue
	quick=""
	[ "$np" -gt 2 ] && [ "$gpus" -lt "$np" ] && quick=--quick
	out=$(timeout 600 mpirun --oversubscribe -np "$np" "$bin" $quick 2>&1); rc=$?
	printf '%s\n' "$out" | grep -E '^(test_allreduce|allreduce|all-reduce|add\+prenorm|burst|graph|allgather|custom|rank)' | head -120
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	if [ -z "$line" ]; then
		printf '%s\n' "$out" | tail -20
		echo "mpirun -np $np test_allreduce $quick: no result (exit $rc)"; fail=$((fail + 1)); continue
	fi
	echo "mpirun -np $np test_allreduce $quick: $line"
	p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
	pass=$((pass + p)); fail=$((fail + f))
	[ "$f" -eq 0 ] && [ $rc -ne 0 ] && fail=$((fail + 1))
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
