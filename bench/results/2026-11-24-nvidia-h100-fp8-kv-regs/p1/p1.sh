#!/bin/sh
# P1: where the serving regime's time goes: fp8 + fp8 KV decode at batch 64 (context 128 and 512), ncu of layer 5 (decode and prefill chunks)
rm -rf bundle && tar xzf .dev/c.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/p1; rm -rf $R; mkdir -p $R; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
B=bundle/bin/shardline-bench
$B --shape 7b --quant fp8 --kv-dtype fp8 --batches 64 --prompt 128 --new 128 --prefill 0 > $R/b64-p128.log 2>&1
$B --shape 7b --quant fp8 --kv-dtype fp8 --batches 64 --prompt 512 --new 128 --prefill 0 > $R/b64-p512.log 2>&1
$B --shape 7b --quant none --batches 64 --prompt 512 --new 128 --prefill 0 > $R/b64-p512-f16.log 2>&1
grep -hE "decode tokens|prefill" $R/*.log; echo "[$(( $(date +%s) - t0 )) s]"
SL_NO_GRAPHS=1 timeout 300 ncu --clock-control none --nvtx --nvtx-include "layer 5/" --csv --page raw \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size \
  $B --shape 7b --quant fp8 --kv-dtype fp8 --batches 64 --prompt 512 --new 3 --prefill 2048 > $R/ncu-b64.csv 2> $R/ncu-b64.err
echo "ncu rc=$? [$(( $(date +%s) - t0 )) s]"; wc -l $R/ncu-b64.csv; tail -3 $R/ncu-b64.err
tar czf $OUT/p1.tgz -C /tmp p1
