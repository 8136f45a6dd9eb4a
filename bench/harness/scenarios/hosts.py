"""Host-header routing: 1,000 Host-routed routes (nginx: 1,000 `server` blocks; HAProxy: a host
map to 1,000 backends), each request for one of the 1,000 hosts at random; `weir-1route` is
weir with a single catch-all route."""
import os

from harness.common import WORK, write
from harness.load import wrk_measure, wrk_script
from harness.peers import (NGINX_PROXY_LOC, http_targets, nginx_upstream_block, start_haproxy, start_nginx,
                           start_upstream, start_weir, start_weir_proxy, weir_service, weir_yaml)
from harness.procs import Procs, free_port
from harness.runner import interleave

NAME, ORDER, PEERS = "hosts", 30, ("nginx", "haproxy")
HOSTS = 1000

def run(ctx):
    up_port, ng_port, ha_port, w1_port, wn_port = (free_port() for _ in range(5))
    conns = ctx.conn_levels[0]
    with Procs() as procs:
        procs.add(start_upstream(ctx, up_port))
        servers = "\n".join(f"  server {{ listen 127.0.0.1:{ng_port}{' backlog=4096' if i == 0 else ''}; server_name h{i}.bench; location / {{ {NGINX_PROXY_LOC} }} }}" for i in range(HOSTS))
        ng = procs.add(start_nginx("nginx-hosts", ng_port, nginx_upstream_block(up_port, conns) + "\n" + servers, ctx.proxy_cpus))
        mapfile = os.path.join(WORK, "hosts.map")
        os.makedirs(WORK, exist_ok=True)
        write(mapfile, "".join(f"h{i}.bench b{i}\n" for i in range(HOSTS)))
        backends = "\n".join(f"backend b{i}\n  server s1 127.0.0.1:{up_port}" for i in range(HOSTS))
        ha = procs.add(start_haproxy("haproxy-hosts", ha_port, backends,
                                     f"  use_backend %[req.hdr(host),lower,map_str({mapfile})]", ctx.proxy_cpus))
        w1 = procs.add(start_weir_proxy(ctx, "weir-1route", w1_port, up_port, conns))
        routers = "".join(f"  h{i}:\n    rule: \"Host(`h{i}.bench`)\"\n    service: up\n" for i in range(HOSTS))
        wn = procs.add(start_weir(ctx.weir, "weir-1000routes", wn_port, weir_yaml(wn_port, routers, weir_service(up_port, conns)),
                                  ctx.proxy_cpus))
        script = wrk_script("hosts", f"""math.randomseed(42)
request = function()
  return wrk.format(nil, nil, {{ ["Host"] = "h" .. math.random(0, {HOSTS - 1}) .. ".bench" }})
end
""")
        targets = http_targets("/", ("nginx", ng), ("haproxy", ha), ("weir-1route", w1), ("weir", wn))
        return {f"hosts-c{conns}": interleave("hosts", targets, wrk_measure(ctx, conns, script), ctx.rounds)}
