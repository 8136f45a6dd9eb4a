//! The .deb on the test machine: `scripts/package-deb` packages this build's binary and
//! `dpkg -i` installs it; the files are where Debian looks for them, `systemd-analyze verify`
//! accepts the unit, and weir started as the unit's `ExecStart=` says (as the `weir` user,
//! with only `CAP_NET_BIND_SERVICE`, no new privileges and `LimitNOFILE`), with a
//! `NOTIFY_SOCKET` this test listens on in systemd's place, sends `READY=1` once it serves
//! the installed example config, reloads on `SIGHUP` (the unit's `ExecReload=`), and on a
//! `SIGUSR2` upgrade the new process sends its own `MAINPID=` with `READY=1` before the old
//! one exits. The machine has no systemd as PID 1, so the protocol's other end is the test.
//! Then the package is removed (its scripts run cleanly; an edited conffile stays) and
//! installed again, so the machine is left with weir installed.
//! Needs root (dpkg), Debian's dpkg, systemd (for `systemd-analyze`), util-linux and man-db.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

const UNIT: &str = "/lib/systemd/system/weir.service";
const CONFIG: &str = "/etc/weir/weir.yaml";

fn workspace_root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What `command` printed; it must succeed.
fn run(command: &mut Command) -> String {
    let what = format!("{command:?}");
    String::from_utf8_lossy(&stdout_of(command, &what)).into_owned()
}

/// Builds the .deb from this build's binary and installs it afresh; the .deb's path.
fn install() -> String {
    let out = temp_dir("deb");
    let deb = run(Command::new(workspace_root().join("scripts/package-deb"))
        .args(["--fast", "--binary", weir_bin(), "--out"])
        .arg(&out));
    let deb = deb.trim().to_string();
    // A fresh install, conffile included: a weir installed before (by this test's last run)
    // is purged first.
    let installed = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "weir"])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("installed"));
    if installed {
        run(Command::new("dpkg").args(["--purge", "weir"]));
        assert!(!Path::new(CONFIG).exists(), "a purge leaves {CONFIG}");
    }
    run(Command::new("dpkg").args(["-i", &deb]));
    deb
}

/// The unit's value for `key` (its last line setting it).
fn unit_value(unit: &str, key: &str) -> String {
    unit.lines()
        .rev()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {UNIT}"))
        .to_string()
}

/// The next datagram on the fake notify socket, within 20 s.
fn notification(socket: &UnixDatagram) -> String {
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("no notification from weir");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Waits for weir's stderr line containing `text`.
fn line_with(lines: &Receiver<String>, seen: &mut Vec<String>, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                if line.contains(text) {
                    return line;
                }
            }
            Err(_) => break,
        }
    }
    panic!("no `{text}` in weir's stderr: {seen:#?}");
}

fn process_exists(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim()
            .starts_with('Z')
    })
}

