//! The error log never takes weir down: with its standard error a closed pipe (`weir run |
//! head -1`, a log shipper that went away) or a full disk (`/dev/full`), weir reloads and
//! serves, and counts the lines it lost in `/metrics` (issue 33: `eprintln!` panicked on the
//! closed pipe and the release build aborted, ports gone).

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn config(web: u16, admin: u16) -> String {
    format!(
        "server: {{ workers: 2, admin: {{ address: \"127.0.0.1:{admin}\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:{web}\" }}\n\
         routers:\n  ping:\n    rule: \"Path(`/ping`)\"\n    respond: {{ body: pong }}\n"
    )
}

/// A metric's value from the admin listener's `/metrics`, once it answers.
fn metric(admin: SocketAddr, name: &str) -> Option<f64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(stream) = std::net::TcpStream::connect(admin) {
            drop(stream);
            let resp = get(admin, "localhost", "/metrics");
            return resp
                .text()
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok());
        }
        assert!(
            Instant::now() < deadline,
            "the admin listener never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_for_port(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "weir never listened on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reloads twice (each reload logs lines that cannot be written), then checks weir still
/// runs, serves, and counted the lost lines.
fn reload_and_serve(child: &mut Child, web: SocketAddr, admin: SocketAddr) {
    // The admin listener answers once weir handles signals (`process/control.rs`): a SIGHUP
    // sent before would end the process, or be lost where SIGHUP is ignored (under nohup).
    assert_eq!(metric(admin, "weir_config_version"), Some(1.0));
    for version in [2.0, 3.0] {
        let hup = Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(hup.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric(admin, "weir_config_version") != Some(version) {
            assert!(Instant::now() < deadline, "reload {version} never applied");
            std::thread::sleep(Duration::from_millis(50));
        }
        for _ in 0..20 {
            assert_eq!(get(web, "localhost", "/ping").text(), "pong");
        }
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "weir exited when its log could not be written"
    );
    let lost = metric(admin, "weir_log_lines_lost_total").unwrap_or(0.0);
    assert!(lost >= 2.0, "lost lines counted: {lost}");
}

fn start(stderr: Stdio, web: u16, admin: u16) -> (Child, std::path::PathBuf) {
    let dir = temp_dir("error-log");
    let path = dir.join("weir.yaml");
    std::fs::write(&path, config(web, admin)).unwrap();
    let child = Command::new(weir_bin())
        .args(["run", "-c"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    (child, dir)
}

#[test]
fn a_closed_log_pipe_loses_lines_not_the_gateway() {
    let (web, admin) = (free_port(), free_port());
    let (mut child, _dir) = start(Stdio::piped(), web, admin);
    // Read up to the line that says the workers run, then close the pipe's reading end.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let running = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("running"));
    assert!(running, "weir never logged that its workers run");
    drop(lines);
    let web: SocketAddr = format!("127.0.0.1:{web}").parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{admin}").parse().unwrap();
    reload_and_serve(&mut child, web, admin);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_full_log_disk_loses_lines_not_the_gateway() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let (web, admin) = (free_port(), free_port());
    let (mut child, _dir) = start(Stdio::from(full), web, admin);
    let web: SocketAddr = format!("127.0.0.1:{web}").parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{admin}").parse().unwrap();
    wait_for_port(web);
    reload_and_serve(&mut child, web, admin);
    let _ = child.kill();
    let _ = child.wait();
}
