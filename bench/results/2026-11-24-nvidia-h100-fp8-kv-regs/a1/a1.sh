#!/bin/sh
# A1: fp8 K/V straight into MMA fragments (decode attention): correctness (test_attention vs_cpu, both fp8
# paths), kernel bench, same-binary 7B step A/B (SL_ATTN_FP8=smem = old)
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/a1; rm -rf $R; mkdir -p $R/logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
CK_RUN_CASE=bench timeout 150 bundle/tests/test_attention > $R/logs/attn-bench.log 2>&1
echo "attn bench rc=$? [$(( $(date +%s) - t0 )) s]"; grep "decode bench" $R/logs/attn-bench.log
B=bundle/bin/shardline-bench
ab() { n=$1; shift; for m in old new; do e=SL_X=1; [ $m = old ] && e=SL_ATTN_FP8=smem
	env $e $B --shape 7b --quant fp8 --kv-dtype fp8 --prefill 0 "$@" > $R/logs/$n-$m.log 2>&1
	echo "$n $m: $(grep -E 'decode tokens' $R/logs/$n-$m.log | sed 's/ decode tokens.s//; s/, this GPU.*//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; done; }
ab b64p512 --batches 64 --prompt 512 --new 128
ab b1p512 --batches 1,8 --prompt 512 --new 64
ab b64p128 --batches 32,64 --prompt 128 --new 128
ab b64p512b --batches 64 --prompt 512 --new 128
CK_RUN_CASE=vs_cpu timeout 200 sh bundle/run.sh gpu bundle/tests/test_attention > $R/logs/attn-test.log 2>&1
echo "attn test rc=$? [$(( $(date +%s) - t0 )) s]"; tail -2 $R/logs/attn-test.log
tar czf $OUT/a1.tgz -C /tmp a1
