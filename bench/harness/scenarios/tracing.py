"""Keep-alive proxying with OpenTelemetry tracing: `weir` without `server.tracing` against
`weir-trace-0` (configured, `sample_rate: 0`), `weir-trace-0.01` and `weir-trace-1`, each
exporting over OTLP/HTTP to a collector on the load core that reads and answers every export
(docs/tracing.md; the issue's bounds: 1.01x, 1.03x and 1.15x the CPU per request)."""
from harness.load import wrk_measure, wrk_script
from harness.peers import http_targets, start_upstream, start_weir_proxy
from harness.procs import Proc, Procs, free_port
from harness.runner import interleave

NAME, ORDER, PEERS = "tracing", 175, ()

# Answers every POST with 200 and an empty body, as a collector takes an export.
COLLECTOR = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Collector(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Collector).serve_forever()
"""

RATES = ("0", "0.01", "1")


def run(ctx):
    conns = ctx.conn_levels[0]
    label = f"tracing-c{conns}"
    with Procs() as procs:
        up_port, collector_port = free_port(), free_port()
        procs.add(start_upstream(ctx, up_port))
        procs.add(Proc("collector", ["python3", "-c", COLLECTOR, str(collector_port)],
                       collector_port, ctx.load_cpus))
        peers = [("weir", procs.add(start_weir_proxy(ctx, "weir-tracing-off", free_port(), up_port, conns)))]
        for rate in RATES:
            tracing = (f'tracing: {{ otlp: {{ endpoint: "http://127.0.0.1:{collector_port}" }}, '
                       f'sample_rate: {rate}, max_queue: 65536 }}, ')
            name = f"weir-trace-{rate}"
            peers.append((name, procs.add(start_weir_proxy(ctx, name, free_port(), up_port, conns,
                                                           server=tracing))))
        measure = wrk_measure(ctx, conns, wrk_script("plain"))
        return {label: interleave(label, http_targets("/", *peers), measure, ctx.rounds)}
