//! The access log's JSON fields (issue 42): query, protocol, entrypoint, user agent, referer,
//! request id, upstream status and time, tries, with `null` for what a request does not have;
//! request ids taken from the client or made, sent upstream and back; `access_log: false` on
//! a router and on an entrypoint.

mod common;
use common::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The log's lines once it holds `count` (or after 5 s).
fn log_lines(log: &std::path::Path, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        if lines.len() >= count || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn config(log: &std::path::Path, server_extra: &str, app: &str, retried: [&str; 2]) -> String {
    format!(
        "server:\n  workers: 1\n  access_log: {{ enabled: true, format: json, path: \"{}\" }}\n{server_extra}\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         routers:\n  app: {{ rule: \"PathPrefix(`/app`)\", service: app }}\n  \
         flaky: {{ rule: \"PathPrefix(`/flaky`)\", service: flaky }}\n  \
         dead: {{ rule: \"PathPrefix(`/dead`)\", service: dead }}\n  \
         hi: {{ rule: \"Path(`/hi`)\", respond: {{ body: hello }} }}\n\
         services:\n  app: {{ servers: [{{ url: \"{app}\" }}] }}\n  \
         flaky:\n    servers: [{{ url: \"{}\" }}, {{ url: \"{}\" }}]\n    retry: {{ attempts: 2, on: [503] }}\n  \
         dead: {{ servers: [{{ url: \"http://127.0.0.1:{}\" }}] }}\n",
        log.display(),
        retried[0],
        retried[1],
        free_port(),
    )
}

fn is_made_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

#[test]
fn json_fields_and_request_ids() {
    let app = Upstream::start("a");
    let unavailable = [Upstream::start("status-503"), Upstream::start("status-503")];
    let log = temp_dir("access-json").join("access.log");
    let ids = "  request_id: { enabled: true }\n";
    let weir = Weir::start(&config(
        &log,
        ids,
        &app.url(),
        [&unavailable[0].url(), &unavailable[1].url()],
    ));
    let addr = weir.addr();

    // 1. Proxied, with the client's id, user agent and referer.
    let r = request(
        addr,
        "GET /app/x?q=1&r=2 HTTP/1.1\r\nHost: log.test\r\nUser-Agent: tester/1\r\n\
         Referer: https://ref.example/\r\nX-Request-Id: client-id-1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-request-id"), Some("client-id-1"), "sent back");
    let echo = r.json();
    assert_eq!(
        echoed_header(&echo, "x-request-id").as_deref(),
        Some("client-id-1"),
        "sent upstream"
    );
    // 2. Answered by weir, nothing optional sent: a made id.
    let hi = get(addr, "log.test", "/hi");
    let made = hi.header("x-request-id").unwrap().to_string();
    assert!(is_made_id(&made), "{made}");
    // 3. A bad id (a space in it) is replaced, upstream and back alike.
    let r = request(
        addr,
        "GET /app/y HTTP/1.1\r\nHost: log.test\r\nX-Request-Id: not one\r\nConnection: close\r\n\r\n",
    );
    let replaced = r.header("x-request-id").unwrap().to_string();
    assert!(is_made_id(&replaced), "{replaced}");
    assert_eq!(
        echoed_header(&r.json(), "x-request-id"),
        Some(replaced.clone())
    );
    // 4. A 503 retried once on the other server: the server's status, two tries.
    assert_eq!(get(addr, "log.test", "/flaky").status, 503);
    // 5. A 502: no upstream status, one try.
    assert_eq!(get(addr, "log.test", "/dead").status, 502);
    // 6. HTTP/2.
    let url = format!("http://{addr}/hi");
    assert_eq!(curl_ok(&["-s", "--http2-prior-knowledge", &url]), b"hello");

    let lines = log_lines(&log, 6);
    assert_eq!(lines.len(), 6, "{lines:#?}");
    let [proxied, local, bad_id, retried, failed, h2] = &lines[..] else {
        unreachable!()
    };
    assert_eq!(proxied["path"], "/app/x");
    assert_eq!(proxied["query"], "q=1&r=2");
    assert_eq!(proxied["protocol"], "h1");
    assert_eq!(proxied["entrypoint"], "web");
    assert_eq!(proxied["router"], "app");
    assert_eq!(proxied["upstream"], app.addr.to_string());
    assert_eq!(proxied["user_agent"], "tester/1");
    assert_eq!(proxied["referer"], "https://ref.example/");
    assert_eq!(proxied["request_id"], "client-id-1");
    assert_eq!(proxied["upstream_status"], 200);
    assert_eq!(proxied["tries"], 1);
    let upstream_ms = proxied["upstream_ms"].as_f64().unwrap();
    assert!(
        upstream_ms > 0.0 && upstream_ms <= proxied["duration_ms"].as_f64().unwrap(),
        "{proxied}"
    );

    // Missing values are null, not "".
    for key in [
        "query",
        "user_agent",
        "referer",
        "upstream",
        "upstream_status",
        "upstream_ms",
        "tries",
    ] {
        assert!(local[key].is_null(), "{key}: {local}");
    }
    assert_eq!(local["router"], "hi");
    assert_eq!(local["request_id"], made.as_str());
    assert_eq!(bad_id["request_id"], replaced.as_str());

    assert_eq!(retried["status"], 503, "{retried}");
    assert_eq!(retried["upstream_status"], 503, "{retried}");
    assert_eq!(retried["tries"], 2);
    assert_eq!(unavailable[0].request_count(), 1);
    assert_eq!(unavailable[1].request_count(), 1);

    assert_eq!(failed["status"], 502);
    assert!(failed["upstream_status"].is_null(), "{failed}");
    assert_eq!(failed["tries"], 1);
    assert!(failed["upstream"].is_string(), "{failed}");

    assert_eq!(h2["protocol"], "h2");
    assert!(is_made_id(h2["request_id"].as_str().unwrap()), "{h2}");
}

