"""A small direct answer: weir `respond` vs nginx `return 200` vs HAProxy `http-request return`."""
from harness.load import wrk_measure, wrk_script
from harness.peers import http_targets, start_ping_peers
from harness.procs import Procs
from harness.runner import interleave

NAME, ORDER, PEERS = "ping", 20, ("nginx", "haproxy")

def run(ctx):
    conns = ctx.conn_levels[0]
    with Procs() as procs:
        targets = http_targets("/ping", *start_ping_peers(ctx, procs, "ping"))
        measure = wrk_measure(ctx, conns, wrk_script("plain"))
        return {f"ping-c{conns}": interleave("ping", targets, measure, ctx.rounds)}
