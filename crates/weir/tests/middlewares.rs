//! End-to-end middlewares and local actions: strip/add prefix, regex path replacement,
//! request and response headers, scheme redirects, `respond` and `redirect` routes.

mod common;
use common::*;

#[test]
fn middlewares_apply_in_order() {
    let up = Upstream::start("a");
    let yaml = format!(
        r#"entrypoints:
  web: {{ address: "127.0.0.1:0" }}
routers:
  strip:
    rule: "PathPrefix(`/api`)"
    middlewares: [strip-api, add-v2]
    service: app
  regex:
    rule: "PathPrefix(`/users`)"
    middlewares: [users-to-accounts]
    service: app
  headers:
    rule: "PathPrefix(`/h`)"
    middlewares: [req-headers, resp-headers]
    service: app
  secure:
    rule: "Host(`secure.test`)"
    middlewares: [to-https]
    service: app
  secure-permanent:
    rule: "Host(`perm.test`)"
    middlewares: [to-https-permanent]
    service: app
  tagged-respond:
    rule: "Path(`/local`)"
    middlewares: [resp-headers]
    respond: {{ status: 201, body: "made", headers: {{ content-type: text/plain, x-kind: local }} }}
  moved:
    rule: "Path(`/old`)"
    redirect: {{ to: "https://new.example/", status: 308 }}
  moved-default:
    rule: "Path(`/old2`)"
    redirect: {{ to: "/new" }}
services:
  app:
    servers: [{{ url: "{url}" }}]
middlewares:
  strip-api: {{ strip_prefix: ["/api"] }}
  add-v2: {{ add_prefix: "/v2" }}
  users-to-accounts: {{ replace_path_regex: {{ regex: "^/users/(.*)", replacement: "/accounts/$1" }} }}
  req-headers:
    headers:
      request: {{ set: {{ x-env: prod }}, add: {{ x-added: "1" }}, remove: [x-drop] }}
  resp-headers:
    headers:
      response: {{ set: {{ x-frame-options: DENY }}, remove: [x-upstream] }}
  to-https: {{ redirect_scheme: {{ scheme: https }} }}
  to-https-permanent: {{ redirect_scheme: {{ scheme: https, permanent: true }} }}
"#,
        url = up.url()
    );
    let weir = Weir::start(&yaml);
    let a = weir.addr();

    let j = get(a, "t", "/api/items?x=1").json();
    assert_eq!(j["target"], "/v2/items?x=1");
    assert_eq!(echoed_header(&j, "x-forwarded-prefix").unwrap(), "/api");
    let j = get(a, "t", "/api").json();
    assert_eq!(j["target"], "/v2/");

    let j = get(a, "t", "/users/42").json();
    assert_eq!(j["target"], "/accounts/42");
    assert_eq!(echoed_header(&j, "x-replaced-path").unwrap(), "/users/42");

    let r = request(
        a,
        "GET /h HTTP/1.1\r\nHost: t\r\nX-Env: dev\r\nX-Drop: 1\r\nConnection: close\r\n\r\n",
    );
    let j = r.json();
    assert_eq!(echoed_header(&j, "x-env").unwrap(), "prod");
    assert_eq!(echoed_header(&j, "x-added").unwrap(), "1");
    assert!(echoed_header(&j, "x-drop").is_none());
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert!(r.header("x-upstream").is_none());

    let r = get(a, "secure.test:8080", "/path?q=1");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://secure.test/path?q=1"));
    let r = get(a, "perm.test", "/");
    assert_eq!(r.status, 301);
    let r = request(
        a,
        "POST / HTTP/1.1\r\nHost: perm.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    );
    assert_eq!(r.status, 308);
    assert_eq!(
        up.request_count(),
        4,
        "redirects must not reach the upstream"
    );

    let r = get(a, "t", "/local");
    assert_eq!((r.status, r.text().as_str()), (201, "made"));
    assert_eq!(r.header("x-kind"), Some("local"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("x-frame-options"), Some("DENY"));

    let r = get(a, "t", "/old");
    assert_eq!(
        (r.status, r.header("location")),
        (308, Some("https://new.example/"))
    );
    let r = get(a, "t", "/old2");
    assert_eq!((r.status, r.header("location")), (302, Some("/new")));
}

#[test]
fn local_responses_keep_the_connection_after_a_body() {
    let weir = Weir::start(
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    respond: { body: ok }\n",
    );
    let mut c = Conn::open(weir.addr());
    c.send(b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read(false).unwrap().text(), "ok");
    assert_eq!(c.read(false).unwrap().text(), "ok");
    c.send(
        b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    );
    assert_eq!(c.read(false).unwrap().text(), "ok");
    c.send(b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\n");
    let head = c.read(true).unwrap();
    assert_eq!(head.header("content-length"), Some("2"));
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read(false).unwrap().text(), "ok");
}

#[test]
fn access_log_writes_one_json_line_per_request() {
    let up = Upstream::start("a");
    let dir = temp_dir("log");
    let log = dir.join("access.log");
    let weir = Weir::start(&format!(
        "server:\n  workers: 1\n  access_log: {{ enabled: true, format: json, path: \"{}\" }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  app:\n    rule: \"PathPrefix(`/app`)\"\n    service: app\n  hi:\n    rule: \"Path(`/hi`)\"\n    respond: {{ body: hello }}\n\
         services:\n  app:\n    servers: [{{ url: \"{}\" }}]\n",
        log.display(),
        up.url()
    ));
    assert_eq!(get(weir.addr(), "log.test", "/app/x?q=1").status, 200);
    assert_eq!(get(weir.addr(), "log.test", "/hi").status, 200);
    assert_eq!(get(weir.addr(), "log.test", "/missing").status, 404);
    let lines = log_lines(&log, 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let entries: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(entries[0]["router"], "app");
    assert_eq!(entries[0]["path"], "/app/x");
    assert_eq!(entries[0]["method"], "GET");
    assert_eq!(entries[0]["host"], "log.test");
    assert_eq!(entries[0]["status"], 200);
    assert_eq!(entries[0]["upstream"], up.addr.to_string());
    assert_eq!(entries[0]["client"], "127.0.0.1");
    assert!(entries[0]["time"].as_str().unwrap().ends_with('Z'));
    assert!(entries[0]["duration_ms"].as_f64().unwrap() > 0.0);
    // Written in whole microseconds: at most three decimals, no float artifacts.
    for line in &lines {
        let duration = line.split("\"duration_ms\":").nth(1).unwrap();
        let number = duration.split([',', '}']).next().unwrap();
        let decimals = number.split('.').nth(1).unwrap_or("");
        assert!(decimals.len() <= 3, "{line}");
    }
    assert_eq!(
        (entries[1]["router"].as_str(), entries[1]["bytes"].as_u64()),
        (Some("hi"), Some(5))
    );
    // No router matched: `null`, not "" (issue 42).
    assert!(entries[2]["router"].is_null(), "{}", lines[2]);
    assert_eq!(entries[2]["status"].as_u64(), Some(404));
}

#[test]
fn access_log_combined_is_nginx_s_format() {
    let dir = temp_dir("log-combined");
    let log = dir.join("access.log");
    let weir = Weir::start(&format!(
        "server:\n  workers: 1\n  access_log: {{ enabled: true, format: combined, path: \"{}\" }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  hi:\n    rule: \"PathPrefix(`/hi`)\"\n    respond: {{ body: hello }}\n",
        log.display()
    ));
    let r = request(
        weir.addr(),
        "GET /hi/there?x=1 HTTP/1.1\r\nHost: t\r\nReferer: https://ref.example/\r\nUser-Agent: agent \"quoted\"\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let missing = request(weir.addr(), "GET /nope HTTP/1.0\r\n\r\n");
    assert_eq!(missing.status, 404);
    let lines = log_lines(&log, 2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    // 127.0.0.1 - - [22/Nov/2026:23:59:01 +0000] "GET /hi/there?x=1 HTTP/1.1" 200 5 "https://ref.example/" "agent \x22quoted\x22"
    let (start, rest) = lines[0].split_once(" [").unwrap();
    assert_eq!(start, "127.0.0.1 - -");
    let (time, rest) = rest.split_once("] ").unwrap();
    assert_eq!(time.len(), "22/Nov/2026:23:59:01 +0000".len(), "{time}");
    assert!(
        time.ends_with(" +0000") && time.as_bytes()[2] == b'/',
        "{time}"
    );
    assert_eq!(
        rest,
        "\"GET /hi/there?x=1 HTTP/1.1\" 200 5 \"https://ref.example/\" \"agent \\x22quoted\\x22\""
    );
    let tail = format!(
        "\"GET /nope HTTP/1.0\" 404 {} \"-\" \"-\"",
        missing.body.len()
    );
    assert!(lines[1].ends_with(&tail), "{}", lines[1]);
}

/// The access log's lines once it has `count` of them (or what it has after a second): the
/// worker writes a line just after the answer leaves.
fn log_lines(log: &std::path::Path, count: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for _ in 0..50 {
        lines = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect();
        if lines.len() >= count {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    lines
}

#[test]
fn access_log_samples_keeps_server_errors_and_reopens_on_sigusr1() {
    let dir = temp_dir("accesslog-sample");
    let log = dir.join("access.log");
    let weir = Weir::start(&format!(
        "server:\n  workers: 1\n  access_log: {{ enabled: true, sample: 0, path: \"{}\" }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  fail: {{ rule: \"Path(`/fail`)\", priority: 100, respond: {{ status: 500, body: no }} }}\n  \
         ok: {{ rule: \"PathPrefix(`/`)\", respond: {{ status: 200, body: yes }} }}\n",
        log.display()
    ));
    for _ in 0..20 {
        assert_eq!(get(weir.addr(), "a", "/ok").status, 200);
    }
    assert_eq!(get(weir.addr(), "a", "/fail").status, 500);
    let lines = log_lines(&log, 1);
    assert_eq!(lines.len(), 1, "sample 0 logs only the 500: {lines:?}");
    assert!(lines[0].contains("\"status\":500"), "{}", lines[0]);

    // logrotate: move the file away, SIGUSR1, and the next lines go to a new file.
    let rotated = dir.join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    weir.signal("USR1");
    weir.wait_for_line(": access log reopened", 1);
    assert_eq!(get(weir.addr(), "a", "/fail").status, 500);
    let fresh = log_lines(&log, 1);
    assert_eq!(fresh.len(), 1);
    assert_eq!(
        std::fs::read_to_string(&rotated).unwrap().lines().count(),
        1
    );
}
