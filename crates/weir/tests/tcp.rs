//! TCP routers on the real binary: Redis from Debian through a catch-all router (redis-cli and
//! redis-benchmark), TLS passthrough to two nginx servers picked by SNI on a port that also
//! serves weir's own HTTPS, TLS terminated by weir for an ALPN protocol with plaintext to an echo
//! server, half-close, the PROXY protocol header, and bad clients and servers: a ClientHello
//! in one-byte segments, plain bytes on a passthrough-only port, a silent client, a refusing
//! server.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// A TCP server on a thread: runs `handle` for each connection.
fn tcp_server(handle: impl Fn(TcpStream) + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::sync::Arc::new(handle);
    std::thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            let handle = handle.clone();
            std::thread::spawn(move || handle(conn));
        }
    });
    addr
}

/// Echoes every byte back until the client finishes sending, then closes.
fn echo(mut conn: TcpStream) {
    let mut buf = [0u8; 16384];
    while let Ok(n) = conn.read(&mut buf) {
        if n == 0 || conn.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}

fn tcp_config(entrypoints: &str, tcp: &str, http_routes: &str) -> String {
    format!("server: {{ workers: 1 }}\nentrypoints:\n{entrypoints}tcp:\n{tcp}{http_routes}")
}

#[test]
fn redis_goes_through_a_catch_all_tcp_router() {
    let redis = Redis::start();
    let weir = Weir::start(&tcp_config(
        "  redis: { address: \"127.0.0.1:0\" }\n",
        &format!(
            "  routers:\n    redis: {{ entrypoints: [redis], rule: \"HostSNI(`*`)\", service: redis }}\n  services:\n    redis: {{ servers: [{{ address: \"127.0.0.1:{}\" }}] }}\n",
            redis.port
        ),
        "",
    ));
    let port = weir.addrs["redis"].port();
    assert_eq!(redis_cli(port, &["SET", "weir:key", "through weir"]), "OK");
    assert_eq!(redis_cli(port, &["GET", "weir:key"]), "through weir");
    // Straight at Redis: the value was stored there.
    assert_eq!(redis_cli(redis.port, &["GET", "weir:key"]), "through weir");
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-n",
            "20000",
            "-c",
            "10",
            "-P",
            "16",
            "-t",
            "set,get",
            "-q",
        ])
        .output()
        .expect("redis-benchmark must be installed");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SET:") && text.contains("GET:"), "{text}");
}

#[test]
fn passthrough_by_sni_beside_weirs_own_https() {
    let dir = temp_dir("tcp-sni");
    let a = make_cert(&dir, "a", &["a.example"], false);
    let b = make_cert(&dir, "b", &["b.example"], false);
    let own = make_cert(&dir, "own", &["own.example"], false);
    let nginx_a = Nginx::start_tls(&a.cert, &a.key, None);
    let nginx_b = Nginx::start_tls(&b.cert, &b.key, None);
    let yaml = tcp_config(
        &format!(
            "  websecure:\n    address: \"127.0.0.1:0\"\n    tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }}\n",
            own.cert.display(),
            own.key.display()
        ),
        &format!(
            "  routers:\n    a: {{ rule: \"HostSNI(`a.example`)\", tls: {{ passthrough: true }}, service: a }}\n    b: {{ rule: \"HostSNI(`B.example`)\", tls: {{ passthrough: true }}, service: b }}\n  services:\n    a: {{ servers: [{{ address: \"{}\" }}] }}\n    b: {{ servers: [{{ address: \"{}\" }}] }}\n",
            nginx_a.addr, nginx_b.addr
        ),
        "routers:\n  own: { rule: \"PathPrefix(`/`)\", respond: { body: \"weir itself\" } }\n",
    );
    let weir = Weir::start(&yaml);
    let port = weir.addrs["websecure"].port();
    // Each name reaches the server holding its certificate: only that server can complete a
    // handshake the client trusts.
    let (ok, body) = curl_https(port, "a.example", &a.cert);
    assert!(ok && body.starts_with("conn="), "a: {body}");
    let (ok, body) = curl_https(port, "b.example", &b.cert);
    assert!(ok && body.starts_with("conn="), "b: {body}");
    // a.example does not reach b's server.
    let (ok, _) = curl_https(port, "a.example", &b.cert);
    assert!(!ok);
    // Any other name is weir's own HTTPS on the same port.
    let (ok, body) = curl_https(port, "own.example", &own.cert);
    assert!(ok, "own");
    assert_eq!(body, "weir itself");
    // A ClientHello in one-byte segments still routes by its SNI.
    let out = python(
        SPLIT_HELLO,
        &[
            &port.to_string(),
            &a.cert.display().to_string(),
            "a.example",
        ],
    );
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.starts_with("HTTP/1.1 200") && out.contains("conn="),
        "{out}"
    );
}

