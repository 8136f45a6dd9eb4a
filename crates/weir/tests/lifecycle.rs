//! The command line and process lifecycle: `check` (every example config, and error format),
//! `route explain`, `--version`, graceful stop with a request in flight (requests on their way
//! answered, idle connections closed gently after a grace, and the whole stop bounded by
//! `graceful_timeout` whatever the connections do), and the open-file limit raised at start.

mod common;
use common::*;
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_example_config_checks() {
    let dir = workspace_root().join("examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let out = weir_check(&path);
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(String::from_utf8_lossy(&out.stdout).contains(": ok ("));
            checked += 1;
        }
    }
    assert!(checked >= 1);
}

/// docs/tasks.md and the README: every YAML block passes `weir check`, each written to a
/// folder of its own with what it names made there (test certificates at its `cert`/`key`
/// paths, its static root and 404 page).
#[test]
fn every_task_page_config_checks() {
    check_yaml_blocks("docs/tasks.md", 7);
    check_yaml_blocks("README.md", 2);
}

fn check_yaml_blocks(page_path: &str, at_least: usize) {
    let page = std::fs::read_to_string(workspace_root().join(page_path)).unwrap();
    let blocks: Vec<&str> = page
        .split("```yaml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .collect();
    assert!(
        blocks.len() >= at_least,
        "{page_path}: {} blocks",
        blocks.len()
    );
    for (n, block) in blocks.iter().enumerate() {
        let dir = temp_dir(&format!("task-{n}"));
        std::fs::create_dir_all(dir.join("certs")).unwrap();
        std::fs::create_dir_all(dir.join("www")).unwrap();
        std::fs::write(dir.join("www/404.html"), "not here\n").unwrap();
        if block.contains("certs/site.pem") {
            let made = make_cert(&dir.join("certs"), "site", &["site.example"], false);
            assert!(made.cert.ends_with("certs/site.pem"));
        }
        let path = dir.join("weir.yaml");
        std::fs::write(&path, block).unwrap();
        let out = weir_check(&path);
        assert!(
            out.status.success(),
            "{page_path} block {}: {}\n{block}",
            n + 1,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn check_reports_every_error_with_positions() {
    let dir = temp_dir("check");
    let path = dir.join("bad.yaml");
    std::fs::write(
        &path,
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  api:\n    rule: \"Host(`a`) &&\"\n    service: api\n  other:\n    rule: \"Path(`/`)\"\n    service: missing\n    middlewarez: []\n",
    )
    .unwrap();
    let out = weir_check(&path);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let p = path.display();
    assert!(
        err.contains(&format!("{p}:5:24: invalid rule: expected a matcher")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{p}:9:14: router `other` names service `missing`, which is not defined"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("{p}:10:5: unknown key `middlewarez` in router `other` (did you mean `middlewares`?); expected one of: entrypoints, rule, priority, middlewares, service, respond, redirect")), "{err}");
}

/// A file written for Traefik: its static configuration's `entryPoints` and its dynamic
/// configuration's `http.routers`, as Traefik's documentation writes them
/// (doc.traefik.io/traefik/routing/entrypoints/ and /routing/routers/, YAML examples).
#[test]
fn check_says_a_traefik_file_is_one_and_counts_the_errors_one_a_line() {
    let err = weir_check_refuses(
        "check-traefik",
        "entryPoints:\n  web:\n    address: \":80\"\n\nhttp:\n  routers:\n    my-router:\n      rule: \"Path(`/foo`)\"\n      service: service-foo\n",
    );
    let (lines, p) = check_error_lines(&err);
    assert!(
        lines[0].starts_with(&format!(
            "{p}:1:1: this looks like a Traefik configuration;"
        )),
        "{err}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "{p}:1:1: unknown key `entryPoints` in the top level (did you mean `entrypoints`?)"
        )),
        "{err}"
    );
    // One line per error, each with its position, then their count.
    let errors = &lines[..lines.len() - 1];
    assert!(
        errors.iter().all(|l| l.starts_with(&format!("{p}:"))),
        "{err}"
    );
    assert_eq!(
        lines[lines.len() - 1],
        format!("{p}: {} error(s)", errors.len()),
        "{err}"
    );
}

#[test]
fn route_explain_names_the_router() {
    let cfg = workspace_root().join("examples/quickstart.yaml");
    let run = |args: &[&str]| {
        let out = Command::new(weir_bin())
            .args(["route", "explain", "-c"])
            .arg(&cfg)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = run(&[
        "GET",
        "http://127.0.0.1:8080/api/users",
        "--entrypoint",
        "web",
    ]);
    assert_eq!(code, Some(0));
    assert!(text.contains("router `api`"), "{text}");
    assert!(text.contains("rule:        PathPrefix(`/api`)"), "{text}");
    assert!(text.contains("middlewares: strip-api -> tag"), "{text}");
    assert!(text.contains("proxy to service `demo`"), "{text}");
    let (_, text) = run(&["GET", "http://127.0.0.1:8080/ping", "--entrypoint", "web"]);
    assert!(
        text.contains("router `ping`") && text.contains("respond 200"),
        "{text}"
    );
    let dir = temp_dir("explain");
    let path = dir.join("w.yaml");
    std::fs::write(&path, "entrypoints:\n  web: { address: \":0\" }\nrouters:\n  only:\n    rule: \"Host(`a.test`) && Header(`X-Env`, `prod`) && ClientIP(`10.0.0.0/8`)\"\n    respond: {}\n").unwrap();
    let out = |args: &[&str]| {
        let o = Command::new(weir_bin())
            .args(["route", "explain", "-c"])
            .arg(&path)
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (code, text) = out(&[
        "GET",
        "http://a.test/",
        "-H",
        "X-Env: prod",
        "--client-ip",
        "10.1.1.1",
    ]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = out(&["GET", "http://a.test/", "-H", "X-Env: prod"]);
    assert_eq!(code, Some(2));
    assert!(text.contains("no router matches"), "{text}");
}

#[test]
fn version_prints() {
    let out = Command::new(weir_bin()).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("weir 0."));
}

#[test]
fn graceful_stop_finishes_in_flight_requests() {
    let up = Upstream::start("slow");
    let mut weir = Weir::start(&format!(
        "server: {{ workers: 2, graceful_timeout: 10s }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: app\n\
         services:\n  app:\n    servers: [{{ url: \"{}\" }}]\n",
        up.url()
    ));
    let addr = weir.addr();
    // An idle keep-alive connection must not hold the stop up.
    let mut idle = Conn::open(addr);
    idle.send(b"GET /slow/0 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(idle.read(false).unwrap().status, 200);
    let in_flight = std::thread::spawn(move || get(addr, "t", "/slow/1000"));
    std::thread::sleep(Duration::from_millis(300));
    let stopping = Instant::now();
    weir.signal("TERM");
    let r = in_flight.join().unwrap();
    assert_eq!(r.status, 200);
    assert!(idle.is_closed());
    let status = weir.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(stopping.elapsed() < Duration::from_secs(5));
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still accepting after stop"
    );
    // The reader thread may not have taken the last line yet when the process has exited.
    let read_since = Instant::now();
    while !weir.stderr().iter().any(|l| l.contains("stopped")) {
        assert!(
            read_since.elapsed() < Duration::from_secs(2),
            "{:?}",
            weir.stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn graceful_timeout_bounds_the_stop() {
    let up = Upstream::start("slow");
    let mut weir = Weir::start(&format!(
        "server: {{ workers: 1, graceful_timeout: 300ms }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: app\n\
         services:\n  app:\n    servers: [{{ url: \"{}\" }}]\n",
        up.url()
    ));
    let addr = weir.addr();
    let _stuck = std::thread::spawn(move || {
        let mut c = Conn::open(addr);
        c.send(b"GET /slow/10000 HTTP/1.1\r\nHost: t\r\n\r\n");
        c.read(false)
    });
    std::thread::sleep(Duration::from_millis(200));
    let stopping = Instant::now();
    weir.signal("INT");
    assert!(weir.child.wait().unwrap().success());
    assert!(
        stopping.elapsed() < Duration::from_secs(3),
        "{:?}",
        stopping.elapsed()
    );
}

#[test]
fn a_stop_ends_by_the_graceful_timeout_whatever_connections_do() {
    let up = Upstream::start("slow");
    let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let echo_addr = echo.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in echo.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut reader = conn.try_clone().unwrap();
                let _ = std::io::copy(&mut reader, &mut conn);
            });
        }
    });
    let mut weir = Weir::start(&format!(
        "server: {{ workers: 2, graceful_timeout: 2s }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n  db: {{ address: \"127.0.0.1:0\" }}\n\
         tcp:\n  routers:\n    echo: {{ entrypoints: [db], rule: \"HostSNI(`*`)\", service: echo }}\n  \
         services:\n    echo: {{ servers: [{{ address: \"{echo_addr}\" }}] }}\n\
         routers:\n  all: {{ entrypoints: [web], rule: \"PathPrefix(`/`)\", service: app }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n",
        up.url()
    ));
    let addr = weir.addr();
    let sent = |raw: &str| {
        let mut conn = Conn::open(addr);
        conn.send(raw.as_bytes());
        conn
    };
    // Idle between requests, and its client never closes.
    let mut idle = sent("GET /slow/0 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(idle.read(false).unwrap().status, 200);
    // Waiting for an upstream that answers in 20 s.
    let _in_flight = sent("GET /slow/20000 HTTP/1.1\r\nHost: t\r\n\r\n");
    // Half a head.
    let _half = sent("GET / HTTP/1.1\r\nHost: t\r\n");
    // A 30 MB answer its client does not read.
    let _not_reading = sent("GET /big/30000000 HTTP/1.1\r\nHost: t\r\n\r\n");
    // A WebSocket tunnel.
    let mut ws =
        sent("GET /ws HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n");
    assert_eq!(ws.read(false).unwrap().status, 101);
    // A TCP router's tunnel.
    let mut tunnel = std::net::TcpStream::connect(weir.addrs["db"]).unwrap();
    tunnel.write_all(b"ping").unwrap();
    let mut echoed = [0u8; 4];
    tunnel
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    tunnel.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"ping");
    std::thread::sleep(Duration::from_millis(300));
    let stopping = Instant::now();
    weir.signal("TERM");
    let deadline = stopping + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = weir.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "{:#?}", weir.stderr());
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_millis(2000 + 1000),
        "the stop took {took:?} with a graceful timeout of 2 s"
    );
    // The workers' own drain ended it, not the process giving up on them.
    let lines = weir.stderr();
    assert!(
        !lines.iter().any(|l| l.contains("still busy")),
        "{lines:#?}"
    );
}

#[test]
fn a_stop_ends_by_the_graceful_timeout_even_with_a_worker_stuck() {
    // A worker blocked in a system call never gets back to its drain: here `open` of a FIFO
    // no one writes to, under a static route (static files are opened blocking, without
    // O_NONBLOCK; should that change, this test needs another way to hold a worker).
    let root = temp_dir("stuck");
    let fifo = root.join("pipe");
    stdout_of(Command::new("mkfifo").arg(&fifo), "mkfifo");
    let mut weir = Weir::start(&format!(
        "server: {{ workers: 1, graceful_timeout: 1s }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  files: {{ rule: \"PathPrefix(`/`)\", static: {{ root: \"{}\" }} }}\n",
        root.display()
    ));
    let mut stuck = Conn::open(weir.addr());
    stuck.send(b"GET /pipe HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let stopping = Instant::now();
    weir.signal("TERM");
    let deadline = stopping + Duration::from_secs(10);
    while weir.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "{:#?}", weir.stderr());
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_millis(1000 + 1000),
        "the stop took {took:?} with a graceful timeout of 1 s"
    );
    let line = weir.wait_for_line("still busy", 1);
    assert!(line.contains("1 worker(s)"), "{line}");
}

#[test]
fn idle_and_dribbling_clients_are_closed() {
    let weir = Weir::start(
        "server: { workers: 1, client_idle_timeout: 2s }\nentrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    respond: { body: ok }\n",
    );
    // An idle keep-alive connection is closed no earlier than the timeout, and at most two
    // sweep ticks (0.2 s) later, plus scheduling slack.
    let mut idle = Conn::open(weir.addr());
    idle.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(idle.read(false).unwrap().text(), "ok");
    let started = Instant::now();
    assert!(idle.is_closed());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(2000) && waited < Duration::from_millis(2800),
        "{waited:?}"
    );
    // A head that never completes gets 408.
    let mut slow = Conn::open(weir.addr());
    slow.send(b"GET / HTTP/1.1\r\nHost: t\r\n");
    let r = slow.read(false).unwrap();
    assert_eq!(r.status, 408);
    assert!(slow.is_closed());
}

