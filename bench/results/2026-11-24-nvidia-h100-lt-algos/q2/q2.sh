#!/bin/sh
# Q2: shardline-qbench table 6 with every cuBLASLt fp8 algorithm id, tile and split-K at n = 64 (7B shapes)
rm -rf bundle && tar xzf .dev/q.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/q2; rm -rf $R; mkdir -p $R; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
timeout 240 bundle/bin/shardline-qbench --only 6 --out $R/qbench-lt.json > $R/qbench-lt.txt 2>&1
echo "rc=$? [$(( $(date +%s) - t0 )) s]"; cat $R/qbench-lt.txt
tar czf $OUT/q2.tgz -C /tmp q2
