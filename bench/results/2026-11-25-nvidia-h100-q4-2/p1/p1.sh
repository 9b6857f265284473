#!/bin/sh
# P1 (d9a5ca7 binaries): where the 7B int4 batch-1 decode step goes, kernel by kernel (ncu, durations of graph nodes)
rm -rf bundle && tar xzf .dev/f.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/p1; rm -rf $R; mkdir -p $R; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for q in int4; do
  timeout 300 ncu --metrics gpu__time_duration.sum --csv --kernel-name-base function \
    bundle/bin/shardline-bench --shape 7b --quant $q --batches 1 --prompt 16 --new 6 --prefill 0 \
    > $R/$q.csv 2> $R/$q.err
  echo "$q rc=$? [$(( $(date +%s) - t0 )) s]"; wc -l $R/$q.csv; tail -3 $R/$q.err
done
tar czf $OUT/p1.tgz -C /tmp p1
