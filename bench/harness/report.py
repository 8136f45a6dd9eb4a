"""bench/results/SCENARIO.md, .json and .png: the tables of medians, the ratios of weir to
each peer, and the plot of latency percentiles."""
import json, os, time

from harness.common import log, write

COLUMNS = [("req/s", "rps", "{:.0f}"), ("p50 ms", "p50_ms", "{:.3f}"), ("p90 ms", "p90_ms", "{:.3f}"),
           ("p99 ms", "p99_ms", "{:.3f}"), ("p99.9 ms", "p999_ms", "{:.3f}"), ("max ms", "max_ms", "{:.2f}"),
           ("non-2xx", "non_2xx", "{}"), ("sock err", "socket_errors", "{}"),
           ("CPU us/req", "cpu_us_per_req", "{:.2f}"), ("peak RSS MB", "peak_rss_mb", "{:.1f}"),
           ("steal %", "steal_pct", "{:.1f}"), ("load core busy %", "load_busy_pct", "{:.0f}"),
           ("reloads", "reloads", "{:.0f}")]

# The peers weir is set against, in this order, where a table has them.
RATIO_PEERS = ("nginx", "nginx-no-cork", "haproxy", "weir-plain", "weir-1route", "weir-nometrics", "weir-route-none",
               "weir-unbatched", "weir-spool", "direct", "caddy", "weir-h2")

# A line under a table for each figure some targets have: (key, caption, format of one target's).
SUMMARIES = [("mb_per_s", "Throughput: ", "{} {:.0f} MB/s"),
             ("docs_per_s", "Documents/s: ", "{} {:.0f}"),
             ("cluster_cpu_us_per_req", "Cluster CPU per request (the nodes' JVMs, µs): ", "{} {:.0f}"),
             ("mean_ms", "Mean latency (dnsperf and h2load report no percentiles): ", "{} {:.3f} ms"),
             ("cpu_s_per_gib", "CPU seconds per GiB relayed: ", "{} {:.3f}"),
             ("admitted_per_s", "Admitted (2xx) per second: ", "{} {:.1f}"),
             ("admitted_off_pct", "Admitted rate off the configured one: ", "{} {:+.2f}%")]

def measured(res):
    """A table's (target, figures), without its `_` entries (the rate, the sizes)."""
    return [(name, m) for name, m in res.items() if not name.startswith("_")]

def table(res):
    rows = ["| target | " + " | ".join(c[0] for c in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for name, m in measured(res):
        cells = [fmt.format(m[key]) if m.get(key) is not None else "—" for _, key, fmt in COLUMNS]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)

def ratios(res):
    lines = []
    # weir, then any variant of it a scenario adds (`weir-...`), each against every peer.
    for name in ["weir"] + [k for k in res if k.startswith("weir-")]:
        lines += ratio_lines(name, res.get(name), res)
    return "\n".join(lines)

def ratio_lines(name, w, res):
    lines = []
    for peer in RATIO_PEERS:
        p = res.get(peer)
        if not w or not p or peer == name:
            continue
        # A short smoke round of a slow scenario may finish no request at all: say so, not divide.
        parts = [f"req/s {w['rps'] / p['rps']:.3f}×" if p.get("rps") else "req/s — (peer finished none)"]
        if w.get("cpu_us_per_req") and p.get("cpu_us_per_req"):
            parts.append(f"CPU/req {w['cpu_us_per_req'] / p['cpu_us_per_req']:.3f}×")
        if p.get("p99_ms"):
            parts.append(f"p99 {w['p99_ms'] / p['p99_ms']:.3f}×")
        lines.append(f"- {name} / {peer}: " + ", ".join(parts))
    return lines

def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("  (matplotlib missing: no plot)")
        return
    keys = [("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms"), ("max", "max_ms")]
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, (label, res) in zip(axes[0], results.items()):
        for name, m in measured(res):
            ax.plot([k for k, _ in keys], [m.get(f, 0) or 0 for _, f in keys], marker="o", label=name)
        ax.set_yscale("log")
        ax.set_title(label)
        ax.set_ylabel("latency (ms, log)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)

def run_line(scenario):
    """The start of a report's first paragraph: when, and by which command."""
    return f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench/run {scenario}`"

def save(outdir, scenario, md, data):
    """Writes OUTDIR/SCENARIO.md (the lines `md`) and SCENARIO.json (`data`)."""
    os.makedirs(outdir, exist_ok=True)
    write(os.path.join(outdir, f"{scenario}.md"), "\n".join(md) + "\n")
    with open(os.path.join(outdir, f"{scenario}.json"), "w") as f:
        json.dump(data, f, indent=1)

def write_report(scenario, results, ctx, outdir):
    """The report of a scenario whose results are interleave's tables, by label."""
    md = [f"# {scenario}", "",
          f"{run_line(scenario)}: "
          f"{ctx.rounds} interleaved round(s) of {ctx.duration}s per target, medians shown.",
          f"CPU: proxies pinned to core {ctx.proxy_cpus}; load generator and upstream nginx on core {ctx.load_cpus}. "
          "Every proxy runs one worker. CPU us/req = the proxy process's user+sys time over the run / requests. "
          "steal % = CPU time the hypervisor took from this VM during the runs (median): when it is high, "
          "req/s and latency are disturbed, CPU us/req much less so. "
          "load core busy % = how busy the load generator's core was (median): near 100, the "
          "generator (with the upstream), not the proxy, set the req/s, and a faster proxy cannot show it there.", ""]
    for label, res in results.items():
        counts = {len(m["rounds"]) for _, m in measured(res) if "rounds" in m}
        extra = [f"{c} rounds" for c in counts if c != ctx.rounds]
        if "_rate" in res:
            extra.insert(0, f"fixed rate {res['_rate']} req/s")
        md.append(f"## {label}" + (f" ({', '.join(extra)})" if extra else ""))
        md.append("")
        md.append(table(res))
        md.append("")
        md.append(ratios(res))
        md.append("")
        for key, caption, fmt in SUMMARIES:
            values = [(n, m[key]) for n, m in measured(res) if m.get(key) is not None]
            if values:
                md.append(caption + ", ".join(fmt.format(n, v) for n, v in values))
                md.append("")
        if "_sizes" in res:
            sizes = res["_sizes"]
            md.append(f"Body sizes (the original is {sizes['original']} bytes):")
            md.append("")
            for name, size in sizes.items():
                if name != "original":
                    md.append(f"- {name}: {size['bytes']} bytes of {size['encoding']} "
                              f"({size['bytes'] / sizes['original']:.3f} of the original)")
            md.append("")
    md.append(f"![latency percentiles]({scenario}.png)")
    save(outdir, scenario, md, {"scenario": scenario, "rounds": ctx.rounds, "duration_s": ctx.duration,
                                "proxy_cpus": ctx.proxy_cpus, "load_cpus": ctx.load_cpus, "results": results})
    plot(results, os.path.join(outdir, f"{scenario}.png"))
    log("\n".join(md[:-1]))
