#!/bin/sh
# H1: where the fp8 prefill of 2048 tokens stands and what cuBLASLt offers at that size:
# qbench table 6 (every heuristic offer, fast accumulation and per-tensor scales for reference,
# the (id, tile, stages, cluster) sweep), prefill A/B fp16 / fp8 alternating, ncu durations of one
# prefill layer (fp16, fp8), test_attention's bench.
rm -rf bundle && tar xzf .dev/h/h1.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/h1; rm -rf $R; mkdir -p $R; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
cat $R/device.txt
B=bundle/bin/shardline-bench
p() { # p NAME QUANT
  timeout 60 $B --shape 7b --quant $2 --batches 1 --prompt 16 --new 8 --prefill 2048 > $R/pf-$1.log 2>&1
  echo "prefill $1 rc=$? $(el) $(grep -E '^prefill' $R/pf-$1.log)"
}
p f16-a none; p fp8-a fp8; p f16-b none; p fp8-b fp8
timeout 240 bundle/bin/shardline-qbench --only 6 --lt-n 2048,1024 --out $R/qbench6.json > $R/qbench6.log 2>&1
echo "qbench rc=$? $(el)"; cat $R/qbench6.log
CK_RUN_CASE=bench timeout 60 bundle/tests/test_attention > $R/attn-bench.log 2>&1
echo "attn bench rc=$? $(el)"; grep bench $R/attn-bench.log
for q in none fp8; do
  SL_NO_GRAPHS=1 timeout 150 ncu --clock-control none --cache-control none --nvtx --nvtx-include "layer 5/" --csv --page raw \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size \
    $B --shape 7b --quant $q --batches 1 --prompt 16 --new 2 --prefill 2048 > $R/ncu-$q.csv 2> $R/ncu-$q.err
  echo "ncu $q rc=$? $(el)"; wc -l < $R/ncu-$q.csv; tail -2 $R/ncu-$q.err
done
p f16-c none; p fp8-c fp8
tar czf $OUT/h1.tgz -C /tmp h1
