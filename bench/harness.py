"""bench/harness.py, started by bench/run — weir against nginx and HAProxy on the same machine, interleaved.

Usage: bench/run [--smoke] [--rounds N] [--duration S] SCENARIO... | all
Scenarios: proxy, ping, hosts, fixed-rate, idle, tls, compress, static, tcp, udp, reload, h2, grpc,
cache (see bench/README.md).
Proxies share one CPU; the load generator and the upstream get the other(s).
"""
import argparse, csv, json, os, re, resource, shutil, signal, socket, statistics, subprocess, sys, threading, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", "work")
RESULTS = os.path.join(ROOT, "bench", "results")
SCENARIOS = ["proxy", "ping", "hosts", "fixed-rate", "idle", "tls", "compress", "static", "tcp", "udp", "reload", "h2", "grpc", "cache", "es"]
BODY = "x" * 128  # upstream response body: a small API answer
HOSTS = 1000
# 10,000 was the aim; this machine caps descriptors at 20,000 (hard limit) and HAProxy reserves
# two per maxconn, so 9,000 is the most all three peers can hold.
IDLE_CONNS = 9000
NGINX_STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"
BULK_FILE_MB = 256  # each of the tcp scenario's bulk downloads
BULK_STREAMS = 4
IDLE_SETTLE_SECONDS = 5.0
STATIC_MANY = 10000

def log(msg):
    print(msg, flush=True)

def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)

# ---------------------------------------------------------------- setup

def ensure_tools():
    need = {"nginx": "nginx-light", "wrk": "wrk", "haproxy": "haproxy", "taskset": "util-linux", "openssl": "openssl",
            "caddy": "caddy", "redis-server": "redis-server", "redis-benchmark": "redis-tools",
            "dnsmasq": "dnsmasq-base", "dnsperf": "dnsperf", "h2load": "nghttp2-client",
            "varnishd": "varnish", "java": "openjdk-17-jre-headless", "mvn": "maven", "unzip": "unzip"}
    missing = [pkg for tool, pkg in need.items() if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}")]
    if not os.path.exists(NGINX_STREAM_MODULE):
        missing.append("libnginx-mod-stream")
    if missing:
        log(f"installing {' '.join(missing)} from apt")
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        sh(sudo + ["apt-get", "update", "-qq"])
        sh(sudo + ["apt-get", "install", "-y", "-qq"] + missing, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, stdout=subprocess.DEVNULL)

def binaries(bin_dir):
    if bin_dir is None:
        log("building weir and weir-bench (release)")
        sh(["cargo", "build", "--release", "--locked", "-p", "weir", "-p", "weir-bench"], cwd=ROOT)
        bin_dir = os.path.join(ROOT, "target", "release")
    return os.path.join(bin_dir, "weir"), os.path.join(bin_dir, "weir-bench")

def which(tool):
    return shutil.which(tool) or f"/usr/sbin/{tool}"

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port

def wait_port(port, proc, what):
    for _ in range(300):
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited early with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"{what} did not listen on {port}")

def cpu_layout():
    n = os.cpu_count() or 1
    if n >= 2:
        return "0", ",".join(str(c) for c in range(1, n))
    return "0", "0"

# ---------------------------------------------------------------- processes

def process_tree(root):
    """root's pid and its descendants' (each process's main thread's children)."""
    pids, frontier = [root], [root]
    while frontier:
        parent = frontier.pop()
        try:
            kids = open(f"/proc/{parent}/task/{parent}/children").read().split()
        except OSError:
            kids = []
        for k in kids:
            pids.append(int(k))
            frontier.append(int(k))
    return pids

def tree_cpu_seconds(root):
    """User + system CPU seconds of root's process tree."""
    total, tick = 0, os.sysconf("SC_CLK_TCK")
    for pid in process_tree(root):
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            # utime + stime, and cutime + cstime: the time of children that exited and
            # were reaped (nginx's old workers after a reload).
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        except OSError:
            pass
    return total / tick

class Proc:
    """A server process pinned to CPUs; measures CPU time and peak RSS of it and its children."""
    def __init__(self, name, cmd, port, cpus, cwd=None):
        self.name, self.port = name, port
        self.proc = subprocess.Popen(["taskset", "-c", cpus] + cmd, cwd=cwd,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        if port is not None:  # UDP servers have no port to connect to
            wait_port(port, self.proc, name)

    def pids(self):
        return process_tree(self.proc.pid)

    def cpu_seconds(self):
        return tree_cpu_seconds(self.proc.pid)

    def status_kb(self, field):
        """A /proc/PID/status memory field (VmRSS, VmHWM), summed over the process tree, in KB."""
        kb = 0
        for pid in self.pids():
            try:
                for line in open(f"/proc/{pid}/status"):
                    if line.startswith(field + ":"):
                        kb += int(line.split()[1])
            except OSError:
                pass
        return kb

    def peak_rss_mb(self):
        return self.status_kb("VmHWM") / 1024

    def rss_kb(self):
        return self.status_kb("VmRSS")

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

def nginx_conf(dirpath, port, body_http, workers=1):
    os.makedirs(dirpath, exist_ok=True)
    conf = f"""daemon off;
master_process on;
worker_processes {workers};
worker_rlimit_nofile 65535;
pid {dirpath}/nginx.pid;
error_log {dirpath}/error.log crit;
events {{ worker_connections 20000; multi_accept on; }}
http {{
  access_log off;
  client_body_temp_path {dirpath}; proxy_temp_path {dirpath}; fastcgi_temp_path {dirpath};
  uwsgi_temp_path {dirpath}; scgi_temp_path {dirpath};
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  server_names_hash_max_size 8192;
  server_names_hash_bucket_size 128;
  default_type text/plain;
{body_http}
}}
"""
    path = os.path.join(dirpath, "nginx.conf")
    open(path, "w").write(conf)
    return path

def start_nginx(name, port, body_http, cpus):
    d = os.path.join(WORK, name)
    path = nginx_conf(d, port, body_http)
    return Proc(name, [which("nginx"), "-c", path, "-p", d], port, cpus)

def nginx_upstream_block(up_port, conns):
    return f"""  upstream up {{ server 127.0.0.1:{up_port}; keepalive {max(conns, 64)}; keepalive_requests 1000000; keepalive_timeout 75s; }}"""

NGINX_PROXY_LOC = """proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host $host; proxy_buffering on;"""

def start_haproxy(name, port, backend_cfg, frontend_extra, cpus, maxconn=8000, bind_extra=""):
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    conf = f"""global
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
"""
    path = os.path.join(d, "haproxy.cfg")
    open(path, "w").write(conf)
    return Proc(name, [which("haproxy"), "-f", path, "-db"], port, cpus)

def start_caddy(name, port, site, cpus):
    """Caddy (Debian's) with one site block, one OS thread's worth of Go scheduler."""
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "Caddyfile")
    open(path, "w").write(f"""{{
  admin off
  auto_https off
  storage file_system {d}
  log {{
    level ERROR
  }}
}}
http://127.0.0.1:{port} {{
{site}
}}
""")
    return Proc(name, ["env", "GOMAXPROCS=1", f"XDG_DATA_HOME={d}", f"XDG_CONFIG_HOME={d}", which("caddy"), "run",
                       "--config", path, "--adapter", "caddyfile"], port, cpus)

def start_weir(weir_bin, name, port, yaml, cpus):
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "weir.yaml")
    open(path, "w").write(yaml)
    return Proc(name, [weir_bin, "run", "-c", path], port, cpus)

def weir_yaml(port, routers, services=""):
    return f"""server: {{ workers: 1, access_log: {{ enabled: false }} }}
entrypoints:
  web: {{ address: "127.0.0.1:{port}" }}
routers:
{routers}
{services}"""

def weir_service(up_port, conns):
    return f"""services:
  up:
    servers: [{{ url: "http://127.0.0.1:{up_port}" }}]
    keepalive: {{ max_idle_per_server: {max(conns, 64)}, idle_timeout: 75s }}
"""

# ---------------------------------------------------------------- load

WRK_DONE = r"""
done = function(summary, latency, requests)
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d}\n',
    summary.requests, summary.duration, summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.status, summary.errors.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max))
end
"""

def wrk_script(kind):
    path = os.path.join(WORK, f"wrk-{kind}.lua")
    body = WRK_DONE
    if kind == "close":
        # A new connection (and so a full TLS handshake) for every request.
        body = """wrk.headers["Connection"] = "close"
""" + WRK_DONE
    if kind in ("gzip", "br", "zstd"):
        body = f"""wrk.headers["Accept-Encoding"] = "{kind}"
""" + WRK_DONE
    if kind == "many":
        body = f"""math.randomseed(7)
request = function()
  return wrk.format(nil, string.format("/many/f%04d.txt", math.random(0, {STATIC_MANY - 1})))
end
""" + WRK_DONE
    if kind == "fresh-keys":
        # Every request a key no run asked for before: the cache's miss path.
        body = """counter = 0
stamp = string.format("%d-%d", os.time(), math.random(0, 1000000))
request = function()
  counter = counter + 1
  return wrk.format(nil, string.format("/obj8k?k=%s-%d", stamp, counter))
end
""" + WRK_DONE
    if kind == "hosts":
        body = f"""math.randomseed(42)
request = function()
  return wrk.format(nil, nil, {{ ["Host"] = "h" .. math.random(0, {HOSTS - 1}) .. ".bench" }})
end
""" + WRK_DONE
    open(path, "w").write(body)
    return path

def cpu_times():
    """(steal, total) jiffies over all CPUs, and each CPU's (busy, total), from /proc/stat."""
    lines = open("/proc/stat").read().splitlines()
    fields = [int(x) for x in lines[0].split()[1:]]
    per_cpu = {}
    for line in lines[1:]:
        if not (line.startswith("cpu") and line[3].isdigit()):
            break
        name, *values = line.split()
        values = [int(x) for x in values[:8]]
        # idle and iowait are the CPU waiting; the rest (steal too) is time it was not free.
        per_cpu[name[3:]] = (sum(values) - values[3] - values[4], sum(values))
    return fields[7], sum(fields[:8]), per_cpu

def steal_percent(before, after):
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total else 0.0

