//! The admin dashboard in a real headless Chromium (Debian's `chromium`), driven over the
//! DevTools protocol (issue 42): every panel present and filled from the API (entrypoints,
//! HTTP routers, services and servers, middlewares, TCP and UDP routers and services, caches,
//! certificates with the near expiry highlighted, version and uptime, the last reload), charts
//! with points and labelled axes, sub-millisecond latencies in µs, screenshots at a phone's and
//! a desktop's width, and a drain button clicked and then seen in the API.
//!
//! One Chromium per test, started with `--remote-debugging-port=0`; the test speaks the
//! protocol's JSON over the browser's websocket (the `tungstenite` crate), so one browser
//! loads the page, resizes it, screenshots it and clicks in it, and the assertions stay in
//! Rust beside the ones on the API.

mod common;
use base64::Engine;
use common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tungstenite::{Message, WebSocket};

const TOKEN: &str = "dashboard-chromium-token-42";
/// How long a page may take to show something: generous, for a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// A headless Chromium and one page in it, attached over the DevTools protocol; killed on drop.
struct Chromium {
    child: Child,
    socket: WebSocket<TcpStream>,
    /// The page's session on the browser's websocket (the protocol's flat sessions).
    session: String,
    next_id: u64,
    /// Chromium's profile folder, removed with it (the screenshots beside it stay).
    profile: std::path::PathBuf,
}

impl Chromium {
    fn start(profile: &std::path::Path) -> Chromium {
        let mut child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium (Debian's package)");
        // Chromium names its websocket on stderr: "DevTools listening on ws://...".
        let (found, endpoint) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = found.send(url.trim().to_string());
                }
                // Read on, so a chatty Chromium never blocks on a full pipe.
            }
        });
        let url = endpoint
            .recv_timeout(PATIENCE)
            .expect("chromium printed no DevTools endpoint");
        let address = url
            .strip_prefix("ws://")
            .and_then(|rest| rest.split('/').next())
            .unwrap();
        let stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let (socket, _) = tungstenite::client(url.as_str(), stream).expect("DevTools handshake");
        let mut chromium = Chromium {
            child,
            socket,
            session: String::new(),
            next_id: 0,
            profile: profile.to_path_buf(),
        };
        let target = chromium.browser_call("Target.createTarget", json!({ "url": "about:blank" }));
        let attached = chromium.browser_call(
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        chromium.session = attached["sessionId"].as_str().unwrap().to_string();
        chromium
    }

    /// Sends one command (to the page's session, or else to the browser) and returns its
    /// result or its error; events read meanwhile are dropped.
    fn send(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut command = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            command["sessionId"] = json!(session);
        }
        self.socket
            .send(Message::text(command.to_string()))
            .unwrap();
        loop {
            let message = self.socket.read().expect("DevTools socket");
            let Ok(text) = message.to_text() else {
                continue;
            };
            let reply: Value = serde_json::from_str(text).unwrap();
            if reply["id"] == id {
                return match reply.get("error") {
                    None => Ok(reply["result"].clone()),
                    Some(error) => Err(format!("{method}: {error}")),
                };
            }
        }
    }

    fn browser_call(&mut self, method: &str, params: Value) -> Value {
        self.send(None, method, params).unwrap()
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(Some(&session), method, params).unwrap()
    }

    /// The value of a JavaScript expression in the page (promises awaited), or why there is
    /// none (it threw, or the page was between two documents).
    fn try_eval(&mut self, expression: &str) -> Result<Value, String> {
        let session = self.session.clone();
        let params =
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true });
        let result = self.send(Some(&session), "Runtime.evaluate", params)?;
        match result.get("exceptionDetails") {
            None => Ok(result["result"]["value"].clone()),
            Some(thrown) => Err(format!("`{expression}` threw: {thrown}")),
        }
    }

    fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression).unwrap()
    }

    /// Waits until `expression` is true in the page (a navigation may still be under way).
    fn wait_for(&mut self, expression: &str) {
        let deadline = Instant::now() + PATIENCE;
        while self.try_eval(expression) != Ok(json!(true)) {
            assert!(
                Instant::now() < deadline,
                "never true in the page: {expression}\n{}",
                self.eval("document.body.innerText")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Lays the page out `width` CSS pixels wide (a phone's viewport below 600).
    fn resize(&mut self, width: u32, height: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600 }),
        );
    }

    /// A PNG of the whole page at `width`, written to `path`.
    fn screenshot(&mut self, width: u32, path: &std::path::Path) -> Vec<u8> {
        self.resize(width, 900);
        let height = self
            .eval("document.documentElement.scrollHeight")
            .as_u64()
            .unwrap();
        self.resize(width, height as u32);
        // The charts redraw on the resize event; one frame later they are at the new width.
        self.eval(
            "new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))",
        );
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, &png).unwrap();
        png
    }

    /// A real mouse click (press and release) in the middle of the element `selector` names.
    fn click(&mut self, selector: &str) {
        let at = self.eval(&format!(
            "(() => {{ const e = document.querySelector({selector:?}); e.scrollIntoView({{ block: 'center' }});
               const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ));
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": at[0], "y": at[1], "button": "left", "clickCount": 1 }),
            );
        }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The PNG's width from its header (`IHDR` follows the 8-byte signature).
