//! RFC 9111 conformance of the cache, measured by the http-cache-tests suite (the tests behind
//! cache-tests.fyi, npm package `http-cache-tests`, pinned): weir, with one cached route,
//! stands in front of the suite's own origin server, the suite's client runs every test
//! through it, and `cache_conformance/run.mjs` counts the required tests that pass. The suite
//! is installed once into a cache folder outside the repository (`WEIR_CACHE_TESTS_DIR`, else
//! `/var/cache/weir/http-cache-tests-VERSION`) with npm, and found there afterwards.
//! docs/cache-conformance.md lists what still fails and why.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const VERSION: &str = "0.4.5";

/// Required tests (of 157) that must pass: 149 did when this was written; the margin is for
/// the suite's timing-bound tests on a loaded machine.
const AT_LEAST: usize = 145;

/// The suite's folder, installed if missing. npm writes into a folder of its own, renamed
/// into place when complete, so a run beside another (or one killed midway) never sees half an
/// install.
fn suite() -> PathBuf {
    let root = std::env::var_os("WEIR_CACHE_TESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("/var/cache/weir/http-cache-tests-{VERSION}")));
    let suite = root.join("node_modules/http-cache-tests");
    if suite.join("package.json").exists() {
        return suite;
    }
    let parent = root.parent().expect("the suite's folder has a parent");
    std::fs::create_dir_all(parent).unwrap();
    let partial = parent.join(format!(".http-cache-tests-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    stdout_of(
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&partial)
            .arg(format!("http-cache-tests@{VERSION}")),
        "npm install http-cache-tests",
    );
    // Another run may have finished first: its copy is as good.
    if std::fs::rename(&partial, &root).is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    assert!(suite.join("package.json").exists(), "no suite in {root:?}");
    suite
}

/// A process killed on drop (the suite's origin, its client).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The suite's origin server on `port`, once it listens.
fn origin(suite: &Path, port: u16, dir: &Path) -> Killed {
    let child = Command::new("node")
        .arg("server/server.mjs")
        .current_dir(suite)
        .env("npm_config_protocol", "http")
        .env("npm_config_port", port.to_string())
        .env("npm_config_pidfile", dir.join("origin.pid"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("node runs the suite's origin");
    let origin = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the suite's origin never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    origin
}

#[test]
fn the_cache_passes_the_required_http_cache_tests() {
    let suite = suite();
    let dir = temp_dir("cache-tests");
    let port = free_port();
    let _origin = origin(&suite, port, &dir);
    let yaml = format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         caches:\n  main: {{ memory: 64MiB }}\n\
         routers:\n  all: {{ rule: \"PathPrefix(`/`)\", service: origin, cache: main }}\n\
         services:\n  origin: {{ servers: [{{ url: \"http://127.0.0.1:{port}\" }}] }}\n"
    );
    let weir = Weir::start(&yaml);
    let summary = dir.join("summary.txt");
    let runner = Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/cache_conformance/run.mjs"
        ))
        .arg(&suite)
        .arg(format!("http://{}", weir.addr()))
        .arg(dir.join("results.json"))
        .stdout(std::fs::File::create(&summary).unwrap())
        .spawn()
        .expect("node runs the suite's client");
    let mut runner = Killed(runner);
    // About 15 s; a test that hangs (no client timeout in the suite) must not hang CI.
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = runner.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the suite ran over 180 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let summary = std::fs::read_to_string(&summary).unwrap();
    print!("{summary}");
    assert!(status.success(), "the suite's client failed: {status}");
    let last = summary.lines().last().unwrap_or_default();
    let passed: usize = last
        .rsplit_once("passed ")
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {last:?}"));
    assert!(
        passed >= AT_LEAST,
        "{passed} required tests passed, fewer than {AT_LEAST}: {last}"
    );
}
