#!/bin/sh
# T1 (stop 25): the kernel half of make test-gpu on the final tree (f9037ff)
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/t1; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
ALLREDUCE_BIN=bundle/tests/test_allreduce RUN_LOGS=$R/logs timeout 560 sh bundle/run.sh gpu bundle/tests/test_attention bundle/tests/test_backend bundle/tests/test_fused bundle/tests/test_kernels bundle/tests/test_quant bundle/gpu_allreduce.sh > $R/kernels.log 2>&1
echo "rc=$? [$(( $(date +%s) - t0 )) s]"; tail -12 $R/kernels.log
tar czf $OUT/t1.tgz -C /tmp t1
