#!/bin/sh
# T2 (stop 25): bench/quant.sh on the final tree (f9037ff), every format
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/t2; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
BIN=bundle/bin CONFIGS="none int8 fp8 int4 fp8+kv8" timeout 560 sh bench/quant.sh $R/quant > $R/logs/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "quant.sh:|batch 1:|prefill" $R/logs/quant.log
tar czf $OUT/t2.tgz -C /tmp t2
