//! A real Redis server (Debian's `redis-server`) on a free port, in memory only; stopped,
//! paused or started again on the same port by the tests that need Redis to go away.

use super::free_port;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Redis {
    child: Option<Child>,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::start_on(free_port())
    }

    pub fn start_on(port: u16) -> Redis {
        let mut redis = Redis { child: None, port };
        redis.restart();
        redis
    }

    /// `127.0.0.1:PORT`, as weir's `endpoints` take it.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the server (again, empty) on its port.
    pub fn restart(&mut self) {
        self.stop();
        let mut child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test installs redis-server)");
        for _ in 0..250 {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                self.child = Some(child);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server did not start on {}", self.port);
    }

    /// Kills the server: connections to it are refused until `restart`.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) the server: connections stay open and
    /// nothing is answered, as from a Redis that hangs.
    pub fn pause(&self, paused: bool) {
        if let Some(child) = &self.child {
            let signal = if paused { "-STOP" } else { "-CONT" };
            let status = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status()
                .expect("kill");
            assert!(status.success());
        }
    }
}

/// `redis-cli` against a Redis (or weir's TCP route to one) on `port`, its output trimmed.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let mut cli = Command::new("redis-cli");
    cli.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args);
    let out = super::stdout_of(&mut cli, "redis-cli");
    String::from_utf8_lossy(&out).trim().to_string()
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.pause(false);
        self.stop();
    }
}
