#!/bin/sh
# G1: the final tree (the add + norm epilogue's two lines back to main's, comments): the GEMV and
# epilogue tests again, and one fp16 A/B round
rm -rf bundle && tar xzf .dev/g.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/g1; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for t in test_fused test_backend test_kernels test_quant; do
	timeout 200 bundle/tests/$t > $R/$t.log 2>&1
	echo "$t rc=$? $(grep -E '^[0-9]+%' $R/$t.log | tail -1) [$(( $(date +%s) - t0 )) s]"
done
grep -h "^fused plain\|^fused int8/row " $R/test_fused.log
run() { n=$1; shift; env "$@" bundle/bin/shardline-bench --shape 7b --batches 1 --prompt 128 --new 128 --prefill 0 --quant none > $R/logs/ab-$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/ab-$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
run old SL_FUSE=swiglu,rope; run new SL_X=1
tar czf $OUT/g1.tgz -C /tmp g1
