#!/bin/sh
# V1 (stop 26): on the final tree (047d7ea): SmolLM2 golden + perplexity, the kernel half of
# make test-gpu, and bench/quant.sh for every format
rm -rf bundle && tar xzf .dev/fin.tgz || exit 3
[ -f /tmp/parts/paad ] || { echo "no parts"; exit 3; }
cat /tmp/parts/paaa /tmp/parts/paab /tmp/parts/paac /tmp/parts/paad > /tmp/smollm2.gguf && sha256sum /tmp/smollm2.gguf | cut -c1-16
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/v1; rm -rf $R; mkdir -p $R/logs $R/kernel-logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
GOLDEN_BIN=bundle/tests/test_parallel PPL_BIN=bundle/bin/shardline-ppl SL_SMOLLM2_GGUF=/tmp/smollm2.gguf \
	timeout 150 sh bundle/gpu_golden.sh > $R/logs/gpu_golden.log 2>&1; echo "gpu_golden rc=$? $(tail -1 $R/logs/gpu_golden.log) [$(( $(date +%s) - t0 )) s]"
grep -E "^ppl" $R/logs/gpu_golden.log
ALLREDUCE_BIN=bundle/tests/test_allreduce RUN_LOGS=$R/kernel-logs timeout 290 sh bundle/run.sh gpu bundle/tests/test_attention bundle/tests/test_backend bundle/tests/test_fused bundle/tests/test_kernels bundle/tests/test_quant bundle/gpu_allreduce.sh > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -8
BIN=bundle/bin CONFIGS="none int8 fp8 int4 fp8+kv8" timeout 140 sh bench/quant.sh $R/quant > $R/logs/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "quant.sh:|batch 1:|prefill" $R/logs/quant.log | head -20
tar czf $OUT/v1.tgz -C /tmp v1
