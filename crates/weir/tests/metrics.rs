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

/// A TCP server answering every connection with what it read, until the client finishes.
fn tcp_echo() -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    let _ = conn.write_all(&buf[..n]);
                }
            });
        }
    });
    addr
}

/// A UDP server answering each datagram with `ok ` and the datagram.
fn udp_echo() -> std::net::SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let mut reply = b"ok ".to_vec();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, peer);
        }
    });
    addr
}

#[test]
fn caches_tcp_and_udp_services_are_counted() {
    use std::io::{Read, Write};
    // 100 keys of 8 KiB through a 256 KiB cache: most are stored, then pushed out.
    let files = temp_dir("metrics-cache");
    std::fs::write(files.join("body.txt"), "x".repeat(8192)).unwrap();
    let origin = Nginx::with_location(&format!(
        "location /one {{ add_header cache-control \"max-age=60\"; return 200 \"one\"; }}\n\
         location /many/ {{ add_header cache-control \"max-age=60\"; root {}; rewrite ^ /body.txt break; }}\n",
        files.display()
    ));
    let (tcp, udp) = (tcp_echo(), udp_echo());
    let weir = Weir::start(&format!(
        "server: {{ workers: 2, admin: {{ address: \"127.0.0.1:0\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n  raw: {{ address: \"127.0.0.1:0\" }}\n  dgram: {{ address: \"127.0.0.1:0/udp\" }}\n\
         caches:\n  small: {{ memory: 256KiB, max_object_size: 64KiB }}\n\
         routers:\n  all: {{ rule: \"PathPrefix(`/`)\", service: origin, cache: small }}\n\
         services:\n  origin: {{ servers: [{{ url: \"http://{}\" }}] }}\n\
         tcp:\n  routers:\n    echo: {{ entrypoints: [raw], rule: \"HostSNI(`*`)\", service: echo }}\n  services:\n    echo: {{ servers: [{{ address: \"{tcp}\" }}] }}\n\
         udp:\n  routers:\n    echo: {{ entrypoints: [dgram], service: udp_echo }}\n  services:\n    udp_echo: {{ servers: [{{ address: \"{udp}\" }}] }}\n",
        origin.addr
    ));
    // One miss and two hits on /one.
    for _ in 0..3 {
        assert_eq!(get(weir.addr(), "c", "/one").status, 200);
    }
    for i in 0..100 {
        assert_eq!(get(weir.addr(), "c", &format!("/many/{i}")).status, 200);
    }
    // Two TCP connections: 5 bytes each way, then one byte each way.
    for payload in [&b"hello"[..], b"!"] {
        let mut conn = std::net::TcpStream::connect(weir.addrs["raw"]).unwrap();
        conn.write_all(payload).unwrap();
        let mut back = vec![0u8; payload.len()];
        conn.read_exact(&mut back).unwrap();
        assert_eq!(back, payload);
        conn.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = conn.read_to_end(&mut Vec::new());
    }
    // One UDP session of three datagrams of 4 bytes; the answers are 7 bytes.
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    for _ in 0..3 {
        client.send_to(b"ping", weir.addrs["dgram"]).unwrap();
        let mut buf = [0u8; 64];
        let (n, _) = client.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"ok ping");
    }
    let text = metrics_with_all(
        &weir,
        &[
            "weir_cache_requests_total{cache=\"small\",result=\"hit\"} 2",
            "weir_cache_requests_total{cache=\"small\",result=\"miss\"} 101",
            "weir_cache_stores_total{cache=\"small\"} 101",
            "weir_cache_revalidations_total{cache=\"small\"} 0",
            "weir_tcp_connections_total{service=\"echo\"} 2",
            "weir_tcp_connections_open{service=\"echo\"} 0",
            "weir_tcp_connect_failures_total{service=\"echo\"} 0",
            "weir_tcp_bytes_total{service=\"echo\",direction=\"from_client\"} 6",
            "weir_tcp_bytes_total{service=\"echo\",direction=\"to_client\"} 6",
            "weir_udp_sessions_total{service=\"udp_echo\"} 1",
            "weir_udp_datagrams_total{service=\"udp_echo\",direction=\"from_client\"} 3",
            "weir_udp_datagrams_total{service=\"udp_echo\",direction=\"to_client\"} 3",
            "weir_udp_bytes_total{service=\"udp_echo\",direction=\"from_client\"} 12",
            "weir_udp_bytes_total{service=\"udp_echo\",direction=\"to_client\"} 21",
        ],
    );
    promtool_check(&text);
    let value = |name: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    // 101 answers of which 100 are 8 KiB: 800 KiB cannot stay in 256 KiB.
    let evicted = value("weir_cache_evictions_total{cache=\"small\"}");
    let entries = value("weir_cache_entries{cache=\"small\"}");
    assert!(evicted >= 60, "{evicted} evicted:\n{text}");
    assert!(entries + evicted >= 101, "{entries} + {evicted}");
    assert!(value("weir_cache_memory_bytes{cache=\"small\"}") <= 256 << 10);
    // The admin API's cache view says the same.
    let caches = get(weir.addrs["@admin"], "a", "/api/caches").json();
    assert_eq!(caches["caches"][0]["hits"], 2, "{caches}");
    assert_eq!(caches["caches"][0]["stores"], 101, "{caches}");
    assert_eq!(caches["caches"][0]["evictions"], evicted, "{caches}");
}

#[test]
fn labels_split_answers_by_exact_code_and_method() {
    let upstream = Upstream::start("api");
    let weir = Weir::start(&format!(
        "server: {{ workers: 2, metrics: {{ labels: [code, method] }}, admin: {{ address: \"127.0.0.1:0\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         services:\n  api: {{ servers: [{{ url: \"{}\" }}] }}\n\
         routers:\n  api: {{ rule: \"PathPrefix(`/api`)\", service: api }}\n  gone: {{ rule: \"PathPrefix(`/`)\", respond: {{ status: 410 }} }}\n",
        upstream.url()
    ));
    for _ in 0..3 {
        assert_eq!(get(weir.addr(), "m", "/api/x").status, 200);
    }
    let posted = request(
        weir.addr(),
        "POST /api/x HTTP/1.1\r\nHost: m\r\nContent-Length: 2\r\n\r\nhi",
    );
    assert_eq!(posted.status, 200);
    // An unknown method is `other`: a client cannot add series.
    let odd = request(weir.addr(), "BREW /pot HTTP/1.1\r\nHost: m\r\n\r\n");
    assert_eq!(odd.status, 410);
    assert_eq!(get(weir.addr(), "m", "/pot").status, 410);
    let text = metrics_with_all(
        &weir,
        &[
            "weir_router_responses_total{router=\"api\",code=\"200\",method=\"GET\"} 3",
            "weir_router_responses_total{router=\"api\",code=\"200\",method=\"POST\"} 1",
            "weir_router_responses_total{router=\"gone\",code=\"410\",method=\"GET\"} 1",
            "weir_router_responses_total{router=\"gone\",code=\"410\",method=\"other\"} 1",
            "weir_service_responses_total{service=\"api\",code=\"200\",method=\"GET\"} 3",
        ],
    );
    promtool_check(&text);
    // No status-class series beside the labelled ones (entrypoints keep their classes).
    let classes = text
        .lines()
        .filter(|l| l.starts_with("weir_router_responses_total") && l.contains("xx\""));
    assert_eq!(classes.count(), 0, "{text}");
}
