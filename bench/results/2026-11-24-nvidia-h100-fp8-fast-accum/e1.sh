#!/bin/sh
# E1: test_quant with its new case, fp8 W8A8 under cuBLASLt's fast accumulation (TOL_W8A8_FAST)
rm -rf bundle && tar xzf .dev/e.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/e1; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
timeout 300 bundle/tests/test_quant > $R/test_quant.log 2>&1
echo "test_quant rc=$? $(grep -E '^[0-9]+%' $R/test_quant.log | tail -1)"
grep -E "fp8-lt|FAIL|Assert|cuBLASLt ran" $R/test_quant.log | head -20
tar czf $OUT/e1.tgz -C /tmp e1
