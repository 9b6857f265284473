#!/bin/sh
# Serving benchmark: for each GPU count in GPUS and each batching policy,
# starts shardline-coordinator (loopback, ports it picks) and one node group
# (tensor parallel over that many GPUs; one process on the CPU), runs
# shardline-bench-serve once per case against it, then stops the group (drain
# --exit) and the coordinator. One JSON (loadgen --out) and one table per
# run in OUT_DIR, named tpG-POLICY-CASE; logs of every process in
# OUT_DIR/logs. Exit 0 when every run finished every request.
# bench/plot_serve.py OUT_DIR turns the folder into a table and a plot;
# docs/benchmarks.md says what the numbers mean. Each case runs once per
# transport in MODES, back to back on the same group: native (ZeroMQ,
# named ...-CASE) and http (the OpenAI API's streamed /v1/completions,
# named ...-CASE-http, batching label POLICY/http); every run reports the
# coordinator's CPU time.
#
# Usage: bench/serve.sh OUT_DIR      (from the repository root)
# Environment (defaults in brackets):
#   BIN        the binaries [build/bin]
#   DEVICE     cpu | cuda [cuda when nvidia-smi lists a GPU]
#   MODEL      a checkpoint folder to serve [random weights: on cuda a
#              7B shape, fp16 (--random-shape 7b when shardline-node has it,
#              else a checkpoint written once by shardline-mkckpt to
#              CKPT_DIR [/tmp/shardline-7b-f16]); on cpu a tiny model
#              (dim 64, 2 layers, the tokenizer's vocabulary) written once to
#              CKPT_DIR [build/serve-tiny-model]]
#   TOKENIZER  [tests/data/llama2/tokenizer.json: the 32000-piece Llama 2
#              vocabulary, which covers every id of a 32000-vocab model]
#   GPUS       tensor-parallel degrees, one node group each [1]
#   BATCHING   policies: continuous, simple (continuous batching off)
#              [continuous simple; only continuous if the node lacks --batching]
#   CASES      the runs under continuous batching, each
#              NAME:MIX:STREAMS:PROMPT_LEN:OUTPUT_LEN:REQUESTS[:REUSE]
#              [cuda: 512-token prompts, 256-token outputs, fixed at 1, 8,
#              32, 64, 128, 256 streams, uniform at 64; cpu: 64/32 at 8].
#              Every request's prompt is its own (loadgen --prompts
#              unique), so no case reuses another's cached blocks and
#              tokens/s is not prefix caching. REUSE asks for reuse on
#              purpose, only in a case whose NAME says prefix or reuse: a
#              number N (every prompt starts with the same N ids: loadgen
#              --shared-prefix N), or seeded (prompts from --seed alone,
#              as before issue 38: cases of one shape repeat each other's
#              prompts). Every run reports the prompt tokens the prefix
#              cache served ("prefix cache" in the table, prefix_cache in
#              the JSON)
#   SIMPLE_CASES  the runs under simple batching [cuda: fixed-s64,
#              uniform-s64, fixed-s256; cpu: all]
#   NODE_FLAGS, COORD_FLAGS, LOADGEN_FLAGS   more flags for each process
#              (LOADGEN_FLAGS without --shared-prefix or --prompts: REUSE)
#              (constrained decoding's cost, issue 37: LOADGEN_FLAGS="--json-schema
#              bench/data/records.json" constrains every request to an array of
#              2000+ records, so outputs keep their length; NODE_FLAGS=
#              "--tokenizer $TOKENIZER" gives a random-weights model its
#              vocabulary; compare with the same run without them)
#   MODES      transports: native, http [native http; native only when the
#              loadgen has no --http]
#   WARMUP     loadgen --warmup before the first case of each group [the
#              most streams of any case, at most 256: every batch size up to
#              it is met once before the measurements]
#   SCENARIO   chat: the multi-turn chat benchmark of prefix caching and
#              prefix-aware routing instead (bench/serve_chat.sh, its
#              variables in its header)
set -u
[ "${SCENARIO:-}" = chat ] && exec sh "$(dirname "$0")/serve_chat.sh" "$@"
out=${1:?usage: bench/serve.sh OUT_DIR}
bin=${BIN:-build/bin}
tok=${TOKENIZER:-tests/data/llama2/tokenizer.json}
if [ -z "${DEVICE:-}" ]; then
	DEVICE=cpu
	nvidia-smi -L 2>/dev/null | grep -q '^GPU' && DEVICE=cuda
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
mkdir -p "$out/logs"
tmp=$(mktemp -d)
coord_pid=""; group_pid=""

