//! Keep-alive reuse counted at a real nginx upstream, which reports the serial number of the
//! connection each request arrived on.

mod common;
use common::*;

fn through_nginx(nginx: &Nginx, keepalive: &str) -> Weir {
    Weir::start(&format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: nginx\n\
         services:\n  nginx:\n    servers: [{{ url: \"http://{}\" }}]\n    keepalive: {keepalive}\n",
        nginx.addr
    ))
}

fn connection_numbers(weir: &Weir, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let r = get(weir.addr(), "t", "/");
            assert_eq!(r.status, 200, "{}", r.text());
            r.text().trim().to_string()
        })
        .collect()
}

#[test]
fn upstream_connections_are_reused() {
    let nginx = Nginx::start();
    let weir = through_nginx(&nginx, "{ max_idle_per_server: 16, idle_timeout: 30s }");
    // Every client request uses a fresh client connection; upstream it is always the same one.
    let seen = connection_numbers(&weir, 30);
    assert!(seen.iter().all(|c| c == &seen[0]), "{seen:?}");
}

#[test]
fn pool_disabled_opens_a_connection_per_request() {
    let nginx = Nginx::start();
    let weir = through_nginx(&nginx, "{ max_idle_per_server: 0 }");
    let seen = connection_numbers(&weir, 10);
    let distinct: std::collections::HashSet<_> = seen.iter().collect();
    assert_eq!(distinct.len(), 10, "{seen:?}");
}

#[test]
fn idle_connections_expire() {
    let nginx = Nginx::start();
    let weir = through_nginx(&nginx, "{ max_idle_per_server: 16, idle_timeout: 300ms }");
    let first = connection_numbers(&weir, 2);
    assert_eq!(first[0], first[1]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let later = connection_numbers(&weir, 1);
    assert_ne!(later[0], first[0], "an expired idle connection was reused");
}

#[test]
fn upstream_closing_idle_connections_is_survived() {
    // nginx drops idle connections after 300ms while weir would keep them for 60s: the next
    // request must notice the dead pooled connection and use a fresh one, never answer 502.
    let nginx = Nginx::start_with("keepalive_timeout 300ms;");
    let weir = through_nginx(&nginx, "{ max_idle_per_server: 4, idle_timeout: 60s }");
    let before = connection_numbers(&weir, 3);
    assert!(before.iter().all(|c| c == &before[0]), "{before:?}");
    std::thread::sleep(std::time::Duration::from_millis(800));
    let after = connection_numbers(&weir, 3);
    assert_ne!(after[0], before[0]);
    assert!(after.iter().all(|c| c == &after[0]), "{after:?}");
}
