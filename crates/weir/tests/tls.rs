//! TLS termination on the real binary, with certificates made here (rcgen) and real clients:
//! curl and Python's `ssl` module. SNI picks between certificates, the default covers the rest,
//! sessions resume, HTTPS reaches upstreams as `X-Forwarded-Proto: https`, bad clients are
//! closed cleanly, a silent WebSocket tunnel over HTTPS is closed after its idle timeout, and
//! `weir check` refuses unusable certificate files with their position.

mod common;
use common::*;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn tls_config(certs: &[&CertFiles], tls_extra: &str, routes: &str) -> String {
    let list: Vec<String> = certs
        .iter()
        .map(|c| {
            format!(
                "{{ cert: \"{}\", key: \"{}\" }}",
                c.cert.display(),
                c.key.display()
            )
        })
        .collect();
    format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  websecure:\n    address: \"127.0.0.1:0\"\n    tls:\n      certificates: [{}]\n{tls_extra}routers:\n{routes}",
        list.join(", ")
    )
}

const OK_ROUTE: &str = "  all:\n    rule: \"PathPrefix(`/`)\"\n    respond: { body: ok }\n";

/// Runs Python's `ssl` client against weir; the script prints one line of results.
fn python(script: &str, args: &[String]) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    String::from_utf8_lossy(&common::python(script, &args))
        .trim()
        .to_string()
}