def machine_figures(before, after, cpus):
    """What a run's report says about the machine between two `cpu_times`: the hypervisor's
    steal and how busy the load generator's cores (`cpus`) were."""
    return {"steal_pct": steal_percent(before, after), "load_busy_pct": busy_percent(before, after, cpus)}

def busy_percent(before, after, cpus):
    """How busy the CPUs `cpus` ("1" or "1,2,3") were between two `cpu_times`, in percent:
    near 100 on the load generator's cores, the generator, not the target, set the req/s."""
    busy = total = 0
    for cpu in cpus.split(","):
        if cpu in before[2] and cpu in after[2]:
            busy += after[2][cpu][0] - before[2][cpu][0]
            total += after[2][cpu][1] - before[2][cpu][1]
    return 100.0 * busy / total if total else None

def run_wrk(url, conns, duration, script, cpus, target):
    cmd = ["taskset", "-c", cpus, "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--timeout", "5s", "-s", script, url]
    before = target.cpu_seconds() if target else 0
    clock = cpu_times()
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    machine = machine_figures(clock, cpu_times(), cpus)
    after = target.cpu_seconds() if target else 0
    line = next((l for l in out.splitlines() if l.startswith("WRKJSON ")), None)
    if line is None:
        raise SystemExit(f"wrk produced no summary for {url}:\n{out}")
    r = json.loads(line[8:])
    secs = r["duration_us"] / 1e6
    return {
        "rps": r["requests"] / secs,
        "requests": r["requests"],
        "p50_ms": r["p50"] / 1000, "p90_ms": r["p90"] / 1000, "p99_ms": r["p99"] / 1000,
        "p999_ms": r["p999"] / 1000, "max_ms": r["max"] / 1000,
        "non_2xx": r["status"],
        "socket_errors": r["connect"] + r["read"] + r["write"] + r["timeout"],
        "cpu_us_per_req": ((after - before) * 1e6 / r["requests"]) if target and r["requests"] else None,
        **machine,
    }

def run_generator(bench_bin, url, rate, conns, duration, cpus, target, extra=()):
    """weir-bench at `rate` requests/s (open loop), or closed loop with `rate` None."""
    before = target.cpu_seconds() if target else 0
    clock = cpu_times()
    pace = ["-R", str(rate)] if rate is not None else []
    out = subprocess.run(["taskset", "-c", cpus, bench_bin, "--json", *pace, "-c", str(conns),
                          "-d", f"{duration}s", *extra, url], capture_output=True, text=True, check=True).stdout
    machine = machine_figures(clock, cpu_times(), cpus)
    after = target.cpu_seconds() if target else 0
    r = json.loads(out)
    l = r["latency_us"]
    return {
        "rps": r["achieved_rate"], "requests": r["completed"],
        "p50_ms": l["p50"] / 1000, "p90_ms": l["p90"] / 1000, "p99_ms": l["p99"] / 1000,
        "p999_ms": l["p999"] / 1000, "max_ms": l["max"] / 1000,
        "non_2xx": r["non_2xx"], "socket_errors": r["errors"], "late_sends": r["late_sends"],
        "cpu_us_per_req": (after - before) * 1e6 / r["completed"] if target and r["completed"] else None,
        **machine,
    }

# ---------------------------------------------------------------- runs

def interleave(label, targets, measure, rounds):
    """targets: list of (name, Proc or None, url). Runs rounds of every target in turn, each
    round starting one target later, so no target always runs first (or always after another)."""
    runs = {name: [] for name, _, _ in targets}
    for rnd in range(1, rounds + 1):
        shift = (rnd - 1) % len(targets)
        for name, proc, url in targets[shift:] + targets[:shift]:
            log(f"  [{label}] round {rnd}/{rounds}: {name} ...")
            r = measure(url, proc)
            runs[name].append(r)
            tail = r['p99_ms'] if r.get('p99_ms') is not None else r['max_ms']
            log(f"  [{label}] round {rnd}/{rounds}: {name:<14} {r['rps']:>10.0f} req/s  p99 {tail:.3f} ms"
                + (f"  {r['cpu_us_per_req']:.2f} us CPU/req" if r.get('cpu_us_per_req') else "")
                + (f"  (hypervisor stole {r['steal_pct']:.0f}% of CPU)" if r['steal_pct'] >= 2 else ""))
    summary = {}
    for name, proc, _ in targets:
        rs = runs[name]
        med = {k: statistics.median([r[k] for r in rs if r.get(k) is not None])
               for k in rs[0] if any(r.get(k) is not None for r in rs)}
        med["non_2xx"] = sum(r["non_2xx"] for r in rs)
        med["socket_errors"] = sum(r["socket_errors"] for r in rs)
        med["peak_rss_mb"] = proc.peak_rss_mb() if proc else None
        med["rounds"] = rs
        summary[name] = med
    return summary

WEIR_CATCH_ALL = "  all:\n    rule: \"PathPrefix(`/`)\"\n    service: up\n"

def start_upstream(ctx, port):
    """The upstream every proxy forwards to: nginx answering BODY, on the load core."""
    return start_nginx("upstream", port, f"""  server {{ listen 127.0.0.1:{port} backlog=4096; location / {{ return 200 "{BODY}"; }} }}""", ctx.load_cpus)

def start_proxies(ctx, conns, tag, maxconn=8000):
    """The upstream, and nginx, HAProxy and weir proxying to it. Returns (procs, upstream port, targets)."""
    up_port, ng_port, ha_port, we_port = (free_port() for _ in range(4))
    procs = []
    try:
        procs.append(start_upstream(ctx, up_port))
        ng = start_nginx(f"nginx-{tag}", ng_port, nginx_upstream_block(up_port, conns) +
                         f"""\n  server {{ listen 127.0.0.1:{ng_port} backlog=4096; location / {{ {NGINX_PROXY_LOC} }} }}""", ctx.proxy_cpus)
        procs.append(ng)
        ha = start_haproxy(f"haproxy-{tag}", ha_port, f"backend be\n  server s1 127.0.0.1:{up_port}", "  default_backend be", ctx.proxy_cpus, maxconn)
        procs.append(ha)
        we = start_weir(ctx.weir, f"weir-{tag}", we_port,
                        weir_yaml(we_port, WEIR_CATCH_ALL, weir_service(up_port, conns)),
                        ctx.proxy_cpus)
        procs.append(we)
    except BaseException:
        for p in procs:
            p.stop()
        raise
    targets = [("nginx", ng, f"http://127.0.0.1:{ng_port}/"),
               ("haproxy", ha, f"http://127.0.0.1:{ha_port}/"),
               ("weir", we, f"http://127.0.0.1:{we_port}/")]
    return procs, up_port, targets

def scenario_proxy(ctx):
    """Keep-alive proxying at 50 and 1000 connections; `weir-nometrics` is weir with
    `server.metrics: false`, for the cost of the per-router and per-service counting."""
    out = {}
    for conns in ctx.conn_levels:
        label = f"proxy-c{conns}"
        procs, up_port, targets = start_proxies(ctx, conns, "proxy")
        try:
            nm_port = free_port()
            nm = start_weir(ctx.weir, "weir-nometrics", nm_port,
                            weir_yaml(nm_port, WEIR_CATCH_ALL, weir_service(up_port, conns))
                            .replace("server: { workers: 1,", "server: { workers: 1, metrics: false,"),
                            ctx.proxy_cpus)
            procs.append(nm)
            script = wrk_script("plain")
            targets = ([("direct", None, f"http://127.0.0.1:{up_port}/")] + targets
                       + [("weir-nometrics", nm, f"http://127.0.0.1:{nm_port}/")])
            measure = lambda url, proc: run_wrk(url, conns, ctx.duration, script, ctx.load_cpus, proc)
            out[label] = interleave(label, targets, measure, ctx.rounds)
        finally:
            for p in procs:
                p.stop()
    return out

def scenario_ping(ctx):
    ng_port, ha_port, we_port = free_port(), free_port(), free_port()
    procs = []
    try:
        ng = start_nginx("nginx-ping", ng_port, f"""  server {{ listen 127.0.0.1:{ng_port} backlog=4096; location /ping {{ return 200 "pong"; }} }}""", ctx.proxy_cpus)
        procs.append(ng)
        ha = start_haproxy("haproxy-ping", ha_port, "", "  http-request return status 200 content-type text/plain string pong if { path /ping }",
                           ctx.proxy_cpus)
        procs.append(ha)
        we = start_weir(ctx.weir, "weir-ping", we_port,
                        weir_yaml(we_port, "  ping:\n    rule: \"Path(`/ping`)\"\n    respond: { status: 200, body: pong, headers: { content-type: text/plain } }\n"),
                        ctx.proxy_cpus)
        procs.append(we)
        script = wrk_script("plain")
        conns = ctx.conn_levels[0]
        targets = [("nginx", ng, f"http://127.0.0.1:{ng_port}/ping"),
                   ("haproxy", ha, f"http://127.0.0.1:{ha_port}/ping"),
                   ("weir", we, f"http://127.0.0.1:{we_port}/ping")]
        measure = lambda url, proc: run_wrk(url, conns, ctx.duration, script, ctx.load_cpus, proc)
        return {f"ping-c{conns}": interleave("ping", targets, measure, ctx.rounds)}
    finally:
        for p in procs:
            p.stop()

