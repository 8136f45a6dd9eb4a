//! The admin API's structured views on the real binary (issue 42), laid out as Traefik's API
//! is (`/api/overview`, `/api/entrypoints`, `/api/http/routers|services|middlewares`,
//! `/api/tcp/…`, `/api/udp/…`), plus `/api/caches`, `/api/certificates` and `/ping`: each
//! field a value, not prose, and the token asked everywhere but `/ping`; and the `process_*`
//! and certificate expiry metrics beside them.

mod common;
use common::*;

const TOKEN: &str = "a-long-admin-token-1234";

fn api(weir: &Weir, target: &str) -> Resp {
    request(
        weir.addrs["@admin"],
        &format!("GET {target} HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"),
    )
}

/// A config with one of everything the views show.
fn config(up: &Upstream, cert: &CertFiles, dir: &std::path::Path) -> String {
    format!(
        "server: {{ workers: 1, admin: {{ address: \"127.0.0.1:0\", token: \"{TOKEN}\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n  secure:\n    address: \"127.0.0.1:0\"\n    tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }}\n  dns: {{ address: \"127.0.0.1:0/udp\" }}\n  db: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  api: {{ rule: \"PathPrefix(`/api`)\", service: app, middlewares: [limit], cache: main }}\n  hello: {{ rule: \"Path(`/hello`)\", respond: {{ status: 200, body: hi }} }}\n  old: {{ rule: \"Path(`/old`)\", redirect: {{ to: \"/new\", status: 308 }} }}\n  files: {{ rule: \"PathPrefix(`/files`)\", static: {{ root: \"{}\" }} }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n  limit: {{ rate_limit: {{ average: 100 }} }}\n\
         caches:\n  main: {{ memory: 4MiB, max_object_size: 1MiB }}\n\
         tcp:\n  routers:\n    pg: {{ entrypoints: [db], rule: \"HostSNI(`*`)\", service: pg }}\n  services:\n    pg: {{ servers: [{{ address: \"127.0.0.1:5432\" }}] }}\n\
         udp:\n  routers:\n    dns: {{ entrypoints: [dns], service: dns }}\n  services:\n    dns: {{ servers: [{{ address: \"127.0.0.1:53\" }}] }}\n",
        cert.cert.display(),
        cert.key.display(),
        dir.display(),
        up.url()
    )
}

#[test]
fn every_view_answers_with_fields() {
    let dir = temp_dir("admin-api");
    let cert = make_cert(&dir, "site", &["site.example", "www.site.example"], false);
    let up = Upstream::start("app");
    let weir = Weir::start(&config(&up, &cert, &dir));
    assert_eq!(get(weir.addr(), "t", "/api/x").status, 200);

    let overview = api(&weir, "/api/overview").json();
    assert_eq!(overview["entrypoints"], 4);
    assert_eq!(overview["http"]["routers"], 4);
    assert_eq!(overview["http"]["middlewares"], 1);
    assert_eq!(overview["tcp"]["routers"], 1);
    assert_eq!(overview["udp"]["services"], 1);
    assert_eq!(overview["features"]["tls"], true);
    assert!(overview["uptime_seconds"].is_u64());

    let entrypoints = api(&weir, "/api/entrypoints").json();
    let by_name = |name: &str| {
        entrypoints["entrypoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_name("dns")["transport"], "udp");
    assert_eq!(by_name("web")["tls"], serde_json::Value::Null);
    assert!(by_name("secure")["tls"]["certificates"][0]
        .as_str()
        .unwrap()
        .ends_with("site.pem"));

    let routers = api(&weir, "/api/http/routers").json();
    let action = |name: &str| {
        routers["routers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| r["action"].clone())
            .unwrap()
    };
    assert_eq!(
        action("api"),
        serde_json::json!({ "kind": "proxy", "service": "app", "cache": "main" })
    );
    assert_eq!(action("hello")["kind"], "respond");
    assert_eq!(
        action("old"),
        serde_json::json!({ "kind": "redirect", "status": 308, "to": "/new" })
    );
    assert_eq!(action("files")["kind"], "static");

    let services = api(&weir, "/api/http/services").json();
    let app = &services["services"][0];
    assert_eq!(app["name"], "app");
    assert_eq!(app["servers"][0]["state"], "up");
    assert_eq!(app["used_by"], serde_json::json!(["api"]));

    let middlewares = api(&weir, "/api/http/middlewares").json();
    assert_eq!(
        middlewares["middlewares"][0],
        serde_json::json!({ "name": "limit", "kind": "rate_limit", "used_by": ["api"] })
    );
    assert_eq!(
        api(&weir, "/api/tcp/routers").json()["routers"][0]["service"],
        "pg"
    );
    assert_eq!(
        api(&weir, "/api/tcp/services").json()["services"][0]["servers"][0]["address"],
        "127.0.0.1:5432"
    );
    assert_eq!(
        api(&weir, "/api/udp/routers").json()["routers"][0]["name"],
        "dns"
    );
    assert_eq!(
        api(&weir, "/api/udp/services").json()["services"][0]["name"],
        "dns"
    );

    let caches = api(&weir, "/api/caches").json();
    assert_eq!(caches["caches"][0]["name"], "main");
    assert_eq!(caches["caches"][0]["memory_limit_bytes"], 4 << 20);

    let certificates = api(&weir, "/api/certificates").json();
    let first = &certificates["certificates"][0];
    assert_eq!(first["entrypoint"], "secure");
    assert_eq!(
        first["names"],
        serde_json::json!(["site.example", "www.site.example"])
    );
    assert!(first["issuer"].as_str().unwrap().contains("site.example"));
    let days = first["days_left"].as_i64().unwrap();
    assert!(days > 300, "{first}");
    // The same expiry, and the process's own figures, in the Prometheus exposition.
    let metrics = api(&weir, "/metrics").text();
    promtool_check(&metrics);
    let not_after = first["not_after"].as_i64().unwrap();
    assert!(
        metrics.contains(&format!(
            "weir_certificate_not_after_seconds{{entrypoint=\"secure\",names=\"site.example,www.site.example\"}} {not_after}\n"
        )),
        "{metrics}"
    );
    let value = |name: &str| -> f64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_open_fds") >= 5.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    assert!(value("process_cpu_seconds_total") >= 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value("process_start_time_seconds");
    assert!(
        started <= now + 1.0 && started > now - 120.0,
        "{started} against {now}"
    );
}

#[test]
fn ping_needs_no_token_and_the_views_do() {
    let dir = temp_dir("admin-api-auth");
    let cert = make_cert(&dir, "site", &["site.example"], false);
    let up = Upstream::start("app");
    let weir = Weir::start(&config(&up, &cert, &dir));
    let ping = get(weir.addrs["@admin"], "admin", "/ping");
    assert_eq!((ping.status, ping.text().as_str()), (200, "OK\n"));
    assert_eq!(
        get(weir.addrs["@admin"], "admin", "/api/overview").status,
        401
    );
    assert_eq!(api(&weir, "/api/nothing").status, 404);
}
