//! weir's own log (`server.log`, issue 42): every line has an RFC 3339 time, a level and a
//! target, as text or JSON; levels filter, `--log-level` wins over the file, a log file is
//! reopened on SIGUSR1, a reload applies a changed `server.log`; error lines carry their
//! context (a 502's router, service, server, try and cause; a refused reload's errors).

mod common;
use common::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// A port nothing listens on: connecting to it is refused.
fn refusing() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

/// One catch-all router `r` to service `s` on `servers`, `server_extra` inside `server:`.
fn config(server_extra: &str, servers: &[String], service_extra: &str) -> String {
    let servers: Vec<String> = servers
        .iter()
        .map(|s| format!("{{ url: \"{s}\" }}"))
        .collect();
    format!(
        "server: {{ workers: 1{server_extra} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", service: s }}\n\
         services:\n  s:\n    servers: [{}]\n{service_extra}",
        servers.join(", ")
    )
}

/// Checks a line's time: RFC 3339, UTC (`Z`), milliseconds, and about now.
fn check_time(time: &str, line: &str) {
    let parsed = OffsetDateTime::parse(time, &Rfc3339)
        .unwrap_or_else(|e| panic!("time `{time}` is not RFC 3339 ({e}): {line}"));
    assert!(time.ends_with('Z'), "not UTC: {line}");
    let fraction = time.split('.').nth(1).unwrap_or("");
    assert_eq!(fraction.len(), 4, "not milliseconds (`.mmmZ`): {line}");
    let age = (OffsetDateTime::now_utc() - parsed).abs();
    assert!(
        age < time::Duration::minutes(5),
        "{time} is not now: {line}"
    );
}

/// A text line's parts: `TIME LEVEL TARGET: message`.
fn text_parts(line: &str) -> (String, String, String, String) {
    let mut parts = line.splitn(3, ' ');
    let time = parts.next().unwrap().to_string();
    let level = parts.next().unwrap().to_string();
    let rest = parts.next().unwrap_or_else(|| panic!("no target: {line}"));
    let (target, message) = rest
        .trim_start()
        .split_once(": ")
        .unwrap_or_else(|| panic!("no `TARGET: `: {line}"));
    (time, level, target.to_string(), message.to_string())
}

fn check_text_line(line: &str) -> (String, String, String) {
    let (time, level, target, message) = text_parts(line);
    check_time(&time, line);
    assert!(
        ["ERROR", "WARN", "INFO", "DEBUG"].contains(&level.as_str()),
        "level `{level}`: {line}"
    );
    assert!(
        target.starts_with("weir") && !target.contains(' '),
        "target `{target}`: {line}"
    );
    (level, target, message)
}

fn check_json_line(line: &str) -> (String, String, String) {
    let fields: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let object = fields.as_object().unwrap();
    let keys: Vec<&str> = object.keys().map(String::as_str).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(sorted, ["level", "message", "target", "time"], "{line}");
    // The time first, for a reader of the raw file.
    assert!(line.starts_with("{\"time\":\""), "{line}");
    check_time(fields["time"].as_str().unwrap(), line);
    let level = fields["level"].as_str().unwrap().to_string();
    assert!(
        ["error", "warn", "info", "debug"].contains(&level.as_str()),
        "{line}"
    );
    let target = fields["target"].as_str().unwrap().to_string();
    assert!(target.starts_with("weir"), "{line}");
    (
        level,
        target,
        fields["message"].as_str().unwrap().to_string(),
    )
}

/// Waits until some stderr line's message contains `text`; that line.
fn line_with(weir: &Weir, text: &str) -> String {
    weir.wait_for_line(text, 1)
}

#[test]
fn text_lines_have_time_level_target_and_a_502_its_context() {
    let dead = refusing();
    let weir = Weir::start(&config("", std::slice::from_ref(&dead), ""));
    assert_eq!(get(weir.addr(), "x", "/a").status, 502);
    let failure = line_with(&weir, "router `r`");
    let (level, target, message) = check_text_line(&failure);
    assert_eq!(level, "ERROR", "{failure}");
    assert_eq!(target, "weir_proxy::exchange", "{failure}");
    assert!(
        message.starts_with(&format!("router `r`: service `s`: server {dead}: try 1: ")),
        "{failure}"
    );
    assert!(message.contains("refused"), "the cause: {failure}");
    let lines = weir.stderr();
    for line in &lines {
        check_text_line(line);
    }
    let listening = lines.iter().find(|l| l.contains("listening on")).unwrap();
    assert_eq!(
        check_text_line(listening).1,
        "weir_proxy::listen::listeners"
    );
}

