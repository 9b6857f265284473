#!/usr/bin/env python3
"""Where a step's time goes, from the kernels' per-block timeline.

Reads the CSV files a TIMELINE=1 build writes (SL_TIMELINE=PREFIX: one
PREFIX.gpuN.PID.csv per process, kernels/timeline.h): one row per block at
its programmatic-dependent-launch wait ("wait": when it got there, when the
wait let it go) and one where it let the next kernel launch ("next"; a
GEMV does that after its main loop, a small kernel right after its wait).

Kernels are ordered by their release (the first block let go); a step
starts at each kernel from a source file named by --split-at (default
embedding.cu: the token embedding opens every step of a first stage) and
after every gap longer than --gap-us between one kernel's last record and
the next one's first arrival (the host's work between steps).
The report takes the last --steps complete steps of the most common kernel
count (the decode steps) and gives, per kernel of the step and summed over
the kernels of the same source line and grid:

  span     its release to the next kernel's: its share of the step
  lead     how long its first block was resident before the release
  first/last  its blocks' launch-next records after its release (a GEMV's
           blocks finishing their weights: last - first is its tail)
  release  the next kernel's release after this one's last launch-next
           record: the rest of the block (epilogue) plus the grid's exit

A launch is named by its %gridid, which a CUDA graph's replays reuse: one
id's records further apart than --launch-gap-us (default 1000: more than a
launch lasts, less than a decode step) belong to different launches.

Usage: bench/timeline.py [--steps 3] [--gap-us 30] [--split-at embedding.cu]
       [--launch-gap-us 1000] [--md OUT.md]
       [--plot OUT.png] [--layer-kernels K] [--csv-out STEP.csv] FILE.csv
"""
import argparse
import collections
import csv
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Kernel:
    def __init__(self, grid):
        self.grid = grid
        self.waits = []  # (block, arrive, go)
        self.nexts = []  # (block, t)
        self.line = 0
        self.dims = (0, 0, 0)

    def finish(self):
        self.arrive = min(a for _, a, _ in self.waits)
        self.go = min(g for _, _, g in self.waits)
        self.go_last = max(g for _, _, g in self.waits)
        ts = [t for _, t in self.nexts]
        self.next_first = min(ts) if ts else None
        self.next_last = max(ts) if ts else None
        self.last = max([self.go_last] + ts)
        self.blocks = self.dims[0] * self.dims[1]


def load(path, launch_gap_ns):
    """Kernels (launches) from the records. %gridid names a launch, but a
    CUDA graph's replays reuse their nodes' ids: one id's records are cut
    into launches wherever two of them are further apart than launch_gap_ns."""
    by_grid = collections.defaultdict(list)
    with open(path, newline="") as f:
        rd = csv.reader(f)
        col = {name: i for i, name in enumerate(next(rd))}
        kind, grid, block, line = col["kind"], col["grid"], col["block"], col["line"]
        gx, gy, th = col["grid_x"], col["grid_y"], col["threads"]
        ta, tg = col["t_arrive_ns"], col["t_go_ns"]
        for r in rd:
            if r[kind] not in ("wait", "next"):
                raise SystemExit(f"{path}: unknown record kind {r[kind]!r}")
            by_grid[int(r[grid])].append((int(r[ta]), int(r[tg]), r[kind] == "wait",
                                          int(r[block]), int(r[line]),
                                          (int(r[gx]), int(r[gy]), int(r[th]))))
    out = []
    for g, recs in by_grid.items():
        recs.sort()
        k = None
        for i, (a, t, is_wait, b, ln, dims) in enumerate(recs):
            if k is None or a - recs[i - 1][0] > launch_gap_ns:
                k = Kernel(g)
                k.dims = dims
                out.append(k)
            if is_wait:
                k.waits.append((b, a, t))
                k.line = ln
            else:
                k.nexts.append((b, t))
    out = [k for k in out if k.waits]
    for k in out:
        k.finish()
    out.sort(key=lambda k: k.go)
    mark_complete(out)
    return out


def split_steps(kernels, gap_ns, first):
    steps, cur = [], []
    for k in kernels:
        if cur and (k.arrive - max(c.last for c in cur) > gap_ns or k.line in first):
            steps.append(cur)
            cur = []
        cur.append(k)
    if cur:
        steps.append(cur)
    return steps


