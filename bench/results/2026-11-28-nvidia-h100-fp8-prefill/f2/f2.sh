#!/bin/sh
# F2 (final code, the binaries F1 unpacked): bench/serve.sh with fp8 weights and fp8 KV, 7B random,
# 512-token prompts and 256-token outputs at 64 and 256 streams (run a second time: the first, which
# also staged SmolLM2 part 1, lacked the shardline client serve.sh waits with, and timed out).
tar xzf .dev/s/s.tgz && ls bundle/bin | tr "\n" " " || exit 3  # the client the first try lacked
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/f2; rm -rf $R; mkdir -p $R; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
BIN=bundle/bin CASES="fixed-s64:fixed:64:512:256:192 fixed-s256:fixed:256:512:256:256" BATCHING=continuous MODES=native \
	NODE_FLAGS="--quant fp8 --kv-dtype fp8" timeout 230 sh bench/serve.sh $R/serve-fp8 > $R/serve.log 2>&1
echo "serve rc=$? [$(( $(date +%s) - t0 )) s]"; grep -h -E "output tokens/s|ITL" $R/serve-fp8/*.txt | head -6; tail -3 $R/serve.log
tar czf $OUT/f2.tgz -C /tmp f2