# shellcheck disable=SC2317 # called by the trap
cleanup() {
	for p in $group_pid $coord_pid; do kill -TERM "$p" 2>/dev/null; done
	sleep 0.5
	for p in $group_pid $coord_pid; do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
say() { echo "serve.sh: $*" >&2; }
die() { say "$*"; exit 1; }

if [ "$DEVICE" = cuda ]; then
	device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
	ngpu=$(nvidia-smi -L | grep -c '^GPU')
	say "device: $device x $ngpu"
	nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv >&2
	CASES=${CASES:-"fixed-s1:fixed:1:512:256:4 fixed-s8:fixed:8:512:256:16 fixed-s32:fixed:32:512:256:64 fixed-s64:fixed:64:512:256:192 fixed-s128:fixed:128:512:256:256 fixed-s256:fixed:256:512:256:256 uniform-s64:uniform:64:512:256:192"}
	simple_names="fixed-s64 uniform-s64 fixed-s256"
else
	device="cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') x $(nproc)"
	say "device: $device"
	export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
	CASES=${CASES:-"fixed-s8:fixed:8:64:32:32 uniform-s8:uniform:8:64:32:32"}
	simple_names="fixed-s8 uniform-s8"
fi
# simple batching: the issue's comparison (64 streams), and 256 streams, where
# the KV pool of one 80 GB GPU cannot hold every sequence at full length
SIMPLE_CASES=${SIMPLE_CASES:-$(for c in $CASES; do case " $simple_names " in *" ${c%%:*} "*) printf '%s ' "$c" ;; esac; done)}
# A case's REUSE as loadgen flags. Reuse only where the name says so: a
# results table never shows cache hits under a plain case name.
reuse_flags() { # NAME REUSE
	case "$2" in
	"") return 0 ;;
	seeded) f="--prompts seeded" ;;
	*[!0-9]*) say "case $1: REUSE '$2' is neither a number nor seeded"; return 1 ;;
	*) f="--shared-prefix $2" ;;
	esac
	case "$1" in
	*prefix* | *reuse*) echo "$f" ;;
	*) say "case $1 reuses prompts ($2): name it ...prefix... or ...reuse..."; return 1 ;;
	esac
}
for c in $CASES $SIMPLE_CASES; do
	IFS=: read -r cname _ _ _ _ _ reuse <<EOF
$c
EOF
	reuse_flags "$cname" "${reuse:-}" >/dev/null || exit 1
done
case " ${LOADGEN_FLAGS:-} " in
*" --shared-prefix"* | *" --prompts"*) die "LOADGEN_FLAGS: give reuse per case (CASES' REUSE field), not for every case" ;;
esac
# warm-up KV use grows as its square (request i holds 16 + 2 + i tokens): at most 256
most=$(for c in $CASES $SIMPLE_CASES; do echo "$c" | cut -d: -f3; done | sort -n | tail -1)
warmup=${WARMUP:-$(( most < 256 ? most : 256 ))}

# --- the model -------------------------------------------------------------
vocab=$("$bin/shardline-tok" "$tok" info | awk '/^vocab_size/{print $2}')
[ -n "$vocab" ] || die "cannot read the vocabulary of $tok"
node_help=$("$bin/shardline-node" --help 2>&1)
if [ -n "${MODEL:-}" ]; then
	model_flags="--model $MODEL"; shape=$(basename "$MODEL")
elif [ "$DEVICE" = cuda ] && printf '%s' "$node_help" | grep -q -- '--random-shape'; then
	model_flags="--random-shape 7b --dtype f16"; shape="7b random f16"
elif [ "$DEVICE" = cuda ]; then
	ckpt=${CKPT_DIR:-/tmp/shardline-7b-f16}
	if [ ! -f "$ckpt/model.safetensors" ]; then
		say "writing a 7B-shaped random checkpoint to $ckpt (13.5 GB)"
		t0=$(date +%s)
		"$bin/shardline-mkckpt" --out "$ckpt" --dim 4096 --hidden 11008 --layers 32 --heads 32 \
			--kv-heads 32 --vocab "$vocab" --max-pos 4096 --dtype f16 --seed 1 ||
			die "shardline-mkckpt failed"
		say "checkpoint written in $(( $(date +%s) - t0 )) s"
	fi
	model_flags="--model $ckpt --dtype f16"; shape="7b random f16 (checkpoint)"
else
	ckpt=${CKPT_DIR:-build/serve-tiny-model}
	if [ ! -f "$ckpt/model.safetensors" ]; then
		"$bin/shardline-mkckpt" --out "$ckpt" --dim 64 --hidden 172 --layers 2 --heads 4 \
			--kv-heads 2 --vocab "$vocab" --max-pos 2048 --dtype f32 --seed 1 2>/dev/null ||
			die "shardline-mkckpt failed"
	fi
	model_flags="--model $ckpt --device cpu"; shape="tiny random f32 (dim 64, 2 layers)"
fi
# the node's own flags change what runs (--quant fp8, --kv-dtype fp8):
# the report's "Model:" line names them
[ -n "${NODE_FLAGS:-}" ] && shape="$shape, node flags: $NODE_FLAGS"
say "model: $shape"
modes=${MODES:-native http}
if ! "$bin/shardline-bench-serve" --help 2>&1 | grep -q -- '--http'; then
	say "shardline-bench-serve has no --http: native runs only"
	modes=native
fi
policies=${BATCHING:-continuous simple}
if ! printf '%s' "$node_help" | grep -q -- '--batching'; then
	say "shardline-node has no --batching: running its one policy, as 'continuous'"
	policies=default
