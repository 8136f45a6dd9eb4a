"""File serving: an 8 KB html page, a 1 MB file, and 10,000 distinct 4 KB files requested at
random; nginx with sendfile and open_file_cache (with the seed's tcp_nopush, and without it),
Caddy's file_server, weir's static action, each serving the same folder."""
import os, random

from harness.common import work_dir, write
from harness.load import wrk_measure, wrk_script
from harness.peers import http_targets, start_caddy, start_nginx, start_weir, weir_yaml
from harness.procs import Procs, free_port
from harness.report import measured
from harness.runner import interleave

NAME, ORDER, PEERS = "static", 80, ("nginx", "caddy")
STATIC_MANY = 10000

def make_files(ctx):
    """The folder every peer serves."""
    d = work_dir("static-files")
    many = work_dir(os.path.join("static-files", "many"))
    rng = random.Random(3)
    write(os.path.join(d, "page.html"), (b"<!DOCTYPE html><html><body>" + b"<p>weir static bench</p>\n" * 400)[:8192])
    write(os.path.join(d, "big.bin"), rng.randbytes(1 << 20))
    for i in range(200 if ctx.smoke else STATIC_MANY):
        f = os.path.join(many, f"f{i:04d}.txt")
        if not os.path.exists(f):
            write(f, f"file {i}\n".encode() * (4096 // len(f"file {i}\n")))
    return d

def run(ctx):
    d = make_files(ctx)
    ng_port, ca_port, we_port = free_port(), free_port(), free_port()
    with Procs() as procs:
        def static_nginx(name, port, nopush):
            return procs.add(start_nginx(name, port, f"""  sendfile on; tcp_nopush {nopush};
  open_file_cache max=20000 inactive=60s; open_file_cache_valid 60s; open_file_cache_errors on;
  types {{ text/html html; text/plain txt; application/octet-stream bin; }}
  server {{ listen 127.0.0.1:{port} backlog=4096; root {d}; location / {{ }} }}""", ctx.proxy_cpus))
        ng = static_nginx("nginx-static", ng_port, "on")
        # The same nginx without tcp_nopush: on kernel 6.18 a corked sendfile cost 2-3x the CPU
        # for files of 100 KB and more, so nginx's best config here is without it.
        ng_nc_port = free_port()
        ng_nc = static_nginx("nginx-static-no-cork", ng_nc_port, "off")
        ca = procs.add(start_caddy("caddy-static", ca_port, f"  root * {d}\n  file_server", ctx.proxy_cpus))
        # The same open-file cache validity as nginx's open_file_cache_valid.
        yaml = weir_yaml(we_port, f"  files:\n    rule: \"PathPrefix(`/`)\"\n    static: {{ root: \"{d}\" }}\n",
                         server="open_file_cache: { max: 20000, valid: 60s }, ")
        we = procs.add(start_weir(ctx.weir, "weir-static", we_port, yaml, ctx.proxy_cpus))
        conns = ctx.conn_levels[0]
        many = wrk_script("many", f"""math.randomseed(7)
request = function()
  return wrk.format(nil, string.format("/many/f%04d.txt", math.random(0, {STATIC_MANY - 1})))
end
""") if not ctx.smoke else None
        out = {}
        # A smoke run has 200 of the many files, and asks for one of them.
        for label, path, script in (("static-8k", "/page.html", None), ("static-1m", "/big.bin", None),
                                    ("static-many", "/many/f0001.txt" if ctx.smoke else "/", many)):
            targets = http_targets(path, ("nginx", ng), ("nginx-no-cork", ng_nc), ("caddy", ca), ("weir", we))
            measure = wrk_measure(ctx, conns, script or wrk_script("plain"))
            res = interleave(f"{label}-c{conns}", targets, measure, ctx.rounds)
            if label == "static-1m":
                for _, m in measured(res):
                    m["mb_per_s"] = m["rps"] * (1 << 20) / 1e6
            out[f"{label}-c{conns}"] = res
        return out