/// Request ids are off by default: nothing added upstream or back, `null` in the log.
#[test]
fn request_ids_are_off_by_default() {
    let app = Upstream::start("a");
    let log = temp_dir("access-no-id").join("access.log");
    let weir = Weir::start(&config(&log, "", &app.url(), [&app.url(), &app.url()]));
    let r = get(weir.addr(), "log.test", "/app/z");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-request-id"), None);
    assert_eq!(echoed_header(&r.json(), "x-request-id"), None);
    let lines = log_lines(&log, 1);
    assert!(lines[0]["request_id"].is_null(), "{}", lines[0]);
}

/// `server.request_id.header` names another header.
#[test]
fn request_id_header_is_configurable() {
    let app = Upstream::start("a");
    let log = temp_dir("access-id-header").join("access.log");
    let ids = "  request_id: { enabled: true, header: X-Correlation-Id }\n";
    let weir = Weir::start(&config(&log, ids, &app.url(), [&app.url(), &app.url()]));
    let r = request(
        weir.addr(),
        "GET /app HTTP/1.1\r\nHost: t\r\nX-Correlation-Id: abc-123\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.header("x-correlation-id"), Some("abc-123"));
    assert_eq!(r.header("x-request-id"), None);
    assert_eq!(
        echoed_header(&r.json(), "x-correlation-id").as_deref(),
        Some("abc-123")
    );
    assert_eq!(log_lines(&log, 1)[0]["request_id"], "abc-123");
}

/// `access_log: false` on a router and on an entrypoint: their requests get no line.
#[test]
fn access_log_off_on_a_router_and_an_entrypoint() {
    let log = temp_dir("access-off").join("access.log");
    let weir = Weir::start(&format!(
        "server:\n  workers: 1\n  access_log: {{ enabled: true, path: \"{}\" }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n  \
         quiet: {{ address: \"127.0.0.1:0\", access_log: false }}\n\
         routers:\n  noisy: {{ rule: \"Path(`/noisy`)\", respond: {{ body: n }}, access_log: false }}\n  \
         normal: {{ rule: \"PathPrefix(`/`)\", priority: 1, respond: {{ body: ok }} }}\n",
        log.display()
    ));
    let quiet: SocketAddr = weir.addrs["quiet"];
    assert_eq!(get(weir.addr(), "t", "/noisy").text(), "n");
    assert_eq!(get(quiet, "t", "/normal").text(), "ok");
    assert_eq!(get(quiet, "t", "/noisy").text(), "n");
    assert_eq!(get(weir.addr(), "t", "/first-logged").text(), "ok");
    assert_eq!(get(weir.addr(), "t", "/second-logged").text(), "ok");
    let lines = log_lines(&log, 2);
    let paths: Vec<&str> = lines.iter().map(|l| l["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/first-logged", "/second-logged"]);
    // One more request, so a line written late would show before it.
    assert_eq!(get(weir.addr(), "t", "/third-logged").text(), "ok");
    let lines = log_lines(&log, 3);
    assert_eq!(lines.len(), 3, "{lines:#?}");
}

/// `tls`: the version and the SNI the client sent, over HTTP/1.1 and HTTP/2; `null` on a
/// plain connection.
#[test]
fn tls_version_and_sni() {
    let dir = temp_dir("access-tls");
    let log = dir.join("access.log");
    let cert = make_cert(&dir, "site", &["site.test"], false);
    let weir = Weir::start(&format!(
        "server:\n  workers: 1\n  access_log: {{ enabled: true, path: \"{}\" }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n  \
         websecure:\n    address: \"127.0.0.1:0\"\n    tls:\n      certificates: [{{ cert: \"{}\", key: \"{}\" }}]\n\
         routers:\n  hi: {{ rule: \"PathPrefix(`/`)\", respond: {{ body: hello }} }}\n",
        log.display(),
        cert.cert.display(),
        cert.key.display()
    ));
    let port = weir.addrs["websecure"].port();
    let url = format!("https://site.test:{port}/secure");
    let resolve = format!("site.test:{port}:127.0.0.1");
    let ca = cert.cert.to_str().unwrap();
    let common = ["-s", "--cacert", ca, "--resolve", &resolve];
    let h1 = [&common[..], &["--http1.1", "--tls-max", "1.2", &url]].concat();
    assert_eq!(curl_ok(&h1), b"hello");
    let h2 = [&common[..], &["--http2", "--tlsv1.3", &url]].concat();
    assert_eq!(curl_ok(&h2), b"hello");
    assert_eq!(get(weir.addr(), "t", "/plain").text(), "hello");
    let lines = log_lines(&log, 3);
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert_eq!(lines[0]["protocol"], "h1");
    assert_eq!(
        lines[0]["tls"],
        serde_json::json!({ "version": "TLSv1.2", "sni": "site.test" })
    );
    assert_eq!(lines[0]["entrypoint"], "websecure");
    assert_eq!(lines[1]["protocol"], "h2");
    assert_eq!(
        lines[1]["tls"],
        serde_json::json!({ "version": "TLSv1.3", "sni": "site.test" })
    );
    assert!(lines[2]["tls"].is_null(), "{}", lines[2]);
}

/// `cache`: what the route's cache did, from its `Cache-Status` (RFC 9211); `null` on a route
/// without a cache. The origin is weir itself, on an entrypoint whose lines are off.
#[test]
fn cache_outcome() {
    let log = temp_dir("access-cache").join("access.log");
    let origin = free_port();
    let weir = Weir::start(&format!(
        "server:\n  workers: 1\n  access_log: {{ enabled: true, path: \"{}\" }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n  \
         origin: {{ address: \"127.0.0.1:{origin}\", access_log: false }}\n\
         caches:\n  main: {{ memory: 16MiB }}\n\
         routers:\n  \
         cached: {{ entrypoints: [web], rule: \"PathPrefix(`/c`)\", service: origin, cache: main }}\n  \
         plain: {{ entrypoints: [web], rule: \"PathPrefix(`/p`)\", service: origin }}\n  \
         answer: {{ entrypoints: [origin], rule: \"PathPrefix(`/`)\", respond: {{ body: x, headers: {{ cache-control: max-age=60 }} }} }}\n\
         services:\n  origin: {{ servers: [{{ url: \"http://127.0.0.1:{origin}\" }}] }}\n",
        log.display()
    ));
    let first = get(weir.addr(), "t", "/c/1");
    assert!(
        first
            .header("cache-status")
            .unwrap()
            .contains("fwd=uri-miss"),
        "{:?}",
        first.header("cache-status")
    );
    let second = get(weir.addr(), "t", "/c/1");
    assert!(second.header("cache-status").unwrap().contains("; hit"));
    let refreshed = request(
        weir.addr(),
        "GET /c/1 HTTP/1.1\r\nHost: t\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
    );
    assert!(
        refreshed
            .header("cache-status")
            .unwrap()
            .contains("fwd=stale"),
        "{:?}",
        refreshed.header("cache-status")
    );
    assert_eq!(get(weir.addr(), "t", "/p").status, 200);
    let lines = log_lines(&log, 4);
    let outcomes: Vec<&Value> = lines.iter().map(|l| &l["cache"]).collect();
    assert_eq!(
        outcomes,
        [
            &Value::from("miss"),
            &Value::from("hit"),
            &Value::from("stale"),
            &Value::Null
        ],
        "{lines:#?}"
    );
}
