//! The admin listener (`server.admin`), served by the control thread, never by a worker:
//! `GET /metrics` answers the Prometheus text of [`Metrics`]. One request per connection.

use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head the admin listener reads.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts admin connections until the runtime stops.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        match listener.accept().await {
            Ok((io, _)) => {
                let metrics = metrics.clone();
                tokio::spawn(async move { answer(io, &metrics).await });
            }
            Err(e) => {
                eprintln!("weir: admin accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(mut io: TcpStream, metrics: &Metrics) {
    let mut head = Vec::with_capacity(1024);
    let read = async {
        let mut chunk = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            match io.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&chunk[..n]),
            }
        }
        true
    };
    if !matches!(tokio::time::timeout(READ_TIMEOUT, read).await, Ok(true)) {
        return;
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        (b"GET", b"/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        (b"GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "the admin listener answers GET\n".into(),
        ),
    };
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = io.write_all(answer.as_bytes()).await;
    let _ = io.shutdown().await;
}
