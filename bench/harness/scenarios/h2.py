"""Downstream HTTP/2: h2load with 50 connections x 10 streams asking for a small direct answer,
over TLS (ALPN h2) and cleartext with prior knowledge (h2c), against nginx (`http2`) and
HAProxy (`proto h2` / `alpn h2`)."""
from harness.load import h2load_measure
from harness.peers import http_targets, make_bench_certificate, start_ping_peers, weir_certificate
from harness.procs import Procs
from harness.runner import interleave

NAME, ORDER, PEERS = "h2", 120, ("nginx", "haproxy")

def run(ctx):
    cert, key, both = make_bench_certificate()
    conns, streams = ctx.conn_levels[0], 10
    modes = {"tls": ("https", dict(nginx_listen=f" ssl http2 backlog=4096; ssl_certificate {cert}; ssl_certificate_key {key};",
                                   haproxy_bind=f" ssl crt {both} alpn h2,http/1.1", tls=weir_certificate(cert, key))),
             "h2c": ("http", dict(nginx_listen=" http2 backlog=4096;", haproxy_bind=" proto h2", h2c=True))}
    out = {}
    for mode, (scheme, settings) in modes.items():
        with Procs() as procs:
            peers = start_ping_peers(ctx, procs, f"h2-{mode}", nginx_http="  http2_max_concurrent_streams 128;\n", **settings)
            targets = http_targets("/ping", *peers, scheme=scheme)
            out[f"h2-{mode}-c{conns}x{streams}"] = interleave(f"h2-{mode}", targets, h2load_measure(ctx, conns, streams),
                                                              ctx.rounds)
    return out
