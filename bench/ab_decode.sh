#!/bin/sh
# A same-call A/B of two shardline-bench-decode builds (GPU host): every
# case in CASES runs REPS times on each binary, before and after taking
# turns (the order swaps every repetition, so drift in the machine's
# speed falls on both sides), then bench/plot_ab.py writes the table and
# the plot. Machines of one kind differ by a few percent, so a change is
# judged only against the build it replaces, in one call
# (docs/benchmarks.md, "How these were measured").
#
# Usage: bench/ab_decode.sh BEFORE_BIN AFTER_BIN OUT_DIR   (from the repository root)
#   BEFORE_BIN, AFTER_BIN: two shardline-bench-decode executables (e.g.
#   main's, unpacked beside the bundle, and the bundle's own).
#   OUT_DIR/CASE-before-REP.json and .log, CASE-after-REP.*, order.txt
#   (the runs in the order they ran), ab.md and ab.png (bench/plot_ab.py).
# Environment (defaults in brackets):
#   CASES    NAME=ARGUMENTS entries separated by ';' (the arguments go to
#            both binaries as they are; --out is added)
#            [fp16-b1-64=--shape 7b --batches 1,64 --prompt 128 --new 128 --prefill 0;
#             fp8kv8-b64=--shape 7b --quant fp8 --kv-dtype fp8 --batches 64 --prompt 512 --new 256 --prefill 0]
#            A case whose arguments give --tp T and/or --pp P with T x P > 1
#            runs under MPIRUN -np T x P (one GPU a rank, as bench/scale.sh).
#   ENV_BEFORE, ENV_AFTER  NAME=VALUE words set in that side's runs' environment
#            (with one binary on both sides, two settings compare; a local
#            mpirun hands its environment to its ranks) [none]
#   MPIRUN   the launcher of those cases [mpirun]
#   REPS     runs of each case on each side [2]
#   RUN_TIMEOUT  seconds a run may take [300]
#   PYTHON   for the table [python3]; the JSON and logs are written anyway
# Exit status: 0 when every run wrote its JSON and the table was made,
# 1 otherwise, 2 on bad usage.
set -u
usage() { echo "usage: bench/ab_decode.sh BEFORE_BIN AFTER_BIN OUT_DIR" >&2; exit 2; }
[ $# -eq 3 ] || usage
before=$1 after=$2 out=$3
for b in "$before" "$after"; do
	[ -x "$b" ] || { echo "ab_decode.sh: $b is not an executable" >&2; exit 2; }
done
cases=${CASES:-"fp16-b1-64=--shape 7b --batches 1,64 --prompt 128 --new 128 --prefill 0;fp8kv8-b64=--shape 7b --quant fp8 --kv-dtype fp8 --batches 64 --prompt 512 --new 256 --prefill 0"}
reps=${REPS:-2}
case $reps in '' | *[!0-9]* | 0) echo "ab_decode.sh: REPS must be a positive number" >&2; exit 2 ;; esac
# every entry NAME=ARGS, NAME of letters, digits, '-', '_' and '.'
names=$(printf '%s\n' "$cases" | tr ';' '\n' | while IFS= read -r c; do
	[ -z "$(printf '%s' "$c" | tr -d ' ')" ] && continue
	n=${c%%=*}
	case $c in *=*) ;; *) echo "!$c"; continue ;; esac
	case $n in '' | *[!A-Za-z0-9._-]*) echo "!$c"; continue ;; esac
	echo "$n"
done)
bad=$(printf '%s\n' "$names" | grep '^!' | head -1)
[ -z "$bad" ] || { echo "ab_decode.sh: CASES entry '${bad#!}' is not NAME=ARGUMENTS" >&2; exit 2; }
[ -n "$names" ] || { echo "ab_decode.sh: CASES is empty" >&2; exit 2; }
dup=$(printf '%s\n' "$names" | sort | uniq -d | head -1)
[ -z "$dup" ] || { echo "ab_decode.sh: case $dup named twice" >&2; exit 2; }

for e in ${ENV_BEFORE:-} ${ENV_AFTER:-}; do
	case $e in [A-Za-z_]*=*) ;; *) echo "ab_decode.sh: ENV_BEFORE/ENV_AFTER word '$e' is not NAME=VALUE" >&2; exit 2 ;; esac
done

mkdir -p "$out"
: > "$out/order.txt"
printf 'before: %s %s\nafter: %s %s\n' "${ENV_BEFORE:-}" "$before" "${ENV_AFTER:-}" "$after" > "$out/sides.txt"
status=0
# ranks ARGS: tp x pp of a case's arguments (1 without --tp and --pp)
ranks() {
	tp=1 pp=1 prev=
	for a in "$@"; do
		[ "$prev" = --tp ] && tp=$a
		[ "$prev" = --pp ] && pp=$a
		prev=$a
	done
	case $tp$pp in *[!0-9]*) echo 1; return ;; esac
	echo $((tp * pp))
}
# run SIDE BIN REP NAME ARGS (the side's ENV_ words in its environment)
run() {
	envs=${ENV_BEFORE:-}
	[ "$1" = after ] && envs=${ENV_AFTER:-}
	tag="$4-$1-$3"
	echo "$tag" >> "$out/order.txt"
	# shellcheck disable=SC2086 # the case's arguments are words
	n=$(ranks $5)
	launch=""
	[ "$n" -gt 1 ] && launch="${MPIRUN:-mpirun} -np $n"
	# stdin from /dev/null: the loop below reads the cases from a pipe, and
	# a binary that reads stdin (mpirun forwards it) would eat the rest
	# shellcheck disable=SC2086 # the side's NAME=VALUE words, the launcher and the case's arguments are words
	if ! env $envs timeout "${RUN_TIMEOUT:-300}" $launch "$2" $5 --out "$out/$tag.json" < /dev/null > "$out/$tag.log" 2>&1 ||
		[ ! -s "$out/$tag.json" ]; then
		echo "ab_decode.sh: $tag failed (tail of $out/$tag.log):" >&2
		tail -5 "$out/$tag.log" >&2
		return 1
	fi
	echo "  $tag: $(grep -E '^batch' "$out/$tag.log" | sed 's/ tokens\/s.*//; s/ decode$//' | tr '\n' ' ')" >&2
}
r=1
while [ "$r" -le "$reps" ]; do
	sides="before after"
	[ $((r % 2)) -eq 0 ] && sides="after before"
	printf '%s\n' "$cases" | tr ';' '\n' | while IFS= read -r c; do
		[ -z "$(printf '%s' "$c" | tr -d ' ')" ] && continue
		for s in $sides; do
			b=$before
			[ "$s" = after ] && b=$after
			run "$s" "$b" "$r" "${c%%=*}" "${c#*=}" || echo fail >> "$out/.failed"
		done
	done
	r=$((r + 1))
done
[ -e "$out/.failed" ] && { status=1; rm -f "$out/.failed"; }
"${PYTHON:-python3}" bench/plot_ab.py "$out" || status=1
exit $status
