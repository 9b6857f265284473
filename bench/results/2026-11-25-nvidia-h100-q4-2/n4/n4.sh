#!/bin/sh
# N4 (final code: int4 g128 shapes in three bands by tiles): test_quant, test_fused, test_kernels; qbench 1, 2, 4; bench/quant.sh (every format)
rm -rf bundle && tar xzf .dev/f3.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/n4; rm -rf $R; mkdir -p $R/kernel-logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
RUN_LOGS=$R/kernel-logs timeout 240 sh bundle/run.sh gpu bundle/tests/test_quant bundle/tests/test_fused bundle/tests/test_kernels > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -4
for o in 1 2 4; do
timeout 100 bundle/bin/shardline-qbench --only $o --out $R/qbench$o.json > $R/qbench$o.log 2>&1
echo "qbench $o rc=$? [$(( $(date +%s) - t0 )) s]"; done
grep -E "int4/g128 +gemv|int8/g128 +gemv" $R/qbench1.log | head -8; grep -E "^int|^fp" $R/qbench2.log | tail -7; grep -E "format|int4" $R/qbench4.log
BIN=bundle/bin timeout 290 sh bench/quant.sh $R/quant > $R/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; cat $R/quant/quant.md
tar czf $OUT/n4.tgz -C /tmp n4
