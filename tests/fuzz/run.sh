#!/bin/sh
# Runs libFuzzer targets for a fixed time each, FUZZ_JOBS at once, and
# fails when any of them finds something (crash, leak, UB, timeout, OOM),
# printing the reproducer's path and the command that replays it.
# `make fuzz` calls it; docs/fuzzing.md explains the output.
#
#   FUZZ_BUILD=build-fuzz FUZZ_SECONDS=60 FUZZ_JOBS=2 sh tests/fuzz/run.sh TARGET...
#
# Per target T: binary $FUZZ_BUILD/fuzz_T, committed seeds tests/fuzz/corpus/T
# (read only), the corpus it grows $FUZZ_BUILD/corpus/T, findings
# $FUZZ_BUILD/findings/T/, log $FUZZ_BUILD/logs/T.log, dictionary
# tests/fuzz/T.dict when there is one. Extra libFuzzer flags: FUZZ_FLAGS.
# Internal: `run.sh -one T` runs a single target (what xargs calls).
B=${FUZZ_BUILD:-build-fuzz}
S=${FUZZ_SECONDS:-60}
J=${FUZZ_JOBS:-2}
# a single input slower than this is a finding (a hang); inputs are small
TIMEOUT=${FUZZ_TIMEOUT:-25}

run_one() {
	t=$1
	mkdir -p "$B/corpus/$t" "$B/findings/$t" "$B/logs"
	dict=
	[ -f "tests/fuzz/$t.dict" ] && dict="-dict=tests/fuzz/$t.dict"
	t0=$(date +%s)
	# shellcheck disable=SC2086
	"$B/fuzz_$t" -max_total_time="$S" -timeout="$TIMEOUT" -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$B/findings/$t/" $dict $FUZZ_FLAGS \
		"$B/corpus/$t" "tests/fuzz/corpus/$t" >"$B/logs/$t.log" 2>&1
	rc=$?
	secs=$(($(date +%s) - t0))
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$B/logs/$t.log" | tail -1)
	speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$B/logs/$t.log" | tail -1)
	if [ $rc -eq 0 ]; then
		echo "fuzz: $t: ok, ${execs:-?} executions (${speed:-?}/s) in ${secs}s"
		return 0
	fi
	echo "fuzz: $t: FAILED (exit $rc) after ${execs:-?} executions; log $B/logs/$t.log"
	grep -E '^==[0-9]+==ERROR|runtime error:|fuzz check failed|fuzz self-test|^SUMMARY|out-of-memory|timeout after|deadly signal' \
		"$B/logs/$t.log" | head -8 | sed "s/^/fuzz: $t:   /"
	repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$B/logs/$t.log" | tail -1)
	if [ -n "$repro" ]; then
		echo "fuzz: $t: reproducer $repro"
		echo "fuzz: $t: replay with: $B/fuzz_$t $repro"
	fi
	return 1
}

if [ "$1" = "-one" ]; then
	run_one "$2"
	exit $?
fi

[ $# -gt 0 ] || { echo "usage: $0 TARGET..." >&2; exit 2; }
for t in "$@"; do
	[ -x "$B/fuzz_$t" ] || { echo "fuzz: no binary $B/fuzz_$t (make fuzz-build)" >&2; exit 2; }
done
echo "fuzz: $# targets, ${S}s each, $J at a time"
summary=$(mktemp)
printf '%s\n' "$@" | xargs -P "$J" -I{} sh "$0" -one {} | tee "$summary"
ok=$(grep -c ': ok,' "$summary")
rm -f "$summary"
echo "fuzz: $ok passed, $(($# - ok)) failed"
[ "$ok" -eq $# ]
