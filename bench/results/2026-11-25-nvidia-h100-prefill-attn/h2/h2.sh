#!/bin/sh
# H2: make test-gpu on 2819f7d, second half: test_kernels, test_quant, gpu_allreduce.sh
rm -rf bundle && tar xzf .dev/c.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/h2; rm -rf $R; mkdir -p $R/kernel-logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
ALLREDUCE_BIN=bundle/tests/test_allreduce RUN_LOGS=$R/kernel-logs timeout 560 sh bundle/run.sh gpu bundle/tests/test_kernels bundle/tests/test_quant bundle/gpu_allreduce.sh > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -5
tar czf $OUT/h2.tgz -C /tmp h2
