#!/bin/sh
# H4 (f066c26 + more block shapes in qbench table 4): qbench 4; shardline-bench int4 default vs SL_FUSE with the norm
# fused into the o / down GEMV's last block (swiglu,rope,norm)
rm -rf bundle && tar xzf .dev/h4.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/h4; rm -rf $R; mkdir -p $R; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
timeout 150 bundle/bin/shardline-qbench --only 4 --out $R/qbench4.json > $R/qbench4.log 2>&1
echo "qbench 4 rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "format|int4" $R/qbench4.log
for f in default norm; do
  unset SL_FUSE; [ $f = norm ] && export SL_FUSE=swiglu,rope,norm
  timeout 100 bundle/bin/shardline-bench --shape 7b --quant int4 --batches 1,8 --prompt 128 --new 128 --prefill 0 > $R/bench-$f.log 2>&1
  echo "bench $f rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "^batch" $R/bench-$f.log
done
tar czf $OUT/h4.tgz -C /tmp h4