/// Connects with Python's ssl module: argv = port, cafile, server_hostname or "-", then
/// "GET path" requests twice on two connections, the second resuming the first's session.
const PY_CLIENT: &str = r#"
import socket, ssl, sys
port, cafile, name = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=cafile)
ctx.check_hostname = False
ctx.set_alpn_protocols(["http/1.1"])
def fetch(session=None):
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    s = ctx.wrap_socket(raw, server_hostname=None if name == "-" else name, session=session)
    version, alpn = s.version(), s.selected_alpn_protocol()
    s.sendall(b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    info = (version, alpn, s.session_reused, s.session)
    s.close()
    return data, info
data, (version, alpn, _, session) = fetch()
_, (_, _, reused, _) = fetch(session)
status = data.split(b" ", 2)[1].decode()
body = data.split(b"\r\n\r\n", 1)[1].decode(errors="replace")
print(status, version, alpn, reused, body.replace("\n", " "))
"#;

#[test]
fn sni_picks_the_certificate_and_the_default_covers_the_rest() {
    let dir = temp_dir("tls-sni");
    let a = make_cert(&dir, "a", &["a.test"], false);
    let b = make_cert(&dir, "b", &["*.b.test"], false);
    let weir = Weir::start(&tls_config(&[&a, &b], "", OK_ROUTE));
    let port = weir.addrs["websecure"].port();
    // Exact name: certificate A, which curl verifies against A alone.
    assert_eq!(
        curl_https(port, "a.test", &a.cert),
        (true, "ok".to_string())
    );
    assert!(
        !curl_https(port, "a.test", &b.cert).0,
        "served B for a.test"
    );
    // Wildcard: B for any one label under b.test.
    assert_eq!(
        curl_https(port, "x.b.test", &b.cert),
        (true, "ok".to_string())
    );
    assert_eq!(
        curl_https(port, "X.B.TEST", &b.cert),
        (true, "ok".to_string())
    );
    // No SNI, or a name no certificate has: the default (first) certificate.
    let args =
        |ca: &Path, name: &str| vec![port.to_string(), ca.display().to_string(), name.to_string()];
    let line = python(PY_CLIENT, &args(&a.cert, "-"));
    assert!(line.starts_with("200 "), "{line}");
    let line = python(PY_CLIENT, &args(&a.cert, "other.test"));
    assert!(line.starts_with("200 "), "{line}");
    drop(weir);

    // `default_certificate` replaces the first certificate as the default.
    let extra = format!(
        "      default_certificate: {{ cert: \"{}\", key: \"{}\" }}\n",
        b.cert.display(),
        b.key.display()
    );
    let weir = Weir::start(&tls_config(&[&a, &b], &extra, OK_ROUTE));
    let port = weir.addrs["websecure"].port();
    let args =
        |ca: &Path, name: &str| vec![port.to_string(), ca.display().to_string(), name.to_string()];
    let line = python(PY_CLIENT, &args(&b.cert, "-"));
    assert!(line.starts_with("200 "), "{line}");
    assert_eq!(
        curl_https(port, "a.test", &a.cert),
        (true, "ok".to_string())
    );
}

#[test]
fn https_reaches_upstreams_and_sessions_resume() {
    let dir = temp_dir("tls-proxy");
    let site = make_cert(&dir, "site", &["site.test"], false);
    let up = Upstream::start("a");
    let routes = format!(
        "  insecure:\n    rule: \"PathPrefix(`/to-https`)\"\n    middlewares: [https]\n    respond: {{ body: unreachable }}\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: app\n\
         services:\n  app:\n    servers: [{{ url: \"{}\" }}]\n\
         middlewares:\n  https: {{ redirect_scheme: {{ scheme: https }} }}\n",
        up.url()
    );
    let weir = Weir::start(&tls_config(&[&site], "", &routes));
    let port = weir.addrs["websecure"].port();
    let line = python(
        PY_CLIENT,
        &[
            port.to_string(),
            site.cert.display().to_string(),
            "site.test".into(),
        ],
    );
    // status, TLS version, ALPN, resumed, body
    let mut parts = line.splitn(5, ' ');
    assert_eq!(parts.next(), Some("200"), "{line}");
    assert_eq!(parts.next(), Some("TLSv1.3"), "{line}");
    assert_eq!(parts.next(), Some("http/1.1"), "{line}");
    assert_eq!(parts.next(), Some("True"), "session not resumed: {line}");
    let json: serde_json::Value = serde_json::from_str(parts.next().unwrap()).unwrap();
    assert_eq!(echoed_header(&json, "x-forwarded-proto").unwrap(), "https");
    // redirect_scheme to https does nothing on a request that already came over HTTPS.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&site.cert)
        .arg("--resolve")
        .arg(format!("site.test:{port}:127.0.0.1"))
        .arg(format!("https://site.test:{port}/to-https"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "unreachable");
}

/// A WebSocket over HTTPS: argv = port, cafile. Upgrades `/ws`, has "ping" echoed, then says
/// nothing and prints the status, the echo, and the seconds until weir closed the tunnel.
const PY_SILENT_WEBSOCKET: &str = r#"
import socket, ssl, sys, time
port, cafile = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=cafile)
ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="site.test")
s.sendall(b"GET /ws HTTP/1.1\r\nHost: site.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(4096)
s.sendall(b"ping")
echoed = b""
while len(echoed) < 4:
    echoed += s.recv(4 - len(echoed))
start = time.time()
try:
    rest = s.recv(4096)
except (ssl.SSLError, OSError):
    rest = b""
print(head.split(b" ")[1].decode(), echoed.decode(), len(rest), round(time.time() - start, 1))
"#;

#[test]
fn a_silent_websocket_tunnel_over_https_is_closed_after_the_idle_timeout() {
    let dir = temp_dir("tls-ws");
    let site = make_cert(&dir, "site", &["site.test"], false);
    let up = Upstream::start("ws");
    let routes = format!(
        "  all:\n    rule: \"PathPrefix(`/`)\"\n    service: app\n\
         services:\n  app:\n    servers: [{{ url: \"{}\" }}]\n",
        up.url()
    );
    let yaml = tls_config(&[&site], "", &routes).replace(
        "server: { workers: 1 }",
        "server: { workers: 1, client_idle_timeout: 1s }",
    );
    let weir = Weir::start(&yaml);
    let port = weir.addrs["websecure"].port();
    let line = python(
        PY_SILENT_WEBSOCKET,
        &[port.to_string(), site.cert.display().to_string()],
    );
    let parts: Vec<&str> = line.split(' ').collect();
    assert_eq!(parts[..3], ["101", "ping", "0"], "{line}");
    let waited: f64 = parts[3].parse().unwrap();
    assert!((0.9..2.5).contains(&waited), "closed after {waited} s");
}

#[test]
fn bad_clients_are_closed_cleanly() {
    let dir = temp_dir("tls-bad");
    let site = make_cert(&dir, "site", &["site.test"], false);
    let config = tls_config(
        &[&site],
        "      min_version: \"1.3\"\n      handshake_timeout: 1s\n",
        OK_ROUTE,
    )
    .replace(
        "server: { workers: 1 }",
        "server: { workers: 1, admin: { address: \"127.0.0.1:0\" } }",
    );
    let weir = Weir::start(&config);
    let addr = weir.addrs["websecure"];
    // Plain HTTP to the TLS port: a readable 400.
    let r = request(addr, "GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 400);
    assert!(r.text().contains("HTTPS"), "{}", r.text());
    // A client that never completes the handshake is closed after handshake_timeout.
    let mut silent = std::net::TcpStream::connect(addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    silent.write_all(&[0x16, 0x03, 0x01]).unwrap();
    let started = Instant::now();
    let mut byte = [0u8; 1];
    assert!(matches!(silent.read(&mut byte), Ok(0) | Err(_)));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    // A handshake record of garbage is refused.
    let mut junk = std::net::TcpStream::connect(addr).unwrap();
    junk.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    junk.write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5])
        .unwrap();
    let mut rest = Vec::new();
    let _ = junk.read_to_end(&mut rest);
    assert!(!String::from_utf8_lossy(&rest).contains("HTTP/1.1"));
    // A client limited to TLS 1.2 finds no common version with min_version 1.3.
    let script = r#"
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
ctx.check_hostname = False
ctx.maximum_version = ssl.TLSVersion.TLSv1_2
try:
    ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10), server_hostname="site.test")
    print("connected")
