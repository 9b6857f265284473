#!/bin/sh
# M1 (3e440b5): test_quant, test_fused, test_kernels; bench/quant.sh (all formats); serving fp8 + fp8 KV, 64 / 256 streams
rm -rf bundle && tar xzf .dev/f.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/m1; rm -rf $R; mkdir -p $R/kernel-logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
RUN_LOGS=$R/kernel-logs timeout 200 sh bundle/run.sh gpu bundle/tests/test_quant bundle/tests/test_fused bundle/tests/test_kernels > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -4
BIN=bundle/bin timeout 270 sh bench/quant.sh $R/quant > $R/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; cat $R/quant/quant.md
BIN=bundle/bin CASES="fixed-s64:fixed:64:512:256:192 fixed-s256:fixed:256:512:256:256" BATCHING=continuous MODES=native \
	NODE_FLAGS="--quant fp8 --kv-dtype fp8" timeout 110 sh bench/serve.sh $R/serve-fp8 > $R/serve.log 2>&1
echo "serve rc=$? [$(( $(date +%s) - t0 )) s]"; grep -h -E "output tokens/s" $R/serve-fp8/*.txt | head -4
tar czf $OUT/m1.tgz -C /tmp m1
