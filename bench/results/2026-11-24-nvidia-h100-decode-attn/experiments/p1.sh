#!/bin/sh
# P1 (stop 25): the qkv GEMV (RoPE epilogue) asks L2 for the context's K/V at its start (SL_EXP_PF: 16 MiB cap; 1 evict_last, 2 normal)
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/p1; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
B=bundle/bin/shardline-bench
run() { n=$1; shift; env "$@" > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for round in 1 2; do
for q in none int8 fp8; do
	A="$B --shape 7b --quant $q --batches 1,8 --prompt 128 --new 128 --prefill 0"
	run $q-base-$round $A
	run $q-pf257-$round SL_EXP_PF=257 $A
	run $q-pf258-$round SL_EXP_PF=258 $A
done
done
A="$B --shape 7b --quant none --batches 1 --prompt 1024 --new 128 --prefill 0"
run long-base $A
run long-pf257 SL_EXP_PF=257 $A
run long-pf258 SL_EXP_PF=258 $A
tar czf $OUT/p1.tgz -C /tmp p1