/// With retries, the 502 line names the last try, even when no untried server is left.
#[test]
fn a_retried_502_names_its_last_try() {
    let (a, b) = (refusing(), refusing());
    let weir = Weir::start_with(
        &config(
            "",
            &[a.clone(), b.clone()],
            "    retry: { attempts: 3, on: [connect_failure] }\n",
        ),
        &["--log-level", "debug"],
    );
    assert_eq!(get(weir.addr(), "x", "/").status, 502);
    let failure = line_with(&weir, "router `r`");
    assert!(failure.contains(": try 2: "), "{failure}");
    assert!(failure.contains(&a) || failure.contains(&b), "{failure}");
    // At debug, the retried try has its own line.
    let retried = line_with(&weir, "; retrying");
    let (level, _, message) = check_text_line(&retried);
    assert_eq!(level, "DEBUG");
    assert!(message.contains("try 1: "), "{retried}");
}

#[test]
fn json_lines_have_time_level_target_message() {
    let dead = refusing();
    let weir = Weir::start(&config(", log: { format: json }", &[dead], ""));
    assert_eq!(get(weir.addr(), "x", "/").status, 502);
    let failure = line_with(&weir, "router `r`");
    let (level, target, message) = check_json_line(&failure);
    assert_eq!(
        (level.as_str(), target.as_str()),
        ("error", "weir_proxy::exchange")
    );
    assert!(message.contains("try 1"), "{failure}");
    for line in weir.stderr() {
        check_json_line(&line);
    }
}

