#!/bin/sh
# G2: the same binaries as G1 on an H100 (G1 got an H200): only the 7B decode A/B, new path against
# SL_SAMPLE_FULL=1 (the whole sampler, as before), alternated, int4 three times and fp16 once.
rm -rf bundle && tar xzf .dev/g1.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=/tmp/g2; rm -rf $R; mkdir -p $R; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
b() { # b NAME QUANT [env]
  n=$1; q=$2; shift 2
  env "$@" timeout 100 bundle/bin/shardline-bench --shape 7b --quant $q --batches 1,8 --prompt 128 --new 128 \
    --prefill 0 --out $R/bench-$n.json > $R/bench-$n.log 2>&1
  echo "bench $n rc=$? $(el)"; grep -E "^(batch|copy)" $R/bench-$n.log
}
b int4-a int4 SL_X=0; b int4-full-a int4 SL_SAMPLE_FULL=1; b int4-b int4 SL_X=0; b int4-full-b int4 SL_SAMPLE_FULL=1; b int4-c int4 SL_X=0; b int4-full-c int4 SL_SAMPLE_FULL=1
b none-a none SL_X=0; b none-full-a none SL_SAMPLE_FULL=1
tar czf $OUT/g2.tgz -C /tmp g2
