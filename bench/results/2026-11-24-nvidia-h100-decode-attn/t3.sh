#!/bin/sh
# T3 (stop 25): SmolLM2 golden + perplexity on the final tree (f9037ff)
rm -rf bundle && tar xzf .dev/bundle.tgz || exit 3
[ -f /tmp/parts/paad ] || { echo "no parts"; exit 3; }
cat /tmp/parts/paaa /tmp/parts/paab /tmp/parts/paac /tmp/parts/paad > /tmp/smollm2.gguf && sha256sum /tmp/smollm2.gguf | cut -c1-16
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/t3; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
GOLDEN_BIN=bundle/tests/test_parallel PPL_BIN=bundle/bin/shardline-ppl SL_SMOLLM2_GGUF=/tmp/smollm2.gguf \
	timeout 200 sh bundle/gpu_golden.sh > $R/logs/gpu_golden.log 2>&1; echo "gpu_golden rc=$? $(tail -1 $R/logs/gpu_golden.log) [$(( $(date +%s) - t0 )) s]"
grep -E "^ppl" $R/logs/gpu_golden.log
tar czf $OUT/t3.tgz -C /tmp t3
