#!/bin/sh
# Q1: shardline-qbench with int4/g32 (tables 1, 2), and Nsight Compute on the int4 GEMV (n = 1):
# groups of 128 (qgemv_kernel QG_CHUNK) against groups of 32 (QG_AFFINE), first launch of each
rm -rf bundle && tar xzf .dev/q1.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/q1; rm -rf $R; mkdir -p $R; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
timeout 200 bundle/bin/shardline-qbench --only 1 --out $R/qbench1.json > $R/qbench1.log 2>&1
echo "qbench 1 rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "int4|fp16|^ *format|copy" $R/qbench1.log | head -24
timeout 120 bundle/bin/shardline-qbench --only 2 --out $R/qbench2.json > $R/qbench2.log 2>&1
echo "qbench 2 rc=$? [$(( $(date +%s) - t0 )) s]"; cat $R/qbench2.log | tail -14
for gm in 1 3; do
	timeout 150 ncu --kernel-name-base demangled --kernel-name "regex:qgemv_kernel<__half, 3, $gm, 1," --launch-count 1 \
		--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
		bundle/bin/shardline-qbench --only 2 > $R/ncu-gm$gm.log 2>&1
	echo "ncu gm $gm rc=$? [$(( $(date +%s) - t0 )) s]"
	grep -E "qgemv_kernel|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Issued Warp|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Grid Size|Block Size" $R/ncu-gm$gm.log | head -16
done
tar czf $OUT/q1.tgz -C /tmp q1
