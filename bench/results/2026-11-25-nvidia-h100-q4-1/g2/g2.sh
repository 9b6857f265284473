#!/bin/sh
# G2: the QG_CHUNK GEMV finds a chunk's group by a shift, not a division: test_quant, test_fused,
# shardline-qbench tables 1-2, bench/quant.sh int4 int8/128 int4/32
rm -rf bundle && tar xzf .dev/g2.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/g2; rm -rf $R; mkdir -p $R/kernel-logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
RUN_LOGS=$R/kernel-logs timeout 300 sh bundle/run.sh gpu bundle/tests/test_quant bundle/tests/test_fused > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -3
timeout 100 bundle/bin/shardline-qbench --only 1 --out $R/qbench1.json > $R/qbench1.log 2>&1
echo "qbench 1 rc=$?"; grep -E "copy|int4/g128 +gemv|int4/g32 +gemv|int8/g128 +gemv" $R/qbench1.log
timeout 100 bundle/bin/shardline-qbench --only 2 --out $R/qbench2.json > $R/qbench2.log 2>&1
echo "qbench 2 rc=$?"; grep -E "int4|int8|fp16" $R/qbench2.log
CONFIGS="int4 int8/128 int4/32" BIN=bundle/bin timeout 200 sh bench/quant.sh $R/quant > $R/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "quant.sh|batch 1:|batch 8:" $R/quant.log | head -12
tar czf $OUT/g2.tgz -C /tmp g2
