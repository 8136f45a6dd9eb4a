//! The real `weir` binary as a child process: started on port 0 with a config file, its stderr lines kept, killed on drop; `weir check`; the usual one-service config.

use super::*;

pub fn weir_bin() -> &'static str {
    env!("CARGO_BIN_EXE_weir")
}

pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weir-test-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `weir check -c PATH`: its exit status and output.
pub fn weir_check(path: &std::path::Path) -> std::process::Output {
    Command::new(weir_bin())
        .args(["check", "-c"])
        .arg(path)
        .output()
        .unwrap()
}

/// `weir check` on `yaml`, written as `weir.yaml` in a fresh folder named for `tag`, which must
/// refuse it; returns what it printed on stderr.
pub fn weir_check_refuses(tag: &str, yaml: &str) -> String {
    let path = temp_dir(tag).join("weir.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = weir_check(&path);
    assert!(!out.status.success(), "weir check accepted:\n{yaml}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `weir check`'s error lines, and the file they name (taken from the last line, the count).
pub fn check_error_lines(stderr: &str) -> (Vec<&str>, &str) {
    let lines: Vec<&str> = stderr.lines().collect();
    let last = lines.last().copied().unwrap_or_default();
    let path = last.rsplit_once(": ").map_or(last, |(path, _)| path);
    (lines, path)
}

/// The message of one of weir's log lines, text (`TIME LEVEL TARGET: message`) or JSON.
pub fn log_message(line: &str) -> String {
    if line.starts_with('{') {
        let fields: serde_json::Value = serde_json::from_str(line).unwrap();
        return fields["message"].as_str().unwrap().to_string();
    }
    let mut parts = line.splitn(3, ' ');
    let (_time, _level) = (parts.next(), parts.next());
    let rest = parts.next().unwrap_or("").trim_start();
    rest.split_once(": ")
        .map_or(rest, |(_, message)| message)
        .to_string()
}

/// A running weir process; killed on drop.
pub struct Weir {
    pub child: Child,
    pub addrs: HashMap<String, SocketAddr>,
    pub dir: std::path::PathBuf,
    stderr_lines: Arc<Mutex<Vec<String>>>,
}

impl Weir {
    /// Starts weir with `yaml` and waits until every entrypoint reports its address.
    pub fn start(yaml: &str) -> Weir {
        Weir::start_with(yaml, &[])
    }

    /// Starts weir with `yaml` and more `weir run` arguments.
    pub fn start_with(yaml: &str, args: &[&str]) -> Weir {
        Weir::start_under(&[], yaml, args)
    }

    /// Starts weir as the last argument of `wrapper` (a command that runs another, such as
    /// `prlimit`), with `yaml` and more `weir run` arguments.
    pub fn start_under(wrapper: &[&str], yaml: &str, args: &[&str]) -> Weir {
        let dir = temp_dir("weir");
        let path = dir.join("weir.yaml");
        std::fs::write(&path, yaml).unwrap();
        let mut command = match wrapper {
            [] => Command::new(weir_bin()),
            [program, rest @ ..] => {
                let mut command = Command::new(program);
                command.args(rest).arg(weir_bin());
                command
            }
        };
        let mut child = command
            .args(["run", "-c"])
            .arg(&path)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line.clone());
                sink.lock().unwrap().push(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || for _ in BufReader::new(stdout).lines() {});
        let mut addrs = HashMap::new();
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| {
                    panic!("weir did not start; stderr: {:?}", lines.lock().unwrap())
                });
            let message = log_message(&line);
            if let Some(rest) = message.strip_prefix("entrypoint ") {
                let (name, addr) = rest.split_once(" listening on ").unwrap();
                let addr = addr.strip_suffix("/udp").unwrap_or(addr);
                addrs.insert(name.to_string(), addr.parse().unwrap());
            }
            // The admin listener, under a name no entrypoint can have.
            if let Some(addr) = message.strip_prefix("admin listening on ") {
                addrs.insert("@admin".to_string(), addr.parse().unwrap());
            }
            if line.contains("worker(s) running") {
                break;
            }
        }
        Weir {
            child,
            addrs,
            dir,
            stderr_lines: lines,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addrs["web"]
    }

    pub fn signal(&self, sig: &str) {
        Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
    }

    pub fn stderr(&self) -> Vec<String> {
        self.stderr_lines.lock().unwrap().clone()
    }

    /// Waits (up to 10 s) until stderr holds `count` lines containing `text`; the last of them.
    pub fn wait_for_line(&self, text: &str, count: usize) -> String {
        self.wait_for_line_within(text, count, Duration::from_secs(10))
    }

    /// `wait_for_line`, up to `limit`.
    pub fn wait_for_line_within(&self, text: &str, count: usize, limit: Duration) -> String {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let lines = self.stderr();
            let found: Vec<&String> = lines.iter().filter(|l| l.contains(text)).collect();
            if found.len() >= count {
                return found[count - 1].clone();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no line #{count} with `{text}` in weir's stderr: {lines:#?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The config file weir was started with.
    pub fn config_path(&self) -> std::path::PathBuf {
        self.dir.join("weir.yaml")
    }

    /// Idle connections waiting without a task (`weir_connections_parked`, from the admin
    /// listener).
    pub fn parked(&self) -> u64 {
        let text = get(self.addrs["@admin"], "a", "/metrics").text();
        text.lines()
            .find_map(|l| l.strip_prefix("weir_connections_parked "))
            .expect("weir_connections_parked")
            .trim()
            .parse()
            .unwrap()
    }

    /// KB of resident memory per connection that `open` makes (each served one request) and
    /// weir parks: `n` of them after 20 opened and closed to warm up, counted once all are
    /// parked and the pages their tasks freed went back to the system (`release_memory`).
    pub fn rss_per_parked<T>(&self, n: u64, open: impl Fn() -> T) -> f64 {
        drop((0..20).map(|_| open()).collect::<Vec<_>>());
        std::thread::sleep(Duration::from_millis(1500));
        let before = self.rss_kb();
        let conns: Vec<T> = (0..n).map(|_| open()).collect();
        let parked = (0..50).find(|_| {
            std::thread::sleep(Duration::from_millis(200));
            self.parked() == n
        });
        assert!(parked.is_some(), "all {n} parked");
        std::thread::sleep(Duration::from_millis(2500));
        let per_connection = (self.rss_kb() - before) as f64 / n as f64;
        drop(conns);
        per_connection
    }

    /// The process's resident memory (`VmRSS`), in KB.
    pub fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

impl Drop for Weir {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config with one catch-all router proxying to `upstream`; `service_extra` is indented
/// under the service, `server_extra` is a flow mapping's inner keys for `server`.
pub fn proxy_config_with(upstream: &str, server_extra: &str, service_extra: &str) -> String {
    format!(
        "server: {{ workers: 1{server_extra} }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  local:\n    rule: \"PathPrefix(`/local`)\"\n    respond: {{ body: local }}\n  all:\n    rule: \"PathPrefix(`/`)\"\n    priority: 1\n    service: app\n\
         services:\n  app:\n    servers: [{{ url: \"{upstream}\" }}]\n{service_extra}"
    )
}

/// A config on 2 workers (h2c on) whose routes `/open` (no middleware) and every other path
/// (behind middleware `name`, of `kind` with `body`) go to `upstream`: a policy's test bed.
pub fn guarded_config(upstream: &Upstream, name: &str, kind: &str, body: &str) -> String {
    format!(
        "server: {{ workers: 2 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         routers:\n\
         \x20 open: {{ rule: \"PathPrefix(`/open`)\", service: app }}\n\
         \x20 closed: {{ rule: \"PathPrefix(`/`)\", priority: 1, middlewares: [{name}], service: app }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n  {name}:\n    {kind}: {body}\n",
        upstream.url()
    )
}
