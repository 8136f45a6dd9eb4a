//! A real etcd (Debian's `etcd-server`) on free loopback ports with its own data folder;
//! stopped and started again on the same ports and data by the tests that need it to go away.

use super::{free_port, temp_dir};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Etcd {
    child: Option<Child>,
    pub port: u16,
    peer_port: u16,
    data: std::path::PathBuf,
    /// Its certificate and key, when clients speak TLS to it.
    tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// `user:password` for etcdctl, once authentication is on.
    pub user: Option<String>,
}

impl Etcd {
    pub fn start() -> Etcd {
        Etcd::start_with(None)
    }

    /// etcd serving its clients over TLS with this certificate (PEM) and key.
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> Etcd {
        Etcd::start_with(Some((cert.to_path_buf(), key.to_path_buf())))
    }

    fn start_with(tls: Option<(std::path::PathBuf, std::path::PathBuf)>) -> Etcd {
        let mut etcd = Etcd {
            child: None,
            port: free_port(),
            peer_port: free_port(),
            data: temp_dir("etcd").join("data"),
            tls,
            user: None,
        };
        etcd.restart();
        etcd
    }

    /// `127.0.0.1:PORT` (`https://127.0.0.1:PORT` over TLS), as weir's `endpoints` take it.
    pub fn endpoint(&self) -> String {
        match self.tls {
            Some(_) => format!("https://127.0.0.1:{}", self.port),
            None => format!("127.0.0.1:{}", self.port),
        }
    }

    /// How etcdctl reaches it.
    fn ctl_args(&self) -> Vec<String> {
        let mut args = vec!["--endpoints".to_string(), self.endpoint()];
        if let Some((cert, _)) = &self.tls {
            args.push(format!("--cacert={}", cert.display()));
        }
        if let Some(user) = &self.user {
            args.push(format!("--user={user}"));
        }
        args
    }

    /// Starts the server (again, on its data) on its ports.
    pub fn restart(&mut self) {
        self.stop();
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut command = Command::new("etcd");
        if let Some((cert, key)) = &self.tls {
            command
                .arg("--cert-file")
                .arg(cert)
                .arg("--key-file")
                .arg(key);
        }
        let mut child = command
            .args(["--name", "weir-test", "--data-dir"])
            .arg(&self.data)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("weir-test={peer}")])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd must be installed (scripts/test installs etcd-server)");
        for _ in 0..500 {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() && self.ctl(&["get", "x"]).0 {
                self.child = Some(child);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("etcd did not start on {}", self.port);
    }

    /// Turns authentication on with a `root` user whose password is `password`.
    pub fn require_auth(&mut self, password: &str) {
        let added = self.ctl(&[
            "user",
            "add",
            "root",
            "--interactive=false",
            &format!("--new-user-password={password}"),
        ]);
        assert!(added.0, "user add: {}", added.1);
        assert!(self.ctl(&["auth", "enable"]).0, "auth enable");
        self.user = Some(format!("root:{password}"));
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `etcdctl put KEY` with `value` on its standard input.
    pub fn put(&self, key: &str, value: &str) {
        use std::io::Write;
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(self.ctl_args())
            .args(["put", key])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("etcdctl must be installed (scripts/test installs etcd-client)");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(value.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "etcdctl put {key}");
    }

    /// `etcdctl ARGS`: whether it succeeded, and its output.
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(self.ctl_args())
            .args(["--command-timeout", "1s"])
            .args(args)
            .output()
            .expect("etcdctl must be installed (scripts/test installs etcd-client)");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
        // etcd preallocates its log: about 120 MB per instance, left behind otherwise.
        if let Some(folder) = self.data.parent() {
            let _ = std::fs::remove_dir_all(folder);
        }
    }
}
