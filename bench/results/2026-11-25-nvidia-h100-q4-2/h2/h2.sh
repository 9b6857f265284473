#!/bin/sh
# H2: group scales and zero points fetched as bits, converted where used (no wait at the fetch); int4 prenorm allowed (A/B by SL_FUSE).
# test_quant, test_fused; qbench 1, 2, 5; shardline-bench int4 b1/b8 both ways, int8/128
rm -rf bundle && tar xzf .dev/h.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/h2; rm -rf $R; mkdir -p $R/kernel-logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
RUN_LOGS=$R/kernel-logs timeout 200 sh bundle/run.sh gpu bundle/tests/test_quant bundle/tests/test_fused > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -3
for o in 1 2 5; do
timeout 100 bundle/bin/shardline-qbench --only $o --out $R/qbench$o.json > $R/qbench$o.log 2>&1
echo "qbench $o rc=$? [$(( $(date +%s) - t0 )) s]"; done
grep -E "int4/g128 +gemv|int8/g128 +gemv|int8/g32 +gemv" $R/qbench1.log; grep -E "int4|int8|fp16" $R/qbench2.log; grep int4 $R/qbench5.log
for q in int4 int8; do grp=auto; [ $q = int8 ] && grp=128; for f in default swiglu,rope; do
  if [ $f = default ]; then unset SL_FUSE; else export SL_FUSE=$f; fi
  [ $q = int8 ] && [ $f != default ] && continue
  timeout 100 bundle/bin/shardline-bench --shape 7b --quant $q --quant-group $grp --batches 1,8 --prompt 128 --new 128 --prefill 0 > $R/bench-$q-$f.log 2>&1
  echo "bench $q $f rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "^batch" $R/bench-$q-$f.log
done; done
unset SL_FUSE
tar czf $OUT/h2.tgz -C /tmp h2
