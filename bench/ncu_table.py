#!/usr/bin/env python3
"""ncu_table.py OUT_DIR: the per-op table of one decode layer from the
Nsight Compute exports bench/ncu_layer.sh writes (OUT_DIR/ncu-FORMAT.csv).

Each kernel is named by the innermost NVTX range it ran in (the backend's
op ranges: "matmul", "attention", ...; the kernel's own name where there
is none); consecutive kernels of one range are one op (a GEMM and its
split-K reduce). Only the decode steps count (the kernel list ends with
them, repeated; the prompt's step before them runs other kernels), and
the times are their median. The bench's own output, at the top of
each CSV, gives the device and its measured copy bandwidth, so every
projection row, and any other op that reads 1 MB or more (decode
attention at a long context), says its GB/s and the share of that
bandwidth. Writes
OUT_DIR/layer.md and prints it."""
import csv
import io
import os
import re
import sys
from collections import OrderedDict

def read_export(path):
    """(device line, copy GB/s, rows) of one ncu --csv export."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    device = re.search(r"^device: (.*)$", text, re.M)
    copy = re.search(r"^copy bandwidth: ([0-9.]+) GB/s", text, re.M)
    start = text.find('"ID",')
    if start < 0:
        raise ValueError(f"{path}: no ncu CSV in it")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    return (device.group(1) if device else "?", float(copy.group(1)) if copy else 0.0, rows)


def op_name(row):
    """The innermost NVTX range of a kernel, else the kernel's name."""
    for key, val in row.items():
        if key and key.startswith("thread Domain:Push/Pop_Range"):
            ranges = re.findall(r"<default domain>:([^:]+):", val or "")
            if ranges:
                return ranges[-1]
    return row.get("Kernel Name", "?")[:40]


def kernels(rows):
    """[(op, kernel name, {metric: value in us or MB})] in launch order."""
    out = OrderedDict()
    for r in rows:
        k = out.setdefault(r["ID"], [op_name(r), r.get("Kernel Name", "?"), {}])
        try:
            val = float(r["Metric Value"].replace(",", ""))
        except ValueError:
            continue
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3,
                 "msecond": 1e3, "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0,
                 "Gbyte": 1e3}.get(r["Metric Unit"], 1.0)
        k[2][r["Metric Name"]] = val * scale
    return list(out.values())


def last_period(seq):
    """(p, repeats): the shortest run of (op, kernel) pairs that the kernel
    list ends with, repeated `repeats` times (the decode steps; the prompt's
    step before them runs other kernels)."""
    keys = [(op, name) for op, name, _ in seq]
    n = len(keys)
    for p in range(1, n // 2 + 1):
        if keys[n - p:] == keys[n - 2 * p:n - p]:
            reps = 2
            while (reps + 1) * p <= n and keys[n - (reps + 1) * p:n - reps * p] == keys[n - p:]:
                reps += 1
            return p, reps
    return n, 1


def median(vals):
    """The median: the bench's warm-up steps (a 16-token prompt) run the
    same kernels as the measured ones, at a shorter context, and are a
    minority of the steps profiled."""
    v = sorted(vals)
    n = len(v)
    return (v[(n - 1) // 2] + v[n // 2]) / 2


def is_projection(op, name):
    low = (op + " " + name).lower()
    return any(w in low for w in ("matmul", "gemv", "gemm", "nvjet", "splitk", "qkv", "proj"))


def per_op(rows):
    """[(label, us, MB read)] of one decode step's layer, the median over the
    decode steps profiled; consecutive kernels of one range are one op
    (a GEMM and its split-K reduce); projections are named in layer order."""
    seq = kernels(rows)
    p, reps = last_period(seq)
    groups = []  # [op, projection?, us, MB]
    for i in range(len(seq) - p, len(seq)):
        op, name, _ = seq[i]
        us = median([seq[i - k * p][2].get("gpu__time_duration.sum", 0.0) for k in range(reps)])
        rd = median([seq[i - k * p][2].get("dram__bytes_read.sum", 0.0) for k in range(reps)])
        if groups and groups[-1][0] == op:
            groups[-1][2] += us
            groups[-1][3] += rd
            groups[-1][1] |= is_projection(op, name)
        else:
            groups.append([op, is_projection(op, name), us, rd])
    n_proj = sum(1 for g in groups if g[1])
    names = iter(["qkv projection", "o projection", "gate/up projection", "down projection"]
                 if n_proj == 4 else [f"projection {k + 1}" for k in range(n_proj)])
    return [((next(names) + f" ({g[0]})") if g[1] else g[0], g[1], g[2], g[3])
            for g in groups], reps


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else sys.exit(__doc__)
    files = sorted(f for f in os.listdir(out) if re.fullmatch(r"ncu-.+\.csv", f))
    if not files:
        sys.exit(f"ncu_table.py: no ncu-*.csv in {out}")
    lines = []
    for f in files:
        fmt = f[4:-4]
        try:
            device, copy, rows = read_export(os.path.join(out, f))
        except ValueError as e:
            print(f"ncu_table.py: {e}", file=sys.stderr)
            continue
        ops, steps = per_op(rows)
        lines += [f"## {fmt} ({device}; copy bandwidth {copy:.0f} GB/s; {steps} decode steps)",
                  "", "| op | µs | MB read | GB/s | % of copy |", "|---|---|---|---|---|"]
        proj_us = proj_mb = rest_us = 0.0
        for label, proj, us, rd in ops:
            gbs = rd / us * 1e3 if us > 0 else 0.0  # MB per us is TB/s
            pct = 100.0 * gbs / copy if copy else 0.0
            rate = f"{gbs:.0f} | {pct:.1f}%" if proj or rd >= 1.0 else " | "
            lines.append(f"| {label} | {us:.1f} | {rd:.1f} | {rate} |")
            if proj:
                proj_us += us
                proj_mb += rd
            else:
                rest_us += us
        pg = proj_mb / proj_us * 1e3 if proj_us else 0.0
        lines += [f"| **projections** | **{proj_us:.1f}** | {proj_mb:.1f} | {pg:.0f} | "
                  f"{100.0 * pg / copy if copy else 0:.1f}% |",
                  f"| **the rest** | **{rest_us:.1f}** | | | |", ""]
    text = ("# One decode layer under Nsight Compute (bench/ncu_layer.sh)\n\n"
            "Each kernel replayed alone, caches flushed, clocks as they were "
            "(`--clock-control none`); µs and MB are per layer, the median over the "
            "decode steps profiled.\n\n" + "\n".join(lines))
    with open(os.path.join(out, "layer.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
