//! Binary upgrade on the real binary: `SIGUSR2` under a steady load of keep-alive and new
//! connections starts the binary again with the listening sockets handed over; the new process
//! writes the pid file and serves, the old one drains and exits, and the client counts no
//! failed request.

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
    eprintln!(
        "served {} requests; {} retried on a reused connection the old process closed",
        report.ok, report.retried
    );
    // The new process answers on the same address.
    assert_eq!(get(web, "a", "/api").status, 200);
}
