"""Fleets (issue 37): what sharing a rate limit through Redis costs a request.

- rate-limit-redis-c50: a limit that does not bind (100,000,000/s) kept in Redis (one script
  run per request on a local `redis-server`, pinned to the load core), against the same limit
  kept in the instance and against the plain route: the CPU per request and the latency (p99)
  that asking Redis adds. One weir worker each, interleaved.
"""
from harness.load import wrk_measure, wrk_script
from harness.peers import start_upstream, start_weir, start_weir_proxy, http_targets
from harness.procs import Proc, Procs, free_port
from harness.runner import interleave
from harness.scenarios.policy import limited_weir_yaml

NAME, ORDER, PEERS = "fleet", 76, ()


def run(ctx):
    conns = 50
    out = {}
    with Procs() as procs:
        up_port, redis_port = free_port(), free_port()
        procs.add(start_upstream(ctx, up_port))
        procs.add(Proc("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no"], redis_port, ctx.load_cpus))
        loose = "average: 100000000, burst: 100000000"
        port, local_port, plain_port = free_port(), free_port(), free_port()
        shared = procs.add(start_weir(ctx.weir, "weir-redis", port, limited_weir_yaml(
            port, up_port, conns, 1, f'{{ {loose}, redis: {{ endpoints: ["127.0.0.1:{redis_port}"] }} }}'),
            ctx.proxy_cpus))
        local = procs.add(start_weir(ctx.weir, "weir-local", local_port, limited_weir_yaml(
            local_port, up_port, conns, 1, f"{{ {loose} }}"), ctx.proxy_cpus))
        plain = procs.add(start_weir_proxy(ctx, "weir-plain", plain_port, up_port, conns))
        targets = http_targets("/", ("weir-redis", shared), ("weir-local", local), ("weir-plain", plain))
        out[f"rate-limit-redis-c{conns}"] = interleave("rate-limit-redis", targets,
                                                        wrk_measure(ctx, conns, wrk_script("plain")), ctx.rounds)

    return out
