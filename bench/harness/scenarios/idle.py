"""The memory side of 1,000s of connections: 9,000 keep-alive clients each make one request and
stay idle; RSS growth per connection, read after 5 s of idleness. Four kinds of client:
- plain: HTTP/1.1, the request proxied to the upstream;
- tls: HTTP/1.1 over TLS 1.3 (ALPN http/1.1), answered by the proxy itself;
- h2-tls: HTTP/2 over TLS 1.3 (ALPN h2), one stream, answered by the proxy itself;
- h2c: cleartext HTTP/2 with prior knowledge, the same.
What browsers hold open is the TLS and HTTP/2 kinds."""
import socket, ssl, struct, time

from harness.common import log
from harness.peers import make_bench_certificate, start_ping_peers, start_proxies, weir_certificate
from harness.procs import Procs
from harness.report import run_line, save

NAME, ORDER, PEERS = "idle", 50, ("nginx", "haproxy")
# 10,000 was the aim; this machine caps descriptors at 20,000 (hard limit) and HAProxy reserves
# two per maxconn, so 9,000 is the most all three peers can hold.
IDLE_CONNS = 9000
IDLE_SETTLE_SECONDS = 5.0
MODES = ("plain", "tls", "h2-tls", "h2c")


def read_one_response(sock):
    """Reads one small Content-Length response from a blocking socket; returns its status."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise OSError("closed before a response")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(4096)
        if not chunk:
            raise OSError("closed mid-body")
        rest += chunk
    return head.split(b" ", 2)[1]


def h2_frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def h2_get(sock, scheme):
    """One HTTP/2 GET /ping on stream 1 (the preface, empty SETTINGS, HEADERS), the server's
    SETTINGS acknowledged; returns the answer's `:status` as bytes once the stream ends."""
    # HPACK: :method GET (static 2), :scheme (6 http, 7 https), :path /ping and :authority
    # bench as literals with indexed names (4 and 1), never indexed.
    block = bytes([0x82, 0x86 if scheme == "http" else 0x87, 0x04, 5]) + b"/ping" + bytes([0x01, 5]) + b"bench"
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0) + h2_frame(1, 0x5, 1, block))
    buf, status = b"", None
    while True:
        while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("closed before the answer")
            buf += chunk
        length = int.from_bytes(buf[:3], "big")
        kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
        payload, buf = buf[9:9 + length], buf[9 + length:]
        if kind == 4 and not flags & 1:
            sock.sendall(h2_frame(4, 1, 0))
        elif kind == 7:
            raise OSError("GOAWAY")
        elif stream == 1 and kind == 1:
            # The first field of the answer: 0x88 is `:status 200` from the static table.
            status = b"200" if payload[:1] == b"\x88" else b"?"
            if flags & 1:
                return status
        elif stream == 1 and kind == 0 and flags & 1:
            return status


