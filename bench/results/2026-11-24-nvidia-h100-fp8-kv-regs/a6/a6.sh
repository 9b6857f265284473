#!/bin/sh
# A6: the register path without the 4-blocks launch bound (110 registers, not 128): kernel alone at short
# and long contexts, same-binary A/B (old = SL_ATTN_FP8=smem) at batch 1-64, serving 64 and 256 streams
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/a6; rm -rf $R; mkdir -p $R/logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for c in 32,32,128,1,200,4096 32,32,128,1,600,4096 32,8,128,1,600,4096 32,32,128,8,512,4096 32,8,128,32,1024; do
	SL_ATTN_BENCH=$c CK_RUN_CASE=bench timeout 90 bundle/tests/test_attention > $R/logs/k-$c.log 2>&1
	echo "$(grep "decode bench" $R/logs/k-$c.log | sed 's/attention decode bench //; s/K.V.*MB, //' | tr '\n' ';')"; done
echo "[$(( $(date +%s) - t0 )) s]"
B=bundle/bin/shardline-bench
ab() { n=$1; shift; for m in old new; do e=SL_X=1; [ $m = old ] && e=SL_ATTN_FP8=smem
	env $e $B --quant fp8 --kv-dtype fp8 --prefill 0 "$@" > $R/logs/$n-$m.log 2>&1
	echo "$n $m: $(grep -E 'decode tokens' $R/logs/$n-$m.log | sed 's/ decode tokens.s//; s/, this GPU.*//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; done; }
ab 7b-p128 --shape 7b --batches 1,2,8 --prompt 128 --new 128
ab 8b-p512 --shape 8b --batches 1,8,32,64 --prompt 512 --new 128
ab 7b-p512 --shape 7b --batches 1,8,64 --prompt 512 --new 128
ab 7b-p128r --shape 7b --batches 1,2,8 --prompt 128 --new 128
BIN=bundle/bin CASES="fixed-s64:fixed:64:512:256:192 fixed-s256:fixed:256:512:256:256" BATCHING=continuous MODES=native \
	NODE_FLAGS="--quant fp8 --kv-dtype fp8" timeout 200 sh bench/serve.sh $R/serve-fp8 > $R/logs/serve.log 2>&1
echo "serve rc=$? [$(( $(date +%s) - t0 )) s]"; grep -h -E "output tokens/s|ITL" $R/serve-fp8/*.txt | head -6
tar czf $OUT/a6.tgz -C /tmp a6
