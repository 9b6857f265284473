#!/bin/sh
# The HTTP API's defaults against hostile or careless use (docs/security.md),
# over loopback with one coordinator and no node group:
#   a --http-bind other hosts can reach is refused without --api-key-file
#   unless --insecure is given; POST endpoints want Content-Type:
#   application/json (415 otherwise: no cross-site form or text/plain
#   posts); a stream that fails before its first token gets a real status
#   (503 with no live group, 408 past its deadline), not 200 and an error
#   event; a bounded slowloris of
#   2 x --http-max-connections trickling headers (slowloris.py) leaves at
#   least 99% of normal requests answered, releases the connections when it
#   stops, and a lone trickling connection is closed by the whole-request
#   deadline; `shardline status` and /v1/models agree on a group's context. Every process started here is killed on exit.
#   Prints "N passed, N failed".
bin=${BIN:-build/bin}
py=${PYTHON:-python3}
tok=tests/data/llama2-small/tokenizer.json
MAXCONN=64
DEADLINE=3
. tests/harness.sh

coord() { # LOG FLAGS...: a coordinator on loopback ZeroMQ ports, in the background
	log=$1; shift
	"$bin/shardline-coordinator" --model-name tiny --tokenizer $tok --client-bind 'tcp://127.0.0.1:*' \
		--node-bind 'tcp://127.0.0.1:*' "$@" >"$tmp/$log" 2>&1 &
	last_pid=$!; pids="$pids $last_pid"
}
ports_wait() { i=0; while [ ! -s "$1" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done; }

# --- a bind other hosts reach: an API key, or --insecure said out loud ---
timeout 30 "$bin/shardline-coordinator" --model-name tiny --tokenizer $tok --client-bind 'tcp://127.0.0.1:*' \
	--node-bind 'tcp://127.0.0.1:*' --http-bind 0.0.0.0:0 >"$tmp/open.log" 2>&1
rc=$?
[ $rc -eq 2 ] || [ $rc -eq 1 ] && grep -q -- "--api-key-file" "$tmp/open.log" && ok ||
	bad "0.0.0.0 without a key: want refused naming --api-key-file, exit $rc: $(tail -2 "$tmp/open.log")"
for flags in "--insecure" "--api-key-file $tmp/key"; do
	printf 'sk-%s\n' "$$" >"$tmp/key"
	# shellcheck disable=SC2086 # a flag list
	coord wide.log --http-bind 0.0.0.0:0 --ports-file "$tmp/wide.ports" $flags
	ports_wait "$tmp/wide.ports"
	[ -s "$tmp/wide.ports" ] && kill -0 $last_pid 2>/dev/null && ok || { bad "0.0.0.0 with $flags did not start"; logs wide.log; }
	[ "$flags" = --insecure ] && { grep -q "anyone who reaches http://" "$tmp/wide.log" && ok || bad "--insecure: no warning"; }
	kill -TERM $last_pid; wait $last_pid; rm -f "$tmp/wide.ports"
done

# --- the coordinator the rest talks to ---
coord c.log --http-bind 127.0.0.1:0 --ports-file "$tmp/ports" --http-max-connections $MAXCONN \
	--http-idle-timeout-s 5 --http-body-timeout-s $DEADLINE --admission-timeout-ms 300
ports_wait "$tmp/ports"
main_pid=$last_pid
H=$(awk '/^http/{print $2}' "$tmp/ports" 2>/dev/null)
[ -n "$H" ] && ok || { bad "coordinator did not start"; logs c.log; }
code() { curl -s -o "$tmp/body" -w '%{http_code}' "$@"; }

# --- JSON bodies only ---
body='{"prompt":"x","max_tokens":-1}'
[ "$(code "http://$H/v1/completions" -d "$body")" = 415 ] && grep -q unsupported_media_type "$tmp/body" && ok ||
	bad "a form post (curl -d): want 415, got $(cat "$tmp/body")"
[ "$(code "http://$H/v1/chat/completions" -H 'Content-Type: text/plain' -d "$body")" = 415 ] && ok || bad "text/plain: want 415"
[ "$(code "http://$H/v1/completions" -H 'Content-Type:' -d "$body")" = 415 ] && ok || bad "no Content-Type: want 415"
[ "$(code "http://$H/v1/completions" -H 'Content-Type: application/jsonx' -d "$body")" = 415 ] && ok ||
	bad "application/jsonx: want 415"
[ "$(code "http://$H/v1/completions" -H 'Content-Type: Application/JSON; charset=utf-8' -d "$body")" = 400 ] &&
	ok || bad "application/json with a charset: want the body read (400 for max_tokens), got $(cat "$tmp/body")"
[ "$(code "http://$H/v1/models")" = 200 ] && ok || bad "GET needs no Content-Type"

# --- a stream that fails before its first token: a real status ---
c=$(code -D "$tmp/hdr" "http://$H/v1/completions" -H 'Content-Type: application/json' \
	-d '{"model":"tiny","prompt":"x","max_tokens":2,"stream":true}')
[ "$c" = 503 ] && grep -qi '^content-type: application/json' "$tmp/hdr" && grep -q '"error"' "$tmp/body" && ok ||
	bad "stream with no live group: want 503 JSON, got $c $(head -c 300 "$tmp/body")"
grep -qi '^retry-after: 1' "$tmp/hdr" && ! grep -q '^data:' "$tmp/body" &&
	grep -q 'no live node group serves model tiny' "$tmp/body" && ok ||
	bad "stream 503: want Retry-After, no events and the reason: $(cat "$tmp/hdr" "$tmp/body" | head -c 400)"
# its deadline before the first token (no group, a long admission wait): 408
coord dl.log --http-bind 127.0.0.1:0 --ports-file "$tmp/dl.ports" --request-timeout-ms 800 \
	--admission-timeout-ms 60000
ports_wait "$tmp/dl.ports"
c=$(code -D "$tmp/hdr" "http://$(awk '/^http/{print $2}' "$tmp/dl.ports")/v1/completions" \
	-H 'Content-Type: application/json' -d '{"model":"tiny","prompt":"x","max_tokens":2,"stream":true}')
[ "$c" = 408 ] && grep -qi '^content-type: application/json' "$tmp/hdr" && grep -q '"type":"timeout"' "$tmp/body" &&
	! grep -q '^data:' "$tmp/body" && ok ||
	bad "stream past its deadline before a token: want 408 JSON, got $c $(head -c 300 "$tmp/body")"
kill -TERM $last_pid; wait $last_pid

# --- `shardline status` and /v1/models give one context for a group whose KV
# cache (8 blocks x 16 tokens = 128) is shorter than its positions (256) ---
"$bin/shardline-mkckpt" --out "$tmp/m" --dim 64 --hidden 172 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 2000 --max-pos 256 --dtype f32 --seed 7 2>/dev/null && ok || bad "mkckpt"
OMP_NUM_THREADS=1 "$bin/shardline-node" --model "$tmp/m" --coordinator "$(awk '/^node/{print $2}' "$tmp/ports")" \
	--model-name tiny --kv-blocks 8 --block-tokens 16 >"$tmp/n.log" 2>&1 &
node_pid=$!; pids="$pids $node_pid"
i=0; until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$H/health")" = 200 ] || [ $i -gt 600 ]; do
	sleep 0.1; i=$((i + 1)); done
models=$(curl -s "http://$H/v1/models" | sed -n 's/.*"max_model_len":\([0-9]*\).*/\1/p')
status=$("$bin/shardline" --coordinator "$(awk '/^client/{print $2}' "$tmp/ports")" status |
	awk '$1 ~ /^[0-9]+$/ {print $11}') # id name model T x P run wait asg kv CONTEXT
[ -n "$models" ] && [ "$models" = "$status" ] && [ "$models" = 128 ] && ok ||
	{ bad "context: /v1/models says '$models', shardline status '$status', want 128 both"; logs n.log; }
kill -KILL $node_pid 2>/dev/null

# --- a slowloris above the connection limit ---
out=$(timeout 300 "$py" tests/http/slowloris.py "$H" $MAXCONN $DEADLINE 2>&1); rc=$?
printf '%s\n' "$out" | grep -E '^(FAIL|slowloris)' | head -20
line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
if [ -z "$line" ]; then
	printf '%s\n' "$out" | tail -20; bad "slowloris.py: no result (exit $rc)"; logs c.log
else
	p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
	pass=$((pass + p)); fail=$((fail + f))
fi
kill -0 "$main_pid" 2>/dev/null && ok || { bad "the coordinator died"; logs c.log; }

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
