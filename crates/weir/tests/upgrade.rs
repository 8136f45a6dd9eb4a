//! Binary upgrade on the real binary: `SIGUSR2` under a steady load of keep-alive and new
//! connections starts the binary again with the listening sockets handed over; the new process
//! writes the pid file and serves, the old one drains and exits, and the client counts no
//! failed request: neither the test's own clients, which retry a request on a reused
//! connection the server closed (as real clients do), nor wrk, which never retries and counts
//! every such close as an error. The admin listener is handed over too, and a new process that cannot start
//! is reported with its error and exit status while the old one goes on serving.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// Ends the process an upgrade started (ours, through the weir we started) when the test ends.
struct Successor(Option<u32>);

impl Drop for Successor {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }
}

/// The pid in `pid_file`, once written.
fn pid_in(pid_file: &std::path::Path) -> Option<u32> {
    std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
}

/// Waits (up to 20 s) for the old process to exit after an upgrade; its exit status.
fn wait_for_exit(weir: &mut Weir) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = weir.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the old process did not exit: {:#?}",
            weir.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A config answering `ok` on `web`, with `admin` the admin listener's address.
fn respond_config(pid_file: &std::path::Path, admin: &str) -> String {
    format!(
        "server: {{ workers: 2, graceful_timeout: 5s, pid_file: \"{}\", admin: {{ address: \"{admin}\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", respond: {{ body: ok }} }}\n",
        pid_file.display()
    )
}

#[test]
fn an_upgrade_hands_over_the_admin_listener() {
    let dir = temp_dir("upgrade-admin");
    let pid_file = dir.join("weir.pid");
    // Port 0: the same configured address, so the new process must take the socket over
    // (binding again would pick another port).
    let mut weir = Weir::start(&respond_config(&pid_file, "127.0.0.1:0"));
    let old_pid = weir.child.id();
    let admin = weir.addrs["@admin"];
    weir.signal("USR2");
    let status = wait_for_exit(&mut weir);
    let new_pid = pid_in(&pid_file).filter(|pid| *pid != old_pid);
    let _successor = Successor(new_pid);
    assert!(status.success(), "{status}: {:#?}", weir.stderr());
    assert!(new_pid.is_some(), "{:#?}", weir.stderr());
    let lines = weir.stderr();
    assert!(
        lines.iter().any(|l| l.contains(
            "upgrade: took over 2 listening socket(s) of 1 entrypoint(s) and the admin listener"
        )),
        "{lines:#?}"
    );
    // The old process is gone: the new one answers on the same admin address.
    let status = get(admin, "a", "/api/status");
    assert_eq!(status.status, 200);
    assert_eq!(status.json()["version"], 1);
    assert_eq!(get(weir.addr(), "a", "/").text(), "ok");
}

