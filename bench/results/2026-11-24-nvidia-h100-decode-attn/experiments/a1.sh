#!/bin/sh
# A1 (stop 25): in-pipeline cost of the small decode kernels at batch 1 (ablation: SL_EXP_SKIP)
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/a1; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $R/device.txt 2>&1
B=bundle/bin/shardline-bench
for round in 1 2; do
for q in none int8 fp8; do
	for sk in base norm attn norm,attn layers; do
		e=$sk; [ $sk = base ] && e=
		SL_EXP_SKIP=$e timeout 100 $B --shape 7b --quant $q --batches 1 --prompt 128 --new 128 --prefill 0 > $R/logs/$q-$sk-$round.log 2>&1
		echo "$round $q $sk: $(grep 'decode tokens' $R/logs/$q-$sk-$round.log | head -1) [$(( $(date +%s) - t0 )) s]"
	done
done
done
tar czf $OUT/a1.tgz -C /tmp a1