fi

# --- one coordinator + one node group per (gpus, policy) --------------------
start() { # NAME GPUS POLICY
	rm -f "$tmp/ports"
	# shellcheck disable=SC2086 # flag lists are meant to split
	"$bin/shardline-coordinator" --model-name bench --tokenizer "$tok" \
		--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' --http-bind 127.0.0.1:0 \
		--ports-file "$tmp/ports" ${COORD_FLAGS:-} >"$out/logs/$1-coord.log" 2>&1 &
	coord_pid=$!
	i=0; while [ ! -s "$tmp/ports" ]; do
		i=$((i + 1)); [ $i -gt 100 ] && die "the coordinator did not start (logs/$1-coord.log)"
		sleep 0.1
	done
	client=$(awk '/^client/{print $2}' "$tmp/ports"); node=$(awk '/^node/{print $2}' "$tmp/ports")
	http=$(awk '/^http/{print $2}' "$tmp/ports")
	pflag=""; [ "$3" = default ] || pflag="--batching $3"
	launch=""; [ "$2" -gt 1 ] && launch="mpirun --bind-to none -np $2"
	[ "$2" -gt 1 ] && [ "$DEVICE" = cpu ] && launch="$launch --oversubscribe"
	# shellcheck disable=SC2086 # flag lists are meant to split
	set -- "$1" $launch "$bin/shardline-node" $model_flags --tp "$2" --coordinator "$node" \
		--model-name bench $pflag ${NODE_FLAGS:-}
	name=$1; shift
	say "$*"
	"$@" >"$out/logs/$name-node.log" 2>&1 &
	group_pid=$!
	t0=$(date +%s)
	until "$bin/shardline" --coordinator "$client" status 2>/dev/null | grep -q ' x 1 '; do
		kill -0 "$group_pid" 2>/dev/null || { tail -20 "$out/logs/$name-node.log" >&2; die "the node group exited"; }
		[ $(( $(date +%s) - t0 )) -gt 600 ] && die "the node group did not register in 600 s"
		sleep 0.5
	done
	say "group up in $(( $(date +%s) - t0 )) s"
	grep -E 'cuda:|load:|kv:' "$out/logs/$name-node.log" >&2
}

stop() {
	"$bin/shardline" --coordinator "$client" drain --exit >/dev/null 2>&1
	i=0; while kill -0 "$group_pid" 2>/dev/null; do
		i=$((i + 1)); [ $i -gt 300 ] && { say "the node group did not leave; killing it"; kill -TERM "$group_pid"; sleep 2; kill -KILL "$group_pid" 2>/dev/null; }
		sleep 0.1
	done
	wait "$group_pid" 2>/dev/null; group_pid=""
	kill -TERM "$coord_pid"; wait "$coord_pid" 2>/dev/null; coord_pid=""
}

status=0
for g in ${GPUS:-1}; do
	for pol in $policies; do
		cases=$CASES; [ "$pol" = simple ] && cases=$SIMPLE_CASES
		[ -n "$(printf '%s' "$cases" | tr -d ' ')" ] || continue
		label=${pol%default}; label=${label:-continuous}
		cfg="tp$g-$label"
		say "== $cfg"
		start "$cfg" "$g" "$pol"
		first=1
		for c in $cases; do
			IFS=: read -r cname mix streams plen olen nreq reuse <<EOF
$c
EOF
			pflags=$(reuse_flags "$cname" "${reuse:-}")
			for mode in $modes; do
				w=0; [ $first = 1 ] && w=$warmup; first=0
				run="$cfg-$cname"; tflag=""; blabel=$label
				if [ "$mode" = http ]; then
					run="$run-http"; tflag="--http http://$http"; blabel="$label/http"
				fi
				say "-- $run: $streams streams, $nreq requests, $mix prompt $plen output $olen ($mode${reuse:+, reuse $reuse})"
				# shellcheck disable=SC2086
				timeout 900 "$bin/shardline-bench-serve" --coordinator "$client" $tflag --model bench \
					--streams "$streams" --requests "$nreq" --mix "$mix" --prompt-len "$plen" \
					--output-len "$olen" --vocab "$vocab" --seed 1 --warmup "$w" --coord-pid "$coord_pid" \
					--meta "device=$device" --meta "model=$shape" --meta "gpus=$g" \
					--meta "batching=$blabel" --meta "case=$cname" --meta "transport=$mode" \
					--out "$out/$run.json" $pflags ${LOADGEN_FLAGS:-} >"$out/$run.txt" 2>"$out/logs/$run-loadgen.log"
				rc=$?
				cat "$out/$run.txt"
				[ $rc -eq 0 ] || { status=1; say "$run failed (exit $rc):"; tail -5 "$out/logs/$run-loadgen.log" >&2; }
			done
		done
		stop
		grep -iE 'preempt|error' "$out/logs/$cfg-node.log" | tail -5 >&2
	done
done
if [ $status -eq 0 ]; then say "done: results in $out"; else say "done, with failures: results in $out"; fi
exit $status
