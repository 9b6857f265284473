#!/usr/bin/env python3
"""Turn bench/serve.sh's results (one shardline-bench-serve JSON per run) into a
markdown table and a PNG plot. The table says, per run, how its prompts were
made (unique, a shared prefix of N ids, or seeded: repeated across runs) and
the share of prompt tokens the groups' prefix caches served; the plot's lines
take only runs of unique prompts, so cache hits never pass for throughput:
  top left    output tokens/s against concurrent streams (fixed-mix runs),
              one line per tensor-parallel degree and batching policy;
  top right   inter-token latency p50 (solid) and p99 (dashed) against
              streams, with the 100 ms p99 target;
  bottom left time to first token p50 (solid) and p99 (dashed);
  bottom right  continuous against simple batching for every run made
              with both policies: output tokens/s, p99 ITL written on top.
Multi-turn chat runs (bench/serve_chat.sh, loadgen --mix chat) get their
own table and plot (chat.md, chat.png; OUT_PREFIX-chat beside other runs):
  top left    time to first token p50 and p99 per configuration (node
              groups, prefix cache on or off, routing);
  top right   output tokens/s per configuration;
  bottom left TTFT p50 by turn of the conversation;
  bottom right  share of started tokens the groups reused from their
              caches, and the share the router expected to be cached.
The table adds each run's TTFT p50 and tokens/s against the run without
the cache on as many groups.
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


def prompts(r):
    """How the run made its prompts; results from before unique prompts
    (issue 38) repeated them across runs of one seed: 'seeded?'."""
    p = r.get("prompts")
    if p is None:
        return "seeded?"
    shared = r.get("shared_prefix", 0)
    return p + (", %d shared" % shared if shared else "")


def unique(r):
    return r.get("prompts") == "unique" and not r.get("shared_prefix")


def reused(r):
    """Prompt tokens the prefix caches served, of those started."""
    pc = r.get("prefix_cache")
    if pc is None:
        return "-"
    if pc.get("enabled") is False:
        return "off"
    q = pc.get("queried_tokens", 0)
    return "%.1f%%" % (100.0 * pc["hit_tokens"] / q) if q else "-"


def table(runs):
    lines = ["| tp | batching | case | mix | streams | prompt | output | prompts | prefix cache reused "
             "| requests ok/failed "
             "| output tok/s | req/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms "
             "| TPOT p50 ms | running mean |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        load_ = r.get("engine_load", {})
        lines.append("| %d | %s | %s | %s | %d | %d | %d | %s | %s | %d/%d | %.0f | %.2f | %s | %s | %s | %s | %s | %s |" % (
            r["_tp"], r["_batching"], r["_case"], r["mix"], r["streams"], r["prompt_len"],
            r["output_len"], prompts(r), reused(r), r["ok"], r["failed"] + r.get("unanswered", 0),
            r["output_tokens_per_s"], r["requests_per_s"], fmt(r["ttft_ms"]["p50"]),
            fmt(r["ttft_ms"]["p99"]), fmt(r["itl_ms"]["p50"]), fmt(r["itl_ms"]["p99"]),
            fmt(r["tpot_ms"]["p50"]), fmt(load_.get("running_mean"))))
    return "\n".join(lines)


def series(runs):
    """(tp, batching) -> fixed-mix runs of unique prompts sorted by streams
    (all fixed-mix runs when none says its prompts were unique: old results)."""
    s = {}
    keep = unique if any(unique(r) for r in runs) else (lambda r: True)
    for r in runs:
        if r["mix"] == "fixed" and keep(r):
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


CHAT_ORDER = {"prefix": 0, "load": 1}


def chat_label(r):
    """(groups, cache on/off, route, think ms, label)"""
    m = r.get("meta", {})
    g = int(m.get("groups", len(r.get("groups", [])) or 1))
    cache = m.get("cache", "?")
    route = m.get("route", "?")
    think = int(r.get("chat", {}).get("think_ms", 0))
    label = "%d group%s, %s" % (
        g, "" if g == 1 else "s", "no cache" if cache == "off" else
        "cache" + ("" if g == 1 else ", %s routing" % ("prefix" if route == "prefix" else "least-loaded")))
    if think:
        label += ", users pause %.1f s" % (think / 1000.0)
    return g, cache, route, think, label


def chat_tick(r):
    """A short x-axis label: groups, what routes, the pause."""
    g, cache, route, think, _ = chat_label(r)
    what = "no cache" if cache == "off" else "cache" if g == 1 else (
        "prefix" if route == "prefix" else "least-\nloaded")
    return "%dg %s%s" % (g, what, "\npause %gs" % (think / 1000.0) if think else "")


def chat_runs(runs):
    out = [r for r in runs if r["mix"] == "chat"]
    out.sort(key=lambda r: (chat_label(r)[3], chat_label(r)[0], chat_label(r)[1] == "off",
                            CHAT_ORDER.get(chat_label(r)[2], 9)))
    return out


def chat_baseline(runs, r):
    """The run without the cache on as many groups, users pausing alike."""
    g, _, _, think, _ = chat_label(r)
    for b in runs:
        if chat_label(b)[0] == g and chat_label(b)[1] == "off" and chat_label(b)[3] == think:
            return b
    return None


def chat_table(runs):
    c = runs[0].get("chat", {})
    lines = ["%d users, %d turns, system prompt %d, question %d, answer %d tokens." % (
        c.get("users", runs[0]["streams"]), c.get("turns", 0), c.get("system_len", 0),
        c.get("question_len", 0), runs[0]["output_len"]), "",
        "| configuration | requests ok/failed | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms "
        "| cache reused | router expected | evictions | TTFT p50 vs no cache | tok/s vs no cache |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        pc = r.get("prefix_cache", {})
        q = pc.get("queried_tokens", 0)
        b = chat_baseline(runs, r)
        ratio = lambda x, y: "-" if not x or not y else "%.2fx" % (x / y)
        lines.append("| %s | %d/%d | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            chat_label(r)[4], r["ok"], r["failed"] + r.get("unanswered", 0),
            r["output_tokens_per_s"], fmt(r["ttft_ms"]["p50"]), fmt(r["ttft_ms"]["p99"]),
            fmt(r["itl_ms"]["p50"]), "%.1f%%" % (100.0 * pc["hit_tokens"] / q) if q else "-",
            "%.1f%%" % (100.0 * pc["routed_prefix_tokens"] / q) if q else "-",
            pc.get("evictions", "-"),
            ratio(b["ttft_ms"]["p50"] if b else None, r["ttft_ms"]["p50"]) if b is not r else "1x",
            ratio(r["output_tokens_per_s"], b["output_tokens_per_s"] if b else None) if b is not r else "1x"))
    return "\n".join(lines)


def chat_plot(runs, png):
    meta = runs[0].get("meta", {})
    fig, axs = plt.subplots(2, 2, figsize=(13, 8.5))
    (a_ttft, a_tps), (a_turn, a_hit) = axs
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels = [chat_label(r)[4] for r in runs]
    xs = range(len(runs))
    w = 0.38
    a_ttft.bar([x - w / 2 for x in xs], [r["ttft_ms"]["p50"] or 0 for r in runs], w, label="p50", color=colors[0])
    a_ttft.bar([x + w / 2 for x in xs], [r["ttft_ms"]["p99"] or 0 for r in runs], w, label="p99", color=colors[1])
    a_ttft.set_yscale("log")
    a_ttft.set_ylabel("time to first token, ms")
    a_ttft.set_title("time to first token")
    a_ttft.legend(fontsize=8)
    bars = a_tps.bar(xs, [r["output_tokens_per_s"] for r in runs], 0.6, color=colors[2])
    for b_, r in zip(bars, runs):
        a_tps.annotate("%.0f" % r["output_tokens_per_s"], (b_.get_x() + b_.get_width() / 2, b_.get_height()),
                       ha="center", va="bottom", fontsize=8)
    a_tps.set_ylabel("output tokens/s")
    a_tps.set_title("throughput")
    for ax in (a_ttft, a_tps):
        ax.set_xticks(list(xs))
        ax.set_xticklabels([chat_tick(r) for r in runs], fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    for i, r in enumerate(runs):
        by = r.get("chat", {}).get("ttft_ms_by_turn", [])
        a_turn.plot(range(1, len(by) + 1), [d["p50"] for d in by], "o-", color=colors[i % len(colors)],
                    label=labels[i])
    a_turn.set_xlabel("turn of the conversation")
    a_turn.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    a_turn.set_ylabel("TTFT p50, ms")
    a_turn.set_yscale("log")
    a_turn.set_title("time to first token by turn")
    a_turn.grid(True, which="both", alpha=0.3)
    a_turn.legend(fontsize=7)
    hit = [100.0 * r.get("prefix_cache", {}).get("hit_tokens", 0) / max(1, r.get("prefix_cache", {}).get("queried_tokens", 0)) for r in runs]
    exp = [100.0 * r.get("prefix_cache", {}).get("routed_prefix_tokens", 0) / max(1, r.get("prefix_cache", {}).get("queried_tokens", 0)) for r in runs]
    a_hit.bar([x - w / 2 for x in xs], hit, w, label="reused by the groups", color=colors[3])
    a_hit.bar([x + w / 2 for x in xs], exp, w, label="expected by the router", color=colors[4])
    a_hit.set_xticks(list(xs))
    a_hit.set_xticklabels([chat_tick(r) for r in runs], fontsize=7)
    a_hit.set_ylabel("% of started tokens")
    a_hit.set_ylim(0, 100)
    a_hit.set_title("prefix cache hits")
    a_hit.legend(fontsize=8)
    c = runs[0].get("chat", {})
    fig.suptitle("shardline multi-turn chat: %s, %s; %d users x %d turns, %d-token system prompt" % (
        meta.get("model", "?"), meta.get("device", "?"), c.get("users", 0), c.get("turns", 0),
        c.get("system_len", 0)))
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    runs = load(folder)
    if not runs:
        sys.exit("no shardline-bench-serve results in %s" % folder)
    chats = chat_runs(runs)
    others = [r for r in runs if r["mix"] != "chat"]
    prefix = sys.argv[2] if len(sys.argv) > 2 else os.path.join(folder, "serve")
    meta = runs[0].get("meta", {})
    head = "Device: %s. Model: %s.\n\n" % (meta.get("device", "?"), meta.get("model", "?"))
    if others:
        t = table(others)
        with open(prefix + ".md", "w") as f:
            f.write(head + t + "\n")
        plot(others, prefix + ".png")
        print(t)
        print("wrote %s.md and %s.png" % (prefix, prefix))
    if chats:
        cp = prefix + "-chat" if others else (sys.argv[2] if len(sys.argv) > 2 else os.path.join(folder, "chat"))
        t = chat_table(chats)
        with open(cp + ".md", "w") as f:
            f.write(head + t + "\n")
        chat_plot(chats, cp + ".png")
        print(t)
        print("wrote %s.md and %s.png" % (cp, cp))


if __name__ == "__main__":
    main()
