#!/bin/sh
# bench/ab_decode.sh and bench/plot_ab.py on the CPU, with two stand-ins
# for shardline-bench-decode (shell scripts that write its JSON: "before"
# decodes at 100 tokens/s a batch unit, "after" at 110): every case runs
# REPS times on each side, the side that goes first alternates between
# repetitions (the stand-ins read stdin, as mpirun does, and must not eat
# the cases), each binary gets the case's arguments and --out, the table
# has every run and the change of the means (+10.0%), and bad usage or a
# failing run is reported, ENV_BEFORE / ENV_AFTER reach each side's
# runs, and cases with --tp / --pp go through MPIRUN -np tp x pp (a stand-in
# launcher). A second. Prints "N passed, N failed".
. tests/harness.sh

# fake NAME TPS: a stand-in that records its arguments and writes a JSON
# with TPS x batch tokens/s for each batch of --batches (batch 1: 50% of
# copy bandwidth); FAIL_CASE in its environment makes that case's run fail
fake() {
	cat > "$tmp/$1" <<EOF
#!/bin/sh
out=""; batches=1; prev=""
for a in "\$@"; do
	[ "\$prev" = --out ] && out=\$a
	[ "\$prev" = --batches ] && batches=\$a
	prev=\$a
done
echo "$1 \$*" >> "$tmp/calls.txt"
[ -n "\${AB_KNOB:-}" ] && echo "$1 \$(basename "\$out") AB_KNOB=\$AB_KNOB" >> "$tmp/env.txt"
read -r _ || true  # as mpirun would: a binary that reads stdin must not eat the cases
case "\$out" in *"\${FAIL_CASE:-none}-$1-"*) echo "boom" >&2; exit 1 ;; esac
by=""; for b in \$(echo "\$batches" | tr ',' ' '); do
	by="\$by\${by:+, }\"\$b\": \$(($2 * b))"
	echo "batch \$b: \$(($2 * b)).0 decode tokens/s"
done
printf '{"device": "Fake GPU", "copy_bandwidth_GBps": 1000, "shape": "7b", "dtype": "F16",
 "quant": "none", "kv_dtype": "F16", "prompt_tokens": 128, "new_tokens": 8,
 "ratio_to_copy_bandwidth_with_kv": 0.5, "prefill_tokens_per_s": 0,
 "decode_tokens_per_s_by_batch": {%s}}\n' "\$by" > "\$out"
EOF
	chmod +x "$tmp/$1"
}
fake before 100
fake after 110

out=$tmp/ab
CASES="a=--batches 1,64 --prompt 128;b=--batches 8" REPS=2 \
	sh bench/ab_decode.sh "$tmp/before" "$tmp/after" "$out" > "$tmp/ab.log" 2>&1 && ok ||
	{ bad "ab_decode.sh failed"; tail -20 "$tmp/ab.log"; }
