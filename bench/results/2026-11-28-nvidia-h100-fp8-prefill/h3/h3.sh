#!/bin/sh
# H3: the o and down GEMMs add into the fp32 residual (cuBLAS fp16 and cuBLASLt W8A8 with beta 1;
# SL_GEMM_ADD=0 the old way, same binary): the new tests (test_quant fp8_add, test_kernels
# matmul_add) and their neighbours, the golden models at fp16 and fp8 (tp 1), 7B prefill of 2048
# tokens and batch-64 decode A/B (alternating, median of 5 prefill runs each), ncu of one layer.
rm -rf bundle && tar xzf .dev/h/h3.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=/tmp/h3; rm -rf $R; mkdir -p $R; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
cat $R/device.txt; md5sum bundle/bin/* bundle/tests/* > $R/md5.txt
for c in fp8_add act_mark act_mark_codes fp8 act_fp8_fused; do
  CK_RUN_CASE=$c timeout 150 bundle/tests/test_quant > $R/quant-$c.log 2>&1
  echo "test_quant $c rc=$? $(el)"; grep -E "^kernel|FAIL|Checks" $R/quant-$c.log | tail -3
done
for c in matmul_add matmul; do
  CK_RUN_CASE=$c timeout 120 bundle/tests/test_kernels > $R/kernels-$c.log 2>&1
  echo "test_kernels $c rc=$? $(el)"; grep -E "^kernel|FAIL|Checks" $R/kernels-$c.log | tail -6
done
T=bundle/tests/test_parallel
g() { n=$1; shift; timeout 150 mpirun --oversubscribe -np 1 $T --tp 1 --pp 1 --device cuda --dtype f16 "$@" > $R/golden-$n.log 2>&1
  echo "golden $n rc=$? $(el)"; grep -E "^FAIL|passed, " $R/golden-$n.log | tail -3; }
g f16 --logit-tol 2e-2
g fp8 --quant fp8 --logit-tol 3.2e-1 --greedy-report-only
B=bundle/bin/shardline-bench
p() { # p NAME QUANT [ENV]
  env ${3:-SL_X=1} timeout 90 $B --shape 7b --quant $2 --batches 1 --prompt 16 --new 8 --prefill 2048 > $R/pf-$1.log 2>&1
  echo "prefill $1 rc=$? $(el) $(grep -E '^prefill' $R/pf-$1.log)"
}
for i in 1 2 3; do
  p fp8-new-$i fp8; p fp8-old-$i fp8 SL_GEMM_ADD=0; p f16-new-$i none; p f16-old-$i none SL_GEMM_ADD=0
done
d() { env ${3:-SL_X=1} timeout 90 $B --shape 7b --quant $2 --batches 64 --prompt 128 --new 64 --prefill 0 > $R/b64-$1.log 2>&1
  echo "b64 $1 rc=$? $(el) $(grep -E '^batch 64' $R/b64-$1.log)"; }
d fp8-new fp8; d fp8-old fp8 SL_GEMM_ADD=0; d f16-new none; d f16-old none SL_GEMM_ADD=0
for q in none fp8; do
  SL_NO_GRAPHS=1 timeout 150 ncu --clock-control none --cache-control none --nvtx --nvtx-include "layer 5/" --csv --page raw \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size \
    $B --shape 7b --quant $q --batches 1 --prompt 16 --new 2 --prefill 2048 --prefill-runs 1 > $R/ncu-$q.csv 2> $R/ncu-$q.err
  echo "ncu $q rc=$? $(el)"
done
tar czf $OUT/h3.tgz -C /tmp h3