def client(mode, port, context):
    """A connection of `mode` that has made its one request; (socket, status)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if mode == "plain":
        sock.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
        return sock, read_one_response(sock)
    if mode in ("tls", "h2-tls"):
        sock = context[mode].wrap_socket(sock, server_hostname="bench.test")
    if mode == "tls":
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: bench\r\n\r\n")
        return sock, read_one_response(sock)
    return sock, h2_get(sock, "http" if mode == "h2c" else "https")


def tls_context(alpn):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.set_alpn_protocols([alpn])
    return context


def start_peers(ctx, procs, mode, n, cert):
    """The three peers for `mode`: [(name, process)]."""
    if mode == "plain":
        _, targets = start_proxies(ctx, procs, 64, "idle", maxconn=n + 500)
        return [(name, proc) for name, proc, _ in targets]
    cert_pem, key, both = cert
    settings = {
        "tls": dict(nginx_listen=f" ssl backlog=4096; ssl_certificate {cert_pem}; ssl_certificate_key {key}; ssl_protocols TLSv1.3;",
                    haproxy_bind=f" ssl crt {both} alpn http/1.1", tls=weir_certificate(cert_pem, key)),
        "h2-tls": dict(nginx_listen=f" ssl http2 backlog=4096; ssl_certificate {cert_pem}; ssl_certificate_key {key}; ssl_protocols TLSv1.3;",
                       haproxy_bind=f" ssl crt {both} alpn h2,http/1.1", tls=weir_certificate(cert_pem, key)),
        "h2c": dict(nginx_listen=" http2 backlog=4096;", haproxy_bind=" proto h2", h2c=True),
    }[mode]
    return start_ping_peers(ctx, procs, f"idle-{mode}", maxconn=n + 500, **settings)


def measure(name, proc, mode, n, context):
    warm_socks = []
    for _ in range(20):
        s, _ = client(mode, proc.port, context)
        warm_socks.append(s)
    for s in warm_socks:
        s.close()
    time.sleep(0.5)
    before = proc.rss_kb()
    socks, errors = [], 0
    for _ in range(n):
        try:
            s, status = client(mode, proc.port, context)
            if status != b"200":
                errors += 1
            socks.append(s)
        except OSError:
            errors += 1
    # Idle means idle for a while: weir parks a connection after a second without a request
    # and returns the freed pages a second or two later.
    time.sleep(IDLE_SETTLE_SECONDS)
    after = proc.rss_kb()
    for s in socks:
        s.close()
    per_conn = (after - before) / max(1, len(socks))
    log(f"  [idle] {mode:6} {name:8} {len(socks)} idle connections: RSS {before / 1024:.1f} -> {after / 1024:.1f} MB, "
        f"{per_conn:.2f} KB per connection, {errors} errors")
    return {"connections": len(socks), "errors": errors, "rss_before_mb": before / 1024,
            "rss_after_mb": after / 1024, "kb_per_conn": per_conn}


def run(ctx):
    """RSS growth per idle client connection of each kind, after one request each."""
    n = 500 if ctx.smoke else IDLE_CONNS
    cert = make_bench_certificate()
    context = {"tls": tls_context("http/1.1"), "h2-tls": tls_context("h2")}
    results = {}
    for mode in MODES:
        with Procs() as procs:
            for name, proc in start_peers(ctx, procs, mode, n, cert):
                key = name if mode == "plain" else f"{name} {mode}"
                results[key] = dict(measure(name, proc, mode, n, context), mode=mode, target=name)
    return results


def report(results, ctx, outdir):
    md = ["# idle", "",
          f"{run_line('idle')}: each proxy (one worker, pinned to core {ctx.proxy_cpus}) gets "
          f"{results['weir']['connections'] if 'weir' in results else 0} client connections of each kind, each "
          "after one request, left idle: `plain` HTTP/1.1 proxied to the upstream nginx; `tls` HTTP/1.1 over "
          "TLS 1.3; `h2-tls` HTTP/2 over TLS 1.3 and `h2c` cleartext HTTP/2, one stream each, answered by the "
          "proxy itself. Growth = (RSS with the connections open - RSS before) / connections.", "",
          "| kind | target | connections | errors | RSS before MB | RSS after MB | KB per connection |",
          "|---|---|---|---|---|---|---|"]
    for m in results.values():
        mode = m.get("mode", "plain")
        md.append(f"| {mode} | {m.get('target', 'weir')} | {m['connections']} | {m['errors']} | {m['rss_before_mb']:.1f} | "
                  f"{m['rss_after_mb']:.1f} | {m['kb_per_conn']:.2f} |")
    md.append("")
    for mode in MODES:
        suffix = "" if mode == "plain" else f" {mode}"
        w = results.get(f"weir{suffix}")
        for peer in ("nginx", "haproxy"):
            p = results.get(f"{peer}{suffix}")
            if w and p and p["kb_per_conn"] > 0:
                md.append(f"- {mode}: weir / {peer}, memory per idle connection {w['kb_per_conn'] / p['kb_per_conn']:.2f}×")
    save(outdir, "idle", md, {"scenario": "idle", "proxy_cpus": ctx.proxy_cpus, "results": results})
    log("\n".join(md))


def failures(results):
    return [f"idle/{t}: {m['errors']} errors" for t, m in results.items() if m["errors"]]