/// A keep-alive connection that has had one request answered (`ok`) and waits for the next.
fn served_connection(addr: std::net::SocketAddr) -> Conn {
    let mut conn = Conn::open(addr);
    conn.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(conn.read(false).unwrap().text(), "ok");
    conn
}

#[test]
fn parked_connections_wake_expire_and_stop() {
    // Plain connections idle for a second leave their task (io/idle.rs); across that
    // boundary they must behave exactly as before.
    let mut weir = Weir::start(
        "server: { workers: 1, client_idle_timeout: 4s }\nentrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    respond: { body: ok }\n",
    );
    let addr = weir.addr();
    let request = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    let open = || served_connection(addr);
    let (mut woken, mut pipelined, mut split, mut expiring) = (open(), open(), open(), open());
    let idle_since = Instant::now();
    std::thread::sleep(Duration::from_millis(1600));
    // A parked connection serves its next request, two pipelined ones, and a head that
    // arrives in two parts.
    woken.send(request);
    assert_eq!(woken.read(false).unwrap().text(), "ok");
    pipelined.send(&[&request[..], &request[..]].concat());
    assert_eq!(pipelined.read(false).unwrap().text(), "ok");
    assert_eq!(pipelined.read(false).unwrap().text(), "ok");
    split.send(b"GET / HTTP/1.1\r\n");
    std::thread::sleep(Duration::from_millis(300));
    split.send(b"Host: t\r\n\r\n");
    assert_eq!(split.read(false).unwrap().text(), "ok");
    // A client that hangs up while parked costs nothing and breaks nothing.
    drop(open());
    // The idle timeout counts from the start of the wait, parked or not.
    assert!(expiring.is_closed());
    let waited = idle_since.elapsed();
    assert!(
        waited >= Duration::from_millis(4000) && waited < Duration::from_millis(4800),
        "{waited:?}"
    );
    // A woken connection parks again (it is still in the idle set, disabled) and wakes again.
    woken.send(request);
    assert_eq!(woken.read(false).unwrap().text(), "ok");
    // A stop gives parked connections the drain's grace (1 s): a request sent within it is
    // answered with `Connection: close`; a connection still idle after it is closed.
    let (mut parked, mut late) = (open(), open());
    std::thread::sleep(Duration::from_millis(1600));
    let stopping = Instant::now();
    weir.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    late.send(request);
    let answer = late.read(false).unwrap();
    assert_eq!(answer.text(), "ok");
    assert_eq!(answer.header("connection"), Some("close"));
    assert!(late.is_closed());
    assert!(parked.is_closed());
    let closed_after = stopping.elapsed();
    assert!(
        closed_after >= Duration::from_millis(1000) && closed_after < Duration::from_millis(1800),
        "{closed_after:?}"
    );
    assert!(woken.is_closed());
    drop((parked, woken));
    assert!(weir.child.wait().unwrap().success());
    assert!(
        stopping.elapsed() < Duration::from_millis(2500),
        "{:?}",
        stopping.elapsed()
    );
}

