//! The Python `grpcio` peer (`tests/grpc_peer.py`): the gRPC server the gRPC and gRPC-Web
//! tests send through weir, and its client.

use super::*;

pub const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc_peer.py");

pub fn python3() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// The `grpcio` test server (`grpc_peer.py serve`); killed on drop.
pub struct GrpcServer {
    child: Child,
    pub port: u16,
}

impl GrpcServer {
    pub fn start() -> GrpcServer {
        let mut child = Command::new(python3())
            .args([PEER, "serve"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 with grpcio (scripts/test installs python3-grpcio)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("grpc server did not start: {line:?}"));
        GrpcServer { child, port }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the client's `cases` through `addr`; their outcomes by case.
pub fn calls(addr: std::net::SocketAddr, cases: &str) -> serde_json::Value {
    let out = stdout_of(
        Command::new(python3()).args([PEER, "call", &addr.to_string(), cases]),
        "grpc client",
    );
    serde_json::from_slice(&out).unwrap()
}
