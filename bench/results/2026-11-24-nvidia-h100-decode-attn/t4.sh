#!/bin/sh
# T4 (stop 25): same-call A/B at batch 8 / 64 and 1: main's decode attention (9a5a1fd) against f9037ff
rm -rf /tmp/ab bundle && tar xzf .dev/ab.tgz -C /tmp && tar xzf .dev/libs.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/t4; rm -rf $R; mkdir -p $R/logs
t0=$(date +%s)
run() { n=$1; shift; "$@" > $R/logs/$n.log 2>&1
	echo "$n: $(grep -E 'decode tokens' $R/logs/$n.log | sed 's/ decode tokens.s//; s/, this GPU.*//; s/ms.step//' | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"; }
for round in 1 2; do
	for v in main new; do
		run f16-$v-$round /tmp/ab/bench-$v --shape 7b --batches 1,8,64 --prompt 128 --new 128 --prefill 0
		run kv8-$v-$round /tmp/ab/bench-$v --shape 7b --quant fp8 --kv-dtype fp8 --batches 1,64 --prompt 512 --new 64 --prefill 0
	done
done
tar czf $OUT/t4.tgz -C /tmp t4