def mark_complete(kernels):
    """A kernel is whole when it has as many blocks' wait records as the
    most any launch of the same source line and grid has (blocks that
    return before their wait never record; the ring's oldest launch may
    have lost some)."""
    most = collections.Counter()
    for k in kernels:
        k.n_blocks = len({b for b, _, _ in k.waits})
        key = (k.line, k.dims)
        most[key] = max(most[key], k.n_blocks)
    for k in kernels:
        k.complete = k.n_blocks == most[(k.line, k.dims)]


def pick_steps(steps, n):
    """The last n complete steps with the most common kernel count; never
    the first step of the file (the ring may have wrapped inside it)."""
    full = [s for s in steps[1:] if all(k.complete for k in s)]
    if not full:
        raise SystemExit("no complete step in the timeline (a larger SL_TIMELINE_RECORDS?)")
    count = collections.Counter(len(s) for s in full).most_common(1)[0][0]
    same = [s for s in full if len(s) == count]
    return same[-n:], count


def source_lines(root):
    """line -> ['file:line function'] for every kern_pdl_* call in the kernels."""
    where = collections.defaultdict(list)
    call = re.compile(r"\bkern_pdl_(wait|start|launch_next)\s*\(")
    for folder in ("kernels", "parallel"):
        d = os.path.join(root, folder)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if not name.endswith((".cu", ".cuh")) or name == "cuda_util.cuh":
                continue
            lines = open(os.path.join(d, name), errors="replace").read().split("\n")
            fn = "?"
            for i, text in enumerate(lines):
                if "__global__" in text:
                    names = [m.group(1) for j in range(i, min(i + 4, len(lines)))
                             for m in re.finditer(r"(\w+)\s*\(", lines[j].split("__global__")[-1])
                             if m.group(1) != "__launch_bounds__"]
                    fn = names[0] if names else "?"
                if call.search(text):
                    where[i + 1].append(f"{folder}/{name}:{i + 1} {fn}")
    return where


def name_of(k, where):
    cands = where.get(k.line)
    return " | ".join(cands) if cands else f"line {k.line}"


def us(ns):
    return ns / 1e3


def step_rows(step):
    rows = []
    t0 = step[0].go
    for i, k in enumerate(step):
        nxt = step[i + 1].go if i + 1 < len(step) else k.last
        rows.append({
            "k": k, "at": us(k.go - t0), "span": us(nxt - k.go), "lead": us(k.go - k.arrive),
            "first": us(k.next_first - k.go) if k.next_first is not None else None,
            "last": us(k.next_last - k.go) if k.next_last is not None else None,
            "release": us(nxt - k.next_last) if k.next_last is not None and i + 1 < len(step)
            else None,
        })
    return rows


def fmt(v):
    return "" if v is None else f"{v:.1f}"


def summary(steps, where):
    """Per (source, grid): count a step, mean span/first/last/release, share."""
    groups = collections.OrderedDict()
    total = 0.0
    for s in steps:
        rows = step_rows(s)
        total += sum(r["span"] for r in rows)
        for r in rows:
            k = r["k"]
            key = (k.line, k.dims)
            g = groups.setdefault(key, {"name": name_of(k, where), "dims": k.dims, "rows": []})
            g["rows"].append(r)
    out = []
    for g in groups.values():
        rs = g["rows"]
        mean = lambda f: (statistics.mean([r[f] for r in rs if r[f] is not None])
                          if any(r[f] is not None for r in rs) else None)
        out.append({"name": g["name"], "dims": g["dims"], "per_step": len(rs) / len(steps),
                    "span": mean("span"), "lead": mean("lead"), "first": mean("first"),
                    "last": mean("last"), "release": mean("release"),
                    "share": sum(r["span"] for r in rs) / total if total else 0})
    return out, total / len(steps)


