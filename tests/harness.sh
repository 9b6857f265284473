# tests/harness.sh — what the process-level test scripts share, sourced
# from the repository root after their settings: a temporary folder $tmp,
# the list $pids of processes stopped on exit, pass/fail counting (ok,
# bad; the script prints "N passed, N failed"), log tails (logs NAME...,
# files in $tmp) and a millisecond clock (now_ms).
# HARNESS_GRACE (seconds, default 0): SIGTERM every process in $pids that
# long before the SIGKILL on exit, so groups under mpirun can take their
# ranks down. KEEP=DIR keeps a copy of $tmp.
tmp=$(mktemp -d)
pids=""

cleanup() {
	if [ "${HARNESS_GRACE:-0}" != 0 ]; then
		for p in $pids; do kill -TERM "$p" 2>/dev/null; done
		sleep "$HARNESS_GRACE"
	fi
	for p in $pids; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap 'cp -r "$tmp" "$KEEP"; cleanup' EXIT
trap 'exit 1' INT TERM

pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
logs() { for f in "$@"; do echo "--- $f"; tail -15 "$tmp/$f"; done; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
