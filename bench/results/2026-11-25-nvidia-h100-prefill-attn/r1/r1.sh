#!/bin/sh
# R1: prefill attention block shapes (SL_ATTN_PRE=W,B): kernel bench, 7B fp8 prefill, vs_cpu checks
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/r1; rm -rf $R; mkdir -p $R/logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for v in 4,3 8,1 12,1 4,3 8,1 12,1; do
	SL_ATTN_PRE=$v SL_ATTN_BENCH=prefill CK_RUN_CASE=bench timeout 60 bundle/tests/test_attention > $R/logs/bench-$v.log 2>&1
	echo "bench $v rc=$? [$(( $(date +%s) - t0 )) s]"; grep "prefill bench" $R/logs/bench-$v.log | sed 's/attention prefill bench //'
done
B=bundle/bin/shardline-bench
for v in 4,3 8,1 12,1 4,3 8,1 12,1; do
	SL_ATTN_PRE=$v timeout 120 $B --shape 7b --quant fp8 --batches 1 --prompt 16 --new 8 --prefill 2048 > $R/logs/pf-$v.log 2>&1
	echo "7b fp8 $v rc=$?: $(grep prefill $R/logs/pf-$v.log) [$(( $(date +%s) - t0 )) s]"
done
for v in 8,1 12,1; do
	SL_ATTN_PRE=$v CK_RUN_CASE=vs_cpu timeout 150 sh bundle/run.sh gpu bundle/tests/test_attention > $R/logs/test-$v.log 2>&1
	echo "test $v rc=$? [$(( $(date +%s) - t0 )) s]"; tail -1 $R/logs/test-$v.log
done
tar czf $OUT/r1.tgz -C /tmp r1
