#!/usr/bin/env python3
"""Bar chart of test_attention's prefill bench lines (CK_RUN_CASE=bench):
TFLOP/s per case for each prefill kernel the log names.

usage: plot_attn_prefill.py OUT.png bench.log [bench.log ...]
(the logs' lines are averaged per case and kernel)"""
import re
import sys
from collections import defaultdict

LINE = re.compile(r"attention prefill bench f16( kv-fp8)? \((\d+),(\d+),(\d+)\) prompt (\d+)"
                  r"(?: (wgmma|mma\.sync))?: ([\d.]+) us/call, (\d+) TFLOP/s")


def read(paths):
    got = defaultdict(list)
    for p in paths:
        for line in open(p):
            m = LINE.search(line)
            if not m:
                continue
            fp8, h, kh, d, n, kern, us, tf = m.groups()
            case = f"{n} tokens\n{h}/{kh} heads" + ("\nfp8 KV" if fp8 else "")
            got[(case, kern or "mma.sync")].append(float(tf))
    return {k: sum(v) / len(v) for k, v in got.items()}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = read(sys.argv[2:])
    cases = list(dict.fromkeys(c for c, _ in data))
    kerns = sorted({k for _, k in data})
    fig, ax = plt.subplots(figsize=(8, 4))
    w = 0.8 / len(kerns)
    for i, k in enumerate(kerns):
        xs = [j + i * w for j in range(len(cases))]
        ys = [data.get((c, k), 0) for c in cases]
        ax.bar(xs, ys, w, label=k)
        for x, y in zip(xs, ys):
            ax.text(x, y, f"{y:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks([j + w * (len(kerns) - 1) / 2 for j in range(len(cases))])
    ax.set_xticklabels(cases, fontsize=8)
    ax.set_ylabel("TFLOP/s (causal QK and PV)")
    ax.set_title("prefill attention, head_dim 128, fp16")
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=120)


if __name__ == "__main__":
    main()
