#!/usr/bin/env python3
"""Turn bench/quant.sh's results (quant-*.json from shardline-bench-decode, one
per weight format and KV dtype) into a markdown table and a PNG plot.

Table: per configuration, the weight bytes a decode step reads, batch-1
tokens/s and ms/token, its share of the measured copy bandwidth (weights
only, and with the KV reads), tokens/s at every batch, the prefill rate of
a 2048-token prompt (second run), and each figure's ratio to the fp16
(quant none, run-dtype KV) run. Plot: decode tokens/s against batch size
per configuration (log scales), and prefill tokens/s as bars.

Usage: bench/plot_quant.py RESULTS_DIR OUT_PREFIX   (writes OUT_PREFIX.md
and, where matplotlib is installed, OUT_PREFIX.png)"""
import glob
import json
import os
import sys


def load(folder):
    runs = []
    for path in sorted(glob.glob(os.path.join(folder, "quant-*.json"))):
        with open(path) as f:
            r = json.load(f)
        grp = r.get("quant_group", 0)
        name = r.get("quant", "none")
        if grp and grp > 0:
            name += "/%d" % grp
        elif grp and grp < 0:
            name += "/row"
        if r.get("kv_dtype") == "fp8":
            name += "+kv8"
        r["name"] = name
        runs.append(r)
    order = {"none": 0, "int8": 1, "int8/128": 2, "fp8": 3, "int4": 4, "fp8+kv8": 5}
    runs.sort(key=lambda r: (order.get(r["name"], 9), r["name"]))
    return runs


def base_of(runs):
    for r in runs:
        if r["name"] == "none":
            return r
    return None


def ratio(v, b):
    return "%.2fx" % (v / b) if b else "-"


def table(runs):
    base = base_of(runs)
    batches = list(runs[0]["decode_tokens_per_s_by_batch"].keys()) if runs else []
    head = ["config", "weights GB/token", "b1 tok/s", "b1 ms/token", "% copy BW (with KV)"]
    head += ["b%s tok/s" % b for b in batches]
    head += ["prefill %d tok/s (range)" % runs[0]["prefill_prompt_tokens"] if runs else "prefill",
             "b1 vs fp16", "prefill vs fp16"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        row = [r["name"], "%.2f" % (r["weight_bytes_per_token"] / 1e9),
               "%.1f" % r["batch1_tokens_per_s"], "%.2f" % r["batch1_ms_per_token"],
               "%.1f%% (%.1f%%)" % (100 * r["ratio_to_copy_bandwidth"],
                                    100 * r["ratio_to_copy_bandwidth_with_kv"])]
        for b in batches:
            v = r["decode_tokens_per_s_by_batch"].get(b, 0)
            bv = base["decode_tokens_per_s_by_batch"].get(b, 0) if base else 0
            row.append("%.0f (%s)" % (v, ratio(v, bv)) if base and r is not base else "%.0f" % v)
        pf = "%.0f" % r["prefill_tokens_per_s"]
        if "prefill_tokens_per_s_min" in r:  # median of several runs (2026-11-28 on)
            pf += " (%.0f-%.0f)" % (r["prefill_tokens_per_s_min"], r["prefill_tokens_per_s_max"])
        row.append(pf)
        row.append(ratio(r["batch1_tokens_per_s"], base["batch1_tokens_per_s"]) if base else "-")
        row.append(ratio(r["prefill_tokens_per_s"], base["prefill_tokens_per_s"]) if base else "-")
        lines.append("| " + " | ".join(row) + " |")
    dev = runs[0] if runs else {}
    note = ("\n%s, copy bandwidth %.0f GB/s, shape %s, %s activations, prompt %s + %s new tokens "
            "per sequence; random weights.\n" % (
                dev.get("device", "?"), dev.get("copy_bandwidth_GBps", 0), dev.get("shape", "?"),
                dev.get("dtype", "?"), dev.get("prompt_tokens", "?"), dev.get("new_tokens", "?")))
    return "\n".join(lines) + "\n" + note


def plot(runs, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_quant.py: no matplotlib, %s not written" % png, file=sys.stderr)
        return
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    for r in runs:
        pts = sorted((int(b), v) for b, v in r["decode_tokens_per_s_by_batch"].items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=r["name"])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequences per decode step")
    ax.set_ylabel("decode tokens/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    bx.bar([r["name"] for r in runs], [r["prefill_tokens_per_s"] for r in runs])
    bx.set_ylabel("prefill tokens/s (%d-token prompt)" % runs[0]["prefill_prompt_tokens"])
    bx.tick_params(axis="x", rotation=30)
    bx.grid(True, axis="y", alpha=0.3)
    fig.suptitle("shardline %s, quantized weights, %s" % (runs[0]["shape"], runs[0]["device"]))
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    folder, prefix = sys.argv[1], sys.argv[2]
    runs = load(folder)
    if not runs:
        sys.exit("plot_quant.py: no quant-*.json in %s" % folder)
    txt = table(runs)
    with open(prefix + ".md", "w") as f:
        f.write(txt)
    plot(runs, prefix + ".png")
    print(txt)


if __name__ == "__main__":
    main()
