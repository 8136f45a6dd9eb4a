"""Seed 000 (INFINI Gateway vs nginx) on a real 3-node OpenSearch cluster: `_search` closed loop
(wrk) and at a fixed rate (weir-bench -R), then `_bulk` of 1, 10 and 1,000 fresh documents per
request, through nginx tuned as the seed's final config (every node in an upstream with
keepalive, HTTP/1.1), weir's Elasticsearch service (nodes discovered, `_bulk` split by node),
the same with `bulk.route: none`, without batching, and with the write spool on."""
import json, os, shutil, subprocess, time, urllib.request

from harness.common import ROOT, WORK, log
from harness.load import generator_measure, run_wrk, wrk_measure, wrk_script
from harness.peers import NGINX_PROXY_LOC, WEIR_CATCH_ALL, http_targets, start_nginx, start_weir, weir_yaml
from harness.procs import Procs, free_port, tree_cpu_seconds
from harness.report import measured
from harness.runner import interleave

NAME, ORDER, PEERS = "es", 150, ("nginx",)
ES_SEARCH_DOCS = 2000
ES_BULK_SIZES = (1, 10, 1000)
ES_BULK_RUNS = iter(range(1, 1 << 30))

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

def stop_es_cluster(proc):
    proc.stdin.close()  # the script stops its nodes when its input closes
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()

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

def es_bulk_script(docs):
    """A wrk script posting `_bulk` bodies as the seed's loadgen does: `docs` `create` items per
    request, each with an `_id` no run used before (a tag per script, a counter per request)."""
    tag = f"{os.getpid():x}-{next(ES_BULK_RUNS)}"
    return wrk_script(f"es-bulk-{docs}-{tag}", f"""wrk.method = "POST"
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
""")

def fill_indices(node):
    """`test` (ES_SEARCH_DOCS documents, 3 shards) for the searches, an empty `loadgen_test`
    (3 shards, no replicas) for the bulks."""
    es_call(node, "PUT", "/test", '{"settings": {"number_of_shards": 3, "number_of_replicas": 0}}')
    lines = []
    for i in range(ES_SEARCH_DOCS):
        lines.append(json.dumps({"index": {"_id": str(i)}}))
        lines.append(json.dumps({"n": i, "title": f"document {i}", "tags": ["a", "b", f"t{i % 10}"]}))
    es_call(node, "POST", "/test/_bulk?refresh=true", "\n".join(lines) + "\n", "application/x-ndjson")
    es_call(node, "PUT", "/loadgen_test",
            '{"settings": {"number_of_shards": 3, "number_of_replicas": 0, "refresh_interval": "10s"}}')

def run(ctx):
    cluster, nodes = start_es_cluster()
    try:
        with Procs() as procs:
            return measure_cluster(ctx, procs, cluster, nodes)
    finally:
        stop_es_cluster(cluster)

def measure_cluster(ctx, procs, cluster, nodes):
    node = nodes[0]
    fill_indices(node)
    ng_port, we_port, wn_port, wu_port, ws_port = (free_port() for _ in range(5))
    conns = 100
    servers = " ".join(f"server 127.0.0.1:{p};" for p in nodes)
    ng = procs.add(start_nginx("nginx-es", ng_port, f"""  upstream up {{ {servers} keepalive 300; keepalive_requests 1000000; keepalive_timeout 75s; }}
  client_max_body_size 100m; client_body_buffer_size 4m;
  server {{ listen 127.0.0.1:{ng_port} backlog=4096; location / {{ {NGINX_PROXY_LOC} }} }}""", ctx.proxy_cpus))

    def start_weir_es(name, port, bulk, extra=""):
        return procs.add(start_weir(ctx.weir, name, port, weir_yaml(port, WEIR_CATCH_ALL.replace("service: up", "service: es"), f"""services:
  es:
    elasticsearch:
      hosts: ["http://127.0.0.1:{node}"]
      bulk: {{ {bulk} }}
{extra}    keepalive: {{ max_idle_per_server: 300, idle_timeout: 75s }}
"""), ctx.proxy_cpus))

    we = start_weir_es("weir-es", we_port, "route: node")
    wn = start_weir_es("weir-es-whole", wn_port, "route: none")
    # The bulk scenarios also run weir without batching, and with the write spool on (a
    # healthy cluster: what having it costs).
    wu = start_weir_es("weir-es-unbatched", wu_port, "route: node, batch: false")
    spool_dir = os.path.join(WORK, f"es-spool-{os.getpid()}")
    shutil.rmtree(spool_dir, ignore_errors=True)
    ws = start_weir_es("weir-es-spool", ws_port, "route: node", f"      spool: {{ path: {spool_dir} }}\n")
    time.sleep(2)  # the nodes discovered, the shard map built
    # Warm the nodes' JIT (C1 only, see scripts/opensearch-cluster) before anything counts.
    for port in nodes:
        run_wrk(f"http://127.0.0.1:{port}/test/_search", 20, 2 if ctx.smoke else 10,
                wrk_script("plain"), ctx.load_cpus, None)

    def targets(path):
        # `direct`: the load generator against the first node itself, no proxy: the
        # cluster's own pace, which no proxy passing requests through one by one can beat.
        return (http_targets(path, ("nginx", ng), ("weir", we), ("weir-route-none", wn))
                + [("direct", None, f"http://127.0.0.1:{node}{path}")])

    out = {}
    measure = with_cluster_cpu(wrk_measure(ctx, conns, wrk_script("plain")), cluster)
    closed = interleave("es-search", targets("/test/_search"), measure, ctx.rounds)
    out[f"es-search-c{conns}"] = closed
    rate = max(50, int(0.5 * min(closed["nginx"]["rps"], closed["weir"]["rps"])))
    measure = with_cluster_cpu(generator_measure(ctx, rate, conns), cluster)
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
        # A new script (fresh ids) for every round.
        measure = with_cluster_cpu(
            lambda url, proc: run_wrk(url, bulk_conns, seconds, es_bulk_script(docs), ctx.load_cpus, proc),
            cluster)
        bulk_targets = targets("/_bulk") + http_targets("/_bulk", ("weir-unbatched", wu), ("weir-spool", ws))
        res = interleave(f"es-bulk-{docs}", bulk_targets, measure, ctx.rounds)
        for _, m in measured(res):
            m["docs_per_s"] = m["rps"] * docs
        out[f"es-bulk-{docs}-c{bulk_conns}"] = res
    es_call(node, "POST", "/loadgen_test/_refresh")
    log(f"  loadgen_test holds {es_call(node, 'GET', '/loadgen_test/_count')['count']} documents")
    return out
