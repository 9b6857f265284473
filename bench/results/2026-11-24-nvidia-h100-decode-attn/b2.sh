#!/bin/sh
# B2 (stop 25): decode attention split by each sequence's own context: test_attention + decode figures
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/b2; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
timeout 250 bundle/tests/test_attention > $R/test_attention.log 2>&1
echo "test_attention rc=$? $(tail -1 $R/test_attention.log) [$(( $(date +%s) - t0 )) s]"
grep "reserved" $R/test_attention.log | head -8
B=bundle/bin/shardline-bench
run() { n=$1; shift; "$@" > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
run f16-128 $B --shape 7b --batches 1,8,64 --prompt 128 --new 128 --prefill 0
run f16-1024 $B --shape 7b --batches 1,2,4 --prompt 1024 --new 128 --prefill 0
run kv8-512 $B --shape 7b --quant fp8 --kv-dtype fp8 --batches 1,2,4,64 --prompt 512 --new 64 --prefill 0
tar czf $OUT/b2.tgz -C /tmp b2
