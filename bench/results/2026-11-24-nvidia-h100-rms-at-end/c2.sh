#!/bin/sh
# C2: the final tree: what C1's 200 s limit cut off (test_fused, test_kernels, test_quant), then
# gpu_allreduce.sh alone
rm -rf bundle && tar xzf .dev/c.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/c2; rm -rf $R; mkdir -p $R/logs $R/kernel-logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
RUN_LOGS=$R/kernel-logs timeout 160 sh bundle/run.sh gpu bundle/tests/test_fused bundle/tests/test_kernels bundle/tests/test_quant > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -8
grep -h "^fused" $R/kernel-logs/*fused* 2>/dev/null | head -12
ALLREDUCE_BIN=bundle/tests/test_allreduce RUN_LOGS=$R/kernel-logs timeout 420 sh bundle/run.sh gpu bundle/gpu_allreduce.sh > $R/allreduce.log 2>&1
echo "allreduce rc=$? [$(( $(date +%s) - t0 )) s]"; tail -3 $R/allreduce.log
tar czf $OUT/c2.tgz -C /tmp c2
