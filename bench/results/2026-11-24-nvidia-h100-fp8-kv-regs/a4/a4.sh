#!/bin/sh
# A4: the register fp8 path, spread 2 blocks an SM when its grid fits that way: kernel alone,
# same-binary step A/B (old = SL_ATTN_FP8=smem), serving 64 streams fp8 + fp8 KV, test_attention vs_cpu
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/a4; rm -rf $R; mkdir -p $R/logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for c in 32,32,128,1,200,4096 32,32,128,1,600,4096 32,32,128,2,600,4096 32,32,128,8,512,4096 32,8,128,1,600,4096 32,8,128,1,4096,4096 32,8,128,32,1024 32,32,128,1,4096,4096 32,32,128,64,640; do
	SL_ATTN_BENCH=$c CK_RUN_CASE=bench timeout 90 bundle/tests/test_attention > $R/logs/k-$c.log 2>&1
	grep "decode bench" $R/logs/k-$c.log; done
echo "[$(( $(date +%s) - t0 )) s]"
B=bundle/bin/shardline-bench
ab() { n=$1; shift; for m in old new; do e=SL_X=1; [ $m = old ] && e=SL_ATTN_FP8=smem
	env $e $B --shape 7b --quant fp8 --kv-dtype fp8 --prefill 0 "$@" > $R/logs/$n-$m.log 2>&1
	echo "$n $m: $(grep -E 'decode tokens' $R/logs/$n-$m.log | sed 's/ decode tokens.s//; s/, this GPU.*//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; done; }
ab p128 --batches 1,2,8 --prompt 128 --new 128
ab p512 --batches 1,8 --prompt 512 --new 64
ab p128b --batches 32,64 --prompt 128 --new 128
ab p512b --batches 64 --prompt 512 --new 128
ab p128r --batches 1,2,8 --prompt 128 --new 128
for m in new old; do e=SL_X=1; [ $m = old ] && e=SL_ATTN_FP8=smem
	env $e BIN=bundle/bin CASES="fixed-s64:fixed:64:512:256:192" BATCHING=continuous MODES=native \
		NODE_FLAGS="--quant fp8 --kv-dtype fp8" timeout 150 sh bench/serve.sh $R/serve-$m > $R/logs/serve-$m.log 2>&1
	echo "serve $m rc=$? [$(( $(date +%s) - t0 )) s]"; grep -h -E "output tokens/s|ITL" $R/serve-$m/*.txt | head -3
done
CK_RUN_CASE=vs_cpu timeout 200 sh bundle/run.sh gpu bundle/tests/test_attention > $R/logs/attn-test.log 2>&1
echo "attn test rc=$? [$(( $(date +%s) - t0 )) s]"; tail -2 $R/logs/attn-test.log
tar czf $OUT/a4.tgz -C /tmp a4
