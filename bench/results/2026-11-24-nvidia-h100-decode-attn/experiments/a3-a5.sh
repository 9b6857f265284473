#!/bin/sh
# A5 (stop 25): x7-11 = 32..96 KiB; A4: the hop at x3 with 0, 8 and 32 KiB (x5-7); was A3: decode attention at batch 1 taken apart: early exits (SL_EXP_X), without its shared memory (X=2)
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/a3; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
B=bundle/bin/shardline-bench
run() { # name env... -- args
	n=$1; shift
	env "$@" > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/$n.log | tr '\n' ' ' | cut -c1-60) [$(( $(date +%s) - t0 )) s]"
}
for round in 1; do
for q in none; do
	A="$B --shape 7b --quant $q --batches 1 --prompt 128 --new 128 --prefill 0"
	run $q-base-$round $A
	for x in 7 8 9 10 11; do run $q-x$x-$round SL_EXP_X=$x $A; done
	run $q-skip-$round SL_EXP_SKIP=attn $A
done
done
tar czf $OUT/a3.tgz -C /tmp a3