/// weir started on fixed ports, its log going to a file: its process and web address.
fn start_logging_to_file(
    yaml_of: impl Fn(u16) -> String,
    log: &std::path::Path,
) -> (Child, std::net::SocketAddr, std::path::PathBuf) {
    let port = free_port();
    let dir = temp_dir("logs");
    let path = dir.join("weir.yaml");
    std::fs::write(&path, yaml_of(port)).unwrap();
    let child = run_weir(&path, Stdio::null());
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() || !log.exists() {
        assert!(Instant::now() < deadline, "weir never listened on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, addr, path)
}

/// `weir run -c path`, its standard error to `stderr`.
fn run_weir(path: &std::path::Path, stderr: Stdio) -> Child {
    Command::new(weir_bin())
        .args(["run", "-c"])
        .arg(path)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

fn file_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Waits until the file holds a line containing `text`.
fn wait_in_file(path: &std::path::Path, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(line) = file_lines(path).into_iter().find(|l| l.contains(text)) {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "no `{text}` in {}: {:#?}",
            path.display(),
            file_lines(path)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(child: &mut Child, sig: &str) {
    Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap();
}

/// `level: warn` drops info lines (listening, running) and keeps errors; the file is
/// reopened on SIGUSR1 after it was moved away, as logrotate does.
#[test]
fn levels_filter_and_sigusr1_reopens_a_moved_file() {
    let dir = temp_dir("log-file");
    let log = dir.join("weir.log");
    let dead = refusing();
    let yaml = |port: u16| {
        format!(
            "server: {{ workers: 1, log: {{ level: warn, path: \"{}\" }} }}\n\
             entrypoints:\n  web: {{ address: \"127.0.0.1:{port}\" }}\n\
             routers:\n  r: {{ rule: \"PathPrefix(`/`)\", service: s }}\n\
             services:\n  s: {{ servers: [{{ url: \"{dead}\" }}] }}\n",
            log.display()
        )
    };
    let (mut child, addr, _) = start_logging_to_file(yaml, &log);
    assert_eq!(get(addr, "x", "/first").status, 502);
    let first = wait_in_file(&log, "router `r`");
    assert_eq!(check_text_line(&first).0, "ERROR");
    let lines = file_lines(&log);
    assert!(
        lines.iter().all(|l| !l.contains(" INFO ")),
        "info lines at level warn: {lines:#?}"
    );
    // logrotate's way: move the file, then SIGUSR1.
    let moved = dir.join("weir.log.1");
    std::fs::rename(&log, &moved).unwrap();
    kill(&mut child, "USR1");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log.exists() {
        assert!(Instant::now() < deadline, "the log was not reopened");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(get(addr, "x", "/second").status, 502);
    let second = wait_in_file(&log, "router `r`");
    check_text_line(&second);
    let old = file_lines(&moved);
    assert_eq!(
        old.iter().filter(|l| l.contains("router `r`")).count(),
        1,
        "the moved file got no new line: {old:#?}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// `--log-level` wins over `server.log.level`, at start and after a reload.
#[test]
fn log_level_flag_overrides_the_file_across_reloads() {
    let dead = refusing();
    let yaml = config(", log: { level: error }", &[dead], "");
    // The info lines (listening, running) are what `Weir::start` waits for.
    let weir = Weir::start_with(&yaml, &["--log-level", "info"]);
    weir.signal("HUP");
    let reloaded = line_with(&weir, ": reloaded ");
    assert_eq!(check_text_line(&reloaded).0, "INFO");
    // And without the flag, `level: error` holds: no info line at all.
    let path = temp_dir("level-error").join("weir.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let mut child = run_weir(&path, Stdio::piped());
    std::thread::sleep(Duration::from_millis(1500));
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!text.contains("INFO"), "{text}");
    // A bad level is refused by the command line.
    let out = Command::new(weir_bin())
        .args(["run", "-c"])
        .arg(&path)
        .args(["--log-level", "loud"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("error, warn, info, debug"), "{text}");
}

/// A reload applies a changed `server.log`: from text to JSON, its own line already JSON.
#[test]
fn a_reload_applies_a_changed_log_format() {
    let weir = Weir::start(&config("", &[refusing()], ""));
    let yaml = std::fs::read_to_string(weir.config_path()).unwrap();
    let json = yaml.replace("workers: 1", "workers: 1, log: { format: json }");
    std::fs::write(weir.config_path(), json).unwrap();
    weir.signal("HUP");
    let reloaded = line_with(&weir, "\"message\":\"reloaded ");
    assert_eq!(check_json_line(&reloaded).0, "info");
}

/// A refused reload logs each error, with its file, line and column.
#[test]
fn a_refused_reload_lists_its_errors() {
    let weir = Weir::start(&config("", &[refusing()], ""));
    std::fs::write(
        weir.config_path(),
        "server: { workers: two, log: { level: loud } }\nentrypoints:\n  web: { address: \"127.0.0.1:0\" }\n",
    )
    .unwrap();
    weir.signal("HUP");
    let refused = line_with(&weir, "reload (SIGHUP) refused");
    let (level, _, message) = check_text_line(&refused);
    assert_eq!(level, "ERROR");
    assert!(message.ends_with("2 error(s)"), "{refused}");
    let file = weir.config_path().display().to_string();
    let first = weir.wait_for_line(": reload error: ", 1);
    let second = weir.wait_for_line(": reload error: ", 2);
    assert!(
        check_text_line(&first)
            .2
            .starts_with(&format!("reload error: {file}:1:20: ")),
        "{first}"
    );
    assert!(
        check_text_line(&second).2.starts_with(&format!(
            "reload error: {file}:1:39: unknown `server.log.level` `loud`"
        )),
        "{second}"
    );
}

/// A server marked down by its health check: the line names the check and why it failed.
#[test]
fn a_health_change_names_the_check() {
    let dead = refusing();
    let weir = Weir::start(&config(
        "",
        std::slice::from_ref(&dead),
        "    health_check: { path: /healthz, interval: 100ms, unhealthy_threshold: 2 }\n",
    ));
    let down = line_with(&weir, "is down: ");
    let (level, _, message) = check_text_line(&down);
    assert_eq!(level, "WARN");
    assert!(
        message.starts_with(&format!("service `s`: server {dead} is down: ")),
        "{down}"
    );
    assert!(message.contains("refused"), "why: {down}");
    assert!(
        message.ends_with("(health check GET /healthz, failed 2 time(s) in a row)"),
        "{down}"
    );
}

/// A log file that cannot be opened: `weir run` says so and exits; a reload to it is refused
/// and the old log goes on.
#[test]
fn a_log_that_cannot_be_opened_is_refused() {
    let missing = temp_dir("no-log").join("no/such/dir/weir.log");
    let yaml = config(
        &format!(", log: {{ path: \"{}\" }}", missing.display()),
        &[refusing()],
        "",
    );
    let path = temp_dir("no-log-run").join("weir.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let out = Command::new(weir_bin())
        .args(["run", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    let line = text.lines().next().unwrap_or("");
    assert_eq!(check_text_line(line).0, "ERROR", "{text}");
    assert!(line.contains("cannot open the log"), "{text}");

    let weir = Weir::start(&config("", &[refusing()], ""));
    std::fs::write(weir.config_path(), &yaml).unwrap();
    weir.signal("HUP");
    let error = weir.wait_for_line(": reload error: ", 1);
    assert!(error.contains("cannot open the log"), "{error}");
    line_with(&weir, "reload (SIGHUP) refused");
}
