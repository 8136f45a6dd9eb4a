"""gRPC calls through the gateway to `weir-grpc-upstream` over cleartext HTTP/2, against nginx
`grpc_pass` (upstream keepalive) and HAProxy (`proto h2` both sides):

- grpc-unary: a 100-byte message echoed, h2load with 50 connections x 10 streams posting the
  gRPC-framed message;
- grpc-stream: server streaming, the same message answered with 1,000 messages (each in a DATA
  frame of its own, 105 KB a call), 10 connections x 10 streams: calls/s, and the CPU per call;
  also weir with one call per upstream connection (`weir-1-per-conn`, the service's
  `http2.max_concurrent_streams: 1`), which is how nginx's grpc_pass calls the upstream."""
import os

from harness.common import WORK, write
from harness.load import h2load_measure
from harness.peers import WEIR_CATCH_ALL, http_targets, start_haproxy, start_nginx, start_weir, weir_yaml
from harness.procs import Proc, Procs, free_port
from harness.runner import interleave

NAME, ORDER, PEERS = "grpc", 130, ("nginx", "haproxy")

def run(ctx):
    conns, streams = ctx.conn_levels[0], 10
    payload = b"x" * 100
    message = write(os.path.join(WORK, "grpc-message.bin"), b"\x00" + len(payload).to_bytes(4, "big") + payload)
    up_port, ng_port, ha_port, we_port = (free_port() for _ in range(4))
    with Procs() as procs:
        upstream_bin = os.path.join(os.path.dirname(ctx.bench), "weir-grpc-upstream")
        procs.add(Proc("grpc-upstream", [upstream_bin, f"127.0.0.1:{up_port}"], up_port, ctx.load_cpus))
        ng = procs.add(start_nginx("nginx-grpc", ng_port, f"""  upstream grpcup {{ server 127.0.0.1:{up_port}; keepalive 64; }}
  http2_max_concurrent_streams 128;
  server {{ listen 127.0.0.1:{ng_port} http2 backlog=4096; location / {{ grpc_pass grpc://grpcup; }} }}""", ctx.proxy_cpus))
        ha = procs.add(start_haproxy("haproxy-grpc", ha_port, f"backend be\n  server s1 127.0.0.1:{up_port} proto h2",
                                     "  default_backend be", ctx.proxy_cpus, bind_extra=" proto h2"))
        yaml = weir_yaml(we_port, WEIR_CATCH_ALL,
                         f'services:\n  up:\n    protocol: h2c\n    servers: [{{ url: "http://127.0.0.1:{up_port}" }}]\n', h2c=True)
        we = procs.add(start_weir(ctx.weir, "weir-grpc", we_port, yaml, ctx.proxy_cpus))
        # The same weir with one call per upstream connection, as nginx's grpc_pass makes them:
        # the h2 crate's server under weir-grpc-upstream spends more per message on a connection
        # carrying many streams, and on one core with the load generator it sets the pace.
        one_port = free_port()
        one_yaml = weir_yaml(one_port, WEIR_CATCH_ALL,
                             f'services:\n  up:\n    protocol: h2c\n    http2: {{ max_concurrent_streams: 1 }}\n'
                             f'    servers: [{{ url: "http://127.0.0.1:{up_port}" }}]\n', h2c=True)
        one = procs.add(start_weir(ctx.weir, "weir-grpc-one", one_port, one_yaml, ctx.proxy_cpus))
        targets = http_targets("/bench.Echo/Unary", ("nginx", ng), ("haproxy", ha), ("weir", we))
        grpc_headers = ("-d", message, "-H", "content-type: application/grpc", "-H", "te: trailers")
        measure = h2load_measure(ctx, conns, streams, grpc_headers)
        out = {f"grpc-unary-c{conns}x{streams}": interleave("grpc", targets, measure, ctx.rounds)}
        stream_conns = min(conns, 10)
        targets = http_targets("/bench.Echo/Stream", ("nginx", ng), ("haproxy", ha), ("weir", we),
                               ("weir-1-per-conn", one))
        measure = h2load_measure(ctx, stream_conns, streams, grpc_headers)
        out[f"grpc-stream-c{stream_conns}x{streams}"] = interleave("grpc-stream", targets, measure, ctx.rounds)
        return out
