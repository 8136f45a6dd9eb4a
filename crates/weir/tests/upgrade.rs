//! Binary upgrade on the real binary: `SIGUSR2` under a steady load of keep-alive and new
//! connections starts the binary again with the listening sockets handed over; the new process
//! writes the pid file and serves, the old one drains and exits, and the client counts no
//! failed request.

mod common;
use common::*;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let retried = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for keep_alive in [true, true, false, false] {
        let (stop, ok, retried, failures) =
            (stop.clone(), ok.clone(), retried.clone(), failures.clone());
        clients.push(std::thread::spawn(move || {
            let mut conn: Option<(Conn, bool)> = None;
            while !stop.load(Ordering::Relaxed) {
                let (c, reused) = conn.get_or_insert_with(|| (Conn::open(web), false));
                let close = if keep_alive {
                    ""
                } else {
                    "Connection: close\r\n"
                };
                let request = format!("GET /api HTTP/1.1\r\nHost: a\r\n{close}\r\n");
                let sent = c.reader.get_mut().write_all(request.as_bytes()).is_ok();
                let resp = if sent { c.read(false) } else { None };
                let was_reused = *reused;
                *reused = true;
                match resp {
                    Some(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        if !keep_alive || r.header("connection") == Some("close") {
                            conn = None;
                        }
                    }
                    Some(r) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{} {}", r.status, r.text())),
                    // A reused connection the server closed before answering: every HTTP client
                    // sends the (idempotent) request again on a new one (RFC 9112, 9.3.1).
                    None if was_reused => {
                        retried.fetch_add(1, Ordering::Relaxed);
                        conn = None;
                    }
                    None => failures
                        .lock()
                        .unwrap()
                        .push("no response on a new connection".into()),
                }
            }
        }));
    }
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
    let served_before = ok.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert!(
        ok.load(Ordering::Relaxed) > served_before + 50,
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
        ok.load(Ordering::Relaxed),
        retried.load(Ordering::Relaxed)
    );
    // The new process answers on the same address.
    assert_eq!(get(web, "a", "/api").status, 200);
}
