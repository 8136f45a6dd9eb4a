"""The load generators every scenario can use (wrk, weir-bench, h2load), and what a run says
about the machine: the hypervisor's steal and how busy the load generator's cores were."""
import json, os, re, subprocess

from harness.common import WORK, write

WRK_DONE = r"""
done = function(summary, latency, requests)
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d}\n',
    summary.requests, summary.duration, summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.status, summary.errors.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max))
end
"""

def wrk_script(kind, lua=""):
    """bench/work/wrk-KIND.lua: `lua` (headers, a `request` function), then the summary run_wrk
    reads."""
    return write(os.path.join(WORK, f"wrk-{kind}.lua"), lua + WRK_DONE)

def cpu_times():
    """(steal, total) jiffies over all CPUs, and each CPU's (busy, total), from /proc/stat."""
    lines = open("/proc/stat").read().splitlines()
    fields = [int(x) for x in lines[0].split()[1:]]
    per_cpu = {}
    for line in lines[1:]:
        if not (line.startswith("cpu") and line[3].isdigit()):
            break
        name, *values = line.split()
        values = [int(x) for x in values[:8]]
        # idle and iowait are the CPU waiting; the rest (steal too) is time it was not free.
        per_cpu[name[3:]] = (sum(values) - values[3] - values[4], sum(values))
    return fields[7], sum(fields[:8]), per_cpu

def steal_percent(before, after):
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total else 0.0

def machine_figures(before, after, cpus):
    """What a run's report says about the machine between two `cpu_times`: the hypervisor's
    steal and how busy the load generator's cores (`cpus`) were."""
    return {"steal_pct": steal_percent(before, after), "load_busy_pct": busy_percent(before, after, cpus)}

def busy_percent(before, after, cpus):
    """How busy the CPUs `cpus` ("1" or "1,2,3") were between two `cpu_times`, in percent:
    near 100 on the load generator's cores, the generator, not the target, set the req/s."""
    busy = total = 0
    for cpu in cpus.split(","):
        if cpu in before[2] and cpu in after[2]:
            busy += after[2][cpu][0] - before[2][cpu][0]
            total += after[2][cpu][1] - before[2][cpu][1]
    return 100.0 * busy / total if total else None

def timed(target, cpus, run):
    """Calls run(); returns what it returned, the machine figures of `cpus` over it, and the
    CPU seconds `target` (a Proc, or None: then None) spent meanwhile."""
    before = target.cpu_seconds() if target else 0
    clock = cpu_times()
    out = run()
    machine = machine_figures(clock, cpu_times(), cpus)
    after = target.cpu_seconds() if target else 0
    return out, machine, (after - before) if target else None

def per_request(cpu_seconds, requests):
    """CPU microseconds per request, None without a target or without requests."""
    return cpu_seconds * 1e6 / requests if cpu_seconds is not None and requests else None

def no_answer(machine):
    """A run whose generator reported nothing: one socket error, so the run fails."""
    return {"rps": 0, "requests": 0, "p50_ms": 0, "p90_ms": 0, "p99_ms": 0, "p999_ms": 0, "max_ms": 0,
            "non_2xx": 0, "socket_errors": 1, "cpu_us_per_req": None, **machine}

def output(cmd, **kw):
    return lambda: subprocess.run(cmd, capture_output=True, text=True, **kw).stdout

def run_wrk(url, conns, duration, script, cpus, target):
    cmd = ["taskset", "-c", cpus, "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--timeout", "5s", "-s", script, url]
    out, machine, spent = timed(target, cpus, output(cmd))
    line = next((l for l in out.splitlines() if l.startswith("WRKJSON ")), None)
    if line is None:
        raise SystemExit(f"wrk produced no summary for {url}:\n{out}")
    r = json.loads(line[8:])
    secs = r["duration_us"] / 1e6
    return {
        "rps": r["requests"] / secs,
        "requests": r["requests"],
        "p50_ms": r["p50"] / 1000, "p90_ms": r["p90"] / 1000, "p99_ms": r["p99"] / 1000,
        "p999_ms": r["p999"] / 1000, "max_ms": r["max"] / 1000,
        "non_2xx": r["status"],
        "socket_errors": r["connect"] + r["read"] + r["write"] + r["timeout"],
        "cpu_us_per_req": per_request(spent, r["requests"]),
        **machine,
    }

def run_generator(bench_bin, url, rate, conns, duration, cpus, target, extra=()):
    """weir-bench at `rate` requests/s (open loop), or closed loop with `rate` None."""
    pace = ["-R", str(rate)] if rate is not None else []
    out, machine, spent = timed(target, cpus, output(
        ["taskset", "-c", cpus, bench_bin, "--json", *pace, "-c", str(conns), "-d", f"{duration}s", *extra, url],
        check=True))
    r = json.loads(out)
    l = r["latency_us"]
    return {
        "rps": r["achieved_rate"], "requests": r["completed"],
        "p50_ms": l["p50"] / 1000, "p90_ms": l["p90"] / 1000, "p99_ms": l["p99"] / 1000,
        "p999_ms": l["p999"] / 1000, "max_ms": l["max"] / 1000,
        "non_2xx": r["non_2xx"], "socket_errors": r["errors"], "late_sends": r["late_sends"],
        "cpu_us_per_req": per_request(spent, r["completed"]),
        **machine,
    }

def run_h2load(url, conns, streams, duration, cpus, target, extra=()):
    """h2load (nghttp2-client): `conns` connections with `streams` concurrent streams each;
    `extra` are more h2load arguments (a body to POST, headers). h2load reports a mean and a
    maximum, no percentiles."""
    out, machine, spent = timed(target, cpus, output(
        ["taskset", "-c", cpus, "h2load", "-t1", f"-c{conns}", f"-m{streams}", f"-D{duration}", *extra, url]))
    rps = re.search(r"finished in ([\d.]+)(?:ms|s), ([\d.]+) req/s", out)
    counts = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    latency = re.search(r"time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)", out)
    if not (rps and counts and codes):
        raise SystemExit(f"h2load produced no summary for {url}:\n{out}")
    to_ms = lambda v, unit: float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    done = int(counts.group(3))
    return {
        "rps": float(rps.group(2)), "requests": done,
        "p50_ms": None, "p90_ms": None, "p99_ms": None, "p999_ms": None,
        "mean_ms": to_ms(latency.group(5), latency.group(6)) if latency else None,
        "max_ms": to_ms(latency.group(3), latency.group(4)) if latency else None,
        "non_2xx": int(codes.group(2)) + int(codes.group(3)) + int(codes.group(4)),
        "socket_errors": int(counts.group(4)) + int(counts.group(5)) + int(counts.group(6)),
        "cpu_us_per_req": per_request(spent, done),
        **machine,
    }

# interleave's `measure` (url, process) -> figures, for the generators above.

def wrk_measure(ctx, conns, script, seconds=None):
    """wrk at `conns` connections running `script`, for `seconds` (the round's duration)."""
    return lambda url, proc: run_wrk(url, conns, seconds or ctx.duration, script, ctx.load_cpus, proc)

def generator_measure(ctx, rate, conns, extra=()):
    """weir-bench at `rate` (None: closed loop) for the round's duration."""
    return lambda url, proc: run_generator(ctx.bench, url, rate, conns, ctx.duration, ctx.load_cpus, proc, extra)

def h2load_measure(ctx, conns, streams, extra=()):
    """h2load, `conns` connections x `streams` streams, for the round's duration."""
    return lambda url, proc: run_h2load(url, conns, streams, ctx.duration, ctx.load_cpus, proc, extra)
