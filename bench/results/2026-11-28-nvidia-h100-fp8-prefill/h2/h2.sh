#!/bin/sh
# H2: the SiLU * up fp8 kernel with every load issued first, and no decode attention launch for
# an all-prefill batch: exact tests (test_quant act_fp8_fused / act_mark_codes / fp8,
# test_attention vs_cpu), 7B prefill A/B against the tree before (old-bench, same call,
# alternating), ncu of one fp8 prefill layer, qbench table 6 with per-row scales on one side only.
rm -rf bundle && tar xzf .dev/h/h2.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/h2; rm -rf $R; mkdir -p $R; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
cat $R/device.txt; md5sum bundle/bin/* .dev/h/old-bench > $R/md5.txt
for c in act_fp8_fused act_mark_codes fp8; do
  CK_RUN_CASE=$c timeout 120 bundle/tests/test_quant > $R/quant-$c.log 2>&1
  echo "test_quant $c rc=$? $(el)"; grep -E "^kernel|FAIL|Checks" $R/quant-$c.log | tail -4
done
CK_RUN_CASE=vs_cpu timeout 200 bundle/tests/test_attention > $R/attn.log 2>&1
echo "test_attention vs_cpu rc=$? $(el)"; grep -E "FAIL|Checks|passed" $R/attn.log | tail -3
p() { # p NAME BIN QUANT
  timeout 60 $2 --shape 7b --quant $3 --batches 1 --prompt 16 --new 8 --prefill 2048 > $R/pf-$1.log 2>&1
  echo "prefill $1 rc=$? $(el) $(grep -E '^prefill' $R/pf-$1.log)"
}
N=bundle/bin/shardline-bench O=.dev/h/old-bench
for i in 1 2 3; do p old-fp8-$i $O fp8; p new-fp8-$i $N fp8; p old-f16-$i $O none; p new-f16-$i $N none; done
SL_NO_GRAPHS=1 timeout 150 ncu --clock-control none --cache-control none --nvtx --nvtx-include "layer 5/" --csv --page raw \
  --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size \
  $N --shape 7b --quant fp8 --batches 1 --prompt 16 --new 2 --prefill 2048 > $R/ncu-fp8.csv 2> $R/ncu-fp8.err
echo "ncu rc=$? $(el)"; grep -E "silu_mul|attn_|act_fp8|norm_reg" $R/ncu-fp8.csv | tail -8 | cut -c1-60,200-
timeout 200 bundle/bin/shardline-qbench --only 6 --lt-n 2048,1024 --out $R/qbench6.json > $R/qbench6.log 2>&1
echo "qbench rc=$? $(el)"; grep -vE "sweep|^$" $R/qbench6.log
tar czf $OUT/h2.tgz -C /tmp h2
