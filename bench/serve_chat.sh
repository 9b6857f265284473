#!/bin/sh
# Multi-turn chat benchmark for prefix caching and prefix-aware routing
# (docs/scheduling.md, docs/benchmarks.md). For each configuration in
# CONFIGS it starts a fresh shardline-coordinator (--route ROUTE) and
# GROUPS node groups sharing the one device (GPU memory or, on the CPU,
# KV blocks split between them), with the prefix cache on or off, runs
# shardline-bench-serve --mix chat once (USERS users, each in conversations of
# TURNS turns over a shared SYSTEM_LEN-token system prompt, each turn
# resending the last prompt and its answer plus a QUESTION_LEN-token
# question), then drains the groups and stops the coordinator. One JSON
# and one table per configuration in OUT_DIR, named chat-gG-cache-ROUTE
# (cache: cache or nocache); logs of every process in OUT_DIR/logs.
# bench/plot_serve.py OUT_DIR draws them (chat.md, chat.png).
# Exit 0 when every run finished every request.
#
# Usage: bench/serve_chat.sh OUT_DIR   (or SCENARIO=chat bench/serve.sh OUT_DIR)
# Environment (defaults in brackets):
#   BIN, DEVICE, MODEL, TOKENIZER, CKPT_DIR   as bench/serve.sh
#   CONFIGS    runs, each GROUPS:CACHE:ROUTE[:THINK_MS], GROUPS 1 or 2,
#              CACHE on|off, ROUTE prefix|load (the coordinator's --route),
#              THINK_MS the users' pause between turns (loadgen --think-ms,
#              default 0: closed loops)
#              [1:on:prefix 1:off:load 2:on:prefix 2:on:load 2:off:load
#               2:on:prefix:THINK 2:on:load:THINK]
#   THINK      the pause of the last two default runs [cuda 1000; cpu 300].
#              In closed loops a least-loaded router mostly sends a user
#              back to the group it just left (its load just dropped), so
#              the routing comparison also runs with users pausing
#   USERS      concurrent users (loadgen --streams) [32]
#   TURNS      turns per conversation [cuda 6; cpu 4]
#   SYSTEM_LEN, QUESTION_LEN, OUTPUT_LEN   ids of the system prompt, of each
#              question, of each answer (the last two uniform +-50%)
#              [cuda 1000, 64, 128; cpu 200, 16, 16]
#   REQUESTS   turns sent in all [USERS * TURNS]
#   MEM_FRACTIONS  cuda: --gpu-mem-fraction of each group in start order.
#              The flag caps the device's total use, so a second group at
#              0.9 gets what the first (0.45) left: half each
#              [one group: 0.9; two: 0.45 0.9]
#   KV_BLOCKS  cpu: KV blocks of one group; two groups get half each [2048]
#   WARMUP     loadgen --warmup [cuda: USERS; cpu: 0]
#   NODE_FLAGS, COORD_FLAGS, LOADGEN_FLAGS   more flags for each process
set -u
out=${1:?usage: bench/serve_chat.sh OUT_DIR}
bin=${BIN:-build/bin}
tok=${TOKENIZER:-tests/data/llama2/tokenizer.json}
if [ -z "${DEVICE:-}" ]; then
	DEVICE=cpu
	nvidia-smi -L 2>/dev/null | grep -q '^GPU' && DEVICE=cuda
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
mkdir -p "$out/logs"
tmp=$(mktemp -d)
coord_pid=""; group_pids=""

