//! HTTP/2 from clients on the real binary: curl with `--http2-prior-knowledge` on an `h2c`
//! entrypoint (beside HTTP/1.1 on the same port) and with ALPN `h2` over TLS; requests reach
//! an HTTP/1.1 upstream with `:authority` as `Host`, cookies joined and bodies re-framed;
//! large answers pass under flow control; compression works over HTTP/2; a client that opens
//! and resets thousands of streams is cut off, and one that never opens its window has its
//! stream reset after `client_send_timeout`, while the worker goes on answering others
//! promptly; a stop lets open streams finish; an upload answered before its end is reset
//! (NO_ERROR) and the connection serves on; heads an HTTP/1.1 parse would refuse are refused on
//! their own stream.

mod common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

fn config(upstream: &Upstream, extra_entrypoint: &str) -> String {
    format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n{extra_entrypoint}\
         routers:\n  ping: {{ rule: \"Path(`/ping`)\", priority: 100, respond: {{ status: 200, body: pong }} }}\n  \
         api: {{ rule: \"PathPrefix(`/`)\", service: up, middlewares: [gz] }}\n\
         services:\n  up: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n  gz: {{ compress: {{ algorithms: [gzip], min_length: 10 }} }}\n",
        upstream.url()
    )
}

/// curl with `args`; (stdout, the response head lines curl wrote with `-D -` included).
fn curl(args: &[&str]) -> String {
    String::from_utf8_lossy(&curl_ok(args)).into_owned()
}

#[test]
fn h2c_prior_knowledge_and_http1_share_the_port() {
    let upstream = Upstream::start("up");
    let weir = Weir::start(&config(&upstream, ""));
    let base = format!("http://{}", weir.addr());
    let ping = curl(&[
        "--http2-prior-knowledge",
        "-D",
        "-",
        &format!("{base}/ping"),
    ]);
    assert!(ping.starts_with("HTTP/2 200"), "{ping}");
    assert!(ping.ends_with("pong"), "{ping}");
    // HTTP/1.1 on the same port.
    let plain = curl(&["--http1.1", "-D", "-", &format!("{base}/ping")]);
    assert!(plain.starts_with("HTTP/1.1 200"), "{plain}");

    // To an HTTP/1.1 upstream: Host from :authority, cookies joined, no hop-by-hop field back.
    let echoed = curl(&[
        "--http2-prior-knowledge",
        "-H",
        "cookie: a=1",
        "-H",
        "cookie: b=2",
        "-H",
        "X-Mixed-Case: v",
        &format!("{base}/echo?q=1"),
    ]);
    let json: serde_json::Value = serde_json::from_str(&echoed).unwrap();
    assert_eq!(json["target"], "/echo?q=1");
    assert_eq!(
        echoed_header(&json, "host").unwrap(),
        weir.addr().to_string()
    );
    assert_eq!(echoed_header(&json, "cookie").unwrap(), "a=1; b=2");
    assert_eq!(echoed_header(&json, "x-mixed-case").unwrap(), "v");
    let head = curl(&[
        "--http2-prior-knowledge",
        "-D",
        "-",
        "-o",
        "/dev/null",
        &format!("{base}/echo"),
    ]);
    assert!(
        !head.contains("x-hop"),
        "a connection-specific field reached the client: {head}"
    );

    // Request bodies: with a length, and without one (chunked to the upstream).
    let posted = curl(&[
        "--http2-prior-knowledge",
        "--data-binary",
        "hello body",
        &format!("{base}/post"),
    ]);
    let json: serde_json::Value = serde_json::from_str(&posted).unwrap();
    assert_eq!(json["body"], "hello body");
    let dir = temp_dir("h2-upload");
    let file = dir.join("upload.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    let streamed = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cat {} | curl -sS --max-time 10 --http2-prior-knowledge -X POST -T - {base}/upload",
            file.display()
        ))
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&streamed.stdout).unwrap();
    assert_eq!(
        echoed_header(&json, "transfer-encoding").as_deref(),
        Some("chunked")
    );
    assert_eq!(
        json["body"].as_str().unwrap().len(),
        String::from_utf8_lossy(&data).len()
    );

    // A large answer passes under flow control, byte for byte; compression works over h2.
    let big = curl(&["--http2-prior-knowledge", &format!("{base}/big/5000000")]);
    assert_eq!(big.len(), 5_000_000);
    assert!(big
        .bytes()
        .enumerate()
        .all(|(i, b)| b == b'a' + (i % 26) as u8));
    let gz = curl(&[
        "--http2-prior-knowledge",
        "--compressed",
        "-D",
        "-",
        &format!("{base}/json"),
    ]);
    assert!(gz.contains("content-encoding: gzip"), "{gz}");
    let body = gz.split("\r\n\r\n").nth(1).unwrap();
    let json: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(json["target"], "/json");
}

