#!/bin/sh
# H3: scale bits (H2) + qgemv_kernel's blocks an SM as a parameter; down on qgemv_kernel unless SL_LEAN.
# qbench 2, 4 (shapes x blocks an SM, all four projections), 5; shardline-bench int4: default, SL_LEAN=1, SL_FUSE=swiglu,rope
rm -rf bundle && tar xzf .dev/h.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/h3; rm -rf $R; mkdir -p $R; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for o in 2 4 5; do
timeout 150 bundle/bin/shardline-qbench --only $o --out $R/qbench$o.json > $R/qbench$o.log 2>&1
echo "qbench $o rc=$? [$(( $(date +%s) - t0 )) s]"; done
grep -E "int4/g128 +gemv" $R/qbench2.log; grep -E "^int|^fp|^format" $R/qbench2.log | tail -8; grep -E "format|int4" $R/qbench4.log; grep int4 $R/qbench5.log
for f in default lean nofuse; do
  unset SL_FUSE SL_LEAN; [ $f = lean ] && export SL_LEAN=1; [ $f = nofuse ] && export SL_FUSE=swiglu,rope
  timeout 100 bundle/bin/shardline-bench --shape 7b --quant int4 --batches 1,8 --prompt 128 --new 128 --prefill 0 > $R/bench-$f.log 2>&1
  echo "bench $f rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "^batch" $R/bench-$f.log
done
tar czf $OUT/h3.tgz -C /tmp h3
