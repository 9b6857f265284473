#!/bin/sh
# A5: a grouped-query shape (8b: Llama 3 8B's layers) fp8 + fp8 KV, same-binary A/B (old = SL_ATTN_FP8=smem);
# the GQA kernel alone with PDL off (is the kernel bench's 41 us an artefact of back-to-back PDL launches?);
# bench/quant.sh for fp8 + fp8 KV on the 7B
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/a5; rm -rf $R; mkdir -p $R/logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for p in 1 0; do for c in 32,8,128,32,1024 32,8,128,8,1024 32,8,128,64,640; do
	SL_PDL=$p SL_ATTN_BENCH=$c CK_RUN_CASE=bench timeout 90 bundle/tests/test_attention > $R/logs/k-pdl$p-$c.log 2>&1
	echo "pdl $p: $(grep "decode bench" $R/logs/k-pdl$p-$c.log | sed 's/attention decode bench //; s/K.V.*MB, //' | tr '\n' ';')"; done; done
echo "[$(( $(date +%s) - t0 )) s]"
B=bundle/bin/shardline-bench
ab() { n=$1; shift; for m in old new; do e=SL_X=1; [ $m = old ] && e=SL_ATTN_FP8=smem
	env $e $B --quant fp8 --kv-dtype fp8 --prefill 0 "$@" > $R/logs/$n-$m.log 2>&1
	echo "$n $m: $(grep -E 'decode tokens' $R/logs/$n-$m.log | sed 's/ decode tokens.s//; s/, this GPU.*//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; done; }
ab 8b-p512 --shape 8b --batches 1,8,32,64 --prompt 512 --new 128
ab 8b-p1024 --shape 8b --batches 1,32 --prompt 1024 --new 64
ab 8b-p512r --shape 8b --batches 1,8,32,64 --prompt 512 --new 128
BIN=bundle/bin CONFIGS="fp8+kv8" timeout 100 sh bench/quant.sh $R/quant > $R/logs/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "quant.sh:|batch|prefill" $R/logs/quant.log | head -8
tar czf $OUT/a5.tgz -C /tmp a5
