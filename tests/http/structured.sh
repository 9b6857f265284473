#!/bin/sh
# Structured output (constrained decoding, issue 37) over HTTP on the real
# SmolLM2-135M-Instruct ($SL_SMOLLM2_GGUF, default
# build/models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by `make deps`): a
# coordinator and a one-process CPU node group on loopback, then
# tests/http/structured.py through the official openai package: the 50
# JSON schemas of tests/data/schemas greedy and at temperature 1 (each
# answer parses and validates), json_object, guided_json / guided_regex /
# guided_grammar streamed and not, hostile constraints refused with a 400
# (a grammar too slow to enforce by the node: the same 400);
# then the native client: shardline generate --json-schema/--regex/--grammar,
# and a slow grammar refused there too.
# Every process started here is killed on exit. Prints "N passed, N failed".
bin=${BIN:-build/bin}
py=${PYTHON:-python3}
smol=${SL_SMOLLM2_GGUF:-build/models/SmolLM2-135M-Instruct.Q4_1.gguf}
HARNESS_GRACE=0.3
. tests/harness.sh

if [ ! -f "$smol" ]; then
	bad "SmolLM2 GGUF not found at $smol: run \`make deps\` (tools/fetch-model.sh fetches it)"
	echo "$pass passed, $fail failed"; exit 1
fi
"$py" -c "import openai, jsonschema" 2>/dev/null || bad "python modules openai and jsonschema are needed (make deps installs them)"

# a 135M model's CPU steps on a busy 2-core box can outlast short heartbeats
"$bin/shardline-coordinator" --model-name smol --tokenizer "$smol" --heartbeat-ms 5000 \
	--client-bind 'tcp://127.0.0.1:*' --node-bind 'tcp://127.0.0.1:*' --http-bind 127.0.0.1:0 \
	--ports-file "$tmp/ports" >"$tmp/coord.log" 2>&1 &
pids="$pids $!"
i=0; while [ ! -s "$tmp/ports" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
H=$(awk '/^http/{print $2}' "$tmp/ports" 2>/dev/null)
NODE=$(awk '/^node/{print $2}' "$tmp/ports" 2>/dev/null)
touch "$tmp/gate" # open: the held-compile case below closes it
OMP_NUM_THREADS=2 SL_TEST_HOOKS=1 SL_TEST_COMPILE_GATE="$tmp/gate" \
	"$bin/shardline-node" --model "$smol" --device cpu --coordinator "$NODE" \
	--model-name smol --heartbeat-ms 5000 --max-running 16 >"$tmp/node.log" 2>&1 &
pids="$pids $!"
t_end=$(( $(date +%s) + 120 ))
until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$H/health")" = 200 ] || [ "$(date +%s)" -gt $t_end ]; do
	sleep 0.2
done

out=$(timeout 1200 "$py" tests/http/structured.py "http://$H/v1" smol tests/data/schemas 2>&1); rc=$?
printf '%s\n' "$out" | grep -E '^(FAIL|note)' | head -40
line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
if [ -z "$line" ]; then
	printf '%s\n' "$out" | tail -20
	bad "structured.py: no result (exit $rc)"; logs coord.log node.log
else
	p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
	pass=$((pass + p)); fail=$((fail + f))
fi
# the native client: shardline generate --json-schema / --regex / --grammar
CL=$(awk '/^client/{print $2}' "$tmp/ports" 2>/dev/null)
gen() { timeout 300 "$bin/shardline" --coordinator "$CL" generate --max-tokens 200 --quiet "$@"; }
schema=tests/data/schemas/33_order.json
gen --prompt "An order as JSON:" --temperature 1 --seed 5 --json-schema "$schema" >"$tmp/cli.json" 2>"$tmp/cli.err" &&
	"$py" -c 'import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))' 		"$tmp/cli.json" "$schema" && ok || bad "generate --json-schema: $(cat "$tmp/cli.json" "$tmp/cli.err")"
gen --prompt "Today's date:" --regex ' [0-9]{4}-[0-9]{2}-[0-9]{2}' >"$tmp/cli.txt" 2>"$tmp/cli.err" &&
	grep -qx ' [0-9]\{4\}-[0-9]\{2\}-[0-9]\{2\}' "$tmp/cli.txt" && ok || bad "generate --regex: $(cat "$tmp/cli.txt" "$tmp/cli.err")"
printf 'root ::= "(" [a-c]+ ")"\n' >"$tmp/g.ebnf"
gen --prompt "Letters:" --grammar "$tmp/g.ebnf" >"$tmp/cli.txt" 2>"$tmp/cli.err" &&
	grep -qx '([a-c]*)' "$tmp/cli.txt" && ok || bad "generate --grammar: $(cat "$tmp/cli.txt" "$tmp/cli.err")"
# a constraint still compiling does not hold the running streams: with the
# compile held (the node's test gate closed), a free request completes;
# then the gate opens and the constrained one does too. A compile on the
# leader's loop would hold the free one until the gate opened.
rm -f "$tmp/gate"
gen --prompt "Three letters:" --regex '[a-z]{3}' >"$tmp/held.txt" 2>"$tmp/held.err" &
held=$!
sleep 1 # let the held request reach the node first
if timeout 120 "$bin/shardline" --coordinator "$CL" generate --max-tokens 8 --quiet \
	--prompt "Free:" >"$tmp/free.txt" 2>"$tmp/free.err"; then
	kill -0 "$held" 2>/dev/null && ok || bad "held compile: the constrained request ended before its gate opened: $(cat "$tmp/held.txt" "$tmp/held.err")"
else
	bad "held compile: a free request did not complete while a compile was held: $(cat "$tmp/free.err")"
fi
touch "$tmp/gate"
wait "$held" && grep -qx '[a-z]\{3\}' "$tmp/held.txt" && ok ||
	bad "held compile: the constrained request after the gate opened: $(cat "$tmp/held.txt" "$tmp/held.err")"
printf '{"type": "object", "properties": {"a": {"type": "nope"}}}' >"$tmp/bad.json"
if gen --prompt x --json-schema "$tmp/bad.json" >"$tmp/cli.txt" 2>"$tmp/cli.err"; then
	bad "generate with a bad schema: exit 0"
else
	grep -q 'json schema' "$tmp/cli.err" && ok || bad "generate with a bad schema: $(cat "$tmp/cli.err")"
fi
# a grammar too slow to enforce: the node refuses it (finish "refused",
# its message on stderr, exit 1), and the group serves the next request
if gen --prompt x --grammar bench/data/grammars/json_charstar.ebnf >"$tmp/cli.txt" 2>"$tmp/cli.err"; then
	bad "generate with a slow grammar: exit 0"
else
	grep -q 'refused: grammar too slow to enforce' "$tmp/cli.err" && ok ||
		bad "generate with a slow grammar: $(cat "$tmp/cli.err")"
fi
gen --prompt "Letters:" --grammar "$tmp/g.ebnf" >"$tmp/cli.txt" 2>"$tmp/cli.err" &&
	grep -qx '([a-c]*)' "$tmp/cli.txt" && ok || bad "generate after the slow grammar: $(cat "$tmp/cli.txt" "$tmp/cli.err")"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
