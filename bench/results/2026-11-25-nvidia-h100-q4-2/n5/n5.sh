#!/bin/sh
# N5 (final code: int4 g128 shapes in three bands by tiles): gpu_golden.sh with SmolLM2, test_backend, test_attention, gpu_allreduce.sh
rm -rf bundle && tar xzf .dev/c3.tgz || exit 3
[ -f /tmp/p2/qc ] && [ -f /tmp/p2/qa ] && [ -f /tmp/p2/qb ] || { echo "no parts"; ls /tmp/p2; exit 3; }
cat /tmp/p2/qa /tmp/p2/qb /tmp/p2/qc > /tmp/smollm2.gguf && sha256sum /tmp/smollm2.gguf | cut -c1-16
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/n5; rm -rf $R; mkdir -p $R/logs $R/kernel-logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
GOLDEN_BIN=bundle/tests/test_parallel PPL_BIN=bundle/bin/shardline-ppl SL_SMOLLM2_GGUF=/tmp/smollm2.gguf \
	timeout 200 sh bundle/gpu_golden.sh > $R/logs/gpu_golden.log 2>&1; echo "gpu_golden rc=$? $(tail -1 $R/logs/gpu_golden.log) [$(( $(date +%s) - t0 )) s]"
grep -E "^ppl|FAIL" $R/logs/gpu_golden.log | head -20
ALLREDUCE_BIN=bundle/tests/test_allreduce RUN_LOGS=$R/kernel-logs timeout 360 sh bundle/run.sh gpu bundle/tests/test_backend bundle/tests/test_attention bundle/gpu_allreduce.sh > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -5
tar czf $OUT/n5.tgz -C /tmp n5
