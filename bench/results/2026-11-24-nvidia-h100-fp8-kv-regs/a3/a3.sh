#!/bin/sh
# A3: why batch 1 lost 2-3% with the register path: the kernel alone at short contexts (reserved 4096),
# the step with PDL off, and the step with the register path held to 2 blocks an SM (SL_ATTN_PAD, experiment)
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/a3; rm -rf $R; mkdir -p $R/logs; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for c in 32,32,128,1,200,4096 32,32,128,1,600,4096 32,32,128,8,512,4096 32,8,128,1,600,4096; do
	SL_ATTN_BENCH=$c CK_RUN_CASE=bench timeout 60 bundle/tests/test_attention > $R/logs/k-$c.log 2>&1
	grep "decode bench" $R/logs/k-$c.log; done
echo "[$(( $(date +%s) - t0 )) s]"
B=bundle/bin/shardline-bench
run() { n=$1; shift; env "$@" $B --shape 7b --quant fp8 --kv-dtype fp8 --prefill 0 --batches 1,2 --prompt 128 --new 128 > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
run old SL_ATTN_FP8=smem
run new SL_X=1
run pad SL_ATTN_PAD=60000
run old-nopdl SL_ATTN_FP8=smem SL_PDL=0
run new-nopdl SL_PDL=0
run old2 SL_ATTN_FP8=smem
run new2 SL_X=1
run pad2 SL_ATTN_PAD=60000
tar czf $OUT/a3.tgz -C /tmp a3
