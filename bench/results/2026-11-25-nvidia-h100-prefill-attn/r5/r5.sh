#!/bin/sh
# R5: norm + SiLU codes-only (SL_ACT_CODES=0 = old): A/B on 7B prefill,
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/r5; rm -rf $R; mkdir -p $R/logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
B=bundle/bin/shardline-bench
for i in 1 2; do for m in old new; do e=SL_X=1; [ $m = old ] && e=SL_ACT_CODES=0
	env $e timeout 120 $B --shape 7b --quant fp8 --batches 1 --prompt 16 --new 8 --prefill 2048 > $R/logs/pf-$m-$i.log 2>&1
	echo "7b fp8 $m $i: $(grep prefill $R/logs/pf-$m-$i.log) [$(( $(date +%s) - t0 )) s]"
	env $e timeout 120 $B --shape 7b --quant fp8 --kv-dtype fp8 --batches 1 --prompt 16 --new 8 --prefill 2048 > $R/logs/pfkv-$m-$i.log 2>&1
	echo "7b fp8+kv8 $m $i: $(grep prefill $R/logs/pfkv-$m-$i.log) [$(( $(date +%s) - t0 )) s]"
done; done
timeout 250 sh bundle/run.sh gpu bundle/tests/test_quant > $R/logs/test_quant.log 2>&1
echo "test_quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "codes-only|fused|mark:" $R/logs/test_quant.log; tail -1 $R/logs/test_quant.log
for m in old new; do e=SL_X=1; [ $m = old ] && e=SL_ACT_CODES=0
	env $e timeout 120 $B --shape 7b --quant fp8 --kv-dtype fp8 --batches 64 --prompt 512 --new 64 --prefill 0 > $R/logs/b64-$m.log 2>&1
	echo "7b fp8+kv8 b64 $m: $(grep 'decode tokens' $R/logs/b64-$m.log | sed 's/, this GPU.*//') [$(( $(date +%s) - t0 )) s]"
done
tar czf $OUT/r5.tgz -C /tmp r5
