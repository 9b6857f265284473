#!/usr/bin/env python3
"""ncu_kernel.py OUT_DIR: what limits one kernel, from the Nsight Compute
exports bench/ncu_kernel.sh writes (OUT_DIR/details.csv: `ncu --import
R --page details --csv`; OUT_DIR/sass.csv.gz: `--page source --csv
--print-source sass`, gzipped).

Writes OUT_DIR/kernel.md and prints it: the kernel, its duration, DRAM
throughput and the clocks it ran at (ncu locks the SM clock unless told
otherwise, so compare durations only with runs under the same settings),
occupancy and issue statistics; then from the SASS, the warp stall
reasons over all samples, the instruction mix (the opcode without its
modifiers, by instructions executed) and the instructions with the most
stall samples with their main reasons. Exit status 1 when a file is
missing or holds no kernel."""
import csv
import gzip
import os
import sys
from collections import Counter

DETAILS = [
    ("GPU Speed Of Light Throughput", ["Duration", "DRAM Throughput", "Memory Throughput",
                                       "Compute (SM) Throughput", "SM Frequency",
                                       "DRAM Frequency"]),
    ("Memory Workload Analysis", ["Memory Throughput", "L2 Hit Rate"]),
    ("Compute Workload Analysis", ["Issue Slots Busy", "Executed Ipc Active"]),
    ("Scheduler Statistics", ["Active Warps Per Scheduler", "Eligible Warps Per Scheduler",
                              "No Eligible"]),
    ("Warp State Statistics", ["Warp Cycles Per Issued Instruction"]),
    ("Launch Statistics", ["Grid Size", "Block Size", "Registers Per Thread", "Waves Per SM"]),
    ("Occupancy", ["Theoretical Occupancy", "Achieved Occupancy", "Block Limit Registers",
                   "Block Limit Shared Mem"]),
]


def read_details(path):
    """(kernel name, {(section, metric): "value unit"})."""
    name, vals = None, {}
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        for row in csv.DictReader(line for line in f if line.startswith('"')):
            name = name or row.get("Kernel Name")
            key = (row.get("Section Name"), row.get("Metric Name"))
            unit = row.get("Metric Unit") or ""
            vals.setdefault(key, ("%s %s" % (row.get("Metric Value", ""), unit)).strip())
    return name, vals


def read_sass(path):
    """(header, rows) of the source page; its first line names the kernel."""
    with gzip.open(path, "rt", newline="", encoding="utf-8", errors="replace") as f:
        lines = list(csv.reader(f))
    for i, row in enumerate(lines):
        if row and row[0] == "Address":
            return row, [r for r in lines[i + 1:] if len(r) == len(row)]
    return None, []


def num(text):
    try:
        return float((text or "0").replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def sass_tables(header, rows, top=12):
    stall = [i for i, h in enumerate(header) if h.startswith("stall_") and "(Not" not in h]
    samples = header.index("Warp Stall Sampling (All Samples)")
    executed = header.index("Instructions Executed")
    source = header.index("Source")
    reasons, mix = Counter(), Counter()
    for r in rows:
        for i in stall:
            reasons[header[i][6:]] += num(r[i])
        mix[opcode(r[source])] += num(r[executed])
    out = []
    total = sum(reasons.values()) or 1
    out += ["## Stall reasons (all samples: %d)" % total, "", "| reason | share |", "|---|---|"]
    out += ["| %s | %.1f%% |" % (k, 100 * v / total) for k, v in reasons.most_common(top) if v]
    insts = sum(mix.values()) or 1
    out += ["", "## Instruction mix (%d warp instructions)" % insts, "",
            "| opcode | share |", "|---|---|"]
    out += ["| %s | %.1f%% |" % (k, 100 * v / insts) for k, v in mix.most_common(top)]
    out += ["", "## Instructions with the most stall samples", "",
            "| samples | share | instruction | main reasons |", "|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: -num(r[samples]))[:top]:
        s = num(r[samples])
        if not s:
            break
        main = sorted(((num(r[i]), header[i][6:]) for i in stall), reverse=True)
        why = ", ".join("%s %d" % (k, v) for v, k in main[:2] if v >= 0.2 * s)
        text = " ".join(r[source].split())[:60].replace("|", "/")
        out.append("| %d | %.1f%% | `%s` | %s |" % (s, 100 * s / total, text, why))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    details, sass = os.path.join(folder, "details.csv"), os.path.join(folder, "sass.csv.gz")
    for p in (details, sass):
        if not os.path.exists(p):
            print("ncu_kernel.py: %s is missing" % p, file=sys.stderr)
            return 1
    name, vals = read_details(details)
    header, rows = read_sass(sass)
    if not name or not header or not rows:
        print("ncu_kernel.py: no kernel in %s" % folder, file=sys.stderr)
        return 1
    out = ["# One kernel under Nsight Compute (bench/ncu_kernel.sh)", "",
           "`%s`" % name, "", "| section | metric | value |", "|---|---|---|"]
    for section, metrics in DETAILS:
        out += ["| %s | %s | %s |" % (section, m, vals[(section, m)])
                for m in metrics if (section, m) in vals]
    out += [""] + sass_tables(header, rows)
    text = "\n".join(out) + "\n"
    with open(os.path.join(folder, "kernel.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
