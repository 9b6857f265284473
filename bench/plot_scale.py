#!/usr/bin/env python3
"""Turn bench/scale.sh's JSON results into a markdown table and a PNG plot
of decode tokens/s against GPU count (one line per shape and batch size),
then a table of each pipeline grid against one GPU and its tp-only grid,
groups in flight and (from RESULTS_DIR/micro) the micro-batch schedule,
decode and prefill.
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
    """Every grid's default run: tokens/s, the ratio to one GPU of the same
    shape and batch, and how much of its copy bandwidth rank 0 spends on
    weights (the per-GPU % the issue asks of every row)."""
    lines = ["| shape | GPUs | tp | pp | batch | tokens/s | x 1 GPU | ms/step | rank-0 GPU weight GB/s "
             "| % of copy bw a GPU | all-reduce ms/step |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (shape, tp, pp), r in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] * kv[0][2], kv[0][1])):
        on = r.get("on")
        if not on:
            continue
        for b, tps in on["decode_tokens_per_s_by_batch"].items():
            ms = on["decode_ms_per_step_by_batch"][b]
            off = r.get("off")
            comm = "%.2f" % (ms - off["decode_ms_per_step_by_batch"][b]) if off else "-"
            gbps = on["rank0_weight_GBps_by_batch"][b]
            one = runs.get((shape, 1, 1), {}).get("on")
            x1 = "%.2f" % (tps / one["decode_tokens_per_s_by_batch"][b]) \
                if one and b in one["decode_tokens_per_s_by_batch"] else "-"
            lines.append("| %s | %d | %d | %d | %s | %.1f | %s | %.2f | %.0f | %.1f%% | %s |" % (
                shape, tp * pp, tp, pp, b, tps, x1, ms, gbps,
                100 * gbps / on["copy_bandwidth_GBps"], comm))
    return "\n".join(lines)


# pair: SL_GEMV_AR=0 (scale.sh); gemvar: SL_GEMV_AR=1, the variant of runs
# from before the GEMV's all-reduce was the default (2026-11-29)
VARIANTS = (("custom", ""), ("pair", "pair"), ("gemvar", "gemvar"), ("unfused", "unfused"),
            ("nccl", "nccl"), ("micro", "micro"), ("gemv4", "gemv4"), ("gemv8", "gemv8"),
            ("nopdl", "nopdl"))


def variants_table(folder, runs):
    """Each grid's variants side by side (scale.sh's VARIANTS), decode
    tokens/s per batch: the A/B of one call. One GPU has a row only when a
    variant other than custom ran there (gemv4, gemv8)."""
    found = {name: load(os.path.join(folder, sub)) if sub else runs for name, sub in VARIANTS}
    names = [n for n, _ in VARIANTS if found[n]]
    lines = ["| shape | tp | pp | batch | " + " | ".join(names) + " |",
             "|---|---|---|---|" + "---|" * len(names)]
    for key in sorted(runs):
        shape, tp, pp = key
        on = runs[key].get("on")
        others = [n for n in names if n != "custom" and found[n].get(key, {}).get("on")]
        if not on or (tp * pp == 1 and not others):
            continue
        for b in on["decode_tokens_per_s_by_batch"]:
            cells = []
            for n in names:
                r = found[n].get(key, {}).get("on")
                cells.append("%.1f" % r["decode_tokens_per_s_by_batch"][b]
                             if r and b in r["decode_tokens_per_s_by_batch"] else "-")
            lines.append("| %s | %d | %d | %s | %s |" % (shape, tp, pp, b, " | ".join(cells)))
    return "\n".join(lines)


def pipeline_table(runs, micro):
    """Pipeline grids (pp > 1): tokens/s, and the ratio to the same shape
    at pp 1 with the same tp (the issue's targets: decode batch 32 >= 0.95x,
    prefill >= 1.7x one GPU at pp 2)."""
    lines = ["| shape | tp | pp | schedule | batch 1 | batch 32 | x tp-only (b32) | prefill | "
             "x tp-only (prefill) |", "|---|---|---|---|---|---|---|---|---|"]
    for (shape, tp, pp), r in sorted(runs.items()):
        base = runs.get((shape, tp, 1), {}).get("on")
        for sched, src in (("in flight", r.get("on")), ("micro-batches", micro.get((shape, tp, pp), {}).get("on"))):
            if pp == 1 or not src:
                continue
            d = src["decode_tokens_per_s_by_batch"]
            b32 = d.get("32", 0)
            pf = src.get("prefill_tokens_per_s", 0)
            rb = "%.2f" % (b32 / base["decode_tokens_per_s_by_batch"]["32"]) if base and b32 else "-"
            rp = "%.2f" % (pf / base["prefill_tokens_per_s"]) if base and pf and base.get("prefill_tokens_per_s") else "-"
            lines.append("| %s | %d | %d | %s | %.1f | %.1f | %s | %.0f | %s |" % (
                shape, tp, pp, sched, d.get("1", 0), b32, rb, pf, rp))
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
    micro = load(os.path.join(folder, "micro"))
    text = "\n\n".join([table(runs), variants_table(folder, runs), pipeline_table(runs, micro)])
    with open(prefix + ".md", "w") as f:
        f.write(text + "\n")
    plot(runs, prefix + ".png", device)
    print(text)


if __name__ == "__main__":
    main()
