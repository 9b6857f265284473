#!/bin/sh
# F1: activation codes alone (SL_ACT_CODES=0 = old) + prefill attention loader, on 2819f7d: same-binary A/B
# (7B fp8 prefill 2048, fp8+kv8 batch 64 decode), bench/quant.sh, serving 64 / 256 streams fp8 + fp8 KV
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/f1; rm -rf $R; mkdir -p $R/logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
B=bundle/bin/shardline-bench
for i in 1 2 3; do for m in old new; do e=SL_X=1; [ $m = old ] && e=SL_ACT_CODES=0
	env $e timeout 120 $B --shape 7b --quant fp8 --batches 1 --prompt 16 --new 8 --prefill 2048 > $R/logs/pf-$m-$i.log 2>&1
	echo "7b fp8 prefill $m $i: $(grep prefill $R/logs/pf-$m-$i.log) [$(( $(date +%s) - t0 )) s]"
	env $e timeout 120 $B --shape 7b --quant fp8 --kv-dtype fp8 --batches 64 --prompt 512 --new 64 --prefill 0 > $R/logs/b64-$m-$i.log 2>&1
	echo "7b fp8+kv8 b64 $m $i: $(grep 'decode tokens' $R/logs/b64-$m-$i.log | sed 's/, this GPU.*//') [$(( $(date +%s) - t0 )) s]"
done; done
BIN=bundle/bin timeout 300 sh bench/quant.sh $R/quant > $R/logs/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -h -E "^batch 1:|prefill" $R/quant/*.log
BIN=bundle/bin CASES="fixed-s64:fixed:64:512:256:192 fixed-s256:fixed:256:512:256:256" BATCHING=continuous MODES=native \
	NODE_FLAGS="--quant fp8 --kv-dtype fp8" timeout 150 sh bench/serve.sh $R/serve-fp8 > $R/logs/serve.log 2>&1
echo "serve rc=$? [$(( $(date +%s) - t0 )) s]"; grep -h -E "output tokens/s|ITL" $R/serve-fp8/*.txt | head -6
tar czf $OUT/f1.tgz -C /tmp f1