# shellcheck disable=SC2317 # called by the trap
cleanup() {
	for p in $group_pids $coord_pid; do kill -TERM "$p" 2>/dev/null; done
	sleep 0.5
	for p in $group_pids $coord_pid; do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
say() { echo "serve_chat.sh: $*" >&2; }
die() { say "$*"; exit 1; }

users=${USERS:-32}
if [ "$DEVICE" = cuda ]; then
	device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
	say "device: $device"
	turns=${TURNS:-6}; sys_len=${SYSTEM_LEN:-1000}; q_len=${QUESTION_LEN:-64}; o_len=${OUTPUT_LEN:-128}
	warmup=${WARMUP:-$users}; think=${THINK:-1000}
else
	device="cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') x $(nproc)"
	say "device: $device"
	export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
	turns=${TURNS:-4}; sys_len=${SYSTEM_LEN:-200}; q_len=${QUESTION_LEN:-16}; o_len=${OUTPUT_LEN:-16}
	warmup=${WARMUP:-0}; think=${THINK:-300}
fi
requests=${REQUESTS:-$((users * turns))}
configs=${CONFIGS:-"1:on:prefix 1:off:load 2:on:prefix 2:on:load 2:off:load 2:on:prefix:$think 2:on:load:$think"}

# --- the model: as bench/serve.sh ---------------------------------------------
vocab=$("$bin/shardline-tok" "$tok" info | awk '/^vocab_size/{print $2}')
[ -n "$vocab" ] || die "cannot read the vocabulary of $tok"
if [ -n "${MODEL:-}" ]; then
	model_flags="--model $MODEL"; shape=$(basename "$MODEL")
elif [ "$DEVICE" = cuda ]; then
	model_flags="--random-shape 7b --dtype f16"; shape="7b random f16"
else
	ckpt=${CKPT_DIR:-build/serve-tiny-model}
	if [ ! -f "$ckpt/model.safetensors" ]; then
		"$bin/shardline-mkckpt" --out "$ckpt" --dim 64 --hidden 172 --layers 2 --heads 4 \
			--kv-heads 2 --vocab "$vocab" --max-pos 2048 --dtype f32 --seed 1 2>/dev/null ||
			die "shardline-mkckpt failed"
	fi
	model_flags="--model $ckpt --device cpu"; shape="tiny random f32 (dim 64, 2 layers)"
fi
say "model: $shape; $users users, $turns turns, system $sys_len, question $q_len, answer $o_len"

status_groups() { # live groups the coordinator lists
	"$bin/shardline" --coordinator "$client" status 2>/dev/null | grep -c ' x 1 '
}

start() { # NAME GROUPS CACHE ROUTE
	rm -f "$tmp/ports"
	# shellcheck disable=SC2086 # flag lists are meant to split
	"$bin/shardline-coordinator" --model-name bench --tokenizer "$tok" --route "$4" \
		--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' --http-bind 127.0.0.1:0 \
		--ports-file "$tmp/ports" ${COORD_FLAGS:-} >"$out/logs/$1-coord.log" 2>&1 &
	coord_pid=$!
	i=0; while [ ! -s "$tmp/ports" ]; do
		i=$((i + 1)); [ $i -gt 100 ] && die "the coordinator did not start (logs/$1-coord.log)"
		sleep 0.1
	done
	client=$(awk '/^client/{print $2}' "$tmp/ports"); node=$(awk '/^node/{print $2}' "$tmp/ports")
	cflag=""; [ "$3" = off ] && cflag="--no-prefix-cache"
	if [ "$DEVICE" = cuda ]; then
		fracs=${MEM_FRACTIONS:-}; [ -n "$fracs" ] || { [ "$2" = 1 ] && fracs=0.9 || fracs="0.45 0.9"; }
	else
		kv=${KV_BLOCKS:-2048}; fracs=""; k=0
		while [ $k -lt "$2" ]; do fracs="$fracs $((kv / $2))"; k=$((k + 1)); done
	fi
	k=0
	for f in $fracs; do
		k=$((k + 1)); [ $k -gt "$2" ] && break
		mflag="--gpu-mem-fraction $f"; [ "$DEVICE" = cuda ] || mflag="--kv-blocks $f"
		cmd="$bin/shardline-node $model_flags $mflag --coordinator $node --model-name bench $cflag ${NODE_FLAGS:-}"
		say "$cmd"
		# shellcheck disable=SC2086 # the command line is meant to split
		$cmd >"$out/logs/$1-node$k.log" 2>&1 &
		group_pids="$group_pids $!"
		t0=$(date +%s)
		# one at a time: a group sizes its KV from what the others left
		until [ "$(status_groups)" -ge $k ]; do
			[ $(( $(date +%s) - t0 )) -gt 600 ] && die "group $k did not register in 600 s"
			sleep 0.5
		done
		say "group $k up in $(( $(date +%s) - t0 )) s"
		grep -E 'kv:' "$out/logs/$1-node$k.log" >&2
	done
}

stop() {
	"$bin/shardline" --coordinator "$client" drain --exit >/dev/null 2>&1
	for p in $group_pids; do
		i=0; while kill -0 "$p" 2>/dev/null; do
			i=$((i + 1)); [ $i -gt 300 ] && { kill -TERM "$p"; sleep 2; kill -KILL "$p" 2>/dev/null; }
			sleep 0.1
		done
		wait "$p" 2>/dev/null
	done
	group_pids=""
	kill -TERM "$coord_pid"; wait "$coord_pid" 2>/dev/null; coord_pid=""
}

status=0
for c in $configs; do
	IFS=: read -r ng cache route pause <<EOF
$c
EOF
	pause=${pause:-0}
	cname=cache; [ "$cache" = off ] && cname=nocache
	run="chat-g$ng-$cname-$route"; [ "$pause" -gt 0 ] && run="$run-think$pause"
	say "== $run: $ng group(s), prefix cache $cache, route $route, think $pause ms"
	start "$run" "$ng" "$cache" "$route"
	# shellcheck disable=SC2086
	timeout 900 "$bin/shardline-bench-serve" --coordinator "$client" --model bench --mix chat \
		--streams "$users" --requests "$requests" --turns "$turns" --system-len "$sys_len" \
		--question-len "$q_len" --output-len "$o_len" --think-ms "$pause" --vocab "$vocab" --seed 1 \
		--warmup "$warmup" --coord-pid "$coord_pid" --meta "device=$device" --meta "model=$shape" \
		--meta "groups=$ng" --meta "cache=$cache" --meta "route=$route" --meta "think_ms=$pause" \
		--meta "case=$run" \
		--out "$out/$run.json" ${LOADGEN_FLAGS:-} >"$out/$run.txt" 2>"$out/logs/$run-loadgen.log"
	rc=$?
	cat "$out/$run.txt"
	"$bin/shardline" --coordinator "$client" status >&2
	[ $rc -eq 0 ] || { status=1; say "$run failed (exit $rc):"; tail -5 "$out/logs/$run-loadgen.log" >&2; }
	stop
done
if [ $status -eq 0 ]; then say "done: results in $out"; else say "done, with failures: results in $out"; fi
exit $status
