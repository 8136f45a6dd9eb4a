"""One module a scenario, found by discover(): adding a scenario is adding a module here.

A scenario module declares
- NAME: what `bench/run NAME` calls it (and the name of its result files);
- ORDER: where it runs in `bench/run all` (ascending);
- PEERS: the servers it sets weir against (listed by `bench/run --help`);
- run(ctx): starts its servers, measures them (runner.interleave) and stops them; returns
  {table label: {target: figures}}, written by report.write_report.
It may declare report(results, ctx, outdir) and failures(results) -> [str] when its results are
not interleave's tables (see idle).

ctx holds weir and bench (the binaries), proxy_cpus and load_cpus, rounds, duration (seconds a
round), conn_levels (the client connection counts), smoke.
"""
import importlib, pkgutil

def discover():
    """{NAME: module}, in ORDER."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if module.NAME in found:
            raise SystemExit(f"two scenarios are named {module.NAME}: {found[module.NAME].__name__} and {module.__name__}")
        found[module.NAME] = module
    return dict(sorted(found.items(), key=lambda item: item[1].ORDER))
