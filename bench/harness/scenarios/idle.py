"""The memory side of 1,000s of connections: 9,000 keep-alive clients each make one proxied
request and stay idle; RSS growth per connection, read after 5 s of idleness."""
import socket, time

from harness.common import log
from harness.peers import start_proxies
from harness.procs import Procs
from harness.report import run_line, save

NAME, ORDER, PEERS = "idle", 50, ("nginx", "haproxy")
# 10,000 was the aim; this machine caps descriptors at 20,000 (hard limit) and HAProxy reserves
# two per maxconn, so 9,000 is the most all three peers can hold.
IDLE_CONNS = 9000
IDLE_SETTLE_SECONDS = 5.0

def read_one_response(sock):
    """Reads one small Content-Length response (the upstream's BODY) from a blocking socket."""
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

def run(ctx):
    """RSS growth per idle keep-alive client connection, after one proxied request each."""
    n = 500 if ctx.smoke else IDLE_CONNS
    results = {}
    with Procs() as procs:
        _, targets = start_proxies(ctx, procs, 64, "idle", maxconn=n + 500)
        for name, proc, _ in targets:
            request = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
            warm = socket.create_connection(("127.0.0.1", proc.port))
            for _ in range(20):
                warm.sendall(request)
                read_one_response(warm)
            warm.close()
            time.sleep(0.5)
            before = proc.rss_kb()
            socks, errors = [], 0
            for _ in range(n):
                try:
                    s = socket.create_connection(("127.0.0.1", proc.port), timeout=10)
                    s.sendall(request)
                    if read_one_response(s) != b"200":
                        errors += 1
                    socks.append(s)
                except OSError:
                    errors += 1
            # Idle means idle for a while: weir parks a connection after a second without a
            # request and returns the freed pages a second or two later.
            time.sleep(IDLE_SETTLE_SECONDS)
            after = proc.rss_kb()
            for s in socks:
                s.close()
            per_conn = (after - before) / max(1, len(socks))
            results[name] = {"connections": len(socks), "errors": errors, "rss_before_mb": before / 1024,
                             "rss_after_mb": after / 1024, "kb_per_conn": per_conn}
            log(f"  [idle] {name:8} {len(socks)} idle connections: RSS {before / 1024:.1f} -> {after / 1024:.1f} MB, "
                f"{per_conn:.2f} KB per connection, {errors} errors")
    return results

def report(results, ctx, outdir):
    md = ["# idle", "",
          f"{run_line('idle')}: each proxy (one worker, "
          f"pinned to core {ctx.proxy_cpus}) gets {results['weir']['connections'] if 'weir' in results else 0} keep-alive "
          "client connections, each after one request proxied to the upstream nginx, left idle. "
          "Growth = (RSS with the connections open - RSS before) / connections.", "",
          "| target | connections | errors | RSS before MB | RSS after MB | KB per connection |",
          "|---|---|---|---|---|---|"]
    for name, m in results.items():
        md.append(f"| {name} | {m['connections']} | {m['errors']} | {m['rss_before_mb']:.1f} | {m['rss_after_mb']:.1f} | {m['kb_per_conn']:.2f} |")
    md.append("")
    w = results.get("weir")
    for peer in ("nginx", "haproxy"):
        p = results.get(peer)
        if w and p and p["kb_per_conn"] > 0:
            md.append(f"- weir / {peer}: memory per idle connection {w['kb_per_conn'] / p['kb_per_conn']:.2f}×")
    save(outdir, "idle", md, {"scenario": "idle", "proxy_cpus": ctx.proxy_cpus, "results": results})
    log("\n".join(md))

def failures(results):
    return [f"idle/{t}: {m['errors']} errors" for t, m in results.items() if m["errors"]]
