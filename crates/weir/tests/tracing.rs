//! End-to-end tracing: the W3C trace context a traced route sends its servers (the client's
//! trace continued with weir's own span id, a new one per try, `tracestate` passed on, an
//! invalid `traceparent` replaced), sampling by route, routes without tracing unchanged, and
//! the spans a collector receives over OTLP/HTTP and OTLP/gRPC, decoded by the official
//! `opentelemetry-proto` package (`otlp_collector.py`, in a venv under /var/cache/weir):
//! names, attributes, parent and child ids across weir and its server, a retry's two client
//! spans, the sampling ratio over 10,000 requests, and a collector killed under load.

mod common;
use common::*;
use serde_json::Value;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_PARENT: &str = "00f067aa0ba902b7";

/// A config whose route `/` goes to `upstream` with `server.tracing` (exporting to a port
/// nothing listens on, which must cost the requests nothing) and `/rare` samples nothing.
fn traced_config(upstream: &str, service_extra: &str) -> String {
    format!(
        "server:\n  workers: 1\n  tracing:\n    otlp: {{ endpoint: \"http://127.0.0.1:9\" }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n\
         \x20 rare: {{ rule: \"PathPrefix(`/rare`)\", service: app, tracing: {{ sample_rate: 0 }} }}\n\
         \x20 all: {{ rule: \"PathPrefix(`/`)\", priority: 1, service: app }}\n\
         services:\n  app:\n    servers: [{{ url: \"{upstream}\" }}]\n{service_extra}"
    )
}

/// `traceparent`'s four fields.
fn fields(traceparent: &str) -> Vec<String> {
    let parts: Vec<String> = traceparent.split('-').map(str::to_string).collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[0], "00", "{traceparent}");
    assert_eq!(parts[1].len(), 32, "{traceparent}");
    assert_eq!(parts[2].len(), 16, "{traceparent}");
    parts
}

