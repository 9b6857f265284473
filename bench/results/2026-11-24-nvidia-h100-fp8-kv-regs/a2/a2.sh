#!/bin/sh
# A2: the split target capped at 2 blocks an SM: kernel bench, batch-1 A/B (SL_ATTN_FP8=smem = old),
# serving 64 streams fp8 + fp8 KV, new and old
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/a2; rm -rf $R; mkdir -p $R/logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
B=bundle/bin/shardline-bench
ab() { n=$1; shift; for m in old new; do e=SL_X=1; [ $m = old ] && e=SL_ATTN_FP8=smem
	env $e $B --shape 7b --quant fp8 --kv-dtype fp8 --prefill 0 "$@" > $R/logs/$n-$m.log 2>&1
	echo "$n $m: $(grep -E 'decode tokens' $R/logs/$n-$m.log | sed 's/ decode tokens.s//; s/, this GPU.*//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; done; }
ab b1p512 --batches 1,8 --prompt 512 --new 64
ab b1p128 --batches 1,2 --prompt 128 --new 128
ab b64p512 --batches 64 --prompt 512 --new 128
for m in new old; do e=SL_X=1; [ $m = old ] && e=SL_ATTN_FP8=smem
	env $e BIN=bundle/bin CASES="fixed-s64:fixed:64:512:256:192" BATCHING=continuous MODES=native \
		NODE_FLAGS="--quant fp8 --kv-dtype fp8" timeout 150 sh bench/serve.sh $R/serve-$m > $R/logs/serve-$m.log 2>&1
	echo "serve $m rc=$? [$(( $(date +%s) - t0 )) s]"; grep -h -E "output tokens/s|ITL" $R/serve-$m/*.txt | head -3
done
CK_RUN_CASE=bench timeout 150 bundle/tests/test_attention > $R/logs/attn-bench.log 2>&1
echo "attn bench rc=$? [$(( $(date +%s) - t0 )) s]"; grep "decode bench" $R/logs/attn-bench.log
tar czf $OUT/a2.tgz -C /tmp a2
