#!/bin/sh
# D1: cuBLASLt's fast fp8 accumulation for the W8A8 GEMMs (SL_FP8_FAST_ACCUM=1) against the default
# (fp32 promotion): SmolLM2 perplexity (fp8, fp8 + fp8 KV), 7B fp8 decode 1/32/64 + prefill 2048,
# and the serving benchmark at 64 streams, fp8 weights + fp8 KV
rm -rf bundle && tar xzf .dev/d.tgz || exit 3
[ -f /tmp/parts/paad ] || { echo "no parts"; exit 3; }
cat /tmp/parts/paaa /tmp/parts/paab /tmp/parts/paac /tmp/parts/paad > /tmp/smollm2.gguf && sha256sum /tmp/smollm2.gguf | cut -c1-16
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/d1; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for f in 0 1; do
	SL_FP8_FAST_ACCUM=$f timeout 120 bundle/bin/shardline-ppl --device cuda --dtype f16 --model /tmp/smollm2.gguf \
		--text tests/data/ppl/apache-2.0.txt --golden tests/golden/smollm2 --configs none,fp8,fp8+kv8 \
		> $R/logs/ppl-fast$f.log 2>&1
	echo "ppl fast=$f rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "^(ppl|greedy)" $R/logs/ppl-fast$f.log
done
run() { n=$1; shift; env "$@" bundle/bin/shardline-bench --shape 7b --batches 1,32,64 --prompt 128 --new 128 --prefill 2048 --quant fp8 $KV > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens|prefill' $R/logs/$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for round in 1 2; do
	KV=""; run fp8-exact-$round SL_FP8_FAST_ACCUM=0; run fp8-fast-$round SL_FP8_FAST_ACCUM=1
	KV="--kv-dtype fp8"; run kv8-exact-$round SL_FP8_FAST_ACCUM=0; run kv8-fast-$round SL_FP8_FAST_ACCUM=1
done
for f in 0 1; do
	SL_FP8_FAST_ACCUM=$f BIN=bundle/bin CASES="fixed-s64:fixed:64:512:256:192" BATCHING=continuous MODES=native \
		NODE_FLAGS="--quant fp8 --kv-dtype fp8" timeout 150 sh bench/serve.sh $R/serve-fast$f > $R/logs/serve-fast$f.log 2>&1
	echo "serve fast=$f rc=$? [$(( $(date +%s) - t0 )) s]"; grep -h -E "output tokens/s|requests|ITL|inter" $R/serve-fast$f/*.txt | head -4
done
tar czf $OUT/d1.tgz -C /tmp d1
