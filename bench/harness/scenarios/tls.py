"""HTTPS termination, TLS 1.3 with one ECDSA P-256 certificate: keep-alive proxying at 50
connections (`tls-keepalive`), and a new connection, so a full handshake, per request
(`tls-handshake`)."""
from harness.load import wrk_measure, wrk_script
from harness.peers import (NGINX_PROXY_LOC, http_targets, make_bench_certificate, nginx_upstream_block,
                           start_haproxy_proxy, start_nginx, start_upstream, start_weir_proxy, weir_certificate)
from harness.procs import Procs, free_port
from harness.runner import interleave

NAME, ORDER, PEERS = "tls", 60, ("nginx", "haproxy")

def run(ctx):
    cert, key, both = make_bench_certificate()
    conns = ctx.conn_levels[0]
    up_port, ng_port, ha_port, we_port = (free_port() for _ in range(4))
    with Procs() as procs:
        procs.add(start_upstream(ctx, up_port))
        ng = procs.add(start_nginx("nginx-tls", ng_port, nginx_upstream_block(up_port, conns) +
                                   f"""\n  ssl_protocols TLSv1.3; ssl_session_cache shared:SSL:10m;
  server {{ listen 127.0.0.1:{ng_port} ssl backlog=4096; ssl_certificate {cert}; ssl_certificate_key {key}; location / {{ {NGINX_PROXY_LOC} }} }}""",
                                   ctx.proxy_cpus))
        ha = procs.add(start_haproxy_proxy(ctx, "haproxy-tls", ha_port, up_port, bind_extra=f" ssl crt {both} ssl-min-ver TLSv1.3"))
        we = procs.add(start_weir_proxy(ctx, "weir-tls", we_port, up_port, conns,
                                        tls=weir_certificate(cert, key) + ', min_version: "1.3"'))
        targets = http_targets("/", ("nginx", ng), ("haproxy", ha), ("weir", we), scheme="https")
        out = {}
        # tls-handshake: a new connection (and so a full TLS handshake) for every request.
        for label, script in (("tls-keepalive", wrk_script("plain")),
                              ("tls-handshake", wrk_script("close", 'wrk.headers["Connection"] = "close"\n'))):
            out[f"{label}-c{conns}"] = interleave(label, targets, wrk_measure(ctx, conns, script), ctx.rounds)
        return out
