#!/bin/sh
# bench/serve.sh on the CPU (tiny random model, one group, continuous
# batching, native and HTTP runs of each case) checks that serving numbers
# are not prefix-cache hits (issue 38): every case reports the prompt
# tokens its group's prefix cache served, and
#   - cases of unique prompts (the default) reuse none, though fixed-a and
#     fixed-b have one shape and one seed and each HTTP run follows its
#     native twin (before unique prompts each such run re-sent the prompts
#     of the one before: 3 of each prompt's 4 blocks came from the cache);
#   - a prefix case (--shared-prefix 48: 3 blocks of 16) reuses the shared
#     blocks of every request after the first wave, and nothing past them;
#   - the old prompts (REUSE seeded) are still there: the second seeded
#     case reuses the first's blocks;
#   - bench/plot_serve.py's table has the reuse of each run;
#   - serve.sh refuses a case that asks for reuse under a plain name.
# A few seconds. Prints "N passed, N failed". KEEP=DIR keeps the results.
bin=${BIN:-build/bin}
. tests/harness.sh
export OMP_NUM_THREADS=1

out=$tmp/out
STREAMS=4 REQUESTS=12 PLEN=64 SHARED=48
shape="fixed:$STREAMS:$PLEN:4:$REQUESTS"
# NODE_FLAGS: the node's default, named in the report's model
BIN=$bin DEVICE=cpu CKPT_DIR="$tmp/m" BATCHING=continuous NODE_FLAGS="--min-step-ms 0" \
	CASES="fixed-a:$shape fixed-b:$shape prefix-s4:$shape:$SHARED reuse-seeded-a:$shape:seeded reuse-seeded-b:$shape:seeded" \
	sh bench/serve.sh "$out" >"$tmp/serve.log" 2>&1 && ok ||
	{ bad "bench/serve.sh failed"; tail -20 "$tmp/serve.log"; }
grep -q '"model":.*node flags: --min-step-ms 0' "$out/tp1-continuous-fixed-a.json" && ok ||
	bad "the run's model does not name the node flags it ran with"

# RUN: "hit queried prompt_tokens enabled prompts shared_prefix" from its JSON
stats() {
	python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
pc = j.get("prefix_cache", {})
print(pc.get("hit_tokens", -1), pc.get("queried_tokens", -1), j["prompt_tokens"],
      int(pc.get("enabled", False)), j.get("prompts", "-"), j.get("shared_prefix", -1))' \
		"$out/tp1-continuous-$1.json" 2>/dev/null
}

for run in fixed-a fixed-a-http fixed-b fixed-b-http; do
	set -- $(stats $run)
	echo "bench_serve: $run: $1 of $2 prompt tokens reused ($3 sent, prompts $5)"
	[ $# -eq 6 ] && [ "$4" = 1 ] && [ "$5" = unique ] && [ "$2" -eq "$3" ] && [ "$3" -gt 0 ] && ok ||
		bad "$run: no prefix-cache counts for its $3 prompt tokens, or prompts not unique ($*)"
	[ $# -eq 6 ] && [ "$1" -eq 0 ] && ok || bad "$run: unique prompts, yet $1 tokens came from the cache"
	grep -q '^prefix cache  *0 of [1-9][0-9]* prompt tokens reused (0.0%)' "$out/tp1-continuous-$run.txt" &&
		ok || bad "$run: the printed table does not say 0 tokens were reused"
done

# the shared blocks, from every request that started after the first ones
# published them (closed loop: all but the first wave), and never more
blocks=$((SHARED / 16 * 16))
for run in prefix-s4 prefix-s4-http; do
	set -- $(stats $run)
	echo "bench_serve: $run: $1 of $2 prompt tokens reused (shared prefix $6)"
	[ $# -eq 6 ] && [ "$6" -eq $SHARED ] && [ "$1" -ge $(((REQUESTS - STREAMS) * blocks)) ] &&
		[ "$1" -le $((REQUESTS * blocks)) ] && ok ||
		bad "$run: $1 tokens reused, not the shared $blocks of each request after the first $STREAMS ($*)"
done

set -- $(stats reuse-seeded-b)
echo "bench_serve: reuse-seeded-b: $1 of $2 prompt tokens reused (prompts $5)"
[ $# -eq 6 ] && [ "$5" = seeded ] && [ "$1" -gt 0 ] && ok ||
	bad "reuse-seeded-b: the old prompts should repeat reuse-seeded-a's and hit the cache ($*)"

if python3 -c 'import matplotlib' 2>/dev/null; then
	python3 bench/plot_serve.py "$out" >"$tmp/plot.log" 2>&1 || bad "plot_serve.py failed: $(tail -3 "$tmp/plot.log")"
	grep -q '| prefix cache reused |' "$out/serve.md" &&
		grep -Eq '\| continuous \| fixed-a \|.*\| unique \| 0\.0% \|' "$out/serve.md" &&
		grep -Eq '\| continuous \| prefix-s4 \|.*\| unique, 48 shared \| [1-9][0-9.]*% \|' "$out/serve.md" && ok ||
		{ bad "plot_serve.py's table lacks the prompts or their reuse"; head -6 "$out/serve.md"; }
else
	echo "bench_serve: no matplotlib: plot_serve.py not checked"
fi

# reuse under a plain name: refused before anything starts
BIN=$bin DEVICE=cpu CKPT_DIR="$tmp/m" BATCHING=continuous CASES="fixed-x:$shape:$SHARED" \
	sh bench/serve.sh "$tmp/refused" >"$tmp/refused.log" 2>&1 &&
	bad "serve.sh ran a case reusing prompts under a plain name" ||
	{ grep -q 'name it' "$tmp/refused.log" && ok || bad "serve.sh failed without saying why: $(tail -2 "$tmp/refused.log")"; }

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
