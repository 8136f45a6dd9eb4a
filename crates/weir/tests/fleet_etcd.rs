//! `providers.etcd` against a real etcd (Debian's `etcd-server`), issue 37: the document at the
//! key merged with the file (names referring across both), changes followed by two instances
//! within a second, 20 changes under load with no failed request, a bad document refused with
//! its errors placed in it (the log and `/api/status`) while the old configuration serves, and
//! etcd away at start: the `cache_file` copy served, and the watch back once etcd is.

mod common;
use common::*;
use std::time::{Duration, Instant};

const KEY: &str = "/weir/dynamic";

/// A file with an entrypoint, the admin API, the service `app` and a router of its own
/// (`/own`), taking the rest from etcd.
fn file(etcd: &Etcd, upstream: &Upstream, cache: Option<&std::path::Path>) -> String {
    let cache = cache
        .map(|p| format!(", cache_file: \"{}\"", p.display()))
        .unwrap_or_default();
    file_with(etcd, upstream, &cache)
}

/// The same file, with more keys for `providers.etcd` (`, key: value` each).
fn file_with(etcd: &Etcd, upstream: &Upstream, more: &str) -> String {
    format!(
        "server: {{ workers: 2, admin: {{ address: \"127.0.0.1:0\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n\
         routers:\n  own: {{ rule: \"Path(`/own`)\", service: app }}\n\
         providers:\n  etcd: {{ endpoints: [\"{}\"], key: {KEY}{more} }}\n",
        upstream.url(),
        etcd.endpoint()
    )
}

/// A document with a router on `/steady` (through the file's service) and one answering on
/// `path` with `body`.
fn document(path: &str, body: &str) -> String {
    format!(
        "routers:\n  steady: {{ rule: \"Path(`/steady`)\", service: app, middlewares: [tag] }}\n  \
         changing: {{ rule: \"Path(`{path}`)\", respond: {{ body: \"{body}\" }} }}\n\
         middlewares:\n  tag: {{ headers: {{ request: {{ set: {{ x-from: etcd }} }} }} }}\n"
    )
}

