#!/bin/sh
# G3 (final code: greedy batches take the argmax alone; int4's LM head in int8 by default):
# kernel tests, greedy generation through the engine on the golden models (int4 at tp 1 and tp 2,
# whose LM head is now int8), the 7B int4 decode A/B (LM head int8 against --quant-lm-head none,
# and once the old path: none + SL_SAMPLE_FULL=1), then bench/quant.sh over every format.
rm -rf bundle && tar xzf .dev/g3.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=/tmp/g3; rm -rf $R; mkdir -p $R; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
CK_RUN_CASE=argmax_rows timeout 60 bundle/tests/test_kernels > $R/kernels-argmax_rows.log 2>&1
echo "test_kernels argmax_rows rc=$? $(el)"; grep -E "^kernel|Checks" $R/kernels-argmax_rows.log
timeout 150 bundle/tests/test_quant > $R/test_quant.log 2>&1; echo "test_quant rc=$? $(el)"; grep -E "FAIL|Checks" $R/test_quant.log | tail -3
timeout 60 bundle/tests/test_backend > $R/test_backend.log 2>&1; echo "test_backend rc=$? $(el)"; grep Checks $R/test_backend.log
g() { # g LOGNAME NP ARGS...
  n=$1; shift
  timeout 120 mpirun --oversubscribe -np "$@" > $R/golden-$n.log 2>&1; echo "golden $n rc=$? $(el)"
  grep -E "^FAIL|passed, " $R/golden-$n.log | tail -3
}
T=bundle/tests/test_parallel
g f16-tp1 1 $T --tp 1 --pp 1 --device cuda --dtype f16 --logit-tol 2e-2
g int4-tp1 1 $T --tp 1 --pp 1 --device cuda --dtype f16 --quant int4 --logit-tol 6.2e-1 --greedy-report-only
SL_CUSTOM_AR=1 g int4-tp2 2 $T --tp 2 --pp 1 --device cuda --dtype f16 --quant int4 --logit-tol 6.2e-1 --greedy-report-only
b() { # b NAME QUANT [env] [-- bench args]
  n=$1; q=$2; shift 2
  env $1 timeout 100 bundle/bin/shardline-bench --shape 7b --quant $q --batches 1,8 --prompt 128 --new 128 \
    --prefill 0 $2 $3 --out $R/bench-$n.json > $R/bench-$n.log 2>&1
  echo "bench $n rc=$? $(el)"; grep -E "^(batch 1:|batch 8|shape)" $R/bench-$n.log | head -3
}
b int4-a int4 SL_X=0; b int4-lmnone-a int4 SL_X=0 --quant-lm-head none
b int4-b int4 SL_X=0; b int4-lmnone-b int4 SL_X=0 --quant-lm-head none
b int4-c int4 SL_X=0; b int4-lmnone-c int4 SL_X=0 --quant-lm-head none
b int4-old int4 SL_SAMPLE_FULL=1 --quant-lm-head none
BIN=bundle/bin timeout 250 sh bench/quant.sh $R/quant > $R/quant.log 2>&1
echo "quant rc=$? $(el)"; cat $R/quant/quant.md
tar czf $OUT/g3.tgz -C /tmp g3
