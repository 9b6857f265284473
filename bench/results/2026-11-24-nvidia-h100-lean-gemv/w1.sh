#!/bin/sh
# W1 (stop 26): after the kern_smem_fit mend: test_quant + test_fused, int4 decode
rm -rf bundle && tar xzf .dev/w1.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/w1; rm -rf $R; mkdir -p $R
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in test_quant test_fused; do
	timeout 200 bundle/tests/$t > $R/$t.log 2>&1
	echo "$t rc=$? $(grep -E '^[0-9]+%' $R/$t.log | tail -1) [$(( $(date +%s) - t0 )) s]"
done
timeout 60 bundle/bin/shardline-bench --shape 7b --quant int4 --batches 1,8 --prompt 128 --new 128 --prefill 0 > $R/int4.log 2>&1
echo "int4 rc=$? $(grep -E 'decode tokens' $R/int4.log | sed 's/, this GPU.*//' | tr '\n' ' ')"
tar czf $OUT/w1.tgz -C /tmp w1
