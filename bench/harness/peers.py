"""The servers under test and their configs, written into bench/work/NAME/: nginx (http and
stream), HAProxy, Caddy, weir, and the upstream nginx they proxy to."""
import os, subprocess

from harness.common import WORK, sh, which, work_dir, write
from harness.procs import Proc, free_port

BODY = "x" * 128  # upstream response body: a small API answer
NGINX_STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"
# Debian's libnginx-mod-http-lua (with the development kit it needs), for the lua scenario.
NGINX_LUA_MODULES = ("/usr/lib/nginx/modules/ndk_http_module.so", "/usr/lib/nginx/modules/ngx_http_lua_module.so")
NGINX_EVENTS = "worker_connections 20000; multi_accept on;"

def config(name, filename, text):
    """Writes bench/work/NAME/FILENAME; returns (the folder, the file)."""
    d = work_dir(name)
    return d, write(os.path.join(d, filename), text)

# ---------------------------------------------------------------- nginx

def start_nginx_conf(name, port, cpus, main, load_stream=False, events=NGINX_EVENTS, modules=()):
    """nginx (one worker, in the foreground) with `main` (an `http` or `stream` block) as its
    config's main part; `modules` are more dynamic modules' paths to load."""
    return Proc(name, nginx_command(name, main, load_stream, events, modules), port, cpus)

def nginx_command(name, main, load_stream=False, events=NGINX_EVENTS, modules=()):
    """The command running nginx as start_nginx_conf does, its config written."""
    d = work_dir(name)
    module = f"load_module {NGINX_STREAM_MODULE};\n" if load_stream else ""
    module += "".join(f"load_module {m};\n" for m in modules)
    _, path = config(name, "nginx.conf", f"""{module}daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 65535;
pid {d}/nginx.pid;
error_log {d}/error.log crit;
events {{ {events} }}
{main}
""")
    return [which("nginx"), "-c", path, "-p", d]

def start_nginx(name, port, body_http, cpus):
    return start_nginx_conf(name, port, cpus, nginx_http(name, body_http))

def nginx_http(name, body_http):
    """start_nginx's `http` block around `body_http`."""
    d = os.path.join(WORK, name)
    return f"""http {{
  access_log off;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
  uwsgi_temp_path {d}; scgi_temp_path {d};
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  server_names_hash_max_size 8192;
  server_names_hash_bucket_size 128;
  default_type text/plain;
{body_http}
}}"""

def start_nginx_stream(name, server, cpus, port=None, events=NGINX_EVENTS):
    """nginx's stream module with one `server { SERVER }`; `port` None for UDP."""
    return start_nginx_conf(name, port, cpus, f"stream {{ server {{ {server} }} }}", load_stream=True, events=events)

def nginx_upstream_block(up_port, conns):
    return f"""  upstream up {{ server 127.0.0.1:{up_port}; keepalive {max(conns, 64)}; keepalive_requests 1000000; keepalive_timeout 75s; }}"""

NGINX_PROXY_LOC = """proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host $host; proxy_buffering on;"""

def start_nginx_proxy(ctx, name, port, up_port, conns, http=""):
    """nginx proxying everything to the upstream with keep-alive; `http` are more lines of its
    http block."""
    return start_nginx(name, port, nginx_upstream_block(up_port, conns) +
                       f"""\n{http}  server {{ listen 127.0.0.1:{port} backlog=4096; location / {{ {NGINX_PROXY_LOC} }} }}""",
                       ctx.proxy_cpus)

def start_upstream(ctx, port):
    """The upstream every proxy forwards to: nginx answering BODY, on the load core."""
    return start_nginx("upstream", port, f"""  server {{ listen 127.0.0.1:{port} backlog=4096; location / {{ return 200 "{BODY}"; }} }}""", ctx.load_cpus)

# ---------------------------------------------------------------- HAProxy

def start_haproxy(name, port, backend_cfg, frontend_extra, cpus, maxconn=8000, bind_extra=""):
    _, path = config(name, "haproxy.cfg", f"""global
  nbthread 1
  maxconn {maxconn}
defaults
  mode http
  timeout connect 5s
  timeout client 75s
  timeout server 75s
  timeout http-keep-alive 75s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:{port}{bind_extra}
{frontend_extra}
{backend_cfg}
""")
    return Proc(name, [which("haproxy"), "-f", path, "-db"], port, cpus)

def start_haproxy_proxy(ctx, name, port, up_port, frontend="", **kw):
    """HAProxy proxying everything to the upstream; `frontend` are more lines of its frontend."""
    return start_haproxy(name, port, f"backend be\n  server s1 127.0.0.1:{up_port}", "  default_backend be" + frontend,
                         ctx.proxy_cpus, **kw)

# ---------------------------------------------------------------- Caddy

def start_caddy(name, port, site, cpus, tls=None):
    """Caddy (Debian's) with one site block, one OS thread's worth of Go scheduler; with `tls`
    (certificate, key) the site is https, which Caddy also answers over HTTP/3 on UDP."""
    scheme, site = ("https", f"  tls {tls[0]} {tls[1]}\n{site}") if tls else ("http", site)
    d, path = config(name, "Caddyfile", f"""{{
  admin off
  auto_https off
  storage file_system {os.path.join(WORK, name)}
  log {{
    level ERROR
  }}
}}
{scheme}://127.0.0.1:{port} {{
{site}
}}
""")
    return Proc(name, ["env", "GOMAXPROCS=1", f"XDG_DATA_HOME={d}", f"XDG_CONFIG_HOME={d}", which("caddy"), "run",
                       "--config", path, "--adapter", "caddyfile"], port, cpus)

# ---------------------------------------------------------------- weir

