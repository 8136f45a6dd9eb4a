"""Cache hits on an 8 KB and a 100 KB object (max-age an hour) at 50 connections, through nginx
`proxy_cache` (with `open_file_cache`), Varnish (`malloc`) and weir's cache, measured with wrk
and with weir-bench closed loop `--discard-body`; then the miss path, every request a new key,
against weir's plain proxy and nginx's miss."""
import os, random, shutil, urllib.request

from harness.common import WORK, log, which, work_dir, write
from harness.load import generator_measure, run_wrk, wrk_measure, wrk_script
from harness.peers import (NGINX_PROXY_LOC, config, http_targets, nginx_upstream_block, start_nginx, start_weir,
                           start_weir_proxy, weir_service, weir_yaml)
from harness.procs import Proc, Procs, free_port
from harness.runner import interleave

NAME, ORDER, PEERS = "cache", 140, ("nginx", "varnish")
CACHE_OBJECTS = {"obj8k": 8 * 1024, "obj100k": 100 * 1024}
# How long each target takes fresh keys before the miss rounds (see run).
MISS_FILL_SECONDS = 8

def start_varnish(name, port, up_port, cpus):
    """Varnish (Debian's) with `malloc` storage and the built-in VCL, caching what the origin's
    Cache-Control allows; its manager and cache child both count."""
    d, vcl = config(name, "default.vcl", f"""vcl 4.1;
backend default {{ .host = "127.0.0.1"; .port = "{up_port}"; }}
""")
    return Proc(name, [which("varnishd"), "-F", "-a", f"127.0.0.1:{port}", "-f", vcl, "-s", "malloc,512m",
                       "-n", d, "-p", "thread_pools=1"], port, cpus)

def check_hits(name, targets):
    """Warms each cache, and checks that it answers from its store."""
    for target, _, url in targets:
        for _ in range(3):
            with urllib.request.urlopen(url) as answer:
                answer.read()
                # nginx: HIT; weir: `weir; hit; ...`; Varnish: two ids in X-Varnish.
                seen = answer.headers.get("cache-status") or answer.headers.get("x-varnish", "")
        if not ("HIT" in seen or "; hit" in seen or len(seen.split()) == 2):
            raise SystemExit(f"{target} does not answer {name} from its cache: {seen!r}")

def run(ctx):
    d = work_dir("cache-origin")
    rng = random.Random(10)
    for name, size in CACHE_OBJECTS.items():
        write(os.path.join(d, name), rng.randbytes(size))
    up_port, ng_port, va_port, we_port, wp_port = (free_port() for _ in range(5))
    conns = ctx.conn_levels[0]
    with Procs() as procs:
        procs.add(start_nginx("cache-upstream", up_port, f"""  server {{ listen 127.0.0.1:{up_port} backlog=4096; root {d};
    location / {{ add_header cache-control "max-age=3600"; }} }}""", ctx.load_cpus))
        cache_dir = os.path.join(WORK, "nginx-cache", "store")
        shutil.rmtree(cache_dir, ignore_errors=True)
        # sendfile without tcp_nopush: with TCP_CORK, nginx stalled 40 ms (delayed ACK) on every
        # 100 KB hit (1,900 req/s against 26,700 without it), which is no fair peer.
        ng = procs.add(start_nginx("nginx-cache", ng_port, nginx_upstream_block(up_port, conns) + f"""
  sendfile on; tcp_nopush off;
  open_file_cache max=20000 inactive=60s; open_file_cache_valid 60s;
  proxy_cache_path {cache_dir} levels=1:2 keys_zone=main:64m max_size=2g inactive=1h use_temp_path=off;
  server {{ listen 127.0.0.1:{ng_port} backlog=4096;
    location / {{ {NGINX_PROXY_LOC} proxy_cache main; proxy_cache_lock on; add_header cache-status $upstream_cache_status; }} }}""",
                                   ctx.proxy_cpus))
        va = procs.add(start_varnish("varnish-cache", va_port, up_port, ctx.proxy_cpus))
        cached = "  all:\n    rule: \"PathPrefix(`/`)\"\n    service: up\n    cache: main\n"
        yaml = weir_yaml(we_port, cached, weir_service(up_port, conns),
                         head="caches:\n  main: { memory: 512MiB, max_object_size: 8MiB }\n")
        we = procs.add(start_weir(ctx.weir, "weir-cache", we_port, yaml, ctx.proxy_cpus))
        wp = procs.add(start_weir_proxy(ctx, "weir-proxy", wp_port, up_port, conns))
        out = {}
        script = wrk_script("plain")
        for name in CACHE_OBJECTS:
            targets = http_targets(f"/{name}", ("nginx", ng), ("varnish", va), ("weir", we))
            check_hits(name, targets)
            label = f"cache-hit-{name[3:]}"
            out[f"{label}-c{conns}"] = interleave(label, targets, wrk_measure(ctx, conns, script), ctx.rounds)
            # The same hits with a client that drops bodies in the kernel (weir-bench closed
            # loop, --discard-body): wrk's 8 KB reads of a 100 KB body held its core at 98%,
            # so the table above measures wrk as much as the servers.
            out[f"{label}-c{conns}-discard"] = interleave(f"{label}-discard", targets,
                                                          generator_measure(ctx, None, conns, ("--discard-body",)),
                                                          ctx.rounds)
        # The miss path: weir with the cache (every answer stored) against weir without it.
        # Every request a key no run asked for before.
        misses = wrk_script("fresh-keys", """counter = 0
stamp = string.format("%d-%d", os.time(), math.random(0, 1000000))
request = function()
  counter = counter + 1
  return wrk.format(nil, string.format("/obj8k?k=%s-%d", stamp, counter))
end
""")
        targets = http_targets("/", ("weir-proxy", wp), ("weir-miss", we), ("nginx-miss", ng))
        # Each target first takes fresh keys for a while, so the caches are full before the
        # rounds, as a cache in service is: a round then measures a miss that stores one
        # answer and evicts another, not one that also faults in memory fresh from the OS
        # (512 MiB fills in about 3 s at these rates).
        for name, proc, url in targets:
            log(f"  [cache-miss-8k] filling {name}'s store first")
            run_wrk(url, conns, 1 if ctx.smoke else MISS_FILL_SECONDS, misses, ctx.load_cpus, proc)
        out[f"cache-miss-8k-c{conns}"] = interleave("cache-miss-8k", targets, wrk_measure(ctx, conns, misses), ctx.rounds)
        return out
