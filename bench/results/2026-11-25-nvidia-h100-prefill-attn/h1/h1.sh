#!/bin/sh
# H1: make test-gpu on 2819f7d, first half: SmolLM2 golden + perplexity,
# test_attention, test_backend, test_fused
rm -rf bundle && tar xzf .dev/c.tgz || exit 3
[ -f /tmp/parts/paad ] || { echo "no parts"; exit 3; }
cat /tmp/parts/paaa /tmp/parts/paab /tmp/parts/paac /tmp/parts/paad > /tmp/smollm2.gguf && sha256sum /tmp/smollm2.gguf | cut -c1-16
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/h1; rm -rf $R; mkdir -p $R/logs $R/kernel-logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
GOLDEN_BIN=bundle/tests/test_parallel PPL_BIN=bundle/bin/shardline-ppl SL_SMOLLM2_GGUF=/tmp/smollm2.gguf \
	timeout 170 sh bundle/gpu_golden.sh > $R/logs/gpu_golden.log 2>&1; echo "gpu_golden rc=$? $(tail -1 $R/logs/gpu_golden.log) [$(( $(date +%s) - t0 )) s]"
grep -E "^ppl" $R/logs/gpu_golden.log
RUN_LOGS=$R/kernel-logs timeout 420 sh bundle/run.sh gpu bundle/tests/test_attention bundle/tests/test_backend bundle/tests/test_fused > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -5
grep -h "^fused" $R/kernel-logs/*fused* 2>/dev/null | head -12
tar czf $OUT/h1.tgz -C /tmp h1
