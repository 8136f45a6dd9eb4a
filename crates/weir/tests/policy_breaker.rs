//! End-to-end `circuit_breaker` against the binary: a real upstream that starts failing (500s,
//! then refused connections, then slow answers) opens the breaker, whose clients get
//! `response_code` while the upstream is spared, and that closes again once the upstream
//! recovers. Traefik's circuitbreaker package has no test of its own; the cases come from the
//! vulcand/oxy cbreaker it wraps (cbreaker/cbreaker_test.go, named on each test) and from
//! Traefik's circuitbreaker.md (the expressions, one breaker per router). Two workers, so the
//! statistics are the instance's.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// weir with routers `/a` and `/b` to `up`, both behind the breaker `cb` with `settings`
/// (a flow mapping's inner keys); `server_extra` goes into `server`.
fn config(up: &FlakyUpstream, settings: &str, server_extra: &str) -> String {
    format!(
        "server: {{ workers: 2{server_extra} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         routers:\n\
         \x20 a: {{ rule: \"PathPrefix(`/a`)\", middlewares: [cb], service: app }}\n\
         \x20 b: {{ rule: \"PathPrefix(`/b`)\", middlewares: [cb], service: app }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n  cb: {{ circuit_breaker: {{ {settings} }} }}\n",
        up.url()
    )
}

/// A flaky upstream, healthy for now, and weir with its routers behind a breaker with
/// `settings`; `healthy` requests to `/a` answered 200 first.
fn started(settings: &str, healthy: usize) -> (FlakyUpstream, Weir) {
    let up = FlakyUpstream::start();
    let weir = Weir::start(&config(&up, settings, ""));
    for _ in 0..healthy {
        assert_eq!(fetch(&weir, "/a"), (200, "ok".to_string()));
    }
    (up, weir)
}

/// The status and body of a GET of `path`.
fn fetch(weir: &Weir, path: &str) -> (u16, String) {
    let resp = get(weir.addr(), "t", path);
    (resp.status, resp.text())
}

/// The breaker's own answer: the status and its text, as Traefik's fallback writes them.
fn breaker_answer(status: u16) -> (u16, String) {
    let text = match status {
        503 => "Service Unavailable",
        429 => "Too Many Requests",
        _ => unreachable!("a status these tests use"),
    };
    (status, text.to_string())
}

