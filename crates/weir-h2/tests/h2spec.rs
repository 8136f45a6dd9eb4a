//! h2spec (github.com/summerwind/h2spec, installed by scripts/test with `go install`) run
//! against weir-h2 as a server on a real socket: every case of its generic, HTTP/2 and HPACK suites, strict ones included.

mod support;

use std::path::PathBuf;
use std::process::Command;
use support::Server;
use weir_h2::Config;

fn h2spec() -> PathBuf {
    let candidates = [
        std::env::var_os("H2SPEC").map(PathBuf::from),
        Some(PathBuf::from("/var/cache/weir/go/bin/h2spec")),
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go/bin/h2spec")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("h2spec"))
}

#[test]
fn h2spec_every_case_passes() {
    let server = Server::start(Config::default());
    let out = Command::new(h2spec())
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.addr.port().to_string(),
            "-o",
            "5",
            "--strict",
        ])
        .output()
        .unwrap_or_else(|e| panic!("h2spec: {e} (scripts/test installs it with go install)"));
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains("tests,"))
        .unwrap_or_default()
        .to_string();
    assert!(
        out.status.success() && summary.contains(", 0 failed"),
        "{summary}\n{text}"
    );
    assert!(summary.starts_with("146 tests, 146 passed"), "{summary}");
    println!("h2spec: {summary}");
}
