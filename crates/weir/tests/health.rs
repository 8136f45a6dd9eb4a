//! Health and retries on the real binary: a server killed under load costs no failed idempotent
//! request with `retry` on (and does without it); a dead server is ejected by passive checks;
//! active checks take a failing server out within `interval × unhealthy_threshold` and bring it
//! back; with every server down the answer is 503 at once.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An HTTP server whose `/health` answers 200 or 503 as `healthy` says; every other path
/// answers `switchable` and is counted.
struct Switchable {
    addr: SocketAddr,
    healthy: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
}

fn switchable() -> Switchable {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let healthy = Arc::new(AtomicBool::new(true));
    let served = Arc::new(AtomicUsize::new(0));
    let (h, s) = (healthy.clone(), served.clone());
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            let (h, s) = (h.clone(), s.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let health = got.starts_with(b"GET /health ");
                let status = if health && !h.load(Ordering::SeqCst) {
                    503
                } else {
                    200
                };
                if !health {
                    s.fetch_add(1, Ordering::SeqCst);
                }
                let body = if health { "health" } else { "switchable" };
                let answer = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes());
            });
        }
    });
    Switchable {
        addr,
        healthy,
        served,
    }
}

fn config(services: &str, routes: &str) -> String {
    format!("server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\nrouters:\n{routes}services:\n{services}")
}

#[test]
fn a_server_killed_under_load_fails_no_request_with_retries() {
    let alive = Nginx::start();
    let doomed = Nginx::start();
    let servers = format!(
        "[{{ url: \"http://{}\" }}, {{ url: \"http://{}\" }}]",
        alive.addr, doomed.addr
    );
    let weir = Weir::start(&config(
        &format!("  retried: {{ servers: {servers}, retry: {{ attempts: 2 }} }}\n  plain: {{ servers: {servers} }}\n"),
        "  r: { rule: \"PathPrefix(`/r`)\", service: retried }\n  p: { rule: \"PathPrefix(`/p`)\", service: plain }\n",
    ));
    let addr = weir.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let load = |prefix: &'static str| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0, 0);
            let mut conn = Conn::open(addr);
            while !stop.load(Ordering::SeqCst) {
                conn.send(format!("GET {prefix} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
                match conn.read(false) {
                    Some(r) if r.status == 200 => ok += 1,
                    Some(_) => failed += 1,
                    None => {
                        failed += 1;
                        conn = Conn::open(addr);
                    }
                }
            }
            (ok, failed)
        })
    };
    let retried = load("/r");
    let plain = load("/p");
    std::thread::sleep(Duration::from_millis(300));
    drop(doomed);
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, Ordering::SeqCst);
    let (ok, failed) = retried.join().unwrap();
    assert!(ok > 100, "{ok} requests");
    assert_eq!(
        failed,
        0,
        "with retries: {failed} of {} failed",
        ok + failed
    );
    // The same load without retries does see the dead server.
    let (ok, failed) = plain.join().unwrap();
    assert!(
        failed > 0,
        "without retries nothing failed ({ok} ok): the test proves nothing"
    );
}

#[test]
fn passive_checks_eject_and_all_down_is_503_at_once() {
    let alive = Nginx::start();
    let dead = format!("127.0.0.1:{}", free_port());
    let weir = Weir::start(&config(
        &format!("  s: {{ servers: [{{ url: \"http://{}\" }}, {{ url: \"http://{dead}\" }}], passive_health: {{ max_failures: 2, window: 10s, eject: 30s }} }}\n  gone: {{ servers: [{{ url: \"http://{dead}\" }}], passive_health: {{ max_failures: 1, eject: 30s }} }}\n", alive.addr),
        "  s: { rule: \"PathPrefix(`/s`)\", service: s }\n  g: { rule: \"PathPrefix(`/g`)\", service: gone }\n",
    ));
    let statuses: Vec<u16> = (0..20)
        .map(|_| get(weir.addr(), "t", "/s").status)
        .collect();
    // Round robin sends every other request to the dead server until two failures eject it.
    assert_eq!(
        statuses.iter().filter(|s| **s == 502).count(),
        2,
        "{statuses:?}"
    );
    assert!(statuses[6..].iter().all(|s| *s == 200), "{statuses:?}");
    let ejected: Vec<String> = weir
        .stderr()
        .into_iter()
        .filter(|l| l.contains("ejected"))
        .collect();
    assert_eq!(ejected.len(), 1, "{ejected:?}");
    // A service whose only server is ejected answers 503 without trying it.
    assert_eq!(get(weir.addr(), "t", "/g").status, 502);
    let start = Instant::now();
    let r = get(weir.addr(), "t", "/g");
    assert_eq!(r.status, 503);
    assert!(start.elapsed() < Duration::from_millis(100));
}

