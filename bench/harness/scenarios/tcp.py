"""TCP proxying: nginx's `stream` module, HAProxy `mode tcp` and a weir TCP router, each
forwarding to the same upstream: Redis driven by redis-benchmark -P 16 (SET and GET), and bulk
transfer (BULK_STREAMS concurrent downloads of BULK_FILE_MB from an nginx upstream, relayed as
bytes)."""
import csv, os, subprocess, time

from harness.common import which, work_dir
from harness.load import no_answer, output, per_request, timed
from harness.peers import start_haproxy, start_nginx, start_nginx_stream, start_weir, weir_stream_yaml
from harness.procs import Proc, Procs, free_port
from harness.runner import interleave

NAME, ORDER, PEERS = "tcp", 90, ("nginx", "haproxy")
BULK_FILE_MB = 256  # each of the bulk downloads
BULK_STREAMS = 4

def start_tcp_proxies(ctx, procs, tag, up_port):
    """nginx stream, HAProxy mode tcp and a weir TCP router, each forwarding to up_port, added
    to `procs`. Returns their targets, (name, process, port)."""
    ng_port, ha_port, we_port = free_port(), free_port(), free_port()
    ng = procs.add(start_nginx_stream(f"nginx-{tag}", f"listen 127.0.0.1:{ng_port} backlog=4096; proxy_pass 127.0.0.1:{up_port}; proxy_timeout 1h;",
                                      ctx.proxy_cpus, ng_port))
    ha = procs.add(start_haproxy(f"haproxy-{tag}", ha_port, f"backend be\n  mode tcp\n  server s1 127.0.0.1:{up_port}",
                                 "  mode tcp\n  default_backend be", ctx.proxy_cpus))
    yaml = weir_stream_yaml("tcp", "tcp", f"127.0.0.1:{we_port}", 'all: { rule: "HostSNI(`*`)", service: up }', "up", up_port)
    we = procs.add(start_weir(ctx.weir, f"weir-{tag}", we_port, yaml, ctx.proxy_cpus))
    return [(n, p, str(port)) for n, p, port in (("nginx", ng, ng_port), ("haproxy", ha, ha_port), ("weir", we, we_port))]

def run_redis_benchmark(port, ops, cpus, target):
    """redis-benchmark -P 16, SET then GET, ops of each; rps = both together."""
    out, machine, spent = timed(target, cpus, output(
        ["taskset", "-c", cpus, "timeout", "300", "redis-benchmark", "-h", "127.0.0.1", "-p", port,
         "-c", "50", "-n", str(ops), "-P", "16", "-t", "set,get", "--csv"]))
    rows = {r[0]: r for r in csv.reader(out.splitlines()) if r and r[0] in ("SET", "GET")}
    if len(rows) != 2:
        return no_answer(machine)
    seconds = sum(ops / float(r[1]) for r in rows.values())
    get = rows["GET"]
    return {"rps": 2 * ops / seconds, "requests": 2 * ops,
            "p50_ms": float(get[4]), "p90_ms": float(get[5]), "p99_ms": float(get[6]), "p999_ms": None,
            "max_ms": float(get[7]), "non_2xx": 0, "socket_errors": 0,
            "cpu_us_per_req": per_request(spent, 2 * ops), **machine}

def run_bulk(port, cpus, target, size_mb):
    """BULK_STREAMS concurrent curl downloads of size_mb through the proxy."""
    url = f"http://127.0.0.1:{port}/bulk.bin"

    def download():
        start = time.perf_counter()
        curls = [subprocess.Popen(["taskset", "-c", cpus, "curl", "-s", "-o", "/dev/null", "-w", "%{size_download} %{time_total}",
                                   "--max-time", "120", url], stdout=subprocess.PIPE, text=True) for _ in range(BULK_STREAMS)]
        results = [c.communicate()[0].split() for c in curls]
        return results, time.perf_counter() - start

    (results, elapsed), machine, spent = timed(target, cpus, download)
    want = size_mb << 20
    ok = [r for r in results if len(r) == 2 and int(r[0]) == want]
    times = sorted(float(r[1]) * 1000 for r in ok)
    gib = len(ok) * want / (1 << 30)
    return {"rps": len(ok) / elapsed, "requests": len(ok),
            "p50_ms": times[len(times) // 2] if times else 0, "p90_ms": times[-1] if times else 0,
            "p99_ms": times[-1] if times else 0, "p999_ms": None, "max_ms": times[-1] if times else 0,
            "non_2xx": 0, "socket_errors": BULK_STREAMS - len(ok),
            "cpu_us_per_req": per_request(spent, len(ok)), **machine,
            "mb_per_s": len(ok) * want / elapsed / 1e6, "cpu_s_per_gib": spent / gib if gib else None}

def run(ctx):
    out = {}
    redis_port = free_port()
    with Procs() as procs:
        procs.add(Proc("redis", [which("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no"], redis_port, ctx.load_cpus))
        targets = start_tcp_proxies(ctx, procs, "tcp-redis", redis_port)
        ops = 20000 if ctx.smoke else 500_000 * ctx.duration // 10 * 2
        out["redis-P16-c50"] = interleave("redis-P16-c50", targets,
                                          lambda port, proc: run_redis_benchmark(port, ops, ctx.load_cpus, proc), ctx.rounds)
        d = work_dir("bulk-files")
        size = (16 if ctx.smoke else BULK_FILE_MB) << 20
        big = os.path.join(d, "bulk.bin")
        if not os.path.exists(big) or os.path.getsize(big) != size:
            with open(big, "wb") as f:
                f.write(os.urandom(1 << 20) * (size >> 20))
        up_port = free_port()
        procs.add(start_nginx("upstream-bulk", up_port, f"""  sendfile on;
  server {{ listen 127.0.0.1:{up_port} backlog=4096; root {d}; location / {{ }} }}""", ctx.load_cpus))
        targets = start_tcp_proxies(ctx, procs, "tcp-bulk", up_port)
        label = f"bulk-{BULK_STREAMS}x{size >> 20}MB"
        out[label] = interleave(label, targets, lambda port, proc: run_bulk(port, ctx.load_cpus, proc, size >> 20),
                                ctx.rounds)
        return out
