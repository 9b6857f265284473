#!/bin/sh
# H5 (stop 25): the LM head quantized (SL_EXP_HEADQ=1: --quant's format, int8 for int4; =8: int8), batch 1 and 8
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/h5; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
B=bundle/bin/shardline-bench
run() { n=$1; shift; env "$@" > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for round in 1 2; do
for q in int8 fp8 int4; do
	A="$B --shape 7b --quant $q --batches 1,8 --prompt 128 --new 128 --prefill 0"
	run $q-base-$round $A
	run $q-headq-$round SL_EXP_HEADQ=1 $A
	[ $q = fp8 ] && run $q-head8-$round SL_EXP_HEADQ=8 $A
done
done
tar czf $OUT/h5.tgz -C /tmp h5