#[test]
fn alpn_h2_over_tls() {
    let upstream = Upstream::start("up");
    let dir = temp_dir("h2-tls");
    let cert = make_cert(&dir, "site", &["h2.test"], false);
    let tls_entrypoint = format!(
        "  secure:\n    address: \"127.0.0.1:0\"\n    tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }}\n",
        cert.cert.display(),
        cert.key.display()
    );
    let weir = Weir::start(&config(&upstream, &tls_entrypoint));
    let port = weir.addrs["secure"].port();
    let url = format!("https://h2.test:{port}/ping");
    let resolve = format!("h2.test:{port}:127.0.0.1");
    let ca = cert.cert.to_str().unwrap();
    // curl trusting the test CA, with h2.test resolved to weir.
    let curl_tls = |args: &[&str]| {
        let mut all = vec!["--cacert", ca, "--resolve", &resolve];
        all.extend_from_slice(args);
        curl(&all)
    };
    let h2 = curl_tls(&["--http2", "-D", "-", &url]);
    assert!(h2.starts_with("HTTP/2 200"), "{h2}");
    let h1 = curl_tls(&["--http1.1", "-D", "-", &url]);
    assert!(h1.starts_with("HTTP/1.1 200"), "{h1}");
    let proxied = curl_tls(&["--http2", &format!("https://h2.test:{port}/x")]);
    let json: serde_json::Value = serde_json::from_str(&proxied).unwrap();
    assert_eq!(
        echoed_header(&json, "x-forwarded-proto").as_deref(),
        Some("https")
    );
}

#[test]
fn rapid_resets_close_the_abuser_not_the_worker() {
    let upstream = Upstream::start("up");
    let weir = Weir::start(&config(&upstream, "").replace(
        "server: { workers: 1 }",
        "server: { workers: 1, admin: { address: \"127.0.0.1:0\" } }",
    ));
    let addr = weir.addr();
    // Python's h2 (Debian's python3-h2): open and reset 5,000 streams as fast as it can.
    let script = r#"
import socket, sys, h2.connection, h2.config, h2.events
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
c.initiate_connection()
s.sendall(c.data_to_send())
sent = 0
closed = False
try:
    for i in range(5000):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, [(':method', 'GET'), (':path', '/slow/50'), (':scheme', 'http'), (':authority', 'x')])
        c.reset_stream(sid)
        s.sendall(c.data_to_send())
        sent += 1
except Exception:
    closed = True
s.settimeout(5)
goaway = None
try:
    while True:
        data = s.recv(65536)
        if not data:
            break
        for e in c.receive_data(data):
            if isinstance(e, h2.events.ConnectionTerminated):
                goaway = int(e.error_code)
except Exception:
    pass
print(sent, closed, goaway)
"#;
    let start = Instant::now();
    let out = python(script, &[&addr.ip().to_string(), &addr.port().to_string()]);
    let out = String::from_utf8_lossy(&out).into_owned();
    let mut fields = out.split_whitespace();
    let sent: usize = fields.next().unwrap().parse().unwrap();
    // weir closes lingering (reading on), so the client's writes go on and it reads the
    // GOAWAY: ENHANCE_YOUR_CALM (0xb), not a reset that could destroy it.
    assert_eq!(fields.next(), Some("False"), "writes failed: {out}");
    assert_eq!(
        fields.next(),
        Some("11"),
        "no GOAWAY(ENHANCE_YOUR_CALM) after {sent} resets: {out}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    // The worker answers another client at once.
    let t = Instant::now();
    let ping = curl(&["--http2-prior-knowledge", &format!("http://{addr}/ping")]);
    assert_eq!(ping, "pong");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // The operator sees it.
    let metrics = get(weir.addrs["@admin"], "a", "/metrics").text();
    let counted = "weir_abuse_total{entrypoint=\"web\",kind=\"rapid_reset\"} 1";
    assert!(metrics.contains(counted), "{metrics}");
}

