#!/bin/sh
# C1: the final tree (v5 for fp16, bf16, int8 and fp8; int4 keeps the norm kernel): SmolLM2 golden +
# perplexity, the kernel half of make test-gpu (all-reduce in C2), bench/quant.sh for every format,
# and one same-binary A/B round (old = SL_FUSE=swiglu,rope)
rm -rf bundle && tar xzf .dev/c.tgz || exit 3
[ -f /tmp/parts/paad ] || { echo "no parts"; exit 3; }
cat /tmp/parts/paaa /tmp/parts/paab /tmp/parts/paac /tmp/parts/paad > /tmp/smollm2.gguf && sha256sum /tmp/smollm2.gguf | cut -c1-16
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/c1; rm -rf $R; mkdir -p $R/logs $R/kernel-logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
GOLDEN_BIN=bundle/tests/test_parallel PPL_BIN=bundle/bin/shardline-ppl SL_SMOLLM2_GGUF=/tmp/smollm2.gguf \
	timeout 170 sh bundle/gpu_golden.sh > $R/logs/gpu_golden.log 2>&1; echo "gpu_golden rc=$? $(tail -1 $R/logs/gpu_golden.log) [$(( $(date +%s) - t0 )) s]"
grep -E "^ppl" $R/logs/gpu_golden.log
RUN_LOGS=$R/kernel-logs timeout 200 sh bundle/run.sh gpu bundle/tests/test_attention bundle/tests/test_backend bundle/tests/test_fused bundle/tests/test_kernels bundle/tests/test_quant > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -8
grep -h "^fused" $R/kernel-logs/*fused* 2>/dev/null | head -12
BIN=bundle/bin CONFIGS="none int8 fp8 int4 fp8+kv8" timeout 150 sh bench/quant.sh $R/quant > $R/logs/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "quant.sh:|batch 1:|prefill" $R/logs/quant.log | head -20
run() { n=$1; shift; env "$@" bundle/bin/shardline-bench --shape 7b --batches 1,2,8 --prompt 128 --new 128 --prefill 0 --quant $q > $R/logs/$q-$n.log 2>&1
	echo "$q $n: $(grep -E 'decode tokens' $R/logs/$q-$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for q in none int8 fp8 int4; do run old SL_FUSE=swiglu,rope; run new SL_X=1; done
tar czf $OUT/c1.tgz -C /tmp c1
