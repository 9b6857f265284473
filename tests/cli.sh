#!/bin/sh
# End-to-end checks of the binaries as a user runs them: a random
# checkpoint from shardline-mkckpt, shardline-node's output format,
# reproducible sampling, batching, and clear errors on bad input.
# Prints "N passed, N failed".
bin=${BIN:-build/bin}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect_err() { # expect_err "what" "stderr pattern" cmd...
	what=$1; pat=$2; shift 2
	if "$@" >"$tmp/out" 2>"$tmp/err"; then bad "$what: exit 0"; return; fi
	grep -q -- "$pat" "$tmp/err" && ok || bad "$what: stderr lacks '$pat': $(cat "$tmp/err")"
}

"$bin/shardline-mkckpt" --out "$tmp/m" --dim 48 --hidden 96 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 200 --dtype bf16 --seed 3 2>/dev/null && ok || bad "mkckpt"
node="$bin/shardline-node --model $tmp/m"

$node --prompt-ids 5,6,7 --max-tokens 12 --ignore-eos >"$tmp/a" 2>"$tmp/log" || bad "greedy run"
[ "$(wc -w <"$tmp/a")" -eq 12 ] && [ "$(wc -l <"$tmp/a")" -eq 1 ] && ok || bad "12 ids on one line: $(cat "$tmp/a")"
grep -q '^[0-9][0-9 ]*$' "$tmp/a" && ok || bad "ids only on stdout"
grep -q 'decode:.*ms/token' "$tmp/log" && ok || bad "timing on stderr"

$node --prompt-ids 5,6,7 --max-tokens 12 --temperature 0.9 --top-p 0.9 --seed 11 --ignore-eos >"$tmp/s1" 2>/dev/null
$node --prompt-ids 5,6,7 --max-tokens 12 --temperature 0.9 --top-p 0.9 --seed 11 --ignore-eos >"$tmp/s2" 2>/dev/null
$node --prompt-ids 5,6,7 --max-tokens 12 --temperature 0.9 --top-p 0.9 --seed 12 --ignore-eos >"$tmp/s3" 2>/dev/null
cmp -s "$tmp/s1" "$tmp/s2" && ok || bad "same seed, different tokens"
cmp -s "$tmp/s1" "$tmp/s3" && bad "seeds 11 and 12 gave identical samples" || ok

# batching: each line equals the prompt run alone
$node --prompt-ids 9,8 --max-tokens 10 --ignore-eos >"$tmp/b1" 2>/dev/null
$node --prompt-ids 5,6,7 --prompt-ids 9,8 --max-tokens 12 --ignore-eos --max-step-tokens 3 >"$tmp/b" 2>/dev/null
[ "$(sed -n 1p "$tmp/b")" = "$(cat "$tmp/a")" ] && ok || bad "batched line 1 differs from alone"
[ "$(sed -n 2p "$tmp/b" | cut -d' ' -f1-10)" = "$(cat "$tmp/b1")" ] && ok || bad "batched line 2 differs from alone"

# the LM head: auto is int8 with every --quant format (none keeps the run
# dtype); an int8 head logs its format (dim 48: one scale per row) and
# runs with any --quant
$node --prompt-ids 5,6,7 --max-tokens 8 --ignore-eos --quant int4 >"$tmp/q1" 2>"$tmp/qlog" || bad "int4 run"
$node --prompt-ids 5,6,7 --max-tokens 8 --ignore-eos --quant int4 --quant-lm-head int8 >"$tmp/q2" 2>/dev/null
$node --prompt-ids 5,6,7 --max-tokens 8 --ignore-eos --quant none --quant-lm-head int8 >"$tmp/q3" 2>"$tmp/q3log"
cmp -s "$tmp/q1" "$tmp/q2" && [ -s "$tmp/q1" ] && ok || bad "int4: auto and --quant-lm-head int8 differ"
grep -q 'lm_head: int8, one scale per row' "$tmp/qlog" && ok || bad "int4's LM head format not logged"
[ "$(wc -w <"$tmp/q3")" -eq 8 ] && grep -q 'lm_head: int8' "$tmp/q3log" && ok ||
	bad "--quant none --quant-lm-head int8: $(tail -2 "$tmp/q3log")"
