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
}

impl Etcd {
    pub fn start() -> Etcd {
        let mut etcd = Etcd {
            child: None,
            port: free_port(),
            peer_port: free_port(),
            data: temp_dir("etcd").join("data"),
        };
        etcd.restart();
        etcd
    }

    /// `127.0.0.1:PORT`, as weir's `endpoints` take it.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the server (again, on its data) on its ports.
    pub fn restart(&mut self) {
        self.stop();
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut child = Command::new("etcd")
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
            .args(["--endpoints", &self.endpoint(), "put", key])
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
            .args(["--endpoints", &self.endpoint(), "--command-timeout", "1s"])
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
    }
}
