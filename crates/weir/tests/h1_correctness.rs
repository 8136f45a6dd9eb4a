//! HTTP/1.1 proxy correctness on the real binary: no unsafe resends, deadlines on every body
//! transfer, no pooled connection that switched protocols, invalid Host refused, Expect and
//! transfer codings per RFC 9110/9112, and a Date on every answer.

mod common;
use common::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// Answers the first request on each connection, then reads the next one and drops the
/// connection without answering: a kept-alive connection the upstream gave up on mid-request.
fn answers_once_per_connection(c: &mut RawConn) {
    if c.read_head().is_some() {
        c.write(OK);
    }
    let _ = c.read_head();
}

#[test]
fn a_dead_pooled_connection_resends_only_idempotent_requests() {
    let up = RawUpstream::start(answers_once_per_connection);
    let weir = Weir::start(&proxy_config_with(&up.url(), "", ""));
    let mut c = Conn::open(weir.addr());
    c.send(b"POST /first HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(c.read(false).unwrap().status, 200);
    // The pooled connection dies after taking the POST: it must not be sent twice.
    c.send(b"POST /second HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(c.read(false).unwrap().status, 502);
    assert_eq!(up.count("POST /second"), 1, "{:?}", up.log());

    // GET is idempotent: sent again on a fresh connection, and the client never sees the failure.
    let mut c = Conn::open(weir.addr());
    c.send(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read(false).unwrap().status, 200);
    c.send(b"GET /b HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read(false).unwrap().status, 200);
    assert_eq!(up.count("GET /b"), 2, "{:?}", up.log());
    // DELETE is idempotent too; PATCH is not.
    c.send(b"DELETE /c HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read(false).unwrap().status, 200);
    c.send(b"PATCH /d HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(c.read(false).unwrap().status, 502);
    assert_eq!(up.count("PATCH /d"), 1, "{:?}", up.log());
}

fn elapsed_between(started: Instant, low_ms: u64, high_ms: u64) {
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(low_ms) && waited < Duration::from_millis(high_ms),
        "waited {waited:?}"
    );
}

/// An upstream that reads a request head, then notes `closed after N body bytes` when weir
/// ends the connection.
fn noting_upstream() -> RawUpstream {
    RawUpstream::start(|c| {
        if c.read_head().is_some() {
            let n = c.read_to_end();
            c.note(&format!("closed after {n} body bytes"));
        }
    })
}

#[test]
fn a_stalled_request_body_gets_408_and_the_upstream_request_is_dropped() {
    let up = noting_upstream();
    let weir = Weir::start(&proxy_config_with(
        &up.url(),
        ", client_body_timeout: 1s",
        "",
    ));
    for path in ["/proxied", "/local"] {
        let mut c = Conn::open(weir.addr());
        c.send(
            format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789")
                .as_bytes(),
        );
        let started = Instant::now();
        let r = c.read(false).unwrap();
        assert_eq!(r.status, 408, "{path}: {}", r.text());
        elapsed_between(started, 1000, 2500);
        assert_eq!(r.header("connection"), Some("close"));
        assert!(c.is_closed());
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        up.log().iter().any(|l| l.starts_with("closed after 10 ")),
        "{:?}",
        up.log()
    );
}

#[test]
fn an_upstream_stalling_mid_response_is_cut_off() {
    let up = RawUpstream::start(|c| {
        if c.read_head().is_some() {
            c.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
            std::thread::sleep(Duration::from_secs(8));
        }
    });
    let weir = Weir::start(&proxy_config_with(
        &up.url(),
        "",
        "    timeouts: { read: 1s }\n",
    ));
    let mut c = Conn::open(weir.addr());
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    let started = Instant::now();
    let mut got = Vec::new();
    let _ = c.reader.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("HTTP/1.1 200") && got.ends_with("0123456789"),
        "{got}"
    );
    elapsed_between(started, 1000, 2500);
}

#[test]
fn an_upstream_not_reading_the_body_gets_504() {
    let up = RawUpstream::start(|c| {
        if c.read_head().is_some() {
            c.note("head read; not reading the body");
            std::thread::sleep(Duration::from_secs(10));
        }
    });
    let weir = Weir::start(&proxy_config_with(
        &up.url(),
        "",
        "    timeouts: { write: 1s }\n",
    ));
    let len = 256 << 20;
    let stream = std::net::TcpStream::connect(weir.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let head = format!("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\n\r\n");
        writer.write_all(head.as_bytes())?;
        let block = vec![b'x'; 1 << 20];
        for _ in 0..256 {
            writer.write_all(&block)?;
        }
        Ok::<_, std::io::Error>(())
    });
    let started = Instant::now();
    let mut c = Conn {
        reader: std::io::BufReader::new(stream),
    };
    let r = c.read(false).expect("an answer, not a reset");
    assert_eq!(r.status, 504, "{}", r.text());
    elapsed_between(started, 1000, 6000);
    assert!(c.is_closed());
    // weir closed the connection before the body ended, so the sender was cut off.
    assert!(sender.join().unwrap().is_err());
    assert_eq!(up.count("POST /"), 1);
}

#[test]
fn an_unasked_101_is_502_and_the_connection_is_not_reused() {
    let up = RawUpstream::start(|c| {
        while let Some(head) = c.read_head() {
            if head.starts_with("GET /switch") {
                c.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: other\r\n\r\n");
                // From here on the connection speaks something else.
                let mut byte = [0u8; 1];
                while c.stream.read(&mut byte).is_ok_and(|n| n > 0) {
                    c.write(b"\x00\x01not http\r\n\r\n");
                }
                return;
            }
            c.write(OK);
        }
    });
    let weir = Weir::start(&proxy_config_with(&up.url(), "", ""));
    let r = get(weir.addr(), "t", "/switch");
    assert_eq!(r.status, 502, "{}", r.text());
    for _ in 0..3 {
        let r = get(weir.addr(), "t", "/next");
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

#[test]
fn invalid_host_values_are_refused() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config_with(&up.url(), "", ""));
    for raw in [
        "GET / HTTP/1.1\r\nHost: a.test/evil\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: user@a.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test:80:80\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n",
        "GET http://a.test:8o/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "GET http://user@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
    ] {
        let r = request(weir.addr(), raw);
        assert_eq!(r.status, 400, "{raw:?}");
    }
    assert_eq!(up.received_text(), "");
    // Valid forms pass, and are forwarded as written.
    for host in [
        "[::1]:8080",
        "127.0.0.1",
        "a-b.example.:8080",
        "xn--bcher-kva.example",
    ] {
        let r = get(weir.addr(), host, "/");
        assert_eq!(r.status, 200, "{host}");
        assert_eq!(echoed_header(&r.json(), "x-forwarded-host").unwrap(), host);
    }
}

#[test]
fn expect_100_continue_from_http_1_0_is_ignored() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config_with(&up.url(), "", ""));
    for path in ["/proxied", "/local"] {
        let mut c = Conn::open(weir.addr());
        c.send(
            format!(
                "POST {path} HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\ndata"
            )
            .as_bytes(),
        );
        let r = c.read(false).unwrap();
        assert_eq!(
            r.status, 200,
            "{path}: an interim response went to an HTTP/1.0 client"
        );
        if path == "/proxied" {
            assert_eq!(r.json()["body"], "data");
            assert!(echoed_header(&r.json(), "expect").is_none());
        }
    }
}

