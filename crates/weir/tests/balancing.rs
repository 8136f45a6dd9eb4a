//! End-to-end load balancing across real upstreams, with two workers so weights must hold
//! across threads: round robin by weight, least_conn, random, p2c, consistent_hash.

mod common;
use common::*;
use std::collections::HashMap;

fn balanced(policy: &str, extra: &str, servers: &[(&Upstream, u32)]) -> Weir {
    let list: Vec<String> = servers
        .iter()
        .map(|(u, w)| format!("{{ url: \"{}\", weight: {w} }}", u.url()))
        .collect();
    Weir::start(&format!(
        "server: {{ workers: 2 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: app\n\
         services:\n  app:\n    load_balancer: {policy}\n{extra}    servers: [{}]\n",
        list.join(", ")
    ))
}

/// Sends `n` requests on fresh connections (spread over both workers) and counts by upstream.
fn spread(weir: &Weir, n: usize, headers: impl Fn(usize) -> String) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for i in 0..n {
        let r = request(
            weir.addr(),
            &format!(
                "GET /{i} HTTP/1.1\r\nHost: t\r\n{}Connection: close\r\n\r\n",
                headers(i)
            ),
        );
        assert_eq!(r.status, 200);
        *counts
            .entry(r.header("x-upstream").unwrap().to_string())
            .or_insert(0) += 1;
    }
    counts
}

#[test]
fn round_robin_honours_weights_across_workers() {
    let (a, b) = (Upstream::start("a"), Upstream::start("b"));
    let weir = balanced("round_robin", "", &[(&a, 2), (&b, 1)]);
    let counts = spread(&weir, 300, |_| String::new());
    let (ca, cb) = (counts["a"], counts["b"]);
    assert!((180..=220).contains(&ca) && ca + cb == 300, "{counts:?}");
}

#[test]
fn random_and_p2c_spread_by_weight() {
    let (a, b) = (Upstream::start("a"), Upstream::start("b"));
    for policy in ["random", "p2c"] {
        let weir = balanced(policy, "", &[(&a, 3), (&b, 1)]);
        let counts = spread(&weir, 400, |_| String::new());
        let ca = counts.get("a").copied().unwrap_or(0);
        assert!(counts.len() == 2 && ca > 200, "{policy}: {counts:?}");
    }
}

#[test]
fn least_conn_prefers_the_idle_server() {
    let (a, b) = (Upstream::start("a"), Upstream::start("b"));
    let weir = balanced("least_conn", "", &[(&a, 1), (&b, 1)]);
    // Idle servers alternate.
    let counts = spread(&weir, 40, |_| String::new());
    assert!(counts["a"] >= 10 && counts["b"] >= 10, "{counts:?}");
    // While one slow request occupies server X, every new request goes to the other one.
    let addr = weir.addr();
    let served = || a.request_count() + b.request_count();
    let before = served();
    let slow = std::thread::spawn(move || get(addr, "t", "/slow/1500"));
    // Wait until the slow request has reached its server (a loaded machine may take a while).
    let waiting = std::time::Instant::now();
    while served() == before && waiting.elapsed() < std::time::Duration::from_secs(1) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Paced: a request leaves the in-flight count a moment after its client has the answer,
    // and on a loaded machine that moment stretches, so the next one would see a tie.
    let mut during: HashMap<String, usize> = HashMap::new();
    for _ in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        for (server, n) in spread(&weir, 1, |_| String::new()) {
            *during.entry(server).or_insert(0) += n;
        }
    }
    let busy = slow
        .join()
        .unwrap()
        .header("x-upstream")
        .unwrap()
        .to_string();
    // A just-finished request on another worker may still count as in flight for a moment,
    // so allow one tie going to the busy server.
    let to_busy = during.get(&busy).copied().unwrap_or(0);
    assert!(to_busy <= 1, "busy {busy} still got {during:?}");
}

#[test]
fn consistent_hash_is_sticky_per_key() {
    let (a, b, c) = (
        Upstream::start("a"),
        Upstream::start("b"),
        Upstream::start("c"),
    );
    for (hash_key, header) in [("header:X-User", "X-User"), ("cookie:session", "Cookie")] {
        let weir = balanced(
            "consistent_hash",
            &format!("    hash_key: \"{hash_key}\"\n"),
            &[(&a, 1), (&b, 1), (&c, 1)],
        );
        let value = |i: usize| {
            if header == "Cookie" {
                format!("Cookie: theme=dark; session=user{}\r\n", i % 20)
            } else {
                format!("X-User: user{}\r\n", i % 20)
            }
        };
        let mut owner: HashMap<usize, String> = HashMap::new();
        let mut used = std::collections::HashSet::new();
        for i in 0..100 {
            let r = request(
                weir.addr(),
                &format!(
                    "GET / HTTP/1.1\r\nHost: t\r\n{}Connection: close\r\n\r\n",
                    value(i)
                ),
            );
            let server = r.header("x-upstream").unwrap().to_string();
            used.insert(server.clone());
            let prev = owner.entry(i % 20).or_insert(server.clone());
            assert_eq!(*prev, server, "{hash_key}: key {} moved", i % 20);
        }
        assert!(
            used.len() >= 2,
            "{hash_key}: 20 keys all hashed to {used:?}"
        );
    }
    let weir = balanced(
        "consistent_hash",
        "    hash_key: path\n",
        &[(&a, 1), (&b, 1), (&c, 1)],
    );
    let first = get(weir.addr(), "t", "/same/path")
        .header("x-upstream")
        .unwrap()
        .to_string();
    for _ in 0..10 {
        assert_eq!(
            get(weir.addr(), "t", "/same/path")
                .header("x-upstream")
                .unwrap(),
            first
        );
    }
}