def report(path, args, where):
    kernels = load(path, args.launch_gap_us * 1e3)
    first = {line for line, names in where.items()
             if args.split_at and any(args.split_at in n for n in names)}
    steps = split_steps(kernels, args.gap_us * 1e3, first)
    chosen, count = pick_steps(steps, args.steps)
    groups, step_us = summary(chosen, where)
    lines = [f"## {os.path.basename(path)}", "",
             f"{len(kernels)} kernels in {len(steps)} steps; {len(chosen)} steps of {count} "
             f"kernels taken; a step {step_us:.1f} us (release of the first kernel to the "
             f"last record of the last)", "",
             "| kernel (source) | grid x threads | a step | span us | lead us | first us | "
             "last us | release us | share |",
             "|---|---|---|---|---|---|---|---|---|"]
    for g in groups:
        d = g["dims"]
        lines.append(f"| {g['name']} | {d[0]}x{d[1]} x {d[2]} | {g['per_step']:g} | "
                     f"{fmt(g['span'])} | {fmt(g['lead'])} | {fmt(g['first'])} | "
                     f"{fmt(g['last'])} | {fmt(g['release'])} | {100 * g['share']:.1f}% |")
    lines += ["", f"The last step's first {args.layer_kernels} kernels:", "",
              "| # | kernel | grid | at us | span us | lead us | first us | last us | release us |",
              "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(step_rows(chosen[-1])[:args.layer_kernels]):
        k = r["k"]
        lines.append(f"| {i} | {name_of(k, where)} | {k.dims[0]}x{k.dims[1]} | {r['at']:.1f} | "
                     f"{r['span']:.1f} | {r['lead']:.1f} | {fmt(r['first'])} | "
                     f"{fmt(r['last'])} | {fmt(r['release'])} |")
    return "\n".join(lines) + "\n", chosen


def write_step_csv(step, path):
    t0 = step[0].go
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["kind", "grid", "block", "line", "grid_x", "grid_y", "threads",
                    "t_arrive_ns", "t_go_ns"])
        for k in step:
            for b, a, g in k.waits:
                w.writerow(["wait", k.grid, b, k.line, *k.dims, a - t0, g - t0])
            for b, t in k.nexts:
                w.writerow(["next", k.grid, b, k.line, *k.dims, t - t0, t - t0])


def plot(step, where, n, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    ks = step[:n]
    t0 = ks[0].arrive
    fig, ax = plt.subplots(figsize=(12, 0.5 + 0.45 * len(ks)))
    for i, k in enumerate(ks):
        y = len(ks) - 1 - i
        nxt = dict(k.nexts)
        segs = [[(us(g - t0), y + 0.4 * (b / max(1, k.blocks - 1)) - 0.2),
                 (us(nxt.get(b, g) - t0), y + 0.4 * (b / max(1, k.blocks - 1)) - 0.2)]
                for b, _, g in k.waits]
        ax.add_collection(LineCollection(segs, linewidths=0.6, colors="tab:blue"))
        ax.plot([us(k.arrive - t0), us(k.go - t0)], [y, y], color="0.7", lw=3)
    ax.set_yticks(range(len(ks)))
    ax.set_yticklabels([name_of(k, where).split(" | ")[0].split(" ", 1)[-1] +
                        f" {k.dims[0]}x{k.dims[1]}" for k in reversed(ks)], fontsize=7)
    ax.set_xlabel("us (grey: first block resident until the wait lets go; blue: each block "
                  "from its release to its launch-next)")
    ax.autoscale()
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--gap-us", type=float, default=30.0)
    ap.add_argument("--split-at", default="embedding.cu")
    ap.add_argument("--launch-gap-us", type=float, default=1000.0)
    ap.add_argument("--layer-kernels", type=int, default=12)
    ap.add_argument("--src", default=os.path.dirname(HERE))
    ap.add_argument("--md")
    ap.add_argument("--plot")
    ap.add_argument("--csv-out")
    args = ap.parse_args()
    where = source_lines(args.src)
    text, last = "", None
    for path in args.files:
        t, chosen = report(path, args, where)
        text += t + "\n"
        last = chosen[-1]
    sys.stdout.write(text)
    if args.md:
        open(args.md, "w").write(text)
    if args.csv_out:
        write_step_csv(last, args.csv_out)
    if args.plot:
        plot(last, where, args.layer_kernels, args.plot)


if __name__ == "__main__":
    main()
