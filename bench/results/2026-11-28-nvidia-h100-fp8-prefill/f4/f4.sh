#!/bin/sh
# F4 (final code): the whole tests/gpu_golden.sh with SmolLM2 (sha256 b179c952..., sent in three parts
# by stage.sh over F2, F3 and this call): golden models in f16 / bf16 at tp 1 and tp 2 on one GPU,
# every quantized format and the fp8 KV cache, SmolLM2's logits, greedy tokens and perplexity per format.
sh bench/results/2026-11-28-nvidia-h100-fp8-prefill/stage.sh
[ -f /tmp/p2/qa ] && [ -f /tmp/p2/qb ] && [ -f /tmp/p2/qc ] || { echo "parts missing"; exit 3; }
cat /tmp/p2/qa /tmp/p2/qb /tmp/p2/qc > /tmp/smollm2.gguf && sha256sum /tmp/smollm2.gguf | cut -c1-16
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/f4; rm -rf $R; mkdir -p $R; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
GOLDEN_BIN=bundle/tests/test_parallel PPL_BIN=bundle/bin/shardline-ppl SL_SMOLLM2_GGUF=/tmp/smollm2.gguf \
	timeout 300 sh bundle/gpu_golden.sh > $R/gpu_golden.log 2>&1
echo "gpu_golden rc=$? $(tail -1 $R/gpu_golden.log) [$(( $(date +%s) - t0 )) s]"
grep -E "^ppl|FAIL|shardline-ppl" $R/gpu_golden.log | head -24
tar czf $OUT/f4.tgz -C /tmp f4
