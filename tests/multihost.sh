#!/bin/sh
# A node group over two hosts, built on this machine from network
# namespaces (deploy/README.md's recipe, without ssh):
#   host A (namespace sl<pid>a, 10.251.N.1) and host B (sl<pid>b, 10.251.N.2)
#   joined by one veth pair in a /24 that exists only inside them; mpirun
#   in A reaches B through plm_rsh_agent = a script that runs the command
#   with `ip netns exec` instead of ssh; MPI confined to the veth subnet
#   (btl_tcp_if_include, oob_tcp_if_include).
# `shardline serve` in A serves a small random Llama with CURVE on (--keys:
# the leader registers over CURVE on the veth address) at tp 2, pp 2 and
# tp 2 x pp 2, each once with every rank on A and once with half the ranks
# on each host; the greedy completions must be the same text. Each serve
# stops with exit 0, and nothing is left in either namespace. Then, at tp 2
# one rank per host, a stream is cut off mid-way by (a) the link going down,
# (b) host B's processes killed: the client must get a complete text or an
# error, and every process on both hosts must be gone, within 15 s.
# Last, the watchdog-only path with a spare group: a coordinator with two
# groups (the tp 2 group over both hosts, its mpirun without Open MPI's
# oob keepalive, and a spare tp 2 group on A), the link cut mid-stream: the
# coordinator sees the group stall (--stall-ms) and moves the stream to the
# spare, which completes it with the text it gives alone; every rank of
# the cut group logs "watchdog:", and mpirun and every process of that
# group on both hosts are gone within 15 s. ONLY=spare runs that case alone.
# Ends with "N passed, N failed"; skips (exit 0, says why) when not root
# or `ip netns` cannot make namespaces.
set -u
bin=${BIN:-build/bin}
[ "$(id -u)" = 0 ] || { echo "skipped: multihost needs root (ip netns)"; exit 0; }
command -v ip >/dev/null 2>&1 || { echo "skipped: no ip (iproute2)"; exit 0; }
tag=sl$$; na=${tag}a; nb=${tag}b; net=10.251.$(($$ % 250))
tmp=$(mktemp -d); passed=0; failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
cleanup() {
	for ns in $na $nb; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	ip link del "v${tag}a" 2>/dev/null # only there when moving it into A failed
	rm -rf "$tmp"
}
trap cleanup EXIT
if ! ip netns add "$na" 2>"$tmp/err"; then
	echo "skipped: ip netns unavailable: $(cat "$tmp/err")"; exit 0
fi
ip netns add "$nb" && ip link add "v${tag}a" type veth peer name "v${tag}b" 2>"$tmp/err" ||
	{ echo "skipped: no veth pair: $(cat "$tmp/err")"; exit 0; }
	ip link set "v${tag}a" netns "$na" && ip link set "v${tag}b" netns "$nb" &&
	ip -n "$na" addr add "$net.1/24" dev "v${tag}a" && ip -n "$nb" addr add "$net.2/24" dev "v${tag}b" &&
	ip -n "$na" link set lo up && ip -n "$nb" link set lo up &&
	ip -n "$na" link set "v${tag}a" up && ip -n "$nb" link set "v${tag}b" up ||
	{ echo "FAIL: could not build the two hosts"; echo "0 passed, 1 failed"; exit 1; }
ok "hosts A $net.1 and B $net.2 linked by a veth pair"

# plm_rsh_agent: mpirun calls it as `AGENT HOST COMMAND...`, like ssh
cat >"$tmp/rsh" <<EOF
#!/bin/sh
host=\$1; shift
echo "\$host" >>"$tmp/rsh.log"
case \$host in $net.1) ns=$na ;; $net.2) ns=$nb ;; *) echo "rsh: unknown host \$host" >&2; exit 255 ;; esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$tmp/rsh"

# the model: a small random Llama with the test tokenizer's vocabulary
tok=tests/data/llama2-small/tokenizer.json; model=$tmp/model
vocab=$("$bin/shardline-tok" "$tok" info | awk '/^vocab_size/{print $2}')
"$bin/shardline-mkckpt" --out "$model" --dim 128 --hidden 344 --layers 2 --heads 4 --kv-heads 2 \
	--vocab "$vocab" --max-pos 512 --dtype bf16 --seed 3 >/dev/null 2>&1 && cp "$tok" "$model/tokenizer.json" ||
	bad "could not make the model"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi="--mca plm_rsh_agent $tmp/rsh --mca btl self,tcp --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24"
