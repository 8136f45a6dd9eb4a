//! The admin API and the dashboard on the real binary: routers and servers as JSON, draining a
//! server through the API (no new request reaches it, undrain brings it back), and the
//! dashboard page rendered by a real headless Chromium (Debian's `chromium`): routers, server
//! health, the config version, the last reload's errors and a chart with points.

mod common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

const TOKEN: &str = "dashboard-test-token-0123456789";

fn admin(weir: &Weir, method: &str, target: &str) -> Resp {
    request(
        weir.addrs["@admin"],
        &format!(
            "{method} {target} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 0\r\n\r\n"
        ),
    )
}

fn config(one: &Upstream, two: &Upstream, dead: u16) -> String {
    format!(
        "server: {{ workers: 1, admin: {{ address: \"127.0.0.1:0\", token: \"{TOKEN}\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         services:\n  api:\n    servers: [{{ url: \"{}\" }}, {{ url: \"{}\" }}]\n  \
         checked:\n    servers: [{{ url: \"http://127.0.0.1:{dead}\" }}]\n    \
         health_check: {{ path: /health, interval: 100ms, timeout: 100ms, unhealthy_threshold: 1 }}\n\
         routers:\n  api: {{ rule: \"PathPrefix(`/api`)\", service: api }}\n  \
         checked: {{ rule: \"PathPrefix(`/checked`)\", service: checked }}\n  \
         hello: {{ rule: \"PathPrefix(`/`)\", respond: {{ status: 200, body: hi }} }}\n",
        one.url(),
        two.url()
    )
}

#[test]
fn draining_a_server_sends_it_no_new_request() {
    let (one, two) = (Upstream::start("one"), Upstream::start("two"));
    let weir = Weir::start(&config(&one, &two, free_port()));
    let routers = admin(&weir, "GET", "/api/routers").json();
    let names: Vec<&str> = routers["routers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["api", "checked", "hello"]);
    assert_eq!(routers["routers"][0]["rule"], "PathPrefix(`/api`)");

    let target = format!(
        "/api/servers/drain?service=api&server={}",
        one.url().replace(':', "%3A")
    );
    let drained = admin(&weir, "POST", &target);
    assert_eq!(drained.status, 200, "{}", drained.text());
    let before = one.request_count();
    for _ in 0..10 {
        assert_eq!(get(weir.addr(), "a", "/api/x").status, 200);
    }
    assert_eq!(one.request_count(), before, "a drained server got requests");
    let services = admin(&weir, "GET", "/api/services").json();
    assert_eq!(services["services"][0]["servers"][0]["drained"], true);
    assert_eq!(
        admin(&weir, "POST", "/api/servers/drain?service=api&server=nope").status,
        404
    );

    let undrained = admin(&weir, "POST", &target.replace("/drain", "/undrain"));
    assert_eq!(undrained.status, 200);
    for _ in 0..10 {
        get(weir.addr(), "a", "/api/x");
    }
    assert!(
        one.request_count() > before,
        "undrained, but still no request"
    );
    // Without the token: 401.
    let anonymous = request(
        weir.addrs["@admin"],
        "POST /api/servers/drain HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert_eq!(anonymous.status, 401);
}

#[test]
fn the_dashboard_renders_in_headless_chromium() {
    let (one, two) = (Upstream::start("one"), Upstream::start("two"));
    let weir = Weir::start(&config(&one, &two, free_port()));
    for _ in 0..5 {
        get(weir.addr(), "a", "/api/x");
        get(weir.addr(), "a", "/");
    }
    // A refused reload, for the page to show its error.
    let path = weir.config_path();
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, good.replace("service: checked", "service: missing")).unwrap();
    assert_eq!(admin(&weir, "POST", "/api/reload").status, 422);
    // The checked server is down (nothing listens there) within a few intervals.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !admin(&weir, "GET", "/api/services")
        .text()
        .contains("\"down\":true")
    {
        assert!(
            Instant::now() < deadline,
            "the checked server never went down"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let profile = temp_dir("chromium");
    let url = format!("http://{}/dashboard#token={TOKEN}", weir.addrs["@admin"]);
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=4000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--dump-dom", &url])
        .output()
        .expect("chromium (Debian's package)");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let has = |text: &str| {
        assert!(
            dom.contains(text),
            "no `{text}` in the rendered page:\n{dom}"
        )
    };
    has("<b id=\"version\">1</b>");
    has(&format!(
        "<b id=\"weir-version\">{} (",
        env!("CARGO_PKG_VERSION")
    ));
    has("data-router=\"api\"");
    has("data-router=\"hello\"");
    has("PathPrefix(`/api`)");
    has(&format!("data-server=\"{}\"", one.url()));
    has("<td class=\"down state\">down</td>");
    has("<td class=\"up state\">up</td>");
    has("refused at");
    has(&format!("{}:", path.display()));
    has("missing");
    // The charts drew at least one point of live rates.
    let points = dom
        .split("id=\"rps-chart\"")
        .nth(1)
        .and_then(|rest| rest.split("data-points=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    assert!(points >= 1, "no chart points:\n{dom}");
}

#[test]
fn metrics_need_the_token_only_when_asked() {
    let weir = Weir::start(&format!(
        "server: {{ workers: 1, admin: {{ address: \"127.0.0.1:0\", token: \"{TOKEN}\", token_for_metrics: true }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  hello: {{ rule: \"PathPrefix(`/`)\", respond: {{ status: 200, body: hi }} }}\n"
    ));
    let anonymous = request(
        weir.addrs["@admin"],
        "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert_eq!(anonymous.status, 401);
    assert_eq!(admin(&weir, "GET", "/metrics").status, 200);
}
