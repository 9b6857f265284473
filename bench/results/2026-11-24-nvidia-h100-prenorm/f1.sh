#!/bin/sh
# F1: on the final tree: SmolLM2 golden + perplexity, the kernel half of make test-gpu,
# bench/quant.sh for every format, and a same-binary fp16 A/B of the norm at the GEMV's start
rm -rf bundle && tar xzf .dev/fin.tgz || exit 3
[ -f /tmp/parts/paad ] || { echo "no parts"; exit 3; }
cat /tmp/parts/paaa /tmp/parts/paab /tmp/parts/paac /tmp/parts/paad > /tmp/smollm2.gguf && sha256sum /tmp/smollm2.gguf | cut -c1-16
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/f1; rm -rf $R; mkdir -p $R/logs $R/kernel-logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
GOLDEN_BIN=bundle/tests/test_parallel PPL_BIN=bundle/bin/shardline-ppl SL_SMOLLM2_GGUF=/tmp/smollm2.gguf \
	timeout 150 sh bundle/gpu_golden.sh > $R/logs/gpu_golden.log 2>&1; echo "gpu_golden rc=$? $(tail -1 $R/logs/gpu_golden.log) [$(( $(date +%s) - t0 )) s]"
grep -E "^ppl" $R/logs/gpu_golden.log
ALLREDUCE_BIN=bundle/tests/test_allreduce RUN_LOGS=$R/kernel-logs timeout 290 sh bundle/run.sh gpu bundle/tests/test_attention bundle/tests/test_backend bundle/tests/test_fused bundle/tests/test_kernels bundle/tests/test_quant bundle/gpu_allreduce.sh > $R/kernels.log 2>&1
echo "kernels rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "Checks|passed" $R/kernels.log | tail -8
grep -h "^fused" $R/kernel-logs/*fused* 2>/dev/null | head -12
BIN=bundle/bin CONFIGS="none int8 fp8 int4 fp8+kv8" timeout 140 sh bench/quant.sh $R/quant > $R/logs/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "quant.sh:|batch 1:|prefill" $R/logs/quant.log | head -20
run() { n=$1; shift; env "$@" bundle/bin/shardline-bench --shape 7b --batches 1,2,8 --prompt 128 --new 128 --prefill 0 --quant none > $R/logs/ab-$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/ab-$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for round in 1 2; do run old-$round SL_FUSE=swiglu,rope; run new-$round SL_X=1; done
tar czf $OUT/f1.tgz -C /tmp f1