#[test]
fn the_deb_installs_and_weir_runs_as_its_unit_says() {
    let deb = install();

    // Files where Debian looks for them, from this build.
    let version = run(Command::new(weir_bin()).arg("version"));
    assert_eq!(run(Command::new("/usr/bin/weir").arg("version")), version);
    let conffiles = run(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "weir"]));
    assert!(conffiles.contains(CONFIG), "{conffiles}");
    let example = std::fs::read_to_string(workspace_root().join("examples/etc-weir.yaml")).unwrap();
    assert_eq!(std::fs::read_to_string(CONFIG).unwrap(), example);
    for page in ["weir", "weir-run", "weir-check"] {
        let path = run(Command::new("man").args(["-w", page]));
        assert!(path.trim().starts_with("/usr/share/man/man1/"), "{path}");
    }
    for completion in [
        "/usr/share/bash-completion/completions/weir",
        "/usr/share/zsh/vendor-completions/_weir",
        "/usr/share/fish/vendor_completions.d/weir.fish",
    ] {
        assert!(Path::new(completion).is_file(), "{completion}");
    }
    let license = std::fs::read_to_string(workspace_root().join("LICENSE")).unwrap();
    assert!(license.contains("Apache License\n                           Version 2.0"));
    let cargo = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    assert!(cargo.contains("license = \"Apache-2.0\""));
    assert_eq!(
        std::fs::read_to_string("/usr/share/doc/weir/copyright").unwrap(),
        license
    );
    let user = run(Command::new("getent").args(["passwd", "weir"]));
    assert!(user.trim_end().ends_with("/usr/sbin/nologin"), "{user}");

    // systemd's own checker; the unit's promises.
    let verify = Command::new("systemd-analyze")
        .args(["verify", UNIT])
        .output()
        .expect("systemd-analyze (Debian's systemd package)");
    assert!(
        verify.status.success() && verify.stderr.is_empty(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let unit = std::fs::read_to_string(UNIT).unwrap();
    assert_eq!(unit_value(&unit, "Type"), "notify");
    assert_eq!(unit_value(&unit, "NotifyAccess"), "all");
    assert_eq!(unit_value(&unit, "ExecReload"), "/bin/kill -HUP $MAINPID");
    for (key, value) in [
        ("User", "weir"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", "CAP_NET_BIND_SERVICE"),
        ("AmbientCapabilities", "CAP_NET_BIND_SERVICE"),
    ] {
        assert_eq!(unit_value(&unit, key), value, "{key}");
    }
    // LimitNOFILE=, or this machine's hard limit when that is lower (a container's): a
    // process may lower its hard limit but not raise it.
    let unit_nofile: u64 = unit_value(&unit, "LimitNOFILE").parse().unwrap();
    let hard_nofile = run(Command::new("sh").args(["-c", "ulimit -Hn"]));
    let nofile = unit_nofile.min(hard_nofile.trim().parse().unwrap_or(unit_nofile));

    // systemd's end of sd_notify: a datagram socket the `weir` user may write to.
    let dir = temp_dir("notify");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let notify_path = dir.join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    std::fs::set_permissions(&notify_path, std::fs::Permissions::from_mode(0o777)).unwrap();

    // ExecStart= as systemd would run it: User=, the capabilities, NoNewPrivileges=,
    // LimitNOFILE=; ports 0 (through the example's own variables) so nothing else is in the way.
    let exec_start = unit_value(&unit, "ExecStart");
    let argv: Vec<&str> = exec_start.split_whitespace().collect();
    assert_eq!(argv, ["/usr/bin/weir", "run", "-c", CONFIG]);
    let mut weir = Command::new("prlimit")
        .arg(format!("--nofile={nofile}:{nofile}"))
        .args([
            "setpriv",
            "--reuid=weir",
            "--regid=weir",
            "--init-groups",
            "--inh-caps=+net_bind_service",
            "--ambient-caps=+net_bind_service",
            "--bounding-set=-all,+net_bind_service",
            "--no-new-privs",
        ])
        .args(&argv)
        .env("NOTIFY_SOCKET", &notify_path)
        .env("WEIR_HTTP_PORT", "0")
        .env("WEIR_ADMIN_PORT", "0")
        .current_dir("/")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _stop = KillOnDrop(weir.id());
    let stderr = weir.stderr.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let addr_of = |line: String, prefix: &str| -> std::net::SocketAddr {
        let addr = line.split(prefix).nth(1).unwrap().trim();
        let port = addr.rsplit(':').next().unwrap().parse::<u16>().unwrap();
        std::net::SocketAddr::from(([127, 0, 0, 1], port))
    };
    let web = addr_of(
        line_with(&lines, &mut seen, "entrypoint web listening on"),
        "listening on ",
    );
    let admin = addr_of(
        line_with(&lines, &mut seen, "admin listening on"),
        "listening on ",
    );
    assert_eq!(notification(&notify), "READY=1\n");
    let page = get(web, "localhost", "/");
    assert_eq!(page.status, 200);
    assert!(
        page.text().starts_with("weir is running."),
        "{}",
        page.text()
    );
    let status = get(admin, "a", "/api/status").json();
    assert_eq!(
        status["build"]["commit"].as_str().unwrap(),
        version
            .split("commit ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
    );
    // It runs as `weir`, with only the unit's capability left.
    let proc_status = std::fs::read_to_string(format!("/proc/{}/status", weir.id())).unwrap();
    let uid = run(Command::new("id").args(["-u", "weir"]));
    assert!(
        proc_status.contains(&format!("Uid:\t{}", uid.trim())),
        "{proc_status}"
    );
    assert!(
        proc_status.contains("CapBnd:\t0000000000000400"),
        "{proc_status}"
    );

    // ExecReload=: SIGHUP reloads the file.
    run(Command::new("kill").args(["-HUP", &weir.id().to_string()]));
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(admin, "a", "/api/status").json()["version"] != 2 {
        assert!(Instant::now() < deadline, "no reload: {seen:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }

    // A binary upgrade: the new process names itself the unit's main process, then the old
    // one exits.
    run(Command::new("kill").args(["-USR2", &weir.id().to_string()]));
    let upgraded = notification(&notify);
    let new_pid = upgraded
        .strip_prefix("MAINPID=")
        .and_then(|rest| rest.strip_suffix("\nREADY=1\n"))
        .and_then(|pid| pid.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("not MAINPID=PID then READY=1: {upgraded:?}"));
    let _stop_new = KillOnDrop(new_pid);
    assert_ne!(new_pid, weir.id());
    assert_eq!(
        std::fs::read_link(format!("/proc/{new_pid}/exe")).unwrap(),
        Path::new("/usr/bin/weir")
    );
    // The binary started again keeps the unit's one capability (ambient capabilities survive
    // an exec without file capabilities) and its user.
    let new_status = std::fs::read_to_string(format!("/proc/{new_pid}/status")).unwrap();
    assert!(
        new_status.contains("CapAmb:\t0000000000000400")
            && new_status.contains(&format!("Uid:\t{}", uid.trim())),
        "{new_status}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while weir.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the old process did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(get(web, "localhost", "/").status, 200);
    run(Command::new("kill").args(["-TERM", &new_pid.to_string()]));
    let deadline = Instant::now() + Duration::from_secs(20);
    while process_exists(new_pid) {
        assert!(Instant::now() < deadline, "the new process did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Removed, its maintainer scripts run cleanly: the binary goes, the edited conffile and
    // the user stay; installed again, the edit is kept. The machine is left with weir installed.
    let edited = format!("{}# edited\n", std::fs::read_to_string(CONFIG).unwrap());
    std::fs::write(CONFIG, &edited).unwrap();
    run(Command::new("dpkg").args(["-r", "weir"]));
    assert!(!Path::new("/usr/bin/weir").exists());
    assert!(!Path::new(UNIT).exists());
    assert_eq!(std::fs::read_to_string(CONFIG).unwrap(), edited);
    run(Command::new("getent").args(["passwd", "weir"]));
    run(Command::new("dpkg").args(["-i", "--force-confold", &deb]));
    assert_eq!(std::fs::read_to_string(CONFIG).unwrap(), edited);
    assert!(Path::new("/usr/bin/weir").is_file());
    // The example as installed, for whoever looks at this machine next.
    std::fs::write(CONFIG, &example).unwrap();
}

/// Ends a process this test started (directly or by an upgrade) if the test fails while it
/// runs; a test that passed has seen it exit.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .status();
    }
}