fn get_with(weir: &Weir, target: &str, extra: &str) -> serde_json::Value {
    let r = request(
        weir.addr(),
        &format!("GET {target} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn a_sampled_client_trace_continues_with_weirs_span_id() {
    let up = Upstream::start("a");
    let weir = Weir::start(&traced_config(&up.url(), ""));
    let sent = format!("traceparent: 00-{CLIENT_TRACE}-{CLIENT_PARENT}-01\r\n");
    let j = get_with(
        &weir,
        "/x",
        &format!("{sent}tracestate: congo=t61rcWkgMzE, rojo=00f067aa0ba902b7\r\n"),
    );
    let got = echoed_header(&j, "traceparent").expect("traceparent sent upstream");
    let parts = fields(&got);
    assert_eq!(parts[1], CLIENT_TRACE);
    assert_ne!(
        parts[2], CLIENT_PARENT,
        "weir's own span id, not the client's"
    );
    assert_eq!(parts[3], "01");
    // The list as the client sent it (optional whitespace aside), one field.
    assert_eq!(
        echoed_header(&j, "tracestate").as_deref(),
        Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
    );
    let count = |name: &str| {
        j["headers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h[0].as_str().unwrap().eq_ignore_ascii_case(name))
            .count()
    };
    assert_eq!((count("traceparent"), count("tracestate")), (1, 1));
}

#[test]
fn an_invalid_traceparent_is_replaced_and_its_tracestate_dropped() {
    let up = Upstream::start("a");
    let weir = Weir::start(&traced_config(&up.url(), ""));
    // Uppercase hex is not version 00 (W3C Trace Context section 3.2.2.3).
    let bad = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
    let j = get_with(
        &weir,
        "/x",
        &format!("traceparent: {bad}\r\ntracestate: congo=1\r\n"),
    );
    let got = echoed_header(&j, "traceparent").unwrap();
    let parts = fields(&got);
    assert_ne!(parts[1].to_lowercase(), CLIENT_TRACE);
    assert_eq!(parts[3], "03", "a new trace: random id, sampled at rate 1");
    assert_eq!(echoed_header(&j, "tracestate"), None);
    // Without any traceparent, a new one is made too, different per request.
    let first = echoed_header(&get_with(&weir, "/x", ""), "traceparent").unwrap();
    let second = echoed_header(&get_with(&weir, "/x", ""), "traceparent").unwrap();
    assert_ne!(fields(&first)[1], fields(&second)[1]);
}

#[test]
fn a_route_sampling_nothing_passes_a_clients_trace_on() {
    let up = Upstream::start("a");
    let weir = Weir::start(&traced_config(&up.url(), ""));
    // No trace of its own at rate 0: nothing is sent (W3C Trace Context section 3.3, "No
    // traceparent received", step 2, lets a vendor not communicate that decision).
    assert_eq!(
        echoed_header(&get_with(&weir, "/rare", ""), "traceparent"),
        None
    );
    // An invalid traceparent is still replaced, unsampled.
    let bad = format!("traceparent: 00-{CLIENT_TRACE}-0000000000000000-01\r\n");
    let got = echoed_header(&get_with(&weir, "/rare", &bad), "traceparent").unwrap();
    let parts = fields(&got);
    assert_ne!(parts[1], CLIENT_TRACE);
    assert_eq!(parts[3], "02");
    // A sampled parent decides (parent_based), whatever the rate.
    let sent = format!("traceparent: 00-{CLIENT_TRACE}-{CLIENT_PARENT}-01\r\n");
    let got = echoed_header(&get_with(&weir, "/rare", &sent), "traceparent").unwrap();
    let parts = fields(&got);
    assert_eq!((parts[1].as_str(), parts[3].as_str()), (CLIENT_TRACE, "01"));
    // An unsampled one too, at rate 1.
    let sent = format!("traceparent: 00-{CLIENT_TRACE}-{CLIENT_PARENT}-00\r\n");
    let got = echoed_header(&get_with(&weir, "/x", &sent), "traceparent").unwrap();
    assert_eq!(fields(&got)[3], "00");
}

#[test]
fn each_try_carries_its_own_span_id() {
    // Two servers: whichever is tried first answers 503, the other 200.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let server = || {
        let (seen, answered) = (seen.clone(), answered.clone());
        RawUpstream::answering(move |head, _| {
            let traceparent = header_value(head, "traceparent")
                .unwrap_or("none")
                .to_string();
            seen.lock().unwrap().push(traceparent);
            let status = match answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 => 503,
                _ => 200,
            };
            http_answer(status, &[], "ok")
        })
    };
    let (a, b) = (server(), server());
    let config = traced_config(&a.url(), "").replace(
        &format!("servers: [{{ url: \"{}\" }}]", a.url()),
        &format!(
            "servers: [{{ url: \"{}\" }}, {{ url: \"{}\" }}]",
            a.url(),
            b.url()
        ),
    ) + "    retry: { attempts: 2, on: [503] }\n";
    let weir = Weir::start(&config);
    let sent = format!("traceparent: 00-{CLIENT_TRACE}-{CLIENT_PARENT}-01\r\n");
    let r = request(
        weir.addr(),
        &format!("GET /x HTTP/1.1\r\nHost: t\r\n{sent}Connection: close\r\n\r\n"),
    );
    assert_eq!(r.status, 200);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (first, second) = (fields(&seen[0]), fields(&seen[1]));
    assert_eq!(
        (first[1].as_str(), second[1].as_str()),
        (CLIENT_TRACE, CLIENT_TRACE)
    );
    assert_ne!(first[2], second[2], "a new span id per try: {seen:?}");
    assert!(first[2] != CLIENT_PARENT && second[2] != CLIENT_PARENT);
}

#[test]
fn without_server_tracing_the_fields_pass_through_unchanged() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config_with(&up.url(), "", ""));
    // Not even validated: a pass-through proxy leaves both as they are (section 3.5).
    let sent = "traceparent: 00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01\r\ntracestate: x=1\r\n";
    let j = get_with(&weir, "/x", sent);
    assert_eq!(
        echoed_header(&j, "traceparent").as_deref(),
        Some("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01")
    );
    assert_eq!(echoed_header(&j, "tracestate").as_deref(), Some("x=1"));
}

/// A Python with the official `opentelemetry-proto` and `grpcio` from PyPI, in a venv made
/// once under /var/cache/weir (as the Elasticsearch tests keep theirs).
fn collector_python() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        venv_with(
            "venv-otlp",
            &["opentelemetry-proto==1.45.2", "grpcio==1.85.1"],
        )
    })
}

