"""OpenResty's Lua (issue 36, seed 003): the same scripts in nginx with Debian's
libnginx-mod-http-lua (`content_by_lua_block`, `access_by_lua_block`) and in weir (its `lua`
action and middleware), one worker each.

- lua-hello: `ngx.say("hello world")`.
- lua-1m: a 1 MB body built with `string.rep` at each request.
- lua-access: an access script (reading `ngx.var.uri`) in front of a proxied route.
- lua-redis-incr: Debian's lua-resty-redis (`lua-nginx-redis`, unchanged) sending INCR to a
  local `redis-server` (pinned to the load cores) per request, its connection kept alive in
  the worker's pool (`set_keepalive`) between requests.
"""
import urllib.request

from harness.load import wrk_measure, wrk_script
from harness.peers import (NGINX_LUA_MODULES, NGINX_PROXY_LOC, http_targets, nginx_http, nginx_upstream_block,
                           start_nginx_conf, start_upstream, start_weir, weir_service, weir_yaml)
from harness.procs import Proc, Procs, free_port
from harness.report import measured
from harness.runner import interleave

NAME, ORDER, PEERS = "lua", 78, ("nginx",)
HELLO = "ngx.say('hello world')"
ONE_MB = "ngx.print(string.rep('x', 1048576))"
ACCESS = "if ngx.var.uri == '/forbidden' then return ngx.exit(403) end"
LUA_PATH = "/usr/share/lua/5.1/?.lua;;"


def redis_incr(port, pool):
    """lua-resty-redis's INCR on Redis at `port`, the connection back to a pool of `pool`."""
    return (f"local red = require('nginx.redis'):new() red:set_timeout(1000) "
            f"local ok, err = red:connect('127.0.0.1', {port}) "
            f"if not ok then ngx.status = 500 ngx.say(err) return end "
            f"local n, err = red:incr('hits') "
            f"if not n then ngx.status = 500 ngx.say(err) return end "
            f"red:set_keepalive(10000, {pool}) ngx.say(n)")


def run(ctx):
    conns = ctx.conn_levels[0]
    out = {}
    with Procs() as procs:
        up_port, ng_port, we_port, redis_port = free_port(), free_port(), free_port(), free_port()
        procs.add(start_upstream(ctx, up_port))
        procs.add(Proc("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no"], redis_port, ctx.load_cpus))
        incr = redis_incr(redis_port, max(conns, 64))
        ng = procs.add(start_nginx_conf("nginx-lua", ng_port, ctx.proxy_cpus, nginx_http("nginx-lua", f"""lua_package_path "{LUA_PATH}";
{nginx_upstream_block(up_port, conns)}
  server {{
    listen 127.0.0.1:{ng_port} backlog=4096;
    location = /hello {{ content_by_lua_block {{ {HELLO} }} }}
    location = /1m {{ content_by_lua_block {{ {ONE_MB} }} }}
    location /proxied {{ access_by_lua_block {{ {ACCESS} }} {NGINX_PROXY_LOC} }}
    location = /incr {{ content_by_lua_block {{ {incr} }} }}
  }}"""), modules=NGINX_LUA_MODULES))
        routers = f"""  hello:
    rule: "Path(`/hello`)"
    lua: {{ content: "{HELLO}" }}
  one-mb:
    rule: "Path(`/1m`)"
    lua: {{ content: "{ONE_MB}" }}
  incr:
    rule: "Path(`/incr`)"
    lua: {{ content: "{incr}" }}
  proxied:
    rule: "PathPrefix(`/proxied`)"
    middlewares: [gate]
    service: up
  jit:
    rule: "Path(`/jit`)"
    lua: {{ content: "ngx.say(jit.status() and 'on' or 'off')" }}
"""
        gate = f"""middlewares:
  gate:
    lua: {{ access: "{ACCESS}" }}
"""
        we = procs.add(start_weir(ctx.weir, "weir-lua", we_port,
                                  weir_yaml(we_port, routers, gate + weir_service(up_port, conns),
                                            head=f'lua: {{ package_path: "{LUA_PATH}" }}\n'), ctx.proxy_cpus))
        # A target directory built before .cargo/config.toml's LuaJIT defines keeps a LuaJIT
        # whose compiled loops ignore the watchdog, and weir then turns the JIT off: a slower
        # weir than the code makes, measured as if it were the code's.
        jit = urllib.request.urlopen(f"http://127.0.0.1:{we_port}/jit").read().decode().strip()
        if jit != "on":
            raise SystemExit("weir's LuaJIT compiler is off (a stale mlua-sys build: "
                             "`cargo clean --release -p mlua-sys`); not measuring")
        for label, path in (("lua-hello", "/hello"), ("lua-1m", "/1m"), ("lua-access", "/proxied/"),
                            ("lua-redis-incr", "/incr")):
            targets = http_targets(path, ("nginx", ng), ("weir", we))
            res = interleave(f"{label}-c{conns}", targets, wrk_measure(ctx, conns, wrk_script("plain")), ctx.rounds)
            if label == "lua-1m":
                for _, m in measured(res):
                    m["mb_per_s"] = m["rps"] * (1 << 20) / 1e6
            out[f"{label}-c{conns}"] = res
    return out
