#!/usr/bin/env python3
"""Summarises shardline-bench-grammar's output (issue 37's mask target):
per constraint its mask mean and p99, then the median p99, how many
constraints are under the target at p99 and the worst one.

    python3 bench/grammar_summary.py OUT.txt [--target-us 50]
"""
import re
import statistics
import sys

LINE = re.compile(r"^(\S+(?: \S+)*?)\s+compile\s+([\d.]+) ms\s+mask mean\s+([\d.]+) us\s+"
                  r"p50\s+([\d.]+) us\s+p99\s+([\d.]+) us\s+max\s+([\d.]+) us")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    target = float(argv[argv.index("--target-us") + 1]) if "--target-us" in argv else 50.0
    rows = []
    with open(argv[1], errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                rows.append((m.group(1), float(m.group(3)), float(m.group(5)), float(m.group(6))))
            elif line.startswith("vocabulary:"):
                print(line.rstrip())
    if not rows:
        sys.exit(f"{argv[1]}: no benchmark lines")
    print(f"{'constraint':30} {'mean us':>9} {'p99 us':>9} {'max us':>9}")
    for name, mean, p99, mx in rows:
        flag = "" if p99 < target else "  over"
        print(f"{name:30} {mean:9.1f} {p99:9.1f} {mx:9.1f}{flag}")
    # schemas and grammars apart: a grammar file measures how it is written
    for kind, group in (("schemas", [r for r in rows if not r[0].endswith("ebnf")]),
                        ("grammars", [r for r in rows if r[0].endswith("ebnf")])):
        if not group:
            continue
        p99s = [r[2] for r in group]
        worst = max(group, key=lambda r: r[2])
        print(f"summary ({kind}): {len(group)}, median p99 {statistics.median(p99s):.1f} us, "
              f"{sum(p < target for p in p99s)}/{len(group)} under {target:g} us at p99, "
              f"worst {worst[0]} mean {worst[1]:.1f} us p99 {worst[2]:.1f} us")


if __name__ == "__main__":
    main(sys.argv)
