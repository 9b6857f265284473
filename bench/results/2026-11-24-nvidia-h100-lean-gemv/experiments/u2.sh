#!/bin/sh
# U2 (stop 26): the lean GEMV: test_quant + test_fused, qbench (table 5), same-call A/B decode
rm -rf bundle /tmp/ab && tar xzf .dev/u1.tgz && mv ab /tmp/ab || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/u2; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $R/device.txt 2>&1
for t in test_quant test_fused; do
	timeout 200 bundle/tests/$t > $R/$t.log 2>&1
	echo "$t rc=$? $(grep -E '^[0-9]+%' $R/$t.log | tail -1) [$(( $(date +%s) - t0 )) s]"
done
timeout 150 bundle/bin/shardline-qbench --out $R/qbench.json > $R/qbench.txt 2>&1
echo "qbench rc=$? [$(( $(date +%s) - t0 )) s]"; sed -n '/^5\./,$p' $R/qbench.txt
run() { n=$1; shift; timeout 60 "$@" > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for round in 1 2; do
	for q in int4 int8 fp8; do
		for v in main new; do
			run $q-$v-$round /tmp/ab/bench-$v --shape 7b --quant $q --batches 1,8 --prompt 128 --new 128 --prefill 0
		done
	done
done
tar czf $OUT/u2.tgz -C /tmp u2
