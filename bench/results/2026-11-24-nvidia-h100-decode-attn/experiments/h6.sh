#!/bin/sh
# H6 (stop 25): the LM head as int8 groups of 32 under --quant (default) against --quant-head off
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/h6; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
B=bundle/bin/shardline-bench
run() { n=$1; shift; "$@" > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for q in int8 fp8 int4; do
	A="$B --shape 7b --quant $q --batches 1,8,32,64 --prompt 128 --new 128 --prefill 0"
	run $q-off-1 $A --quant-head off
	run $q-on-1 $A
done
grep "LM head" $R/logs/int8-on-1.log | head -2
for q in int8 fp8 int4; do
	A="$B --shape 7b --quant $q --batches 1 --prompt 128 --new 128 --prefill 0"
	run $q-off-2 $A --quant-head off
	run $q-on-2 $A
done
tar czf $OUT/h6.tgz -C /tmp h6