#[test]
fn unknown_transfer_codings_get_501() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config_with(&up.url(), "", ""));
    let cases: &[(&str, u16)] = &[
        ("Transfer-Encoding: gzip, chunked", 501),
        ("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked", 501),
        ("Transfer-Encoding: chunked, gzip", 400),
        ("Transfer-Encoding: gzip", 400),
        ("Transfer-Encoding: chunked, chunked", 400),
    ];
    for (header, status) in cases {
        let mut c = Conn::open(weir.addr());
        c.send(format!("POST / HTTP/1.1\r\nHost: t\r\n{header}\r\n\r\n0\r\n\r\n").as_bytes());
        let r = c.read(false).unwrap();
        assert_eq!(r.status, *status, "{header}");
        assert!(c.is_closed());
    }
    assert_eq!(up.received_text(), "");
}

fn assert_recent_date(r: &Resp) {
    let dates: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("date"))
        .collect();
    assert_eq!(dates.len(), 1, "{:?}", r.headers);
    let when = httpdate::parse_http_date(&dates[0].1).unwrap();
    let age = std::time::SystemTime::now()
        .duration_since(when)
        .unwrap_or_default();
    assert!(age < Duration::from_secs(5), "{age:?}");
}

#[test]
fn every_answer_carries_a_date() {
    let up = RawUpstream::start(|c| {
        while let Some(head) = c.read_head() {
            if head.starts_with("GET /dated") {
                c.write(b"HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Length: 2\r\n\r\nok");
            } else {
                c.write(OK);
            }
        }
    });
    let weir = Weir::start(&proxy_config_with(&up.url(), "", ""));
    // A forwarded response without Date gets one; one with Date keeps it.
    assert_recent_date(&get(weir.addr(), "t", "/undated"));
    let r = get(weir.addr(), "t", "/dated");
    assert_eq!(r.header("date"), Some("Sun, 06 Nov 1994 08:49:37 GMT"));
    let dates = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("date"));
    assert_eq!(dates.count(), 1);
    // weir's own answers: respond, and errors.
    assert_recent_date(&get(weir.addr(), "t", "/local"));
    assert_recent_date(&request(weir.addr(), "GET / HTTP/1.1\r\nHost: a b\r\n\r\n"));
    drop(up);
    let weir = Weir::start(&proxy_config_with(
        &format!("http://127.0.0.1:{}", free_port()),
        "",
        "",
    ));
    let r = get(weir.addr(), "t", "/");
    assert_eq!(r.status, 502);
    assert_recent_date(&r);
}

