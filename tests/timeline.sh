#!/bin/sh
# bench/timeline.py on the CPU: a made-up timeline of four steps (three
# kernels each, two blocks a kernel, times chosen so every column has a
# known value) and a source tree whose kernels call kern_pdl_start and
# kern_pdl_wait on known lines. Checks the step split, the choice of the
# complete steps (the first has a block missing: a wrapped ring), each
# column, the names from the sources, the one-step CSV, steps back to back
# split at the embedding kernel, and a file with no
# complete step refused. Prints "N passed, N failed".
. tests/harness.sh

src=$tmp/src
mkdir -p "$src/kernels" "$src/parallel"
# gemv_like waits on line 4 and launches the next on line 6; small_one's
# kern_pdl_start is on line 10; ar_like's on line 3 of parallel/ar.cu
printf '%s\n' '__global__ void __launch_bounds__(128)' '	gemv_like(float *o)' '{' \
	'	kern_pdl_wait();' '	/* loop */' '	kern_pdl_launch_next();' '}' '' \
	'__global__ void small_one(float *o) {' '	kern_pdl_start();' '}' > "$src/kernels/k.cu"
printf '%s\n' '' '__global__ void ar_like(float *o) {' '	kern_pdl_start();' '}' > "$src/parallel/ar.cu"

# step s starts at 1000 us * s; in it (times in us from the start):
#   gemv (line 4, 2 blocks of 128): arrive 0 / 1, go 2, launch-next 10 / 14
#   small (line 10, grid 1 x 2 of 64): arrive 12, go 16 / 17, next 16 / 17
#   ar (line 3, grid 2 of 32): arrive 18, go 20, next 20; last record 23
python3 - "$tmp/tl.csv" <<'PY'
import sys
rows = ["kind,grid,block,smid,line,grid_x,grid_y,threads,t_arrive_ns,t_go_ns"]
g = 100
for s in range(4):
    base = 1_000_000 * s
    t = lambda u: base + int(u * 1000)
    for b, arr, nx in ((0, 0, 10), (1, 1, 14)):
        if s == 0 and b == 1:
            continue  # the ring lost it
        rows.append(f"wait,{g},{b},0,4,2,1,128,{t(arr)},{t(2)}")
        rows.append(f"next,{g},{b},0,6,2,1,128,{t(nx)},{t(nx)}")
    for b, go in ((0, 16), (1, 17)):
        rows.append(f"wait,{g + 1},{b},1,10,1,2,64,{t(12)},{t(go)}")
        rows.append(f"next,{g + 1},{b},1,10,1,2,64,{t(go)},{t(go)}")
    for b, go in ((0, 20), (1, 23)):
        rows.append(f"wait,{g + 2},{b},2,3,2,1,32,{t(18)},{t(go)}")
        rows.append(f"next,{g + 2},{b},2,3,2,1,32,{t(20)},{t(20)}")
    g += 3
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY

python3 bench/timeline.py --src "$src" --steps 2 --md "$tmp/tl.md" --csv-out "$tmp/step.csv" \
	"$tmp/tl.csv" > "$tmp/out.txt" 2>&1 && ok || { bad "timeline.py failed"; cat "$tmp/out.txt"; }
grep -q "^12 kernels in 4 steps; 2 steps of 3 kernels taken; a step 21.0 us" "$tmp/tl.md" && ok ||
	{ bad "step split or length"; head -4 "$tmp/tl.md"; }
grep -q '^| kernels/k.cu:4 gemv_like | 2x1 x 128 | 1 | 14.0 | 2.0 | 8.0 | 12.0 | 2.0 | 66.7% |$' \
	"$tmp/tl.md" && ok || { bad "the GEMV's row"; cat "$tmp/tl.md"; }
grep -q '^| kernels/k.cu:10 small_one | 1x2 x 64 | 1 | 4.0 | 4.0 | 0.0 | 1.0 | 3.0 | 19.0% |$' \
	"$tmp/tl.md" && ok || bad "the small kernel's row"
grep -q '^| parallel/ar.cu:3 ar_like | 2x1 x 32 | 1 | 3.0 | 2.0 | 0.0 | 0.0 |  | 14.3% |$' \
	"$tmp/tl.md" && ok || bad "the last kernel's row (its span to its last record, no release)"
grep -q '^| 1 | kernels/k.cu:10 small_one | 1x2 | 14.0 | 4.0 |' "$tmp/tl.md" && ok ||
	bad "the last step's kernel list"
n=$(grep -c '^wait' "$tmp/step.csv"); [ "$n" -eq 6 ] && ok || bad "one step's CSV: $n wait rows"
grep -q '^wait,109,0,4,2,1,128,-2000,0$' "$tmp/step.csv" && ok ||
	bad "the step CSV is not the last step, relative to its first release"

# steps back to back (no gap): split before each embedding kernel
printf '%s\n' '__global__ void embed(float *o) {' '	kern_pdl_start();' '}' > "$src/kernels/embedding.cu"
python3 - "$tmp/b2b.csv" <<'PY'
import sys
rows = ["kind,grid,block,smid,line,grid_x,grid_y,threads,t_arrive_ns,t_go_ns"]
for s in range(3):
    t = 40_000 * s  # embedding at +0 us, the GEMV released at +5, done at +38
    rows += [f"wait,{10 * s},0,0,2,1,1,32,{t},{t + 1000}", f"next,{10 * s},0,0,2,1,1,32,{t + 1000},{t + 1000}",
             f"wait,{10 * s + 1},0,0,4,1,1,128,{t + 2000},{t + 5000}",
             f"next,{10 * s + 1},0,0,6,1,1,128,{t + 38000},{t + 38000}"]
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY
python3 bench/timeline.py --src "$src" --md "$tmp/b2b.md" "$tmp/b2b.csv" > /dev/null 2>&1 && ok ||
	bad "timeline.py failed on steps back to back"
grep -q "^6 kernels in 3 steps; 2 steps of 2 kernels taken; a step 37.0 us" "$tmp/b2b.md" && ok ||
	{ bad "steps back to back are not split at the embedding"; head -3 "$tmp/b2b.md"; }

# no complete step: refused with a reason
head -3 "$tmp/tl.csv" > "$tmp/part.csv"
python3 bench/timeline.py --src "$src" "$tmp/part.csv" > "$tmp/part.txt" 2>&1 &&
	bad "a timeline without a complete step was accepted" ||
	{ grep -q "no complete step" "$tmp/part.txt" && ok || bad "no reason: $(cat "$tmp/part.txt")"; }

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