#[test]
fn a_stop_answers_requests_on_their_way_and_closes_idle_connections_gently() {
    let mut weir = Weir::start(
        "server: { workers: 1, graceful_timeout: 10s }\nentrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    respond: { body: ok }\n",
    );
    let addr = weir.addr();
    let request = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    let open = || served_connection(addr);
    // Two keep-alive connections between requests, and one accepted whose first request
    // has not come yet.
    let (mut idle, mut busy) = (open(), open());
    let mut fresh = Conn::open(addr);
    std::thread::sleep(Duration::from_millis(200));
    let stopping = Instant::now();
    weir.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));
    // Requests that come within the grace are answered, with `Connection: close`.
    for conn in [&mut busy, &mut fresh] {
        conn.send(request);
        let answer = conn.read(false).unwrap();
        assert_eq!(answer.text(), "ok");
        assert_eq!(answer.header("connection"), Some("close"));
        assert!(conn.is_closed());
    }
    // The idle one is closed after the grace, with a FIN (a read sees the end, not a reset).
    let mut byte = [0u8; 1];
    let read = std::io::Read::read(&mut idle.reader, &mut byte);
    assert!(matches!(read, Ok(0)), "{read:?}");
    let closed_after = stopping.elapsed();
    assert!(
        closed_after >= Duration::from_millis(1000) && closed_after < Duration::from_millis(1800),
        "{closed_after:?}"
    );
    drop(idle);
    assert!(weir.child.wait().unwrap().success());
    assert!(stopping.elapsed() < Duration::from_secs(3));
}