/// Sends the ClientHello a byte at a time, then finishes the handshake and a request.
const SPLIT_HELLO: &str = r#"
import socket, ssl, sys, time
port, cafile, name = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=cafile)
raw = socket.create_connection(("127.0.0.1", port), timeout=10)
raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
tls = ctx.wrap_bio(incoming, outgoing, server_hostname=name)
first = True
def pump():
    global first
    data = outgoing.read()
    if first and data:
        first = False
        for i in range(len(data)):
            raw.sendall(data[i:i + 1]); time.sleep(0.002)
    elif data:
        raw.sendall(data)
while True:
    try:
        tls.do_handshake(); pump(); break
    except ssl.SSLWantReadError:
        pump()
        chunk = raw.recv(65536)
        if not chunk: raise SystemExit("closed during handshake")
        incoming.write(chunk)
tls.write(b"GET / HTTP/1.1\r\nHost: " + name.encode() + b"\r\nConnection: close\r\n\r\n"); pump()
answer = b""
while True:
    try:
        part = tls.read(65536)
        if not part: break
        answer += part
    except ssl.SSLWantReadError:
        chunk = raw.recv(65536)
        if not chunk: break
        incoming.write(chunk)
    except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
        break
print(answer.decode(errors="replace"))
"#;

#[test]
fn terminated_tls_reaches_a_plain_server_by_alpn() {
    let dir = temp_dir("tcp-alpn");
    let cert = make_cert(&dir, "raw", &["raw.example"], false);
    let echo_addr = tcp_server(echo);
    let yaml = tcp_config(
        &format!(
            "  websecure:\n    address: \"127.0.0.1:0\"\n    tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }}\n",
            cert.cert.display(),
            cert.key.display()
        ),
        &format!(
            "  routers:\n    raw: {{ rule: \"HostSNI(`raw.example`) && ALPN(`x-custom`)\", service: echo }}\n  services:\n    echo: {{ servers: [{{ address: \"{echo_addr}\" }}] }}\n"
        ),
        "routers:\n  web: { rule: \"PathPrefix(`/`)\", respond: { body: http } }\n",
    );
    let weir = Weir::start(&yaml);
    let port = weir.addrs["websecure"].port().to_string();
    let script = r#"
import socket, ssl, sys
port, cafile, alpn = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=cafile)
ctx.set_alpn_protocols([alpn])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="raw.example")
if alpn == "x-custom":
    s.sendall(b"ping over tls")
    print(s.selected_alpn_protocol(), s.recv(100).decode())
else:
    s.sendall(b"GET / HTTP/1.1\r\nHost: raw.example\r\nConnection: close\r\n\r\n")
    print(s.selected_alpn_protocol(), s.recv(1000).decode().split("\r\n\r\n")[1])
"#;
    let cafile = cert.cert.display().to_string();
    let out = python(script, &[&port, &cafile, "x-custom"]);
    assert_eq!(
        String::from_utf8_lossy(&out).trim(),
        "x-custom ping over tls"
    );
    // The same name without that protocol is HTTP.
    let out = python(script, &[&port, &cafile, "http/1.1"]);
    assert_eq!(String::from_utf8_lossy(&out).trim(), "http/1.1 http");
}

