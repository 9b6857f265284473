#!/bin/sh
# B1: v5 (the add's GEMV writes x * w and the parts; the next GEMV divides its sums by the rms at its end),
# every format. Kernel tests, then same-binary A/B: old = SL_FUSE=swiglu,rope (main's quantized default;
# fp16's main default was v4, +1.1% over it), new = default
rm -rf bundle && tar xzf .dev/b.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/b1; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for t in test_fused test_backend test_quant test_kernels; do
	timeout 200 bundle/tests/$t > $R/$t.log 2>&1
	echo "$t rc=$? $(grep -E '^[0-9]+%' $R/$t.log | tail -1) [$(( $(date +%s) - t0 )) s]"
done
grep -E "FAIL|^fused|Assert|off by|differs" $R/test_fused.log | head -30
grep -E "FAIL" $R/test_backend.log $R/test_quant.log | head -5
B="bundle/bin/shardline-bench --shape 7b --batches 1,2,8 --prompt 128 --new 128 --prefill 0"
run() { n=$1; shift; env "$@" $B --quant $q > $R/logs/$q-$n.log 2>&1
	echo "$q $n: $(grep -E 'decode tokens' $R/logs/$q-$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for round in 1 2; do
	for q in none int8 fp8 int4; do
		run old-$round SL_FUSE=swiglu,rope
		run new-$round SL_X=1
	done
done
tar czf $OUT/b1.tgz -C /tmp b1