def scenario_reload(ctx):
    """Issue 12's reload bench: keep-alive proxying at 50 connections with no reload and with
    one reload per second (SIGHUP to the master / the process), nginx beside weir. Failed
    requests must be 0 for weir; nginx's are reported as they are (its old workers close their
    keep-alive connections on reload)."""
    conns = ctx.conn_levels[0]
    up_port, ng_port, we_port = free_port(), free_port(), free_port()
    procs = []
    try:
        procs.append(start_upstream(ctx, up_port))
        ng = start_nginx("nginx-reload", ng_port, nginx_upstream_block(up_port, conns) +
                         f"""\n  server {{ listen 127.0.0.1:{ng_port} backlog=4096; location / {{ {NGINX_PROXY_LOC} }} }}""", ctx.proxy_cpus)
        procs.append(ng)
        we = start_weir(ctx.weir, "weir-reload", we_port,
                        weir_yaml(we_port, WEIR_CATCH_ALL, weir_service(up_port, conns)), ctx.proxy_cpus)
        procs.append(we)
        script = wrk_script("plain")

        def measure(url, proc):
            reloading = url.endswith("#reload")
            stop = threading.Event()
            reloads = []
            def reloader():
                while not stop.wait(1.0):
                    os.kill(proc.proc.pid, signal.SIGHUP)
                    reloads.append(time.time())
            thread = threading.Thread(target=reloader, daemon=True)
            if reloading:
                thread.start()
            try:
                r = run_wrk(url.split("#")[0], conns, ctx.duration, script, ctx.load_cpus, proc)
            finally:
                stop.set()
                if reloading:
                    thread.join()
            r["reloads"] = len(reloads)
            return r

        targets = [("nginx", ng, f"http://127.0.0.1:{ng_port}/"),
                   ("nginx + 1 reload/s", ng, f"http://127.0.0.1:{ng_port}/#reload"),
                   ("weir", we, f"http://127.0.0.1:{we_port}/"),
                   ("weir + 1 reload/s", we, f"http://127.0.0.1:{we_port}/#reload")]
        res = interleave(f"reload-c{conns}", targets, measure, ctx.rounds)
        # nginx's failures under reload are a result, not a harness failure.
        res["nginx + 1 reload/s"]["errors_expected"] = True
        return {f"reload-c{conns}": res}
    finally:
        for p in procs:
            p.stop()

def run_h2load(url, conns, streams, duration, cpus, target, extra=()):
    """h2load (nghttp2-client): `conns` connections with `streams` concurrent streams each;
    `extra` are more h2load arguments (a body to POST, headers). h2load reports a mean and a
    maximum, no percentiles."""
    before = target.cpu_seconds()
    clock = cpu_times()
    out = subprocess.run(["taskset", "-c", cpus, "h2load", "-t1", f"-c{conns}", f"-m{streams}",
                          f"-D{duration}", *extra, url], capture_output=True, text=True).stdout
    machine = machine_figures(clock, cpu_times(), cpus)
    after = target.cpu_seconds()
    rps = re.search(r"finished in ([\d.]+)(?:ms|s), ([\d.]+) req/s", out)
    counts = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    latency = re.search(r"time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)", out)
    if not (rps and counts and codes):
        raise SystemExit(f"h2load produced no summary for {url}:\n{out}")
    to_ms = lambda v, unit: float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    done = int(counts.group(3))
    return {
        "rps": float(rps.group(2)), "requests": done,
        "p50_ms": None, "p90_ms": None, "p99_ms": None, "p999_ms": None,
        "mean_ms": to_ms(latency.group(5), latency.group(6)) if latency else None,
        "max_ms": to_ms(latency.group(3), latency.group(4)) if latency else None,
        "non_2xx": int(codes.group(2)) + int(codes.group(3)) + int(codes.group(4)),
        "socket_errors": int(counts.group(4)) + int(counts.group(5)) + int(counts.group(6)),
        "cpu_us_per_req": (after - before) * 1e6 / done if done else None,
        **machine,
    }

def scenario_h2(ctx):
    """Issue 8's HTTP/2 bench: h2load with 50 connections x 10 streams asking for a small
    direct answer, over TLS (ALPN h2) and cleartext with prior knowledge (h2c), against nginx
    (`http2`) and HAProxy (`proto h2` / `alpn h2`)."""
    cert, key, both = make_bench_certificate()
    conns, streams = ctx.conn_levels[0], 10
    out = {}
    for mode in ("tls", "h2c"):
        ng_port, ha_port, we_port = free_port(), free_port(), free_port()
        procs = []
        try:
            if mode == "tls":
                ng_listen = f"listen 127.0.0.1:{ng_port} ssl http2 backlog=4096; ssl_certificate {cert}; ssl_certificate_key {key};"
                ha_bind = f" ssl crt {both} alpn h2,http/1.1"
                we_entry = (f'  web:\n    address: "127.0.0.1:{we_port}"\n'
                            f'    tls: {{ certificates: [{{ cert: "{cert}", key: "{key}" }}] }}')
                scheme = "https"
            else:
                ng_listen = f"listen 127.0.0.1:{ng_port} http2 backlog=4096;"
                ha_bind = " proto h2"
                we_entry = f'  web: {{ address: "127.0.0.1:{we_port}", h2c: true }}'
                scheme = "http"
            ng = start_nginx(f"nginx-h2-{mode}", ng_port, f"""  http2_max_concurrent_streams 128;
  server {{ {ng_listen} location /ping {{ return 200 "pong"; }} }}""", ctx.proxy_cpus)
            procs.append(ng)
            ha = start_haproxy(f"haproxy-h2-{mode}", ha_port, "",
                               "  http-request return status 200 content-type text/plain string pong if { path /ping }",
                               ctx.proxy_cpus, bind_extra=ha_bind)
            procs.append(ha)
            yaml = weir_yaml(we_port, "  ping:\n    rule: \"Path(`/ping`)\"\n    respond: { status: 200, body: pong, headers: { content-type: text/plain } }\n").replace(
                f'  web: {{ address: "127.0.0.1:{we_port}" }}', we_entry)
            we = start_weir(ctx.weir, f"weir-h2-{mode}", we_port, yaml, ctx.proxy_cpus)
            procs.append(we)
            targets = [("nginx", ng, f"{scheme}://127.0.0.1:{ng_port}/ping"),
                       ("haproxy", ha, f"{scheme}://127.0.0.1:{ha_port}/ping"),
                       ("weir", we, f"{scheme}://127.0.0.1:{we_port}/ping")]
            measure = lambda url, proc: run_h2load(url, conns, streams, ctx.duration, ctx.load_cpus, proc)
            out[f"h2-{mode}-c{conns}x{streams}"] = interleave(f"h2-{mode}", targets, measure, ctx.rounds)
        finally:
            for p in procs:
                p.stop()
    return out

def scenario_grpc(ctx):
    """Issue 8's gRPC bench: unary calls (a 100-byte message, echoed) through the gateway to
    `weir-grpc-upstream` over cleartext HTTP/2, h2load with 50 connections x 10 streams posting
    the gRPC-framed message; against nginx `grpc_pass` (upstream keepalive) and HAProxy
    (`proto h2` both sides)."""
    conns, streams = ctx.conn_levels[0], 10
    message = os.path.join(WORK, "grpc-message.bin")
    payload = b"x" * 100
    with open(message, "wb") as f:
        f.write(b"\x00" + len(payload).to_bytes(4, "big") + payload)
    up_port, ng_port, ha_port, we_port = (free_port() for _ in range(4))
    procs = []
    try:
        upstream_bin = os.path.join(os.path.dirname(ctx.bench), "weir-grpc-upstream")
        procs.append(Proc("grpc-upstream", [upstream_bin, f"127.0.0.1:{up_port}"], up_port, ctx.load_cpus))
        ng = start_nginx("nginx-grpc", ng_port, f"""  upstream grpcup {{ server 127.0.0.1:{up_port}; keepalive 64; }}
  http2_max_concurrent_streams 128;
  server {{ listen 127.0.0.1:{ng_port} http2 backlog=4096; location / {{ grpc_pass grpc://grpcup; }} }}""", ctx.proxy_cpus)
        procs.append(ng)
        ha = start_haproxy("haproxy-grpc", ha_port, f"backend be\n  server s1 127.0.0.1:{up_port} proto h2",
                           "  default_backend be", ctx.proxy_cpus, bind_extra=" proto h2")
        procs.append(ha)
        yaml = weir_yaml(we_port, WEIR_CATCH_ALL,
                         f'services:\n  up:\n    protocol: h2c\n    servers: [{{ url: "http://127.0.0.1:{up_port}" }}]\n').replace(
            f'  web: {{ address: "127.0.0.1:{we_port}" }}', f'  web: {{ address: "127.0.0.1:{we_port}", h2c: true }}')
        we = start_weir(ctx.weir, "weir-grpc", we_port, yaml, ctx.proxy_cpus)
        procs.append(we)
        targets = [(name, proc, f"http://127.0.0.1:{port}/bench.Echo/Unary")
                   for name, proc, port in (("nginx", ng, ng_port), ("haproxy", ha, ha_port), ("weir", we, we_port))]
        extra = ("-d", message, "-H", "content-type: application/grpc", "-H", "te: trailers")
        measure = lambda url, proc: run_h2load(url, conns, streams, ctx.duration, ctx.load_cpus, proc, extra)
        return {f"grpc-unary-c{conns}x{streams}": interleave("grpc", targets, measure, ctx.rounds)}
    finally:
        for p in procs:
            p.stop()

CACHE_OBJECTS = {"obj8k": 8 * 1024, "obj100k": 100 * 1024}

def start_varnish(name, port, up_port, cpus):
    """Varnish (Debian's) with `malloc` storage and the built-in VCL, caching what the origin's
    Cache-Control allows; its manager and cache child both count."""
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    vcl = os.path.join(d, "default.vcl")
    open(vcl, "w").write(f"""vcl 4.1;
backend default {{ .host = "127.0.0.1"; .port = "{up_port}"; }}
""")
    return Proc(name, [which("varnishd"), "-F", "-a", f"127.0.0.1:{port}", "-f", vcl, "-s", "malloc,512m",
                       "-n", d, "-p", "thread_pools=1"], port, cpus)

# How long each target takes fresh keys before the miss rounds (see scenario_cache).
MISS_FILL_SECONDS = 8

