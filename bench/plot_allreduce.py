#!/usr/bin/env python3
"""Tables and plots of the custom all-reduce measurements.

Micro-benchmark (shardline-bench-allreduce --out, one JSON per GPU count):
    bench/plot_allreduce.py OUT_PREFIX RESULT.json [RESULT.json ...]
writes OUT_PREFIX.md (microseconds per call: one-shot, two-shot, NCCL, the
node's pick and its speed-up over NCCL) and OUT_PREFIX.png (microseconds
against message size, log-log, one line per algorithm and GPU count).

Decode with the custom all-reduce on and off (bench/scale.sh's folder: the
custom runs in DIR, the NCCL-only runs in DIR/nccl):
    bench/plot_allreduce.py --decode DIR OUT_PREFIX
writes OUT_PREFIX.md (tokens/s and ms/step per grid and batch, custom vs
NCCL, speed-up over one GPU, and the step time left to all-reduces, taken
from the run with them skipped) and OUT_PREFIX.png.

The plots need matplotlib; without it only the tables are written.
"""
import argparse
import glob
import json
import os
import sys


def try_pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        print("matplotlib not installed: tables only", file=sys.stderr)
        return None


def human(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def fmt(v):
    return "-" if v is None else "%.1f" % v


# ---- micro-benchmark ----

def micro_table(runs):
    lines = []
    for r in runs:
        title = "%d ranks, %s, %s, %s" % (r["tp"], r["device"], r["dtype"], r["date"])
        if not r.get("gpu_per_rank", True):
            title += " — ranks SHARE a GPU: times measure context switching, not the kernels"
        lines += ["### " + title, "",
                  "| message | push µs | one-shot µs | two-shot µs | NCCL µs | node picks | picked vs NCCL |",
                  "|---|---|---|---|---|---|---|"]
        for s in r["sizes"]:
            # runs before the push one-shot (2026-11-30) have no push_us
            pick = {"one-shot": s["oneshot_us"], "two-shot": s["twoshot_us"],
                    "push": s.get("push_us"), "NCCL": s["nccl_us"]}[s["node_picks"]]
            vs = "%.2fx" % (s["nccl_us"] / pick) if s["nccl_us"] and pick else "-"
            lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                human(int(s["bytes"])), fmt(s.get("push_us")), fmt(s["oneshot_us"]),
                fmt(s["twoshot_us"]), fmt(s["nccl_us"]), s["node_picks"], vs))
        lines.append("")
    return "\n".join(lines)


def micro_plot(plt, runs, png):
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    styles = {"push_us": ("push", "-."), "oneshot_us": ("one-shot", "-"),
              "twoshot_us": ("two-shot", "--"), "nccl_us": ("NCCL", ":")}
    for r in sorted(runs, key=lambda r: r["tp"]):
        shared = "" if r.get("gpu_per_rank", True) else " (shared GPU)"
        for key, (label, ls) in styles.items():
            pts = [(s["bytes"], s[key]) for s in r["sizes"] if s.get(key) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, marker="o", ms=3,
                        label="tp %d %s%s" % (r["tp"], label, shared))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message bytes")
    ax.set_ylabel("µs per all-reduce (graph replay, slowest rank)")
    dev = runs[0]["device"] if runs else "?"
    ax.set_title("tensor-parallel all-reduce, %s, %s" % (runs[0]["dtype"] if runs else "", dev))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


# ---- decode, custom vs NCCL ----

def load_folder(folder):
    runs = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            r = json.load(f)
        runs[(r["shape"], r["tp"], r["pp"], r["tp_comm_skipped"])] = r
    return runs


def decode_rows(folder):
    custom, nccl = load_folder(folder), load_folder(os.path.join(folder, "nccl"))
    rows = []
    for (shape, tp, pp, skipped), r in sorted(custom.items()):
        if skipped:
            continue
        base = custom.get((shape, 1, 1, False))
        off = custom.get((shape, tp, pp, True))
        n = nccl.get((shape, tp, pp, False))
        for b, tps in r["decode_tokens_per_s_by_batch"].items():
            ms = r["decode_ms_per_step_by_batch"][b]
            row = {"shape": shape, "tp": tp, "pp": pp, "batch": b, "custom_tps": tps,
                   "custom_ms": ms, "nccl_tps": None, "nccl_ms": None, "x1": None,
                   "nccl_x1": None, "comm_custom": None, "comm_nccl": None}
            if base:
                row["x1"] = tps / base["decode_tokens_per_s_by_batch"][b]
            if n:
                row["nccl_tps"] = n["decode_tokens_per_s_by_batch"][b]
                row["nccl_ms"] = n["decode_ms_per_step_by_batch"][b]
                if base:
                    row["nccl_x1"] = row["nccl_tps"] / base["decode_tokens_per_s_by_batch"][b]
            if off:
                off_ms = off["decode_ms_per_step_by_batch"][b]
                row["comm_custom"] = ms - off_ms
                if row["nccl_ms"] is not None:
                    row["comm_nccl"] = row["nccl_ms"] - off_ms
            rows.append(row)
    return rows


def decode_table(rows):
    def x(v):
        return "-" if v is None else "%.2fx" % v

    def ms(v):
        return "-" if v is None else "%.2f" % v
    lines = ["| shape | tp | pp | batch | tokens/s custom | tokens/s NCCL | vs 1 GPU custom "
             "| vs 1 GPU NCCL | all-reduce ms/step custom | all-reduce ms/step NCCL |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %d | %d | %s | %.1f | %s | %s | %s | %s | %s |" % (
            r["shape"], r["tp"], r["pp"], r["batch"], r["custom_tps"], fmt(r["nccl_tps"]),
            x(r["x1"]), x(r["nccl_x1"]), ms(r["comm_custom"]), ms(r["comm_nccl"])))
    return "\n".join(lines)


def decode_plot(plt, rows, png):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    labels, cu, nc = [], [], []
    for r in rows:
        if r["tp"] == 1:
            continue
        labels.append("%s tp%d pp%d b%s" % (r["shape"], r["tp"], r["pp"], r["batch"]))
        cu.append(r["x1"] or 0)
        nc.append(r["nccl_x1"] or 0)
    idx = range(len(labels))
    ax.bar([i - 0.2 for i in idx], cu, 0.4, label="custom all-reduce")
    ax.bar([i + 0.2 for i in idx], nc, 0.4, label="NCCL")
    ax.set_xticks(list(idx))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("decode tokens/s vs one GPU")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--decode", metavar="DIR", help="bench/scale.sh output folder")
    ap.add_argument("out_prefix")
    ap.add_argument("results", nargs="*")
    a = ap.parse_args()
    plt = try_pyplot()
    if a.decode:
        rows = decode_rows(a.decode)
        text = decode_table(rows)
        if plt and rows:
            decode_plot(plt, rows, a.out_prefix + ".png")
    else:
        runs = []
        for p in a.results:
            with open(p) as f:
                runs.append(json.load(f))
        if not runs:
            ap.error("give at least one shardline-bench-allreduce JSON")
        text = micro_table(runs)
        if plt:
            micro_plot(plt, runs, a.out_prefix + ".png")
    with open(a.out_prefix + ".md", "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