/// Sends GETs of `path`, 10ms apart, until the breaker answers one with `status` (at most
/// `limit`), checking each earlier answer with `before`; how many were sent. The pause lets
/// each outcome be counted before the next request, and the checks (at most one per
/// `check_period`) come every few requests.
fn until_open(
    weir: &Weir,
    path: &str,
    status: u16,
    limit: usize,
    mut before: impl FnMut(&(u16, String)),
) -> usize {
    for sent in 1..=limit {
        let answer = fetch(weir, path);
        if answer == breaker_answer(status) {
            return sent;
        }
        before(&answer);
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the breaker did not open within {limit} requests");
}

/// While open, the breaker answers every request and the upstream sees none of them.
fn stays_open(weir: &Weir, up: &FlakyUpstream, path: &str, status: u16) {
    let answered = up.answered();
    for _ in 0..10 {
        assert_eq!(fetch(weir, path), breaker_answer(status));
    }
    assert_eq!(up.answered(), answered, "the upstream was spared");
}

/// Sends GETs of `path` until 10 in a row are the healthy upstream's (within `within`);
/// when the first of them came.
fn until_closed(weir: &Weir, path: &str, status: u16, within: Duration) -> Instant {
    let deadline = Instant::now() + within;
    let mut first_through = None;
    let mut in_a_row = 0;
    while in_a_row < 10 {
        assert!(Instant::now() < deadline, "the breaker did not close");
        let answer = fetch(weir, path);
        if answer == (200, "ok".to_string()) {
            first_through.get_or_insert_with(Instant::now);
            in_a_row += 1;
        } else {
            assert_eq!(answer, breaker_answer(status), "only the breaker's answers");
            in_a_row = 0;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    first_through.expect("some went through")
}

/// TestCircuitBreaker_standbyCycle, then TestCircuitBreaker_fullCycle with a real upstream
/// answering 500s: Traefik's `ResponseCodeRatio(500, 600, 0, 600)` expression opens the
/// breaker, which answers 503 for `fallback_duration`, then recovers and closes once the
/// upstream is healthy again. The other router naming the same middleware has a breaker of
/// its own (circuitbreaker.md: "Each router gets its own instance").
#[test]
fn five_hundreds_open_the_breaker_and_it_closes_when_they_stop() {
    let (up, weir) = started(
        "expression: 'ResponseCodeRatio(500, 600, 0, 600) > 0.5', fallback_duration: 2s, \
         recovery_duration: 1s",
        5,
    );
    up.set(Behaviour::Status(500));
    let mut last_through = Instant::now();
    let sent = until_open(&weir, "/a", 503, 50, |answer| {
        assert_eq!(*answer, (500, "ok".to_string()), "the upstream's own 500");
        last_through = Instant::now();
    });
    // More 500s than 200s, then the next check: the sixth or a little later.
    assert!(sent >= 7, "opened after {sent} requests");
    weir.wait_for_line(
        ": router `a`: circuit breaker `cb` opened: `ResponseCodeRatio(500, 600, 0, 600) > \
         0.5` holds; answering 503 for 2s",
        1,
    );
    let last_through = last_through;
    stays_open(&weir, &up, "/a", 503);
    let answered = up.answered();
    assert_eq!(
        fetch(&weir, "/b"),
        (500, "ok".to_string()),
        "`b`'s own breaker"
    );
    assert_eq!(up.answered(), answered + 1);
    up.set(Behaviour::Healthy);
    let first_through = until_closed(&weir, "/a", 503, Duration::from_secs(20));
    // The breaker may trip while the last 500 is on its way back: a little less than 2s.
    assert!(
        first_through - last_through >= Duration::from_millis(1900),
        "open for fallback_duration: {:?}",
        first_through - last_through
    );
    // Past recovery_duration, the next request closes it.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(fetch(&weir, "/a"), (200, "ok".to_string()));
    weir.wait_for_line(
        ": router `a`: circuit breaker `cb` closed: the recovery is over",
        1,
    );
}

/// Refused connections (weir's 502s are oxy's network errors) open a
/// `NetworkErrorRatio() > 0.5` breaker with `response_code: 429`. TestCircuitBreaker_
/// triggerDuringRecovery: the upstream still refuses when the breaker recovers, so the
/// requests it lets through fail and it opens again; once the upstream listens, it closes.
#[test]
fn refused_connections_open_the_breaker_and_it_reopens_while_they_go_on() {
    let (up, weir) = started(
        "expression: 'NetworkErrorRatio() > 0.5', fallback_duration: 2s, recovery_duration: 2s, \
         response_code: 429",
        3,
    );
    up.set(Behaviour::Refusing);
    until_open(&weir, "/a", 429, 50, |(status, _)| {
        assert_eq!(*status, 502, "weir's answer for a refused connection");
    });
    stays_open(&weir, &up, "/a", 429);
    // Recovering: some requests are let through, fail, and the breaker opens again.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "nothing was let through");
        let answer = fetch(&weir, "/a");
        if answer.0 == 502 {
            break;
        }
        assert_eq!(answer, breaker_answer(429));
        std::thread::sleep(Duration::from_millis(10));
    }
    // The next check (100ms on) sees it; then open for fallback_duration again.
    std::thread::sleep(Duration::from_millis(150));
    let answer = fetch(&weir, "/a");
    if answer.0 == 502 {
        // The answer above ran the check; this one finds the breaker open.
        assert_eq!(fetch(&weir, "/a"), breaker_answer(429));
    } else {
        assert_eq!(answer, breaker_answer(429));
    }
    up.set(Behaviour::Healthy);
    until_closed(&weir, "/a", 429, Duration::from_secs(20));
}

/// Slow answers open a `LatencyAtQuantileMS(50.0) > 300` breaker once they are the median
/// (Traefik's latency example); it closes when answers are fast again.
#[test]
fn slow_answers_open_the_breaker_and_it_closes_when_they_are_fast() {
    let (up, weir) = started(
        "expression: 'LatencyAtQuantileMS(50.0) > 300', fallback_duration: 2s, \
         recovery_duration: 1s",
        3,
    );
    up.set(Behaviour::Slow(Duration::from_millis(600)));
    let sent = until_open(&weir, "/a", 503, 20, |answer| {
        assert_eq!(*answer, (200, "ok".to_string()));
    });
    // Three fast and four slow: the median is slow (the fourth's outcome may be counted
    // just after the next request is let through, by the other worker).
    assert!((5..=6).contains(&sent), "opened after {sent} slow requests");
    stays_open(&weir, &up, "/a", 503);
    up.set(Behaviour::Healthy);
    until_closed(&weir, "/a", 503, Duration::from_secs(20));
}

/// TestCircuitBreaker_requestThreshold: `NetworkErrorRatio() > 0.5 && RequestThreshold() >=
/// 20` keeps the breaker closed through 19 failures however high their ratio, and opens it
/// at the check after the twentieth. A gRPC call then gets the answer in gRPC form.
#[test]
fn request_threshold_holds_the_breaker_until_enough_requests() {
    let (up, weir) = started(
        "expression: 'NetworkErrorRatio() > 0.5 && RequestThreshold() >= 20', \
         check_period: 1ms",
        0,
    );
    up.set(Behaviour::Refusing);
    for _ in 0..20 {
        assert_eq!(fetch(&weir, "/a").0, 502);
        // Past the check period, so each outcome is checked.
        std::thread::sleep(Duration::from_millis(5));
    }
    let sent = until_open(&weir, "/a", 503, 5, |(status, _)| assert_eq!(*status, 502));
    // The twentieth outcome may be counted after the next request is let through.
    assert!(sent <= 3, "opened {sent} requests after the twentieth");
    // Open (for 10s): a gRPC call gets the answer in gRPC's form, UNAVAILABLE.
    let url = format!("http://{}/a/weir.Test/Unary", weir.addr());
    let head = curl_grpc_head(&["--http2-prior-knowledge"], &url);
    assert!(head.starts_with("http/2 200"), "{head}");
    assert_eq!(header_value(&head, "grpc-status"), Some("14"), "{head}");
    assert_eq!(
        header_value(&head, "grpc-message"),
        Some("service unavailable"),
        "{head}"
    );
}

/// A breaker's state outlives a reload that leaves it as it was (issue 35), and a changed
/// breaker starts closed.
#[test]
fn a_reload_keeps_an_unchanged_breaker_open() {
    let up = FlakyUpstream::start();
    let settings = |fallback: &str| {
        format!("expression: 'NetworkErrorRatio() > 0.5', fallback_duration: {fallback}")
    };
    let admin = ", admin: { address: \"127.0.0.1:0\" }";
    let weir = Weir::start(&config(&up, &settings("60s"), admin));
    up.set(Behaviour::Refusing);
    until_open(&weir, "/a", 503, 50, |(status, _)| assert_eq!(*status, 502));
    up.set(Behaviour::Healthy);
    // The admin listener answers: signals are handled.
    get(weir.addrs["@admin"], "admin", "/");
    let mut same = config(&up, &settings("60s"), admin);
    same.push_str("  unused: { add_prefix: /x }\n");
    std::fs::write(weir.config_path(), same).unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    assert_eq!(fetch(&weir, "/a"), breaker_answer(503), "still open");
    std::fs::write(weir.config_path(), config(&up, &settings("61s"), admin)).unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 2);
    assert_eq!(fetch(&weir, "/a"), (200, "ok".to_string()), "a new breaker");
}

/// A bad expression is refused by `weir check`, pointing into it.
#[test]
fn weir_check_points_into_a_bad_expression() {
    let up = FlakyUpstream::start();
    let yaml = config(
        &up,
        "expression: 'NetworkErrorRatio() > 0.5 && Latency() > 3'",
        "",
    );
    let refused = weir_check_refuses("breaker-check", &yaml);
    assert!(
        refused.contains(":10:70: invalid `expression`: unknown metric `Latency`"),
        "{refused}"
    );
}

/// circuitbreaker.md: "The circuit breaker only analyzes what happens *after* its position
/// within the middleware chain". An `ip_allow_list` refusing every client (403) before the
/// breaker is never seen by it; after it, its refusals open it.
#[test]
fn the_breaker_counts_only_what_comes_after_it() {
    let up = FlakyUpstream::start();
    let weir = Weir::start(&format!(
        "server: {{ workers: 2 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n\
         \x20 before: {{ rule: \"PathPrefix(`/before`)\", middlewares: [nobody, cb], service: app }}\n\
         \x20 after: {{ rule: \"PathPrefix(`/after`)\", middlewares: [cb, nobody], service: app }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n\
         \x20 nobody: {{ ip_allow_list: {{ source_range: [192.0.2.1] }} }}\n\
         \x20 cb: {{ circuit_breaker: {{ expression: 'ResponseCodeRatio(400, 500, 0, 600) > 0.5' }} }}\n",
        up.url()
    ));
    for _ in 0..20 {
        assert_eq!(fetch(&weir, "/before").0, 403);
        std::thread::sleep(Duration::from_millis(10));
    }
    until_open(&weir, "/after", 503, 20, |(status, _)| {
        assert_eq!(*status, 403)
    });
    assert_eq!(up.answered(), 0);
}