def scenario_cache(ctx):
    """Issue 10's cache bench: hits on an 8 KB and a 100 KB object (max-age an hour) at 50
    connections, through nginx `proxy_cache` (with `open_file_cache`), Varnish (`malloc`) and
    weir's cache; then the miss path, every request a new key, against weir's plain proxy."""
    d = os.path.join(WORK, "cache-origin")
    os.makedirs(d, exist_ok=True)
    import random
    rng = random.Random(10)
    for name, size in CACHE_OBJECTS.items():
        open(os.path.join(d, name), "wb").write(rng.randbytes(size))
    up_port, ng_port, va_port, we_port, wp_port = (free_port() for _ in range(5))
    conns = ctx.conn_levels[0]
    procs = []
    try:
        procs.append(start_nginx("cache-upstream", up_port, f"""  server {{ listen 127.0.0.1:{up_port} backlog=4096; root {d};
    location / {{ add_header cache-control "max-age=3600"; }} }}""", ctx.load_cpus))
        cache_dir = os.path.join(WORK, "nginx-cache", "store")
        shutil.rmtree(cache_dir, ignore_errors=True)
        # sendfile without tcp_nopush: with TCP_CORK, nginx stalled 40 ms (delayed ACK) on every
        # 100 KB hit (1,900 req/s against 26,700 without it), which is no fair peer.
        ng = start_nginx("nginx-cache", ng_port, nginx_upstream_block(up_port, conns) + f"""
  sendfile on; tcp_nopush off;
  open_file_cache max=20000 inactive=60s; open_file_cache_valid 60s;
  proxy_cache_path {cache_dir} levels=1:2 keys_zone=main:64m max_size=2g inactive=1h use_temp_path=off;
  server {{ listen 127.0.0.1:{ng_port} backlog=4096;
    location / {{ {NGINX_PROXY_LOC} proxy_cache main; proxy_cache_lock on; add_header cache-status $upstream_cache_status; }} }}""",
                         ctx.proxy_cpus)
        procs.append(ng)
        va = start_varnish("varnish-cache", va_port, up_port, ctx.proxy_cpus)
        procs.append(va)
        cached = f"  all:\n    rule: \"PathPrefix(`/`)\"\n    service: up\n    cache: main\n"
        yaml = weir_yaml(we_port, cached, weir_service(up_port, conns)).replace(
            "routers:", "caches:\n  main: { memory: 512MiB, max_object_size: 8MiB }\nrouters:")
        we = start_weir(ctx.weir, "weir-cache", we_port, yaml, ctx.proxy_cpus)
        procs.append(we)
        wp = start_weir(ctx.weir, "weir-proxy", wp_port, weir_yaml(wp_port, WEIR_CATCH_ALL, weir_service(up_port, conns)),
                        ctx.proxy_cpus)
        procs.append(wp)
        out = {}
        script = wrk_script("plain")
        for name in CACHE_OBJECTS:
            targets = [("nginx", ng, f"http://127.0.0.1:{ng_port}/{name}"),
                       ("varnish", va, f"http://127.0.0.1:{va_port}/{name}"),
                       ("weir", we, f"http://127.0.0.1:{we_port}/{name}")]
            # Warm each cache, and check that it answers from its store.
            for target, _, url in targets:
                for _ in range(3):
                    with urllib.request.urlopen(url) as answer:
                        answer.read()
                        # nginx: HIT; weir: `weir; hit; ...`; Varnish: two ids in X-Varnish.
                        seen = answer.headers.get("cache-status") or answer.headers.get("x-varnish", "")
                if not ("HIT" in seen or "; hit" in seen or len(seen.split()) == 2):
                    raise SystemExit(f"{target} does not answer {name} from its cache: {seen!r}")
            measure = lambda url, proc: run_wrk(url, conns, ctx.duration, script, ctx.load_cpus, proc)
            out[f"cache-hit-{name[3:]}-c{conns}"] = interleave(f"cache-hit-{name[3:]}", targets, measure, ctx.rounds)
            # The same hits with a client that drops bodies in the kernel (weir-bench closed
            # loop, --discard-body): wrk's 8 KB reads of a 100 KB body held its core at 98%,
            # so the table above measures wrk as much as the servers.
            measure = lambda url, proc: run_generator(ctx.bench, url, None, conns, ctx.duration, ctx.load_cpus, proc,
                                                      extra=("--discard-body",))
            out[f"cache-hit-{name[3:]}-c{conns}-discard"] = interleave(f"cache-hit-{name[3:]}-discard", targets,
                                                                     measure, ctx.rounds)
        # The miss path: weir with the cache (every answer stored) against weir without it.
        misses = wrk_script("fresh-keys")
        targets = [("weir-proxy", wp, f"http://127.0.0.1:{wp_port}/"),
                   ("weir-miss", we, f"http://127.0.0.1:{we_port}/"),
                   ("nginx-miss", ng, f"http://127.0.0.1:{ng_port}/")]
        # Each target first takes fresh keys for a while, so the caches are full before the
        # rounds, as a cache in service is: a round then measures a miss that stores one
        # answer and evicts another, not one that also faults in memory fresh from the OS
        # (512 MiB fills in about 3 s at these rates).
        for name, proc, url in targets:
            log(f"  [cache-miss-8k] filling {name}'s store first")
            run_wrk(url, conns, 1 if ctx.smoke else MISS_FILL_SECONDS, misses, ctx.load_cpus, proc)
        measure = lambda url, proc: run_wrk(url, conns, ctx.duration, misses, ctx.load_cpus, proc)
        out[f"cache-miss-8k-c{conns}"] = interleave("cache-miss-8k", targets, measure, ctx.rounds)
        return out
    finally:
        for p in procs:
            p.stop()

ES_SEARCH_DOCS = 2000
ES_BULK_SIZES = (1, 10, 1000)

def es_call(port, method, path, body=None, content_type="application/json"):
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"content-type": content_type})
    with urllib.request.urlopen(req, timeout=120) as answer:
        return json.loads(answer.read() or b"null")

