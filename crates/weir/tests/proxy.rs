//! End-to-end proxying: forwarded and hop-by-hop headers, bodies both ways, 502/503/504,
//! malformed requests that must never reach the upstream, and WebSocket tunnelling (its idle
//! timeout, half-close, and a busy tunnel left alone).

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

fn proxy_config(upstream: &str, service_extra: &str) -> String {
    format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: app\n\
         services:\n  app:\n    servers: [{{ url: \"{upstream}\" }}]\n{service_extra}"
    )
}

#[test]
fn forwards_headers_and_strips_hop_by_hop() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config(&up.url(), ""));
    let r = request(
        weir.addr(),
        "GET /echo?x=1 HTTP/1.1\r\nHost: Shop.Example:8080\r\nX-Forwarded-For: 203.0.113.9\r\n\
         Connection: keep-alive, X-Secret\r\nX-Secret: drop-me\r\nKeep-Alive: timeout=5\r\nTE: deflate\r\n\
         X-Custom: kept\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let j = r.json();
    assert_eq!(j["target"], "/echo?x=1");
    assert_eq!(echoed_header(&j, "host").unwrap(), "Shop.Example:8080");
    assert_eq!(
        echoed_header(&j, "x-forwarded-for").unwrap(),
        "203.0.113.9, 127.0.0.1"
    );
    assert_eq!(echoed_header(&j, "x-forwarded-proto").unwrap(), "http");
    assert_eq!(
        echoed_header(&j, "x-forwarded-host").unwrap(),
        "Shop.Example:8080"
    );
    assert_eq!(echoed_header(&j, "x-real-ip").unwrap(), "127.0.0.1");
    assert_eq!(echoed_header(&j, "x-custom").unwrap(), "kept");
    for gone in ["x-secret", "keep-alive", "te"] {
        assert!(echoed_header(&j, gone).is_none(), "{gone} was forwarded");
    }
    // Response side: the upstream's `Connection: x-hop` names a header that must not pass.
    assert_eq!(r.header("x-upstream"), Some("a"));
    assert!(r.header("x-hop").is_none());
}

#[test]
fn pass_host_header_false_sends_server_authority() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config(&up.url(), "    pass_host_header: false\n"));
    let j = get(weir.addr(), "public.test", "/").json();
    assert_eq!(echoed_header(&j, "host").unwrap(), up.addr.to_string());
    assert_eq!(
        echoed_header(&j, "x-forwarded-host").unwrap(),
        "public.test"
    );
}

#[test]
fn bodies_stream_both_ways() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config(&up.url(), ""));
    // Content-Length request body.
    let body = "x".repeat(300_000);
    let r = request(
        weir.addr(),
        &format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
    );
    assert_eq!(r.json()["body"].as_str().unwrap().len(), body.len());
    // Chunked request body, in pieces.
    let mut c = Conn::open(weir.addr());
    c.send(b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
    std::thread::sleep(Duration::from_millis(50));
    c.send(b"6\r\n world\r\n0\r\n\r\n");
    let r = c.read(false).unwrap();
    assert_eq!(r.json()["body"], "hello world");
    // Keep-alive continues on the same client connection afterwards.
    c.send(b"GET /again HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read(false).unwrap().json()["target"], "/again");
    // Large and chunked responses.
    let big = get(weir.addr(), "t", "/big/2000000");
    assert_eq!(big.body.len(), 2_000_000);
    assert_eq!(&big.body[..3], b"abc");
    let chunked = get(weir.addr(), "t", "/chunked/50");
    assert_eq!(chunked.header("transfer-encoding"), Some("chunked"));
    assert!(chunked.text().starts_with("part0;part1;") && chunked.text().ends_with("part49;"));
    // HTTP/1.0 client gets the chunked upstream body close-delimited.
    let r = request(weir.addr(), "GET /chunked/3 HTTP/1.0\r\nHost: t\r\n\r\n");
    assert_eq!(r.text(), "part0;part1;part2;");
    assert!(r.header("transfer-encoding").is_none());
    // HEAD keeps Content-Length without a body.
    let mut c = Conn::open(weir.addr());
    c.send(b"HEAD /big/10 HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read(true).unwrap();
    assert_eq!(r.header("content-length"), Some("10"));
    c.send(b"GET /big/3 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read(false).unwrap().text(), "abc");
}

#[test]
fn expect_continue_is_answered() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config(&up.url(), ""));
    let mut c = Conn::open(weir.addr());
    c.send(b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    let interim = c.read(false).unwrap();
    assert_eq!(interim.status, 100);
    c.send(b"data");
    let r = c.read(false).unwrap();
    assert_eq!(r.json()["body"], "data");
    assert!(echoed_header(&r.json(), "expect").is_none());
}

#[test]
fn upstream_errors_map_to_502_503_504() {
    // Refused: nothing listens on this port.
    let port = free_port();
    let weir = Weir::start(&proxy_config(&format!("http://127.0.0.1:{port}"), ""));
    let r = get(weir.addr(), "t", "/");
    assert_eq!(r.status, 502);
    drop(weir);

    // Response header timeout.
    let up = Upstream::start("slow");
    let weir = Weir::start(&proxy_config(
        &up.url(),
        "    timeouts: { response_header: 200ms }\n",
    ));
    assert_eq!(get(weir.addr(), "t", "/slow/2000").status, 504);
    assert_eq!(get(weir.addr(), "t", "/slow/0").status, 200);
    drop(weir);

    // Connect timeout: a listener whose accept queue is full drops further SYNs.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    sock.listen(0).unwrap();
    let full_addr = sock.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&full_addr.into());
        fillers.push(s);
    }
    std::thread::sleep(Duration::from_millis(100));
    let weir = Weir::start(&proxy_config(
        &format!("http://{full_addr}"),
        "    timeouts: { connect: 300ms }\n",
    ));
    let started = std::time::Instant::now();
    assert_eq!(get(weir.addr(), "t", "/").status, 504);
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(weir);

    // No server to choose.
    let weir = Weir::start(
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: empty\nservices:\n  empty:\n    servers: []\n",
    );
    assert_eq!(get(weir.addr(), "t", "/").status, 503);
}

