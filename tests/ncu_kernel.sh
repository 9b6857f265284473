#!/bin/sh
# bench/ncu_kernel.py on a trimmed Nsight Compute export of the decode
# attention kernel (tests/data/ncu: the details page and 20 SASS lines of
# bench/results/2026-11-29-nvidia-h200-decode-attn-loader/ncu-before/):
# kernel.md names the kernel, carries the throughput and occupancy rows,
# sums the stall reasons and the instruction mix over the SASS lines and
# lists the hottest instruction first with its main reason; a folder
# without the exports is refused. No GPU. Prints "N passed, N failed".
. tests/harness.sh

cp tests/data/ncu/details.csv tests/data/ncu/sass.csv.gz "$tmp/"
python3 bench/ncu_kernel.py "$tmp" > "$tmp/out.txt" 2>&1 && ok ||
	{ bad "ncu_kernel.py failed"; cat "$tmp/out.txt"; }
md=$tmp/kernel.md
grep -q '^`void <unnamed>::attn_decode_kernel<128, __half, 2>(attn_args)`$' "$md" && ok ||
	bad "kernel.md does not name the kernel"
grep -q '^| GPU Speed Of Light Throughput | Duration | 138.08 us |$' "$md" &&
	grep -q '^| Occupancy | Achieved Occupancy | 23.26 % |$' "$md" && ok ||
	bad "kernel.md lacks the duration or the occupancy"
grep -q '^## Stall reasons (all samples: 2586)$' "$md" && grep -q '^| long_sb | 50.1% |$' "$md" && ok ||
	bad "stall reasons not summed over the SASS lines"
grep -q '^## Instruction mix (1257216 warp instructions)$' "$md" && ok || bad "instruction mix total"
# the hottest line, its predicate dropped from the opcode but kept in the text
sed -n '/^## Instructions with the most/,$p' "$md" | sed -n 5p |
	grep -q '^| 533 | 20.6% | `SHF.R.S32.HI R14, RZ, 0x1f, R11` | long_sb 503 |$' && ok ||
	{ bad "hottest instruction row"; sed -n '/^## Instructions with the most/,$p' "$md" | head -6; }
grep -q '^| BRA | ' "$md" && ok || bad "a predicated branch (@P0 BRA) not counted as BRA"

mkdir "$tmp/empty"
python3 bench/ncu_kernel.py "$tmp/empty" > "$tmp/empty.txt" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "details.csv is missing" "$tmp/empty.txt" && ok ||
	bad "a folder without exports: exit $rc, $(cat "$tmp/empty.txt")"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
