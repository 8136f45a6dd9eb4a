"""Latency at a fixed rate (wrk2 `-R`): weir-bench at half of nginx's closed-loop maximum
(measured first), 50 connections."""
from harness.common import log
from harness.load import generator_measure, run_wrk, wrk_script
from harness.peers import start_proxies
from harness.procs import Procs
from harness.runner import interleave

NAME, ORDER, PEERS = "fixed-rate", 40, ("nginx", "haproxy")

def run(ctx):
    conns = 50
    with Procs() as procs:
        _, targets = start_proxies(ctx, procs, conns, "fixed")
        _, nginx, nginx_url = targets[0]
        log("  [fixed-rate] calibrating: nginx's closed-loop maximum with wrk")
        top = run_wrk(nginx_url, conns, max(1, ctx.duration // 2), wrk_script("plain"), ctx.load_cpus, nginx)["rps"]
        rate = max(100, int(top * 0.5))
        log(f"  [fixed-rate] nginx max {top:.0f} req/s; fixed rate {rate} req/s")
        res = interleave("fixed-rate", targets, generator_measure(ctx, rate, conns), ctx.rounds)
        res["_rate"] = rate
        return {f"fixed-rate-c{conns}": res}