#[test]
fn malformed_requests_never_reach_the_upstream() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config(&up.url(), ""));
    let cases: &[(&str, u16)] = &[
        ("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
        ("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 0x5\r\n\r\nhello", 400),
        ("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\n\r\n", 400),
    ];
    for (raw, status) in cases {
        let mut c = Conn::open(weir.addr());
        c.send(raw.as_bytes());
        let r = c.read(false).unwrap();
        assert_eq!(r.status, *status, "{raw:?}");
        assert_eq!(r.header("connection"), Some("close"));
        assert!(c.is_closed());
    }
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(40_000)
    );
    assert_eq!(request(weir.addr(), &huge).status, 431);
    assert_eq!(up.request_count(), 0);
    assert_eq!(up.received_text(), "");

    // A chunked body that breaks mid-stream: the smuggled request must never be parsed upstream.
    let mut c = Conn::open(weir.addr());
    c.send(b"POST /first HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nZZ\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read(false).unwrap();
    assert_eq!(r.status, 400);
    assert!(c.is_closed());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        up.request_count(),
        0,
        "upstream saw: {}",
        up.received_text()
    );
    assert!(!up.received_text().contains("GET /smuggled"));
}

#[test]
fn websocket_upgrade_tunnels() {
    let up = Upstream::start("ws");
    let weir = Weir::start(&proxy_config(&up.url(), ""));
    let mut c = Conn::open(weir.addr());
    c.send(b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
    let r = c.read(true).unwrap();
    assert_eq!(r.status, 101);
    assert_eq!(r.header("upgrade"), Some("websocket"));
    // A masked WebSocket text frame "hi", echoed back byte for byte by the upstream.
    let frame = [0x81u8, 0x82, 1, 2, 3, 4, b'h' ^ 1, b'i' ^ 2];
    c.send(&frame);
    let mut back = [0u8; 8];
    c.reader.read_exact(&mut back).unwrap();
    assert_eq!(back, frame);
    c.reader.get_mut().write_all(b"more").unwrap();
    let mut more = [0u8; 4];
    c.reader.read_exact(&mut more).unwrap();
    assert_eq!(&more, b"more");
}

/// An upstream that answers `101` to every request, then by path: `/silent` says nothing and
/// notes how long until weir closes the tunnel; `/after-fin` reads until the client's FIN, then
/// answers and closes; `/push` sends `tick` every 300 ms, 8 times, and closes; `/echo` echoes.
fn scripted_websocket_upstream() -> RawUpstream {
    RawUpstream::start(|c| {
        let Some(head) = c.read_head() else { return };
        c.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
        let path = head.split(' ').nth(1).unwrap_or("").to_string();
        match path.as_str() {
            "/silent" | "/silent-longer" => {
                let started = Instant::now();
                c.read_to_end();
                c.note(&format!(
                    "{path} closed after {}",
                    started.elapsed().as_millis()
                ));
            }
            "/after-fin" => {
                let got = c.read_to_end();
                c.note(&format!("/after-fin EOF after {got} bytes"));
                c.write(b"the rest, after your FIN");
            }
            "/push" => {
                for _ in 0..8 {
                    std::thread::sleep(Duration::from_millis(300));
                    c.write(b"tick");
                }
            }
            _ => {
                let mut buf = [0u8; 256];
                while let Ok(n @ 1..) = c.stream.read(&mut buf) {
                    c.write(&buf[..n]);
                }
            }
        }
    })
}

/// Opens a WebSocket tunnel to `path` through weir.
fn open_tunnel(addr: std::net::SocketAddr, path: &str) -> Conn {
    let mut c = Conn::open(addr);
    c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").as_bytes());
    let r = c.read(true).unwrap();
    assert_eq!(r.status, 101, "{path}");
    c
}

/// A config where `/silent-longer` goes to a service with `timeouts.websocket_idle: 2s` and
/// everything else to one that keeps `client_idle_timeout` (1 s).
fn websocket_config(upstream: &str) -> String {
    format!(
        "server: {{ workers: 1, client_idle_timeout: 1s }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  longer: {{ rule: \"Path(`/silent-longer`)\", service: longer }}\n  all: {{ rule: \"PathPrefix(`/`)\", priority: 1, service: app }}\n\
         services:\n  app: {{ servers: [{{ url: \"{upstream}\" }}] }}\n  longer: {{ servers: [{{ url: \"{upstream}\" }}], timeouts: {{ websocket_idle: 2s }} }}\n"
    )
}

#[test]
fn a_silent_websocket_tunnel_is_closed_on_both_sides_after_its_idle_timeout() {
    let up = scripted_websocket_upstream();
    let weir = Weir::start(&websocket_config(&up.url()));
    let waits: Vec<_> = [("/silent", 1000), ("/silent-longer", 2000)]
        .into_iter()
        .map(|(path, limit)| {
            let addr = weir.addr();
            std::thread::spawn(move || {
                let mut c = open_tunnel(addr, path);
                let started = Instant::now();
                assert!(c.is_closed(), "{path}");
                (path, limit, started.elapsed())
            })
        })
        .collect();
    for wait in waits {
        let (path, limit, waited) = wait.join().unwrap();
        let limit = Duration::from_millis(limit);
        assert!(
            waited >= limit - Duration::from_millis(100) && waited < limit + Duration::from_secs(1),
            "{path}: the client saw the close after {waited:?}"
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    // The upstream side was closed too, each after its own limit.
    for (path, limit) in [("/silent", 1000), ("/silent-longer", 2000)] {
        let note = up
            .log()
            .into_iter()
            .find(|l| l.starts_with(&format!("{path} closed after")))
            .unwrap_or_else(|| panic!("{path}: the upstream still open: {:?}", up.log()));
        let ms: u64 = note.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((limit - 100..limit + 1000).contains(&ms), "{note}");
    }
}

#[test]
fn a_websocket_half_close_reaches_the_upstream_and_its_answer_still_comes_back() {
    let up = scripted_websocket_upstream();
    let weir = Weir::start(&websocket_config(&up.url()));
    let mut c = open_tunnel(weir.addr(), "/after-fin");
    c.send(b"bye");
    c.reader.get_ref().shutdown(Shutdown::Write).unwrap();
    let mut rest = String::new();
    c.reader.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "the rest, after your FIN");
    assert!(up
        .log()
        .contains(&"/after-fin EOF after 3 bytes".to_string()));
}

#[test]
fn a_busy_websocket_tunnel_outlives_the_idle_timeout() {
    let up = scripted_websocket_upstream();
    let weir = Weir::start(&websocket_config(&up.url()));
    let addr = weir.addr();
    // Traffic one way only (the upstream pushes, the client says nothing) keeps it open.
    let pushed = std::thread::spawn(move || {
        let mut c = open_tunnel(addr, "/push");
        let mut ticks = String::new();
        c.reader.read_to_string(&mut ticks).unwrap();
        ticks
    });
    // Both ways, for 2.5 s of a 1 s idle timeout.
    let mut c = open_tunnel(addr, "/echo");
    for i in 0..6 {
        let message = format!("message {i}");
        c.send(message.as_bytes());
        let mut back = vec![0u8; message.len()];
        c.reader.read_exact(&mut back).unwrap();
        assert_eq!(back, message.as_bytes());
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(pushed.join().unwrap(), "tick".repeat(8));
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config(&up.url(), ""));
    let mut c = Conn::open(weir.addr());
    c.send(b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\nGET /2 HTTP/1.1\r\nHost: t\r\n\r\nGET /3 HTTP/1.1\r\nHost: t\r\n\r\n");
    for want in ["/1", "/2", "/3"] {
        assert_eq!(c.read(false).unwrap().json()["target"], want);
    }
}

#[test]
fn trailers_pass_through_chunked_bodies() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config(&up.url(), ""));
    // Request trailers reach the upstream.
    let mut c = Conn::open(weir.addr());
    c.send(b"POST /t HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n");
    let j = c.read(false).unwrap().json();
    assert_eq!(j["body"], "hello");
    assert_eq!(j["trailers"], serde_json::json!([["x-checksum", "abc"]]));
    // Response trailers reach a client that accepts them (weir asks the upstream with TE).
    let mut c = Conn::open(weir.addr());
    c.send(b"GET /trailers HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nConnection: close\r\n\r\n");
    let mut raw = Vec::new();
    c.reader.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).to_lowercase();
    assert!(raw.contains("transfer-encoding: chunked"), "{raw}");
    assert!(
        raw.contains("\r\ntrailer: grpc-status, grpc-message\r\n"),
        "{raw}"
    );
    assert!(
        raw.ends_with("\r\n0\r\ngrpc-status: 0\r\ngrpc-message: all-good\r\n\r\n"),
        "{raw}"
    );
    // An HTTP/1.0 client gets the body, close-delimited, without trailers.
    let r = request(
        weir.addr(),
        "GET /trailers HTTP/1.0\r\nHost: t\r\nTE: trailers\r\n\r\n",
    );
    assert_eq!(r.text(), "payload");
}