#[test]
fn an_upgrade_to_a_new_admin_address_binds_it() {
    let dir = temp_dir("upgrade-admin-moved");
    let pid_file = dir.join("weir.pid");
    let mut weir = Weir::start(&respond_config(&pid_file, "127.0.0.1:0"));
    let old_pid = weir.child.id();
    let old_admin = weir.addrs["@admin"];
    let port = free_port();
    std::fs::write(
        weir.config_path(),
        respond_config(&pid_file, &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    weir.signal("USR2");
    let status = wait_for_exit(&mut weir);
    let _successor = Successor(pid_in(&pid_file).filter(|pid| *pid != old_pid));
    assert!(status.success(), "{status}: {:#?}", weir.stderr());
    let moved: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert_eq!(get(moved, "a", "/api/status").status, 200);
    // The handed-over socket of the old address was closed, not kept.
    assert!(
        std::net::TcpStream::connect(old_admin).is_err(),
        "the old admin address still accepts"
    );
}

#[test]
fn a_new_process_that_cannot_start_is_reported_and_the_old_one_serves() {
    let dir = temp_dir("upgrade-failed");
    let pid_file = dir.join("weir.pid");
    let weir = Weir::start(&respond_config(&pid_file, "127.0.0.1:0"));
    // The new config's admin address is taken by someone else.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap();
    std::fs::write(
        weir.config_path(),
        respond_config(&pid_file, &busy.to_string()),
    )
    .unwrap();
    weir.signal("USR2");
    let line = weir.wait_for_line("upgrade failed; still serving", 1);
    assert!(
        line.contains(&format!(
            "the new process could not start: admin: cannot listen on {busy}: "
        )) && line.contains("(exit status: 1)"),
        "{line}"
    );
    assert_eq!(pid_in(&pid_file), Some(weir.child.id()));
    assert_eq!(get(weir.addr(), "a", "/").text(), "ok");
    assert_eq!(get(weir.addrs["@admin"], "a", "/api/status").status, 200);
}

#[test]
fn a_new_config_with_errors_is_reported_by_the_old_process() {
    let dir = temp_dir("upgrade-bad-config");
    let pid_file = dir.join("weir.pid");
    let weir = Weir::start(&respond_config(&pid_file, "127.0.0.1:0"));
    std::fs::write(
        weir.config_path(),
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  r: { rule: \"Path(`/`\", respond: {} }\n",
    )
    .unwrap();
    weir.signal("USR2");
    let line = weir.wait_for_line("upgrade failed; still serving", 1);
    assert!(
        line.contains("the new process could not start: ")
            && line.contains("invalid rule")
            && line.contains("1 error(s)")
            && line.contains("(exit status: 1)"),
        "{line}"
    );
    assert_eq!(get(weir.addr(), "a", "/").text(), "ok");
}

#[test]
fn an_upgrade_under_load_fails_no_request() {
    let upstream = Upstream::start("one");
    let dir = temp_dir("upgrade");
    let pid_file = dir.join("weir.pid");
    let yaml = format!(
        "server: {{ workers: 2, graceful_timeout: 5s, pid_file: \"{}\" }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         services:\n  s: {{ servers: [{{ url: \"{}\" }}] }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", service: s }}\n",
        pid_file.display(),
        upstream.url()
    );
    let mut weir = Weir::start(&yaml);
    let old_pid = weir.child.id();
    let pid_of = || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
    };
    assert_eq!(pid_of(), Some(old_pid));
    let web = weir.addr();

    let load = SteadyLoad::start(web, "/api");
    std::thread::sleep(Duration::from_millis(300));
    weir.signal("USR2");
    // The old process exits once the new one serves and its own connections are done.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = weir.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the old process did not exit: {:#?}",
            weir.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let new_pid = pid_of();
    let _successor = Successor(new_pid.filter(|pid| *pid != old_pid));
    assert!(status.success(), "{status}");
    assert!(
        new_pid.is_some_and(|pid| pid != old_pid),
        "pid file: {new_pid:?}"
    );
    let served_before = load.ok();
    std::thread::sleep(Duration::from_millis(300));
    let report = load.finish();
    report.assert_no_failure();
    assert!(
        report.ok > served_before + 50,
        "the new process served too little"
    );
    let lines = weir.stderr();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("upgrade: took over 2 listening socket(s) of 1 entrypoint(s)")),
        "{lines:#?}"
    );
    // Each keep-alive connection's next request was answered (`Connection: close`), not
    // crossed by a close.
    assert_eq!(report.retried, 0, "served {}", report.ok);
    // The new process answers on the same address.
    assert_eq!(get(web, "a", "/api").status, 200);
}

/// Runs wrk (3 s, 20 connections, `args` more) against a weir answering `ok` with 2 workers,
/// upgraded after 1 s to `workers` workers; wrk's report, which must count no error.
fn wrk_through_an_upgrade(args: &[&str], workers: usize) -> String {
    let dir = temp_dir("upgrade-wrk");
    let pid_file = dir.join("weir.pid");
    let config = respond_config(&pid_file, "127.0.0.1:0");
    let mut weir = Weir::start(&config);
    std::fs::write(
        weir.config_path(),
        config.replace("workers: 2", &format!("workers: {workers}")),
    )
    .unwrap();
    let old_pid = weir.child.id();
    let url = format!("http://{}/", weir.addr());
    let wrk = std::process::Command::new("wrk")
        .args(["-t2", "-c20", "-d3s"])
        .args(args)
        .arg(&url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("wrk must be installed (scripts/test installs it)");
    std::thread::sleep(Duration::from_millis(1000));
    weir.signal("USR2");
    let status = wait_for_exit(&mut weir);
    let _successor = Successor(pid_in(&pid_file).filter(|pid| *pid != old_pid));
    assert!(status.success(), "{status}: {:#?}", weir.stderr());
    let out = wrk.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    // wrk prints these lines only when it counted some.
    assert!(
        !report.contains("Socket errors") && !report.contains("Non-2xx"),
        "{report}"
    );
    assert!(report.contains(" requests in "), "{report}");
    report
}

#[test]
fn wrk_through_an_upgrade_counts_no_error() {
    // Keep-alive connections: each one's next request after the handoff is answered with
    // `Connection: close`, then wrk reconnects to the new process.
    wrk_through_an_upgrade(&[], 2);
}

#[test]
fn wrk_through_an_upgrade_to_fewer_workers_counts_no_error() {
    // A connection per request, so connections wait in every handed-over socket's queue: the
    // new process serves both sockets with its one worker (one it closed would stay in the
    // port's group while the old process holds it, and lose its queue when that one exits).
    wrk_through_an_upgrade(&["-H", "Connection: close"], 1);
}
