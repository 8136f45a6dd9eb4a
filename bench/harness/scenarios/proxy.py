"""Keep-alive proxying at 50 and 1000 connections; `direct` is wrk against the upstream itself;
`weir-nometrics` is weir with `server.metrics: false`, for the cost of the per-router and
per-service counting."""
from harness.load import wrk_measure, wrk_script
from harness.peers import http_targets, start_proxies, start_weir_proxy
from harness.procs import Procs, free_port
from harness.runner import interleave

NAME, ORDER, PEERS = "proxy", 10, ("nginx", "haproxy")

def run(ctx):
    out = {}
    for conns in ctx.conn_levels:
        label = f"proxy-c{conns}"
        with Procs() as procs:
            up_port, targets = start_proxies(ctx, procs, conns, "proxy")
            nm_port = free_port()
            nm = procs.add(start_weir_proxy(ctx, "weir-nometrics", nm_port, up_port, conns, server="metrics: false, "))
            measure = wrk_measure(ctx, conns, wrk_script("plain"))
            targets = ([("direct", None, f"http://127.0.0.1:{up_port}/")] + targets
                       + http_targets("/", ("weir-nometrics", nm)))
            out[label] = interleave(label, targets, measure, ctx.rounds)
    return out
