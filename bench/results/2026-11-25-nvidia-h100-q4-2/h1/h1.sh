#!/bin/sh
# H1: int4 groups of 128 with the magic left in the codes and taken off by a second MMA chain (q_raw4, qg_zneg);
# int4 prenorm allowed (A/B by SL_FUSE). test_quant, test_fused; qbench 1, 2, 4, 5; shardline-bench int4 b1/b8 both ways
rm -rf bundle && tar xzf .dev/h.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/h1; rm -rf $R; mkdir -p $R/kernel-logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
RUN_LOGS=$R/kernel-logs timeout 200 sh bundle/run.sh gpu bundle/tests/test_quant bundle/tests/test_fused > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -3
for o in 1 2 4 5; do
timeout 100 bundle/bin/shardline-qbench --only $o --out $R/qbench$o.json > $R/qbench$o.log 2>&1
echo "qbench $o rc=$? [$(( $(date +%s) - t0 )) s]"; done
grep -E "int4/g128 +gemv|int4/g32 +gemv" $R/qbench1.log; grep -E "int4|fp16" $R/qbench2.log; grep int4 $R/qbench4.log $R/qbench5.log
for f in default swiglu,rope; do
  if [ $f = default ]; then unset SL_FUSE; else export SL_FUSE=$f; fi
  timeout 100 bundle/bin/shardline-bench --shape 7b --quant int4 --batches 1,8 --prompt 128 --new 128 --prefill 0 > $R/bench-$f.log 2>&1
  echo "bench $f rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "^batch" $R/bench-$f.log
done
unset SL_FUSE
tar czf $OUT/h1.tgz -C /tmp h1
