#!/usr/bin/env python3
"""Plot of lab-qgemv's table 7 (--only 7 --out batch.json): a 7B layer's
four projections per format and path, as fp16's time over the path's
(>= 1: at least as fast as fp16), against the tokens of the call.

usage: plot_qgemm.py batch.json OUT.png [FORMAT ...]
(FORMAT: lab-qgemv's names; default int8/row int4/g128 fp8/row)"""
import json
import sys
from collections import defaultdict

SHAPES = ("qkv", "o", "gate_up", "down")
# lab-qgemv records AUTO's calls under the path they took
PATHS = {"gemv": "GEMV", "gemm": "GEMM (mma.sync; wgmma above 224 tokens)",
         "dequant": "dequantize + cuBLAS", "w8a8-lt": "W8A8 (cuBLASLt)"}


def layer_times(rows):
    """(format, path) -> {n: us of the four shapes}, complete layers only."""
    parts = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        if r.get("table") == "batch" and r["shape"] in SHAPES:
            parts[(r["format"], r["path"])][r["n"]][r["shape"]] = r["us"]
    out = {}
    for key, by_n in parts.items():
        full = {n: sum(s.values()) for n, s in by_n.items() if len(s) == len(SHAPES)}
        if full:
            out[key] = full
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    j = json.load(open(sys.argv[1]))
    fmts = sys.argv[3:] or ["int8/row", "int4/g128", "fp8/row"]
    times = layer_times(j["measurements"])
    fp16 = times.get(("fp16", "matmul"))
    if not fp16:
        sys.exit("no fp16 rows in " + sys.argv[1])
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(fmts), figsize=(5 * len(fmts), 4), sharey=True)
    if len(fmts) == 1:
        axes = [axes]
    for ax, f in zip(axes, fmts):
        for path, label in PATHS.items():
            t = times.get((f, path))
            if not t:
                continue
            ns = sorted(n for n in t if n in fp16)
            ax.plot(ns, [fp16[n] / t[n] for n in ns], marker="o", label=label)
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens a call")
        ax.set_title(f)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("fp16's layer time / this path's")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"{j.get('device', '?')}, 7B layer (qkv + o + gate_up + down), cold W, "
                 f"copy bandwidth {j.get('copy_bandwidth_GBps', 0):.0f} GB/s", fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print("wrote", sys.argv[2])


if __name__ == "__main__":
    main()