#[test]
fn active_checks_take_a_server_out_and_bring_it_back() {
    let nginx = Nginx::start();
    let sw = switchable();
    let weir = Weir::start(&config(
        &format!("  s:\n    servers: [{{ url: \"http://{}\" }}, {{ url: \"http://{}\" }}]\n    health_check: {{ path: /health, interval: 200ms, timeout: 200ms, unhealthy_threshold: 2, healthy_threshold: 1 }}\n", nginx.addr, sw.addr),
        "  s: { rule: \"PathPrefix(`/`)\", service: s }\n",
    ).replace("server: { workers: 1 }", &format!("server: {{ workers: 1, admin: {{ address: \"127.0.0.1:0\", token: \"{TOKEN}\" }} }}")));
    let admin = weir.addrs["@admin"];
    // The admin API shows the switchable server's state (and wants the token).
    let server_state = || {
        let r = request(
            admin,
            &format!(
                "GET /api/services HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
            ),
        );
        assert_eq!(r.status, 200);
        let json = r.json();
        let servers = json["services"][0]["servers"].as_array().unwrap().clone();
        let entry = servers
            .into_iter()
            .find(|s| s["url"] == format!("http://{}", sw.addr))
            .unwrap();
        (
            entry["usable"].as_bool().unwrap(),
            entry["down"].as_bool().unwrap(),
        )
    };
    assert_eq!(server_state(), (true, false));
    let r = request(admin, "GET /api/services HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let r = request(admin, "GET /api/services HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer wrong-token-0000000\r\n\r\n");
    assert_eq!(r.status, 401);
    // /metrics needs no token.
    assert_eq!(
        request(admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").status,
        200
    );
    let bodies =
        |n| -> Vec<String> { (0..n).map(|_| get(weir.addr(), "t", "/x").text()).collect() };
    assert!(bodies(10).iter().any(|b| b == "switchable"));
    sw.healthy.store(false, Ordering::SeqCst);
    let failing_since = Instant::now();
    let down_line = |weir: &Weir| {
        weir.stderr()
            .into_iter()
            .any(|l| l.contains(&format!("server http://{} is down", sw.addr)))
    };
    while !down_line(&weir) {
        assert!(
            failing_since.elapsed() < Duration::from_millis(1500),
            "not marked down: {:?}",
            weir.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // interval x unhealthy_threshold, plus a check's own time and the first wait's remainder.
    assert!(
        failing_since.elapsed() >= Duration::from_millis(200),
        "{:?}",
        failing_since.elapsed()
    );
    assert_eq!(server_state(), (false, true));
    let before = sw.served.load(Ordering::SeqCst);
    assert!(bodies(10).iter().all(|b| b.starts_with("conn=")));
    assert_eq!(
        sw.served.load(Ordering::SeqCst),
        before,
        "a down server got requests"
    );
    sw.healthy.store(true, Ordering::SeqCst);
    let passing_since = Instant::now();
    while !weir.stderr().iter().any(|l| l.contains("is up again")) {
        assert!(
            passing_since.elapsed() < Duration::from_millis(1000),
            "not back: {:?}",
            weir.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(bodies(10).iter().any(|b| b == "switchable"));
    assert_eq!(server_state(), (true, false));
}

const TOKEN: &str = "s3cret-admin-token-42";

/// A server that reads a request and never answers (until the test ends).
fn silent() -> RawUpstream {
    RawUpstream::start(|conn| {
        conn.read_head();
        std::thread::sleep(Duration::from_secs(30));
    })
}

#[test]
fn a_try_that_times_out_is_retried_on_another_server() {
    let hung = silent();
    let fine = Upstream::start("fine");
    let weir = Weir::start(&config(
        &format!(
            "  s:\n    servers: [{{ url: \"{}\" }}, {{ url: \"{}\" }}]\n    retry: {{ attempts: 2, per_try_timeout: 300ms }}\n",
            hung.url(),
            fine.url()
        ),
        "  s: { rule: \"PathPrefix(`/`)\", service: s }\n",
    ));
    // Round robin starts at the silent server.
    let start = Instant::now();
    let r = get(weir.addr(), "t", "/x");
    let took = start.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fine.request_count(), 1);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn the_request_timeout_bounds_the_whole_action() {
    let hung = silent();
    let weir = Weir::start(&config(
        &format!(
            "  s:\n    servers: [{{ url: \"{}\" }}]\n    timeouts: {{ request: 400ms }}\n",
            hung.url()
        ),
        "  s: { rule: \"PathPrefix(`/`)\", service: s }\n",
    ));
    let start = Instant::now();
    let r = get(weir.addr(), "t", "/x");
    let took = start.elapsed();
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn the_retry_budget_limits_retries() {
    let fine = Upstream::start("fine");
    let dead = free_port();
    // Budget 0: the ten retries of a full bucket, and no refill.
    let weir = Weir::start(&config(
        &format!(
            "  s:\n    servers: [{{ url: \"http://127.0.0.1:{dead}\" }}, {{ url: \"{}\" }}]\n    retry: {{ attempts: 2, budget: 0 }}\n",
            fine.url()
        ),
        "  s: { rule: \"PathPrefix(`/`)\", service: s }\n",
    ));
    let statuses: Vec<u16> = (0..40)
        .map(|_| get(weir.addr(), "t", "/x").status)
        .collect();
    let failed = statuses.iter().filter(|&&s| s == 502).count();
    // Round robin sends every other first try to the dead server: 20, of which 10 retried.
    assert_eq!(failed, 10, "{statuses:?}");
    assert_eq!(fine.request_count(), 30);
}
