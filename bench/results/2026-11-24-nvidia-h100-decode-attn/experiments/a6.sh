#!/bin/sh
# A6 (stop 25): the GEMVs trigger the next launch at their start (SL_EXP_EARLY=1 all, 2 the qkv+RoPE one)
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/a6; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
B=bundle/bin/shardline-bench
run() { # name env... -- args
	n=$1; shift
	env "$@" > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"
}
for round in 1 2; do
for q in none int8; do
	A="$B --shape 7b --quant $q --batches 1,8 --prompt 128 --new 128 --prefill 0"
	run $q-base-$round $A
	run $q-e1-$round SL_EXP_EARLY=1 $A
	run $q-e2-$round SL_EXP_EARLY=2 $A
	run $q-e2d-$round SL_EXP_EARLY=2 SL_EXP_DYN=1 $A
	run $q-e1d-$round SL_EXP_EARLY=1 SL_EXP_DYN=1 $A
done
done
A="$B --shape 7b --quant fp8 --kv-dtype fp8 --batches 1,32,64 --prompt 512 --new 64 --prefill 0"
run kv8-base $A
run kv8-e1d SL_EXP_EARLY=1 SL_EXP_DYN=1 $A
run kv8-e2d SL_EXP_EARLY=2 SL_EXP_DYN=1 $A
tar czf $OUT/a6.tgz -C /tmp a6