$node --prompt-ids 5,6,7 --max-tokens 8 --ignore-eos --quant fp8 >/dev/null 2>"$tmp/q4log" || bad "fp8 run"
$node --prompt-ids 5,6,7 --max-tokens 8 --ignore-eos --quant fp8 --quant-lm-head none >/dev/null \
	2>"$tmp/q5log" || bad "fp8 run, --quant-lm-head none"
grep -q 'lm_head: int8' "$tmp/q4log" && ok || bad "fp8's auto LM head is not int8"
grep -q 'lm_head: int8' "$tmp/q5log" && bad "--quant-lm-head none gave an int8 head" || ok

expect_err "missing model dir" "$tmp/none: No such file" $bin/shardline-node --model "$tmp/none" --prompt-ids 1
mkdir "$tmp/empty"
expect_err "model dir without config.json" "empty/config.json" $bin/shardline-node --model "$tmp/empty" --prompt-ids 1
expect_err "token outside vocab" "token ids in \[0, 199\]" $node --prompt-ids 1,200
expect_err "bad number" "--max-tokens" $node --prompt-ids 1 --max-tokens 12x
expect_err "top-p out of range" "--top-p" $node --prompt-ids 1 --top-p 1.5
expect_err "no prompt" "required" $node
expect_err "context overflow" "exceeds the context" $node --prompt-ids 1 --max-tokens 5000
expect_err "unknown flag" "unknown option" $node --prompt-ids 1 --bogus
expect_err "int4 group 16" "is not auto, row, 32, 64 or 128" $node --prompt-ids 1 --quant int4 --quant-group 16
expect_err "int4 per row" "group row: int4 takes 32, 64 or 128" $node --prompt-ids 1 --quant int4 --quant-group row
expect_err "fp8 with a group" "only int8 and int4 have groups" $node --prompt-ids 1 --quant fp8 --quant-group 32
expect_err "LM head int4" "--quant-lm-head: 'int4' is not auto" $node --prompt-ids 1 --quant int4 --quant-lm-head int4
echo '{"hidden_size": "64"}' >"$tmp/m/config.json"
expect_err "bad config" "hidden_size" $node --prompt-ids 1
expect_err "mkckpt bad dims" "head_dim" $bin/shardline-mkckpt --out "$tmp/x" --dim 10 --heads 4

# --version: every program, one string, exit 0
want=$("$bin/shardline" --version) && ok || bad "shardline --version exit"
case "$want" in "shardline "[0-9]*) ok ;; *) bad "shardline --version: '$want'" ;; esac
for p in "$bin"/shardline-*; do
	n=${p##*/}; got=$("$p" --version 2>&1); rc=$?
	[ $rc -eq 0 ] && [ "$got" = "$n ${want#shardline }" ] && ok || bad "$n --version (exit $rc): '$got', want '$n ${want#shardline }'"
done

# log lines: date and time to the millisecond, role, rank (a fresh checkpoint:
# the one above was broken on purpose)
"$bin/shardline-mkckpt" --out "$tmp/m2" --dim 48 --hidden 96 --layers 2 --heads 4 --kv-heads 2 \
	--vocab 200 --dtype f32 --seed 3 2>/dev/null && ok || bad "mkckpt m2"
node="$bin/shardline-node --model $tmp/m2"
$node --prompt-ids 5 --max-tokens 1 >/dev/null 2>"$tmp/log1"
grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} node r0/1 [a-z]+: ' "$tmp/log1" && ok ||
	bad "log line format: $(head -1 "$tmp/log1")"

# a missing model file is named itself, not as FILE/config.json
expect_err "missing GGUF" "$tmp/none.gguf: No such file" $bin/shardline-node --model "$tmp/none.gguf" --prompt-ids 1
grep -q "none.gguf/config.json" "$tmp/err" && bad "missing GGUF reported as .../config.json" || ok

# a coordinator that never answers: the node says it is still waiting, with backoff
timeout 4 $node --coordinator tcp://127.0.0.1:9 --model-name m --heartbeat-ms 50 >/dev/null 2>"$tmp/wait"
n=$(grep -c 'still waiting for the coordinator at tcp://127.0.0.1:9' "$tmp/wait")
[ "$n" -ge 2 ] && ok || bad "node waiting for a silent coordinator logged $n 'still waiting' lines: $(tail -3 "$tmp/wait")"
# backoff: the gaps double (0.25 s, 0.5 s, 1 s, 2 s ...), so in 4 s at most ~5 lines, never one per heartbeat
[ "$n" -le 8 ] && ok || bad "still-waiting lines do not back off: $n in 4 s"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