except ssl.SSLError as e:
    print("refused", e.reason)
"#;
    let line = python(
        script,
        &[addr.port().to_string(), site.cert.display().to_string()],
    );
    assert!(line.starts_with("refused"), "{line}");
    // The worker still serves everyone else.
    assert_eq!(
        curl_https(addr.port(), "site.test", &site.cert),
        (true, "ok".to_string())
    );
    // Each failure was counted, by reason (the admin listener's /metrics). A worker counts a
    // failed handshake just after the socket closes, so the client may look a moment early.
    let failures = "weir_tls_handshake_failures_total{entrypoint=\"websecure\",reason=";
    let counted_errors = format!("{failures}\"error\"}} 2");
    let asked_since = Instant::now();
    let metrics = loop {
        let metrics = get(weir.addrs["@admin"], "admin", "/metrics");
        if metrics.text().contains(&counted_errors)
            || asked_since.elapsed() > Duration::from_secs(2)
        {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")));
    let text = metrics.text();
    let value = |series: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert_eq!(value(&format!("{failures}\"plain_http\"}}")), 1);
    assert_eq!(value(&format!("{failures}\"timeout\"}}")), 1);
    assert_eq!(value(&format!("{failures}\"error\"}}")), 2);
    assert_eq!(
        value("weir_responses_total{entrypoint=\"websecure\",code=\"2xx\"}"),
        1
    );
    assert!(value("weir_connections_total{entrypoint=\"websecure\"}") >= 5);
    assert_eq!(get(weir.addrs["@admin"], "admin", "/nope").status, 404);
}

#[test]
fn check_refuses_unusable_certificate_files() {
    let dir = temp_dir("tls-check");
    let good = make_cert(&dir, "good", &["good.test"], false);
    let other = make_cert(&dir, "other", &["other.test"], false);
    let expired = make_cert(&dir, "expired", &["old.test"], true);
    let cases: [(String, String, &str); 3] = [
        (
            good.cert.display().to_string(),
            dir.join("missing.key").display().to_string(),
            "cannot read private key file",
        ),
        (
            good.cert.display().to_string(),
            other.key.display().to_string(),
            "does not match the certificate",
        ),
        (
            expired.cert.display().to_string(),
            expired.key.display().to_string(),
            "expired on",
        ),
    ];
    for (cert, key, expected) in cases {
        let path = dir.join("weir.yaml");
        std::fs::write(
            &path,
            format!("entrypoints:\n  websecure:\n    address: \"127.0.0.1:0\"\n    tls:\n      certificates:\n        - {{ cert: \"{cert}\", key: \"{key}\" }}\nrouters:\n{OK_ROUTE}"),
        )
        .unwrap();
        let out = weir_check(&path);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{}:6:11: ", path.display())) && err.contains(expected),
            "{err}"
        );
    }
    // Every unusable certificate is listed, one a line, then the count.
    let pair = |cert: &std::path::Path, key: &std::path::Path| {
        format!(
            "{{ cert: \"{}\", key: \"{}\" }}",
            cert.display(),
            key.display()
        )
    };
    let err = weir_check_refuses(
        "tls-check-many",
        &format!(
            "entrypoints:\n  a:\n    address: \"127.0.0.1:0\"\n    tls:\n      certificates:\n        - {}\n        - {}\n  b:\n    address: \"127.0.0.1:0\"\n    tls:\n      certificates:\n        - {}\n        - {}\nrouters:\n{OK_ROUTE}",
            pair(&expired.cert, &expired.key),
            pair(&good.cert, &good.key),
            pair(&good.cert, &other.key),
            pair(&good.cert, &dir.join("missing.key")),
        ),
    );
    let (lines, p) = check_error_lines(&err);
    assert_eq!(lines.len(), 4, "{err}");
    assert!(
        lines[0].starts_with(&format!("{p}:6:11: ")) && lines[0].contains("expired on"),
        "{err}"
    );
    assert!(
        lines[1].starts_with(&format!("{p}:12:11: ")) && lines[1].contains("does not match"),
        "{err}"
    );
    assert!(
        lines[2].starts_with(&format!("{p}:13:11: "))
            && lines[2].contains("cannot read private key file"),
        "{err}"
    );
    assert_eq!(lines[3], format!("{p}: 3 error(s)"));
    // Services' CA files and client certificates too, each service's.
    let err = weir_check_refuses(
        "tls-check-services",
        &format!(
            "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\nrouters:\n{OK_ROUTE}services:\n  a:\n    servers: [{{ url: \"https://127.0.0.1:1\" }}]\n    tls: {{ ca: \"{}\" }}\n  b:\n    servers: [{{ url: \"https://127.0.0.1:1\" }}]\n    tls: {{ certificate: {} }}\n",
            dir.join("missing-ca.pem").display(),
            pair(&expired.cert, &expired.key),
        ),
    );
    let (lines, p) = check_error_lines(&err);
    assert!(
        lines.len() == 3
            && lines[0].contains("cannot read CA file")
            && lines[1].contains("expired on")
            && lines[2] == format!("{p}: 2 error(s)"),
        "{err}"
    );
    // Relative paths resolve against the config file's folder.
    std::fs::copy(&good.cert, dir.join("rel.pem")).unwrap();
    std::fs::copy(&good.key, dir.join("rel.key")).unwrap();
    let path = dir.join("relative.yaml");
    std::fs::write(
        &path,
        format!("entrypoints:\n  websecure:\n    address: \"127.0.0.1:0\"\n    tls:\n      certificates: [{{ cert: rel.pem, key: rel.key }}]\nrouters:\n{OK_ROUTE}"),
    )
    .unwrap();
    let out = weir_check(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn https_service(nginx: &Nginx, tls: &str) -> String {
    format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: secure\n\
         services:\n  secure:\n    servers: [{{ url: \"https://127.0.0.1:{}\" }}]\n{tls}",
        nginx.addr.port()
    )
}

#[test]
fn https_upstreams_are_verified_and_kept_alive() {
    let dir = temp_dir("tls-upstream");
    let up_cert = make_cert(&dir, "up", &["up.internal", "127.0.0.1"], false);
    let stranger = make_cert(&dir, "stranger", &["stranger.test"], false);
    let nginx = Nginx::start_tls(&up_cert.cert, &up_cert.key, None);

    // Trusted through `ca`, verified against the URL's host (an IP in the certificate).
    let weir = Weir::start(&https_service(
        &nginx,
        &format!("    tls: {{ ca: \"{}\" }}\n", up_cert.cert.display()),
    ));
    let seen: Vec<String> = (0..5)
        .map(|_| {
            let r = get(weir.addr(), "t", "/");
            assert_eq!(r.status, 200, "{}", r.text());
            r.text()
        })
        .collect();
    // One TLS connection to nginx carried every request.
    assert!(seen.iter().all(|c| c == &seen[0]), "{seen:?}");
    drop(weir);

    // `server_name` changes the name verified (and sent as SNI).
    let weir = Weir::start(&https_service(
        &nginx,
        &format!(
            "    tls: {{ ca: \"{}\", server_name: up.internal }}\n",
            up_cert.cert.display()
        ),
    ));
    assert_eq!(get(weir.addr(), "t", "/").status, 200);
    drop(weir);

    // A CA that did not sign the upstream's certificate: 502, never the upstream's answer.
    let weir = Weir::start(&https_service(
        &nginx,
        &format!("    tls: {{ ca: \"{}\" }}\n", stranger.cert.display()),
    ));
    let r = get(weir.addr(), "t", "/");
    assert_eq!(r.status, 502, "{}", r.text());
    drop(weir);

    // The system roots do not know a self-signed certificate either.
    let weir = Weir::start(&https_service(&nginx, ""));
    assert_eq!(get(weir.addr(), "t", "/").status, 502);
    drop(weir);

    // Unless verification is switched off.
    let weir = Weir::start(&https_service(
        &nginx,
        "    tls: { insecure_skip_verify: true }\n",
    ));
    let r = get(weir.addr(), "t", "/");
    assert_eq!(r.status, 200);
    assert!(r.text().starts_with("conn="), "{}", r.text());
}

#[test]
fn a_client_certificate_is_presented_to_upstreams_that_require_one() {
    let dir = temp_dir("tls-client-cert");
    let up_cert = make_cert(&dir, "up", &["127.0.0.1"], false);
    let client = make_cert(&dir, "client", &["weir.client"], false);
    let nginx = Nginx::start_tls(&up_cert.cert, &up_cert.key, Some(&client.cert));
    let with_cert = format!(
        "    tls: {{ ca: \"{}\", certificate: {{ cert: \"{}\", key: \"{}\" }} }}\n",
        up_cert.cert.display(),
        client.cert.display(),
        client.key.display()
    );
    let weir = Weir::start(&https_service(&nginx, &with_cert));
    let r = get(weir.addr(), "t", "/");
    assert_eq!(r.status, 200, "{}", r.text());
    drop(weir);
    // Without it, nginx refuses the request (400 "No required SSL certificate was sent").
    let weir = Weir::start(&https_service(
        &nginx,
        &format!("    tls: {{ ca: \"{}\" }}\n", up_cert.cert.display()),
    ));
    assert_eq!(get(weir.addr(), "t", "/").status, 400);
}
