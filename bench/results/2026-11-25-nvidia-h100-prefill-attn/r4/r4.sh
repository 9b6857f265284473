#!/bin/sh
# R4: SiLU codes-only (SL_SILU_CODES=0 = old) and the prefill attention (fp8 cache: 8 warps): A/B on 7B prefill,
# attention bench, test_quant, test_attention vs_cpu
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/r4; rm -rf $R; mkdir -p $R/logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
B=bundle/bin/shardline-bench
for i in 1 2; do for m in old new; do e=SL_X=1; [ $m = old ] && e=SL_SILU_CODES=0
	env $e timeout 120 $B --shape 7b --quant fp8 --batches 1 --prompt 16 --new 8 --prefill 2048 > $R/logs/pf-$m-$i.log 2>&1
	echo "7b fp8 $m $i: $(grep prefill $R/logs/pf-$m-$i.log) [$(( $(date +%s) - t0 )) s]"
	env $e timeout 120 $B --shape 7b --quant fp8 --kv-dtype fp8 --batches 1 --prompt 16 --new 8 --prefill 2048 > $R/logs/pfkv-$m-$i.log 2>&1
	echo "7b fp8+kv8 $m $i: $(grep prefill $R/logs/pfkv-$m-$i.log) [$(( $(date +%s) - t0 )) s]"
done; done
SL_ATTN_BENCH=prefill CK_RUN_CASE=bench timeout 60 bundle/tests/test_attention > $R/logs/bench.log 2>&1
grep "prefill bench" $R/logs/bench.log | sed 's/attention prefill bench //'
timeout 250 sh bundle/run.sh gpu bundle/tests/test_quant > $R/logs/test_quant.log 2>&1
echo "test_quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "codes-only|fused|mark:" $R/logs/test_quant.log; tail -1 $R/logs/test_quant.log
CK_RUN_CASE=vs_cpu timeout 170 sh bundle/run.sh gpu bundle/tests/test_attention > $R/logs/test_attention.log 2>&1
echo "test_attention rc=$? [$(( $(date +%s) - t0 )) s]"; tail -1 $R/logs/test_attention.log
tar czf $OUT/r4.tgz -C /tmp r4