/// Python's h2 as a client: runs `body` after connecting (`c` the connection, `s` the socket,
/// `events()` reads what arrived) and returns what it printed.
fn h2_client(addr: std::net::SocketAddr, body: &str) -> String {
    let script = format!(
        r#"
import socket, sys, time, h2.connection, h2.config, h2.events, h2.settings
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.settimeout(10)
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
def events():
    data = s.recv(65536)
    if not data:
        return None
    out = c.receive_data(data)
    s.sendall(c.data_to_send())
    return out
{body}
"#
    );
    let out = python(&script, &[&addr.ip().to_string(), &addr.port().to_string()]);
    String::from_utf8_lossy(&out).trim().to_string()
}

#[test]
fn a_stalled_reader_is_reset_and_others_are_served() {
    let upstream = Upstream::start("up");
    let weir = Weir::start(&config(&upstream, "").replace(
        "server: { workers: 1 }",
        "server: { workers: 1, client_send_timeout: 1s }",
    ));
    let addr = weir.addr();
    // A client whose stream window is 0: weir can send no DATA, and cuts the stream.
    let body = r#"
c.initiate_connection()
c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
c.send_headers(1, [(':method', 'GET'), (':path', '/big/200000'), (':scheme', 'http'), (':authority', 'x')], end_stream=True)
s.sendall(c.data_to_send())
start = time.time()
result = "no reset"
while time.time() - start < 8:
    evs = events()
    if evs is None:
        break
    if any(isinstance(e, h2.events.StreamReset) for e in evs):
        result = "reset after %.1f s" % (time.time() - start)
        break
print(result)
"#;
    let stalled = std::thread::spawn(move || h2_client(addr, body));
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(
        curl(&["--http2-prior-knowledge", &format!("http://{addr}/ping")]),
        "pong"
    );
    assert!(t.elapsed() < Duration::from_secs(1));
    let result = stalled.join().unwrap();
    assert!(result.starts_with("reset after"), "{result}");
}

#[test]
fn a_stop_lets_open_streams_finish() {
    let upstream = Upstream::start("up");
    let weir = Weir::start(&config(&upstream, ""));
    let url = format!("http://{}/slow/800", weir.addr());
    let client = std::thread::spawn(move || {
        Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                "--http2-prior-knowledge",
                "-w",
                "%{http_code} %{http_version}",
                &url,
            ])
            .output()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    weir.signal("TERM");
    let out = client.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.ends_with("200 2"), "{text}");
    let json: serde_json::Value = serde_json::from_str(text.trim_end_matches("200 2")).unwrap();
    assert_eq!(json["target"], "/slow/800");
}

#[test]
fn the_access_log_names_http2() {
    let upstream = Upstream::start("up");
    let dir = temp_dir("h2-log");
    let log = dir.join("access.log");
    let weir = Weir::start(&config(&upstream, "").replace(
        "server: { workers: 1 }",
        &format!(
            "server: {{ workers: 1, access_log: {{ enabled: true, format: combined, path: \"{}\" }} }}",
            log.display()
        ),
    ));
    curl(&[
        "--http2-prior-knowledge",
        &format!("http://{}/ping", weir.addr()),
    ]);
    curl(&["--http1.1", &format!("http://{}/ping", weir.addr())]);
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 2 || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(text.contains("\"GET /ping HTTP/2.0\" 200 4"), "{text}");
    assert!(text.contains("\"GET /ping HTTP/1.1\" 200 4"), "{text}");
}

#[test]
fn trailers_from_an_http1_upstream_reach_http2_clients() {
    let upstream = Upstream::start("up");
    let weir = Weir::start(&config(&upstream, ""));
    let url = format!("http://{}/trailers", weir.addr());
    // curl writes trailers after the head in its header dump.
    let out = curl(&[
        "--http2-prior-knowledge",
        "-H",
        "te: trailers",
        "-H",
        "accept-encoding: identity",
        "-D",
        "-",
        &url,
    ]);
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    let body_at = out.find("payload").expect("the body");
    let tail = &out[body_at..];
    assert!(tail.contains("grpc-status: 0"), "{out}");
    assert!(tail.contains("grpc-message: all-good"), "{out}");
}

