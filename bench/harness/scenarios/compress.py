"""Compression of a 24 KB JSON answer from the upstream for a client that asks for gzip (level 6
everywhere nginx and weir have levels); weir's zstd (levels 3 and 6) and brotli (4) beside it;
the body size each sends is reported."""
import http.client, json, os, random, urllib.parse

from harness.common import work_dir, write
from harness.load import run_wrk, wrk_script
from harness.peers import (http_targets, start_caddy, start_haproxy_proxy, start_nginx, start_nginx_proxy, start_weir,
                           weir_service, weir_yaml)
from harness.procs import Procs, free_port
from harness.runner import interleave

NAME, ORDER, PEERS = "compress", 70, ("nginx", "haproxy", "caddy")

def json_document(size):
    """A deterministic JSON API answer of about `size` bytes: records of ids, names, emails,
    scores, tags and timestamps, as an API returns them."""
    rng = random.Random(24)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    items, total = [], 2
    while total < size:
        i = len(items)
        item = {"id": 100000 + i, "name": f"{rng.choice(words)} {rng.choice(words)}",
                "email": f"user{rng.randrange(10**6)}@example.com", "score": round(rng.random() * 100, 3),
                "tags": rng.sample(words, 3), "active": rng.random() < 0.7,
                "created": f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00Z"}
        text = json.dumps(item)
        items.append(text)
        total += len(text) + 2
    return ("[" + ", ".join(items) + "]").encode()

def compressed_size(url, encoding):
    """The body size of one answer to `Accept-Encoding: encoding`, and its Content-Encoding."""
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", u.path + ("?" + u.query if u.query else ""), headers={"Accept-Encoding": encoding})
    r = c.getresponse()
    body = r.read()
    c.close()
    return len(body), r.getheader("content-encoding") or "identity"

def run(ctx):
    d = work_dir("compress-files")
    doc = json_document(24 * 1024)
    write(os.path.join(d, "data.json"), doc)
    conns = ctx.conn_levels[0]
    up_port, ng_port, ha_port, we_port = (free_port() for _ in range(4))
    with Procs() as procs:
        procs.add(start_nginx("upstream-compress", up_port,
                              f"""  server {{ listen 127.0.0.1:{up_port} backlog=4096; root {d}; types {{ application/json json; }} location / {{ }} }}""",
                              ctx.load_cpus))
        ng = procs.add(start_nginx_proxy(ctx, "nginx-compress", ng_port, up_port, conns,
                                         "  gzip on; gzip_comp_level 6; gzip_types application/json; gzip_min_length 1024; gzip_proxied any; gzip_vary on;\n"))
        ha = procs.add(start_haproxy_proxy(ctx, "haproxy-compress", ha_port, up_port,
                                           "\n  compression algo gzip\n  compression type application/json"))
        ca_port = free_port()
        ca = procs.add(start_caddy("caddy-compress", ca_port, f"  encode {{\n    gzip 6\n  }}\n  reverse_proxy 127.0.0.1:{up_port}", ctx.proxy_cpus))
        # /z6/ is zstd at level 6, the level where it is smaller than gzip 6 too.
        routers = ("  all:\n    rule: \"PathPrefix(`/`)\"\n    service: up\n    middlewares: [compress]\n"
                   "  z6:\n    rule: \"PathPrefix(`/z6/`)\"\n    service: up\n    middlewares: [strip-z6, zstd6]\n")
        yaml = weir_yaml(we_port, routers, weir_service(up_port, conns)) + \
            "middlewares:\n  compress: { compress: { algorithms: [gzip, zstd, br], level: { gzip: 6, br: 4, zstd: 3 } } }\n" \
            "  strip-z6: { strip_prefix: [/z6] }\n  zstd6: { compress: { algorithms: [zstd], level: { zstd: 6 } } }\n"
        we = procs.add(start_weir(ctx.weir, "weir-compress", we_port, yaml, ctx.proxy_cpus))
        path = "/data.json"
        targets = (http_targets(f"{path}?gzip", ("nginx", ng), ("haproxy", ha), ("caddy", ca), ("weir", we))
                   + http_targets(f"{path}?zstd", ("weir-zstd", we)) + http_targets(f"/z6{path}?zstd", ("weir-zstd6", we))
                   + http_targets(f"{path}?br", ("weir-br", we)))
        sizes = {}
        for name, _, url in targets:
            encoding = url.rsplit("?", 1)[1]
            size, got = compressed_size(url, encoding)
            if got != encoding:
                raise SystemExit(f"{name} answered {got} to Accept-Encoding: {encoding}")
            sizes[name] = {"encoding": encoding, "bytes": size}

        def measure(url, proc):
            encoding = url.rsplit("?", 1)[1]
            script = wrk_script(encoding, f'wrk.headers["Accept-Encoding"] = "{encoding}"\n')
            return run_wrk(url, conns, ctx.duration, script, ctx.load_cpus, proc)

        res = interleave(f"compress-c{conns}", targets, measure, ctx.rounds)
        res["_sizes"] = {"original": len(doc), **sizes}
        return {f"compress-c{conns}": res}
