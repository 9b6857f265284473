#!/bin/sh
# F1 (final code, f459efe): the CUDA kernel suites (test_kernels, test_quant, test_backend,
# test_attention; test_fused, whose kernels did not change, left out for the 64 MiB carry) and bench/quant.sh over every format (prefill: median of 5 runs after the cold one).
rm -rf bundle && tar xzf .dev/h/f.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/f1; rm -rf $R; mkdir -p $R/kernel-logs; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
cat $R/device.txt; md5sum bundle/bin/* bundle/tests/* > $R/md5.txt
RUN_LOGS=$R/kernel-logs timeout 330 sh bundle/run.sh gpu bundle/tests/test_kernels bundle/tests/test_quant \
  bundle/tests/test_backend bundle/tests/test_attention > $R/kernels.log 2>&1
echo "kernels rc=$? $(el)"; grep -E "Checks|passed" $R/kernels.log | tail -7
BIN=bundle/bin timeout 250 sh bench/quant.sh $R/quant > $R/quant.log 2>&1
echo "quant rc=$? $(el)"; cat $R/quant/quant.md
tar czf $OUT/f1.tgz -C /tmp f1
