//! HTTP/3 from clients on the real binary, with Python's aioquic (PyPI) as the client
//! (`h3_client.py`) and Debian's ngtcp2 client: requests run the ordinary lifecycle (respond,
//! proxy to an HTTP/1.1 upstream with bodies both ways, the cache, static files, trailers, gRPC
//! through an `h2c` service),
//! `max_concurrent_streams` is announced and many streams share one connection, a header
//! block over 32 KiB is answered 431, a stream reset mid-body leaves the worker serving, a
//! reload keeps a live connection, a stop lets a stream finish, and HTTP/1.1 and HTTP/2
//! answers of the entrypoint carry `Alt-Svc` (those of other entrypoints do not). The abuse
//! limits, with `h3_abuse.py`: a rapid-reset flood closes its connection, a connection flood
//! gets Retry packets, and the worker serves other clients meanwhile. After a binary upgrade
//! the new process answers HTTP/3 on the same port.

mod common;
use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The aioquic client's Python (a venv under /var/cache/weir, made once).
fn aioquic_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| venv_with("venv-aioquic", &["aioquic==1.2.0"]))
        .clone()
}

fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3_client.py")
}

/// A TLS entrypoint `web` with `http3` (its flow-mapping keys after `enabled: true`), a plain
/// entrypoint `plain`, and `routes`; the certificate is for `localhost`.
struct Site {
    dir: PathBuf,
    cert: CertFiles,
}

impl Site {
    fn new(tag: &str) -> Site {
        let dir = temp_dir(tag);
        let cert = make_cert(&dir, "site", &["localhost"], false);
        Site { dir, cert }
    }

    fn config(&self, http3_extra: &str, server_extra: &str, routes: &str) -> String {
        format!(
            "server: {{ workers: 1{server_extra} }}\n\
             entrypoints:\n  web:\n    address: \"127.0.0.1:0\"\n    \
             tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }}\n    \
             http3: {{ enabled: true{http3_extra} }}\n  \
             plain: {{ address: \"127.0.0.1:0\" }}\n\
             routers:\n  ping: {{ rule: \"Path(`/ping`)\", priority: 100, respond: {{ status: 200, body: pong }} }}\n{routes}",
            self.cert.cert.display(),
            self.cert.key.display()
        )
    }

    /// The aioquic client's plan for `groups` of requests on one connection to `port`.
    fn plan(&self, port: u16, groups: Value) -> Value {
        json!({
            "port": port,
            "server_name": "localhost",
            "ca": self.cert.cert,
            "groups": groups,
        })
    }

    /// Runs the aioquic client with `groups` of requests on one connection to `port`.
    fn h3(&self, port: u16, groups: Value) -> Value {
        finished(spawn(&self.plan(port, groups)))
    }
}

/// Starts the aioquic client on `plan`.
fn spawn(plan: &Value) -> std::process::Child {
    spawn_script(&client_script(), plan)
}

