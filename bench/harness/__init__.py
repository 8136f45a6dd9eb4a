"""The benchmark harness started by bench/run: weir against nginx, HAProxy, Caddy and Varnish on
the same machine, interleaved (see bench/README.md).

runner: the command line, the rounds and the checks; report: the tables, JSON and plots;
procs, peers and load: what the scenarios share (processes and ports, the servers' configs, the
load generators); scenarios/: one module a scenario, found by scenarios.discover().
"""