#[test]
fn an_answer_before_the_body_ends_resets_the_upload_and_the_connection_goes_on() {
    // RFC 9113 §8.1: a server that has sent a complete response before the request's end may
    // ask the client to stop sending with RST_STREAM (NO_ERROR); the connection serves on.
    let upstream = Upstream::start("up");
    let weir = Weir::start(&config(&upstream, ""));
    let body = r#"
c.initiate_connection()
c.send_headers(1, [(':method', 'POST'), (':path', '/ping'), (':scheme', 'http'), (':authority', 'x')])
c.send_data(1, b'x' * 1000)
s.sendall(c.data_to_send())
seen = []
while not any(isinstance(e, h2.events.StreamReset) for e in seen):
    evs = events()
    if evs is None:
        break
    seen += evs
status = [dict(e.headers).get(b':status') for e in seen if isinstance(e, h2.events.ResponseReceived)]
reset = [e.error_code for e in seen if isinstance(e, h2.events.StreamReset)]
c.send_headers(3, [(':method', 'GET'), (':path', '/ping'), (':scheme', 'http'), (':authority', 'x')], end_stream=True)
s.sendall(c.data_to_send())
second = b''
while True:
    evs = events()
    if evs is None:
        break
    second += b''.join(e.data for e in evs if isinstance(e, h2.events.DataReceived) and e.stream_id == 3)
    if any(isinstance(e, h2.events.StreamEnded) and e.stream_id == 3 for e in evs):
        break
print(status, reset, second)
"#;
    let out = h2_client(weir.addr(), body);
    assert_eq!(out, "[b'200'] [<ErrorCodes.NO_ERROR: 0>] b'pong'", "{out}");
}

#[test]
fn heads_an_http1_parse_would_refuse_are_400_on_their_stream_and_the_connection_goes_on() {
    // The head is built from the fields directly (no HTTP/1 text parsed back): what the HTTP/1
    // parse refused must still be refused, each on its own stream (a malformed length is
    // weir-h2's to refuse: a stream reset).
    let upstream = Upstream::start("up");
    let weir = Weir::start(&config(&upstream, ""));
    let body = r#"
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False, validate_inbound_headers=False))
c.initiate_connection()
def get(sid, path, extra, authority='x'):
    c.send_headers(sid, [(':method', 'GET'), (':path', path), (':scheme', 'http'), (':authority', authority)] + extra, end_stream=True)
get(1, '/echo', [('x-ctl', 'a\x01b')])
get(3, '/a b', [])
get(5, '/echo', [('host', 'a'), ('host', 'b')])
get(7, '/echo', [], authority='user@x')
get(9, 'relative', [])
get(11, '/echo', [('content-length', '1, 2')])
get(13, '/echo', [('cookie', 'a=1'), ('cookie', 'b=2'), ('x-ok', 'v\tw')])
s.sendall(c.data_to_send())
status, body, ended = {}, {}, set()
while len(ended) < 7:
    evs = events()
    if evs is None:
        break
    for e in evs:
        if isinstance(e, h2.events.ResponseReceived):
            status[e.stream_id] = dict(e.headers)[b':status'].decode()
        elif isinstance(e, h2.events.DataReceived):
            body[e.stream_id] = body.get(e.stream_id, b'') + e.data
            c.acknowledge_received_data(len(e.data), e.stream_id)
        elif isinstance(e, h2.events.StreamReset):
            status.setdefault(e.stream_id, 'reset')
            ended.add(e.stream_id)
        elif isinstance(e, h2.events.StreamEnded):
            ended.add(e.stream_id)
    s.sendall(c.data_to_send())
print(' '.join(status.get(i, '-') for i in (1, 3, 5, 7, 9, 11, 13)))
print(body.get(13, b'').decode())
"#;
    let out = h2_client(weir.addr(), body);
    let (statuses, echoed) = out.split_once('\n').unwrap_or((&out, ""));
    assert_eq!(statuses, "400 400 400 400 400 reset 200", "{out}");
    let json: serde_json::Value = serde_json::from_str(echoed).unwrap();
    assert_eq!(echoed_header(&json, "cookie").unwrap(), "a=1; b=2");
    assert_eq!(echoed_header(&json, "x-ok").unwrap(), "v\tw");
    assert_eq!(echoed_header(&json, "host").unwrap(), "x");
}
