//! Reload on the real binary: a new file takes effect on SIGHUP, through the admin API and
//! through `weir reload`; kept listeners (and the keep-alive connections on them) live on,
//! new entrypoints open and removed ones close; a bad file is refused with `file:line:column`
//! and the old config keeps serving; counters carry over. And the test: 100 reloads
//! that add and remove a router, a server and an entrypoint, under a steady load of keep-alive
//! and new connections, with no failed request.

mod common;
use common::*;
use std::net::SocketAddr;
use std::time::Duration;

const TOKEN: &str = "reload-test-token-0123456789";

fn admin_request(weir: &Weir, method: &str, path: &str) -> Resp {
    request(
        weir.addrs["@admin"],
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 0\r\n\r\n"
        ),
    )
}

/// One config of the first test: `web` answers `body`; `extra`, when given, is a second
/// entrypoint answering the same.
fn answering(body: &str, extra: bool, admin_port: u16) -> String {
    let extra_ep = if extra {
        "  extra: { address: \"127.0.0.1:0\" }\n"
    } else {
        ""
    };
    format!(
        "server: {{ workers: 2, admin: {{ address: \"127.0.0.1:{admin_port}\", token: \"{TOKEN}\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n{extra_ep}\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", respond: {{ status: 200, body: \"{body}\" }} }}\n"
    )
}

#[test]
fn reload_applies_a_good_file_and_refuses_a_bad_one() {
    // A fixed admin port, so `weir reload` finds the process from the file.
    let admin = free_port();
    let weir = Weir::start(&answering("one", false, admin));
    let path = weir.config_path();
    let web = weir.addr();
    assert_eq!(get(web, "a", "/").text(), "one");
    // A keep-alive connection opened before the reload.
    let mut kept = Conn::open(web);
    kept.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(kept.read(false).unwrap().text(), "one");

    // SIGHUP: a new answer and a new entrypoint; `web` keeps its socket and connections.
    std::fs::write(&path, answering("two", true, admin)).unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    let line = weir.wait_for_line(": entrypoint extra listening on ", 1);
    let extra: SocketAddr = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(get(web, "a", "/").text(), "two");
    assert_eq!(get(extra, "a", "/").text(), "two");
    kept.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(
        kept.read(false).unwrap().text(),
        "two",
        "same connection, new config"
    );

    // A bad file through the admin API: refused with the place of each error, nothing changes.
    std::fs::write(
        &path,
        answering("three", true, admin).replace(
            "routers:",
            "routers:\n  bad: { rule: \"Nope(`x`)\", respond: { status: 200 } }",
        ),
    )
    .unwrap();
    let refused = admin_request(&weir, "POST", "/api/reload");
    assert_eq!(refused.status, 422, "{}", refused.text());
    let errors = refused.json()["errors"].clone();
    let first = errors[0].as_str().unwrap();
    assert!(
        first.starts_with(&format!("{}:", path.display())) && first.contains("Nope"),
        "{errors}"
    );
    assert_eq!(get(web, "a", "/").text(), "two");
    let status = admin_request(&weir, "GET", "/api/status").json();
    assert_eq!(status["version"], 2);
    assert_eq!(status["last_reload"]["ok"], false);
    assert_eq!(status["reloads"]["failed"], 1);
    weir.wait_for_line(": reload (admin API) refused; still serving version 2", 1);

    // `weir reload` (through the admin API): back to one entrypoint; `extra` closes.
    std::fs::write(&path, answering("four", false, admin)).unwrap();
    let out = stdout_of(
        std::process::Command::new(weir_bin())
            .args(["reload", "-c"])
            .arg(&path),
        "weir reload",
    );
    assert_eq!(String::from_utf8_lossy(&out).trim(), "reloaded: version 3");
    assert_eq!(get(web, "a", "/").text(), "four");
    // Each worker closes its listener when it takes the reload's word, just after the answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::net::TcpStream::connect(extra).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the removed entrypoint still accepts"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    kept.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(kept.read(false).unwrap().text(), "four");

    // Counters carried over every reload: all 2xx answers on `web` so far (the last one is
    // counted just after it is sent, so wait for it).
    let wanted = "weir_responses_total{entrypoint=\"web\",code=\"2xx\"} 7";
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = admin_request(&weir, "GET", "/metrics").text();
        if metrics.lines().any(|l| l == wanted) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{wanted}\n{metrics}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_bad_file_on_sighup_keeps_the_old_config() {
    let weir = Weir::start(&answering("one", false, 0));
    std::fs::write(weir.config_path(), "entrypoints:\n  web: { address: 12 }\n").unwrap();
    weir.signal("HUP");
    let line = weir.wait_for_line(": reload error: ", 1);
    assert!(
        line.contains(&format!("{}:2:", weir.config_path().display())),
        "{line}"
    );
    assert_eq!(get(weir.addr(), "a", "/").text(), "one");
}

#[test]
fn watch_reloads_when_the_file_changes() {
    let weir = Weir::start_with(&answering("one", false, 0), &["--watch"]);
    assert_eq!(get(weir.addr(), "a", "/").text(), "one");
    std::fs::write(weir.config_path(), answering("changed", false, 0)).unwrap();
    let line = weir.wait_for_line(": reloaded", 1);
    assert!(line.contains("(version 2)"), "{line}");
    assert_eq!(get(weir.addr(), "a", "/").text(), "changed");
}

/// The two configs the load test alternates: B drops the `side` entrypoint, the `/x` router
/// and the second server, A brings them back.
fn alternating(a: bool, one: &Upstream, two: &Upstream, web_port: u16) -> String {
    let (side, servers, extra_router) = if a {
        (
            "  side: { address: \"127.0.0.1:0\" }\n",
            format!(
                "[{{ url: \"{}\" }}, {{ url: \"{}\" }}]",
                one.url(),
                two.url()
            ),
            "  x: { rule: \"PathPrefix(`/x`)\", respond: { status: 200, body: \"x\" } }\n",
        )
    } else {
        ("", format!("[{{ url: \"{}\" }}]", one.url()), "")
    };
    format!(
        "server: {{ workers: 2 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:{web_port}\" }}\n{side}\
         services:\n  s: {{ servers: {servers} }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", service: s }}\n{extra_router}"
    )
}

#[test]
fn a_hundred_reloads_under_load_fail_no_request() {
    let one = Upstream::start("one");
    let two = Upstream::start("two");
    // A fixed port, so both configs name the same address and `web` is kept.
    let port = free_port();
    let weir = Weir::start(&alternating(true, &one, &two, port));
    let load = SteadyLoad::start(weir.addr(), "/api");
    let path = weir.config_path();
    for i in 1..=100 {
        let a = i % 2 == 0;
        std::fs::write(&path, alternating(a, &one, &two, port)).unwrap();
        weir.signal("HUP");
        weir.wait_for_line(": reloaded", i);
        std::thread::sleep(Duration::from_millis(10));
    }
    let report = load.finish();
    report.assert_no_failure();
    // `web` was kept by every reload: none of its keep-alive connections was closed.
    assert_eq!(report.retried, 0);
    let served = report.ok;
    assert!(served > 500, "only {served} requests in 100 reloads");
    // Both servers took traffic while they were configured.
    assert!(one.request_count() > 0 && two.request_count() > 0);
    let refused = weir
        .stderr()
        .iter()
        .filter(|l| l.contains("refused"))
        .count();
    assert_eq!(refused, 0, "{:#?}", weir.stderr());
}

/// Two entrypoints on one address: `weir check` and a reload refuse it, naming both with
/// their places (both used to bind the address, and the second never saw a request).
#[test]
fn an_address_used_twice_is_refused_by_check_and_reload() {
    let port = free_port();
    let twice = format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:{port}\" }}\n  other: {{ address: \"127.0.0.1:{port}\" }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", respond: {{ status: 200, body: \"one\" }} }}\n"
    );
    let dir = temp_dir("address-twice");
    let path = dir.join("twice.yaml");
    std::fs::write(&path, &twice).unwrap();
    let out = weir_check(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "twice.yaml:3:21: entrypoint `other` listens on 127.0.0.1:{port}, which entrypoint `web` already uses (line 2, column 19)"
        )),
        "{stderr}"
    );

    let once = format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:{port}\" }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", respond: {{ status: 200, body: \"one\" }} }}\n"
    );
    let weir = Weir::start(&once);
    std::fs::write(weir.config_path(), twice.replace("one", "two")).unwrap();
    weir.signal("HUP");
    weir.wait_for_line("refused; still serving version 1", 1);
    weir.wait_for_line("which entrypoint `web` already uses", 1);
    assert_eq!(get(weir.addr(), "a", "/").text(), "one");
}
