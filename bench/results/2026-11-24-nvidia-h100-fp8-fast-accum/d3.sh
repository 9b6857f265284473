#!/bin/sh
# D3: the serving benchmark at 64 streams (fp8 weights + fp8 KV, 512 + 256), default against
# SL_FP8_FAST_ACCUM=1 (D1 and D2 lacked shardline-tok and shardline in the bundle; D3 has them)
rm -rf bundle && tar xzf .dev/d.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/d3; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for f in 0 1; do
	SL_FP8_FAST_ACCUM=$f BIN=bundle/bin CASES="fixed-s64:fixed:64:512:256:192" BATCHING=continuous MODES=native \
		NODE_FLAGS="--quant fp8 --kv-dtype fp8" timeout 200 sh bench/serve.sh $R/serve-fast$f > $R/logs/serve-fast$f.log 2>&1
	echo "serve fast=$f rc=$? [$(( $(date +%s) - t0 )) s]"; grep -h -E "output tokens/s|requests|ITL|inter" $R/serve-fast$f/*.txt | head -4
done
tar czf $OUT/d3.tgz -C /tmp d3
