"""UDP request/response: DNS queries from dnsperf through each proxy to dnsmasq (answering from
its own table), against nginx's stream module (HAProxy has no UDP proxy)."""
import os, time

from harness.common import WORK, which, work_dir, write
from harness.load import no_answer, output, per_request, timed
from harness.peers import start_nginx_stream, start_weir, weir_stream_yaml
from harness.procs import Proc, Procs, free_port
from harness.runner import interleave

NAME, ORDER, PEERS = "udp", 100, ("nginx",)

def run_dnsperf(port, duration, cpus, target):
    """dnsperf for `duration` seconds: 20 clients (source ports), up to 200 queries in flight."""
    out, machine, spent = timed(target, cpus, output(
        ["taskset", "-c", cpus, "dnsperf", "-s", "127.0.0.1", "-p", port, "-d",
         os.path.join(WORK, "dns-queries.txt"), "-l", str(duration), "-c", "20", "-q", "200"]))
    field = lambda name: next((l.split(":", 1)[1].split() for l in out.splitlines() if l.strip().startswith(name)), None)
    qps, completed, lost, latency = field("Queries per second"), field("Queries completed"), field("Queries lost"), field("Average Latency")
    if not qps or not completed:
        return no_answer(machine)
    done = int(completed[0])
    avg_ms = float(latency[0]) * 1000
    max_ms = float(latency[-1].rstrip(")")) * 1000
    # dnsperf reports the mean and the maximum only.
    return {"rps": float(qps[0]), "requests": done, "mean_ms": avg_ms, "p50_ms": None, "p90_ms": None, "p99_ms": None,
            "p999_ms": None, "max_ms": max_ms, "non_2xx": 0,
            # A few datagrams lost under saturation is UDP; a tenth is a failure.
            "socket_errors": int(lost[0]) if lost and int(lost[0]) > done // 10 else 0,
            "lost": int(lost[0]) if lost else None,
            "cpu_us_per_req": per_request(spent, done), **machine}

def run(ctx):
    write(os.path.join(WORK, "dns-queries.txt"), "".join(f"h{i}.weir.test A\n" for i in range(1000)))
    up_port, ng_port, we_port = free_port(), free_port(), free_port()
    d = work_dir("dnsmasq")
    with Procs() as procs:
        procs.add(Proc("dnsmasq", [which("dnsmasq"), "-k", "--bind-interfaces", "--listen-address=127.0.0.1",
                                   "--no-resolv", "--no-hosts", f"--port={up_port}", "--address=/weir.test/10.1.2.3",
                                   "--user=root", f"--pid-file={d}/dnsmasq.pid", "--cache-size=10000"],
                       None, ctx.load_cpus))
        time.sleep(0.3)
        ng = procs.add(start_nginx_stream("nginx-udp", f"listen 127.0.0.1:{ng_port} udp reuseport; proxy_pass 127.0.0.1:{up_port}; proxy_responses 1; proxy_timeout 30s;",
                                          ctx.proxy_cpus, events="worker_connections 20000;"))
        yaml = weir_stream_yaml("udp", "dns", f"127.0.0.1:{we_port}/udp", "dns: { service: dns }", "dns", up_port)
        we = procs.add(start_weir(ctx.weir, "weir-udp", None, yaml, ctx.proxy_cpus))
        time.sleep(0.5)
        targets = [("nginx", ng, str(ng_port)), ("weir", we, str(we_port))]
        return {"dns-c20-q200": interleave("dns-c20-q200", targets,
                                           lambda port, proc: run_dnsperf(port, ctx.duration, ctx.load_cpus, proc), ctx.rounds)}