fn png_width(png: &[u8]) -> u32 {
    assert!(
        png.len() > 1000 && png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "not a PNG"
    );
    u32::from_be_bytes(png[16..20].try_into().unwrap())
}

fn admin(weir: &Weir, method: &str, target: &str) -> Resp {
    request(
        weir.addrs["@admin"],
        &format!(
            "{method} {target} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 0\r\n\r\n"
        ),
    )
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// One of everything the dashboard shows: a plain and a TLS entrypoint (one certificate with
/// five days left), proxied, cached, answered and redirected routers, a middleware, a server
/// nothing listens on (down), TCP and UDP routers and services. The cached router's origin is
/// weir itself, on an entrypoint whose answers may be stored for a minute.
fn config(one: &Upstream, two: &Upstream, dead: u16, dir: &std::path::Path) -> String {
    let now = unix_now();
    let long = make_cert(dir, "site", &["site.example"], false);
    let soon = make_cert_valid(
        dir,
        "soon",
        &["soon.example"],
        Some((now - 86_400, now + 5 * 86_400 + 3_600)),
    );
    let origin = free_port();
    format!(
        "server: {{ workers: 1, admin: {{ address: \"127.0.0.1:0\", token: \"{TOKEN}\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n  \
         origin: {{ address: \"127.0.0.1:{origin}\" }}\n  \
         secure:\n    address: \"127.0.0.1:0\"\n    tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}, {{ cert: \"{}\", key: \"{}\" }}] }}\n  \
         db: {{ address: \"127.0.0.1:0\" }}\n  dns: {{ address: \"127.0.0.1:0/udp\" }}\n\
         routers:\n  \
         api: {{ entrypoints: [web], rule: \"PathPrefix(`/api`)\", service: api, middlewares: [limit] }}\n  \
         cached: {{ entrypoints: [web], rule: \"PathPrefix(`/cached`)\", service: origin, cache: main }}\n  \
         old: {{ rule: \"Path(`/old`)\", redirect: {{ to: \"/new\", status: 308 }} }}\n  \
         hello: {{ entrypoints: [web, secure], rule: \"PathPrefix(`/`)\", priority: 1, respond: {{ status: 200, body: hi }} }}\n  \
         stored: {{ entrypoints: [origin], rule: \"PathPrefix(`/`)\", respond: {{ status: 200, body: kept, headers: {{ cache-control: \"max-age=60\" }} }} }}\n\
         services:\n  api:\n    servers: [{{ url: \"{}\" }}, {{ url: \"{}\" }}]\n  \
         origin: {{ servers: [{{ url: \"http://127.0.0.1:{origin}\" }}] }}\n  \
         checked:\n    servers: [{{ url: \"http://127.0.0.1:{dead}\" }}]\n    \
         health_check: {{ path: /health, interval: 100ms, timeout: 100ms, unhealthy_threshold: 1 }}\n\
         middlewares:\n  limit: {{ rate_limit: {{ average: 10000 }} }}\n\
         caches:\n  main: {{ memory: 4MiB, max_object_size: 1MiB }}\n\
         tcp:\n  routers:\n    pg: {{ entrypoints: [db], rule: \"HostSNI(`*`)\", service: pg }}\n  \
         services:\n    pg: {{ servers: [{{ address: \"127.0.0.1:5432\" }}] }}\n\
         udp:\n  routers:\n    resolver: {{ entrypoints: [dns], service: resolver }}\n  \
         services:\n    resolver: {{ servers: [{{ address: \"127.0.0.1:53\" }}] }}\n",
        long.cert.display(),
        long.key.display(),
        soon.cert.display(),
        soon.key.display(),
        one.url(),
        two.url()
    )
}

/// Requests to the proxied and answered routers until dropped, so the charts have rates.
struct Traffic {
    stop: Arc<AtomicBool>,
}

impl Traffic {
    fn start(weir: &Weir) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, web) = (stop.clone(), weir.addrs["web"]);
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                get(web, "a", "/api/x");
                get(web, "a", "/");
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Traffic { stop }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The text of one panel (`section[data-panel=NAME]`).
fn panel(chromium: &mut Chromium, name: &str) -> String {
    chromium
        .eval(&format!(
            "document.querySelector('section[data-panel={name}]').innerText"
        ))
        .as_str()
        .unwrap_or_else(|| panic!("no panel {name}"))
        .to_string()
}

#[test]
fn every_panel_fills_at_two_widths_and_a_drain_click_reaches_the_api() {
    let dir = temp_dir("dashboard");
    let (one, two) = (Upstream::start("one"), Upstream::start("two"));
    let dead = free_port();
    let weir = Weir::start(&config(&one, &two, dead, &dir));
    assert_eq!(get(weir.addrs["web"], "a", "/cached/page").text(), "kept");
    assert_eq!(get(weir.addrs["web"], "a", "/old").status, 308);
    let _traffic = Traffic::start(&weir);

    let mut chromium = Chromium::start(&dir.join("profile"));
    chromium.resize(1400, 900);
    // Without a token the page asks for one and shows nothing; typed in its form, it serves.
    let url = format!("http://{}/dashboard", weir.addrs["@admin"]);
    chromium.call("Page.navigate", json!({ "url": url }));
    chromium.wait_for("document.getElementById('auth').classList.contains('shown')");
    assert_eq!(
        chromium.eval("document.querySelectorAll('#routers tbody tr').length"),
        0
    );
    chromium.click("#token");
    chromium.call("Input.insertText", json!({ "text": TOKEN }));
    chromium.click("#auth-form button");
    // Two polls make a rate; the checked server goes down within a few check intervals.
    chromium.wait_for(
        "Number(document.getElementById('rps-chart').dataset.points) >= 2 \
         && document.querySelector('#servers td.down') !== null",
    );

    let header = chromium
        .eval("document.querySelector('header').innerText")
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        header.contains(&format!("weir {} (", env!("CARGO_PKG_VERSION"))),
        "{header}"
    );
    let uptime = chromium.eval("document.getElementById('uptime').textContent");
    assert!(
        uptime.as_str().unwrap().ends_with('s'),
        "uptime reads {uptime}"
    );

    let entrypoints = panel(&mut chromium, "entrypoints");
    for name in ["web", "origin", "secure", "db", "dns", "udp"] {
        assert!(entrypoints.contains(name), "{name}:\n{entrypoints}");
    }
    let routers = panel(&mut chromium, "routers");
    for shown in [
        "PathPrefix(`/api`)",
        "proxy → api",
        "proxy → origin (cache main)",
        "redirect 308 → /new",
        "respond 200",
        "limit",
        "web, secure",
        "Path(`/old`)\tall\t",
    ] {
        assert!(routers.contains(shown), "`{shown}`:\n{routers}");
    }
    // The answered router's 2xx count is live (the traffic thread keeps adding to it).
    let hello_2xx = chromium
        .eval("Number(document.querySelector('tr[data-router=hello]').children[5].textContent)");
    assert!(hello_2xx.as_u64().unwrap() >= 1, "hello 2xx: {hello_2xx}");
    let servers = chromium.eval(
        "[...document.querySelectorAll('#servers tbody tr')].map((r) => \
         [...r.children].slice(0, 3).map((td) => td.textContent).concat(r.querySelector('button').textContent))",
    );
    let origin = weir.addrs["origin"];
    assert_eq!(
        servers,
        json!([
            ["api", one.url(), "up", "drain"],
            ["api", two.url(), "up", "drain"],
            ["origin", format!("http://{origin}"), "up", "drain"],
            [
                "checked",
                format!("http://127.0.0.1:{dead}"),
                "down",
                "drain"
            ],
        ])
    );
    let middlewares = panel(&mut chromium, "middlewares");
    assert!(
        middlewares.contains("limit\trate_limit\tapi"),
        "{middlewares}"
    );
    let tcp = panel(&mut chromium, "tcp");
    assert!(
        tcp.contains("pg\tHostSNI(`*`)\tdb\tpg") && tcp.contains("127.0.0.1:5432"),
        "{tcp}"
    );
    let udp = panel(&mut chromium, "udp");
    assert!(
        udp.contains("resolver\tdns\tresolver") && udp.contains("127.0.0.1:53"),
        "{udp}"
    );
    let caches = panel(&mut chromium, "caches");
    assert!(caches.contains("main\t1\t"), "one entry stored:\n{caches}");
    assert!(caches.contains("4.0 MiB"), "the limit:\n{caches}");
    // The certificate with five days left is highlighted; the far one is not.
    let days = chromium.eval(
        "[...document.querySelectorAll('#certificates tbody tr')].map((r) => \
         [r.children[1].textContent, r.children[2].textContent, r.lastChild.textContent, r.lastChild.className])",
    );
    let days = days.as_array().unwrap();
    assert_eq!(days.len(), 2, "{days:?}");
    assert_eq!(days[1][0], "soon.example", "{days:?}");
    assert!(
        days[1][1].as_str().unwrap().contains("soon.example"),
        "issuer: {days:?}"
    );
    assert_eq!(
        (&days[1][2], &days[1][3]),
        (&json!("5"), &json!("num expiring")),
        "{days:?}"
    );
    assert_eq!(days[0][3], "num", "{days:?}");

    // A refused reload shows with its error.
    let path = weir.config_path();
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, good.replace("service: pg }", "service: nowhere }")).unwrap();
    assert_eq!(admin(&weir, "POST", "/api/reload").status, 422);
    chromium
        .wait_for("document.getElementById('reload-summary').textContent.startsWith('refused at')");
    let reload = panel(&mut chromium, "reload");
    assert!(reload.contains("nowhere"), "{reload}");

    // Sub-millisecond latencies read in µs, from buckets that start at 100 µs.
    assert_eq!(chromium.eval("latency(0.00025)"), "250 µs");
    assert_eq!(chromium.eval("latency(0.0042)"), "4.20 ms");
    assert_eq!(
        chromium.eval("latency(quantile(0.5, [0.0001, 0.00025, 0.0005, 0.001], [0, 4, 0, 0, 0]))"),
        "175 µs"
    );
    let p50 = chromium.eval("document.getElementById('p50').textContent");
    assert!(
        p50.as_str().unwrap().ends_with(" µs") || p50.as_str().unwrap().ends_with(" ms"),
        "p50 reads {p50}"
    );
    // The axes are labelled: ink left of the plot (values) and below it (times).
    let ink = chromium.eval(
        "['rps-chart', 'latency-chart'].map((id) => { const c = document.getElementById(id), g = c.getContext('2d'); \
           const inked = (x, y, w, h) => g.getImageData(x, y, w, h).data.some((v, i) => i % 4 === 3 && v > 0); \
           return [inked(0, 20, 50, c.height - 60), inked(60, c.height - 18, c.width - 70, 16)]; })",
    );
    assert_eq!(ink, json!([[true, true], [true, true]]), "axis labels");

    // Two widths: a desktop's puts the charts side by side, a phone's stacks every panel and
    // nothing is wider than the screen.
    let wide = chromium.screenshot(1400, &dir.join("dashboard-1400.png"));
    assert_eq!(png_width(&wide), 1400);
    let side_by_side = chromium.eval(
        "(() => { const [a, b] = document.querySelectorAll('section[data-panel=rps], section[data-panel=latency]'); \
           return a.getBoundingClientRect().top === b.getBoundingClientRect().top && b.getBoundingClientRect().left > 600; })()",
    );
    assert_eq!(side_by_side, true);
    let narrow = chromium.screenshot(400, &dir.join("dashboard-400.png"));
    assert_eq!(png_width(&narrow), 400);
    let phone = chromium.eval(
        "[document.documentElement.scrollWidth, \
          new Set([...document.querySelectorAll('main > section:not(#auth)')].map((s) => s.getBoundingClientRect().left)).size]",
    );
    assert_eq!(phone, json!([400, 1]), "[page width, columns] at 400 px");

    // The drain button, clicked: the API says drained, and no new request reaches the server.
    let button = format!("button[data-drain=\"api {}\"]", one.url());
    chromium.click(&button);
    let deadline = Instant::now() + PATIENCE;
    let server_state = |weir: &Weir| {
        admin(weir, "GET", "/api/http/services").json()["services"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "api")
            .unwrap()["servers"][0]["state"]
            .clone()
    };
    while server_state(&weir) != "drained" {
        assert!(Instant::now() < deadline, "the click drained nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    chromium.wait_for(&format!(
        "document.querySelector({button:?}).textContent === 'undrain' \
         && document.querySelector('tr[data-server=\"{}\"] td.state').textContent === 'drained'",
        one.url()
    ));
    let before = one.request_count();
    for _ in 0..10 {
        assert_eq!(get(weir.addrs["web"], "a", "/api/x").status, 200);
    }
    assert_eq!(one.request_count(), before, "a drained server got requests");
    // And undrain, from the same button.
    chromium.click(&button);
    while server_state(&weir) != "up" {
        assert!(Instant::now() < deadline, "the click undrained nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
}
