//! External tools a test runs: Python with Debian's packages, curl, and any command that must succeed.

use super::*;

/// Runs a Python script with Debian's interpreter (the one whose packages scripts/test
/// installs: brotli, zstandard, jwt) and returns what it printed; a failing script fails the test.
pub fn python(script: &str, args: &[&str]) -> Vec<u8> {
    let interpreter = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    stdout_of(
        Command::new(interpreter).arg("-c").arg(script).args(args),
        "python3",
    )
}

/// What `command` wrote to its standard output; it must run and succeed (`what` names it
/// when it does not).
pub fn stdout_of(command: &mut Command, what: &str) -> Vec<u8> {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what} could not run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// curl over HTTPS to `name` (resolved to 127.0.0.1), trusting only `ca`: (exit ok, body).
pub fn curl_https(port: u16, name: &str, ca: &std::path::Path) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{name}:{port}:127.0.0.1"))
        .arg(format!("https://{name}:{port}/"))
        .output()
        .expect("curl must be installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// curl with `args` (quiet but for errors, at most 20 s), which must succeed: what it wrote
/// to its standard output.
pub fn curl_ok(args: &[&str]) -> Vec<u8> {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "--max-time", "20"]).args(args);
    stdout_of(&mut curl, &format!("curl {args:?}"))
}

/// The response head, lowercased, of a gRPC call (`content-type: application/grpc`, `te:
/// trailers`) curl makes to `url` with `args` (`--http2-prior-knowledge`, or TLS options): a
/// POST without a message, since the calls tested are answered before any message is read (a
/// refusal, a dead server), and curl 7.88 now and then fails a stream whose body is still on
/// its way when the answer comes ("Stream error in the HTTP/2 framing layer").
pub fn curl_grpc_head(args: &[&str], url: &str) -> String {
    let mut curl_args = vec!["-D", "-", "-o", "/dev/null"];
    curl_args.extend(args);
    curl_args.extend([
        "-H",
        "content-type: application/grpc",
        "-H",
        "te: trailers",
        "-X",
        "POST",
        url,
    ]);
    String::from_utf8_lossy(&curl_ok(&curl_args)).to_lowercase()
}

/// The response head curl prints for a request over h2c (prior knowledge) with `args`.
pub fn h2_head(args: &[&str], url: &str) -> String {
    let mut all = vec!["-D", "-", "-o", "/dev/null", "--http2-prior-knowledge"];
    all.extend_from_slice(args);
    all.push(url);
    String::from_utf8_lossy(&curl_ok(&all)).into_owned()
}

/// curl's arguments for a gRPC call without a message, for `h2_head`: a body weir has not read
/// when it answers early makes curl 7.88 fail the stream.
pub const GRPC_CALL: &[&str] = &[
    "-X",
    "POST",
    "-H",
    "content-type: application/grpc",
    "-H",
    "te: trailers",
];

/// The Python of a venv under /var/cache/weir with `packages` from PyPI installed, made on
/// first use and kept for later runs.
pub fn venv_with(name: &str, packages: &[&str]) -> std::path::PathBuf {
    let venv = std::path::PathBuf::from("/var/cache/weir").join(name);
    let python = venv.join("bin/python3");
    let ready = venv.join("ready");
    if !ready.exists() {
        let _ = std::fs::remove_dir_all(&venv);
        let made = Command::new("/usr/bin/python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success(), "python3 -m venv");
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "-q"])
            .args(packages)
            .status()
            .unwrap();
        assert!(installed.success(), "pip install {packages:?}");
        std::fs::write(&ready, "").unwrap();
    }
    python
}

/// Fails the test unless Debian's `promtool check metrics` passes `text`.
pub fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