/// Waits (up to `within`) until `path` answers `body` on `weir`.
fn until_serving(weir: &Weir, path: &str, body: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let resp = get(weir.addr(), "t", path);
        if resp.status == 200 && resp.text() == body {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{path} still answers {} {:?} after {within:?}; stderr: {:#?}",
            resp.status,
            resp.text(),
            weir.stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn etcd_status(weir: &Weir) -> serde_json::Value {
    get(weir.addrs["@admin"], "a", "/api/status").json()["etcd"].clone()
}

/// The document's routers use the file's service and the document's own middleware; a change
/// reaches both instances within a second; 20 changes under a steady load fail no request.
#[test]
fn two_instances_follow_the_document_under_load() {
    let etcd = Etcd::start();
    let up = Upstream::start("app");
    etcd.put(KEY, &document("/v0", "zero"));
    let a = Weir::start(&file(&etcd, &up, None));
    let b = Weir::start(&file(&etcd, &up, None));
    for weir in [&a, &b] {
        assert_eq!(get(weir.addr(), "t", "/v0").text(), "zero");
        assert_eq!(get(weir.addr(), "t", "/own").status, 200);
        let steady = get(weir.addr(), "t", "/steady");
        assert_eq!(steady.status, 200);
        assert_eq!(
            echoed_header(&steady.json(), "x-from").as_deref(),
            Some("etcd")
        );
    }

    let loads = [
        SteadyLoad::start(a.addr(), "/steady"),
        SteadyLoad::start(b.addr(), "/steady"),
    ];
    for change in 1..=20 {
        etcd.put(
            KEY,
            &document(&format!("/v{change}"), &format!("change {change}")),
        );
        for weir in [&a, &b] {
            let took = until_serving(
                weir,
                &format!("/v{change}"),
                &format!("change {change}"),
                Duration::from_secs(1),
            );
            assert!(took < Duration::from_secs(1));
        }
    }
    for load in loads {
        let report = load.finish();
        report.assert_no_failure();
        assert!(report.ok > 100, "the load ran: {}", report.ok);
    }
    for weir in [&a, &b] {
        assert_eq!(
            get(weir.addr(), "t", "/v0").status,
            404,
            "the old router is gone"
        );
        let status = etcd_status(weir);
        assert!(status["revision"].as_i64().unwrap() > 20, "{status}");
        assert_eq!(status["last_error"], serde_json::Value::Null);
    }
}

/// A refused document: every error placed in the document, in the log and the admin API; the
/// last good document keeps serving, and the next good one is applied.
#[test]
fn a_bad_document_is_refused_and_the_old_one_serves() {
    let etcd = Etcd::start();
    let up = Upstream::start("app");
    etcd.put(KEY, &document("/good", "good"));
    let weir = Weir::start(&file(&etcd, &up, None));
    assert_eq!(get(weir.addr(), "t", "/good").text(), "good");

    etcd.put(
        KEY,
        "routers:\n  own: { rule: \"Path(`/x`)\", service: app }\n  broken: { rule: \"Path(`/y`\", service: nowhere }\n",
    );
    weir.wait_for_line("reload (etcd) refused", 1);
    let lines = weir.stderr().join("\n");
    assert!(
        lines.contains("etcd:/weir/dynamic:2:3: `routers.own` is defined in"),
        "{lines}"
    );
    let status = etcd_status(&weir);
    let errors = status["last_error"].as_array().expect("errors").clone();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("etcd:/weir/dynamic:2:3:")),
        "{status}"
    );
    assert_eq!(get(weir.addr(), "t", "/good").text(), "good");
    assert_eq!(get(weir.addr(), "t", "/own").status, 200);

    etcd.put(KEY, &document("/better", "better"));
    until_serving(&weir, "/better", "better", Duration::from_secs(1));
    assert_eq!(etcd_status(&weir)["last_error"], serde_json::Value::Null);
}

/// etcd away at start: the copy of the last good document in `cache_file` serves; etcd back:
/// its changes are followed again, and weir says so once each way.
#[test]
fn etcd_away_at_start_serves_the_cache_file_then_follows_again() {
    let mut etcd = Etcd::start();
    let up = Upstream::start("app");
    let cache = temp_dir("etcd-cache").join("dynamic.yaml");
    etcd.put(KEY, &document("/cached", "cached"));
    let yaml = file(&etcd, &up, Some(&cache));
    {
        let first = Weir::start(&yaml);
        assert_eq!(get(first.addr(), "t", "/cached").text(), "cached");
    }
    let saved = std::fs::read_to_string(&cache).expect("the cache file was written");
    assert!(saved.contains("/cached"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    etcd.stop();
    let weir = Weir::start(&yaml);
    assert_eq!(get(weir.addr(), "t", "/cached").text(), "cached");
    assert_eq!(get(weir.addr(), "t", "/own").status, 200);
    let lines = weir.stderr().join("\n");
    assert!(
        lines.contains("etcd: cannot read /weir/dynamic at start"),
        "{lines}"
    );
    assert!(
        lines.contains("serving the document from cache_file"),
        "{lines}"
    );

    etcd.restart();
    etcd.put(KEY, &document("/fresh", "fresh"));
    until_serving(&weir, "/fresh", "fresh", Duration::from_secs(10));
    weir.wait_for_line("etcd: reachable again", 1);
    assert_eq!(
        weir.stderr()
            .iter()
            .filter(|l| l.contains("etcd: unreachable ("))
            .count(),
        1
    );
}

/// etcd serving its clients over TLS (`https://` endpoints): the document is read and followed
/// with the server's certificate checked against `tls.ca`.
#[test]
fn etcd_over_tls() {
    let dir = temp_dir("etcd-tls");
    let cert = make_cert(&dir, "etcd", &["localhost", "127.0.0.1"], false);
    let etcd = Etcd::start_tls(&cert.cert, &cert.key);
    let up = Upstream::start("app");
    etcd.put(KEY, &document("/secure", "secure"));
    let weir = Weir::start(&file_with(
        &etcd,
        &up,
        &format!(
            ", tls: {{ ca: \"{}\", server_name: localhost }}",
            cert.cert.display()
        ),
    ));
    assert_eq!(get(weir.addr(), "t", "/secure").text(), "secure");
    etcd.put(KEY, &document("/next", "next"));
    until_serving(&weir, "/next", "next", Duration::from_secs(1));
}

/// etcd with authentication on: weir takes a token with `username` and `password` and reads
/// and follows the key with it; without them, it is refused and the file alone serves.
#[test]
fn etcd_with_authentication() {
    let mut etcd = Etcd::start();
    let up = Upstream::start("app");
    etcd.require_auth("s3cret");
    etcd.put(KEY, &document("/authed", "authed"));
    let weir = Weir::start(&file_with(&etcd, &up, ", username: root, password: s3cret"));
    assert_eq!(get(weir.addr(), "t", "/authed").text(), "authed");
    etcd.put(KEY, &document("/again", "again"));
    until_serving(&weir, "/again", "again", Duration::from_secs(1));
    let anonymous = Weir::start(&file(&etcd, &up, None));
    assert_eq!(get(anonymous.addr(), "t", "/again").status, 404);
    assert_eq!(get(anonymous.addr(), "t", "/own").status, 200);
    anonymous.wait_for_line("etcd: cannot read /weir/dynamic at start", 1);
}