/// Whether `source` defines `name` (a function, type, trait, constant or static) on a line of
/// code, not in a comment; `Type::item` needs both.
fn defines(source: &str, name: &str) -> bool {
    name.split("::").all(|part| {
        source.lines().any(|line| {
            let code = line.trim_start();
            if code.starts_with("//") {
                return false;
            }
            ["fn", "struct", "enum", "const", "trait", "type", "static"]
                .iter()
                .any(|kind| {
                    code.split(&format!("{kind} {part}"))
                        .nth(1)
                        .is_some_and(|after| {
                            after.starts_with(['(', '<', ' ', ':', ';', '{'])
                                && code.split(&format!("{kind} {part}")).next().is_some_and(
                                    |before| {
                                        before.is_empty()
                                            || before.ends_with(' ')
                                                && !before.contains("//")
                                                && !before.contains('"')
                                    },
                                )
                        })
                })
        })
    })
}

/// The code a page names: `FILE.rs::NAME` in backticks, and in architecture.md the phase
/// table's `FILE.rs  NAME, NAME` rows.
fn references(page: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|part| part.split_once(".rs::"))
        .map(|(file, name)| (format!("{file}.rs"), name.to_string()))
        .collect();
    for line in page.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(at) = words
            .iter()
            .rposition(|w| w.ends_with(".rs") && w.contains('/'))
        {
            let names = words[at + 1..].join(" ");
            for name in names.split(", ").filter(|n| !n.is_empty()) {
                found.push((words[at].to_string(), name.to_string()));
            }
        }
    }
    found
}