WEIR_CATCH_ALL = "  all:\n    rule: \"PathPrefix(`/`)\"\n    service: up\n"

def start_weir(weir_bin, name, port, yaml, cpus):
    _, path = config(name, "weir.yaml", yaml)
    return Proc(name, [weir_bin, "run", "-c", path], port, cpus)

def weir_server(extra=""):
    """weir's `server` line: one worker, no access log; `extra` ("key: value, ") goes first."""
    return f"server: {{ workers: 1, {extra}access_log: {{ enabled: false }} }}"

def weir_yaml(port, routers, services="", server="", tls=None, h2c=False, head=""):
    """An HTTP weir config with one entrypoint, `web`: over TLS with `tls` (what goes inside its
    `tls: { }`), or cleartext HTTP/2 with `h2c`; `head` is top-level YAML before `routers:`."""
    if tls:
        web = f'  web:\n    address: "127.0.0.1:{port}"\n    tls: {{ {tls} }}'
    elif h2c:
        web = f'  web: {{ address: "127.0.0.1:{port}", h2c: true }}'
    else:
        web = f'  web: {{ address: "127.0.0.1:{port}" }}'
    return f"""{weir_server(server)}
entrypoints:
{web}
{head}routers:
{routers}
{services}"""

def weir_certificate(cert, key):
    return f'certificates: [{{ cert: "{cert}", key: "{key}" }}]'

def weir_service(up_port, conns):
    return f"""services:
  up:
    servers: [{{ url: "http://127.0.0.1:{up_port}" }}]
    keepalive: {{ max_idle_per_server: {max(conns, 64)}, idle_timeout: 75s }}
"""

def start_weir_proxy(ctx, name, port, up_port, conns, **yaml):
    """weir proxying everything to the upstream; `yaml` are more weir_yaml arguments."""
    return start_weir(ctx.weir, name, port, weir_yaml(port, WEIR_CATCH_ALL, weir_service(up_port, conns), **yaml),
                      ctx.proxy_cpus)

def weir_stream_yaml(protocol, entrypoint, address, router, service, up_port):
    """A weir config with one `tcp` or `udp` (`protocol`) router to one server, up_port."""
    return f"""{weir_server()}
entrypoints:
  {entrypoint}: {{ address: "{address}" }}
{protocol}:
  routers: {{ {router} }}
  services: {{ {service}: {{ servers: [{{ address: "127.0.0.1:{up_port}" }}] }} }}
"""

# ---------------------------------------------------------------- sets of peers

def start_proxies(ctx, procs, conns, tag, maxconn=8000):
    """The upstream, and nginx, HAProxy and weir proxying to it, added to `procs`.
    Returns (upstream port, targets)."""
    up_port, ng_port, ha_port, we_port = (free_port() for _ in range(4))
    procs.add(start_upstream(ctx, up_port))
    ng = procs.add(start_nginx_proxy(ctx, f"nginx-{tag}", ng_port, up_port, conns))
    ha = procs.add(start_haproxy_proxy(ctx, f"haproxy-{tag}", ha_port, up_port, maxconn=maxconn))
    we = procs.add(start_weir_proxy(ctx, f"weir-{tag}", we_port, up_port, conns))
    return up_port, http_targets("/", ("nginx", ng), ("haproxy", ha), ("weir", we))

PING_HAPROXY = "  http-request return status 200 content-type text/plain string pong if { path /ping }"
PING_WEIR = "  ping:\n    rule: \"Path(`/ping`)\"\n    respond: { status: 200, body: pong, headers: { content-type: text/plain } }\n"

def start_ping_peers(ctx, procs, tag, nginx_listen=" backlog=4096;", nginx_http="", haproxy_bind="", maxconn=8000,
                     **weir):
    """nginx, HAProxy and weir each answering `pong` to /ping themselves, added to `procs`:
    `nginx_listen` follows nginx's listen address, `nginx_http` goes before its server block,
    `haproxy_bind` follows HAProxy's bind address, `maxconn` is HAProxy's, `weir` are more
    weir_yaml arguments.
    Returns [(name, process)]."""
    ng_port, ha_port, we_port = free_port(), free_port(), free_port()
    ng = procs.add(start_nginx(f"nginx-{tag}", ng_port, f"""{nginx_http}  server {{ listen 127.0.0.1:{ng_port}{nginx_listen} location /ping {{ return 200 "pong"; }} }}""",
                               ctx.proxy_cpus))
    ha = procs.add(start_haproxy(f"haproxy-{tag}", ha_port, "", PING_HAPROXY, ctx.proxy_cpus, maxconn=maxconn,
                                 bind_extra=haproxy_bind))
    we = procs.add(start_weir(ctx.weir, f"weir-{tag}", we_port, weir_yaml(we_port, PING_WEIR, **weir), ctx.proxy_cpus))
    return [("nginx", ng), ("haproxy", ha), ("weir", we)]

def http_targets(path, *peers, scheme="http"):
    """interleave's targets, (name, process, url), for (name, process) pairs: `path` on each
    process's port."""
    return [(name, proc, f"{scheme}://127.0.0.1:{proc.port}{path}") for name, proc in peers]

def make_bench_certificate():
    """An ECDSA P-256 certificate for bench.test and 127.0.0.1, shared by every TLS peer."""
    d = work_dir("tls")
    cert, key, both = (os.path.join(d, f) for f in ("cert.pem", "key.pem", "both.pem"))
    sh(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", key, "-out", cert, "-subj", "/CN=bench.test", "-days", "30",
        "-addext", "subjectAltName=DNS:bench.test,IP:127.0.0.1"],
       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    write(both, open(cert).read() + open(key).read())
    return cert, key, both
