"""bench/run [--smoke] [--rounds N] [--duration S] SCENARIO... | all — weir against nginx and
HAProxy (and Caddy, Varnish where they are the peers) on the same machine, interleaved.

Proxies share one CPU; the load generator and the upstream get the other(s). Each scenario is a
module of bench/harness/scenarios/ (see bench/README.md).
"""
import argparse, os, resource, shutil, statistics, subprocess, sys, types

from harness import scenarios
from harness.common import ROOT, RESULTS, WORK, log, sh
from harness.peers import NGINX_LUA_MODULES, NGINX_STREAM_MODULE
from harness.procs import cpu_layout
from harness.report import measured, write_report

def ensure_tools():
    need = {"nginx": "nginx-light", "wrk": "wrk", "haproxy": "haproxy", "taskset": "util-linux", "openssl": "openssl",
            "caddy": "caddy", "redis-server": "redis-server", "redis-benchmark": "redis-tools",
            "dnsmasq": "dnsmasq-base", "dnsperf": "dnsperf", "h2load": "nghttp2-client",
            "varnishd": "varnish", "java": "openjdk-17-jre-headless", "mvn": "maven", "unzip": "unzip"}
    missing = [pkg for tool, pkg in need.items() if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}")]
    if not os.path.exists(NGINX_STREAM_MODULE):
        missing.append("libnginx-mod-stream")
    if not all(os.path.exists(m) for m in NGINX_LUA_MODULES):
        missing.append("libnginx-mod-http-lua")
    if not os.path.exists("/usr/share/lua/5.1/nginx/redis.lua"):
        missing.append("lua-nginx-redis")
    if missing:
        log(f"installing {' '.join(missing)} from apt")
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        sh(sudo + ["apt-get", "update", "-qq"])
        sh(sudo + ["apt-get", "install", "-y", "-qq"] + missing, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, stdout=subprocess.DEVNULL)

def binaries(bin_dir):
    if bin_dir is None:
        log("building weir and weir-bench (release)")
        sh(["cargo", "build", "--release", "--locked", "-p", "weir", "-p", "weir-bench"], cwd=ROOT)
        bin_dir = os.path.join(ROOT, "target", "release")
    return os.path.join(bin_dir, "weir"), os.path.join(bin_dir, "weir-bench")

def interleave(label, targets, measure, rounds):
    """targets: list of (name, Proc or None, url). Runs rounds of every target in turn, each
    round starting one target later, so no target always runs first (or always after another).
    Returns {name: the medians of its rounds' figures, with the rounds themselves}."""
    runs = {name: [] for name, _, _ in targets}
    for rnd in range(1, rounds + 1):
        shift = (rnd - 1) % len(targets)
        for name, proc, url in targets[shift:] + targets[:shift]:
            log(f"  [{label}] round {rnd}/{rounds}: {name} ...")
            r = measure(url, proc)
            runs[name].append(r)
            tail = r['p99_ms'] if r.get('p99_ms') is not None else r['max_ms']
            log(f"  [{label}] round {rnd}/{rounds}: {name:<14} {r['rps']:>10.0f} req/s  p99 {tail:.3f} ms"
                + (f"  {r['cpu_us_per_req']:.2f} us CPU/req" if r.get('cpu_us_per_req') else "")
                + (f"  (hypervisor stole {r['steal_pct']:.0f}% of CPU)" if r['steal_pct'] >= 2 else ""))
    summary = {}
    for name, proc, _ in targets:
        rs = runs[name]
        med = {k: statistics.median([r[k] for r in rs if r.get(k) is not None])
               for k in rs[0] if any(r.get(k) is not None for r in rs)}
        med["non_2xx"] = sum(r["non_2xx"] for r in rs)
        med["socket_errors"] = sum(r["socket_errors"] for r in rs)
        med["peak_rss_mb"] = proc.peak_rss_mb() if proc else None
        med["rounds"] = rs
        summary[name] = med
    return summary

def request_failures(results):
    """What failed in interleave's tables: a target that finished no request, or had non-2xx
    answers or socket errors (unless its table expects them)."""
    failures = []
    for label, res in results.items():
        for target, m in measured(res):
            if m.get("errors_expected"):
                continue
            if m["requests"] == 0 or m["non_2xx"] or m["socket_errors"]:
                failures.append(f"{label}/{target}: {m['requests']} requests, {m['non_2xx']} non-2xx, {m['socket_errors']} socket errors")
    return failures

def raise_descriptor_limit():
    # 10,000 idle connections need more descriptors than the usual soft limit; as root the
    # hard limit can be raised too. Children (the proxies) inherit the limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limits in ((65535, max(hard, 65535)), (min(65535, hard if hard > 0 else 65535), hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
        except (ValueError, OSError):
            pass

def main():
    registry = scenarios.discover()
    listing = "\n".join(f"  {name:<11} {', '.join(s.PEERS)}" for name, s in registry.items())
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__, epilog=f"scenarios and their peers:\n{listing}",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--smoke", action="store_true", help="every scenario, one short round, results under bench/work")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10, help="seconds per target per round")
    ap.add_argument("--bin-dir", help="use prebuilt weir and weir-bench from this folder instead of building")
    args = ap.parse_args()
    names = args.scenarios or (["all"] if args.smoke else [])
    if not names:
        ap.error("name a scenario or `all`")
    if "all" in names:
        names = list(registry)
    for n in names:
        if n not in registry:
            ap.error(f"unknown scenario {n}; expected one of {', '.join(registry)} or all")
    ensure_tools()
    raise_descriptor_limit()
    ctx = types.SimpleNamespace()
    ctx.weir, ctx.bench = binaries(args.bin_dir)
    ctx.proxy_cpus, ctx.load_cpus = cpu_layout()
    ctx.smoke = args.smoke
    ctx.rounds = 1 if args.smoke else max(1, args.rounds)
    ctx.duration = 1 if args.smoke else args.duration
    ctx.conn_levels = [50, 200] if args.smoke else [50, 1000]
    outdir = os.path.join(WORK, "smoke") if args.smoke else RESULTS
    os.makedirs(WORK, exist_ok=True)
    log(f"cores: proxies on {ctx.proxy_cpus}, load generator + upstream on {ctx.load_cpus}")
    failures = []
    for name in names:
        log(f"== {name}")
        scenario = registry[name]
        results = scenario.run(ctx)
        if hasattr(scenario, "report"):
            scenario.report(results, ctx, outdir)
        else:
            write_report(name, results, ctx, outdir)
        failures += getattr(scenario, "failures", request_failures)(results)
    if failures:
        log("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    log(f"results in {os.path.relpath(outdir, ROOT)}/")
