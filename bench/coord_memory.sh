#!/bin/sh
# The coordinator's resident memory (VmRSS) through the two loads of
# issue 16: STEADY (100000) short requests from 16 streams, RSS read after
# every quarter of them, then a burst of BURST (3000) client connections
# at once, each with one short request. One single-process group of a
# tiny random model serves (prompts of 4 ids, 1 output token: the
# coordinator's per-request path, not the model, is what is measured).
# Prints "rss fresh|after K requests|after burst of N connections: N kB"
# and a summary; docs/operations.md quotes it.
# HTTP=1: both loads through the OpenAI API (loadgen --http) instead of
# ZeroMQ.
# Usage: bench/coord_memory.sh   (BIN=build/bin, BURST, STEADY, HTTP,
# COORD_FLAGS; glibc's MALLOC_* variables pass through)
bin=${BIN:-build/bin}
tok=tests/data/llama2-small/tokenizer.json
BURST=${BURST:-3000}
STEADY=${STEADY:-100000}
tmp=$(mktemp -d)
pids=""
export OMP_NUM_THREADS=1
cleanup() {
	for p in $pids; do kill -TERM "$p" 2>/dev/null; done
	sleep 0.5
	for p in $pids; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
rss() { awk '/^VmRSS/{print $2}' "/proc/$coord/status"; }
# loadgen N_STREAMS N_REQUESTS SEED
load() {
	"$bin/shardline-bench-serve" --coordinator "$CL" $VIA --model tiny --streams "$1" --requests "$2" \
		--prompt-len 4 --output-len 1 --vocab 2000 --seed "$3" --status-ms 1000 \
		>"$tmp/loadgen.log" 2>&1 || { echo "loadgen failed:"; tail -5 "$tmp/loadgen.log"; exit 1; }
}

ulimit -n 65536 2>/dev/null || ulimit -n 16384 2>/dev/null
"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 256 --dtype f32 --seed 7 2>/dev/null || exit 1
http=none
[ "${HTTP:-0}" = 1 ] && http=127.0.0.1:0
"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --http-bind $http \
	--http-max-connections 4096 \
	--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' --max-queue 4096 \
	--ports-file "$tmp/ports" ${COORD_FLAGS:-} >"$tmp/coord.log" 2>&1 &
coord=$!; pids="$pids $coord"
i=0; while [ ! -s "$tmp/ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
CL=$(awk '/^client/{print $2}' "$tmp/ports")
NODE=$(awk '/^node/{print $2}' "$tmp/ports")
VIA=""
[ "${HTTP:-0}" = 1 ] && VIA="--http http://$(awk '/^http/{print $2}' "$tmp/ports")"
"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny \
	--max-running 64 --max-waiting 4096 >"$tmp/node.log" 2>&1 &
pids="$pids $!"
load 4 64 1
sleep 1
fresh=$(rss)
echo "rss fresh: $fresh kB"
q=$((STEADY / 4)); done_n=0; first=""
last=$fresh
for k in 1 2 3 4; do
	[ $q -gt 0 ] || break
	load 16 $q $((10 + k))
	done_n=$((done_n + q))
	sleep 1
	r=$(rss)
	[ -z "$first" ] && first=$r
	last=$r
	echo "rss after $done_n requests: $r kB"
done
# the burst: loadgen opens at most 1000 connections, so three at once
per=$(((BURST + 2) / 3))
for k in 1 2 3; do
	"$bin/shardline-bench-serve" --coordinator "$CL" $VIA --model tiny --streams $per --requests $per \
		--prompt-len 4 --output-len 1 --vocab 2000 --seed $((k + 1)) --status-ms 1000 \
		>"$tmp/burst$k.log" 2>&1 &
	eval "b$k=\$!"
done
for k in 1 2 3; do
	eval "wait \$b$k" || { echo "burst loadgen $k failed:"; tail -5 "$tmp/burst$k.log"; exit 1; }
done
sleep 2
burst=$(rss)
echo "rss after burst of $((3 * per)) connections: $burst kB"
awk -v f="$fresh" -v b="$burst" -v a="$first" -v z="$last" -v n="$((STEADY - q))" 'BEGIN{
	printf "burst: %+.1f%% of fresh; steady: %+.1f bytes/request over the last %d requests\n",
		100 * (b - f) / f, n ? (z - a) * 1024 / n : 0, n }'