n=$(ls "$out"/*.json 2>/dev/null | wc -l)
[ "$n" -eq 8 ] && ok || bad "8 runs expected (2 cases x 2 sides x 2), found $n"
order=$(tr '\n' ' ' < "$out/order.txt")
[ "$order" = "a-before-1 a-after-1 b-before-1 b-after-1 a-after-2 a-before-2 b-after-2 b-before-2 " ] &&
	ok || bad "run order: $order"
grep -q "^before --batches 1,64 --prompt 128 --out $out/a-before-1.json$" "$tmp/calls.txt" && ok ||
	bad "the binary did not get the case's arguments and --out: $(head -1 "$tmp/calls.txt")"
grep -q '^| a | 7b, F16, KV F16 | 128 + 8 | decode, batch 64 | 6400.0 / 6400.0 | 7040.0 / 7040.0 | +10.0% |' \
	"$out/ab.md" && ok || { bad "ab.md's batch-64 row"; cat "$out/ab.md"; }
grep -q '^| a | .* | decode, batch 1 | 100.0 / 100.0 | 110.0 / 110.0 | +10.0% | 50.0% -> 50.0% |$' \
	"$out/ab.md" && ok || bad "ab.md's batch-1 row has no share of copy bandwidth"
grep -q '^| b | .* | decode, batch 8 | 800.0 / 800.0 | 880.0 / 880.0 | +10.0% |' "$out/ab.md" && ok ||
	bad "ab.md's second case"
grep -q 'Device: Fake GPU; copy bandwidth 1000-1000 GB/s over the 8 runs' "$out/ab.md" && ok ||
	bad "ab.md does not name the device and its copy bandwidth"

# a failing run: named, the rest still run, exit 1
FAIL_CASE=b CASES="a=--batches 1;b=--batches 1" REPS=1 \
	sh bench/ab_decode.sh "$tmp/before" "$tmp/after" "$tmp/ab2" > "$tmp/ab2.log" 2>&1
rc=$?
[ $rc -eq 1 ] && ok || bad "a failing run: exit $rc, want 1"
grep -q "b-before-1 failed" "$tmp/ab2.log" && grep -q boom "$tmp/ab2.log" && ok ||
	bad "the failing run and its log's tail are not named"
[ -s "$tmp/ab2/a-after-1.json" ] && grep -q '^| a |' "$tmp/ab2/ab.md" && ok ||
	bad "the other case's runs and table are missing"

# ENV_BEFORE / ENV_AFTER: one binary, two settings, each side's runs in its own
rm -f "$tmp/env.txt"
ENV_BEFORE="AB_KNOB=0" ENV_AFTER="AB_KNOB=4096 OTHER=1" CASES="a=--batches 1" REPS=2 \
	sh bench/ab_decode.sh "$tmp/before" "$tmp/before" "$tmp/ab4" > "$tmp/ab4.log" 2>&1 && ok ||
	{ bad "ab_decode.sh with ENV_BEFORE/ENV_AFTER failed"; tail -5 "$tmp/ab4.log"; }
envs=$(sort "$tmp/env.txt" 2>/dev/null | tr '\n' ' ')
[ "$envs" = "before a-after-1.json AB_KNOB=4096 before a-after-2.json AB_KNOB=4096 before a-before-1.json AB_KNOB=0 before a-before-2.json AB_KNOB=0 " ] &&
	ok || bad "each side's environment: $envs"
grep -q "^after: AB_KNOB=4096 OTHER=1 $tmp/before$" "$tmp/ab4/sides.txt" && ok ||
	bad "sides.txt does not say what each side set"

# cases with --tp / --pp run under MPIRUN -np tp x pp, the others as they are
cat > "$tmp/mpirun" <<EOF
#!/bin/sh
echo "mpirun \$*" >> "$tmp/mpi.txt"
[ "\$1" = -np ] || exit 9
shift 2
exec "\$@"
EOF
chmod +x "$tmp/mpirun"
MPIRUN="$tmp/mpirun" CASES="one=--batches 1;tp=--batches 1 --tp 2;grid=--tp 2 --pp 2 --batches 1;pp=--pp 3" \
	REPS=1 sh bench/ab_decode.sh "$tmp/before" "$tmp/after" "$tmp/ab5" > "$tmp/ab5.log" 2>&1 && ok ||
	{ bad "ab_decode.sh with tp / pp cases failed"; tail -5 "$tmp/ab5.log"; }
for want in "-np 2 $tmp/before --batches 1 --tp 2 --out $tmp/ab5/tp-before-1.json" \
	"-np 4 $tmp/after --tp 2 --pp 2 --batches 1 --out $tmp/ab5/grid-after-1.json" \
	"-np 3 $tmp/before --pp 3 --out $tmp/ab5/pp-before-1.json"; do
	grep -qx -- "mpirun $want" "$tmp/mpi.txt" && ok || bad "no launch 'mpirun $want'"
done
[ "$(wc -l < "$tmp/mpi.txt")" -eq 6 ] && ! grep -q "one-" "$tmp/mpi.txt" && ok ||
	bad "only the 3 tp / pp cases (6 runs) go through mpirun: $(cat "$tmp/mpi.txt")"
[ -s "$tmp/ab5/one-after-1.json" ] && [ -s "$tmp/ab5/grid-before-1.json" ] && ok ||
	bad "the runs' JSON is missing"

# bad usage: exit 2 and a message that says what is wrong
usage() { # EXPECTED_TEXT CASES BEFORE
	CASES="$2" REPS=1 sh bench/ab_decode.sh "$3" "$tmp/after" "$tmp/ab3" > "$tmp/u.log" 2>&1
	rc=$?
	[ $rc -eq 2 ] && grep -q "$1" "$tmp/u.log" && ok || { bad "usage ($1): exit $rc"; cat "$tmp/u.log"; }
}
usage "is not an executable" "a=--batches 1" "$tmp/nothing"
usage "is not NAME=ARGUMENTS" "a=--batches 1;--batches 8" "$tmp/before"
usage "is not NAME=ARGUMENTS" "a b=--batches 1" "$tmp/before"
usage "named twice" "a=--batches 1;a=--batches 8" "$tmp/before"
ENV_AFTER="notaword" usage "is not NAME=VALUE" "a=--batches 1" "$tmp/before"
usage "CASES is empty" " ; " "$tmp/before"
[ ! -e "$tmp/ab3" ] && ok || bad "bad usage still wrote $tmp/ab3"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
