#!/bin/sh
# M3 (3e440b5): serving fp8 + fp8 KV, 64 / 256 streams (bench/serve.sh)
rm -rf bundle && tar xzf .dev/s.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/m3; rm -rf $R; mkdir -p $R; t0=$(date +%s)
BIN=bundle/bin CASES="fixed-s64:fixed:64:512:256:192 fixed-s256:fixed:256:512:256:256" BATCHING=continuous MODES=native \
	NODE_FLAGS="--quant fp8 --kv-dtype fp8" timeout 200 sh bench/serve.sh $R/serve-fp8 > $R/serve.log 2>&1
echo "serve rc=$? [$(( $(date +%s) - t0 )) s]"; grep -h -E "output tokens/s|ITL" $R/serve-fp8/*.txt | head -6; tail -3 $R/serve.log
tar czf $OUT/m3.tgz -C /tmp m3
