#!/bin/sh
# Runs test binaries (Check suites) and scripts, sums their counts and ends
# with one line: "N passed, N failed". Exit status is non-zero on any failure.
# Usage: tests/run.sh LABEL BIN...   (RUN_LOGS=DIR: every output in DIR/NAME.log)
label=$1; shift
passed=0; failed=0
for t in "$@"; do
	out=$("$t" 2>&1); rc=$?
	# RUN_LOGS=DIR keeps each test's whole output (DIR/NAME.log)
	[ -n "${RUN_LOGS:-}" ] && printf '%s\n' "$out" >"$RUN_LOGS/$(basename "$t").log"
	printf '%s\n' "$out" | grep -v '^[0-9]*%: Checks' | grep -E 'FAIL|Failure|Error|error' | head -20
	# kernel tests report their worst error per case: keep them in the log
	printf '%s\n' "$out" | grep -E 'worst rel err|mismatches' | sed "s/^/$label: /"
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+%: Checks: ' | tail -1)
	if [ -n "$line" ]; then
		n=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
		f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
		e=$(echo "$line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
		bad=$((f + e))
		echo "$label: $(basename "$t"): $line"
		passed=$((passed + n - bad)); failed=$((failed + bad))
		[ $bad -eq 0 ] && [ $rc -ne 0 ] && failed=$((failed + 1))
	elif line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1); [ -n "$line" ]; then
		n=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
		f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
		echo "$label: $(basename "$t"): $line"
		passed=$((passed + n)); failed=$((failed + f))
		[ "$f" -eq 0 ] && [ $rc -ne 0 ] && failed=$((failed + 1))
	elif [ $rc -eq 0 ]; then
		echo "$label: $(basename "$t"): ok"; passed=$((passed + 1))
	else
		printf '%s\n' "$out" | tail -20
		echo "$label: $(basename "$t"): FAILED (exit $rc)"; failed=$((failed + 1))
	fi
done
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
