#!/bin/sh
# A5: fourth version: the add as its own epilogue kind (KERN_EPI_ADD), each warp stages its columns of the
# residual with cp.async and normalizes them into shared memory; int4 included. Same-binary A/B as A4
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/a5; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for t in test_fused test_backend test_quant; do
	timeout 200 bundle/tests/$t > $R/$t.log 2>&1
	echo "$t rc=$? $(grep -E '^[0-9]+%' $R/$t.log | tail -1) [$(( $(date +%s) - t0 )) s]"
done
grep -E "FAIL|^fused|Assert|off by" $R/test_fused.log | head -20
grep -E "FAIL" $R/test_backend.log | head -5
B="bundle/bin/shardline-bench --shape 7b --batches 1,8 --prompt 128 --new 128 --prefill 0"
run() { n=$1; shift; env "$@" $B --quant $q > $R/logs/$q-$n.log 2>&1
	echo "$q $n: $(grep -E 'decode tokens' $R/logs/$q-$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for round in 1 2; do
	for q in none int8 fp8; do
		run old-$round SL_FUSE=swiglu,rope
		run new-$round SL_X=1
	done
	q=int4
	run old-$round SL_FUSE=swiglu,rope
	run new-$round SL_X=1
done
tar czf $OUT/a5.tgz -C /tmp a5
