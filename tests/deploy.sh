#!/bin/sh
# The deploy files run as shipped (deploy/README.md):
#   1. deploy/install.sh stages a tree (--root): binaries, keys, config, units;
#   2. systemd-analyze verify passes on both units, silently (their paths
#      moved under the staging root, nothing else changed);
#   3. the coordinator unit's ExecStart, with coordinator.env as installed
#      (only its ports made ephemeral), starts with CURVE and the API key;
#      the HTTP API answers 401 without the key and 200 with it;
#   4. with SmolLM2 ($SL_SMOLLM2_GGUF): the node unit's ExecStart with
#      node-a.env (NP=2, pp 2) registers over CURVE, answers a completion,
#      and its stop signal (SIGUSR1 to mpirun) ends it with status 0.
# Ends with "N passed, N failed". Skips (exit 0, says why) without systemd-analyze.
set -u
bin=${BIN:-build/bin}
command -v systemd-analyze >/dev/null 2>&1 || { echo "skipped: no systemd-analyze (apt-get install systemd)"; exit 0; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d); root=$tmp/root
passed=0; failed=0; coord_pid=""; group_pid=""
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
cleanup() {
	for p in $group_pid $coord_pid; do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT

# 1. install into a staging root
model=${SL_SMOLLM2_GGUF:-}
[ -n "$model" ] && [ -f "$model" ] && model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model") || model=""
if sh deploy/install.sh --from "$bin/.." --root "$root" ${model:+--model "$model"} \
	--coordinator 127.0.0.1 >"$tmp/install.log" 2>&1; then
	ok "install.sh --root staged the tree"
else
	bad "install.sh failed"; cat "$tmp/install.log"
fi
etc=$root/etc/shardline
for f in opt/shardline/bin/shardline-coordinator opt/shardline/bin/shardline-node \
	etc/shardline/keys/coordinator.key etc/shardline/keys/nodes/node.pub etc/shardline/keys/clients/client.pub \
	etc/shardline/api-key etc/shardline/coordinator.env etc/shardline/node-a.env \
	etc/systemd/system/shardline-coordinator.service etc/systemd/system/shardline-node@.service; do
	[ -e "$root/$f" ] || bad "install.sh made no $f"
done

# 2. systemd-analyze verify: the units with their paths under the root
mkdir -p "$tmp/units"
for u in shardline-coordinator.service shardline-node@.service; do
	sed "s#/opt/shardline#$root/opt/shardline#g; s#/etc/shardline#$etc#g" \
		"$root/etc/systemd/system/$u" >"$tmp/units/$u"
done
cp "$tmp/units/shardline-node@.service" "$tmp/units/shardline-node@a.service"
for u in shardline-coordinator.service shardline-node@a.service; do
	out=$(systemd-analyze verify "$tmp/units/$u" 2>&1); rc=$?
	if [ $rc -eq 0 ] && [ -z "$out" ]; then ok "systemd-analyze verify $u"; else bad "verify $u (exit $rc): $out"; fi
done

# The ExecStart= of a unit, continuation lines joined.
exec_start() {
	sed -n '/^ExecStart=/,/[^\\]$/p' "$1" | sed 's/^ExecStart=//; s/\\$//' | tr '\n' ' '
}
# An EnvironmentFile= as systemd reads it: KEY=VALUE lines, the value
# whole (blanks included), '#' lines and blank lines skipped.
load_env() {
	while IFS= read -r line; do
		case $line in '' | '#'*) continue ;; esac
		export "${line%%=*}=${line#*=}"
	done <"$1"
}
# Runs a unit's command the way systemd would: its Environment= defaults,
# then its env file's variables, ${X} and $X expanded ($X split on blanks),
# in the background.
run_unit() { # UNIT ENVFILE LOG
	cmd=$(exec_start "$1")
	defaults=$(sed -n 's/^Environment=//p' "$1" | head -1)
	(set +u; for kv in $defaults; do export "${kv?}"; done; load_env "$2"
	 for kv in $(sed -n 's/^Environment=//p' "$1" | tail -n +2); do export "${kv?}"; done
	 eval "exec $cmd" >"$3" 2>&1) &
}