/// Starts the aioquic script `script` on `plan`.
fn spawn_script(script: &Path, plan: &Value) -> std::process::Child {
    Command::new(aioquic_python())
        .arg(script)
        .arg(plan.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What the client printed; it must succeed.
fn finished(client: std::process::Child) -> Value {
    let out = client.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "h3_client.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "h3_client.py printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Routes sending every path but `/ping` to `upstream`.
fn proxied_to(upstream: &Upstream) -> String {
    format!(
        "  api: {{ rule: \"PathPrefix(`/`)\", service: up }}\n\
         services:\n  up: {{ servers: [{{ url: \"{}\" }}] }}\n",
        upstream.url()
    )
}

/// `n` bytes of the test upstream's `/big/N` pattern.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

/// The MD5 digest of `data` in hex, as the client reports a body's.
fn md5_hex(data: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn requests_run_the_lifecycle_over_http3() {
    let upstream = Upstream::start("up");
    let site = Site::new("h3-lifecycle");
    let log = site.dir.join("access.log");
    let weir = Weir::start(&site.config(
        "",
        &format!(
            ", access_log: {{ enabled: true, format: json, path: \"{}\" }}",
            log.display()
        ),
        &proxied_to(&upstream),
    ));
    let port = weir.addr().port();
    let big = 10 << 20;
    let out = site.h3(
        port,
        json!([[
            {"path": "/ping"},
            {"path": "/echo?q=1", "headers": [["cookie", "a=1"], ["x-mixed-case", "v"]]},
            {"method": "POST", "path": "/post", "body_size": 1_000_000},
            {"method": "POST", "path": "/post-length", "body_size": 70_000,
             "headers": [["content-length", "70000"]]},
            {"path": format!("/big/{big}")},
            {"path": "/trailers", "headers": [["te", "trailers"]]},
        ]]),
    );
    let answers = &out["groups"][0];
    assert_eq!(answers[0]["status"], 200, "{out}");
    assert_eq!(answers[0]["body_text"], "pong");
    // No Alt-Svc on an HTTP/3 answer: the client is there already.
    assert!(answers[0]["headers"].get("alt-svc").is_none(), "{out}");

    let echoed: Value = serde_json::from_str(answers[1]["body_text"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["target"], "/echo?q=1");
    assert_eq!(
        echoed_header(&echoed, "host").unwrap(),
        format!("localhost:{port}")
    );
    assert_eq!(echoed_header(&echoed, "cookie").unwrap(), "a=1");
    assert_eq!(
        echoed_header(&echoed, "x-forwarded-proto").unwrap(),
        "https"
    );

    // Request bodies reach the upstream whole: without a length (chunked to it) and with one.
    for (answer, size, framing) in [
        (&answers[2], 1_000_000, "transfer-encoding"),
        (&answers[3], 70_000, "content-length"),
    ] {
        assert_eq!(answer["status"], 200, "{out}");
        let echoed: Value = serde_json::from_str(answer["body_text"].as_str().unwrap()).unwrap();
        assert_eq!(
            echoed["body"].as_str().unwrap().as_bytes(),
            &pattern(size)[..]
        );
        assert!(
            echoed_header(&echoed, framing).is_some(),
            "{framing}: {echoed}"
        );
    }

    // A 10 MB download, byte for byte.
    assert_eq!(answers[4]["status"], 200);
    assert_eq!(answers[4]["body_len"], big);
    assert_eq!(answers[4]["body_md5"], md5_hex(&pattern(big)));

    // An HTTP/1.1 upstream's chunked trailers end the HTTP/3 stream as its trailers.
    assert_eq!(answers[5]["body_text"], "payload", "{out}");
    assert_eq!(answers[5]["trailers"]["grpc-status"], "0", "{out}");
    assert_eq!(answers[5]["trailers"]["grpc-message"], "all-good", "{out}");

    // The access log says h3, with TLS 1.3 and the name asked for.
    weir.signal("TERM");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 6 || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let ping: Value = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["path"] == "/ping")
        .unwrap_or_else(|| panic!("no line for /ping: {lines}"));
    assert_eq!(ping["protocol"], "h3", "{ping}");
    assert_eq!(ping["tls"]["version"], "TLSv1.3", "{ping}");
    assert_eq!(ping["tls"]["sni"], "localhost", "{ping}");
}

#[test]
fn many_streams_share_one_connection_under_the_stream_limit() {
    let upstream = Upstream::start("up");
    let site = Site::new("h3-streams");
    let weir =
        Weir::start(&site.config(", max_concurrent_streams: 10", "", &proxied_to(&upstream)));
    let requests: Vec<Value> = (0..60).map(|_| json!({"path": "/slow/50"})).collect();
    let out = site.h3(weir.addr().port(), json!([requests]));
    // The limit is QUIC's stream credit: the client may not open more, and waits for credit.
    assert_eq!(out["max_streams_bidi"], 10, "{out}");
    let answers = out["groups"][0].as_array().unwrap();
    assert_eq!(answers.len(), 60);
    assert!(answers.iter().all(|a| a["status"] == 200), "{out}");
    assert_eq!(
        out["closed"],
        Value::Null,
        "the connection stayed up: {out}"
    );
    assert_eq!(upstream.request_count(), 60);
}

#[test]
fn cached_and_static_answers() {
    let origin = Nginx::with_location(
        "location /fresh { add_header cache-control \"max-age=60\"; return 200 \"id=$request_id\\n\"; }",
    );
    let site = Site::new("h3-cache");
    let root = site.dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    let file = pattern(300_000);
    std::fs::write(root.join("file.txt"), &file).unwrap();
    std::fs::write(root.join("small.txt"), "hello, static\n").unwrap();
    let weir = Weir::start(&site.config(
        "",
        "",
        &format!(
            "  files: {{ rule: \"PathPrefix(`/static`)\", static: {{ root: \"{}\" }}, middlewares: [strip] }}\n  \
             cached: {{ rule: \"PathPrefix(`/`)\", service: origin, cache: main }}\n\
             middlewares:\n  strip: {{ strip_prefix: [/static] }}\n\
             caches:\n  main: {{ memory: 16MiB }}\n\
             services:\n  origin: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
            root.display(),
            origin.addr
        ),
    ));
    let out = site.h3(
        weir.addr().port(),
        json!([
            [{"path": "/fresh"}],
            [{"path": "/fresh"}, {"path": "/static/small.txt"}, {"path": "/static/file.txt"}]
        ]),
    );
    let first = &out["groups"][0][0];
    let again = &out["groups"][1][0];
    assert_eq!(first["status"], 200, "{out}");
    assert!(
        again["headers"]["cache-status"]
            .as_str()
            .unwrap_or("")
            .starts_with("weir; hit"),
        "{out}"
    );
    assert_eq!(
        again["body_text"], first["body_text"],
        "served from the store"
    );
    let small = &out["groups"][1][1];
    assert_eq!(small["status"], 200, "{out}");
    assert_eq!(small["body_text"], "hello, static\n");
    let large = &out["groups"][1][2];
    assert_eq!(large["body_len"], file.len());
    assert_eq!(large["body_md5"], md5_hex(&file));
}

#[test]
fn alt_svc_is_on_http1_and_http2_answers_of_the_entrypoint_only() {
    let site = Site::new("h3-alt-svc");
    let weir = Weir::start(&site.config("", "", ""));
    let port = weir.addr().port();
    let url = format!("https://localhost:{port}/ping");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let ca = site.cert.cert.display().to_string();
    let expected = format!("alt-svc: h3=\":{port}\"; ma=86400");
    for version in ["--http1.1", "--http2"] {
        let head = String::from_utf8_lossy(&curl_ok(&[
            version,
            "--cacert",
            &ca,
            "--resolve",
            &resolve,
            "-D",
            "-",
            "-o",
            "/dev/null",
            &url,
        ]))
        .to_lowercase();
        assert!(head.contains(&expected), "{version}: {head}");
    }
    // The UDP port is the TCP port: the client reaches it there.
    let out = site.h3(port, json!([[{"path": "/ping"}]]));
    assert_eq!(out["groups"][0][0]["body_text"], "pong");
    // Another entrypoint's answers pay nothing and say nothing.
    let plain = weir.addrs["plain"];
    let resp = get(plain, "a", "/ping");
    assert_eq!(resp.text(), "pong");
    assert!(resp.header("alt-svc").is_none(), "{:?}", resp.headers);

    // `advertise: false`: HTTP/3 is served but not announced.
    let quiet = Site::new("h3-alt-svc-off");
    let weir = Weir::start(&quiet.config(", advertise: false", "", ""));
    let port = weir.addr().port();
    let head = String::from_utf8_lossy(&curl_ok(&[
        "--cacert",
        &quiet.cert.cert.display().to_string(),
        "--resolve",
        &format!("localhost:{port}:127.0.0.1"),
        "-D",
        "-",
        "-o",
        "/dev/null",
        &format!("https://localhost:{port}/ping"),
    ]))
    .to_lowercase();
    assert!(!head.contains("alt-svc"), "{head}");
    let out = quiet.h3(port, json!([[{"path": "/ping"}]]));
    assert_eq!(out["groups"][0][0]["body_text"], "pong");
}

#[test]
fn bad_input_is_refused_and_the_worker_goes_on() {
    let upstream = Upstream::start("up");
    let site = Site::new("h3-bad");
    let weir = Weir::start(&site.config("", "", &proxied_to(&upstream)));
    let port = weir.addr().port();
    // 40 KiB of fields, encoded by hand (aioquic's encoder refuses blocks that large).
    let huge: Vec<Value> = (0..10)
        .map(|i| json!([format!("x-huge-{i}"), "v".repeat(4000)]))
        .collect();
    let small: Vec<Value> = vec![json!(["x-small", "v"])];
    let out = site.h3(
        port,
        json!([
            [{"path": "/echo", "headers": huge, "literal_headers": true},
             {"path": "/ping", "headers": small, "literal_headers": true}],
            // The request body reset after 1000 bytes; a download the client stops reading.
            [{"method": "POST", "path": "/post", "body_size": 200_000, "reset_after": 1000},
             {"path": "/big/20000000", "stop_after": 100_000}],
            [{"path": "/ping"}, {"path": "/echo"}]
        ]),
    );
    // A header block over 32 KiB: 431 on its stream, and the connection goes on.
    assert_eq!(out["groups"][0][0]["status"], 431, "{out}");
    // The same hand-made encoding, under the limit: answered (so the 431 is the size's).
    assert_eq!(out["groups"][0][1]["body_text"], "pong", "{out}");
    assert_eq!(out["groups"][2][0]["body_text"], "pong", "{out}");
    assert_eq!(out["groups"][2][1]["status"], 200, "{out}");
    assert_eq!(out["closed"], Value::Null, "{out}");
    // A new connection is served too.
    let again = site.h3(port, json!([[{"path": "/ping"}]]));
    assert_eq!(again["groups"][0][0]["body_text"], "pong");
}

#[test]
fn a_reload_keeps_a_live_connection() {
    let site = Site::new("h3-reload");
    let answering = |body: &str| {
        site.config(
            "",
            "",
            &format!("  all: {{ rule: \"PathPrefix(`/`)\", respond: {{ body: {body} }} }}\n"),
        )
    };
    let weir = Weir::start(&answering("one"));
    let ready = site.dir.join("ready");
    let go = site.dir.join("go");
    let mut plan = site.plan(
        weir.addr().port(),
        json!([[{"path": "/a"}], [{"path": "/b"}]]),
    );
    plan["ready_file"] = json!(ready);
    plan["go_file"] = json!(go);
    let client = spawn(&plan);
    wait_until("the first answer", || ready.exists());
    std::fs::write(weir.config_path(), answering("two")).unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    std::fs::write(&go, "").unwrap();
    let out = finished(client);
    assert_eq!(out["groups"][0][0]["body_text"], "one", "{out}");
    assert_eq!(
        out["groups"][1][0]["body_text"], "two",
        "same connection, new config: {out}"
    );
    assert_eq!(out["closed"], Value::Null, "{out}");
    assert_eq!(out["goaway"], false, "a reload sends no GOAWAY: {out}");
}

#[test]
fn a_stop_lets_an_open_stream_finish_and_closes_idle_connections() {
    let upstream = Upstream::start("up");
    let site = Site::new("h3-stop");
    let weir = Weir::start(&site.config("", ", graceful_timeout: 20s", &proxied_to(&upstream)));
    let port = weir.addr().port();
    // A connection that has had its answer and stays idle (its second group never comes).
    let ready = site.dir.join("ready");
    let mut plan = site.plan(port, json!([[{"path": "/ping"}], [{"path": "/ping"}]]));
    plan["ready_file"] = json!(ready);
    plan["go_file"] = json!(site.dir.join("never"));
    let _idle = KilledOnDrop(spawn(&plan));
    wait_until("the idle client's first answer", || ready.exists());
    let busy = spawn(&site.plan(port, json!([[{"path": "/slow/1500"}]])));
    wait_until("the request at the upstream", || {
        upstream.request_count() == 1
    });
    weir.signal("TERM");
    let out = finished(busy);
    assert_eq!(out["groups"][0][0]["status"], 200, "{out}");
    assert_eq!(out["goaway"], true, "the stop announced with GOAWAY: {out}");
    // GOAWAY, then the close once no stream is open: the idle connection does not hold the
    // stop until `graceful_timeout` (20 s; this waits 10 s at most).
    weir.wait_for_line("stopped", 1);
}

/// A client that waits for ever, ended with the test (even a failing one).
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (20 s at most) until `done`, else fails naming `what`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `zero_rtt: true`: a client resuming its session sends its request as 0-RTT data and weir
/// takes it; without it, the early data is refused and the request goes after the handshake.
#[test]
fn zero_rtt_takes_early_data_only_when_enabled() {
    for (zero_rtt, accepted) in [(true, true), (false, false)] {
        let site = Site::new("h3-0rtt");
        let weir = Weir::start(&site.config(&format!(", zero_rtt: {zero_rtt}"), "", ""));
        let mut plan = site.plan(weir.addr().port(), json!([[{"path": "/ping"}]]));
        plan["resume"] = json!([{"path": "/ping"}]);
        let out = finished(spawn(&plan));
        let resumed = &out["resumed"];
        assert_eq!(resumed["session_resumed"], true, "{out}");
        assert_eq!(
            resumed["early_data_accepted"], accepted,
            "zero_rtt {zero_rtt}: {out}"
        );
        assert_eq!(resumed["results"][0]["body_text"], "pong", "{out}");
    }
}

/// A fixed port whose UDP side is taken: weir does not start, and says which socket failed.
#[test]
fn a_taken_udp_port_is_a_start_error() {
    let site = Site::new("h3-taken");
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let config = site
        .config("", "", "")
        .replacen("127.0.0.1:0", &format!("127.0.0.1:{port}"), 1);
    let path = site.dir.join("taken.yaml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(weir_bin())
        .args(["run", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}/udp for HTTP/3")),
        "{stderr}"
    );
}

/// A gRPC message as the wire carries it (uncompressed, a 4-byte length), in hex.
fn grpc_message_hex(payload: &[u8]) -> String {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    framed.extend_from_slice(payload);
    framed.iter().map(|b| format!("{b:02x}")).collect()
}

/// gRPC calls over HTTP/3 to the `grpcio` server behind an `h2c` service: a unary answer's
/// trailers reach the HTTP/3 client as trailers, a refusal's trailers-only head as its head,
/// and a client stream's messages reach the server.
#[test]
fn grpc_over_http3_to_an_h2c_service_keeps_its_trailers() {
    let server = GrpcServer::start();
    let site = Site::new("h3-grpc");
    let weir = Weir::start(&site.config(
        "",
        "",
        &format!(
            "  grpc: {{ rule: \"PathPrefix(`/weir.Test/`)\", service: grpc }}\n\
             services:\n  grpc: {{ protocol: h2c, servers: [{{ url: \"http://127.0.0.1:{}\" }}] }}\n",
            server.port
        ),
    ));
    let call = |payload: &[u8]| {
        json!({"method": "POST", "path": "/weir.Test/Unary", "body_hex": grpc_message_hex(payload),
               "headers": [["content-type", "application/grpc"], ["te", "trailers"]]})
    };
    // A client stream: three messages in the body, pumped to the server as they arrive.
    let messages: String = [&b"one"[..], b"two", &[b'x'; 20_000]]
        .iter()
        .map(|m| grpc_message_hex(m))
        .collect();
    let streamed = json!({"method": "POST", "path": "/weir.Test/ClientStream", "body_hex": messages,
        "headers": [["content-type", "application/grpc"], ["te", "trailers"]]});
    let out = site.h3(
        weir.addr().port(),
        json!([[call(b"hello"), call(b"fail"), streamed]]),
    );
    let ok = &out["groups"][0][0];
    assert_eq!(ok["status"], 200, "{out}");
    assert_eq!(ok["headers"]["content-type"], "application/grpc", "{out}");
    assert!(
        ok["body_text"]
            .as_str()
            .unwrap()
            .ends_with("echo:hello|127.0.0.1"),
        "{out}"
    );
    assert_eq!(ok["trailers"]["grpc-status"], "0", "{out}");
    // A refusal with no message is gRPC's trailers-only answer: one HEADERS that ends the
    // stream, as the server sent it.
    let failed = &out["groups"][0][1];
    assert_eq!(failed["body_len"], 0, "{out}");
    assert_eq!(failed["headers"]["grpc-status"], "3", "{out}");
    assert_eq!(
        failed["headers"]["grpc-message"], "bad request: fail",
        "{out}"
    );
    assert_eq!(failed["headers"]["x-detail"], "on purpose", "{out}");
    let streamed = &out["groups"][0][2];
    assert!(
        streamed["body_text"]
            .as_str()
            .unwrap()
            .ends_with("3 messages, 20006 bytes"),
        "{out}"
    );
    assert_eq!(streamed["trailers"]["grpc-status"], "0", "{out}");
}

/// Debian's ngtcp2 example client (`gtlsclient` of ngtcp2-client, HTTP/3 by nghttp3) fetches
/// over QUIC.
#[test]
fn ngtcp2_client_fetches_over_http3() {
    let site = Site::new("h3-ngtcp2");
    let weir = Weir::start(&site.config("", "", ""));
    let port = weir.addr().port().to_string();
    let out = Command::new("gtlsclient")
        // The example client does not verify certificates; it names the one it wants.
        .args(["--exit-on-all-streams-close", "--quiet", "--timeout=10s"])
        .arg("--sni=localhost")
        .arg(format!("--download={}", site.dir.display()))
        .args(["127.0.0.1", &port])
        .arg(format!("https://localhost:{port}/ping"))
        .output()
        .expect("gtlsclient (Debian's ngtcp2-client)");
    assert!(
        out.status.success(),
        "gtlsclient: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(site.dir.join("ping")).unwrap(),
        "pong"
    );
}

/// Runs `h3_abuse.py` in `mode` against `port`, with `more` keys in its plan.
fn abuse(site: &Site, port: u16, mode: &str, more: Value) -> Value {
    let mut plan = site.plan(port, json!([]));
    plan["mode"] = json!(mode);
    for (key, value) in more.as_object().into_iter().flatten() {
        plan[key] = value.clone();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3_abuse.py");
    finished(spawn_script(&script, &plan))
}

/// H3_EXCESSIVE_LOAD (RFC 9114, section 8.1).
const H3_EXCESSIVE_LOAD: u64 = 0x107;

/// Streams reset right after their HEADERS (CVE-2023-44487's rapid reset, over QUIC): past
/// 64 of them, outnumbering the answered ones, the connection is closed with
/// H3_EXCESSIVE_LOAD; fewer leave it serving; and the worker serves other connections.
#[test]
fn a_rapid_reset_flood_closes_its_connection_only() {
    let site = Site::new("h3-resets");
    let admin = ", admin: { address: \"127.0.0.1:0\" }";
    let weir = Weir::start(&site.config("", admin, ""));
    let port = weir.addr().port();
    let few = abuse(&site, port, "resets", json!({"resets": 40}));
    assert_eq!(few["closed"], Value::Null, "{few}");
    assert_eq!(few["ping"], "pong", "{few}");
    let flood = abuse(&site, port, "resets", json!({"resets": 300}));
    assert_eq!(flood["closed"], H3_EXCESSIVE_LOAD, "{flood}");
    assert_eq!(flood["ping"], Value::Null, "{flood}");
    let other = site.h3(port, json!([[{"path": "/ping"}]]));
    assert_eq!(other["groups"][0][0]["body_text"], "pong", "{other}");
    assert_eq!(abuse_count(&weir, "rapid_reset"), 1);
}

/// `weir_abuse_total` of entrypoint `web` for `kind`.
fn abuse_count(weir: &Weir, kind: &str) -> u64 {
    let metrics = get(weir.addrs["@admin"], "a", "/metrics").text();
    let prefix = format!("weir_abuse_total{{entrypoint=\"web\",kind=\"{kind}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("{prefix}in {metrics}"))
        .parse()
        .unwrap()
}

/// `retry_above`: with that many handshakes in progress on the worker (here 4, from clients
/// that never finish theirs), a new client gets a Retry, comes back with its token and is
/// served; with fewer, it gets none (RFC 9000, section 8.1.2).
#[test]
fn a_connection_flood_gets_retry_packets() {
    let site = Site::new("h3-retry");
    let admin = ", admin: { address: \"127.0.0.1:0\" }";
    let weir = Weir::start(&site.config(", retry_above: 4", admin, ""));
    let port = weir.addr().port();
    let calm = abuse(&site, port, "flood", json!({"half_open": 0}));
    assert_eq!(calm["retried"], false, "{calm}");
    assert_eq!(calm["ping"], "pong", "{calm}");
    assert_eq!(abuse_count(&weir, "quic_retry"), 0);
    let flood = abuse(&site, port, "flood", json!({"half_open": 6}));
    assert_eq!(flood["retried"], true, "{flood}");
    assert_eq!(flood["ping"], "pong", "{flood}");
    assert!(abuse_count(&weir, "quic_retry") >= 1);
}

/// The process a binary upgrade started, ended with the test (even a failing one).
struct Upgraded(Option<u32>);

impl Drop for Upgraded {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }
}

/// A binary upgrade (`SIGUSR2`) hands the TCP sockets over; the new process binds QUIC sockets
/// of its own on the same port and answers HTTP/3 there once the old one has exited. (The old
/// process's QUIC connections are not kept: they get GOAWAY, as on a stop.)
#[test]
fn after_an_upgrade_the_new_process_answers_http3_on_the_port() {
    let site = Site::new("h3-upgrade");
    let pid_file = site.dir.join("weir.pid");
    let server = format!(
        ", graceful_timeout: 5s, pid_file: \"{}\"",
        pid_file.display()
    );
    let mut weir = Weir::start(&site.config("", &server, ""));
    let port = weir.addr().port();
    let before = site.h3(port, json!([[{"path": "/ping"}]]));
    assert_eq!(before["groups"][0][0]["body_text"], "pong", "{before}");
    let old_pid = weir.child.id();
    weir.signal("USR2");
    let mut new_pid = None;
    wait_until("the old process's exit", || {
        new_pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        weir.child.try_wait().ok().flatten().is_some()
    });
    let new_pid = new_pid.filter(|pid| *pid != old_pid);
    let _upgraded = Upgraded(new_pid);
    assert!(new_pid.is_some(), "{:#?}", weir.stderr());
    let after = site.h3(port, json!([[{"path": "/ping"}]]));
    assert_eq!(after["groups"][0][0]["body_text"], "pong", "{after}");
}

#[test]
fn a_lua_answer_that_flushes_streams_over_http3() {
    let site = Site::new("h3-lua-flush");
    let routes = "  flush:\n    rule: \"Path(`/flush`)\"\n    lua: { content: \"ngx.say('a') ngx.say(ngx.flush(true)) ngx.sleep(0.01) ngx.say('b') ngx.flush(true) ngx.say('c')\" }\n";
    let weir = Weir::start(&site.config("", "", routes));
    let out = site.h3(weir.addr().port(), json!([[{"path": "/flush"}]]));
    let answer = &out["groups"][0][0];
    assert_eq!(answer["status"], 200, "{out}");
    // Flushed twice, then the rest at the script's end: all of it, in order.
    assert_eq!(answer["body_text"], "a\n1\nb\nc\n", "{out}");
}