/// `otlp_collector.py` running: the spans it decoded, one JSON object each.
struct Collector {
    child: Child,
    http_port: u16,
    grpc_port: u16,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Collector {
    fn start() -> Collector {
        Collector::start_on(0, 0)
    }

    /// On these ports (0: any free one).
    fn start_on(http_port: u16, grpc_port: u16) -> Collector {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otlp_collector.py");
        let mut child = Command::new(collector_python())
            .arg(script)
            .args([http_port.to_string(), grpc_port.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("collector starts");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("collector's ready line").unwrap();
        let ports: Vec<u16> = first
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("collector said {first}"))
            .split(' ')
            .map(|p| p.parse().unwrap())
            .collect();
        let spans: Arc<Mutex<Vec<Value>>> = Arc::default();
        let kept = spans.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock()
                    .unwrap()
                    .push(serde_json::from_str(&line).unwrap());
            }
        });
        Collector {
            child,
            http_port: ports[0],
            grpc_port: ports[1],
            spans,
        }
    }

    fn spans(&self) -> Vec<Value> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (up to 20 s) until `count` spans with `pred` arrived; all spans so far.
    fn wait_for(&self, count: usize, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let spans = self.spans();
            if spans.iter().filter(|s| pred(s)).count() >= count {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "{count} spans expected, got: {spans:#?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SERVER: i64 = 2;
const CLIENT: i64 = 3;

fn kind(span: &Value) -> i64 {
    span["kind"].as_i64().unwrap()
}

fn attr<'s>(span: &'s Value, key: &str) -> &'s Value {
    &span["attributes"][key]
}

/// A config exporting to `endpoint` over `protocol`, with `tracing_extra` under
/// `server.tracing`: `/` proxied to `upstream` (service `extra` under it), `/local` answered
/// by weir, `/guarded` behind an `ip_allow_list` that refuses loopback; an admin listener.
fn exporting_config(
    endpoint: &str,
    protocol: &str,
    tracing_extra: &str,
    upstream: &str,
    extra: &str,
) -> String {
    format!(
        "server:\n  workers: 1\n  admin: {{ address: \"127.0.0.1:0\" }}\n  tracing:\n\
         \x20   otlp: {{ endpoint: \"{endpoint}\", protocol: {protocol}, headers: {{ x-api-key: k1 }} }}\n\
         \x20   flush_interval: 50ms\n\
         \x20   service_name: edge\n\
         \x20   resource_attributes: {{ deployment.environment: test }}\n{tracing_extra}\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n\
         \x20 local: {{ rule: \"PathPrefix(`/local`)\", respond: {{ body: local }} }}\n\
         \x20 guarded: {{ rule: \"PathPrefix(`/guarded`)\", middlewares: [auth], service: app }}\n\
         \x20 all: {{ rule: \"PathPrefix(`/`)\", priority: 1, service: app }}\n\
         middlewares:\n  auth:\n    ip_allow_list: {{ source_range: [\"10.0.0.0/8\"] }}\n\
         services:\n  app:\n    servers: [{{ url: \"{upstream}\" }}]\n{extra}"
    )
}

/// `exporting_config` over OTLP/HTTP to `collector`, `/` proxied to a port nothing serves.
fn local_config(collector: &Collector, tracing_extra: &str) -> String {
    let endpoint = format!("http://127.0.0.1:{}", collector.http_port);
    exporting_config(
        &endpoint,
        "http/protobuf",
        tracing_extra,
        "http://127.0.0.1:9",
        "",
    )
}