def start_es_cluster():
    """A 3-node OpenSearch cluster (scripts/opensearch-cluster, 512 MB heap each), not pinned:
    the same cluster serves every target in turn. Returns (process, HTTP ports)."""
    script = os.path.join(ROOT, "scripts", "opensearch-cluster")
    proc = subprocess.Popen([script, "--nodes", "3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    line = proc.stdout.readline()
    try:
        return proc, json.loads(line)["http"]
    except ValueError:
        proc.kill()
        raise SystemExit(f"the OpenSearch cluster did not start: {line!r}")

def with_cluster_cpu(measure, cluster):
    """measure, adding the CPU the cluster's nodes (their JVMs) spent per request in the round:
    the work a proxy's routing and batching save the cluster, which on 2 shared cores is what
    bounds the rate."""
    def run(url, proc):
        before = tree_cpu_seconds(cluster.pid)
        r = measure(url, proc)
        spent = tree_cpu_seconds(cluster.pid) - before
        r["cluster_cpu_us_per_req"] = spent * 1e6 / r["requests"] if r["requests"] else None
        return r
    return run

def stop_es_cluster(proc):
    proc.stdin.close()  # the script stops its nodes when its input closes
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()

ES_BULK_RUNS = iter(range(1, 1 << 30))

def es_bulk_script(docs):
    """A wrk script posting `_bulk` bodies as the seed's loadgen does: `docs` `create` items per
    request, each with an `_id` no run used before (a tag per script, a counter per request)."""
    tag = f"{os.getpid():x}-{next(ES_BULK_RUNS)}"
    path = os.path.join(WORK, f"wrk-es-bulk-{docs}-{tag}.lua")
    open(path, "w").write(f"""wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-ndjson"
counter = 0
words = {{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}}
request = function()
  local parts = {{}}
  for i = 1, {docs} do
    counter = counter + 1
    local id = "{tag}-" .. counter
    parts[i] = '{{ "create" : {{ "_index" : "loadgen_test", "_id" : "' .. id .. '" }} }}\\n' ..
      '{{ "id" : "' .. id .. '", "field1" : "' .. words[counter % 8 + 1] .. '", "n" : ' .. counter .. ' }}\\n'
  end
  return wrk.format(nil, "/_bulk", nil, table.concat(parts))
end
""" + WRK_DONE)
    return path

def scenario_es(ctx):
    """Issue 13's bench, seed 000 (INFINI Gateway vs nginx) on a real 3-node OpenSearch cluster:
    `_search` closed loop (wrk) and at a fixed rate (weir-bench -R), then `_bulk` of 1, 10 and
    1,000 fresh documents per request (weir-bench body templates, as the seed's loadgen), through
    nginx tuned as the seed's final config (every node in an upstream with keepalive, HTTP/1.1),
    weir's Elasticsearch service (nodes discovered, `_bulk` split by node) and the same with
    `bulk.route: none`."""
    cluster, nodes = start_es_cluster()
    procs = []
    try:
        node = nodes[0]
        es_call(node, "PUT", "/test", '{"settings": {"number_of_shards": 3, "number_of_replicas": 0}}')
        lines = []
        for i in range(ES_SEARCH_DOCS):
            lines.append(json.dumps({"index": {"_id": str(i)}}))
            lines.append(json.dumps({"n": i, "title": f"document {i}", "tags": ["a", "b", f"t{i % 10}"]}))
        es_call(node, "POST", "/test/_bulk?refresh=true", "\n".join(lines) + "\n", "application/x-ndjson")
        es_call(node, "PUT", "/loadgen_test",
                '{"settings": {"number_of_shards": 3, "number_of_replicas": 0, "refresh_interval": "10s"}}')
        ng_port, we_port, wn_port, wu_port, ws_port = (free_port() for _ in range(5))
        conns = 100
        servers = " ".join(f"server 127.0.0.1:{p};" for p in nodes)
        ng = start_nginx("nginx-es", ng_port, f"""  upstream up {{ {servers} keepalive 300; keepalive_requests 1000000; keepalive_timeout 75s; }}
  client_max_body_size 100m; client_body_buffer_size 4m;
  server {{ listen 127.0.0.1:{ng_port} backlog=4096; location / {{ {NGINX_PROXY_LOC} }} }}""", ctx.proxy_cpus)
        procs.append(ng)
        def weir_es(port, bulk, extra=""):
            return weir_yaml(port, WEIR_CATCH_ALL.replace("service: up", "service: es"), f"""services:
  es:
    elasticsearch:
      hosts: ["http://127.0.0.1:{node}"]
      bulk: {{ {bulk} }}
{extra}    keepalive: {{ max_idle_per_server: 300, idle_timeout: 75s }}
""")
        we = start_weir(ctx.weir, "weir-es", we_port, weir_es(we_port, "route: node"), ctx.proxy_cpus)
        procs.append(we)
        wn = start_weir(ctx.weir, "weir-es-whole", wn_port, weir_es(wn_port, "route: none"), ctx.proxy_cpus)
        procs.append(wn)
        # The bulk scenarios also run weir without batching, and with the write spool on (a
        # healthy cluster: what having it costs).
        wu = start_weir(ctx.weir, "weir-es-unbatched", wu_port,
                        weir_es(wu_port, "route: node, batch: false"), ctx.proxy_cpus)
        procs.append(wu)
        spool_dir = os.path.join(WORK, f"es-spool-{os.getpid()}")
        shutil.rmtree(spool_dir, ignore_errors=True)
        ws = start_weir(ctx.weir, "weir-es-spool", ws_port,
                        weir_es(ws_port, "route: node", f"      spool: {{ path: {spool_dir} }}\n"),
                        ctx.proxy_cpus)
        procs.append(ws)
        time.sleep(2)  # the nodes discovered, the shard map built
        # Warm the nodes' JIT (C1 only, see scripts/opensearch-cluster) before anything counts.
        for port in nodes:
            run_wrk(f"http://127.0.0.1:{port}/test/_search", 20, 2 if ctx.smoke else 10,
                    wrk_script("plain"), ctx.load_cpus, None)
        def targets(path):
            # `direct`: the load generator against the first node itself, no proxy: the
            # cluster's own pace, which no proxy passing requests through one by one can beat.
            return [("nginx", ng, f"http://127.0.0.1:{ng_port}{path}"),
                    ("weir", we, f"http://127.0.0.1:{we_port}{path}"),
                    ("weir-route-none", wn, f"http://127.0.0.1:{wn_port}{path}"),
                    ("direct", None, f"http://127.0.0.1:{node}{path}")]
        out = {}
        script = wrk_script("plain")
        measure = with_cluster_cpu(
            lambda url, proc: run_wrk(url, conns, ctx.duration, script, ctx.load_cpus, proc), cluster)
        closed = interleave("es-search", targets("/test/_search"), measure, ctx.rounds)
        out[f"es-search-c{conns}"] = closed
        rate = max(50, int(0.5 * min(closed["nginx"]["rps"], closed["weir"]["rps"])))
        measure = with_cluster_cpu(
            lambda url, proc: run_generator(ctx.bench, url, rate, conns, ctx.duration, ctx.load_cpus, proc),
            cluster)
        # Twice the rounds: a p99 on a cluster sharing two cores with everything else swings
        # several-fold between rounds, for every proxy.
        fixed = interleave("es-search-fixed", targets("/test/_search"), measure, 2 * ctx.rounds)
        fixed["_rate"] = rate
        out[f"es-search-R{rate}"] = fixed
        for docs in ES_BULK_SIZES:
            bulk_conns = 16
            # A smoke round of 1 s can end before a debug build answers a batch of 1,000-document
            # bulks (one took 0.7 s): those rounds get 5 s, so every target finishes some.
            seconds = 5 if ctx.smoke and docs >= 1000 else ctx.duration
            measure = with_cluster_cpu(
                lambda url, proc: run_wrk(url, bulk_conns, seconds, es_bulk_script(docs), ctx.load_cpus, proc),
                cluster)
            bulk_targets = targets("/_bulk") + [
                ("weir-unbatched", wu, f"http://127.0.0.1:{wu_port}/_bulk"),
                ("weir-spool", ws, f"http://127.0.0.1:{ws_port}/_bulk")]
            res = interleave(f"es-bulk-{docs}", bulk_targets, measure, ctx.rounds)
            for name, m in res.items():
                if not name.startswith("_"):
                    m["docs_per_s"] = m["rps"] * docs
            out[f"es-bulk-{docs}-c{bulk_conns}"] = res
        es_call(node, "POST", "/loadgen_test/_refresh")
        log(f"  loadgen_test holds {es_call(node, 'GET', '/loadgen_test/_count')['count']} documents")
        return out
    finally:
        for p in procs:
            p.stop()
        stop_es_cluster(cluster)

def make_bench_certificate():
    """An ECDSA P-256 certificate for bench.test and 127.0.0.1, shared by every TLS peer."""
    d = os.path.join(WORK, "tls")
    os.makedirs(d, exist_ok=True)
    cert, key, both = (os.path.join(d, f) for f in ("cert.pem", "key.pem", "both.pem"))
    sh(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", key, "-out", cert, "-subj", "/CN=bench.test", "-days", "30",
        "-addext", "subjectAltName=DNS:bench.test,IP:127.0.0.1"],
       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    open(both, "w").write(open(cert).read() + open(key).read())
    return cert, key, both

def scenario_tls(ctx):
    """HTTPS termination, TLS 1.3 with one ECDSA P-256 certificate: keep-alive proxying at 50
    connections, and a new connection (full handshake) per request."""
    cert, key, both = make_bench_certificate()
    conns = ctx.conn_levels[0]
    up_port, ng_port, ha_port, we_port = (free_port() for _ in range(4))
    procs = []
    try:
        procs.append(start_upstream(ctx, up_port))
        ng = start_nginx("nginx-tls", ng_port, nginx_upstream_block(up_port, conns) +
                         f"""\n  ssl_protocols TLSv1.3; ssl_session_cache shared:SSL:10m;
  server {{ listen 127.0.0.1:{ng_port} ssl backlog=4096; ssl_certificate {cert}; ssl_certificate_key {key}; location / {{ {NGINX_PROXY_LOC} }} }}""",
                         ctx.proxy_cpus)
        procs.append(ng)
        ha = start_haproxy("haproxy-tls", ha_port, f"backend be\n  server s1 127.0.0.1:{up_port}", "  default_backend be",
                           ctx.proxy_cpus, bind_extra=f" ssl crt {both} ssl-min-ver TLSv1.3")
        procs.append(ha)
        yaml = weir_yaml(we_port, WEIR_CATCH_ALL, weir_service(up_port, conns)).replace(
            f'  web: {{ address: "127.0.0.1:{we_port}" }}',
            f'  web:\n    address: "127.0.0.1:{we_port}"\n    tls: {{ certificates: [{{ cert: "{cert}", key: "{key}" }}], min_version: "1.3" }}')
        we = start_weir(ctx.weir, "weir-tls", we_port, yaml, ctx.proxy_cpus)
        procs.append(we)
        targets = [("nginx", ng, f"https://127.0.0.1:{ng_port}/"),
                   ("haproxy", ha, f"https://127.0.0.1:{ha_port}/"),
                   ("weir", we, f"https://127.0.0.1:{we_port}/")]
        out = {}
        keep = lambda url, proc: run_wrk(url, conns, ctx.duration, wrk_script("plain"), ctx.load_cpus, proc)
        out[f"tls-keepalive-c{conns}"] = interleave("tls-keepalive", targets, keep, ctx.rounds)
        fresh = lambda url, proc: run_wrk(url, conns, ctx.duration, wrk_script("close"), ctx.load_cpus, proc)
        out[f"tls-handshake-c{conns}"] = interleave("tls-handshake", targets, fresh, ctx.rounds)
        return out
    finally:
        for p in procs:
            p.stop()

def scenario_hosts(ctx):
    up_port, ng_port, ha_port, w1_port, wn_port = (free_port() for _ in range(5))
    conns = ctx.conn_levels[0]
    procs = []
    try:
        up = start_upstream(ctx, up_port)
        procs.append(up)
        servers = "\n".join(f"  server {{ listen 127.0.0.1:{ng_port}{' backlog=4096' if i == 0 else ''}; server_name h{i}.bench; location / {{ {NGINX_PROXY_LOC} }} }}" for i in range(HOSTS))
        ng = start_nginx("nginx-hosts", ng_port, nginx_upstream_block(up_port, conns) + "\n" + servers, ctx.proxy_cpus)
        procs.append(ng)
        mapfile = os.path.join(WORK, "hosts.map")
        os.makedirs(WORK, exist_ok=True)
        open(mapfile, "w").write("".join(f"h{i}.bench b{i}\n" for i in range(HOSTS)))
        backends = "\n".join(f"backend b{i}\n  server s1 127.0.0.1:{up_port}" for i in range(HOSTS))
        ha = start_haproxy("haproxy-hosts", ha_port, backends,
                           f"  use_backend %[req.hdr(host),lower,map_str({mapfile})]", ctx.proxy_cpus)
        procs.append(ha)
        w1 = start_weir(ctx.weir, "weir-1route", w1_port,
                        weir_yaml(w1_port, WEIR_CATCH_ALL, weir_service(up_port, conns)), ctx.proxy_cpus)
        procs.append(w1)
        routers = "".join(f"  h{i}:\n    rule: \"Host(`h{i}.bench`)\"\n    service: up\n" for i in range(HOSTS))
        wn = start_weir(ctx.weir, "weir-1000routes", wn_port, weir_yaml(wn_port, routers, weir_service(up_port, conns)), ctx.proxy_cpus)
        procs.append(wn)
        script = wrk_script("hosts")
        targets = [("nginx", ng, f"http://127.0.0.1:{ng_port}/"),
                   ("haproxy", ha, f"http://127.0.0.1:{ha_port}/"),
                   ("weir-1route", w1, f"http://127.0.0.1:{w1_port}/"),
                   ("weir", wn, f"http://127.0.0.1:{wn_port}/")]
        measure = lambda url, proc: run_wrk(url, conns, ctx.duration, script, ctx.load_cpus, proc)
        return {f"hosts-c{conns}": interleave("hosts", targets, measure, ctx.rounds)}
    finally:
        for p in procs:
            p.stop()

def scenario_fixed_rate(ctx):
    conns = 50
    procs, _, targets = start_proxies(ctx, conns, "fixed")
    try:
        nginx = targets[0]
        log("  [fixed-rate] calibrating: nginx's closed-loop maximum with wrk")
        top = run_wrk(nginx[2], conns, max(1, ctx.duration // 2), wrk_script("plain"), ctx.load_cpus, nginx[1])["rps"]
        rate = max(100, int(top * 0.5))
        log(f"  [fixed-rate] nginx max {top:.0f} req/s; fixed rate {rate} req/s")
        measure = lambda url, proc: run_generator(ctx.bench, url, rate, conns, ctx.duration, ctx.load_cpus, proc)
        res = interleave("fixed-rate", targets, measure, ctx.rounds)
        res["_rate"] = rate
        return {f"fixed-rate-c{conns}": res}
    finally:
        for p in procs:
            p.stop()

def json_document(size):
    """A deterministic JSON API answer of about `size` bytes: records of ids, names, emails,
    scores, tags and timestamps, as an API returns them."""
    import random
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
    import http.client, urllib.parse
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", u.path + ("?" + u.query if u.query else ""), headers={"Accept-Encoding": encoding})
    r = c.getresponse()
    body = r.read()
    c.close()
    return len(body), r.getheader("content-encoding") or "identity"

def scenario_compress(ctx):
    """Seed 002's compression case: a 24 KB JSON answer from the upstream, compressed by the
    proxy for a client that asks for gzip (level 6 everywhere nginx and weir have levels);
    weir's zstd (levels 3 and 6) and brotli (4) beside it."""
    d = os.path.join(WORK, "compress-files")
    os.makedirs(d, exist_ok=True)
    doc = json_document(24 * 1024)
    open(os.path.join(d, "data.json"), "wb").write(doc)
    conns = ctx.conn_levels[0]
    up_port, ng_port, ha_port, we_port = (free_port() for _ in range(4))
    procs = []
    try:
        procs.append(start_nginx("upstream-compress", up_port,
                                 f"""  server {{ listen 127.0.0.1:{up_port} backlog=4096; root {d}; types {{ application/json json; }} location / {{ }} }}""",
                                 ctx.load_cpus))
        ng = start_nginx("nginx-compress", ng_port, nginx_upstream_block(up_port, conns) +
                         f"""
  gzip on; gzip_comp_level 6; gzip_types application/json; gzip_min_length 1024; gzip_proxied any; gzip_vary on;
  server {{ listen 127.0.0.1:{ng_port} backlog=4096; location / {{ {NGINX_PROXY_LOC} }} }}""", ctx.proxy_cpus)
        procs.append(ng)
        ha = start_haproxy("haproxy-compress", ha_port, f"backend be\n  server s1 127.0.0.1:{up_port}",
                           "  default_backend be\n  compression algo gzip\n  compression type application/json", ctx.proxy_cpus)
        procs.append(ha)
        ca_port = free_port()
        ca = start_caddy("caddy-compress", ca_port, f"  encode {{\n    gzip 6\n  }}\n  reverse_proxy 127.0.0.1:{up_port}", ctx.proxy_cpus)
        procs.append(ca)
        # /z6/ is zstd at level 6, the level where it is smaller than gzip 6 too.
        routers = ("  all:\n    rule: \"PathPrefix(`/`)\"\n    service: up\n    middlewares: [compress]\n"
                   "  z6:\n    rule: \"PathPrefix(`/z6/`)\"\n    service: up\n    middlewares: [strip-z6, zstd6]\n")
        yaml = weir_yaml(we_port, routers, weir_service(up_port, conns)) + \
            "middlewares:\n  compress: { compress: { algorithms: [gzip, zstd, br], level: { gzip: 6, br: 4, zstd: 3 } } }\n" \
            "  strip-z6: { strip_prefix: [/z6] }\n  zstd6: { compress: { algorithms: [zstd], level: { zstd: 6 } } }\n"
        we = start_weir(ctx.weir, "weir-compress", we_port, yaml, ctx.proxy_cpus)
        procs.append(we)
        path = "/data.json"
        targets = [("nginx", ng, f"http://127.0.0.1:{ng_port}{path}?gzip"),
                   ("haproxy", ha, f"http://127.0.0.1:{ha_port}{path}?gzip"),
                   ("caddy", ca, f"http://127.0.0.1:{ca_port}{path}?gzip"),
                   ("weir", we, f"http://127.0.0.1:{we_port}{path}?gzip"),
                   ("weir-zstd", we, f"http://127.0.0.1:{we_port}{path}?zstd"),
                   ("weir-zstd6", we, f"http://127.0.0.1:{we_port}/z6{path}?zstd"),
                   ("weir-br", we, f"http://127.0.0.1:{we_port}{path}?br")]
        sizes = {}
        for name, _, url in targets:
            encoding = url.rsplit("?", 1)[1]
            size, got = compressed_size(url, encoding)
            if got != encoding:
                raise SystemExit(f"{name} answered {got} to Accept-Encoding: {encoding}")
            sizes[name] = {"encoding": encoding, "bytes": size}
        measure = lambda url, proc: run_wrk(url, conns, ctx.duration, wrk_script(url.rsplit("?", 1)[1]), ctx.load_cpus, proc)
        res = interleave(f"compress-c{conns}", targets, measure, ctx.rounds)
        res["_sizes"] = {"original": len(doc), **sizes}
        return {f"compress-c{conns}": res}
    finally:
        for p in procs:
            p.stop()

def scenario_static(ctx):
    """Seeds 002 and 003's file cases: an 8 KB html page, a 1 MB file, and 10,000 distinct 4 KB
    files requested at random; nginx with sendfile and open_file_cache (with the seed's
    tcp_nopush, and without it), Caddy's file_server, weir's static action, each serving the
    same folder."""
    d = os.path.join(WORK, "static-files")
    many = os.path.join(d, "many")
    os.makedirs(many, exist_ok=True)
    import random
    rng = random.Random(3)
    open(os.path.join(d, "page.html"), "wb").write(
        (b"<!DOCTYPE html><html><body>" + b"<p>weir static bench</p>\n" * 400)[:8192])
    open(os.path.join(d, "big.bin"), "wb").write(rng.randbytes(1 << 20))
    count = 200 if ctx.smoke else STATIC_MANY
    for i in range(count):
        f = os.path.join(many, f"f{i:04d}.txt")
        if not os.path.exists(f):
            open(f, "wb").write(f"file {i}\n".encode() * (4096 // len(f"file {i}\n")))
    ng_port, ca_port, we_port = free_port(), free_port(), free_port()
    procs = []
    try:
        def static_nginx(name, port, nopush):
            return start_nginx(name, port, f"""  sendfile on; tcp_nopush {nopush};
  open_file_cache max=20000 inactive=60s; open_file_cache_valid 60s; open_file_cache_errors on;
  types {{ text/html html; text/plain txt; application/octet-stream bin; }}
  server {{ listen 127.0.0.1:{port} backlog=4096; root {d}; location / {{ }} }}""", ctx.proxy_cpus)
        ng = static_nginx("nginx-static", ng_port, "on")
        procs.append(ng)
        # The same nginx without tcp_nopush: on kernel 6.18 a corked sendfile cost 2-3x the CPU
        # for files of 100 KB and more, so nginx's best config here is without it.
        ng_nc_port = free_port()
        ng_nc = static_nginx("nginx-static-no-cork", ng_nc_port, "off")
        procs.append(ng_nc)
        ca = start_caddy("caddy-static", ca_port, f"  root * {d}\n  file_server", ctx.proxy_cpus)
        procs.append(ca)
        # The same open-file cache validity as nginx's open_file_cache_valid.
        yaml = weir_yaml(we_port, f"  files:\n    rule: \"PathPrefix(`/`)\"\n    static: {{ root: \"{d}\" }}\n").replace(
            "server: { workers: 1,", "server: { workers: 1, open_file_cache: { max: 20000, valid: 60s },")
        we = start_weir(ctx.weir, "weir-static", we_port, yaml, ctx.proxy_cpus)
        procs.append(we)
        conns = ctx.conn_levels[0]
        out = {}
        for label, path, kind in (("static-8k", "/page.html", "plain"), ("static-1m", "/big.bin", "plain"),
                                  ("static-many", "/", "many")):
            if kind == "many" and ctx.smoke:
                kind = "plain"
                path = "/many/f0001.txt"
            targets = [("nginx", ng, f"http://127.0.0.1:{ng_port}{path}"),
                       ("nginx-no-cork", ng_nc, f"http://127.0.0.1:{ng_nc_port}{path}"),
                       ("caddy", ca, f"http://127.0.0.1:{ca_port}{path}"),
                       ("weir", we, f"http://127.0.0.1:{we_port}{path}")]
            measure = lambda url, proc, kind=kind: run_wrk(url, conns, ctx.duration, wrk_script(kind), ctx.load_cpus, proc)
            res = interleave(f"{label}-c{conns}", targets, measure, ctx.rounds)
            if label == "static-1m":
                for name, m in res.items():
                    if not name.startswith("_"):
                        m["mb_per_s"] = m["rps"] * (1 << 20) / 1e6
            out[f"{label}-c{conns}"] = res
        return out
    finally:
        for p in procs:
            p.stop()

def start_nginx_stream(name, port, up_port, cpus):
    """nginx's stream module forwarding TCP to 127.0.0.1:up_port."""
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    conf = f"""load_module {NGINX_STREAM_MODULE};
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 65535;
pid {d}/nginx.pid;
error_log {d}/error.log crit;
events {{ worker_connections 20000; multi_accept on; }}
stream {{ server {{ listen 127.0.0.1:{port} backlog=4096; proxy_pass 127.0.0.1:{up_port}; proxy_timeout 1h; }} }}
"""
    path = os.path.join(d, "nginx.conf")
    open(path, "w").write(conf)
    return Proc(name, [which("nginx"), "-c", path, "-p", d], port, cpus)

def start_tcp_proxies(ctx, tag, up_port):
    """nginx stream, HAProxy mode tcp and a weir TCP router, each forwarding to up_port."""
    ng_port, ha_port, we_port = free_port(), free_port(), free_port()
    procs = []
    try:
        procs.append(start_nginx_stream(f"nginx-{tag}", ng_port, up_port, ctx.proxy_cpus))
        procs.append(start_haproxy(f"haproxy-{tag}", ha_port, f"backend be\n  mode tcp\n  server s1 127.0.0.1:{up_port}",
                                   "  mode tcp\n  default_backend be", ctx.proxy_cpus))
        yaml = f"""server: {{ workers: 1, access_log: {{ enabled: false }} }}
entrypoints:
  tcp: {{ address: "127.0.0.1:{we_port}" }}
tcp:
  routers: {{ all: {{ rule: "HostSNI(`*`)", service: up }} }}
  services: {{ up: {{ servers: [{{ address: "127.0.0.1:{up_port}" }}] }} }}
"""
        procs.append(start_weir(ctx.weir, f"weir-{tag}", we_port, yaml, ctx.proxy_cpus))
    except BaseException:
        for p in procs:
            p.stop()
        raise
    names = ["nginx", "haproxy", "weir"]
    return procs, [(n, p, str(port)) for n, p, port in zip(names, procs, (ng_port, ha_port, we_port))]

def run_redis_benchmark(port, ops, cpus, target):
    """redis-benchmark -P 16, SET then GET, ops of each; rps = both together."""
    before, clock = target.cpu_seconds(), cpu_times()
    out = subprocess.run(["taskset", "-c", cpus, "timeout", "300", "redis-benchmark", "-h", "127.0.0.1", "-p", port,
                          "-c", "50", "-n", str(ops), "-P", "16", "-t", "set,get", "--csv"],
                         capture_output=True, text=True).stdout
    machine, after = machine_figures(clock, cpu_times(), cpus), target.cpu_seconds()
    rows = {r[0]: r for r in csv.reader(out.splitlines()) if r and r[0] in ("SET", "GET")}
    if len(rows) != 2:
        return {"rps": 0, "requests": 0, "p50_ms": 0, "p90_ms": 0, "p99_ms": 0, "p999_ms": 0, "max_ms": 0,
                "non_2xx": 0, "socket_errors": 1, "cpu_us_per_req": None, **machine}
    seconds = sum(ops / float(r[1]) for r in rows.values())
    get = rows["GET"]
    return {"rps": 2 * ops / seconds, "requests": 2 * ops,
            "p50_ms": float(get[4]), "p90_ms": float(get[5]), "p99_ms": float(get[6]), "p999_ms": None,
            "max_ms": float(get[7]), "non_2xx": 0, "socket_errors": 0,
            "cpu_us_per_req": (after - before) * 1e6 / (2 * ops), **machine}

def run_bulk(port, cpus, target, size_mb):
    """BULK_STREAMS concurrent curl downloads of size_mb through the proxy."""
    before, clock = target.cpu_seconds(), cpu_times()
    url = f"http://127.0.0.1:{port}/bulk.bin"
    start = time.perf_counter()
    curls = [subprocess.Popen(["taskset", "-c", cpus, "curl", "-s", "-o", "/dev/null", "-w", "%{size_download} %{time_total}",
                               "--max-time", "120", url], stdout=subprocess.PIPE, text=True) for _ in range(BULK_STREAMS)]
    results = [c.communicate()[0].split() for c in curls]
    elapsed = time.perf_counter() - start
    machine, after = machine_figures(clock, cpu_times(), cpus), target.cpu_seconds()
    want = size_mb << 20
    ok = [r for r in results if len(r) == 2 and int(r[0]) == want]
    times = sorted(float(r[1]) * 1000 for r in ok)
    gib = len(ok) * want / (1 << 30)
    return {"rps": len(ok) / elapsed, "requests": len(ok),
            "p50_ms": times[len(times) // 2] if times else 0, "p90_ms": times[-1] if times else 0,
            "p99_ms": times[-1] if times else 0, "p999_ms": None, "max_ms": times[-1] if times else 0,
            "non_2xx": 0, "socket_errors": BULK_STREAMS - len(ok),
            "cpu_us_per_req": (after - before) * 1e6 / len(ok) if ok else None, **machine,
            "mb_per_s": len(ok) * want / elapsed / 1e6, "cpu_s_per_gib": (after - before) / gib if gib else None}

def scenario_tcp(ctx):
    """Seed 001's tcp endpoints and issue 11's bars: Redis through each TCP proxy with
    redis-benchmark -P 16 (SET and GET), and bulk transfer (BULK_STREAMS concurrent downloads of
    BULK_FILE_MB from an nginx upstream, relayed as bytes)."""
    out = {}
    redis_port = free_port()
    redis = Proc("redis", [which("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no"], redis_port, ctx.load_cpus)
    procs = [redis]
    try:
        tcp_procs, targets = start_tcp_proxies(ctx, "tcp-redis", redis_port)
        procs += tcp_procs
        ops = 20000 if ctx.smoke else 500_000 * ctx.duration // 10 * 2
        out["redis-P16-c50"] = interleave("redis-P16-c50", targets,
                                          lambda port, proc: run_redis_benchmark(port, ops, ctx.load_cpus, proc), ctx.rounds)
        d = os.path.join(WORK, "bulk-files")
        os.makedirs(d, exist_ok=True)
        size = (16 if ctx.smoke else BULK_FILE_MB) << 20
        big = os.path.join(d, "bulk.bin")
        if not os.path.exists(big) or os.path.getsize(big) != size:
            with open(big, "wb") as f:
                f.write(os.urandom(1 << 20) * (size >> 20))
        up_port = free_port()
        procs.append(start_nginx("upstream-bulk", up_port, f"""  sendfile on;
  server {{ listen 127.0.0.1:{up_port} backlog=4096; root {d}; location / {{ }} }}""", ctx.load_cpus))
        bulk_procs, targets = start_tcp_proxies(ctx, "tcp-bulk", up_port)
        procs += bulk_procs
        label = f"bulk-{BULK_STREAMS}x{size >> 20}MB"
        out[label] = interleave(label, targets, lambda port, proc: run_bulk(port, ctx.load_cpus, proc, size >> 20),
                                ctx.rounds)
        return out
    finally:
        for p in procs:
            p.stop()

def run_dnsperf(port, duration, cpus, target):
    """dnsperf for `duration` seconds: 20 clients (source ports), up to 200 queries in flight."""
    before, clock = target.cpu_seconds(), cpu_times()
    out = subprocess.run(["taskset", "-c", cpus, "dnsperf", "-s", "127.0.0.1", "-p", port, "-d",
                          os.path.join(WORK, "dns-queries.txt"), "-l", str(duration), "-c", "20", "-q", "200"],
                         capture_output=True, text=True).stdout
    machine, after = machine_figures(clock, cpu_times(), cpus), target.cpu_seconds()
    field = lambda name: next((l.split(":", 1)[1].split() for l in out.splitlines() if l.strip().startswith(name)), None)
    qps, completed, lost, latency = field("Queries per second"), field("Queries completed"), field("Queries lost"), field("Average Latency")
    if not qps or not completed:
        return {"rps": 0, "requests": 0, "p50_ms": 0, "p90_ms": 0, "p99_ms": 0, "p999_ms": 0, "max_ms": 0,
                "non_2xx": 0, "socket_errors": 1, "cpu_us_per_req": None, **machine}
    done = int(completed[0])
    avg_ms = float(latency[0]) * 1000
    max_ms = float(latency[-1].rstrip(")")) * 1000
    # dnsperf reports the mean and the maximum only.
    return {"rps": float(qps[0]), "requests": done, "mean_ms": avg_ms, "p50_ms": None, "p90_ms": None, "p99_ms": None,
            "p999_ms": None, "max_ms": max_ms, "non_2xx": 0,
            # A few datagrams lost under saturation is UDP; a tenth is a failure.
            "socket_errors": int(lost[0]) if lost and int(lost[0]) > done // 10 else 0,
            "lost": int(lost[0]) if lost else None,
            "cpu_us_per_req": (after - before) * 1e6 / done if done else None, **machine}

def scenario_udp(ctx):
    """UDP request/response: DNS queries from dnsperf through each proxy to dnsmasq (answering
    from its own table), against nginx's stream module (HAProxy has no UDP proxy)."""
    open(os.path.join(WORK, "dns-queries.txt"), "w").write("".join(f"h{i}.weir.test A\n" for i in range(1000)))
    up_port, ng_port, we_port = free_port(), free_port(), free_port()
    d = os.path.join(WORK, "dnsmasq")
    os.makedirs(d, exist_ok=True)
    procs = []
    try:
        procs.append(Proc("dnsmasq", [which("dnsmasq"), "-k", "--bind-interfaces", "--listen-address=127.0.0.1",
                                      "--no-resolv", "--no-hosts", f"--port={up_port}", "--address=/weir.test/10.1.2.3",
                                      "--user=root", f"--pid-file={d}/dnsmasq.pid", "--cache-size=10000"],
                          None, ctx.load_cpus))
        time.sleep(0.3)
        ng_dir = os.path.join(WORK, "nginx-udp")
        os.makedirs(ng_dir, exist_ok=True)
        conf = f"""load_module {NGINX_STREAM_MODULE};
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 65535;
pid {ng_dir}/nginx.pid;
error_log {ng_dir}/error.log crit;
events {{ worker_connections 20000; }}
stream {{ server {{ listen 127.0.0.1:{ng_port} udp reuseport; proxy_pass 127.0.0.1:{up_port}; proxy_responses 1; proxy_timeout 30s; }} }}
"""
        open(os.path.join(ng_dir, "nginx.conf"), "w").write(conf)
        procs.append(Proc("nginx-udp", [which("nginx"), "-c", os.path.join(ng_dir, "nginx.conf"), "-p", ng_dir], None, ctx.proxy_cpus))
        yaml = f"""server: {{ workers: 1, access_log: {{ enabled: false }} }}
entrypoints:
  dns: {{ address: "127.0.0.1:{we_port}/udp" }}
udp:
  routers: {{ dns: {{ service: dns }} }}
  services: {{ dns: {{ servers: [{{ address: "127.0.0.1:{up_port}" }}] }} }}
"""
        procs.append(start_weir(ctx.weir, "weir-udp", None, yaml, ctx.proxy_cpus))
        time.sleep(0.5)
        targets = [("nginx", procs[1], str(ng_port)), ("weir", procs[2], str(we_port))]
        duration = ctx.duration
        return {"dns-c20-q200": interleave("dns-c20-q200", targets,
                                           lambda port, proc: run_dnsperf(port, duration, ctx.load_cpus, proc), ctx.rounds)}
    finally:
        for p in procs:
            p.stop()

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

def scenario_idle(ctx):
    """RSS growth per idle keep-alive client connection, after one proxied request each."""
    n = 500 if ctx.smoke else IDLE_CONNS
    procs, _, targets = start_proxies(ctx, 64, "idle", maxconn=n + 500)
    results = {}
    try:
        for name, proc, url in targets:
            port = int(url.rsplit(":", 1)[1].strip("/"))
            request = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
            warm = socket.create_connection(("127.0.0.1", port))
            for _ in range(20):
                warm.sendall(request)
                read_one_response(warm)
            warm.close()
            time.sleep(0.5)
            before = proc.rss_kb()
            socks, errors = [], 0
            for _ in range(n):
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=10)
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
    finally:
        for p in procs:
            p.stop()
    return results

def write_idle_report(results, ctx, outdir):
    os.makedirs(outdir, exist_ok=True)
    md = ["# idle", "",
          f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench/run idle`: each proxy (one worker, "
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
    open(os.path.join(outdir, "idle.md"), "w").write("\n".join(md) + "\n")
    json.dump({"scenario": "idle", "proxy_cpus": ctx.proxy_cpus, "results": results},
              open(os.path.join(outdir, "idle.json"), "w"), indent=1)
    log("\n".join(md))

# ---------------------------------------------------------------- report

COLUMNS = [("req/s", "rps", "{:.0f}"), ("p50 ms", "p50_ms", "{:.3f}"), ("p90 ms", "p90_ms", "{:.3f}"),
           ("p99 ms", "p99_ms", "{:.3f}"), ("p99.9 ms", "p999_ms", "{:.3f}"), ("max ms", "max_ms", "{:.2f}"),
           ("non-2xx", "non_2xx", "{}"), ("sock err", "socket_errors", "{}"),
           ("CPU us/req", "cpu_us_per_req", "{:.2f}"), ("peak RSS MB", "peak_rss_mb", "{:.1f}"),
           ("steal %", "steal_pct", "{:.1f}"), ("load core busy %", "load_busy_pct", "{:.0f}"),
           ("reloads", "reloads", "{:.0f}")]

def table(res):
    rows = ["| target | " + " | ".join(c[0] for c in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for name, m in res.items():
        if name.startswith("_"):
            continue
        cells = [fmt.format(m[key]) if m.get(key) is not None else "—" for _, key, fmt in COLUMNS]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)

def ratios(res):
    lines = []
    w = res.get("weir")
    for peer in ("nginx", "nginx-no-cork", "haproxy", "weir-1route", "weir-nometrics", "weir-route-none",
                 "weir-unbatched", "weir-spool", "direct"):
        p = res.get(peer)
        if not w or not p:
            continue
        # A short smoke round of a slow scenario may finish no request at all: say so, not divide.
        parts = [f"req/s {w['rps'] / p['rps']:.3f}×" if p.get("rps") else "req/s — (peer finished none)"]
        if w.get("cpu_us_per_req") and p.get("cpu_us_per_req"):
            parts.append(f"CPU/req {w['cpu_us_per_req'] / p['cpu_us_per_req']:.3f}×")
        if p.get("p99_ms"):
            parts.append(f"p99 {w['p99_ms'] / p['p99_ms']:.3f}×")
        lines.append(f"- weir / {peer}: " + ", ".join(parts))
    return "\n".join(lines)

def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("  (matplotlib missing: no plot)")
        return
    keys = [("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms"), ("max", "max_ms")]
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, (label, res) in zip(axes[0], results.items()):
        for name, m in res.items():
            if name.startswith("_"):
                continue
            ax.plot([k for k, _ in keys], [m.get(f, 0) or 0 for _, f in keys], marker="o", label=name)
        ax.set_yscale("log")
        ax.set_title(label)
        ax.set_ylabel("latency (ms, log)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)

def write_report(scenario, results, ctx, outdir):
    os.makedirs(outdir, exist_ok=True)
    md = [f"# {scenario}", "",
          f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench/run {scenario}`: "
          f"{ctx.rounds} interleaved round(s) of {ctx.duration}s per target, medians shown.",
          f"CPU: proxies pinned to core {ctx.proxy_cpus}; load generator and upstream nginx on core {ctx.load_cpus}. "
          "Every proxy runs one worker. CPU us/req = the proxy process's user+sys time over the run / requests. "
          "steal % = CPU time the hypervisor took from this VM during the runs (median): when it is high, "
          "req/s and latency are disturbed, CPU us/req much less so. "
          "load core busy % = how busy the load generator's core was (median): near 100, the "
          "generator (with the upstream), not the proxy, set the req/s, and a faster proxy cannot show it there.", ""]
    for label, res in results.items():
        counts = {len(m["rounds"]) for n, m in res.items() if not n.startswith("_") and "rounds" in m}
        extra = [f"{c} rounds" for c in counts if c != ctx.rounds]
        if "_rate" in res:
            extra.insert(0, f"fixed rate {res['_rate']} req/s")
        md.append(f"## {label}" + (f" ({', '.join(extra)})" if extra else ""))
        md.append("")
        md.append(table(res))
        md.append("")
        md.append(ratios(res))
        md.append("")
        rates = [(n, m["mb_per_s"]) for n, m in res.items() if not n.startswith("_") and m.get("mb_per_s")]
        if rates:
            md.append("Throughput: " + ", ".join(f"{n} {r:.0f} MB/s" for n, r in rates))
            md.append("")
        docs = [(n, m["docs_per_s"]) for n, m in res.items() if not n.startswith("_") and m.get("docs_per_s")]
        if docs:
            md.append("Documents/s: " + ", ".join(f"{n} {d:.0f}" for n, d in docs))
            md.append("")
        cluster = [(n, m["cluster_cpu_us_per_req"]) for n, m in res.items()
                   if not n.startswith("_") and m.get("cluster_cpu_us_per_req")]
        if cluster:
            md.append("Cluster CPU per request (the nodes' JVMs, µs): "
                      + ", ".join(f"{n} {c:.0f}" for n, c in cluster))
            md.append("")
        means = [(n, m["mean_ms"]) for n, m in res.items() if not n.startswith("_") and m.get("mean_ms")]
        if means:
            md.append("Mean latency (dnsperf and h2load report no percentiles): " + ", ".join(f"{n} {v:.3f} ms" for n, v in means))
            md.append("")
        per_gib = [(n, m["cpu_s_per_gib"]) for n, m in res.items() if not n.startswith("_") and m.get("cpu_s_per_gib")]
        if per_gib:
            md.append("CPU seconds per GiB relayed: " + ", ".join(f"{n} {c:.3f}" for n, c in per_gib))
            md.append("")
        if "_sizes" in res:
            sizes = res["_sizes"]
            md.append(f"Body sizes (the original is {sizes['original']} bytes):")
            md.append("")
            for name, size in sizes.items():
                if name != "original":
                    md.append(f"- {name}: {size['bytes']} bytes of {size['encoding']} "
                              f"({size['bytes'] / sizes['original']:.3f} of the original)")
            md.append("")
    md.append(f"![latency percentiles]({scenario}.png)")
    open(os.path.join(outdir, f"{scenario}.md"), "w").write("\n".join(md) + "\n")
    json.dump({"scenario": scenario, "rounds": ctx.rounds, "duration_s": ctx.duration,
               "proxy_cpus": ctx.proxy_cpus, "load_cpus": ctx.load_cpus, "results": results},
              open(os.path.join(outdir, f"{scenario}.json"), "w"), indent=1)
    plot(results, os.path.join(outdir, f"{scenario}.png"))
    log("\n".join(md[:-1]))

# ---------------------------------------------------------------- main

class Ctx:
    pass

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--smoke", action="store_true", help="every scenario, one short round, results under bench/work")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10, help="seconds per target per round")
    ap.add_argument("--bin-dir", help="use prebuilt weir and weir-bench from this folder instead of building")
    args = ap.parse_args()
    names = args.scenarios or (["all"] if args.smoke else [])
    if not names:
        ap.error("name a scenario or `all`")
    if "all" in names:
        names = SCENARIOS
    for n in names:
        if n not in SCENARIOS:
            ap.error(f"unknown scenario {n}; expected one of {', '.join(SCENARIOS)} or all")
    ensure_tools()
    # 10,000 idle connections need more descriptors than the usual soft limit; as root the
    # hard limit can be raised too. Children (the proxies) inherit the limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limits in ((65535, max(hard, 65535)), (min(65535, hard if hard > 0 else 65535), hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
        except (ValueError, OSError):
            pass
    ctx = Ctx()
    ctx.weir, ctx.bench = binaries(args.bin_dir)
    ctx.proxy_cpus, ctx.load_cpus = cpu_layout()
    ctx.smoke = args.smoke
    ctx.rounds = 1 if args.smoke else max(1, args.rounds)
    ctx.duration = 1 if args.smoke else args.duration
    ctx.conn_levels = [50, 200] if args.smoke else [50, 1000]
    outdir = os.path.join(WORK, "smoke") if args.smoke else RESULTS
    os.makedirs(WORK, exist_ok=True)
    log(f"cores: proxies on {ctx.proxy_cpus}, load generator + upstream on {ctx.load_cpus}")
    failures = []
    for name in names:
        log(f"== {name}")
        if name == "idle":
            results = scenario_idle(ctx)
            write_idle_report(results, ctx, outdir)
            failures += [f"idle/{t}: {m['errors']} errors" for t, m in results.items() if m["errors"]]
            continue
        results = {"proxy": scenario_proxy, "ping": scenario_ping, "hosts": scenario_hosts,
                   "fixed-rate": scenario_fixed_rate, "tls": scenario_tls,
                   "compress": scenario_compress, "static": scenario_static, "tcp": scenario_tcp,
                   "udp": scenario_udp, "reload": scenario_reload, "h2": scenario_h2,
                   "grpc": scenario_grpc, "cache": scenario_cache, "es": scenario_es}[name](ctx)
        write_report(name, results, ctx, outdir)
        for label, res in results.items():
            for target, m in res.items():
                if target.startswith("_") or m.get("errors_expected"):
                    continue
                if m["requests"] == 0 or m["non_2xx"] or m["socket_errors"]:
                    failures.append(f"{label}/{target}: {m['requests']} requests, {m['non_2xx']} non-2xx, {m['socket_errors']} socket errors")
    if failures:
        log("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    log(f"results in {os.path.relpath(outdir, ROOT)}/")

if __name__ == "__main__":
    main()