#[test]
fn half_close_and_the_proxy_protocol_header() {
    // The server reads until the client's FIN, then answers with what it got.
    let server = tcp_server(|mut conn| {
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        let reply = format!(
            "{} bytes; first line: {}",
            got.len(),
            String::from_utf8_lossy(&got).lines().next().unwrap_or("")
        );
        conn.write_all(reply.as_bytes()).unwrap();
    });
    let yaml = tcp_config(
        "  plain: { address: \"127.0.0.1:0\" }\n  proxied: { address: \"127.0.0.1:0\" }\n",
        &format!(
            "  routers:\n    plain: {{ entrypoints: [plain], rule: \"HostSNI(`*`)\", service: s }}\n    proxied: {{ entrypoints: [proxied], rule: \"HostSNI(`*`)\", service: pp }}\n  services:\n    s: {{ servers: [{{ address: \"{server}\" }}] }}\n    pp: {{ servers: [{{ address: \"{server}\" }}], proxy_protocol: {{ version: 1 }} }}\n"
        ),
        "",
    );
    let weir = Weir::start(&yaml);
    let payload = vec![b'x'; 300_000];
    let mut c = TcpStream::connect(weir.addrs["plain"]).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(&payload).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut reply = String::new();
    c.read_to_string(&mut reply).unwrap();
    assert_eq!(
        reply,
        format!("300000 bytes; first line: {}", "x".repeat(300_000))
    );

    // Bulk: 64 MiB written by the server in one call and read through the router (which
    // splices once its reads fill up), then 64 MiB echoed back both ways at once.
    let data: Vec<u8> = (0..64u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let source_data = data.clone();
    let source = tcp_server(move |mut conn| {
        let _ = conn.write_all(&source_data);
    });
    let echo_addr = tcp_server(echo);
    let bulk = Weir::start(&tcp_config(
        "  download: { address: \"127.0.0.1:0\" }\n  echo: { address: \"127.0.0.1:0\" }\n",
        &format!("  routers:\n    d: {{ entrypoints: [download], rule: \"HostSNI(`*`)\", service: d }}\n    e: {{ entrypoints: [echo], rule: \"HostSNI(`*`)\", service: e }}\n  services:\n    d: {{ servers: [{{ address: \"{source}\" }}] }}\n    e: {{ servers: [{{ address: \"{echo_addr}\" }}] }}\n"),
        "",
    ));
    let mut c = TcpStream::connect(bulk.addrs["download"]).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut back = Vec::new();
    c.read_to_end(&mut back).unwrap();
    assert!(
        back == data,
        "downloaded {} of {} bytes, or different",
        back.len(),
        data.len()
    );
    let mut c = TcpStream::connect(bulk.addrs["echo"]).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut writer = c.try_clone().unwrap();
    let sent = data.clone();
    let sending = std::thread::spawn(move || {
        writer.write_all(&sent).unwrap();
        writer.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    c.read_to_end(&mut back).unwrap();
    sending.join().unwrap();
    assert!(
        back == data,
        "echoed {} of {} bytes, or different",
        back.len(),
        data.len()
    );

    let mut c = TcpStream::connect(weir.addrs["proxied"]).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let client_port = c.local_addr().unwrap().port();
    c.write_all(b"hello").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut reply = String::new();
    c.read_to_string(&mut reply).unwrap();
    let header = format!(
        "PROXY TCP4 127.0.0.1 127.0.0.1 {client_port} {}",
        weir.addrs["proxied"].port()
    );
    assert_eq!(
        reply,
        format!("{} bytes; first line: {header}", header.len() + 2 + 5)
    );
}

#[test]
fn bad_clients_and_a_refusing_server_are_closed_promptly() {
    let dir = temp_dir("tcp-bad");
    let a = make_cert(&dir, "a", &["a.example"], false);
    let closed_port = free_port();
    let yaml = tcp_config(
        &format!(
            "  pass:\n    address: \"127.0.0.1:0\"\n    tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}], handshake_timeout: 1s }}\n  refused: {{ address: \"127.0.0.1:0\" }}\n",
            a.cert.display(),
            a.key.display()
        ),
        &format!(
            "  routers:\n    a: {{ entrypoints: [pass], rule: \"HostSNI(`a.example`)\", tls: {{ passthrough: true }}, service: nowhere }}\n    r: {{ entrypoints: [refused], rule: \"HostSNI(`*`)\", service: nowhere }}\n  services:\n    nowhere: {{ servers: [{{ address: \"127.0.0.1:{closed_port}\" }}], timeouts: {{ connect: 1s }} }}\n"
        ),
        "",
    );
    let weir = Weir::start(&yaml);
    let closed_within = |c: &mut TcpStream, limit: Duration| {
        c.set_read_timeout(Some(limit + Duration::from_secs(2)))
            .unwrap();
        let start = Instant::now();
        let mut buf = [0u8; 64];
        let n = c.read(&mut buf).unwrap_or(0);
        (n, start.elapsed())
    };
    // Plain bytes on a port with only a passthrough router: closed at once.
    let mut c = TcpStream::connect(weir.addrs["pass"]).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n")
        .unwrap();
    let (n, took) = closed_within(&mut c, Duration::ZERO);
    assert_eq!(n, 0);
    assert!(took < Duration::from_millis(500), "{took:?}");
    // A client that sends nothing: closed after the handshake timeout.
    let mut c = TcpStream::connect(weir.addrs["pass"]).unwrap();
    let (n, took) = closed_within(&mut c, Duration::from_secs(1));
    assert_eq!(n, 0);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(1800),
        "{took:?}"
    );
    // A server that refuses: the client is closed promptly, the failure logged once.
    let mut c = TcpStream::connect(weir.addrs["refused"]).unwrap();
    let (n, took) = closed_within(&mut c, Duration::ZERO);
    assert_eq!(n, 0);
    assert!(took < Duration::from_millis(500), "{took:?}");
    std::thread::sleep(Duration::from_millis(100));
    let logged: Vec<String> = weir
        .stderr()
        .into_iter()
        .filter(|l| l.contains("cannot connect"))
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0].contains("tcp router `r`"), "{logged:?}");
    // The worker still serves others.
    let mut c = TcpStream::connect(weir.addrs["pass"]).unwrap();
    c.write_all(b"\x16").unwrap();
    drop(c);
}

