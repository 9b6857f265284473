#!/bin/sh
# CPU share of each rank of an idle `mpirun -np 2` tp 2 group (CPU
# backend, tiny random model), from /proc/PID/stat over SECONDS (5):
# what a group costs while it has no work; then the requests/s it serves
# under shardline-bench-serve (16 streams, REQUESTS (400) requests of 32-id
# prompts and 16 tokens), where a spinning rank takes CPU from the others
# on a small box. docs/operations.md quotes both.
# Usage: bench/idle_cpu.sh [SECONDS]   (BIN=build/bin, REQUESTS; extra
# mpirun environment such as OMPI_MCA_mpi_yield_when_idle=1 passes through)
bin=${BIN:-build/bin}
secs=${1:-5}
tok=tests/data/llama2-small/tokenizer.json
tmp=$(mktemp -d)
pids=""
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	OMPI_MCA_rmaps_base_oversubscribe=1
cleanup() {
	for p in $pids; do kill -TERM "$p" 2>/dev/null; done
	sleep 0.5
	for p in $pids; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# user + system ticks of PID
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 256 --dtype f32 --seed 7 2>/dev/null || exit 1
"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --http-bind none \
	--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' \
	--ports-file "$tmp/ports" >"$tmp/coord.log" 2>&1 &
pids="$pids $!"
i=0; while [ ! -s "$tmp/ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
CL=$(awk '/^client/{print $2}' "$tmp/ports")
NODE=$(awk '/^node/{print $2}' "$tmp/ports")
mpirun -np 2 "$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny \
	--tp 2 >"$tmp/mpi.log" 2>&1 &
mpi=$!; pids="$pids $mpi"
i=0
until "$bin/shardline" --coordinator "$CL" status 2>/dev/null | grep -q tiny || [ $i -ge 300 ]; do
	sleep 0.1; i=$((i + 1))
done
"$bin/shardline" --coordinator "$CL" generate --prompt-ids 1,5,9 --max-tokens 8 >/dev/null 2>&1
sleep 1
hz=$(getconf CLK_TCK)
ranks=$(ps -o pid= --ppid "$mpi")
for p in $ranks; do eval "t0_$p=$(ticks "$p")"; done
sleep "$secs"
for p in $ranks; do
	r=$(tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
	eval "t0=\$t0_$p"
	t1=$(ticks "$p")
	echo "idle rank $r: $(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v s="$secs" \
		'BEGIN{printf "%.1f", 100 * (b - a) / hz / s}')% of a core over $secs s"
done
"$bin/shardline-bench-serve" --coordinator "$CL" --model tiny --streams 16 \
	--requests "${REQUESTS:-400}" --prompt-len 32 --output-len 16 --vocab 2000 >"$tmp/lg.log" 2>&1 ||
	{ tail -5 "$tmp/lg.log"; exit 1; }
grep -iE "requests/s|req/s" "$tmp/lg.log" | head -3
