#!/bin/sh
# F2: on the final tree, what F1 left: gpu_allreduce.sh (F1's kernel half hit its 290 s limit there,
# and its leftover ranks shared the GPU with F1's fp16 quant.sh run), quant.sh for fp16 again, fp16 A/B
rm -rf bundle && tar xzf .dev/fin.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
R=/tmp/f2; rm -rf $R; mkdir -p $R/logs $R/kernel-logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
ALLREDUCE_BIN=bundle/tests/test_allreduce RUN_LOGS=$R/kernel-logs timeout 400 sh bundle/run.sh gpu bundle/gpu_allreduce.sh > $R/allreduce.log 2>&1
echo "allreduce rc=$? [$(( $(date +%s) - t0 )) s]"; tail -3 $R/allreduce.log
pkill -f test_allreduce; sleep 1; nvidia-smi --query-compute-apps=pid,name --format=csv,noheader | head -3
BIN=bundle/bin CONFIGS="none" timeout 60 sh bench/quant.sh $R/quant > $R/logs/quant.log 2>&1
echo "quant rc=$? [$(( $(date +%s) - t0 )) s]"; grep -E "quant.sh:|batch|prefill" $R/logs/quant.log | head -12
run() { n=$1; shift; env "$@" bundle/bin/shardline-bench --shape 7b --batches 1 --prompt 128 --new 128 --prefill 0 --quant none > $R/logs/ab-$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/ab-$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for round in 1 2 3; do run old-$round SL_FUSE=swiglu,rope; run new-$round SL_X=1; done
tar czf $OUT/f2.tgz -C /tmp f2
