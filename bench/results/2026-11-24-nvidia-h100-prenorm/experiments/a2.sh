#!/bin/sh
# A2: why the norm at the loads slowed fp16 / int4: carveout (SL_EXP_CARVE=bytes: every GEMV's carveout sized
# for that much dynamic smem), prologue cost (SL_EXP_NOPRO: skipped, wrong answers), driver split (SL_PREFER_L1=0)
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/a2; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
B="bundle/bin/shardline-bench --shape 7b --batches 1 --prompt 128 --new 128 --prefill 0"
run() { n=$1; shift; env "$@" $B --quant $q > $R/logs/$q-$n.log 2>&1
	echo "$q $n: $(grep -E 'decode tokens' $R/logs/$q-$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for q in none int4 int8; do
	run old SL_FUSE=swiglu,rope
	run new SL_X=1
	run new-carve16k SL_EXP_CARVE=16384
	run old-carve16k SL_EXP_CARVE=16384 SL_FUSE=swiglu,rope
	run new-carve8k SL_EXP_CARVE=8192
	run new-nopro SL_EXP_NOPRO=1
	run new-nopro-carve16k SL_EXP_NOPRO=1 SL_EXP_CARVE=16384
	run new-l1off SL_PREFER_L1=0
	run old-l1off SL_PREFER_L1=0 SL_FUSE=swiglu,rope
done
tar czf $OUT/a2.tgz -C /tmp a2