#[test]
fn tcp_config_errors_point_at_the_problem() {
    let dir = temp_dir("tcp-check");
    let path = dir.join("weir.yaml");
    std::fs::write(
        &path,
        "entrypoints:\n  web: { address: \":0\" }\n  dns: { address: \":5353/udp\", tls: {} }\ntcp:\n  routers:\n    db: { rule: \"HostSNI(`db`) && Path(`/`)\", service: db }\n    x: { entrypoints: [dns], rule: \"HostSNI(`*`)\", service: missing }\n  services:\n    db: { servers: [{ address: \"nohost\" }] }\nudp:\n  routers:\n    u: { entrypoints: [web], service: d }\n  services:\n    d: { servers: [{ address: \"127.0.0.1:53\" }] }\n",
    )
    .unwrap();
    let out = weir_check(&path);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let file = path.display().to_string();
    for (line, message) in [
        (
            3,
            "entrypoint `dns` is UDP: `tls` applies to TCP entrypoints only",
        ),
        (
            6,
            "unknown matcher `Path`, expected one of HostSNI, HostSNIRegexp, ALPN, ClientIP",
        ),
        (7, "names entrypoint `dns`, which is not a TCP entrypoint"),
        (7, "tcp service `missing`, which is not defined"),
        (9, "`nohost` is not a server address"),
        (12, "names entrypoint `web`, which is not UDP"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("{file}:{line}:")) && l.contains(message)),
            "line {line}: {message}\n{err}"
        );
    }
}

#[test]
fn idle_connections_close_and_the_cap_holds() {
    let echo_addr = tcp_server(echo);
    let yaml = tcp_config(
        "  idle: { address: \"127.0.0.1:0\" }\n  capped: { address: \"127.0.0.1:0\" }\n",
        &format!(
            "  routers:\n    i: {{ entrypoints: [idle], rule: \"HostSNI(`*`)\", service: i }}\n    c: {{ entrypoints: [capped], rule: \"HostSNI(`*`)\", service: c }}\n  services:\n    i: {{ servers: [{{ address: \"{echo_addr}\" }}], timeouts: {{ idle: 1s }} }}\n    c: {{ servers: [{{ address: \"{echo_addr}\" }}], max_connections: 2 }}\n"
        ),
        "",
    );
    let weir = Weir::start(&yaml);
    let round_trip = |c: &mut TcpStream, text: &[u8]| -> bool {
        let mut buf = vec![0u8; text.len()];
        c.write_all(text).is_ok() && c.read_exact(&mut buf).is_ok() && buf == text
    };
    // Traffic keeps a connection open past the idle time; silence closes it.
    let mut c = TcpStream::connect(weir.addrs["idle"]).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..3 {
        assert!(round_trip(&mut c, b"still here"));
        std::thread::sleep(Duration::from_millis(600));
    }
    let start = Instant::now();
    let mut buf = [0u8; 16];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_millis(1800),
        "closed after {took:?} of silence (plus 600 ms before)"
    );
    // Two connections at most through the capped service: a third is closed at once.
    let mut first = TcpStream::connect(weir.addrs["capped"]).unwrap();
    let mut second = TcpStream::connect(weir.addrs["capped"]).unwrap();
    for c in [&mut first, &mut second] {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(round_trip(c, b"in"));
    }
    let mut third = TcpStream::connect(weir.addrs["capped"]).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(!round_trip(&mut third, b"over the cap"));
    drop(first);
    std::thread::sleep(Duration::from_millis(200));
    let mut fourth = TcpStream::connect(weir.addrs["capped"]).unwrap();
    fourth
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(round_trip(&mut fourth, b"room again"));
    assert!(round_trip(&mut second, b"second still fine"));
}
