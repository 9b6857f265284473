#!/usr/bin/env python3
"""Turn bench/ab_decode.sh's runs (CASE-before-REP.json and CASE-after-REP.json
from shardline-bench-decode) into a markdown table and a PNG plot.

Table: the device(s) and the copy bandwidth each run measured, then per
case and batch every run's decode tokens/s on each side, the change of
the means, and at batch 1 the share of copy bandwidth (weights and KV
reads); a prefill row where the runs prefilled. Plot: each row's after
as a percentage of its before, the before bars at 100.

Usage: bench/plot_ab.py RESULTS_DIR   (writes RESULTS_DIR/ab.md and, where
matplotlib is installed, RESULTS_DIR/ab.png); exit status 1 when a case
lacks a side."""
import glob
import json
import os
import re
import sys

RUN = re.compile(r"^(?P<case>[A-Za-z0-9._-]+)-(?P<side>before|after)-(?P<rep>\d+)\.json$")


def load(folder):
    """{case: {"before": [json...], "after": [...]}} in run order."""
    runs = {}
    for path in glob.glob(os.path.join(folder, "*.json")):
        m = RUN.match(os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            r = json.load(f)
        r["_rep"] = int(m.group("rep"))
        runs.setdefault(m.group("case"), {"before": [], "after": []})[m.group("side")].append(r)
    for sides in runs.values():
        for v in sides.values():
            v.sort(key=lambda r: r["_rep"])
    return runs


def case_order(folder, runs):
    order = []
    try:
        with open(os.path.join(folder, "order.txt")) as f:
            for line in f:
                case = line.strip().rsplit("-", 2)[0]
                if case in runs and case not in order:
                    order.append(case)
    except OSError:
        pass
    return order + sorted(c for c in runs if c not in order)


def mean(xs):
    return sum(xs) / len(xs)


def describe(r):
    weights = r.get("quant", "none")
    weights = r.get("dtype", "f16") if weights == "none" else weights
    return "%s, %s, KV %s" % (r.get("shape", "?"), weights, r.get("kv_dtype", "?"))


def rows(runs, order):
    """(label, case, batch, before values, after values, before %, after %)."""
    out = []
    for case in order:
        b, a = runs[case]["before"], runs[case]["after"]
        tokens = "%d + %d" % (b[0].get("prompt_tokens", 0), b[0].get("new_tokens", 0))
        batches = sorted(set(b[0]["decode_tokens_per_s_by_batch"]) &
                         set(a[0]["decode_tokens_per_s_by_batch"]), key=int)
        for n in batches:
            bv = [r["decode_tokens_per_s_by_batch"][n] for r in b]
            av = [r["decode_tokens_per_s_by_batch"][n] for r in a]
            pct = None
            if n == "1":
                pct = (mean([r.get("ratio_to_copy_bandwidth_with_kv", 0) for r in b]),
                       mean([r.get("ratio_to_copy_bandwidth_with_kv", 0) for r in a]))
            out.append((describe(b[0]), case, tokens, "decode, batch " + n, bv, av, pct))
        if all(r.get("prefill_tokens_per_s", 0) > 0 for r in b + a):
            out.append((describe(b[0]), case, "%d" % b[0].get("prefill_prompt_tokens", 0),
                        "prefill", [r["prefill_tokens_per_s"] for r in b],
                        [r["prefill_tokens_per_s"] for r in a], None))
    return out


def table(runs, order, table_rows):
    every = [r for c in order for s in ("before", "after") for r in runs[c][s]]
    devices = sorted(set(r.get("device", "?") for r in every))
    bw = [r.get("copy_bandwidth_GBps", 0) for r in every]
    lines = ["# Same-call A/B (bench/ab_decode.sh)", "",
             "Device: %s; copy bandwidth %.0f-%.0f GB/s over the %d runs; "
             "tokens/s of each run, before and after taking turns (order.txt)."
             % (", ".join(devices), min(bw), max(bw), len(every)), "",
             "| case | model | tokens | measure | before | after | change | batch 1, % of copy bandwidth with KV |",
             "|---|---|---|---|---|---|---|---|"]
    for model, case, tokens, what, bv, av, pct in table_rows:
        change = 100.0 * (mean(av) / mean(bv) - 1) if mean(bv) > 0 else float("nan")
        share = "%.1f%% -> %.1f%%" % (100 * pct[0], 100 * pct[1]) if pct else ""
        lines.append("| %s | %s | %s | %s | %s | %s | %+.1f%% | %s |" % (
            case, model, tokens, what, " / ".join("%.1f" % v for v in bv),
            " / ".join("%.1f" % v for v in av), change, share))
    return "\n".join(lines) + "\n"


def plot(table_rows, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_ab.py: no matplotlib; table only", file=sys.stderr)
        return
    labels = ["%s\n%s" % (case, what.replace("decode, ", "")) for _, case, _, what, _, _, _ in table_rows]
    ratio = [100.0 * mean(av) / mean(bv) for _, _, _, _, bv, av, _ in table_rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels)), 4))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], [100] * len(labels), 0.4, label="before")
    ax.bar([i + 0.2 for i in x], ratio, 0.4, label="after")
    for i, v in enumerate(ratio):
        ax.text(i + 0.2, v + 0.2, "%+.1f%%" % (v - 100), ha="center", fontsize=8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    lo = min(ratio + [100])
    ax.set_ylim(min(95, lo - 3), max(ratio + [100]) + 3)
    ax.set_ylabel("tokens/s, % of before (means)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    runs = load(folder)
    missing = [c for c, s in runs.items() if not s["before"] or not s["after"]]
    for c in missing:
        print("plot_ab.py: case %s has runs on one side only" % c, file=sys.stderr)
        del runs[c]
    if not runs:
        print("plot_ab.py: no before/after pairs in %s" % folder, file=sys.stderr)
        return 1
    order = case_order(folder, runs)
    table_rows = rows(runs, order)
    text = table(runs, order, table_rows)
    with open(os.path.join(folder, "ab.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    first = runs[order[0]]["before"][0]
    plot(table_rows, os.path.join(folder, "ab.png"),
         "%s, copy bandwidth %.0f GB/s: after as %% of before" %
         (first.get("device", "?"), first.get("copy_bandwidth_GBps", 0)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