# start_serve HOSTFILE LABEL TP PP: serve in A, its pid in $pid, its URL in $url
start_serve() {
	log=$tmp/$2.log; out=$tmp/$2.out
	ip netns exec "$na" "$bin/shardline" serve "$model" --model-name tiny --tp "$3" --pp "$4" --device cpu \
		--hosts "$1" --mpirun-opts "$mpi" --keys "$tmp/keys" --node-bind "tcp://$net.1:*" \
		--client-bind 'tcp://127.0.0.1:*' --http-bind 127.0.0.1:0 --ready-timeout-s 120 \
		>"$out" 2>"$log" &
	pid=$!
	i=0; until grep -q 'ready: http' "$out" 2>/dev/null; do
		i=$((i + 1)); if [ $i -gt 600 ] || ! kill -0 $pid 2>/dev/null; then
			bad "$2: serve not ready"; tail -8 "$log" | sed 's/^/FAIL:   /'
			kill -KILL $pid 2>/dev/null; return 1; fi
		sleep 0.2
	done
	url=$(sed -n 's/.*ready: \(http[^ ]*\) .*/\1/p' "$out")
}
# serve in A at TP x PP over HOSTFILE; the greedy completion into LABEL.text; stops serve
run() { # HOSTFILE LABEL TP PP
	start_serve "$@" || return 1
	ip netns exec "$na" curl -s "$url/completions" -H 'Content-Type: application/json' \
		-d '{"model":"tiny","prompt":"Once upon a time","max_tokens":24,"temperature":0}' |
		sed -n 's/.*"text":"\(.*\)","logprobs".*/\1/p' >"$tmp/$2.text"
	kill -TERM $pid; wait $pid; rc=$?
	[ $rc -eq 0 ] && ok "$2: serve stopped cleanly (exit 0)" || { bad "$2: serve exit $rc"; tail -5 "$log"; }
}
# Each grid on one host, then split in two halves (by slot: the first
# half of the ranks, stage 0 at pp 2, on A). tp 2: one rank per host.
ONLY=${ONLY:-}
[ "$ONLY" = spare ] && grids="" || grids='"2 1" "1 2" "2 2"'
eval "set -- $grids"
for grid in "$@"; do
	set -- $grid; n=$(($1 * $2)); g=tp$1-pp$2
	printf '%s slots=%d\n' "$net.1" $n >"$tmp/hosts1"
	printf '%s slots=%d\n%s slots=%d\n' "$net.1" $((n / 2)) "$net.2" $((n / 2)) >"$tmp/hosts2"
	run "$tmp/hosts1" "$g-one-host" "$1" "$2"
	run "$tmp/hosts2" "$g-two-hosts" "$1" "$2"
	a=$(cat "$tmp/$g-one-host.text" 2>/dev/null); b=$(cat "$tmp/$g-two-hosts.text" 2>/dev/null)
	if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "tp $1 x pp $2 across two hosts = one host: '$a'"
	else bad "tp $1 x pp $2: answers differ: one host '$a', two hosts '$b'"; fi
done
[ "$ONLY" = spare ] || { [ "$(sort -u "$tmp/rsh.log" 2>/dev/null)" = "$net.2" ] && ok "mpirun started B's ranks through the netns agent (never A's)" ||
	bad "the rsh agent ran for: $(cat "$tmp/rsh.log" 2>/dev/null)"
grep -q "CURVE on" "$tmp/tp2-pp1-two-hosts.log" && grep -q "registered with tcp://$net.1" "$tmp/tp2-pp1-two-hosts.log" &&
	ok "two hosts: the leader registered over CURVE at $net.1" || bad "two hosts: no CURVE registration in the log"; }