#[test]
fn a_client_that_stops_reading_is_disconnected() {
    let up = Upstream::start("a");
    let weir = Weir::start(&proxy_config_with(
        &up.url(),
        ", client_send_timeout: 1s",
        "",
    ));
    let total = 64 << 20;
    let mut c = Conn::open(weir.addr());
    c.send(format!("GET /big/{total} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    // Read nothing while weir fills the socket buffers and then waits on us.
    std::thread::sleep(Duration::from_secs(3));
    let mut got = Vec::new();
    let _ = c.reader.read_to_end(&mut got);
    assert!(
        got.starts_with(b"HTTP/1.1 200") && got.len() < total,
        "read {} bytes",
        got.len()
    );
}

/// A chunked body cut before its last CRLF, then the client half-closes: the client is gone
/// (499 in the access log, as nginx's), so nothing is written to it and the connection
/// closes at once; the partial request sent upstream ends its connection too. weir used to
/// write a `499` status line and keep the connection open.
#[test]
fn a_client_that_half_closes_mid_body_gets_nothing_and_is_closed() {
    let up = noting_upstream();
    let weir = Weir::start(&proxy_config_with(&up.url(), "", ""));
    let mut c = std::net::TcpStream::connect(weir.addr()).unwrap();
    c.write_all(
        b"POST /proxied HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3\r\nabc",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    c.shutdown(std::net::Shutdown::Write).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let read = c.read_to_end(&mut answer);
    assert!(read.is_ok(), "the connection was not closed: {read:?}");
    assert!(
        answer.is_empty(),
        "nothing is owed to a client that left: {:?}",
        String::from_utf8_lossy(&answer)
    );
    elapsed_between(started, 0, 1000);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        up.log().iter().any(|l| l.starts_with("closed after ")),
        "{:?}",
        up.log()
    );
}

/// After a 408 for a stalled chunked body, the upstream connection that carried the partial
/// request ends by the time the client has its answer.
#[test]
fn a_stalled_chunked_body_ends_the_upstream_request_with_the_408() {
    let up = noting_upstream();
    let weir = Weir::start(&proxy_config_with(
        &up.url(),
        ", client_body_timeout: 1s",
        "",
    ));
    let mut c = Conn::open(weir.addr());
    c.send(
        b"POST /proxied HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    );
    let r = c.read(false).unwrap();
    assert_eq!(r.status, 408, "{}", r.text());
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        up.log().iter().any(|l| l.starts_with("closed after ")),
        "the upstream request still open after the 408: {:?}",
        up.log()
    );
}

/// A 502 or 504 leaves a line in the error log naming the router, service, server, try and
/// cause (before, only the access log's status told of it).
#[test]
fn bad_gateway_and_gateway_timeout_are_explained_in_the_error_log() {
    let silent = RawUpstream::start(|c| {
        c.read_head();
        std::thread::sleep(Duration::from_secs(3));
    });
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  refused: {{ rule: \"Path(`/refused`)\", service: closed }}\n\
         \x20 slow: {{ rule: \"Path(`/slow`)\", service: silent }}\n\
         services:\n  closed: {{ servers: [{{ url: \"http://127.0.0.1:1\" }}] }}\n\
         \x20 silent: {{ servers: [{{ url: \"{}\" }}], timeouts: {{ response_header: 300ms }} }}\n",
        silent.url()
    ));
    assert_eq!(get(weir.addr(), "t", "/refused").status, 502);
    let line = weir.wait_for_line("router `refused`", 1);
    assert!(
        line.contains(
            "router `refused`: service `closed`: server http://127.0.0.1:1: try 1: upstream connection failed ("
        ) && line.to_lowercase().contains("refused"),
        "{line}"
    );
    assert_eq!(get(weir.addr(), "t", "/slow").status, 504);
    let line = weir.wait_for_line("router `slow`", 1);
    assert!(
        line.contains(&format!(
            "router `slow`: service `silent`: server {}: try 1: upstream response timed out (no response head within 300ms)",
            silent.url()
        )),
        "{line}"
    );
}
