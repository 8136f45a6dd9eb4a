//! The admin listener (`server.admin`), served by the control thread, never by a worker:
//! `GET /metrics` answers the Prometheus text of [`Metrics`]; `GET /api/services` the HTTP
//! services' servers with their health and requests in flight (JSON). With `token` set,
//! everything but `/metrics` needs `Authorization: Bearer TOKEN`. One request per connection.

use crate::metrics::Metrics;
use crate::runtime::Runtime;
use arc_swap::ArcSwap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head the admin listener reads.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the admin listener reads from.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub runtime: Arc<ArcSwap<Runtime>>,
    pub token: Option<String>,
}

/// Accepts admin connections until the runtime stops.
pub async fn serve(listener: TcpListener, state: Arc<AdminState>) {
    loop {
        match listener.accept().await {
            Ok((io, _)) => {
                let state = state.clone();
                tokio::spawn(async move { answer(io, &state).await });
            }
            Err(e) => {
                eprintln!("weir: admin accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(mut io: TcpStream, state: &AdminState) {
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
    let authorized = match &state.token {
        None => true,
        Some(token) => head
            .split(|&b| b == b'\n')
            .skip(1)
            .filter_map(|l| std::str::from_utf8(l).ok())
            .filter_map(|l| l.split_once(':'))
            .any(|(name, value)| {
                name.trim().eq_ignore_ascii_case("authorization")
                    && value.trim().strip_prefix("Bearer ").map(str::trim) == Some(token.as_str())
            }),
    };
    let (status, content_type, body) = match (method, path) {
        (b"GET", b"/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            state.metrics.render(),
        ),
        _ if !authorized => (
            "401 Unauthorized",
            "text/plain; charset=utf-8",
            "a bearer token is required\n".into(),
        ),
        (b"GET", b"/api/services") => (
            "200 OK",
            "application/json",
            services_json(&state.runtime.load()),
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
    let challenge = if authorized {
        ""
    } else {
        "www-authenticate: Bearer\r\n"
    };
    let answer = format!(
        "HTTP/1.1 {status}\r\n{challenge}content-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = io.write_all(answer.as_bytes()).await;
    let _ = io.shutdown().await;
}

/// The HTTP services, their servers, health and requests in flight.
fn services_json(runtime: &Runtime) -> String {
    let services: Vec<serde_json::Value> = runtime
        .services
        .iter()
        .map(|service| {
            let servers: Vec<serde_json::Value> = service
                .servers
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "url": s.url,
                        "weight": s.weight,
                        "usable": s.health.usable(),
                        "down": s.health.is_down(),
                        "ejected": s.health.is_ejected(),
                        "in_flight": s.inflight.0.load(Ordering::Relaxed),
                    })
                })
                .collect();
            serde_json::json!({
                "name": service.name,
                "health_check": service.health_check.is_some(),
                "passive_health": service.passive_health.is_some(),
                "retry_attempts": service.retry.as_ref().map_or(1, |r| r.attempts),
                "servers": servers,
            })
        })
        .collect();
    let mut body = serde_json::json!({ "services": services }).to_string();
    body.push('\n');
    body
}
