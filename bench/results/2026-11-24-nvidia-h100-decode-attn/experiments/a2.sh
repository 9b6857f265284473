#!/bin/sh
# A2 (stop 25): decode attention at batch 1: split by the sequence's own context (SL_EXP_DYN), the L1 carveout, PDL
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/a2; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $R/device.txt 2>&1
B=bundle/bin/shardline-bench
run() { # name env... -- args
	n=$1; shift
	env "$@" > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens|prefill' $R/logs/$n.log | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"
}
for round in 1 2; do
for q in none int8; do
	A="$B --shape 7b --quant $q --batches 1 --prompt 128 --new 128 --prefill 0"
	run $q-base-$round $A
	run $q-dyn1-$round SL_EXP_DYN=1 $A
	run $q-dyn2-$round SL_EXP_DYN=2 $A
	run $q-skip-$round SL_EXP_SKIP=attn $A
	[ $round = 1 ] && run $q-l1off-$round SL_PREFER_L1=0 $A
	[ $round = 1 ] && run $q-l1off-skip-$round SL_PREFER_L1=0 SL_EXP_SKIP=attn $A
	[ $round = 1 ] && run $q-pdl0-$round SL_PDL=0 $A
	[ $round = 1 ] && run $q-pdl0-skip-$round SL_PDL=0 SL_EXP_SKIP=attn $A
done
A="$B --shape 7b --quant none --batches 1 --prompt 1024 --new 128 --prefill 0"
run long-base-$round $A
run long-dyn1-$round SL_EXP_DYN=1 $A
run long-dyn2-$round SL_EXP_DYN=2 $A
run long-skip-$round SL_EXP_SKIP=attn $A
done
A="$B --shape 7b --quant fp8 --kv-dtype fp8 --batches 1,2,4 --prompt 512 --new 64 --prefill 0"
run kv8-base $A
run kv8-dyn1 SL_EXP_DYN=1 $A
tar czf $OUT/a2.tgz -C /tmp a2
