"""Reload without a failed request: keep-alive proxying at 50 connections with no reload and
with one reload per second (SIGHUP to the master / the process), nginx beside weir. Failed
requests must be 0 for weir; nginx's are reported as they are (its old workers close their
keep-alive connections on reload)."""
import os, signal, threading, time

from harness.load import run_wrk, wrk_script
from harness.peers import http_targets, start_nginx_proxy, start_upstream, start_weir_proxy
from harness.procs import Procs, free_port
from harness.runner import interleave

NAME, ORDER, PEERS = "reload", 110, ("nginx",)

def run(ctx):
    conns = ctx.conn_levels[0]
    up_port, ng_port, we_port = free_port(), free_port(), free_port()
    with Procs() as procs:
        procs.add(start_upstream(ctx, up_port))
        ng = procs.add(start_nginx_proxy(ctx, "nginx-reload", ng_port, up_port, conns))
        we = procs.add(start_weir_proxy(ctx, "weir-reload", we_port, up_port, conns))
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

        targets = (http_targets("/", ("nginx", ng)) + http_targets("/#reload", ("nginx + 1 reload/s", ng))
                   + http_targets("/", ("weir", we)) + http_targets("/#reload", ("weir + 1 reload/s", we)))
        res = interleave(f"reload-c{conns}", targets, measure, ctx.rounds)
        # nginx's failures under reload are a result, not a harness failure.
        res["nginx + 1 reload/s"]["errors_expected"] = True
        return {f"reload-c{conns}": res}
