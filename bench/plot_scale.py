#!/usr/bin/env python3
"""Turn bench/scale.sh's JSON results into a markdown table and a PNG plot
of decode tokens/s against GPU count (one line per shape and batch size).
Usage: bench/plot_scale.py RESULTS_DIR OUT_PREFIX"""
import glob
import json
import os
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def load(folder):
    runs = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            r = json.load(f)
        key = (r["shape"], r["tp"], r["pp"])
        runs.setdefault(key, {})["off" if r["tp_comm_skipped"] else "on"] = r
    return runs


def table(runs):
    lines = ["| shape | GPUs | tp | pp | batch | tokens/s | ms/step | rank-0 GPU weight GB/s "
             "| all-reduce ms/step |", "|---|---|---|---|---|---|---|---|---|"]
    for (shape, tp, pp), r in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] * kv[0][2], kv[0][1])):
        on = r.get("on")
        if not on:
            continue
        for b, tps in on["decode_tokens_per_s_by_batch"].items():
            ms = on["decode_ms_per_step_by_batch"][b]
            off = r.get("off")
            comm = "%.2f" % (ms - off["decode_ms_per_step_by_batch"][b]) if off else "-"
            lines.append("| %s | %d | %d | %d | %s | %.1f | %.2f | %.0f | %s |" % (
                shape, tp * pp, tp, pp, b, tps, ms, on["rank0_weight_GBps_by_batch"][b], comm))
    return "\n".join(lines)


def plot(runs, png, device):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = {}
    for (shape, tp, pp), r in runs.items():
        on = r.get("on")
        if not on:
            continue
        for b, tps in on["decode_tokens_per_s_by_batch"].items():
            # one GPU is the start of both the tensor and the pipeline line
            kinds = [False, True] if tp * pp == 1 else [pp > 1]
            for k in kinds:
                series.setdefault((shape, b, k), []).append((tp * pp, tps))
    for (shape, b, is_pp), pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                label="%s batch %s (%s)" % (shape, b, "pipeline" if is_pp else "tensor parallel"))
    ax.set_xlabel("GPUs")
    ax.set_xticks(sorted({n for pts in series.values() for n, _ in pts}))
    ax.set_ylabel("decode tokens/s")
    ax.set_yscale("log")
    ax.set_title("shardline decode, random fp16 weights, %s" % device)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    folder, prefix = sys.argv[1], sys.argv[2]
    runs = load(folder)
    device = next(iter(runs.values()))["on"]["device"] if runs else "?"
    with open(prefix + ".md", "w") as f:
        f.write(table(runs) + "\n")
    plot(runs, prefix + ".png", device)
    print(table(runs))


if __name__ == "__main__":
    main()
