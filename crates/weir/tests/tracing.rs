//! End-to-end tracing: the W3C trace context a traced route sends its servers (the client's
//! trace continued with weir's own span id, a new one per try, `tracestate` passed on, an
//! invalid `traceparent` replaced), sampling by route, and routes without tracing unchanged.

mod common;
use common::*;
use std::sync::{Arc, Mutex};

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
fn a_route_sampling_nothing_still_passes_the_trace_on() {
    let up = Upstream::start("a");
    let weir = Weir::start(&traced_config(&up.url(), ""));
    // A new trace at rate 0: not sampled, random id.
    let got = echoed_header(&get_with(&weir, "/rare", ""), "traceparent").unwrap();
    assert_eq!(fields(&got)[3], "02");
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
