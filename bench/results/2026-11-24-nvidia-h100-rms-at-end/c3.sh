#!/bin/sh
# C3: the final tree: test_quant (C2's 160 s limit cut it off), and a second same-binary A/B round
rm -rf bundle && tar xzf .dev/c.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/c3; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
timeout 150 bundle/tests/test_quant > $R/test_quant.log 2>&1
echo "test_quant rc=$? $(grep -E '^[0-9]+%' $R/test_quant.log | tail -1) [$(( $(date +%s) - t0 )) s]"
run() { n=$1; shift; env "$@" bundle/bin/shardline-bench --shape 7b --batches 1,2,8 --prompt 128 --new 128 --prefill 0 --quant $q > $R/logs/$q-$n.log 2>&1
	echo "$q $n: $(grep -E 'decode tokens' $R/logs/$q-$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for q in none int8 fp8; do run old SL_FUSE=swiglu,rope; run new SL_X=1; done
tar czf $OUT/c3.tgz -C /tmp c3