# 3. the coordinator as shipped, its ports made ephemeral (other tests run alongside)
sed -i 's#^CLIENT_BIND=.*#CLIENT_BIND=tcp://0.0.0.0:*#; s#^NODE_BIND=.*#NODE_BIND=tcp://0.0.0.0:*#;
	s#^HTTP_BIND=.*#HTTP_BIND=0.0.0.0:0#; s#^COORD_ARGS=.*#COORD_ARGS=--ports-file '"$tmp"'/ports#' "$etc/coordinator.env"
[ -n "$model" ] || sed -i "s#^TOKENIZER=.*#TOKENIZER=$PWD/tests/data/llama2-small/tokenizer.json#" "$etc/coordinator.env"
run_unit "$tmp/units/shardline-coordinator.service" "$etc/coordinator.env" "$tmp/coord.log"
coord_pid=$!
i=0; while [ ! -s "$tmp/ports" ] && [ $i -lt 100 ] && kill -0 $coord_pid 2>/dev/null; do i=$((i + 1)); sleep 0.1; done
if [ -s "$tmp/ports" ]; then
	ok "the coordinator unit started (CURVE: $(grep -c 'CURVE on' "$tmp/coord.log") line)"
	http=127.0.0.1:$(awk '/^http/{print $2}' "$tmp/ports" | sed 's/.*://')
	node_port=$(awk '/^node/{print $2}' "$tmp/ports" | sed 's/.*://')
	key=$(cat "$etc/api-key")
	c1=$(curl -s -o /dev/null -w '%{http_code}' "http://$http/v1/models")
	c2=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" "http://$http/v1/models")
	[ "$c1" = 401 ] && [ "$c2" = 200 ] && ok "HTTP API: 401 without the key, 200 with it" ||
		bad "HTTP API: $c1 without the key (want 401), $c2 with it (want 200)"
else
	bad "the coordinator unit did not start"; tail -5 "$tmp/coord.log"
fi

# 4. the node group unit as shipped: NP=2 at pp 2 on this host
if [ -z "$model" ] || [ -z "${node_port:-}" ]; then
	echo "node unit: skipped (no SmolLM2: \$SL_SMOLLM2_GGUF, from make deps)"
else
	sed -i "s#^NP=.*#NP=2#; s#--tp 1 --pp 1#--tp 1 --pp 2 --device cpu --kv-blocks 64#;
		s#tcp://127.0.0.1:5556#tcp://127.0.0.1:$node_port#; s#^MPIRUN_OPTS=.*#MPIRUN_OPTS=--oversubscribe#" \
		"$etc/node-a.env"
	run_unit "$tmp/units/shardline-node@a.service" "$etc/node-a.env" "$tmp/group.log"
	group_pid=$!
	i=0; until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$http/health")" = 200 ]; do
		i=$((i + 1)); [ $i -gt 240 ] || ! kill -0 $group_pid 2>/dev/null && break; sleep 0.5
	done
	if grep -q "registered with" "$tmp/group.log"; then
		ok "the node unit's group registered over CURVE"
		name=$(sed -n 's/^MODEL_NAME=//p' "$etc/coordinator.env")
		out=$(curl -s -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
			"http://$http/v1/completions" -d "{\"model\":\"$name\",\"prompt\":\"The capital of France is\",\"max_tokens\":4}")
		echo "$out" | grep -q '"finish_reason":"length"' && ok "a completion through the units" ||
			bad "completion: $out"
	else
		bad "the node unit's group did not register"; tail -8 "$tmp/group.log"
	fi
	kill -USR1 $group_pid 2>/dev/null # the unit's KillSignal, to mpirun only
	i=0; while kill -0 $group_pid 2>/dev/null && [ $i -lt 300 ]; do i=$((i + 1)); sleep 0.1; done
	if wait $group_pid; then ok "SIGUSR1 (the unit's stop) drained the group: mpirun exited 0"; else bad "the group's stop: exit $?"; fi
	group_pid=""
fi
if [ -n "$coord_pid" ]; then
	kill -TERM $coord_pid
	if wait $coord_pid; then ok "SIGTERM stopped the coordinator: exit 0"; else bad "coordinator stop: exit $?"; fi
	coord_pid=""
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
