#!/bin/sh
# A1: the norm at the next GEMV's loads: test_fused, test_quant, test_kernels, test_backend; same-binary A/B
# (SL_FUSE=swiglu,rope: the old default; unset: the new one with prenorm)
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/a1; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for t in test_fused test_quant test_kernels test_backend; do
	timeout 200 bundle/tests/$t > $R/$t.log 2>&1
	echo "$t rc=$? $(grep -E '^[0-9]+%' $R/$t.log | tail -1) [$(( $(date +%s) - t0 )) s]"
done
grep -E "FAIL|^fused" $R/test_fused.log | head -20
grep -E "FAIL" $R/test_quant.log $R/test_kernels.log $R/test_backend.log | head -5
run() { n=$1; shift; timeout 60 "$@" > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for round in 1 2; do
	for q in none int8 fp8 int4; do
		SL_FUSE=swiglu,rope run $q-old-$round bundle/bin/shardline-bench --shape 7b --quant $q --batches 1,8 --prompt 128 --new 128 --prefill 0
		run $q-new-$round bundle/bin/shardline-bench --shape 7b --quant $q --batches 1,8 --prompt 128 --new 128 --prefill 0
	done
done
tar czf $OUT/a1.tgz -C /tmp a1
