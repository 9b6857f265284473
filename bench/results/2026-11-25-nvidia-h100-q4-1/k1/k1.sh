#!/bin/sh
# K1: int4 groups of 32 (GGUF Q4_1 form): test_quant, test_fused, test_kernels; bench/quant.sh int4 vs int4/32

rm -rf bundle && tar xzf .dev/c.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/k1; rm -rf $R; mkdir -p $R/kernel-logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
RUN_LOGS=$R/kernel-logs timeout 400 sh bundle/run.sh gpu bundle/tests/test_quant bundle/tests/test_fused > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -5
grep -h "int4/g32" $R/kernels.log | head -20
CONFIGS="int4 int4/32" BIN=bundle/bin timeout 150 sh bench/quant.sh $R/quant > $R/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "quant.sh|batch 1:|batch 8:|prefill" $R/quant.log | head -12
tar czf $OUT/k1.tgz -C /tmp k1