#[test]
fn doc_page_references_exist() {
    // The lifecycle pages and architecture.md point into the code; every pointer must name a
    // function, type or constant defined in that file, so the pages stay true as the code
    // moves.
    let root = workspace_root();
    for (page_name, at_least) in [
        ("lifecycle-h1.md", 20),
        ("lifecycle-l4.md", 12),
        ("lifecycle-h2.md", 15),
        ("lifecycle-h3.md", 20),
        ("architecture.md", 25),
    ] {
        let page = std::fs::read_to_string(root.join("docs").join(page_name)).unwrap();
        let refs = references(&page);
        for (file, name) in &refs {
            let path = root.join("crates/weir-proxy/src").join(file);
            let source = std::fs::read_to_string(&path)
                .unwrap_or_else(|_| panic!("docs/{page_name} names missing file {file}"));
            assert!(
                defines(&source, name),
                "docs/{page_name} names `{file}` `{name}`, which {file} does not define"
            );
        }
        assert!(
            refs.len() >= at_least,
            "{page_name}: only {} references found",
            refs.len()
        );
    }
}

#[test]
fn the_open_file_limit_is_raised_to_the_hard_one() {
    // Started with a soft limit of 256 (as `prlimit` sets it, then runs weir in its place).
    let yaml = "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n\
                routers:\n  all: { rule: \"PathPrefix(`/`)\", respond: { body: ok } }\n";
    let weir = Weir::start_under(&["prlimit", "--nofile=256:"], yaml, &[]);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", weir.child.id())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_ne!(numbers[0], "256", "{line}");
    assert_eq!(numbers[0], numbers[1], "soft limit = hard limit: {line}");
    assert_eq!(get(weir.addr(), "x", "/").text(), "ok");
}

#[test]
fn a_reference_needs_a_definition_not_a_mention() {
    let source = "// fn gone() was here\npub(crate) async fn serve<S>(io: S) {}\nimpl Router {\n    pub fn route_request(&self) {}\n}\npub struct Router {}\nlet s = \"fn quoted()\";\n";
    assert!(defines(source, "serve"));
    assert!(defines(source, "Router::route_request"));
    assert!(!defines(source, "gone"));
    assert!(!defines(source, "quoted"));
    assert!(!defines(source, "route"));
    assert!(!defines(source, "Router::missing"));
}
