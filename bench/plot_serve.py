#!/usr/bin/env python3
"""Turn bench/serve.sh's results (one shardline-loadgen JSON per run) into a
markdown table and a PNG plot:
  top left    output tokens/s against concurrent streams (fixed-mix runs),
              one line per tensor-parallel degree and batching policy;
  top right   inter-token latency p50 (solid) and p99 (dashed) against
              streams, with the 100 ms p99 target;
  bottom left time to first token p50 (solid) and p99 (dashed);
  bottom right  continuous against simple batching for every run made
              with both policies: output tokens/s, p99 ITL written on top.
Usage: bench/plot_serve.py RESULTS_DIR [OUT_PREFIX (default RESULTS_DIR/serve)]"""
import glob
import json
import os
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker

ITL_TARGET_MS = 100


def load(folder):
    runs = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            r = json.load(f)
        if "output_tokens_per_s" not in r:
            continue  # not a loadgen result
        m = r.get("meta", {})
        tp = r["groups"][0]["tp"] if r.get("groups") else int(m.get("gpus", 1))
        r["_tp"], r["_batching"] = tp, m.get("batching", "?")
        r["_case"] = m.get("case", os.path.splitext(os.path.basename(path))[0])
        runs.append(r)
    runs.sort(key=lambda r: (r["_tp"], r["_batching"], r["mix"], r["streams"], r["_case"]))
    return runs


def fmt(x, spec="%.1f"):
    return "-" if x is None else spec % x


def table(runs):
    lines = ["| tp | batching | case | mix | streams | prompt | output | requests ok/failed "
             "| output tok/s | req/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms "
             "| TPOT p50 ms | running mean |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        load_ = r.get("engine_load", {})
        lines.append("| %d | %s | %s | %s | %d | %d | %d | %d/%d | %.0f | %.2f | %s | %s | %s | %s | %s | %s |" % (
            r["_tp"], r["_batching"], r["_case"], r["mix"], r["streams"], r["prompt_len"],
            r["output_len"], r["ok"], r["failed"] + r.get("unanswered", 0),
            r["output_tokens_per_s"], r["requests_per_s"], fmt(r["ttft_ms"]["p50"]),
            fmt(r["ttft_ms"]["p99"]), fmt(r["itl_ms"]["p50"]), fmt(r["itl_ms"]["p99"]),
            fmt(r["tpot_ms"]["p50"]), fmt(load_.get("running_mean"))))
    return "\n".join(lines)


def series(runs):
    """(tp, batching) -> fixed-mix runs sorted by streams."""
    s = {}
    for r in runs:
        if r["mix"] == "fixed":
            s.setdefault((r["_tp"], r["_batching"]), []).append(r)
    for v in s.values():
        v.sort(key=lambda r: r["streams"])
    return s


def plot(runs, png):
    meta = runs[0].get("meta", {})
    fig, axs = plt.subplots(2, 2, figsize=(12, 8.5))
    (a_tps, a_itl), (a_ttft, a_cmp) = axs
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, ((tp, pol), rs) in enumerate(sorted(series(runs).items())):
        c = colors[i % len(colors)]
        x = [r["streams"] for r in rs]
        label = "tp %d, %s" % (tp, pol)
        a_tps.plot(x, [r["output_tokens_per_s"] for r in rs], "o-", color=c, label=label)
        for ax, key in ((a_itl, "itl_ms"), (a_ttft, "ttft_ms")):
            ax.plot(x, [r[key]["p50"] for r in rs], "o-", color=c, label=label + " p50")
            ax.plot(x, [r[key]["p99"] for r in rs], "s--", color=c, label=label + " p99")
    shape = "%s prompt / %s output" % (runs[0]["prompt_len"], runs[0]["output_len"])
    a_tps.set_ylabel("output tokens/s")
    a_tps.set_title("throughput (fixed mix, %s)" % shape)
    a_itl.axhline(ITL_TARGET_MS, color="gray", lw=1, ls=":", label="p99 target")
    a_itl.set_ylabel("inter-token latency, ms")
    a_itl.set_title("inter-token latency")
    a_ttft.set_ylabel("time to first token, ms")
    a_ttft.set_title("time to first token")
    ticks = sorted({r["streams"] for rs in series(runs).values() for r in rs})
    for ax in (a_tps, a_itl, a_ttft):
        ax.set_xlabel("concurrent streams")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    a_tps.set_ylim(bottom=0)
    for ax in (a_itl, a_ttft):
        ax.set_yscale("log")

    # continuous vs simple, for every (tp, case) run both ways
    both = {}
    for r in runs:
        both.setdefault((r["_tp"], r["_case"]), {})[r["_batching"]] = r
    pairs = [(k, v) for k, v in sorted(both.items()) if "continuous" in v and "simple" in v]
    if pairs:
        w = 0.38
        for j, pol in enumerate(("continuous", "simple")):
            xs = [i + (j - 0.5) * w for i in range(len(pairs))]
            ys = [v[pol]["output_tokens_per_s"] for _, v in pairs]
            bars = a_cmp.bar(xs, ys, w, label=pol, color=colors[j])
            for b, (_, v) in zip(bars, pairs):
                a_cmp.annotate("p99 ITL\n%.0f ms" % v[pol]["itl_ms"]["p99"],
                               (b.get_x() + b.get_width() / 2, b.get_height()),
                               ha="center", va="bottom", fontsize=7)
        a_cmp.set_xticks(range(len(pairs)))
        a_cmp.set_xticklabels(["tp %d\n%s" % k for k, _ in pairs], fontsize=8)
        a_cmp.set_ylabel("output tokens/s")
        a_cmp.set_title("continuous batching on (continuous) and off (simple)")
        a_cmp.legend(fontsize=8)
        a_cmp.margins(y=0.2)
    else:
        a_cmp.set_axis_off()
        a_cmp.text(0.5, 0.5, "no run made with both policies", ha="center", va="center")
    fig.suptitle("shardline serving: %s, %s" % (meta.get("model", "?"), meta.get("device", "?")))
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    prefix = sys.argv[2] if len(sys.argv) > 2 else os.path.join(folder, "serve")
    runs = load(folder)
    if not runs:
        sys.exit("no shardline-loadgen results in %s" % folder)
    t = table(runs)
    meta = runs[0].get("meta", {})
    with open(prefix + ".md", "w") as f:
        f.write("Device: %s. Model: %s.\n\n%s\n" % (meta.get("device", "?"), meta.get("model", "?"), t))
    plot(runs, prefix + ".png")
    print(t)
    print("wrote %s.md and %s.png" % (prefix, prefix))


if __name__ == "__main__":
    main()
