//! `/metrics` on the real binary: the exposition passes `promtool check metrics` (Debian's
//! `prometheus` package) and its numbers match the requests sent: by entrypoint, router and
//! service, the latency histograms' counts, retries and connect errors, server health and
//! in-flight gauges, reloads and build info. `server.metrics: false` leaves out the per-router
//! and per-service counting.

mod common;
use common::*;
use std::time::{Duration, Instant};

fn config(upstream: &Upstream, dead: u16, metrics: bool) -> String {
    format!(
        "server: {{ workers: 1, metrics: {metrics}, admin: {{ address: \"127.0.0.1:0\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         services:\n  api:\n    load_balancer: round_robin\n    servers: [{{ url: \"{}\" }}, {{ url: \"http://127.0.0.1:{dead}\" }}]\n    retry: {{ attempts: 2 }}\n\
         routers:\n  api: {{ rule: \"PathPrefix(`/api`)\", service: api }}\n  \"hello \\\"q\\\"\": {{ rule: \"PathPrefix(`/`)\", respond: {{ status: 404, body: \"no\" }} }}\n",
        upstream.url()
    )
}

/// Fetches `/metrics` until every one of `lines` is in it: a worker counts an answer just
/// after sending it, and a scrape may read one cell before and the next after that.
fn metrics_with_all(weir: &Weir, lines: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = get(weir.addrs["@admin"], "a", "/metrics").text();
        let missing = lines.iter().find(|line| !text.lines().any(|l| l == **line));
        match missing {
            None => return text,
            Some(line) => assert!(Instant::now() < deadline, "no `{line}` in:\n{text}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn metrics_with(weir: &Weir, line: &str) -> String {
    metrics_with_all(weir, &[line])
}

#[test]
fn metrics_pass_promtool_and_count_what_was_sent() {
    let upstream = Upstream::start("up");
    let dead = free_port();
    let weir = Weir::start(&config(&upstream, dead, true));
    for _ in 0..20 {
        assert_eq!(get(weir.addr(), "a", "/api/x").status, 200);
    }
    for _ in 0..3 {
        assert_eq!(get(weir.addr(), "a", "/other").status, 404);
    }
    let text = metrics_with_all(
        &weir,
        &[
            "weir_router_request_duration_seconds_count{router=\"hello \\\"q\\\"\"} 3",
            "weir_responses_total{entrypoint=\"web\",code=\"2xx\"} 20",
            "weir_responses_total{entrypoint=\"web\",code=\"4xx\"} 3",
            "weir_router_responses_total{router=\"api\",code=\"2xx\"} 20",
            "weir_router_responses_total{router=\"hello \\\"q\\\"\",code=\"4xx\"} 3",
            "weir_service_responses_total{service=\"api\",code=\"2xx\"} 20",
            "weir_router_request_duration_seconds_count{router=\"api\"} 20",
            "weir_router_request_duration_seconds_bucket{router=\"api\",le=\"+Inf\"} 20",
            "weir_service_request_duration_seconds_count{service=\"api\"} 20",
        ],
    );
    promtool_check(&text);
    let has = |line: &str| assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    // Buckets from 100 µs: the sub-millisecond answers are told apart.
    assert!(
        text.lines().any(|l| l.starts_with(
            "weir_router_request_duration_seconds_bucket{router=\"api\",le=\"0.0001\"} "
        )),
        "{text}"
    );
    // Round robin sent every other first try to the dead server; each was retried.
    assert_eq!(upstream.request_count(), 20);
    has("weir_upstream_retries_total{service=\"api\"} 10");
    has("weir_upstream_connect_errors_total{service=\"api\"} 10");
    has(&format!(
        "weir_server_up{{service=\"api\",server=\"{}\"}} 1",
        upstream.url()
    ));
    has(&format!(
        "weir_server_in_flight{{service=\"api\",server=\"{}\"}} 0",
        upstream.url()
    ));
    has("weir_config_version 1");
    has("weir_reloads_total{result=\"success\"} 0");
    has(&format!(
        "weir_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    ));

    // A reload is counted, and the counters carry over it.
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    let text = metrics_with(&weir, "weir_reloads_total{result=\"success\"} 1");
    promtool_check(&text);
    assert!(text.lines().any(|l| l == "weir_config_version 2"), "{text}");
    assert!(
        text.lines()
            .any(|l| l == "weir_router_responses_total{router=\"api\",code=\"2xx\"} 20"),
        "{text}"
    );
}

#[test]
fn metrics_off_counts_only_entrypoints() {
    let upstream = Upstream::start("up");
    let weir = Weir::start(&config(&upstream, free_port(), false));
    for _ in 0..4 {
        get(weir.addr(), "a", "/api/x");
    }
    let text = metrics_with(
        &weir,
        "weir_responses_total{entrypoint=\"web\",code=\"2xx\"} 4",
    );
    assert!(
        text.lines()
            .any(|l| l == "weir_router_responses_total{router=\"api\",code=\"2xx\"} 0"),
        "{text}"
    );
}
