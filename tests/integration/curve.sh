#!/bin/sh
# CURVE on the coordinator's sockets (docs/security.md), over tcp on
# 127.0.0.1 with CURVE forced on by giving keys: `shardline keygen`; a
# node group and a client whose keys are listed are served; a client
# with an unknown key, and one without CURVE, get a clear error and the
# coordinator logs the refusal (the unknown key by name); a node leader
# with an unknown key is refused likewise; a non-loopback bind without
# keys is refused at start unless --insecure.
# Every process started here is killed on exit. Prints "N passed, N failed".
bin=${BIN:-build/bin}
tok=tests/data/llama2-small/tokenizer.json
HB=200
. tests/harness.sh
export OMP_NUM_THREADS=1

# --- keygen: a pair per party; the secret is 0600, never overwritten ---
for who in coord client node stranger; do
	"$bin/shardline" keygen --out "$tmp/keys" --name $who >/dev/null || bad "keygen $who"
done
[ "$(stat -c %a "$tmp/keys/client.key")" = 600 ] && [ "$(wc -c <"$tmp/keys/client.pub")" -eq 41 ] &&
	ok || bad "keygen: mode $(stat -c %a "$tmp/keys/client.key"), $(wc -c <"$tmp/keys/client.pub") bytes"
"$bin/shardline" keygen --out "$tmp/keys" --name client >/dev/null 2>"$tmp/kg.err"
[ $? -ne 0 ] && grep -q "never overwrites" "$tmp/kg.err" && ok || bad "keygen overwrote: $(cat "$tmp/kg.err")"
mkdir "$tmp/clients" && cp "$tmp/keys/client.pub" "$tmp/clients/" || bad "key dir"

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 256 --dtype f32 --seed 7 2>/dev/null && ok || bad "mkckpt"

"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --heartbeat-ms $HB \
	--client-bind "tcp://127.0.0.1:*" --node-bind "tcp://127.0.0.1:*" --http-bind none \
	--ports-file "$tmp/ports" --curve-key "$tmp/keys/coord.key" --client-keys "$tmp/clients" \
	--node-keys "$tmp/keys/node.pub" >"$tmp/coord.log" 2>&1 &
pids="$pids $!"
i=0; while [ ! -s "$tmp/ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
CL=$(awk '/^client/{print $2}' "$tmp/ports" 2>/dev/null)
NODE=$(awk '/^node/{print $2}' "$tmp/ports" 2>/dev/null)
[ -n "$CL" ] && grep -q "CURVE on" "$tmp/coord.log" && ok || { bad "coordinator did not start"; logs coord.log; }

cli() { # KEY ARGS...: the CLI as the holder of KEY ("none": no CURVE)
	key=$1; shift
	if [ "$key" = none ]; then
		timeout 30 "$bin/shardline" --coordinator "$CL" --heartbeat-ms $HB --retries 0 "$@"
	else
		timeout 30 "$bin/shardline" --coordinator "$CL" --heartbeat-ms $HB --retries 0 \
			--curve-key "$tmp/keys/$key.key" --server-key "$tmp/keys/coord.pub" "$@"
	fi
}

# --- a node with a listed key registers; one with an unknown key is refused ---
"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny --heartbeat-ms $HB \
	--curve-key "$tmp/keys/node.key" --server-key "$tmp/keys/coord.pub" >"$tmp/node.log" 2>&1 &
pids="$pids $!"
"$bin/shardline-node" --model "$tmp/m" --coordinator "$NODE" --model-name tiny --heartbeat-ms $HB \
	--curve-key "$tmp/keys/stranger.key" --server-key "$tmp/keys/coord.pub" >"$tmp/node2.log" 2>&1 &
pids="$pids $!"
i=0; while ! cli client status 2>/dev/null | grep -q "1 group$" && [ $i -lt 100 ]; do
	sleep 0.2; i=$((i + 1)); done
cli client status >"$tmp/status" 2>&1
grep -q "1 group$" "$tmp/status" && ok || { bad "groups: $(cat "$tmp/status")"; logs coord.log node.log; }
sleep 1
cli client status 2>&1 | grep -q "1 group$" && ok || bad "a node with an unknown key registered"
stranger=$(cat "$tmp/keys/stranger.pub")
grep "refused a nodes connection" "$tmp/coord.log" | grep -qF -e "$stranger" && ok ||
	{ bad "no refusal of the node's key logged"; logs coord.log; }

# --- a client with a listed key is served ---
cli client generate --prompt "Hello" --max-tokens 6 --ignore-eos >"$tmp/gen.out" 2>"$tmp/gen.err" &&
	[ -s "$tmp/gen.out" ] && ok || bad "known key: $(cat "$tmp/gen.err")"

# --- an unknown key, and no CURVE: a clear error, the refusal logged ---
cli stranger generate --prompt "Hello" --max-tokens 6 >"$tmp/s.out" 2>"$tmp/s.err"
rc=$?
echo "curve: unknown client key: exit $rc, $(cat "$tmp/s.err")"
[ $rc -ne 0 ] && grep -q "refused this client's CURVE key" "$tmp/s.err" && ok ||
	bad "unknown key: exit $rc, $(cat "$tmp/s.err")"
grep "refused a clients connection" "$tmp/coord.log" | grep -qF -e "$stranger" && ok ||
	{ bad "no refusal of the client's key logged"; logs coord.log; }
grep "refused a clients connection" "$tmp/coord.log" | head -1 | sed 's/^/curve: coordinator log: /'
cli none generate --prompt "Hello" --max-tokens 6 >"$tmp/n.out" 2>"$tmp/n.err"
rc=$?
echo "curve: client without CURVE: exit $rc, $(cat "$tmp/n.err")"
[ $rc -ne 0 ] && grep -q "coordinator unavailable" "$tmp/n.err" && ok ||
	bad "no CURVE: exit $rc, $(cat "$tmp/n.err")"

# --- without keys: a bind other hosts can reach is refused unless --insecure ---
"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --client-bind "tcp://0.0.0.0:*" \
	--node-bind "tcp://127.0.0.1:*" --http-bind none >"$tmp/open.log" 2>&1 &
p=$!; pids="$pids $p"
i=0; while kill -0 $p 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
wait $p 2>/dev/null; rc=$?
[ $rc -ne 0 ] && grep -q "reachable from other hosts and CURVE is off" "$tmp/open.log" && ok ||
	bad "open bind: exit $rc, $(tail -2 "$tmp/open.log")"
"$bin/shardline-coordinator" --model-name tiny --tokenizer "$tok" --client-bind "tcp://0.0.0.0:*" \
	--node-bind "tcp://127.0.0.1:*" --http-bind none --insecure --ports-file "$tmp/ports2" \
	>"$tmp/insecure.log" 2>&1 &
p=$!; pids="$pids $p"
i=0; while [ ! -s "$tmp/ports2" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -s "$tmp/ports2" ] && grep -q "insecure" "$tmp/insecure.log" && ok || bad "--insecure: $(tail -2 "$tmp/insecure.log")"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
