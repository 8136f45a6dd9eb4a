"""Downstream HTTP/3 (issue 39): weir against Debian's Caddy 2.6 (`GOMAXPROCS=1`), both on one
core, over QUIC with the bench certificate: a small direct answer and a proxied answer (to the
upstream nginx) at 50 connections x 10 streams, and a 10 MB download at 4 connections x 1
stream (throughput). Both keep up to 500 idle connections to the upstream, one per stream in
flight. For the record, weir's own HTTP/2 over TLS (h2load, the h2 scenario's
generator) on the same small answer.

The load generator is weir-bench's `--h3` mode, on quinn + h3 (the stack weir serves with):
Debian's h2load is built without HTTP/3, ngtcp2's example client is a fetching tool (a list of
URLs over one connection, no duration, no percentiles), and aioquic is Python, slower per
request than either server. One generator for every peer, so its cost per request is the same for each."""
import os, random

from harness.common import work_dir, write
from harness.load import h2load_measure, run_generator
from harness.peers import (BODY, make_bench_certificate, start_caddy, start_upstream, start_weir, weir_certificate,
                           weir_server, weir_service)
from harness.procs import Procs, free_port
from harness.report import measured
from harness.runner import interleave

NAME, ORDER, PEERS = "h3", 125, ("caddy",)
STREAMS = 10
DOWNLOAD = 10 * 1000 * 1000
DOWNLOAD_CONNS = 4

def weir_h3_yaml(port, cert, key, up_port, files, idle):
    """weir with one TLS entrypoint answering HTTP/3 too: /ping answered by weir, /proxy to the
    upstream (keeping up to `idle` connections to it), /big.bin from `files`."""
    return f"""{weir_server()}
entrypoints:
  web:
    address: "127.0.0.1:{port}"
    tls: {{ {weir_certificate(cert, key)} }}
    http3: {{ enabled: true }}
routers:
  ping:
    rule: "Path(`/ping`)"
    respond: {{ status: 200, body: "{BODY}", headers: {{ content-type: text/plain }} }}
  proxy:
    rule: "Path(`/proxy`)"
    service: up
  files:
    rule: "PathPrefix(`/`)"
    priority: 1
    static: {{ root: "{files}" }}
{weir_service(up_port, idle)}"""

CADDY_SITE = """  handle /ping {{
    header content-type text/plain
    respond "{body}" 200
  }}
  handle /proxy {{
    reverse_proxy 127.0.0.1:{up_port} {{
      transport http {{
        keepalive_idle_conns_per_host {idle}
      }}
    }}
  }}
  handle {{
    root * {files}
    file_server
  }}"""

def h3_measure(ctx, cert, conns, streams):
    """weir-bench --h3, `conns` connections x `streams` streams, for the round's duration."""
    # Caddy picks no certificate for a handshake without SNI, so both get the name.
    extra = ("--h3", "-m", str(streams), "--cacert", cert, "--server-name", "bench.test")
    return lambda url, proc: run_generator(ctx.bench, url, None, conns, ctx.duration, ctx.load_cpus, proc, extra)

def run(ctx):
    cert, key, _ = make_bench_certificate()
    conns = ctx.conn_levels[0]
    files = work_dir("h3-files")
    big = os.path.join(files, "big.bin")
    if not os.path.exists(big) or os.path.getsize(big) != DOWNLOAD:
        write(big, random.Random(39).randbytes(DOWNLOAD))
    up_port, ca_port, we_port = free_port(), free_port(), free_port()
    out = {}
    with Procs() as procs:
        procs.add(start_upstream(ctx, up_port))
        ca = procs.add(start_caddy("caddy-h3", ca_port, CADDY_SITE.format(body=BODY, up_port=up_port, files=files, idle=conns * STREAMS),
                                   ctx.proxy_cpus, tls=(cert, key)))
        we = procs.add(start_weir(ctx.weir, "weir-h3", we_port, weir_h3_yaml(we_port, cert, key, up_port, files, conns * STREAMS),
                                  ctx.proxy_cpus))
        def targets(path):
            return [("caddy", ca, f"https://127.0.0.1:{ca_port}{path}"), ("weir", we, f"https://127.0.0.1:{we_port}{path}")]
        small = h3_measure(ctx, cert, conns, STREAMS)
        out[f"h3-respond-c{conns}x{STREAMS}"] = interleave("h3-respond", targets("/ping"), small, ctx.rounds)
        out[f"h3-proxy-c{conns}x{STREAMS}"] = interleave("h3-proxy", targets("/proxy"), small, ctx.rounds)
        download = interleave("h3-download", targets("/big.bin"), h3_measure(ctx, cert, DOWNLOAD_CONNS, 1), ctx.rounds)
        for _, m in measured(download):
            m["mb_per_s"] = m["rps"] * DOWNLOAD / 1e6
        out[f"h3-download-10MB-c{DOWNLOAD_CONNS}"] = download
        # weir's HTTP/3 against its own HTTP/2 over TLS (ALPN h2, the same port's TCP side).
        over_h2 = h2load_measure(ctx, conns, STREAMS)
        # The query only tells the two apart here; both ask weir's /ping.
        own = [("weir", we, f"https://127.0.0.1:{we_port}/ping"), ("weir-h2", we, f"https://127.0.0.1:{we_port}/ping?h2")]
        out[f"h3-vs-h2-respond-c{conns}x{STREAMS}"] = interleave(
            "h3-vs-h2", own, lambda url, proc: (over_h2 if url.endswith("?h2") else small)(url, proc), ctx.rounds)
    return out
