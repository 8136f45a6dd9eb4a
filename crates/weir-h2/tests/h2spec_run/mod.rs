//! Runs h2spec (github.com/summerwind/h2spec v2.2.1, installed by scripts/test with
//! `go install` into /var/cache/weir/go) against a server on a local port, strict cases
//! included; shared by weir-h2's own run and the one against the weir binary
//! (crates/weir/tests/h2spec.rs).

use std::path::PathBuf;
use std::process::Command;

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

/// What h2spec said: its report, its summary line ("146 tests, 146 passed, ...") and whether
/// it exited successfully.
pub struct Report {
    pub text: String,
    pub summary: String,
    pub success: bool,
}

/// Every case of the generic, HTTP/2 and HPACK suites against 127.0.0.1:`port`.
pub fn run(port: u16) -> Report {
    let out = Command::new(h2spec())
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-o",
            "5",
            "--strict",
        ])
        .output()
        .unwrap_or_else(|e| panic!("h2spec: {e} (scripts/test installs it with go install)"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains("tests,"))
        .unwrap_or_default()
        .to_string();
    Report {
        text,
        summary,
        success: out.status.success(),
    }
}