# Failures, at tp 2 with one rank per host: mid-stream, (a) the link
# between the hosts is cut, (b) every process on B is killed. Within the
# bound (issue 39: 15 s with the default heartbeat and watchdog settings,
# counted from the cut) the streaming client must be answered (a complete
# text or an error event / 5xx) and every process on both hosts gone:
# serve's mpirun has Open MPI's oob keepalive (its default with --hosts), so
# B's orted kills B's rank and mpirun ends A's; the ranks' watchdogs
# (--stall-ms 10000) are the backstop. The leader sleeps 50 ms a step
# (test hook) so that the 400-token stream is still running at the cut.
# A missed bound is reported with the times, so a loaded CI box shows
# by how much; the polling stops at 60 s either way.
bound=15
now() { date +%s.%N; }
since() { echo "$(now) $1" | awk '{printf "%.1f", $1 - $2}'; }
fail_case() { # LABEL cut|kill
	printf '%s slots=1\n%s slots=1\n' "$net.1" "$net.2" >"$tmp/hosts-fail"
	export SL_TEST_HOOKS=1 SL_TEST_STALL_STEP_MS=50 SL_TEST_STALL_RANK=0
	keep=$mpi; mpi="$mpi -x SL_TEST_HOOKS -x SL_TEST_STALL_STEP_MS -x SL_TEST_STALL_RANK"
	start_serve "$tmp/hosts-fail" "$1" 2 1; rc=$?
	mpi=$keep; unset SL_TEST_HOOKS SL_TEST_STALL_STEP_MS SL_TEST_STALL_RANK
	[ $rc -eq 0 ] || return 1
	grep -q 'oob_tcp_keepalive_time 2' "$log" && ok "$1: serve gave mpirun the oob keepalive flags" ||
		bad "$1: no oob keepalive on the mpirun line"
	stream=$tmp/$1.stream
	ip netns exec "$na" curl -sN --max-time 90 -o "$stream" -w '%{http_code}' "$url/completions" \
		-H 'Content-Type: application/json' \
		-d '{"model":"tiny","prompt":"Once upon a time","max_tokens":400,"temperature":0,"stream":true}' \
		>"$tmp/$1.code" &
	cpid=$!
	i=0; until [ "$(grep -c "^data: {" "$stream" 2>/dev/null)" -ge 5 ] 2>/dev/null; do
		i=$((i + 1)); if [ $i -gt 300 ] || ! kill -0 $cpid 2>/dev/null; then
			bad "$1: the stream never got going"; kill -KILL $cpid $pid 2>/dev/null; return 1; fi
		sleep 0.2
	done
	t0=$(now)
	if [ "$2" = cut ]; then ip -n "$na" link set "v${tag}a" down
	else for p in $(ip netns pids "$nb"); do kill -KILL "$p" 2>/dev/null; done; fi
	answered=""; gone=""; i=0
	while [ $i -lt 300 ] && [ -z "$gone" ]; do
		[ -z "$answered" ] && ! kill -0 $cpid 2>/dev/null && answered=$(since "$t0")
		[ -n "$answered" ] && [ -z "$(ip netns pids "$na")$(ip netns pids "$nb")" ] && gone=$(since "$t0")
		i=$((i + 1)); sleep 0.2
	done
	left=$(ip netns pids "$na") $(ip netns pids "$nb")
	for p in $left; do kill -KILL "$p" 2>/dev/null; done
	wait $cpid; wait $pid; rc=$?
	code=$(cat "$tmp/$1.code"); n=$(grep -c '^data: {' "$stream")
	if [ "$code" = 200 ] && grep -q '"finish_reason":"length"' "$stream" && grep -q '^data: \[DONE\]' "$stream"; then
		ok "$1: the client got the complete text ($n events) in ${answered:-?} s"
	elif grep -q '"error"' "$stream"; then
		ok "$1: the client got a clear error in ${answered:-?} s: $(grep -o '"message":"[^"]*"' "$stream" | head -1)"
	else bad "$1: the client got neither a complete text nor an error (HTTP $code, $n events)"; tail -3 "$stream"; fi
	if [ -n "$gone" ]; then ok "$1: every process on both hosts gone $gone s after the $2 (serve exit $rc)"
	else bad "$1: still running 60 s after the $2: $(echo $left)"; fi
	awk -v a="${answered:-999}" -v g="${gone:-999}" -v b=$bound 'BEGIN { exit !(a <= b && g <= b) }' &&
		ok "$1: answered and gone within $bound s" ||
		bad "$1: over $bound s: answered ${answered:-never}, gone ${gone:-never}"
	# The cause: a rank's watchdog, or (first, with the keepalive) mpirun
	# losing B's daemon, which Open MPI 4.1 reports as "lost communication"
	# after a cut and as "unable to reliably start" when the daemon was
	# killed (its launcher, here the rsh agent, exited).
	cause=$(grep -E 'watchdog:|ORTE has lost communication with a remote daemon|ORTE was unable to reliably start one or more daemons' "$log" | head -1)
	[ -n "$cause" ] && grep -q 'serve: the node group (mpirun) exited' "$log" &&
		ok "$1: the log names the cause: $cause" ||
		{ bad "$1: no log line names the cause"; tail -15 "$log"; }
}
[ "$ONLY" = spare ] || fail_case tp2-cut cut
# The link back before the next case, and up on both ends (operstate UP)
# before serve starts: a daemon on B dials A over it at once, and a
# launch that finds it still down ends the group before it is ready.
ip -n "$na" link set "v${tag}a" up && ip -n "$nb" link set "v${tag}b" up
i=0; until ip -n "$na" -br link show "v${tag}a" | grep -q ' UP ' &&
	ip -n "$nb" -br link show "v${tag}b" | grep -q ' UP '; do
	i=$((i + 1)); [ $i -gt 100 ] && break; sleep 0.1
done
sleep 1
[ "$ONLY" = spare ] || fail_case tp2-host-lost kill

# A coordinator with two groups: the tp 2 group over both hosts and a
# spare tp 2 group on A alone (CURVE on, started by hand as
# deploy/README.md does, not by serve: serve stops with its group). The
# link is cut mid-stream. The group's mpirun has no oob keepalive flags,
# so only the ranks' watchdogs (--stall-ms 4000) end it: each rank must
# log "watchdog:", and mpirun and every process of the group on both
# hosts must be gone within the bound; the coordinator (--stall-ms 2000)
# sees the leader's Loads go on while its progress stands still, stops
# routing to it and migrates the stream to the spare group, whose text
# must equal the spare group's own answer to the same request.
# descendants PID...: the PIDs and every process below them
descendants() {
	for p in "$@"; do echo "$p"; descendants $(ps -o pid= --ppid "$p" 2>/dev/null); done
}
alive() { for p in "$@"; do kill -0 "$p" 2>/dev/null && echo "$p"; done; }
spare_case() { # LABEL
	lab=$1; keys=$tmp/keys; clog=$tmp/$lab.coord.log; ports=$tmp/$lab.ports
	printf '%s slots=1\n%s slots=1\n' "$net.1" "$net.2" >"$tmp/hosts-fail"
	[ -f "$keys/coordinator.key" ] || for k in coordinator node client; do
		"$bin/shardline" keygen --out "$keys" --name $k >/dev/null; done
	ip netns exec "$na" "$bin/shardline-coordinator" --model-name tiny --tokenizer "$model/tokenizer.json" \
		--client-bind 'tcp://127.0.0.1:*' --node-bind "tcp://$net.1:*" --http-bind 127.0.0.1:0 \
		--ports-file "$ports" --stall-ms 2000 --curve-key "$keys/coordinator.key" \
		--client-keys "$keys/client.pub" --node-keys "$keys/node.pub" >"$clog" 2>&1 &
	coord=$!
	i=0; until [ -s "$ports" ] || [ $i -gt 300 ]; do sleep 0.1; i=$((i + 1)); done
	nep=$(awk '/^node/{print $2}' "$ports"); url=http://$(awk '/^http/{print $2}' "$ports")/v1
	[ -n "$nep" ] || { bad "$lab: the coordinator did not start"; tail -5 "$clog"; kill -KILL $coord; return 1; }
	node="$bin/shardline-node --model $model --device cpu --tp 2 --coordinator $nep --model-name tiny
		--kv-blocks 256 --stall-ms 4000 --curve-key $keys/node.key --server-key $keys/coordinator.pub"
	registered() { # N: the coordinator logged N registrations (60 s at most)
		i=0; until [ "$(grep -c 'registered:' "$clog")" -ge "$1" ] || [ $i -gt 600 ]; do sleep 0.1; i=$((i + 1)); done
		[ $i -le 600 ]
	}
	# shellcheck disable=SC2086 # flag lists
	ip netns exec "$na" env SL_TEST_HOOKS=1 SL_TEST_STALL_STEP_MS=50 SL_TEST_STALL_RANK=0 mpirun \
		--hostfile "$tmp/hosts-fail" $mpi -x OMP_NUM_THREADS -x SL_TEST_HOOKS -x SL_TEST_STALL_STEP_MS \
		-x SL_TEST_STALL_RANK -np 2 \
		sh -c 'exec "$@" >"$0.r$OMPI_COMM_WORLD_RANK.log" 2>&1' "$tmp/$lab" $node >"$tmp/$lab.group.log" 2>&1 &
	grp=$!
	registered 1 || { bad "$lab: the two-host group did not register"; tail -5 "$tmp/$lab.group.log"; }
	stream=$tmp/$lab.stream; req='{"model":"tiny","prompt":"Once upon a time","max_tokens":400,"temperature":0,"stream":true}'
	ip netns exec "$na" curl -sN --max-time 90 -o "$stream" "$url/completions" \
		-H 'Content-Type: application/json' -d "$req" &
	cpid=$!
	i=0; until [ "$(grep -c "^data: {" "$stream" 2>/dev/null)" -ge 5 ] 2>/dev/null || [ $i -gt 300 ]; do
		sleep 0.2; i=$((i + 1)); done
	# the spare joins once the stream runs on the two-host group
	# shellcheck disable=SC2086
	ip netns exec "$na" mpirun --oversubscribe $mpi -x OMP_NUM_THREADS -np 2 $node >"$tmp/$lab.spare.log" 2>&1 &
	spare=$!
	registered 2 || { bad "$lab: the spare group did not register"; tail -5 "$tmp/$lab.spare.log"; }
	lost=$(descendants $grp)
	t0=$(now)
	ip -n "$na" link set "v${tag}a" down
	answered=""; gone=""; i=0
	while [ $i -lt 300 ] && [ -z "$gone" ]; do
		[ -z "$answered" ] && ! kill -0 $cpid 2>/dev/null && answered=$(since "$t0")
		[ -z "$(alive $lost)$(ip netns pids "$nb")" ] && gone=$(since "$t0")
		i=$((i + 1)); sleep 0.2
	done
	[ -n "$answered" ] || { i=0; while kill -0 $cpid 2>/dev/null && [ $i -lt 300 ]; do sleep 0.2; i=$((i + 1)); done
		answered=$(since "$t0"); }
	left="$(alive $lost) $(ip netns pids "$nb")"
	[ -z "$gone" ] && { ps -o pid=,ppid=,etimes=,args= -p "$(echo $left | tr ' ' ',')" | cut -c1-100; tail -n 4 "$tmp/$lab".r*.log; }
	for p in $left; do kill -KILL "$p" 2>/dev/null; done
	wait $grp; rc=$?
	wait $cpid
	text() { sed -n 's/^data: {.*"text":"\([^"]*\)".*/\1/p' "$1" | tr -d '\n'; }
	n=$(grep -c '^data: {' "$stream")
	if grep -q '"finish_reason":"length"' "$stream" && grep -q '^data: \[DONE\]' "$stream"; then
		ok "$lab: the stream completed ($n events) in $answered s"
	else bad "$lab: the stream did not complete ($n events): $(tail -c 300 "$stream")"; fi
	grep -qE "group 1 .*stalled" "$clog" && grep -q "continues on group 2" "$clog" &&
		ok "$lab: the coordinator saw the group stall and moved the stream: $(grep -m1 -o 'stalled:.*' "$clog" | cut -c1-120)" ||
		{ bad "$lab: no stall and migration in the coordinator's log"; tail -8 "$clog"; }
	ip netns exec "$na" curl -sN --max-time 90 -o "$tmp/$lab.ref" "$url/completions" \
		-H 'Content-Type: application/json' -d "$req"
	a=$(text "$stream"); b=$(text "$tmp/$lab.ref")
	[ -n "$b" ] && [ "$a" = "$b" ] && ok "$lab: the migrated stream's text = the spare group's own (${#a} bytes)" ||
		{ bad "$lab: texts differ: migrated '$(echo "$a" | cut -c1-80)...', spare '$(echo "$b" | cut -c1-80)...'"; }
	# each rank's own log (B's output cannot cross the cut to mpirun)
	for r in 0 1; do
		grep -qE "node r$r/2 watchdog: " "$tmp/$lab.r$r.log" && ok "$lab: rank $r: $(grep -m1 -oE "watchdog: .{0,60}" "$tmp/$lab.r$r.log")" ||
			{ bad "$lab: rank $r logged no watchdog line"; tail -5 "$tmp/$lab.r$r.log"; tail -5 "$tmp/$lab.group.log"; }
	done
	if [ -n "$gone" ]; then ok "$lab: mpirun (exit $rc) and every process of the group on both hosts gone $gone s after the cut"
	else bad "$lab: still running 60 s after the cut: $(echo $left)"; fi
	awk -v g="${gone:-999}" -v b=$bound 'BEGIN { exit !(g <= b) }' && ok "$lab: gone within $bound s" ||
		bad "$lab: over $bound s: gone ${gone:-never}"
	kill -TERM $spare $coord; wait $spare $coord
	ip -n "$na" link set "v${tag}a" up
}
spare_case tp2-cut-spare

# the last case's processes get a moment to finish exiting (a watchdog's
# reaper polls up to 3 s; on a loaded machine a teardown takes a while):
# what is still there after 20 s is left running, named with its command
left=""
for i in $(seq 1 40); do
	left=""
	for ns in $na $nb; do left="$left$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"; done
	[ -z "$left" ] && break
	sleep 0.5
done
[ -z "$left" ] && ok "no process left on either host" ||
	bad "left running: $(for p in $left; do ps -o pid=,args= -p "$p" 2>/dev/null; done | tr '\n' ';')"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
