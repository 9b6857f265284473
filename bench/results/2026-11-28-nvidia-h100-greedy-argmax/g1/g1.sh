#!/bin/sh
# G1: greedy batches take the argmax alone (kern_argmax_rows_cuda). The sampling kernel tests,
# greedy generation through the engine on the golden models (f16 tp 1, tp 2 on one GPU, int4),
# test_backend, then the 7B decode at batch 1 and 8, new path against SL_SAMPLE_FULL=1 (the
# whole sampler, as before), alternated in one process tree on one GPU.
rm -rf bundle && tar xzf .dev/g1.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=/tmp/g1; rm -rf $R; mkdir -p $R; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for c in argmax_rows sampling sampling_ext; do
  CK_RUN_CASE=$c timeout 120 bundle/tests/test_kernels > $R/kernels-$c.log 2>&1
  echo "test_kernels $c rc=$? $(el)"; grep -E "^kernel|FAIL|Checks" $R/kernels-$c.log
done
timeout 60 bundle/tests/test_backend > $R/test_backend.log 2>&1; echo "test_backend rc=$? $(el)"; grep Checks $R/test_backend.log
g() { timeout 120 mpirun --oversubscribe -np "$@" > $R/golden-$1-$4.log 2>&1; echo "golden np $1 $* rc=$? $(el)"; grep -E "^FAIL|passed, " $R/golden-$1-$4.log | tail -4; }
g 1 bundle/tests/test_parallel --tp 1 --pp 1 --device cuda --dtype f16 --logit-tol 2e-2
SL_CUSTOM_AR=1 g 2 bundle/tests/test_parallel --tp 2 --pp 1 --device cuda --dtype f16 --logit-tol 2e-2
g 1 bundle/tests/test_parallel --tp 1 --pp 1 --device cuda --dtype f16 --quant int4 --logit-tol 6.2e-1 --greedy-report-only
b() { # b NAME QUANT [env]
  n=$1; q=$2; shift 2
  env "$@" timeout 100 bundle/bin/shardline-bench --shape 7b --quant $q --batches 1,8 --prompt 128 --new 128 \
    --prefill 0 --out $R/bench-$n.json > $R/bench-$n.log 2>&1
  echo "bench $n rc=$? $(el)"; grep -E "^(batch|copy)" $R/bench-$n.log
}
b int4-a int4 SL_X=0; b int4-full-a int4 SL_SAMPLE_FULL=1; b int4-b int4 SL_X=0; b int4-full-b int4 SL_SAMPLE_FULL=1
b none-a none SL_X=0; b none-full-a none SL_SAMPLE_FULL=1
tar czf $OUT/g1.tgz -C /tmp g1