/// One request and its spans: the server span and client span it made, checked against
/// what the client sent and what the upstream received.
fn spans_of_one_request(protocol: &str) {
    let collector = Collector::start();
    let endpoint = match protocol {
        "grpc" => format!("http://127.0.0.1:{}", collector.grpc_port),
        _ => format!("http://127.0.0.1:{}", collector.http_port),
    };
    let up = Upstream::start("a");
    let log = "  access_log: { enabled: true, path: stderr }\n";
    let config = exporting_config(&endpoint, protocol, "", &up.url(), "")
        .replace("  admin:", &format!("{log}  admin:"));
    let config = if protocol == "grpc" {
        config.replace("protocol: grpc,", "protocol: grpc, compression: gzip,")
    } else {
        config.replace(
            "protocol: http/protobuf,",
            "protocol: http/protobuf, compression: gzip,",
        )
    };
    let weir = Weir::start(&config);
    let sent = format!("traceparent: 00-{CLIENT_TRACE}-{CLIENT_PARENT}-01\r\ntracestate: congo=1\r\nUser-Agent: probe/1\r\n");
    let j = get_with(&weir, "/x?q=1", &sent);
    let upstream_got = fields(&echoed_header(&j, "traceparent").unwrap());
    let spans = collector.wait_for(2, |_| true);
    let server = spans
        .iter()
        .find(|s| kind(s) == SERVER)
        .expect("a server span");
    let client = spans
        .iter()
        .find(|s| kind(s) == CLIENT)
        .expect("a client span");
    for span in [server, client] {
        assert_eq!(span["protocol"], protocol);
        assert_eq!(span["trace_id"], CLIENT_TRACE);
        assert_eq!(span["resource"]["service.name"], "edge");
        assert_eq!(span["resource"]["deployment.environment"], "test");
        assert_eq!(span["headers"]["x-api-key"], "k1");
        assert_eq!(span["scope"], "weir");
        assert_eq!(span["trace_state"], "congo=1");
        assert!(span["end"].as_u64() >= span["start"].as_u64());
    }
    // The server span: the client's span is its parent.
    assert_eq!(server["name"], "GET all");
    assert_eq!(server["parent_span_id"], CLIENT_PARENT);
    assert_eq!(attr(server, "http.request.method"), "GET");
    assert_eq!(attr(server, "http.route"), "all");
    assert_eq!(attr(server, "url.path"), "/x");
    assert_eq!(attr(server, "url.scheme"), "http");
    assert_eq!(attr(server, "http.response.status_code"), 200);
    assert_eq!(attr(server, "client.address"), "127.0.0.1");
    assert_eq!(attr(server, "network.protocol.version"), "1.1");
    assert_eq!(attr(server, "server.address"), "t");
    assert_eq!(attr(server, "server.port"), 80);
    assert_eq!(attr(server, "user_agent.original"), "probe/1");
    assert!(attr(server, "http.response.body.size").as_i64().unwrap() > 0);
    assert_eq!(server["status_code"], 0);
    // The client span: the server span's child, and the parent the upstream was told of.
    assert_eq!(client["name"], "GET");
    assert_eq!(client["parent_span_id"], server["span_id"]);
    assert_eq!(client["span_id"], upstream_got[2]);
    assert_eq!(attr(client, "server.address"), "127.0.0.1");
    assert_eq!(attr(client, "server.port"), up.addr.port());
    assert_eq!(
        attr(client, "url.full").as_str(),
        Some(&*format!("{}/x?q=1", up.url()))
    );
    assert_eq!(attr(client, "http.response.status_code"), 200);
    assert_eq!(attr(client, "weir.upstream.connection_reused"), false);
    assert!(attr(client, "http.request.resend_count").is_null());
    // The access log line names the trace and weir's server span.
    let line = weir.wait_for_line("\"trace_id\"", 1);
    let logged: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(logged["trace_id"], CLIENT_TRACE);
    assert_eq!(logged["span_id"], server["span_id"]);
    // The next request reuses the pooled connection; a refusal and a local answer are noted.
    get_with(&weir, "/x", "");
    let r = request(
        weir.addr(),
        "GET /guarded HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 403);
    let spans = collector.wait_for(2, |s| kind(s) == CLIENT);
    let reused = spans.iter().filter(|s| kind(s) == CLIENT).nth(1).unwrap();
    assert_eq!(attr(reused, "weir.upstream.connection_reused"), true);
    let spans = collector.wait_for(1, |s| attr(s, "http.route") == "guarded");
    let refused = spans
        .iter()
        .find(|s| attr(s, "http.route") == "guarded")
        .unwrap();
    assert_eq!(attr(refused, "http.response.status_code"), 403);
    let event = |name: &str| {
        let events = refused["events"].as_array().unwrap();
        events
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {events:?}"))
    };
    // weir's own error, and which middleware refused.
    assert_eq!(
        event("weir.error")["attributes"]["error.type"],
        "PolicyRefused"
    );
    let event = event("weir.middleware.refused");
    assert_eq!(event["attributes"]["weir.middleware"], "auth");
    assert_eq!(event["attributes"]["http.response.status_code"], 403);
    // A new trace for a request without a traceparent: a root span.
    let root = spans
        .iter()
        .find(|s| attr(s, "http.route") == "guarded")
        .unwrap();
    assert_eq!(root["parent_span_id"], "");
}

#[test]
fn spans_over_otlp_http_protobuf() {
    spans_of_one_request("http/protobuf");
}

#[test]
fn spans_over_otlp_grpc() {
    spans_of_one_request("grpc");
}

#[test]
fn a_retried_request_shows_two_client_spans() {
    let collector = Collector::start();
    let endpoint = format!("http://127.0.0.1:{}", collector.http_port);
    let failing = RawUpstream::answering(|_, _| http_answer(503, &[], "down"));
    let up = Upstream::start("b");
    let servers = format!(
        "[{{ url: \"{}\" }}, {{ url: \"{}\" }}]",
        failing.url(),
        up.url()
    );
    let config = exporting_config(&endpoint, "http/protobuf", "", &failing.url(), "")
        .replace(&format!("[{{ url: \"{}\" }}]", failing.url()), &servers)
        + "    load_balancer: round_robin\n    retry: { attempts: 2, on: [503] }\n";
    let weir = Weir::start(&config);
    // Round robin: one of two requests tries the failing server first.
    for _ in 0..2 {
        get_with(&weir, "/x", "");
    }
    let spans = collector.wait_for(3, |s| kind(s) == CLIENT);
    let retried = spans
        .iter()
        .find(|s| attr(s, "http.request.resend_count") == 1)
        .expect("a resent try");
    let first = spans
        .iter()
        .find(|s| {
            kind(s) == CLIENT
                && s["trace_id"] == retried["trace_id"]
                && s["span_id"] != retried["span_id"]
        })
        .expect("the first try of the same request");
    assert_eq!(first["parent_span_id"], retried["parent_span_id"]);
    assert_eq!(attr(first, "http.response.status_code"), 503);
    assert_eq!(attr(first, "error.type"), "503");
    assert_eq!(first["status_code"], 2, "a failed try's span is an error");
    assert_eq!(attr(first, "server.port"), failing.addr.port());
    assert_eq!(attr(retried, "http.response.status_code"), 200);
    assert_eq!(attr(retried, "server.port"), up.addr.port());
    let server = spans
        .iter()
        .find(|s| kind(s) == SERVER && s["trace_id"] == retried["trace_id"])
        .expect("its server span");
    assert_eq!(server["span_id"], retried["parent_span_id"]);
    assert_eq!(attr(server, "http.response.status_code"), 200);
}

#[test]
fn the_sampling_ratio_holds_over_ten_thousand_requests() {
    let collector = Collector::start();
    let config = local_config(&collector, "    sample_rate: 0.1\n    max_queue: 20000\n");
    let weir = Weir::start(&config);
    let mut conn = Conn::open(weir.addr());
    const REQUESTS: usize = 10_000;
    for _ in 0..REQUESTS {
        conn.send(b"GET /local HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(conn.read(false).expect("an answer").status, 200);
    }
    // A marker request through a route sampling everything tells when the export caught up.
    let sent = format!("traceparent: 00-{CLIENT_TRACE}-{CLIENT_PARENT}-01\r\n");
    conn.send(format!("GET /local HTTP/1.1\r\nHost: t\r\n{sent}\r\n").as_bytes());
    assert_eq!(conn.read(false).unwrap().status, 200);
    let spans = collector.wait_for(1, |s| s["trace_id"] == CLIENT_TRACE);
    let sampled = spans
        .iter()
        .filter(|s| kind(s) == SERVER && s["trace_id"] != CLIENT_TRACE)
        .count();
    // Binomial(10,000, 0.1): mean 1,000, standard deviation 30; five of them either way.
    assert!(
        (850..=1150).contains(&sampled),
        "{sampled} of {REQUESTS} sampled"
    );
    let metrics = get(weir.addrs["@admin"], "a", "/metrics").text();
    assert!(
        metrics.contains("\nweir_tracing_spans_dropped_total 0\n"),
        "{metrics}"
    );
    // The exposition stays valid with the new family.
    promtool_check(&metrics);
}

#[test]
fn a_collector_killed_under_load_costs_no_request() {
    let mut collector = Collector::start();
    let (http_port, grpc_port) = (collector.http_port, collector.grpc_port);
    let config = local_config(&collector, "    max_queue: 50\n    batch: 20\n").replace(
        "headers: { x-api-key: k1 }",
        "headers: { x-api-key: k1 }, timeout: 1s",
    );
    let weir = Weir::start(&config);
    let load = SteadyLoad::start(weir.addr(), "/local");
    collector.wait_for(10, |s| kind(s) == SERVER);
    let _ = collector.child.kill();
    let _ = collector.child.wait();
    weir.wait_for_line("unreachable", 1);
    // Load goes on against a dead collector: the queue fills and spans are dropped, counted.
    let at_kill = load.ok();
    let deadline = Instant::now() + Duration::from_secs(20);
    while load.ok() < at_kill + 500 {
        assert!(Instant::now() < deadline, "the load stalled: {}", load.ok());
        std::thread::sleep(Duration::from_millis(20));
    }
    let dropped = |weir: &Weir| {
        let metrics = get(weir.addrs["@admin"], "a", "/metrics").text();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("weir_tracing_spans_dropped_total "))
            .map(|n| n.parse::<u64>().unwrap())
            .unwrap_or_else(|| panic!("no dropped count in {metrics}"))
    };
    assert!(dropped(&weir) > 0);
    // It comes back on the same port: said once, and spans arrive again.
    let back = Collector::start_on(http_port, grpc_port);
    weir.wait_for_line("answers again", 1);
    back.wait_for(10, |s| kind(s) == SERVER);
    let report = load.finish();
    report.assert_no_failure();
    assert!(report.ok > 500, "{}", report.ok);
    let went = weir
        .stderr()
        .iter()
        .filter(|l| l.contains("unreachable"))
        .count();
    assert_eq!(
        went,
        1,
        "one line when the collector goes: {:#?}",
        weir.stderr()
    );
}

#[test]
fn a_stop_sends_the_last_spans() {
    let collector = Collector::start();
    // No export would come before a minute: only the stop sends these.
    let config =
        local_config(&collector, "").replace("flush_interval: 50ms", "flush_interval: 60s");
    let mut weir = Weir::start(&config);
    let r = request(
        weir.addr(),
        "GET /local HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    std::thread::sleep(Duration::from_millis(300));
    assert!(collector.spans().is_empty(), "exported before the stop");
    weir.signal("TERM");
    let status = weir.child.wait().unwrap();
    assert!(status.success(), "{status}");
    let spans = collector.wait_for(1, |s| attr(s, "http.route") == "local");
    assert_eq!(spans.len(), 1, "{spans:#?}");
}

#[test]
fn a_traced_tcp_connection_makes_one_span() {
    let collector = Collector::start();
    // An echo server.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let echo_addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 4096];
                while let Ok(n) = std::io::Read::read(&mut conn, &mut buf) {
                    if n == 0 || std::io::Write::write_all(&mut conn, &buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let config = format!(
        "server:\n  workers: 1\n  tracing:\n    otlp: {{ endpoint: \"http://127.0.0.1:{}\" }}\n    flush_interval: 50ms\n\
         entrypoints:\n  raw: {{ address: \"127.0.0.1:0\" }}\n\
         tcp:\n  routers:\n    pipe: {{ rule: \"HostSNI(`*`)\", service: echo }}\n\
         \x20 services:\n    echo: {{ servers: [{{ address: \"{echo_addr}\" }}] }}\n",
        collector.http_port
    );
    let weir = Weir::start(&config);
    let mut conn = std::net::TcpStream::connect(weir.addrs["raw"]).unwrap();
    std::io::Write::write_all(&mut conn, b"hello").unwrap();
    let mut back = [0u8; 5];
    std::io::Read::read_exact(&mut conn, &mut back).unwrap();
    assert_eq!(&back, b"hello");
    drop(conn);
    let spans = collector.wait_for(1, |_| true);
    let span = &spans[0];
    assert_eq!(span["name"], "tcp pipe");
    assert_eq!(kind(span), SERVER);
    assert_eq!(span["parent_span_id"], "");
    assert_eq!(attr(span, "network.transport"), "tcp");
    assert_eq!(attr(span, "client.address"), "127.0.0.1");
    assert_eq!(attr(span, "weir.tcp.router"), "pipe");
    assert_eq!(attr(span, "weir.upstream.port"), echo_addr.port());
    assert_eq!(attr(span, "weir.tcp.bytes_from_client"), 5);
    assert_eq!(attr(span, "weir.tcp.bytes_to_client"), 5);
}

#[test]
fn a_reload_changes_the_sampling_and_the_collector() {
    let (first, second) = (Collector::start(), Collector::start());
    let config = local_config(&first, "    sample_rate: 0\n");
    let weir = Weir::start(&config);
    let local = |weir: &Weir| {
        let r = request(
            weir.addr(),
            "GET /local HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, 200);
    };
    local(&weir);
    // Rate 1 to the second collector: the next request's span goes there.
    let endpoint = |c: &Collector| format!("http://127.0.0.1:{}", c.http_port);
    let reloaded = config
        .replace(&endpoint(&first), &endpoint(&second))
        .replace("    sample_rate: 0\n", "    sample_rate: 1\n");
    std::fs::write(weir.config_path(), reloaded).unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    local(&weir);
    second.wait_for(1, |s| attr(s, "http.route") == "local");
    assert!(first.spans().is_empty(), "{:#?}", first.spans());
}

#[test]
fn grpc_calls_carry_their_status() {
    let collector = Collector::start();
    let server = GrpcServer::start();
    let config = format!(
        "server:\n  workers: 1\n  tracing:\n    otlp: {{ endpoint: \"http://127.0.0.1:{}\" }}\n    flush_interval: 50ms\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         routers:\n  grpc: {{ rule: \"PathPrefix(`/weir.Test/`)\", service: grpc }}\n\
         services:\n  grpc: {{ protocol: h2c, servers: [{{ url: \"http://127.0.0.1:{}\" }}] }}\n",
        collector.http_port, server.port
    );
    let weir = Weir::start(&config);
    let out = calls(weir.addr(), "unary,fail");
    assert_eq!(out["unary"]["code"], "OK", "{out}");
    assert_eq!(out["fail"]["code"], "INVALID_ARGUMENT", "{out}");
    let spans = collector.wait_for(2, |s| kind(s) == SERVER);
    let mut codes: Vec<i64> = spans
        .iter()
        .filter(|s| kind(s) == SERVER)
        .map(|s| {
            assert_eq!(attr(s, "network.protocol.version"), "2");
            attr(s, "rpc.grpc.status_code")
                .as_i64()
                .expect("a gRPC status")
        })
        .collect();
    codes.sort();
    // OK and INVALID_ARGUMENT (3), read from trailers or from a trailers-only head.
    assert_eq!(codes, vec![0, 3]);
}

#[test]
fn a_cached_route_notes_its_lookup() {
    let collector = Collector::start();
    let up = Upstream::start("a");
    let config = local_config(&collector, "")
        .replace(
            "  all: { rule: \"PathPrefix(`/`)\", priority: 1, service: app }\n",
            "  all: { rule: \"PathPrefix(`/`)\", priority: 1, service: app, cache: main }\n",
        )
        .replace("http://127.0.0.1:9", &up.url())
        + "caches:\n  main: {}\n";
    let weir = Weir::start(&config);
    get_with(&weir, "/x", "");
    let spans = collector.wait_for(1, |s| kind(s) == SERVER);
    let server = spans.iter().find(|s| kind(s) == SERVER).unwrap();
    let event = &server["events"][0];
    assert_eq!(event["name"], "weir.cache.lookup", "{server:#}");
    let status = event["attributes"]["weir.cache.status"].as_str().unwrap();
    assert!(status.starts_with("weir; fwd=uri-miss"), "{status}");
}
