//! A steady load of keep-alive and new connections, counting answers and failures.

use super::*;

/// A steady load of `GET path` from two keep-alive clients and two that open a connection per
/// request, counting answers until `finish`.
pub struct SteadyLoad {
    stop: Arc<std::sync::atomic::AtomicBool>,
    ok: Arc<AtomicUsize>,
    retried: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

/// What a steady load saw.
pub struct LoadReport {
    /// Answered 200.
    pub ok: usize,
    /// Requests sent again because the server closed a reused keep-alive connection before
    /// answering, as every HTTP client does for idempotent requests (RFC 9112, 9.3.1).
    pub retried: usize,
    /// Anything else: another status, no answer on a new connection.
    pub failures: Vec<String>,
}

impl SteadyLoad {
    pub fn start(addr: SocketAddr, path: &str) -> SteadyLoad {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let retried = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let mut clients = Vec::new();
        for keep_alive in [true, true, false, false] {
            let (stop, ok, retried, failures) =
                (stop.clone(), ok.clone(), retried.clone(), failures.clone());
            let close = if keep_alive {
                ""
            } else {
                "Connection: close\r\n"
            };
            let request = format!("GET {path} HTTP/1.1\r\nHost: load\r\n{close}\r\n");
            clients.push(std::thread::spawn(move || {
                let mut conn: Option<(Conn, bool)> = None;
                while !stop.load(Ordering::Relaxed) {
                    let (c, reused) = conn.get_or_insert_with(|| (Conn::open(addr), false));
                    let was_reused = std::mem::replace(reused, true);
                    let sent = c.reader.get_mut().write_all(request.as_bytes()).is_ok();
                    match if sent { c.read(false) } else { None } {
                        Some(r) if r.status == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                            if !keep_alive || r.header("connection") == Some("close") {
                                conn = None;
                            }
                        }
                        Some(r) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("{} {}", r.status, r.text()))
                        }
                        None if was_reused => {
                            retried.fetch_add(1, Ordering::Relaxed);
                            conn = None;
                        }
                        None => failures
                            .lock()
                            .unwrap()
                            .push("no answer on a new connection".into()),
                    }
                }
            }));
        }
        SteadyLoad {
            stop,
            ok,
            retried,
            failures,
            clients,
        }
    }

    /// Answered so far.
    pub fn ok(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
    }

    pub fn finish(self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.join().unwrap();
        }
        LoadReport {
            ok: self.ok.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            failures: std::mem::take(&mut *self.failures.lock().unwrap()),
        }
    }
}

impl LoadReport {
    /// Fails the test when any request failed.
    pub fn assert_no_failure(&self) {
        assert!(
            self.failures.is_empty(),
            "{} failed: {:?}",
            self.failures.len(),
            &self.failures[..self.failures.len().min(10)]
        );
    }
}

/// Sends `GET /x` from `threads[i]` keep-alive connections to `addrs[i]`, each as fast as the
/// answers come (pausing `pause` between), until `window` has passed since the start; returns
/// the 200s, the 429s (a rate limit's refusals; any other status fails the test) and the
/// seconds it took.
pub fn admitted_and_refused(
    addrs: &[SocketAddr],
    threads: &[usize],
    window: Duration,
    pause: Duration,
) -> (usize, usize, f64) {
    let started = std::time::Instant::now();
    let mut senders = Vec::new();
    for (&addr, &count) in addrs.iter().zip(threads) {
        for _ in 0..count {
            senders.push(std::thread::spawn(move || {
                let mut conn = Conn::open(addr);
                let (mut admitted, mut refused) = (0, 0);
                while started.elapsed() < window {
                    conn.send(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n");
                    match conn.read(false).expect("an answer").status {
                        200 => admitted += 1,
                        429 => refused += 1,
                        other => panic!("status {other}"),
                    }
                    std::thread::sleep(pause);
                }
                (admitted, refused)
            }));
        }
    }
    let (mut admitted, mut refused) = (0, 0);
    for sender in senders {
        let (a, r) = sender.join().expect("sender");
        admitted += a;
        refused += r;
    }
    (admitted, refused, started.elapsed().as_secs_f64())
}

/// wrk from Debian against `GET /x` at `addr` with `conns` connections for `seconds`, each
/// connection pausing 1 ms between requests (wrk's `delay`): the requests sent, how many were
/// not 2xx or 3xx, and the seconds wrk counted.
pub fn paced_wrk(addr: SocketAddr, conns: u32, seconds: u32) -> (u64, u64, f64) {
    let dir = super::temp_dir("wrk");
    let script = dir.join("paced.lua");
    std::fs::write(&script, "function delay() return 1 end\n").unwrap();
    let out = Command::new("wrk")
        .args(["-t1", &format!("-c{conns}"), &format!("-d{seconds}s"), "-s"])
        .arg(&script)
        .arg(format!("http://{addr}/x"))
        .output()
        .expect("wrk runs (scripts/test installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // "  5063 requests in 10.00s, 700.22KB read"
    let summary: Vec<&str> = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .unwrap_or_else(|| panic!("{text}"))
        .split_whitespace()
        .collect();
    let requests: u64 = summary[0].parse().unwrap();
    let seconds: f64 = summary[3].trim_end_matches("s,").parse().unwrap();
    let refused = text
        .lines()
        .find(|l| l.contains("Non-2xx or 3xx responses:"))
        .map_or(0, |l| l.rsplit(' ').next().unwrap().parse().unwrap());
    (requests, refused, seconds)
}
