//! HTTP/2 towards the servers, on the real binary: Python `grpcio` clients and a `grpcio`
//! server through weir for the four kinds of call (the bidirectional one as a ping-pong, which
//! only works if both directions stream at once), error statuses and their trailers, the
//! call's deadline, weir's own failures in gRPC form, streams multiplexed on few connections
//! under the per-connection cap, a slow reader whose stream is held back by flow control and
//! not buffered in weir; and Debian's nginx as an `h2c` and an `h2` (TLS) upstream for HTTP/1.1
//! and HTTP/2 clients, bodies both ways.

mod common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// weir with an `h2c` entrypoint, `/weir.Test` routed to the gRPC server over `h2c`,
/// `/weir.Dead` to a closed port, `/weir.Slow` to `slow` (an HTTP/1 server).
fn grpc_config(server: &GrpcServer, http2: &str, slow: &str) -> String {
    format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         routers:\n  \
           grpc: {{ rule: \"PathPrefix(`/weir.Test/`)\", service: grpc }}\n  \
           dead: {{ rule: \"PathPrefix(`/weir.Dead/`)\", service: dead }}\n  \
           slow: {{ rule: \"PathPrefix(`/weir.Slow/`)\", service: slow }}\n\
         services:\n  \
           grpc: {{ protocol: h2c, servers: [{{ url: \"http://127.0.0.1:{}\" }}]{http2} }}\n  \
           dead: {{ protocol: h2c, servers: [{{ url: \"http://127.0.0.1:1\" }}] }}\n  \
           slow: {{ servers: [{{ url: \"{slow}\" }}] }}\n",
        server.port
    )
}

#[test]
fn the_four_kinds_of_call_pass_through() {
    let server = GrpcServer::start();
    let weir = Weir::start(&grpc_config(&server, "", "http://127.0.0.1:1"));
    let out = calls(
        weir.addr(),
        "unary,server_stream,client_stream,bidi,fail,deadline",
    );
    // The request reached the server with weir's forwarding headers.
    assert_eq!(out["unary"]["code"], "OK", "{out}");
    assert_eq!(out["unary"]["reply"], "echo:hello|127.0.0.1", "{out}");
    assert_eq!(out["server_stream"]["count"], 500, "{out}");
    assert_eq!(out["server_stream"]["bytes"], 500_000, "{out}");
    assert_eq!(out["server_stream"]["ordered"], true, "{out}");
    assert_eq!(
        out["client_stream"]["reply"], "300 messages, 3000000 bytes",
        "{out}"
    );
    // Fifty round trips, each message sent only after the previous answer arrived.
    assert_eq!(out["bidi"]["count"], 50, "{out}");
    assert_eq!(out["bidi"]["last"], "re:ping 49", "{out}");
    // An error status, its message and a custom trailer reach the client.
    assert_eq!(out["fail"]["code"], "INVALID_ARGUMENT", "{out}");
    assert_eq!(out["fail"]["details"], "bad request: fail", "{out}");
    assert_eq!(out["fail"]["trailers"]["x-detail"], "on purpose", "{out}");
    // The client's deadline (0.5 s) holds through weir.
    assert_eq!(out["deadline"]["code"], "DEADLINE_EXCEEDED", "{out}");
    let elapsed = out["deadline"]["elapsed"].as_f64().unwrap();
    assert!(elapsed < 1.5, "{out}");
}

#[test]
fn weir_answers_its_own_failures_in_grpc_form() {
    let server = GrpcServer::start();
    // An HTTP/1 upstream that reads the request and never answers.
    let silent = RawUpstream::start(|conn| {
        conn.read_head();
        std::thread::sleep(Duration::from_secs(5));
    });
    let weir = Weir::start(&grpc_config(&server, "", &silent.url()));
    let out = calls(weir.addr(), "unrouted,unavailable");
    assert_eq!(out["unrouted"]["code"], "UNIMPLEMENTED", "{out}");
    assert_eq!(
        out["unrouted"]["details"], "no route matches this request",
        "{out}"
    );
    assert_eq!(out["unavailable"]["code"], "UNAVAILABLE", "{out}");
    assert_eq!(
        out["unavailable"]["details"], "upstream connection failed",
        "{out}"
    );
    // `grpc-timeout` bounds weir's wait for the answer: DEADLINE_EXCEEDED from weir itself
    // (its message), long before the upstream's 5 s, in a trailers-only HTTP 200.
    let dir = temp_dir("grpc-deadline");
    let message = dir.join("message");
    std::fs::write(&message, b"\x00\x00\x00\x00\x02hi").unwrap();
    let started = Instant::now();
    let out = Command::new("curl")
        .args(["-sS", "-D", "-", "-o", "/dev/null", "--max-time", "10"])
        .args([
            "--http2-prior-knowledge",
            "-H",
            "content-type: application/grpc",
        ])
        .args([
            "-H",
            "te: trailers",
            "-H",
            "grpc-timeout: 300m",
            "--data-binary",
        ])
        .arg(format!("@{}", message.display()))
        .arg(format!("http://{}/weir.Slow/Call", weir.addr()))
        .output()
        .unwrap();
    let took = started.elapsed();
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert_eq!(header_value(&head, "grpc-status"), Some("4"), "{head}");
    assert_eq!(
        header_value(&head, "grpc-message"),
        Some("upstream response timed out"),
        "{head}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // A plain HTTP request to the same route still gets a plain answer.
    let plain = get(weir.addr(), "x", "/weir.Dead/Unary");
    assert_eq!(plain.status, 502);
}

#[test]
fn streams_share_connections_up_to_the_cap() {
    let server = GrpcServer::start();
    // Eight calls at once: with the default cap they share one connection; with a cap of
    // two streams per connection they need four.
    let weir = Weir::start(&grpc_config(&server, "", "http://127.0.0.1:1"));
    let out = calls(weir.addr(), "peers");
    assert_eq!(out["peers"]["calls"], 8, "{out}");
    assert_eq!(out["peers"]["connections"], 1, "{out}");
    drop(weir);
    let capped = ", http2: { max_concurrent_streams: 2 }";
    let weir = Weir::start(&grpc_config(&server, capped, "http://127.0.0.1:1"));
    let out = calls(weir.addr(), "peers");
    assert_eq!(out["peers"]["calls"], 8, "{out}");
    assert_eq!(out["peers"]["connections"], 4, "{out}");
}

/// The largest resident size weir's process reached (VmHWM), in MiB.
fn peak_rss_mib(weir: &Weir) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", weir.child.id())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024
}

#[test]
fn a_slow_reader_holds_the_stream_back_without_weir_buffering_it() {
    let server = GrpcServer::start();
    let weir = Weir::start(&grpc_config(&server, "", "http://127.0.0.1:1"));
    let before = peak_rss_mib(&weir);
    let out = calls(weir.addr(), "slow_reader");
    assert_eq!(out["slow_reader"]["count"], 400, "{out}");
    // 200 MB passed; the windows (1 MiB per stream, 4 MiB per connection on each side)
    // bound what weir holds.
    let grown = peak_rss_mib(&weir) - before;
    eprintln!("200 MB streamed to a slow reader: weir's peak RSS grew by {grown} MiB");
    assert!(grown < 40, "weir grew by {grown} MiB");
}

/// What the test nginx answers over HTTP/2: the protocol, method, forwarded client and body
/// length; `…/big` is the file `big` in `dir`; `…/post` reads the body and passes it to
/// `echo` (nginx answers the other requests at once, without reading a body).
fn h2_location(dir: &std::path::Path, echo: &Upstream) -> String {
    format!(
        "client_max_body_size 50m; \
         location ~ /big$ {{ rewrite ^ /big break; root {}; }} \
         location ~ /post$ {{ proxy_pass {}; proxy_set_header x-nginx-saw $server_protocol; }} \
         return 200 \"$server_protocol $request_method host=$host xff=$http_x_forwarded_for\\n\";",
        dir.display(),
        echo.url()
    )
}

#[test]
fn http1_and_http2_clients_reach_h2c_and_h2_servers() {
    let dir = temp_dir("h2-upstream");
    let cert = make_cert(&dir, "origin", &["origin.test"], false);
    let big: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("big"), &big).unwrap();
    let echo = Upstream::start("echo");
    let h2c = Nginx::start_h2(None, &h2_location(&dir, &echo));
    let h2 = Nginx::start_h2(Some((&cert.cert, &cert.key)), &h2_location(&dir, &echo));
    let yaml = format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         routers:\n  \
           clear: {{ rule: \"PathPrefix(`/clear`)\", service: clear }}\n  \
           tls: {{ rule: \"PathPrefix(`/tls`)\", service: tls }}\n\
         services:\n  \
           clear: {{ protocol: h2c, servers: [{{ url: \"http://{}\" }}] }}\n  \
           tls:\n    protocol: h2\n    servers: [{{ url: \"https://{}\" }}]\n    \
           tls: {{ ca: \"{}\", server_name: origin.test }}\n",
        h2c.addr,
        h2.addr,
        cert.cert.display()
    );
    let weir = Weir::start(&yaml);
    let base = format!("http://{}", weir.addr());
    let body = dir.join("body");
    std::fs::write(&body, vec![b'x'; 3_000_000]).unwrap();
    let body_arg = format!("@{}", body.display());
    let posted = |args: &[&str]| -> serde_json::Value {
        let out = curl_ok(args);
        let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(json["method"], "POST", "{args:?}");
        assert_eq!(
            echoed_header(&json, "x-nginx-saw").as_deref(),
            Some("HTTP/2.0"),
            "{args:?}"
        );
        assert_eq!(json["body"].as_str().unwrap().len(), 3_000_000, "{args:?}");
        json
    };
    for path in ["/clear", "/tls"] {
        let url = format!("{base}{path}");
        for client in ["--http1.1", "--http2-prior-knowledge"] {
            let got = curl_ok(&[client, "-H", "host: api.test", &format!("{url}/a")]);
            assert_eq!(
                String::from_utf8(got).unwrap(),
                "HTTP/2.0 GET host=api.test xff=127.0.0.1\n",
                "{client} {path}"
            );
            // A 3 MB body each way, under both sides' flow control.
            posted(&[client, "--data-binary", &body_arg, &format!("{url}/post")]);
            assert!(
                curl_ok(&[client, &format!("{url}/big")]) == big,
                "{client} {path}/big"
            );
        }
        // A chunked HTTP/1.1 body goes as DATA frames without a length.
        let chunked = [
            "--http1.1",
            "-H",
            "transfer-encoding: chunked",
            "--data-binary",
        ];
        let mut args = chunked.to_vec();
        let post = format!("{url}/post");
        args.extend([body_arg.as_str(), post.as_str()]);
        posted(&args);
    }
}

#[test]
fn health_checks_speak_http2_to_http2_services() {
    let dir = temp_dir("h2-health");
    let echo = Upstream::start("echo");
    let nginx = Nginx::start_h2(None, &h2_location(&dir, &echo));
    // The same server in two services: one check expects what nginx answers (200), the
    // other a 204 it never gets. An HTTP/1 probe would fail both (nginx speaks only HTTP/2
    // on this port).
    let yaml = format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  \
           well: {{ rule: \"PathPrefix(`/well`)\", service: well }}\n  \
           sick: {{ rule: \"PathPrefix(`/sick`)\", service: sick }}\n\
         services:\n  \
           well:\n    protocol: h2c\n    servers: [{{ url: \"http://{addr}\" }}]\n    \
           health_check: {{ path: /check, interval: 100ms, unhealthy_threshold: 1 }}\n  \
           sick:\n    protocol: h2c\n    servers: [{{ url: \"http://{addr}\" }}]\n    \
           health_check: {{ path: /check, interval: 100ms, unhealthy_threshold: 1, expect_status: \"204\" }}\n",
        addr = nginx.addr
    );
    let weir = Weir::start(&yaml);
    weir.wait_for_line("is down: answered 200", 1);
    assert_eq!(get(weir.addr(), "x", "/sick").status, 503);
    assert_eq!(get(weir.addr(), "x", "/well").status, 200);
    assert!(
        !weir
            .stderr()
            .iter()
            .any(|l| l.contains("`well`") && l.contains("down")),
        "{:?}",
        weir.stderr()
    );
}

/// A failed upstream on a gRPC route, as it is on the wire: `200` with `content-type:
/// application/grpc` and `grpc-status: 14` (UNAVAILABLE), over h2c and over TLS.
#[test]
fn a_failed_upstream_is_unavailable_on_the_wire_over_h2c_and_tls() {
    let dir = temp_dir("grpc-wire");
    let cert = make_cert(&dir, "grpc", &["localhost"], false);
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         \x20 secure: {{ address: \"127.0.0.1:0\", tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }} }}\n\
         routers:\n  dead: {{ rule: \"PathPrefix(`/weir.Dead/`)\", service: dead }}\n\
         services:\n  dead: {{ protocol: h2c, servers: [{{ url: \"http://127.0.0.1:1\" }}] }}\n",
        cert.cert.display(),
        cert.key.display()
    ));
    let secure_port = weir.addrs["secure"].port();
    let cases = [
        (
            vec!["--http2-prior-knowledge".to_string()],
            format!("http://{}/weir.Dead/Unary", weir.addr()),
        ),
        (
            vec![
                "--http2".to_string(),
                "--cacert".to_string(),
                cert.cert.display().to_string(),
                "--resolve".to_string(),
                format!("localhost:{secure_port}:127.0.0.1"),
            ],
            format!("https://localhost:{secure_port}/weir.Dead/Unary"),
        ),
    ];
    for (args, url) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let head = curl_grpc_head(&args, &url);
        assert!(head.starts_with("http/2 200"), "{url}: {head}");
        assert_eq!(
            header_value(&head, "content-type"),
            Some("application/grpc"),
            "{url}: {head}"
        );
        assert_eq!(
            header_value(&head, "grpc-status"),
            Some("14"),
            "{url}: {head}"
        );
    }
}
